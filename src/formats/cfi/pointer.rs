//! `DW_EH_PE_*` pointer encodings: how `.eh_frame` and `.eh_frame_hdr` store
//! addresses (LSB's "DWARF Extensions", `.eh_frame_hdr` section).

use super::Error;
use crate::formats::cursor::Cursor;

/// No value is present.
pub const DW_EH_PE_OMIT: u8 = 0xff;
/// A pointer of the target's size (8 bytes here).
pub const DW_EH_PE_ABSPTR: u8 = 0x00;
/// Unsigned LEB128.
pub const DW_EH_PE_ULEB128: u8 = 0x01;
/// Unsigned 2 bytes.
pub const DW_EH_PE_UDATA2: u8 = 0x02;
/// Unsigned 4 bytes.
pub const DW_EH_PE_UDATA4: u8 = 0x03;
/// Unsigned 8 bytes.
pub const DW_EH_PE_UDATA8: u8 = 0x04;
/// Signed LEB128.
pub const DW_EH_PE_SLEB128: u8 = 0x09;
/// Signed 2 bytes.
pub const DW_EH_PE_SDATA2: u8 = 0x0a;
/// Signed 4 bytes.
pub const DW_EH_PE_SDATA4: u8 = 0x0b;
/// Signed 8 bytes.
pub const DW_EH_PE_SDATA8: u8 = 0x0c;
/// Relative to the address of the field itself.
pub const DW_EH_PE_PCREL: u8 = 0x10;
/// Relative to the start of the text (not used on x86_64 or AArch64).
pub const DW_EH_PE_TEXTREL: u8 = 0x20;
/// Relative to the data base: the start of `.eh_frame_hdr` there.
pub const DW_EH_PE_DATAREL: u8 = 0x30;
/// Relative to the function's start (LSDA pointers only).
pub const DW_EH_PE_FUNCREL: u8 = 0x40;
/// Aligned to the pointer size.
pub const DW_EH_PE_ALIGNED: u8 = 0x50;
/// The value is the address of the pointer, not the pointer itself.
pub const DW_EH_PE_INDIRECT: u8 = 0x80;

/// What the relative encodings count from. `section` is the runtime
/// address of the first byte of the data being read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bases {
    /// Runtime address of the data's first byte (for `pcrel`).
    pub section: u64,
    /// The data base (for `datarel`), if the context defines one.
    pub data: Option<u64>,
    /// The function's start (for `funcrel`), if known.
    pub func: Option<u64>,
}

/// A decoded pointer: its value, and whether that is only the address of
/// the pointer (`DW_EH_PE_indirect`), which a pure reader cannot follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pointer {
    /// The value after the relative base was applied.
    pub value: u64,
    /// `DW_EH_PE_indirect`: `value` is where the pointer is stored.
    pub indirect: bool,
}

/// Bytes a fixed-size encoding's value takes, `None` for LEB128 and
/// `omit`, or an unknown format.
pub fn fixed_size(encoding: u8) -> Option<usize> {
    match encoding & 0x0f {
        DW_EH_PE_ABSPTR => Some(8),
        DW_EH_PE_UDATA2 | DW_EH_PE_SDATA2 => Some(2),
        DW_EH_PE_UDATA4 | DW_EH_PE_SDATA4 => Some(4),
        DW_EH_PE_UDATA8 | DW_EH_PE_SDATA8 => Some(8),
        _ => None,
    }
}

/// Whether `encoding` is one this reader knows (`omit` included).
pub fn is_known(encoding: u8) -> bool {
    if encoding == DW_EH_PE_OMIT {
        return true;
    }
    let format_ok = matches!(
        encoding & 0x0f,
        DW_EH_PE_ABSPTR
            | DW_EH_PE_ULEB128
            | DW_EH_PE_UDATA2
            | DW_EH_PE_UDATA4
            | DW_EH_PE_UDATA8
            | DW_EH_PE_SLEB128
            | DW_EH_PE_SDATA2
            | DW_EH_PE_SDATA4
            | DW_EH_PE_SDATA8
    );
    format_ok && encoding & 0x70 <= DW_EH_PE_ALIGNED
}

/// Reads the value part of `encoding` (no relative base applied).
fn read_value(c: &mut Cursor<'_>, encoding: u8) -> Option<u64> {
    Some(match encoding & 0x0f {
        DW_EH_PE_ABSPTR | DW_EH_PE_UDATA8 | DW_EH_PE_SDATA8 => c.u64()?,
        DW_EH_PE_ULEB128 => c.uleb128()?,
        DW_EH_PE_UDATA2 => u64::from(c.u16()?),
        DW_EH_PE_UDATA4 => u64::from(c.u32()?),
        DW_EH_PE_SLEB128 => c.sleb128()? as u64,
        DW_EH_PE_SDATA2 => c.i16()? as i64 as u64,
        DW_EH_PE_SDATA4 => c.i32()? as i64 as u64,
        _ => return None,
    })
}

