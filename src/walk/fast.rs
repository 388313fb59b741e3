//! The hot path: a step specialised for the rows that make up nearly every
//! frame (CFA from sp or fp plus an offset, return address and frame
//! pointer saved at fixed offsets from it) and for frame-pointer steps.
//!
//! A pc's [`Hot`] answer says in one small value whether such a step
//! applies. The walker tries it first; whenever it does not apply, or any
//! check fails, the general step runs instead, so the fast path never
//! changes a walk's result, only its cost (`tests.rs` walks every case
//! both ways).

use crate::formats::sframe::{CfaRule, RegRule};
use crate::walk::Lookup;

/// An SFrame row reduced to what the hot path applies: `cfa = (fp | sp) +
/// cfa_off`, the return address at `cfa + ra_off`, the frame pointer at
/// `cfa + fp_off` or unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastRule {
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
}

/// A frame-pointer link as a rule, the same on both architectures: the
/// record `[fp] = caller's fp`, `[fp + 8] = return address` (PAC bits
/// stripped on AArch64), and the caller's sp is `fp + 16`.
pub const FRAME_POINTER: FastRule = FastRule {
    cfa_fp: true,
    cfa_off: 16,
    ra_off: -8,
    fp_off: Some(-16),
    mangled_ra: true,
};

/// What the hot path may do at one lookup pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotKind {
    /// Not in known code: only the general step decides (trampolines found
    /// by their code, scanning).
    Outside,
    /// Known code without a table row: a frame-pointer step.
    NoInfo,
    /// A row the hot path applies ([`Hot::rule`]).
    Rule,
    /// Anything else (FLEX rows, signal frames and trampolines, compact
    /// encodings, the outermost frame, offsets too large to pack): the
    /// general step.
    Slow,
}

/// A [`HotKind`] with its rule, packed into two words so the walk's inner
/// loop decodes it with shifts, in registers. Word 0 of a valid answer is
/// never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hot {
    /// Kind (bits 0-3), flags (4: CFA from fp, 5: mangled RA, 6: fp saved),
    /// RA offset (bits 16-31) and FP offset (bits 32-47).
    w0: u64,
    /// The CFA offset.
    cfa_off: i64,
}

const OUTSIDE: u64 = 1;
const NO_INFO: u64 = 2;
const SLOW: u64 = 3;
const RULE: u64 = 4;

impl Hot {
    /// Not in known code.
    pub const OUTSIDE: Hot = Hot {
        w0: OUTSIDE,
        cfa_off: 0,
    };
    /// Known code without a table row.
    pub const NO_INFO: Hot = Hot {
        w0: NO_INFO,
        cfa_off: 0,
    };
    /// Left to the general step.
    pub const SLOW: Hot = Hot {
        w0: SLOW,
        cfa_off: 0,
    };

    /// A rule the hot path applies.
    pub const fn from_rule(r: FastRule) -> Hot {
        let (fp_saved, fp_off) = match r.fp_off {
            Some(o) => (1, o),
            None => (0, 0),
        };
        let w0 = RULE
            | (r.cfa_fp as u64) << 4
            | (r.mangled_ra as u64) << 5
            | fp_saved << 6
            | (r.ra_off as u16 as u64) << 16
            | (fp_off as u16 as u64) << 32;
        Hot {
            w0,
            cfa_off: r.cfa_off as i64,
        }
    }

    /// Which kind of answer this is.
    #[inline(always)]
    pub fn kind(self) -> HotKind {
        match self.w0 & 0xf {
            OUTSIDE => HotKind::Outside,
            NO_INFO => HotKind::NoInfo,
            RULE => HotKind::Rule,
            _ => HotKind::Slow,
        }
    }

    /// Whether this is a rule the hot path applies.
    #[inline(always)]
    pub fn is_rule(self) -> bool {
        self.w0 & 0xf == RULE
    }

    /// Whether this pc lies outside known code.
    #[inline(always)]
    pub fn is_outside(self) -> bool {
        self.w0 & 0xf == OUTSIDE
    }

    /// Whether a frame-pointer step may be taken here when no rule is (known
    /// code, no row or rows not used).
    #[inline(always)]
    pub fn is_code_without_trampoline(self) -> bool {
        matches!(self.w0 & 0xf, NO_INFO | RULE)
    }

    /// The rule, for a [`HotKind::Rule`] answer.
    pub fn rule(self) -> FastRule {
        FastRule {
            cfa_fp: self.cfa_fp(),
            cfa_off: self.cfa_off as i32,
            ra_off: self.ra_off() as i16,
            fp_off: self.fp_off().map(|o| o as i16),
            mangled_ra: self.mangled_ra(),
        }
    }

