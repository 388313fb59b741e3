//! The README's SFrame recipe, followed by a crate that depends on stackmark
//! as users do (`tests/recipe`): a C library built by the `cc` crate without
//! frame pointers and with `-Wa,--gsframe` (GNU as 2.40: version 1,
//! `SHT_PROGBITS`), Rust code with `-C llvm-args=--gsframe` (LLVM: version
//! 2, PCREL, `SHT_GNU_SFRAME`), and the one `build.rs` line that links
//! `link/sframe.ld`. Built on x86_64 with rust-lld (the default), with GNU
//! ld and with mold (which takes no script, but `--no-gc-sections`), and
//! for AArch64 with GNU ld (the cross default) and with lld, it
//! must link, its every FDE must start at a function symbol, and the walk
//! from the Rust callback the C code calls must equal libgcc's
//! `_Unwind_Backtrace`, frame for frame, with the C frames and the crate's
//! Rust frames walked by SFrame.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::sframe_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol};

/// The README's recipe, as environment variables (its first line).
const RUSTFLAGS: &str = "-C llvm-args=--gsframe";
const CFLAGS: &str = "-Wa,--gsframe";

/// Builds the recipe crate for `target` (the host when `None`) into its
/// own target directory, linked by `-fuse-ld=<ld>` (the default linker
/// when `None`), and returns a copy of the program under a name of its own.
fn build(target: Option<&str>, ld: Option<&str>) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = root.join("tests/recipe");
    let dir = root.join(format!("target/recipe-{}", target.unwrap_or("host")));
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "--manifest-path"])
        .arg(krate.join("Cargo.toml"))
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", &dir)
        .env("RUSTFLAGS", RUSTFLAGS)
        .env("CFLAGS", CFLAGS)
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if let Some(t) = target {
        cmd.args(["--target", t]);
    }
    match ld {
        Some(ld) => cmd.env("RECIPE_FUSE_LD", ld),
        None => cmd.env_remove("RECIPE_FUSE_LD"),
    };
    let out = cmd.output().expect("cargo build of the recipe crate");
    assert!(
        out.status.success(),
        "{target:?} {ld:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = match target {
        Some(t) => dir.join(t).join("debug/stackmark-recipe-check"),
        None => dir.join("debug/stackmark-recipe-check"),
    };
    let kept = dir.join(format!("recipe-{}", ld.unwrap_or("default")));
    std::fs::copy(&built, &kept).unwrap();
    kept
}

