//! The hot path: a step specialised for the rows that make up nearly every
//! frame (CFA from sp or fp plus an offset, return address and frame
//! pointer saved at fixed offsets from it) and for frame-pointer steps.
//!
//! A pc's [`Answer`] says in one small value whether such a step
//! applies. The walker tries it first; whenever it does not apply, or any
//! check fails, the general step runs instead, so the fast path never
//! changes a walk's result, only its cost (`tests.rs` walks every case
//! both ways).

use crate::arch::Arch;
use crate::formats::sframe::{CfaRule, RegRule};
use crate::memory::MemoryReader;
use crate::walk::{load_at_width, sp_exact, CodeMap, Frame, Lookup, Method, PcKind};

/// An SFrame row reduced to what the hot path applies: `cfa = (fp | sp) +
/// cfa_off`, the return address at `cfa + ra_off`, the frame pointer at
/// `cfa + fp_off` or unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleRule {
    /// The CFA is based on the frame pointer (else the stack pointer).
    pub cfa_fp: bool,
    /// Added to the base register to give the CFA.
    pub cfa_off: i32,
    /// The return address is saved at `cfa + ra_off`.
    pub ra_off: i16,
    /// The caller's frame pointer is saved at `cfa + fp_off`; `None` keeps it.
    pub fp_off: Option<i16>,
    /// The saved return address carries pointer-authentication bits.
    pub mangled_ra: bool,
    /// The row came from DWARF CFI (frames it finds are [`Method::Cfi`]).
    pub cfi: bool,
}

/// A frame-pointer link as a rule, the same on both architectures: the
/// record `[fp] = caller's fp`, `[fp + 8] = return address` (PAC bits
/// stripped on AArch64), and the caller's sp is `fp + 16`. Rows of this
/// shape get their own kind, which the hot loop steps from fp alone.
pub const FRAME_POINTER: SimpleRule = SimpleRule {
    cfa_fp: true,
    cfa_off: 16,
    ra_off: -8,
    fp_off: Some(-16),
    mangled_ra: true,
    cfi: false,
};

/// What the hot path may do at one lookup pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerKind {
    /// Not in known code: only the general step decides (trampolines found
    /// by their code, scanning).
    Outside,
    /// Known code without a table row: a frame-pointer step.
    NoInfo,
    /// A row the hot path applies ([`Answer::rule`]).
    Rule,
    /// Anything else (FLEX rows, signal frames and trampolines, compact
    /// encodings, the outermost frame, offsets too large to pack into
    /// [`Answer`]): the general step.
    Slow,
}

/// A [`AnswerKind`] with its rule, packed into one word so the step cache
/// holds it in one word and the walk's inner loop decodes it with shifts,
/// in registers. A valid answer is never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Kind (bits 0-3), flags (4: CFA from fp, 5: mangled RA, 6: fp
    /// saved, 7: a CFI row), RA offset (bits 8-23), FP offset (bits 24-39) and CFA offset
    /// (bits 40-63, signed).
    w: u64,
}

// The kinds are chosen so that the two questions the loop asks of every
// answer are one bit each: may a walk without tables take a frame-pointer
// link here (`LINKABLE`: no row, or a row of either kind), and is the pc
// outside known code (`OUTSIDE`). Of the words a cache holds (those
// `Answer::pack` wrote, and 0) only these answers have those bits.
const SLOW: u64 = 1;
const LINKABLE: u64 = 4;
const NO_INFO: u64 = LINKABLE;
const RULE: u64 = LINKABLE | 1;
/// A rule of the frame-pointer link's shape (`cfa = fp + 16`, return
/// address at `cfa - 8`, frame pointer at `cfa - 16`): its own kind, so the
/// walk recognises it from word 0 alone and computes the reads from the
/// frame pointer without waiting for the cached offsets.
const FP_RULE: u64 = LINKABLE | 2;
const OUTSIDE: u64 = 8;

impl Answer {
    /// Not in known code.
    pub const OUTSIDE: Answer = Answer { w: OUTSIDE };
    /// Known code without a table row.
    pub const NO_INFO: Answer = Answer { w: NO_INFO };
    /// Left to the general step.
    pub const SLOW: Answer = Answer { w: SLOW };