    /// Classifies a lookup. `trampoline` says whether the pc is, or is just
    /// before, a known signal trampoline: those always take the general step.
    pub fn classify(lookup: &Lookup, trampoline: bool) -> Hot {
        match lookup {
            Lookup::Outside => Hot::OUTSIDE,
            _ if trampoline => Hot::SLOW,
            Lookup::NoInfo => Hot::NO_INFO,
            Lookup::Compact { .. } => Hot::SLOW,
            Lookup::SFrame(row) if row.signal_frame => Hot::SLOW,
            Lookup::SFrame(row) => {
                let (cfa_fp, cfa_off) = match row.cfa {
                    CfaRule::SpPlus(o) => (false, o),
                    CfaRule::FpPlus(o) => (true, o),
                    _ => return Hot::SLOW,
                };
                let ra_off = match row.ra {
                    RegRule::AtCfa(o) => match i16::try_from(o) {
                        Ok(o) => o,
                        Err(_) => return Hot::SLOW,
                    },
                    _ => return Hot::SLOW,
                };
                let fp_off = match row.fp {
                    RegRule::Undefined | RegRule::SameValue => None,
                    RegRule::AtCfa(o) => match i16::try_from(o) {
                        Ok(o) => Some(o),
                        Err(_) => return Hot::SLOW,
                    },
                    _ => return Hot::SLOW,
                };
                Hot::from_rule(FastRule {
                    cfa_fp,
                    cfa_off,
                    ra_off,
                    fp_off,
                    mangled_ra: row.mangled_ra,
                })
            }
        }
    }

    /// The frame-pointer link as an answer ([`FRAME_POINTER`]).
    pub(crate) const FRAME_POINTER_LINK: Hot = Hot::from_rule(FRAME_POINTER);

    /// For a rule: the CFA is based on the frame pointer.
    #[inline(always)]
    pub(crate) fn cfa_fp(self) -> bool {
        self.w0 & 1 << 4 != 0
    }

    /// For a rule: the CFA offset.
    #[inline(always)]
    pub(crate) fn cfa_off(self) -> u64 {
        self.cfa_off as u64
    }

    /// For a rule: the return address's offset from the CFA.
    #[inline(always)]
    pub(crate) fn ra_off(self) -> u64 {
        (self.w0 >> 16) as u16 as i16 as i64 as u64
    }

    /// For a rule: the saved frame pointer's offset from the CFA.
    #[inline(always)]
    pub(crate) fn fp_off(self) -> Option<u64> {
        (self.w0 & 1 << 6 != 0).then_some((self.w0 >> 32) as u16 as i16 as i64 as u64)
    }

    /// For a rule: the return address carries PAC bits.
    #[inline(always)]
    pub(crate) fn mangled_ra(self) -> bool {
        self.w0 & 1 << 5 != 0
    }

    /// Packs into two words for a cache.
    #[inline(always)]
    pub fn pack(self) -> [u64; 2] {
        [self.w0, self.cfa_off as u64]
    }

    /// The inverse of [`Hot::pack`] without checks: words it never wrote
    /// read as an answer of no known kind, which the walk treats as
    /// [`HotKind::Slow`].
    #[inline(always)]
    pub fn from_words(w: [u64; 2]) -> Hot {
        Hot {
            w0: w[0],
            cfa_off: w[1] as i32 as i64,
        }
    }
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
        let hot = Hot::classify(&Lookup::SFrame(r), false);
        assert_eq!(hot.kind(), HotKind::Rule);
        assert_eq!(
            hot.rule(),
            FastRule {
                cfa_fp: false,
                cfa_off: 0x1040,
                ra_off: -8,
                fp_off: Some(-16),
                mangled_ra: false,
            }
        );
        assert_eq!(
            (hot.ra_off() as i64, hot.fp_off().map(|o| o as i64)),
            (-8, Some(-16))
        );
        let mut signed = row(CfaRule::FpPlus(16), RegRule::AtCfa(-8), RegRule::SameValue);
        signed.mangled_ra = true;
        let hot = Hot::classify(&Lookup::SFrame(signed), false);
        assert!(hot.cfa_fp() && hot.mangled_ra() && hot.fp_off().is_none());
        assert_eq!(Hot::from_words(hot.pack()), hot);
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
            assert_eq!(Hot::classify(&l, false).kind(), HotKind::Slow, "{l:?}");
        }
        // Next to a known trampoline, even a plain row or no row is slow.
        assert_eq!(Hot::classify(&Lookup::SFrame(plain), true), Hot::SLOW);
        assert_eq!(Hot::classify(&Lookup::NoInfo, true), Hot::SLOW);
        assert_eq!(Hot::classify(&Lookup::NoInfo, false), Hot::NO_INFO);
        assert_eq!(Hot::classify(&Lookup::Outside, true), Hot::OUTSIDE);
        assert_eq!(Hot::from_words([0, 0]).kind(), HotKind::Slow);
    }
}
