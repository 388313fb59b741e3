//! Stepping arm64 frames with Apple compact-unwind encodings.

use super::{strip_pac, Regs};
use crate::arch::{read, CompactStep, StepError};
use crate::memory::MemoryReader;

/// Register pairs in the order they are saved, downwards: the bit that
/// names each pair, and for general-purpose pairs the index in `x19_x28`.
const PAIRS: [(u32, Option<usize>); 9] = [
    (0x1, Some(0)),
    (0x2, Some(2)),
    (0x4, Some(4)),
    (0x8, Some(6)),
    (0x10, Some(8)),
    (0x100, None),
    (0x200, None),
    (0x400, None),
    (0x800, None),
];

/// Restores the pairs the encoding lists, saved downwards from `top`
/// (first register of a pair at the higher address); d-register pairs are
/// skipped over, not tracked.
fn restore<M: MemoryReader>(enc: u32, top: u64, next: &mut Regs, mem: &M) -> Result<(), StepError> {
    let mut at = top;
    for (bit, slot) in PAIRS {
        if enc & bit == 0 {
            continue;
        }
        if let Some(i) = slot {
            next.x19_x28[i] = read(mem, at)?;
            next.x19_x28[i + 1] = read(mem, at.wrapping_sub(8))?;
        }
        at = at.wrapping_sub(16);
    }
    Ok(())
}

/// The mode of an encoding that defers to DWARF CFI: its low 24 bits are
/// the offset of the FDE in the image's `__eh_frame`.
pub const MODE_DWARF: u32 = 3;

/// Steps out of a function with compact encoding `encoding`.
///
/// * Frame (mode 4): pairs from `fp - 8` downwards;
///   `(pc, sp, fp) = (strip(*(fp + 8)), fp + 16, *fp)`.
/// * Frameless (mode 2): the frame is `16 * ((encoding >> 12) & 0xfff)`
///   bytes, pairs from its top downwards; `pc = lr` — legal only when
///   `ra_in_register_ok` (frame 0, or the frame a signal interrupted);
///   `sp += size`.
/// * DWARF (mode 3) and null: [`CompactStep::Fallback`].
pub fn step<M: MemoryReader>(
    encoding: u32,
    r: &Regs,
    mem: &M,
    ra_in_register_ok: bool,
) -> Result<Regs, CompactStep> {
    let mut next = *r;
    match (encoding >> 24) & 0xf {
        4 => {
            restore(encoding, r.fp.wrapping_sub(8), &mut next, mem)?;
            next.pc = strip_pac(read(mem, r.fp.wrapping_add(8))?);
            next.lr = next.pc;
            next.sp = r.fp.wrapping_add(16);
            next.fp = read(mem, r.fp)?;
            Ok(next)
        }
        2 => {
            if !ra_in_register_ok {
                return Err(CompactStep::Broken(StepError::Invalid));
            }
            let size = u64::from((encoding >> 12) & 0xfff) * 16;
            restore(
                encoding,
                r.sp.wrapping_add(size).wrapping_sub(8),
                &mut next,
                mem,
            )?;
            next.pc = strip_pac(r.lr);
            next.sp = r.sp.wrapping_add(size);
            Ok(next)
        }
        _ => Err(CompactStep::Fallback),
    }
}

#[cfg(test)]
mod tests {
    //! Encodings from `tests/data/macho/encodings-*-arm64.dylib` (clang-16,
    //! ld64.lld-16), with stacks laid out as their disassembly says.
    use super::*;
    use crate::memory::SliceMemory;

    const SP: u64 = 0x7000_0000;

    #[test]
    fn frame_mode_restores_every_listed_pair_and_strips_the_return_address() {
        // _framed_saved: sub sp, #0x50; stp x24, x23, [sp, #0x10];
        // stp x22, x21, [sp, #0x20]; stp x20, x19, [sp, #0x30];
        // stp x29, x30, [sp, #0x40]; add x29, sp, #0x40 -> 0x04000007.
        let mut stack = [0u64; 12];
        stack[2] = 24; // x24 at sp+0x10
        stack[3] = 23;
        stack[4] = 22;
        stack[5] = 21;
        stack[6] = 20;
        stack[7] = 19; // x19 at sp+0x38 = fp-8
        stack[8] = 0x7000_0100; // caller's fp
        stack[9] = 0x0023_0000_4000_1234; // signed return address
        let bytes: Vec<u8> = stack.iter().flat_map(|w| w.to_le_bytes()).collect();
        let regions = [(SP, &bytes[..])];
        let r = Regs {
            sp: SP,
            fp: SP + 0x40,
            ..Default::default()
        };
        let n = step(0x0400_0007, &r, &SliceMemory::new(&regions), false).unwrap();
        assert_eq!((n.pc, n.sp, n.fp), (0x4000_1234, SP + 0x50, 0x7000_0100));
        assert_eq!(&n.x19_x28[..6], &[19, 20, 21, 22, 23, 24]);
    }

    #[test]
    fn frameless_takes_the_return_address_from_lr_only_where_legal() {
        // _leaf: 0x02000000 (no stack, nothing saved).
        let regions: [(u64, &[u8]); 0] = [];
        let r = Regs {
            sp: SP,
            lr: 0x4000_2000,
            ..Default::default()
        };
        let mem = SliceMemory::new(&regions);
        let n = step(0x0200_0000, &r, &mem, true).unwrap();
        assert_eq!((n.pc, n.sp), (0x4000_2000, SP));
        assert!(matches!(
            step(0x0200_0000, &r, &mem, false),
            Err(CompactStep::Broken(_))
        ));
    }

    #[test]
    fn dwarf_and_null_encodings_fall_back() {
        let regions: [(u64, &[u8]); 0] = [];
        let r = Regs::default();
        for enc in [0x0300_0014, 0] {
            assert_eq!(
                step(enc, &r, &SliceMemory::new(&regions), true),
                Err(CompactStep::Fallback)
            );
        }
    }
}
