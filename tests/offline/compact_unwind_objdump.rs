//! The `__unwind_info` reader against `llvm-objdump-16 --unwind-info`, on
//! Mach-O fixtures built by clang-16 and ld64.lld-16
//! (`scripts/build-macho-fixtures.sh`): every second-level page (its kind,
//! first function, entry count and palette), entry, encoding and LSDA must
//! agree, and every lookup inside a function must return that function.

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection};
use stackmark::formats::compact_unwind::{PageInfo, PageKind, UnwindInfo, UNWIND_HAS_LSDA};

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

/// Pairs of numbers: `(function offset, encoding)` or `(function offset, LSDA offset)`.
type Pairs = Vec<(u32, u32)>;

/// What llvm-objdump prints of a section.
struct Listing {
    /// `(function offset, encoding)` of every second-level entry.
    entries: Pairs,
    /// The LSDA descriptors `(function offset, LSDA offset)`.
    lsdas: Pairs,
    /// The second-level pages. objdump does not name their kind: a regular
    /// page lists `encoding=0x...`, a compressed one `encoding[i]=0x...`.
    pages: Vec<PageInfo>,
}

fn objdump(path: &Path) -> Listing {
    let out = Command::new("llvm-objdump-16")
        .arg("--unwind-info")
        .arg(path)
        .output()
        .expect("llvm-objdump-16 (scripts/test.sh installs llvm-16)");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let (mut entries, mut lsdas, mut pages) = (Vec::new(), Vec::new(), Vec::<PageInfo>::new());
    // Which part of the listing the line is in: 0 elsewhere, 1 the LSDA
    // descriptors, 2 the second-level entries.
    let mut part = 0;
    for line in text.lines().map(str::trim) {
        if line.starts_with("LSDA descriptors") {
            part = 1;
            continue;
        }
        if line.starts_with("Second level indices") {
            part = 2;
            continue;
        }
        if part == 0 {
            continue;
        }
        if let Some((_, base)) = line
            .strip_prefix("Second level index[")
            .and_then(|l| l.split_once("base function offset="))
        {
            pages.push(PageInfo {
                kind: PageKind::Regular,
                first_function: hex(base),
                entries: 0,
                page_encodings: 0,
            });
            continue;
        }
        if let Some(count) = line.strip_prefix("Page encodings: (count = ") {
            let page = pages.last_mut().unwrap();
            page.page_encodings = count.trim_end_matches(')').parse().unwrap();
            continue;
        }
        let in_lsda = part == 1;
        let Some(rest) = line.strip_prefix('[') else {
            continue;
        };
        let Some((_, fields)) = rest.split_once("]: function offset=") else {
            continue;
        };
        let (func, tail) = fields.split_once(", ").unwrap();
        if in_lsda {
            lsdas.push((hex(func), hex(tail.trim_start_matches("LSDA offset="))));
        } else if let Some((what, enc)) = tail.split_once('=') {
            // "encoding[i]=0x..." (compressed) or "encoding=0x..." (regular)
            entries.push((hex(func), hex(enc)));
            let page = pages.last_mut().unwrap();
            page.entries += 1;
            if what.starts_with("encoding[") {
                page.kind = PageKind::Compressed;
            }
        }
    }
    Listing {
        entries,
        lsdas,
        pages,
    }
}

/// The `__unwind_info` section of a fixture.
use crate::macho_support;

fn section(name: &str) -> Vec<u8> {
    let data = std::fs::read(macho_support::dir().join(name)).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let s = file.section_by_name("__unwind_info").unwrap();
    s.data().unwrap().to_vec()
}

