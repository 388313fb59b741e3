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

/// Moves a captured pc from the return address back to the call instruction
/// that called the capture routine, so frame 0 names the exact instruction
/// (`:pc` in markup) rather than whatever follows the call. Recognises
/// `call rel32` (with or without an `addr32` prefix, as linkers relax GOT
/// calls) and `call [rip + disp32]`, each checked to target the capture
/// routine. Returns whether the pc was moved; if not it stays a return
/// address.
///
/// # Safety
/// `regs` must be what [`capture`] returned, unchanged: its pc is then a
/// return address into code that is running, so the bytes before it (and,
/// on x86_64, the GOT slot a `call [rip + disp32]` there names) are mapped.
/// Any other pc may make this read unmapped memory.
pub unsafe fn call_site(regs: &mut Regs) -> bool {
    let ra = regs.rip;
    let target = capture_into as *const () as u64;
    if ra < 6 {
        return false;
    }
    // SAFETY: by the caller's contract, the 6 bytes before the return
    // address belong to the calling function's code, which is executing
    // and so mapped.
    let code: [u8; 6] = unsafe { core::ptr::read_unaligned((ra - 6) as *const [u8; 6]) };
    let disp = i64::from(i32::from_le_bytes([code[2], code[3], code[4], code[5]]));
    let start = if code[1] == 0xe8 && ra.wrapping_add(disp as u64) == target {
        if code[0] == 0x67 {
            ra - 6
        } else {
            ra - 5
        }
    } else if code[0] == 0xff && code[1] == 0x15 {
        let slot = ra.wrapping_add(disp as u64);
        // SAFETY: a rip-relative call's slot is in the caller module's GOT,
        // mapped read-only for the life of the module.
        if unsafe { core::ptr::read_unaligned(slot as *const u64) } != target {
            return false;
        }
        ra - 6
    } else {
        return false;
    };
    regs.rip = start;
    true
}
