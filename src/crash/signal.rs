//! What a signal's number and siginfo say: its name, who sent it, whether
//! the fault recurs by itself, and how to send it again.

use core::ffi::c_int;

#[cfg(target_os = "linux")]
use crate::sys::gettid;

/// Sends `sig` to the calling thread again, with its siginfo `info` where
/// the system allows (Linux: a process may queue any siginfo to itself), so
/// the restored handler sees the original sender or code.
pub(super) fn raise_here(sig: c_int, info: *const libc::siginfo_t) {
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
pub(super) fn fault_recurs(sig: c_int, code: c_int) -> bool {
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
pub(super) fn brk_trap(sig: c_int, code: c_int) -> bool {
    cfg!(all(target_os = "linux", target_arch = "aarch64"))
        && (sig, code) == (libc::SIGTRAP, TRAP_BRKPT)
}

/// Linux's `BUS_MCEERR_AO` and `SEGV_MTEAERR` (not in every libc).
#[cfg(target_os = "linux")]
pub(super) fn asynchronous_fault(sig: c_int, code: c_int) -> bool {
    const BUS_MCEERR_AO: c_int = 5;
    const SEGV_MTEAERR: c_int = 8;
    (sig, code) == (libc::SIGBUS, BUS_MCEERR_AO) || (sig, code) == (libc::SIGSEGV, SEGV_MTEAERR)
}

#[cfg(target_os = "macos")]
pub(super) fn asynchronous_fault(_sig: c_int, _code: c_int) -> bool {
    false
}

/// What a siginfo with a given `si_code` describes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Origin {
    /// Sent by a process (`kill`, `tgkill`, `raise`, `abort`, `sigqueue`):
    /// it holds the sender's pid and uid.
    Sender,
    /// Raised by the kernel for an instruction: it holds the fault address.
    Fault,
    /// Anything else (a timer, asynchronous I/O): neither.
    Other,
}

pub(super) fn origin(code: c_int) -> Origin {
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
pub(super) fn kernel_without_address(code: c_int) -> bool {
    const SI_KERNEL: c_int = 0x80;
    cfg!(target_os = "linux") && code == SI_KERNEL
}

/// Whether a SIGTRAP's code is the one x86_64's `int3` gives: Linux's
/// `SI_KERNEL`; on macOS `TRAP_BRKPT` (1), with the pc past it as well.
pub(super) fn int3_code(code: c_int) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_int3_is_told_by_the_code_its_system_gives() {
        assert!(int3_code(0x80) == cfg!(target_os = "linux"));
        assert!(int3_code(1) == cfg!(target_os = "macos"));
        assert!(!int3_code(0));
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
