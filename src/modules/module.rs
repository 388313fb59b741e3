//! One module: its segments, name, build ID and unwind tables.

use crate::formats::cfi::Cfi;
use crate::formats::compact_unwind::UnwindInfo;
use crate::formats::elf::{PF_R, PF_W, PF_X};
use crate::formats::sframe::SFrame;

/// Most `PT_LOAD` segments kept per module; further segments are left out,
/// data before code ([`Module::push_segment`]).
pub const MAX_SEGMENTS: usize = 8;
/// Longest module path kept, in bytes; longer paths keep their tail.
pub const MAX_NAME: usize = 192;
/// Longest build ID kept, in bytes (GNU build IDs are 20).
pub const MAX_BUILD_ID: usize = 32;

/// One loaded segment of a module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Runtime address of the segment's first byte (`bias + p_vaddr`).
    pub start: u64,
    /// `p_memsz`.
    pub size: u64,
    /// `p_vaddr`: the address the file links the segment at.
    pub vaddr: u64,
    /// `p_flags`: `PF_R`, `PF_W`, `PF_X`.
    pub flags: u32,
}

impl Segment {
    /// Whether `addr` lies in the segment.
    pub fn contains(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.start) < self.size
    }
    /// Readable?
    pub fn readable(&self) -> bool {
        self.flags & PF_R != 0
    }
    /// Writable?
    pub fn writable(&self) -> bool {
        self.flags & PF_W != 0
    }
    /// Executable?
    pub fn executable(&self) -> bool {
        self.flags & PF_X != 0
    }
}

/// One loaded object: the main program, a shared library, the vDSO.
///
/// Neither `Clone` nor `Copy`: a module in the live table refers to unwind
/// data the table owns and frees once no walk holds the table, so it is
/// only ever lent, for as long as the table's guard lives. A copy kept past
/// that would read freed memory, and would carry [`Module::pinned`] to
/// segments nobody vouched for.
///
/// ```compile_fail
/// let table = stackmark::modules::current().unwrap();
/// let copy: stackmark::modules::Module = table.modules()[0];
/// ```
///
/// ```compile_fail
/// let table = stackmark::modules::current().unwrap();
/// let sframe = table.modules()[0].sframe();
/// drop(table);
/// let _ = sframe.map(|s| s.piece_count());
/// ```
///
/// ```
/// # stackmark::init().unwrap();
/// let table = stackmark::modules::current().unwrap();
/// let sframe = table.modules()[0].sframe();
/// let _ = sframe.map(|s| s.piece_count());
/// drop(table);
/// ```
#[derive(Debug)]
pub struct Module {
    name: [u8; MAX_NAME],
    name_len: u16,
    /// Load bias: runtime address minus link-time address.
    pub bias: u64,
    segments: [Segment; MAX_SEGMENTS],
    segment_count: u8,
    build_id: [u8; MAX_BUILD_ID],
    build_id_len: u8,
    /// The module's SFrame section (a copy owned by the table), if any.
    pub(crate) sframe: Option<SFrame<'static>>,
    /// The module's Apple compact unwind section (a copy owned by the
    /// table) and the runtime address of its `mach_header`, from which the
    /// section's function offsets count.
    pub(crate) compact: Option<(UnwindInfo<'static>, u64)>,
    /// Where the table's copy of the unwind data lives (for freeing): the
    /// SFrame section on Linux, `__unwind_info` on macOS.
    pub(crate) sframe_copy: (usize, usize),
    /// The module's DWARF CFI (`.eh_frame_hdr` and `.eh_frame`): read in
    /// place for a module mapped for good, else a copy the table owns.
    pub(crate) cfi: Option<Cfi<'static>>,
    /// Where the table's copy of the CFI lives, `(0, 0)` when it is read
    /// in place or absent.
    pub(crate) cfi_copy: (usize, usize),
    /// Lowest and highest executable addresses, for quick rejection.
    pub(super) text: (u64, u64),
    /// How many segments are executable: with one, `text` is that segment.
    code_count: u8,
    /// The module can never be unloaded.
    pinned: bool,
    /// Its code is mapped from no file (the vDSO), from one the kernel
    /// keeps from being written while it runs (the main program), or from
    /// one a checked read itself runs code from: no truncation of it can
    /// make a direct read fault where a checked read would not.
    fixed: bool,
    /// An executable segment lacks `PF_R` (execute-only code): its code is
    /// read only through checked reads, even when pinned.
    pub(super) exec_only: bool,
}

/// Tests build tables from the same modules more than once.
#[cfg(test)]
impl Clone for Module {
    fn clone(&self) -> Module {
        self.duplicate()
    }
}

impl Module {
    /// A copy for a table built from the one holding this module (macOS
    /// carries modules over). Crate-internal: the copy shares the unwind
    /// data the old table owns, which only the tables' own release rules
    /// ([`Table::push_or_release`], [`Table::shares_copy`]) keep alive.
    #[cfg(any(test, target_os = "macos"))]
    pub(crate) fn duplicate(&self) -> Module {
        // SAFETY: every field is `Copy` (the unwind data are borrowed
        // views), so a bitwise copy is a valid module.
        unsafe { core::ptr::read(self) }
    }

