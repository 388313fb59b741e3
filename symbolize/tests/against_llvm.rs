//! The crash, panic and profile examples' reports (built for the target
//! the tests run on: x86_64, or AArch64 under qemu-user), symbolized by
//! `stackmark-symbolize` from each source alone, frame for frame against
//! `llvm-symbolizer-19 --filter-markup` reading the DWARF binaries:
//! - a `.build-id` tree (`scripts/build-id-tree.sh`): everything equal;
//! - a Breakpad store written by Mozilla's `dump_syms --inlines`;
//! - GSYM files written by `llvm-gsymutil-19 --convert`.
//!
//! Where a format cannot carry something, or its producer writes it
//! differently, the difference is named here and asserted to be only that:
//! - neither format has columns: they are 0;
//! - `dump_syms` writes names demangled its own way (no Rust hash, `<impl
//!   *mut T>`, `{{closure}}`), so they are compared with the mangled names
//!   llvm-symbolizer gives with `--no-demangle`, demangled the same way;
//! - `dump_syms` writes paths with `.` and `..` resolved, and puts a
//!   relative compilation directory before a relative path (glibc's
//!   `./nptl/pthread_create.c` becomes `nptl/nptl/pthread_create.c`);
//! - a Breakpad PUBLIC record has no size, so an address past the end of
//!   a public symbol, in a stripped local function, is named after it
//!   where llvm-symbolizer names nothing (the cross C library);
//! - both take lines only inside DWARF functions: code with lines but no
//!   DWARF function (assembly such as compiler-builtins' `lse.S`) keeps
//!   its symbol-table name without a line;
//! - both keep one name per function, where llvm-symbolizer names a
//!   function from the symbol table: for a function with aliases (glibc's
//!   `__libc_start_main_impl`, `__libc_start_main@GLIBC_2.2.5`) the names
//!   may differ, but must be symbols at the same address.
//!
//! The examples come from the same `cargo test` run (the workspace's), and
//! `dump_syms` from `scripts/test.sh`, which installs it.

#![cfg(target_os = "linux")]

mod support;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// target/[TRIPLE/]debug/examples, beside this test's deps/ directory.
fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

fn example(name: &str) -> PathBuf {
    let p = examples_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: `cargo test --workspace` builds the examples (or run `cargo build --examples` first)",
        p.display()
    );
    p
}

fn workdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stackmark-symbolize-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tool(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/test.sh installs the tools)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn piped(cmd: &mut Command, input: &[u8]) -> String {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/test.sh installs the tools)"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The files a report's modules name, on this machine (the cross sysroot's
/// for AArch64 libraries), and for each the file whose DWARF describes it:
/// Debian's debug file by build ID, when there is one.
fn module_files(report: &str) -> Vec<(String, PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for l in report.lines() {
        let Some(rest) = l.strip_prefix("{{{module:") else {
            continue;
        };
        let f: Vec<&str> = rest.trim_end_matches("}}}").split(':').collect();
        let (name, path, id) = (f[1].to_string(), PathBuf::from(f[1]), f[3]);
        let cross =
            Path::new("/usr/aarch64-linux-gnu").join(path.strip_prefix("/").unwrap_or(&path));
        let path = if cfg!(target_arch = "aarch64") && cross.exists() {
            cross
        } else {
            path
        };
        if !path.exists() {
            continue;
        }
        let debug = Path::new("/usr/lib/debug/.build-id")
            .join(&id[..2])
            .join(format!("{}.debug", &id[2..]));
        let dwarf = if debug.exists() { debug } else { path.clone() };
        out.push((name, path, dwarf));
    }
    out
}

/// The three stores for a report.
struct Stores {
    tree: PathBuf,
    breakpad: PathBuf,
    gsym: PathBuf,
    /// Modules llvm-gsymutil makes no GSYM of (no function in their
    /// symbol table or DWARF: a stripped library with only `.dynsym`), by
    /// the report's name for them.
    no_gsym: Vec<String>,
}

