//! The `__unwind_info` reader against `llvm-objdump-16 --unwind-info`, on
//! Mach-O fixtures built by clang-16 and ld64.lld-16
//! (`scripts/build-macho-fixtures.sh`): every entry, encoding and LSDA must
//! agree, and every lookup inside a function must return that function.

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection};
use stackmark::formats::compact_unwind::{UnwindInfo, UNWIND_HAS_LSDA};

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

/// Pairs of numbers: `(function offset, encoding)` or `(function offset, LSDA offset)`.
type Pairs = Vec<(u32, u32)>;

/// `(function offset, encoding)` of every second-level entry, and the LSDA
/// descriptors `(function offset, LSDA offset)`, as llvm-objdump prints them.
fn objdump(path: &Path) -> (Pairs, Pairs) {
    let out = Command::new("llvm-objdump-16")
        .arg("--unwind-info")
        .arg(path)
        .output()
        .expect("llvm-objdump-16 (scripts/test.sh installs llvm-16)");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let (mut entries, mut lsdas) = (Vec::new(), Vec::new());
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
        } else if let Some((_, enc)) = tail.split_once('=') {
            // "encoding[i]=0x..." (compressed) or "encoding=0x..." (regular)
            entries.push((hex(func), hex(enc)));
        }
    }
    (entries, lsdas)
}

#[test]
fn every_fixture_reads_exactly_as_llvm_objdump_prints_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/macho");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("dylib") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let section = file
            .section_by_name("__unwind_info")
            .expect("__unwind_info");
        let info = UnwindInfo::parse(section.data().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (want, lsdas) = objdump(&path);
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
    assert_eq!(checked, 6, "fixtures in {}", dir.display());
}

#[test]
fn fixtures_cover_every_encoding_kind_and_several_pages() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/macho");
    let modes = |name: &str| -> Vec<u32> {
        let data = std::fs::read(dir.join(name)).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let s = file.section_by_name("__unwind_info").unwrap();
        let info = UnwindInfo::parse(s.data().unwrap()).unwrap();
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
    for name in ["pages-x86_64.dylib", "pages-arm64.dylib"] {
        let out = Command::new("llvm-objdump-16")
            .arg("--unwind-info")
            .arg(dir.join(name))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let pages = text.matches("Second level index[").count();
        assert!(pages >= 2, "{name}: {pages} pages");
        // Regular pages list "encoding=", compressed ones "encoding[i]=".
        assert!(text.contains(", encoding=0x"), "{name}: a regular page");
        assert!(text.contains(", encoding["), "{name}: a compressed page");
    }
}
