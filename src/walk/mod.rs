//! The walk: table row, else frame pointer, else scan; generic over the reader.

#![forbid(unsafe_code)]

/// Which method produced a frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Method {
    /// Frame 0: taken directly from the captured or signal-provided registers.
    #[default]
    Context,
    /// Recovered with an SFrame row.
    SFrame,
    /// Recovered with an Apple compact-unwind encoding.
    CompactUnwind,
    /// Recovered with a row of the module's DWARF call frame information
    /// (`.eh_frame`), where no SFrame or compact-unwind entry covers the pc.
    Cfi,
    /// Recovered by following the frame-pointer chain.
    FramePointer,
    /// Recovered by scanning the stack for a plausible return address.
    /// Low trust: it may name a stale frame.
    Scan,
    /// Recovered from the `ucontext` a signal trampoline left on the stack; the
    /// pc is the exact interrupted instruction.
    SignalFrame,
    /// The caller of a frame 0 (or signal-interrupted frame) whose pc lies in
    /// no known code, as after a call through a null or wild pointer: the
    /// return address the call left, at the stack pointer on x86_64 or in
    /// the link register on AArch64, taken when it follows a call in known
    /// code. Also, on AArch64, a signal trampoline still in the link
    /// register of such a frame that has no table row and has not saved it
    /// in a frame record (a leaf signal handler, say).
    Entry,
}

impl Method {
    /// A short lowercase name, as printed after each markup `bt` element.
    pub fn name(self) -> &'static str {
        match self {
            Method::Context => "context",
            Method::SFrame => "sframe",
            Method::CompactUnwind => "compact",
            Method::Cfi => "cfi",
            Method::FramePointer => "fp",
            Method::Scan => "scan",
            Method::SignalFrame => "signal",
            Method::Entry => "entry",
        }
    }

    /// Whether frames found this way may be wrong (stack scanning).
    pub fn is_low_trust(self) -> bool {
        matches!(self, Method::Scan)
    }
}

/// What a frame's pc is, which says where it is looked up and how markup
/// marks it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PcKind {
    /// A return address, the instruction after a call: looked up at
    /// `pc - 1`, which lies inside the call even after a call that never
    /// returns (markup `:ra`).
    #[default]
    ReturnAddress,
    /// The instruction itself: frame 0, a frame a signal interrupted, and
    /// a signal trampoline the walk crossed, whose address the kernel (not
    /// a call) left (markup `:pc`).
    Exact,
}

impl PcKind {
    /// [`PcKind::Exact`] if `exact`, else [`PcKind::ReturnAddress`].
    #[inline(always)]
    pub const fn exact_if(exact: bool) -> PcKind {
        if exact {
            PcKind::Exact
        } else {
            PcKind::ReturnAddress
        }
    }

    /// Whether the pc is the instruction itself.
    #[inline(always)]
    pub const fn is_exact(self) -> bool {
        matches!(self, PcKind::Exact)
    }
}

/// One frame of a walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// The frame's pc: an instruction or a return address, as `pc_kind`
    /// says.
    pub pc: u64,
    /// The stack pointer in this frame.
    pub sp: u64,
    /// What `pc` is.
    pub pc_kind: PcKind,
    /// How this frame was found.
    pub method: Method,
}

impl Frame {
    /// The address to look up for this frame: `pc` if exact, else `pc - 1`,
    /// which lies inside the call instruction even after a noreturn call.
    pub fn lookup_pc(&self) -> u64 {
        if self.pc_kind.is_exact() {
            self.pc
        } else {
            self.pc.wrapping_sub(1)
        }
    }
}

pub(crate) mod ending;
internal! {
    mod fast;
}

/// The rows a [`CodeMap`] answers with, in the walker's terms.
pub use crate::formats::sframe::{CfaRule, RegRule, Row};
pub use ending::END_WORDS;

use core::sync::atomic::AtomicU64;

use crate::arch::{Arch, StepError};
use crate::memory::MemoryReader;
use fast::Answer;

