//! Frame row entries, and how their data words become rules.

use super::fde::Fde;
use super::header::Header;
use super::{Abi, CfaRule, Error, RegRule, Row};
use crate::formats::cursor::Cursor;

/// Most data words an FRE can carry (a 4-bit count).
pub const MAX_WORDS: usize = 15;

/// One frame row entry, decoded but not yet interpreted.
///
/// ```
/// use stackmark::formats::sframe::SFrame;
/// // cfi-sframe-x86_64-3 (GNU as/ld 2.46): one FRE, "CFA = FP + 8".
/// let data = [
///     0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0,
///     0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
///     0, 0, 2, 8,
/// ];
/// let sframe = SFrame::parse(&data, 0x401000).unwrap();
/// let fre = sframe.functions().next().unwrap().fres().next().unwrap();
/// assert_eq!((fre.start, fre.sp_base, fre.word_size), (0, false, 1));
/// assert_eq!((fre.count(), fre.word(0), fre.word(1)), (1, Some(8), None));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fre<'a> {
    /// Offset of the FRE in the section data.
    pub at: usize,
    /// Offset of the row's first pc from the function start (from the start
    /// of the repeating block for PCMASK FDEs).
    pub start: u32,
    /// Base-register bit: the CFA is SP-based (else FP-based). Unused by
    /// FLEX FDEs, whose control words name the register.
    pub sp_base: bool,
    /// Mangled-RA bit: the return address is signed (AArch64 PAC).
    pub mangled_ra: bool,
    /// Size of each data word in bytes: 1, 2 or 4.
    pub word_size: u8,
    count: u8,
    /// The data words' bytes, read in place: a lookup decodes only the
    /// words its row uses.
    words: &'a [u8],
}

/// Why an FRE's data words do not make rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RuleError;

impl<'a> Fre<'a> {
    /// Number of data words (0 marks an "RA undefined" outermost row).
    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Data word `i` as a signed offset.
    pub fn word(&self, i: usize) -> Option<i32> {
        let u = self.uword(i)?;
        Some(match self.word_size {
            1 => i32::from(u as u8 as i8),
            2 => i32::from(u as u16 as i16),
            _ => u as i32,
        })
    }

