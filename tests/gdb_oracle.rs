//! gdb as the oracle: the crash example runs under gdb, which prints the
//! crashing thread's physical frames when the crash signal stops it (before
//! the signal is delivered); the program then goes on, its crash handler
//! writes its report, and the report's frames must be gdb's, frame for
//! frame, to `_start` (or `clone3` on a spawned thread).
//!
//! Both sides start from the same state: gdb from the stopped thread's
//! registers, the report from the `ucontext` of the interrupted code. The
//! signal is not delivered yet when gdb walks, so gdb shows neither the
//! handler nor the signal trampoline (`<signal handler called>`), and the
//! report starts from the interrupted pc. Frame 0 is the pc of the crash
//! on both sides (past the `int3` for `trap`); above it, gdb's `pc` of a
//! frame and the report's `:ra` address are both the return address, as
//! pushed by the call (neither takes 1 off). gdb reads DWARF CFI, so frames
//! in code that has no other unwind information (glibc's) are where the two
//! may differ.
//!
//! Needs gdb (Debian's `gdb`, which scripts/test.sh installs) and the crash
//! example built beside the tests: a whole `cargo test` builds it; for this
//! test alone, `cargo build --example crash` first.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one gdb session may take (each takes about a second).
const GDB_TIMEOUT: Duration = Duration::from_secs(60);

/// How a crash run ends once every handler has had its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Killed by this signal.
    Signal(i32),
    /// Exited with this status.
    Code(i32),
}

/// Which thread crashes, and so where gdb's walk ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thread {
    /// The main thread: gdb's outermost frame is `_start`.
    Main,
    /// A thread spawned by `std::thread` (named `crasher` by the example):
    /// gdb's outermost frame is glibc's `clone3`.
    Spawned,
}

/// One mode of the crash example and what a correct run of it looks like.
struct Case {
    /// The example's mode argument.
    mode: &'static str,
    /// The signal that stops the program under gdb and that the report names.
    signal: i32,
    /// How the process ends.
    end: End,
    /// The crashing thread.
    thread: Thread,
    /// Whether the report goes to standard output (else standard error).
    report_on_stdout: bool,
}

impl Case {
    /// A main-thread crash by `signal`, reported on standard error, that
    /// ends the process by the same signal.
    const fn main(mode: &'static str, signal: i32) -> Case {
        Case {
            mode,
            signal,
            end: End::Signal(signal),
            thread: Thread::Main,
            report_on_stdout: false,
        }
    }
}

/// One physical frame as gdb printed it.
#[derive(Debug)]
struct GdbFrame {
    /// The pc: the return address for every frame but the innermost.
    pc: u64,
    /// The function, or `??`.
    function: String,
    /// gdb's frame type (`normal`, `sigtramp`, ...).
    kind: String,
}

/// What the gdb script printed.
#[derive(Debug)]
struct GdbView {
    /// The signal of the stop the frames were printed at.
    signal: String,
    /// The thread id (LWP) of the thread that stop was for.
    lwp: i32,
    /// Its physical frames, innermost first.
    frames: Vec<GdbFrame>,
    /// Why gdb's walk ended (`outermost`, ...), or `limit`.
    end_reason: String,
    /// How the program ended, as gdb saw it.
    end: Option<End>,
}

/// One frame of the report.
#[derive(Debug)]
struct ReportFrame {
    /// The address as written (`pc` or return address).
    addr: u64,
    /// `pc`, `ra`, or the plain-text form's location (`NAME+OFFSET`, `??`).
    kind: String,
    /// The walk's method (`context`, `sframe`, `fp`, `scan`, ...).
    method: String,
}

/// The crash report's parts this test compares.
#[derive(Debug)]
struct Report {
    /// The signal number in `stackmark: fatal signal N`.
    signal: i32,
    /// The thread id in `stackmark: thread TID "NAME"`.
    tid: i32,
    /// The thread name.
    thread_name: String,
    /// The frames, innermost first.
    frames: Vec<ReportFrame>,
    /// Whether the report says the stack goes on past its last frame.
    truncated: bool,
}

