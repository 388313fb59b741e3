//! The SFrame preamble and header, common to versions 1 to 3.

use super::{Abi, Error};
use crate::formats::cursor::Cursor;

/// `SFRAME_MAGIC`.
pub const MAGIC: u16 = 0xdee2;
/// Flag: FDEs are sorted by start address.
pub const F_FDE_SORTED: u8 = 0x1;
/// Flag: every function keeps a frame pointer (versions 1 and 2).
pub const F_FRAME_POINTER: u8 = 0x2;
/// Flag: FDE start addresses are relative to the field itself.
pub const F_FDE_FUNC_START_PCREL: u8 = 0x4;
/// Size of the fixed header.
pub const HEADER_SIZE: usize = 28;

/// One parsed header, with its position in the section data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Offset of the header (the piece) in the section data.
    pub at: usize,
    /// `sfp_version`: 1, 2 or 3.
    pub version: u8,
    /// `sfp_flags`.
    pub flags: u8,
    /// `sfh_abi_arch`.
    pub abi: Abi,
    /// `sfh_cfa_fixed_fp_offset`.
    pub fixed_fp_offset: i8,
    /// `sfh_cfa_fixed_ra_offset`.
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
    /// Size in bytes of one FDE (index entry in version 3).
    pub fn fde_size(&self) -> usize {
        match self.version {
            1 => 17,
            2 => 20,
            _ => 16,
        }
    }

    /// Whether FDE start addresses are relative to the field itself.
    pub fn pcrel(&self) -> bool {
        self.flags & F_FDE_FUNC_START_PCREL != 0
    }

    /// Whether FDEs are sorted by start address.
    pub fn sorted(&self) -> bool {
        self.flags & F_FDE_SORTED != 0
    }

    /// Parses and bounds-checks the header at `at`.
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
            3 => F_FDE_SORTED | F_FDE_FUNC_START_PCREL,
            _ => F_FDE_SORTED | F_FRAME_POINTER | F_FDE_FUNC_START_PCREL,
        };
        if flags & !known != 0 {
            return Err(Error::UnknownFlags { flags, offset: at });
        }
        let abi = match c.u8().ok_or(trunc)? {
            1 => Abi::Aarch64BigEndian,
            2 => Abi::Aarch64LittleEndian,
            3 => Abi::Amd64LittleEndian,
            4 => Abi::S390xBigEndian,
            abi => return Err(Error::UnsupportedAbi { abi, offset: at }),
        };
        if matches!(abi, Abi::Aarch64BigEndian | Abi::S390xBigEndian) {
            // Big-endian sections are laid out big-endian throughout; only
            // the little-endian ABIs this crate walks are read.
            return Err(Error::UnsupportedAbi {
                abi: abi as u8 + 1,
                offset: at,
            });
        }
        let fixed_fp_offset = c.i8().ok_or(trunc)?;
        let fixed_ra_offset = c.i8().ok_or(trunc)?;
        let aux = c.u8().ok_or(trunc)? as usize;
        let num_fdes = c.u32().ok_or(trunc)?;
        let num_fres = c.u32().ok_or(trunc)?;
        let fre_len = c.u32().ok_or(trunc)? as usize;
        let fdeoff = c.u32().ok_or(trunc)? as usize;
        let freoff = c.u32().ok_or(trunc)? as usize;
        let h = at + HEADER_SIZE + aux;
        let oob = |what| Error::OutOfBounds { what, offset: at };
        let fdes = h.checked_add(fdeoff).ok_or(oob("FDE sub-section"))?;
        let fres = h.checked_add(freoff).ok_or(oob("FRE sub-section"))?;
        let end = fres.checked_add(fre_len).ok_or(oob("FRE sub-section"))?;
        if end > data.len() {
            return Err(oob("FRE sub-section"));
        }
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
        let fde_end = (num_fdes as usize)
            .checked_mul(hdr.fde_size())
            .and_then(|n| n.checked_add(fdes))
            .ok_or(oob("FDE sub-section"))?;
        if fde_end > data.len() || fdes < h {
            return Err(oob("FDE sub-section"));
        }
        Ok(hdr)
    }
}
