//! DWARF call frame information as shipped for unwinding: `.eh_frame` and
//! its index `.eh_frame_hdr` (LSB's "Exception Frames"; DWARF 5, 6.4).
//!
//! [`Cfi::new`] checks the index's header; everything else is read when a
//! pc is looked up: [`Cfi::find_fde`] searches the index's sorted table
//! (or, without one, every record in turn), and [`Cfi::find_row`] runs the
//! FDE's CFA program up to the pc. Every read is bounds-checked and every
//! malformed input gives a typed [`Error`], never a panic, so the same
//! code reads a section in place, a copy, or hostile bytes.
//!
//! A row keeps the rules a walk needs: the CFA, the return address and the
//! frame pointer. [`Cfi::unwind_row`] turns it into the walker's [`Row`],
//! or says why it cannot ([`Inexpressible`]): DWARF expressions, signal
//! frames and rules the walker has no form for.
//!
//! ```
//! use stackmark::formats::cfi::{Cfi, Registers};
//! use stackmark::formats::sframe::{CfaRule, RegRule};
//! // A CIE (CFA = rsp + 8, RA at CFA - 8) and an FDE for 0x1000..0x1010:
//! // push rbp at +1 (CFA = rsp + 16, rbp at CFA - 16).
//! let eh_frame = [
//!     0x14, 0, 0, 0, 0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8,
//!     0x90, 1, 0, 0, // CIE
//!     0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0xe0, 0xef, 0xff, 0xff, 0x10, 0, 0, 0, 0, 0x41, 0x0e, 0x10,
//!     0x86, 2, 0, 0, // FDE
//!     0, 0, 0, 0,
//! ];
//! // Laid at 0x2000, without an index.
//! let cfi = Cfi::without_index(&eh_frame, 0x2000, Registers::X86_64);
//! let row = cfi.unwind_row(0x1008).unwrap().unwrap();
//! assert_eq!((row.func_start, row.func_size, row.row_start), (0x1000, 0x10, 0x1001));
//! assert_eq!(row.cfa, CfaRule::SpPlus(16));
//! assert_eq!((row.ra, row.fp), (RegRule::AtCfa(-8), RegRule::AtCfa(-16)));
//! let row = cfi.unwind_row(0x1000).unwrap().unwrap();
//! assert_eq!((row.cfa, row.fp), (CfaRule::SpPlus(8), RegRule::SameValue));
//! assert_eq!(cfi.unwind_row(0x1010).unwrap(), None);
//! ```

mod entry;
mod error;
mod hdr;
pub mod pointer;
mod program;
mod row;

pub use entry::{Cie, Fde};
pub use error::Error;
pub use hdr::EhFrameHdr;
pub use program::{for_each_row, row_at, Cfa, CfiRow, Rule, MAX_STATE_DEPTH};
pub use row::{Inexpressible, Registers};

use crate::formats::sframe::{QuickRow, Row};
use entry::Head;
use pointer::Bases;

/// A module's call frame information: `.eh_frame`, and its index where
/// there is one.
#[derive(Clone, Copy, Debug)]
pub struct Cfi<'a> {
    eh_frame: &'a [u8],
    eh_frame_addr: u64,
    index: Option<EhFrameHdr<'a>>,
    regs: Registers,
}