/// Fails unless gdb can be run.
fn require_gdb() {
    match Command::new("gdb")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`gdb --version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "gdb is not on PATH ({e}): this test needs Debian's gdb \
             (`apt-get install gdb`; scripts/test.sh installs it)"
        ),
    }
}

/// The crash example built beside this test.
fn crash_binary() -> PathBuf {
    let bin = common::examples_dir().join("crash");
    assert!(
        bin.exists(),
        "{} is missing: a whole `cargo test` builds the examples; for this test \
         alone run `cargo build --example crash` first",
        bin.display()
    );
    bin
}

/// The processes whose parent is `pid` (from `/proc/*/stat`).
fn children_of(pid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let child: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // `PID (COMM) STATE PPID ...`; COMM may hold spaces and parentheses.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
}

/// Runs `cmd` (gdb) with standard output and error into files in `dir`.
/// After [`GDB_TIMEOUT`] it kills gdb's children (the program under it,
/// which gdb puts in a process group of its own), then gdb, and fails.
/// Returns (stdout, stderr).
fn run_bounded(cmd: &mut Command, dir: &Path) -> (String, String) {
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let out = std::fs::File::create(&out_path).unwrap();
    let err = std::fs::File::create(&err_path).unwrap();
    // Standard input is no terminal, so gdb leaves the test's own alone.
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let read = || {
        (
            std::fs::read_to_string(&out_path).unwrap_or_default(),
            std::fs::read_to_string(&err_path).unwrap_or_default(),
        )
    };
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return read();
        }
        if start.elapsed() > GDB_TIMEOUT {
            for pid in children_of(child.id()) {
                // SAFETY: kill has no memory-safety preconditions; `pid` is
                // a child of the gdb this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
            let (stdout, stderr) = read();
            panic!(
                "gdb still running after {GDB_TIMEOUT:?}, killed: {cmd:?}\n\
                 --- stdout\n{stdout}\n--- stderr\n{stderr}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Parses a `0x`-prefixed hex number.
fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Parses the gdb script's lines (`GDB-...`) in gdb's standard output.
fn parse_gdb(stdout: &str) -> Result<GdbView, String> {
    let mut crash_stop = None;
    let mut frames = Vec::new();
    let mut end_reason = None;
    let mut end = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("GDB-STOP ") {
            // The stop the frames are printed at is the last before them.
            if end_reason.is_none() && frames.is_empty() {
                let (sig, lwp) = rest
                    .split_once(" lwp ")
                    .ok_or_else(|| format!("bad stop line: {line}"))?;
                let lwp = lwp.parse().map_err(|_| format!("bad lwp: {line}"))?;
                crash_stop = Some((sig.to_string(), lwp));
            }
        } else if let Some(rest) = line.strip_prefix("GDB-FRAME ") {
            let mut words = rest.splitn(3, ' ');
            let (n, pc, rest) = (words.next(), words.next(), words.next());
            let n: usize = n
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("bad frame number: {line}"))?;
            let pc = pc.and_then(hex).ok_or_else(|| format!("bad pc: {line}"))?;
            let (function, kind) = rest
                .and_then(|r| r.rsplit_once(" ["))
                .ok_or_else(|| format!("bad frame line: {line}"))?;
            if n != frames.len() || end_reason.is_some() {
                return Err(format!("frame {n} out of order: {line}"));
            }
            frames.push(GdbFrame {
                pc,
                function: function.to_string(),
                kind: kind.trim_end_matches(']').to_string(),
            });
        } else if let Some(rest) = line.strip_prefix("GDB-FRAMES-END ") {
            let (count, why) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad end line: {line}"))?;
            if end_reason.is_some() || count.parse::<usize>() != Ok(frames.len()) {
                return Err(format!("{line} after {} frames", frames.len()));
            }
            end_reason = Some(why.to_string());
        } else if let Some(rest) = line.strip_prefix("GDB-EXIT ") {
            end = match rest.split_once(' ') {
                Some(("signal", n)) => n.parse().ok().map(End::Signal),
                Some(("code", n)) => n.parse().ok().map(End::Code),
                _ => None,
            };
        }
    }
    let (signal, lwp) = crash_stop.ok_or("gdb never stopped on a signal")?;
    let end_reason = end_reason.ok_or("gdb printed no frames (no GDB-FRAMES-END)")?;
    Ok(GdbView {
        signal,
        lwp,
        frames,
        end_reason,
        end,
    })
}

/// Parses the one crash report in `text`: its signal, thread and frames
/// (`{{{bt:N:ADDR:pc|ra}}} METHOD`, or the plain `#N ADDR WHERE METHOD` of
/// a frame in a module without a build ID or in none).
fn parse_report(text: &str) -> Result<Report, String> {
    let starts = text.matches("stackmark: fatal signal ").count();
    if starts != 1 {
        return Err(format!("{starts} crash reports, not 1"));
    }
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("stackmark: fatal signal "));
    let first = lines.next().unwrap();
    let signal = first["stackmark: fatal signal ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("bad first line: {first}"))?;
    let mut thread = None;
    let mut frames = Vec::new();
    let mut trailer = None;
    let mut in_others = false;
    for line in lines {
        // Other threads' sections follow the crashing thread's frames
        // (`stackmark: thread TID "NAME" state S...`); they are not its.
        in_others |= line.starts_with("stackmark: thread ") && line.contains("\" state ");
        if in_others && !line.starts_with("stackmark: end of report (") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("stackmark: thread ") {
            let (tid, name) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad thread line: {line}"))?;
            let tid = tid.parse().map_err(|_| format!("bad tid: {line}"))?;
            thread = Some((tid, name.trim_matches('"').to_string()));
        } else if let Some(rest) = line.strip_prefix("stackmark: end of report (") {
            trailer = Some(rest.to_string());
            break;
        } else if let Some(rest) = line.strip_prefix("{{{bt:") {
            let (element, method) = rest
                .split_once("}}}")
                .ok_or_else(|| format!("bad bt element: {line}"))?;
            let mut fields = element.split(':');
            let (n, addr, kind) = (fields.next(), fields.next(), fields.next());
            let n: Option<usize> = n.and_then(|n| n.parse().ok());
            let addr = addr.and_then(hex);
            let frame = match (n, addr, kind) {
                (Some(n), Some(addr), Some(kind @ ("pc" | "ra"))) if n == frames.len() => {
                    ReportFrame {
                        addr,
                        kind: kind.to_string(),
                        method: method.trim().to_string(),
                    }
                }
                _ => return Err(format!("bad or out-of-order bt element: {line}")),
            };
            frames.push(frame);
        } else if let Some(rest) = line.strip_prefix('#') {
            let words: Vec<&str> = rest.split(' ').collect();
            let n: Option<usize> = words.first().and_then(|n| n.parse().ok());
            let addr = words.get(1).and_then(|a| hex(a));
            let frame = match (n, addr) {
                (Some(n), Some(addr)) if n == frames.len() && words.len() >= 4 => ReportFrame {
                    addr,
                    kind: words[2..words.len() - 1].join(" "),
                    method: words[words.len() - 1].to_string(),
                },
                _ => return Err(format!("bad or out-of-order plain frame: {line}")),
            };
            frames.push(frame);
        }
    }
    let trailer = trailer.ok_or("no `stackmark: end of report` line")?;
    let count: usize = trailer
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("bad trailer: {trailer}"))?;
    if count != frames.len() {
        return Err(format!(
            "the trailer says {count} frames, the report has {}",
            frames.len()
        ));
    }
    let (tid, thread_name) = thread.ok_or("no `stackmark: thread` line")?;
    Ok(Report {
        signal,
        tid,
        thread_name,
        frames,
        truncated: trailer.contains("the stack goes on"),
    })
}

/// gdb's frames and the report's side by side, a `!=` on each row where
/// the addresses differ. Of a run of rows alike but for the number (deep
/// recursion), the first two are shown and the rest counted.
fn side_by_side(gdb: &[GdbFrame], report: &[ReportFrame]) -> String {
    let mut s = format!(
        "   # | {:<18} {:<44} | {:<18} {:<3} {}\n",
        "gdb pc", "gdb function", "report pc", "", "method"
    );
    let mut previous = String::new();
    let mut repeats = 0;
    for i in 0..gdb.len().max(report.len()) {
        let (g, r) = (gdb.get(i), report.get(i));
        let mark = match (g, r) {
            (Some(g), Some(r)) if g.pc == r.addr => "  ",
            _ => "!=",
        };
        let gdb_side = match g {
            Some(g) => {
                let mut f = g.function.clone();
                if g.kind != "normal" {
                    f = format!("{f} [{}]", g.kind);
                }
                if f.chars().count() > 44 {
                    f = f.chars().take(41).chain("...".chars()).collect();
                }
                format!("{:#018x} {f:<44}", g.pc)
            }
            None => format!("{:<18} {:<44}", "-", ""),
        };
        let report_side = match r {
            Some(r) => format!("{:#018x} {:<3} {}", r.addr, r.kind, r.method),
            None => "-".to_string(),
        };
        let row = format!("{gdb_side} | {report_side}");
        if row == previous && mark == "  " {
            repeats += 1;
            if repeats > 1 {
                continue;
            }
        } else {
            if repeats > 1 {
                s += &format!("     ({} more rows as above)\n", repeats - 1);
            }
            repeats = 0;
        }
        s += &format!("{mark}{i:>2} | {row}\n");
        previous = row;
    }
    if repeats > 1 {
        s += &format!("     ({} more rows as above)\n", repeats - 1);
    }
    s
}

/// Runs `case` under gdb and compares the report's frames with gdb's.
fn check(case: Case) {
    require_gdb();
    let bin = crash_binary();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gdb/physical_frames.py");
    let dir = common::workdir(&format!("gdb-oracle-{}", case.mode));
    // One frame more than a report can hold, to tell a truncated report
    // of a deeper stack from one that stopped early.
    let limit = stackmark::crash::MAX_CRASH_FRAMES + 1;
    let mut cmd = Command::new("gdb");
    cmd.args(["-q", "-nx", "-batch", "-x"])
        .arg(&script)
        .arg("--args")
        .arg(&bin)
        .arg(case.mode)
        .env("STACKMARK_GDB_MAX_FRAMES", limit.to_string());
    let (stdout, stderr) = run_bounded(&mut cmd, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let both = format!("--- gdb stdout\n{stdout}\n--- stderr\n{stderr}");
    let mode = case.mode;
    let harness = |what: &str| -> ! { panic!("{mode}: harness: {what}\n{both}") };

    if stderr.contains("crash: unknown mode") {
        harness("the example does not know this mode: `cargo build --example crash`");
    }
    let gdb = parse_gdb(&stdout).unwrap_or_else(|e| harness(&format!("gdb's output: {e}")));
    let report_text = if case.report_on_stdout {
        &stdout
    } else {
        &stderr
    };
    let report = parse_report(report_text).unwrap_or_else(|e| harness(&format!("the report: {e}")));

    // The run is the one meant: the signal, the thread, the end.
    let name = stackmark::crash::signal_name(case.signal);
    if gdb.signal != name || report.signal != case.signal {
        harness(&format!(
            "want {name}; gdb stopped on {}, the report names signal {}",
            gdb.signal, report.signal
        ));
    }
    if gdb.lwp != report.tid {
        harness(&format!(
            "gdb walked thread {}, the report is of thread {}",
            gdb.lwp, report.tid
        ));
    }
    if case.thread == Thread::Spawned && report.thread_name != "crasher" {
        harness(&format!("crashed on thread {:?}", report.thread_name));
    }
    if gdb.end != Some(case.end) {
        harness(&format!(
            "want the end {:?}, gdb saw {:?}",
            case.end, gdb.end
        ));
    }
    // gdb's own walk is whole: to the thread's first frame, or as far as
    // the report can go.
    let bottom = match case.thread {
        Thread::Main => "_start",
        Thread::Spawned => "clone3",
    };
    let gdb_whole =
        gdb.frames.len() >= limit || gdb.frames.last().is_some_and(|f| f.function == bottom);
    if !gdb_whole {
        harness(&format!(
            "gdb's walk ended ({}) before {bottom}",
            gdb.end_reason
        ));
    }

    // The comparison: a report cut at MAX_CRASH_FRAMES against as many of
    // gdb's frames (gdb must have more); any other, whole.
    let n = report.frames.len();
    let (gdb_shown, lengths_agree) = if report.truncated {
        (&gdb.frames[..n.min(gdb.frames.len())], gdb.frames.len() > n)
    } else {
        (&gdb.frames[..], gdb.frames.len() == n)
    };
    let same = lengths_agree
        && gdb_shown
            .iter()
            .zip(&report.frames)
            .all(|(g, r)| g.pc == r.addr);
    let table = side_by_side(gdb_shown, &report.frames);
    let summary = format!(
        "{mode}: gdb {} frames ({}), report {} frames{}",
        gdb.frames.len(),
        gdb.end_reason,
        n,
        if report.truncated { " (truncated)" } else { "" }
    );
    if same {
        eprintln!("{summary}: report == gdb\n{table}");
    } else {
        panic!("{summary}: the report's frames differ from gdb's\n{table}");
    }
}

/// A write through null in Rust, called through two C frames that have
/// SFrame only.
#[test]
fn segv() {
    check(Case::main("segv", libc::SIGSEGV));
}

/// `segv` with SIGPIPE at its default action.
#[test]
fn sigpipe_segv() {
    check(Case::main("sigpipe-segv", libc::SIGSEGV));
}

/// `segv`, with the report on standard output.
#[test]
fn stdout_then_default() {
    check(Case {
        report_on_stdout: true,
        ..Case::main("stdout-then-default", libc::SIGSEGV)
    });
}

/// A call to address 0x10: frame 0 is in no module.
#[test]
fn wild_call() {
    check(Case::main("wild-call", libc::SIGSEGV));
}

/// A general-protection fault (a non-canonical address).
#[test]
fn gp() {
    check(Case::main("gp", libc::SIGSEGV));
}

/// A read past the end of a mapped file.
#[test]
fn bus() {
    check(Case::main("bus", libc::SIGBUS));
}

/// `ud2` in `main`.
#[test]
fn ill() {
    check(Case::main("ill", libc::SIGILL));
}

/// An integer division by zero in `main`.
#[test]
fn fpe() {
    check(Case::main("fpe", libc::SIGFPE));
}

/// `std::process::abort`: SIGABRT from inside glibc's `raise`.
#[test]
fn abrt() {
    check(Case::main("abrt", libc::SIGABRT));
}

/// `int3`: the pc is past it on both sides.
#[test]
fn trap() {
    check(Case::main("trap", libc::SIGTRAP));
}

/// Unbounded recursion on the main thread: the report holds the innermost
/// `MAX_CRASH_FRAMES`; std's overflow handler then aborts.
#[test]
fn overflow() {
    check(Case {
        end: End::Signal(libc::SIGABRT),
        ..Case::main("overflow", libc::SIGSEGV)
    });
}

/// A handler installed before ours takes the fault after the report and
/// exits 42.
#[test]
fn chain() {
    check(Case {
        end: End::Code(42),
        ..Case::main("chain", libc::SIGSEGV)
    });
}

/// glibc's `free` finds a double free and aborts.
#[test]
fn double_free() {
    check(Case::main("double-free", libc::SIGABRT));
}

/// SIGSEGV inside glibc's `memcpy`.
#[test]
fn memcpy_null() {
    check(Case::main("memcpy-null", libc::SIGSEGV));
}

/// A comparator called by glibc's `qsort` aborts.
#[test]
fn qsort_abrt() {
    check(Case::main("qsort-abrt", libc::SIGABRT));
}

/// A comparator called by glibc's `qsort` writes through null.
#[test]
fn qsort_segv() {
    check(Case::main("qsort-segv", libc::SIGSEGV));
}

/// `segv`'s chain on a spawned thread; the main thread waits in `join`.
#[test]
fn thread_segv() {
    check(Case {
        thread: Thread::Spawned,
        ..Case::main("thread-segv", libc::SIGSEGV)
    });
}

// Modes left out (every mode runs with the main thread alone, or with
// threads that crash or join; `all_threads` above covers other threads):
// Modes left out:
// - `gap-sp`: moves the stack and frame pointers into a page off the
//   stack before faulting, on purpose; there is no call chain there for
//   gdb to walk or to compare with.
// - `nested`: the report itself faults half-way, on purpose; there are no
//   whole frames to compare.
// - `threads`: eight threads crash at once; gdb stops on one, while each
//   writes a report, in an order that changes from run to run.
// - `thread-overflow`, `sampled-abrt`: further spawned-thread crashes,
//   outside this test's set (every main-thread mode, plus `thread-segv`):
//   `thread-segv` covers a spawned thread's stack down to `clone3` and
//   `overflow` a stack deeper than a report; `sampled-abrt` tests SIGPROF
//   landing during the crash (under ptrace each SIGPROF also passes
//   through gdb, which changes the timing it is about).

/// One thread's frames as gdb printed them at the stop for the dump
/// signal (`GDB-THREAD`, `GDB-TFRAME`), by thread id.
fn parse_gdb_threads(stdout: &str) -> Result<Vec<(i32, Vec<GdbFrame>)>, String> {
    let mut out: Vec<(i32, Vec<GdbFrame>)> = Vec::new();
    for line in stdout.lines() {
        if let Some(lwp) = line.strip_prefix("GDB-THREAD ") {
            let lwp = lwp.parse().map_err(|_| format!("bad lwp: {line}"))?;
            out.push((lwp, Vec::new()));
        } else if let Some(rest) = line.strip_prefix("GDB-TFRAME ") {
            let frames = &mut out.last_mut().ok_or("a frame before its thread")?.1;
            let mut words = rest.splitn(3, ' ');
            let (_, pc, rest) = (words.next(), words.next(), words.next());
            let pc = pc.and_then(hex).ok_or_else(|| format!("bad pc: {line}"))?;
            let (function, kind) = rest
                .and_then(|r| r.rsplit_once(" ["))
                .ok_or_else(|| format!("bad frame line: {line}"))?;
            frames.push(GdbFrame {
                pc,
                function: function.to_string(),
                kind: kind.trim_end_matches(']').to_string(),
            });
        }
    }
    Ok(out)
}

/// The other threads' sections of a crash report: each thread's id, name,
/// and frame addresses (empty for one listed without a stack).
fn parse_other_threads(text: &str) -> Vec<(i32, String, Vec<ReportFrame>)> {
    let mut out: Vec<(i32, String, Vec<ReportFrame>)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line
            .strip_prefix("stackmark: thread ")
            .filter(|r| r.contains("\" state "))
        {
            let (tid, rest) = rest.split_once(' ').unwrap();
            let name = rest.split('"').nth(1).unwrap_or("").to_string();
            out.push((tid.parse().unwrap(), name, Vec::new()));
        } else if line.starts_with("stackmark: ") {
            continue;
        } else if let Some((_, _, frames)) = out.last_mut() {
            // `{{{bt:N:ADDR:pc|ra}}} METHOD` or `#N ADDR WHERE METHOD`.
            let addr = line
                .strip_prefix("{{{bt:")
                .and_then(|r| r.split(':').nth(1))
                .or_else(|| line.strip_prefix('#').and_then(|r| r.split(' ').nth(1)));
            if let Some(addr) = addr.and_then(hex) {
                frames.push(ReportFrame {
                    addr,
                    kind: String::new(),
                    method: line.rsplit(' ').next().unwrap_or("").to_string(),
                });
            }
        }
    }
    out
}

/// The length of the instruction that enters the kernel (`syscall`).
const SYSCALL_LEN: u64 = 2;

/// Every thread of a crash, against gdb: the threads example starts
/// fifteen threads (spinning in Rust and in C with SFrame only, waiting on
/// a mutex, a condition variable, a pipe, in `nanosleep`, two blocking
/// every signal) and crashes on the main thread. gdb prints the crashing
/// thread's frames at the crash, as in [`check`], and every other
/// thread's at its stop for the dump signal, before its handler runs:
/// where the handler's `ucontext` starts the report's walk. Each walked
/// thread's frames must be gdb's, frame for frame, down to `clone3`.
///
/// One difference is the kernel's, not the walk's: a system call the
/// signal interrupts that `SA_RESTART` restarts (`futex`, `read`) has its
/// pc moved back onto the `syscall` instruction between gdb's stop and
/// the handler, so that the call runs again when the handler returns; the
/// report's frame 0 is then gdb's less the instruction's length.
#[test]
fn all_threads() {
    require_gdb();
    let bin = common::examples_dir().join("threads");
    assert!(
        bin.exists(),
        "{}: `cargo build --example threads`",
        bin.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gdb/physical_frames.py");
    let dir = common::workdir("gdb-oracle-all-threads");
    let signal = stackmark::threads::Options::default().signal;
    let mut cmd = Command::new("gdb");
    cmd.args(["-q", "-nx", "-batch", "-x"])
        .arg(&script)
        .arg("--args")
        .arg(&bin)
        .arg("crash")
        .env("STACKMARK_GDB_DUMP_SIGNAL", format!("SIG{signal}"))
        // gdb stops every thread at each signal: far slower than alone.
        .env("STACKMARK_DEADLINE_MS", "30000");
    let (stdout, stderr) = run_bounded(&mut cmd, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let both = format!("--- gdb stdout\n{stdout}\n--- stderr\n{stderr}");
    let harness = |what: &str| -> ! { panic!("all threads: harness: {what}\n{both}") };

    // The crashing thread, as for every other crash.
    let gdb = parse_gdb(&stdout).unwrap_or_else(|e| harness(&format!("gdb's output: {e}")));
    let report = parse_report(&stderr).unwrap_or_else(|e| harness(&format!("the report: {e}")));
    // How the process ends is not checked here (tests/all_threads.rs does):
    // with sixteen threads, the group exit can take a thread away while
    // gdb reads it, and gdb then loses track of the end.
    if gdb.lwp != report.tid || gdb.signal != "SIGSEGV" {
        harness(&format!("gdb stopped thread {} on {}", gdb.lwp, gdb.signal));
    }
    let mut failures = Vec::new();
    if gdb.frames.len() != report.frames.len()
        || gdb
            .frames
            .iter()
            .zip(&report.frames)
            .any(|(g, r)| g.pc != r.addr)
    {
        failures.push(format!(
            "the crashing thread\n{}",
            side_by_side(&gdb.frames, &report.frames)
        ));
    }

    let gdb_threads = parse_gdb_threads(&stdout).unwrap_or_else(|e| harness(&e));
    let others = parse_other_threads(&stderr);
    if others.len() != 15 {
        harness(&format!("{} other threads in the report", others.len()));
    }
    let (mut compared, mut restarts) = (0, 0);
    for (tid, name, frames) in &others {
        let theirs = gdb_threads.iter().find(|(lwp, _)| lwp == tid);
        match (name.starts_with("blocked-"), theirs) {
            (true, None) if frames.is_empty() => continue,
            (true, _) => {
                failures.push(format!("{name}: blocks every signal, yet {theirs:?}"));
                continue;
            }
            (false, None) => {
                failures.push(format!("{name}: gdb never saw the signal"));
                continue;
            }
            (false, Some(_)) => {}
        }
        let g = &theirs.unwrap().1;
        let restarted = |i: usize, gp: u64, rp: u64| i == 0 && rp + SYSCALL_LEN == gp;
        let same = g.len() == frames.len()
            && g.last().is_some_and(|f| f.function == "clone3")
            && g.iter()
                .zip(frames)
                .enumerate()
                .all(|(i, (g, r))| g.pc == r.addr || restarted(i, g.pc, r.addr));
        if same {
            compared += 1;
            restarts += usize::from(g[0].pc != frames[0].addr);
        } else {
            failures.push(format!("{name} ({tid})\n{}", side_by_side(g, frames)));
        }
    }
    assert!(
        failures.is_empty(),
        "the report's frames differ from gdb's:\n{}\n{both}",
        failures.join("\n")
    );
    eprintln!(
        "all threads: the crashing thread and {compared} others == gdb \
         ({restarts} at a restarted system call)"
    );
    assert_eq!(compared, 13);
}