/// What the module table knows about one pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The pc lies in no executable segment of a known module.
    Outside,
    /// The pc is in known code, but no unwind table covers it.
    NoInfo,
    /// An SFrame row covers the pc.
    SFrame(Row),
    /// A row of DWARF call frame information (`.eh_frame`) covers the pc,
    /// in the walker's terms.
    Cfi(Row),
    /// An Apple compact-unwind entry covers the pc.
    Compact {
        /// The 32-bit compact encoding.
        encoding: u32,
        /// Runtime address of the function's first instruction.
        func_start: u64,
    },
}

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
    /// by walks that do not use the tables, which have no row to say so.
    /// The default knows none.
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
        fast::classify_at(self, key, &self.lookup(key))
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
        fn answer_at(&self, key: u64, context: u64) -> $crate::walk::fast::Answer {
            (**self).answer_at(key, context)
        }
        #[inline(always)]
        fn cached_answer(&self, key: u64, context: u64) -> Option<$crate::walk::fast::Answer> {
            (**self).cached_answer(key, context)
        }
        fn answer_after_miss(&self, key: u64, context: u64) -> $crate::walk::fast::Answer {
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

/// The most words a remembered scan may have read
/// ([`CodeMap::recall_scan`]).
pub const SCAN_MEMO_WORDS: usize = 32;

/// Whether a walk's frames keep the ordering the walker guarantees: each
/// stack pointer is higher than the one before, except that a frame
/// reached through a signal frame may be on another stack, and the caller
/// of frame 0 or of a signal-interrupted frame may share its stack pointer
/// (a leaf that had not allocated a frame yet, its return address still in
/// a register).
pub fn sp_order_holds(frames: &[Frame]) -> bool {
    frames.windows(2).enumerate().all(|(i, w)| {
        let from_register_ok = i == 0 || w[0].method == Method::SignalFrame;
        w[1].method == Method::SignalFrame
            || w[1].sp > w[0].sp
            || (from_register_ok && w[1].sp == w[0].sp)
    })
}

pub(crate) use crate::memory::load_at_width;

/// Whether a frame found by `method` has an exact stack pointer, not just a
/// lower bound (left by an AArch64 frame-pointer step or a scan).
#[inline(always)]
pub(crate) fn sp_exact<A: Arch>(method: Method) -> bool {
    match method {
        Method::FramePointer | Method::Scan => A::FP_STEP_GIVES_CFA,
        _ => true,
    }
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

/// Limits and switches for one walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOptions {
    /// The most frames to produce: 256 by default. `walk_here` and
    /// `walk_ucontext` take the length of the buffer they fill instead.
    pub max_depth: usize,
    /// Use unwind tables (SFrame, compact unwind). Off gives a frame-pointer
    /// walk, for comparison.
    pub use_tables: bool,
    /// Follow frame pointers where no table applies.
    pub use_frame_pointers: bool,
    /// How many stack words stack scanning may inspect per frame; 0 disables
    /// scanning.
    pub scan_words: usize,
    /// How many frames in a row scanning may produce before the walk stops:
    /// past the outermost real frame (above `_start`, in the environment
    /// and auxiliary vector) scanning only finds stale code addresses.
    pub max_scans_in_a_row: usize,
    /// Try the specialised step for simple rows and frame pointers first
    /// (`walk::fast`). It never changes the frames a walk gives, only its cost;
    /// off sends every step through the general path, for comparison. A
    /// test hook: only with the `internals` feature (always on without it).
    #[cfg(feature = "internals")]
    pub fast_path: bool,
}

impl WalkOptions {
    /// Whether the walk tries the hot path first ([`WalkOptions::fast_path`]
    /// with the `internals` feature; always otherwise).
    #[inline(always)]
    fn takes_fast_path(&self) -> bool {
        #[cfg(feature = "internals")]
        return self.fast_path;
        #[cfg(not(feature = "internals"))]
        true
    }
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            max_depth: 256,
            use_tables: true,
            use_frame_pointers: true,
            scan_words: 512,
            max_scans_in_a_row: 3,
            #[cfg(feature = "internals")]
            fast_path: true,
        }
    }
}

/// How many signal frames one walk crosses at most. A signal frame is the
/// one step that may move the stack pointer down (the handler may run on
/// an alternate stack), so without a bound a ucontext that names its own
/// trampoline would repeat until the depth limit; real nesting of handlers
/// interrupted by further signals stays far below it.
pub const MAX_SIGNAL_FRAMES: u8 = 16;

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Still walking (or the walk has not started).
    Running,
    /// The outermost frame was reached: a row with an undefined return
    /// address, the program's entry function (walks without tables), or a
    /// frame-pointer chain ending in 0.
    Outermost,
    /// The return address was 0.
    ReturnAddressZero,
    /// No method recovered a caller that passed validation (return address
    /// in known code, stack pointer strictly increasing, memory readable).
    NoValidCaller,
    /// The depth limit or the output buffer was reached.
    DepthLimit,
}

