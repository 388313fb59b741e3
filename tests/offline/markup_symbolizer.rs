//! End to end through the real consumers: markup written by
//! `stackmark::markup` for binaries built here by GNU (gcc, GNU ld) and LLVM
//! (clang-16, ld.lld-16, ld64.lld-16, dsymutil-16), at made-up load
//! addresses, goes through `llvm-symbolizer-16` and `llvm-symbolizer-19
//! --filter-markup` with a `.build-id` tree made by
//! `scripts/build-id-tree.sh`. Neither may report an error, and every frame
//! must come back with its function, file and line, in order.
//!
//! Frame addresses are taken from the binaries: a precise pc is a call
//! instruction, a return address the instruction after a call, both found by
//! decoding the caller's code (x86_64 `call rel32`, AArch64 `bl`).

use crate::common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Architecture, Object, ObjectSection, ObjectSegment, ObjectSymbol, SegmentFlags};
use stackmark::markup::{FdSink, Markup, MarkupModule, MarkupSegment, Perms, Scope};
use stackmark::{Frame, Method};

const PROG_C: &str = r#"
__attribute__((noinline)) int sink(int x) { return x + 1; }
__attribute__((noinline)) int leaf(int x) {
    return sink(x) * 3; /* LEAF */
}
__attribute__((noinline)) int middle(int x) {
    int r = leaf(x); /* MIDDLE */
    return r + 2;
}
__attribute__((noinline)) int outer(int x) {
    return middle(x) - 1; /* OUTER */
}
int main(int argc, char **argv) {
    (void)argv;
    return outer(argc); /* MAIN */
}
"#;

const LIB_C: &str = r#"
__attribute__((noinline, visibility("hidden"))) int lib_leaf(int x) { return x ^ 5; }
int lib_caller(int x) {
    return lib_leaf(x) + 7; /* LIB-CALLER */
}
"#;

const NOID_C: &str = r#"
__attribute__((noinline, visibility("hidden"))) int noid_leaf(int x) { return x - 3; }
int noid_caller(int x) {
    return noid_leaf(x) * 2;
}
"#;

const MACHO_C: &str = r#"
__attribute__((noinline)) int mac_leaf(int x) { return x * 7; }
__attribute__((noinline)) int mac_caller(int x) {
    return mac_leaf(x) + 1; /* MAC-CALLER */
}
"#;

/// The 1-based line of the source holding `marker`.
fn line_of(src: &str, marker: &str) -> usize {
    src.lines().position(|l| l.contains(marker)).unwrap() + 1
}

/// A built binary, read with the `object` crate.
struct Binary {
    path: PathBuf,
    data: Vec<u8>,
}

impl Binary {
    fn open(path: PathBuf) -> Binary {
        let data = std::fs::read(&path).unwrap();
        Binary { path, data }
    }