fn stores(dir: &Path, report: &str) -> Stores {
    let files = module_files(report);
    let tree = dir.join("tree");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-id-tree.sh");
    tool(
        Command::new("bash")
            .arg(script)
            .arg(&tree)
            .args(files.iter().map(|f| &f.1)),
    );
    let breakpad = dir.join("breakpad");
    let gsym = dir.join("gsym");
    std::fs::create_dir_all(&gsym).unwrap();
    let mut no_gsym = Vec::new();
    for (i, (name, _, dwarf)) in files.iter().enumerate() {
        tool(
            Command::new("dump_syms")
                .arg("--inlines")
                .arg("-s")
                .arg(&breakpad)
                .arg(dwarf),
        );
        let out = Command::new("llvm-gsymutil-19")
            .arg("--convert")
            .arg(dwarf)
            .arg("-o")
            .arg(gsym.join(format!("{i}.gsym")))
            .output()
            .expect("llvm-gsymutil-19 (scripts/test.sh installs llvm-19)");
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if said.contains("no functions to encode") {
            no_gsym.push(name.clone());
        } else {
            assert!(
                out.status.success(),
                "llvm-gsymutil-19 --convert {}: {said}",
                dwarf.display()
            );
        }
    }
    Stores {
        tree,
        breakpad,
        gsym,
        no_gsym,
    }
}

fn llvm(stores: &Stores, report: &str, demangle: bool) -> String {
    let mut c = Command::new("llvm-symbolizer-19");
    c.arg("--filter-markup")
        .arg("--debug-file-directory=/usr/lib/debug")
        .arg(format!("--debug-file-directory={}", stores.tree.display()));
    if !demangle {
        c.arg("--no-demangle");
    }
    piped(&mut c, report.as_bytes())
}

/// stackmark-symbolize's (stdout, stderr).
fn ours(args: &[&str], report: &str) -> (String, String) {
    let out = support::run_target(
        Path::new(env!("CARGO_BIN_EXE_stackmark-symbolize")),
        args,
        Some(report.as_bytes()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One frame line: `#N[.M] 0xADDR FUNCTION FILE:LINE:COL (MODULE+0xOFF)[ METHOD]`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    id: String,
    addr: String,
    func: String,
    file: String,
    line: u32,
    col: u32,
    module: String,
}

fn rows(text: &str) -> Vec<Row> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix('#')?;
            let (id, rest) = rest.split_once(' ')?;
            let rest = rest.trim_start();
            let (addr, rest) = rest.split_once(' ')?;
            let rest = format!(" {rest}");
            let open = rest.rfind(" (")?;
            let close = open + rest[open..].find(')')?;
            let module = rest[open + 2..close].to_string();
            if rest[..open].is_empty() {
                // A frame without symbols: module+offset alone.
                return Some(Row {
                    id: id.to_string(),
                    addr: addr.to_string(),
                    func: String::new(),
                    file: String::new(),
                    line: 0,
                    col: 0,
                    module,
                });
            }
            let (func, loc) = rest[..open].trim_start().rsplit_once(' ')?;
            let mut p = loc.rsplitn(3, ':');
            let col = p.next()?.parse().ok()?;
            let line = p.next()?.parse().ok()?;
            let file = p.next()?.to_string();
            Some(Row {
                id: id.to_string(),
                addr: addr.to_string(),
                func: func.to_string(),
                file,
                line,
                col,
                module,
            })
        })
        .collect()
}

/// `.` and `..` resolved by name, as `dump_syms` writes paths.
fn lexical(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "." => {}
            ".." if parts.last().is_some_and(|l| !l.is_empty() && *l != "..") => {
                parts.pop();
            }
            "" if !parts.is_empty() => {}
            c => parts.push(c),
        }
    }
    parts.join("/")
}

/// A mangled name demangled the way `dump_syms` does (rustc-demangle
/// without hashes, cpp_demangle for C++).
fn dump_syms_name(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    raw.to_string()
}

/// Every symbol name of the file at each address, for alias checks.
fn symbols_by_name(file: &Path) -> HashMap<String, u64> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(file).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    obj.symbols()
        .chain(obj.dynamic_symbols())
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
        .collect()
}

/// Source files and their symbol tables, by module name in the report.
fn aliases(report: &str) -> BTreeMap<String, HashMap<String, u64>> {
    let names: Vec<String> = report
        .lines()
        .filter_map(|l| l.strip_prefix("{{{module:"))
        .map(|r| r.split(':').nth(1).unwrap().to_string())
        .collect();
    let files = module_files(report);
    let mut m = BTreeMap::new();
    for n in names {
        let base = n.rsplit('/').next().unwrap().to_string();
        if let Some((_, _, dwarf)) = files
            .iter()
            .find(|(_, p, _)| p.file_name().unwrap().to_string_lossy() == base)
        {
            m.insert(n, symbols_by_name(dwarf));
        }
    }
    m
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    BuildId,
    Breakpad,
    Gsym,
}

