//! `refresh` on a thread that still holds the module table (a guard from
//! `modules::current` or a `walker`). It used to wait for every walk on the
//! table it replaced, this thread's own included: forever. Now the replaced
//! table stays intact until the next refresh, which waits at most
//! `modules::REFRESH_WAIT` and then fails with `InitError::InUse`.
//!
//! A binary of its own, its tests one at a time: a guard held across two
//! refreshes makes any other refresh in the process fail.

#![cfg(target_os = "linux")]

use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use stackmark::{Frame, InitError, WalkOptions};

/// One test at a time: each holds the table across refreshes.
static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Debug)]
struct Seen {
    first: Result<u64, InitError>,
    held_generation: u64,
    published_generation: u64,
    held_walk: Vec<(u64, u64)>,
    fresh_walk: Vec<(u64, u64)>,
    second: Result<u64, InitError>,
    after_second: u64,
    third: Result<u64, InitError>,
}

fn pcs(frames: &[Frame]) -> Vec<(u64, u64)> {
    frames.iter().map(|f| (f.pc, f.sp)).collect()
}

#[inline(never)]
fn hold_and_refresh() -> Seen {
    let start = stackmark::init().unwrap();
    let held = stackmark::modules::current().unwrap();
    let regs = stackmark::capture();
    let walker = stackmark::walker(
        regs,
        stackmark::PcKind::ReturnAddress,
        WalkOptions::default(),
    )
    .unwrap();
    let first = stackmark::refresh();
    let published_generation = stackmark::modules::current().unwrap().generation();
    // The walker walks on the table it pinned before the refresh: it must
    // find the same frames as a walk on the new table.
    let held_walk = pcs(&walker.collect::<Vec<_>>());
    let mut frames = [Frame::default(); 64];
    let n = stackmark::walk_from(
        regs,
        stackmark::PcKind::ReturnAddress,
        WalkOptions::default(),
        &mut frames,
    );
    let fresh_walk = pcs(&frames[..n]);
    // A second refresh would reuse the table `held` pins.
    let second = stackmark::refresh();
    let after_second = stackmark::modules::current().unwrap().generation();
    let held_generation = held.generation();
    assert_eq!(held_generation, start, "the held table was rebuilt");
    drop(held);
    let third = stackmark::refresh();
    Seen {
        first,
        held_generation,
        published_generation,
        held_walk,
        fresh_walk,
        second,
        after_second,
        third,
    }
}

#[test]
fn a_thread_holding_the_table_can_refresh_once_and_is_told_when_a_second_refresh_cannot_run() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        stackmark::register_thread();
        tx.send(hold_and_refresh()).unwrap();
    });
    // A hang here is the old behaviour: refresh waiting for its own thread.
    let seen = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("refresh returned while its thread held the table");
    let start = seen.held_generation;
    assert_eq!(seen.first, Ok(start + 1), "{seen:?}");
    assert_eq!(seen.published_generation, start + 1, "{seen:?}");
    assert!(seen.held_walk.len() >= 3, "{seen:?}");
    assert_eq!(seen.held_walk, seen.fresh_walk);
    assert_eq!(seen.second, Err(InitError::InUse), "{seen:?}");
    assert_eq!(
        seen.after_second,
        start + 1,
        "the failed refresh changed the table"
    );
    // The failed refresh took no generation, so the next is start + 2.
    assert_eq!(seen.third, Ok(start + 2), "{seen:?}");
    assert_eq!(
        InitError::InUse.to_string(),
        "a walk or table guard still holds the module table replaced by the previous refresh"
    );
}

