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

use crate::markup::{FdSink, Markup};
use crate::report::{
    claim_turn, forget_reports_in_child, sleep_ms, write_thread, write_trailer, Claim, OWNER,
    PENDING,
};
pub use crate::report::{reporting_thread, CRASH_SIGNALS, MAX_CRASH_FRAMES};
use crate::sys::gettid;
use crate::walk::Frame;

/// Size of the alternate signal stack [`install_altstack`] gives a thread.
pub const ALTSTACK_SIZE: usize = 64 * 1024;

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
            precise: false,
            method: crate::walk::Method::Context,
        }; MAX_CRASH_FRAMES],
    ),
};

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Where reports go.
static FD: AtomicI32 = AtomicI32::new(2);
/// Test hook: make the report itself fault.
static FAULT_IN_REPORT: AtomicBool = AtomicBool::new(false);

/// How long a crash waits for another thread's report to end. A report
/// takes milliseconds; one still going after this is stuck (a panic report
/// blocked writing into a pipe nobody reads), and waiting on would leave
/// the process hanging with every other signal blocked. The crash then
/// ends the process without its own report: two reports cannot share the
/// crash stack.
const CRASH_WAIT_MS: u32 = 5000;

/// Makes the next crash report fault half-way, to test that a crash inside
/// the handler ends the process instead of looping. For tests only.
#[cfg(feature = "internals")]
pub fn corrupt_for_test() {
    FAULT_IN_REPORT.store(true, SeqCst);
}

/// Why the crash handler could not be installed.
#[derive(Debug)]
pub enum CrashError {
    /// The module table could not be built; nothing was installed.
    Init(crate::live::InitError),
    /// The handlers are installed, but the module table could not be
    /// rebuilt to learn the signal restorer they taught it (a walk guard
    /// held across two refreshes, say). Reports still work, but may not
    /// cross other handlers' signal frames; calling the install again
    /// retries the rebuild.
    Refresh(crate::live::InitError),
    /// A system call failed.
    Os(std::io::Error),
}

impl core::fmt::Display for CrashError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CrashError::Init(e) => write!(f, "building the module table: {e}"),
            CrashError::Refresh(e) => write!(
                f,
                "the crash handler is installed, but rebuilding the module table failed: {e}"
            ),
            CrashError::Os(e) => write!(f, "installing the crash handler: {e}"),
        }
    }
}

impl std::error::Error for CrashError {}

thread_local! {
    /// The alternate stack [`install_altstack`] mapped for this thread,
    /// unmapped when the thread exits.
    static OWN_ALTSTACK: OwnAltstack = const { OwnAltstack(core::cell::Cell::new(0)) };
}

/// The address of a mapping of [`ALTSTACK_SIZE`] bytes plus a guard page.
struct OwnAltstack(core::cell::Cell<usize>);

