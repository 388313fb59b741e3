//! The crash handler where a report cannot, or should not, be the end of
//! the story: behind another thread's report that is stuck, in a child
//! after `fork`, on an asynchronous fault, under a handler installed before
//! ours that recovers from the fault, and for a signal sent with a siginfo
//! of its own. Each case runs in a fresh copy of this test binary (the
//! handler is process-wide), with a deadline, so a hang fails the test.

#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const SCENARIO: &str = "STACKMARK_CRASH_EDGE";

/// Runs `test` of this binary again with the scenario `name` set; returns
/// how it ended and what it wrote to standard error. Under a cross runner
/// (qemu-user without binfmt) the exec fails (status 127 and nothing
/// printed, or `ENOEXEC`), and the binary runs under `qemu-aarch64` too.
fn run(test: &str, name: &str) -> (ExitStatus, String) {
    let exe = std::env::current_exe().unwrap();
    let args = [test, "--exact", "--nocapture", "--test-threads=1"];
    let mut direct = Command::new(&exe);
    direct.args(args);
    let mut qemu = Command::new("qemu-aarch64");
    qemu.args(["-L", "/usr/aarch64-linux-gnu"])
        .arg(&exe)
        .args(args);
    match run_with_deadline(&mut direct, name) {
        Some((status, err))
            if !(cfg!(target_arch = "aarch64") && status.code() == Some(127) && err.is_empty()) =>
        {
            (status, err)
        }
        _ => run_with_deadline(&mut qemu, name).expect("qemu-aarch64 runs"),
    }
}

/// Runs `cmd` with the scenario `name` set, killing it after two minutes
/// (a hang fails the test); `None` if it cannot be started (`ENOEXEC`).
fn run_with_deadline(cmd: &mut Command, name: &str) -> Option<(ExitStatus, String)> {
    let mut child = match cmd
        .env(SCENARIO, name)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => return None,
        Err(e) => panic!("{cmd:?}: {e}"),
    };
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let since = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if since.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name}: the process hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Some((status, reader.join().unwrap()))
}

fn scenario() -> Option<String> {
    std::env::var(SCENARIO).ok()
}

/// Queues `sig` to the calling thread with the given code and value, as
/// the kernel or `sigqueue` would.
fn queue_to_self(sig: i32, code: i32, value: usize) {
    // SAFETY: a zeroed siginfo is valid; the fields set are the ones the
    // kernel reads; rt_tgsigqueueinfo to the calling thread.
    unsafe {
        let mut info: libc::siginfo_t = core::mem::zeroed();
        info.si_signo = sig;
        info.si_code = code;
        // si_pid, si_uid, then si_value (a union) in the kernel's layout.
        let words = (&mut info as *mut libc::siginfo_t).cast::<u32>();
        *words.add(4) = libc::getpid() as u32;
        *words.add(5) = libc::getuid();
        words.add(6).cast::<usize>().write_unaligned(value);
        let r = libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            common::tid(),
            sig,
            &info,
        );
        assert_eq!(
            r,
            0,
            "rt_tgsigqueueinfo: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn dev_null() -> i32 {
    // SAFETY: opens a path for writing.
    unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY) }
}

