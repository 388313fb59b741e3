//! The crash handler: reports SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT and
//! SIGTRAP as a markup backtrace, then lets the process die of the original
//! signal.
//!
//! Everything from the signal to the re-raise is async-signal-safe: no
//! allocation, no lock that interrupted code could hold, no
//! `dl_iterate_phdr`. The module table was built by [`crate::init`]; the
//! frames go into static memory that only the reporting thread uses.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};

mod altstack;
mod error;
mod signal;
mod write;

pub use altstack::{install_altstack, ALTSTACK_SIZE};
pub use error::CrashError;
pub use signal::signal_name;
#[cfg(feature = "internals")]
pub use write::corrupt_for_test;

use crate::report::{claim_turn, forget_reports_in_child, sleep_ms, Claim, OWNER, PENDING};
pub use crate::report::{reporting_thread, CRASH_SIGNALS, MAX_CRASH_FRAMES};
use crate::sys::gettid;
use crate::walk::Frame;
use signal::{fault_recurs, raise_here};
use write::report;

struct Shared {
    previous: UnsafeCell<[libc::sigaction; CRASH_SIGNALS.len()]>,
    frames: UnsafeCell<[Frame; MAX_CRASH_FRAMES]>,
}

// SAFETY: `previous` is written only by `install_crash_handler` before the
// handlers that read it are installed; `frames` only by the thread that owns
// `OWNER`.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared {
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags).
    previous: UnsafeCell::new(unsafe { core::mem::zeroed() }),
    frames: UnsafeCell::new(
        [Frame {
            pc: 0,
            sp: 0,
            pc_kind: crate::walk::PcKind::ReturnAddress,
            method: crate::walk::Method::Context,
        }; MAX_CRASH_FRAMES],
    ),
};

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Where reports go.
static FD: AtomicI32 = AtomicI32::new(2);

/// How long a crash waits for another thread's report to end. A report
/// takes milliseconds; one still going after this is stuck (a panic report
/// blocked writing into a pipe nobody reads), and waiting on would leave
/// the process hanging with every other signal blocked. The crash then
/// ends the process without its own report: two reports cannot share the
/// crash stack.
const CRASH_WAIT_MS: u32 = 5000;

/// Installs the crash handler for [`CRASH_SIGNALS`], writing reports to
/// standard error, or to the descriptor an earlier
/// [`install_crash_handler_to_fd`] chose (a library making sure the handler
/// is in place does not take the reports from the program's log). Builds
/// the module table first if needed and gives the calling thread an
/// alternate signal stack. Idempotent.
///
/// [`CrashError::Refresh`] means the handlers are in place but the module
/// table could not be rebuilt; calling again retries that.
///
/// After a report the handlers that were there before are put back and the
/// signal takes its course. Should one of them recover (a runtime that
/// handles its own faults), the process goes on without ours: calling
/// this again installs them again.
pub fn install_crash_handler() -> Result<(), CrashError> {
    install(None)
}

/// Like [`install_crash_handler`], writing reports to `fd` (from now on,
/// also if the handler was installed already).
///
/// The crate does not own `fd`: it must stay open for the life of the
/// process. Once it is closed, its number may be reused for another file or
/// socket, and reports would be written there.
pub fn install_crash_handler_to_fd(fd: c_int) -> Result<(), CrashError> {
    install(Some(fd))
}

/// Set once the handlers are installed and until a refresh after that
/// succeeds: the table must learn glibc's restorer from them.
static NEEDS_REFRESH: AtomicBool = AtomicBool::new(false);