    /// An empty module.
    pub const EMPTY: Module = Module {
        name: [0; MAX_NAME],
        name_len: 0,
        bias: 0,
        segments: [Segment {
            start: 0,
            size: 0,
            vaddr: 0,
            flags: 0,
        }; MAX_SEGMENTS],
        segment_count: 0,
        build_id: [0; MAX_BUILD_ID],
        build_id_len: 0,
        sframe: None,
        compact: None,
        sframe_copy: (0, 0),
        cfi: None,
        cfi_copy: (0, 0),
        text: (u64::MAX, 0),
        code_count: 0,
        pinned: false,
        fixed: false,
        exec_only: false,
    };

    /// The module's path (its tail, if it was longer than [`MAX_NAME`]).
    pub fn name(&self) -> &[u8] {
        &self.name[..self.name_len as usize]
    }

    /// Sets the name, keeping the tail of an over-long path.
    pub fn set_name(&mut self, name: &[u8]) {
        let tail = &name[name.len().saturating_sub(MAX_NAME)..];
        self.name[..tail.len()].copy_from_slice(tail);
        self.name_len = tail.len() as u16;
    }

    /// The GNU build ID (empty if the module has none).
    pub fn build_id(&self) -> &[u8] {
        &self.build_id[..self.build_id_len as usize]
    }

    /// Sets the build ID; one longer than [`MAX_BUILD_ID`] is not kept (the
    /// module then has none, and the markup gives its frames as module plus
    /// offset).
    pub fn set_build_id(&mut self, id: &[u8]) {
        // A shortened ID would name no file: keep none instead.
        let n = if id.len() > MAX_BUILD_ID { 0 } else { id.len() };
        self.build_id[..n].copy_from_slice(&id[..n]);
        self.build_id_len = n as u8;
    }

    /// The module's SFrame section (in the live table, the table's copy),
    /// if any, lent for as long as the module is.
    pub fn sframe(&self) -> Option<SFrame<'_>> {
        self.sframe
    }

    /// Gives the module an SFrame section (for a table built by hand).
    pub fn set_sframe(&mut self, sframe: Option<SFrame<'static>>) {
        self.sframe = sframe;
    }

    /// The module's Apple compact unwind section (in the live table, the
    /// table's copy) and the runtime address of its `mach_header`, from
    /// which the section's function offsets count; lent for as long as the
    /// module is.
    pub fn compact(&self) -> Option<(UnwindInfo<'_>, u64)> {
        self.compact
    }

    /// Gives the module an Apple compact unwind section and the address of
    /// its `mach_header` (for a table built by hand).
    pub fn set_compact(&mut self, compact: Option<(UnwindInfo<'static>, u64)>) {
        self.compact = compact;
    }

    /// The module's DWARF CFI, if any, lent for as long as the module is.
    pub fn cfi(&self) -> Option<Cfi<'_>> {
        self.cfi
    }

