//! Remembered walk ends: the general steps from the state where the hot
//! path left off to the end of the walk, taken once and replayed while the
//! stack still holds every word they read.
//!
//! Why a replay gives the walk the steps would have: from a frame found by
//! a table, a frame pointer or a scan, the general step depends only on the
//! frame (pc, sp, method, precision), the frame pointer, the scans in a
//! row, the walk's options, the module table (its generation keys the
//! cache) and the stack words it reads. Return-address registers are read
//! only for frame 0 and after a signal frame, which are never recorded, and
//! a recording that changes any other register, takes a row that reads
//! one (FLEX rows), crosses onto another stack, makes a read other than a
//! stack word or asks memory outside the modules whether a pc is a signal
//! trampoline is not kept. The
//! recording keeps the state, the frames, each failed read and the
//! window of stack words holding every successful read; the replay checks
//! the state, that each failed read still fails and that the window reads
//! back the same, and that the depth limit is as far away.

use core::cell::{Cell, RefCell};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::code_map::CodeMap;
use super::end_words::*;
use super::frame::{Frame, Lookup, Method, PcKind, StopReason, SCAN_MEMO_WORDS};
use crate::arch::Arch;
use crate::memory::MemoryReader;

/// An entry starting from `state` with header `header` and nothing else.
pub(super) fn head(state: [u64; OPTS + 1], header: u64) -> [u64; END_WORDS] {
    let mut e = [0u64; END_WORDS];
    e[..=OPTS].copy_from_slice(&state);
    e[HEADER] = header;
    e
}

pub(super) fn method_code(m: Method) -> u64 {
    match m {
        Method::Context => 0,
        Method::SFrame => 1,
        Method::CompactUnwind => 2,
        Method::FramePointer => 3,
        Method::Scan => 4,
        Method::SignalFrame => 5,
        Method::Entry => 6,
        Method::Cfi => 7,
    }
}

pub(super) fn method_from(code: u64) -> Option<Method> {
    Some(match code {
        1 => Method::SFrame,
        3 => Method::FramePointer,
        4 => Method::Scan,
        7 => Method::Cfi,
        _ => return None,
    })
}

pub(super) fn stop_code(s: StopReason) -> u64 {
    match s {
        StopReason::Outermost => 1,
        StopReason::ReturnAddressZero => 2,
        StopReason::NoValidCaller => 3,
        StopReason::Running | StopReason::DepthLimit => 0,
    }
}

fn stop_from(code: u64) -> Option<StopReason> {
    Some(match code {
        1 => StopReason::Outermost,
        2 => StopReason::ReturnAddressZero,
        3 => StopReason::NoValidCaller,
        _ => return None,
    })
}

/// What a remembered entry gives the walk's state.
pub(super) enum Recalled {
    /// Another state's entry (or none).
    Other,
    /// The state was reached once: record its end now.
    Seen,
    /// Its walk does not end within [`END_FRAMES`] steps.
    NotWorth,
    /// The stack no longer holds the words its steps read (or the depth
    /// limit is nearer): record it again.
    Stale,
    /// Its frames are in `out[..n]`; the walk's stop reason and the last
    /// frame's pc, sp and frame pointer.
    Replayed {
        n: usize,
        stop: StopReason,
        last: [u64; 3],
    },
}

/// Checks entry `e` against the walk's `state` and the stack and, if it
/// still holds, writes its frames to `out`. `first` is the pending frame's
/// method and `room` how many frames the depth limit leaves. The entry may
/// be torn (its cache discards the answer then), so every count in it is
/// bounded before use.
pub(super) fn replay<M: MemoryReader>(
    mem: &M,
    e: &[AtomicU64; END_WORDS],
    state: &[u64; OPTS + 1],
    first: Method,
    room: usize,
    out: &mut [Frame],
) -> Recalled {
    let w = |i: usize| e[i].load(Relaxed);
    if (0..=OPTS).any(|i| w(i) != state[i]) {
        return Recalled::Other;
    }
    let h = w(HEADER);
    if h == SEEN {
        return Recalled::Seen;
    }
    let (nf, nw, n_fails) = (
        (h & 0xff) as usize,
        (h >> 16 & 0xff) as usize,
        (h >> 24 & 0xff) as usize,
    );
    if nf == 0 {
        return Recalled::NotWorth;
    }
    let Some(stop) = stop_from(h >> 8 & 0xff) else {
        return Recalled::Stale;
    };
    if nf > END_FRAMES || nw > END_WINDOW || n_fails > END_FAILS || nf > out.len() || nf >= room {
        return Recalled::Stale;
    }
    let same = mem.words_are(w(WINDOW_LO), &e[WINDOW_AT..WINDOW_AT + nw]);
    let failed = (0..n_fails).all(|i| mem.read_u64(w(FAILS_AT + i)).is_none());
    if !same || !failed {
        return Recalled::Stale;
    }
    let methods = w(METHODS);
    for (i, f) in out[..nf].iter_mut().enumerate() {
        let m = methods >> (8 * i) & 0xff;
        let method = match i {
            0 => first,
            _ => match method_from(m & 0x7f) {
                Some(m) => m,
                None => return Recalled::Stale,
            },
        };
        *f = Frame {
            pc: w(FRAMES_AT + 2 * i),
            sp: w(FRAMES_AT + 2 * i + 1),
            pc_kind: PcKind::exact_if(m & 0x80 != 0),
            method,
        };
    }
    Recalled::Replayed {
        n: nf,
        stop,
        last: [
            w(FRAMES_AT + 2 * (nf - 1)),
            w(FRAMES_AT + 2 * nf - 1),
            w(LAST_FP),
        ],
    }
}

