//! Per-architecture pieces: the register set, how it is captured (inline asm)
//! or taken from a signal's `ucontext`, and how each kind of unwind rule moves
//! the registers from a callee to its caller.
//!
//! Both architectures compile on every host so their step logic is tested
//! everywhere against captured stacks; only capture and `ucontext` glue are
//! gated on the target.

use crate::formats::sframe::{CfaRule, RegRule, Row};
use crate::memory::MemoryReader;

pub mod aarch64;
pub mod x86_64;

#[cfg(any(target_os = "linux", target_os = "macos"))]
pub use native::ucontext::{all_registers, regs_from_ucontext};

#[cfg(target_arch = "aarch64")]
pub use aarch64 as native;
#[cfg(target_arch = "aarch64")]
pub use aarch64::Aarch64 as Native;
#[cfg(target_arch = "x86_64")]
pub use x86_64 as native;
#[cfg(target_arch = "x86_64")]
pub use x86_64::X86_64 as Native;

/// Why one step could not recover the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepError {
    /// The row says this is the outermost frame (return address undefined).
    Outermost,
    /// A value the rule needs lies in memory the reader refused.
    Unreadable,
    /// The rule cannot apply here (for example RA-in-register outside the
    /// topmost frame, or a register the walk does not track).
    Invalid,
}

/// Why a compact encoding gives no step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactStep {
    /// The encoding defers to DWARF or says nothing (null): use frame
    /// pointers instead.
    Fallback,
    /// The encoding applies but the frame cannot be recovered.
    Broken(StepError),
}

impl From<StepError> for CompactStep {
    fn from(e: StepError) -> Self {
        CompactStep::Broken(e)
    }
}

/// What the walk needs from an architecture.
pub trait Arch: Copy + core::fmt::Debug {
    /// The register set.
    type Regs: Copy + Default + core::fmt::Debug + PartialEq;

    /// The program counter.
    fn pc(regs: &Self::Regs) -> u64;
    /// The stack pointer.
    fn sp(regs: &Self::Regs) -> u64;
    /// The frame pointer.
    fn fp(regs: &Self::Regs) -> u64;

    /// Applies an SFrame row. `ra_in_register_ok` is true only for the topmost
    /// frame and the frame right after a signal frame, the only places where a
    /// return address may still be live in a register, and the only frames
    /// whose registers other than the stack and frame pointers are known:
    /// SFrame says nothing of where a callee saved the others, so above
    /// those frames they hold some callee's values, and a row (a FLEX row)
    /// that names one fails with [`StepError::Invalid`].
    fn step_sframe<M: MemoryReader>(
        row: &Row,
        regs: &Self::Regs,
        mem: &M,
        ra_in_register_ok: bool,
    ) -> Result<Self::Regs, StepError>;

    /// Applies an Apple compact-unwind `encoding` for the function starting
    /// at `func_start`. `mem` reads the stack and, for x86_64
    /// stack-indirect frames, the function's code. `ra_in_register_ok` is
    /// as for [`Arch::step_sframe`].
    fn step_compact<M: MemoryReader>(
        encoding: u32,
        func_start: u64,
        regs: &Self::Regs,
        mem: &M,
        ra_in_register_ok: bool,
    ) -> Result<Self::Regs, CompactStep>;

    /// For a frame whose pc is exact (frame 0, or one a signal
    /// interrupted) in the function starting at `func_start`: the caller,
    /// if the pc lies in the function's prologue or epilogue, where an Apple
    /// compact encoding, which describes the body, does not hold yet or any
    /// more; `None` elsewhere. `mem` reads the stack and the code.
    fn step_in_prologue<M: MemoryReader>(
        func_start: u64,
        regs: &Self::Regs,
        mem: &M,
    ) -> Result<Option<Self::Regs>, StepError>;

    /// Follows the frame-pointer chain one link.
    fn step_frame_pointer<M: MemoryReader>(
        regs: &Self::Regs,
        mem: &M,
    ) -> Result<Self::Regs, StepError>;

    /// The interrupted registers, read from the `ucontext_t` that the kernel's
    /// signal frame holds, given the registers at the sigreturn trampoline;
    /// `sp_exact` says whether their sp is the trampoline's own or only a
    /// lower bound of it (see [`Arch::FP_STEP_GIVES_CFA`]).
    fn signal_frame_regs<M: MemoryReader>(
        regs: &Self::Regs,
        sp_exact: bool,
        mem: &M,
    ) -> Result<Self::Regs, StepError>;

    /// The machine code of the sigreturn trampoline, as it starts at its pc.
    const SIGRETURN_CODE: &'static [u8];

    /// Where in [`Arch::SIGRETURN_CODE`] its system call starts: a signal
    /// that lands after the first instruction leaves an exact pc this far
    /// into the trampoline, with the stack as at its start.
    const SIGRETURN_CALL_AT: u64;

    /// The caller's registers as a function's first instruction sees them:
    /// the return address the call left at the stack pointer (x86_64) or in
    /// the link register (AArch64). For a precise frame whose pc lies in no
    /// known code, as after a call through a null or wild pointer, where the
    /// frame pointer still holds the calling function's frame.
    fn at_entry<M: MemoryReader>(regs: &Self::Regs, mem: &M) -> Result<Self::Regs, StepError>;

    /// The link register (AArch64 x30), where a call leaves its return
    /// address; `None` where a call pushes it (x86_64).
    fn link_register(regs: &Self::Regs) -> Option<u64>;

