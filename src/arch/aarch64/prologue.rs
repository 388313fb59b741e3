//! The caller of a frame whose exact pc lies in its function's prologue or
//! epilogue, found by decoding those instructions.
//!
//! An Apple compact encoding describes a function's body: after its
//! prologue has stored the frame record and set x29, before its epilogue
//! loads them back. A call site always lies there, but a signal (a stack
//! overflow's fault on the prologue's first store, a sampling timer) can
//! stop a function anywhere, and there the encoding names the wrong slots:
//! before `add x29, sp, #n` x29 is still the caller's, so a frame step
//! skips the caller, whose return address is still in lr. Only
//! straight-line code is decoded, so the registers move exactly as the
//! decoded instructions say.

use super::{strip_pac, Regs};
use crate::arch::{read, read_prefix, StepError};
use crate::memory::MemoryReader;

/// The most instructions decoded before the pc (prologue) or from it
/// (epilogue): more than any compiler's, with room for ten pair stores.
const SPAN: usize = 16;

const SP: u32 = 31;
const FP: u32 = 29;
const LR: u32 = 30;

/// One instruction of a prologue or epilogue. Offsets are in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Insn {
    /// A hint (`nop`, `paciasp`, `autibsp`, `bti c`, ...): changes no
    /// register the walk needs, or only signs or authenticates lr.
    Hint,
    /// `stp`/`ldp` of x registers through sp: registers, offset, and the
    /// addressing mode.
    Pair {
        load: bool,
        rt: u32,
        rt2: u32,
        off: i64,
        mode: Mode,
    },
    /// `stp`/`ldp` of d registers through sp: only its writeback matters.
    FpPair { load: bool, off: i64, mode: Mode },
    /// `str`/`ldr` of an x register through sp.
    Single {
        load: bool,
        rt: u32,
        off: i64,
        mode: Mode,
    },
    /// `add`/`sub` `rd, rn, #imm` with rd or rn sp or x29 (negative for
    /// `sub`).
    AddImm { rd: u32, rn: u32, imm: i64 },
    /// `ret` through lr, `retaa` or `retab`.
    Ret,
    /// `b label` or `br xn`: a tail call, after an epilogue.
    Branch,
}

/// How a load or store through sp addresses memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `[sp, #off]`.
    Offset,
    /// `[sp, #off]!`: sp moves first.
    Pre,
    /// `[sp], #off`: sp moves after.
    Post,
}

fn sext(v: u32, bits: u32) -> i64 {
    let shift = 64 - bits;
    (i64::from(v) << shift) >> shift
}