/// A walk over the stack, one [`Frame`] at a time.
///
/// It is generic over the architecture, the memory reader and the code map,
/// so the same step logic walks the live process and captured stacks.
#[derive(Debug)]
pub struct Walker<A: Arch, M, C> {
    regs: A::Regs,
    mem: M,
    code: C,
    opts: WalkOptions,
    /// The current frame, not yet returned (`None` once returned).
    pending: Option<Frame>,
    depth: usize,
    /// Frames found by scanning in a row, up to the current one.
    scans_in_a_row: usize,
    /// Signal frames crossed so far ([`MAX_SIGNAL_FRAMES`] at most).
    signal_frames: u8,
    /// The executable range the last accepted return address fell in.
    last_code: core::cell::Cell<(u64, u64)>,
    /// The hot path's answer for the pending frame's lookup pc, found when
    /// it accepted that frame.
    next_hot: Option<Answer>,
    stop: StopReason,
    /// Whether this walk has marked a state as one to record a walk end
    /// from ([`end`]).
    end_marked: bool,
}

/// What a step found: the caller's registers, the method that found it,
/// and whether its pc is exact (a signal frame's).
type Stepped<R> = (R, Method, bool);

impl<A: Arch, M: MemoryReader, C: CodeMap> Walker<A, M, C> {
    /// A walk starting at `regs`. `pc_kind` says whether the pc is the
    /// instruction itself (a signal context) or a return address (a
    /// capture).
    #[inline(always)]
    pub fn new(regs: A::Regs, pc_kind: PcKind, mem: M, code: C, opts: WalkOptions) -> Self {
        let first = Frame {
            pc: A::pc(&regs),
            sp: A::sp(&regs),
            pc_kind,
            method: Method::Context,
        };
        Walker {
            regs,
            mem,
            code,
            opts,
            pending: Some(first),
            depth: 0,
            scans_in_a_row: 0,
            signal_frames: 0,
            last_code: core::cell::Cell::new((0, 0)),
            next_hot: None,
            stop: StopReason::Running,
            end_marked: false,
        }
    }

    /// Why the walk ended ([`StopReason::Running`] while it goes on).
    pub fn stop_reason(&self) -> StopReason {
        self.stop
    }

    /// The registers recovered for the next frame the walk will return
    /// (the caller of the frame most recently returned); before the first
    /// frame, the registers the walk started from.
    pub fn regs(&self) -> &A::Regs {
        &self.regs
    }

    /// Walks into `out`, returning the number of frames written. What
    /// `out` holds past that count is unspecified: a remembered walk end
    /// that proves stale, or one read while another thread rewrote it, may
    /// have been copied there before it was turned down.
    pub fn fill(&mut self, out: &mut [Frame]) -> usize {
        let mut n = 0;
        while n < out.len() {
            if self.opts.takes_fast_path() {
                n += self.fill_fast(&mut out[n..]);
                if n == out.len() {
                    break;
                }
                if let Some(k) = self.fill_end(&mut out[n..]) {
                    n += k;
                    continue;
                }
            }
            match self.next_general() {
                Some(f) => {
                    out[n] = f;
                    n += 1;
                }
                None => return n,
            }
        }
        if self.stop == StopReason::Running {
            self.stop = StopReason::DepthLimit;
        }
        n
    }

    /// Whether a candidate caller is plausible: a return address in known
    /// code (or a signal trampoline) and a higher stack pointer.
    fn accept(&self, cur: &Frame, next: &A::Regs) -> bool {
        self.accept_with(cur, next, false)
    }

    /// As [`Self::accept`]; `same_sp_ok` also admits an unchanged stack
    /// pointer, which is right for one case only: a leaf (or an interrupted
    /// function) before it has allocated a frame, whose return address is
    /// still in a register. That cannot repeat, so the walk still ends.
    fn accept_with(&self, cur: &Frame, next: &A::Regs, same_sp_ok: bool) -> bool {
        let pc = A::pc(next);
        let sp_ok = A::sp(next) > cur.sp || (same_sp_ok && A::sp(next) == cur.sp);
        if pc == 0 || !sp_ok {
            return false;
        }
        self.in_code(pc.wrapping_sub(1))
            || self.code.is_known_trampoline(pc)
            || self.code.is_sigreturn::<A>(pc)
    }

