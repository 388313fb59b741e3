//! ELF notes, program and section headers: what the module table needs.
//!
//! Only 64-bit little-endian ELF is read (x86_64 and AArch64 Linux).
//!
//! ```
//! use stackmark::formats::elf;
//! // A note: namesz=4, descsz=2, type=3 (NT_GNU_BUILD_ID), "GNU\0", desc, padding.
//! let note = [4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, b'G', b'N', b'U', 0, 0xab, 0xcd, 0, 0];
//! assert_eq!(elf::gnu_build_id(&note, 4), Some(&[0xab, 0xcd][..]));
//! ```

use super::cursor::{u16_at, u32_at, u64_at, Cursor};

/// `PT_LOAD`.
pub const PT_LOAD: u32 = 1;
/// `PT_NOTE`.
pub const PT_NOTE: u32 = 4;
/// `PT_DYNAMIC`.
pub const PT_DYNAMIC: u32 = 2;
/// `PT_GNU_EH_FRAME`.
pub const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
/// `PT_GNU_SFRAME`: the merged `.sframe` section made by GNU ld.
pub const PT_GNU_SFRAME: u32 = 0x6474_e554;
/// Segment flag: executable.
pub const PF_X: u32 = 1;
/// Segment flag: writable.
pub const PF_W: u32 = 2;
/// Segment flag: readable.
pub const PF_R: u32 = 4;
/// Section flag: occupies memory at run time.
pub const SHF_ALLOC: u64 = 2;
/// The most padding [`ElfFile::sframe_extent`] accepts between two SFrame
/// sections of one run: alignment padding, which linkers fill with zeros.
pub const SFRAME_GAP: u64 = 64;
/// `NT_GNU_BUILD_ID`.
pub const NT_GNU_BUILD_ID: u32 = 3;

/// Why an ELF file could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The file does not start with `\x7fELF`, or is not 64-bit little-endian.
    NotElf64Le,
    /// A header or table lies (partly) outside the file.
    OutOfBounds(&'static str),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::NotElf64Le => f.write_str("not a 64-bit little-endian ELF file"),
            Error::OutOfBounds(what) => write!(f, "ELF {what} lies outside the file"),
        }
    }
}

impl std::error::Error for Error {}