/// Runs the program (AArch64 under qemu-user) and returns what it printed.
fn run(exe: &Path, aarch64: bool) -> String {
    let out = if aarch64 {
        Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(exe)
            .output()
    } else {
        Command::new(exe).output()
    }
    .unwrap();
    assert!(
        out.status.success(),
        "{exe:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The name of the function symbol of `file` covering `addr`.
fn name_at(file: &object::File<'_>, addr: u64) -> String {
    file.symbols()
        .filter(|s| {
            s.kind() == object::SymbolKind::Text
                && s.address() <= addr
                && addr < s.address() + s.size()
        })
        .map(|s| s.name().unwrap_or("?").to_string())
        .next()
        .unwrap_or_else(|| format!("?{addr:#x}"))
}

/// One frame as the program printed it.
#[derive(Debug)]
struct Frame {
    pc: u64,
    method: String,
    /// The function, for the program's own frames; else `module+offset`.
    name: String,
}

/// The two walks the program printed, with the program's frames named.
fn walks(text: &str, exe: &Path) -> (Vec<Frame>, Vec<Frame>) {
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let stem = format!("{}+", exe.file_name().unwrap().to_str().unwrap());
    let name = |place: &str| match place.strip_prefix(&stem) {
        Some(off) => {
            let off = u64::from_str_radix(off.trim_start_matches("0x"), 16).unwrap();
            short(&name_at(&file, off))
        }
        None => place.to_string(),
    };
    let (mut ours, mut libgcc) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let pc = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        match w.first() {
            Some(&"ours") => ours.push(Frame {
                pc: pc(w[1]),
                method: w[2].to_string(),
                name: name(w[4]),
            }),
            Some(&"libgcc") => libgcc.push(Frame {
                pc: pc(w[1]),
                method: String::new(),
                name: name(w[2]),
            }),
            _ => {}
        }
    }
    (ours, libgcc)
}

/// A Rust symbol's function name (`recipe_level_1`), or the name as it is.
fn short(sym: &str) -> String {
    [
        "recipe_callback",
        "recipe_level_2",
        "recipe_level_1",
        "main",
    ]
    .iter()
    .find(|want| sym.contains(&format!("{}{}", want.len(), want)))
    .map_or_else(|| sym.to_string(), |s| s.to_string())
}

/// The frames the recipe program must show from its callback, innermost
/// first: three C functions, then the crate's Rust functions.
const CHAIN: [&str; 7] = [
    "recipe_callback",
    "cdep_inner",
    "cdep_mid",
    "cdep_outer",
    "recipe_level_2",
    "recipe_level_1",
    "main",
];

/// Checks one build: its SFrame pieces and FDE starts, and that the walk
/// equals libgcc's with the C and crate frames walked by SFrame. Returns
/// the number of frames compared.
fn check(label: &str, exe: &Path, aarch64: bool) -> usize {
    let starts = sframe_support::fde_starts(exe).expect("an SFrame run");
    // The C library's two objects (as's version 1, unflagged, read
    // field-relative) and rustc's objects (version 2, PCREL).
    let gas = starts.pieces.iter().filter(|p| p.0 == 1).count();
    assert_eq!(gas, 2, "{label}: {:?}", starts.pieces);
    assert!(
        starts.pieces.iter().all(|p| p.2),
        "{label}: every piece is field-relative: {:?}",
        starts.pieces
    );
    assert!(
        starts.pieces.iter().filter(|p| p.0 == 2 && p.1).count() > 10,
        "{label}: rustc's pieces: {:?}",
        starts.pieces
    );
    assert!(
        starts.pieces.iter().filter(|p| p.0 == 1).all(|p| p.3 > 0),
        "{label}: rustc's pieces: {:?}",
        starts.pieces
    );
    assert!(
        starts.off_symbol.is_empty(),
        "{label}: {} of {} FDEs start off a function symbol: {:x?}",
        starts.off_symbol.len(),
        starts.fdes,
        starts.off_symbol
    );

    let text = run(exe, aarch64);
    assert!(text.contains(" sframe true "), "{label}: {text}");
    assert!(text.contains(" indexed true"), "{label}: {text}");
    let (ours, libgcc) = walks(&text, exe);
    let table = || {
        let mut s = String::from("stackmark | libgcc\n");
        for i in 0..ours.len().max(libgcc.len()) {
            let a = ours.get(i).map_or(String::new(), |f| {
                format!("{:#x} {} {}", f.pc, f.method, f.name)
            });
            let b = libgcc
                .get(i)
                .map_or(String::new(), |f| format!("{:#x} {}", f.pc, f.name));
            s += &format!("{a:<70} | {b}\n");
        }
        s
    };
    let names: Vec<&str> = ours.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(&names[..CHAIN.len()], CHAIN, "{label}\n{}", table());
    // Each frame of the chain was unwound by its own rows, so the frame
    // after it says how: the C frames by SFrame; the crate's Rust frames by
    // SFrame where rustc wrote any, else by their DWARF CFI (LLVM 22 writes
    // no FDE for AArch64: "non-default RA register in .cfi_return_column").
    let rustc_fdes: u32 = starts.pieces.iter().filter(|p| p.0 == 2).map(|p| p.3).sum();
    let rust = if rustc_fdes > 0 { "sframe" } else { "cfi" };
    for (i, f) in ours[1..CHAIN.len()].iter().enumerate() {
        let want = if CHAIN[i].starts_with("cdep_") {
            "sframe"
        } else {
            rust
        };
        assert_eq!(
            f.method,
            want,
            "{label}: the frame after {}\n{}",
            CHAIN[i],
            table()
        );
    }
    eprintln!("{label}: rustc's pieces hold {rustc_fdes} FDEs; Rust frames walked by {rust}");
    // libgcc's list starts with the backtrace crate's frames, then the
    // callback's return addresses: from stackmark's frame 1 on, equal.
    let at = libgcc
        .iter()
        .position(|f| f.pc == ours[1].pc)
        .unwrap_or_else(|| panic!("{label}: libgcc lacks stackmark's frame 1\n{}", table()));
    assert_eq!(
        libgcc[at - 1].name,
        "recipe_callback",
        "{label}\n{}",
        table()
    );
    let a: Vec<u64> = ours[1..].iter().map(|f| f.pc).collect();
    let b: Vec<u64> = libgcc[at..].iter().map(|f| f.pc).collect();
    assert_eq!(a, b, "{label}: the walks differ\n{}", table());
    eprintln!(
        "{label}: {} frames equal to libgcc's; {} pieces, {} FDEs on symbols",
        a.len(),
        starts.pieces.len(),
        starts.fdes
    );
    a.len()
}

/// The pcs `objdump --sframe=<section>` gives the functions of `exe`.
fn objdump_pcs(objdump: &str, section: &str, exe: &Path) -> Vec<u64> {
    let out = Command::new(objdump)
        .arg(format!("--sframe={section}"))
        .arg(exe)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("pc = 0x").nth(1))
        .filter_map(|l| u64::from_str_radix(l.split(',').next()?, 16).ok())
        .collect()
}

