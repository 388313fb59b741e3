//! AArch64: registers, capture and unwind rules.

use super::{eval_row, frame_registers, read, Arch, StepError};
use crate::formats::sframe::{RegRule, Row};
use crate::memory::MemoryReader;

#[cfg(target_arch = "aarch64")]
mod capture;
internal! {
    mod compact;
    mod prologue;
}
#[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "macos")))]
pub mod ucontext;
#[cfg(target_arch = "aarch64")]
pub use capture::{call_site, capture};
mod regs;
pub use regs::{
    set_user_address_bits, strip_pac, user_address_bits, user_address_mask, Regs, USER_ADDRESS_MASK,
};

/// The DWARF numbers of the registers a CFI row names here.
pub const CFI_REGISTERS: crate::formats::cfi::Registers = crate::formats::cfi::Registers::AARCH64;

/// Byte offsets, from the sp at `__kernel_rt_sigreturn`, of the interrupted
/// registers: a 128-byte `siginfo_t`, then the `ucontext_t` whose
/// `uc_mcontext` (`struct sigcontext`) starts 176 bytes in, with
/// `fault_address`, `regs[31]`, `sp`, `pc`.
pub mod sigframe_offsets {
    /// Offset of `uc_mcontext.regs[0]`.
    pub const REGS: u64 = 128 + 176 + 8;
    /// Offset of `uc_mcontext.sp`.
    pub const SP: u64 = REGS + 31 * 8;
    /// Offset of `uc_mcontext.pc`.
    pub const PC: u64 = SP + 8;
}

/// The AArch64 architecture.
#[derive(Clone, Copy, Debug)]
pub struct Aarch64;

impl Aarch64 {
    /// The registers saved in the signal frame at `sp`.
    fn ucontext_regs<M: MemoryReader>(sp: u64, mem: &M) -> Result<Regs, StepError> {
        use sigframe_offsets as o;
        let at = |off: u64| read(mem, sp.wrapping_add(off));
        let mut x19_x28 = [0u64; 10];
        for (i, slot) in x19_x28.iter_mut().enumerate() {
            *slot = at(o::REGS + (19 + i as u64) * 8)?;
        }
        Ok(Regs {
            pc: at(o::PC)?,
            sp: at(o::SP)?,
            fp: at(o::REGS + 29 * 8)?,
            lr: at(o::REGS + 30 * 8)?,
            x19_x28,
        })
    }
}

impl Arch for Aarch64 {
    type Regs = Regs;

    fn pc(r: &Regs) -> u64 {
        r.pc
    }
    fn sp(r: &Regs) -> u64 {
        r.sp
    }
    fn fp(r: &Regs) -> u64 {
        r.fp
    }

    /// `cfa = (sp | fp | reg) + off`; `pc = *(cfa + ra_off)` (PAC-stripped when
    /// mangled) or `lr` where allowed; `fp = *(cfa + fp_off)` or unchanged;
    /// `sp = cfa`.
    fn step_sframe<M: MemoryReader>(
        row: &Row,
        r: &Regs,
        mem: &M,
        ra_in_register_ok: bool,
    ) -> Result<Regs, StepError> {
        if row.ra == RegRule::SameValue && !ra_in_register_ok {
            // Only a leaf (or a frame interrupted by a signal) can still hold
            // its return address in x30; anywhere else x30 is the callee's.
            return Err(StepError::Invalid);
        }
        let reg = frame_registers(ra_in_register_ok, [31, 29], |n| r.dwarf(n));
        let v = eval_row(row, r.sp, r.fp, r.lr, reg, mem)?;
        let pc = if row.mangled_ra || row.ra == RegRule::SameValue {
            strip_pac(v.ra)
        } else {
            v.ra
        };
        Ok(Regs {
            pc,
            sp: v.cfa,
            fp: v.fp,
            lr: pc,
            x19_x28: r.x19_x28,
        })
    }

    /// See `compact::step`.
    fn step_compact<M: MemoryReader>(
        encoding: u32,
        _func_start: u64,
        r: &Regs,
        mem: &M,
        ra_in_register_ok: bool,
    ) -> Result<Regs, super::CompactStep> {
        compact::step(encoding, r, mem, ra_in_register_ok)
    }

    /// See `prologue::caller`.
    fn step_in_prologue<M: MemoryReader>(
        func_start: u64,
        r: &Regs,
        mem: &M,
    ) -> Result<Option<Regs>, StepError> {
        prologue::caller(func_start, r, mem)
    }

