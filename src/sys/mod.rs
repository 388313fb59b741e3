//! The leaf layer: what the rest of the crate asks of the operating system.
//! Reads of possibly-unmapped memory, the calling thread's stack bounds and
//! id, the page size, the clock, fork hooks, `errno`, `SIGPIPE`, and the
//! layout of the Darwin `ucontext_t`. Nothing here knows of walks, modules
//! or markup.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::{checked_reads, read_checked, register_thread, registered_stack};

#[cfg(target_os = "macos")]
pub mod macos;
#[cfg(target_os = "macos")]
pub use macos::{read_checked, register_thread, registered_stack};

mod fd;
pub(crate) use fd::write_all;

#[cfg(target_os = "linux")]
pub mod thread_table;

/// The calling thread's id (also the sampler's).
#[cfg(target_os = "linux")]
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The thread's system-wide id (truncated: ids stay far below 2^31).
#[cfg(target_os = "macos")]
pub(crate) fn gettid() -> i32 {
    let mut id = 0u64;
    // SAFETY: pthread_threadid_np writes the calling thread's id into `id`.
    unsafe { libc::pthread_threadid_np(libc::pthread_self(), &mut id) };
    id as i32
}

/// The system's page size (4096 where it cannot be asked): 16 KiB on
/// Apple silicon, up to 64 KiB on AArch64 Linux.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).map_or(4096, |p| p.max(4096))
}

/// Nanoseconds on the monotonic clock, for timing and deadlines in
/// signal handlers (`clock_gettime` is async-signal-safe; a wait counted
/// in sleeps is cut short by every signal that interrupts a sleep).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills `ts`; async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `f` on the calling thread while another thread interrupts it with
/// a signal every `period`, as a sampling timer does: an empty handler
/// without `SA_RESTART` (on SIGURG, which nothing else in the crate's
/// tests sends), so sleeps end early and `poll` fails with `EINTR`.
#[cfg(test)]
pub(crate) fn interrupted_every<R>(period: core::time::Duration, f: impl FnOnce() -> R) -> R {
    extern "C" fn nothing(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {}
    signalled_while(libc::SIGURG, nothing, period, f)
}

/// Runs `f` on the calling thread while another thread sends it `sig`,
/// handled by `handler` (installed without `SA_RESTART`), every `period`
/// (as fast as it can for a zero period).
#[cfg(test)]
pub(crate) fn signalled_while<R>(
    sig: libc::c_int,
    handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut core::ffi::c_void),
    period: core::time::Duration,
    f: impl FnOnce() -> R,
) -> R {
    use core::sync::atomic::{AtomicBool, Ordering::SeqCst};
    // SAFETY: an SA_SIGINFO handler the caller provides; the action is
    // fully initialised.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        assert_eq!(libc::sigaction(sig, &sa, core::ptr::null_mut()), 0);
    }
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(SeqCst) {
                // SAFETY: the calling thread outlives this scope's threads.
                unsafe { libc::pthread_kill(me, sig) };
                std::thread::sleep(period);
            }
        });
        let r = f();
        stop.store(true, SeqCst);
        r
    })
}

/// Runs `f` and puts the calling thread's `errno` back as it was before:
/// for code in signal handlers, whose interrupted code may be between a
/// failing call and its check of `errno`. Async-signal-safe.
pub(crate) fn keeping_errno<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the calling thread's errno, a plain thread-local int.
    let errno = unsafe { *errno_location() };
    let r = f();
    // SAFETY: as above.
    unsafe { *errno_location() = errno };
    r
}

