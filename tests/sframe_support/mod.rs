//! Helpers shared by the SFrame tests: the recorded test cases, the
//! `sframe_dump` example binary, and the toolchains that build live sections.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// One recorded section: what GNU as/ld wrote and what `objdump --sframe`
/// printed for it.
pub struct Case {
    /// Runtime address of the section.
    pub section_base: u64,
    /// The section's bytes.
    pub content: Vec<u8>,
    /// `objdump --sframe` output.
    pub groundtruth: String,
}

/// The directory of the recorded cases.
pub fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sframe/testcases")
}

impl Case {
    /// Loads `tests/data/sframe/testcases/<name>.json`.
    pub fn load(name: &str) -> Case {
        let path = cases_dir().join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let json = Json::parse(&text);
        let field = |k: &str| json.get(k).unwrap_or_else(|| panic!("{name}: no {k}"));
        Case {
            section_base: field("section_base").num(),
            content: field("content")
                .arr()
                .iter()
                .map(|v| v.num() as u8)
                .collect(),
            groundtruth: field("groundtruth").str().to_string(),
        }
    }
}

/// The lines of a dump from the first `func idx` line on, without trailing
/// whitespace or trailing empty lines: the part the two dumpers share.
pub fn function_lines(dump: &str) -> Vec<String> {
    let lines: Vec<&str> = dump.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.contains("func idx"))
        .unwrap_or(lines.len());
    let mut out: Vec<String> = lines[first..]
        .iter()
        .map(|l| l.trim_end().to_string())
        .collect();
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

/// The target triple the tests were built for, when cargo was given one
/// (`cargo test --target ...` puts everything under `<target>/<triple>/`).
fn cross_triple(profile_dir: &Path) -> Option<&'static str> {
    let triple = if cfg!(target_arch = "aarch64") {
        "aarch64-unknown-linux-gnu"
    } else {
        "x86_64-unknown-linux-gnu"
    };
    let parent = profile_dir.parent()?.file_name()?;
    (parent == triple).then_some(triple)
}

/// The `sframe_dump` example binary, brought up to date once per test
/// process (`cargo test` builds examples, but not when one test target is
/// selected, and a stale binary would test old code).
pub fn sframe_dump() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // <target>[/<triple>]/<profile>/deps/<test>
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let triple = cross_triple(profile_dir);
        let mut target_dir = profile_dir.parent().unwrap();
        let mut cargo = Command::new(option_env!("CARGO").unwrap_or("cargo"));
        cargo.args(["build", "--quiet", "--example", "sframe_dump"]);
        if let Some(triple) = triple {
            target_dir = target_dir.parent().unwrap();
            cargo.args(["--target", triple]);
        }
        let status = cargo
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build --example sframe_dump");
        assert!(status.success(), "cargo build --example sframe_dump failed");
        profile_dir.join("examples/sframe_dump")
    })
    .clone()
}

/// Runs `sframe_dump` with `args`; returns (success, stdout, stderr). Under
/// qemu-user without binfmt_misc a child AArch64 binary cannot be exec'd
/// directly: it then runs through `qemu-aarch64`, as cargo's runner does.
pub fn run_dump(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let bin = sframe_dump();
    let direct = Command::new(&bin).args(args).output();
    // The failed exec shows as ENOEXEC, or as exit status 127 from the
    // spawned child.
    let exec_failed = match &direct {
        Err(e) => e.raw_os_error() == Some(8),
        Ok(o) => o.status.code() == Some(127) && o.stdout.is_empty(),
    };
    let out = match direct {
        _ if cfg!(target_arch = "aarch64") && exec_failed => Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(&bin)
            .args(args)
            .output(),
        other => other,
    }
    .expect("run sframe_dump");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh scratch directory under the target directory.
pub fn scratch(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .unwrap()
        .join(format!("sframe-scratch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A minimal JSON value: enough for the test-case files.
pub enum Json {
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
    Lit,
}

impl Json {
    pub fn parse(text: &str) -> Json {
        let b = text.as_bytes();
        let mut i = 0;
        let v = value(b, &mut i);
        skip_ws(b, &mut i);
        assert_eq!(i, b.len(), "trailing JSON");
        v
    }
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    pub fn num(&self) -> u64 {
        match self {
            Json::Num(n) => *n as u64,
            _ => panic!("not a number"),
        }
    }
    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            _ => panic!("not a string"),
        }
    }
    pub fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(a) => a,
            _ => panic!("not an array"),
        }
    }
}

