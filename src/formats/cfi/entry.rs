//! CIEs and FDEs of `.eh_frame`: the records, their augmentations and where
//! their instructions lie.

use super::pointer::{self, Bases, DW_EH_PE_ABSPTR, DW_EH_PE_OMIT};
use super::Error;
use crate::formats::cursor::{sleb7, Cursor};

/// One record's frame: where its content and the next record start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Offset of the length field.
    pub offset: usize,
    /// Offset of the CIE id / CIE pointer field.
    pub id_at: usize,
    /// The id field's value: 0 for a CIE, else the distance from the id
    /// field back to the FDE's CIE.
    pub id: u64,
    /// Offset just past the id field.
    pub body: usize,
    /// Offset just past the record.
    pub end: usize,
}

/// Reads the record at `offset`; `Ok(None)` for a zero-length terminator.
pub(crate) fn record(data: &[u8], offset: usize) -> Result<Option<Record>, Error> {
    let truncated = Error::Truncated {
        what: "record",
        offset,
    };
    let mut c = Cursor::at(data, offset);
    let len32 = c.u32().ok_or(truncated)?;
    if len32 == 0 {
        return Ok(None);
    }
    let len = if len32 == 0xffff_ffff {
        c.u64().ok_or(truncated)?
    } else {
        u64::from(len32)
    };
    let id_at = c.pos();
    // In `.eh_frame` the CIE id and pointer take 4 bytes even after a
    // 64-bit length (LSB; as libgcc, LLVM's libunwind and gimli read it).
    // Where they do not fit, neither does the record.
    let id = c.u32().ok_or(truncated)?;
    framed(data, offset, id_at, len, id).map(Some).ok_or(truncated)
}

/// The record at `offset` whose length field, saying `len`, ends at
/// `id_at`, and whose 4-byte id field says `id`; `None` where the record
/// is too short to hold its id or ends past `data`.
#[inline(always)]
fn framed(data: &[u8], offset: usize, id_at: usize, len: u64, id: u32) -> Option<Record> {
    if len < 4 {
        return None;
    }
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| id_at.checked_add(l))
        .filter(|&e| e <= data.len())?;
    Some(Record {
        offset,
        id_at,
        id: u64::from(id),
        // Cannot overflow: `end` is at least this far.
        body: id_at + 4,
        end,
    })
}

/// A record's first 16 bytes read as the usual FDE's: a 32-bit length,
/// the CIE pointer, a `pcrel | sdata4` start and a 32-bit range. Reading
/// them once lets an index lookup both rule the FDE out cheaply and,
/// where it cannot, frame the record without reading it again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head {
    pub len: u32,
    pub id: u32,
    pub begin: i32,
    pub range: u32,
}

impl Head {
    /// The 16 bytes at `offset`; `None` where fewer remain.
    #[inline]
    pub fn read(data: &[u8], offset: usize) -> Option<Head> {
        let b = data.get(offset..)?.first_chunk::<16>()?;
        let word = |i: usize| [b[i], b[i + 1], b[i + 2], b[i + 3]];
        Some(Head {
            len: u32::from_le_bytes(word(0)),
            id: u32::from_le_bytes(word(4)),
            begin: i32::from_le_bytes(word(8)),
            range: u32::from_le_bytes(word(12)),
        })
    }

    /// The record at `offset` as [`record`] reads it, where its length is
    /// a 32-bit one and the record fits `data`; `None` for any other
    /// case (a terminator, a 64-bit length, an error), which [`record`]
    /// reads.
    #[inline]
    pub fn record(&self, data: &[u8], offset: usize) -> Option<Record> {
        // One compare rules out both (`framed` then finds no short length).
        if self.len < 4 || self.len == 0xffff_ffff {
            return None;
        }
        framed(data, offset, offset.checked_add(4)?, u64::from(self.len), self.id)
    }
}

