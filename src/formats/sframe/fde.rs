//! Function descriptor entries: the 17-byte (version 1) and 20-byte
//! (version 2) FDE, and the version 3 index entry with its attribute.

use super::header::Header;
use super::Error;
use crate::formats::cursor::Cursor;

/// FDE type (version 3 `info2` bits 0-4): default, fixed meaning of the
/// data words per ABI.
pub const FDE_TYPE_DEFAULT: u8 = 0;
/// FDE type (version 3 `info2` bits 0-4): FLEX, data words are control word
/// and offset pairs for the CFA, the RA and the FP.
pub const FDE_TYPE_FLEX: u8 = 1;

/// One function's descriptor, decoded and bounds-checked.
///
/// ```
/// use stackmark::formats::sframe::SFrame;
/// // cfi-sframe-x86_64-3 (GNU as/ld 2.46): one function at 0x401000.
/// let data = [
///     0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0,
///     0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
///     0, 0, 2, 8,
/// ];
/// let sframe = SFrame::parse(&data, 0x401000).unwrap();
/// let fde = sframe.functions().next().unwrap().fde;
/// assert_eq!((fde.index, fde.start, fde.size, fde.num_fres), (0, 0x401000, 0, 1));
/// assert!(!fde.pc_mask && !fde.is_flex() && !fde.signal);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fde {
    /// Offset of the FDE (the index entry in version 3) in the section data.
    pub at: usize,
    /// Index of the FDE in its piece.
    pub index: u32,
    /// Runtime address of the function's first instruction.
    pub start: u64,
    /// Size of the function in bytes.
    pub size: u32,
    /// Absolute offset of the first FRE in the section data.
    pub fres: usize,
    /// Number of FREs.
    pub num_fres: u32,
    /// FRE start-address size in bytes: 1, 2 or 4.
    pub addr_size: u8,
    /// PCMASK: the FRE start addresses repeat every `rep_size` bytes (PLT
    /// entries); else PCINC.
    pub pc_mask: bool,
    /// Size of the repeating block of a PCMASK FDE (16 in version 1, which
    /// has no such field).
    pub rep_size: u8,
    /// AArch64: return addresses are signed with key B (else key A).
    pub pauth_key_b: bool,
    /// The function is a signal trampoline (version 3 attribute).
    pub signal: bool,
    /// FDE type: [`FDE_TYPE_DEFAULT`] or [`FDE_TYPE_FLEX`] (always default
    /// before version 3).
    pub fde_type: u8,
}

/// Offset of FDE `i` of the piece `h`, checked.
fn fde_offset(h: &Header, i: u32) -> Option<usize> {
    (i as usize).checked_mul(h.fde_size())?.checked_add(h.fdes)
}

/// The runtime start address encoded by the FDE at `at` with the signed
/// offset `rel`, or `None` outside the 64-bit address space.
fn start_address(h: &Header, at: usize, rel: i64, base: u64) -> Option<u64> {
    base.checked_add(anchor(h, at))?.checked_add_signed(rel)
}

/// The offset the start address of the FDE at `at` is relative to: the
/// start-address field itself, the FDE's first field, or the piece's
/// header (see `Header::field_relative`).
#[inline(always)]
fn anchor(h: &Header, at: usize) -> u64 {
    (if h.field_relative() { at } else { h.at }) as u64
}

/// The fields versions 1 and 2 share at the head of an FDE (start
/// offset, size, FRE offset, FRE count, info: 17 bytes), for lookups in a
/// validated section: read in wrapping arithmetic, without the checks
/// validation made.
#[derive(Clone, Copy)]
pub(super) struct Head12<'a> {
    /// The FDE's offset in the data.
    pub at: usize,
    bytes: &'a [u8; 17],
}

impl<'a> Head12<'a> {
    /// The head of FDE `i` of the piece `h` (version 1 or 2), if it lies
    /// in the data.
    #[inline(always)]
    pub fn read(data: &'a [u8], h: &Header, i: u32) -> Option<Self> {
        Self::read_sized(data, h, h.fde_size(), i)
    }

    /// [`Head12::read`] with the piece's FDE size given (computed once for
    /// a search).
    #[inline(always)]
    pub fn read_sized(data: &'a [u8], h: &Header, size: usize, i: u32) -> Option<Self> {
        let at = (i as usize).wrapping_mul(size).wrapping_add(h.fdes);
        let bytes = data.get(at..at.wrapping_add(17))?.try_into().ok()?;
        Some(Head12 { at, bytes })
    }

    #[inline(always)]
    fn word(&self, k: usize) -> u32 {
        let b = self.bytes;
        u32::from_le_bytes([b[k], b[k + 1], b[k + 2], b[k + 3]])
    }

    /// The function's runtime start address, for a section at `base`.
    #[inline(always)]
    pub fn start(&self, h: &Header, base: u64) -> u64 {
        let rel = i64::from(self.word(0) as i32);
        base.wrapping_add(anchor(h, self.at)).wrapping_add_signed(rel)
    }

    /// The function's size in bytes.
    #[inline(always)]
    pub fn size(&self) -> u32 {
        self.word(4)
    }

    /// The offset of the function's first FRE in the data.
    #[inline(always)]
    pub fn fres(&self, h: &Header) -> usize {
        h.fres.wrapping_add(self.word(8) as usize)
    }

    /// How many FREs the function has.
    #[inline(always)]
    pub fn num_fres(&self) -> u32 {
        self.word(12)
    }

