//! The profiler's API at its edges: rates it cannot keep are refused, frames
//! a signal interrupted are marked exact in samples, and thread-timer
//! periods lost to a pending signal are counted. The tests share the
//! sample ring, so they take turns.

#![cfg(target_os = "linux")]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Duration;

use stackmark::sample::{self, ThreadTimer, MAX_HZ};
use stackmark::Frame;

static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn rates_a_timer_cannot_keep_are_refused_not_silently_disarmed() {
    let _t = turn();
    stackmark::init().unwrap();
    // A period that rounds to zero would disarm the timer, and the call
    // would seem to work but take no sample.
    for hz in [0, MAX_HZ + 1, 2_000_000, u32::MAX] {
        let e = sample::start(hz).expect_err("start");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{hz}");
        let e = ThreadTimer::start(hz).expect_err("ThreadTimer::start");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{hz}");
    }
    // The highest rate is taken: with SIGPROF blocked for the while (a
    // handler slower than the period, as in a debug build under
    // emulation, would leave a signal pending at every return), and
    // deleting the timer discards the pending one.
    std::thread::spawn(|| {
        block_sigprof(libc::SIG_BLOCK);
        let timer = ThreadTimer::start(MAX_HZ).expect("the highest rate");
        std::thread::sleep(Duration::from_millis(1));
        drop(timer);
        block_sigprof(libc::SIG_UNBLOCK);
    })
    .join()
    .unwrap();
    sample::start(MAX_HZ).expect("the highest rate");
    sample::stop();
}

/// Blocks (`SIG_BLOCK`) or unblocks SIGPROF for the calling thread.
fn block_sigprof(how: i32) {
    // SAFETY: changes the calling thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPROF);
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// What the SIGUSR2 handler saw: the walk's exact-pc flags.
static FLAGS: Mutex<Vec<bool>> = Mutex::new(Vec::new());
static NESTED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_usr2(_: i32, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let mut frames = [Frame::default(); 64];
    // SAFETY: `uc` is the kernel's; walk_ucontext and record are
    // async-signal-safe. The lock is free: the test thread is the one
    // interrupted, and it takes the lock only after the signals.
    unsafe {
        let n = stackmark::walk_ucontext(uc, &mut frames);
        if let Ok(mut f) = FLAGS.try_lock() {
            f.clear();
            f.extend(frames[..n].iter().map(|f| f.pc_kind.is_exact()));
        }
        sample::record(uc);
    }
    NESTED.fetch_add(1, SeqCst);
}

static RAISED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_usr1(_: i32, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: raise is async-signal-safe; SIGUSR2 is not blocked here.
    unsafe { libc::raise(libc::SIGUSR2) };
    // Work after the call keeps this handler's frame (no tail call), so
    // the walk from raise, in libc without a table or frame pointer,
    // steps by this frame's record to the signal frame.
    RAISED.fetch_add(1, SeqCst);
}

fn handle(sig: i32, f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void)) {
    // SAFETY: a zeroed sigaction with an SA_SIGINFO handler and an empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = f as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
    }
}

#[test]
fn a_sample_taken_inside_a_handler_marks_the_frame_the_signal_interrupted_as_exact() {
    let _t = turn();
    stackmark::init().unwrap();
    handle(libc::SIGUSR1, on_usr1);
    handle(libc::SIGUSR2, on_usr2);
    stackmark::refresh().unwrap(); // the trampoline is known now
    sample::drain(|_| {});
    // SAFETY: raises a signal whose handler is installed above.
    unsafe { libc::raise(libc::SIGUSR1) };
    assert_eq!(NESTED.load(SeqCst), 1);
    let me = common::tid();
    let mut samples = Vec::new();
    sample::drain(|s| {
        if s.tid == me {
            let flags: Vec<bool> = (0..s.frames().len())
                .map(|i| s.pc_kind(i).is_exact())
                .collect();
            samples.push(flags);
        }
    });
    let walked = FLAGS.lock().unwrap().clone();
    assert_eq!(samples.len(), 1);
    // Frame 0 (in raise), then, beyond return addresses, the SIGUSR1
    // trampoline the handler returns to and the frame SIGUSR1 interrupted:
    // exact pcs, which a symbolizer must not move back.
    let exact: Vec<usize> = (1..walked.len()).filter(|&i| walked[i]).collect();
    assert!(walked[0], "{walked:?}");
    assert_eq!(exact.len(), 2, "{walked:?}");
    assert_eq!(exact[1], exact[0] + 1, "{walked:?}");
    assert!(walked.iter().any(|&p| !p), "return addresses: {walked:?}");
    assert_eq!(samples[0], walked);
}

