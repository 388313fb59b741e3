//! End to end: the crash and panic examples run as child processes; their
//! standard error goes through the real `llvm-symbolizer --filter-markup`
//! (LLVM 16 and 19) with a `.build-id` tree, and the symbolized trace must
//! name the call chain in order with the faulting line.
//!
//! Linux only: the crash example's call chain runs through the Linux-only C
//! fixtures (elsewhere it is an empty program).

#![cfg(target_os = "linux")]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs an example binary; under a cross runner the child needs qemu too.
fn run_example(name: &str, args: &[&str]) -> Output {
    let bin = common::examples_dir().join(name);
    assert!(bin.exists(), "{} is built by cargo test", bin.display());
    common::run_target_binary(&bin, args, &[])
}

fn build_id_tree(files: &[&Path]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stackmark-buildid-{}", std::process::id()));
    common::build_id_tree(&dir, files);
    dir
}

/// The function of each symbolized frame `#N` (the outermost entry when
/// inlined frames `#N.M` precede it), in order.
fn frame_functions(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix('#')?;
            let (num, rest) = rest.split_once(char::is_whitespace)?;
            if num.contains('.') || num.parse::<u32>().is_err() {
                return None;
            }
            let mut words = rest.split_whitespace();
            let _addr = words.next()?;
            let func = words.next()?.to_string();
            let loc = words.next().unwrap_or("").to_string();
            Some((func, loc))
        })
        .collect()
}

fn line_of(marker: &str, file: &str) -> usize {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    src.lines().position(|l| l.contains(marker)).unwrap() + 1
}

/// A build-ID tree holding the example and every module its report names.
fn tree_for(bin: &str, report: &[u8]) -> PathBuf {
    let mut files = common::module_paths(report);
    files.push(common::examples_dir().join(bin));
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    build_id_tree(&refs)
}

fn check_symbolized(out: &Output, bin: &str, chain: &[&str], site: (&str, &str)) {
    let stderr = &out.stderr;
    let tree = tree_for(bin, stderr);
    let want_line = format!("{}:{}:", site.1, line_of(site.0, site.1));
    for tool in ["llvm-symbolizer-16", "llvm-symbolizer-19"] {
        let (text, errors) = common::symbolize(tool, &tree, stderr);
        assert!(
            !errors.to_lowercase().contains("error") && !text.contains("error:"),
            "{tool} reported errors: {errors}\n{text}"
        );
        let frames = frame_functions(&text);
        let names: Vec<&str> = frames.iter().map(|(f, _)| f.as_str()).collect();
        let first = names
            .iter()
            .position(|n| *n == chain[0])
            .unwrap_or_else(|| panic!("{tool}: no {} in {names:?}\n{text}", chain[0]));
        let got: Vec<&str> = names[first..].iter().take(chain.len()).copied().collect();
        let matches = got.len() == chain.len()
            && got
                .iter()
                .zip(chain)
                .all(|(g, w)| g == w || g.starts_with(&format!("{w}::h")));
        assert!(matches, "{tool}: {got:?} != {chain:?}\n{text}");
        assert!(
            frames[first].1.ends_with(&want_line[..want_line.len() - 1])
                || frames[first].1.contains(&want_line),
            "{tool}: frame {} at {}, want {want_line}\n{text}",
            chain[0],
            frames[first].1
        );
    }
}

#[test]
fn crash_report_symbolizes_to_the_call_chain_and_faulting_line() {
    let out = run_example("crash", &["segv"]);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("stackmark: fatal signal 11 (SIGSEGV)"),
        "{text}"
    );
    assert!(text.contains("fault address 0x0000000000000000"), "{text}");
    assert!(
        text.contains("{{{bt:0:0x") && text.contains(":pc}}} context"),
        "{text}"
    );
    check_symbolized(
        &out,
        "crash",
        &[
            "write_through_null",
            "rust_callback",
            "c_level_2",
            "c_level_1",
            "rust_entry",
            "crash::main",
        ],
        ("CRASH-SITE", "examples/crash.rs"),
    );
}