    /// Gives the module DWARF CFI (for a table built by hand).
    pub fn set_cfi(&mut self, cfi: Option<Cfi<'static>>) {
        self.cfi = cfi;
    }

    /// The bytes of CFI the table copied for this module (0 where it reads
    /// the module's own, or has none).
    pub fn cfi_copy_bytes(&self) -> usize {
        self.cfi_copy.1
    }

    /// The mappings the table made for this module's unwind data, `(0, 0)`
    /// for none.
    pub(crate) fn copies(&self) -> [(usize, usize); 2] {
        [self.sframe_copy, self.cfi_copy]
    }

    /// The loaded segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments[..self.segment_count as usize]
    }

    /// Adds a segment; returns `false` (and keeps nothing) when full. A
    /// full module still takes an executable segment, in place of the last
    /// non-executable one it holds: walks and symbolizing need the code.
    pub fn push_segment(&mut self, s: Segment) -> bool {
        if self.segment_count as usize == MAX_SEGMENTS {
            let data = self.segments.iter().rposition(|k| !k.executable());
            let Some(i) = data.filter(|_| s.executable()) else {
                return false;
            };
            self.segments.copy_within(i + 1.., i);
            self.segment_count -= 1;
        }
        let n = self.segment_count as usize;
        self.segments[n] = s;
        self.segment_count += 1;
        if s.executable() {
            self.code_count += 1;
            self.exec_only |= !s.readable();
            self.text.0 = self.text.0.min(s.start);
            self.text.1 = self.text.1.max(s.start.saturating_add(s.size));
        }
        true
    }

    /// Whether `addr` lies in an executable segment.
    pub fn is_code(&self, addr: u64) -> bool {
        self.code_segment(addr).is_some()
    }

    /// Whether the module can never be unloaded (the main program, the
    /// dynamic linker, the vDSO, what they depend on, `DF_1_NODELETE`
    /// objects): what the walk learns from its code holds until the next
    /// refresh.
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// Whether the walk reads the module's code directly, without a checked
    /// read's system call: a pinned module whose code is readable and comes
    /// from the main program, whose file the kernel keeps from being written
    /// while it runs, from the vDSO, which has no file, or from the modules
    /// holding the code a checked read runs (stackmark's and the C
    /// library's), which a truncation would fault in the checked read
    /// itself. Any other library's file can be truncated under its mapping
    /// (`cp` over it), and a direct read of a page past its new end would
    /// raise SIGBUS, pinned or not.
    pub fn read_directly(&self) -> bool {
        self.mapped_for_good() && !self.exec_only
    }

    /// Never unloaded, and its file cannot be cut short under it: every
    /// readable segment may be read directly.
    pub(super) fn mapped_for_good(&self) -> bool {
        self.pinned && self.fixed
    }

    /// Marks the module as one that can never be unloaded ([`Module::pinned`]).
    /// Only the module discovery, which knows, may say so.
    #[cfg(target_os = "linux")]
    pub(crate) fn pin(&mut self) {
        self.pinned = true;
    }

    /// Marks the module's code as mapped from a file nothing may write, or
    /// from none ([`Module::read_directly`]). Only the module discovery,
    /// which knows, may say so.
    #[cfg(target_os = "linux")]
    pub(crate) fn fix(&mut self) {
        self.fixed = true;
    }

    /// The executable segment holding `addr`, as `[start, end)`.
    pub fn code_segment(&self, addr: u64) -> Option<(u64, u64)> {
        if addr < self.text.0 || addr >= self.text.1 {
            return None;
        }
        // The usual module has one executable segment: its text range.
        if self.code_count == 1 {
            return Some(self.text);
        }
        self.segments()
            .iter()
            .find(|s| s.executable() && s.contains(addr))
            .map(|s| (s.start, s.start.saturating_add(s.size)))
    }

    /// Whether `addr` lies in any segment of the module.
    pub fn contains(&self, addr: u64) -> bool {
        self.segments().iter().any(|s| s.contains(addr))
    }
}

