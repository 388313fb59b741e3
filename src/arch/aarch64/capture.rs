//! Register capture by a naked routine, so it works however the calling crate
//! is compiled.

use super::Regs;

/// Stores the caller's registers as they will be right after this call
/// returns: `pc` = `lr` = the return address, `sp`, `x29` and the
/// callee-saved x19-x28, which the routine never changes.
///
/// # Safety
/// `out` must be valid for writing a `Regs`.
#[unsafe(naked)]
unsafe extern "C" fn capture_into(out: *mut Regs) {
    core::arch::naked_asm!(
        "str x30, [x0]",
        "mov x9, sp",
        "str x9, [x0, #8]",
        "stp x29, x30, [x0, #16]",
        "stp x19, x20, [x0, #32]",
        "stp x21, x22, [x0, #48]",
        "stp x23, x24, [x0, #64]",
        "stp x25, x26, [x0, #80]",
        "stp x27, x28, [x0, #96]",
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
    // its fields and follows the C ABI otherwise.
    unsafe { capture_into(&mut regs) };
    regs
}
