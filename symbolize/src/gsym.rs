//! GSYM files as `llvm-gsymutil --convert` writes them (version 1).
//!
//! The layout, all little-endian:
//! - a 48-byte header: magic `0x4753594d` ("GSYM"), version 1, the size
//!   of an address offset (1, 2, 4 or 8), the UUID's length, the base
//!   address, the number of addresses, the string table's offset and size,
//!   and 20 bytes of UUID;
//! - the address offsets (from the base address, sorted), aligned to their size;
//! - one `u32` per address: the file offset of its function info, aligned to 4;
//! - the file table: a `u32` count, then `{u32 dir, u32 base}` string offsets;
//! - the function infos: `u32 size`, `u32 name`, then typed chunks
//!   `{u32 type, u32 length, data}` up to type 0 (1: line table, 2: inline
//!   info).
//!
//! The tables are checked once ([`Gsym::parse`]); a function info is read
//! when an address needs it. Every read is bounded: a truncated or corrupt
//! file gives a [`GsymError`] with the offset where it went wrong, never a
//! panic.

use crate::SymFrame;

/// What was wrong, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GsymError {
    /// Byte offset in the file.
    pub offset: usize,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for GsymError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.message)
    }
}

fn err<T>(offset: usize, message: impl Into<String>) -> Result<T, GsymError> {
    Err(GsymError {
        offset,
        message: message.into(),
    })
}

/// A bounded little-endian reader over the file.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// Reads stop here (the end of a chunk).
    end: usize,
}