    /// The caller's registers when stack scanning found return address `ra`
    /// in the slot at `slot`: pc and sp are known, and `fp` is a guess at
    /// the caller's frame pointer (`None` keeps the current one).
    fn scanned(regs: &Self::Regs, ra: u64, slot: u64, fp: Option<u64>) -> Self::Regs;

    /// Whether the bytes just before a return address end with a call
    /// instruction. `code` holds the `code.len()` bytes ending at the return
    /// address.
    fn ends_with_call(code: &[u8; 8]) -> bool;

    /// Where the direct call (`call rel32`, `bl`) that ends the bytes
    /// before `ra` goes; `None` for any other instruction. `code` holds the
    /// 8 bytes ending at `ra`.
    fn direct_call_target(code: &[u8; 8], ra: u64) -> Option<u64>;

    /// Removes pointer-authentication bits from a return address (no-op where
    /// the architecture has none).
    fn strip_pac(addr: u64) -> u64;

    /// Whether a frame-pointer step yields the caller's exact stack pointer.
    /// On x86_64 `rbp + 16` is the CFA; on AArch64 the frame record may sit
    /// anywhere in the frame, so `fp + 16` is only a lower bound.
    const FP_STEP_GIVES_CFA: bool;

    /// The caller's registers after a step that recovered its `pc`, `sp`
    /// and `fp` and no other register (an SFrame row or a frame-pointer
    /// link): the same as [`Arch::step_sframe`] and
    /// [`Arch::step_frame_pointer`] give.
    fn caller(regs: &Self::Regs, pc: u64, sp: u64, fp: u64) -> Self::Regs;

    /// The same registers with another stack pointer.
    fn with_sp(regs: &Self::Regs, sp: u64) -> Self::Regs;
}

/// Reads a stack word, or fails the step.
pub(crate) fn read<M: MemoryReader>(mem: &M, addr: u64) -> Result<u64, StepError> {
    mem.read_u64(addr).ok_or(StepError::Unreadable)
}

/// Reads as much of `buf` as `mem` holds from `addr` on: the whole at
/// once, else in pieces that end on 8-byte boundaries (none crosses a
/// page) up to the first that fails, as for code near the end of its
/// mapping. Returns the length read.
pub(crate) fn read_prefix<M: MemoryReader>(mem: &M, addr: u64, buf: &mut [u8]) -> usize {
    if mem.read(addr, buf) {
        return buf.len();
    }
    let mut done = 0;
    while done < buf.len() {
        let at = addr.wrapping_add(done as u64);
        let piece = (8 - (at % 8) as usize).min(buf.len() - done);
        if !mem.read(at, &mut buf[done..done + piece]) {
            break;
        }
        done += piece;
    }
    done
}

/// `base + off` with the offset sign-extended.
pub(crate) fn apply_offset(base: u64, off: i32) -> u64 {
    base.wrapping_add(off as i64 as u64)
}

/// The registers a FLEX row may name in a frame, by DWARF number, read
/// through `reg`: all of them where `known` (frame 0, and the frame right
/// after a signal frame), else only the stack and frame pointers
/// (`sp_fp`). SFrame says nothing of where callees saved the others, so
/// above those frames the register set holds some callee's values.
pub(crate) fn frame_registers(
    known: bool,
    sp_fp: [u16; 2],
    reg: impl Fn(u16) -> Option<u64>,
) -> impl Fn(u16) -> Option<u64> {
    move |n| (known || sp_fp.contains(&n)).then(|| reg(n)).flatten()
}

/// What an SFrame row yields for the caller.
pub(crate) struct RowValues {
    /// The CFA: the caller's stack pointer.
    pub cfa: u64,
    /// The return address (before any PAC stripping).
    pub ra: u64,
    /// The caller's frame pointer.
    pub fp: u64,
}

/// Evaluates a row's CFA, RA and FP rules, the same way on every
/// architecture: `sp`/`fp` are the current stack and frame pointers, `reg`
/// reads a register by DWARF number (for FLEX rows), `ra_same` is what a
/// `SameValue` return address means (the link register, where there is one).
pub(crate) fn eval_row<M: MemoryReader>(
    row: &Row,
    sp: u64,
    fp: u64,
    ra_same: u64,
    reg: impl Fn(u16) -> Option<u64>,
    mem: &M,
) -> Result<RowValues, StepError> {
    let reg = |n: u16| reg(n).ok_or(StepError::Invalid);
    let cfa = match row.cfa {
        CfaRule::SpPlus(o) => apply_offset(sp, o),
        CfaRule::FpPlus(o) => apply_offset(fp, o),
        CfaRule::RegPlus { reg: n, offset } => apply_offset(reg(n)?, offset),
        CfaRule::AtRegPlus { reg: n, offset } => read(mem, apply_offset(reg(n)?, offset))?,
    };
    let recover = |rule: RegRule, same: u64| -> Result<u64, StepError> {
        match rule {
            RegRule::Undefined => Err(StepError::Outermost),
            RegRule::SameValue => Ok(same),
            RegRule::AtCfa(o) => read(mem, apply_offset(cfa, o)),
            RegRule::RegPlus { reg: n, offset } => Ok(apply_offset(reg(n)?, offset)),
            RegRule::AtRegPlus { reg: n, offset } => read(mem, apply_offset(reg(n)?, offset)),
        }
    };
    let ra = recover(row.ra, ra_same)?;
    // An undefined frame pointer keeps its value: only the RA ends a walk.
    let fp = match row.fp {
        RegRule::Undefined => fp,
        rule => recover(rule, fp)?,
    };
    Ok(RowValues { cfa, ra, fp })
}