/// Decodes one instruction word, if it is one of [`Insn`]'s.
fn decode(w: u32) -> Option<Insn> {
    let rt = w & 0x1f;
    let rn = (w >> 5) & 0x1f;
    let rt2 = (w >> 10) & 0x1f;
    if w & 0xffff_f01f == 0xd503_201f {
        return Some(Insn::Hint);
    }
    if w == 0xd65f_03c0 || w == 0xd65f_0bff || w == 0xd65f_0fff {
        return Some(Insn::Ret);
    }
    if w & 0xfc00_0000 == 0x1400_0000 || w & 0xffff_fc1f == 0xd61f_0000 {
        return Some(Insn::Branch);
    }
    // Loads and stores below are all through sp.
    let through_sp = rn == SP;
    let pair_mode = match (w >> 23) & 7 {
        0b010 => Some(Mode::Offset),
        0b011 => Some(Mode::Pre),
        0b001 => Some(Mode::Post),
        _ => None,
    };
    let load = w & 1 << 22 != 0;
    let pair_off = sext((w >> 15) & 0x7f, 7) * 8;
    match (w >> 26, pair_mode) {
        // opc 10, V 0: x-register pairs.
        (0b10_1010, Some(mode)) if through_sp => {
            return Some(Insn::Pair {
                load,
                rt,
                rt2,
                off: pair_off,
                mode,
            })
        }
        // opc 01, V 1: d-register pairs.
        (0b01_1011, Some(mode)) if through_sp => {
            return Some(Insn::FpPair {
                load,
                off: pair_off,
                mode,
            })
        }
        _ => {}
    }
    if through_sp && w & 0xff80_0000 == 0xf900_0000 {
        return Some(Insn::Single {
            load,
            rt,
            off: i64::from((w >> 10) & 0xfff) * 8,
            mode: Mode::Offset,
        });
    }
    if through_sp && w & 0xffa0_0400 == 0xf800_0400 {
        // `str`/`ldr` (64-bit) with a 9-bit writeback offset: bit 11 says
        // pre-index, bit 22 load.
        let mode = if w & 1 << 11 != 0 {
            Mode::Pre
        } else {
            Mode::Post
        };
        return Some(Insn::Single {
            load,
            rt,
            off: sext((w >> 12) & 0x1ff, 9),
            mode,
        });
    }
    // `add`/`sub` (64-bit immediate, flags unset).
    if w & 0x3f80_0000 == 0x1100_0000 && w >> 31 == 1 {
        let rd = rt;
        let imm = i64::from((w >> 10) & 0xfff) << (12 * ((w >> 22) & 1));
        let imm = if w & 1 << 30 != 0 { -imm } else { imm };
        if (rd == SP || rd == FP) && (rn == SP || rn == FP) {
            return Some(Insn::AddImm { rd, rn, imm });
        }
    }
    None
}

