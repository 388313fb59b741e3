//! CIEs and FDEs of `.eh_frame`: the records, their augmentations and where
//! their instructions lie.

use super::pointer::{self, Bases, DW_EH_PE_ABSPTR, DW_EH_PE_OMIT};
use super::Error;
use crate::formats::cursor::Cursor;

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
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| id_at.checked_add(l))
        .filter(|&e| e <= data.len())
        .ok_or(truncated)?;
    if len < 4 {
        return Err(truncated);
    }
    // In `.eh_frame` the CIE id and pointer take 4 bytes even after a
    // 64-bit length (LSB; as libgcc, LLVM's libunwind and gimli read it).
    let id = u64::from(c.u32().ok_or(truncated)?);
    Ok(Some(Record {
        offset,
        id_at,
        id,
        body: c.pos(),
        end,
    }))
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
        let offset = r.offset;
        let content = &data[..r.end];
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
        let offset = r.offset;
        let content = &data[..r.end];
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
