//! The caller of a frame whose exact pc lies in its function's prologue or
//! epilogue, found by decoding those instructions.
//!
//! An Apple compact encoding describes a function's body: after its
//! prologue has pushed and reserved everything, before its epilogue takes
//! it back. A call site always lies there, but a signal (a stack overflow's
//! fault on the first `push`, a sampling timer) can stop a function
//! anywhere, and there the encoding names the wrong slots: at the first
//! instruction `rbp` is still the caller's, so an RBP-frame step skips the
//! caller. Only straight-line code is decoded, so the stack moves exactly
//! as the decoded instructions say.

use super::Regs;
use crate::arch::{read, read_prefix, StepError};
use crate::memory::MemoryReader;

/// The longest prologue decoded (bytes before the pc) and the longest
/// epilogue (bytes from the pc): more than any compiler's, with room for
/// `endbr64`, six pushes and a `sub`.
const SPAN: usize = 64;

/// One instruction of a prologue or epilogue, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Insn {
    /// `push reg` (register number 0-15).
    Push(u8),
    /// `pop reg`.
    Pop(u8),
    /// `sub rsp, imm` (positive).
    SubRsp(u64),
    /// `add rsp, imm` (positive).
    AddRsp(u64),
    /// `mov rbp, rsp`.
    MovRbpRsp,
    /// `mov rsp, rbp`.
    MovRspRbp,
    /// `lea rsp, [rbp + disp]`.
    LeaRspRbp(i64),
    /// `leave`.
    Leave,
    /// `ret`.
    Ret,
    /// `endbr64`, which changes nothing here.
    Nop,
}

const RBP: u8 = 5;
const RSP: u8 = 4;

/// Decodes the instruction at the start of `code`, if it is one of
/// [`Insn`]'s.
fn decode(code: &[u8]) -> Option<(Insn, usize)> {
    let imm32 = |b: &[u8]| -> Option<u64> {
        let v = i32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        u64::try_from(v).ok()
    };
    Some(match *code {
        [0xc3, ..] => (Insn::Ret, 1),
        [0xf3, 0xc3, ..] => (Insn::Ret, 2),
        [0xc9, ..] => (Insn::Leave, 1),
        [0xf3, 0x0f, 0x1e, 0xfa, ..] => (Insn::Nop, 4),
        [b @ 0x50..=0x57, ..] => (Insn::Push(b - 0x50), 1),
        [0x41, b @ 0x50..=0x57, ..] => (Insn::Push(b - 0x50 + 8), 2),
        [b @ 0x58..=0x5f, ..] => (Insn::Pop(b - 0x58), 1),
        [0x41, b @ 0x58..=0x5f, ..] => (Insn::Pop(b - 0x58 + 8), 2),
        [0x48, 0x89, 0xe5, ..] | [0x48, 0x8b, 0xec, ..] => (Insn::MovRbpRsp, 3),
        [0x48, 0x89, 0xec, ..] | [0x48, 0x8b, 0xe5, ..] => (Insn::MovRspRbp, 3),
        [0x48, 0x83, 0xec, i @ 0..=0x7f, ..] => (Insn::SubRsp(u64::from(i)), 4),
        [0x48, 0x83, 0xc4, i @ 0..=0x7f, ..] => (Insn::AddRsp(u64::from(i)), 4),
        [0x48, 0x81, 0xec, ref rest @ ..] => (Insn::SubRsp(imm32(rest)?), 7),
        [0x48, 0x81, 0xc4, ref rest @ ..] => (Insn::AddRsp(imm32(rest)?), 7),
        [0x48, 0x8d, 0x65, d, ..] => (Insn::LeaRspRbp(i64::from(d as i8)), 4),
        _ => return None,
    })
}

/// Sets callee-saved register `num` (x86 numbering) in `r`; others are
/// not tracked.
fn set(r: &mut Regs, num: u8, value: u64) {
    match num {
        3 => r.rbx = value,
        RBP => r.rbp = value,
        12 => r.r12 = value,
        13 => r.r13 = value,
        14 => r.r14 = value,
        15 => r.r15 = value,
        _ => {}
    }
}

/// The caller's registers if `r.rip` (an exact pc) lies in the prologue or
/// the epilogue of the function starting at `func_start`; `None` elsewhere.
/// Code is read through `mem`.
pub fn caller<M: MemoryReader>(
    func_start: u64,
    r: &Regs,
    mem: &M,
) -> Result<Option<Regs>, StepError> {
    if let Some(next) = in_prologue(func_start, r, mem)? {
        return Ok(Some(next));
    }
    in_epilogue(r, mem)
}

