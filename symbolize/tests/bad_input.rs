//! Bad input gets an error naming the file and the offset, and costs only
//! what it spoils: a corrupt markup line, a malformed record in a real
//! `dump_syms` file and a truncated real `llvm-gsymutil` file, each in a
//! crash report whose other frames must still come out symbolized.
//!
//! x86_64 Linux only: it needs the host's dump_syms and llvm-gsymutil-19
//! on the host's binaries (the AArch64 reports are covered by
//! `against_llvm.rs`).

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

fn crash_report() -> (PathBuf, String) {
    let bin = examples_dir().join("crash");
    assert!(
        bin.exists(),
        "{} is built by `cargo test --workspace`",
        bin.display()
    );
    let out = Command::new(&bin).arg("segv").output().unwrap();
    (bin, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn workdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "stackmark-symbolize-bad-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// stackmark-symbolize on FILE `input` (written to `dir`): (stdout, stderr).
fn ours(dir: &Path, args: &[&str], input: &str) -> (String, String, PathBuf) {
    let file = dir.join("report.txt");
    std::fs::write(&file, input).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stackmark-symbolize"))
        .args(args)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        file,
    )
}

/// Function names of the frames `#N` (the outer of each group).
fn outer_functions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix('#')?;
            let (id, rest) = rest.split_once(' ')?;
            if id.contains('.') {
                return None;
            }
            let mut w = rest.split_whitespace();
            w.next()?;
            Some(w.next()?.to_string())
        })
        .collect()
}

#[test]
fn a_corrupt_markup_line_is_named_by_file_line_and_offset_and_the_rest_symbolized() {
    let (bin, report) = crash_report();
    let dir = workdir("markup");
    let tree = dir.join("tree");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-id-tree.sh");
    assert!(Command::new("bash")
        .arg(script)
        .arg(&tree)
        .arg(&bin)
        .status()
        .unwrap()
        .success());
    // Frame 2's address loses its 0x.
    let bad_line = report
        .lines()
        .position(|l| l.starts_with("{{{bt:2:"))
        .unwrap();
    let offset: usize = report.lines().take(bad_line).map(|l| l.len() + 1).sum();
    let bad = report.replacen("{{{bt:2:0x", "{{{bt:2:", 1);
    let (out, err, file) = ours(
        &dir,
        &["--debug-file-directory", tree.to_str().unwrap()],
        &bad,
    );
    assert!(
        err.contains(&format!(
            "{}:{}: offset {offset}: address",
            file.display(),
            bad_line + 1
        )),
        "{err}"
    );
    // The line stays as it was; the frames around it are symbolized.
    let kept = bad.lines().nth(bad_line).unwrap();
    assert!(out.lines().any(|l| l == kept), "{out}");
    let names = outer_functions(&out);
    assert!(names.contains(&"write_through_null".to_string()), "{out}");
    assert!(names.contains(&"c_level_1".to_string()), "{out}");
    assert!(!names.contains(&"c_level_2".to_string()), "{out}");
}

#[test]
fn a_malformed_sym_record_is_named_by_file_and_offset_and_the_rest_of_the_file_used() {
    let (bin, report) = crash_report();
    let dir = workdir("sym");
    let store = dir.join("store");
    let ok = Command::new("dump_syms")
        .arg("--inlines")
        .arg("-s")
        .arg(&store)
        .arg(&bin)
        .status()
        .expect("dump_syms (scripts/test.sh installs it)");
    assert!(ok.success());
    let sym = walk(&store)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "sym"))
        .unwrap();
    let text = std::fs::read_to_string(&sym).unwrap();
    // Spoil the FUNC record of c_level_2: its address is no number.
    let mut start = 0;
    for l in text.split_inclusive('\n') {
        if l.starts_with("FUNC ") && l.trim_end().ends_with(" c_level_2") {
            break;
        }
        start += l.len();
    }
    let end = start + text[start..].find('\n').unwrap();
    let fields: Vec<&str> = text[start..end].split(' ').collect();
    let spoiled = format!(
        "{}FUNC zz {}{}",
        &text[..start],
        fields[2..].join(" "),
        &text[end..]
    );
    std::fs::write(&sym, &spoiled).unwrap();
    let (out, err, _) = ours(&dir, &["--breakpad", store.to_str().unwrap()], &report);
    assert!(
        err.contains(&format!("{}: offset {start}: ", sym.display())),
        "{err}"
    );
    let names = outer_functions(&out);
    // The lines of c_level_2 belonged to the spoiled record and went with it.
    assert!(!names.contains(&"c_level_2".to_string()), "{out}");
    for f in [
        "write_through_null",
        "rust_callback",
        "c_level_1",
        "rust_entry",
    ] {
        assert!(names.contains(&f.to_string()), "{f}: {out}");
    }
}