#[test]
fn thread_timer_periods_merged_into_a_pending_signal_are_counted_as_missed() {
    let _t = turn();
    stackmark::init().unwrap();
    let before = sample::stats();
    let elapsed_ms = std::thread::spawn(|| {
        // 100 periods or more with the signal blocked: the first stays
        // pending, the others merge into it until the unblock delivers it
        // (later than 100 ms when the thread waits to be scheduled).
        block_sigprof(libc::SIG_BLOCK);
        let t0 = std::time::Instant::now();
        let timer = ThreadTimer::start(1000).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        block_sigprof(libc::SIG_UNBLOCK);
        let elapsed = t0.elapsed().as_millis() as u64;
        drop(timer);
        elapsed
    })
    .join()
    .unwrap();
    sample::drain(|_| {});
    let after = sample::stats();
    let missed = after.missed - before.missed;
    assert!(after.taken > before.taken, "the pending signal was sampled");
    // No more periods than milliseconds passed, and most of the 100 slept.
    assert!(
        (80..=elapsed_ms + 1).contains(&missed),
        "{missed} missed in {elapsed_ms} ms"
    );
}

#[test]
fn starting_a_timer_on_each_thread_rebuilds_the_module_table_once_at_most() {
    let _t = turn();
    stackmark::init().unwrap();
    let first = ThreadTimer::start(100).unwrap();
    let generation = stackmark::modules::current().unwrap().generation();
    // Every new thread of a profiled program starts its own timer: none of
    // them rebuilds the table again.
    for _ in 0..3 {
        std::thread::spawn(|| drop(ThreadTimer::start(100).unwrap()))
            .join()
            .unwrap();
    }
    drop(ThreadTimer::start(100).unwrap());
    let now = stackmark::modules::current().unwrap().generation();
    drop(first);
    assert_eq!(now, generation);
}

#[test]
fn another_timers_merged_periods_are_not_counted_as_missed() {
    let _t = turn();
    stackmark::init().unwrap();
    // The handler is installed (by a thread timer started and stopped).
    drop(ThreadTimer::start(100).unwrap());
    let before = sample::stats();
    std::thread::spawn(|| {
        // The program's own POSIX timer on SIGPROF, to this thread, with the
        // signal blocked for 100 periods or more: its overrun is not ours.
        block_sigprof(libc::SIG_BLOCK);
        // SAFETY: a zeroed sigevent naming SIGPROF and this thread; a
        // timer id to fill.
        let id = unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = libc::SIGPROF;
            ev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as i32;
            let mut id: libc::timer_t = std::ptr::null_mut();
            assert_eq!(
                libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id),
                0
            );
            let ms = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            let spec = libc::itimerspec {
                it_interval: ms,
                it_value: ms,
            };
            assert_eq!(libc::timer_settime(id, 0, &spec, std::ptr::null_mut()), 0);
            id
        };
        std::thread::sleep(Duration::from_millis(100));
        block_sigprof(libc::SIG_UNBLOCK);
        // SAFETY: the timer made above.
        unsafe { libc::timer_delete(id) };
    })
    .join()
    .unwrap();
    sample::drain(|_| {});
    let after = sample::stats();
    assert!(after.taken > before.taken, "its signal was still sampled");
    assert_eq!(after.missed, before.missed);
}
