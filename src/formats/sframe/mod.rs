//! SFrame (`.sframe`) reader, versions 1 to 3.
//!
//! [`SFrame::parse`] validates a section once — every header, FDE and FRE of
//! every piece — and [`SFrame::find_row`] then looks up a pc with a binary
//! search and no further checks that could fail, reading only inside the
//! section.
//!
//! A section may be several complete sections laid end to end (rust-lld and
//! mold concatenate per-object `.sframe` without merging them). Each piece is
//! read on its own; such a concatenation is only accepted when every piece
//! has `SFRAME_F_FDE_FUNC_START_PCREL`, since otherwise the start addresses
//! are relative to a section start the linker never fixed up.
//!
//! ```
//! use stackmark::formats::sframe::{CfaRule, RegRule, SFrame};
//! // Version 3, AMD64, one function at 0x401000 (25 bytes) with four rows,
//! // as GNU as 2.46 writes it.
//! let data = [
//!     0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 4, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 16, 0,
//!     0, 0, 0xe4, 0xef, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 25, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0,
//!     0, 0, 3, 8, 1, 5, 16, 0xf0, 4, 4, 16, 0xf0, 24, 5, 8, 0xf0,
//! ];
//! let sframe = SFrame::parse(&data, 0x402000).unwrap();
//! let row = sframe.find_row(0x401005).unwrap();
//! assert_eq!(row.func_start, 0x401000);
//! assert_eq!(row.cfa, CfaRule::FpPlus(16));
//! assert_eq!(row.ra, RegRule::AtCfa(-8));
//! assert_eq!(row.fp, RegRule::AtCfa(-16));
//! assert!(sframe.find_row(0x401019).is_none()); // past the function
//! ```

mod fde;
mod fre;
mod header;
mod row;

pub use fde::Fde;
pub use fre::{Fre, RuleError};
pub use header::{Header, F_FDE_FUNC_START_PCREL, F_FDE_SORTED, F_FRAME_POINTER};
pub use row::{Abi, CfaRule, RegRule, Row};

