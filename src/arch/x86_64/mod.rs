//! x86_64 (AMD64): registers, capture and unwind rules.

use super::{eval_row, frame_registers, read, Arch, StepError};
use crate::formats::sframe::{RegRule, Row};
use crate::memory::MemoryReader;

#[cfg(target_arch = "x86_64")]
mod capture;
internal! {
    mod compact;
    mod prologue;
}
#[cfg(all(target_arch = "x86_64", any(target_os = "linux", target_os = "macos")))]
pub mod ucontext;
#[cfg(target_arch = "x86_64")]
pub use capture::{call_site, capture};
mod regs;
pub use regs::Regs;

/// The DWARF numbers of the registers a CFI row names here.
pub const CFI_REGISTERS: crate::formats::cfi::Registers = crate::formats::cfi::Registers::X86_64;

/// Byte offsets of registers in the Linux `ucontext_t` (`uc_mcontext.gregs`
/// starts at 40; `REG_RBP` = 10, `REG_RBX` = 11, `REG_RSP` = 15, `REG_RIP` = 16,
/// `REG_R12`..`REG_R15` = 4..7).
pub mod ucontext_offsets {
    /// Offset of `gregs[0]`.
    pub const GREGS: u64 = 40;
    /// Offset of `r12` to `r15`, in order.
    pub const R12_R15: [u64; 4] = [GREGS + 4 * 8, GREGS + 5 * 8, GREGS + 6 * 8, GREGS + 7 * 8];
    /// Offset of `rbp`.
    pub const RBP: u64 = GREGS + 10 * 8;
    /// Offset of `rbx`.
    pub const RBX: u64 = GREGS + 11 * 8;
    /// Offset of `rsp`.
    pub const RSP: u64 = GREGS + 15 * 8;
    /// Offset of `rip`.
    pub const RIP: u64 = GREGS + 16 * 8;
}

/// The x86_64 architecture.
#[derive(Clone, Copy, Debug)]
pub struct X86_64;

impl Arch for X86_64 {
    type Regs = Regs;

    fn pc(r: &Regs) -> u64 {
        r.rip
    }
    fn sp(r: &Regs) -> u64 {
        r.rsp
    }
    fn fp(r: &Regs) -> u64 {
        r.rbp
    }

    /// `cfa = (sp | fp | reg) + off`; `rip = *(cfa + ra_off)`;
    /// `rbp = *(cfa + fp_off)` or unchanged; `rsp = cfa`.
    fn step_sframe<M: MemoryReader>(
        row: &Row,
        r: &Regs,
        mem: &M,
        ra_in_register_ok: bool,
    ) -> Result<Regs, StepError> {
        // x86_64 never keeps the return address in a register across a call.
        if row.ra == RegRule::SameValue {
            return Err(StepError::Invalid);
        }
        let reg = frame_registers(ra_in_register_ok, [7, 6], |n| r.dwarf(n));
        let v = eval_row(row, r.rsp, r.rbp, 0, reg, mem)?;
        Ok(Regs {
            rip: v.ra,
            rsp: v.cfa,
            rbp: v.fp,
            ..*r
        })
    }

    /// See `compact::step`; no frame keeps its return address in a
    /// register.
    fn step_compact<M: MemoryReader>(
        encoding: u32,
        func_start: u64,
        r: &Regs,
        mem: &M,
        _ra_in_register_ok: bool,
    ) -> Result<Regs, super::CompactStep> {
        compact::step(encoding, func_start, r, mem)
    }

    /// See `prologue::caller`.
    fn step_in_prologue<M: MemoryReader>(
        func_start: u64,
        r: &Regs,
        mem: &M,
    ) -> Result<Option<Regs>, StepError> {
        prologue::caller(func_start, r, mem)
    }