    /// Whether `addr` is known code, trying the last range found first.
    fn in_code(&self, addr: u64) -> bool {
        let (lo, hi) = self.last_code.get();
        if addr >= lo && addr < hi {
            return true;
        }
        match self.code.code_range(addr) {
            Some(r) => {
                self.last_code.set(r);
                true
            }
            None => false,
        }
    }

    /// Whether `pc` follows a call instruction in known code.
    fn after_call(&self, pc: u64) -> bool {
        self.code.follows_call::<A>(pc)
    }

    /// Applies an SP-based row when the current sp is only a lower bound
    /// (after a frame-pointer step on AArch64, whose frame record need not
    /// sit at the top of the frame).
    ///
    /// Where the row saves the frame pointer, the frame pointer the walk
    /// holds (from the chain) names the slot it was saved in, which fixes
    /// the CFA: that sp is tried first. Otherwise (code without frame
    /// records, such as C built without frame pointers) each higher stack
    /// slot is tried as the sp, and the first whose return address follows
    /// a call is taken: first a direct call to this very function, then any
    /// call (an indirect one, or one through a PLT stub). A stale return
    /// address left lower in the stack (in the callee's locals, say) seldom
    /// follows a direct call to this function. Both apply the function's
    /// own row, so the frame is an SFrame one; marking the search's frames
    /// as scans would also end walks through three such functions in a row.
    fn step_sframe_inexact_sp(&self, row: &Row, cur: &Frame) -> Option<A::Regs> {
        const SEARCH_WORDS: u64 = 64;
        let lowest = A::sp(&self.regs);
        let try_sp = |sp: u64| {
            let regs = A::with_sp(&self.regs, sp);
            let next = A::step_sframe(row, &regs, &self.mem, false).ok()?;
            (self.accept(cur, &next) && self.after_call(A::pc(&next))).then_some(next)
        };
        let from_record = match (row.fp, row.cfa) {
            (RegRule::AtCfa(fp_off), CfaRule::SpPlus(cfa_off)) => A::fp(&self.regs)
                .checked_add_signed(-i64::from(fp_off))
                .and_then(|cfa| cfa.checked_add_signed(-i64::from(cfa_off)))
                // However far above: a callee with large locals keeps its
                // record far below its caller's, and the search's window
                // would hold only stale words from those locals.
                .filter(|&sp| sp >= lowest),
            _ => None,
        };
        let calls_this = |next: &A::Regs| {
            let (ra, mut before) = (A::pc(next), [0u8; 8]);
            ra >= 8
                && self.code.read_code(ra - 8, &mut before)
                && A::direct_call_target(&before, ra) == Some(row.func_start)
        };
        if let Some(next) = from_record.and_then(try_sp) {
            return Some(next);
        }
        // One pass: the first candidate after a direct call to this
        // function, else the first after any call.
        let mut first = None;
        for k in 0..SEARCH_WORDS {
            let Some(next) = lowest.checked_add(k * 8).and_then(try_sp) else {
                continue;
            };
            if calls_this(&next) {
                return Some(next);
            }
            first.get_or_insert(next);
        }
        first
    }

    /// Returns frames into `out` for as long as the hot path finds their
    /// callers, and stops, with the walk's state written back, at the first
    /// frame it leaves to the general step. Where it answers, it gives
    /// exactly what the general step would: it takes only rows and
    /// frame-pointer links that [`Self::step`] would apply first, and only
    /// callers that step would accept. The frame at the depth limit is left
    /// to the general path too.
    #[inline(always)]
    fn fill_fast(&mut self, out: &mut [Frame]) -> usize {
        let Some(first) = self.pending else {
            return 0;
        };
        if let Some(lr) = A::link_register(&self.regs) {
            // Left to the general step, which takes a trampoline there as
            // the caller (see `step`).
            if matches!(first.method, Method::Context | Method::SignalFrame)
                && self.code.is_known_trampoline(A::strip_pac(lr))
            {
                return 0;
            }
        }
        let limit = out.len().min(
            self.opts
                .max_depth
                .saturating_sub(1)
                .saturating_sub(self.depth),
        );
        let context = self.code.answer_generation();
        let here = match self.next_hot.take() {
            Some(h) => h,
            None => self.code.answer_at(first.lookup_pc(), context),
        };
        let mut state = fast::State {
            frame: first,
            fp: A::fp(&self.regs),
            here,
        };
        let n = fast::run::<A, M, C>(
            &self.mem,
            &self.code,
            context,
            (self.opts.use_tables, self.opts.use_frame_pointers),
            &mut state,
            &mut out[..limit],
        );
        if n > 0 {
            let (f, fp, here) = state.handed_back();
            self.depth += n;
            self.regs = A::caller(&self.regs, f.pc, f.sp, fp);
            self.pending = Some(f);
            self.scans_in_a_row = 0;
            self.next_hot = Some(here);
        }
        n
    }

