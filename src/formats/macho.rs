//! Mach-O headers: what the macOS module table needs from a loaded image.
//!
//! Only 64-bit little-endian images are read (x86_64 and arm64 macOS). The
//! reader takes the bytes from the `mach_header` through the end of the
//! load commands ([`header_size`] says how many), validates every load
//! command once, and then lists segments, sections and the `LC_UUID`.
//!
//! ```
//! use stackmark::formats::macho::{self, MachO};
//! // A header with one LC_UUID command.
//! let mut h = Vec::new();
//! for w in [macho::MH_MAGIC_64, macho::CPU_TYPE_ARM64, 0, 6, 1, 24, 0, 0] {
//!     h.extend_from_slice(&w.to_le_bytes());
//! }
//! h.extend_from_slice(&macho::LC_UUID.to_le_bytes());
//! h.extend_from_slice(&24u32.to_le_bytes());
//! h.extend_from_slice(&[0xab; 16]);
//! assert_eq!(macho::header_size(&h), Some(56));
//! let m = MachO::parse(&h).unwrap();
//! assert_eq!(m.uuid(), Some([0xab; 16]));
//! assert_eq!(m.segments().count(), 0);
//! ```

use super::cursor::{u32_at, u64_at};

/// `MH_MAGIC_64`: a 64-bit Mach-O header, in the byte order of the host.
pub const MH_MAGIC_64: u32 = 0xfeed_facf;
/// `CPU_TYPE_X86_64`.
pub const CPU_TYPE_X86_64: u32 = 0x0100_0007;
/// `CPU_TYPE_ARM64`.
pub const CPU_TYPE_ARM64: u32 = 0x0100_000c;
/// `LC_SEGMENT_64`.
pub const LC_SEGMENT_64: u32 = 0x19;
/// `LC_UUID`.
pub const LC_UUID: u32 = 0x1b;
/// `VM_PROT_READ`.
pub const VM_PROT_READ: u32 = 1;
/// `VM_PROT_WRITE`.
pub const VM_PROT_WRITE: u32 = 2;
/// `VM_PROT_EXECUTE`.
pub const VM_PROT_EXECUTE: u32 = 4;

const HEADER: usize = 32;
const SEGMENT: usize = 72;
const SECTION: usize = 80;

/// Why a Mach-O header could not be read. Offsets are from the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Not `MH_MAGIC_64` in little-endian order.
    NotMachO64Le,
    /// The data ends inside a structure.
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// A load command's size is too small for its kind, or runs past the
    /// load commands.
    BadLoadCommand {
        /// Where the command starts.
        offset: usize,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::NotMachO64Le => f.write_str("not a 64-bit little-endian Mach-O header"),
            Error::Truncated { what, offset } => write!(f, "{what} at {offset:#x} is truncated"),
            Error::BadLoadCommand { offset } => {
                write!(f, "the load command at {offset:#x} has a bad size")
            }
        }
    }
}

impl std::error::Error for Error {}

/// How many bytes [`MachO::parse`] needs: the header and its load commands.
/// `None` unless `data` starts with a 64-bit little-endian header.
pub fn header_size(data: &[u8]) -> Option<usize> {
    if u32_at(data, 0)? != MH_MAGIC_64 {
        return None;
    }
    HEADER.checked_add(u32_at(data, 20)? as usize)
}

/// A validated Mach-O header and its load commands.
#[derive(Clone, Copy, Debug)]
pub struct MachO<'a> {
    data: &'a [u8],
    ncmds: usize,
}

/// One `LC_SEGMENT_64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    name: [u8; 16],
    /// Link-time address.
    pub vmaddr: u64,
    /// Size in memory.
    pub vmsize: u64,
    /// Offset of its contents in the file.
    pub fileoff: u64,
    /// Size of its contents in the file.
    pub filesize: u64,
    /// Initial protection: `VM_PROT_READ`, `VM_PROT_WRITE`,
    /// `VM_PROT_EXECUTE`.
    pub initprot: u32,
}

impl Segment {
    /// The name, without its NUL padding (`__TEXT`).
    pub fn name(&self) -> &[u8] {
        trim(&self.name)
    }
}

