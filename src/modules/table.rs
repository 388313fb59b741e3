//! The table of modules: finding the module that holds an address.

use core::sync::atomic::{AtomicU16, AtomicU64, Ordering::Relaxed};

use super::Module;

/// Most modules the table holds; further modules are left out (and counted
/// in [`Table::dropped_modules`]).
pub const MAX_MODULES: usize = 512;
/// Most signal-return trampolines remembered: the C library's or the
/// vDSO's, and the restorers runtimes installed themselves.
pub const MAX_TRAMPOLINES: usize = 8;

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
    pub(super) trampolines: [u64; MAX_TRAMPOLINES],
    pub(super) trampoline_count: usize,
    /// The program's entry point (`AT_ENTRY`), 0 where unknown.
    pub(super) entry: u64,
    generation: u64,
    /// What keys this table's answers in the shared caches: unique to each
    /// [`Table::finish`], so two tables never share an answer, whatever
    /// generations their builders gave them; 0 (uncached) until finished.
    pub(super) cache_gen: u64,
    /// The index of the module [`Table::module_for_code`] last found by
    /// searching: a cold walk's next pc is usually in the same one.
    last_code: AtomicU16,
}

impl Table {
    /// An empty table.
    // Each use is a new table, hint and all: what the constant is for.
    #[allow(clippy::declare_interior_mutable_const)]
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
        last_code: AtomicU16::new(0),
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

    /// Records the program's entry point, which [`CodeMap::follows_call`](crate::walk::CodeMap::follows_call)
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
    pub(super) fn is_entry_function(&self, pc: u64) -> bool {
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
        // The code of a snapshot's modules does not overlap, so a module
        // whose code holds addr is the one the search would find.
        let hint = usize::from(self.last_code.load(Relaxed));
        if let Some(m) = self.modules().get(hint).filter(|m| m.is_code(addr)) {
            return Some(m);
        }
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
                let i = self.by_text[k];
                let m = &self.modules[i as usize];
                if m.is_code(addr) {
                    self.last_code.store(i, Relaxed);
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
pub(super) fn starts_at_or_below(texts: &[(u64, u64)], addr: u64) -> usize {
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
pub(super) const ENTRY_SPAN: u64 = 0x34;
#[cfg(not(target_arch = "aarch64"))]
pub(super) const ENTRY_SPAN: u64 = 0x30;

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