impl<'a> Cfi<'a> {
    /// `.eh_frame_hdr` (`hdr`, at runtime address `hdr_addr`) and the
    /// `.eh_frame` it names, whose bytes from its start on are `eh_frame`
    /// (they may run on past its end: records are read only as their
    /// lengths say). Checks the index's header and that it points at
    /// `eh_frame`'s address.
    pub fn new(
        hdr: &'a [u8],
        hdr_addr: u64,
        eh_frame: &'a [u8],
        regs: Registers,
    ) -> Result<Cfi<'a>, Error> {
        let index = EhFrameHdr::parse(hdr, hdr_addr)?;
        Ok(Cfi {
            eh_frame,
            eh_frame_addr: index.eh_frame_ptr(),
            index: Some(index).filter(|i| i.has_table()),
            regs,
        })
    }

    /// `.eh_frame` alone (at runtime address `addr`), searched record by
    /// record.
    pub fn without_index(eh_frame: &'a [u8], addr: u64, regs: Registers) -> Cfi<'a> {
        Cfi {
            eh_frame,
            eh_frame_addr: addr,
            index: None,
            regs,
        }
    }

    /// Runtime address of `.eh_frame`.
    pub fn eh_frame_addr(&self) -> u64 {
        self.eh_frame_addr
    }

    /// The `.eh_frame` bytes given.
    pub fn eh_frame(&self) -> &'a [u8] {
        self.eh_frame
    }

    /// The index, if it has a search table.
    pub fn index(&self) -> Option<&EhFrameHdr<'a>> {
        self.index.as_ref()
    }

    /// The register numbers rows are read for.
    pub fn registers(&self) -> Registers {
        self.regs
    }

    /// The bases pointers in `.eh_frame` count from.
    pub fn bases(&self) -> Bases {
        Bases {
            section: self.eh_frame_addr,
            data: self.index.map(|i| i.addr()),
            func: None,
        }
    }

    /// The FDE covering `pc` and its CIE.
    pub fn find_fde(&self, pc: u64) -> Result<Option<(Fde, Cie)>, Error> {
        self.find(pc)
    }

    // Inlined into the walker's lookup, whose (FDE, CIE) pair then is
    // never copied out of a returned `Result`.
    #[inline(always)]
    fn find(&self, pc: u64) -> Result<Option<(Fde, Cie)>, Error> {
        let bases = self.bases();
        match &self.index {
            Some(index) => {
                let found = match self.indexed(index, pc) {
                    Indexed::Outside => return Ok(None),
                    Indexed::OutOfBounds(entry) => return Err(Error::IndexOutOfBounds { entry }),
                    Indexed::Usual(r) => Fde::parse_record(self.eh_frame, &r, &bases)?,
                    Indexed::Other(offset) => Fde::parse(self.eh_frame, offset, &bases)?,
                };
                Ok(found.0.contains(pc).then_some(found))
            }
            None => self.scan(pc, &bases),
        }
    }

    /// The record of the FDE the index gives for `pc`, read as far as
    /// both [`Cfi::find`] and [`Cfi::quick_row`] need it.
    #[inline(always)]
    fn indexed(&self, index: &EhFrameHdr<'_>, pc: u64) -> Indexed {
        let Some((entry, start, fde_addr)) = index.search(pc) else {
            return Indexed::Outside;
        };
        let Some(offset) = usize::try_from(fde_addr.wrapping_sub(self.eh_frame_addr))
            .ok()
            .filter(|&o| o < self.eh_frame.len())
        else {
            return Indexed::OutOfBounds(entry);
        };
        // Most pcs an index finds no FDE for lie in code without CFI after
        // some function with it: tell those without parsing the CIE.
        let head = Head::read(self.eh_frame, offset);
        if head.is_some_and(|h| self.surely_outside(&h, offset, start, pc)) {
            return Indexed::Outside;
        }
        match head.and_then(|h| h.record(self.eh_frame, offset)) {
            Some(r) if r.id != 0 => Indexed::Usual(r),
            _ => Indexed::Other(offset),
        }
    }

    /// Whether the FDE at `offset` (whose first bytes are `h`), which the
    /// index says starts at `start`, certainly does not cover `pc`: read
    /// as the usual `pcrel | sdata4` FDE (a 32-bit record, its start
    /// relative to its own field, a 32-bit range after it), it starts at
    /// `start` and ends at or below `pc`. A record of another shape seldom
    /// reads so; if one did, this could hide its row (the walk then falls
    /// back), never give a wrong one.
    fn surely_outside(&self, h: &Head, offset: usize, start: u64, pc: u64) -> bool {
        let field = self.eh_frame_addr.wrapping_add(offset as u64 + 8);
        h.len != 0xffff_ffff
            && h.id != 0
            && field.wrapping_add(h.begin as i64 as u64) == start
            && pc.wrapping_sub(start) >= u64::from(h.range)
    }

    /// Every record in turn, for data without an index.
    fn scan(&self, pc: u64, bases: &Bases) -> Result<Option<(Fde, Cie)>, Error> {
        let mut offset = 0;
        let mut last_cie: Option<Cie> = None;
        while offset < self.eh_frame.len() {
            let Some(r) = entry::record(self.eh_frame, offset)? else {
                break;
            };
            if r.id != 0 {
                let cie_offset = (r.id_at as u64).wrapping_sub(r.id) as usize;
                let cie = match last_cie {
                    Some(c) if c.offset == cie_offset => c,
                    _ => Fde::parse_record(self.eh_frame, &r, bases)?.1,
                };
                last_cie = Some(cie);
                let fde = entry::Fde::parse_with(self.eh_frame, &r, &cie, bases)?;
                if fde.contains(pc) {
                    return Ok(Some((fde, cie)));
                }
            }
            offset = r.end;
        }
        Ok(None)
    }

    /// The FDE covering `pc`, its CIE, and the row at `pc`.
    pub fn find_row(&self, pc: u64) -> Result<Option<(Fde, Cie, CfiRow)>, Error> {
        let Some((fde, cie)) = self.find_fde(pc)? else {
            return Ok(None);
        };
        let row = row_at(self.eh_frame, &cie, &fde, self.regs.fp, &self.bases(), pc)?;
        Ok(row.map(|r| (fde, cie, r)))
    }

    /// The walker's row at `pc`: `Ok(None)` where no FDE covers it,
    /// `Err` where one does but its rule is one the walker cannot take
    /// (or the data is malformed).
    pub fn unwind_row(&self, pc: u64) -> Result<Option<Row>, Inexpressible> {
        self.walker_row(self.find(pc), pc)
    }

    /// As [`Cfi::unwind_row`], with the FDE at `offset` in `.eh_frame`
    /// (an Apple compact-unwind entry in DWARF mode names it): `Ok(None)`
    /// where that FDE does not cover `pc`.
    pub fn unwind_row_in_fde(&self, offset: usize, pc: u64) -> Result<Option<Row>, Inexpressible> {
        let found = Fde::parse(self.eh_frame, offset, &self.bases())
            .map(|(fde, cie)| fde.contains(pc).then_some((fde, cie)));
        self.walker_row(found, pc)
    }

    /// [`Cfi::unwind_row`]'s row at `pc` in brief, where the index finds
    /// the usual FDE (one a 32-bit length frames, not a signal frame's)
    /// and the row has the shape a [`QuickRow`] covers: what
    /// [`QuickRow::of`] makes of `unwind_row`'s row there, in one pass,
    /// without building the walker's [`Row`]. `None` anywhere else,
    /// including where `unwind_row` finds no FDE or an error.
    pub fn quick_row(&self, pc: u64) -> Option<QuickRow> {
        let Indexed::Usual(r) = self.indexed(self.index.as_ref()?, pc) else {
            return None;
        };
        let bases = self.bases();
        let (fde, cie) = Fde::parse_record(self.eh_frame, &r, &bases).ok()?;
        if !fde.contains(pc) || cie.signal_frame || u32::try_from(fde.pc_range).is_err() {
            return None;
        }
        let row = row_at(self.eh_frame, &cie, &fde, self.regs.fp, &bases, pc).ok()??;
        // `QuickRow::of(&to_row(..)?)`, projected here: through `to_row`'s
        // `Result` a cold walk 16 deep took 6% more instructions.
        let off32 = |o: i64| i32::try_from(o).ok();
        let (cfa_fp, cfa_off) = match row.cfa {
            Cfa::RegOffset { reg, offset } if reg == self.regs.sp => (false, off32(offset)?),
            Cfa::RegOffset { reg, offset } if reg == self.regs.fp => (true, off32(offset)?),
            _ => return None,
        };
        let Rule::Offset(ra_off) = row.ra else {
            return None;
        };
        let fp_off = match row.fp {
            Rule::Unspecified | Rule::SameValue | Rule::Undefined => None,
            Rule::Offset(o) => Some(off32(o)?),
            _ => return None,
        };
        Some(QuickRow {
            cfa_fp,
            cfa_off,
            ra_off: off32(ra_off)?,
            fp_off,
            mangled_ra: row.ra_signed,
        })
    }

    // Inlined, as `find` is, so the lookup's pieces share one frame.
    #[inline(always)]
    fn walker_row(
        &self,
        found: Result<Option<(Fde, Cie)>, Error>,
        pc: u64,
    ) -> Result<Option<Row>, Inexpressible> {
        let malformed = Inexpressible::Malformed;
        let Some((fde, cie)) = found.map_err(malformed)? else {
            return Ok(None);
        };
        let row = row_at(self.eh_frame, &cie, &fde, self.regs.fp, &self.bases(), pc);
        match row.map_err(malformed)? {
            Some(row) => row::to_row(&row, &fde, &cie, self.regs).map(Some),
            None => Ok(None),
        }
    }
}

/// What an index lookup found for a pc ([`Cfi::indexed`]).
enum Indexed {
    /// No FDE covers the pc: none is indexed at or below it, or the one
    /// that is surely ends before it.
    Outside,
    /// Entry `.0`'s FDE address lies outside `.eh_frame`.
    OutOfBounds(usize),
    /// The FDE's record, framed by a 32-bit length.
    Usual(entry::Record),
    /// Something else at this offset, for the general parse to judge.
    Other(usize),
}

/// How many bytes of `data` (starting at an `.eh_frame`) its records take,
/// up to and including a zero terminator; a record that runs past `data`
/// ends it there.
///
/// ```
/// use stackmark::formats::cfi::extent;
/// let data = [4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
/// assert_eq!(extent(&data), 12);
/// ```
pub fn extent(data: &[u8]) -> usize {
    let mut offset = 0;
    while offset < data.len() {
        match entry::record(data, offset) {
            Ok(Some(r)) => offset = r.end,
            Ok(None) => return (offset + 4).min(data.len()),
            Err(_) => return offset,
        }
    }
    offset
}

#[cfg(test)]
mod tests;