/// Every instruction from `func_start` up to the pc pushes or reserves
/// stack (or sets `rbp` from `rsp`): undo them. Pushes leave the caller's
/// values in their registers, except `rbp` once `mov rbp, rsp` has run.
fn in_prologue<M: MemoryReader>(
    func_start: u64,
    r: &Regs,
    mem: &M,
) -> Result<Option<Regs>, StepError> {
    let Some(len) = r.rip.checked_sub(func_start) else {
        return Ok(None);
    };
    if len > SPAN as u64 {
        return Ok(None);
    }
    let mut code = [0u8; SPAN];
    let code = &mut code[..len as usize];
    if !mem.read(func_start, code) {
        return Ok(None);
    }
    // Bytes reserved below the return address, and where `rbp` was pushed
    // (the reserve just after that push).
    let (mut depth, mut rbp_pushed, mut rbp_moved) = (0u64, None, false);
    let mut at = 0;
    while at < code.len() {
        // An instruction that runs past the pc decodes to nothing: its
        // bytes end there. The pc is then no instruction boundary.
        let Some((insn, n)) = decode(&code[at..]) else {
            return Ok(None);
        };
        match insn {
            Insn::Push(RSP) => return Ok(None),
            Insn::Push(reg) => {
                depth += 8;
                if reg == RBP && rbp_pushed.is_none() {
                    rbp_pushed = Some(depth);
                }
            }
            Insn::SubRsp(n) => depth += n,
            Insn::MovRbpRsp => rbp_moved = true,
            Insn::Nop => {}
            _ => return Ok(None),
        }
        at += n;
    }
    let ra_at = r.rsp.wrapping_add(depth);
    let mut next = *r;
    if rbp_moved {
        let Some(pushed) = rbp_pushed else {
            return Ok(None);
        };
        next.rbp = read(mem, ra_at.wrapping_sub(pushed))?;
    }
    next.rip = read(mem, ra_at)?;
    next.rsp = ra_at.wrapping_add(8);
    Ok(Some(next))
}