    /// `(pc, sp, fp) = (strip(*(fp + 8)), fp + 16, *fp)`. The caller's sp is
    /// only bounded below: the frame record need not sit at the frame's top.
    fn step_frame_pointer<M: MemoryReader>(r: &Regs, mem: &M) -> Result<Regs, StepError> {
        if !r.fp.is_multiple_of(8) || r.fp < r.sp {
            return Err(StepError::Invalid);
        }
        let fp = read(mem, r.fp)?;
        let pc = strip_pac(read(mem, r.fp.wrapping_add(8))?);
        Ok(Regs {
            pc,
            sp: r.fp.wrapping_add(16),
            fp,
            lr: pc,
            x19_x28: r.x19_x28,
        })
    }

    /// The frame sits between the handler's frame and the frame record the
    /// kernel (or qemu-user) placed just above it, which `fp` points to. It
    /// is taken at `sp` when its saved x29/x30 equal that record. Otherwise
    /// it is searched for, from `sp` up, as the first 16-byte aligned
    /// position whose saved x29/x30 do, with its whole `sigcontext` below
    /// the record (so the record itself is never read as a saved x29/x30).
    /// A handler may have rewritten x29 or x30 in the ucontext, so that
    /// nothing matches: an exact `sp` is then still the frame, and a lower
    /// bound gives no frame at all.
    fn signal_frame_regs<M: MemoryReader>(
        r: &Regs,
        sp_exact: bool,
        mem: &M,
    ) -> Result<Regs, StepError> {
        let record = (read(mem, r.fp), read(mem, r.fp.wrapping_add(8)));
        let consistent = |sp: u64| {
            let saved = |n: u64| read(mem, sp.wrapping_add(sigframe_offsets::REGS + n * 8));
            matches!(record, (Ok(fp), Ok(lr)) if saved(29) == Ok(fp) && saved(30) == Ok(lr))
        };
        // A signal frame is a few KiB (more with SVE state): search no
        // further than this above the lower bound, however far `fp` points.
        const MAX_FRAME: u64 = 64 * 1024;
        if consistent(r.sp) {
            return Self::ucontext_regs(r.sp, mem);
        }
        let start = r.sp.wrapping_add(15) & !15;
        let end =
            r.fp.saturating_sub(sigframe_offsets::PC + 8)
                .min(start.saturating_add(MAX_FRAME));
        match (start..=end).step_by(16).find(|&sp| consistent(sp)) {
            Some(sp) => Self::ucontext_regs(sp, mem),
            None if sp_exact => Self::ucontext_regs(r.sp, mem),
            None => Err(StepError::Invalid),
        }
    }

    /// `pc = strip(lr)`, `sp` unchanged: what `bl` or `blr` left.
    fn at_entry<M: MemoryReader>(r: &Regs, _mem: &M) -> Result<Regs, StepError> {
        let pc = strip_pac(r.lr);
        Ok(Regs { pc, lr: pc, ..*r })
    }

    /// `mov x8, #139; svc #0` (`rt_sigreturn`).
    const SIGRETURN_CODE: &'static [u8] = &[0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4];
    const SIGRETURN_CALL_AT: u64 = 4;

    fn link_register(r: &Regs) -> Option<u64> {
        Some(r.lr)
    }

    fn scanned(r: &Regs, ra: u64, slot: u64, fp: Option<u64>) -> Regs {
        Regs {
            pc: ra,
            sp: slot.wrapping_add(8),
            fp: fp.unwrap_or(r.fp),
            lr: ra,
            ..*r
        }
    }

    /// Recognises `bl`, `blr` and the pointer-authenticating `blraa`,
    /// `blrab`, `blraaz` and `blrabz` as the instruction before the return
    /// address.
    fn ends_with_call(c: &[u8; 8]) -> bool {
        let insn = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        insn & 0xfc00_0000 == 0x9400_0000 // bl
            || insn & 0xffff_fc1f == 0xd63f_0000 // blr
            || insn & 0xfeff_f800 == 0xd63f_0800 // blraa(z)/blrab(z)
    }

    fn direct_call_target(c: &[u8; 8], ra: u64) -> Option<u64> {
        let insn = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        // imm26, in words, signed: shifted to the top and back down.
        let words = i64::from(((insn << 6) as i32) >> 6);
        (insn & 0xfc00_0000 == 0x9400_0000)
            .then(|| ra.wrapping_sub(4).wrapping_add((words * 4) as u64))
    }

    fn strip_pac(addr: u64) -> u64 {
        strip_pac(addr)
    }

    const FP_STEP_GIVES_CFA: bool = false;

    /// The link register holds the return address, as after
    /// [`Arch::step_sframe`].
    #[inline(always)]
    fn caller(r: &Regs, pc: u64, sp: u64, fp: u64) -> Regs {
        Regs {
            pc,
            sp,
            fp,
            lr: pc,
            ..*r
        }
    }

    fn with_sp(r: &Regs, sp: u64) -> Regs {
        Regs { sp, ..*r }
    }
}