/// A Common Information Entry: what a group of FDEs share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cie {
    /// Offset of the CIE in `.eh_frame`.
    pub offset: usize,
    /// Version: 1, 3 or 4.
    pub version: u8,
    /// Factor of every advance (`code_alignment_factor`).
    pub code_align: u64,
    /// Factor of every register offset (`data_alignment_factor`).
    pub data_align: i64,
    /// The column holding the return address.
    pub ra_register: u16,
    /// How FDEs of this CIE encode their addresses (`R`; absptr if absent).
    pub fde_encoding: u8,
    /// How FDEs encode their LSDA pointer (`L`; omit if absent).
    pub lsda_encoding: u8,
    /// The augmentation string starts with `z`: FDEs carry an augmentation
    /// data length.
    pub has_augmentation_data: bool,
    /// `S`: the functions are signal trampolines.
    pub signal_frame: bool,
    /// `B`: AArch64 return addresses are signed with key B.
    pub b_key: bool,
    /// Offsets `[start, end)` of the initial instructions.
    pub instructions: (usize, usize),
}

impl Cie {
    /// Parses the CIE at `offset` of `data`, whose first byte is at runtime
    /// address `bases.section`.
    pub fn parse(data: &[u8], offset: usize, bases: &Bases) -> Result<Cie, Error> {
        let r = record(data, offset)?.ok_or(Error::Truncated {
            what: "CIE",
            offset,
        })?;
        if r.id != 0 {
            return Err(Error::NotACie { offset });
        }
        Cie::parse_body(data, &r, bases)
    }

    fn parse_body(data: &[u8], r: &Record, bases: &Bases) -> Result<Cie, Error> {
        let content = &data[..r.end];
        match Cie::parse_usual(content, r) {
            Some(cie) => Ok(cie),
            None => Cie::parse_general(content, r, bases),
        }
    }

    fn parse_general(content: &[u8], r: &Record, bases: &Bases) -> Result<Cie, Error> {
        let offset = r.offset;
        let truncated = Error::Truncated {
            what: "CIE",
            offset,
        };
        let mut c = Cursor::at(content, r.body);
        let version = c.u8().ok_or(truncated)?;
        if !matches!(version, 1 | 3 | 4) {
            return Err(Error::UnsupportedVersion { version, offset });
        }
        let aug_at = c.pos();
        let aug_len = content
            .get(aug_at..)
            .and_then(|rest| rest.iter().position(|&b| b == 0))
            .ok_or(truncated)?;
        let augmentation = &content[aug_at..aug_at + aug_len];
        c.skip(aug_len + 1).ok_or(truncated)?;
        if version == 4 {
            let (address_size, segment_size) = (c.u8().ok_or(truncated)?, c.u8().ok_or(truncated)?);
            if address_size != 8 || segment_size != 0 {
                return Err(Error::UnsupportedAddressSize { offset });
            }
        }
        let code_align = c.uleb128().ok_or(truncated)?;
        let data_align = c.sleb128().ok_or(truncated)?;
        let ra = if version == 1 {
            u64::from(c.u8().ok_or(truncated)?)
        } else {
            c.uleb128().ok_or(truncated)?
        };
        let ra_register = u16::try_from(ra).map_err(|_| Error::BadRegister { offset })?;
        let mut cie = Cie {
            offset,
            version,
            code_align,
            data_align,
            ra_register,
            fde_encoding: DW_EH_PE_ABSPTR,
            lsda_encoding: DW_EH_PE_OMIT,
            has_augmentation_data: false,
            signal_frame: false,
            b_key: false,
            instructions: (0, 0),
        };
        match augmentation.split_first() {
            None => {}
            Some((b'z', letters)) => {
                cie.has_augmentation_data = true;
                let len = c.uleb128().ok_or(truncated)?;
                let data_end = usize::try_from(len)
                    .ok()
                    .and_then(|l| c.pos().checked_add(l))
                    .filter(|&e| e <= content.len())
                    .ok_or(truncated)?;
                let mut a = Cursor::at(&content[..data_end], c.pos());
                for &letter in letters {
                    match letter {
                        b'R' => cie.fde_encoding = a.u8().ok_or(truncated)?,
                        b'L' => cie.lsda_encoding = a.u8().ok_or(truncated)?,
                        b'P' => {
                            let enc = a.u8().ok_or(truncated)?;
                            // Read only to step over it: the personality
                            // routine plays no part in a walk.
                            pointer::read(&mut a, enc, bases, "personality")?;
                        }
                        b'S' => cie.signal_frame = true,
                        b'B' => cie.b_key = true,
                        // MTE-tagged frames: no data, nothing for a walk.
                        b'G' => {}
                        // The data length lets the rest be skipped.
                        _ => break,
                    }
                }
                c = Cursor::at(content, data_end);
            }
            Some(_) => return Err(Error::UnknownAugmentation { offset }),
        }
        if cie.fde_encoding == DW_EH_PE_OMIT || !pointer::is_known(cie.fde_encoding) {
            return Err(Error::BadEncoding {
                encoding: cie.fde_encoding,
                offset,
            });
        }
        cie.instructions = (c.pos(), r.end);
        Ok(cie)
    }
}