    /// A rule the hot path applies; [`Answer::SLOW`] if its CFA offset needs
    /// more than the 24 bits it is packed into (a frame of 8 MiB or more).
    pub const fn from_rule(r: SimpleRule) -> Answer {
        if r.cfa_off < -(1 << 23) || r.cfa_off >= 1 << 23 {
            return Answer::SLOW;
        }
        let (fp_saved, fp_off) = match r.fp_off {
            Some(o) => (1, o),
            None => (0, 0),
        };
        // The frame-pointer link's shape, whatever the PAC flag.
        let link = FRAME_POINTER;
        let fp_shaped = r.cfa_fp == link.cfa_fp
            && r.cfa_off == link.cfa_off
            && r.ra_off == link.ra_off
            && matches!((r.fp_off, link.fp_off), (Some(a), Some(b)) if a == b);
        let kind = if fp_shaped { FP_RULE } else { RULE };
        Answer {
            w: kind
                | (r.cfa_fp as u64) << 4
                | (r.mangled_ra as u64) << 5
                | fp_saved << 6
                | (r.cfi as u64) << 7
                | (r.ra_off as u16 as u64) << 8
                | (fp_off as u16 as u64) << 24
                | (r.cfa_off as u64) << 40,
        }
    }

    /// Which kind of answer this is.
    #[inline(always)]
    pub fn kind(self) -> AnswerKind {
        match self.w & 0xf {
            OUTSIDE => AnswerKind::Outside,
            NO_INFO => AnswerKind::NoInfo,
            RULE | FP_RULE => AnswerKind::Rule,
            _ => AnswerKind::Slow,
        }
    }

    /// Whether this pc lies outside known code.
    #[inline(always)]
    pub fn is_outside(self) -> bool {
        self.w & OUTSIDE != 0
    }

    /// The rule, for a [`AnswerKind::Rule`] answer.
    pub fn rule(self) -> SimpleRule {
        SimpleRule {
            cfa_fp: self.cfa_fp(),
            cfa_off: self.cfa_off() as i32,
            ra_off: self.ra_off() as i16,
            fp_off: self.fp_off().map(|o| o as i16),
            mangled_ra: self.mangled_ra(),
            cfi: self.cfi(),
        }
    }

    /// Classifies a lookup. `trampoline` says whether the pc is, or is just
    /// before, a known signal trampoline: those always take the general step.
    pub fn classify(lookup: &Lookup, trampoline: bool) -> Answer {
        match lookup {
            Lookup::Outside => Answer::OUTSIDE,
            _ if trampoline => Answer::SLOW,
            Lookup::NoInfo => Answer::NO_INFO,
            Lookup::Compact { .. } => Answer::SLOW,
            Lookup::SFrame(row) | Lookup::Cfi(row) if row.signal_frame => Answer::SLOW,
            Lookup::SFrame(row) | Lookup::Cfi(row) => {
                let (cfa_fp, cfa_off) = match row.cfa {
                    CfaRule::SpPlus(o) => (false, o),
                    CfaRule::FpPlus(o) => (true, o),
                    _ => return Answer::SLOW,
                };
                let ra_off = match row.ra {
                    RegRule::AtCfa(o) => match i16::try_from(o) {
                        Ok(o) => o,
                        Err(_) => return Answer::SLOW,
                    },
                    _ => return Answer::SLOW,
                };
                let fp_off = match row.fp {
                    RegRule::Undefined | RegRule::SameValue => None,
                    RegRule::AtCfa(o) => match i16::try_from(o) {
                        Ok(o) => Some(o),
                        Err(_) => return Answer::SLOW,
                    },
                    _ => return Answer::SLOW,
                };
                Answer::from_rule(SimpleRule {
                    cfa_fp,
                    cfa_off,
                    ra_off,
                    fp_off,
                    mangled_ra: row.mangled_ra,
                    cfi: matches!(lookup, Lookup::Cfi(_)),
                })
            }
        }
    }

    /// For a rule: the CFA is based on the frame pointer.
    #[inline(always)]
    pub(crate) fn cfa_fp(self) -> bool {
        self.w & 1 << 4 != 0
    }

    /// For a rule: the CFA offset.
    #[inline(always)]
    pub(crate) fn cfa_off(self) -> u64 {
        (self.w as i64 >> 40) as u64
    }