impl Drop for OwnAltstack {
    fn drop(&mut self) {
        let p = self.0.get();
        if p == 0 {
            return;
        }
        // SAFETY: the mapping this thread made; at its exit nothing runs on
        // it. It is taken out of use first if it is still installed.
        unsafe {
            let mut cur: libc::stack_t = core::mem::zeroed();
            if libc::sigaltstack(core::ptr::null(), &mut cur) == 0
                && cur.ss_sp as usize == p + altstack_guard()
            {
                let off = libc::stack_t {
                    ss_sp: core::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                if libc::sigaltstack(&off, core::ptr::null_mut()) != 0 {
                    return;
                }
            }
            unmap_altstack(p);
        }
    }
}

/// The guard page below an alternate stack: a whole page of the system's
/// (16 KiB on Apple silicon, up to 64 KiB on AArch64 Linux), since
/// `mprotect` covers whole pages, and a 4 KiB guard would take the rest of
/// its page from the stack.
fn altstack_guard() -> usize {
    crate::sys::page_size() as usize
}

/// Unmaps an alternate stack that [`install_altstack`] mapped at `p`, with
/// its guard page.
///
/// # Safety
/// Nothing may use that stack any more.
unsafe fn unmap_altstack(p: usize) {
    // SAFETY: the whole mapping install_altstack made, unused by the
    // caller's contract.
    unsafe { libc::munmap(p as *mut c_void, ALTSTACK_SIZE + altstack_guard()) };
}

/// Gives the calling thread an alternate signal stack of [`ALTSTACK_SIZE`]
/// bytes (plus a guard page), so its crash handler runs even after a stack
/// overflow. Threads spawned by Rust's `std::thread` already get one from
/// the standard library; call this at the start of other threads (C
/// threads, or when the program disables std's). A thread that already has
/// an alternate stack of at least half that size keeps it; the one this
/// makes is unmapped when the thread exits.
pub fn install_altstack() -> Result<(), CrashError> {
    // SAFETY: queries the current alternate stack, then maps a fresh region
    // (checked for failure) and installs it; the mapping is freed only at
    // the thread's exit, after it is taken out of use.
    unsafe {
        let mut cur: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut cur) == 0
            && cur.ss_flags & libc::SS_DISABLE == 0
            && cur.ss_size >= ALTSTACK_SIZE / 2
        {
            return Ok(());
        }
        let guard = altstack_guard();
        let p = libc::mmap(
            core::ptr::null_mut(),
            ALTSTACK_SIZE + guard,
            libc::PROT_READ | libc::PROT_WRITE,
            MAP_FLAGS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(CrashError::Os(std::io::Error::last_os_error()));
        }
        libc::mprotect(p, guard, libc::PROT_NONE);
        let ss = libc::stack_t {
            ss_sp: p.cast::<u8>().add(guard).cast(),
            ss_flags: 0,
            ss_size: ALTSTACK_SIZE,
        };
        if libc::sigaltstack(&ss, core::ptr::null_mut()) != 0 {
            let err = std::io::Error::last_os_error();
            unmap_altstack(p as usize);
            return Err(CrashError::Os(err));
        }
        // Where the thread is exiting already, its stack stays mapped, as
        // before: there is no exit hook left to unmap it.
        let _ = OWN_ALTSTACK.try_with(|own| {
            let old = own.0.replace(p as usize);
            if old != 0 {
                // A stack this thread mapped earlier, replaced since.
                unmap_altstack(old);
            }
        });
    }
    Ok(())
}

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

/// The alternate stack's mapping.
#[cfg(target_os = "linux")]
const MAP_FLAGS: c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK;
#[cfg(target_os = "macos")]
const MAP_FLAGS: c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;

/// Sends `sig` to the calling thread again, with its siginfo `info` where
/// the system allows (Linux: a process may queue any siginfo to itself), so
/// the restored handler sees the original sender or code.
fn raise_here(sig: c_int, info: *const libc::siginfo_t) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `info` is the kernel's siginfo for this signal; both calls
        // are async-signal-safe system calls.
        let (pid, tid) = (unsafe { libc::getpid() }, gettid());
        // SAFETY: as above.
        let queued = unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, sig, info) };
        if queued != 0 {
            // SAFETY: as above.
            unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig) };
        }
    }
    // SAFETY: pthread_kill on the calling thread is async-signal-safe.
    #[cfg(target_os = "macos")]
    unsafe {
        let _ = info;
        libc::pthread_kill(libc::pthread_self(), sig)
    };
}

/// Whether returning from the handler runs the faulting instruction again,
/// so that the fault recurs by itself: a SIGSEGV, SIGBUS, SIGILL or SIGFPE
/// that the kernel raised for an instruction, and on AArch64 Linux the
/// SIGTRAP of a `brk` (`TRAP_BRKPT`), whose pc the kernel leaves at the
/// instruction (x86_64's `int3` leaves it past, so that SIGTRAP would not
/// recur). Not an asynchronous fault, which names no instruction: a memory
/// error found in the background (`BUS_MCEERR_AO`) or an asynchronous MTE
/// tag fault (`SEGV_MTEAERR`). A fault that recurs is not also sent again:
/// an earlier handler would see it twice, the first time with a copy of
/// the kernel's siginfo.
fn fault_recurs(sig: c_int, code: c_int) -> bool {
    let faulting = matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
    ) || brk_trap(sig, code);
    faulting && origin(code) == Origin::Fault && !asynchronous_fault(sig, code)
}

/// SIGTRAP's code for a breakpoint instruction (Linux's `brk`, macOS's
/// `int3`).
const TRAP_BRKPT: c_int = 1;

