//! What the crash handler, the panic hook and the thread dump share: one
//! report at a time (the report turn), and the lines every report starts
//! and ends with.

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};

use crate::markup::{Markup, Sink};
use crate::sys::gettid;

/// The signals the crash handler reports.
pub const CRASH_SIGNALS: [c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTRAP,
];

/// Most frames a crash report shows.
pub const MAX_CRASH_FRAMES: usize = 256;

/// The thread id writing a report now (0: none).
pub(crate) static OWNER: AtomicI32 = AtomicI32::new(0);
/// Threads inside the handler that have not finished their report.
pub(crate) static PENDING: AtomicUsize = AtomicUsize::new(0);
/// The thread id writing a crash or panic report right now, or 0. Lets a
/// test allocator prove that reports never allocate.
pub fn reporting_thread() -> i32 {
    OWNER.load(SeqCst)
}

/// How long a panic report waits for another thread's report to end before
/// it is written anyway: mixed lines are better than none.
const PANIC_WAIT_MS: u32 = 5000;

/// Makes a child after `fork` forget the reports of the parent's other
/// threads, which do not exist in the child and would hold the report turn
/// for good. Registered once, by whatever installs a reporter.
pub(crate) fn forget_reports_in_child() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    extern "C" fn in_child() {
        // Only the forking thread is left, and it is in no report: reports
        // never fork.
        OWNER.store(0, SeqCst);
        PENDING.store(0, SeqCst);
    }
    crate::sys::once_in_fork_child(&REGISTERED, in_child);
}

/// A panic report's turn: crash and panic reports are written one at a time,
/// or the lines of two reports (each with its own `reset` and module ids)
/// would mix and neither would symbolize. Released on drop.
pub(crate) struct ReportTurn(bool);

impl ReportTurn {
    /// Waits for the turn, for at most [`PANIC_WAIT_MS`]. A thread that
    /// holds it already (a panic inside its own report) goes on.
    pub(crate) fn take() -> ReportTurn {
        ReportTurn(claim_turn(&OWNER, gettid(), PANIC_WAIT_MS) == Claim::Taken)
    }

    /// Waits for the turn as [`ReportTurn::take`] does, for a dump; `None`
    /// if another thread kept it, if this one holds it already (a dump
    /// inside its own report would reuse the report's buffers), or if a
    /// crash is waiting for it: a dump repeated in a loop would otherwise
    /// take the turn back before the crash's next poll, every time.
    #[cfg(target_os = "linux")]
    pub(crate) fn take_for_dump() -> Option<ReportTurn> {
        if PENDING.load(SeqCst) != 0 {
            return None;
        }
        let turn = ReportTurn::take();
        turn.0.then_some(turn)
    }
}

/// How waiting for the report turn ([`OWNER`]) ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Claim {
    /// This thread holds it now.
    Taken,
    /// This thread held it already: it is inside its own report.
    AlreadyMine,
    /// Another thread held it for the whole wait.
    TimedOut,
}

/// Waits for the report turn, polling every millisecond, for at most
/// `max_ms` milliseconds on the monotonic clock (a sleep a signal cuts
/// short, as a sampled thread's timer does, counts only its time).
/// Async-signal-safe.
pub(crate) fn claim_turn(owner: &AtomicI32, tid: i32, max_ms: u32) -> Claim {
    let deadline = crate::sys::monotonic_ns() + u64::from(max_ms) * 1_000_000;
    loop {
        match owner.compare_exchange(0, tid, SeqCst, SeqCst) {
            Ok(_) => return Claim::Taken,
            Err(owner) if owner == tid => return Claim::AlreadyMine,
            Err(_) if crate::sys::monotonic_ns() >= deadline => return Claim::TimedOut,
            Err(_) => sleep_ms(1),
        }
    }
}

impl Drop for ReportTurn {
    fn drop(&mut self) {
        if self.0 {
            OWNER.store(0, SeqCst);
        }
    }
}

/// The last line of a report. `more` says the walk was cut at the
/// report's frame limit.
pub(crate) fn write_trailer<S: Sink>(m: &mut Markup<'_, S>, n: usize, more: bool) {
    m.text("stackmark: end of report (")
        .dec(n as u64)
        .text(" frames");
    if more {
        m.text("; the stack goes on: more frames not shown");
    }
    m.text(")").newline();
}

/// Writes the calling thread's id and name: `thread 1234 "main"`.
pub(crate) fn write_thread<S: Sink>(m: &mut Markup<'_, S>) {
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes plus a NUL into `name`.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr())
    };
    // SAFETY: writes at most `name.len()` bytes, NUL included.
    #[cfg(target_os = "macos")]
    unsafe {
        libc::pthread_getname_np(libc::pthread_self(), name.as_mut_ptr().cast(), name.len())
    };
    let len = name.iter().position(|&b| b == 0).unwrap_or(16);
    m.text("thread ").dec(gettid() as u64).text(" \"");
    m.free_text(&name[..len]).text("\"");
}

pub(crate) fn sleep_ms(ms: i64) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    };
    // SAFETY: nanosleep with a valid timespec; async-signal-safe.
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_for_the_turn_lasts_its_time_however_often_signals_cut_its_sleeps() {
        // A sampled thread's timer cuts each 1 ms sleep short; counting
        // sleeps made a 5 s wait some 0.5 s at 10 kHz, and reports mixed.
        let owner = AtomicI32::new(-5);
        let every = std::time::Duration::from_micros(100);
        let (claim, waited) = crate::sys::interrupted_every(every, || {
            let start = std::time::Instant::now();
            (claim_turn(&owner, 1, 300), start.elapsed())
        });
        assert_eq!(claim, Claim::TimedOut);
        assert!(waited.as_millis() >= 300, "gave up after {waited:?}");
    }
}
