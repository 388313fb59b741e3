//! The walker's view of the loaded code: the [`CodeMap`] trait, which the
//! module table implements, and [`SnapshotCode`] for captured stacks.

use core::sync::atomic::AtomicU64;

use super::answer::Answer;
use super::end_words::END_WORDS;
use super::frame::{Lookup, SCAN_MEMO_WORDS};
use crate::arch::Arch;
use crate::formats::sframe::QuickRow;
use crate::memory::MemoryReader;

/// The walker's view of the loaded code: where the unwind rows are and which
/// addresses are code.
pub trait CodeMap {
    /// The unwind information for `pc` (already adjusted: the exact pc or
    /// `ra - 1`).
    fn lookup(&self, pc: u64) -> Lookup;
    /// Whether `addr` lies in an executable segment of a known module.
    fn is_code(&self, addr: u64) -> bool;

    /// The executable range `[start, end)` holding `addr`, if any: the walk
    /// remembers the last one, since consecutive frames mostly share a
    /// module. The default knows only `addr` itself.
    fn code_range(&self, addr: u64) -> Option<(u64, u64)> {
        self.is_code(addr).then(|| (addr, addr.wrapping_add(1)))
    }
    /// Reads code bytes at `addr`; `false` unless the whole range is known,
    /// readable code.
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool;
    /// Whether the instruction just before `ra` is a call. The default
    /// reads the code; implementations may remember the answer.
    fn follows_call<A: Arch>(&self, ra: u64) -> bool {
        let mut before = [0u8; 8];
        ra >= 8 && self.read_code(ra - 8, &mut before) && A::ends_with_call(&before)
    }

    /// Whether `pc` is a signal-return trampoline known in advance (cheap;
    /// checked for every frame without a row of its own).
    fn is_known_trampoline(&self, pc: u64) -> bool {
        let _ = pc;
        false
    }

    /// Whether some known trampoline `t` has `t <= pc <= t + span`: `pc`
    /// inside a trampoline's first instructions, where a signal can
    /// interrupt it. The default asks [`CodeMap::is_known_trampoline`] of
    /// each address; implementations may answer in one pass.
    fn known_trampoline_within(&self, pc: u64, span: u64) -> bool {
        (0..=span).any(|d| pc >= d && self.is_known_trampoline(pc - d))
    }

    /// Whether lookup pc `pc` lies in code known to be the outermost frame
    /// whatever the unwind tables say (the program's entry function): asked
    /// by walks that do not use the tables, which have no row to say so,
    /// and by walks with them before they look the pc up, so a map's lookup
    /// there must say so too (a row without a return address, as the
    /// module table's does). The default knows none.
    fn is_outermost(&self, pc: u64) -> bool {
        let _ = pc;
        false
    }

    /// Whether `pc` is the first instruction of a signal-return trampoline,
    /// by its code; asked only for pcs outside known code. The default
    /// compares the code at `pc` with the architecture's.
    fn is_sigreturn<A: Arch>(&self, pc: u64) -> bool {
        let mut code = [0u8; 16];
        let code = &mut code[..A::SIGRETURN_CODE.len()];
        self.read_code(pc, code) && code == A::SIGRETURN_CODE
    }

    /// Whether [`CodeMap::is_sigreturn`] answers for `pc` from memory outside
    /// the known modules, which can change while the map does not (a
    /// remembered walk end must not rely on that answer). The default
    /// reads the map's own code, so says no.
    fn sigreturn_reads_memory<A: Arch>(&self, pc: u64) -> bool {
        let _ = pc;
        false
    }

    /// A value that [`CodeMap::answer_at`] takes, read once per run of the hot
    /// path so its inner loop keeps it in a register (the module table's
    /// cache generation, which keys its cache).
    fn answer_generation(&self) -> u64 {
        0
    }

    /// What the hot path may do at lookup pc `key`; `context` is what
    /// [`CodeMap::answer_generation`] gave. The default classifies
    /// [`CodeMap::lookup`] every time (a pc at or just before a known
    /// trampoline is always left to the general step); implementations may
    /// cache the answer.
    fn answer_at(&self, key: u64, context: u64) -> Answer {
        let _ = context;
        classify_at(self, key, &self.lookup(key))
    }

    /// [`CodeMap::answer_at`] when the answer is at hand without a search
    /// (cached); on `None` the hot loop calls [`CodeMap::answer_after_miss`], on
    /// its cold path. The default always answers.
    #[inline(always)]
    fn cached_answer(&self, key: u64, context: u64) -> Option<Answer> {
        Some(self.answer_at(key, context))
    }