/// Whether this is the SIGTRAP of an AArch64 `brk` on Linux.
fn brk_trap(sig: c_int, code: c_int) -> bool {
    cfg!(all(target_os = "linux", target_arch = "aarch64"))
        && (sig, code) == (libc::SIGTRAP, TRAP_BRKPT)
}

/// Linux's `BUS_MCEERR_AO` and `SEGV_MTEAERR` (not in every libc).
#[cfg(target_os = "linux")]
fn asynchronous_fault(sig: c_int, code: c_int) -> bool {
    const BUS_MCEERR_AO: c_int = 5;
    const SEGV_MTEAERR: c_int = 8;
    (sig, code) == (libc::SIGBUS, BUS_MCEERR_AO) || (sig, code) == (libc::SIGSEGV, SEGV_MTEAERR)
}

#[cfg(target_os = "macos")]
fn asynchronous_fault(_sig: c_int, _code: c_int) -> bool {
    false
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

/// What a siginfo with a given `si_code` describes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Origin {
    /// Sent by a process (`kill`, `tgkill`, `raise`, `abort`, `sigqueue`):
    /// it holds the sender's pid and uid.
    Sender,
    /// Raised by the kernel for an instruction: it holds the fault address.
    Fault,
    /// Anything else (a timer, asynchronous I/O): neither.
    Other,
}

fn origin(code: c_int) -> Origin {
    // SI_USER, SI_QUEUE and SI_TKILL; other codes up to 0 come from
    // timers, message queues and asynchronous I/O.
    #[cfg(target_os = "linux")]
    return match code {
        0 | -1 | -6 => Origin::Sender,
        1.. => Origin::Fault,
        _ => Origin::Other,
    };
    // SI_USER and SI_QUEUE, then SI_TIMER, SI_ASYNCIO and SI_MESGQ.
    #[cfg(target_os = "macos")]
    return match code {
        0x10001 | 0x10002 => Origin::Sender,
        0x10003..=0x10005 => Origin::Other,
        _ => Origin::Fault,
    };
}

/// Whether a fault's code is Linux's `SI_KERNEL`, which the kernel gives
/// without an address: an x86_64 general-protection fault (a non-canonical
/// address, say) or `int3`. Its `si_addr` is 0, which would read as a null
/// pointer.
fn kernel_without_address(code: c_int) -> bool {
    const SI_KERNEL: c_int = 0x80;
    cfg!(target_os = "linux") && code == SI_KERNEL
}

/// Whether a SIGTRAP's code is the one x86_64's `int3` gives: Linux's
/// `SI_KERNEL`; on macOS `TRAP_BRKPT` (1), with the pc past it as well.
fn int3_code(code: c_int) -> bool {
    kernel_without_address(code) || (cfg!(target_os = "macos") && code == TRAP_BRKPT)
}

/// The name of a signal this handler reports.
pub fn signal_name(sig: c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTRAP => "SIGTRAP",
        _ => "signal",
    }
}