impl Cie {
    /// The CIEs GCC and LLVM write for x86_64 and AArch64, read without
    /// the general code's steps: version 1, augmentation `zR` or `zPLR`
    /// (a 4-byte personality pointer, absolute or pc-relative), one-byte
    /// factors, return address column and augmentation length. `None`
    /// for any other shape, which [`Cie::parse_body`] reads as well; for
    /// these it reads the same.
    #[inline]
    fn parse_usual(content: &[u8], r: &Record) -> Option<Cie> {
        let body = content.get(r.body..)?;
        // The augmentation string's bytes (its NUL included) and the bytes
        // of its data the letters read.
        let (aug_len, needed, rest) = match body {
            [1, b'z', b'R', 0, rest @ ..] => (3, 1, rest),
            [1, b'z', b'P', b'L', b'R', 0, rest @ ..] => (5, 7, rest),
            _ => return None,
        };
        let &[code_align, data_align, ra, data_len, ref data @ ..] = rest else {
            return None;
        };
        if (code_align | data_align | data_len) >= 0x80 || data_len < needed {
            return None;
        }
        let (fde_encoding, lsda_encoding) = match *data {
            [enc, ..] if needed == 1 => (enc, DW_EH_PE_OMIT),
            [personality, _, _, _, _, lsda, enc, ..]
                if matches!(personality & 0x70, 0 | pointer::DW_EH_PE_PCREL)
                    && matches!(
                        personality & 0x0f,
                        pointer::DW_EH_PE_UDATA4 | pointer::DW_EH_PE_SDATA4
                    ) =>
            {
                (enc, lsda)
            }
            _ => return None,
        };
        if fde_encoding == DW_EH_PE_OMIT || !pointer::is_known(fde_encoding) {
            return None;
        }
        // Version, string, three one-byte fields, the data's length.
        let data_at = r.body + 1 + aug_len + 4;
        let data_end = data_at + usize::from(data_len);
        if data_end > content.len() {
            return None;
        }
        Some(Cie {
            offset: r.offset,
            version: 1,
            code_align: u64::from(code_align),
            data_align: sleb7(data_align),
            ra_register: u16::from(ra),
            fde_encoding,
            lsda_encoding,
            has_augmentation_data: true,
            signal_frame: false,
            b_key: false,
            instructions: (data_end, r.end),
        })
    }
}

/// A Frame Description Entry: one function's address range and
/// instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fde {
    /// Offset of the FDE in `.eh_frame`.
    pub offset: usize,
    /// Offset of its CIE.
    pub cie_offset: usize,
    /// Runtime address of the function's first instruction.
    pub pc_begin: u64,
    /// Bytes of code the FDE covers.
    pub pc_range: u64,
    /// Offsets `[start, end)` of the instructions.
    pub instructions: (usize, usize),
}

impl Fde {
    /// Whether the FDE covers `pc`.
    pub fn contains(&self, pc: u64) -> bool {
        pc.wrapping_sub(self.pc_begin) < self.pc_range
    }