impl<'a> Cursor<'a> {
    fn new(data: &'a [u8], pos: usize, end: usize) -> Cursor<'a> {
        Cursor {
            data,
            pos,
            end: end.min(data.len()),
        }
    }

    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], GsymError> {
        match self.pos.checked_add(n) {
            Some(e) if e <= self.end => {
                let b = &self.data[self.pos..e];
                self.pos = e;
                Ok(b)
            }
            // The offset is where the data runs out, inside the file.
            _ => err(
                self.pos.min(self.end),
                format!("truncated: {what} needs {n} bytes at {}", self.pos),
            ),
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, GsymError> {
        Ok(self.bytes(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, GsymError> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn uint(&mut self, size: usize, what: &str) -> Result<u64, GsymError> {
        let b = self.bytes(size, what)?;
        let mut v = [0u8; 8];
        v[..size].copy_from_slice(b);
        Ok(u64::from_le_bytes(v))
    }

    fn uleb(&mut self, what: &str) -> Result<u64, GsymError> {
        let start = self.pos;
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.u8(what)?;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            } else if b & 0x7f != 0 {
                return err(start, format!("{what}: LEB128 overflows 64 bits"));
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
    }

    fn sleb(&mut self, what: &str) -> Result<i64, GsymError> {
        let start = self.pos;
        let mut v = 0i64;
        let mut shift = 0u32;
        loop {
            let b = self.u8(what)?;
            if shift < 64 {
                v |= i64::from(b & 0x7f) << shift;
            } else if b & 0x7f != 0 && b & 0x7f != 0x7f {
                return err(start, format!("{what}: LEB128 overflows 64 bits"));
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Ok(v);
            }
        }
    }

    fn align(&mut self, to: usize) {
        self.pos = self.pos.div_ceil(to).saturating_mul(to);
    }
}

const MAGIC: u32 = 0x4753_594d;
const HEADER_SIZE: usize = 48;

/// A GSYM file, checked and ready for lookups.
#[derive(Debug)]
pub struct Gsym {
    data: Vec<u8>,
    /// The UUID in the header (for ELF, the build ID).
    pub uuid: Vec<u8>,
    base: u64,
    addr_off_size: usize,
    num_addrs: usize,
    addrs_at: usize,
    infos_at: usize,
    files_at: usize,
    num_files: usize,
    strtab: (usize, usize),
}

/// The UUID of the GSYM file starting with `head` (its first 48 bytes or
/// more), for matching a module without reading the whole file.
pub fn header_uuid(head: &[u8]) -> Result<Vec<u8>, GsymError> {
    let mut c = Cursor::new(head, 0, head.len());
    if c.u32("magic")? != MAGIC {
        return err(0, "not a GSYM file (bad magic)");
    }
    let version = c.bytes(2, "version")?;
    if version != [1, 0] {
        return err(
            4,
            format!(
                "GSYM version {} is not 1",
                u16::from_le_bytes([version[0], version[1]])
            ),
        );
    }
    c.u8("address offset size")?;
    let uuid_size = c.u8("UUID size")? as usize;
    if uuid_size > 20 {
        return err(7, format!("UUID size {uuid_size} is over 20"));
    }
    let mut c = Cursor::new(head, 28, head.len());
    Ok(c.bytes(uuid_size, "UUID")?.to_vec())
}

impl Gsym {
    /// Checks the header and the tables of `data`.
    pub fn parse(data: Vec<u8>) -> Result<Gsym, GsymError> {
        let uuid = header_uuid(&data)?;
        let mut c = Cursor::new(&data, 6, data.len());
        let addr_off_size = c.u8("address offset size")? as usize;
        if !matches!(addr_off_size, 1 | 2 | 4 | 8) {
            return err(6, format!("address offset size {addr_off_size}"));
        }
        c.u8("UUID size")?;
        let base = c.uint(8, "base address")?;
        let num_addrs = c.u32("number of addresses")? as usize;
        let str_off = c.u32("string table offset")? as usize;
        let str_size = c.u32("string table size")? as usize;
        if str_off.checked_add(str_size).is_none_or(|e| e > data.len()) {
            return err(
                20,
                format!(
                    "truncated: the string table ({str_off}+{str_size}) ends past the end of the file ({})",
                    data.len()
                ),
            );
        }
        let mut c = Cursor::new(&data, HEADER_SIZE, data.len());
        c.align(addr_off_size);
        let addrs_at = c.pos;
        c.bytes(num_addrs.saturating_mul(addr_off_size), "address offsets")?;
        c.align(4);
        let infos_at = c.pos;
        c.bytes(num_addrs.saturating_mul(4), "address info offsets")?;
        c.align(4);
        let num_files = c.u32("number of files")? as usize;
        let files_at = c.pos;
        c.bytes(num_files.saturating_mul(8), "file table")?;
        let g = Gsym {
            data,
            uuid,
            base,
            addr_off_size,
            num_addrs,
            addrs_at,
            infos_at,
            files_at,
            num_files,
            strtab: (str_off, str_size),
        };
        // The addresses must be sorted for the binary search to mean anything.
        let mut prev = 0;
        for i in 0..num_addrs {
            let a = g.addr_offset(i);
            if a < prev {
                return err(
                    addrs_at + i * addr_off_size,
                    "address offsets are not sorted",
                );
            }
            prev = a;
        }
        Ok(g)
    }

    fn addr_offset(&self, i: usize) -> u64 {
        let at = self.addrs_at + i * self.addr_off_size;
        let mut v = [0u8; 8];
        v[..self.addr_off_size].copy_from_slice(&self.data[at..at + self.addr_off_size]);
        u64::from_le_bytes(v)
    }

    fn info_offset(&self, i: usize) -> usize {
        let at = self.infos_at + i * 4;
        u32::from_le_bytes(self.data[at..at + 4].try_into().unwrap_or([0; 4])) as usize
    }

    fn string(&self, off: u32, at: usize) -> Result<String, GsymError> {
        let (start, size) = self.strtab;
        let off = off as usize;
        if off >= size {
            return err(at, format!("string offset {off} past the string table"));
        }
        let s = &self.data[start + off..start + size];
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        Ok(String::from_utf8_lossy(&s[..end]).into_owned())
    }

    fn file(&self, index: u64, at: usize) -> Result<Option<String>, GsymError> {
        if index == 0 {
            return Ok(None);
        }
        if index as usize >= self.num_files {
            return err(at, format!("file index {index} past the file table"));
        }
        let e = self.files_at + index as usize * 8;
        let mut c = Cursor::new(&self.data, e, self.data.len());
        let dir = c.u32("file directory")?;
        let base = c.u32("file name")?;
        let dir = self.string(dir, e)?;
        let base = self.string(base, e + 4)?;
        Ok(Some(if dir.is_empty() {
            base
        } else {
            format!("{dir}/{base}")
        }))
    }

    /// The frames at `addr` (an address as in the file), innermost first;
    /// empty when no function covers it.
    pub fn lookup(&self, addr: u64) -> Result<Vec<SymFrame>, GsymError> {
        let Some(rel) = addr.checked_sub(self.base) else {
            return Ok(Vec::new());
        };
        // The last function starting at or before addr.
        let (mut lo, mut hi) = (0, self.num_addrs);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.addr_offset(mid) <= rel {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let Some(i) = lo.checked_sub(1) else {
            return Ok(Vec::new());
        };
        let start = self.base.wrapping_add(self.addr_offset(i));
        let at = self.info_offset(i);
        if at >= self.data.len() {
            // Name the table entry that points outside the file.
            return err(
                self.infos_at + i * 4,
                format!(
                    "truncated: function info at {at} is past the end of the file ({})",
                    self.data.len()
                ),
            );
        }
        let mut c = Cursor::new(&self.data, at, self.data.len());
        let size = c.u32("function size")?;
        if addr - start >= u64::from(size).max(1) {
            return Ok(Vec::new());
        }
        let name_at = c.pos;
        let name = self.string(c.u32("function name")?, name_at)?;
        let mut row: Option<(Option<String>, u32)> = None;
        let mut inline: Option<Vec<InlineEntry>> = None;
        loop {
            let chunk_at = c.pos;
            let kind = c.u32("info type")?;
            if kind == 0 {
                break;
            }
            let len = c.u32("info length")? as usize;
            let data_at = c.pos;
            c.bytes(len, "info data")?;
            let mut d = Cursor::new(&self.data, data_at, data_at + len);
            match kind {
                1 => row = self.line_row(&mut d, start, addr)?,
                2 => {
                    let mut chain = Vec::new();
                    self.inline_chain(&mut d, start, addr, 0, &mut chain)?;
                    inline = Some(chain);
                }
                // Later versions add merged functions (3) and call sites
                // (4): neither says what an address is.
                3 | 4 => {}
                k => return err(chunk_at, format!("unknown info type {k}")),
            }
        }
        let (mut file, mut line) = row.unwrap_or((None, 0));
        let chain = inline.unwrap_or_default();
        let mut frames = Vec::new();
        // chain[0] is the function itself, the rest inlined within it,
        // outermost first.
        for e in chain.iter().skip(1).rev() {
            frames.push(SymFrame {
                function: Some(self.string(e.name, e.at)?),
                file,
                line,
                column: 0,
            });
            file = self.file(e.call_file, e.at)?;
            line = e.call_line as u32;
        }
        frames.push(SymFrame {
            function: Some(name),
            file,
            line,
            column: 0,
        });
        Ok(frames)
    }

    /// The line table's row for `addr`: the last row at or before it.
    fn line_row(
        &self,
        d: &mut Cursor<'_>,
        start: u64,
        addr: u64,
    ) -> Result<Option<(Option<String>, u32)>, GsymError> {
        let min_delta = d.sleb("line table min delta")?;
        let max_delta = d.sleb("line table max delta")?;
        let first_line = d.uleb("line table first line")?;
        let range = max_delta.wrapping_sub(min_delta).wrapping_add(1);
        if range <= 0 {
            return err(
                d.pos,
                format!("line table delta range {min_delta}..{max_delta}"),
            );
        }
        let (mut a, mut file, mut line) = (start, 1u64, first_line as i64);
        let mut found: Option<(u64, i64)> = None;
        let mut push = |a: u64, file: u64, line: i64| {
            if a <= addr {
                found = Some((file, line));
                false
            } else {
                true
            }
        };
        loop {
            let op = d.u8("line table opcode")?;
            let done = match op {
                0 => true,
                1 => {
                    file = d.uleb("file index")?;
                    false
                }
                2 => {
                    a = a.wrapping_add(d.uleb("address advance")?);
                    push(a, file, line)
                }
                3 => {
                    line = line.wrapping_add(d.sleb("line advance")?);
                    false
                }
                _ => {
                    let adj = i64::from(op - 4);
                    line = line.wrapping_add(min_delta.wrapping_add(adj % range));
                    a = a.wrapping_add((adj / range) as u64);
                    push(a, file, line)
                }
            };
            if done {
                break;
            }
        }
        match found {
            // Line 0 names no place, as in llvm-symbolizer.
            Some((_, l)) if l <= 0 => Ok(Some((None, 0))),
            Some((f, l)) => Ok(Some((
                self.file(f, d.pos)?,
                l.clamp(0, u32::MAX as i64) as u32,
            ))),
            None => Ok(None),
        }
    }

    /// Appends to `chain` the inline entries covering `addr`, outermost
    /// first, reading one entry and (when it covers addr) its children.
    /// Returns false at the empty entry that ends a list of children.
    fn inline_chain(
        &self,
        d: &mut Cursor<'_>,
        base: u64,
        addr: u64,
        depth: usize,
        chain: &mut Vec<InlineEntry>,
    ) -> Result<bool, GsymError> {
        if depth > 256 {
            return err(d.pos, "inline info nested over 256 deep");
        }
        let at = d.pos;
        let n = d.uleb("inline range count")?;
        if n == 0 {
            return Ok(false);
        }
        let mut covers = false;
        let mut first = None;
        for _ in 0..n {
            let off = d.uleb("inline range offset")?;
            let size = d.uleb("inline range size")?;
            let s = base.wrapping_add(off);
            first.get_or_insert(s);
            if s <= addr && addr - s < size {
                covers = true;
            }
        }
        let has_children = d.u8("inline has-children flag")? != 0;
        let name = d.u32("inline name")?;
        let call_file = d.uleb("inline call file")?;
        let call_line = d.uleb("inline call line")?;
        if covers {
            chain.push(InlineEntry {
                name,
                call_file,
                call_line,
                at,
            });
        }
        if has_children {
            // Children are relative to this entry's first range.
            let child_base = first.unwrap_or(base);
            // Only one child can cover addr; the others (and all children
            // of an entry that does not cover it) are read to be skipped.
            let mut found = !covers;
            let mut skipped = Vec::new();
            loop {
                let into = if found { &mut skipped } else { &mut *chain };
                if !self.inline_chain(d, child_base, addr, depth + 1, into)? {
                    break;
                }
                skipped.clear();
                if !found && chain.last().is_some_and(|e| e.at != at) {
                    found = true;
                }
            }
        }
        Ok(true)
    }
}

struct InlineEntry {
    name: u32,
    call_file: u64,
    call_line: u64,
    at: usize,
}