    fn file(&self) -> object::File<'_> {
        object::File::parse(&*self.data).unwrap()
    }

    /// Start and size of a function (Mach-O names carry a leading `_`).
    fn symbol(&self, name: &str) -> (u64, u64) {
        let file = self.file();
        let sym = file
            .symbols()
            .find(|s| s.name() == Ok(name) || s.name() == Ok(&format!("_{name}")))
            .unwrap_or_else(|| panic!("{}: no symbol {name}", self.path.display()));
        let mut size = sym.size();
        if size == 0 {
            // Mach-O symbols have no size: the function runs to the next
            // one, or to the end of its section.
            let section_end = file
                .sections()
                .find(|s| s.address() <= sym.address() && sym.address() < s.address() + s.size())
                .map(|s| s.address() + s.size())
                .unwrap();
            let next = file
                .symbols()
                .map(|s| s.address())
                .filter(|&a| a > sym.address())
                .min()
                .unwrap_or(section_end);
            size = next.min(section_end) - sym.address();
        }
        (sym.address(), size)
    }

    /// The call in `func` to `callee`: (address of the call, return address).
    fn call(&self, func: &str, callee: &str) -> (u64, u64) {
        let file = self.file();
        let (start, size) = self.symbol(func);
        let target = self.symbol(callee).0;
        let text = file
            .sections()
            .find(|s| s.address() <= start && start < s.address() + s.size())
            .unwrap();
        let data = text.data().unwrap();
        let off = (start - text.address()) as usize;
        let code = &data[off..off + size as usize];
        let mut calls = Vec::new();
        match file.architecture() {
            Architecture::X86_64 => {
                for i in 0..code.len().saturating_sub(4) {
                    if code[i] != 0xe8 {
                        continue;
                    }
                    let rel = i32::from_le_bytes(code[i + 1..i + 5].try_into().unwrap());
                    let next = start + i as u64 + 5;
                    if next.wrapping_add(rel as i64 as u64) == target {
                        calls.push((start + i as u64, next));
                    }
                }
            }
            Architecture::Aarch64 => {
                for (i, w) in code.chunks_exact(4).enumerate() {
                    let w = u32::from_le_bytes(w.try_into().unwrap());
                    if w >> 26 != 0b100101 {
                        continue;
                    }
                    let imm = (((w & 0x03ff_ffff) << 6) as i32 >> 6) as i64 * 4;
                    let site = start + 4 * i as u64;
                    if site.wrapping_add(imm as u64) == target {
                        calls.push((site, site + 4));
                    }
                }
            }
            a => panic!("unexpected architecture {a:?}"),
        }
        assert_eq!(calls.len(), 1, "{func} -> {callee}: {calls:x?}");
        calls[0]
    }

    /// The module as the markup writer sees it when loaded at `bias`.
    fn module(&self, name: &str, bias: u64) -> Module {
        let file = self.file();
        let segments = file
            .segments()
            .filter(|s| s.size() != 0)
            .map(|s| MarkupSegment {
                start: bias + s.address(),
                size: s.size(),
                perms: match s.flags() {
                    SegmentFlags::Elf { p_flags } => Perms::from_elf_flags(p_flags),
                    SegmentFlags::MachO { initprot, .. } => Perms {
                        read: initprot & 1 != 0,
                        write: initprot & 2 != 0,
                        execute: initprot & 4 != 0,
                    },
                    f => panic!("unexpected segment flags {f:?}"),
                },
                vaddr: s.address(),
            })
            .collect();
        let build_id = match file.build_id().unwrap() {
            Some(id) => id.to_vec(),
            None => file
                .mach_uuid()
                .unwrap()
                .map(|u| u.to_vec())
                .unwrap_or_default(),
        };
        Module {
            name: name.as_bytes().to_vec(),
            build_id,
            segments,
        }
    }
}

/// A module for the writer, from a binary's program headers.
struct Module {
    name: Vec<u8>,
    build_id: Vec<u8>,
    segments: Vec<MarkupSegment>,
}

impl MarkupModule for Module {
    fn name(&self) -> &[u8] {
        &self.name
    }
    fn build_id(&self) -> &[u8] {
        &self.build_id
    }
    fn segments(&self) -> impl Iterator<Item = MarkupSegment> + '_ {
        self.segments.iter().copied()
    }
}

fn frame(pc: u64, precise: bool, method: Method) -> Frame {
    Frame {
        pc,
        sp: 0,
        pc_kind: stackmark::PcKind::exact_if(precise),
        method,
    }
}

/// The markup for `frames`, written through an `FdSink` to a file.
fn write_markup(dir: &Path, modules: &[Module], frames: &[Frame], scope: Scope) -> String {
    let path = dir.join("report.txt");
    let file = File::create(&path).unwrap();
    {
        let mut sink = FdSink::new(file.as_raw_fd());
        let mut m = Markup::new(&mut sink);
        m.text("stackmark: a report header").newline();
        m.backtrace(modules, frames, scope);
        m.text("stackmark: end of report").newline();
        assert!(!sink.failed());
    }
    std::fs::read_to_string(&path).unwrap()
}

/// One symbolized frame line:
/// `#N ADDR FUNC FILE:LINE:COL (MODULE+OFFSET) METHOD`.
#[derive(Debug)]
struct Symbolized {
    num: String,
    addr: u64,
    func: String,
    location: String,
    module: String,
    method: String,
}

fn symbolized_frames(text: &str) -> Vec<Symbolized> {
    text.lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let num = t.first()?.strip_prefix('#')?;
            if !t.get(4)?.starts_with('(') {
                return None; // plain text the symbolizer passed through
            }
            Some(Symbolized {
                num: num.to_string(),
                addr: u64::from_str_radix(t[1].strip_prefix("0x")?, 16).ok()?,
                func: t[2].to_string(),
                location: t[3].to_string(),
                module: t[4].to_string(),
                method: t[5..].join(" "),
            })
        })
        .collect()
}