    /// One step from `cur` to its caller.
    fn step(&mut self, cur: &Frame) -> Result<(A::Regs, Method, bool), StopReason> {
        let lookup = self.lookup_for_step(cur)?;
        // Frame 0 and a frame interrupted by a signal may still hold their
        // return address in a register.
        let ra_in_register_ok = matches!(cur.method, Method::Context | Method::SignalFrame);
        if let Some(next) = self.step_signal_frame(cur, &lookup) {
            return Ok(next);
        }
        if ra_in_register_ok {
            if let Some(next) = self.step_from_entry(cur, &lookup) {
                return Ok(next);
            }
        }
        if self.opts.use_tables {
            let found = match lookup {
                Lookup::SFrame(row) => {
                    self.step_row(cur, &row, Method::SFrame, ra_in_register_ok)?
                }
                Lookup::Cfi(row) => self.step_row(cur, &row, Method::Cfi, ra_in_register_ok)?,
                Lookup::Compact {
                    encoding,
                    func_start,
                } => self.step_compact(cur, encoding, func_start, ra_in_register_ok)?,
                Lookup::NoInfo | Lookup::Outside => None,
            };
            if let Some(next) = found {
                return Ok(next);
            }
        }
        if self.opts.use_frame_pointers {
            if let Some(next) = self.step_frame_pointer(cur)? {
                return Ok(next);
            }
        }
        self.step_scan(cur)
    }

    /// The lookup a step starts from: the tables' row for the frame's pc,
    /// or without tables only whether the pc is code (the outermost frame
    /// ends the walk there, as its row would say).
    fn lookup_for_step(&self, cur: &Frame) -> Result<Lookup, StopReason> {
        let key = cur.lookup_pc();
        Ok(if self.opts.use_tables {
            self.code.lookup(key)
        } else if self.code.is_outermost(key) {
            // What the tables' outermost row says: past the entry function
            // lie only argv, the environment and the auxiliary vector.
            return Err(StopReason::Outermost);
        } else if self.in_code(key) {
            Lookup::NoInfo
        } else {
            Lookup::Outside
        })
    }