/// Reads a pointer encoded as `encoding` at the cursor. `what` names the
/// field for errors.
///
/// ```
/// use stackmark::formats::cfi::pointer::{read, Bases, DW_EH_PE_PCREL, DW_EH_PE_SDATA4};
/// use stackmark::formats::cursor::Cursor;
/// // -16 relative to the field, which sits 4 bytes into data at 0x1000.
/// let data = [0, 0, 0, 0, 0xf0, 0xff, 0xff, 0xff];
/// let mut c = Cursor::at(&data, 4);
/// let bases = Bases { section: 0x1000, ..Bases::default() };
/// let p = read(&mut c, DW_EH_PE_PCREL | DW_EH_PE_SDATA4, &bases, "pc_begin").unwrap();
/// assert_eq!(p.value, 0xff4);
/// ```
pub fn read(
    c: &mut Cursor<'_>,
    encoding: u8,
    bases: &Bases,
    what: &'static str,
) -> Result<Pointer, Error> {
    let at = c.pos();
    let bad = Error::BadEncoding {
        encoding,
        offset: at,
    };
    if encoding == DW_EH_PE_OMIT || !is_known(encoding) {
        return Err(bad);
    }
    let field = bases.section.wrapping_add(at as u64);
    let base = match encoding & 0x70 {
        0 => 0,
        DW_EH_PE_PCREL => field,
        DW_EH_PE_DATAREL => bases.data.ok_or(bad)?,
        DW_EH_PE_FUNCREL => bases.func.ok_or(bad)?,
        DW_EH_PE_ALIGNED => {
            // The value sits at the next 8-byte aligned address.
            let pad = (8 - (field % 8) as usize) % 8;
            c.skip(pad).ok_or(Error::Truncated { what, offset: at })?;
            0
        }
        _ => return Err(bad),
    };
    let value = read_value(c, encoding).ok_or(Error::Truncated { what, offset: at })?;
    Ok(Pointer {
        value: base.wrapping_add(value),
        indirect: encoding & DW_EH_PE_INDIRECT != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_and_base_decodes_as_specified() {
        let bases = Bases {
            section: 0x10_000,
            data: Some(0x20_000),
            func: Some(0x30_000),
        };
        let cases: &[(u8, &[u8], u64)] = &[
            (
                DW_EH_PE_ABSPTR,
                &[1, 2, 3, 4, 5, 6, 7, 8],
                0x0807_0605_0403_0201,
            ),
            (DW_EH_PE_UDATA2, &[0xfe, 0xff], 0xfffe),
            (DW_EH_PE_SDATA2, &[0xfe, 0xff], (-2i64) as u64),
            (DW_EH_PE_UDATA4, &[0xfc, 0xff, 0xff, 0xff], 0xffff_fffc),
            (DW_EH_PE_SDATA4, &[0xfc, 0xff, 0xff, 0xff], (-4i64) as u64),
            (DW_EH_PE_UDATA8, &[0xff; 8], u64::MAX),
            (DW_EH_PE_SDATA8, &[0xff; 8], u64::MAX),
            (DW_EH_PE_ULEB128, &[0xe5, 0x8e, 0x26], 624_485),
            (DW_EH_PE_SLEB128, &[0x7f], (-1i64) as u64),
            (DW_EH_PE_PCREL | DW_EH_PE_SDATA4, &[0x10, 0, 0, 0], 0x10_010),
            (
                DW_EH_PE_DATAREL | DW_EH_PE_SDATA4,
                &[0x10, 0, 0, 0],
                0x20_010,
            ),
            (DW_EH_PE_FUNCREL | DW_EH_PE_UDATA2, &[0x10, 0], 0x30_010),
        ];
        for &(enc, bytes, want) in cases {
            let mut c = Cursor::new(bytes);
            let p = read(&mut c, enc, &bases, "test").unwrap();
            assert_eq!(p.value, want, "encoding {enc:#x}");
            assert!(!p.indirect);
            assert!(c.is_empty(), "encoding {enc:#x} read every byte");
        }
        let mut c = Cursor::new(&[8, 0, 0, 0]);
        let p = read(&mut c, DW_EH_PE_INDIRECT | DW_EH_PE_UDATA4, &bases, "t").unwrap();
        assert_eq!((p.value, p.indirect), (8, true));
    }

    #[test]
    fn unknown_missing_or_short_encodings_are_errors() {
        let bases = Bases::default();
        for enc in [DW_EH_PE_OMIT, 0x05, 0x0d, DW_EH_PE_TEXTREL, 0x60 | 3] {
            let mut c = Cursor::new(&[0; 8]);
            assert!(
                matches!(
                    read(&mut c, enc, &bases, "t"),
                    Err(Error::BadEncoding { .. })
                ),
                "{enc:#x}"
            );
        }
        // datarel without a data base.
        let mut c = Cursor::new(&[0; 8]);
        assert!(read(&mut c, DW_EH_PE_DATAREL | DW_EH_PE_UDATA4, &bases, "t").is_err());
        let mut c = Cursor::new(&[0; 3]);
        assert_eq!(
            read(&mut c, DW_EH_PE_UDATA4, &bases, "t"),
            Err(Error::Truncated {
                what: "t",
                offset: 0
            })
        );
    }

    #[test]
    fn aligned_pointers_skip_to_the_next_eight_byte_boundary() {
        let bases = Bases {
            section: 0x1003,
            ..Bases::default()
        };
        let mut data = [0u8; 16];
        data[5..13].copy_from_slice(&0x1234u64.to_le_bytes());
        let mut c = Cursor::new(&data);
        let p = read(&mut c, DW_EH_PE_ALIGNED, &bases, "t").unwrap();
        assert_eq!((p.value, c.pos()), (0x1234, 13));
    }
}