    /// For a rule: the return address's offset from the CFA.
    #[inline(always)]
    pub(crate) fn ra_off(self) -> u64 {
        (self.w >> 8) as u16 as i16 as i64 as u64
    }

    /// For a rule: the saved frame pointer's offset from the CFA.
    #[inline(always)]
    pub(crate) fn fp_off(self) -> Option<u64> {
        (self.w & 1 << 6 != 0).then_some((self.w >> 24) as u16 as i16 as i64 as u64)
    }

    /// For a rule: the return address carries PAC bits.
    #[inline(always)]
    pub(crate) fn mangled_ra(self) -> bool {
        self.w & 1 << 5 != 0
    }

    /// For a rule: it came from DWARF CFI.
    #[inline(always)]
    pub(crate) fn cfi(self) -> bool {
        self.w & 1 << 7 != 0
    }

    /// The method of a frame this answer's rule recovers.
    #[inline(always)]
    fn row_method(self) -> Method {
        if self.cfi() {
            Method::Cfi
        } else {
            Method::SFrame
        }
    }

    /// Packs into one word for a cache.
    #[inline(always)]
    pub fn pack(self) -> u64 {
        self.w
    }

    /// The inverse of [`Answer::pack`] without checks: a word it never wrote
    /// reads as an answer of no known kind, which the walk treats as
    /// [`AnswerKind::Slow`].
    #[inline(always)]
    pub fn from_word(w: u64) -> Answer {
        Answer { w }
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
    // From just before a trampoline (a return address's key) to its
    // sigreturn call (an exact pc a signal interrupted there).
    let trampoline = code.known_trampoline_within(key.wrapping_add(1), MAX_SIGRETURN_CALL_AT + 1);
    Answer::classify(lookup, trampoline)
}

/// A frame reached through a return address, as the hot
/// path writes every frame.
#[inline(always)]
fn returned(pc: u64, sp: u64, method: Method) -> Frame {
    Frame {
        pc,
        sp,
        pc_kind: PcKind::ReturnAddress,
        method,
    }
}

/// The hot path's view of the pending frame: what [`run`] carries from one
/// frame to the next and hands back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct State {
    /// The pending frame, not yet written.
    pub frame: Frame,
    /// Its frame pointer.
    pub fp: u64,
    /// The answer for its lookup pc.
    pub here: Answer,
}

impl State {
    /// The frame, frame pointer and answer [`run`] left, each field read
    /// as it was written ([`load_at_width`]).
    #[inline(always)]
    pub(crate) fn handed_back(&self) -> (Frame, u64, Answer) {
        let f = &self.frame;
        let frame = Frame {
            pc: load_at_width(&f.pc),
            sp: load_at_width(&f.sp),
            pc_kind: load_at_width(&f.pc_kind),
            method: load_at_width(&f.method),
        };
        (frame, load_at_width(&self.fp), load_at_width(&self.here))
    }
}

/// What one step does with an answer, by its kind and the walk's options:
/// what [`crate::walk::Walker::step`] would try first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The frame record at fp, as an SFrame row says.
    RecordRow,
    /// The frame record at fp, as a frame-pointer link.
    RecordLink,
    /// Any other row.
    Row,
    /// Left to the general step.
    Stop,
}

#[inline(always)]
fn step_for<const TABLES: bool, const FP: bool>(here: Answer) -> Step {
    if !TABLES {
        // Every row, and no row, is a frame-pointer link: one bit.
        return if FP && here.w & LINKABLE != 0 {
            Step::RecordLink
        } else {
            Step::Stop
        };
    }
    match here.w & 0xf {
        FP_RULE => Step::RecordRow,
        RULE => Step::Row,
        NO_INFO if FP => Step::RecordLink,
        _ => Step::Stop,
    }
}

/// Writes frames into `out` for as long as the hot path finds their
/// callers, leaving `state` at the first frame it does not step (always
/// at most `out.len()` frames). Each step is one that
/// [`crate::walk::Walker::step`] would take first, with the same reads and
/// the same checks of the caller, so the frames are those the general step
/// gives.
/// `context` is the code map's [`CodeMap::answer_generation`]; `opts` says
/// whether tables and frame pointers are used.
pub(crate) fn run<A: Arch, M: MemoryReader, C: CodeMap>(
    mem: &M,
    code: &C,
    context: u64,
    opts: (bool, bool),
    state: &mut State,
    out: &mut [Frame],
) -> usize {
    match opts {
        (true, true) => run_cached::<A, M, C, true, true>(mem, code, context, state, out),
        (true, false) => run_cached::<A, M, C, true, false>(mem, code, context, state, out),
        (false, true) => run_cached::<A, M, C, false, true>(mem, code, context, state, out),
        (false, false) => 0,
    }
}

