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
use crate::memory::MemoryReader;
use super::answer::{Answer, FP_RULE, LINKABLE, NO_INFO, RULE};
use super::code_map::CodeMap;
use super::frame::{sp_exact, Frame, Method, PcKind};
use crate::memory::load_at_width;

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
/// a miss (cold), to look the caller up, without leaving the loop. The
/// miss path parks the step's results in memory across that call, so that
/// they need no callee-saved registers on the hit path; taking the step
/// again after the call instead cost a cold frame some 60 instructions
/// more, and spilling them where LLVM chose, a warm frame 3 (callgrind).
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
    while slots.len() != 0 {
        let (mut cfa, mut caller_pc, mut caller_fp, caller_method);
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
                let ra_at = (if here.cfa_fp() { fp } else { sp }).wrapping_add(here.ra_at());
                let Some(ra) = mem.read_u64_fast(ra_at) else {
                    break;
                };
                cfa = ra_at.wrapping_sub(here.ra_off());
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
                None => {
                    // Through memory, not registers: see above.
                    let mut kept = [caller_pc, cfa, caller_fp];
                    core::hint::black_box(&mut kept);
                    let a = code.answer_after_miss(key, context);
                    core::hint::black_box(&mut kept);
                    [caller_pc, cfa, caller_fp] = kept;
                    a
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
    use crate::formats::sframe::{CfaRule, RegRule, Row};
    use crate::walk::answer::{AnswerKind, SimpleRule, FRAME_POINTER};
    use crate::walk::Lookup;

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
        // The CFA offset plus the RA offset (-8 here) is packed into 24
        // bits: a frame of about 8 MiB or more is left to the general step,
        // and the largest that fit round-trip.
        let sp_plus = |o| row(CfaRule::SpPlus(o), RegRule::AtCfa(-8), RegRule::SameValue);
        for o in [(1 << 23) + 8, -(1 << 23) + 7, i32::MAX, i32::MIN] {
            assert_eq!(
                Answer::classify(&Lookup::SFrame(sp_plus(o)), false),
                Answer::SLOW,
                "{o}"
            );
        }
        for o in [(1 << 23) + 7, -(1 << 23) + 8, -8] {
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
