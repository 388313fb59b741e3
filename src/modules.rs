//! The fixed-memory module table and how it is refreshed.
//!
//! Two tables live in static memory. A refresh (never from a signal handler)
//! fills the inactive one and publishes it with one atomic store. The table
//! it replaces stays intact until the next refresh, which first waits for
//! walks still reading it. A walk pins the active table with an atomic
//! reader count: no lock, no allocation, safe in a signal handler,
//! including one that interrupts a refresh.
//!
//! Each module's SFrame data is copied at refresh into memory the table owns
//! (an anonymous mapping), so a library unloaded between refreshes leaves the
//! walk with stale addresses but never with unmapped unwind data; code bytes
//! are only read through a checked copy (see [`crate::discover`]).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

use crate::formats::cfi::Cfi;
use crate::formats::compact_unwind::UnwindInfo;
use crate::formats::elf::{PF_R, PF_W, PF_X};
use crate::formats::sframe::SFrame;
use crate::walk::fast::Answer;
use crate::walk::{CodeMap, Lookup};

/// Most modules the table holds; further modules are left out (and counted
/// in [`Table::dropped_modules`]).
pub const MAX_MODULES: usize = 512;
/// Most `PT_LOAD` segments kept per module; further segments are left out,
/// data before code ([`Module::push_segment`]).
pub const MAX_SEGMENTS: usize = 8;
/// Longest module path kept, in bytes; longer paths keep their tail.
pub const MAX_NAME: usize = 192;
/// Longest build ID kept, in bytes (GNU build IDs are 20).
pub const MAX_BUILD_ID: usize = 32;
/// Most signal-return trampolines remembered: the C library's or the
/// vDSO's, and the restorers runtimes installed themselves.
pub const MAX_TRAMPOLINES: usize = 8;

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
    text: (u64, u64),
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
    exec_only: bool,
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
    fn mapped_for_good(&self) -> bool {
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

/// A snapshot of the loaded modules, in fixed memory.
#[derive(Debug)]
pub struct Table {
    modules: [Module; MAX_MODULES],
    count: usize,
    /// Module indices sorted by the start of their executable range.
    by_text: [u16; MAX_MODULES],
    /// The executable ranges in `by_text` order, packed together so a
    /// search touches a few cache lines rather than every module.
    text_sorted: [(u64, u64); MAX_MODULES],
    /// For each entry of `text_sorted`, the highest end of it and every
    /// entry before it: below an address that no earlier range reaches,
    /// the search stops.
    reach: [u64; MAX_MODULES],
    dropped: usize,
    trampolines: [u64; MAX_TRAMPOLINES],
    trampoline_count: usize,
    /// The program's entry point (`AT_ENTRY`), 0 where unknown.
    entry: u64,
    generation: u64,
    /// What keys this table's answers in the shared caches: unique to each
    /// [`Table::finish`], so two tables never share an answer, whatever
    /// generations their builders gave them; 0 (uncached) until finished.
    cache_gen: u64,
}

impl Table {
    /// An empty table.
    pub const EMPTY: Table = Table {
        modules: [Module::EMPTY; MAX_MODULES],
        count: 0,
        by_text: [0; MAX_MODULES],
        text_sorted: [(0, 0); MAX_MODULES],
        reach: [0; MAX_MODULES],
        dropped: 0,
        trampolines: [0; MAX_TRAMPOLINES],
        trampoline_count: 0,
        entry: 0,
        generation: 0,
        cache_gen: 0,
    };

    /// The modules, in discovery order.
    pub fn modules(&self) -> &[Module] {
        &self.modules[..self.count]
    }

    /// The modules, for the module discovery to finish them.
    #[cfg(target_os = "linux")]
    pub(crate) fn modules_mut(&mut self) -> &mut [Module] {
        &mut self.modules[..self.count]
    }

    /// Modules left out because the table was full.
    pub fn dropped_modules(&self) -> usize {
        self.dropped
    }

    /// How many refreshes produced this table (1 for the first).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Empties the table for refilling.
    pub fn clear(&mut self) {
        self.count = 0;
        self.dropped = 0;
        self.trampoline_count = 0;
        self.entry = 0;
        self.cache_gen = 0;
    }

    /// Counts `n` more modules left out before they reached [`Table::push`]
    /// (images past the room the module discovery read them into).
    #[cfg(target_os = "macos")]
    pub(crate) fn count_dropped(&mut self, n: usize) {
        self.dropped += n;
    }

    /// Appends a module; returns `false` (and counts it as dropped) when full.
    pub fn push(&mut self, m: Module) -> bool {
        if self.count == MAX_MODULES {
            self.dropped += 1;
            return false;
        }
        self.modules[self.count] = m;
        self.count += 1;
        true
    }

    /// Whether one of this table's modules holds the copy of unwind data
    /// at `copy` (no copy is shared).
    pub(crate) fn shares_copy(&self, copy: (usize, usize)) -> bool {
        copy.0 != 0
            && self
                .modules()
                .iter()
                .any(|o| o.copies().iter().any(|c| c.0 == copy.0))
    }

    /// Bytes of DWARF CFI the table copied for its modules (those it does
    /// not read in place).
    pub fn cfi_copy_bytes(&self) -> usize {
        self.modules().iter().map(Module::cfi_copy_bytes).sum()
    }

    /// Appends `m`, built for this table while `old` is published. When
    /// the table is full, `m` is left out and `release` frees each of its
    /// copies, unless it was reused from `old`: walks may be reading that
    /// one, and it is freed with `old`, once none does.
    pub(crate) fn push_or_release(
        &mut self,
        m: Module,
        old: &Table,
        mut release: impl FnMut((usize, usize)),
    ) -> bool {
        if self.count == MAX_MODULES {
            for c in m.copies() {
                if c.0 != 0 && !old.shares_copy(c) {
                    release(c);
                }
            }
        }
        self.push(m)
    }

    /// Remembers the address of a signal-return trampoline.
    pub fn add_trampoline(&mut self, pc: u64) {
        if pc != 0 && self.trampoline_count < MAX_TRAMPOLINES && !self.is_trampoline(pc) {
            self.trampolines[self.trampoline_count] = pc;
            self.trampoline_count += 1;
        }
    }

    /// Records the program's entry point, which [`CodeMap::follows_call`]
    /// never takes for a return address.
    pub fn set_entry(&mut self, pc: u64) {
        self.entry = pc;
    }

    /// The program's entry point, 0 where unknown.
    pub fn entry(&self) -> u64 {
        self.entry
    }

    /// Whether `pc` lies in the entry function (glibc's `_start`), where a
    /// return address marks the outermost frame.
    fn is_entry_function(&self, pc: u64) -> bool {
        self.entry != 0 && pc.wrapping_sub(self.entry) < ENTRY_SPAN
    }

    /// Whether `pc` is a known signal-return trampoline.
    pub fn is_trampoline(&self, pc: u64) -> bool {
        self.trampolines[..self.trampoline_count].contains(&pc)
    }

    /// Sorts the lookup index; call after the last [`Table::push`].
    pub fn finish(&mut self, generation: u64) {
        let mods = &self.modules;
        let idx = &mut self.by_text[..self.count];
        for (i, slot) in idx.iter_mut().enumerate() {
            *slot = i as u16;
        }
        // Insertion sort: allocation-free and the input is nearly sorted.
        for i in 1..idx.len() {
            let mut j = i;
            while j > 0 && mods[idx[j - 1] as usize].text.0 > mods[idx[j] as usize].text.0 {
                idx.swap(j - 1, j);
                j -= 1;
            }
        }
        let mut reach = 0;
        for (k, &i) in self.by_text[..self.count].iter().enumerate() {
            let text = self.modules[i as usize].text;
            reach = reach.max(text.1);
            self.text_sorted[k] = text;
            self.reach[k] = reach;
        }
        self.generation = generation;
        self.cache_gen = next_cache_gen();
    }

    /// The module whose executable segments hold `addr`.
    pub fn module_for_code(&self, addr: u64) -> Option<&Module> {
        let texts = &self.text_sorted[..self.count];
        // The ranges starting at or below addr, nearest first; ranges may
        // nest (the vDSO sits apart), so go on down while an earlier range
        // still reaches past addr. Usually one comparison rejects a data
        // address.
        let mut k = starts_at_or_below(texts, addr);
        while k > 0 {
            k -= 1;
            if addr >= self.reach[k] {
                return None;
            }
            if addr < texts[k].1 {
                let m = &self.modules[self.by_text[k] as usize];
                if m.is_code(addr) {
                    return Some(m);
                }
            }
        }
        None
    }

    /// Whether `addr..addr + len` lies in one readable segment of a module
    /// whose code holds `code` and is read directly
    /// ([`Module::read_directly`]): memory mapped for the life of the
    /// process, which no truncation makes fault.
    pub fn direct_readable(&self, code: u64, addr: u64, len: u64) -> bool {
        let Some(m) = self.module_for_code(code) else {
            return false;
        };
        let Some(last) = len.checked_sub(1).and_then(|l| addr.checked_add(l)) else {
            return false;
        };
        m.mapped_for_good()
            && m.segments()
                .iter()
                .any(|s| s.readable() && s.contains(addr) && s.contains(last))
    }

    /// The module any of whose segments holds `addr`.
    pub fn module_for_addr(&self, addr: u64) -> Option<&Module> {
        self.modules().iter().find(|m| m.contains(addr))
    }
}

/// How many of `texts` (sorted by start) start at or below `addr`, without a
/// branch on the comparisons: which way a pc goes is random walk after walk,
/// so a branching binary search mispredicts about every other step. With the
/// 6 ranges of the benchmark's process, counting took a cold 16-deep walk
/// from about 1,480 to 1,320 ns; longer tables halve with a conditional move
/// (about 1,380 ns at 6 ranges).
#[inline(always)]
fn starts_at_or_below(texts: &[(u64, u64)], addr: u64) -> usize {
    if texts.len() <= 16 {
        return texts.iter().map(|t| usize::from(t.0 <= addr)).sum();
    }
    let (mut base, mut len) = (0, texts.len());
    while len > 1 {
        let half = len / 2;
        base = if texts[base + half].0 <= addr {
            base + half
        } else {
            base
        };
        len -= half;
    }
    base + usize::from(texts[base].0 <= addr)
}

impl Table {
    /// A miss of the hot path's cache: classify, then remember.
    #[cold]
    #[inline(never)]
    fn answer_uncached(&self, key: u64) -> Answer {
        // Straight from the tables, not through the rule cache: the answer
        // is kept in the step cache, and a general step that needs the row
        // caches it itself. A cold walk's first sight of each pc then pays
        // for one cache, not two.
        let hot = crate::walk::fast::classify_at(self, key, &self.lookup_uncached(key));
        crate::cache::step::put(key, self.cache_gen, hot);
        hot
    }

    /// The lookup itself, without the cache.
    pub fn lookup_uncached(&self, pc: u64) -> Lookup {
        match self.module_for_code(pc) {
            None => Lookup::Outside,
            Some(m) => {
                // Nothing calls the entry function, whatever a table row
                // for it says: walks with and without tables agree there.
                if self.is_entry_function(pc) {
                    return Lookup::SFrame(outermost_at(self.entry));
                }
                if let Some(row) = m.sframe.as_ref().and_then(|s| s.find_row(pc)) {
                    return Lookup::SFrame(row);
                }
                // Read where it is stored, as the SFrame section is.
                let Some((info, base)) = &m.compact else {
                    return cfi_lookup(m, None, pc);
                };
                let entry = u32::try_from(pc.wrapping_sub(*base))
                    .ok()
                    .and_then(|off| info.lookup(off));
                match entry {
                    Some(e) => match dwarf_mode_fde(m, e.encoding) {
                        fde @ Some(_) => cfi_lookup(m, fde, pc),
                        None => Lookup::Compact {
                            encoding: e.encoding,
                            func_start: base.wrapping_add(u64::from(e.func_start)),
                        },
                    },
                    None => cfi_lookup(m, None, pc),
                }
            }
        }
    }
}

/// How many lookups found a CFI row the walker cannot take, by
/// [`CfiFallback`] kind; those pcs are walked as if they had no table.
static CFI_FALLBACKS: [AtomicU64; CfiFallback::COUNT] =
    [const { AtomicU64::new(0) }; CfiFallback::COUNT];

/// Why a pc with DWARF CFI was walked without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CfiFallback {
    /// A signal trampoline (`S`): crossed by its code and `ucontext`.
    SignalFrame,
    /// The CFA is a DWARF expression.
    CfaExpression,
    /// The return address or frame pointer rule is an expression or `CFA + n`.
    RegisterRule,
    /// An offset or size past what a row holds.
    TooLarge,
    /// The CFI is malformed.
    Malformed,
}