/// What is wrong with a section. Offsets are from the start of the data
/// given to [`SFrame::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The data ends inside a structure.
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// No SFrame magic (`0xdee2`) where a header should start.
    BadMagic {
        /// Where the header should be.
        offset: usize,
    },
    /// A version other than 1, 2 or 3.
    UnsupportedVersion {
        /// The version found.
        version: u8,
        /// Where the header is.
        offset: usize,
    },
    /// An ABI this reader does not handle (big-endian or unknown).
    UnsupportedAbi {
        /// The `sfh_abi_arch` value.
        abi: u8,
        /// Where the header is.
        offset: usize,
    },
    /// Flag bits this version does not define.
    UnknownFlags {
        /// The flags byte.
        flags: u8,
        /// Where the header is.
        offset: usize,
    },
    /// A sub-section or an FDE's rows lie outside the section.
    OutOfBounds {
        /// What lies outside.
        what: &'static str,
        /// The header or FDE that points there.
        offset: usize,
    },
    /// The header says FDEs are sorted, but FDE `index` starts before its
    /// predecessor.
    FdesNotSorted {
        /// The header of the piece.
        piece: usize,
        /// The FDE out of order.
        index: u32,
    },
    /// An FDE names an FRE start-address type other than 1, 2 or 4 bytes.
    BadFreType {
        /// The FDE.
        fde: u32,
        /// The `fretype` value.
        fre_type: u8,
    },
    /// An FRE's data-word size field is 3 (undefined).
    BadWordSize {
        /// Where the FRE is.
        offset: usize,
    },
    /// An FRE starts before the previous one or outside its function.
    FreOutOfOrder {
        /// Where the FRE is.
        offset: usize,
    },
    /// An FRE's data words do not make rules (none in version 1 or 2, or a
    /// malformed FLEX pair).
    BadFreData {
        /// Where the FRE is.
        offset: usize,
    },
    /// A PCMASK FDE with a repetition size of 0.
    ZeroRepSize {
        /// The FDE.
        fde: u32,
    },
    /// Pieces of a concatenation describe different ABIs.
    MixedAbi {
        /// The header of the odd piece.
        piece: usize,
    },
    /// Several pieces, and this one lacks `SFRAME_F_FDE_FUNC_START_PCREL`:
    /// its start addresses cannot be trusted.
    ConcatenatedWithoutPcrel {
        /// The header of the piece.
        piece: usize,
    },
    /// Bytes after the last piece that are neither zero padding nor a header.
    TrailingGarbage {
        /// Where they start.
        offset: usize,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::Truncated { what, offset } => write!(f, "{what} at {offset:#x} is truncated"),
            Error::BadMagic { offset } => write!(f, "no SFrame magic at {offset:#x}"),
            Error::UnsupportedVersion { version, offset } => {
                write!(f, "unsupported SFrame version {version} at {offset:#x}")
            }
            Error::UnsupportedAbi { abi, offset } => {
                write!(f, "unsupported ABI {abi} at {offset:#x}")
            }
            Error::UnknownFlags { flags, offset } => {
                write!(f, "unknown flags {flags:#x} in the header at {offset:#x}")
            }
            Error::OutOfBounds { what, offset } => {
                write!(
                    f,
                    "{what} of the structure at {offset:#x} lies outside the section"
                )
            }
            Error::FdesNotSorted { piece, index } => {
                write!(f, "FDE {index} of the piece at {piece:#x} is out of order but the section says sorted")
            }
            Error::BadFreType { fde, fre_type } => write!(f, "FDE {fde} has FRE type {fre_type}"),
            Error::BadWordSize { offset } => {
                write!(f, "FRE at {offset:#x} has an undefined data-word size")
            }
            Error::FreOutOfOrder { offset } => {
                write!(
                    f,
                    "FRE at {offset:#x} starts before its predecessor or outside its function"
                )
            }
            Error::BadFreData { offset } => {
                write!(f, "FRE at {offset:#x} has data words that make no rule")
            }
            Error::ZeroRepSize { fde } => write!(f, "PCMASK FDE {fde} has a repetition size of 0"),
            Error::MixedAbi { piece } => write!(f, "the piece at {piece:#x} has a different ABI"),
            Error::ConcatenatedWithoutPcrel { piece } => write!(
                f,
                "the piece at {piece:#x} of a concatenation lacks SFRAME_F_FDE_FUNC_START_PCREL"
            ),
            Error::TrailingGarbage { offset } => {
                write!(f, "unexpected bytes at {offset:#x} after the last piece")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A validated SFrame section (one or more pieces), ready for lookups.
#[derive(Clone, Copy, Debug)]
pub struct SFrame<'a> {
    data: &'a [u8],
    base: u64,
    first: Header,
    pieces: u32,
}

/// The offset where the piece after the one ending at `end` starts: the next
/// 8-byte boundary, or `None` when only zero padding remains.
fn next_piece(data: &[u8], end: usize) -> Result<Option<usize>, Error> {
    let next = end.div_ceil(8) * 8;
    let padding = data.get(end..next.min(data.len())).unwrap_or(&[]);
    if padding.iter().any(|&b| b != 0) {
        return Err(Error::TrailingGarbage { offset: end });
    }
    let rest = data.get(next..).unwrap_or(&[]);
    if rest.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    if rest.len() >= 2 && u16::from_le_bytes([rest[0], rest[1]]) == header::MAGIC {
        Ok(Some(next))
    } else {
        Err(Error::TrailingGarbage { offset: next })
    }
}

impl<'a> SFrame<'a> {
    /// Validates the whole section: every piece's header, every FDE and
    /// every FRE. `section_addr` is the runtime address of `data[0]`.
    pub fn parse(data: &'a [u8], section_addr: u64) -> Result<SFrame<'a>, Error> {
        let first = Header::parse(data, 0)?;
        let mut at = Some(0);
        let mut pieces = 0u32;
        while let Some(off) = at {
            let h = if off == 0 {
                first
            } else {
                Header::parse(data, off)?
            };
            if h.abi != first.abi {
                return Err(Error::MixedAbi { piece: off });
            }
            validate_piece(data, &h, section_addr)?;
            pieces += 1;
            at = next_piece(data, h.end)?;
            if pieces > 1 || at.is_some() {
                if !h.pcrel() {
                    return Err(Error::ConcatenatedWithoutPcrel { piece: off });
                }
                if !first.pcrel() {
                    return Err(Error::ConcatenatedWithoutPcrel { piece: 0 });
                }
            }
        }
        Ok(SFrame {
            data,
            base: section_addr,
            first,
            pieces,
        })
    }

    /// The ABI the section describes.
    pub fn abi(&self) -> Abi {
        self.first.abi
    }

    /// The version of the first piece.
    pub fn version(&self) -> u8 {
        self.first.version
    }

    /// The header of the first piece.
    pub fn header(&self) -> &Header {
        &self.first
    }

    /// How many concatenated pieces the section holds.
    pub fn piece_count(&self) -> u32 {
        self.pieces
    }

    /// Each piece as its own section (one item for an ordinary section).
    pub fn pieces(&self) -> impl Iterator<Item = SFrame<'a>> + 'a {
        let (data, base) = (self.data, self.base);
        let mut at = Some(0usize);
        core::iter::from_fn(move || {
            let h = Header::parse(data, at?).ok()?;
            at = next_piece(data, h.end).ok().flatten();
            Some(SFrame {
                data: data.get(..h.end)?,
                base,
                first: h,
                pieces: 1,
            })
        })
    }

    fn headers(&self) -> impl Iterator<Item = Header> + 'a {
        let data = self.data;
        let first = self.first;
        let mut at = Some(0usize);
        core::iter::from_fn(move || {
            let off = at?;
            let h = if off == 0 {
                first
            } else {
                Header::parse(data, off).ok()?
            };
            at = next_piece(data, h.end).ok().flatten();
            Some(h)
        })
    }

    /// `[lowest function start, highest function end)` over all pieces;
    /// `None` without FDEs.
    pub fn pc_range(&self) -> Option<(u64, u64)> {
        let mut range: Option<(u64, u64)> = None;
        for h in self.headers() {
            for i in 0..h.num_fdes {
                let (s, n) = Fde::start_of(self.data, &h, i, self.base)?;
                let e = s.wrapping_add(u64::from(n));
                range = Some(range.map_or((s, e), |(lo, hi)| (lo.min(s), hi.max(e))));
            }
        }
        range
    }

    /// The row that applies at `pc` (the exact pc to look up), or `None` when
    /// no function covers it.
    pub fn find_row(&self, pc: u64) -> Option<Row> {
        if self.pieces == 1 {
            return find_in_piece(self.data, &self.first, self.base, pc);
        }
        self.headers()
            .find_map(|h| find_in_piece(self.data, &h, self.base, pc))
    }

    /// Every function with its rows, piece by piece, for dumps and tests.
    pub fn functions(&self) -> impl Iterator<Item = Function<'a>> + 'a {
        let (data, base) = (self.data, self.base);
        self.headers().flat_map(move |h| {
            (0..h.num_fdes).filter_map(move |i| {
                Some(Function {
                    data,
                    header: h,
                    fde: Fde::read(data, &h, i, base).ok()?,
                })
            })
        })
    }
}

/// One function of a section: its descriptor and its rows.
#[derive(Clone, Copy, Debug)]
pub struct Function<'a> {
    data: &'a [u8],
    /// The header of the piece that holds the function.
    pub header: Header,
    /// The function's descriptor.
    pub fde: Fde,
}

