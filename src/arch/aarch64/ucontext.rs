//! The walk's registers from a signal handler's `ucontext_t`.

use core::ffi::c_void;

/// The interrupted registers in a Linux AArch64 `ucontext_t`.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "linux")]
pub unsafe fn regs_from_ucontext(uc: *const c_void) -> super::Regs {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let m = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext };
    let mut x19_x28 = [0u64; 10];
    x19_x28.copy_from_slice(&m.regs[19..29]);
    super::Regs {
        pc: m.pc,
        sp: m.sp,
        fp: m.regs[29],
        lr: m.regs[30],
        x19_x28,
    }
}

/// The interrupted registers in a Darwin arm64 `ucontext_t`, stripped of
/// pointer-authentication bits: for an arm64e process the kernel signs sp
/// and fp in a signal's context as well as pc and lr (user addresses lie
/// below the bits it signs, so stripping an unsigned one changes nothing).
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "macos")]
pub unsafe fn regs_from_ucontext(uc: *const c_void) -> super::Regs {
    // SAFETY: forwarded from the caller.
    let m = unsafe { crate::sys::macos::mcontext(uc) };
    let mut x19_x28 = [0u64; 10];
    x19_x28.copy_from_slice(&m.x[19..29]);
    super::Regs {
        pc: super::strip_pac(m.pc),
        sp: super::strip_pac(m.sp),
        fp: super::strip_pac(m.fp),
        lr: super::strip_pac(m.lr),
        x19_x28,
    }
}

/// The names of AArch64 `x0`..`x30` as crash reports print them.
const X_NAMES: [&str; 31] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "fp", "lr",
];

/// Every register of a Linux AArch64 `ucontext_t`, for a crash
/// report.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "linux")]
pub unsafe fn all_registers(uc: *const c_void) -> [(&'static str, u64); 34] {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let mc = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext };
    let extra = [("sp", mc.sp), ("pc", mc.pc), ("pstate", mc.pstate)];
    core::array::from_fn(|i| match i {
        0..=30 => (X_NAMES[i], mc.regs[i]),
        _ => extra[i - 31],
    })
}

/// Every register of a Darwin arm64 `ucontext_t`, for a crash
/// report.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_os = "macos")]
pub unsafe fn all_registers(uc: *const c_void) -> [(&'static str, u64); 34] {
    // SAFETY: forwarded from the caller.
    let mc = unsafe { crate::sys::macos::mcontext(uc) };
    let extra: [(&str, u64); 5] = [
        ("fp", mc.fp),
        ("lr", mc.lr),
        ("sp", mc.sp),
        ("pc", mc.pc),
        ("cpsr", u64::from(mc.cpsr)),
    ];
    core::array::from_fn(|i| match i {
        0..=28 => (X_NAMES[i], mc.x[i]),
        _ => extra[i - 29],
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use core::mem::offset_of;

    #[test]
    fn aarch64_sigframe_offsets_match_the_system_headers() {
        use crate::arch::aarch64::sigframe_offsets as o;
        // The kernel's rt_sigframe: a siginfo_t, then the ucontext_t.
        let uc = core::mem::size_of::<libc::siginfo_t>() as u64;
        assert_eq!(uc, 128);
        let mc = uc + offset_of!(libc::ucontext_t, uc_mcontext) as u64;
        assert_eq!(mc, 304, "sigcontext at sp + 304");
        assert_eq!(o::REGS, mc + offset_of!(libc::mcontext_t, regs) as u64);
        assert_eq!(o::SP, mc + offset_of!(libc::mcontext_t, sp) as u64);
        assert_eq!(o::PC, mc + offset_of!(libc::mcontext_t, pc) as u64);
        assert_eq!(o::PC, 568);
    }
}