    /// The step across a signal trampoline: the interrupted registers from
    /// the `ucontext` the kernel left on the stack.
    fn step_signal_frame(&mut self, cur: &Frame, lookup: &Lookup) -> Option<Stepped<A::Regs>> {
        let regs = self.regs;
        // An exact pc may lie inside a trampoline, up to its system call (a
        // signal landed after its first instruction), with the stack as at
        // its start.
        let known_trampoline = || {
            if cur.pc_kind.is_exact() {
                self.code
                    .known_trampoline_within(cur.pc, A::SIGRETURN_CALL_AT)
            } else {
                self.code.is_known_trampoline(cur.pc)
            }
        };
        // Trampolines have no row of their own (or a row marked signal);
        // only outside known code is their code worth reading.
        let trampoline = match lookup {
            Lookup::SFrame(row) | Lookup::Cfi(row) if row.signal_frame => known_trampoline(),
            // A return address is looked up one byte early, so a trampoline
            // right after a function with a row finds that function's row:
            // it still counts unless the function ends in a call (a call
            // that never returns leaves the same return address). The
            // cheap test, that the function ends at the pc, comes first.
            Lookup::SFrame(row) | Lookup::Cfi(row) => {
                !cur.pc_kind.is_exact()
                    && cur.pc.wrapping_sub(row.func_start) >= u64::from(row.func_size)
                    && self.code.is_known_trampoline(cur.pc)
                    && !self.after_call(cur.pc)
            }
            Lookup::Compact { .. } => false,
            Lookup::NoInfo => known_trampoline(),
            Lookup::Outside => {
                known_trampoline()
                    || self.code.is_sigreturn::<A>(cur.pc)
                    || cur.pc_kind.is_exact()
                        && self
                            .code
                            .is_sigreturn::<A>(cur.pc.wrapping_sub(A::SIGRETURN_CALL_AT))
            }
        };
        if !trampoline || self.signal_frames >= MAX_SIGNAL_FRAMES {
            return None;
        }
        // A trampoline reached from a link register (a handler without a
        // row) has the handler's sp, which the handler may have moved
        // since: only a lower bound of its own.
        let from_link = cur.method == Method::Entry && A::link_register(&regs).is_some();
        let exact = sp_exact::<A>(cur.method) && !from_link;
        let next = A::signal_frame_regs(&regs, exact, &self.mem).ok()?;
        // The handler may run on an alternate stack, below or above the
        // interrupted one: no sp ordering across a signal frame, so the
        // number crossed is what bounds the walk.
        if A::pc(&next) == 0 || A::sp(&next) == 0 {
            return None;
        }
        self.signal_frames += 1;
        self.mem.enter_stack(A::sp(&next));
        Some((next, Method::SignalFrame, true))
    }

    /// The step for a frame that holds its return address in a register
    /// (frame 0, or one a signal interrupted) where the tables have no row:
    /// the caller as at a function's first instruction.
    fn step_from_entry(&self, cur: &Frame, lookup: &Lookup) -> Option<Stepped<A::Regs>> {
        let regs = self.regs;
        // A precise pc in no known code: most likely a call through a bad
        // pointer, which ran no instruction of the callee. The frame pointer
        // still holds the calling function's frame, so a frame-pointer step
        // would skip that function, the one that made the bad call.
        if matches!(lookup, Lookup::Outside) && cur.pc_kind.is_exact() {
            if let Ok(next) = A::at_entry(&regs, &self.mem) {
                if self.after_call(A::pc(&next)) && self.accept_with(cur, &next, true) {
                    return Some((next, Method::Entry, false));
                }
            }
        }
        // A handler without a row, interrupted before it saved its link
        // register in a frame record, holds its return address to the
        // trampoline only there. A trampoline follows no call, so the
        // register is not stale, and a frame-pointer step would skip both it
        // and the interrupted pc. (Once the record holds it, the
        // frame-pointer step finds it, with the handler's sp.)
        if matches!(lookup, Lookup::NoInfo | Lookup::Outside) {
            let lr = A::link_register(&regs).map(A::strip_pac);
            let in_record = || {
                let saved = A::step_frame_pointer(&regs, &self.mem).ok();
                saved.map(|n| A::strip_pac(A::pc(&n))) == lr
            };
            if lr.is_some_and(|lr| self.code.is_known_trampoline(lr)) && !in_record() {
                if let Ok(next) = A::at_entry(&regs, &self.mem) {
                    if self.accept_with(cur, &next, true) {
                        return Some((next, Method::Entry, false));
                    }
                }
            }
        }
        None
    }

    /// The step by an SFrame or DWARF CFI row (`method` says which).
    fn step_row(
        &mut self,
        cur: &Frame,
        row: &Row,
        method: Method,
        ra_in_register_ok: bool,
    ) -> Result<Option<Stepped<A::Regs>>, StopReason> {
        // A scanned frame may be a stale one, its sp only the scan's guess:
        // a zero its row reads proves nothing, and a further scan may still
        // find the caller.
        let scanned = cur.method == Method::Scan;
        if row.ra == RegRule::Undefined {
            return Err(StopReason::Outermost);
        }
        let sp_based = matches!(row.cfa, CfaRule::SpPlus(_));
        if !sp_exact::<A>(cur.method) && sp_based {
            return Ok(self
                .step_sframe_inexact_sp(row, cur)
                .map(|next| (next, method, false)));
        }
        let ra_in_register = row.ra == RegRule::SameValue && ra_in_register_ok;
        match A::step_sframe(row, &self.regs, &self.mem, ra_in_register_ok) {
            Ok(next) if A::pc(&next) == 0 && !scanned => Err(StopReason::ReturnAddressZero),
            Ok(next) if self.accept_with(cur, &next, ra_in_register) => {
                Ok(Some((next, method, false)))
            }
            Err(StepError::Outermost) => Err(StopReason::Outermost),
            _ => Ok(None),
        }
    }