fn skip_ws(b: &[u8], i: &mut usize) {
    while *i < b.len() && b[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

fn value(b: &[u8], i: &mut usize) -> Json {
    skip_ws(b, i);
    match b[*i] {
        b'{' => {
            *i += 1;
            let mut m = Vec::new();
            loop {
                skip_ws(b, i);
                if b[*i] == b'}' {
                    *i += 1;
                    return Json::Obj(m);
                }
                let Json::Str(k) = value(b, i) else {
                    panic!("object key")
                };
                skip_ws(b, i);
                assert_eq!(b[*i], b':');
                *i += 1;
                m.push((k, value(b, i)));
                skip_ws(b, i);
                if b[*i] == b',' {
                    *i += 1;
                }
            }
        }
        b'[' => {
            *i += 1;
            let mut a = Vec::new();
            loop {
                skip_ws(b, i);
                if b[*i] == b']' {
                    *i += 1;
                    return Json::Arr(a);
                }
                a.push(value(b, i));
                skip_ws(b, i);
                if b[*i] == b',' {
                    *i += 1;
                }
            }
        }
        b'"' => {
            *i += 1;
            let mut s = String::new();
            loop {
                let c = b[*i];
                *i += 1;
                match c {
                    b'"' => return Json::Str(s),
                    b'\\' => {
                        let e = b[*i];
                        *i += 1;
                        s.push(match e {
                            b'n' => '\n',
                            b't' => '\t',
                            b'r' => '\r',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'u' => {
                                let hex = std::str::from_utf8(&b[*i..*i + 4]).unwrap();
                                *i += 4;
                                char::from_u32(u32::from_str_radix(hex, 16).unwrap()).unwrap()
                            }
                            other => other as char,
                        });
                    }
                    _ => {
                        // Copy a whole UTF-8 sequence.
                        let start = *i - 1;
                        let mut end = *i;
                        while end < b.len() && (b[end] & 0xc0) == 0x80 {
                            end += 1;
                        }
                        s.push_str(std::str::from_utf8(&b[start..end]).unwrap());
                        *i = end;
                    }
                }
            }
        }
        b't' | b'f' | b'n' => {
            while *i < b.len() && b[*i].is_ascii_alphabetic() {
                *i += 1;
            }
            Json::Lit
        }
        _ => {
            let start = *i;
            while *i < b.len() && matches!(b[*i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                *i += 1;
            }
            Json::Num(std::str::from_utf8(&b[start..*i]).unwrap().parse().unwrap())
        }
    }
}

/// What [`fde_starts`] found in one linked file: the SFrame run the walker
/// reads (the section headers' `.sframe` and `.sframe.*` sections,
/// [`stackmark::formats::elf::ElfFile::sframe_extent`]), its pieces, and
/// the FDEs whose start is no function symbol's address.
#[derive(Debug)]
pub struct FdeStarts {
    /// Link-time address of the run.
    pub addr: u64,
    /// `(version, PCREL flag, read as field-relative, FDEs)` of each piece.
    pub pieces: Vec<(u8, bool, bool, u32)>,
    /// How many FDEs the pieces hold.
    pub fdes: usize,
    /// The starts that are no `STT_FUNC` symbol's address (`.symtab` and
    /// `.dynsym`) nor in a PLT section.
    pub off_symbol: Vec<u64>,
}

/// Reads the SFrame run of the ELF file `path` as the walker does and
/// checks every FDE of every piece against the file's function symbols.
/// `None` when the file has no SFrame.
pub fn fde_starts(path: &Path) -> Option<FdeStarts> {
    use object::{Object, ObjectSection, ObjectSymbol};
    use stackmark::formats::elf::ElfFile;
    use stackmark::formats::sframe::SFrame;
    let data = std::fs::read(path).unwrap();
    let (addr, len) = ElfFile::parse(&data).ok()?.sframe_extent()?;
    let file = object::File::parse(&*data).unwrap();
    // The run lies in one loaded segment, laid out in the file as in memory.
    let sec = file
        .sections()
        .find(|s| s.address() <= addr && addr < s.address() + s.size())?;
    let (off, _) = sec.file_range()?;
    let at = (off + addr - sec.address()) as usize;
    let bytes = &data[at..at + len as usize];
    let sframe = SFrame::parse(bytes, addr).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    // GNU ld adds FDEs for the PLT (its first entry, then the rest), which
    // no symbol names.
    let plt: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| s.name().is_ok_and(|n| n.starts_with(".plt")))
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    let funcs: std::collections::BTreeSet<u64> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .map(|s| s.address())
        .collect();
    let on_symbol = |a: u64| funcs.contains(&a) || plt.iter().any(|&(lo, hi)| lo <= a && a < hi);
    let pieces = sframe
        .pieces()
        .map(|p| {
            let h = p.header();
            (h.version, h.pcrel(), h.field_relative(), h.num_fdes)
        })
        .collect();
    let starts: Vec<u64> = sframe.functions().map(|f| f.fde.start).collect();
    Some(FdeStarts {
        addr,
        pieces,
        fdes: starts.len(),
        off_symbol: starts.into_iter().filter(|&s| !on_symbol(s)).collect(),
    })
}

/// What [`SFrame::quick_row`](stackmark::formats::sframe::SFrame::quick_row)
/// must answer at a pc of `sframe`, from what `find_row` and
/// `find_function` give there: the row in brief where the section is
/// ordinary (one piece of version 1 or 2, its functions in address order),
/// the function does not repeat, and the row has the shape it covers;
/// `None` anywhere else.
pub fn quick_row_oracle<'s>(
    sframe: &'s stackmark::formats::sframe::SFrame<'_>,
) -> impl Fn(u64) -> Option<stackmark::formats::sframe::QuickRow> + 's {
    use stackmark::formats::sframe::QuickRow;
    let starts: Vec<u64> = sframe.functions().map(|f| f.fde.start).collect();
    let ordinary = sframe.piece_count() == 1
        && sframe.version() <= 2
        && starts.windows(2).all(|w| w[0] <= w[1]);
    move |pc| {
        if !ordinary || sframe.find_function(pc)?.fde.pc_mask {
            return None;
        }
        QuickRow::of(&sframe.find_row(pc)?)
    }
}
