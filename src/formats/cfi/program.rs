//! The CFA program (`DW_CFA_*`): runs a CIE's initial instructions and an
//! FDE's instructions into rows, keeping the rules a walk uses (the CFA,
//! the return address column and the frame pointer). Other registers'
//! rules are read past and dropped.

use super::entry::{Cie, Fde};
use super::pointer::{self, Bases};
use super::Error;
use crate::formats::cursor::Cursor;

/// How to compute the CFA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cfa {
    /// `CFA = reg + offset`.
    RegOffset {
        /// DWARF register number.
        reg: u16,
        /// Byte offset.
        offset: i64,
    },
    /// `DW_CFA_def_cfa_expression`: a DWARF expression, which a walk does
    /// not evaluate.
    Expression,
}

/// How to recover one register of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// No instruction named the register (for the frame pointer, a
    /// callee-saved register, this means it is unchanged).
    Unspecified,
    /// `DW_CFA_undefined`: no value (for the return address: the outermost
    /// frame).
    Undefined,
    /// `DW_CFA_same_value`: unchanged.
    SameValue,
    /// `value = *(CFA + n)`.
    Offset(i64),
    /// `value = CFA + n`.
    ValOffset(i64),
    /// `value = reg`, another register of this frame.
    Register(u16),
    /// `DW_CFA_expression`: at an address a DWARF expression computes.
    Expression,
    /// `DW_CFA_val_expression`: a DWARF expression's value.
    ValExpression,
}

/// The rules in force over one range of a function's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfiRow {
    /// Runtime address where the row starts to apply.
    pub start: u64,
    /// Runtime address where it stops applying.
    pub end: u64,
    /// The CFA.
    pub cfa: Cfa,
    /// The return-address column (the CIE's).
    pub ra: Rule,
    /// The frame pointer (the register the caller asked about).
    pub fp: Rule,
    /// AArch64: the return address is signed (`DW_CFA_AARCH64_negate_ra_state`
    /// toggled an odd number of times).
    pub ra_signed: bool,
}

/// Most `DW_CFA_remember_state` levels a program may nest; GCC and LLVM
/// nest one or two.
pub const MAX_STATE_DEPTH: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    cfa: Cfa,
    ra: Rule,
    fp: Rule,
    ra_signed: bool,
}

const INITIAL: State = State {
    cfa: Cfa::RegOffset { reg: 0, offset: 0 },
    ra: Rule::Unspecified,
    fp: Rule::Unspecified,
    ra_signed: false,
};

/// Runs the CFA program of `fde` (under `cie`) over `data` (`.eh_frame`,
/// whose first byte is at `bases.section`) and hands each row to `visit`,
/// in address order, until `visit` returns `false` or the rows end.
/// `fp_register` is the DWARF number of the frame pointer whose rule rows
/// carry. Returns an error for an instruction this reader does not know,
/// or one that reads past the FDE; rows handed out before it stand.
pub fn for_each_row(
    data: &[u8],
    cie: &Cie,
    fde: &Fde,
    fp_register: u16,
    bases: &Bases,
    visit: impl FnMut(&CfiRow) -> bool,
) -> Result<(), Error> {
    run_fde(data, cie, fde, fp_register, bases, &mut Visit(visit))
}

