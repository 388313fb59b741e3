//! SFrame (`.sframe`) reader, versions 1 to 3.
//!
//! [`SFrame::parse`] validates a section once: every header, FDE and FRE of
//! every piece. [`SFrame::find_row`] then looks a pc up with a binary search
//! over the FDEs and a scan of one function's FREs, without allocating and
//! without reading outside the section; no input makes either panic.
//!
//! A section may be several complete sections laid end to end: rust-lld and
//! mold concatenate the per-object `.sframe` sections without merging them.
//! Each piece is read on its own, with its start addresses counted from the
//! base its producer used ([`Header::field_relative`]). A lookup searches
//! the pieces in turn, or, through an index of them sorted by address built
//! in memory the caller gives ([`SFrame::with_piece_index`]), only the
//! pieces whose functions span the pc. An ordinary section's binary search
//! can likewise start from an index of its FDEs by address
//! ([`SFrame::with_fde_index`]), a probe or two instead of a dozen.
//!
//! ```
//! use stackmark::formats::sframe::{Abi, CfaRule, RegRule, SFrame};
//! // cfi-sframe-aarch64-pac-ab-key-1: GNU as/ld 2.46, two functions whose
//! // return addresses are signed, the second one with key B.
//! let data = [
//!     0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0,
//!     0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff,
//!     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4,
//!     0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16,
//!     0xf8, 0xf0,
//! ];
//! let sframe = SFrame::parse(&data, 0x400138).unwrap();
//! assert_eq!((sframe.abi(), sframe.version()), (Abi::Aarch64LittleEndian, 3));
//! assert_eq!(sframe.pc_range(), Some((0x4000b0, 0x4000d0)));
//!
//! // After `paciasp; stp x29, x30, [sp, #-16]!`: CFA = SP + 16, RA and FP saved.
//! let row = sframe.find_row(0x4000c8).unwrap();
//! assert_eq!((row.func_start, row.func_size, row.row_start), (0x4000bc, 20, 0x4000c4));
//! assert_eq!(row.cfa, CfaRule::SpPlus(16));
//! assert_eq!((row.ra, row.fp), (RegRule::AtCfa(-8), RegRule::AtCfa(-16)));
//! assert!(row.mangled_ra);
//!
//! // First instruction: nothing saved yet, the RA is still in x30.
//! let row = sframe.find_row(0x4000b0).unwrap();
//! assert_eq!((row.cfa, row.ra, row.fp), (CfaRule::SpPlus(0), RegRule::SameValue, RegRule::SameValue));
//!
//! // No function covers these.
//! assert_eq!(sframe.find_row(0x4000d0), None);
//! assert_eq!(sframe.find_row(0x400000), None);
//! ```

mod buckets;
mod coverage;
mod fde;
mod fre;
mod header;
mod index;
mod row;

pub use fde::{Fde, FDE_TYPE_DEFAULT, FDE_TYPE_FLEX};
pub use fre::{Fre, MAX_WORDS};
pub use header::{Header, F_FDE_FUNC_START_PCREL, F_FDE_SORTED, F_FRAME_POINTER, MAGIC};
pub use index::PieceEntry;
pub use row::{Abi, CfaRule, RegRule, Row};

use buckets::Buckets;
use fde::Head12;
use coverage::Coverage;

/// A row as [`SFrame::quick_row`] gives it: `cfa = (fp | sp) + cfa_off`,
/// the return address at `cfa + ra_off`, the frame pointer at
/// `cfa + fp_off` (`None`: not saved, the caller's is the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuickRow {
    /// The CFA is based on the frame pointer (else the stack pointer).
    pub cfa_fp: bool,
    /// Added to the base register to give the CFA.
    pub cfa_off: i32,
    /// Where the return address is saved, from the CFA.
    pub ra_off: i32,
    /// Where the frame pointer is saved, from the CFA, if it is.
    pub fp_off: Option<i32>,
    /// The saved return address carries pointer-authentication bits.
    pub mangled_ra: bool,
}

impl QuickRow {
    /// `row` in brief where it has the shape a quick row covers (and is
    /// not a signal frame's): what [`SFrame::quick_row`] gives wherever it
    /// applies. `None` for any other row.
    pub fn of(row: &Row) -> Option<QuickRow> {
        let (cfa_fp, cfa_off) = match row.cfa {
            CfaRule::SpPlus(o) => (false, o),
            CfaRule::FpPlus(o) => (true, o),
            _ => return None,
        };
        let RegRule::AtCfa(ra_off) = row.ra else {
            return None;
        };
        let fp_off = match row.fp {
            RegRule::Undefined | RegRule::SameValue => None,
            RegRule::AtCfa(o) => Some(o),
            _ => return None,
        };
        (!row.signal_frame).then_some(QuickRow {
            cfa_fp,
            cfa_off,
            ra_off,
            fp_off,
            mangled_ra: row.mangled_ra,
        })
    }
}