impl CfiFallback {
    const COUNT: usize = 5;

    fn of(e: &crate::formats::cfi::Inexpressible) -> CfiFallback {
        use crate::formats::cfi::Inexpressible as I;
        match e {
            I::SignalFrame => CfiFallback::SignalFrame,
            I::CfaExpression => CfiFallback::CfaExpression,
            I::ReturnAddressRule | I::FramePointerRule => CfiFallback::RegisterRule,
            I::OffsetTooLarge | I::FunctionTooLarge => CfiFallback::TooLarge,
            I::Malformed(_) => CfiFallback::Malformed,
        }
    }

    /// How many uncached lookups fell back for this reason since the
    /// process started (cached answers are not counted again).
    pub fn count(self) -> u64 {
        CFI_FALLBACKS[self as usize].load(Relaxed)
    }
}

/// The `__eh_frame` offset of the FDE that a compact-unwind `encoding` in
/// DWARF mode names, by the architecture of `m`'s CFI, if `m` has CFI.
fn dwarf_mode_fde(m: &Module, encoding: u32) -> Option<usize> {
    let regs = m.cfi.as_ref()?.registers();
    let dwarf_mode = if regs == crate::formats::cfi::Registers::AARCH64 {
        crate::arch::aarch64::compact::MODE_DWARF
    } else {
        crate::arch::x86_64::compact::MODE_DWARF
    };
    (encoding >> 24 & 0xf == dwarf_mode).then_some((encoding & 0x00ff_ffff) as usize)
}