/// The row that applies at `pc`, which `fde` must cover; `None` when the
/// FDE's instructions end it before `pc` (a `set_loc` past its range).
/// The rows before it are stepped over, not made.
pub fn row_at(
    data: &[u8],
    cie: &Cie,
    fde: &Fde,
    fp_register: u16,
    bases: &Bases,
    pc: u64,
) -> Result<Option<CfiRow>, Error> {
    let k = Factors::of(cie, fp_register);
    // The common opcodes run here with the state in locals; at any other
    // (or any fault) the general machine takes over at that instruction
    // from the state so far, so rows and errors are the general ones.
    let mut s = Quick::INITIAL;
    let (start, end) = cie.instructions;
    let Some(code) = data.get(..end) else {
        let from = (Resume::Cie(start), fde.pc_begin);
        return seek_from(data, cie, fde, fp_register, bases, pc, from, s, Quick::INITIAL);
    };
    let mut c = Cursor::at(code, start);
    loop {
        let at = c.pos();
        let Some(op) = c.u8() else { break };
        if !matches!(s.step(op, &mut c, &Quick::INITIAL, &k), Op::Go) {
            let from = (Resume::Cie(at), fde.pc_begin);
            return seek_from(data, cie, fde, fp_register, bases, pc, from, s, Quick::INITIAL);
        }
    }
    let initial = s;
    let mut loc = fde.pc_begin;
    let end_pc = fde.pc_begin.wrapping_add(fde.pc_range);
    let (start, end) = fde.instructions;
    let resume = |at, s, loc| {
        let from = (Resume::Fde(at), loc);
        seek_from(data, cie, fde, fp_register, bases, pc, from, s, initial)
    };
    let Some(code) = data.get(..end) else {
        return resume(start, s, loc);
    };
    let mut c = Cursor::at(code, start);
    loop {
        let at = c.pos();
        let Some(op) = c.u8() else { break };
        match s.step(op, &mut c, &initial, &k) {
            Op::Go => {}
            // As `Machine::advance` with a `Seek`.
            Op::Advance(delta) if loc.checked_add(delta).is_some() => {
                let to = (loc + delta).min(end_pc);
                if to > loc {
                    if pc < to {
                        return Ok((pc >= loc).then(|| s.state(data, &k).row(loc, to)));
                    }
                    loc = to;
                    if to == end_pc {
                        return Ok(None);
                    }
                }
            }
            Op::Advance(_) | Op::Other => return resume(at, s, loc),
        }
    }
    // The last row runs to the function's end.
    Ok((loc <= pc && pc < end_pc).then(|| s.state(data, &k).row(loc, end_pc)))
}

/// [`row_at`] by the general machine, from the state `s` (the CIE's
/// `initial`, at `loc`) at the instruction `from` names.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn seek_from(
    data: &[u8],
    cie: &Cie,
    fde: &Fde,
    fp_register: u16,
    bases: &Bases,
    pc: u64,
    (from, loc): (Resume, u64),
    s: Quick,
    initial: Quick,
) -> Result<Option<CfiRow>, Error> {
    let mut m = Machine::new(cie, fde, fp_register, bases);
    m.state = s.state(data, &m.k);
    m.initial = initial.state(data, &m.k);
    m.loc = loc;
    let mut seek = Seek { pc, found: None };
    run_from(m, data, cie, fde, from, &mut seek)?;
    Ok(seek.found)
}

/// The CIE's factors and the registers rows carry rules for.
struct Factors {
    code_align: u64,
    data_align: i64,
    ra_register: u16,
    fp_register: u16,
}

impl Factors {
    fn of(cie: &Cie, fp_register: u16) -> Factors {
        Factors {
            code_align: cie.code_align,
            data_align: cie.data_align,
            ra_register: cie.ra_register,
            fp_register,
        }
    }
}

/// [`row_at`]'s state. Its CFA is a register plus an offset, and the
/// only rules it gives are `DW_CFA_offset`'s: it keeps where the operand
/// of the one in force is and reads it out only for the row it makes, so
/// the loop carries one word per rule.
#[derive(Clone, Copy)]
struct Quick {
    cfa_reg: u16,
    cfa_offset: i64,
    /// Where the `DW_CFA_offset` operand for the return address is in
    /// the section, or [`Quick::UNSPECIFIED`].
    ra: usize,
    /// As `ra`, for the frame pointer.
    fp: usize,
    ra_signed: bool,
}