/// What a frame must symbolize to.
struct Want<'a> {
    /// The frame number.
    num: usize,
    func: &'a str,
    /// `FILE:LINE` the location must end with (before `:COLUMN`).
    file_line: String,
    module: &'a str,
    method: &'a str,
}

/// Symbolizes `markup` with both LLVM versions and checks that neither
/// reports anything on standard error or leaves a raw element, that they
/// describe `modules` (by name, in order), that the
/// frames come back as `want` says, in order, and that every line of
/// `passed_through` appears unchanged.
fn check(
    tree: &Path,
    markup: &str,
    modules: &[&str],
    frames: &[Frame],
    want: &[Want],
    passed_through: &[String],
) {
    for tool in ["llvm-symbolizer-16", "llvm-symbolizer-19"] {
        let (out, err) = common::symbolize(tool, tree, markup.as_bytes());
        assert!(
            err.trim().is_empty(),
            "{tool} complained:\n{err}\n{out}\n--- input:\n{markup}"
        );
        // The filter shows each module it accepted as one `[[[ELF module`
        // line; any other `[[[` is an element it refused.
        let described: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("[[[ELF module #0x"))
            .filter_map(|l| l.split('"').nth(1))
            .collect();
        assert_eq!(described, modules, "{tool}:\n{out}");
        assert_eq!(
            out.matches("[[[").count(),
            modules.len(),
            "{tool} left a raw element:\n{out}"
        );
        let got = symbolized_frames(&out);
        assert_eq!(got.len(), want.len(), "{tool}:\n{out}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.num, w.num.to_string(), "{tool} frame {i}:\n{out}");
            assert_eq!(g.func, w.func, "{tool} frame {i}:\n{out}");
            let (file_line, column) = g.location.rsplit_once(':').unwrap();
            assert!(
                file_line.ends_with(&w.file_line) && column.parse::<u32>().is_ok(),
                "{tool} frame {i}: {} does not end with {}:\n{out}",
                g.location,
                w.file_line
            );
            assert!(
                g.module.starts_with(&format!("({}+0x", w.module)),
                "{tool} frame {i}: {}",
                g.module
            );
            assert_eq!(g.method, w.method, "{tool} frame {i}:\n{out}");
        }
        for l in passed_through {
            assert!(out.lines().any(|o| o == l), "{tool} lost {l:?}:\n{out}");
        }
        // The symbolizer shows the address it looked up: ra - 1 for return
        // addresses, the pc itself for precise frames; so it was given the
        // unadjusted, full-width address.
        let bt = frames
            .iter()
            .enumerate()
            .filter(|(i, _)| markup.contains(&format!("{{{{{{bt:{i}:")))
            .map(|(_, f)| f);
        for (g, f) in got.iter().zip(bt) {
            assert_eq!(g.addr, f.lookup_pc(), "{tool}: {g:?}");
        }
    }
}