    /// Parses the FDE at `offset` and its CIE.
    pub fn parse(data: &[u8], offset: usize, bases: &Bases) -> Result<(Fde, Cie), Error> {
        let r = record(data, offset)?.ok_or(Error::Truncated {
            what: "FDE",
            offset,
        })?;
        if r.id == 0 {
            return Err(Error::NotAnFde { offset });
        }
        Fde::parse_record(data, &r, bases)
    }

    pub(crate) fn parse_record(
        data: &[u8],
        r: &Record,
        bases: &Bases,
    ) -> Result<(Fde, Cie), Error> {
        let offset = r.offset;
        let cie_offset = u64::try_from(r.id_at)
            .ok()
            .and_then(|at| at.checked_sub(r.id))
            .and_then(|o| usize::try_from(o).ok())
            .ok_or(Error::BadCiePointer { offset })?;
        let cie = match Cie::parse(data, cie_offset, bases) {
            Err(Error::NotACie { .. }) => return Err(Error::BadCiePointer { offset }),
            other => other?,
        };
        let fde = Fde::parse_with(data, r, &cie, bases)?;
        Ok((fde, cie))
    }

    /// Parses the FDE of record `r` given its CIE.
    pub(crate) fn parse_with(
        data: &[u8],
        r: &Record,
        cie: &Cie,
        bases: &Bases,
    ) -> Result<Fde, Error> {
        let content = &data[..r.end];
        if cie.fde_encoding == PCREL_SDATA4 && cie.has_augmentation_data {
            if let Some(fde) = Fde::parse_usual(content, r, cie, bases) {
                return Ok(fde);
            }
        }
        Fde::parse_general(content, r, cie, bases)
    }

    fn parse_general(content: &[u8], r: &Record, cie: &Cie, bases: &Bases) -> Result<Fde, Error> {
        let offset = r.offset;
        let truncated = Error::Truncated {
            what: "FDE",
            offset,
        };
        let mut c = Cursor::at(content, r.body);
        let begin = pointer::read(&mut c, cie.fde_encoding, bases, "FDE")?;
        if begin.indirect {
            return Err(Error::BadEncoding {
                encoding: cie.fde_encoding,
                offset,
            });
        }
        // The range is a length: its format alone, no base.
        let range = pointer::read(&mut c, cie.fde_encoding & 0x0f, bases, "FDE")?;
        if cie.has_augmentation_data {
            let len = c.uleb128().ok_or(truncated)?;
            c.skip(usize::try_from(len).map_err(|_| truncated)?)
                .ok_or(truncated)?;
        }
        if begin.value.checked_add(range.value).is_none() {
            return Err(Error::AddressOverflow { offset });
        }
        Ok(Fde {
            offset,
            cie_offset: cie.offset,
            pc_begin: begin.value,
            pc_range: range.value,
            instructions: (c.pos(), r.end),
        })
    }
}

/// The FDE encoding every x86_64 and AArch64 toolchain writes.
const PCREL_SDATA4: u8 = pointer::DW_EH_PE_PCREL | pointer::DW_EH_PE_SDATA4;