/// An unsigned LEB128 number of one or two bytes, as
/// [`Cursor::uleb128`] reads it; `None` (the cursor moved) for a longer
/// one too. Inline, without a call, so the loop that uses it keeps its
/// state in registers.
#[inline(always)]
fn short_uleb128(c: &mut Cursor<'_>) -> Option<u64> {
    let b = c.u8()?;
    if b < 0x80 {
        return Some(u64::from(b));
    }
    let b2 = c.u8().filter(|&b2| b2 < 0x80)?;
    Some(u64::from(b & 0x7f) | u64::from(b2) << 7)
}

/// What [`Quick::step`] made of an instruction.
enum Op {
    Go,
    /// An advance by this many bytes, not yet checked.
    Advance(u64),
    /// One for the general machine, which has not been run.
    Other,
}

impl Quick {
    /// No operand: [`Rule::Unspecified`].
    const UNSPECIFIED: usize = usize::MAX;

    const INITIAL: Quick = Quick {
        cfa_reg: 0,
        cfa_offset: 0,
        ra: Quick::UNSPECIFIED,
        fp: Quick::UNSPECIFIED,
        ra_signed: false,
    };

    fn state(&self, data: &[u8], k: &Factors) -> State {
        let rule = |at: usize| {
            if at == Quick::UNSPECIFIED {
                return Rule::Unspecified;
            }
            // The operand was read whole once, so it reads again.
            let n = Cursor::at(data, at).uleb128().unwrap_or(0);
            Rule::Offset(n.wrapping_mul(k.data_align as u64) as i64)
        };
        State {
            cfa: Cfa::RegOffset {
                reg: self.cfa_reg,
                offset: self.cfa_offset,
            },
            ra: rule(self.ra),
            fp: rule(self.fp),
            ra_signed: self.ra_signed,
        }
    }

    /// Runs `op` as [`Machine::step`] does if it is one of the common
    /// opcodes and reads whole; otherwise changes no rule (the cursor is
    /// then of no use: the general machine starts over at `op`).
    #[inline(always)]
    fn step(&mut self, op: u8, c: &mut Cursor<'_>, initial: &Quick, k: &Factors) -> Op {
        match op {
            0x40..=0x7f => return Op::Advance(u64::from(op & 0x3f).wrapping_mul(k.code_align)),
            0x80..=0xbf => {
                let at = c.pos();
                if short_uleb128(c).is_none() {
                    return Op::Other;
                }
                let reg = u16::from(op & 0x3f);
                if reg == k.ra_register {
                    self.ra = at;
                }
                if reg == k.fp_register {
                    self.fp = at;
                }
            }
            0xc0..=0xff => {
                let reg = u16::from(op & 0x3f);
                if reg == k.ra_register {
                    self.ra = initial.ra;
                }
                if reg == k.fp_register {
                    self.fp = initial.fp;
                }
            }
            0x00 => {}
            0x02..=0x04 => {
                let delta = match op {
                    0x02 => c.u8().map(u64::from),
                    0x03 => c.u16().map(u64::from),
                    _ => c.u32().map(u64::from),
                };
                let Some(delta) = delta else { return Op::Other };
                return Op::Advance(delta.wrapping_mul(k.code_align));
            }
            0x0c => {
                let (Some(reg), Some(off)) = (short_uleb128(c), short_uleb128(c)) else {
                    return Op::Other;
                };
                let Ok(reg) = u16::try_from(reg) else { return Op::Other };
                (self.cfa_reg, self.cfa_offset) = (reg, off as i64);
            }
            0x0d => {
                let Some(Ok(reg)) = short_uleb128(c).map(u16::try_from) else {
                    return Op::Other;
                };
                self.cfa_reg = reg;
            }
            0x0e => {
                let Some(off) = short_uleb128(c) else { return Op::Other };
                self.cfa_offset = off as i64;
            }
            0x2d => self.ra_signed = !self.ra_signed,
            _ => return Op::Other,
        }
        Op::Go
    }
}

