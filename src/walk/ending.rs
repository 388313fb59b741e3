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

use super::{
    load_at_width, CodeMap, Frame, Lookup, Method, PcKind, StopReason, Walker, SCAN_MEMO_WORDS,
};
use crate::arch::Arch;
use crate::memory::MemoryReader;

/// The most frames a remembered end holds.
pub(crate) const END_FRAMES: usize = 6;
/// The most failed reads a remembered end holds.
const END_FAILS: usize = 4;
/// The most stack words a remembered end's window holds.
const END_WINDOW: usize = 48;

// Word indexes of an entry. Words 0 to `OPTS` are the state it starts
// from: pc, sp, frame pointer, the frame's method, precision and scans in
// a row, and the walk's options.
const OPTS: usize = 4;
/// Frame count, stop reason, window length and failed-read count, a byte
/// each; a frame count of 0 marks a state whose walk does not end within
/// [`END_FRAMES`] general steps (not worth recording again), and a header
/// of [`SEEN`] one reached once, not yet recorded.
const HEADER: usize = 5;
const SEEN: u64 = 1 << 32;
const WINDOW_LO: usize = 6;
const LAST_FP: usize = 7;
/// A byte per frame: method code, and bit 7 for an exact pc.
const METHODS: usize = 8;
/// Words at the start of every entry.
pub(crate) const END_HEAD: usize = 9;
const FRAMES_AT: usize = END_HEAD;
const FAILS_AT: usize = FRAMES_AT + 2 * END_FRAMES;
const WINDOW_AT: usize = FAILS_AT + END_FAILS;
/// Words in a remembered walk end ([`CodeMap::recall_end`]).
pub const END_WORDS: usize = WINDOW_AT + END_WINDOW;

/// How many words of an entry with this head are in use.
pub(crate) fn used(head: &[u64]) -> usize {
    match head[HEADER] {
        SEEN => END_HEAD,
        h => WINDOW_AT + (h >> 16 & 0xff) as usize,
    }
}

/// An entry starting from `state` with header `header` and nothing else.
fn head(state: [u64; OPTS + 1], header: u64) -> [u64; END_WORDS] {
    let mut e = [0u64; END_WORDS];
    e[..=OPTS].copy_from_slice(&state);
    e[HEADER] = header;
    e
}

