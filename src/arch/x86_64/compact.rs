//! Stepping x86_64 frames with Apple compact-unwind encodings.

use super::Regs;
use crate::arch::{read, CompactStep, StepError};
use crate::memory::MemoryReader;

/// Sets callee-saved register `num` (1 rbx, 2 r12, 3 r13, 4 r14, 5 r15,
/// 6 rbp, as compact unwind numbers them).
fn set(r: &mut Regs, num: u32, value: u64) -> Result<(), StepError> {
    match num {
        1 => r.rbx = value,
        2 => r.r12 = value,
        3 => r.r13 = value,
        4 => r.r14 = value,
        5 => r.r15 = value,
        6 => r.rbp = value,
        _ => return Err(StepError::Invalid),
    }
    Ok(())
}

/// The registers a frameless encoding saved, lowest address first: the
/// permutation is a Lehmer code over the six callee-saved registers.
fn unpermute(count: u32, mut perm: u32) -> Result<[u32; 6], StepError> {
    // Place values of each digit, for 1 to 6 saved registers.
    let radix: &[u32] = match count {
        0 => &[],
        1 => &[1],
        2 => &[5, 1],
        3 => &[20, 4, 1],
        4 => &[60, 12, 3, 1],
        5 | 6 => &[120, 24, 6, 2, 1],
        _ => return Err(StepError::Invalid),
    };
    let mut digits = [0u32; 6];
    for (d, &r) in digits.iter_mut().zip(radix) {
        *d = perm / r;
        perm -= *d * r;
    }
    let mut used = [false; 7];
    let mut out = [0u32; 6];
    for i in 0..count as usize {
        let mut rank = 0;
        let reg = (1..7)
            .find(|&u| {
                if used[u] {
                    return false;
                }
                rank += 1;
                rank - 1 == digits[i]
            })
            .ok_or(StepError::Invalid)?;
        used[reg] = true;
        out[i] = reg as u32;
    }
    Ok(out)
}

/// The mode of an encoding that defers to DWARF CFI: its low 24 bits are
/// the offset of the FDE in the image's `__eh_frame`.
pub const MODE_DWARF: u32 = 4;

/// Steps out of a function with compact encoding `encoding`, which starts
/// at `func_start` (its code is read through `mem` for stack-indirect
/// frames).
///
/// * RBP frame (mode 1): `(rip, rsp, rbp) = (*(rbp + 8), rbp + 16, *rbp)`,
///   and the listed registers from `rbp - 8 * offset` upwards, one slot
///   per field (an empty field skips its slot).
/// * Frameless (mode 2): the frame is `8 * ((encoding >> 16) & 0xff)`
///   bytes, return address on top: `rip = *(rsp + size - 8)`,
///   `rsp += size`; saved registers just below the return address, in the
///   permutation's order.
/// * Stack-indirect (mode 3): as frameless, with the size read from the
///   `subq $imm32, %rsp` at `func_start + ((encoding >> 16) & 0xff)`, plus
///   `8 * ((encoding >> 13) & 7)`.
/// * DWARF (mode 4) and null: [`CompactStep::Fallback`].
pub fn step<M: MemoryReader>(
    encoding: u32,
    func_start: u64,
    r: &Regs,
    mem: &M,
) -> Result<Regs, CompactStep> {
    let mut next = *r;
    match (encoding >> 24) & 0xf {
        1 => {
            let offset = u64::from((encoding >> 16) & 0xff);
            let mut at = r.rbp.wrapping_sub(8 * offset);
            // Each field is one slot upwards from there; an empty field
            // (0) is a slot left unused, not the end of the list.
            for i in 0..5 {
                let num = (encoding >> (3 * i)) & 7;
                if num != 0 {
                    set(&mut next, num, read(mem, at)?)?;
                }
                at = at.wrapping_add(8);
            }
            next.rip = read(mem, r.rbp.wrapping_add(8))?;
            next.rsp = r.rbp.wrapping_add(16);
            next.rbp = read(mem, r.rbp)?;
            Ok(next)
        }
        mode @ (2 | 3) => {
            let size = if mode == 2 {
                u64::from((encoding >> 16) & 0xff) * 8
            } else {
                let at = func_start.wrapping_add(u64::from((encoding >> 16) & 0xff));
                let imm = mem.read_u32(at).ok_or(StepError::Unreadable)?;
                u64::from(imm) + u64::from((encoding >> 13) & 7) * 8
            };
            let count = (encoding >> 10) & 7;
            let order = unpermute(count, encoding & 0x3ff)?;
            let mut at = r
                .rsp
                .wrapping_add(size)
                .wrapping_sub(8 + 8 * u64::from(count));
            for &num in &order[..count as usize] {
                set(&mut next, num, read(mem, at)?)?;
                at = at.wrapping_add(8);
            }
            next.rip = read(mem, r.rsp.wrapping_add(size).wrapping_sub(8))?;
            next.rsp = r.rsp.wrapping_add(size);
            Ok(next)
        }
        _ => Err(CompactStep::Fallback),
    }
}

