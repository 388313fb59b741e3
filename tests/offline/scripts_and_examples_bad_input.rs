//! The scripts and the example tools on input they cannot use: each must
//! fail with a message of its own and a non-zero status, never with a Rust
//! panic or a success.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example(name: &str) -> PathBuf {
    common::examples_dir().join(name)
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// `out` failed cleanly: a non-zero status other than a panic's 101, and no
/// panic message.
fn failed_cleanly(what: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked at"),
        "{what}: a Rust panic instead of an error message:\n{err}"
    );
    assert!(
        !out.status.success() && out.status.code() != Some(101),
        "{what}: {:?}\n{err}",
        out.status
    );
    assert!(!err.trim().is_empty(), "{what}: no message");
}

/// Runs a binary built for the target (under qemu-aarch64 on AArch64).
fn run(bin: &Path, args: &[&str]) -> Output {
    common::run_target_binary(bin, args, &[("RUST_BACKTRACE", "0")])
}

/// A bare `__unwind_info` section with one regular page holding one entry
/// with `encoding`.
fn unwind_info_with(encoding: u32) -> Vec<u8> {
    // The header: version, common encodings, personalities, and a
    // first-level index of 2 entries at 28.
    let header = [1, 28, 0, 28, 0, 28, 2];
    // The first-level index (one page at 52) and its sentinel.
    let index = [0x1000, 52, 52, 0x2000, 0, 52];
    // A regular page: its kind, entries at +8, one entry; then the entry.
    let page = [2, 8 | (1 << 16), 0x1000, encoding];
    let words: Vec<u32> = [&header[..], &index, &page].concat();
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn unwind_info_dump_describes_every_rbp_frame_register_field_without_panicking() {
    let dir = common::workdir("unwind-info-regs");
    // x86_64 RBP frame (mode 1) whose first register field is 6 or 7: the
    // reader accepts the section, the dump must print it (or refuse it).
    for reg in [6u32, 7] {
        let path = dir.join(format!("reg{reg}.bin"));
        std::fs::write(&path, unwind_info_with(0x0100_0000 | reg)).unwrap();
        let out = run(
            &example("unwind_info_dump"),
            &["--raw", path.to_str().unwrap(), "--arch", "x86_64"],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked at"), "register field {reg}:\n{err}");
        let text = String::from_utf8_lossy(&out.stdout);
        let want = if reg == 6 {
            "[rbp]"
        } else {
            "[invalid register 7]"
        };
        assert!(text.contains(want), "register field {reg}: {text}");
    }
}

#[test]
fn unwind_info_dump_reports_unusable_files_without_panicking() {
    let dir = common::workdir("unwind-info-bad");
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let elf = std::env::current_exe().unwrap();
    let missing = dir.join("missing");
    let bin = example("unwind_info_dump");
    for (what, args) in [
        ("no arguments", vec![]),
        ("a missing file", vec![missing.to_str().unwrap()]),
        ("a directory", vec![dir.to_str().unwrap()]),
        ("an empty file", vec![empty.to_str().unwrap()]),
        ("an ELF file", vec![elf.to_str().unwrap()]),
        (
            "--raw without --arch",
            vec!["--raw", empty.to_str().unwrap()],
        ),
        (
            "--raw on a missing file",
            vec!["--raw", missing.to_str().unwrap(), "--arch", "x86_64"],
        ),
    ] {
        failed_cleanly(&format!("unwind_info_dump on {what}"), &run(&bin, &args));
    }
}

#[test]
fn unwind_info_dump_names_a_universal_file_as_such() {
    let dir = common::workdir("unwind-info-fat");
    let macho = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/macho");
    let fat = dir.join("fat.dylib");
    let lipo = Command::new("llvm-lipo-19")
        .arg("-create")
        .arg(macho.join("encodings-nofp-x86_64.dylib"))
        .arg(macho.join("encodings-nofp-arm64.dylib"))
        .arg("-output")
        .arg(&fat)
        .output()
        .expect("llvm-lipo-19 (Debian's llvm-19)");
    assert!(lipo.status.success(), "{lipo:?}");
    let out = run(&example("unwind_info_dump"), &[fat.to_str().unwrap()]);
    failed_cleanly("unwind_info_dump on a universal file", &out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("universal"), "{err}");
}

#[test]
fn the_crash_example_refuses_an_unknown_mode_without_panicking() {
    failed_cleanly(
        "crash no-such-mode",
        &run(&example("crash"), &["no-such-mode"]),
    );
}

#[test]
fn the_panic_example_refuses_an_unknown_mode_without_a_panic_report() {
    let out = run(&example("panic"), &["no-such-mode"]);
    failed_cleanly("panic no-such-mode", &out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("{{{"),
        "a markup report for a usage error: {err}"
    );
}

#[test]
fn the_profile_example_refuses_bad_arguments_without_panicking() {
    let bin = example("profile");
    for args in [
        &["-1"][..],
        &["nan"],
        &["0.1", "0"],
        &["0.1", "20000"],
        &["abc"],
    ] {
        failed_cleanly(&format!("profile {args:?}"), &run(&bin, args));
    }
}

#[test]
fn symbolize_sh_fails_on_a_report_it_cannot_read() {
    let dir = common::workdir("symbolize-missing");
    for report in [dir.join("no-such-report.txt"), dir.clone()] {
        let out = Command::new("bash")
            .arg(script("symbolize.sh"))
            .arg(&report)
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "symbolize.sh {} succeeded:\n{}",
            report.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn symbolize_sh_fails_on_a_binary_directory_that_does_not_exist() {
    let dir = common::workdir("symbolize-no-dir");
    let report = dir.join("report.txt");
    std::fs::write(&report, "{{{reset}}}\n").unwrap();
    let out = Command::new("bash")
        .arg(script("symbolize.sh"))
        .arg(&report)
        .arg(dir.join("no-such-target"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("no-such-target"), "{err}");
}

#[test]
fn symbolize_sh_names_the_frames_of_a_report_read_from_a_pipe() {
    // The crash example's report, named by process substitution (a pipe,
    // not a regular file), with the examples' directory as the binaries.
    let dir = common::workdir("symbolize-pipe");
    let crash = common::run_target_binary(&example("crash"), &[], &[]);
    let report = dir.join("report.txt");
    std::fs::write(&report, &crash.stderr).unwrap();
    let cmd = format!(
        "bash {} <(cat {}) {}",
        script("symbolize.sh").display(),
        report.display(),
        common::examples_dir().display()
    );
    let out = Command::new("bash").arg("-c").arg(&cmd).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{cmd}: {out:?}");
    for name in ["write_through_null", "c_level_2", "rust_entry"] {
        assert!(text.contains(name), "no {name} in {text}");
    }
}