/// A program header (`Elf64_Phdr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramHeader {
    /// `p_type`.
    pub p_type: u32,
    /// `p_flags` (`PF_R`, `PF_W`, `PF_X`).
    pub flags: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_align` (a `PT_NOTE`'s says how its notes are padded).
    pub align: u64,
}

/// What the walk needs from a dynamic section (`PT_DYNAMIC`): which
/// libraries the object depends on and whether it may ever be unloaded.
/// String values are offsets into the string table at `strtab`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dynamic {
    /// `DT_STRTAB`: the string table's address, as stored (the loader may
    /// have relocated it in memory).
    pub strtab: Option<u64>,
    /// `DT_SONAME`: the object's own name.
    pub soname: Option<u64>,
    needed: [u64; MAX_NEEDED],
    needed_count: usize,
    /// `DT_FLAGS_1` has `DF_1_NODELETE`: the loader never unloads it.
    pub nodelete: bool,
}

/// The most `DT_NEEDED` entries [`Dynamic`] keeps; later ones are dropped.
pub const MAX_NEEDED: usize = 32;

const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
const DF_1_NODELETE: u64 = 8;

impl Dynamic {
    /// Reads the `Elf64_Dyn` entries of `data` up to `DT_NULL` (or its
    /// end).
    pub fn parse(data: &[u8]) -> Dynamic {
        let mut d = Dynamic {
            strtab: None,
            soname: None,
            needed: [0; MAX_NEEDED],
            needed_count: 0,
            nodelete: false,
        };
        let mut c = Cursor::new(data);
        while let (Some(tag), Some(val)) = (c.u64(), c.u64()) {
            match tag {
                DT_NULL => break,
                DT_NEEDED if d.needed_count < MAX_NEEDED => {
                    d.needed[d.needed_count] = val;
                    d.needed_count += 1;
                }
                DT_STRTAB => d.strtab = Some(val),
                DT_SONAME => d.soname = Some(val),
                DT_FLAGS_1 => d.nodelete = val & DF_1_NODELETE != 0,
                _ => {}
            }
        }
        d
    }

    /// The `DT_NEEDED` string offsets, in order.
    pub fn needed(&self) -> &[u64] {
        &self.needed[..self.needed_count]
    }
}

/// Size of one `Elf64_Phdr`.
pub const PHDR_SIZE: usize = 56;

impl ProgramHeader {
    /// Parses one `Elf64_Phdr` from its 56 bytes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let mut c = Cursor::new(b);
        let p_type = c.u32()?;
        let flags = c.u32()?;
        let offset = c.u64()?;
        let vaddr = c.u64()?;
        let _paddr = c.u64()?;
        let filesz = c.u64()?;
        let memsz = c.u64()?;
        let align = c.u64()?;
        Some(ProgramHeader {
            p_type,
            flags,
            offset,
            vaddr,
            filesz,
            memsz,
            align,
        })
    }
}

/// A section header (`Elf64_Shdr`) with its name resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section<'a> {
    /// The section name.
    pub name: &'a [u8],
    /// `sh_type`.
    pub sh_type: u32,
    /// `sh_flags`.
    pub flags: u64,
    /// `sh_addr`: the link-time address.
    pub addr: u64,
    /// `sh_offset`: where the contents are in the file.
    pub offset: u64,
    /// `sh_size`.
    pub size: u64,
}

/// A validated view of a whole ELF file's headers.
#[derive(Clone, Copy, Debug)]
pub struct ElfFile<'a> {
    data: &'a [u8],
    phoff: usize,
    phnum: usize,
    shoff: usize,
    shnum: usize,
    shstrndx: usize,
}

const SHDR_SIZE: usize = 64;

/// Where the ELF header holds `e_shoff`, the section header table's offset.
pub const E_SHOFF_AT: usize = 40;

fn table(
    off: u64,
    num: u64,
    size: usize,
    len: usize,
    what: &'static str,
) -> Result<(usize, usize), Error> {
    let off = usize::try_from(off).map_err(|_| Error::OutOfBounds(what))?;
    let num = usize::try_from(num).map_err(|_| Error::OutOfBounds(what))?;
    let end = num
        .checked_mul(size)
        .and_then(|n| n.checked_add(off))
        .ok_or(Error::OutOfBounds(what))?;
    if end > len {
        return Err(Error::OutOfBounds(what));
    }
    Ok((off, num))
}

/// `e_shstrndx` when the index does not fit: the real one is section 0's
/// `sh_link`.
const SHN_XINDEX: u16 = 0xffff;

impl<'a> ElfFile<'a> {
    /// Checks the identification and that both header tables lie in `data`.
    pub fn parse(data: &'a [u8]) -> Result<Self, Error> {
        if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
            return Err(Error::NotElf64Le);
        }
        let field = |off| u16_at(data, off).ok_or(Error::NotElf64Le);
        let (phoff, phnum) = table(
            u64_at(data, 32).ok_or(Error::NotElf64Le)?,
            u64::from(field(56)?),
            PHDR_SIZE,
            data.len(),
            "program header table",
        )?;
        // Extended numbering (65,280 sections or more): the count and the
        // name table's index are kept in section 0 (`sh_size`, `sh_link`).
        let e_shoff = u64_at(data, E_SHOFF_AT).ok_or(Error::NotElf64Le)?;
        let (e_shnum, e_shstrndx) = (field(60)?, field(62)?);
        let section0 = |field_at: usize| -> Result<&[u8], Error> {
            usize::try_from(e_shoff)
                .ok()
                .and_then(|o| data.get(o..o.checked_add(SHDR_SIZE)?))
                .map(|h| &h[field_at..])
                .ok_or(Error::OutOfBounds("section header table"))
        };
        let shnum = match e_shnum {
            0 if e_shoff != 0 => u64_at(section0(32)?, 0).ok_or(Error::NotElf64Le)?,
            n => u64::from(n),
        };
        let shstrndx = match e_shstrndx {
            SHN_XINDEX => u64::from(u32_at(section0(40)?, 0).ok_or(Error::NotElf64Le)?),
            n => u64::from(n),
        };
        let (shoff, shnum) = table(
            e_shoff,
            shnum,
            SHDR_SIZE,
            data.len(),
            "section header table",
        )?;
        Ok(ElfFile {
            data,
            phoff,
            phnum,
            shoff,
            shnum,
            shstrndx: usize::try_from(shstrndx).unwrap_or(usize::MAX),
        })
    }

    /// The program headers.
    pub fn program_headers(&self) -> impl Iterator<Item = ProgramHeader> + 'a {
        let (data, off) = (self.data, self.phoff);
        (0..self.phnum).filter_map(move |i| {
            ProgramHeader::parse(data.get(off + i * PHDR_SIZE..off + (i + 1) * PHDR_SIZE)?)
        })
    }

    /// Where the section header table lies in the data: offset and length.
    pub fn section_headers_at(&self) -> (u64, u64) {
        (self.shoff as u64, (self.shnum * SHDR_SIZE) as u64)
    }

    /// Where the section-name string table lies in the data, as its header
    /// says (offset and length; not checked against the data).
    pub fn section_names_at(&self) -> Option<(u64, u64)> {
        self.raw_section(self.shstrndx)
            .filter(|_| self.shstrndx < self.shnum)
            .map(|(_, _, _, _, off, size)| (off, size))
    }

    fn raw_section(&self, i: usize) -> Option<(u32, u32, u64, u64, u64, u64)> {
        let b = self.data.get(self.shoff + i * SHDR_SIZE..)?;
        let mut c = Cursor::new(b);
        let name = c.u32()?;
        let sh_type = c.u32()?;
        let flags = c.u64()?;
        let addr = c.u64()?;
        let offset = c.u64()?;
        let size = c.u64()?;
        Some((name, sh_type, flags, addr, offset, size))
    }

    /// The section headers, with names from the section-name string table
    /// (an unreadable name is empty).
    pub fn sections(&self) -> impl Iterator<Item = Section<'a>> + '_ {
        let strtab = self
            .section_names_at()
            .and_then(|(off, size)| {
                let off = usize::try_from(off).ok()?;
                self.data
                    .get(off..off.checked_add(usize::try_from(size).ok()?)?)
            })
            .unwrap_or(&[]);
        (0..self.shnum).filter_map(move |i| {
            let (name, sh_type, flags, addr, offset, size) = self.raw_section(i)?;
            let name = strtab
                .get(name as usize..)
                .map(|s| &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())])
                .unwrap_or(&[]);
            Some(Section {
                name,
                sh_type,
                flags,
                addr,
                offset,
                size,
            })
        })
    }

    /// The first section called `name`.
    pub fn section_by_name(&self, name: &[u8]) -> Option<Section<'a>> {
        self.sections().find(|s| s.name == name)
    }

    /// Where the SFrame data is at link time: the allocated section
    /// `.sframe` together with any allocated `.sframe.*` sections laid
    /// next to it (at most [`SFRAME_GAP`] bytes of padding apart), as one
    /// `(address, size)` run. lld cannot put GNU as's `SHT_PROGBITS`
    /// pieces and LLVM's `SHT_GNU_SFRAME` ones into one output section, so
    /// stackmark's linker script routes the first kind to `.sframe.c`,
    /// just before `.sframe`. Without a `.sframe`, the first `.sframe.*`
    /// section starts the run.
    pub fn sframe_extent(&self) -> Option<(u64, u64)> {
        let is_sframe = |s: &Section<'_>| {
            s.flags & SHF_ALLOC != 0
                && s.size != 0
                && s.sh_type != 8
                && (s.name == b".sframe" || s.name.starts_with(b".sframe."))
        };
        let first = self
            .section_by_name(b".sframe")
            .filter(is_sframe)
            .or_else(|| self.sections().find(is_sframe))?;
        let (mut lo, mut hi) = (first.addr, first.addr.checked_add(first.size)?);
        // Grow the run by any neighbour until none is left: a handful of
        // sections, so the repeated passes cost nothing.
        loop {
            let before = (lo, hi);
            for s in self.sections().filter(is_sframe) {
                let Some(end) = s.addr.checked_add(s.size) else {
                    continue;
                };
                if end <= lo && lo - end <= SFRAME_GAP {
                    lo = s.addr;
                } else if s.addr >= hi && s.addr - hi <= SFRAME_GAP {
                    hi = end;
                }
            }
            if (lo, hi) == before {
                return Some((lo, hi - lo));
            }
        }
    }

    /// The file contents of a section (`None` for `SHT_NOBITS` or out of bounds).
    pub fn section_data(&self, s: &Section<'_>) -> Option<&'a [u8]> {
        if s.sh_type == 8 {
            return None;
        }
        let off = usize::try_from(s.offset).ok()?;
        self.data
            .get(off..off.checked_add(usize::try_from(s.size).ok()?)?)
    }
}

/// Finds the `NT_GNU_BUILD_ID` descriptor in a run of ELF notes (the
/// contents of a `PT_NOTE` segment or `SHT_NOTE` section). `align` is the
/// segment's or section's alignment: notes are padded to 8 bytes where it
/// is 8, else to 4 (as `readelf -n` reads them).
pub fn gnu_build_id(notes: &[u8], align: u64) -> Option<&[u8]> {
    let mask = if align == 8 { 7 } else { 3 };
    let pad = |n: usize| n.checked_add(mask).map(|n| n & !mask);
    let mut off = 0usize;
    while off < notes.len() {
        let namesz = u32_at(notes, off)? as usize;
        let descsz = u32_at(notes, off + 4)? as usize;
        let ntype = u32_at(notes, off + 8)?;
        let name_off = off + 12;
        let desc_off = pad(name_off.checked_add(namesz)?)?;
        let next = pad(desc_off.checked_add(descsz)?)?;
        let name = notes.get(name_off..name_off.checked_add(namesz)?)?;
        if ntype == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return notes.get(desc_off..desc_off.checked_add(descsz)?);
        }
        off = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 file of section headers only: `(name, type, addr, size,
    /// link)` each, names from the table at index `strndx` (which holds
    /// `names`). With `extended`, the count and that index are kept in
    /// section 0, as for 65,280 sections or more.
    fn with_sections(names: &[u8], sections: &[(u32, u32, u64, u64)], extended: bool) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        f[58..60].copy_from_slice(&64u16.to_le_bytes());
        let strtab_off = f.len() as u64;
        f.extend_from_slice(names);
        f.resize(f.len().next_multiple_of(8), 0);
        let shoff = f.len() as u64;
        let count = sections.len() as u64 + 2;
        let strndx = count - 1;
        f[40..48].copy_from_slice(&shoff.to_le_bytes());
        if extended {
            f[62..64].copy_from_slice(&SHN_XINDEX.to_le_bytes());
        } else {
            f[60..62].copy_from_slice(&(count as u16).to_le_bytes());
            f[62..64].copy_from_slice(&(strndx as u16).to_le_bytes());
        }
        let mut header = |name: u32, ty: u32, addr: u64, off: u64, size: u64, link: u32| {
            let mut h = [0u8; 64];
            h[0..4].copy_from_slice(&name.to_le_bytes());
            h[4..8].copy_from_slice(&ty.to_le_bytes());
            h[16..24].copy_from_slice(&addr.to_le_bytes());
            h[24..32].copy_from_slice(&off.to_le_bytes());
            h[32..40].copy_from_slice(&size.to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            f.extend_from_slice(&h);
        };
        if extended {
            header(0, 0, 0, 0, count, strndx as u32);
        } else {
            header(0, 0, 0, 0, 0, 0);
        }
        for &(name, ty, addr, size) in sections {
            header(name, ty, addr, 0, size, 0);
        }
        header(15, 3, 0, strtab_off, names.len() as u64, 0);
        f
    }

    #[test]
    fn extended_section_numbering_finds_the_count_and_the_name_table_in_section_0() {
        use object::{Object, ObjectSection};
        let names = b"\0.text\0.sframe\0.shstrtab\0";
        let sections = [(1, 1, 0x1000, 0x10), (7, 1, 0x2000, 0x40)];
        for extended in [false, true] {
            let f = with_sections(names, &sections, extended);
            let oracle = object::File::parse(&*f).unwrap();
            let want = oracle.section_by_name(".sframe").unwrap();
            let elf = ElfFile::parse(&f).unwrap();
            let got: Vec<&[u8]> = elf.sections().map(|s| s.name).collect();
            assert_eq!(
                got,
                [&b""[..], b".text", b".sframe", b".shstrtab"],
                "{extended}"
            );
            let s = elf.section_by_name(b".sframe").unwrap();
            assert_eq!((s.addr, s.size), (want.address(), want.size()));
        }
        // Extended numbering with no section 0 in the file: an error, not
        // a read past the end.
        let mut f = with_sections(names, &sections, true);
        f.truncate(f.len() - 4 * 64 + 10);
        assert!(ElfFile::parse(&f).is_err());
    }

    /// Notes as `readelf -n` lays them out with alignment `align`.
    fn notes(align: usize, list: &[(&[u8], u32, &[u8])]) -> Vec<u8> {
        let mut n = Vec::new();
        for &(name, ty, desc) in list {
            for w in [name.len() as u32, desc.len() as u32, ty] {
                n.extend_from_slice(&w.to_le_bytes());
            }
            n.extend_from_slice(name);
            n.resize(n.len().next_multiple_of(align), 0);
            n.extend_from_slice(desc);
            n.resize(n.len().next_multiple_of(align), 0);
        }
        n
    }

    #[test]
    fn notes_are_padded_as_their_segments_alignment_says() {
        use object::elf::FileHeader64;
        use object::read::elf::NoteIterator;
        use object::LittleEndian as LE;
        let id = [0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4];
        // A note whose name (6 bytes) and descriptor (4) pad differently
        // to 4 and to 8, then the build ID.
        let list: [(&[u8], u32, &[u8]); 2] =
            [(b"Linux\0", 0x100, &[1, 2, 3, 4]), (b"GNU\0", 3, &id)];
        for align in [4, 8] {
            let n = notes(align, &list);
            let oracle: Vec<Vec<u8>> =
                NoteIterator::<FileHeader64<LE>>::new(LE, align as u64, &n[..])
                    .unwrap()
                    .map(|note| note.unwrap().desc().to_vec())
                    .collect();
            assert_eq!(oracle[1], id, "the layout is readelf's");
            assert_eq!(gnu_build_id(&n, align as u64), Some(&id[..]), "{align}");
        }
        // A segment alignment of 0 or 1 means 4.
        assert_eq!(gnu_build_id(&notes(4, &list), 1), Some(&id[..]));
    }
}
