//! Frame row entries and how their data words become rules.

use super::fde::Fde;
use super::header::Header;
use super::{Abi, CfaRule, Error, RegRule, Row};
use crate::formats::cursor::Cursor;

/// Most data words an FRE can carry (4 bits of count).
pub const MAX_WORDS: usize = 15;

/// One frame row entry, decoded but not yet interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fre {
    /// Offset of the row's first pc from the function start (or from the
    /// start of the repeating block for PCMASK FDEs).
    pub start: u32,
    /// The CFA base is the stack pointer (else the frame pointer).
    pub sp_base: bool,
    /// The return address is signed (pointer authentication).
    pub mangled_ra: bool,
    /// Size of each data word in bytes: 1, 2 or 4.
    pub word_size: u8,
    count: u8,
    words: [i32; MAX_WORDS],
}

impl Fre {
    /// The data words (stack offsets, or FLEX control/offset pairs).
    pub fn words(&self) -> &[i32] {
        &self.words[..self.count as usize]
    }

    /// Reads the FRE at `at`; returns it and the offset just past it.
    pub fn read(data: &[u8], at: usize, addr_size: u8) -> Result<(Fre, usize), Error> {
        let trunc = Error::Truncated {
            what: "FRE",
            offset: at,
        };
        let mut c = Cursor::at(data, at);
        let start = match addr_size {
            1 => u32::from(c.u8().ok_or(trunc)?),
            2 => u32::from(c.u16().ok_or(trunc)?),
            _ => c.u32().ok_or(trunc)?,
        };
        let info = c.u8().ok_or(trunc)?;
        let count = (info >> 1) & 0xf;
        let word_size = match (info >> 5) & 3 {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => return Err(Error::BadWordSize { offset: at }),
        };
        let mut words = [0i32; MAX_WORDS];
        for w in words.iter_mut().take(count as usize) {
            *w = match word_size {
                1 => i32::from(c.i8().ok_or(trunc)?),
                2 => i32::from(c.i16().ok_or(trunc)?),
                _ => c.i32().ok_or(trunc)?,
            };
        }
        let fre = Fre {
            start,
            sp_base: info & 1 != 0,
            mangled_ra: info & 0x80 != 0,
            word_size,
            count,
            words,
        };
        Ok((fre, c.pos()))
    }

    /// Interprets the data words as rules: the header's ABI and fixed
    /// offsets, and the FDE's type, say how.
    pub fn rules(&self, h: &Header, fde: &Fde) -> Result<(CfaRule, RegRule, RegRule), RuleError> {
        let w = self.words();
        let amd64 = h.abi == Abi::Amd64LittleEndian;
        // What applies when an entity is not tracked.
        let default_ra = if amd64 {
            RegRule::AtCfa(i32::from(h.fixed_ra_offset))
        } else {
            RegRule::SameValue
        };
        if w.is_empty() {
            // Version 3: no data words marks the outermost frame.
            return if h.version == 3 {
                Ok((CfaRule::SpPlus(0), RegRule::Undefined, RegRule::Undefined))
            } else {
                Err(RuleError::NoWords)
            };
        }
        if fde.is_flex() {
            return flex_rules(w, amd64, default_ra);
        }
        let cfa = if self.sp_base {
            CfaRule::SpPlus(w[0])
        } else {
            CfaRule::FpPlus(w[0])
        };
        let at = |i: usize| w.get(i).map_or(RegRule::SameValue, |&o| RegRule::AtCfa(o));
        Ok(if amd64 {
            (cfa, default_ra, at(1))
        } else {
            (cfa, at(1), at(2))
        })
    }

    /// The row for this FRE.
    pub fn row(&self, h: &Header, fde: &Fde, row_start: u64) -> Result<Row, RuleError> {
        let (cfa, ra, fp) = self.rules(h, fde)?;
        Ok(Row {
            func_start: fde.start,
            func_size: fde.size,
            row_start,
            cfa,
            ra,
            fp,
            mangled_ra: self.mangled_ra,
            signal_frame: fde.signal,
        })
    }
}

/// Why an FRE's data words do not make rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleError {
    /// A version 1 or 2 FRE without data words.
    NoWords,
    /// A FLEX CFA rule that is not register-based, or a truncated pair.
    BadFlex,
}

/// FLEX control word bits: register-based, dereference, DWARF register.
fn control(ctrl: i32) -> (bool, bool, u16) {
    let c = ctrl as u32;
    (c & 1 != 0, c & 2 != 0, (c >> 3) as u16)
}

fn flex_rules(
    w: &[i32],
    amd64: bool,
    default_ra: RegRule,
) -> Result<(CfaRule, RegRule, RegRule), RuleError> {
    let (sp, fp) = if amd64 { (7, 6) } else { (31, 29) };
    let (&ctrl, &off) = (
        w.first().ok_or(RuleError::BadFlex)?,
        w.get(1).ok_or(RuleError::BadFlex)?,
    );
    let (reg_p, deref, reg) = control(ctrl);
    let cfa = match (reg_p, deref) {
        (false, _) => return Err(RuleError::BadFlex),
        (true, false) if reg == sp => CfaRule::SpPlus(off),
        (true, false) if reg == fp => CfaRule::FpPlus(off),
        (true, false) => CfaRule::RegPlus { reg, offset: off },
        (true, true) => CfaRule::AtRegPlus { reg, offset: off },
    };
    // Each of RA and FP: a control/offset pair, a single zero padding word
    // (the default applies), or nothing at all (likewise).
    let mut i = 2;
    let mut next = |default: RegRule| -> Result<RegRule, RuleError> {
        match w.get(i) {
            None => Ok(default),
            Some(0) => {
                i += 1;
                Ok(default)
            }
            Some(&ctrl) => {
                let off = *w.get(i + 1).ok_or(RuleError::BadFlex)?;
                i += 2;
                let (reg_p, deref, reg) = control(ctrl);
                Ok(match (reg_p, deref) {
                    (false, _) => RegRule::AtCfa(off),
                    (true, false) => RegRule::RegPlus { reg, offset: off },
                    (true, true) => RegRule::AtRegPlus { reg, offset: off },
                })
            }
        }
    };
    let ra = next(default_ra)?;
    let fp = next(RegRule::SameValue)?;
    Ok((cfa, ra, fp))
}