#[test]
fn gnu_and_llvm_built_elf_modules_symbolize_to_their_functions_and_lines() {
    let dir = common::workdir("elf");
    let aarch64 = cfg!(target_arch = "aarch64");
    let (gcc, triple) = if aarch64 {
        ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu")
    } else {
        ("gcc", "x86_64-linux-gnu")
    };
    for (name, src) in [("prog.c", PROG_C), ("lib.c", LIB_C), ("noid.c", NOID_C)] {
        std::fs::write(dir.join(name), src).unwrap();
    }
    common::run(Command::new(gcc).current_dir(&dir).args([
        "-g",
        "-O0",
        "-fno-omit-frame-pointer",
        "-Wl,--build-id",
        "-o",
        "prog",
        "prog.c",
    ]));
    common::run(Command::new("clang-16").current_dir(&dir).args([
        &format!("--target={triple}"),
        "-g",
        "-O0",
        "-fPIC",
        "-shared",
        "-nostdlib",
        "-fuse-ld=lld",
        "-Wl,--build-id",
        "-o",
        "libllvm.so",
        "lib.c",
    ]));
    common::run(Command::new(gcc).current_dir(&dir).args([
        "-g",
        "-O0",
        "-fPIC",
        "-shared",
        "-nostdlib",
        "-Wl,--build-id=none",
        "-o",
        "libnoid.so",
        "noid.c",
    ]));
    let prog = Binary::open(dir.join("prog"));
    let lib = Binary::open(dir.join("libllvm.so"));
    let noid = Binary::open(dir.join("libnoid.so"));

    // Runtime addresses well above 4 GiB; the names carry the characters
    // the writer must sanitise.
    let (prog_bias, lib_bias, noid_bias) = (0x5555_5555_4000, 0x7f3a_1230_0000, 0x7f3b_0000_0000);
    let modules = [
        prog.module(&prog.path.to_string_lossy(), prog_bias),
        lib.module("/weird:dir}/libllvm.so", lib_bias),
        noid.module(&noid.path.to_string_lossy(), noid_bias),
        // Loaded but holding no frame; its file is nowhere.
        Module {
            name: b"/opt/unused.so".to_vec(),
            build_id: vec![0x11; 20],
            segments: vec![MarkupSegment {
                start: 0x7f40_0000_0000,
                size: 0x1000,
                perms: Perms::from_elf_flags(5),
                vaddr: 0,
            }],
        },
    ];
    assert!(!modules[0].build_id.is_empty() && !modules[1].build_id.is_empty());
    assert!(modules[2].build_id.is_empty(), "libnoid.so has no build ID");
    // lld places the executable segment at an address that is not
    // page-aligned: the mmap must say exactly that.
    let lib_rx = modules[1]
        .segments
        .iter()
        .find(|s| s.perms.execute)
        .unwrap();
    assert_ne!(lib_rx.vaddr % 0x1000, 0, "lld's RX segment starts mid-page");

    let (leaf_call, _) = prog.call("leaf", "sink");
    let (_, middle_ra) = prog.call("middle", "leaf");
    let (_, outer_ra) = prog.call("outer", "middle");
    let (_, main_ra) = prog.call("main", "outer");
    let (_, lib_ra) = lib.call("lib_caller", "lib_leaf");
    let (_, noid_ra) = noid.call("noid_caller", "noid_leaf");
    let frames = [
        frame(prog_bias + leaf_call, true, Method::Context),
        frame(prog_bias + middle_ra, false, Method::SFrame),
        frame(lib_bias + lib_ra, false, Method::SFrame),
        frame(noid_bias + noid_ra, false, Method::FramePointer),
        frame(prog_bias + outer_ra, false, Method::FramePointer),
        frame(prog_bias + main_ra, false, Method::Scan),
        frame(0x10, false, Method::Scan),
    ];

    let tree = dir.join("syms");
    common::build_id_tree(&tree, &[&dir]);
    let prog_name = prog.path.to_string_lossy().into_owned();
    let want = [
        Want {
            num: 0,
            func: "leaf",
            file_line: format!("prog.c:{}", line_of(PROG_C, "LEAF")),
            module: &prog_name,
            method: "context",
        },
        Want {
            num: 1,
            func: "middle",
            file_line: format!("prog.c:{}", line_of(PROG_C, "MIDDLE")),
            module: &prog_name,
            method: "sframe",
        },
        Want {
            num: 2,
            func: "lib_caller",
            file_line: format!("lib.c:{}", line_of(LIB_C, "LIB-CALLER")),
            module: "/weird_dir_/libllvm.so",
            method: "sframe",
        },
        Want {
            num: 4,
            func: "outer",
            file_line: format!("prog.c:{}", line_of(PROG_C, "OUTER")),
            module: &prog_name,
            method: "fp",
        },
        Want {
            num: 5,
            func: "main",
            file_line: format!("prog.c:{}", line_of(PROG_C, "MAIN")),
            module: &prog_name,
            method: "scan",
        },
    ];
    let passed_through = [
        "stackmark: a report header".to_string(),
        format!(
            "#3 0x{:016x} {}+0x{noid_ra:x} fp",
            noid_bias + noid_ra,
            noid.path.display()
        ),
        "#6 0x0000000000000010 ?? scan".to_string(),
        "stackmark: end of report".to_string(),
    ];

    for scope in [Scope::TraceModules, Scope::AllModules] {
        let markup = write_markup(&dir, &modules, &frames, scope);
        assert_eq!(
            markup.contains("/opt/unused.so"),
            scope == Scope::AllModules,
            "{markup}"
        );
        let mut described = vec![prog_name.as_str(), "/weird_dir_/libllvm.so"];
        if scope == Scope::AllModules {
            described.push("/opt/unused.so");
        }
        check(&tree, &markup, &described, &frames, &want, &passed_through);
    }
}

