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
    mut visit: impl FnMut(&CfiRow) -> bool,
) -> Result<(), Error> {
    let mut out = Out::Visit(&mut visit);
    run_fde(data, cie, fde, fp_register, bases, &mut out)
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
    let mut out = Out::Seek { pc, found: None };
    run_fde(data, cie, fde, fp_register, bases, &mut out)?;
    Ok(match out {
        Out::Seek { found, .. } => found,
        _ => None,
    })
}

/// Runs the CIE's initial instructions, then the FDE's, into `out`.
fn run_fde(
    data: &[u8],
    cie: &Cie,
    fde: &Fde,
    fp_register: u16,
    bases: &Bases,
    out: &mut Out<'_>,
) -> Result<(), Error> {
    let end = fde.pc_begin.wrapping_add(fde.pc_range);
    let mut m = Machine {
        cie,
        fp_register,
        bases,
        state: INITIAL,
        initial: INITIAL,
        stack: [INITIAL; MAX_STATE_DEPTH],
        depth: 0,
        loc: fde.pc_begin,
        end,
    };
    let (s, e) = cie.instructions;
    m.run(data, s, e, &mut Out::Initial)?;
    m.initial = m.state;
    m.loc = fde.pc_begin;
    let (s, e) = fde.instructions;
    let stopped = m.run(data, s, e, out)?;
    if !stopped && m.loc < end {
        // The last row runs to the function's end.
        m.hand_out(end, out);
    }
    Ok(())
}

struct Machine<'a> {
    cie: &'a Cie,
    fp_register: u16,
    bases: &'a Bases,
    state: State,
    /// The rules after the CIE's initial instructions (`DW_CFA_restore`).
    initial: State,
    stack: [State; MAX_STATE_DEPTH],
    depth: usize,
    loc: u64,
    end: u64,
}

/// Where a run's rows go.
enum Out<'v> {
    /// None: a CIE's initial instructions describe the function's start.
    Initial,
    /// Every row, to a visitor that says whether to go on.
    Visit(&'v mut dyn FnMut(&CfiRow) -> bool),
    /// Only the row that holds `pc`, once it is known.
    Seek { pc: u64, found: Option<CfiRow> },
}

/// Whether to go on after an advance.
enum Flow {
    Go,
    Stop,
}