/// One section of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section {
    /// Link-time address.
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Offset of its contents in the file (0 for zero-fill sections).
    pub offset: u32,
}

fn trim(name: &[u8; 16]) -> &[u8] {
    let n = name.iter().position(|&b| b == 0).unwrap_or(16);
    &name[..n]
}

fn name_at(data: &[u8], off: usize) -> [u8; 16] {
    let mut n = [0u8; 16];
    if let Some(b) = data.get(off..off + 16) {
        n.copy_from_slice(b);
    }
    n
}

impl<'a> MachO<'a> {
    /// Validates the header and every load command.
    pub fn parse(data: &'a [u8]) -> Result<MachO<'a>, Error> {
        let truncated = Error::Truncated {
            what: "header",
            offset: 0,
        };
        match u32_at(data, 0) {
            None => return Err(truncated),
            Some(m) if m != MH_MAGIC_64 => return Err(Error::NotMachO64Le),
            Some(_) => {}
        }
        if data.len() < HEADER {
            return Err(truncated);
        }
        let end = header_size(data).ok_or(truncated)?;
        let data = data.get(..end).ok_or(Error::Truncated {
            what: "load commands",
            offset: HEADER,
        })?;
        let ncmds = u32_at(data, 16).unwrap_or(0) as usize;
        let mut at = HEADER;
        for _ in 0..ncmds {
            let (cmd, size) = match (u32_at(data, at), u32_at(data, at + 4)) {
                (Some(c), Some(s)) => (c, s as usize),
                _ => {
                    return Err(Error::Truncated {
                        what: "load command",
                        offset: at,
                    })
                }
            };
            let need = match cmd {
                LC_SEGMENT_64 => {
                    let nsects = u32_at(data, at + 64).ok_or(Error::Truncated {
                        what: "segment command",
                        offset: at,
                    })?;
                    (nsects as usize)
                        .checked_mul(SECTION)
                        .and_then(|s| s.checked_add(SEGMENT))
                        .ok_or(Error::BadLoadCommand { offset: at })?
                }
                LC_UUID => 24,
                _ => 8,
            };
            let next = at
                .checked_add(size)
                .filter(|&n| size >= need && n <= data.len())
                .ok_or(Error::BadLoadCommand { offset: at })?;
            at = next;
        }
        Ok(MachO { data, ncmds })
    }

    /// The CPU type (`CPU_TYPE_X86_64`, `CPU_TYPE_ARM64`).
    pub fn cpu_type(&self) -> u32 {
        u32_at(self.data, 4).unwrap_or(0)
    }

    /// Every load command as `(cmd, offset)`; all were bounds-checked by
    /// [`MachO::parse`].
    fn commands(&self) -> impl Iterator<Item = (u32, usize)> + 'a {
        let data = self.data;
        let mut at = HEADER;
        (0..self.ncmds).map_while(move |_| {
            let cmd = u32_at(data, at)?;
            let here = at;
            at += u32_at(data, at + 4)? as usize;
            Some((cmd, here))
        })
    }