#[test]
fn a_call_through_a_wild_pointer_names_the_function_that_made_it() {
    // pc 0x10 is in no module; the frame pointer still holds the caller's
    // frame, so only the return address the call left names it.
    let out = run_example("crash", &["wild-call"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    assert!(
        text.contains("#0 0x0000000000000010 ?? context\n"),
        "{text}"
    );
    assert!(
        text.contains("{{{bt:1:0x") && text.contains(":ra}}} entry"),
        "{text}"
    );
    check_symbolized(
        &out,
        "crash",
        &["call_through_wild_pointer", "crash::main"],
        ("WILD-CALL-SITE", "examples/crash.rs"),
    );
}

/// Where the example's entry point (`_start`) was loaded in the run whose
/// report is `text`: its `e_entry`, placed by module 0's first mapping.
fn entry_in_run(bin: &str, text: &str) -> u64 {
    use object::Object;
    let data = std::fs::read(common::examples_dir().join(bin)).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let first = text
        .lines()
        .find_map(|l| l.strip_prefix("{{{mmap:"))
        .filter(|l| l.contains(":load:0:"))
        .expect("module 0 is mapped first");
    let fields: Vec<&str> = first.trim_end_matches("}}}").split(':').collect();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    hex(fields[0]) - hex(fields[5]) + file.entry()
}

/// glibc's start code keeps the entry point, which the dynamic linker left
/// in a callee-saved register, on the stack: a scan must not report the
/// function linked before `_start` as a caller because of it.
#[test]
fn the_programs_entry_point_is_never_reported_as_a_frame() {
    let out = run_example("crash", &["segv"]);
    let text = String::from_utf8_lossy(&out.stderr);
    let entry = entry_in_run("crash", &text);
    let frames: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("{{{bt:"))
        .filter_map(|l| l.split(':').nth(1))
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
        .collect();
    assert!(frames.len() > 6, "{text}");
    assert!(!frames.contains(&entry), "entry {entry:#x} in {text}");
}

#[test]
fn panic_report_symbolizes_to_the_panicking_function_and_main() {
    let out = run_example("panic", &["main"]);
    let text = String::from_utf8_lossy(&out.stderr);
    // A panic escaping an extern "C" function aborts the process.
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{text}");
    assert!(text.contains("stackmark: panic in thread"), "{text}");
    assert!(text.contains("(main)"), "thread name: {text}");
    assert!(
        text.contains("stackmark: message: the example panics with x = 42"),
        "{text}"
    );
    let line = line_of("PANIC-SITE", "examples/panic.rs");
    assert!(
        text.contains(&format!("stackmark: at examples/panic.rs:{line}:")),
        "{text}"
    );
    let tree = tree_for("panic", &out.stderr);
    for tool in ["llvm-symbolizer-16", "llvm-symbolizer-19"] {
        let (sym, errors) = common::symbolize(tool, &tree, &out.stderr);
        assert!(!errors.to_lowercase().contains("error"), "{tool}: {errors}");
        let names: Vec<String> = frame_functions(&sym).into_iter().map(|(f, _)| f).collect();
        let p = names.iter().position(|n| n == "panicking_function");
        let m = names.iter().position(|n| n.starts_with("panic::main"));
        assert!(
            matches!((p, m), (Some(p), Some(m)) if p < m),
            "{tool}: {names:?}\n{sym}"
        );
    }
}

#[test]
fn a_panic_hook_installed_twice_reports_once() {
    let out = run_example("panic", &["twice"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("stackmark: panic in ").count(), 1, "{text}");
    assert_eq!(
        reports_from(&text, "stackmark: panic in ").len(),
        1,
        "{text}"
    );
    // The second install chains: the panic reaches the hook from before
    // the first (Rust's default) once, after the report. It stopped at the
    // first install, which did not chain.
    assert_eq!(
        text.matches(" panicked at examples/panic.rs").count(),
        1,
        "{text}"
    );
    let report = text.find("stackmark: panic in ").unwrap();
    assert!(
        text.find(" panicked at examples/panic.rs").unwrap() > report,
        "{text}"
    );
}

/// One whole report: from its header line to its trailer, with nothing of
/// another report in between.
fn reports(text: &str) -> Vec<Vec<&str>> {
    reports_from(text, "stackmark: fatal signal")
}

/// [`reports`] whose header line starts with `header`.
fn reports_from<'t>(text: &'t str, header: &str) -> Vec<Vec<&'t str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    let mut open = false;
    for l in text.lines() {
        if l.starts_with(header) {
            assert!(!open, "a report started inside another:\n{text}");
            open = true;
            out.push(vec![l]);
        } else if open {
            out.last_mut().unwrap().push(l);
            if l.starts_with("stackmark: end of report") {
                open = false;
            }
        }
    }
    assert!(!open, "a report was cut off:\n{text}");
    out
}

