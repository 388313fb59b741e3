//! The one place where little-endian, possibly unaligned fields are read from
//! byte slices. Every read is bounds-checked and returns `None` past the end.

/// A bounds-checked little-endian reader over a byte slice.
///
/// ```
/// use stackmark::formats::cursor::Cursor;
/// let mut c = Cursor::new(&[1, 0, 2, 0, 0, 0]);
/// assert_eq!(c.u16(), Some(1));
/// assert_eq!(c.u32(), Some(2));
/// assert_eq!(c.u8(), None);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    /// A cursor at `pos` within `data` (reads fail if `pos` is past the end).
    pub fn at(data: &'a [u8], pos: usize) -> Self {
        Cursor { data, pos }
    }

    /// The current position.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Takes the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Some(a)
    }

    /// Reads a `u8`.
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }
    /// Reads an `i8`.
    pub fn i8(&mut self) -> Option<i8> {
        Some(self.u8()? as i8)
    }
    /// Reads a little-endian `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    /// Reads a little-endian `i16`.
    pub fn i16(&mut self) -> Option<i16> {
        self.array().map(i16::from_le_bytes)
    }
    /// Reads a little-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    /// Reads a little-endian `i32`.
    pub fn i32(&mut self) -> Option<i32> {
        self.array().map(i32::from_le_bytes)
    }
    /// Reads a little-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
    /// Reads a little-endian `i64`.
    pub fn i64(&mut self) -> Option<i64> {
        self.array().map(i64::from_le_bytes)
    }
}

/// Reads a little-endian `u32` at `off`, or `None` past the end.
pub fn u32_at(data: &[u8], off: usize) -> Option<u32> {
    Cursor::at(data, off).u32()
}

/// Reads a little-endian `u16` at `off`, or `None` past the end.
pub fn u16_at(data: &[u8], off: usize) -> Option<u16> {
    Cursor::at(data, off).u16()
}

/// Reads a little-endian `u64` at `off`, or `None` past the end.
pub fn u64_at(data: &[u8], off: usize) -> Option<u64> {
    Cursor::at(data, off).u64()
}

impl Cursor<'_> {
    /// Reads an unsigned LEB128 number; `None` past the end or when it
    /// does not fit 64 bits.
    ///
    /// ```
    /// use stackmark::formats::cursor::Cursor;
    /// assert_eq!(Cursor::new(&[0xe5, 0x8e, 0x26]).uleb128(), Some(624485));
    /// assert_eq!(Cursor::new(&[0x80]).uleb128(), None);
    /// ```
    #[inline]
    pub fn uleb128(&mut self) -> Option<u64> {
        // Most numbers in unwind tables take one byte.
        match self.data.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Some(u64::from(b))
            }
            _ => {
                let (value, pos) = uleb128_long(self.data, self.pos);
                self.pos = pos;
                value
            }
        }
    }

    /// Reads a signed LEB128 number; `None` past the end or when it does
    /// not fit 64 bits.
    ///
    /// ```
    /// use stackmark::formats::cursor::Cursor;
    /// assert_eq!(Cursor::new(&[0xc0, 0xbb, 0x78]).sleb128(), Some(-123456));
    /// assert_eq!(Cursor::new(&[0x78]).sleb128(), Some(-8));
    /// ```
    #[inline]
    pub fn sleb128(&mut self) -> Option<i64> {
        match self.data.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Some(sleb7(b))
            }
            _ => {
                let (value, pos) = sleb128_long(self.data, self.pos);
                self.pos = pos;
                value
            }
        }
    }

    /// Skips `n` bytes; `None` (and no move) if fewer remain.
    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.bytes(n).map(|_| ())
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// The value of the one-byte SLEB128 `b` (below 0x80): bit 6 is the sign,
/// shifted to the top and back.
#[inline]
pub(crate) fn sleb7(b: u8) -> i64 {
    i64::from((b << 1) as i8 >> 1)
}

// The multi-byte LEB128 readers take the cursor's fields by value and hand
// back where they stopped: a cursor whose address no out-of-line code
// takes can live in registers through an inlined caller's loop.

#[inline(never)]
fn uleb128_long(data: &[u8], pos: usize) -> (Option<u64>, usize) {
    let mut c = Cursor::at(data, pos);
    let mut value = 0u64;
    let mut shift = 0u32;
    let value = loop {
        let Some(b) = c.u8() else { break None };
        let bits = u64::from(b & 0x7f);
        if shift >= 64 || (shift == 63 && bits > 1) {
            break None;
        }
        value |= bits << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break Some(value);
        }
    };
    (value, c.pos)
}

#[inline(never)]
fn sleb128_long(data: &[u8], pos: usize) -> (Option<i64>, usize) {
    let mut c = Cursor::at(data, pos);
    let mut value = 0i64;
    let mut shift = 0u32;
    let value = loop {
        let Some(b) = c.u8() else { break None };
        if shift >= 64 {
            break None;
        }
        value |= i64::from(b & 0x7f).wrapping_shl(shift);
        shift += 7;
        if b & 0x80 == 0 {
            if shift < 64 && b & 0x40 != 0 {
                value |= -1i64 << shift;
            }
            break Some(value);
        }
    };
    (value, c.pos)
}
