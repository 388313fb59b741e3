//! The SFrame preamble and header, common to versions 1 to 3.

use super::{Abi, Error};
use crate::formats::cursor::Cursor;

/// `SFRAME_MAGIC`, the first two bytes of every (little-endian) section.
pub const MAGIC: u16 = 0xdee2;
/// Flag: FDEs are sorted by start address.
pub const F_FDE_SORTED: u8 = 0x1;
/// Flag: every function keeps a frame pointer (versions 1 and 2 only).
pub const F_FRAME_POINTER: u8 = 0x2;
/// Flag (`SFRAME_F_FDE_FUNC_START_PCREL`): FDE start addresses are relative
/// to the start-address field itself, not to the section.
pub const F_FDE_FUNC_START_PCREL: u8 = 0x4;
/// Size of the fixed header, before `sfh_auxhdr_len` auxiliary bytes.
pub const HEADER_SIZE: usize = 28;

/// One parsed and bounds-checked header, with the absolute offsets (in the
/// data given to [`SFrame::parse`](super::SFrame::parse)) of what it describes.
///
/// ```
/// use stackmark::formats::sframe::SFrame;
/// // cfi-sframe-x86_64-3, as GNU as and ld 2.46 wrote it.
/// let data = [
///     0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0,
///     0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
///     0, 0, 2, 8,
/// ];
/// let sframe = SFrame::parse(&data, 0x401000).unwrap();
/// let h = sframe.header();
/// assert_eq!((h.version, h.fixed_ra_offset, h.num_fdes, h.num_fres), (3, -8, 1, 1));
/// assert!(h.sorted() && h.pcrel());
/// assert_eq!((h.fdes, h.fres, h.end), (28, 44, 52));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Offset of the header (the start of its piece) in the section data.
    pub at: usize,
    /// `sfp_version`: 1, 2 or 3.
    pub version: u8,
    /// `sfp_flags`.
    pub flags: u8,
    /// `sfh_abi_arch`.
    pub abi: Abi,
    /// `sfh_cfa_fixed_fp_offset` (0: not fixed).
    pub fixed_fp_offset: i8,
    /// `sfh_cfa_fixed_ra_offset` (0: not fixed; -8 on AMD64).
    pub fixed_ra_offset: i8,
    /// `sfh_num_fdes`.
    pub num_fdes: u32,
    /// `sfh_num_fres`.
    pub num_fres: u32,
    /// Absolute offset of the FDE sub-section.
    pub fdes: usize,
    /// Absolute offset of the FRE sub-section.
    pub fres: usize,
    /// Absolute offset just past the FRE sub-section: the end of the piece.
    pub end: usize,
}

impl Header {
    /// Size in bytes of one FDE (of one index entry in version 3).
    pub fn fde_size(&self) -> usize {
        match self.version {
            1 => 17,
            2 => 20,
            _ => 16,
        }
    }

    /// Whether the header says FDE start addresses are relative to the
    /// field itself (`SFRAME_F_FDE_FUNC_START_PCREL`).
    pub fn pcrel(&self) -> bool {
        self.flags & F_FDE_FUNC_START_PCREL != 0
    }

    /// Whether this piece's FDE start addresses count from each FDE's own
    /// start-address field ([`Self::pcrel`], or a piece as an assembler
    /// wrote it) rather than from the piece's header (a section a linker
    /// merged and sorted).
    ///
    /// Without the PCREL flag the header cannot say, so the producer
    /// decides. GNU as writes each start as `function - .`, relocated like
    /// any PC-relative word, and never sorts its FDEs; GNU ld, the only
    /// linker that merges SFrame, rewrites the starts relative to the merged
    /// section and sets `SFRAME_F_FDE_SORTED`. lld, mold, and GNU ld for an
    /// output section other than `.sframe` copy the assembler's pieces as
    /// they are. So an unflagged piece whose FDEs the header does not call
    /// sorted is taken as field-relative, and a sorted one as relative to
    /// its header.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// // A piece as GNU as 2.40 writes it (version 1, no flags): its one
    /// // FDE's start (0x10) counts from the field, 28 bytes into the piece.
    /// let data = [
    ///     0xe2, 0xde, 1, 0, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 17,
    ///     0, 0, 0, 0x10, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 3, 8,
    /// ];
    /// let sframe = SFrame::parse(&data, 0x1000).unwrap();
    /// assert!(sframe.header().field_relative());
    /// assert_eq!(sframe.pc_range(), Some((0x1000 + 28 + 0x10, 0x1000 + 28 + 0x14)));
    /// // The same piece as GNU ld merges it: sorted, so header-relative.
    /// let mut merged = data;
    /// merged[3] = 1;
    /// let sframe = SFrame::parse(&merged, 0x1000).unwrap();
    /// assert!(!sframe.header().field_relative());
    /// assert_eq!(sframe.pc_range(), Some((0x1010, 0x1014)));
    /// ```
    pub fn field_relative(&self) -> bool {
        self.pcrel() || !self.sorted()
    }