/// [`run`]'s loop. It takes answers from the cache and calls out only on
/// a miss (cold), to look the caller up, then takes the same frame's step
/// again from the top: only the loop's own state is live across that call,
/// not the step's results, so the hit path keeps them in registers (3
/// instructions a warm frame fewer, 75 a cold frame more: callgrind), and
/// a cold walk does not leave and re-enter the loop at every new pc.
#[inline(never)]
fn run_cached<A: Arch, M: MemoryReader, C: CodeMap, const TABLES: bool, const FP: bool>(
    mem: &M,
    code: &C,
    context: u64,
    state: &mut State,
    out: &mut [Frame],
) -> usize {
    let State {
        frame: first,
        mut fp,
        mut here,
    } = *state;
    // The loop writes every frame as a return address
    // and mends the first one after. Its pc is carried as the return
    // address whose lookup pc it shares (an exact pc plus one), which is
    // what a caller's return address is compared with.
    let mut pc = first.pc.wrapping_add(first.pc_kind.is_exact() as u64);
    let (mut sp, mut method) = (first.sp, first.method);
    // Slots as a cursor and an end, not a base, an index and a length:
    // one register fewer in a loop that needs all of them.
    let len = out.len();
    let mut slots = out.iter_mut();
    // The last answer looked up on a miss, by key (`u64::MAX`, `ra - 1`
    // of no return address but 0, which ends the loop first: none).
    let mut missed = (u64::MAX, Answer::SLOW);
    while slots.len() != 0 {
        let (cfa, caller_pc, caller_fp, caller_method);
        match step_for::<TABLES, FP>(here) {
            step @ (Step::RecordRow | Step::RecordLink) => {
                // The frame record at fp: both reads depend on fp alone, so
                // the next frame's need not wait for this frame's probe.
                let link = step == Step::RecordLink;
                if link && (fp % 8 != 0 || fp < sp) {
                    break;
                }
                let Some([saved_fp, ra]) = mem.read_u64_pair_fast(fp) else {
                    break;
                };
                cfa = fp.wrapping_add(16);
                caller_fp = saved_fp;
                caller_pc = if link || here.mangled_ra() {
                    A::strip_pac(ra)
                } else {
                    ra
                };
                caller_method = if link {
                    Method::FramePointer
                } else {
                    here.row_method()
                };
            }
            Step::Row => {
                if !here.cfa_fp() && !sp_exact::<A>(method) {
                    break;
                }
                cfa = (if here.cfa_fp() { fp } else { sp }).wrapping_add(here.cfa_off());
                let Some(ra) = mem.read_u64_fast(cfa.wrapping_add(here.ra_off())) else {
                    break;
                };
                caller_fp = match here.fp_off() {
                    Some(o) => match mem.read_u64_fast(cfa.wrapping_add(o)) {
                        Some(v) => v,
                        None => break,
                    },
                    None => fp,
                };
                caller_pc = if here.mangled_ra() {
                    A::strip_pac(ra)
                } else {
                    ra
                };
                caller_method = here.row_method();
            }
            Step::Stop => break,
        }
        if caller_pc == 0 || cfa <= sp {
            break;
        }
        // A recursion repeats its return address, and so its answer.
        let recursion = caller_pc == pc;
        let next = if recursion {
            here
        } else {
            let key = caller_pc - 1;
            match code.cached_answer(key, context) {
                Some(hit) => hit,
                None if key == missed.0 => missed.1,
                None => {
                    // Looked up, then this frame's step taken again from
                    // the top: nothing of the step is live across the
                    // call, so the loop keeps its registers on the hit
                    // path. The answer is kept for the retry in case the
                    // cache did not take it.
                    missed = (key, code.answer_after_miss(key, context));
                    continue;
                }
            }
        };
        if next.is_outside() {
            break;
        }
        let Some(slot) = slots.next() else {
            break;
        };
        *slot = returned(pc, sp, reached_by::<TABLES>(method));
        (pc, sp, fp, method) = (caller_pc, cfa, caller_fp, caller_method);
        here = next;
        if recursion {
            let mut at = (sp, fp, reached_by::<TABLES>(method));
            let rest = core::mem::take(&mut slots).into_slice();
            let k = recurse::<A, M, TABLES, FP>(mem, here, pc, &mut at, rest);
            slots = rest[k..].iter_mut();
            (sp, fp, method) = at;
        }
    }
    let n = len - slots.len();
    // The frame pointer and answer go back on every exit (unchanged when
    // nothing moved): keeping them live to the end gives LLVM a loop some
    // two instructions a frame shorter (callgrind).
    state.fp = fp;
    state.here = here;
    if n > 0 {
        out[0] = first;
        state.frame = returned(pc, sp, reached_by::<TABLES>(method));
    }
    n
}