#[test]
fn every_fixture_reads_exactly_as_llvm_objdump_prints_it() {
    let mut checked = 0;
    for (path, data) in macho_support::fixtures() {
        let file = object::File::parse(&*data).unwrap();
        let section = file
            .section_by_name("__unwind_info")
            .expect("__unwind_info");
        let info = UnwindInfo::parse(section.data().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let Listing {
            entries: want,
            lsdas,
            pages,
        } = objdump(&path);
        assert_eq!(
            info.pages().collect::<Vec<_>>(),
            pages,
            "{}",
            path.display()
        );
        let got: Vec<_> = info.entries().collect();
        let pairs: Vec<(u32, u32)> = got.iter().map(|e| (e.func_start, e.encoding)).collect();
        assert_eq!(pairs, want, "{}", path.display());
        for e in &got {
            let lsda = lsdas.iter().find(|l| l.0 == e.func_start).map(|l| l.1);
            if e.encoding & UNWIND_HAS_LSDA != 0 {
                assert_eq!(e.lsda, lsda, "{}: {e:?}", path.display());
            } else {
                assert_eq!(e.lsda, None);
            }
            for off in [
                e.func_start,
                e.func_start + (e.func_end - e.func_start) / 2,
                e.func_end - 1,
            ] {
                assert_eq!(info.lookup(off), Some(*e), "{} at {off:#x}", path.display());
            }
        }
        assert!(info.lookup(got[0].func_start - 1).is_none());
        assert!(info.lookup(got.last().unwrap().func_end).is_none());
        checked += 1;
    }
    assert_eq!(checked, 8, "fixtures in {}", macho_support::dir().display());
}

#[test]
fn fixtures_cover_every_encoding_kind_and_several_pages() {
    let modes = |name: &str| -> Vec<u32> {
        let data = section(name);
        let info = UnwindInfo::parse(&data).unwrap();
        let mut m: Vec<u32> = info.entries().map(|e| (e.encoding >> 24) & 0xf).collect();
        m.sort();
        m.dedup();
        m
    };
    // x86_64: 0 null, 1 RBP frame, 2 frameless immediate, 3 stack-indirect, 4 DWARF.
    let mut x86 = modes("encodings-fp-x86_64.dylib");
    x86.extend(modes("encodings-nofp-x86_64.dylib"));
    x86.sort();
    x86.dedup();
    assert_eq!(x86, [0, 1, 2, 3, 4]);
    // arm64: 0 null, 2 frameless, 3 DWARF, 4 frame.
    let mut a64 = modes("encodings-fp-arm64.dylib");
    a64.extend(modes("encodings-nofp-arm64.dylib"));
    a64.sort();
    a64.dedup();
    assert_eq!(a64, [0, 2, 3, 4]);
    // Several pages of both kinds, as the reader reads them.
    for name in [
        "pages-x86_64.dylib",
        "pages-arm64.dylib",
        "regular-pages-x86_64.dylib",
        "regular-pages-arm64.dylib",
    ] {
        let data = section(name);
        let info = UnwindInfo::parse(&data).unwrap();
        let kinds: Vec<PageKind> = info.pages().map(|p| p.kind).collect();
        assert!(kinds.len() >= 2, "{name}: {kinds:?}");
        assert!(kinds.contains(&PageKind::Regular), "{name}: {kinds:?}");
        assert!(kinds.contains(&PageKind::Compressed), "{name}: {kinds:?}");
    }
}

/// ld64.lld writes a page that is not the last in the regular format when
/// the compressed one would hold fewer than 511 entries, which happens when
/// the page's encodings outgrow the palettes. The regular-pages fixtures
/// force that with distinct frameless encodings, then go on with functions
/// that alternate between two encodings, which lld packs into full
/// compressed pages.
#[test]
fn distinct_encodings_make_regular_pages_followed_by_compressed_ones() {
    for name in ["regular-pages-x86_64.dylib", "regular-pages-arm64.dylib"] {
        let data = section(name);
        let info = UnwindInfo::parse(&data).unwrap();
        let pages: Vec<PageInfo> = info.pages().collect();
        let regular = pages
            .iter()
            .take_while(|p| p.kind == PageKind::Regular)
            .count();
        assert!(regular >= 2, "{name}: {pages:?}");
        let rest = &pages[regular..];
        assert!(rest.len() >= 2, "{name}: {pages:?}");
        assert!(
            rest.iter().all(|p| p.kind == PageKind::Compressed),
            "{name}: {pages:?}"
        );
        for p in &pages[..regular] {
            // A regular page is filled to its capacity, 511 entries.
            assert_eq!(p.entries, 511, "{name}: {p:?}");
            assert_eq!(p.page_encodings, 0, "{name}: {p:?}");
        }
        // A compressed page that is not the last holds more than a regular
        // one could.
        assert!(rest[0].entries > 511, "{name}: {:?}", rest[0]);
        // The regular pages' entries are frameless (mode 2) encodings, all
        // different except for the two common ones of the alternating run.
        let in_regular: Vec<u32> = info
            .entries()
            .take(511 * regular)
            .map(|e| e.encoding)
            .collect();
        let frameless = in_regular.iter().filter(|&&e| e >> 24 & 0xf == 2).count();
        assert!(frameless >= in_regular.len() - 1, "{name}: {frameless}");
        let mut distinct = in_regular.clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() >= 1000,
            "{name}: {} distinct",
            distinct.len()
        );
        // Lookups land in the right kind of page and give the entry there.
        let first_compressed = rest[0].first_function;
        let e = info.lookup(first_compressed - 1).unwrap();
        assert_eq!(e.func_end, first_compressed, "{name}: {e:?}");
        let e = info.lookup(first_compressed).unwrap();
        assert_eq!(e.func_start, first_compressed, "{name}: {e:?}");
    }
}