/// Where a run's rows go.
trait Sink {
    /// Whether the instructions may advance (not a CIE's initial ones).
    const ADVANCES: bool = true;
    /// Takes the row of `state` from `start` to `end`; whether to go on.
    fn take(&mut self, state: &State, start: u64, end: u64) -> bool;
}

/// A CIE's initial instructions: they describe the function's start and
/// may not advance.
struct Initial;

impl Sink for Initial {
    const ADVANCES: bool = false;
    fn take(&mut self, _: &State, _: u64, _: u64) -> bool {
        false
    }
}

/// Every row, to a visitor that says whether to go on.
struct Visit<F>(F);

impl<F: FnMut(&CfiRow) -> bool> Sink for Visit<F> {
    fn take(&mut self, state: &State, start: u64, end: u64) -> bool {
        (self.0)(&state.row(start, end))
    }
}

/// Only the row that holds `pc`, once it is known.
struct Seek {
    pc: u64,
    found: Option<CfiRow>,
}

impl Sink for Seek {
    #[inline]
    fn take(&mut self, state: &State, start: u64, end: u64) -> bool {
        if self.pc < end {
            self.found = (self.pc >= start).then(|| state.row(start, end));
            false
        } else {
            true
        }
    }
}

impl State {
    fn row(&self, start: u64, end: u64) -> CfiRow {
        CfiRow {
            start,
            end,
            cfa: self.cfa,
            ra: self.ra,
            fp: self.fp,
            ra_signed: self.ra_signed,
        }
    }
}

/// [`row_at`] by the general machine alone: what its quick loop must
/// match.
#[cfg(test)]
pub(super) fn row_at_general(
    data: &[u8],
    cie: &Cie,
    fde: &Fde,
    fp_register: u16,
    bases: &Bases,
    pc: u64,
) -> Result<Option<CfiRow>, Error> {
    let mut seek = Seek { pc, found: None };
    run_fde(data, cie, fde, fp_register, bases, &mut seek)?;
    Ok(seek.found)
}

/// Runs the CIE's initial instructions, then the FDE's, into `sink`.
fn run_fde<S: Sink>(
    data: &[u8],
    cie: &Cie,
    fde: &Fde,
    fp_register: u16,
    bases: &Bases,
    sink: &mut S,
) -> Result<(), Error> {
    let m = Machine::new(cie, fde, fp_register, bases);
    run_from(m, data, cie, fde, Resume::Cie(cie.instructions.0), sink)
}

/// Runs `m` from `start` into `sink`.
fn run_from<S: Sink>(
    mut m: Machine<'_>,
    data: &[u8],
    cie: &Cie,
    fde: &Fde,
    start: Resume,
    sink: &mut S,
) -> Result<(), Error> {
    // Most programs never remember a state: the stack is made (and
    // zeroed) only once one does, and the run goes on from there.
    let Some(resume) = m.program(data, cie, fde, start, &mut [], sink)? else {
        return Ok(());
    };
    let mut stack = [INITIAL; MAX_STATE_DEPTH];
    // Given a stack, a run pauses no more.
    m.program(data, cie, fde, resume, &mut stack, sink)
        .map(|_| ())
}

/// Where a run (re)starts: at an offset of the CIE's or the FDE's
/// instructions.
#[derive(Clone, Copy)]
enum Resume {
    Cie(usize),
    Fde(usize),
}

struct Machine<'a> {
    k: Factors,
    fde_encoding: u8,
    bases: &'a Bases,
    state: State,
    /// The rules after the CIE's initial instructions (`DW_CFA_restore`).
    initial: State,
    depth: usize,
    loc: u64,
    end: u64,
}

/// How a run of one list of instructions ended.
enum Ran {
    /// Its instructions ended.
    Ended,
    /// The rows' consumer has what it wants, or the function's end was
    /// reached.
    Stopped,
    /// A `DW_CFA_remember_state` at this offset found no stack to push to.
    NeedsStack(usize),
}