/// objdump 2.40 reads an assembler's unflagged pieces as section-relative,
/// so the functions it names are off by their FDEs' offsets in the piece,
/// where stackmark's starts are the C functions' symbols.
fn objdump_misreads_gas_pieces(exe: &Path, objdump: &str) {
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    assert!(file.section_by_name(".sframe.c").is_some());
    let theirs = objdump_pcs(objdump, ".sframe.c", exe);
    let sym = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address())
            .unwrap()
    };
    let c_funcs = [sym("cdep_outer"), sym("cdep_mid"), sym("cdep_inner")];
    // objdump 2.40 reads the first piece of a concatenation alone.
    assert!(!theirs.is_empty(), "objdump read nothing of .sframe.c");
    for pc in &theirs {
        assert!(
            !c_funcs.contains(pc),
            "objdump 2.40 got {pc:#x} right: {theirs:x?} vs {c_funcs:x?}"
        );
    }
    // Section-relative, it is off by the FDE's offset in its piece (28).
    assert!(
        theirs.iter().any(|pc| c_funcs.contains(&(pc + 28))),
        "{theirs:x?} vs {c_funcs:x?}"
    );
}

/// Whether lld linked `exe` (it signs `.comment`, `Linker: LLD 22…` or
/// `Linker: Debian LLD 16…`; GNU ld does not).
fn linked_by_lld(exe: &Path) -> bool {
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let comment = file
        .section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .unwrap_or(&[]);
    let comment = String::from_utf8_lossy(comment);
    comment.contains("Linker: ") && comment.contains("LLD ")
}

/// How many sections of `exe` are called `name`.
fn sections_named(exe: &Path, name: &str) -> usize {
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.sections().filter(|s| s.name() == Ok(name)).count()
}

#[test]
fn recipe_on_x86_64_with_rust_lld_gnu_ld_and_mold() {
    let lld = build(None, None);
    let dir = lld.parent().unwrap();
    // Depending on stackmark builds none of its test fixtures.
    let built: Vec<String> = std::fs::read_dir(dir.join("debug/build"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        built.iter().any(|d| d.starts_with("stackmark-")),
        "{built:?}"
    );
    assert!(
        !built.iter().any(|d| d.starts_with("stackmark-fixtures")),
        "fixtures were built for a dependent crate: {built:?}"
    );
    // rust-lld kept both kinds apart, as the script says.
    assert!(linked_by_lld(&lld));
    assert_eq!(sections_named(&lld, ".sframe.c"), 1);
    assert_eq!(sections_named(&lld, ".sframe.rust"), 1);
    check("x86_64, rust-lld", &lld, false);
    objdump_misreads_gas_pieces(&lld, "objdump");

    let bfd = build(None, Some("bfd"));
    assert!(!linked_by_lld(&bfd), "linked by GNU ld");
    check("x86_64, GNU ld", &bfd, false);
    objdump_misreads_gas_pieces(&bfd, "objdump");

    // mold reads no SECTIONS script: without section garbage collection it
    // keeps both kinds, in two sections called `.sframe`, side by side.
    let mold = build(None, Some("mold"));
    assert_eq!(
        sections_named(&mold, ".sframe"),
        2,
        "mold's SFrame sections"
    );
    check("x86_64, mold", &mold, false);
}

#[test]
fn recipe_on_aarch64_with_gnu_ld_and_lld() {
    let t = Some("aarch64-unknown-linux-gnu");
    let bfd = build(t, None);
    assert!(!linked_by_lld(&bfd), "linked by GNU ld");
    check("aarch64, GNU ld", &bfd, true);
    let lld = build(t, Some("lld"));
    assert!(linked_by_lld(&lld));
    check("aarch64, lld", &lld, true);
    objdump_misreads_gas_pieces(&lld, "aarch64-linux-gnu-objdump");
}
