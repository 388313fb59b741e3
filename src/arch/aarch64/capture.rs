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

/// Moves a captured pc from the return address back to the branch-and-link
/// that called the capture routine (every instruction is 4 bytes), so frame
/// 0 names the exact instruction. Returns whether the pc was moved.
///
/// The slot reader is unused: a `bl` names its target in the instruction
/// (the x86_64 form reads a GOT slot with it).
///
/// # Safety
/// `regs` must be what [`capture`] returned, unchanged: its pc is then a
/// return address into code that is running, so the 8 bytes before it are
/// mapped. Any other pc may make this read unmapped memory.
pub unsafe fn call_site(regs: &mut Regs, _read_slot: impl FnOnce(u64, u64) -> Option<u64>) -> bool {
    use crate::arch::Arch;
    let ra = regs.pc;
    if ra < 8 {
        return false;
    }
    // SAFETY: by the caller's contract, the 8 bytes before the return
    // address belong to the calling function's code, which is executing
    // and so mapped.
    let code: [u8; 8] = unsafe { core::ptr::read_unaligned((ra - 8) as *const [u8; 8]) };
    if !super::Aarch64::ends_with_call(&code) {
        return false;
    }
    regs.pc = ra - 4;
    true
}