/// A pipe whose buffer is full: a blocking write to its write end waits
/// until someone reads. Returns (read end, write end).
fn full_pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds`; the writes below go to the pipe just made.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK), 0);
        let chunk = [b'.'; 4096];
        while libc::write(fds[1], chunk.as_ptr().cast(), chunk.len()) > 0 {}
        let fl = libc::fcntl(fds[1], libc::F_GETFL);
        libc::fcntl(fds[1], libc::F_SETFL, fl & !libc::O_NONBLOCK);
        let fl = libc::fcntl(fds[0], libc::F_GETFL);
        libc::fcntl(fds[0], libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    (fds[0], fds[1])
}

/// Starts a thread whose panic report blocks for good, writing into a
/// full pipe (`fd`), and returns once it holds the report turn.
fn start_a_stuck_panic_report(fd: i32) {
    stackmark::panic_hook::install_panic_hook_with(stackmark::panic_hook::PanicHookOptions {
        fd,
        ..Default::default()
    });
    std::thread::spawn(|| panic!("a report that cannot be written"));
    let since = Instant::now();
    while stackmark::crash::reporting_thread() == 0 {
        assert!(since.elapsed() < Duration::from_secs(30), "no report began");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn write_through_null() {
    // SAFETY: none: the fault is the point.
    unsafe { std::hint::black_box(core::ptr::null_mut::<u64>()).write_volatile(1) };
}

#[test]
fn a_crash_behind_a_report_that_is_stuck_still_ends_the_process() {
    if scenario().is_some() {
        let (_r, w) = full_pipe();
        stackmark::crash::install_crash_handler_to_fd(dev_null()).unwrap();
        start_a_stuck_panic_report(w);
        write_through_null();
        return;
    }
    // It used to wait for the turn forever, with every other signal blocked.
    let (status, err) = run(
        "a_crash_behind_a_report_that_is_stuck_still_ends_the_process",
        "stuck",
    );
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}: {err}");
}

#[test]
fn a_fork_child_reports_its_crash_although_another_thread_of_the_parent_was_reporting() {
    if scenario().is_some() {
        let (r, w) = full_pipe();
        stackmark::crash::install_crash_handler_to_fd(w).unwrap();
        start_a_stuck_panic_report(w);
        // SAFETY: the child only crashes; its handler is async-signal-safe.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            write_through_null();
        }
        // Read both reports, the parent's panic and the child's crash, until
        // the child has died and the pipe is empty. (Stopping at the first
        // "end of report" lost the child's when the parent's ended first.)
        let child_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let drain = {
            let child_done = child_done.clone();
            std::thread::spawn(move || {
                let mut all = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let done = child_done.load(std::sync::atomic::Ordering::SeqCst);
                    let mut p = libc::pollfd {
                        fd: r,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    if unsafe { libc::poll(&mut p, 1, 100) } <= 0 {
                        if done {
                            break;
                        }
                        continue;
                    }
                    // SAFETY: `buf` is writable for its length.
                    let n = unsafe { libc::read(r, buf.as_mut_ptr().cast(), buf.len()) };
                    if n <= 0 {
                        break;
                    }
                    all.extend_from_slice(&buf[..n as usize]);
                }
                all
            })
        };
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        child_done.store(true, std::sync::atomic::Ordering::SeqCst);
        let all = drain.join().unwrap();
        let text = String::from_utf8_lossy(&all);
        eprintln!("child status {status:#x}");
        let crash = text.lines().find(|l| l.contains("fatal signal"));
        eprintln!("child report: {crash:?}");
        std::process::exit(
            if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV {
                if crash.is_some_and(|l| l.contains("fatal signal 11 (SIGSEGV)")) {
                    0
                } else {
                    2
                }
            } else {
                1
            },
        );
    }
    // The child inherited the parent's report turn, held by a thread that
    // does not exist in it: it waited for it forever.
    let (status, err) = run(
        "a_fork_child_reports_its_crash_although_another_thread_of_the_parent_was_reporting",
        "fork",
    );
    assert_eq!(status.code(), Some(0), "{status:?}: {err}");
}

/// x86_64 only: qemu-user, which runs the AArch64 tests here, fails an
/// assertion of its own (`cpu == current_cpu`) on a SIGSEGV or SIGBUS
/// queued with a fault's code. The rule is the same on both.
#[cfg(target_arch = "x86_64")]
#[test]
fn an_asynchronous_fault_is_raised_again_not_left_to_recur() {
    // BUS_MCEERR_AO and SEGV_MTEAERR name no instruction: returning from
    // the handler runs nothing that faults again.
    for (name, sig, code) in [
        ("async-bus", libc::SIGBUS, 5),
        ("async-segv", libc::SIGSEGV, 8),
    ] {
        if scenario().as_deref() == Some(name) {
            // Rust's own SIGSEGV and SIGBUS handler (for stack overflows)
            // takes any fault for one that recurs, and returns: it would
            // let the process go on whatever stackmark did. As in a C
            // program, the default action comes after stackmark's.
            // SAFETY: sets the default action.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
            stackmark::crash::install_crash_handler_to_fd(2).unwrap();
            queue_to_self(sig, code, 0);
            // The process went on after a "fatal" report.
            std::process::exit(3);
        }
    }
    if scenario().is_some() {
        return;
    }
    for (name, sig) in [("async-bus", libc::SIGBUS), ("async-segv", libc::SIGSEGV)] {
        let (status, err) = run(
            "an_asynchronous_fault_is_raised_again_not_left_to_recur",
            name,
        );
        assert_eq!(status.signal(), Some(sig), "{name}: {status:?}: {err}");
        assert!(err.contains("end of report"), "{name}: {err}");
    }
}

static PAGE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

extern "C" fn make_page_writable(_: i32, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let p = PAGE.load(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: the page the test mapped; mprotect is async-signal-safe.
    unsafe {
        libc::mprotect(
            p as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
}

extern "C" fn exit_with_what_arrived(_: i32, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo; si_value follows si_pid and si_uid.
    let (code, value) = unsafe {
        let words = info.cast::<u32>();
        (
            (*info).si_code,
            words.add(6).cast::<usize>().read_unaligned(),
        )
    };
    // SAFETY: _exit is async-signal-safe.
    unsafe {
        libc::_exit(if code == libc::SI_QUEUE && value == 7 {
            42
        } else {
            43
        })
    };
}

/// Installs `handler` for `sig`, before stackmark's.
fn install_before(sig: i32, handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void)) {
    // SAFETY: a zeroed sigaction with a valid handler and flags.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        assert_eq!(libc::sigaction(sig, &sa, core::ptr::null_mut()), 0);
    }
}

/// A fresh read-only page, and a SIGSEGV handler installed before ours that
/// makes it writable: a write to it faults once, and the process goes on.
fn page_an_earlier_handler_makes_writable() -> stackmark_fixtures::Mapping {
    let page = stackmark_fixtures::Mapping::new(4096);
    page.protect(0, 4096, libc::PROT_READ);
    PAGE.store(page.addr() as usize, std::sync::atomic::Ordering::SeqCst);
    install_before(libc::SIGSEGV, make_page_writable);
    page
}

#[test]
fn a_fault_a_handler_installed_before_ours_recovers_from_finds_errno_as_it_was() {
    if scenario().is_some() {
        let page = page_an_earlier_handler_makes_writable();
        // Reports go to a descriptor that is not open: every write fails.
        stackmark::crash::install_crash_handler_to_fd(1000).unwrap();
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: the page mapped above.
        unsafe { std::hint::black_box(page.addr() as *mut u64).write_volatile(1) };
        // SAFETY: as above.
        let errno = unsafe { *libc::__errno_location() };
        std::process::exit(if errno == 0 { 0 } else { 10 + errno });
    }
    let (status, err) = run(
        "a_fault_a_handler_installed_before_ours_recovers_from_finds_errno_as_it_was",
        "errno",
    );
    // The report's failed writes left EBADF (9): exit status 19.
    assert_eq!(status.code(), Some(0), "{status:?}: {err}");
}

#[test]
fn a_signal_sent_again_carries_its_own_siginfo_to_the_handler_installed_before_ours() {
    if scenario().is_some() {
        install_before(libc::SIGABRT, exit_with_what_arrived);
        stackmark::crash::install_crash_handler_to_fd(dev_null()).unwrap();
        queue_to_self(libc::SIGABRT, libc::SI_QUEUE, 7);
        std::process::exit(3);
    }
    // Sent again with tgkill, it reached that handler as SI_TKILL, without
    // its value: exit status 43.
    let (status, err) = run(
        "a_signal_sent_again_carries_its_own_siginfo_to_the_handler_installed_before_ours",
        "siginfo",
    );
    assert_eq!(status.code(), Some(42), "{status:?}: {err}");
}

/// A handler installed before ours recovers from a fault we reported: the
/// process goes on, and installing again re-arms ours for the next crash.
#[test]
fn after_an_earlier_handler_recovers_installing_again_reports_the_next_crash() {
    if scenario().is_some() {
        let page = page_an_earlier_handler_makes_writable();
        stackmark::crash::install_crash_handler_to_fd(2).unwrap();
        // SAFETY: the page mapped above; recovered by make_page_writable.
        unsafe { std::hint::black_box(page.addr() as *mut u64).write_volatile(1) };
        eprintln!("recovered, going on");
        stackmark::crash::install_crash_handler_to_fd(2).unwrap();
        std::process::abort();
    }
    let (status, err) = run(
        "after_an_earlier_handler_recovers_installing_again_reports_the_next_crash",
        "recovered-then-abort",
    );
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}: {err}");
    assert!(err.contains("fatal signal 11 (SIGSEGV)"), "{err}");
    assert!(err.contains("recovered, going on"), "{err}");
    assert!(
        err.contains("fatal signal 6 (SIGABRT)"),
        "not reported:\n{err}"
    );
}

extern "C" fn exit_42(_: i32, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) };
}

/// A fault inside the report (the same signal as the crash) ends the way
/// the process would have ended without us: in the handler installed
/// before ours (another crash reporter, say).
#[test]
fn a_fault_inside_the_report_still_reaches_the_handler_installed_before_ours() {
    if scenario().is_some() {
        install_before(libc::SIGSEGV, exit_42);
        stackmark::crash::install_crash_handler_to_fd(2).unwrap();
        stackmark::crash::corrupt_for_test();
        write_through_null();
        std::process::exit(3);
    }
    let (status, err) = run(
        "a_fault_inside_the_report_still_reaches_the_handler_installed_before_ours",
        "nested-chain",
    );
    assert_eq!(status.code(), Some(42), "{status:?}: {err}");
}