impl<'a> Machine<'a> {
    /// A machine at the start of `fde`'s function, no instruction run.
    fn new(cie: &Cie, fde: &Fde, fp_register: u16, bases: &'a Bases) -> Self {
        Machine {
            k: Factors::of(cie, fp_register),
            fde_encoding: cie.fde_encoding,
            bases,
            state: INITIAL,
            initial: INITIAL,
            depth: 0,
            loc: fde.pc_begin,
            end: fde.pc_begin.wrapping_add(fde.pc_range),
        }
    }

    /// Runs from `from` to the end of the FDE's instructions (then hands
    /// out the last row); `Some` where it needs a stack to go on.
    fn program<S: Sink>(
        &mut self,
        data: &[u8],
        cie: &Cie,
        fde: &Fde,
        from: Resume,
        stack: &mut [State],
        sink: &mut S,
    ) -> Result<Option<Resume>, Error> {
        let at = match from {
            Resume::Cie(at) => {
                match self.run(data, at, cie.instructions.1, stack, &mut Initial)? {
                    Ran::NeedsStack(at) => return Ok(Some(Resume::Cie(at))),
                    // `Initial` stops nothing: an advance there is an error.
                    Ran::Ended | Ran::Stopped => {}
                }
                self.initial = self.state;
                self.loc = fde.pc_begin;
                fde.instructions.0
            }
            Resume::Fde(at) => at,
        };
        match self.run(data, at, fde.instructions.1, stack, sink)? {
            Ran::NeedsStack(at) => Ok(Some(Resume::Fde(at))),
            Ran::Stopped => Ok(None),
            Ran::Ended => {
                if self.loc < self.end {
                    // The last row runs to the function's end.
                    sink.take(&self.state, self.loc, self.end);
                }
                Ok(None)
            }
        }
    }

    /// Moves to `to`, handing out the row that ends there; whether the
    /// rows' consumer has what it wants or the function's end is reached.
    #[inline]
    fn advance<S: Sink>(&mut self, to: u64, sink: &mut S) -> bool {
        let to = to.min(self.end);
        if to > self.loc {
            let go_on = sink.take(&self.state, self.loc, to);
            self.loc = to;
            !go_on || to == self.end
        } else {
            false
        }
    }

    // A CIE may make the frame pointer its return address column: then
    // the one rule is both.
    #[inline]
    fn set(&mut self, reg: u64, rule: Rule) {
        if reg == u64::from(self.k.ra_register) {
            self.state.ra = rule;
        }
        if reg == u64::from(self.k.fp_register) {
            self.state.fp = rule;
        }
    }

    #[inline]
    fn restore(&mut self, reg: u64) {
        if reg == u64::from(self.k.ra_register) {
            self.state.ra = self.initial.ra;
        }
        if reg == u64::from(self.k.fp_register) {
            self.state.fp = self.initial.fp;
        }
    }

    fn factored(&self, n: u64) -> i64 {
        n.wrapping_mul(self.k.data_align as u64) as i64
    }

    fn sfactored(&self, n: i64) -> i64 {
        n.wrapping_mul(self.k.data_align)
    }

    /// Runs the instructions at `[start, end)` of `data`.
    fn run<S: Sink>(
        &mut self,
        data: &[u8],
        start: usize,
        end: usize,
        stack: &mut [State],
        sink: &mut S,
    ) -> Result<Ran, Error> {
        let code = data.get(..end).ok_or(Error::Truncated {
            what: "instructions",
            offset: start,
        })?;
        let mut c = Cursor::at(code, start);
        while let Some(op) = c.u8() {
            let at = c.pos() - 1;
            match self.step(op, &mut c, stack, sink) {
                Ok(Flow::Go) => {}
                Ok(Flow::Stop) => return Ok(Ran::Stopped),
                Ok(Flow::NeedsStack) => return Ok(Ran::NeedsStack(at)),
                Err(e) => return Err(e.at(at)),
            }
        }
        Ok(Ran::Ended)
    }

