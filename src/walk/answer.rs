//! The hot path's answer for one pc: whether a simple row (CFA from sp or
//! fp plus an offset, return address and frame pointer at fixed offsets
//! from it) or a frame-pointer link applies there, packed into one word
//! for the step cache.

use super::frame::{Lookup, Method};
use crate::formats::sframe::QuickRow;

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
    /// saved, 7: a CFI row), RA offset (bits 8-23), FP offset (bits 24-39)
    /// and the return address's offset from the CFA's base register, CFA
    /// offset plus RA offset (bits 40-63, signed): the walk's chain from
    /// one return address to the next then adds one offset, not two.
    pub(super) w: u64,
}

// The kinds are chosen so that the two questions the loop asks of every
// answer are one bit each: may a walk without tables take a frame-pointer
// link here (`LINKABLE`: no row, or a row of either kind), and is the pc
// outside known code (`OUTSIDE`). Of the words a cache holds (those
// `Answer::pack` wrote, and 0) only these answers have those bits.
pub(super) const SLOW: u64 = 1;
pub(super) const LINKABLE: u64 = 4;
pub(super) const NO_INFO: u64 = LINKABLE;
pub(super) const RULE: u64 = LINKABLE | 1;
/// A rule of the frame-pointer link's shape (`cfa = fp + 16`, return
/// address at `cfa - 8`, frame pointer at `cfa - 16`): its own kind, so the
/// walk recognises it from word 0 alone and computes the reads from the
/// frame pointer without waiting for the cached offsets.
pub(super) const FP_RULE: u64 = LINKABLE | 2;
pub(super) const OUTSIDE: u64 = 8;

impl Answer {
    /// Not in known code.
    pub const OUTSIDE: Answer = Answer { w: OUTSIDE };
    /// Known code without a table row.
    pub const NO_INFO: Answer = Answer { w: NO_INFO };
    /// Left to the general step.
    pub const SLOW: Answer = Answer { w: SLOW };

    /// A rule the hot path applies; [`Answer::SLOW`] if its CFA offset plus
    /// RA offset needs more than the 24 bits it is packed into (a frame of
    /// about 8 MiB or more).
    #[inline(always)]
    pub const fn from_rule(r: SimpleRule) -> Answer {
        let ra_at = r.cfa_off as i64 + r.ra_off as i64;
        if ra_at < -(1 << 23) || ra_at >= 1 << 23 {
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
                | (ra_at as u64) << 40,
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
            Lookup::SFrame(row) | Lookup::Cfi(row) => match QuickRow::of(row) {
                Some(q) => Answer::from_quick(q, matches!(lookup, Lookup::Cfi(_))),
                None => Answer::SLOW,
            },
        }
    }

    /// The answer [`Answer::classify`] gives a row of this shape outside
    /// any trampoline (`cfi`: a DWARF CFI row): a rule, unless an offset
    /// does not fit.
    #[inline(always)]
    pub(crate) fn from_quick(q: QuickRow, cfi: bool) -> Answer {
        let Ok(ra_off) = i16::try_from(q.ra_off) else {
            return Answer::SLOW;
        };
        let fp_off = match q.fp_off.map(i16::try_from) {
            None => None,
            Some(Ok(o)) => Some(o),
            Some(Err(_)) => return Answer::SLOW,
        };
        Answer::from_rule(SimpleRule {
            cfa_fp: q.cfa_fp,
            cfa_off: q.cfa_off,
            ra_off,
            fp_off,
            mangled_ra: q.mangled_ra,
            cfi,
        })
    }

    /// For a rule: the CFA is based on the frame pointer.
    #[inline(always)]
    pub(crate) fn cfa_fp(self) -> bool {
        self.w & 1 << 4 != 0
    }

    /// For a rule: the CFA offset.
    #[inline(always)]
    pub(crate) fn cfa_off(self) -> u64 {
        self.ra_at().wrapping_sub(self.ra_off())
    }

    /// For a rule: the return address's offset from the CFA's base
    /// register (CFA offset plus RA offset).
    #[inline(always)]
    pub(crate) fn ra_at(self) -> u64 {
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
    pub(super) fn row_method(self) -> Method {
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