/// The crashing thread's lines of a report: up to the first other
/// thread's section (`stackmark: thread TID "NAME" state S...`).
fn crashing_thread<'r>(report: &'r [&'r str]) -> impl Iterator<Item = &'r &'r str> {
    report
        .iter()
        .take_while(|l| !(l.starts_with("stackmark: thread ") && l.contains("\" state ")))
}

#[test]
fn every_handled_signal_gives_one_whole_report_and_the_original_death() {
    for (mode, sig) in [
        ("segv", libc::SIGSEGV),
        ("bus", libc::SIGBUS),
        ("ill", libc::SIGILL),
        ("fpe", libc::SIGFPE),
        ("abrt", libc::SIGABRT),
        ("trap", libc::SIGTRAP),
    ] {
        let out = run_example("crash", &[mode]);
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(sig), "{mode}: {text}");
        let r = reports(&text);
        assert_eq!(r.len(), 1, "{mode}: {text}");
        assert!(
            r[0][0].contains(&format!("fatal signal {sig} ")),
            "{mode}: {text}"
        );
        assert!(
            r[0].iter().any(|l| l.starts_with("{{{bt:0:")),
            "{mode}: {text}"
        );
        // A fault gives its address; abort sends the signal, whose siginfo
        // names the sender instead.
        let origin = match mode {
            "segv" => Some(", fault address 0x"),
            "abrt" => Some(", sent by pid "),
            _ => None,
        };
        if let Some(origin) = origin {
            assert!(r[0][0].contains(origin), "{mode}: {}", r[0][0]);
        }
        // Frame 0 is the faulting instruction (`:pc`), except after
        // x86_64's `int3`, whose pc is already past it (`:ra`).
        let bt0 = r[0].iter().find(|l| l.starts_with("{{{bt:0:")).unwrap();
        let past = cfg!(target_arch = "x86_64") && mode == "trap";
        let kind = if past { ":ra}}}" } else { ":pc}}}" };
        assert!(bt0.contains(kind), "{mode}: {bt0}");
    }
}