/// The CFI row at `pc` in `m`: from the FDE at offset `fde` of its
/// `__eh_frame` where a compact entry in DWARF mode names one, else the
/// FDE its index finds. [`Lookup::NoInfo`] where there is none, and where
/// its rule cannot be taken (counted, by reason). Out of line: running a
/// CFA program takes a frame of its own, which the walk's callers need not
/// reserve on every step.
#[inline(never)]
fn cfi_lookup(m: &Module, fde: Option<usize>, pc: u64) -> Lookup {
    let Some(cfi) = &m.cfi else {
        return Lookup::NoInfo;
    };
    let found = match fde {
        Some(at) => cfi.unwind_row_in_fde(at, pc),
        None => cfi.unwind_row(pc),
    };
    match found {
        Ok(Some(row)) => Lookup::Cfi(row),
        Ok(None) => Lookup::NoInfo,
        Err(e) => {
            CFI_FALLBACKS[CfiFallback::of(&e) as usize].fetch_add(1, Relaxed);
            Lookup::NoInfo
        }
    }
}

/// How far from the program's entry point a lookup pc lies in glibc's
/// `_start` (`crt1.o`): it calls `__libc_start_main` last, so a return
/// address into it marks the outermost frame. Beyond it lie only `argv`,
/// the environment and the auxiliary vector, where a scan would read
/// hundreds of words walk after walk, find nothing (or the entry point
/// itself, which `AT_ENTRY` holds), and be remembered by no cache.
///
/// On x86_64, `_start` is 0x22 bytes in glibc 2.34 and later (the call
/// ends at +0x21), 0x26 where glibc is built for CET (an `endbr64` first),
/// and 0x2b to 0x2f before 2.34, whose `_start` also passes
/// `__libc_csu_init` and `__libc_csu_fini` (from glibc's `start.S`, not
/// measured here); the function after it starts at the next 16-byte
/// boundary, +0x30, so no return address into it falls below that. On
/// AArch64 it is 0x34 bytes (glibc 2.36: the call ends at +0x30, then
/// `bl abort`), measured here.
#[cfg(target_arch = "aarch64")]
const ENTRY_SPAN: u64 = 0x34;
#[cfg(not(target_arch = "aarch64"))]
const ENTRY_SPAN: u64 = 0x30;

/// The row of `_start`: an undefined return address, the outermost frame.
fn outermost_at(entry: u64) -> crate::formats::sframe::Row {
    use crate::formats::sframe::{CfaRule, RegRule};
    crate::formats::sframe::Row {
        func_start: entry,
        func_size: ENTRY_SPAN as u32,
        row_start: entry,
        cfa: CfaRule::SpPlus(8),
        ra: RegRule::Undefined,
        fp: RegRule::SameValue,
        mangled_ra: false,
        signal_frame: false,
    }
}

/// The next cache generation: never 0 (which nothing caches under) in its
/// low 32 bits, the part the caches compare.
fn next_cache_gen() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    loop {
        let g = NEXT.fetch_add(1, Relaxed);
        if g & 0xffff_ffff != 0 {
            return g;
        }
    }
}

impl CodeMap for Table {
    /// Served from the per-pc cache (the rule cache (`cache::rule`)) when it holds
    /// this pc for this table's generation.
    fn lookup(&self, pc: u64) -> Lookup {
        if let Some(hit) = crate::cache::rule::get(pc, self.cache_gen) {
            return hit;
        }
        let found = self.lookup_uncached(pc);
        crate::cache::rule::put(pc, self.cache_gen, &found);
        found
    }

    /// The entry function, which the tables' lookups mark outermost too,
    /// before any SFrame row.
    fn is_outermost(&self, pc: u64) -> bool {
        self.is_entry_function(pc)
    }

    /// What keys this table's answers in the hot path's cache.
    fn answer_generation(&self) -> u64 {
        self.cache_gen
    }

    /// Served from the hot path's cache (the step cache (`cache::step`)); a miss
    /// classifies the row found in the tables and remembers the answer.
    #[inline(always)]
    fn answer_at(&self, key: u64, generation: u64) -> Answer {
        match self.cached_answer(key, generation) {
            Some(hit) => hit,
            None => self.answer_uncached(key),
        }
    }

    /// Straight to the tables: the cache was just probed.
    fn answer_after_miss(&self, key: u64, _generation: u64) -> Answer {
        self.answer_uncached(key)
    }

    /// The hot path's cache alone, keyed by the generation passed in (the
    /// table is not read).
    #[inline(always)]
    fn cached_answer(&self, key: u64, generation: u64) -> Option<Answer> {
        crate::cache::step::get(key, generation)
    }

    /// A binary search over a handful of text ranges: cheaper than a
    /// cache probe, and it keeps the cache for rows.
    fn is_code(&self, addr: u64) -> bool {
        self.module_for_code(addr).is_some()
    }

    fn code_range(&self, addr: u64) -> Option<(u64, u64)> {
        self.module_for_code(addr)?.code_segment(addr)
    }

    /// Directly where the module's code may be read so
    /// ([`Module::read_directly`]); anything else through a checked read,
    /// since its library may have been unloaded since the refresh, its file
    /// truncated, or its code may be execute-only (mapped without read
    /// permission).
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(m) = self.module_for_code(addr) else {
            return false;
        };
        let Some((_, seg_end)) = m.code_segment(addr) else {
            return false;
        };
        if addr
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > seg_end)
        {
            return false;
        }
        if m.read_directly() {
            // SAFETY: `addr..addr + len` lies in one executable segment of a
            // module that is never unloaded and whose file cannot shrink, so
            // it stays mapped and backed, and every executable segment of it
            // is mapped readable (`PF_R`).
            unsafe {
                core::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len())
            };
            return true;
        }
        crate::sys::read_checked(addr, buf)
    }

    fn recall_scan(
        &self,
        start: u64,
        words: &mut [u64; crate::walk::SCAN_MEMO_WORDS],
    ) -> Option<usize> {
        crate::cache::scan::get(start, self.cache_gen, words)
    }

    fn remember_scan(&self, start: u64, words: &[u64]) {
        crate::cache::scan::put(start, self.cache_gen, words);
    }

    #[inline(always)]
    fn recall_end<R>(
        &self,
        key: u64,
        take: impl FnOnce(&[core::sync::atomic::AtomicU64; crate::walk::END_WORDS]) -> R,
    ) -> Option<R> {
        crate::cache::walk_ends::get_with(key, self.cache_gen, take)
    }

    fn remember_end(&self, key: u64, words: &[u64; crate::walk::END_WORDS]) {
        crate::cache::walk_ends::put(key, self.cache_gen, words, crate::walk::ending::used);
    }

    /// Remembered in the rule cache: stack scanning asks this of the same
    /// words walk after walk, and each answer costs a checked read.
    ///
    /// The program's entry point is never taken for a return address, even
    /// where the function linked before it ends in a call (to a function
    /// that does not return, so no live frame returns there): the dynamic
    /// linker leaves the entry point in a callee-saved register, which
    /// glibc's start code saves on the stack, and a scan would otherwise
    /// report that function between `__libc_start_main` and `_start`.
    fn follows_call<A: crate::arch::Arch>(&self, ra: u64) -> bool {
        if ra == self.entry {
            return false;
        }
        if let Some(hit) = crate::cache::call::get(ra, self.cache_gen) {
            return hit;
        }
        let mut before = [0u8; 8];
        let yes = ra >= 8 && self.read_code(ra - 8, &mut before) && A::ends_with_call(&before);
        crate::cache::call::put(ra, self.cache_gen, yes);
        yes
    }

    /// glibc's restorer and the vDSO's trampoline, found at refresh.
    fn is_known_trampoline(&self, pc: u64) -> bool {
        self.is_trampoline(pc)
    }

    fn known_trampoline_within(&self, pc: u64, span: u64) -> bool {
        self.trampolines[..self.trampoline_count]
            .iter()
            .any(|&t| pc >= t && pc - t <= span)
    }

    /// Outside any module (qemu-user's trampoline page, for one), the code
    /// itself, read with a checked copy. A pc in any module's segments, code
    /// or data, is none: stack words that point at statics cost no read.
    fn is_sigreturn<A: crate::arch::Arch>(&self, pc: u64) -> bool {
        if self.is_trampoline(pc) {
            return true;
        }
        if !self.sigreturn_reads_memory::<A>(pc) {
            return false;
        }
        let mut code = [0u8; 16];
        let code = &mut code[..A::SIGRETURN_CODE.len()];
        crate::sys::read_checked(pc, code) && code == A::SIGRETURN_CODE
    }

    /// Where [`Self::is_sigreturn`] makes its checked read: outside every
    /// module, at an address a mapping could hold.
    fn sigreturn_reads_memory<A: crate::arch::Arch>(&self, pc: u64) -> bool {
        !self.is_trampoline(pc)
            && self.module_for_addr(pc).is_none()
            && crate::sys::may_be_mapped(pc, A::SIGRETURN_CODE.len())
    }
}