/// The method of a frame [`run_cached`] writes, or hands back, after at
/// least one step: without tables every step is a frame-pointer link, so
/// the method is a constant there and the loop need not carry it (3
/// instructions a frame: callgrind). The first frame, the only other, is
/// mended after the loop.
#[inline(always)]
fn reached_by<const TABLES: bool>(method: Method) -> Method {
    if TABLES {
        method
    } else {
        Method::FramePointer
    }
}

/// Goes on with a recursion through frame records: from the frame at `pc`
/// (a return address into itself, whose answer is `here`), writes frames
/// for as long as the record at fp returns to `pc` again and passes every
/// check of [`run_cached`]'s record step, which would take the very same
/// steps. Stops before the first frame it would not step (at once for an
/// answer of another kind); returns the frames written and leaves
/// `(sp, fp, method)` at that frame. Out of line, so the main loop keeps
/// its registers: a recursion frame costs 18 instructions here (no
/// dispatch, no cache probe) against some 38 in the main loop (callgrind).
#[inline(never)]
fn recurse<A: Arch, M: MemoryReader, const TABLES: bool, const FP: bool>(
    mem: &M,
    here: Answer,
    pc: u64,
    state: &mut (u64, u64, Method),
    out: &mut [Frame],
) -> usize {
    let link = match step_for::<TABLES, FP>(here) {
        Step::RecordRow => false,
        Step::RecordLink => true,
        _ => return 0,
    };
    let (mut sp, mut fp, mut method) = *state;
    let mangled = link || here.mangled_ra();
    let record_method = if link {
        Method::FramePointer
    } else {
        here.row_method()
    };
    let mut n = 0;
    while n < out.len() {
        if link && (fp % 8 != 0 || fp < sp) {
            break;
        }
        let Some([saved_fp, ra]) = mem.read_u64_pair_fast(fp) else {
            break;
        };
        let cfa = fp.wrapping_add(16);
        let ra = if mangled { A::strip_pac(ra) } else { ra };
        // `pc` passed the main loop's zero check, so `ra == pc` is not 0.
        if ra != pc || cfa <= sp {
            break;
        }
        out[n] = returned(pc, sp, method);
        n += 1;
        (sp, fp, method) = (cfa, saved_fp, record_method);
    }
    *state = (sp, fp, method);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::sframe::Row;

    fn row(cfa: CfaRule, ra: RegRule, fp: RegRule) -> Row {
        Row {
            func_start: 0x1000,
            func_size: 0x100,
            row_start: 0x1000,
            cfa,
            ra,
            fp,
            mangled_ra: false,
            signal_frame: false,
        }
    }

    #[test]
    fn simple_rows_become_rules_with_their_offsets() {
        let r = row(
            CfaRule::SpPlus(0x1040),
            RegRule::AtCfa(-8),
            RegRule::AtCfa(-16),
        );
        let hot = Answer::classify(&Lookup::SFrame(r), false);
        assert_eq!(hot.kind(), AnswerKind::Rule);
        assert_eq!(
            hot.rule(),
            SimpleRule {
                cfa_fp: false,
                cfa_off: 0x1040,
                ra_off: -8,
                fp_off: Some(-16),
                mangled_ra: false,
                cfi: false,
            }
        );
        assert_eq!(
            (hot.ra_off() as i64, hot.fp_off().map(|o| o as i64)),
            (-8, Some(-16))
        );
        let mut signed = row(CfaRule::FpPlus(16), RegRule::AtCfa(-8), RegRule::SameValue);
        signed.mangled_ra = true;
        let hot = Answer::classify(&Lookup::SFrame(signed), false);
        assert!(hot.cfa_fp() && hot.mangled_ra() && hot.fp_off().is_none());
        assert_eq!(Answer::from_word(hot.pack()), hot);
    }

    #[test]
    fn each_kind_takes_the_step_the_general_path_would_try_first() {
        let record = Answer::from_rule(FRAME_POINTER);
        let mut other = FRAME_POINTER;
        other.cfa_off = 32;
        let row = Answer::from_rule(other);
        assert_eq!(record.kind(), AnswerKind::Rule);
        let cases = [record, row, Answer::NO_INFO, Answer::OUTSIDE, Answer::SLOW];
        let with = |f: fn(Answer) -> Step| cases.map(f);
        use Step::*;
        assert!(
            with(step_for::<true, true>) == [RecordRow, Row, RecordLink, Stop, Stop],
            "tables, then frame pointers"
        );
        assert!(with(step_for::<true, false>) == [RecordRow, Row, Stop, Stop, Stop]);
        // Without tables every row of known code is a frame-pointer link.
        assert!(with(step_for::<false, true>) == [RecordLink, RecordLink, RecordLink, Stop, Stop]);
        // The word of an empty entry: no step, and not outside.
        let empty = Answer::from_word(0);
        assert!(step_for::<true, true>(empty) == Stop && step_for::<false, true>(empty) == Stop);
        assert!(!empty.is_outside() && Answer::OUTSIDE.is_outside());
        assert!(cases.iter().filter(|h| h.is_outside()).count() == 1);
    }

    #[test]
    fn everything_else_is_left_to_the_general_step() {
        let plain = row(CfaRule::SpPlus(16), RegRule::AtCfa(-8), RegRule::SameValue);
        let mut signal = plain;
        signal.signal_frame = true;
        let slow = [
            Lookup::SFrame(signal),
            Lookup::SFrame(row(
                CfaRule::SpPlus(8),
                RegRule::Undefined,
                RegRule::SameValue,
            )),
            Lookup::SFrame(row(
                CfaRule::SpPlus(0),
                RegRule::SameValue,
                RegRule::SameValue,
            )),
            Lookup::SFrame(row(
                CfaRule::RegPlus { reg: 10, offset: 0 },
                RegRule::AtCfa(-8),
                RegRule::SameValue,
            )),
            Lookup::SFrame(row(
                CfaRule::SpPlus(16),
                RegRule::AtCfa(40_000),
                RegRule::SameValue,
            )),
            Lookup::Compact {
                encoding: 0x0101_0000,
                func_start: 0x1000,
            },
        ];
        for l in slow {
            assert_eq!(Answer::classify(&l, false).kind(), AnswerKind::Slow, "{l:?}");
        }
        // The CFA offset is packed into 24 bits: a frame of 8 MiB or more
        // is left to the general step, and the largest that fit round-trip.
        let sp_plus = |o| row(CfaRule::SpPlus(o), RegRule::AtCfa(-8), RegRule::SameValue);
        for o in [1 << 23, -(1 << 23) - 1, i32::MAX, i32::MIN] {
            assert_eq!(
                Answer::classify(&Lookup::SFrame(sp_plus(o)), false),
                Answer::SLOW,
                "{o}"
            );
        }
        for o in [(1 << 23) - 1, -(1 << 23), -8] {
            let hot = Answer::classify(&Lookup::SFrame(sp_plus(o)), false);
            assert_eq!((hot.kind(), hot.rule().cfa_off), (AnswerKind::Rule, o));
            assert_eq!(hot.cfa_off() as i64, i64::from(o));
        }
        // Next to a known trampoline, even a plain row or no row is slow.
        assert_eq!(Answer::classify(&Lookup::SFrame(plain), true), Answer::SLOW);
        assert_eq!(Answer::classify(&Lookup::NoInfo, true), Answer::SLOW);
        assert_eq!(Answer::classify(&Lookup::NoInfo, false), Answer::NO_INFO);
        assert_eq!(Answer::classify(&Lookup::Outside, true), Answer::OUTSIDE);
        assert_eq!(Answer::from_word(0).kind(), AnswerKind::Slow);
    }
}
