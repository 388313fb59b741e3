//! Function descriptor entries: the version 1/2 FDE and the version 3 index
//! entry plus attribute.

use super::header::Header;
use super::Error;
use crate::formats::cursor::Cursor;

/// FDE type: FLEX (version 3): FRE data words are control/offset pairs.
pub const FDE_TYPE_FLEX: u8 = 1;

/// One function's descriptor, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fde {
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
    /// PCMASK: FRE start addresses repeat every `rep_size` bytes (PLT).
    pub pc_mask: bool,
    /// Size of the repeating block for PCMASK FDEs.
    pub rep_size: u8,
    /// AArch64: return addresses are signed with key B (else key A).
    pub pauth_key_b: bool,
    /// The function is a signal trampoline (version 3).
    pub signal: bool,
    /// FDE type (version 3 `info2` bits 0-4): 0 default, 1 FLEX.
    pub fde_type: u8,
}

impl Fde {
    /// Whether FRE data words are FLEX control/offset pairs.
    pub fn is_flex(&self) -> bool {
        self.fde_type == FDE_TYPE_FLEX
    }

    /// Decodes FDE `i` of the piece `h`. `base` is the runtime address of
    /// the section data's first byte. Only the FDE itself is bounds-checked.
    pub fn read(data: &[u8], h: &Header, i: u32, base: u64) -> Result<Fde, Error> {
        let at = h.fdes + i as usize * h.fde_size();
        let trunc = Error::Truncated {
            what: "FDE",
            offset: at,
        };
        let mut c = Cursor::at(data, at);
        let (rel, size, fre_off) = if h.version == 3 {
            (
                c.i64().ok_or(trunc)?,
                c.u32().ok_or(trunc)?,
                c.u32().ok_or(trunc)?,
            )
        } else {
            (
                i64::from(c.i32().ok_or(trunc)?),
                c.u32().ok_or(trunc)?,
                c.u32().ok_or(trunc)?,
            )
        };
        let anchor = if h.pcrel() { at } else { h.at };
        let start = base.wrapping_add(anchor as u64).wrapping_add(rel as u64);
        let oob = Error::OutOfBounds {
            what: "FDE's FREs",
            offset: at,
        };
        let fre_at = h.fres.checked_add(fre_off as usize).ok_or(oob)?;
        let (num_fres, info, info2, rep_size, fres) = if h.version == 3 {
            let mut a = Cursor::at(data, fre_at);
            let bad = Error::Truncated {
                what: "FDE attribute",
                offset: fre_at,
            };
            let n = a.u16().ok_or(bad)?;
            let (info, info2, rep) = (a.u8().ok_or(bad)?, a.u8().ok_or(bad)?, a.u8().ok_or(bad)?);
            (u32::from(n), info, info2, rep, fre_at + 5)
        } else {
            let n = c.u32().ok_or(trunc)?;
            let info = c.u8().ok_or(trunc)?;
            // Version 1 has no rep_size: AMD64 PLT entries repeat every 16.
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
                    fde: i,
                    fre_type: t,
                })
            }
        };
        Ok(Fde {
            index: i,
            start,
            size,
            fres,
            num_fres,
            addr_size,
            pc_mask: info & 0x10 != 0,
            rep_size,
            pauth_key_b: info & 0x20 != 0,
            signal: h.version == 3 && info & 0x80 != 0,
            fde_type: if h.version == 3 { info2 & 0x1f } else { 0 },
        })
    }

    /// Start address only, for searching (no attribute read).
    pub fn start_of(data: &[u8], h: &Header, i: u32, base: u64) -> Option<(u64, u32)> {
        let at = h.fdes + i as usize * h.fde_size();
        let mut c = Cursor::at(data, at);
        let rel = if h.version == 3 {
            c.i64()?
        } else {
            i64::from(c.i32()?)
        };
        let size = c.u32()?;
        let anchor = if h.pcrel() { at } else { h.at };
        Some((
            base.wrapping_add(anchor as u64).wrapping_add(rel as u64),
            size,
        ))
    }
}