/// How long a refresh waits for walks and guards still on the table it is
/// about to reuse (the one the refresh before it replaced) before it gives
/// up with [`RefreshError::InUse`]. A walk takes microseconds; only a guard
/// or walker held across two refreshes, or pinned by a thread that no
/// longer runs (see [`RefreshError::InUse`]), lasts this long.
pub const REFRESH_WAIT: core::time::Duration = core::time::Duration::from_secs(2);

/// The two tables and the state that publishes one of them.
pub(crate) struct Registry {
    tables: [UnsafeCell<Table>; 2],
    /// Index of the published table; `usize::MAX` before the first refresh.
    active: AtomicUsize,
    readers: [AtomicUsize; 2],
    writing: AtomicBool,
    generation: AtomicUsize,
    /// Index of a table a refresh in a parent was writing when the process
    /// forked (`usize::MAX`: none): in the child it may be half written,
    /// so the next refresh there clears it without releasing its copies.
    abandoned: AtomicUsize,
}

// SAFETY: a table is written only by the refresh that holds `writing`, and
// only while it is unpublished and has no readers (see
// `Registry::refresh_within`); published tables are only read.
unsafe impl Sync for Registry {}

pub(crate) static REGISTRY: Registry = Registry::new();

/// A pinned, published table. While it lives, no refresh reuses its memory
/// (see [`current`]).
pub struct TableGuard {
    /// The reader count that pins the table.
    readers: &'static AtomicUsize,
    /// The pinned table, resolved once: the walk dereferences the guard for
    /// every lookup. It is only handed out as a borrow of the guard.
    table: &'static Table,
}

impl core::ops::Deref for TableGuard {
    type Target = Table;
    #[inline(always)]
    fn deref(&self) -> &Table {
        self.table
    }
}

impl Drop for TableGuard {
    fn drop(&mut self) {
        self.readers.fetch_sub(1, SeqCst);
    }
}

impl core::fmt::Debug for TableGuard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TableGuard(gen {})", self.generation())
    }
}

/// Pins the published table. Lock-free and async-signal-safe. `None` before
/// the first refresh. The table stays intact while the guard lives: a
/// refresh replaces it at once, but the refresh after that, which reuses
/// its memory, waits for the guard (at most [`REFRESH_WAIT`], then fails
/// with [`RefreshError::InUse`]). Drop guards before refreshing twice.
pub fn current() -> Option<TableGuard> {
    REGISTRY.current()
}

/// Why a refresh did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshError {
    /// Images kept being loaded or unloaded through every attempt to read
    /// the loader's list (macOS).
    Busy,
    /// A walk or a guard still held the table this refresh would reuse
    /// (the one the previous refresh replaced) after [`REFRESH_WAIT`]: a
    /// [`TableGuard`] or walker kept across two refreshes, by this thread
    /// or another, or, in a child after `fork`, a walk that another thread
    /// of the parent had under way, which never ends. The published table
    /// stays as it was.
    InUse,
}

impl Registry {
    /// Two empty tables, none published.
    pub(crate) const fn new() -> Registry {
        Registry {
            tables: [UnsafeCell::new(Table::EMPTY), UnsafeCell::new(Table::EMPTY)],
            active: AtomicUsize::new(usize::MAX),
            readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            writing: AtomicBool::new(false),
            generation: AtomicUsize::new(0),
            abandoned: AtomicUsize::new(usize::MAX),
        }
    }

    /// In a child after `fork`: a refresh another thread of the parent was
    /// running never finishes here. Lets the next refresh run, and marks
    /// the table that refresh was writing as abandoned.
    pub(crate) fn forget_refresh_in_child(&self) {
        if self.writing.load(SeqCst) {
            // The slot `refresh_within` writes: 0 before the first refresh.
            let unpublished = 1usize.saturating_sub(self.active.load(SeqCst));
            self.abandoned.store(unpublished, SeqCst);
            self.writing.store(false, SeqCst);
        }
    }

    /// [`current`] for this registry.
    #[inline(always)]
    pub(crate) fn current(&'static self) -> Option<TableGuard> {
        loop {
            let idx = self.active.load(SeqCst);
            if idx > 1 {
                return None;
            }
            self.readers[idx].fetch_add(1, SeqCst);
            if self.active.load(SeqCst) == idx {
                // SAFETY: the reader count just pinned keeps refreshes from
                // writing this table until the guard is dropped, and the
                // guard lends the reference out no longer than it lives.
                let table = unsafe { &*self.tables[idx].get() };
                return Some(TableGuard {
                    readers: &self.readers[idx],
                    table,
                });
            }
            // A refresh switched tables in between: unpin and retry.
            self.readers[idx].fetch_sub(1, SeqCst);
        }
    }