    /// Whether the header says the FDEs are sorted by start address.
    pub fn sorted(&self) -> bool {
        self.flags & F_FDE_SORTED != 0
    }

    /// Parses the header at `at` and checks that its FDE and FRE
    /// sub-sections lie inside `data`, FDEs first.
    pub fn parse(data: &[u8], at: usize) -> Result<Header, Error> {
        let mut c = Cursor::at(data, at);
        let trunc = Error::Truncated {
            what: "header",
            offset: at,
        };
        let magic = c.u16().ok_or(trunc)?;
        if magic != MAGIC {
            return Err(Error::BadMagic { offset: at });
        }
        let version = c.u8().ok_or(trunc)?;
        if !(1..=3).contains(&version) {
            return Err(Error::UnsupportedVersion {
                version,
                offset: at,
            });
        }
        let flags = c.u8().ok_or(trunc)?;
        let known = match version {
            1 => F_FDE_SORTED | F_FRAME_POINTER,
            2 => F_FDE_SORTED | F_FRAME_POINTER | F_FDE_FUNC_START_PCREL,
            _ => F_FDE_SORTED | F_FDE_FUNC_START_PCREL,
        };
        if flags & !known != 0 {
            return Err(Error::UnknownFlags { flags, offset: at });
        }
        let abi = match c.u8().ok_or(trunc)? {
            2 => Abi::Aarch64LittleEndian,
            3 => Abi::Amd64LittleEndian,
            // Big-endian sections (1: AArch64 BE, 4: s390x) are big-endian
            // throughout and would not even show the magic above; anything
            // else is unknown. Only the little-endian ABIs are read.
            abi => return Err(Error::UnsupportedAbi { abi, offset: at }),
        };
        let fixed_fp_offset = c.i8().ok_or(trunc)?;
        let fixed_ra_offset = c.i8().ok_or(trunc)?;
        let aux = usize::from(c.u8().ok_or(trunc)?);
        let num_fdes = c.u32().ok_or(trunc)?;
        let num_fres = c.u32().ok_or(trunc)?;
        let fre_len = c.u32().ok_or(trunc)? as usize;
        let fdeoff = c.u32().ok_or(trunc)? as usize;
        let freoff = c.u32().ok_or(trunc)? as usize;
        let oob = |what| Error::OutOfBounds { what, offset: at };
        let h = at
            .checked_add(HEADER_SIZE + aux)
            .filter(|&h| h <= data.len())
            .ok_or(oob("auxiliary header"))?;
        let fdes = h.checked_add(fdeoff).ok_or(oob("FDE sub-section"))?;
        let fres = h.checked_add(freoff).ok_or(oob("FRE sub-section"))?;
        let end = fres
            .checked_add(fre_len)
            .filter(|&e| e <= data.len())
            .ok_or(oob("FRE sub-section"))?;
        let hdr = Header {
            at,
            version,
            flags,
            abi,
            fixed_fp_offset,
            fixed_ra_offset,
            num_fdes,
            num_fres,
            fdes,
            fres,
            end,
        };
        // The FDE table must end where the FRE sub-section begins, or before.
        (num_fdes as usize)
            .checked_mul(hdr.fde_size())
            .and_then(|n| n.checked_add(fdes))
            .filter(|&e| e <= fres)
            .ok_or(oob("FDE sub-section"))?;
        Ok(hdr)
    }
}
