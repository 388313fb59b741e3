//! The crash report itself: header, registers, markup backtrace, the other
//! threads, trailer.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering::SeqCst};

use super::signal::{int3_code, kernel_without_address, origin, signal_name, Origin};
use crate::markup::{FdSink, Markup};
use crate::report::{write_thread, write_trailer};
use crate::sys::gettid;
use crate::walk::Frame;

/// Test hook: make the report itself fault.
static FAULT_IN_REPORT: AtomicBool = AtomicBool::new(false);

/// Makes the next crash report fault half-way, to test that a crash inside
/// the handler ends the process instead of looping. For tests only.
#[cfg(feature = "internals")]
pub fn corrupt_for_test() {
    FAULT_IN_REPORT.store(true, SeqCst);
}

/// The whole report: header, registers, markup backtrace, trailer. Runs in
/// the signal handler; everything it calls is async-signal-safe.
///
/// # Safety
/// `info` and `uc` must be the kernel's arguments to an `SA_SIGINFO` handler.
pub(super) unsafe fn report(
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
    let registers = unsafe { crate::arch::all_registers(uc) };
    crate::markup::write_registers(&mut m, &registers);
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
            let (n, more) =
                crate::live::walk_for_report(regs, crate::walk::PcKind::exact_if(!past), frames);
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
