//! What the walk asks of the table: each pc's unwind row (SFrame, compact
//! unwind, DWARF CFI), answered from the caches where they hold it.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::table::ENTRY_SPAN;
use super::{Module, Table};
use crate::walk::answer::Answer;
use crate::walk::{CodeMap, Lookup, Row};

/// What [`Table::quick_answer`] found for a pc.
enum Quick {
    /// Its answer, from a quick row.
    Answer(Answer),
    /// The SFrame row the general lookup gives there, to classify.
    Row(Row),
    /// Nothing: the general lookup decides.
    General,
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
        let module = self.module_for_code(key);
        let hot = match module.map_or(Quick::General, |m| self.quick_answer(m, key)) {
            Quick::Answer(hot) => hot,
            Quick::Row(row) => crate::walk::classify_at(self, key, &Lookup::SFrame(row)),
            Quick::General => crate::walk::classify_at(self, key, &self.lookup_in(module, key)),
        };
        crate::cache::step::put(key, self.cache_gen, hot);
        hot
    }

    /// The answer for lookup pc `key` in module `m` where the table the
    /// general lookup takes its row from gives a quick row there (SFrame's
    /// [`quick_row`](crate::formats::sframe::SFrame::quick_row), or, where
    /// neither SFrame nor compact unwind covers the pc, DWARF CFI's
    /// [`quick_row`](crate::formats::cfi::Cfi::quick_row)): the answer the
    /// general lookup classifies to, in fewer instructions
    /// (`docs/performance.md`). Where SFrame covers the pc without a quick
    /// row, the row the general lookup would search for again; elsewhere
    /// nothing.
    #[inline(always)]
    fn quick_answer(&self, m: &Module, key: u64) -> Quick {
        if let Some(sframe) = &m.sframe {
            if let Some(row) = sframe.quick_row(key) {
                return Quick::Answer(crate::walk::classify_quick_at(self, key, row, false));
            }
            if let Some(row) = sframe.find_row(key) {
                // The entry function's row is the outermost one, which the
                // general lookup gives before any table's.
                if self.is_entry_function(key) {
                    return Quick::General;
                }
                return Quick::Row(row);
            }
        }
        // As above; and the CFI is asked only where neither SFrame nor
        // compact unwind covers the pc.
        if m.compact.is_some() || self.is_entry_function(key) {
            return Quick::General;
        }
        match m.cfi.as_ref().and_then(|cfi| cfi.quick_row(key)) {
            Some(row) => Quick::Answer(crate::walk::classify_quick_at(self, key, row, true)),
            None => Quick::General,
        }
    }

    /// The lookup itself, without the cache.
    #[inline(always)]
    pub fn lookup_uncached(&self, pc: u64) -> Lookup {
        self.lookup_in(self.module_for_code(pc), pc)
    }

    /// [`Table::lookup_uncached`] of `pc`, whose module (the one whose code
    /// holds it) is `module`.
    #[inline(always)]
    fn lookup_in(&self, module: Option<&Module>, pc: u64) -> Lookup {
        match module {
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
        crate::cache::walk_ends::put(key, self.cache_gen, words, crate::walk::walk_end_used);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::elf::{PF_R, PF_X};
    use crate::formats::sframe::SFrame;
    use crate::modules::Segment;
    use crate::walk::answer::AnswerKind;
    use crate::walk::classify_at;

    /// The sections GNU as and ld wrote (`tests/data/sframe/testcases/`),
    /// as `(name, runtime address, bytes)`.
    fn recorded_sections() -> Vec<(String, u64, Vec<u8>)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sframe/testcases");
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Two fields of a flat JSON object: a number and an array of them.
            let field = |k: &str| {
                let at = text.find(&format!("\"{k}\"")).unwrap() + k.len() + 2;
                text[at..].trim_start_matches([':', ' ']).to_string()
            };
            let base = field("section_base");
            let base = base[..base.find(|c: char| !c.is_ascii_digit()).unwrap()].parse().unwrap();
            let content = field("content");
            let bytes = content[1..content.find(']').unwrap()]
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim().parse().unwrap())
                .collect();
            out.push((path.display().to_string(), base, bytes));
        }
        out
    }

    /// A module of one executable segment, `lo..lo + size`.
    fn code_module(name: &[u8], lo: u64, size: u64) -> Module {
        let mut m = Module::EMPTY;
        m.set_name(name);
        assert!(m.push_segment(Segment {
            start: lo,
            size,
            vaddr: lo,
            flags: PF_R | PF_X,
        }));
        m
    }

    /// The quick answer at `pc` in `t`, if any, and the general lookup's
    /// classified answer, which the quick one must equal.
    fn answers(t: &Table, pc: u64, label: &str) -> (Option<Answer>, Answer) {
        let general = classify_at(t, pc, &t.lookup_uncached(pc));
        let quick = match t.module_for_code(pc).map(|m| t.quick_answer(m, pc)) {
            Some(Quick::Answer(q)) => Some(q),
            Some(Quick::Row(row)) => {
                let found = classify_at(t, pc, &Lookup::SFrame(row));
                assert_eq!(found, general, "{label} at {pc:#x}: the row found on the way");
                None
            }
            _ => None,
        };
        if let Some(q) = quick {
            assert_eq!(q, general, "{label} at {pc:#x}");
        }
        (quick, general)
    }

    /// Wherever the quick answer applies, it is the answer the general
    /// lookup classifies to: at every pc of every recorded section of
    /// version 1 or 2 (and 3, where it never applies), in a table with a
    /// trampoline and the entry function inside the section's code. And it
    /// gives most of the rules the hot path takes from those versions.
    #[test]
    fn the_quick_answer_is_the_general_lookups_wherever_it_applies() {
        let (mut quick, mut rules) = (0, 0);
        for (name, base, bytes) in recorded_sections() {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            let Ok(sf) = SFrame::parse(bytes, base) else {
                continue;
            };
            let Some((lo, hi)) = sf.pc_range() else {
                continue;
            };
            let mut m = code_module(b"recorded", lo, hi - lo);
            m.sframe = Some(sf);
            let mut t = Box::new(Table::EMPTY);
            t.push(m);
            // A trampoline at the first function's second row, and the last
            // function as the entry function.
            let mut fns = sf.functions();
            if let Some(at) = fns.next().and_then(|f| f.rows().nth(1)) {
                t.add_trampoline(at.row_start);
            }
            if let Some(f) = sf.functions().last() {
                t.set_entry(f.fde.start);
            }
            t.finish(0x9_0000_0001);
            for pc in lo..hi {
                let (answer, general) = answers(&t, pc, &name);
                if let Some(q) = answer {
                    assert!(sf.version() <= 2, "{name} at {pc:#x}");
                    quick += usize::from(q.kind() == AnswerKind::Rule);
                }
                rules += usize::from(general.kind() == AnswerKind::Rule && sf.version() <= 2);
            }
        }
        assert!(quick * 10 >= rules * 9, "{quick} of {rules}");
    }

    /// As above for DWARF CFI, in a module with CFI alone: the C library
    /// of both architectures, with a trampoline and the entry function
    /// inside its code, looked up every few bytes and at every byte around
    /// those two. And the quick answer gives nearly every rule there.
    #[test]
    fn the_quick_cfi_answer_is_the_general_lookups_wherever_it_applies() {
        use crate::formats::cfi::{Cfi, Registers};
        use object::{Object, ObjectSection};
        let libs = [
            ("/lib/x86_64-linux-gnu/libc.so.6", Registers::X86_64, 99),
            ("/usr/aarch64-linux-gnu/lib/libc.so.6", Registers::AARCH64, 60),
        ];
        for (path, regs, percent) in libs {
            let file = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let file: &'static [u8] = Box::leak(file.into_boxed_slice());
            let obj = object::File::parse(file).unwrap();
            let section = |name: &str| {
                let s = obj.section_by_name(name).unwrap();
                (s.data().unwrap(), s.address(), s.size())
            };
            let (hdr, hdr_addr, _) = section(".eh_frame_hdr");
            let (eh_frame, _, _) = section(".eh_frame");
            let (_, lo, size) = section(".text");
            let mut m = code_module(b"libc", lo, size);
            m.cfi = Some(Cfi::new(hdr, hdr_addr, eh_frame, regs).unwrap());
            let mut t = Box::new(Table::EMPTY);
            t.push(m);
            let (trampoline, entry) = (lo + 0x1000, lo + 0x2000);
            t.add_trampoline(trampoline);
            t.set_entry(entry);
            t.finish(0x9_0000_0003);
            let near = |c: u64| c - 64..c + ENTRY_SPAN + 64;
            let pcs = (lo..lo + size).step_by(5).chain(near(trampoline)).chain(near(entry));
            let (mut quick, mut rules) = (0, 0);
            for pc in pcs {
                let (answer, general) = answers(&t, pc, path);
                if let Some(q) = answer {
                    quick += usize::from(q.kind() == AnswerKind::Rule);
                }
                rules += usize::from(general.kind() == AnswerKind::Rule);
            }
            assert!(quick * 100 >= rules * percent, "{path}: {quick} of {rules}");
        }
    }
}