/// x86_64 only: AArch64 has no general-protection fault (a non-canonical
/// address is a translation fault with an address).
#[cfg(target_arch = "x86_64")]
#[test]
fn a_general_protection_fault_names_no_fault_address() {
    let out = run_example("crash", &["gp"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    let r = reports(&text);
    assert_eq!(r.len(), 1, "{text}");
    assert!(
        r[0][0].contains("code 128, no fault address (SI_KERNEL"),
        "{}",
        r[0][0]
    );
    assert!(r[0].iter().any(|l| l.starts_with("{{{bt:0:")), "{text}");
}

#[test]
fn a_later_install_without_a_descriptor_keeps_the_one_chosen_before() {
    let out = run_example("crash", &["stdout-then-default"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{stderr}");
    assert_eq!(reports(&stdout).len(), 1, "{stdout}\n--\n{stderr}");
    assert!(reports(&stderr).is_empty(), "{stderr}");
}

#[test]
fn a_stack_pointer_in_the_gap_the_stack_cannot_grow_into_still_gives_a_whole_report() {
    // The main thread's registered bounds reach down to a mapping below the
    // stack; the kernel does not grow the stack into the gap above it, and
    // a crash with the stack and frame pointers there used to fault the
    // walk inside the report.
    let out = run_example("crash", &["gap-sp"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(reports(&text).len(), 1, "{text}");
    assert_eq!(out.status.signal(), Some(libc::SIGILL), "{text}");
}

#[test]
fn a_handler_installed_before_ours_gets_the_faults_own_siginfo() {
    // The previous SIGSEGV handler exits 42 only if it sees SEGV_MAPERR at
    // the faulting address: after the report the fault recurs with its own
    // siginfo, rather than the signal being sent again as by a process
    // (code SI_TKILL, the sender in place of the address).
    let out = run_example("crash", &["chain"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(reports(&text).len(), 1, "{text}");
    assert_eq!(out.status.code(), Some(42), "{:?}: {text}", out.status);
}

#[test]
fn a_sampled_thread_that_aborts_dies_of_sigabrt_with_one_report() {
    // SIGPROF arriving during the handler's waits used to overflow the
    // thread's 8 KiB alternate stack: a second report, and death by SIGSEGV.
    for _ in 0..3 {
        let out = run_example("crash", &["sampled-abrt"]);
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{text}");
        assert_eq!(reports(&text).len(), 1, "{text}");
    }
}

#[test]
fn stack_overflows_are_reported_on_the_main_thread_and_on_a_spawned_one() {
    for mode in ["overflow", "thread-overflow"] {
        let out = run_example("crash", &[mode]);
        let text = String::from_utf8_lossy(&out.stderr);
        // Rust's own handler, restored after the report, gets the fault's
        // siginfo, knows its guard page, says so and aborts, as without us.
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{mode}: {text}");
        assert!(text.contains("has overflowed its stack"), "{mode}: {text}");
        let r = reports(&text);
        assert_eq!(r.len(), 1, "{mode}: {text}");
        // The recursion fills the report up to its frame limit, and the
        // report says it goes on. (The main thread of `thread-overflow`,
        // waiting in `join`, has a section of its own after it.)
        let frames = crashing_thread(&r[0])
            .filter(|l| l.starts_with("{{{bt:"))
            .count();
        assert_eq!(frames, stackmark::crash::MAX_CRASH_FRAMES, "{mode}: {text}");
        assert_eq!(
            r[0].last().unwrap(),
            &format!(
                "stackmark: end of report ({frames} frames; the stack goes on: more frames not shown)"
            ),
            "{mode}"
        );
    }
}

#[test]
fn a_report_that_shows_every_frame_says_nothing_more() {
    let out = run_example("crash", &["segv"]);
    let text = String::from_utf8_lossy(&out.stderr);
    let r = reports(&text);
    let frames = r[0].iter().filter(|l| l.starts_with("{{{bt:")).count();
    assert_eq!(
        r[0].last().unwrap(),
        &format!("stackmark: end of report ({frames} frames)"),
        "{text}"
    );
}

#[test]
fn a_panic_past_the_frame_limit_says_the_stack_goes_on() {
    let out = run_example("panic", &["deep"]);
    let text = String::from_utf8_lossy(&out.stderr);
    let r = reports_from(&text, "stackmark: panic in");
    assert_eq!(r.len(), 1, "{text}");
    let frames = r[0].iter().filter(|l| l.starts_with("{{{bt:")).count();
    assert_eq!(frames, stackmark::panic_hook::MAX_PANIC_FRAMES, "{text}");
    assert!(
        r[0].last()
            .unwrap()
            .ends_with("frames; the stack goes on: more frames not shown)"),
        "{text}"
    );
}

#[test]
fn threads_panicking_at_once_give_whole_reports_that_symbolize() {
    let out = run_example("panic", &["threads"]);
    let text = String::from_utf8_lossy(&out.stderr);
    // The process goes on after its threads' panics.
    assert!(out.status.success(), "{:?}: {text}", out.status);
    let r = reports_from(&text, "stackmark: panic in");
    assert_eq!(r.len(), 4, "{text}");
    for report in &r {
        assert_eq!(report.iter().filter(|l| **l == "{{{reset}}}").count(), 1);
        // The message is plain text: its `:`, braces and lines as they
        // were, but no `{{{` that would open a markup element.
        let i = report[0]
            .split("(worker:")
            .nth(1)
            .expect("the thread's name");
        let i = &i[..1];
        assert!(
            report.contains(&&*format!(
                "stackmark: message: worker {i} failed: Err(ParseIntError {{ kind: InvalidDigit }})"
            )),
            "{report:#?}"
        );
        assert!(
            report.contains(&"stackmark: message: second line {{(reset}}}"),
            "{report:#?}"
        );
    }
    let tree = tree_for("panic", &out.stderr);
    for tool in ["llvm-symbolizer-16", "llvm-symbolizer-19"] {
        let (sym, errors) = common::symbolize(tool, &tree, &out.stderr);
        assert!(errors.trim().is_empty(), "{tool}: {errors}");
        let names: Vec<String> = frame_functions(&sym).into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            names
                .iter()
                .filter(|n| n.starts_with("stackmark::panic_hook::report"))
                .count(),
            4,
            "{tool}: {names:?}\n{sym}"
        );
    }
}

/// Runs an example with its standard error a pipe whose read end is
/// closed, as in `prog 2>&1 | head` after `head` has gone.
fn run_into_a_closed_pipe(name: &str, args: &[&str]) -> std::process::ExitStatus {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are fresh and owned here alone.
    let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(rx);
    let bin = common::examples_dir().join(name);
    let mut cmd = if cfg!(target_arch = "aarch64") {
        let mut c = std::process::Command::new("qemu-aarch64");
        c.args(["-L", "/usr/aarch64-linux-gnu"]).arg(&bin);
        c
    } else {
        std::process::Command::new(&bin)
    };
    cmd.args(args).stderr(tx).status().unwrap()
}

#[test]
fn a_report_into_a_pipe_nobody_reads_leaves_the_process_to_die_as_it_would_have() {
    // With SIGPIPE at its default action, the report's first write would
    // kill the process with SIGPIPE once the handler returned: no core
    // dump, the wrong status, and no earlier handler run.
    let status = run_into_a_closed_pipe("crash", &["sigpipe-segv"]);
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
    // A thread's panic report: the process goes on and ends well.
    let status = run_into_a_closed_pipe("panic", &["sigpipe"]);
    assert!(status.success(), "{status:?}");
}

#[test]
fn eight_threads_crashing_at_once_give_whole_separate_reports() {
    let out = run_example("crash", &["threads"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    let r = reports(&text);
    assert!(!r.is_empty() && r.len() <= 8, "{text}");
    for report in &r {
        assert!(
            report.iter().any(|l| l.contains("\"crasher-")),
            "{report:#?}"
        );
        assert!(
            report
                .iter()
                .filter(|l| l.starts_with("{{{reset}}}"))
                .count()
                == 1
        );
    }
}

#[test]
fn a_fault_inside_the_handler_ends_the_process_instead_of_looping() {
    let start = std::time::Instant::now();
    let out = run_example("crash", &["nested"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    assert_eq!(text.matches("stackmark: fatal signal").count(), 1, "{text}");
    assert!(start.elapsed().as_secs() < 30);
}

#[test]
fn crash_reports_never_allocate() {
    // The example's allocator exits with 99 if called during a report.
    let out = run_example("crash", &["segv"]);
    assert_ne!(
        out.status.code(),
        Some(99),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{:?}", out.status);
}