    /// The step by an Apple compact-unwind entry, or by the prologue or
    /// epilogue an exact pc lies in.
    fn step_compact(
        &self,
        cur: &Frame,
        encoding: u32,
        func_start: u64,
        ra_in_register_ok: bool,
    ) -> Result<Option<Stepped<A::Regs>>, StopReason> {
        let regs = self.regs;
        let scanned = cur.method == Method::Scan;
        let mem = StackThenCode {
            stack: &self.mem,
            code: &self.code,
        };
        let ok = ra_in_register_ok;
        // An exact pc may lie in a prologue or epilogue, where no encoding
        // holds: the code there gives the caller (for any encoding but
        // null, whose entry may cover no function).
        let prologue = if ok && encoding != 0 {
            A::step_in_prologue(func_start, &regs, &mem)
        } else {
            Ok(None)
        };
        // DWARF and null encodings, and broken frames, fall through to
        // frame pointers.
        let step = match prologue {
            Ok(Some(next)) => Some(next),
            Ok(None) => A::step_compact(encoding, func_start, &regs, &mem, ok).ok(),
            Err(_) => None,
        };
        match step {
            Some(next) if A::pc(&next) == 0 && !scanned => Err(StopReason::ReturnAddressZero),
            Some(next) if self.accept_with(cur, &next, ok) => {
                Ok(Some((next, Method::CompactUnwind, false)))
            }
            _ => Ok(None),
        }
    }

    /// The step by the frame record the frame pointer points at.
    fn step_frame_pointer(&self, cur: &Frame) -> Result<Option<Stepped<A::Regs>>, StopReason> {
        let Ok(next) = A::step_frame_pointer(&self.regs, &self.mem) else {
            return Ok(None);
        };
        // A zero return address ends the walk only under a frame pointer
        // the walk has reason to trust: in an interrupted or first frame,
        // or after a scan, the register may be any pointer (to a zeroed
        // buffer, say), and a scan may still find the caller.
        let guessed_fp = matches!(
            cur.method,
            Method::Context | Method::SignalFrame | Method::Scan
        );
        if A::pc(&next) == 0 {
            if !guessed_fp {
                return Err(StopReason::ReturnAddressZero);
            }
        } else if self.accept(cur, &next) {
            return Ok(Some((next, Method::FramePointer, false)));
        }
        Ok(None)
    }

    /// The last resort: a scan of the stack for a return address.
    fn step_scan(&mut self, cur: &Frame) -> Result<Stepped<A::Regs>, StopReason> {
        // A frame pointer of 0 reached through the frame-pointer chain is
        // the ABI's end marker (`_start` and new threads clear it): this is
        // the outermost frame, and scanning past it only finds stale words.
        // Checked before the scan limit, so the reason does not depend on
        // how scanning was turned off.
        if cur.method == Method::FramePointer && A::fp(&self.regs) == 0 {
            return Err(StopReason::Outermost);
        }
        if self.scans_in_a_row >= self.opts.max_scans_in_a_row {
            return Err(StopReason::NoValidCaller);
        }
        self.scan_stack(cur).ok_or(StopReason::NoValidCaller)
    }

    /// Looks upwards from sp for a word that points just after a call
    /// instruction in known code, or at a known signal trampoline.
    fn scan_stack(&self, cur: &Frame) -> Option<(A::Regs, Method, bool)> {
        let start = cur.sp.checked_add(7)? & !7;
        let (slot, word) = self.recall_scan(start).or_else(|| self.scan_from(start))?;
        // The word below a return address is often the caller's saved
        // frame pointer (x86_64 `push rbp`, AArch64 frame records): adopt
        // it when it points further up the stack, so the walk can resume
        // by frame pointer.
        let fp = self
            .mem
            .read_u64(slot.wrapping_sub(8))
            .filter(|&fp| fp > slot && fp % 8 == 0);
        let ra = A::strip_pac(word);
        let next = A::scanned(&self.regs, ra, slot, fp);
        // The slot is at or above sp, so only a slot at the very top of the
        // address space gives an sp that does not rise (it wraps).
        (A::sp(&next) > cur.sp).then_some((next, Method::Scan, false))
    }