#[test]
fn a_universal_macho_image_symbolizes_through_its_uuid_and_dsym() {
    let dir = common::workdir("macho");
    std::fs::write(dir.join("mac.c"), MACHO_C).unwrap();
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let mut thin = Vec::new();
    for arch in ["x86_64", "arm64"] {
        let obj = dir.join(format!("mac-{arch}.o"));
        let dylib = dir.join(format!("libmac-{arch}.dylib"));
        common::run(
            Command::new("clang-16")
                .current_dir(&dir)
                .args([
                    "-target",
                    &format!("{arch}-apple-macos11"),
                    "-g",
                    "-O0",
                    "-c",
                    "mac.c",
                    "-o",
                ])
                .arg(&obj),
        );
        common::run(
            Command::new("ld64.lld-16")
                .args(["-arch", arch, "-platform_version", "macos", "11.0", "11.0"])
                .args(["-dylib", "-undefined", "dynamic_lookup", "-o"])
                .arg(&dylib)
                .arg(&obj),
        );
        // The line tables live in a dSYM bundle, next to the universal image.
        common::run(
            Command::new("dsymutil-16")
                .arg(&dylib)
                .arg("-o")
                .arg(images.join(format!("libmac-{arch}.dylib.dSYM"))),
        );
        thin.push(dylib);
    }
    let fat = images.join("libmac.dylib");
    common::run(
        Command::new("llvm-lipo-16")
            .arg("-create")
            .args(&thin)
            .arg("-output")
            .arg(&fat),
    );

    let x86 = Binary::open(thin[0].clone());
    let arm = Binary::open(thin[1].clone());
    let (x86_slide, arm_slide) = (0x0000_0001_0000_0000, 0x0000_0002_0040_0000);
    let modules = [
        x86.module("libmac.dylib", x86_slide),
        arm.module("libmac.dylib", arm_slide),
    ];
    assert_eq!(modules[0].build_id.len(), 16, "LC_UUID");
    assert_ne!(modules[0].build_id, modules[1].build_id);
    let (x86_call, _) = x86.call("mac_caller", "mac_leaf");
    let (_, arm_ra) = arm.call("mac_caller", "mac_leaf");
    let frames = [
        frame(x86_slide + x86_call, true, Method::Context),
        frame(arm_slide + arm_ra, false, Method::CompactUnwind),
    ];
    let markup = write_markup(&dir, &modules, &frames, Scope::TraceModules);
    let uuid: String = modules[0]
        .build_id
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(
        markup.contains(&format!("{{{{{{module:0:libmac.dylib:elf:{uuid}}}}}}}")),
        "{markup}"
    );

    // The universal image alone: each slice found by its UUID, names from
    // its symbol table (no lines without the dSYM).
    let tree = dir.join("image-only");
    common::build_id_tree(&tree, &[&fat]);
    for tool in ["llvm-symbolizer-16", "llvm-symbolizer-19"] {
        let (out, err) = common::symbolize(tool, &tree, markup.as_bytes());
        assert!(err.trim().is_empty(), "{tool}:\n{err}\n{out}");
        let got: Vec<String> = symbolized_frames(&out)
            .into_iter()
            .map(|s| s.func)
            .collect();
        assert_eq!(got, ["mac_caller", "mac_caller"], "{tool}:\n{out}");
    }

    // With the dSYM bundles the tree links their DWARF files instead: lines.
    let tree = dir.join("with-dsym");
    common::build_id_tree(&tree, &[&images]);
    let line = format!("mac.c:{}", line_of(MACHO_C, "MAC-CALLER"));
    let want = [
        Want {
            num: 0,
            func: "mac_caller",
            file_line: line.clone(),
            module: "libmac.dylib",
            method: "context",
        },
        Want {
            num: 1,
            func: "mac_caller",
            file_line: line,
            module: "libmac.dylib",
            method: "compact",
        },
    ];
    check(
        &tree,
        &markup,
        &["libmac.dylib", "libmac.dylib"],
        &frames,
        &want,
        &[],
    );
}