    /// Runs the instruction `op`; `c` is past its opcode.
    #[inline(always)]
    fn step<S: Sink>(
        &mut self,
        op: u8,
        c: &mut Cursor<'_>,
        stack: &mut [State],
        sink: &mut S,
    ) -> Result<Flow, Fault> {
        use Fault::Truncated;
        let flow = |stop: bool| if stop { Flow::Stop } else { Flow::Go };
        // One match over every opcode: a single dispatch, the primary
        // opcodes (operand in the low six bits) as ranges.
        match op {
            0x40..=0x7f => {
                let delta = u64::from(op & 0x3f).wrapping_mul(self.k.code_align);
                let to = self.loc.wrapping_add(delta);
                return self.checked_advance::<S>(to, sink).map(flow);
            }
            0x80..=0xbf => {
                let off = self.factored(c.uleb128().ok_or(Truncated)?);
                self.set(u64::from(op & 0x3f), Rule::Offset(off));
            }
            0xc0..=0xff => self.restore(u64::from(op & 0x3f)),
            0x00 => {}
            0x01 => {
                let p = pointer::read(c, self.fde_encoding, self.bases, "set_loc")
                    .map_err(Fault::Error)?;
                if p.indirect {
                    return Err(Fault::BadInstruction);
                }
                return self.checked_advance::<S>(p.value, sink).map(flow);
            }
            0x02..=0x04 => {
                let delta = match op {
                    0x02 => c.u8().map(u64::from),
                    0x03 => c.u16().map(u64::from),
                    _ => c.u32().map(u64::from),
                }
                .ok_or(Truncated)?;
                let to = self.loc.wrapping_add(delta.wrapping_mul(self.k.code_align));
                return self.checked_advance::<S>(to, sink).map(flow);
            }
            0x05 => {
                let r = c.uleb128().ok_or(Truncated)?;
                let off = self.factored(c.uleb128().ok_or(Truncated)?);
                self.set(r, Rule::Offset(off));
            }
            0x06 => {
                let r = c.uleb128().ok_or(Truncated)?;
                self.restore(r);
            }
            0x07 => {
                let r = c.uleb128().ok_or(Truncated)?;
                self.set(r, Rule::Undefined);
            }
            0x08 => {
                let r = c.uleb128().ok_or(Truncated)?;
                self.set(r, Rule::SameValue);
            }
            0x09 => {
                let r = c.uleb128().ok_or(Truncated)?;
                let from = reg16(c.uleb128().ok_or(Truncated)?)?;
                self.set(r, Rule::Register(from));
            }
            0x0a => {
                if stack.is_empty() {
                    return Ok(Flow::NeedsStack);
                }
                let slot = stack.get_mut(self.depth).ok_or(Fault::Overflow)?;
                *slot = self.state;
                self.depth += 1;
            }
            0x0b => {
                // An empty stack has had nothing pushed.
                self.depth = self.depth.checked_sub(1).ok_or(Fault::Underflow)?;
                self.state = *stack.get(self.depth).ok_or(Fault::Underflow)?;
            }
            0x0c => {
                let reg = reg16(c.uleb128().ok_or(Truncated)?)?;
                let offset = c.uleb128().ok_or(Truncated)? as i64;
                self.state.cfa = Cfa::RegOffset { reg, offset };
            }
            0x0d => {
                let new = reg16(c.uleb128().ok_or(Truncated)?)?;
                match &mut self.state.cfa {
                    Cfa::RegOffset { reg, .. } => *reg = new,
                    Cfa::Expression => return Err(Fault::BadInstruction),
                }
            }
            0x0e | 0x13 => {
                let new = if op == 0x0e {
                    c.uleb128().ok_or(Truncated)? as i64
                } else {
                    self.sfactored(c.sleb128().ok_or(Truncated)?)
                };
                match &mut self.state.cfa {
                    Cfa::RegOffset { offset, .. } => *offset = new,
                    Cfa::Expression => return Err(Fault::BadInstruction),
                }
            }
            0x0f => {
                block(c)?;
                self.state.cfa = Cfa::Expression;
            }
            0x10 | 0x16 => {
                let r = c.uleb128().ok_or(Truncated)?;
                block(c)?;
                let rule = if op == 0x10 {
                    Rule::Expression
                } else {
                    Rule::ValExpression
                };
                self.set(r, rule);
            }
            0x11 => {
                let r = c.uleb128().ok_or(Truncated)?;
                let off = self.sfactored(c.sleb128().ok_or(Truncated)?);
                self.set(r, Rule::Offset(off));
            }
            0x12 => {
                let reg = reg16(c.uleb128().ok_or(Truncated)?)?;
                let offset = self.sfactored(c.sleb128().ok_or(Truncated)?);
                self.state.cfa = Cfa::RegOffset { reg, offset };
            }
            0x14 => {
                let r = c.uleb128().ok_or(Truncated)?;
                let off = self.factored(c.uleb128().ok_or(Truncated)?);
                self.set(r, Rule::ValOffset(off));
            }
            0x15 => {
                let r = c.uleb128().ok_or(Truncated)?;
                let off = self.sfactored(c.sleb128().ok_or(Truncated)?);
                self.set(r, Rule::ValOffset(off));
            }
            // DW_CFA_AARCH64_negate_ra_state (SPARC's window_save shares
            // the number; no SPARC here).
            0x2d => self.state.ra_signed = !self.state.ra_signed,
            // DW_CFA_GNU_args_size: what a landing pad pops; a walk takes
            // the CFA as it is.
            0x2e => {
                c.uleb128().ok_or(Truncated)?;
            }
            // DW_CFA_GNU_negative_offset_extended.
            0x2f => {
                let r = c.uleb128().ok_or(Truncated)?;
                let off = self.factored(c.uleb128().ok_or(Truncated)?).wrapping_neg();
                self.set(r, Rule::Offset(off));
            }
            _ => return Err(Fault::UnknownOpcode(op)),
        }
        Ok(Flow::Go)
    }