/// The `nw` (at most [`END_WINDOW`]) stack words at `lo`, read at once into
/// `buf`; `None` if any of them is unreadable.
#[inline(always)]
pub(super) fn read_window<'b, M: MemoryReader>(
    mem: &M,
    lo: u64,
    nw: usize,
    buf: &'b mut [u8; END_WINDOW * 8],
) -> Option<impl Iterator<Item = u64> + 'b> {
    let bytes = &mut buf[..nw * 8];
    if nw > 0 && !mem.read(lo, bytes) {
        return None;
    }
    Some(bytes.chunks_exact(8).map(|b| {
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        u64::from_ne_bytes(word)
    }))
}

/// The code map of a recording: it notes the answers a replay could not
/// check, which spoil the recording. Those are rows that read a register
/// other than the stack and frame pointers (FLEX rows may base the CFA or
/// a saved register on any register, and the state holds only those two),
/// and whether a pc outside every module is a signal trampoline, which
/// reads memory that may change while the table does not.
pub(super) struct Noting<'c, C> {
    pub(super) inner: &'c C,
    pub(super) spoiled: Cell<bool>,
}

impl<C: CodeMap> CodeMap for Noting<'_, C> {
    fn lookup(&self, pc: u64) -> Lookup {
        let l = self.inner.lookup(pc);
        if matches!(&l, Lookup::SFrame(row) | Lookup::Cfi(row) if row.names_registers()) {
            self.spoiled.set(true);
        }
        l
    }
    fn is_code(&self, addr: u64) -> bool {
        self.inner.is_code(addr)
    }
    fn code_range(&self, addr: u64) -> Option<(u64, u64)> {
        self.inner.code_range(addr)
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.inner.read_code(addr, buf)
    }
    fn follows_call<A: Arch>(&self, ra: u64) -> bool {
        self.inner.follows_call::<A>(ra)
    }
    fn is_known_trampoline(&self, pc: u64) -> bool {
        self.inner.is_known_trampoline(pc)
    }
    fn known_trampoline_within(&self, pc: u64, span: u64) -> bool {
        self.inner.known_trampoline_within(pc, span)
    }
    fn is_outermost(&self, pc: u64) -> bool {
        self.inner.is_outermost(pc)
    }
    fn is_sigreturn<A: Arch>(&self, pc: u64) -> bool {
        if self.inner.sigreturn_reads_memory::<A>(pc) {
            self.spoiled.set(true);
        }
        self.inner.is_sigreturn::<A>(pc)
    }
    fn sigreturn_reads_memory<A: Arch>(&self, pc: u64) -> bool {
        self.inner.sigreturn_reads_memory::<A>(pc)
    }
    fn recall_scan(&self, start: u64, words: &mut [u64; SCAN_MEMO_WORDS]) -> Option<usize> {
        self.inner.recall_scan(start, words)
    }
    fn remember_scan(&self, start: u64, words: &[u64]) {
        self.inner.remember_scan(start, words)
    }
}

/// A memory reader that notes every read, for a recording.
pub(super) struct Recorder<'a, M> {
    pub(super) inner: &'a M,
    pub(super) log: RefCell<Log>,
}

/// The reads of a recording, in order (a word read twice is noted twice:
/// the window folds them): successful stack-word reads and failed ones.
/// `spoiled` marks a recording that may not be kept.
pub(super) struct Log {
    pub(super) reads: [(u64, u64); LOG_READS],
    pub(super) n: usize,
    pub(super) fails: [u64; END_FAILS],
    pub(super) n_fails: usize,
    pub(super) spoiled: bool,
}

/// The most reads a recording notes.
pub(super) const LOG_READS: usize = 64;

impl Log {
    fn note(&mut self, addr: u64, word: Option<u64>) {
        let noted = match word {
            Some(w) => self.reads.get_mut(self.n).map(|r| {
                *r = (addr, w);
                self.n += 1;
            }),
            None => self.fails.get_mut(self.n_fails).map(|f| {
                *f = addr;
                self.n_fails += 1;
            }),
        };
        self.spoiled |= noted.is_none();
    }
}

impl<M: MemoryReader> MemoryReader for Recorder<'_, M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let ok = self.inner.read(addr, buf);
        let mut log = self.log.borrow_mut();
        match <[u8; 8]>::try_from(&*buf) {
            Ok(b) => log.note(addr, ok.then(|| u64::from_ne_bytes(b))),
            Err(_) => log.spoiled = true,
        }
        ok
    }
    fn enter_stack(&self, sp: u64) {
        self.log.borrow_mut().spoiled = true;
        self.inner.enter_stack(sp)
    }
    fn is_stack(&self, addr: u64) -> bool {
        self.inner.is_stack(addr)
    }
}