    /// Fills the unpublished table with `fill(new, old)` and publishes it.
    /// `old` is the published table (empty at first), so `fill` can reuse
    /// per-module copies.
    ///
    /// The unpublished table is the one the previous refresh replaced, left
    /// intact until now for walks and guards that still had it. Those must
    /// finish first: this waits up to `wait` for them, then returns
    /// [`RefreshError::InUse`] with nothing changed. Once they have,
    /// `release(module)` is called for each of its modules whose copy the
    /// published table does not share, and it is refilled. Nothing waits
    /// for the table being replaced, so a thread may refresh while it holds
    /// a guard on it.
    ///
    /// Must not be called from a signal handler: it may wait for walks.
    pub(crate) fn refresh_within(
        &'static self,
        wait: core::time::Duration,
        fill: impl FnOnce(&mut Table, &Table),
        release: impl Fn((usize, usize)),
    ) -> Result<u64, RefreshError> {
        // Refreshes queue up behind each other; none runs in a signal handler.
        while self.writing.swap(true, SeqCst) {
            std::thread::yield_now();
        }
        let active = self.active.load(SeqCst);
        let (old_idx, new_idx) = if active > 1 {
            (1, 0)
        } else {
            (active, 1 - active)
        };
        // Walks and guards that pinned `new_idx` before the last switch must
        // finish first.
        let since = std::time::Instant::now();
        while self.readers[new_idx].load(SeqCst) != 0 {
            if since.elapsed() >= wait {
                self.writing.store(false, SeqCst);
                return Err(RefreshError::InUse);
            }
            std::thread::yield_now();
        }
        let generation = self.generation.fetch_add(1, SeqCst) as u64 + 1;
        // SAFETY: `new_idx` is unpublished and has no readers (checked
        // above, and `current` re-checks `active` after pinning); `writing`
        // excludes other refreshes. `old_idx` is only read here.
        let (new, old) = unsafe {
            (
                &mut *self.tables[new_idx].get(),
                &*self.tables[old_idx].get(),
            )
        };
        // Free what only the replaced table used: the published one may
        // share a copy with it, and the new one reuses only the published
        // one's. A table abandoned half written at a fork keeps its copies
        // (a few leak, once): which of them were mapped is not known.
        if self.abandoned.swap(usize::MAX, SeqCst) != new_idx {
            for c in new.modules().iter().flat_map(Module::copies) {
                if c.0 != 0 && !old.shares_copy(c) {
                    release(c);
                }
            }
        }
        new.clear();
        fill(new, old);
        new.finish(generation);
        self.active.store(new_idx, SeqCst);
        self.writing.store(false, SeqCst);
        Ok(generation)
    }
}