#[test]
fn a_truncated_gsym_is_named_by_file_and_offset_and_other_modules_still_symbolize() {
    let (bin, report) = crash_report();
    let dir = workdir("gsym");
    let gs = dir.join("gsym");
    std::fs::create_dir_all(&gs).unwrap();
    let good = gs.join("crash.gsym");
    assert!(Command::new("llvm-gsymutil-19")
        .arg("--convert")
        .arg(&bin)
        .arg("-o")
        .arg(&good)
        .stdout(Stdio::null())
        .status()
        .expect("llvm-gsymutil-19")
        .success());
    // The same GSYM, cut short after its header, under the libc's build ID:
    // it claims libc's frames, and cannot give them.
    let mut cut = std::fs::read(&good).unwrap();
    cut.truncate(200);
    let libc_id = report
        .lines()
        .find(|l| l.contains("/libc.so.6:elf:"))
        .and_then(|l| l.rsplit(':').next())
        .map(|id| id.trim_end_matches("}}}").to_string())
        .unwrap();
    let id: Vec<u8> = (0..libc_id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&libc_id[i..i + 2], 16).unwrap())
        .collect();
    cut[7] = id.len() as u8;
    cut[28..28 + id.len()].copy_from_slice(&id);
    let bad = gs.join("libc.gsym");
    std::fs::File::create(&bad)
        .unwrap()
        .write_all(&cut)
        .unwrap();
    let (out, err, _) = ours(&dir, &["--gsym", gs.to_str().unwrap()], &report);
    assert!(
        err.contains(&format!("{}: offset ", bad.display())) && err.contains("truncated"),
        "{err}"
    );
    assert!(
        err.contains("no symbols for /lib/x86_64-linux-gnu/libc.so.6"),
        "{err}"
    );
    let names = outer_functions(&out);
    assert!(names.contains(&"write_through_null".to_string()), "{out}");
    assert!(
        out.contains(" (/lib/x86_64-linux-gnu/libc.so.6+0x"),
        "{out}"
    );
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_bad_command_line_prints_the_usage_and_fails_with_status_2() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_stackmark-symbolize"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for args in [&["--sym", "x"][..], &["--gsym"], &["a.txt", "b.txt"]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("usage: stackmark-symbolize"),
            "{args:?}"
        );
    }
    let help = run(&["--help"]);
    assert!(
        help.status.success() && String::from_utf8_lossy(&help.stdout).contains("--breakpad DIR")
    );
    let missing = run(&["/nonexistent/report.txt"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/report.txt"));
}

#[test]
fn options_take_their_directory_after_an_equals_sign_too() {
    // Text without markup comes back as it was, whatever the sources.
    let dir = workdir("equals");
    let text = "no markup here\n{{{unknown:element}}} stays\n";
    let (out, err, _) = ours(
        &dir,
        &[
            &format!("--gsym={}", dir.display()),
            "--breakpad=/nonexistent",
        ],
        text,
    );
    assert_eq!(out, text, "{err}");
    assert!(err.is_empty(), "{err}");
}