impl Fde {
    /// [`Fde::parse_with`] for a CIE of `pcrel | sdata4` FDEs with
    /// augmentation data, and a one-byte augmentation length; `None` for
    /// anything else (an error included), which the general code reads.
    #[inline]
    fn parse_usual(content: &[u8], r: &Record, cie: &Cie, bases: &Bases) -> Option<Fde> {
        let &[b0, b1, b2, b3, r0, r1, r2, r3, data_len, ..] = content.get(r.body..)? else {
            return None;
        };
        if data_len >= 0x80 {
            return None;
        }
        let instructions = r.body + 9 + usize::from(data_len);
        if instructions > content.len() {
            return None;
        }
        let field = bases.section.wrapping_add(r.body as u64);
        let begin = field.wrapping_add(i32::from_le_bytes([b0, b1, b2, b3]) as i64 as u64);
        // The range is read as its format alone: signed.
        let range = i32::from_le_bytes([r0, r1, r2, r3]) as i64 as u64;
        begin.checked_add(range)?;
        Some(Fde {
            offset: r.offset,
            cie_offset: cie.offset,
            pc_begin: begin,
            pc_range: range,
            instructions: (instructions, r.end),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `body` (after its id field) at offset 0 of a section
    /// at 0x2000.
    fn record_of(id: u32, body: &[u8]) -> (Vec<u8>, Record) {
        let mut data = ((body.len() + 4) as u32).to_le_bytes().to_vec();
        data.extend_from_slice(&id.to_le_bytes());
        data.extend_from_slice(body);
        let r = record(&data, 0).unwrap().unwrap();
        (data, r)
    }

    const BASES: Bases = Bases {
        section: 0x2000,
        data: Some(0x1800),
        func: None,
    };

    #[test]
    fn the_usual_cie_reads_as_the_general_code_reads_it() {
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        for (caf, daf, ra) in [(1, 0x78, 16), (4, 0x7c, 30), (0x80, 0x78, 16), (1, 0x80, 16)] {
            for data in [&[0x1b][..], &[0x03], &[0xff], &[0x07], &[0x1b, 0, 0], &[]] {
                let mut b = vec![1, b'z', b'R', 0, caf, daf, ra, data.len() as u8];
                b.extend_from_slice(data);
                b.extend_from_slice(&[0x0c, 7, 8]);
                bodies.push(b);
            }
            for p in [0x9b, 0x1b, 0x03, 0x00, 0x3b, 0x50, 0x0c, 0xff] {
                for len in [7, 6, 9] {
                    let mut b = vec![1, b'z', b'P', b'L', b'R', 0, caf, daf, ra, len];
                    b.extend_from_slice(&[p, 1, 2, 3, 4, 0x1b, 0x1b, 0, 0][..len as usize]);
                    bodies.push(b);
                }
            }
        }
        bodies.push(vec![1, b'z', b'R', 0, 1, 0x78, 16, 1]);
        bodies.push(vec![3, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b]);
        let mut usual = 0;
        for body in &bodies {
            for cut in 0..=body.len() {
                let (data, r) = record_of(0, &body[..cut]);
                let general = Cie::parse_general(&data[..r.end], &r, &BASES);
                if let Some(cie) = Cie::parse_usual(&data[..r.end], &r) {
                    assert_eq!(Ok(cie), general, "{:x?}", &body[..cut]);
                    usual += 1;
                }
            }
        }
        assert!(usual > 20, "{usual}");
    }

    #[test]
    fn the_usual_fde_reads_as_the_general_code_reads_it() {
        let (cie_data, cie_r) = record_of(0, &[1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b]);
        let cie = Cie::parse_general(&cie_data, &cie_r, &BASES).unwrap();
        let mut usual = 0;
        for begin in [-0x1000i32, 0x10, i32::MAX, i32::MIN] {
            for range in [0x100i32, -1, i32::MAX] {
                for aug in [&[0u8][..], &[2, 0, 0], &[0x80, 0], &[5]] {
                    let mut body = begin.to_le_bytes().to_vec();
                    body.extend_from_slice(&range.to_le_bytes());
                    body.extend_from_slice(aug);
                    body.extend_from_slice(&[0x41, 0x0e, 0x10]);
                    for cut in 0..=body.len() {
                        let (data, r) = record_of(8, &body[..cut]);
                        let bases = Bases {
                            section: u64::MAX - 0x20,
                            ..BASES
                        };
                        for bases in [BASES, bases] {
                            let content = &data[..r.end];
                            let general = Fde::parse_general(content, &r, &cie, &bases);
                            if let Some(fde) = Fde::parse_usual(content, &r, &cie, &bases) {
                                assert_eq!(Ok(fde), general, "{:x?}", &body[..cut]);
                                usual += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(usual > 20, "{usual}");
    }
}