impl Machine<'_> {
    fn row(&self, end: u64) -> CfiRow {
        CfiRow {
            start: self.loc,
            end,
            cfa: self.state.cfa,
            ra: self.state.ra,
            fp: self.state.fp,
            ra_signed: self.state.ra_signed,
        }
    }

    /// Moves to `to`, handing out the row that ends there; stops once the
    /// rows' consumer has what it wants or the function's end is reached.
    fn advance(&mut self, to: u64, at: usize, out: &mut Out<'_>) -> Result<Flow, Error> {
        if matches!(out, Out::Initial) || to < self.loc {
            // An advance in a CIE's initial instructions is meaningless.
            return Err(Error::BadInstruction { offset: at });
        }
        let to = to.min(self.end);
        if to > self.loc {
            let go_on = self.hand_out(to, out);
            self.loc = to;
            if !go_on || to == self.end {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Go)
    }

    /// Hands the row from `loc` to `to` to `out`; whether to go on.
    fn hand_out(&self, to: u64, out: &mut Out<'_>) -> bool {
        match out {
            Out::Initial => false,
            Out::Visit(visit) => visit(&self.row(to)),
            Out::Seek { pc, found } => {
                if *pc < to {
                    *found = (*pc >= self.loc).then(|| self.row(to));
                    false
                } else {
                    true
                }
            }
        }
    }

    // A CIE may make the frame pointer its return address column: then
    // the one rule is both.
    fn set(&mut self, reg: u64, rule: Rule) {
        if reg == u64::from(self.cie.ra_register) {
            self.state.ra = rule;
        }
        if reg == u64::from(self.fp_register) {
            self.state.fp = rule;
        }
    }

    fn restore(&mut self, reg: u64) {
        if reg == u64::from(self.cie.ra_register) {
            self.state.ra = self.initial.ra;
        }
        if reg == u64::from(self.fp_register) {
            self.state.fp = self.initial.fp;
        }
    }

    fn run(
        &mut self,
        data: &[u8],
        start: usize,
        end: usize,
        out: &mut Out<'_>,
    ) -> Result<bool, Error> {
        let code = data.get(..end).ok_or(Error::Truncated {
            what: "instructions",
            offset: start,
        })?;
        let mut c = Cursor::at(code, start);
        let cie = self.cie;
        let factored = |n: u64| n.wrapping_mul(cie.data_align as u64) as i64;
        let sfactored = |n: i64| n.wrapping_mul(cie.data_align);
        while !c.is_empty() {
            let at = c.pos();
            let truncated = Error::Truncated {
                what: "instruction",
                offset: at,
            };
            let op = c.u8().ok_or(truncated)?;
            let uleb = |c: &mut Cursor<'_>| c.uleb128().ok_or(truncated);
            let sleb = |c: &mut Cursor<'_>| c.sleb128().ok_or(truncated);
            let reg16 = |r: u64| u16::try_from(r).map_err(|_| Error::BadRegister { offset: at });
            let block = |c: &mut Cursor<'_>| -> Result<(), Error> {
                let n = c.uleb128().ok_or(truncated)?;
                c.skip(usize::try_from(n).map_err(|_| truncated)?)
                    .ok_or(truncated)
            };
            let flow = match op >> 6 {
                1 => {
                    let to = self
                        .loc
                        .wrapping_add(u64::from(op & 0x3f).wrapping_mul(cie.code_align));
                    self.advance(to, at, out)?
                }
                2 => {
                    let off = factored(uleb(&mut c)?);
                    self.set(u64::from(op & 0x3f), Rule::Offset(off));
                    Flow::Go
                }
                3 => {
                    self.restore(u64::from(op & 0x3f));
                    Flow::Go
                }
                _ => match op {
                    0x00 => Flow::Go,
                    0x01 => {
                        let p = pointer::read(&mut c, cie.fde_encoding, self.bases, "set_loc")?;
                        if p.indirect {
                            return Err(Error::BadInstruction { offset: at });
                        }
                        self.advance(p.value, at, out)?
                    }
                    0x02..=0x04 => {
                        let delta = match op {
                            0x02 => c.u8().map(u64::from),
                            0x03 => c.u16().map(u64::from),
                            _ => c.u32().map(u64::from),
                        }
                        .ok_or(truncated)?;
                        let to = self.loc.wrapping_add(delta.wrapping_mul(cie.code_align));
                        self.advance(to, at, out)?
                    }
                    0x05 => {
                        let r = uleb(&mut c)?;
                        let off = factored(uleb(&mut c)?);
                        self.set(r, Rule::Offset(off));
                        Flow::Go
                    }
                    0x06 => {
                        let r = uleb(&mut c)?;
                        self.restore(r);
                        Flow::Go
                    }
                    0x07 => {
                        let r = uleb(&mut c)?;
                        self.set(r, Rule::Undefined);
                        Flow::Go
                    }
                    0x08 => {
                        let r = uleb(&mut c)?;
                        self.set(r, Rule::SameValue);
                        Flow::Go
                    }
                    0x09 => {
                        let r = uleb(&mut c)?;
                        let from = reg16(uleb(&mut c)?)?;
                        self.set(r, Rule::Register(from));
                        Flow::Go
                    }
                    0x0a => {
                        let slot = self
                            .stack
                            .get_mut(self.depth)
                            .ok_or(Error::StateStackOverflow { offset: at })?;
                        *slot = self.state;
                        self.depth += 1;
                        Flow::Go
                    }
                    0x0b => {
                        if self.depth == 0 {
                            return Err(Error::StateStackUnderflow { offset: at });
                        }
                        self.depth -= 1;
                        self.state = self.stack[self.depth];
                        Flow::Go
                    }
                    0x0c => {
                        let reg = reg16(uleb(&mut c)?)?;
                        let offset = uleb(&mut c)? as i64;
                        self.state.cfa = Cfa::RegOffset { reg, offset };
                        Flow::Go
                    }
                    0x0d => {
                        let new = reg16(uleb(&mut c)?)?;
                        match &mut self.state.cfa {
                            Cfa::RegOffset { reg, .. } => *reg = new,
                            Cfa::Expression => return Err(Error::BadInstruction { offset: at }),
                        }
                        Flow::Go
                    }
                    0x0e | 0x13 => {
                        let new = if op == 0x0e {
                            uleb(&mut c)? as i64
                        } else {
                            sfactored(sleb(&mut c)?)
                        };
                        match &mut self.state.cfa {
                            Cfa::RegOffset { offset, .. } => *offset = new,
                            Cfa::Expression => return Err(Error::BadInstruction { offset: at }),
                        }
                        Flow::Go
                    }
                    0x0f => {
                        block(&mut c)?;
                        self.state.cfa = Cfa::Expression;
                        Flow::Go
                    }
                    0x10 | 0x16 => {
                        let r = uleb(&mut c)?;
                        block(&mut c)?;
                        let rule = if op == 0x10 {
                            Rule::Expression
                        } else {
                            Rule::ValExpression
                        };
                        self.set(r, rule);
                        Flow::Go
                    }
                    0x11 => {
                        let r = uleb(&mut c)?;
                        let off = sfactored(sleb(&mut c)?);
                        self.set(r, Rule::Offset(off));
                        Flow::Go
                    }
                    0x12 => {
                        let reg = reg16(uleb(&mut c)?)?;
                        let offset = sfactored(sleb(&mut c)?);
                        self.state.cfa = Cfa::RegOffset { reg, offset };
                        Flow::Go
                    }
                    0x14 => {
                        let r = uleb(&mut c)?;
                        let off = factored(uleb(&mut c)?);
                        self.set(r, Rule::ValOffset(off));
                        Flow::Go
                    }
                    0x15 => {
                        let r = uleb(&mut c)?;
                        let off = sfactored(sleb(&mut c)?);
                        self.set(r, Rule::ValOffset(off));
                        Flow::Go
                    }
                    // DW_CFA_AARCH64_negate_ra_state (SPARC's window_save
                    // shares the number; no SPARC here).
                    0x2d => {
                        self.state.ra_signed = !self.state.ra_signed;
                        Flow::Go
                    }
                    // DW_CFA_GNU_args_size: what a landing pad pops; a walk
                    // takes the CFA as it is.
                    0x2e => {
                        uleb(&mut c)?;
                        Flow::Go
                    }
                    // DW_CFA_GNU_negative_offset_extended.
                    0x2f => {
                        let r = uleb(&mut c)?;
                        let off = factored(uleb(&mut c)?).wrapping_neg();
                        self.set(r, Rule::Offset(off));
                        Flow::Go
                    }
                    _ => {
                        return Err(Error::UnknownOpcode {
                            opcode: op,
                            offset: at,
                        })
                    }
                },
            };
            if let Flow::Stop = flow {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
