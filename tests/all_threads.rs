//! Every thread in the crash report, and dumps on demand, end to end: the
//! threads example runs as a child process (under qemu-user for AArch64),
//! its report goes through the real `llvm-symbolizer --filter-markup`
//! (LLVM 16 and 19), and each thread's section must name the test's
//! function that thread waits in and reach the thread's start. The
//! example's allocator ends the process with status 99 if anything, on any
//! thread, allocates while a report or dump runs.

#![cfg(target_os = "linux")]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// The deadline the crash runs give the dump: long enough for qemu-user,
/// and a bound the whole run must stay under.
const DEADLINE_MS: u64 = 3000;

/// Whether the example runs under qemu-user (the AArch64 suite does).
const QEMU: bool = cfg!(target_arch = "aarch64");

fn run(mode: &str) -> (Output, Duration) {
    run_with(mode, &[])
}

/// [`run`] with more of the environment.
fn run_with(mode: &str, env: &[(&str, &str)]) -> (Output, Duration) {
    let bin = common::examples_dir().join("threads");
    assert!(bin.exists(), "{} is built by cargo test", bin.display());
    let start = Instant::now();
    let deadline = DEADLINE_MS.to_string();
    let mut envs = vec![("STACKMARK_DEADLINE_MS", deadline.as_str())];
    envs.extend_from_slice(env);
    let out = common::run_target_binary(&bin, &[mode], &envs);
    (out, start.elapsed())
}

/// The thread each name prefix of the example stands for, and the test's
/// function its stack must name (`None`: it blocks every signal).
const KINDS: [(&str, Option<&str>); 7] = [
    ("spin-", Some("spin_in_rust")),
    ("mutex-", Some("wait_on_mutex")),
    ("condvar-", Some("wait_on_condvar")),
    ("read-", Some("block_in_read")),
    ("sleep-", Some("sleep_in_nanosleep")),
    ("sframe-", Some("c_hot_leaf")),
    ("blocked-", None),
];

/// One thread's section of a symbolized report: its header line and the
/// functions of its frames, innermost first.
#[derive(Debug)]
struct Section {
    header: String,
    functions: Vec<String>,
}

/// The sections of the symbolized report: the crashing thread's first.
fn sections(symbolized: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for l in symbolized.lines() {
        if l.starts_with("stackmark: thread ") {
            out.push(Section {
                header: l.to_string(),
                functions: Vec::new(),
            });
        } else if let Some(s) = out.last_mut() {
            // `#N 0xADDR FUNCTION FILE:LINE`; inlined frames `#N.M` first.
            let Some(rest) = l.trim_start().strip_prefix('#') else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let num = words.next().unwrap_or("");
            if num.contains('.') || num.parse::<u32>().is_err() {
                continue;
            }
            let _addr = words.next();
            if let Some(f) = words.next() {
                s.functions.push(f.to_string());
            }
        }
    }
    out
}

/// A `.build-id` tree for the report's modules: a module's detached debug
/// file where the system has one (Debian's `libc6-dbg`, which names
/// glibc's `start_thread` and `clone3`), else the module itself.
fn tree_for(report: &[u8]) -> PathBuf {
    let debug = |id: &str| {
        let p = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        ));
        p.exists().then_some(p)
    };
    let ids: Vec<String> = String::from_utf8_lossy(report)
        .lines()
        .filter_map(|l| l.strip_prefix("{{{module:"))
        .filter_map(|l| l.trim_end_matches("}}}").rsplit(':').next())
        .filter(|id| id.len() > 2)
        .map(str::to_string)
        .collect();
    let mut files: Vec<PathBuf> = common::module_paths(report)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            ids.iter()
                .filter(|id| contains_id(&bytes, id))
                .find_map(|id| debug(id))
                .unwrap_or(p)
        })
        .collect();
    files.push(common::examples_dir().join("threads"));
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let dir = common::workdir("all-threads-tree");
    common::build_id_tree(&dir, &refs);
    dir
}

/// Whether `bytes` hold the build ID `id` (hex).
fn contains_id(bytes: &[u8], id: &str) -> bool {
    let raw: Vec<u8> = (0..id.len() / 2)
        .filter_map(|i| u8::from_str_radix(&id[2 * i..2 * i + 2], 16).ok())
        .collect();
    bytes.windows(raw.len()).any(|w| w == raw)
}

/// Whether a symbolized function is the thread's start.
/// Without debug information for the target's glibc (AArch64: Debian has
/// no `libc6-dbg` for the cross sysroot), a frame in `libc.so.6` counts.
fn thread_start(f: &str) -> bool {
    f == "start_thread"
        || f.ends_with("clone3")
        || (cfg!(target_arch = "aarch64") && f.contains("libc.so.6+"))
}

