//! Register capture by a naked routine, so it works however the calling crate
//! is compiled (with or without frame pointers).

use super::Regs;

/// Stores the caller's registers as they will be right after this call
/// returns: `rip` = the return address, `rsp` = the caller's stack pointer
/// after the return, and the callee-saved registers, which the routine never
/// changes.
///
/// # Safety
/// `out` must be valid for writing a `Regs`.
#[unsafe(naked)]
unsafe extern "C" fn capture_into(out: *mut Regs) {
    core::arch::naked_asm!(
        "mov rax, [rsp]",
        "mov [rdi], rax",
        "lea rax, [rsp + 8]",
        "mov [rdi + 8], rax",
        "mov [rdi + 16], rbp",
        "mov [rdi + 24], rbx",
        "mov [rdi + 32], r12",
        "mov [rdi + 40], r13",
        "mov [rdi + 48], r14",
        "mov [rdi + 56], r15",
        "ret",
    )
}

/// Captures the registers of the function this is inlined into, at the point
/// just after the capture. The pc is therefore a return address: look it up
/// as `pc - 1`.
#[inline(always)]
pub fn capture() -> Regs {
    let mut regs = Regs::default();
    // SAFETY: `regs` is a valid, writable `Regs`; the routine writes exactly
    // its eight fields and follows the C ABI otherwise.
    unsafe { capture_into(&mut regs) };
    regs
}