impl<'a> Function<'a> {
    /// The function's FREs in order.
    pub fn fres(&self) -> impl Iterator<Item = Fre> + 'a {
        let (data, fde) = (self.data, self.fde);
        let mut at = fde.fres;
        (0..fde.num_fres).map_while(move |_| {
            let (fre, next) = Fre::read(data, at, fde.addr_size).ok()?;
            at = next;
            Some(fre)
        })
    }

    /// The row an FRE describes, starting at `func_start + fre.start`.
    pub fn row(&self, fre: &Fre) -> Option<Row> {
        let start = self.fde.start.wrapping_add(u64::from(fre.start));
        fre.row(&self.header, &self.fde, start).ok()
    }
}

fn validate_piece(data: &[u8], h: &Header, base: u64) -> Result<(), Error> {
    let mut prev_start = None;
    for i in 0..h.num_fdes {
        let fde = Fde::read(data, h, i, base)?;
        if h.sorted() && prev_start.is_some_and(|p| fde.start < p) {
            return Err(Error::FdesNotSorted {
                piece: h.at,
                index: i,
            });
        }
        prev_start = Some(fde.start);
        if fde.pc_mask && fde.rep_size == 0 {
            return Err(Error::ZeroRepSize { fde: i });
        }
        let mut at = fde.fres;
        let mut last = None;
        for _ in 0..fde.num_fres {
            let (fre, next) = Fre::read(data, at, fde.addr_size)?;
            if next > h.end {
                return Err(Error::OutOfBounds {
                    what: "FRE",
                    offset: at,
                });
            }
            let limit = if fde.pc_mask {
                u32::from(fde.rep_size)
            } else {
                fde.size
            };
            if last.is_some_and(|l| fre.start < l) || (fre.start >= limit && limit != 0) {
                return Err(Error::FreOutOfOrder { offset: at });
            }
            last = Some(fre.start);
            fre.rules(h, &fde)
                .map_err(|_| Error::BadFreData { offset: at })?;
            at = next;
        }
    }
    Ok(())
}

fn find_in_piece(data: &[u8], h: &Header, base: u64, pc: u64) -> Option<Row> {
    let start_of = |i: u32| Fde::start_of(data, h, i, base);
    let index = if h.sorted() {
        // Last FDE starting at or below pc.
        let (mut lo, mut hi) = (0u32, h.num_fdes);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if start_of(mid)?.0 <= pc {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let i = lo.checked_sub(1)?;
        let (s, n) = start_of(i)?;
        (pc.wrapping_sub(s) < u64::from(n)).then_some(i)?
    } else {
        (0..h.num_fdes).find(|&i| {
            start_of(i).is_some_and(|(s, n)| pc >= s && pc.wrapping_sub(s) < u64::from(n))
        })?
    };
    let fde = Fde::read(data, h, index, base).ok()?;
    let mut off = pc.wrapping_sub(fde.start);
    let mut block = fde.start;
    if fde.pc_mask {
        let rep = u64::from(fde.rep_size.max(1));
        block = fde.start.wrapping_add(off - off % rep);
        off %= rep;
    }
    let mut at = fde.fres;
    let mut found = None;
    for _ in 0..fde.num_fres {
        let (fre, next) = Fre::read(data, at, fde.addr_size).ok()?;
        if u64::from(fre.start) > off {
            break;
        }
        found = Some(fre);
        at = next;
    }
    let fre = found?;
    fre.row(h, &fde, block.wrapping_add(u64::from(fre.start)))
        .ok()
}