/// [`Registry::refresh_within`] on the live registry, waiting at most
/// `wait` ([`REFRESH_WAIT`] for a refresh the program asked for).
pub(crate) fn refresh_with(
    wait: core::time::Duration,
    fill: impl FnOnce(&mut Table, &Table),
    release: impl Fn((usize, usize)),
) -> Result<u64, RefreshError> {
    static AT_FORK: AtomicBool = AtomicBool::new(false);
    extern "C" fn in_child() {
        REGISTRY.forget_refresh_in_child();
    }
    crate::sys::once_in_fork_child(&AT_FORK, in_child);
    REGISTRY.refresh_within(wait, fill, release)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(name: &[u8], code: &[(u64, u64)], data: &[(u64, u64)]) -> Module {
        let mut m = Module::EMPTY;
        m.set_name(name);
        let segs = code.iter().map(|&s| (s, PF_R | PF_X));
        for ((start, end), flags) in segs.chain(data.iter().map(|&s| (s, PF_R))) {
            let size = end - start;
            assert!(m.push_segment(Segment {
                start,
                size,
                vaddr: start,
                flags,
            }));
        }
        m
    }

    #[test]
    fn code_addresses_find_their_module_even_inside_another_modules_text_range() {
        let mut t = Box::new(Table::EMPTY);
        // "a" has two executable segments with a gap, in which "b" (one
        // segment) and a data segment sit; "c" lies apart, above a gap.
        t.push(module(b"a", &[(0x1000, 0x2000), (0x8000, 0x9000)], &[]));
        t.push(module(b"c", &[(0x20000, 0x21000)], &[(0x21000, 0x22000)]));
        t.push(module(b"b", &[(0x4000, 0x5000)], &[(0x5000, 0x6000)]));
        t.finish(1);
        let oracle = |addr: u64| t.modules().iter().find(|m| m.is_code(addr));
        for addr in (0..0x23000)
            .step_by(0x80)
            .chain([0x1fff, 0x2000, 0x4fff, 0x8fff])
        {
            let got = t.module_for_code(addr).map(Module::name);
            assert_eq!(got, oracle(addr).map(Module::name), "{addr:#x}");
        }
        assert_eq!(t.module_for_code(0x4800).map(Module::name), Some(&b"b"[..]));
        assert_eq!(t.module_for_code(0x8800).map(Module::name), Some(&b"a"[..]));
        assert!(t.module_for_code(0x6800).is_none(), "a gap in a's range");
        assert!(t.module_for_code(0x21800).is_none(), "c's data");
        assert_eq!(t.code_range(0x20010), Some((0x20000, 0x21000)));
        assert_eq!(t.code_range(0x8010), Some((0x8000, 0x9000)));
    }

    #[test]
    fn a_pc_within_a_span_after_a_trampoline_is_found_in_one_pass_as_one_by_one() {
        use crate::walk::CodeMap;
        let mut t = Box::new(Table::EMPTY);
        for pc in [0x5000, 0x9000, u64::MAX - 2] {
            t.add_trampoline(pc);
        }
        // The trait's default asks about each address in turn.
        struct OneByOne<'a>(&'a Table);
        impl CodeMap for OneByOne<'_> {
            fn lookup(&self, _: u64) -> crate::walk::Lookup {
                crate::walk::Lookup::Outside
            }
            fn is_code(&self, _: u64) -> bool {
                false
            }
            fn read_code(&self, _: u64, _: &mut [u8]) -> bool {
                false
            }
            fn is_known_trampoline(&self, pc: u64) -> bool {
                self.0.is_trampoline(pc)
            }
        }
        let each = OneByOne(&t);
        for pc in (0x4ff0..0x5010)
            .chain(0x8ff0..0x9010)
            .chain(u64::MAX - 4..=u64::MAX)
            .chain(0..4)
        {
            for span in [0, 1, 4, 8] {
                assert_eq!(
                    t.known_trampoline_within(pc, span),
                    each.known_trampoline_within(pc, span),
                    "{pc:#x} {span}"
                );
            }
        }
        assert!(t.known_trampoline_within(0x5007, 8));
        assert!(!t.known_trampoline_within(0x4fff, 8));
    }

    #[test]
    fn counting_the_ranges_at_or_below_agrees_with_a_binary_search_at_every_length() {
        // Lengths on both sides of the switch from counting to halving,
        // with repeated starts (nested ranges) and addresses between,
        // on and around every start.
        for len in 0..=40u64 {
            let texts: Vec<(u64, u64)> = (0..len).map(|i| (0x1000 * (i / 2 * 2), 0)).collect();
            for addr in (0..0x1000 * (len + 2))
                .step_by(0x800)
                .chain([0x0fff, u64::MAX])
            {
                assert_eq!(
                    starts_at_or_below(&texts, addr),
                    texts.partition_point(|t| t.0 <= addr),
                    "{len} ranges, {addr:#x}"
                );
            }
        }
    }

    #[test]
    fn a_table_of_many_modules_finds_each_ones_code() {
        // 40 modules: more text ranges than the count takes, so the
        // halving search runs; each has code then data, and a gap after.
        let mut t = Box::new(Table::EMPTY);
        for i in 0..40u64 {
            let base = 0x10_0000 + i * 0x1_0000;
            let name = [b'a' + (i % 26) as u8, b'0' + (i / 26) as u8];
            t.push(module(
                &name,
                &[(base, base + 0x4000)],
                &[(base + 0x4000, base + 0x6000)],
            ));
        }
        t.finish(1);
        let oracle = |addr: u64| t.modules().iter().find(|m| m.is_code(addr));
        for addr in (0x0f_0000..0x39_0000).step_by(0x700) {
            let got = t.module_for_code(addr).map(Module::name);
            assert_eq!(got, oracle(addr).map(Module::name), "{addr:#x}");
        }
        assert!(t
            .module_for_code(0x10_0000 + 17 * 0x1_0000 + 0x10)
            .is_some());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pinned_modules_execute_only_code_is_read_only_through_checked_reads() {
        use crate::walk::CodeMap;
        // A page mapped without access stands for execute-only code: read
        // directly, it would fault this test.
        let page = stackmark_fixtures::UnreadablePage::new();
        let segment = |flags| Segment {
            start: page.addr(),
            size: 4096,
            vaddr: page.addr(),
            flags,
        };
        let mut m = Module::EMPTY;
        m.set_name(b"x");
        assert!(m.push_segment(segment(PF_X)));
        m.pin();
        m.fix();
        let mut t = Box::new(Table::EMPTY);
        t.push(m);
        t.finish(1);
        let mut buf = [0u8; 8];
        assert!(!t.read_code(page.addr() + 16, &mut buf));
        // Readable code is what direct reads rely on.
        let mut m = Module::EMPTY;
        assert!(m.push_segment(segment(PF_R | PF_X)));
        assert!(!m.exec_only);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn data_is_read_directly_only_inside_one_readable_segment_of_a_pinned_module_with_a_fixed_file()
    {
        // "a": code at 0x1000, read-only data at 0x3000, writable data at
        // 0x4000 (adjacent), a segment with no access at 0x6000.
        let mut a = module(b"a", &[(0x1000, 0x2000)], &[(0x3000, 0x4000)]);
        for (start, flags) in [(0x4000, PF_R | PF_W), (0x6000, 0)] {
            assert!(a.push_segment(Segment {
                start,
                size: 0x1000,
                vaddr: start,
                flags,
            }));
        }
        let b = module(b"b", &[(0x10000, 0x11000)], &[(0x12000, 0x13000)]);
        let mut t = Box::new(Table::EMPTY);
        t.push(a.clone());
        t.push(b.clone());
        t.finish(1);
        // Not pinned: never direct.
        assert!(!t.direct_readable(0x1800, 0x3000, 8));
        // Pinned, but from a file that may be truncated: not direct either.
        a.pin();
        let mut t = Box::new(Table::EMPTY);
        t.push(a.clone());
        t.push(b.clone());
        t.finish(2);
        assert!(!t.direct_readable(0x1800, 0x3000, 8));
        a.fix();
        let mut t = Box::new(Table::EMPTY);
        t.push(a);
        t.push(b);
        t.finish(3);
        assert!(t.direct_readable(0x1800, 0x3000, 8));
        assert!(t.direct_readable(0x1800, 0x3ff8, 8));
        assert!(t.direct_readable(0x1800, 0x4ff8, 8));
        // Across two segments, past the last, without access, in another
        // module, empty, or wrapping around.
        assert!(!t.direct_readable(0x1800, 0x3ffc, 8));
        assert!(!t.direct_readable(0x1800, 0x5000, 8));
        assert!(!t.direct_readable(0x1800, 0x6000, 8));
        assert!(!t.direct_readable(0x1800, 0x12000, 8));
        assert!(!t.direct_readable(0x1800, 0x3000, 0));
        assert!(!t.direct_readable(0x1800, u64::MAX - 3, 8));
        // Code that is not the module's own, or no code at all.
        assert!(!t.direct_readable(0x10800, 0x3000, 8));
        assert!(!t.direct_readable(0x3000, 0x3000, 8));
    }

    #[test]
    fn a_full_module_still_takes_code_in_place_of_its_last_data_segment() {
        let seg = |i: u64, flags| Segment {
            start: 0x10_0000 * (i + 1),
            size: 0x1000,
            vaddr: 0x10_0000 * (i + 1),
            flags,
        };
        let mut m = Module::EMPTY;
        assert!(m.push_segment(seg(0, PF_R | PF_X)));
        for i in 1..MAX_SEGMENTS as u64 {
            assert!(m.push_segment(seg(i, PF_R | PF_W)));
        }
        let data = seg(20, PF_R);
        assert!(!m.push_segment(data), "full: data is left out");
        let code = seg(21, PF_R | PF_X);
        assert!(m.push_segment(code));
        assert!(m.is_code(code.start) && m.is_code(0x10_0000));
        // The last data segment made room; the order is kept.
        let starts: Vec<u64> = m.segments().iter().map(|s| s.start).collect();
        let mut want: Vec<u64> = (0..MAX_SEGMENTS as u64 - 1)
            .map(|i| seg(i, 0).start)
            .collect();
        want.push(code.start);
        assert_eq!(starts, want);
        // Code by code only: once all are code, more is left out.
        for i in 0..MAX_SEGMENTS as u64 - 2 {
            assert!(m.push_segment(seg(30 + i, PF_R | PF_X)));
        }
        assert!(m.segments().iter().all(Segment::executable));
        assert!(!m.push_segment(seg(40, PF_R | PF_X)));
        assert!(m.is_code(0x10_0000 * 31) && !m.is_code(0x10_0000 * 41));
    }

    #[test]
    fn a_wild_pc_never_shares_a_cached_answer_with_a_return_address_check() {
        use crate::arch::Native;
        use crate::walk::CodeMap;
        // Code that ends in a call on either architecture (x86_64's e8 at
        // ra - 5, AArch64's bl at ra - 4), at two return addresses.
        let mut code = [0u8; 64];
        for ra_off in [16, 48] {
            code[ra_off - 8..ra_off].copy_from_slice(&[0, 0, 0, 0xe8, 0, 0, 0, 0x94]);
        }
        let base = code.as_ptr() as u64;
        let mut t = Box::new(Table::EMPTY);
        t.push(module(b"calls", &[(base, base + 64)], &[]));
        // Its own generation: the rule cache is shared by every test.
        t.finish(0x5eed_0063);
        let (a, b) = (base + 16, base + 48);
        // A scan asks first, then a walk looks up a pc in no module that
        // differs from the return address only in bit 63 ...
        assert!(t.follows_call::<Native>(a));
        assert_eq!(t.lookup(a | 1 << 63), Lookup::Outside);
        // ... or the other way round.
        assert_eq!(t.lookup(b | 1 << 63), Lookup::Outside);
        assert!(t.follows_call::<Native>(b));
        assert!(t.follows_call::<Native>(b), "and again, from the cache");
        assert_eq!(t.lookup(a), Lookup::NoInfo);
    }

    #[test]
    fn the_entry_function_is_outermost_even_where_an_sframe_row_covers_it() {
        use crate::formats::sframe::{CfaRule, RegRule, SFrame};
        let (base, entry, section) = (0x40_0000u64, 0x40_0100u64, 0x40_2000u64);
        // A version 2 x86_64 section (FDEs sorted, function starts relative
        // to the section) with one function at the entry point, 0x22 bytes,
        // whose one row is `cfa = sp + 8` (return address at cfa - 8).
        let mut bytes = vec![0xe2, 0xde, 2, 1, 3, 0, (-8i8) as u8, 0];
        for w in [1u32, 1, 3, 0, 20] {
            bytes.extend(w.to_le_bytes());
        }
        bytes.extend(((entry as i64 - section as i64) as i32).to_le_bytes());
        for w in [0x22u32, 0, 1] {
            bytes.extend(w.to_le_bytes());
        }
        bytes.extend([0, 0, 0, 0]);
        bytes.extend([0, 0x03, 8]);
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        let sf = SFrame::parse(bytes, section).expect("a valid section");
        let row = sf.find_row(entry + 5).expect("the row");
        assert_eq!((row.cfa, row.ra), (CfaRule::SpPlus(8), RegRule::AtCfa(-8)));
        let mut m = module(b"main", &[(base, base + 0x1000)], &[]);
        m.sframe = Some(sf);
        let mut t = Box::new(Table::EMPTY);
        t.push(m);
        t.finish(0x5eed_0e17);
        assert_eq!(
            t.lookup(entry + 5),
            Lookup::SFrame(row),
            "no entry point known"
        );
        t.set_entry(entry);
        let outermost = t.lookup_uncached(entry + 5);
        assert!(
            matches!(outermost, Lookup::SFrame(r) if r.ra == RegRule::Undefined),
            "{outermost:?}"
        );
        assert!(t.is_outermost(entry + 5));
        // The hot path leaves such a pc to the general step, with or
        // without tables.
        let hot = t.answer_at(entry + 5, t.answer_generation());
        assert_eq!(hot.kind(), crate::walk::fast::AnswerKind::Slow);
    }

    #[test]
    fn the_programs_entry_point_is_never_taken_for_a_return_address() {
        use crate::arch::Native;
        use crate::walk::CodeMap;
        // A function that ends in a call (x86_64's e8, AArch64's bl), with
        // the entry point right after it, as lld may lay out `_start`.
        let mut code = [0u8; 128];
        code[24..32].copy_from_slice(&[0, 0, 0, 0xe8, 0, 0, 0, 0x94]);
        let base = code.as_ptr() as u64;
        let entry = base + 32;
        let mut t = Box::new(Table::EMPTY);
        t.push(module(b"start", &[(base, base + 128)], &[]));
        t.finish(0x5eed_0064);
        assert!(t.follows_call::<Native>(entry), "a call precedes it");
        // Set on the same finished table (as a refresh does, after
        // `finish`): the rule cache still holds the answer above, so the
        // entry check must come first.
        t.set_entry(entry);
        assert_eq!(t.entry(), entry);
        assert!(!t.follows_call::<Native>(entry));
        assert!(
            !t.follows_call::<Native>(entry),
            "and again (the check comes before the rule cache)"
        );
        // A return address into the entry function (glibc's `_start`)
        // marks the outermost frame; just past it, code is code again.
        let outermost = t.lookup(entry + ENTRY_SPAN - 1);
        assert!(
            matches!(outermost, Lookup::SFrame(row) if row.ra == crate::formats::sframe::RegRule::Undefined),
            "{outermost:?}"
        );
        assert_eq!(t.lookup(entry + ENTRY_SPAN), Lookup::NoInfo);
        assert_eq!(t.lookup(entry - 1), Lookup::NoInfo);
        t.clear();
        assert_eq!(t.entry(), 0, "a refill starts without one");
    }

    #[test]
    fn tables_given_the_same_generation_never_share_cached_answers() {
        use crate::walk::CodeMap;
        let pc = 0x5a5a_0010;
        let mut a = Box::new(Table::EMPTY);
        a.push(module(b"a", &[(0x5a5a_0000, 0x5a5a_1000)], &[]));
        a.finish(0x000a_0d17);
        let mut b = Box::new(Table::EMPTY);
        b.finish(0x000a_0d17);
        assert_eq!(a.generation(), b.generation());
        assert_eq!(a.lookup(pc), Lookup::NoInfo);
        assert_eq!(b.lookup(pc), Lookup::Outside, "not a's cached answer");
        assert_eq!(a.lookup(pc), Lookup::NoInfo, "nor the other way round");
        // Finished again, a table starts afresh in the caches too.
        let before = a.answer_generation();
        a.finish(0x000a_0d17);
        assert_ne!(a.answer_generation(), before);
        assert_ne!(a.answer_generation() & 0xffff_ffff, 0);
        // Unfinished, nothing is cached for it.
        assert_eq!(Table::EMPTY.answer_generation(), 0);
    }

    /// The README states the table's fixed memory; keep it honest.
    #[test]
    fn the_two_tables_take_the_documented_fixed_memory() {
        let bytes = 2 * core::mem::size_of::<Table>();
        println!("module tables: {bytes} bytes");
        assert!(bytes <= 1024 * 1024, "{bytes}");
        assert!(bytes > MAX_MODULES * (MAX_NAME + MAX_SEGMENTS * 32));
    }

    /// A module named `name` holding the copy `copy` (a made-up address:
    /// these tests' release only records it).
    fn with_copy(name: &[u8], copy: usize) -> Module {
        let base = copy as u64 * 0x1_0000;
        let mut m = module(name, &[(base, base + 0x1000)], &[]);
        m.sframe_copy = (copy, 0x1000);
        m
    }

    /// Refreshes `r` to hold `mods`, recording released copies in `freed`.
    fn publish(
        r: &'static Registry,
        wait: core::time::Duration,
        mods: &[Module],
        freed: &std::cell::RefCell<Vec<usize>>,
    ) -> Result<u64, RefreshError> {
        let release = |c: (usize, usize)| freed.borrow_mut().push(c.0);
        r.refresh_within(
            wait,
            |new, old| {
                for m in mods {
                    new.push_or_release(m.clone(), old, release);
                }
            },
            release,
        )
    }

    fn names(t: &Table) -> Vec<&[u8]> {
        t.modules().iter().map(Module::name).collect()
    }

    #[test]
    fn a_thread_may_refresh_while_it_holds_the_table_the_refresh_replaces() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let wait = REFRESH_WAIT;
        assert_eq!(publish(&R, wait, &[with_copy(b"a", 1)], &freed), Ok(1));
        let held = R.current().unwrap();
        // Before the change this waited for `held` forever.
        assert_eq!(publish(&R, wait, &[with_copy(b"b", 2)], &freed), Ok(2));
        assert_eq!(R.current().unwrap().generation(), 2);
        // The replaced table is as it was, and its copy is not freed.
        assert_eq!((held.generation(), names(&held)), (1, vec![&b"a"[..]]));
        assert!(freed.borrow().is_empty());
        drop(held);
        // The next refresh reuses it: only now is its copy freed.
        assert_eq!(publish(&R, wait, &[with_copy(b"c", 3)], &freed), Ok(3));
        assert_eq!(*freed.borrow(), [1]);
        assert_eq!(names(&R.current().unwrap()), [&b"c"[..]]);
    }

    #[test]
    fn a_refresh_that_would_reuse_a_pinned_table_fails_and_changes_nothing() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let short = core::time::Duration::from_millis(50);
        publish(&R, short, &[with_copy(b"a", 1)], &freed).unwrap();
        let held = R.current().unwrap();
        publish(&R, short, &[with_copy(b"b", 2)], &freed).unwrap();
        let mut filled = false;
        let got = R.refresh_within(short, |_, _| filled = true, |_| panic!("released"));
        assert_eq!(got, Err(RefreshError::InUse));
        assert!(!filled, "the pinned table was refilled");
        let now = R.current().unwrap();
        assert_eq!((now.generation(), names(&now)), (2, vec![&b"b"[..]]));
        assert_eq!((held.generation(), names(&held)), (1, vec![&b"a"[..]]));
        drop((now, held));
        // The failed refresh let go of the writer's flag.
        assert_eq!(publish(&R, short, &[with_copy(b"c", 3)], &freed), Ok(3));
        assert_eq!(*freed.borrow(), [1]);
    }

    #[test]
    fn a_copy_the_published_table_shares_is_freed_only_with_the_last_table_holding_it() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let wait = REFRESH_WAIT;
        let (a, b, c) = (with_copy(b"a", 1), with_copy(b"b", 2), with_copy(b"c", 3));
        publish(&R, wait, &[a.clone(), b], &freed).unwrap();
        publish(&R, wait, &[a.clone(), c], &freed).unwrap();
        // Reusing [a, b]: a is shared with the published [a, c].
        publish(&R, wait, &[a], &freed).unwrap();
        assert_eq!(*freed.borrow(), [2]);
        publish(&R, wait, &[], &freed).unwrap();
        assert_eq!(*freed.borrow(), [2, 3]);
        publish(&R, wait, &[], &freed).unwrap();
        assert_eq!(*freed.borrow(), [2, 3, 1]);
    }

    #[test]
    fn a_full_table_leaves_a_module_out_but_keeps_a_copy_the_published_table_reads() {
        let mut old = Box::new(Table::EMPTY);
        old.push(with_copy(b"kept", 7));
        let mut new = Box::new(Table::EMPTY);
        for i in 0..MAX_MODULES {
            assert!(new.push(with_copy(b"m", 100 + i)));
        }
        let mut freed = vec![];
        // Reused from the published table, which walks may be reading.
        assert!(!new.push_or_release(with_copy(b"kept", 7), &old, |c| freed.push(c.0)));
        // A copy made for the new table alone.
        assert!(!new.push_or_release(with_copy(b"fresh", 8), &old, |c| freed.push(c.0)));
        assert_eq!(freed, [8]);
        assert_eq!(new.dropped_modules(), 2);
    }

    #[test]
    fn a_fork_child_refreshes_although_another_thread_of_the_parent_was_refreshing() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let short = core::time::Duration::from_millis(50);
        publish(&R, short, &[with_copy(b"a", 1)], &freed).unwrap();
        let (in_fill, filling) = std::sync::mpsc::channel();
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        let refresher = std::thread::spawn(move || {
            R.refresh_within(
                REFRESH_WAIT,
                |new, _| {
                    new.push(with_copy(b"half", 2));
                    in_fill.send(()).unwrap();
                    wait_go.recv().unwrap();
                },
                |_| {},
            )
        });
        filling.recv().unwrap();
        // SAFETY: the child refreshes a private registry and leaves with
        // _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // What the atfork handler does for the live registry.
            R.forget_refresh_in_child();
            let freed = std::cell::RefCell::new(vec![]);
            let code = match publish(&R, short, &[with_copy(b"c", 3)], &freed) {
                Err(_) => 1,
                // The half-written table's copy is left alone.
                Ok(_) if !freed.borrow().is_empty() => 2,
                Ok(_) if names(&R.current().unwrap()) != [&b"c"[..]] => 3,
                Ok(_) => 0,
            };
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(code) };
        }
        go.send(()).unwrap();
        refresher.join().unwrap().unwrap();
        let since = std::time::Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: polls the child forked above.
            let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if got == pid {
                break;
            }
            if since.elapsed() > core::time::Duration::from_secs(60) {
                // SAFETY: the child forked above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child's refresh waited for the parent's forever");
            }
            std::thread::sleep(core::time::Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "{status:#x}");
    }

    mod walks {
        //! Walks over a real table (the walk's own tests use a fake code map).
        use crate::arch::x86_64::X86_64;
        use crate::memory::SliceMemory;
        use crate::modules::{Module, Segment, Table};
        use crate::walk::tests::{stack, x86, Remembering, CODE, STACK};
        use crate::walk::{Frame, StopReason, WalkOptions, Walker};

        /// A module table of one module whose code is `[start, start + size)`,
        /// finished as cache generation `generation`.
        fn one_module_table(start: u64, size: u64, generation: u64) -> Box<Table> {
            let mut m = Module::EMPTY;
            m.set_name(b"m");
            assert!(m.push_segment(Segment {
                start,
                size,
                vaddr: start,
                flags: 5,
            }));
            let mut t = Box::new(Table::EMPTY);
            t.push(m);
            t.finish(generation);
            t
        }

        #[test]
        fn a_table_finished_as_generation_0_walks_the_same_with_and_without_the_hot_path() {
            let t = one_module_table(CODE, 0x1000, 0);
            // Frame 0 in the module, no row; its frame record returns to pc 1,
            // whose lookup key (0) is what every empty cache entry holds.
            let st = stack(&[0, 0, 0, 1, 0, 0]);
            let regions = [(STACK, &st[..])];
            let regs = x86(CODE + 0x10, STACK, STACK + 16);
            let run = |fast_path| {
                let opts = WalkOptions {
                    fast_path,
                    ..Default::default()
                };
                let mut w: Walker<X86_64, _, _> =
                    Walker::new(regs, crate::walk::PcKind::Exact, SliceMemory::new(&regions), &*t, opts);
                let mut buf = [Frame::default(); 8];
                let n = w.fill(&mut buf);
                (buf[..n].to_vec(), w.stop_reason())
            };
            let general = run(false);
            assert_eq!(general.0.len(), 1, "{general:x?}");
            assert_eq!(run(true), general);
        }

        #[test]
        fn a_return_address_into_the_entry_function_ends_every_walk_there_with_or_without_tables() {
            // Real code bytes: an x86_64 `call rel32` ending at +32 (the entry
            // point follows it) and another ending at +72, which a scan would take.
            let mut code = [0u8; 128];
            code[27] = 0xe8;
            code[67] = 0xe8;
            let base = code.as_ptr() as u64;
            let entry = base + 32;
            let mut t = one_module_table(base, 128, 0x5eed_00e1);
            t.set_entry(entry);
            // Frame 0's record returns into the entry function with a frame
            // pointer that leads nowhere (glibc's start code keeps none); further
            // up, a word a scan would take for a caller.
            let st = stack(&[0, 0, 0x10, entry + 5, 0, 0, base + 72, 0]);
            let regions = [(STACK, &st[..])];
            let regs = x86(base + 0x10, STACK, STACK + 16);
            for use_tables in [true, false] {
                for fast_path in [true, false] {
                    let opts = WalkOptions {
                        use_tables,
                        fast_path,
                        ..Default::default()
                    };
                    // The first walk marks its end, the second records it, the
                    // third replays it: all three must agree.
                    let memo = Remembering::new(&*t);
                    for pass in 0..3 {
                        let mut w: Walker<X86_64, _, _> =
                            Walker::new(regs, crate::walk::PcKind::Exact, SliceMemory::new(&regions), &memo, opts);
                        let mut buf = [Frame::default(); 8];
                        let n = w.fill(&mut buf);
                        let pcs: Vec<u64> = buf[..n].iter().map(|f| f.pc).collect();
                        assert_eq!(
                            (pcs, w.stop_reason()),
                            (vec![base + 0x10, entry + 5], StopReason::Outermost),
                            "tables {use_tables}, hot path {fast_path}, pass {pass}"
                        );
                    }
                    let remembered = memo.ends.borrow().len();
                    assert_eq!(remembered, fast_path as usize, "the walk end is kept");
                }
            }
        }
    }
}