/// The whole report: header, registers, markup backtrace, trailer. Runs in
/// the signal handler; everything it calls is async-signal-safe.
///
/// # Safety
/// `info` and `uc` must be the kernel's arguments to an `SA_SIGINFO` handler.
unsafe fn report(
    fd: c_int,
    sig: c_int,
    info: *mut libc::siginfo_t,
    uc: *mut c_void,
    frames: &mut [Frame],
) {
    // Dropped last, after the sink's final write.
    let _quiet = crate::sys::QuietSigpipe::new();
    let mut sink = FdSink::new(fd);
    let mut m = Markup::new(&mut sink);
    // SAFETY: `info` is the kernel's siginfo_t.
    let code = unsafe { (*info).si_code };
    m.text("stackmark: fatal signal ")
        .dec(sig as u64)
        .text(" (")
        .text(signal_name(sig));
    m.text("), code ").signed(i64::from(code));
    match origin(code) {
        Origin::Sender => {
            // kill, raise, abort, sigqueue: the siginfo names the sender;
            // it holds no address.
            // SAFETY: for these codes the kernel filled in the sender.
            let (pid, uid) = unsafe { ((*info).si_pid(), (*info).si_uid()) };
            m.text(", sent by pid ")
                .signed(i64::from(pid))
                .text(" uid ")
                .dec(u64::from(uid));
        }
        Origin::Fault if kernel_without_address(code) => {
            m.text(", no fault address (SI_KERNEL: a general-protection fault or int3)");
        }
        Origin::Fault => {
            // SAFETY: for a fault the kernel filled in the address.
            let addr = unsafe { (*info).si_addr() as u64 };
            m.text(", fault address ").hex(addr);
        }
        Origin::Other => {}
    }
    m.newline();
    m.text("stackmark: ");
    write_thread(&mut m);
    m.newline();
    // SAFETY: `uc` is the kernel's ucontext_t.
    unsafe { crate::markup::write_registers(&mut m, uc) };
    if FAULT_IN_REPORT.load(SeqCst) {
        // SAFETY: none: the fault is the point (see `corrupt_for_test`).
        unsafe { core::ptr::null_mut::<u64>().write_volatile(1) };
    }
    let (n, more) = match crate::modules::current() {
        Some(table) => {
            // SAFETY: `uc` is the kernel's ucontext_t.
            let regs = unsafe { crate::arch::regs_from_ucontext(uc) };
            // After x86_64's `int3` the pc is already past it, like a
            // return address: frame 0 is looked up one byte back, in the
            // function the breakpoint is in, and written as `:ra`.
            let past = cfg!(target_arch = "x86_64") && sig == libc::SIGTRAP && int3_code(code);
            let (n, more) = crate::live::walk_for_report(regs, !past, frames);
            let frames = &frames[..n];
            let modules = table.modules();
            // Every thread's frames are gathered before the one context
            // that serves them all is written.
            let others = crate::threads::gather(gettid(), true);
            m.context_where(modules, |md| {
                frames.iter().any(|f| crate::markup::holds(md, f)) || others.holds_a_frame(md)
            });
            for (i, f) in frames.iter().enumerate() {
                m.frame(i, f, modules);
            }
            crate::threads::write_sections(&mut m, modules, &others);
            (n, more)
        }
        None => {
            m.text("stackmark: no module table (stackmark::init was not called)")
                .newline();
            (0, false)
        }
    };
    write_trailer(&mut m, n, more);
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

    #[test]
    fn an_int3_is_told_by_the_code_its_system_gives() {
        assert!(int3_code(0x80) == cfg!(target_os = "linux"));
        assert!(int3_code(1) == cfg!(target_os = "macos"));
        assert!(!int3_code(0));
    }

    #[test]
    fn the_altstack_guard_is_a_whole_page_of_the_system() {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        assert_eq!(altstack_guard(), page.max(4096));
        // On a thread of its own: the test harness's has std's stack.
        let ss = std::thread::spawn(|| {
            install_altstack().unwrap();
            // SAFETY: only reports the current alternate stack.
            unsafe {
                let mut ss: libc::stack_t = core::mem::zeroed();
                assert_eq!(libc::sigaltstack(core::ptr::null(), &mut ss), 0);
                (ss.ss_sp as usize, ss.ss_size)
            }
        })
        .join()
        .unwrap();
        // The stack starts right above the guard, on a page boundary.
        assert_eq!((ss.0 % page, ss.1), (0, ALTSTACK_SIZE), "{ss:x?}");
    }

    #[test]
    fn only_faults_that_run_their_instruction_again_are_left_to_recur() {
        assert!(fault_recurs(libc::SIGSEGV, 1));
        assert!(fault_recurs(libc::SIGILL, 2));
        // Sent by a process (SI_USER): nothing recurs.
        let sent = if cfg!(target_os = "macos") {
            0x10001
        } else {
            0
        };
        assert!(!fault_recurs(libc::SIGSEGV, sent));
        // A `brk` leaves the pc at itself on AArch64 Linux (TRAP_BRKPT);
        // x86_64's `int3` (SI_KERNEL) leaves it past, as does a sent one.
        let brk = fault_recurs(libc::SIGTRAP, 1);
        assert_eq!(brk, cfg!(all(target_os = "linux", target_arch = "aarch64")));
        assert!(!fault_recurs(libc::SIGTRAP, 0x80));
        assert!(!fault_recurs(libc::SIGTRAP, -6));
        assert!(!fault_recurs(libc::SIGABRT, -6));
    }
}