#[test]
fn a_crash_report_shows_every_thread_from_where_it_was_interrupted() {
    let (out, took) = run("crash");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(99), "allocated: {text}");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    // One report, one context for every thread.
    assert_eq!(text.matches("stackmark: fatal signal").count(), 1, "{text}");
    assert_eq!(text.matches("{{{reset}}}").count(), 1, "{text}");
    // Under qemu-user, the emulator's own thread is listed too (it blocks
    // every signal).
    assert!(
        text.contains("stackmark: 16 threads, 14 with a stack, 2 without")
            || (QEMU && text.contains("stackmark: 17 threads, 14 with a stack, 3 without")),
        "the count line: {text}"
    );
    // Every thread answered or was known not to: the dump never waited
    // out its deadline.
    assert!(
        took < Duration::from_millis(DEADLINE_MS),
        "took {took:?}: {text}"
    );
    let tree = tree_for(&out.stderr);
    for tool in ["llvm-symbolizer-16", "llvm-symbolizer-19"] {
        let (sym, errors) = common::symbolize(tool, &tree, &out.stderr);
        assert!(errors.trim().is_empty(), "{tool}: {errors}\n{sym}");
        let secs = sections(&sym);
        assert!(
            secs.len() == 16 || (QEMU && secs.len() == 17),
            "{tool}: {secs:#?}\n{sym}"
        );
        // The crashing thread first, at the crash.
        assert!(
            secs[0].functions.first().map(String::as_str) == Some("write_through_null"),
            "{tool}: {:#?}",
            secs[0]
        );
        let mut seen = [0; KINDS.len()];
        for s in &secs[1..] {
            let name = s.header.split('"').nth(1).unwrap_or("");
            if QEMU && name.starts_with("qemu-") && s.functions.is_empty() {
                continue;
            }
            let (k, (_, want)) = KINDS
                .iter()
                .enumerate()
                .find(|(_, (prefix, _))| name.starts_with(prefix))
                .unwrap_or_else(|| panic!("{tool}: an unexpected thread: {s:#?}"));
            seen[k] += 1;
            match want {
                Some(f) => {
                    assert!(
                        s.functions.iter().any(|g| g == f),
                        "{tool}: no {f} in {s:#?}"
                    );
                    assert!(
                        s.functions.last().is_some_and(|g| thread_start(g)),
                        "{tool}: does not reach the thread's start: {s:#?}"
                    );
                }
                None => {
                    assert!(s.functions.is_empty(), "{tool}: {s:#?}");
                    assert!(
                        s.header.ends_with("no stack: it blocks the signal"),
                        "{s:#?}"
                    );
                }
            }
        }
        assert_eq!(seen, [3, 2, 2, 2, 2, 2, 2], "{tool}: {secs:#?}");
    }
}

#[test]
fn with_the_other_threads_turned_off_the_report_shows_the_crashing_thread_only() {
    let (out, _) = run("off");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    assert_eq!(text.matches("stackmark: thread ").count(), 1, "{text}");
    assert!(!text.contains(" threads, "), "{text}");
    assert!(text.contains("stackmark: end of report ("), "{text}");
}

/// Runs a dump mode: 100 dumps while eight workers count, sleep and use
/// pipes; the example exits 0 only if every worker kept going and no
/// system call's result was lost.
fn check_dumps(mode: &str) {
    let (out, _) = run(mode);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{mode}: {:?}\n{stderr}\n{}",
        out.status,
        stdout.lines().last().unwrap_or("")
    );
    assert_eq!(stdout.matches("stackmark: end of dump (").count(), 100);
    assert!(stdout.contains("0 stalls, 0 lost results"), "{stdout}");
    // Each dump shows the eight workers with their stacks.
    let first: Vec<&str> = stdout
        .lines()
        .take_while(|l| !l.starts_with("stackmark: end of dump"))
        .collect();
    let workers = first
        .iter()
        .filter(|l| l.starts_with("stackmark: thread ") && l.contains("\"worker-"))
        .filter(|l| l.contains(" frames"))
        .count();
    assert_eq!(workers, 8, "{first:#?}");
}

#[test]
fn a_hundred_dumps_on_demand_leave_every_worker_going_and_every_result_whole() {
    check_dumps("dump");
}

#[test]
fn a_hundred_dumps_on_sigquit_leave_every_worker_going_and_every_result_whole() {
    check_dumps("quit");
}

#[test]
fn a_crash_while_a_dump_is_under_way_waits_for_it_then_reports_and_dies() {
    let (out, took) = run("crash-in-dump");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    assert_eq!(text.matches("stackmark: fatal signal").count(), 1, "{text}");
    let report = &text[text.find("stackmark: fatal signal").unwrap()..];
    assert!(report.contains("\"crasher\""), "{report}");
    assert!(report.contains("stackmark: end of report ("), "{report}");
    // The watchdog, interrupted mid-dump or between two, is listed too.
    assert!(report.contains("\"watchdog\" state "), "{report}");
    assert!(took < Duration::from_millis(2 * DEADLINE_MS), "{took:?}");
}

#[test]
fn a_handler_of_the_programs_for_the_signal_is_kept_and_the_report_says_so() {
    let (out, _) = run("taken");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    assert!(
        text.contains("threads example: the program's handler kept: true"),
        "{text}"
    );
    assert!(
        text.contains(
            "stackmark: other threads not shown: the program handles the thread-dump signal itself"
        ),
        "{text}"
    );
    assert_eq!(text.matches("stackmark: thread ").count(), 1, "{text}");
}

#[test]
fn threads_past_the_slots_are_listed_without_a_stack() {
    let (out, _) = run_with("crash", &[("STACKMARK_SLOTS", "4")]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{text}");
    let with_stack = text
        .lines()
        .filter(|l| l.starts_with("stackmark: thread ") && l.ends_with(" frames"))
        .count();
    let no_slot = text.matches("no stack: no slot left").count();
    // The blocking threads are never asked, so take no slot: 4 walked, the
    // other 9 asking ones listed.
    assert_eq!((with_stack, no_slot), (4, 9), "{text}");
    assert!(text.contains(" 5 with a stack, "), "{text}");
}