    /// [`Machine::advance`] where advances are allowed: not in a CIE's
    /// initial instructions, and never backwards.
    #[inline]
    fn checked_advance<S: Sink>(&mut self, to: u64, sink: &mut S) -> Result<bool, Fault> {
        if !S::ADVANCES || to < self.loc {
            return Err(Fault::BadInstruction);
        }
        Ok(self.advance(to, sink))
    }
}

/// Whether to go on after an instruction.
enum Flow {
    Go,
    Stop,
    NeedsStack,
}

/// What went wrong in one instruction; [`Fault::at`] makes it an
/// [`Error`] once its offset is known, so the common path builds none.
enum Fault {
    Truncated,
    BadInstruction,
    BadRegister,
    Overflow,
    Underflow,
    UnknownOpcode(u8),
    Error(Error),
}

impl Fault {
    #[cold]
    fn at(self, offset: usize) -> Error {
        match self {
            Fault::Truncated => Error::Truncated {
                what: "instruction",
                offset,
            },
            Fault::BadInstruction => Error::BadInstruction { offset },
            Fault::BadRegister => Error::BadRegister { offset },
            Fault::Overflow => Error::StateStackOverflow { offset },
            Fault::Underflow => Error::StateStackUnderflow { offset },
            Fault::UnknownOpcode(opcode) => Error::UnknownOpcode { opcode, offset },
            Fault::Error(e) => e,
        }
    }
}

fn reg16(r: u64) -> Result<u16, Fault> {
    u16::try_from(r).map_err(|_| Fault::BadRegister)
}

/// Steps over a DWARF expression: its length, then its bytes.
fn block(c: &mut Cursor<'_>) -> Result<(), Fault> {
    let n = c.uleb128().ok_or(Fault::Truncated)?;
    c.skip(usize::try_from(n).map_err(|_| Fault::Truncated)?)
        .ok_or(Fault::Truncated)
}