    /// [`CodeMap::answer_at`] just after [`CodeMap::cached_answer`] missed for
    /// `key`: implementations with a cache may skip probing it again. The
    /// default asks [`CodeMap::answer_at`].
    fn answer_after_miss(&self, key: u64, context: u64) -> Answer {
        self.answer_at(key, context)
    }

    /// The words a scan from stack address `start` read the last time,
    /// copied into `words` (the last of them the one it took): their count,
    /// if remembered. The walk takes that word again only if the stack still
    /// holds every one of them. The default remembers nothing.
    fn recall_scan(&self, start: u64, words: &mut [u64; SCAN_MEMO_WORDS]) -> Option<usize> {
        let _ = (start, words);
        None
    }

    /// Remembers the words a scan from `start` read, the last one the one
    /// it took ([`CodeMap::recall_scan`]). The default forgets them.
    fn remember_scan(&self, start: u64, words: &[u64]) {
        let _ = (start, words);
    }

    /// What `take` makes of the walk end remembered under `key`; `None` if
    /// there is none, or if it changed while `take` read it (so `take` may
    /// see a torn entry, but its answer is then dropped). Its words are the
    /// walker's own: it checks them against its state and the stack before
    /// it takes them. The default remembers nothing.
    fn recall_end<R>(
        &self,
        key: u64,
        take: impl FnOnce(&[AtomicU64; END_WORDS]) -> R,
    ) -> Option<R> {
        let _ = (key, take);
        None
    }

    /// Remembers a walk end under `key` ([`CodeMap::recall_end`]). The
    /// default forgets it.
    fn remember_end(&self, key: u64, words: &[u64; END_WORDS]) {
        let _ = (key, words);
    }
}

/// The body of a [`CodeMap`] impl for a type that dereferences to a code
/// map: every method asks `**self`.
macro_rules! code_map_through_deref {
    () => {
        fn lookup(&self, pc: u64) -> $crate::walk::Lookup {
            (**self).lookup(pc)
        }
        fn is_code(&self, addr: u64) -> bool {
            (**self).is_code(addr)
        }
        fn code_range(&self, addr: u64) -> Option<(u64, u64)> {
            (**self).code_range(addr)
        }
        fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
            (**self).read_code(addr, buf)
        }
        fn follows_call<A: $crate::arch::Arch>(&self, ra: u64) -> bool {
            (**self).follows_call::<A>(ra)
        }
        fn is_known_trampoline(&self, pc: u64) -> bool {
            (**self).is_known_trampoline(pc)
        }
        fn known_trampoline_within(&self, pc: u64, span: u64) -> bool {
            (**self).known_trampoline_within(pc, span)
        }
        fn is_outermost(&self, pc: u64) -> bool {
            (**self).is_outermost(pc)
        }
        fn is_sigreturn<A: $crate::arch::Arch>(&self, pc: u64) -> bool {
            (**self).is_sigreturn::<A>(pc)
        }
        fn sigreturn_reads_memory<A: $crate::arch::Arch>(&self, pc: u64) -> bool {
            (**self).sigreturn_reads_memory::<A>(pc)
        }
        fn answer_generation(&self) -> u64 {
            (**self).answer_generation()
        }
        #[inline(always)]
        fn answer_at(&self, key: u64, context: u64) -> $crate::walk::answer::Answer {
            (**self).answer_at(key, context)
        }
        #[inline(always)]
        fn cached_answer(&self, key: u64, context: u64) -> Option<$crate::walk::answer::Answer> {
            (**self).cached_answer(key, context)
        }
        fn answer_after_miss(&self, key: u64, context: u64) -> $crate::walk::answer::Answer {
            (**self).answer_after_miss(key, context)
        }
        fn recall_scan(
            &self,
            start: u64,
            words: &mut [u64; $crate::walk::SCAN_MEMO_WORDS],
        ) -> Option<usize> {
            (**self).recall_scan(start, words)
        }
        fn remember_scan(&self, start: u64, words: &[u64]) {
            (**self).remember_scan(start, words)
        }
        fn recall_end<R>(
            &self,
            key: u64,
            take: impl FnOnce(&[core::sync::atomic::AtomicU64; $crate::walk::END_WORDS]) -> R,
        ) -> Option<R> {
            (**self).recall_end(key, take)
        }
        fn remember_end(&self, key: u64, words: &[u64; $crate::walk::END_WORDS]) {
            (**self).remember_end(key, words)
        }
    };
}
pub(crate) use code_map_through_deref;