/// The rows of each `bt` frame (its inlined frames, then itself), by
/// frame number, in order.
fn groups(rows: &[Row]) -> Vec<(String, Vec<Row>)> {
    let mut out: Vec<(String, Vec<Row>)> = Vec::new();
    for r in rows {
        let n = r.id.split('.').next().unwrap().to_string();
        match out.last_mut() {
            // Inlined frames come first; the frame itself (no `.M`) ends a group.
            Some((m, g)) if *m == n && g.last().is_some_and(|l| l.id.contains('.')) => {
                g.push(r.clone())
            }
            _ => out.push((n, vec![r.clone()])),
        }
    }
    out
}

/// Frame for frame: `got` from `format` against llvm's `want` (and its
/// mangled names `raw`), differing only as the module documentation says.
/// Returns how many frames llvm-symbolizer left without a line where the
/// source gave one.
fn assert_same_frames(
    format: Format,
    got: &[Row],
    want: &[Row],
    raw: &[Row],
    syms: &BTreeMap<String, HashMap<String, u64>>,
    missing: &[String],
    text: &str,
) -> usize {
    let (got, want, raw) = (groups(got), groups(want), groups(raw));
    assert_eq!(got.len(), want.len(), "{format:?}: frame count\n{text}");
    let mut aliased = 0;
    let mut llvm_lineless = 0;
    for ((g, w), r) in got.iter().zip(&want).zip(&raw) {
        let ctx = format!("{format:?}: {g:#?}\nllvm: {w:#?}\n{text}");
        assert_eq!(g.0, w.0, "{ctx}");
        let module = w.1[0].module.rsplit_once('+').unwrap().0;
        if missing.iter().any(|m| m == module) {
            // No symbols: the frame stays module+offset.
            assert_eq!(g.1.len(), 1, "{ctx}");
            let (g, w) = (&g.1[0], w.1.last().unwrap());
            assert_eq!(
                (g.func.as_str(), &g.addr, &g.module),
                ("", &w.addr, &w.module),
                "{ctx}"
            );
            continue;
        }
        // llvm-symbolizer trusts `.debug_aranges`, where rust-lld leaves
        // the ranges of discarded functions at address 0: for code in the
        // first pages of a binary it then looks in the wrong unit and finds
        // no line (and names the file after the symbol table's STT_FILE, a
        // codegen unit). The sources here give the line; the function must
        // still be the same.
        if w.1.len() == 1 && w.1[0].line == 0 && g.1.last().unwrap().line != 0 {
            assert_eq!(g.1.last().unwrap().addr, w.1[0].addr, "{ctx}");
            let (gf, wf) = (&g.1.last().unwrap().func, &w.1[0].func);
            let same = match format {
                Format::Breakpad => *gf == dump_syms_name(&r.1[0].func),
                _ => gf == wf || *gf == wf.split(" (.llvm.").next().unwrap(),
            };
            assert!(same, "{ctx}");
            llvm_lineless += 1;
            continue;
        }
        assert_eq!(
            g.1.len(),
            w.1.len(),
            "{format:?}: inlined frames differ\n{ctx}"
        );
        for ((g, w), r) in g.1.iter().zip(&w.1).zip(&r.1) {
            if format == Format::BuildId {
                assert_eq!(g, w, "{ctx}");
                continue;
            }
            assert_eq!(
                (&g.id, &g.addr, &g.module),
                (&w.id, &w.addr, &w.module),
                "{ctx}"
            );
            assert_eq!(g.col, 0, "{ctx}");
            if format == Format::Breakpad && w.func.is_empty() && g.line == 0 {
                // A PUBLIC record has no size: Breakpad takes it to run to
                // the next symbol, over stripped local functions (and over
                // the PLT, which dump_syms names `<.plt ELF section in
                // NAME>`) that the sized symbol table leaves unnamed. It
                // must be a symbol below the address, or such a section.
                let (module, off) = g.module.rsplit_once("+0x").unwrap();
                let off = u64::from_str_radix(off, 16).unwrap();
                let at = syms[module].get(&g.func).copied();
                let section = g.func.starts_with("<.") && g.func.contains(" ELF section in ");
                assert!(section || at.is_some_and(|a| a <= off), "{ctx}");
                continue;
            }
            // Code with lines but no DWARF function (assembly: glibc's
            // string functions, compiler-builtins' `lse.S`) has its name
            // from the symbol table and no line in either format: dump_syms
            // and llvm-gsymutil take lines only inside DWARF functions.
            let no_function_lines = g.line == 0
                && w.line != 0
                && g.file == "<invalid>"
                && w.id == g.id
                && !g.id.contains('.');
            if !no_function_lines {
                assert_eq!(g.line, w.line, "{ctx}");
            }
            let (want_func, want_file) = match format {
                Format::Breakpad => (dump_syms_name(&r.func), lexical(&w.file)),
                _ => (w.func.clone(), w.file.clone()),
            };
            if w.line == 0 || no_function_lines {
                // No line information (a symbol-table function): none either way.
                assert_eq!(g.file, "<invalid>", "{ctx}");
            } else if format == Format::Breakpad && g.file != want_file {
                // dump_syms puts a relative compilation directory (glibc's
                // `nptl`) before a relative file name that already has it.
                assert!(
                    g.file.ends_with(&format!("/{want_file}")) && !want_file.starts_with('/'),
                    "{ctx}"
                );
            } else {
                assert_eq!(g.file, want_file, "{ctx}");
            }
            if g.func != want_func {
                // Only another name of the same function will do: a symbol
                // at the same address, or the DWARF name of a symbol the
                // compiler renamed with a clone suffix (`.llvm.N`, which
                // only the symbol table carries).
                let module = g.module.rsplit_once('+').unwrap().0;
                let table = &syms[module];
                let at = |n: &str| table.get(n).copied();
                let unsuffixed = want_func.split(" (.llvm.").next().unwrap();
                assert!(
                    g.func == unsuffixed || (at(&g.func).is_some() && at(&g.func) == at(&r.func)),
                    "{ctx}\n{} is no alias of {}",
                    g.func,
                    r.func
                );
                aliased += 1;
            }
        }
    }
    // Aliases are the exception, not the rule.
    assert!(
        aliased * 4 <= got.len(),
        "{format:?}: {aliased} frames named by another alias\n{text}"
    );
    llvm_lineless
}