/// In a child after `fork`, a walk that another thread of the parent had
/// under way never ends. The child's first refresh replaces the table it
/// pinned; the second, which would reuse that table, fails with `InUse`.
/// (Before, the first waited for it forever.)
#[test]
fn in_a_fork_child_a_walk_the_parent_had_under_way_makes_the_refresh_that_needs_its_table_fail() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    // Another thread pins the table, as a walk would, while this one forks.
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        let guard = stackmark::modules::current().unwrap();
        pinned_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        drop(guard);
    });
    pinned_rx.recv().unwrap();
    // SAFETY: the child refreshes (no other thread of the parent holds the
    // loader's or the allocator's locks: the only other one waits on a
    // channel) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = match (stackmark::refresh(), stackmark::refresh()) {
            (Ok(_), Err(InitError::InUse)) => 0,
            (Err(_), _) => 1,
            (Ok(_), _) => 2,
        };
        // SAFETY: _exit ends the child at once.
        unsafe { libc::_exit(code) };
    }
    done_tx.send(()).unwrap();
    other.join().unwrap();
    let since = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: polls the child forked above.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            break;
        }
        assert_eq!(got, 0, "waitpid");
        if since.elapsed() > Duration::from_secs(120) {
            // SAFETY: the child forked above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child's refresh hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(libc::WIFEXITED(status), "{status:#x}");
    match libc::WEXITSTATUS(status) {
        0 => {}
        1 => panic!("the child's first refresh failed"),
        c => panic!("the child's second refresh did not fail with InUse ({c})"),
    }
    // The parent is unaffected: its guard is gone, so two refreshes run.
    stackmark::refresh().unwrap();
    stackmark::refresh().unwrap();
}

extern "C" fn on_urg(_: i32) {}

/// The handler installed for `sig` now, as the C library reports it.
fn handler_of(sig: i32) -> usize {
    // SAFETY: queries the action into a zeroed sigaction.
    unsafe {
        let mut now: libc::sigaction = core::mem::zeroed();
        libc::sigaction(sig, core::ptr::null(), &mut now);
        now.sa_sigaction
    }
}

/// A refresh learns the C library's signal restorer. It used to install a
/// no-op handler on SIGURG for a moment and put the old action back, which
/// undid a handler another thread installed in between (122 of 200,000
/// tries). Here the kernel already holds that restorer (Rust's runtime
/// installed handlers through the C library), so no refresh touches a
/// disposition.
#[test]
fn a_refresh_never_undoes_a_handler_another_thread_installs_meanwhile() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refresher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                stackmark::refresh().unwrap();
                n += 1;
            }
            n
        })
    };
    let (mut tries, mut lost) = (0u64, 0u64);
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(2) {
        // SAFETY: sets SIGURG's action: the default, then a no-op handler.
        unsafe {
            libc::signal(libc::SIGURG, libc::SIG_DFL);
            std::thread::sleep(Duration::from_micros(20));
            libc::signal(libc::SIGURG, on_urg as *const () as usize);
        }
        std::thread::sleep(Duration::from_micros(5));
        tries += 1;
        lost += u64::from(handler_of(libc::SIGURG) != on_urg as *const () as usize);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let refreshes = refresher.join().unwrap();
    // SAFETY: back to the default action.
    unsafe { libc::signal(libc::SIGURG, libc::SIG_DFL) };
    assert!(refreshes > 0 && tries > 0);
    assert_eq!(
        lost, 0,
        "{lost} of {tries} handlers lost over {refreshes} refreshes"
    );
}

/// `install_crash_handler` while a guard pins the table a refresh would
/// reuse: the handlers go in, the error says so, and the next install
/// retries the refresh (it used to answer `Ok` without one).
#[test]
fn a_crash_handler_installed_while_the_table_is_held_says_so_and_refreshes_on_the_next_install() {
    use stackmark::crash::{install_crash_handler, CrashError};
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        stackmark::init().unwrap();
        let held = stackmark::modules::current().unwrap();
        stackmark::refresh().unwrap();
        let first = install_crash_handler();
        let gen_held = stackmark::modules::current().unwrap().generation();
        drop(held);
        let second = install_crash_handler();
        let gen_second = stackmark::modules::current().unwrap().generation();
        let third = install_crash_handler();
        let gen_third = stackmark::modules::current().unwrap().generation();
        tx.send((first, gen_held, second, gen_second, third, gen_third))
            .unwrap();
    });
    let (first, gen_held, second, gen_second, third, gen_third) =
        rx.recv_timeout(Duration::from_secs(120)).unwrap();
    assert!(
        matches!(first, Err(CrashError::Refresh(InitError::InUse))),
        "{first:?}"
    );
    // The handler is in place all the same.
    // SAFETY: reads the current action into a zeroed sigaction.
    let action = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(
            libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old),
            0
        );
        old
    };
    assert_ne!(action.sa_sigaction, libc::SIG_DFL);
    assert_ne!(action.sa_flags & libc::SA_SIGINFO, 0);
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(
        gen_second,
        gen_held + 1,
        "the second install did not refresh"
    );
    assert!(third.is_ok(), "{third:?}");
    assert_eq!(gen_third, gen_second, "a third install refreshed again");
}
