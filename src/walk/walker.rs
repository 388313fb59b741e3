//! The walker: each step tries the hot path, then a signal frame, a
//! function's entry, a table row, the frame record and a scan, in turn;
//! and remembers how walks end.

use core::cell::{Cell, RefCell};

use super::answer::Answer;
use super::code_map::CodeMap;
use super::end_words::*;
use super::ending::{
    head, method_code, method_from, read_window, replay, stop_code, Log, Noting, Recalled,
    Recorder, LOG_READS,
};
use super::fast;
use super::frame::{
    sp_exact, Frame, Lookup, Method, PcKind, StopReason, WalkOptions, MAX_SIGNAL_FRAMES,
    SCAN_MEMO_WORDS,
};
use crate::arch::{Arch, StepError};
use crate::formats::sframe::{CfaRule, RegRule, Row};
use crate::memory::{load_at_width, MemoryReader};

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

/// What a step found: the caller's registers and the method that found it
/// (a [`Method::SignalFrame`] caller's pc is exact, any other's a return
/// address).
type Stepped<R> = (R, Method);

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
                if let Some(last) = self.take_outermost() {
                    out[n] = last;
                    self.next_hot = None;
                    self.depth += 1;
                    self.stop = StopReason::Outermost;
                    return n + 1;
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

    /// The pending frame, taken, where the general step would return it and
    /// end the walk there ([`StopReason::Outermost`]), read nothing and change no
    /// register: a frame in the program's entry function
    /// ([`CodeMap::is_outermost`], whose row says so to a walk with
    /// tables) that the general step takes by the frame alone
    /// ([`Self::steps_by_the_frame_alone`]), and not a known trampoline
    /// (which a walk with tables would take as one where the function ends
    /// at its pc). Every walk that reaches the start code ends so: here in
    /// a few compares, not through a remembered walk end (250 instructions
    /// a walk fewer: callgrind; through the general step, 320 more).
    #[inline(always)]
    fn take_outermost(&mut self) -> Option<Frame> {
        let cur = self.pending?;
        let ends = self.steps_by_the_frame_alone(&cur)
            && self.code.is_outermost(cur.lookup_pc())
            && !(self.opts.use_tables && self.code.is_known_trampoline(cur.pc));
        ends.then(|| {
            self.pending = None;
            cur
        })
    }

    /// Whether the general step from `cur` depends on the frame, its frame
    /// pointer and the stack alone: not frame 0 nor a frame a signal
    /// interrupted (whose return address may be in a register), and short
    /// of the depth limit (where the step gives the stop).
    fn steps_by_the_frame_alone(&self, cur: &Frame) -> bool {
        !matches!(cur.method, Method::Context | Method::SignalFrame)
            && self.depth + 1 < self.opts.max_depth
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
    fn step(&mut self, cur: &Frame) -> Result<Stepped<A::Regs>, StopReason> {
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
        Some((next, Method::SignalFrame))
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
                    return Some((next, Method::Entry));
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
                        return Some((next, Method::Entry));
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
                .map(|next| (next, method)));
        }
        let ra_in_register = row.ra == RegRule::SameValue && ra_in_register_ok;
        match A::step_sframe(row, &self.regs, &self.mem, ra_in_register_ok) {
            Ok(next) if A::pc(&next) == 0 && !scanned => Err(StopReason::ReturnAddressZero),
            Ok(next) if self.accept_with(cur, &next, ra_in_register) => Ok(Some((next, method))),
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
                Ok(Some((next, Method::CompactUnwind)))
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
            return Ok(Some((next, Method::FramePointer)));
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
    fn scan_stack(&self, cur: &Frame) -> Option<Stepped<A::Regs>> {
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
        (A::sp(&next) > cur.sp).then_some((next, Method::Scan))
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
            Ok((regs, method)) => {
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
                    pc_kind: PcKind::exact_if(method == Method::SignalFrame),
                    method,
                });
            }
            Err(reason) => self.stop = reason,
        }
        Some(cur)
    }
}

impl<A: Arch, M: MemoryReader, C: CodeMap> Walker<A, M, C> {
    /// The pending frame's state as an entry's first words and the key
    /// they hash to, if a walk end from it may be remembered.
    fn end_state(&self) -> Option<([u64; OPTS + 1], u64)> {
        let cur = self.pending?;
        if !self.steps_by_the_frame_alone(&cur) {
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