    /// Data word `i` as an unsigned value (a FLEX control word).
    pub fn uword(&self, i: usize) -> Option<u32> {
        let size = usize::from(self.word_size);
        let b = self.words.get(i.checked_mul(size)?..)?;
        Some(match size {
            1 => u32::from(*b.first()?),
            2 => u32::from(u16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
            _ => u32::from_le_bytes(b.get(..4)?.try_into().ok()?),
        })
    }

    /// Reads the FRE at `at` with `addr_size`-byte start address; returns
    /// it and the offset just past it.
    #[inline]
    pub fn read(data: &'a [u8], at: usize, addr_size: u8) -> Result<(Fre<'a>, usize), Error> {
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
        let from = c.pos();
        let to = from + usize::from(count) * usize::from(word_size);
        let words = data.get(from..to).ok_or(trunc)?;
        let fre = Fre {
            at,
            start,
            sp_base: info & 1 != 0,
            mangled_ra: info & 0x80 != 0,
            word_size,
            count,
            words,
        };
        Ok((fre, to))
    }

    /// Of the `num` FREs from offset `first` (start addresses of
    /// `addr_size` bytes), the offset of the last whose start is at or
    /// below `off`: the one whose row covers it. `None` where the first
    /// starts above `off`, or an FRE's head lies past `data`. Skims the
    /// heads alone, in a loop made for each start-address size.
    pub(crate) fn last_at_or_below(
        data: &[u8],
        first: usize,
        num: u32,
        addr_size: u8,
        off: u64,
    ) -> Option<usize> {
        match addr_size {
            1 => skim::<1>(data, first, num, off),
            2 => skim::<2>(data, first, num, off),
            _ => skim::<4>(data, first, num, off),
        }
    }

    /// Interprets the data words: the header's fixed offsets and the FDE's
    /// type say how.
    pub(crate) fn rules(
        &self,
        h: &Header,
        fde: &Fde,
    ) -> Result<(CfaRule, RegRule, RegRule), RuleError> {
        if self.count == 0 {
            // No data words: the outermost frame, RA undefined. The CFA is
            // meaningless; the walk stops here.
            let cfa = if self.sp_base {
                CfaRule::SpPlus(0)
            } else {
                CfaRule::FpPlus(0)
            };
            return Ok((cfa, RegRule::Undefined, RegRule::Undefined));
        }
        // What applies to an RA or FP the row does not track.
        let fixed = |off: i8| match off {
            0 => RegRule::SameValue,
            o => RegRule::AtCfa(i32::from(o)),
        };
        let (default_ra, default_fp) = (fixed(h.fixed_ra_offset), fixed(h.fixed_fp_offset));
        if fde.is_flex() {
            return self.flex_rules(h.abi, default_ra, default_fp);
        }
        let w = |i| self.word(i);
        let cfa = match (self.sp_base, w(0)) {
            (true, Some(o)) => CfaRule::SpPlus(o),
            (false, Some(o)) => CfaRule::FpPlus(o),
            (_, None) => return Err(RuleError),
        };
        // With a fixed RA offset (AMD64) the FP offset is the second word;
        // else (AArch64) the RA offset is, and the FP offset the third. An RA
        // offset of 0 is padding: the RA was not saved.
        let (ra, fp_index) = if h.fixed_ra_offset != 0 {
            (default_ra, 1)
        } else {
            match w(1) {
                None | Some(0) => (RegRule::SameValue, 2),
                Some(o) => (RegRule::AtCfa(o), 2),
            }
        };
        if self.count() > fp_index + 1 {
            return Err(RuleError);
        }
        // A fixed FP offset in the header is what applies, as in libsframe
        // (`sframe_fre_get_fp_offset`): FREs then need not track it.
        let fp = match w(fp_index) {
            Some(o) if h.fixed_fp_offset == 0 => RegRule::AtCfa(o),
            _ => default_fp,
        };
        Ok((cfa, ra, fp))
    }

    /// FLEX: `[cfa_ctrl, cfa_off, ra_ctrl, ra_off, fp_ctrl, fp_off]`, where
    /// the RA and FP pairs may be absent or a single zero padding word (the
    /// default rule applies), and each control word holds bit 0 "register",
    /// bit 1 "dereference" and the DWARF register number from bit 3.
    fn flex_rules(
        &self,
        abi: Abi,
        default_ra: RegRule,
        default_fp: RegRule,
    ) -> Result<(CfaRule, RegRule, RegRule), RuleError> {
        let (sp, fp) = match abi {
            Abi::Aarch64LittleEndian | Abi::Aarch64BigEndian => (31, 29),
            _ => (7, 6),
        };
        let (ctrl, off) = (
            self.uword(0).ok_or(RuleError)?,
            self.word(1).ok_or(RuleError)?,
        );
        let (reg_p, deref, reg) = control(ctrl)?;
        let cfa = match (reg_p, deref) {
            // A CFA relative to itself means nothing.
            (false, _) => return Err(RuleError),
            (true, false) if reg == sp => CfaRule::SpPlus(off),
            (true, false) if reg == fp => CfaRule::FpPlus(off),
            (true, false) => CfaRule::RegPlus { reg, offset: off },
            (true, true) => CfaRule::AtRegPlus { reg, offset: off },
        };
        let mut i = 2;
        let mut next = |default: RegRule| -> Result<RegRule, RuleError> {
            let ctrl = match self.uword(i) {
                None => return Ok(default),
                Some(0) => {
                    i += 1;
                    return Ok(default);
                }
                Some(c) => c,
            };
            let off = self.word(i + 1).ok_or(RuleError)?;
            i += 2;
            Ok(match control(ctrl)? {
                (true, false, reg) => RegRule::RegPlus { reg, offset: off },
                (true, true, reg) => RegRule::AtRegPlus { reg, offset: off },
                (false, true, _) => RegRule::AtCfa(off),
                // "CFA + offset" as a value: no saved RA or FP is that.
                (false, false, _) => return Err(RuleError),
            })
        };
        let ra = next(default_ra)?;
        let fp_rule = next(default_fp)?;
        if i < self.count() {
            return Err(RuleError);
        }
        Ok((cfa, ra, fp_rule))
    }

    /// The row for this FRE of `fde`, applying from `row_start`.
    #[inline]
    pub(crate) fn row(&self, h: &Header, fde: &Fde, row_start: u64) -> Result<Row, RuleError> {
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

/// Splits a FLEX control word: (register-based, dereference, register).
fn control(ctrl: u32) -> Result<(bool, bool, u16), RuleError> {
    let reg = u16::try_from(ctrl >> 3).map_err(|_| RuleError)?;
    Ok((ctrl & 1 != 0, ctrl & 2 != 0, reg))
}

/// [`Fre::last_at_or_below`] for `A`-byte start addresses.
#[inline(always)]
fn skim<const A: usize>(data: &[u8], mut at: usize, num: u32, off: u64) -> Option<usize> {
    let mut found = None;
    for _ in 0..num {
        let head = data.get(at..at.checked_add(A + 1)?)?;
        let start = head[..A]
            .iter()
            .rev()
            .fold(0u64, |v, &b| v << 8 | u64::from(b));
        if start > off {
            break;
        }
        let info = head[A];
        // Word sizes 1, 2, 4 (and the invalid 3, which `read` rejects, as 4).
        let shift = ((info >> 5) & 3).min(2);
        found = Some(at);
        at += A + 1 + (usize::from((info >> 1) & 0xf) << shift);
    }
    found
}