/// The report through llvm and through each source alone.
fn check(name: &str, report: &str, min_frames: usize) {
    let dir = workdir(name);
    let s = stores(&dir, report);
    let want_text = llvm(&s, report, true);
    let want = rows(&want_text);
    let raw = rows(&llvm(&s, report, false));
    assert!(
        want.len() >= min_frames,
        "llvm-symbolizer gave {} frames:\n{want_text}",
        want.len()
    );
    // Only a library without symbols (the cross C library) may leave
    // frames unnamed.
    let unnamed = want.iter().filter(|r| r.func.is_empty()).count();
    assert!(
        unnamed * 4 <= want.len(),
        "llvm left frames unnamed:\n{want_text}"
    );

    let syms = aliases(report);
    let tree = s.tree.to_str().unwrap();
    for (format, args) in [
        (
            Format::BuildId,
            vec![
                "--debug-file-directory",
                "/usr/lib/debug",
                "--debug-file-directory",
                tree,
            ],
        ),
        (
            Format::Breakpad,
            vec!["--breakpad", s.breakpad.to_str().unwrap()],
        ),
        (Format::Gsym, vec!["--gsym", s.gsym.to_str().unwrap()]),
    ] {
        let (got, err) = ours(&args, report);
        let missing: &[String] = if format == Format::Gsym {
            &s.no_gsym
        } else {
            &[]
        };
        // Only a module the source has nothing for (and which has frames) is
        // without symbols.
        for l in err.lines().filter(|l| l.contains("no symbols")) {
            assert!(
                missing
                    .iter()
                    .any(|m| l.contains(&format!("no symbols for {m} (build ID"))),
                "{format:?}: {err}"
            );
        }
        // Lines that are not frames stay as they are.
        let plain = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(plain(&got), plain(&want_text), "{format:?}");
        let lineless = assert_same_frames(format, &rows(&got), &want, &raw, &syms, missing, &got);
        if format == Format::BuildId && lineless == 0 {
            // Nothing for llvm-symbolizer to miss: the very same text.
            assert_eq!(got, want_text, "{err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn stderr_report(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_crash_report_symbolizes_as_llvm_symbolizer_from_each_source() {
    let out = support::run_target(&example("crash"), &["segv"], None);
    check("crash", &stderr_report(&out), 8);
}

#[test]
fn a_panic_report_symbolizes_as_llvm_symbolizer_from_each_source() {
    let out = support::run_target(&example("panic"), &["main"], None);
    check("panic", &stderr_report(&out), 8);
}

/// The profile's pcs, each once, as a backtrace after the profile's own
/// markup context: what llvm-symbolizer can read of a profile.
fn profile_as_backtrace(profile: &str) -> String {
    let mut out = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for l in profile.lines() {
        if l.starts_with("{{{reset") || l.starts_with("{{{module:") || l.starts_with("{{{mmap:") {
            out.push_str(l);
            out.push('\n');
            continue;
        }
        for pc in l.split("{{{pc:").skip(1) {
            let pc = pc.split("}}}").next().unwrap();
            if seen.insert(pc.to_string()) {
                out.push_str(&format!("{{{{{{bt:{}:{pc}}}}}}} sample\n", seen.len()));
            }
        }
    }
    out
}

fn profile_run() -> String {
    let out = support::run_target(&example("profile"), &["1", "500"], None);
    assert!(out.status.success(), "{}", stderr_report(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_profile_symbolizes_as_llvm_symbolizer_from_each_source_and_folds() {
    let profile = profile_run();
    let bt = profile_as_backtrace(&profile);
    check("profile", &bt, 8);

    // --folded: each pc becomes its frames, outermost first: the names the
    // log gives that pc (checked against llvm-symbolizer above).
    let dir = workdir("profile-folded");
    let s = stores(&dir, &profile);
    let tree = s.tree.to_str().unwrap();
    let want = rows(
        &ours(
            &[
                "--debug-file-directory",
                "/usr/lib/debug",
                "--debug-file-directory",
                tree,
            ],
            &bt,
        )
        .0,
    );
    let mut by_pc: HashMap<String, Vec<String>> = HashMap::new();
    for l in bt.lines().filter_map(|l| l.strip_prefix("{{{bt:")) {
        let (n, rest) = l.split_once(':').unwrap();
        let pc = rest.split("}}}").next().unwrap().to_string();
        let names: Vec<String> = want
            .iter()
            .filter(|r| r.id == n || r.id.starts_with(&format!("{n}.")))
            // A frame without a name is its module (no directory) and offset.
            .map(|r| {
                if r.func.is_empty() {
                    r.module.rsplit('/').next().unwrap().to_string()
                } else {
                    r.func.clone()
                }
            })
            .rev()
            .collect();
        by_pc.insert(pc, names);
    }
    let (folded, err) = ours(
        &[
            "--folded",
            "--debug-file-directory",
            "/usr/lib/debug",
            "--debug-file-directory",
            tree,
        ],
        &profile,
    );
    let stacks: Vec<&str> = profile.lines().filter(|l| l.contains("{{{pc:")).collect();
    let lines: Vec<&str> = folded.lines().collect();
    assert_eq!(lines.len(), stacks.len(), "{err}\n{folded}");
    for (line, stack) in lines.iter().zip(&stacks) {
        let (names, count) = line.rsplit_once(' ').unwrap();
        assert_eq!(count, stack.rsplit_once(' ').unwrap().1);
        let want: Vec<String> = stack
            .split("{{{pc:")
            .skip(1)
            .flat_map(|pc| by_pc[pc.split("}}}").next().unwrap()].clone())
            .map(|n| n.replace(';', ","))
            .collect();
        assert_eq!(names.split(';').collect::<Vec<_>>(), want, "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_symbols_frames_stay_module_and_offset_and_the_sources_tried_are_named() {
    let out = support::run_target(&example("crash"), &["segv"], None);
    let report = stderr_report(&out);
    let dir = workdir("nosyms");
    let (bp, gs, tree) = (dir.join("bp"), dir.join("gs"), dir.join("tree"));
    for d in [&bp, &gs, &tree] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (got, err) = ours(
        &[
            "--breakpad",
            bp.to_str().unwrap(),
            "--gsym",
            gs.to_str().unwrap(),
            "--debug-file-directory",
            tree.to_str().unwrap(),
        ],
        &report,
    );
    let frames = rows(&got);
    let bts = report.lines().filter(|l| l.starts_with("{{{bt:")).count();
    assert_eq!(frames.len(), bts, "{got}");
    for (r, l) in frames
        .iter()
        .zip(report.lines().filter(|l| l.starts_with("{{{bt:")))
    {
        assert_eq!(r.func, "", "{got}");
        assert!(r.module.contains("+0x"), "{got}");
        // The address printed is the one looked up: a return address one byte back.
        let addr =
            u64::from_str_radix(l.split(':').nth(2).unwrap().trim_start_matches("0x"), 16).unwrap();
        let back = u64::from(l.contains(":ra}}}"));
        assert_eq!(r.addr, format!("{:#018x}", addr - back), "{got}");
    }
    // Each module without symbols is named once, with every source tried, in order.
    let crash = example("crash");
    let line = err
        .lines()
        .find(|l| l.contains(&format!("no symbols for {} ", crash.display())))
        .unwrap_or_else(|| panic!("{err}"));
    let (b, g, t) = (
        line.find("--breakpad ").unwrap(),
        line.find("--gsym ").unwrap(),
        line.find("--debug-file-directory ").unwrap(),
    );
    assert!(b < g && g < t, "{line}");
    assert!(
        line.contains("/CB") || line.contains(".sym"),
        "the Breakpad path tried: {line}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