/// From the pc on, only pops and stack releases lead to a `ret`: run them.
fn in_epilogue<M: MemoryReader>(r: &Regs, mem: &M) -> Result<Option<Regs>, StepError> {
    let mut code = [0u8; SPAN];
    let len = read_prefix(mem, r.rip, &mut code);
    let code = &code[..len];
    let mut next = *r;
    let mut at = 0;
    while let Some((insn, n)) = decode(&code[at..]) {
        match insn {
            Insn::Ret => {
                next.rip = read(mem, next.rsp)?;
                next.rsp = next.rsp.wrapping_add(8);
                return Ok(Some(next));
            }
            Insn::Pop(RSP) => return Ok(None),
            Insn::Pop(reg) => {
                let v = read(mem, next.rsp)?;
                set(&mut next, reg, v);
                next.rsp = next.rsp.wrapping_add(8);
            }
            Insn::AddRsp(n) => next.rsp = next.rsp.wrapping_add(n),
            Insn::MovRspRbp => next.rsp = next.rbp,
            Insn::LeaRspRbp(d) => next.rsp = next.rbp.wrapping_add(d as u64),
            Insn::Leave => {
                let v = read(mem, next.rbp)?;
                next.rsp = next.rbp.wrapping_add(8);
                next.rbp = v;
            }
            Insn::Nop => {}
            Insn::Push(_) | Insn::SubRsp(_) | Insn::MovRbpRsp => return Ok(None),
        }
        at += n;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_instruction_with_its_length() {
        let cases: &[(&[u8], Insn, usize)] = &[
            (&[0x55], Insn::Push(5), 1),
            (&[0x41, 0x57], Insn::Push(15), 2),
            (&[0x5b], Insn::Pop(3), 1),
            (&[0x41, 0x5c], Insn::Pop(12), 2),
            (&[0x48, 0x89, 0xe5], Insn::MovRbpRsp, 3),
            (&[0x48, 0x89, 0xec], Insn::MovRspRbp, 3),
            (&[0x48, 0x83, 0xec, 0x10], Insn::SubRsp(0x10), 4),
            (&[0x48, 0x83, 0xc4, 0x08], Insn::AddRsp(8), 4),
            (
                &[0x48, 0x81, 0xec, 0x88, 0x11, 0x01, 0x00],
                Insn::SubRsp(0x11188),
                7,
            ),
            (
                &[0x48, 0x81, 0xc4, 0x90, 0x11, 0x01, 0x00],
                Insn::AddRsp(0x11190),
                7,
            ),
            (&[0x48, 0x8d, 0x65, 0xd8], Insn::LeaRspRbp(-0x28), 4),
            (&[0xc9], Insn::Leave, 1),
            (&[0xc3], Insn::Ret, 1),
            (&[0xf3, 0x0f, 0x1e, 0xfa], Insn::Nop, 4),
        ];
        for &(code, insn, len) in cases {
            assert_eq!(decode(code), Some((insn, len)), "{code:02x?}");
        }
        // A negative immediate is the other instruction in disguise, and a
        // truncated one is none.
        assert_eq!(decode(&[0x48, 0x83, 0xec, 0xf0]), None);
        assert_eq!(decode(&[0x48, 0x81, 0xec, 0x00, 0x00, 0x00, 0x80]), None);
        assert_eq!(decode(&[0x48, 0x81, 0xc4, 0x90, 0x11]), None);
        assert_eq!(decode(&[0xe8, 0, 0, 0, 0]), None);
    }

    /// Code at `CODE` and a stack at `SP`, in one reader. (Code is read in
    /// pieces that end on 8-byte boundaries, as a page does.)
    fn mapped<'a>(code: &'a [u8], stack: &'a [u8]) -> [(u64, &'a [u8]); 2] {
        [(CODE, code), (SP, stack)]
    }

    const CODE: u64 = 0x1000;
    const SP: u64 = 0x7000_0000;

    fn le(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn an_epilogue_through_lea_or_leave_is_run_to_its_ret() {
        use crate::memory::SliceMemory;
        // lea rsp, [rbp - 0x10]; pop rbx; pop r12; pop rbp; ret
        let code = [
            0x48, 0x8d, 0x65, 0xf0, 0x5b, 0x41, 0x5c, 0x5d, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc,
            0xcc, 0xcc,
        ];
        let stack = le(&[0, 0, 0xb, 0xc, 0x7000_0100, 0x4000_1234]);
        let r = Regs {
            rip: CODE,
            rsp: SP,
            rbp: SP + 0x20,
            ..Default::default()
        };
        let regions = mapped(&code, &stack);
        // (The function starts before the code the test maps.)
        let next = caller(CODE - 0x10, &r, &SliceMemory::new(&regions)).unwrap();
        assert_eq!(next.map(|n| (n.rip, n.rsp)), Some((0x4000_1234, SP + 0x30)));
        let next = in_epilogue(&r, &SliceMemory::new(&regions))
            .unwrap()
            .unwrap();
        assert_eq!(
            (next.rip, next.rsp, next.rbp, next.rbx, next.r12),
            (0x4000_1234, SP + 0x30, 0x7000_0100, 0xb, 0xc)
        );
        // leave; ret
        let code = [0xc9, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc];
        let stack = le(&[0, 0x7000_0100, 0x4000_5678]);
        let r = Regs {
            rip: CODE,
            rsp: SP,
            rbp: SP + 8,
            ..Default::default()
        };
        let regions = mapped(&code, &stack);
        let next = in_epilogue(&r, &SliceMemory::new(&regions))
            .unwrap()
            .unwrap();
        assert_eq!(
            (next.rip, next.rsp, next.rbp),
            (0x4000_5678, SP + 24, 0x7000_0100)
        );
    }

    #[test]
    fn code_that_branches_or_calls_is_neither_prologue_nor_epilogue() {
        use crate::memory::SliceMemory;
        // push rbp; call ...; pop rbp; ret
        let code = [0x55, 0xe8, 0, 0, 0, 0, 0x5d, 0xc3];
        let stack = le(&[0, 0x4000_1234]);
        let regions = mapped(&code, &stack);
        let r = Regs {
            rip: CODE + 1,
            rsp: SP,
            ..Default::default()
        };
        let mem = SliceMemory::new(&regions);
        // At the call: one push undone.
        let next = caller(CODE, &r, &mem).unwrap().unwrap();
        assert_eq!((next.rip, next.rsp), (0x4000_1234, SP + 16));
        // Past the call, no prologue: a call precedes.
        let r = Regs { rip: CODE + 6, ..r };
        assert_eq!(in_prologue(CODE, &r, &mem), Ok(None));
        // pop rbp; ret from there is an epilogue.
        assert!(in_epilogue(&r, &mem).unwrap().is_some());
        // A jump ends no epilogue, even with a `ret` after it; and a pc
        // inside an instruction is no prologue position.
        let code = [0x5b, 0xeb, 0xfe, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc];
        let regions = mapped(&code, &stack);
        let mem = SliceMemory::new(&regions);
        let r = Regs { rip: CODE, ..r };
        assert_eq!(in_epilogue(&r, &mem), Ok(None));
        let code = [0x41, 0x57, 0xc3];
        let regions = mapped(&code, &stack);
        let r = Regs { rip: CODE + 1, ..r };
        assert_eq!(in_prologue(CODE, &r, &SliceMemory::new(&regions)), Ok(None));
    }
}