/// What is wrong with a section. Offsets count from the start of the data
/// given to [`SFrame::parse`].
///
/// ```
/// use stackmark::formats::sframe::{Error, SFrame};
/// assert_eq!(
///     SFrame::parse(&[0xe2, 0xde, 9], 0).unwrap_err(),
///     Error::UnsupportedVersion { version: 9, offset: 0 }
/// );
/// let e = SFrame::parse(&[0xe2, 0xde, 2, 0], 0).unwrap_err();
/// assert_eq!(e, Error::Truncated { what: "header", offset: 0 });
/// assert_eq!(e.to_string(), "SFrame header at 0x0 is truncated");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The data ends inside a structure.
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// No SFrame magic (`0xdee2`, little-endian) where a header should start.
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
    /// An ABI this reader does not handle: big-endian or unknown.
    UnsupportedAbi {
        /// The `sfh_abi_arch` value.
        abi: u8,
        /// Where the header is.
        offset: usize,
    },
    /// Flag bits the section's version does not define.
    UnknownFlags {
        /// The flags byte.
        flags: u8,
        /// Where the header is.
        offset: usize,
    },
    /// A sub-section, or an FDE's rows, lie outside the section or piece.
    OutOfBounds {
        /// What lies outside.
        what: &'static str,
        /// The header or FDE that points there.
        offset: usize,
    },
    /// An FDE's function starts or ends outside the 64-bit address space.
    AddressOverflow {
        /// Where the FDE is.
        offset: usize,
    },
    /// The header says the FDEs are sorted, but FDE `index` starts before
    /// its predecessor.
    FdesNotSorted {
        /// Where the piece's header is.
        piece: usize,
        /// The FDE out of order.
        index: u32,
    },
    /// An FDE names an FRE start-address type other than 1, 2 or 4 bytes.
    BadFreType {
        /// Where the FDE is.
        offset: usize,
        /// The FRE type field.
        fre_type: u8,
    },
    /// A version 3 FDE has a type other than default (0) or FLEX (1).
    BadFdeType {
        /// Where the FDE is.
        offset: usize,
        /// The FDE type field.
        fde_type: u8,
    },
    /// A PCMASK FDE with a repetition size of 0.
    ZeroRepSize {
        /// Where the FDE is.
        offset: usize,
    },
    /// An FRE's data-word size field is 3, which is undefined.
    BadWordSize {
        /// Where the FRE is.
        offset: usize,
    },
    /// An FRE starts before the previous one, or past its function (past
    /// the repeating block of a PCMASK FDE).
    FreOutOfOrder {
        /// Where the FRE is.
        offset: usize,
    },
    /// An FRE's data words make no rule: too many for the ABI, a broken
    /// FLEX pair, or a FLEX rule relative to the CFA that is not a load.
    BadFreData {
        /// Where the FRE is.
        offset: usize,
    },
    /// The header's FRE count differs from the sum over its FDEs.
    FreCountMismatch {
        /// Where the piece's header is.
        piece: usize,
        /// `sfh_num_fres`.
        header: u32,
        /// The sum of the FDEs' FRE counts.
        fdes: u64,
    },
    /// The FDEs' FREs take more bytes than the FRE sub-section holds: FDEs
    /// share or overlap FREs, which no producer writes, and which would let
    /// a small section cost a validation read per FDE and FRE pair.
    FresShared {
        /// Where the piece's header is.
        piece: usize,
        /// The FRE that went past the budget.
        offset: usize,
    },
    /// Pieces of a concatenation describe different ABIs.
    MixedAbi {
        /// Where the odd piece's header is.
        piece: usize,
    },
    /// Bytes after a piece that are neither zero padding nor another header.
    TrailingGarbage {
        /// Where they start.
        offset: usize,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::Truncated { what, offset } => {
                write!(f, "SFrame {what} at {offset:#x} is truncated")
            }
            Error::BadMagic { offset } => write!(f, "no SFrame magic at {offset:#x}"),
            Error::UnsupportedVersion { version, offset } => {
                write!(f, "unsupported SFrame version {version} at {offset:#x}")
            }
            Error::UnsupportedAbi { abi, offset } => {
                write!(f, "unsupported SFrame ABI {abi} in the header at {offset:#x}")
            }
            Error::UnknownFlags { flags, offset } => {
                write!(f, "unknown flags {flags:#x} in the SFrame header at {offset:#x}")
            }
            Error::OutOfBounds { what, offset } => write!(
                f,
                "{what} named by the SFrame structure at {offset:#x} lie outside the section"
            ),
            Error::AddressOverflow { offset } => write!(
                f,
                "the function of the FDE at {offset:#x} lies outside the address space"
            ),
            Error::FdesNotSorted { piece, index } => write!(
                f,
                "FDE {index} of the piece at {piece:#x} is out of order, but the header says sorted"
            ),
            Error::BadFreType { offset, fre_type } => {
                write!(f, "the FDE at {offset:#x} has FRE type {fre_type}")
            }
            Error::BadFdeType { offset, fde_type } => {
                write!(f, "the FDE at {offset:#x} has FDE type {fde_type}")
            }
            Error::ZeroRepSize { offset } => {
                write!(f, "the PCMASK FDE at {offset:#x} has a repetition size of 0")
            }
            Error::BadWordSize { offset } => {
                write!(f, "the FRE at {offset:#x} has an undefined data-word size")
            }
            Error::FreOutOfOrder { offset } => write!(
                f,
                "the FRE at {offset:#x} starts before its predecessor or past its function"
            ),
            Error::BadFreData { offset } => {
                write!(f, "the FRE at {offset:#x} has data words that make no rule")
            }
            Error::FreCountMismatch {
                piece,
                header,
                fdes,
            } => write!(
                f,
                "the header at {piece:#x} counts {header} FREs, its FDEs {fdes}"
            ),
            Error::FresShared { piece, offset } => write!(
                f,
                "the FDEs of the piece at {piece:#x} share FREs (the FRE at {offset:#x} is read twice)"
            ),
            Error::MixedAbi { piece } => {
                write!(f, "the SFrame piece at {piece:#x} has a different ABI")
            }
            Error::TrailingGarbage { offset } => {
                write!(f, "unexpected bytes at {offset:#x} after an SFrame piece")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A validated SFrame section (one or more pieces), ready for lookups.
///
/// It is `Copy` and holds no allocation: the section data, its runtime
/// address and what validation learnt. See the [module](self) example.
#[derive(Clone, Copy, Debug)]
pub struct SFrame<'a> {
    data: &'a [u8],
    base: u64,
    first: Header,
    pieces: u32,
    /// Bit `k` (`k < 63`): piece `k`'s FDEs are not in address order, so its
    /// lookups scan; bit 63 stands for every piece from 63 on.
    unsorted: u64,
    range: Option<(u64, u64)>,
    /// The pieces of a concatenation sorted by span, when the caller gave
    /// memory for them ([`SFrame::with_piece_index`]).
    index: Option<&'a [PieceEntry]>,
    /// An ordinary section's FDEs by address, when the caller gave memory
    /// for them ([`SFrame::with_fde_index`]).
    buckets: Option<Buckets<'a>>,
    /// Which parts of `range` any function covers.
    coverage: Coverage,
}

/// Where the piece after one ending at `end` starts (after zero padding), or
/// `None` when only zero bytes remain.
fn next_piece(data: &[u8], end: usize) -> Option<usize> {
    let rest = data.get(end..)?;
    let pad = rest.iter().position(|&b| b != 0)?;
    Some(end + pad)
}

/// Which parts of `range` the functions of the pieces `headers` cover.
fn coverage_of(
    data: &[u8],
    headers: impl Iterator<Item = Header>,
    base: u64,
    range: Option<(u64, u64)>,
) -> Coverage {
    let Some((lo, hi)) = range else {
        return Coverage::default();
    };
    let mut coverage = Coverage::new(hi - lo);
    // Validated: every function lies inside `range`.
    for (start, end) in headers.flat_map(|h| extents(data, h, base)) {
        coverage.mark(start - lo, end - lo);
    }
    coverage
}

/// `[start, end)` of each function of the piece `h`, in table order.
fn extents(data: &[u8], h: Header, base: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    (0..h.num_fdes).filter_map(move |i| {
        let (start, size) = Fde::start_of(data, &h, i, base)?;
        Some((start, start.checked_add(u64::from(size))?))
    })
}

fn unsorted_bit(k: u32) -> u64 {
    1 << k.min(63)
}

/// What validating one piece found out.
struct Summary {
    /// Functions in address order, those with a size not overlapping: a
    /// binary search finds the one covering a pc.
    in_order: bool,
    range: Option<(u64, u64)>,
}

fn merge(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some((l1, h1)), Some((l2, h2))) => Some((l1.min(l2), h1.max(h2))),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Checks every FDE and FRE of the piece `h`.
fn validate_piece(data: &[u8], h: &Header, base: u64) -> Result<Summary, Error> {
    let mut prev_start = None;
    let mut in_order = true;
    // The end of the functions so far that have a size: one that starts
    // before it overlaps them, and a binary search could miss it.
    let mut reach = 0u64;
    let mut range = None;
    let mut total_fres = 0u64;
    // Bytes of FREs read so far: at most the FRE sub-section, once each.
    let mut fre_bytes = 0usize;
    for i in 0..h.num_fdes {
        let fde = Fde::read(data, h, i, base)?;
        if prev_start.is_some_and(|p| fde.start < p) {
            if h.sorted() {
                return Err(Error::FdesNotSorted {
                    piece: h.at,
                    index: i,
                });
            }
            in_order = false;
        }
        prev_start = Some(fde.start);
        // `Fde::read` checked that the end does not overflow.
        let end = fde.start + u64::from(fde.size);
        if fde.size > 0 {
            in_order &= fde.start >= reach;
            reach = reach.max(end);
        }
        range = merge(range, Some((fde.start, end)));
        total_fres += u64::from(fde.num_fres);
        let limit = if fde.pc_mask {
            u32::from(fde.rep_size)
        } else {
            fde.size
        };
        let mut at = fde.fres;
        let mut last = 0;
        for _ in 0..fde.num_fres {
            let (fre, next) = Fre::read(data, at, fde.addr_size)?;
            if next > h.end {
                return Err(Error::OutOfBounds {
                    what: "FRE",
                    offset: at,
                });
            }
            if fre.start < last || fre.start > limit {
                return Err(Error::FreOutOfOrder { offset: at });
            }
            last = fre.start;
            fre.rules(h, &fde)
                .map_err(|_| Error::BadFreData { offset: at })?;
            fre_bytes += next - at;
            if fre_bytes > h.end - h.fres {
                return Err(Error::FresShared {
                    piece: h.at,
                    offset: at,
                });
            }
            at = next;
        }
    }
    if total_fres != u64::from(h.num_fres) {
        return Err(Error::FreCountMismatch {
            piece: h.at,
            header: h.num_fres,
            fdes: total_fres,
        });
    }
    Ok(Summary { in_order, range })
}

impl<'a> SFrame<'a> {
    /// Validates the whole section: every piece of a concatenation, every
    /// FDE and every FRE. `section_addr` is the runtime address of
    /// `data[0]`. Does not allocate.
    ///
    /// ```
    /// use stackmark::formats::sframe::{Error, SFrame};
    /// // cfi-sframe-x86_64-3 (GNU as/ld 2.46).
    /// let mut data = [
    ///     0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16,
    ///     0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
    ///     0, 0, 0, 0, 2, 8,
    /// ];
    /// assert!(SFrame::parse(&data, 0x401000).is_ok());
    /// // Cut off inside the last FRE.
    /// assert_eq!(
    ///     SFrame::parse(&data[..51], 0x401000).unwrap_err(),
    ///     Error::OutOfBounds { what: "FRE sub-section", offset: 0 }
    /// );
    /// // The FRE's data-word size field set to the undefined value 3.
    /// data[50] |= 0x60;
    /// assert_eq!(SFrame::parse(&data, 0x401000).unwrap_err(), Error::BadWordSize { offset: 49 });
    /// ```
    pub fn parse(data: &'a [u8], section_addr: u64) -> Result<SFrame<'a>, Error> {
        let first = Header::parse(data, 0)?;
        let mut h = first;
        let mut pieces = 0u32;
        let mut unsorted = 0u64;
        let mut range = None;
        loop {
            if h.abi != first.abi {
                return Err(Error::MixedAbi { piece: h.at });
            }
            let summary = validate_piece(data, &h, section_addr)?;
            if !summary.in_order {
                unsorted |= unsorted_bit(pieces);
            }
            range = merge(range, summary.range);
            pieces += 1;
            match next_piece(data, h.end) {
                None => break,
                Some(at) => {
                    h = Header::parse(data, at).map_err(|e| match e {
                        Error::BadMagic { offset } | Error::Truncated { offset, .. } => {
                            Error::TrailingGarbage { offset }
                        }
                        e => e,
                    })?
                }
            }
        }
        let mut sframe = SFrame {
            data,
            base: section_addr,
            first,
            pieces,
            unsorted,
            range,
            index: None,
            buckets: None,
            coverage: Coverage::default(),
        };
        sframe.coverage = coverage_of(data, sframe.headers(), section_addr, range);
        Ok(sframe)
    }

    /// The ABI the section describes.
    ///
    /// ```
    /// use stackmark::formats::sframe::{Abi, SFrame};
    /// # let data = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `data`: cfi-sframe-x86_64-3 (GNU as/ld 2.46).
    /// assert_eq!(SFrame::parse(&data, 0x401000).unwrap().abi(), Abi::Amd64LittleEndian);
    /// ```
    pub fn abi(&self) -> Abi {
        self.first.abi
    }

    /// The version of the first piece: 1, 2 or 3.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let data = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `data`: cfi-sframe-x86_64-3 (GNU as/ld 2.46).
    /// assert_eq!(SFrame::parse(&data, 0x401000).unwrap().version(), 3);
    /// ```
    pub fn version(&self) -> u8 {
        self.first.version
    }

    /// The header of the first piece.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let data = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `data`: cfi-sframe-x86_64-3 (GNU as/ld 2.46).
    /// assert_eq!(SFrame::parse(&data, 0x401000).unwrap().header().fixed_ra_offset, -8);
    /// ```
    pub fn header(&self) -> &Header {
        &self.first
    }

    /// How many concatenated pieces the section holds (1 for an ordinary
    /// section).
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let piece = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `piece`: cfi-sframe-x86_64-3 (52 bytes); twice, as a linker
    /// // concatenates them, with zero padding to an 8-byte boundary.
    /// let mut data = piece.to_vec();
    /// data.extend([0; 4]);
    /// data.extend(piece);
    /// let sframe = SFrame::parse(&data, 0x401000).unwrap();
    /// assert_eq!(sframe.piece_count(), 2);
    /// ```
    pub fn piece_count(&self) -> u32 {
        self.pieces
    }

    /// Headers of the pieces, in order.
    fn headers(&self) -> impl Iterator<Item = Header> + 'a {
        let (data, first, count) = (self.data, self.first, self.pieces);
        let mut next = Some(first);
        (0..count).map_while(move |k| {
            let h = next?;
            next = if k + 1 < count {
                next_piece(data, h.end).and_then(|at| Header::parse(data, at).ok())
            } else {
                None
            };
            Some(h)
        })
    }

    /// Each piece of a concatenation as its own `SFrame` (one item for an
    /// ordinary section). Start addresses stay those of the whole section.
    /// Each item rescans its piece's FDEs for its range: call it at setup,
    /// not per lookup.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let piece = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `piece`: cfi-sframe-x86_64-3, a 0-byte function at 0x401000 with
    /// // PCREL start addresses; a copy 56 bytes on describes one 56 bytes on.
    /// let mut data = piece.to_vec();
    /// data.extend([0; 4]);
    /// data.extend(piece);
    /// let sframe = SFrame::parse(&data, 0x401000).unwrap();
    /// let starts: Vec<_> = sframe.pieces().map(|p| p.pc_range()).collect();
    /// assert_eq!(starts, [Some((0x401000, 0x401000)), Some((0x401038, 0x401038))]);
    /// ```
    pub fn pieces(&self) -> impl Iterator<Item = SFrame<'a>> + 'a {
        let (data, base) = (self.data, self.base);
        self.headers().filter_map(move |h| {
            let summary = validate_piece(data, &h, base).ok()?;
            Some(SFrame {
                data,
                base,
                first: h,
                pieces: 1,
                unsorted: if summary.in_order { 0 } else { 1 },
                range: summary.range,
                index: None,
                buckets: None,
                coverage: coverage_of(data, core::iter::once(h), base, summary.range),
            })
        })
    }

    /// The runtime address of the section's first byte, as given to
    /// [`SFrame::parse`].
    pub fn section_addr(&self) -> u64 {
        self.base
    }

    /// `[lowest function start, highest function end)` over the section (or
    /// piece); `None` without FDEs. Computed at parse time.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let data = [0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0];
    /// // `data`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.46): functions
    /// // at 0x4000b0 (12 bytes) and 0x4000bc (20 bytes).
    /// let sframe = SFrame::parse(&data, 0x400138).unwrap();
    /// assert_eq!(sframe.pc_range(), Some((0x4000b0, 0x4000d0)));
    /// ```
    pub fn pc_range(&self) -> Option<(u64, u64)> {
        self.range
    }

    /// The function whose FDE covers `pc`, if any: the first in table order
    /// whose `[start, start + size)` holds `pc`. A binary search per piece
    /// (a scan for a piece whose FDEs are out of order or overlap; empty
    /// functions, which cover nothing, may sit anywhere), in every piece of
    /// a concatenation until one answers, or only in those whose span holds
    /// `pc` through a [piece index](Self::with_piece_index).
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let data = [0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0];
    /// // `data`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.46).
    /// let sframe = SFrame::parse(&data, 0x400138).unwrap();
    /// let f = sframe.find_function(0x4000c0).unwrap();
    /// assert_eq!((f.fde.index, f.fde.start, f.fde.pauth_key_b), (1, 0x4000bc, true));
    /// ```
    pub fn find_function(&self, pc: u64) -> Option<Function<'a>> {
        if self.pieces == 1 {
            return Some(Function::new(self.data, self.first, self.find_fde_of_one(pc)?));
        }
        self.covers(pc)?;
        if let Some(index) = self.index {
            return self.find_indexed(index, pc);
        }
        self.headers().enumerate().find_map(|(k, h)| {
            let in_order = self.unsorted & unsorted_bit(k as u32) == 0;
            let fde = self.find_in_piece(&h, in_order, (0, h.num_fdes), pc)?;
            Some(Function::new(self.data, h, fde))
        })
    }

    /// The start of `range` where it holds `pc` and some function may
    /// cover it.
    #[inline(always)]
    fn covers(&self, pc: u64) -> Option<u64> {
        let (lo, hi) = self.range?;
        (pc >= lo && pc < hi && self.coverage.may_cover(pc - lo)).then_some(lo)
    }

    /// In an ordinary section (one piece), the FDE covering `pc`: a row
    /// lookup takes it without copying the header.
    #[inline(always)]
    fn find_fde_of_one(&self, pc: u64) -> Option<Fde> {
        let lo = self.covers(pc)?;
        let bounds = match self.buckets {
            Some(b) => b.bounds(lo, pc)?,
            None => (0, self.first.num_fdes),
        };
        self.find_in_piece(&self.first, self.unsorted & 1 == 0, bounds, pc)
    }

    /// The row that applies at `pc` (the exact address to look up: subtract
    /// 1 from a return address first), or `None` when no function covers it
    /// or its first row starts after `pc`. Does not allocate.
    ///
    /// ```
    /// use stackmark::formats::sframe::{CfaRule, RegRule, SFrame};
    /// # let data = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// # let amd64 = SFrame::parse(&data, 0x401000).unwrap();
    /// # let data = [0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0];
    /// # let aarch64 = SFrame::parse(&data, 0x400138).unwrap();
    /// // `aarch64`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.46).
    /// let row = aarch64.find_row(0x4000b4).unwrap();
    /// assert_eq!(row.cfa, CfaRule::SpPlus(0));
    /// assert_eq!(row.ra, RegRule::SameValue); // signed, still in x30
    /// assert!(row.mangled_ra);
    /// // `amd64`: cfi-sframe-x86_64-3, whose only function has size 0.
    /// assert_eq!(amd64.find_row(0x401000), None);
    /// ```
    pub fn find_row(&self, pc: u64) -> Option<Row> {
        if self.pieces == 1 {
            return row_in(self.data, &self.first, &self.find_fde_of_one(pc)?, pc);
        }
        self.find_function(pc)?.row_at(pc)
    }

    /// [`SFrame::find_row`] for the rows that make up nearly every frame,
    /// in fewer steps: `None` wherever it does not apply, and then the
    /// caller asks `find_row`; where it answers, it gives exactly what
    /// `find_row`'s row says. It applies to an ordinary section of version
    /// 1 or 2 (one piece, FDEs in address order), a function that does not
    /// repeat (no `PCMASK`), and a row with a CFA of sp or fp plus an
    /// offset, the return address saved at an offset from it (fixed, or in
    /// the row), and the frame pointer saved so or not tracked. It does
    /// not build the FDE and FRE `find_row` builds, nor the row's function
    /// bounds, which a walk that only steps does not need.
    ///
    /// ```
    /// use stackmark::formats::sframe::{QuickRow, SFrame};
    /// # let data = [0xe2, 0xde, 2, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 0x16, 0, 0, 0, 0, 0, 0, 0, 0x28, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xc, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0x54, 0xff, 0xff, 0xff, 0x14, 0, 0, 0, 0xb, 0, 0, 0, 3, 0, 0, 0, 0x20, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 0x10, 0xf8, 0xf0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 0x10, 0xf8, 0xf0];
    /// // `data`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.45), version 2.
    /// let sframe = SFrame::parse(&data, 0x400138).unwrap();
    /// // After `paciasp; stp x29, x30, [sp, #-16]!`.
    /// let q = sframe.quick_row(0x4000c8).unwrap();
    /// let want = QuickRow { cfa_fp: false, cfa_off: 16, ra_off: -8, fp_off: Some(-16), mangled_ra: true };
    /// assert_eq!(q, want);
    /// // The function's first instruction: the return address is still in
    /// // x30, which only `find_row`'s row says.
    /// assert_eq!(sframe.quick_row(0x4000bc), None);
    /// assert!(sframe.find_row(0x4000bc).is_some());
    /// ```
    #[inline]
    pub fn quick_row(&self, pc: u64) -> Option<QuickRow> {
        let h = &self.first;
        if self.pieces != 1 || h.version > 2 || self.unsorted & 1 != 0 {
            return None;
        }
        // `find_fde_of_one`, with the FDE's layout known: the last FDE
        // starting at or below pc, then back over empty functions.
        let lo = self.covers(pc)?;
        let (mut a, b) = match self.buckets {
            Some(b) => b.bounds(lo, pc)?,
            None => (0, h.num_fdes),
        };
        let mut b = b.min(h.num_fdes);
        let (data, base, size) = (self.data, self.base, h.fde_size());
        let entry = |i: u32| Head12::read_sized(data, h, size, i);
        let start_of = |i: u32| Some(entry(i)?.start(h, base));
        while a < b {
            let mid = a + (b - a) / 2;
            if start_of(mid)? <= pc {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        let mut i = a.checked_sub(1)?;
        let e = loop {
            let e = entry(i)?;
            if e.size() != 0 {
                break e;
            }
            i = i.checked_sub(1)?;
        };
        let off = pc.wrapping_sub(e.start(h, base));
        // Not covered, or repeating (`PCMASK`).
        if off >= u64::from(e.size()) || e.info() & 0x10 != 0 {
            return None;
        }
        let at = Fre::last_at_or_below(data, e.fres(h), e.num_fres(), e.addr_size(), off)?;
        let head = at.checked_add(usize::from(e.addr_size()))?;
        let info = *data.get(head)?;
        let count = usize::from((info >> 1) & 0xf);
        let words = head + 1;
        match (info >> 5) & 3 {
            0 => quick_rules::<1>(h, data.get(words..words + count)?, info),
            1 => quick_rules::<2>(h, data.get(words..words + 2 * count)?, info),
            2 => quick_rules::<4>(h, data.get(words..words + 4 * count)?, info),
            _ => None,
        }
    }

    /// The FDE of the function covering `pc` in the piece of `h`. `bounds`: where the
    /// number of FDEs starting at or below `pc` lies, for one in order.
    #[inline(always)]
    fn find_in_piece(
        &self,
        h: &Header,
        in_order: bool,
        bounds: (u32, u32),
        pc: u64,
    ) -> Option<Fde> {
        let (data, base) = (self.data, self.base);
        let start_of = |i: u32| Fde::start_of(data, h, i, base);
        let covers = |(s, n): (u64, u32)| pc >= s && pc - s < u64::from(n);
        if in_order {
            // The last FDE starting at or below pc.
            let (mut lo, mut hi) = (bounds.0, bounds.1.min(h.num_fdes));
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if start_of(mid)?.0 <= pc {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            // Empty functions (GNU as gives a function with no
            // instructions a zero-size FDE) cover nothing, but may start
            // inside or at the start of the one that covers pc: step back
            // over them. Validation saw that the others do not overlap.
            // Each candidate is decoded once, in full.
            let mut i = lo.checked_sub(1)?;
            loop {
                let fde = Fde::read_validated(data, h, i, base)?;
                if fde.size != 0 {
                    break covers((fde.start, fde.size)).then_some(fde);
                }
                i = i.checked_sub(1)?;
            }
        } else {
            let i = (0..h.num_fdes).find(|&i| start_of(i).is_some_and(covers))?;
            Fde::read_validated(data, h, i, base)
        }
    }

    /// Every function with its rows, piece after piece, in table order: for
    /// dumps and tests.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let data = [0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0];
    /// // `data`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.46).
    /// let sframe = SFrame::parse(&data, 0x400138).unwrap();
    /// for f in sframe.functions() {
    ///     let starts: Vec<u64> = f.rows().map(|r| r.row_start).collect();
    ///     let s = f.fde.start;
    ///     assert_eq!(starts, [s, s + 4, s + 8]);
    /// }
    /// ```
    pub fn functions(&self) -> impl Iterator<Item = Function<'a>> + 'a {
        let (data, base) = (self.data, self.base);
        self.headers().flat_map(move |h| {
            (0..h.num_fdes).filter_map(move |i| {
                Some(Function::new(data, h, Fde::read(data, &h, i, base).ok()?))
            })
        })
    }
}

/// [`SFrame::quick_row`]'s rules from an FRE's info byte and its data
/// words of `S` bytes each, as [`Fre::rules`] reads them for a row of the
/// shape it covers.
#[inline(always)]
fn quick_rules<const S: usize>(h: &Header, words: &[u8], info: u8) -> Option<QuickRow> {
    let word = |i: usize| -> Option<i32> {
        let b = words.get(i * S..i * S + S)?;
        Some(match S {
            1 => i32::from(b[0] as i8),
            2 => i32::from(i16::from_le_bytes([b[0], b[1]])),
            _ => i32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        })
    };
    let cfa_off = word(0)?;
    let (ra_off, fp_index) = match h.fixed_ra_offset {
        0 => match word(1)? {
            0 => return None,
            o => (o, 2),
        },
        o => (i32::from(o), 1),
    };
    if words.len() > (fp_index + 1) * S {
        return None;
    }
    let fp_off = match (h.fixed_fp_offset, word(fp_index)) {
        (0, o) => o,
        (o, _) => Some(i32::from(o)),
    };
    Some(QuickRow {
        cfa_fp: info & 1 == 0,
        cfa_off,
        ra_off,
        fp_off,
        mangled_ra: info & 0x80 != 0,
    })
}

/// One function of a validated section: its descriptor and its rows.
///
/// ```
/// use stackmark::formats::sframe::{RegRule, SFrame};
/// # let data = [0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0];
/// // `data`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.46).
/// let sframe = SFrame::parse(&data, 0x400138).unwrap();
/// let f = sframe.functions().nth(1).unwrap();
/// let fre = f.fres().last().unwrap();
/// assert_eq!((fre.start, fre.mangled_ra), (8, true));
/// assert_eq!(f.row(&fre).unwrap().ra, RegRule::AtCfa(-8));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Function<'a> {
    data: &'a [u8],
    /// The header of the piece that holds the function.
    pub header: Header,
    /// The function's descriptor.
    pub fde: Fde,
}

impl<'a> Function<'a> {
    /// The function `fde` of the piece `header` of the section `data`.
    #[inline(always)]
    pub(super) fn new(data: &'a [u8], header: Header, fde: Fde) -> Self {
        Function { data, header, fde }
    }

    /// The function's FREs, in order.
    pub fn fres(&self) -> impl Iterator<Item = Fre<'a>> + 'a {
        let (data, fde) = (self.data, self.fde);
        let mut at = fde.fres;
        (0..fde.num_fres).map_while(move |_| {
            let (fre, next) = Fre::read(data, at, fde.addr_size).ok()?;
            at = next;
            Some(fre)
        })
    }

    /// The row an FRE describes. It starts at `func_start + fre.start` (in
    /// the first repetition, for a PCMASK FDE).
    pub fn row(&self, fre: &Fre) -> Option<Row> {
        let start = self.fde.start.wrapping_add(u64::from(fre.start));
        fre.row(&self.header, &self.fde, start).ok()
    }

    /// The function's rows in order, as [`row`](Self::row) gives them.
    pub fn rows(&self) -> impl Iterator<Item = Row> + 'a {
        let f = *self;
        self.fres().filter_map(move |fre| f.row(&fre))
    }

    /// The row that applies at `pc`: the last FRE starting at or below the
    /// pc's offset in the function (in its repetition, for a PCMASK FDE).
    pub fn row_at(&self, pc: u64) -> Option<Row> {
        row_in(self.data, &self.header, &self.fde, pc)
    }
}

/// [`Function::row_at`] of the function `fde` of the piece `h`.
fn row_in(data: &[u8], h: &Header, fde: &Fde, pc: u64) -> Option<Row> {
    let mut off = pc.checked_sub(fde.start)?;
    if off >= u64::from(fde.size) {
        return None;
    }
    let mut block = fde.start;
    if fde.pc_mask {
        // Validation rejected a zero rep_size.
        let rep = u64::from(fde.rep_size.max(1));
        block += off - off % rep;
        off %= rep;
    }
    // Skim the start addresses; decode only the row that applies.
    let found = Fre::last_at_or_below(data, fde.fres, fde.num_fres, fde.addr_size, off)?;
    let (fre, _) = Fre::read(data, found, fde.addr_size).ok()?;
    fre.row(h, fde, block + u64::from(fre.start)).ok()
}