fn install(fd: Option<c_int>) -> Result<(), CrashError> {
    if let Some(fd) = fd {
        FD.store(fd, SeqCst);
    }
    if crate::modules::current().is_none() {
        crate::live::init_table().map_err(CrashError::Init)?;
    }
    install_altstack()?;
    forget_reports_in_child();
    // Other threads in the report: reserved before the handlers that use
    // it exist.
    #[cfg(target_os = "linux")]
    crate::threads::setup_default();
    if !INSTALLED.swap(true, SeqCst) {
        install_handlers()?;
        NEEDS_REFRESH.store(true, SeqCst);
    }
    // Installing handlers taught glibc's restorer to the table; refresh so
    // the walk recognises signal frames.
    if NEEDS_REFRESH.load(SeqCst) {
        crate::live::refresh().map_err(CrashError::Refresh)?;
        NEEDS_REFRESH.store(false, SeqCst);
    }
    Ok(())
}

/// Installs [`on_crash`] for every crash signal, keeping the old actions.
fn install_handlers() -> Result<(), CrashError> {
    // SAFETY: `previous` is filled before any of our handlers can run (each
    // signal's slot is written by the same sigaction call that installs it);
    // the new action is fully initialised.
    unsafe {
        let previous = &mut *SHARED.previous.get();
        for (i, &sig) in CRASH_SIGNALS.iter().enumerate() {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_crash as *const () as usize;
            // `SA_NODEFER`: the signal handled stays open too, so a fault
            // inside the report enters the handler again, which puts the
            // earlier handlers back; blocked, the kernel would kill the
            // process without running them.
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            // Every other signal waits until the handler is done: only the
            // report runs on the crash stack, and a profiler's SIGPROF
            // landing on a thread's small alternate stack on top of the
            // handler's waits would overflow it. Crash signals stay open,
            // so a fault inside the report still ends in the original one.
            libc::sigfillset(&mut sa.sa_mask);
            for &other in &CRASH_SIGNALS {
                libc::sigdelset(&mut sa.sa_mask, other);
            }
            if libc::sigaction(sig, &sa, &mut previous[i]) != 0 {
                return Err(CrashError::Os(std::io::Error::last_os_error()));
            }
        }
    }
    Ok(())
}

/// Puts back the dispositions that were there before ours (for every
/// handled signal, so a follow-up signal such as the abort of Rust's
/// stack-overflow handler is not reported twice), then ends the way the
/// process would have without us. A fault is left to recur when the
/// handler returns, so the restored handler, or the core dump, sees the
/// kernel's own siginfo (its code and fault address; Rust's handler tells
/// a stack overflow by that address). Any other signal is sent again, with
/// its siginfo where the system allows. `info` is the signal's siginfo.
fn restore_and_reraise(sig: c_int, info: *const libc::siginfo_t) {
    // SAFETY: `info` is the kernel's siginfo for this signal.
    let code = unsafe { (*info).si_code };
    // SAFETY: `previous` was filled at install; sigaction and
    // pthread_sigmask are async-signal-safe.
    unsafe {
        let previous = &*SHARED.previous.get();
        for (i, &s) in CRASH_SIGNALS.iter().enumerate() {
            libc::sigaction(s, &previous[i], core::ptr::null_mut());
        }
    }
    // Ours are gone: should a restored handler recover, installing again
    // puts them back.
    INSTALLED.store(false, SeqCst);
    if !fault_recurs(sig, code) {
        // Blocked until the handler returns (`SA_NODEFER` left it open),
        // so the signal sent again is delivered then, under the restored
        // disposition, with the interrupted thread's mask.
        // SAFETY: a valid set, built here; async-signal-safe calls.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut());
        }
        raise_here(sig, info);
    }
}

/// Size of the stack reports run on.
const CRASH_STACK_SIZE: usize = 128 * 1024;

/// The stack reports run on: the alternate signal stack of a thread may be
/// small (Rust's standard library gives spawned threads `SIGSTKSZ`), so the
/// handler switches to this one, which only the `OWNER` thread uses.
#[repr(C, align(16))]
struct CrashStack(UnsafeCell<[u8; CRASH_STACK_SIZE]>);

// SAFETY: used only by the thread that holds OWNER.
unsafe impl Sync for CrashStack {}

static CRASH_STACK: CrashStack = CrashStack(UnsafeCell::new([0; CRASH_STACK_SIZE]));

