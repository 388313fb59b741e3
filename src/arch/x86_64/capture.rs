//! Register capture by a naked routine, so it works however the calling crate
//! is compiled (with or without frame pointers).

use super::{Regs, X86_64};
use crate::arch::Arch;

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
/// `call rel32` and `call [rip + disp32]`, each checked to target the
/// capture routine. A `call rel32` that linkers relaxed from a GOT call
/// carries an `addr32` prefix, which the pc then skips: it names the
/// opcode, inside the same instruction. Returns whether the pc was moved;
/// if not it stays a return address.
///
/// `read_slot(ra, slot)` reads the 8-byte GOT slot a `call [rip + disp32]`
/// before the return address `ra` names, or gives `None` if it cannot tell
/// that the slot is mapped: the bytes before
/// the pc may only look like such a call (a register call `ff d3` after an
/// instruction that ends in `ff 15`), and then the slot is any address at
/// all.
///
/// # Safety
/// `regs` must be what [`capture`] returned, unchanged: its pc is then a
/// return address into code that is running, so the 6 bytes before it are
/// mapped. Any other pc may make this read unmapped memory.
pub unsafe fn call_site(regs: &mut Regs, read_slot: impl FnOnce(u64, u64) -> Option<u64>) -> bool {
    let ra = regs.rip;
    let target = capture_into as *const () as u64;
    if ra < 6 {
        return false;
    }
    // SAFETY: by the caller's contract, the 6 bytes before the return
    // address belong to the calling function's code, which is executing
    // and so mapped.
    let code: [u8; 6] = unsafe { core::ptr::read_unaligned((ra - 6) as *const [u8; 6]) };
    // The 8 bytes the walk's decoders take, the first two unread.
    let mut before = [0u8; 8];
    before[2..].copy_from_slice(&code);
    // A `call rel32` gives its opcode's address, even after an `addr32`
    // prefix: a 0x67 before it may as well end the instruction before
    // (`push 0x67`), and the opcode lies inside the call either way, so it
    // finds the call's row and line, never those of the instruction before.
    let start = if X86_64::direct_call_target(&before, ra) == Some(target) {
        ra - 5
    } else if code[0] == 0xff && code[1] == 0x15 {
        let disp = i64::from(i32::from_le_bytes([code[2], code[3], code[4], code[5]]));
        if read_slot(ra, ra.wrapping_add(disp as u64)) != Some(target) {
            return false;
        }
        ra - 6
    } else {
        return false;
    };
    regs.rip = start;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(_ra: u64, slot: u64) -> Option<u64> {
        let mut word = [0u8; 8];
        crate::sys::read_checked(slot, &mut word).then(|| u64::from_le_bytes(word))
    }

    /// Two pages: bytes that end in what looks like `call [rip + disp32]`
    /// in the first, whose slot is either in the first page or in the
    /// second, which is unreadable.
    struct Pages(stackmark_fixtures::Mapping);

    impl Pages {
        fn new() -> Pages {
            let pages = stackmark_fixtures::Mapping::new(8192);
            pages.protect(4096, 4096, libc::PROT_NONE);
            Pages(pages)
        }

        fn base(&self) -> *mut u8 {
            self.0.addr() as *mut u8
        }

        /// Writes `ff 15 disp32` at offset 0 (the return address is at 6),
        /// with the slot at `slot_at`, and returns the registers.
        fn call_through(&self, slot_at: usize, slot: u64) -> Regs {
            let base = self.0.addr();
            let disp = (slot_at as i32 - 6).to_le_bytes();
            let code = [0xff, 0x15, disp[0], disp[1], disp[2], disp[3]];
            // SAFETY: offsets 0..6 lie in the first (readable) page.
            unsafe { core::ptr::copy_nonoverlapping(code.as_ptr(), self.base(), 6) };
            if slot_at + 8 <= 4096 {
                // SAFETY: the slot lies in the first page.
                unsafe { core::ptr::write_unaligned(self.base().add(slot_at).cast::<u64>(), slot) };
            }
            Regs {
                rip: base + 6,
                ..Regs::default()
            }
        }
    }

    #[test]
    fn a_got_call_to_the_capture_routine_moves_the_pc_to_the_call() {
        let pages = Pages::new();
        let target = capture_into as *const () as u64;
        let mut regs = pages.call_through(64, target);
        // SAFETY: the 6 bytes before the pc are mapped.
        assert!(unsafe { call_site(&mut regs, checked) });
        assert_eq!(regs.rip, pages.0.addr());
        let mut regs = pages.call_through(64, target + 1);
        // SAFETY: as above.
        assert!(!unsafe { call_site(&mut regs, checked) });
        assert_eq!(regs.rip, pages.0.addr() + 6);
    }

    /// Code bytes in the program's data, near enough to the capture routine
    /// for a `call rel32`. Only the one test below uses them.
    static mut NEAR: [u8; 16] = [0; 16];

    /// The registers after `bytes`, which end in a `call rel32` (its
    /// displacement filled in) to `miss` bytes past the capture routine.
    fn after_direct_call(bytes: &[u8], miss: u64) -> Regs {
        let base = &raw mut NEAR;
        let ra = base as u64 + bytes.len() as u64;
        let target = capture_into as *const () as u64 + miss;
        let disp = i32::try_from(target.wrapping_sub(ra) as i64).unwrap();
        let mut code = [0u8; 16];
        code[..bytes.len()].copy_from_slice(bytes);
        code[bytes.len() - 4..bytes.len()].copy_from_slice(&disp.to_le_bytes());
        // SAFETY: one test alone uses `NEAR`, and it reads it only through
        // `call_site` after this write.
        unsafe { base.write(code) };
        Regs {
            rip: ra,
            ..Regs::default()
        }
    }

    #[test]
    fn a_direct_call_moves_the_pc_to_its_opcode_whatever_precedes_it() {
        let base = &raw mut NEAR as u64;
        for (bytes, miss, moved) in [
            // `push 0x67; call rel32`: the call starts at 2, not at the 0x67.
            (&[0x6a, 0x67, 0xe8, 0, 0, 0, 0], 0, Some(2)),
            // `nop; addr32 call rel32` (a relaxed GOT call): its opcode, at 2.
            (&[0x90, 0x67, 0xe8, 0, 0, 0, 0], 0, Some(2)),
            // A call elsewhere leaves the return address.
            (&[0x90, 0x90, 0xe8, 0, 0, 0, 0], 1, None),
        ] {
            let mut regs = after_direct_call(bytes, miss);
            // SAFETY: the bytes before the pc are mapped.
            let exact = unsafe { call_site(&mut regs, checked) };
            assert_eq!(exact, moved.is_some(), "{bytes:x?}");
            assert_eq!(regs.rip, base + moved.unwrap_or(7), "{bytes:x?}");
        }
    }

    #[test]
    fn bytes_that_only_look_like_a_got_call_name_a_slot_that_may_be_unmapped() {
        let pages = Pages::new();
        let mut regs = pages.call_through(4096 + 64, 0);
        // SAFETY: the 6 bytes before the pc are mapped; the slot is not readable.
        assert!(!unsafe { call_site(&mut regs, checked) });
        assert_eq!(regs.rip, pages.0.addr() + 6);
    }
}