    /// `(rip, rsp, rbp) = (*(rbp + 8), rbp + 16, *rbp)`
    fn step_frame_pointer<M: MemoryReader>(r: &Regs, mem: &M) -> Result<Regs, StepError> {
        if !r.rbp.is_multiple_of(8) || r.rbp < r.rsp {
            return Err(StepError::Invalid);
        }
        let rbp = read(mem, r.rbp)?;
        let rip = read(mem, r.rbp.wrapping_add(8))?;
        Ok(Regs {
            rip,
            rsp: r.rbp.wrapping_add(16),
            rbp,
            ..*r
        })
    }

    /// At `__restore_rt`, `rsp` points at the `ucontext_t` (the handler's
    /// `ret` popped the trampoline address); a frame-pointer step gives an
    /// exact sp here, so `sp_exact` is not needed.
    fn signal_frame_regs<M: MemoryReader>(
        r: &Regs,
        _sp_exact: bool,
        mem: &M,
    ) -> Result<Regs, StepError> {
        use ucontext_offsets as o;
        let at = |off: u64| read(mem, r.rsp.wrapping_add(off));
        Ok(Regs {
            rip: at(o::RIP)?,
            rsp: at(o::RSP)?,
            rbp: at(o::RBP)?,
            rbx: at(o::RBX)?,
            r12: at(o::R12_R15[0])?,
            r13: at(o::R12_R15[1])?,
            r14: at(o::R12_R15[2])?,
            r15: at(o::R12_R15[3])?,
        })
    }

    /// `(rip, rsp) = (*rsp, rsp + 8)`: what `call` pushed.
    fn at_entry<M: MemoryReader>(r: &Regs, mem: &M) -> Result<Regs, StepError> {
        Ok(Regs {
            rip: read(mem, r.rsp)?,
            rsp: r.rsp.wrapping_add(8),
            ..*r
        })
    }

    /// `mov $15, %rax; syscall` (`rt_sigreturn`).
    const SIGRETURN_CODE: &'static [u8] = &[0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
    const SIGRETURN_CALL_AT: u64 = 7;

    fn link_register(_: &Regs) -> Option<u64> {
        None
    }

    fn scanned(r: &Regs, ra: u64, slot: u64, fp: Option<u64>) -> Regs {
        Regs {
            rip: ra,
            rsp: slot.wrapping_add(8),
            rbp: fp.unwrap_or(r.rbp),
            ..*r
        }
    }

    fn direct_call_target(c: &[u8; 8], ra: u64) -> Option<u64> {
        let disp = i32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        (c[3] == 0xe8).then(|| ra.wrapping_add(i64::from(disp) as u64))
    }

    /// Recognises `call rel32` (`e8`), and `call r/m64` (`ff /2`) in its
    /// register, register-indirect, disp8 and disp32 forms, with or without a
    /// REX prefix or SIB byte.
    fn ends_with_call(c: &[u8; 8]) -> bool {
        let n = c.len();
        // call rel32: e8 xx xx xx xx
        if c[n - 5] == 0xe8 {
            return true;
        }
        // ff /2 with the ModRM byte at n-len+1, for each encoded length.
        let ff2 = |len: usize| -> bool {
            let (op, modrm) = (c[n - len], c[n - len + 1]);
            if op != 0xff || (modrm >> 3) & 7 != 2 {
                return false;
            }
            let md = modrm >> 6;
            let rm = modrm & 7;
            let sib = usize::from(md != 3 && rm == 4);
            let disp = match md {
                0 if rm == 5 => 4,                                         // rip-relative
                0 if sib == 1 && len >= 3 && c[n - len + 2] & 7 == 5 => 4, // SIB, no base
                0 => 0,
                1 => 1,
                2 => 4,
                _ => 0,
            };
            2 + sib + disp == len
        };
        (2..=7).any(ff2)
    }

    fn strip_pac(addr: u64) -> u64 {
        addr
    }

    const FP_STEP_GIVES_CFA: bool = true;

    #[inline(always)]
    fn caller(r: &Regs, rip: u64, rsp: u64, rbp: u64) -> Regs {
        Regs {
            rip,
            rsp,
            rbp,
            ..*r
        }
    }

    fn with_sp(r: &Regs, sp: u64) -> Regs {
        Regs { rsp: sp, ..*r }
    }
}
