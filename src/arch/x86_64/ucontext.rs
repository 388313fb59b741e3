//! The walk's registers from a signal handler's `ucontext_t`.

#[cfg(target_os = "linux")]
use core::ffi::c_int;
use core::ffi::c_void;

/// The interrupted registers in a Linux x86_64 `ucontext_t`.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "linux")]
pub unsafe fn regs_from_ucontext(uc: *const c_void) -> super::Regs {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let g = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext.gregs };
    let r = |i: c_int| g[i as usize] as u64;
    super::Regs {
        rip: r(libc::REG_RIP),
        rsp: r(libc::REG_RSP),
        rbp: r(libc::REG_RBP),
        rbx: r(libc::REG_RBX),
        r12: r(libc::REG_R12),
        r13: r(libc::REG_R13),
        r14: r(libc::REG_R14),
        r15: r(libc::REG_R15),
    }
}

/// The interrupted registers in a Darwin x86_64 `ucontext_t`.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "macos")]
pub unsafe fn regs_from_ucontext(uc: *const c_void) -> super::Regs {
    // SAFETY: forwarded from the caller.
    regs_from_state(unsafe { &crate::sys::macos::mcontext(uc).ss })
}

/// The walk's registers from an `x86_THREAD_STATE64` (a signal context's
/// `__ss`, or `thread_get_state`'s), at least 17 words.
#[cfg(target_os = "macos")]
pub(crate) fn regs_from_state(s: &[u64]) -> super::Regs {
    super::Regs {
        rip: s[16],
        rsp: s[7],
        rbp: s[6],
        rbx: s[1],
        r12: s[12],
        r13: s[13],
        r14: s[14],
        r15: s[15],
    }
}

/// The names of x86_64 thread-state registers in Darwin's order.
#[cfg(target_os = "macos")]
const DARWIN_NAMES: [&str; 18] = [
    "rax", "rbx", "rcx", "rdx", "rdi", "rsi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip", "rflags",
];

/// Every register of a Linux x86_64 `ucontext_t`, for a crash
/// report.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "linux")]
pub unsafe fn all_registers(uc: *const c_void) -> [(&'static str, u64); 18] {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let g = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext.gregs };
    const NAMES: [(&str, c_int); 18] = [
        ("rax", libc::REG_RAX),
        ("rbx", libc::REG_RBX),
        ("rcx", libc::REG_RCX),
        ("rdx", libc::REG_RDX),
        ("rsi", libc::REG_RSI),
        ("rdi", libc::REG_RDI),
        ("rbp", libc::REG_RBP),
        ("rsp", libc::REG_RSP),
        ("r8", libc::REG_R8),
        ("r9", libc::REG_R9),
        ("r10", libc::REG_R10),
        ("r11", libc::REG_R11),
        ("r12", libc::REG_R12),
        ("r13", libc::REG_R13),
        ("r14", libc::REG_R14),
        ("r15", libc::REG_R15),
        ("rip", libc::REG_RIP),
        ("eflags", libc::REG_EFL),
    ];
    NAMES.map(|(name, reg)| (name, g[reg as usize] as u64))
}

/// Every register of a Darwin x86_64 `ucontext_t`, for a crash
/// report.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "macos")]
pub unsafe fn all_registers(uc: *const c_void) -> [(&'static str, u64); 18] {
    // SAFETY: forwarded from the caller.
    let s = unsafe { &crate::sys::macos::mcontext(uc).ss };
    core::array::from_fn(|i| (DARWIN_NAMES[i], s[i]))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use core::mem::offset_of;

    /// The signal-frame offsets the walker uses, checked against the C
    /// library's own `ucontext_t` and `siginfo_t` (the kernel's layout).
    #[test]
    fn x86_64_ucontext_offsets_match_the_system_headers() {
        use crate::arch::x86_64::ucontext_offsets as o;
        let gregs = offset_of!(libc::ucontext_t, uc_mcontext) as u64;
        assert_eq!(o::GREGS, gregs);
        let at = |r: libc::c_int| gregs + 8 * r as u64;
        assert_eq!(o::RIP, at(libc::REG_RIP));
        assert_eq!(o::RSP, at(libc::REG_RSP));
        assert_eq!(o::RBP, at(libc::REG_RBP));
        assert_eq!(o::RBX, at(libc::REG_RBX));
        assert_eq!(
            o::R12_R15,
            [
                at(libc::REG_R12),
                at(libc::REG_R13),
                at(libc::REG_R14),
                at(libc::REG_R15)
            ]
        );
    }
}