/// Has `in_child` run in the child after every `fork`, registered the first
/// time this is called with `registered`. The handler runs in a process
/// with one thread left: it may only reset state the other threads held.
pub(crate) fn once_in_fork_child(
    registered: &core::sync::atomic::AtomicBool,
    in_child: extern "C" fn(),
) {
    if !registered.swap(true, core::sync::atomic::Ordering::SeqCst) {
        // SAFETY: pthread_atfork only records the handler.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    }
}

#[cfg(target_os = "linux")]
use libc::__errno_location as errno_location;
#[cfg(target_os = "macos")]
use libc::__error as errno_location;

/// The lowest address any mapping of ours can start at: the first page is
/// never mapped in a process this crate serves (a null pointer's page).
const LOWEST_MAPPED: u64 = 4096;
/// An address at or above which no user mapping can lie on any supported
/// target: x86_64 user space ends below 2^47 (2^56 with 5-level paging),
/// AArch64's below 2^52, macOS's below 2^47.
const BEYOND_USER: u64 = 1 << 56;

/// Whether `len` bytes at `addr` could all lie in user mappings. Stack words
/// taken for addresses are mostly small numbers or all ones; ruling those
/// out here saves a checked read (a system call) that can only fail.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(crate) fn may_be_mapped(addr: u64, len: usize) -> bool {
    addr >= LOWEST_MAPPED
        && addr
            .checked_add(len as u64)
            .is_some_and(|end| end <= BEYOND_USER)
}

/// Keeps a report's writes to a pipe nobody reads any more from ending the
/// process with `SIGPIPE` (where that signal has its default action, as in
/// a C program): the signal is blocked while the guard lives, and one the
/// report raised is taken back before the old mask returns. In a crash
/// handler, the fault then still ends the process as it would have.
/// Async-signal-safe.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(crate) struct QuietSigpipe {
    old: libc::sigset_t,
    was_pending: bool,
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl QuietSigpipe {
    /// Blocks `SIGPIPE` for the calling thread.
    pub(crate) fn new() -> Self {
        // SAFETY: signal-set calls on local sets; pthread_sigmask and
        // sigpending only change or report the calling thread's signals.
        unsafe {
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &sigpipe_only(), &mut old);
            QuietSigpipe {
                old,
                was_pending: sigpipe_pending(),
            }
        }
    }
}

/// The signal set holding `SIGPIPE` alone.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn sigpipe_only() -> libc::sigset_t {
    // SAFETY: fills a local set.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        set
    }
}

/// Whether a `SIGPIPE` waits for this thread (or the process).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn sigpipe_pending() -> bool {
    // SAFETY: sigpending fills a local set.
    unsafe {
        let mut pending: libc::sigset_t = core::mem::zeroed();
        libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl Drop for QuietSigpipe {
    fn drop(&mut self) {
        if !self.was_pending && sigpipe_pending() {
            // SAFETY: takes the pending SIGPIPE, which is blocked, off the
            // queue without waiting; then restores the caller's mask.
            unsafe {
                let set = sigpipe_only();
                #[cfg(target_os = "linux")]
                {
                    let now = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    libc::sigtimedwait(&set, core::ptr::null_mut(), &now);
                }
                // No sigtimedwait here; the signal is pending, so sigwait
                // returns at once.
                #[cfg(target_os = "macos")]
                {
                    let mut sig = 0;
                    libc::sigwait(&set, &mut sig);
                }
            }
        }
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, core::ptr::null_mut()) };
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "macos")))]
mod tests {
    use super::may_be_mapped;

    #[test]
    fn small_numbers_and_addresses_beyond_user_space_cannot_be_mapped() {
        for (addr, len) in [
            (0, 1),
            (0x38, 9),
            (4095, 1),
            (1 << 56, 1),
            (u64::MAX - 3, 8),
        ] {
            assert!(!may_be_mapped(addr, len), "{addr:#x}+{len}");
        }
        // The last bytes below 2^56 and the second page may be.
        assert!(may_be_mapped((1 << 56) - 8, 8));
        assert!(!may_be_mapped((1 << 56) - 7, 8));
        assert!(may_be_mapped(4096, 16));
        assert!(may_be_mapped(0x7fff_f7cf_b000, 9));
    }
}