/// Reads up to `out.len()` (at most [`SPAN`]) instruction words from
/// `at`; returns how many.
fn words<M: MemoryReader>(mem: &M, at: u64, out: &mut [u32]) -> usize {
    let mut bytes = [0u8; SPAN * 4];
    let want = out.len().min(SPAN) * 4;
    let n = read_prefix(mem, at, &mut bytes[..want]) / 4;
    for (w, b) in out.iter_mut().zip(bytes.chunks_exact(4)).take(n) {
        *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    n
}

/// The caller's registers if `r.pc` (an exact pc) lies in the prologue or
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

/// Every instruction from `func_start` up to the pc reserves stack, stores
/// registers through sp or sets x29 from sp: undo them. Stores leave the
/// caller's values in their registers, except x29 once it has been set, and
/// lr holds the return address throughout.
fn in_prologue<M: MemoryReader>(
    func_start: u64,
    r: &Regs,
    mem: &M,
) -> Result<Option<Regs>, StepError> {
    let Some(len) = r.pc.checked_sub(func_start) else {
        return Ok(None);
    };
    if len % 4 != 0 || len / 4 > SPAN as u64 {
        return Ok(None);
    }
    let mut code = [0u32; SPAN];
    let n = (len / 4) as usize;
    if words(mem, func_start, &mut code[..n]) < n {
        return Ok(None);
    }
    // Bytes reserved below the caller's sp so far, and how far below it
    // x29 was stored.
    let (mut depth, mut fp_saved_at, mut fp_set) = (0i64, None, false);
    for &w in &code[..n] {
        let insn = decode(w);
        match insn {
            Some(Insn::Hint) => {}
            Some(Insn::AddImm {
                rd: SP,
                rn: SP,
                imm,
            }) if imm <= 0 => depth -= imm,
            Some(Insn::AddImm { rd: FP, rn: SP, .. }) => fp_set = true,
            Some(
                Insn::Pair {
                    load: false,
                    off,
                    mode,
                    ..
                }
                | Insn::FpPair {
                    load: false,
                    off,
                    mode,
                }
                | Insn::Single {
                    load: false,
                    off,
                    mode,
                    ..
                },
            ) => {
                let (addr_off, writeback) = match mode {
                    Mode::Offset => (off, 0),
                    Mode::Pre => (0, off),
                    Mode::Post => return Ok(None),
                };
                if writeback > 0 {
                    return Ok(None);
                }
                depth -= writeback;
                let at = depth - addr_off;
                match insn {
                    Some(Insn::Pair { rt: FP, .. }) | Some(Insn::Single { rt: FP, .. }) => {
                        fp_saved_at = Some(at)
                    }
                    Some(Insn::Pair { rt2: FP, .. }) => fp_saved_at = Some(at - 8),
                    _ => {}
                }
            }
            _ => return Ok(None),
        }
    }
    let caller_sp = r.sp.wrapping_add(depth as u64);
    let mut next = *r;
    if fp_set {
        let Some(at) = fp_saved_at else {
            return Ok(None);
        };
        next.fp = read(mem, caller_sp.wrapping_sub(at as u64))?;
    }
    next.pc = strip_pac(r.lr);
    next.sp = caller_sp;
    Ok(Some(next))
}

/// Sets register `reg` of `next` to `v` if the walk tracks it; says
/// whether it was lr.
fn load(next: &mut Regs, reg: u32, v: u64) -> bool {
    match reg {
        19..=28 => next.x19_x28[reg as usize - 19] = v,
        FP => next.fp = v,
        LR => next.lr = v,
        _ => {}
    }
    reg == LR
}

/// A load through `sp` with offset `off` in `mode`: the address it reads
/// and sp after it.
fn access(sp: u64, off: i64, mode: Mode) -> (u64, u64) {
    let moved = sp.wrapping_add(off as u64);
    match mode {
        Mode::Offset => (moved, sp),
        Mode::Pre => (moved, moved),
        Mode::Post => (sp, moved),
    }
}

/// From the pc on, only loads through sp and stack releases lead to a
/// `ret` (or, once lr has been loaded, a tail call): run them.
fn in_epilogue<M: MemoryReader>(r: &Regs, mem: &M) -> Result<Option<Regs>, StepError> {
    let mut code = [0u32; SPAN];
    let n = words(mem, r.pc, &mut code);
    let mut next = *r;
    let mut lr_loaded = false;
    for &w in &code[..n] {
        match decode(w) {
            Some(Insn::Hint) => {}
            Some(Insn::Ret) => {
                next.pc = strip_pac(next.lr);
                return Ok(Some(next));
            }
            Some(Insn::Branch) if lr_loaded => {
                next.pc = strip_pac(next.lr);
                return Ok(Some(next));
            }
            Some(Insn::AddImm { rd: SP, rn, imm }) => {
                let base = if rn == SP { next.sp } else { next.fp };
                next.sp = base.wrapping_add(imm as u64);
            }
            Some(Insn::Pair {
                load: true,
                rt,
                rt2,
                off,
                mode,
            }) => {
                let (at, sp) = access(next.sp, off, mode);
                let (v, v2) = (read(mem, at)?, read(mem, at.wrapping_add(8))?);
                lr_loaded |= load(&mut next, rt, v);
                lr_loaded |= load(&mut next, rt2, v2);
                next.sp = sp;
            }
            Some(Insn::Single {
                load: true,
                rt,
                off,
                mode,
            }) => {
                let (at, sp) = access(next.sp, off, mode);
                let v = read(mem, at)?;
                lr_loaded |= load(&mut next, rt, v);
                next.sp = sp;
            }
            Some(Insn::FpPair {
                load: true,
                off,
                mode,
            }) => next.sp = access(next.sp, off, mode).1,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_fixtures_prologue_and_epilogue_instructions() {
        // Words from tests/data/macho/encodings-fp-arm64.dylib.
        let pair = |load, rt, rt2, off, mode| {
            Some(Insn::Pair {
                load,
                rt,
                rt2,
                off,
                mode,
            })
        };
        let cases = [
            (
                0xd10143ff,
                Some(Insn::AddImm {
                    rd: SP,
                    rn: SP,
                    imm: -0x50,
                }),
            ),
            (0xa9015ff8, pair(false, 24, 23, 0x10, Mode::Offset)),
            (0xa9047bfd, pair(false, 29, 30, 0x40, Mode::Offset)),
            (
                0x910103fd,
                Some(Insn::AddImm {
                    rd: FP,
                    rn: SP,
                    imm: 0x40,
                }),
            ),
            (0xa9bf7bfd, pair(false, 29, 30, -0x10, Mode::Pre)),
            (
                0x910003fd,
                Some(Insn::AddImm {
                    rd: FP,
                    rn: SP,
                    imm: 0,
                }),
            ),
            (
                0xd14047ff,
                Some(Insn::AddImm {
                    rd: SP,
                    rn: SP,
                    imm: -0x11000,
                }),
            ),
            (
                0x910003bf,
                Some(Insn::AddImm {
                    rd: SP,
                    rn: FP,
                    imm: 0,
                }),
            ),
            (0xa9447bfd, pair(true, 29, 30, 0x40, Mode::Offset)),
            (0xa8c17bfd, pair(true, 29, 30, 0x10, Mode::Post)),
            (
                0x910143ff,
                Some(Insn::AddImm {
                    rd: SP,
                    rn: SP,
                    imm: 0x50,
                }),
            ),
            (
                0x6db63bef,
                Some(Insn::FpPair {
                    load: false,
                    off: -0xa0,
                    mode: Mode::Pre,
                }),
            ),
            (
                0x6cca3bef,
                Some(Insn::FpPair {
                    load: true,
                    off: 0xa0,
                    mode: Mode::Post,
                }),
            ),
            (0xd65f03c0, Some(Insn::Ret)),
            (0x14000035, Some(Insn::Branch)),
            (0xd503237f, Some(Insn::Hint)),
            (0xd50323ff, Some(Insn::Hint)),
            // `str x8, [x9, #0x7ff8]`: not through sp.
            (0xf93ffd28, None),
            // `bl`, `mov x19, x3`, `sub x9, sp, #0x70`.
            (0x9400007b, None),
            (0xaa0303f3, None),
            (0xd101c3e9, None),
        ];
        for (w, want) in cases {
            assert_eq!(decode(w), want, "{w:#010x}");
        }
        // `str x30, [sp, #-16]!` and `ldr x30, [sp], #16`.
        let single = |load, off, mode| {
            Some(Insn::Single {
                load,
                rt: LR,
                off,
                mode,
            })
        };
        assert_eq!(decode(0xf81f0ffe), single(false, -16, Mode::Pre));
        assert_eq!(decode(0xf84107fe), single(true, 16, Mode::Post));
        assert_eq!(decode(0xf90007fe), single(false, 8, Mode::Offset));
    }

    #[test]
    fn a_tail_call_ends_an_epilogue_only_once_lr_was_loaded() {
        use crate::memory::SliceMemory;
        const CODE: u64 = 0x1000;
        const SP: u64 = 0x7000_0000;
        // ldp x29, x30, [sp], #0x10; b ...   (`_realigned`'s tail)
        let code: Vec<u8> = [0xa8c1_7bfdu32, 0x1400_0035]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let stack: Vec<u8> = [0x7000_0100u64, 0x4000_1234]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let regions = [(CODE, &code[..]), (SP, &stack[..])];
        let mem = SliceMemory::new(&regions);
        let r = Regs {
            pc: CODE,
            sp: SP,
            lr: 0x4000_9999,
            ..Default::default()
        };
        let next = in_epilogue(&r, &mem).unwrap().unwrap();
        assert_eq!(
            (next.pc, next.sp, next.fp),
            (0x4000_1234, SP + 16, 0x7000_0100)
        );
        // At the branch itself, lr may be anything: a loop's branch looks
        // the same.
        let r = Regs { pc: CODE + 4, ..r };
        assert_eq!(in_epilogue(&r, &mem), Ok(None));
    }
}