    /// The slot (and its word) a remembered scan from `start` took, if the
    /// stack still holds every word it read: a scan would take it again.
    fn recall_scan(&self, start: u64) -> Option<(u64, u64)> {
        let mut words = [0u64; SCAN_MEMO_WORDS];
        let n = self.code.recall_scan(start, &mut words)?;
        if n == 0 || n > self.opts.scan_words {
            return None;
        }
        for (i, &w) in words[..n].iter().enumerate() {
            if self.mem.read_u64(scan_slot(start, i)?) != Some(w) {
                return None;
            }
        }
        Some((scan_slot(start, n - 1)?, words[n - 1]))
    }

    /// The first slot from `start` up (and its word) whose word is a return
    /// address just after a call in known code; remembers the words read on
    /// the way.
    fn scan_from(&self, start: u64) -> Option<(u64, u64)> {
        let mut read = [0u64; SCAN_MEMO_WORDS];
        for i in 0..self.opts.scan_words {
            let slot = scan_slot(start, i)?;
            let word = self.mem.read_u64(slot)?;
            if let Some(r) = read.get_mut(i) {
                *r = word;
            }
            let ra = A::strip_pac(word);
            // Most stack words are small numbers or point into the stack:
            // neither is code, and both are cheaper to rule out than a
            // search of the module table.
            if ra < 8 || self.mem.is_stack(ra) || !self.code.is_code(ra - 1) {
                continue;
            }
            // A signal trampoline follows no call (a `nop` precedes it for
            // unwinders' sake), yet a handler's return address to it is a
            // frame, and the way across the signal frame.
            if !self.after_call(ra) && !self.code.is_known_trampoline(ra) {
                continue;
            }
            if i < SCAN_MEMO_WORDS {
                self.code.remember_scan(start, &read[..=i]);
            }
            return Some((slot, word));
        }
        None
    }
}

/// The `i`th stack word of a scan from `start`.
fn scan_slot(start: u64, i: usize) -> Option<u64> {
    start.checked_add((i as u64).checked_mul(8)?)
}

/// Reads the stack, and known code where the stack reader declines: a
/// compact x86_64 stack-indirect frame reads its size from the function's
/// `subq`.
struct StackThenCode<'a, M, C> {
    stack: &'a M,
    code: &'a C,
}

impl<M: MemoryReader, C: CodeMap> MemoryReader for StackThenCode<'_, M, C> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.stack.read(addr, buf) || self.code.read_code(addr, buf)
    }
}

impl<A: Arch, M: MemoryReader, C: CodeMap> Iterator for Walker<A, M, C> {
    type Item = Frame;

    fn next(&mut self) -> Option<Frame> {
        if self.opts.takes_fast_path() {
            let mut one = [Frame::default()];
            if self.fill_fast(&mut one) == 1 {
                return Some(one[0]);
            }
        }
        self.next_general()
    }
}

impl<A: Arch, M: MemoryReader, C: CodeMap> Walker<A, M, C> {
    /// Returns the pending frame after finding its caller with the general
    /// step.
    fn next_general(&mut self) -> Option<Frame> {
        self.next_hot = None;
        let mut cur = self.pending.take()?;
        if self.opts.max_depth == 0 {
            self.stop = StopReason::DepthLimit;
            return None;
        }
        self.depth += 1;
        if self.depth >= self.opts.max_depth {
            self.stop = StopReason::DepthLimit;
            return Some(cur);
        }
        match self.step(&cur) {
            Ok((regs, method, precise)) => {
                // A signal frame was found at a trampoline, whose address
                // the kernel put where a return address goes: no call did,
                // so it is the instruction itself (the byte before it is
                // another function's, or padding).
                if method == Method::SignalFrame {
                    cur.pc_kind = PcKind::Exact;
                }
                self.regs = regs;
                self.scans_in_a_row = if method == Method::Scan {
                    self.scans_in_a_row + 1
                } else {
                    0
                };
                self.pending = Some(Frame {
                    pc: A::pc(&regs),
                    sp: A::sp(&regs),
                    pc_kind: PcKind::exact_if(precise),
                    method,
                });
            }
            Err(reason) => self.stop = reason,
        }
        Some(cur)
    }
}

#[cfg(test)]
pub(crate) mod tests;