fn method_code(m: Method) -> u64 {
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

fn method_from(code: u64) -> Option<Method> {
    Some(match code {
        1 => Method::SFrame,
        3 => Method::FramePointer,
        4 => Method::Scan,
        7 => Method::Cfi,
        _ => return None,
    })
}

fn stop_code(s: StopReason) -> u64 {
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
enum Recalled {
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
fn replay<M: MemoryReader>(
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
fn read_window<'b, M: MemoryReader>(
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
struct Noting<'c, C> {
    inner: &'c C,
    spoiled: Cell<bool>,
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
struct Recorder<'a, M> {
    inner: &'a M,
    log: RefCell<Log>,
}

/// The reads of a recording, in order (a word read twice is noted twice:
/// the window folds them): successful stack-word reads and failed ones.
/// `spoiled` marks a recording that may not be kept.
struct Log {
    reads: [(u64, u64); LOG_READS],
    n: usize,
    fails: [u64; END_FAILS],
    n_fails: usize,
    spoiled: bool,
}

/// The most reads a recording notes.
const LOG_READS: usize = 64;

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

impl<A: Arch, M: MemoryReader, C: CodeMap> Walker<A, M, C> {
    /// The pending frame's state as an entry's first words and the key
    /// they hash to, if a walk end from it may be remembered.
    fn end_state(&self) -> Option<([u64; OPTS + 1], u64)> {
        let cur = self.pending?;
        // At the depth limit the general step gives the stop, which
        // depends on the depth: nothing to remember.
        if matches!(cur.method, Method::Context | Method::SignalFrame)
            || self.depth + 1 >= self.opts.max_depth
        {
            return None;
        }
        let scans = u8::try_from(self.scans_in_a_row).ok()?;
        let o = &self.opts;
        let opts = u64::from(o.use_tables)
            | u64::from(o.use_frame_pointers) << 1
            | u64::from(u16::try_from(o.max_scans_in_a_row).ok()?) << 8
            | u64::from(u32::try_from(o.scan_words).ok()?) << 32;
        let state = method_code(cur.method)
            | u64::from(cur.pc_kind.is_exact()) << 3
            | u64::from(scans) << 8;
        let words = [cur.pc, cur.sp, A::fp(&self.regs), state, opts];
        // Rotations and exclusive ors only: the cache's slot function
        // multiplies the key anyway, and the replay compares every word, so
        // a chain of multiplies here only delayed the probe.
        let key = words
            .iter()
            .zip([0, 17, 29, 41, 53])
            .fold(0u64, |h, (&w, r)| h ^ w.rotate_left(r));
        Some((words, key))
    }

    /// Ends the walk from the pending frame into `out` with a remembered
    /// end, or with the general step while recording one; `None` leaves the
    /// frame to the general step (no end may be remembered from it).
    pub(super) fn fill_end(&mut self, out: &mut [Frame]) -> Option<usize> {
        let (state, key) = self.end_state()?;
        let first = self.pending?.method;
        let room = self.opts.max_depth - self.depth;
        let mem = &self.mem;
        // The entry is read where it is stored, not copied out first: the
        // replay reads each word once, as it checks or takes it.
        let recalled = self
            .code
            .recall_end(key, |e| replay(mem, e, &state, first, room, out));
        match recalled.unwrap_or(Recalled::Other) {
            Recalled::Other => {
                // Record only from a state seen before: a walk made once (a
                // crash report) never pays for a recording it cannot use.
                // One mark per walk: where its end starts is found over
                // later walks.
                if !core::mem::replace(&mut self.end_marked, true) {
                    self.code.remember_end(key, &head(state, SEEN));
                }
                None
            }
            Recalled::NotWorth => None,
            Recalled::Seen | Recalled::Stale => Some(self.record(state, key, out)),
            Recalled::Replayed { n, stop, ref last } => {
                // The last frame's registers come back from the replay's
                // answer, not from `out`, which was just written a field at
                // a time; each is read as stored.
                let [pc, sp, fp] = last.each_ref().map(load_at_width);
                self.regs = A::caller(&self.regs, pc, sp, fp);
                self.depth += n;
                self.pending = None;
                self.next_hot = None;
                self.stop = stop;
                Some(n)
            }
        }
    }

    /// Takes general steps from the pending frame into `out`, reading
    /// through a recorder, and remembers them if they end the walk within
    /// [`END_FRAMES`] frames and may be replayed. Out of line: its log and
    /// second walker would otherwise enlarge every walk's stack frame.
    #[inline(never)]
    fn record(&mut self, state: [u64; OPTS + 1], key: u64, out: &mut [Frame]) -> usize {
        let rec = Recorder {
            inner: &self.mem,
            log: RefCell::new(Log {
                reads: [(0, 0); LOG_READS],
                n: 0,
                fails: [0; END_FAILS],
                n_fails: 0,
                spoiled: false,
            }),
        };
        let entry = self.regs;
        let noting = Noting {
            inner: &self.code,
            spoiled: Cell::new(false),
        };
        let mut sub = Walker::<A, &Recorder<'_, M>, &Noting<'_, C>> {
            regs: self.regs,
            mem: &rec,
            code: &noting,
            opts: self.opts,
            pending: self.pending,
            depth: self.depth,
            scans_in_a_row: self.scans_in_a_row,
            signal_frames: self.signal_frames,
            last_code: core::cell::Cell::new(self.last_code.get()),
            next_hot: None,
            stop: self.stop,
            end_marked: true,
        };
        let limit = out.len().min(END_FRAMES);
        let mut n = 0;
        // Only the frame pointer, pc and sp may change along the way.
        let mut exact = true;
        while n < limit {
            let Some(f) = sub.next_general() else {
                break;
            };
            out[n] = f;
            n += 1;
            let r = sub.regs;
            exact &= A::caller(&entry, A::pc(&r), A::sp(&r), A::fp(&r)) == r;
            if sub.pending.is_none() {
                break;
            }
        }
        self.last_code.set(sub.last_code.get());
        self.regs = sub.regs;
        self.pending = sub.pending;
        self.depth = sub.depth;
        self.scans_in_a_row = sub.scans_in_a_row;
        self.signal_frames = sub.signal_frames;
        self.stop = sub.stop;
        self.next_hot = None;
        let log = rec.log.into_inner();
        let entry = if self.pending.is_some() {
            // Still walking: not worth recording from here again only if
            // the steps, not the buffer, ran out.
            (n == END_FRAMES).then_some(None)
        } else if self.stop == StopReason::DepthLimit {
            // Depends on the depth, not on the state: try again later.
            None
        } else {
            // With no signal frames left to cross, a trampoline was
            // stepped as other code: not what a replay may assume.
            let budget_ok = self.signal_frames < super::MAX_SIGNAL_FRAMES;
            let methods_ok = out[1..n]
                .iter()
                .all(|f| method_from(method_code(f.method)).is_some());
            Some(
                if exact && methods_ok && budget_ok && !log.spoiled && !noting.spoiled.get() {
                    self.entry(state, &out[..n], &log)
                } else {
                    None
                },
            )
        };
        // A recording that may not be kept marks its state as not worth
        // recording again.
        if let Some(e) = entry {
            let e = e.unwrap_or_else(|| head(state, 0));
            self.code.remember_end(key, &e);
        }
        n
    }

    /// The entry for a recording that ended the walk with `frames`, if its
    /// reads fit a window of stack words that still reads back the same.
    fn entry(
        &self,
        state: [u64; OPTS + 1],
        frames: &[Frame],
        log: &Log,
    ) -> Option<[u64; END_WORDS]> {
        let mut e = head(state, 0);
        let reads = &log.reads[..log.n];
        let lo = reads.iter().map(|r| r.0).min().unwrap_or(0);
        let mut nw = 0;
        for &(addr, _) in reads {
            let off = addr - lo;
            if off % 8 != 0 || off / 8 >= END_WINDOW as u64 {
                return None;
            }
            nw = nw.max(off as usize / 8 + 1);
        }
        let mut buf = [0u8; END_WINDOW * 8];
        let window = read_window(&self.mem, lo, nw, &mut buf)?;
        for (w, v) in e[WINDOW_AT..WINDOW_AT + nw].iter_mut().zip(window) {
            *w = v;
        }
        for &(addr, word) in reads {
            if e[WINDOW_AT + ((addr - lo) / 8) as usize] != word {
                return None;
            }
        }
        let fails = &log.fails[..log.n_fails];
        if fails.iter().any(|&a| self.mem.read_u64(a).is_some()) {
            return None;
        }
        e[FAILS_AT..FAILS_AT + fails.len()].copy_from_slice(fails);
        let last = frames.last()?;
        e[HEADER] = frames.len() as u64
            | stop_code(self.stop) << 8
            | (nw as u64) << 16
            | (fails.len() as u64) << 24;
        e[WINDOW_LO] = lo;
        e[LAST_FP] = A::fp(&self.regs);
        for (i, f) in frames.iter().enumerate() {
            e[FRAMES_AT + 2 * i] = f.pc;
            e[FRAMES_AT + 2 * i + 1] = f.sp;
            e[METHODS] |= (method_code(f.method) | u64::from(f.pc_kind.is_exact()) << 7) << (8 * i);
        }
        debug_assert_eq!((last.pc, last.sp), (A::pc(&self.regs), A::sp(&self.regs)));
        Some(e)
    }
}
