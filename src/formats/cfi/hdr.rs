//! `.eh_frame_hdr`: where `.eh_frame` is, and a table of `(initial
//! location, FDE address)` pairs sorted by location, searched in halves.

use super::pointer::{self, Bases, DW_EH_PE_OMIT};
use super::Error;
use crate::formats::cursor::Cursor;

/// A parsed `.eh_frame_hdr`.
#[derive(Clone, Copy, Debug)]
pub struct EhFrameHdr<'a> {
    data: &'a [u8],
    addr: u64,
    eh_frame_ptr: u64,
    table_encoding: u8,
    /// Entries in the table (0 when there is none).
    count: usize,
    /// Offset of the table.
    table_at: usize,
    /// Bytes one value of the table takes.
    value_size: usize,
}

impl<'a> EhFrameHdr<'a> {
    /// Parses the header of `data`, whose first byte is at runtime address
    /// `addr`. A table whose encoding has no fixed size, or counts from a
    /// base the header does not have (`textrel`, `funcrel`), cannot be
    /// searched and is ignored ([`EhFrameHdr::has_table`]); one that runs
    /// past the data is an error.
    pub fn parse(data: &'a [u8], addr: u64) -> Result<EhFrameHdr<'a>, Error> {
        let mut c = Cursor::new(data);
        let truncated = Error::Truncated {
            what: ".eh_frame_hdr",
            offset: 0,
        };
        let version = c.u8().ok_or(truncated)?;
        if version != 1 {
            return Err(Error::BadHeader { version });
        }
        let ptr_enc = c.u8().ok_or(truncated)?;
        let count_enc = c.u8().ok_or(truncated)?;
        let table_encoding = c.u8().ok_or(truncated)?;
        let bases = Bases {
            section: addr,
            data: Some(addr),
            func: None,
        };
        let ptr = pointer::read(&mut c, ptr_enc, &bases, ".eh_frame_hdr")?;
        if ptr.indirect {
            return Err(Error::BadEncoding {
                encoding: ptr_enc,
                offset: 4,
            });
        }
        let mut hdr = EhFrameHdr {
            data,
            addr,
            eh_frame_ptr: ptr.value,
            table_encoding,
            count: 0,
            table_at: 0,
            value_size: 0,
        };
        if count_enc == DW_EH_PE_OMIT || table_encoding == DW_EH_PE_OMIT {
            return Ok(hdr);
        }
        let count = pointer::read(&mut c, count_enc, &bases, ".eh_frame_hdr")?;
        // Entries must read alike at any index: a fixed size, nothing to
        // follow, and a base the header has (not the text's or a
        // function's, which `entry` could never apply).
        let searchable = pointer::is_known(table_encoding)
            && table_encoding & pointer::DW_EH_PE_INDIRECT == 0
            && matches!(
                table_encoding & 0x70,
                0 | pointer::DW_EH_PE_PCREL | pointer::DW_EH_PE_DATAREL
            );
        let Some(size) = pointer::fixed_size(table_encoding).filter(|_| searchable) else {
            return Ok(hdr);
        };
        let table_at = c.pos();
        let fits = usize::try_from(count.value)
            .ok()
            .and_then(|n| n.checked_mul(2 * size))
            .and_then(|b| b.checked_add(table_at))
            .is_some_and(|end| end <= data.len());
        if !fits {
            return Err(Error::Truncated {
                what: ".eh_frame_hdr table",
                offset: table_at,
            });
        }
        hdr.count = count.value as usize;
        hdr.table_at = table_at;
        hdr.value_size = size;
        Ok(hdr)
    }

    /// Runtime address of the header.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Runtime address of `.eh_frame`, as the header gives it.
    pub fn eh_frame_ptr(&self) -> u64 {
        self.eh_frame_ptr
    }

    /// Whether the header has a table to search.
    pub fn has_table(&self) -> bool {
        self.value_size != 0
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the table is empty (or absent).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Entry `i`: the initial location and the FDE's address.
    pub fn entry(&self, i: usize) -> Option<(u64, u64)> {
        if i >= self.count {
            return None;
        }
        if self.table_encoding == DATAREL_SDATA4 {
            let e = self.data.get(self.table_at + i * 8..)?.get(..8)?;
            let at = |k: usize| {
                let v = i32::from_le_bytes([e[k], e[k + 1], e[k + 2], e[k + 3]]);
                self.addr.wrapping_add(v as i64 as u64)
            };
            return Some((at(0), at(4)));
        }
        let bases = Bases {
            section: self.addr,
            data: Some(self.addr),
            func: None,
        };
        let mut c = Cursor::at(self.data, self.table_at + i * 2 * self.value_size);
        let loc = pointer::read(&mut c, self.table_encoding, &bases, "entry").ok()?;
        let fde = pointer::read(&mut c, self.table_encoding, &bases, "entry").ok()?;
        Some((loc.value, fde.value))
    }

    /// The last entry whose initial location is at or below `pc`: its
    /// index, that location and the FDE's address. The table is sorted by its producer; if it
    /// is not, this finds some entry, never reads outside the table.
    pub fn search(&self, pc: u64) -> Option<(usize, u64, u64)> {
        if self.table_encoding == DATAREL_SDATA4 {
            return self.search_datarel_sdata4(pc);
        }
        let (mut lo, mut len) = (0usize, self.count);
        // Invariant: entries before `lo` start at or below `pc`, entries
        // from `lo + len` on start above it.
        while len > 0 {
            let half = len / 2;
            let mid = lo + half;
            if self.entry(mid)?.0 <= pc {
                lo = mid + 1;
                len -= half + 1;
            } else {
                len = half;
            }
        }
        let i = lo.checked_sub(1)?;
        let (loc, fde) = self.entry(i)?;
        Some((i, loc, fde))
    }

    /// [`EhFrameHdr::search`] over the table every toolchain writes
    /// (`datarel | sdata4`: pairs of 32-bit offsets from the header): each
    /// probe reads one location in place rather than decoding two pointers,
    /// which was half the cost of a first walk through CFI.
    fn search_datarel_sdata4(&self, pc: u64) -> Option<(usize, u64, u64)> {
        let table = self.data.get(self.table_at..)?.get(..self.count * 8)?;
        let (entries, _) = table.as_chunks::<8>();
        let at = |half: &[u8]| {
            let v = i32::from_le_bytes([half[0], half[1], half[2], half[3]]);
            self.addr.wrapping_add(v as i64 as u64)
        };
        let i = entries
            .partition_point(|e| at(&e[..4]) <= pc)
            .checked_sub(1)?;
        Some((i, at(&entries[i][..4]), at(&entries[i][4..])))
    }
}

/// The table encoding GNU ld, gold, lld and mold write.
const DATAREL_SDATA4: u8 = pointer::DW_EH_PE_DATAREL | pointer::DW_EH_PE_SDATA4;