    /// The `LC_SEGMENT_64` commands, in order.
    pub fn segments(&self) -> impl Iterator<Item = Segment> + 'a {
        let data = self.data;
        self.commands()
            .filter(|&(cmd, _)| cmd == LC_SEGMENT_64)
            .filter_map(move |(_, at)| {
                Some(Segment {
                    name: name_at(data, at + 8),
                    vmaddr: u64_at(data, at + 24)?,
                    vmsize: u64_at(data, at + 32)?,
                    fileoff: u64_at(data, at + 40)?,
                    filesize: u64_at(data, at + 48)?,
                    initprot: u32_at(data, at + 60)?,
                })
            })
    }

    /// The slide of this image when its `mach_header` is loaded at `mh`:
    /// `mh` less the link-time address of `__TEXT`, which starts at the
    /// header. `None` without a `__TEXT` segment.
    pub fn slide_at(&self, mh: u64) -> Option<u64> {
        let text = self.segments().find(|s| s.name() == b"__TEXT")?;
        Some(mh.wrapping_sub(text.vmaddr))
    }

    /// The section `sectname` of segment `segname` (`__TEXT`,
    /// `__unwind_info`), if there is one.
    pub fn section(&self, segname: &[u8], sectname: &[u8]) -> Option<Section> {
        let data = self.data;
        self.commands()
            .filter(|&(cmd, _)| cmd == LC_SEGMENT_64)
            .find_map(|(_, at)| {
                let nsects = u32_at(data, at + 64)? as usize;
                (0..nsects).find_map(|i| {
                    let s = at + SEGMENT + i * SECTION;
                    (trim(&name_at(data, s)) == sectname
                        && trim(&name_at(data, s + 16)) == segname)
                        .then_some(())?;
                    Some(Section {
                        addr: u64_at(data, s + 32)?,
                        size: u64_at(data, s + 40)?,
                        offset: u32_at(data, s + 48)?,
                    })
                })
            })
    }

    /// The image's UUID (`LC_UUID`).
    pub fn uuid(&self) -> Option<[u8; 16]> {
        let (_, at) = self.commands().find(|&(cmd, _)| cmd == LC_UUID)?;
        let mut id = [0u8; 16];
        id.copy_from_slice(self.data.get(at + 8..at + 24)?);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(cmds: &[u8], ncmds: u32) -> Vec<u8> {
        let mut h = Vec::new();
        for w in [
            MH_MAGIC_64,
            CPU_TYPE_X86_64,
            3,
            6,
            ncmds,
            cmds.len() as u32,
            0,
            0,
        ] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        h.extend_from_slice(cmds);
        h
    }

    #[test]
    fn malformed_headers_give_typed_errors() {
        assert_eq!(
            MachO::parse(&[0xcf, 0xfa]).unwrap_err(),
            Error::Truncated {
                what: "header",
                offset: 0
            }
        );
        assert_eq!(MachO::parse(&[0; 64]).unwrap_err(), Error::NotMachO64Le);
        // sizeofcmds runs past the data.
        let mut h = header(&[], 0);
        h[20] = 8;
        assert!(matches!(MachO::parse(&h), Err(Error::Truncated { .. })));
        // A command whose size is 0 would loop forever; one too short for
        // its segment's sections would read past it.
        let mut cmd = Vec::new();
        cmd.extend_from_slice(&LC_UUID.to_le_bytes());
        cmd.extend_from_slice(&0u32.to_le_bytes());
        cmd.extend_from_slice(&[0; 16]);
        assert_eq!(
            MachO::parse(&header(&cmd, 1)).unwrap_err(),
            Error::BadLoadCommand { offset: 32 }
        );
        let mut seg = vec![0u8; SEGMENT];
        seg[..4].copy_from_slice(&LC_SEGMENT_64.to_le_bytes());
        seg[4..8].copy_from_slice(&(SEGMENT as u32).to_le_bytes());
        seg[64..68].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            MachO::parse(&header(&seg, 1)).unwrap_err(),
            Error::BadLoadCommand { offset: 32 }
        );
        // More commands announced than present.
        assert!(matches!(
            MachO::parse(&header(&[], 2)),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn every_prefix_of_a_header_is_an_error_not_a_panic() {
        let mut seg = vec![0u8; SEGMENT + SECTION];
        seg[..4].copy_from_slice(&LC_SEGMENT_64.to_le_bytes());
        seg[4..8].copy_from_slice(&((SEGMENT + SECTION) as u32).to_le_bytes());
        seg[8..14].copy_from_slice(b"__TEXT");
        seg[64..68].copy_from_slice(&1u32.to_le_bytes());
        seg[SEGMENT..SEGMENT + 13].copy_from_slice(b"__unwind_info");
        seg[SEGMENT + 16..SEGMENT + 22].copy_from_slice(b"__TEXT");
        let h = header(&seg, 1);
        let m = MachO::parse(&h).unwrap();
        assert_eq!(m.segments().next().unwrap().name(), b"__TEXT");
        assert!(m.section(b"__TEXT", b"__unwind_info").is_some());
        for n in 0..h.len() {
            assert!(MachO::parse(&h[..n]).is_err(), "{n}");
        }
    }
}