struct ReportArgs {
    sig: c_int,
    info: *mut libc::siginfo_t,
    uc: *mut c_void,
}

extern "C" fn report_on_crash_stack(arg: *mut c_void) {
    // SAFETY: `arg` is the ReportArgs of `on_crash`, whose fields come from
    // the kernel; the caller owns OWNER, so the frame buffer is ours.
    unsafe {
        let a = &*(arg as *const ReportArgs);
        let frames = &mut *SHARED.frames.get();
        report(FD.load(SeqCst), a.sig, a.info, a.uc, frames);
    }
}

/// Calls `f(arg)` with the stack pointer set to `top` (16-byte aligned),
/// then returns to the current stack.
///
/// # Safety
/// `top` must be the end of a writable region large enough for `f`, used by
/// nothing else meanwhile.
unsafe fn on_stack(top: *mut u8, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    // SAFETY: the old sp is kept in a callee-saved register across the call,
    // and restored; the new stack is 16-byte aligned as the ABI requires.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        )
    };
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            "mov x20, sp",
            "mov sp, {top}",
            "blr {f}",
            "mov sp, x20",
            top = in(reg) top,
            f = in(reg) f,
            in("x0") arg,
            out("x20") _,
            clobber_abi("C"),
        )
    };
}

extern "C" fn on_crash(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // A handler installed before ours may recover from the fault and resume
    // the code it interrupted, which must find its errno as it left it.
    crate::sys::keeping_errno(|| handle_crash(sig, info, uc));
}

fn handle_crash(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let tid = gettid();
    PENDING.fetch_add(1, SeqCst);
    // One report at a time. A thread that crashes inside its own report
    // does not wait for itself: it skips straight to the original action,
    // as does one behind a report that is stuck.
    match claim_turn(&OWNER, tid, CRASH_WAIT_MS) {
        Claim::Taken => {}
        Claim::AlreadyMine | Claim::TimedOut => {
            PENDING.fetch_sub(1, SeqCst);
            restore_and_reraise(sig, info);
            return;
        }
    }
    let mut args = ReportArgs { sig, info, uc };
    // SAFETY: this thread owns OWNER, so it alone uses the crash stack and
    // the frame buffer; `info` and `uc` come from the kernel.
    unsafe {
        let top = (*CRASH_STACK.0.get()).as_mut_ptr().add(CRASH_STACK_SIZE);
        on_stack(
            top,
            report_on_crash_stack,
            (&mut args as *mut ReportArgs).cast(),
        );
    }
    OWNER.store(0, SeqCst);
    PENDING.fetch_sub(1, SeqCst);
    wait_for_other_reports(&PENDING, &OWNER);
    restore_and_reraise(sig, info);
}

/// Lets other threads finish their reports before the process dies, but
/// never waits forever. Threads crashing "at the same time" may not have
/// entered the handler yet (two cores, eight threads), and a panic report
/// may have taken the turn (`owner`) as this one released it, which no
/// crash counts in `pending`: waits until for 20 ms no crash has been
/// pending and no report under way, for 2 s at most.
fn wait_for_other_reports(pending: &AtomicUsize, owner: &AtomicI32) {
    let start = crate::sys::monotonic_ns();
    let mut busy = start;
    loop {
        let now = crate::sys::monotonic_ns();
        if pending.load(SeqCst) != 0 || owner.load(SeqCst) != 0 {
            busy = now;
        }
        if now - busy >= 20_000_000 || now - start >= 2_000_000_000 {
            break;
        }
        sleep_ms(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_waits_for_a_report_that_took_the_turn_after_it() {
        // A panic report took the turn as the crash's own report ended;
        // no crash is pending. The crash must not end the process under it.
        let (pending, owner) = (AtomicUsize::new(0), AtomicI32::new(7));
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                sleep_ms(150);
                done.store(true, SeqCst);
                owner.store(0, SeqCst);
            });
            wait_for_other_reports(&pending, &owner);
            assert!(done.load(SeqCst), "the process would die mid-report");
        });
    }
}