#[cfg(test)]
mod tests {
    //! Encodings and code from `tests/data/macho/encodings-*-x86_64.dylib`
    //! (clang-16, ld64.lld-16), with stacks laid out as their disassembly
    //! says.
    use super::*;
    use crate::memory::SliceMemory;

    const SP: u64 = 0x7000_0000;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn frameless_with_saved_registers_follows_the_permutation() {
        // _framed_saved: push rbp; push r15; push r14; push rbx; push rax
        // -> encoding 0x02061020 (48 bytes, 4 registers, permutation 0x20).
        let stack = words(&[0xaaaa, 0xb0b, 0x1414, 0x1515, 0xbbbb, 0x4000_1234]);
        let regions = [(SP, &stack[..])];
        let r = Regs {
            rsp: SP,
            ..Default::default()
        };
        let n = step(0x0206_1020, 0x570, &r, &SliceMemory::new(&regions)).unwrap();
        assert_eq!((n.rip, n.rsp), (0x4000_1234, SP + 48));
        assert_eq!(
            (n.rbx, n.r14, n.r15, n.rbp),
            (0xb0b, 0x1414, 0x1515, 0xbbbb)
        );
    }

    #[test]
    fn stack_indirect_reads_the_subq_immediate_from_the_code() {
        // _big_frame: subq $0x11188, %rsp at 0x5e0 -> encoding 0x03032000.
        let dylib = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/macho/encodings-nofp-x86_64.dylib"
        ))
        .unwrap();
        let mut stack = vec![0u8; 0x11190];
        stack[0x11188..].copy_from_slice(&0x4000_5678u64.to_le_bytes());
        let regions = [(SP, &stack[..]), (0, &dylib[..])];
        let r = Regs {
            rsp: SP,
            ..Default::default()
        };
        let n = step(0x0303_2000, 0x5e0, &r, &SliceMemory::new(&regions)).unwrap();
        assert_eq!((n.rip, n.rsp), (0x4000_5678, SP + 0x11190));
    }

    #[test]
    fn rbp_frame_restores_rbp_rip_and_listed_registers() {
        // A frame with rbx saved 8 bytes below rbp: offset 1, register 1.
        let stack = words(&[0x3333, 0x7000_0100, 0x4000_9999]);
        let regions = [(SP, &stack[..])];
        let r = Regs {
            rsp: SP,
            rbp: SP + 8,
            ..Default::default()
        };
        let n = step(0x0101_0001, 0, &r, &SliceMemory::new(&regions)).unwrap();
        assert_eq!(
            (n.rip, n.rsp, n.rbp, n.rbx),
            (0x4000_9999, SP + 24, 0x7000_0100, 0x3333)
        );
    }

    #[test]
    fn dwarf_and_null_encodings_fall_back() {
        let regions: [(u64, &[u8]); 0] = [];
        let r = Regs::default();
        for enc in [0x0400_0018, 0] {
            assert_eq!(
                step(enc, 0, &r, &SliceMemory::new(&regions)),
                Err(CompactStep::Fallback)
            );
        }
    }
}