    /// The info byte: FRE type, `PCMASK`, PAC key.
    #[inline(always)]
    pub fn info(&self) -> u8 {
        self.bytes[16]
    }

    /// The size of the FREs' start addresses: 1, 2 or 4 bytes.
    #[inline(always)]
    pub fn addr_size(&self) -> u8 {
        1 << (self.info() & 0xf).min(2)
    }
}

impl Fde {
    /// Whether the FRE data words are FLEX control/offset pairs.
    pub fn is_flex(&self) -> bool {
        self.fde_type == FDE_TYPE_FLEX
    }

    /// Decodes FDE `i` of the piece `h`; `base` is the runtime address of
    /// the section data's first byte. Checks the FDE's own fields and that
    /// its FREs start inside the piece's FRE sub-section.
    #[inline(always)]
    pub fn read(data: &[u8], h: &Header, i: u32, base: u64) -> Result<Fde, Error> {
        let at = fde_offset(h, i).ok_or(Error::OutOfBounds {
            what: "FDE",
            offset: h.at,
        })?;
        let trunc = Error::Truncated {
            what: "FDE",
            offset: at,
        };
        let mut c = Cursor::at(data, at);
        let rel = if h.version == 3 {
            c.i64().ok_or(trunc)?
        } else {
            i64::from(c.i32().ok_or(trunc)?)
        };
        let size = c.u32().ok_or(trunc)?;
        let fre_off = c.u32().ok_or(trunc)? as usize;
        let start = start_address(h, at, rel, base)
            .filter(|s| s.checked_add(u64::from(size)).is_some())
            .ok_or(Error::AddressOverflow { offset: at })?;
        let oob = Error::OutOfBounds {
            what: "FREs of the FDE",
            offset: at,
        };
        let fre_at = h.fres.checked_add(fre_off).ok_or(oob)?;
        let (num_fres, info, info2, rep_size, fres) = if h.version == 3 {
            // The attribute opens the function's FREs.
            let mut a = Cursor::at(data, fre_at);
            let bad = Error::Truncated {
                what: "FDE attribute",
                offset: fre_at,
            };
            let n = a.u16().ok_or(bad)?;
            let (info, info2, rep) = (a.u8().ok_or(bad)?, a.u8().ok_or(bad)?, a.u8().ok_or(bad)?);
            (u32::from(n), info, info2, rep, a.pos())
        } else {
            let n = c.u32().ok_or(trunc)?;
            let info = c.u8().ok_or(trunc)?;
            // Version 1 has no rep_size: its PCMASK FDEs (AMD64 PLT entries)
            // repeat every 16 bytes.
            let rep = if h.version == 2 {
                c.u8().ok_or(trunc)?
            } else {
                16
            };
            (n, info, 0, rep, fre_at)
        };
        if fres > h.end {
            return Err(oob);
        }
        let addr_size = match info & 0xf {
            0 => 1,
            1 => 2,
            2 => 4,
            t => {
                return Err(Error::BadFreType {
                    offset: at,
                    fre_type: t,
                })
            }
        };
        let fde_type = info2 & 0x1f;
        if fde_type > FDE_TYPE_FLEX {
            return Err(Error::BadFdeType {
                offset: at,
                fde_type,
            });
        }
        let pc_mask = info & 0x10 != 0;
        if pc_mask && rep_size == 0 {
            return Err(Error::ZeroRepSize { offset: at });
        }
        Ok(Fde {
            at,
            index: i,
            start,
            size,
            fres,
            num_fres,
            addr_size,
            pc_mask,
            rep_size,
            pauth_key_b: info & 0x20 != 0,
            signal: h.version == 3 && info & 0x80 != 0,
            fde_type,
        })
    }

    /// [`Fde::read`] of FDE `i` of a validated section (every FDE was
    /// read so, and none failed), for lookups: versions 1 and 2 are read
    /// without the checks validation made, in wrapping arithmetic; version
    /// 3 as `read` does. `None` where `i` lies outside the data, which
    /// validation rules out.
    #[inline(always)]
    pub(crate) fn read_validated(data: &[u8], h: &Header, i: u32, base: u64) -> Option<Fde> {
        if h.version == 3 {
            return Fde::read(data, h, i, base).ok();
        }
        let e = Head12::read(data, h, i)?;
        let at = e.at;
        let rep_size = if h.version == 2 {
            *data.get(at.wrapping_add(17))?
        } else {
            16
        };
        let info = e.info();
        Some(Fde {
            at,
            index: i,
            start: e.start(h, base),
            size: e.size(),
            fres: e.fres(h),
            num_fres: e.num_fres(),
            addr_size: e.addr_size(),
            pc_mask: info & 0x10 != 0,
            rep_size,
            pauth_key_b: info & 0x20 != 0,
            signal: false,
            fde_type: 0,
        })
    }

    /// Start address and size of FDE `i`, without the rest: the binary
    /// search's probe. `None` only for input that validation rejects.
    pub(crate) fn start_of(data: &[u8], h: &Header, i: u32, base: u64) -> Option<(u64, u32)> {
        let at = fde_offset(h, i)?;
        let mut c = Cursor::at(data, at);
        let rel = if h.version == 3 {
            c.i64()?
        } else {
            i64::from(c.i32()?)
        };
        let size = c.u32()?;
        Some((start_address(h, at, rel, base)?, size))
    }
}