/// A reference walks as what it refers to (the walker records walk ends
/// through a borrowed map).
impl<C: CodeMap + ?Sized> CodeMap for &C {
    code_map_through_deref!();
}

/// A code map for walking a captured stack: copies of code regions, SFrame
/// sections and known trampoline addresses, all held by the caller.
///
/// ```
/// use stackmark::walk::{CodeMap, Lookup, SnapshotCode};
/// let text = [0x90u8; 64];
/// let regions = [(0x1000, &text[..])];
/// let code = SnapshotCode::new(&regions, &[], &[]);
/// assert!(code.is_code(0x1010));
/// assert_eq!(code.lookup(0x1010), Lookup::NoInfo);
/// assert_eq!(code.lookup(0x2000), Lookup::Outside);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SnapshotCode<'a> {
    code: &'a [(u64, &'a [u8])],
    sframe: &'a [crate::formats::sframe::SFrame<'a>],
    trampolines: &'a [u64],
}

impl<'a> SnapshotCode<'a> {
    /// Code regions as `(address, bytes)`, SFrame sections that describe
    /// them, and the addresses of signal-return trampolines.
    pub fn new(
        code: &'a [(u64, &'a [u8])],
        sframe: &'a [crate::formats::sframe::SFrame<'a>],
        trampolines: &'a [u64],
    ) -> Self {
        SnapshotCode {
            code,
            sframe,
            trampolines,
        }
    }
}

impl CodeMap for SnapshotCode<'_> {
    fn lookup(&self, pc: u64) -> Lookup {
        if !self.is_code(pc) {
            return Lookup::Outside;
        }
        self.sframe
            .iter()
            .find_map(|s| s.find_row(pc))
            .map_or(Lookup::NoInfo, Lookup::SFrame)
    }

    fn is_code(&self, addr: u64) -> bool {
        self.code
            .iter()
            .any(|&(base, bytes)| addr.wrapping_sub(base) < bytes.len() as u64)
    }

    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        crate::memory::SliceMemory::new(self.code).read(addr, buf)
    }

    fn is_known_trampoline(&self, pc: u64) -> bool {
        self.trampolines.contains(&pc)
    }

    fn is_sigreturn<A: Arch>(&self, pc: u64) -> bool {
        self.trampolines.contains(&pc)
    }
}

/// The largest [`Arch::SIGRETURN_CALL_AT`] of any architecture: the hot
/// path's answers do not depend on the architecture.
const MAX_SIGRETURN_CALL_AT: u64 = {
    let x86_64 = crate::arch::x86_64::X86_64::SIGRETURN_CALL_AT;
    let aarch64 = crate::arch::aarch64::Aarch64::SIGRETURN_CALL_AT;
    if x86_64 > aarch64 {
        x86_64
    } else {
        aarch64
    }
};

/// `lookup`, the answer for lookup pc `key`, classified for the hot path. A
/// pc inside or just before a known trampoline (`key` is `ra - 1` for a
/// return address) is always left to the general step.
pub(crate) fn classify_at<C: CodeMap + ?Sized>(code: &C, key: u64, lookup: &Lookup) -> Answer {
    // The outermost frame ends a walk without tables before any step (its
    // row says so to a walk with them): the general step decides.
    if !matches!(lookup, Lookup::Outside) && code.is_outermost(key) {
        return Answer::SLOW;
    }
    Answer::classify(lookup, near_trampoline(code, key))
}

/// Whether lookup pc `key` lies from just before a known trampoline (a
/// return address's key) to its sigreturn call (an exact pc a signal
/// interrupted there).
fn near_trampoline<C: CodeMap + ?Sized>(code: &C, key: u64) -> bool {
    code.known_trampoline_within(key.wrapping_add(1), MAX_SIGRETURN_CALL_AT + 1)
}

/// [`classify_at`] of a row in known code that a quick row gave
/// ([`crate::formats::sframe::SFrame::quick_row`], or for `cfi`
/// [`crate::formats::cfi::Cfi::quick_row`]): the same answer as for the
/// row the general lookup gives there.
#[inline(always)]
pub(crate) fn classify_quick_at<C: CodeMap + ?Sized>(
    code: &C,
    key: u64,
    row: QuickRow,
    cfi: bool,
) -> Answer {
    if code.is_outermost(key) || near_trampoline(code, key) {
        return Answer::SLOW;
    }
    Answer::from_quick(row, cfi)
}
