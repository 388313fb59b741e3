//! A per-pc cache of module-table lookups, for profilers that walk the same
//! code thousands of times a second: a sequence-locked cache holding each
//! lookup packed into five words. The general step reads it; the hot path
//! reads [`super::step`]. The protocol: [`super`].

use super::seq::SeqCache;
use crate::formats::sframe::{CfaRule, RegRule, Row};
use crate::walk::Lookup;

/// Number of entries (a power of two): 4096 × 56 bytes = 224 KiB.
pub const ENTRIES: usize = 4096;

static CACHE: SeqCache<ENTRIES, 5> = SeqCache::new();

/// Empties the cache (for measuring cold walks). Safe at any time: a walk
/// racing it only misses.
pub fn clear() {
    CACHE.clear();
}

/// The cached lookup for `pc` in cache generation `generation`, if any.
pub fn get(pc: u64, generation: u64) -> Option<Lookup> {
    CACHE.get(pc, generation).and_then(|w| unpack(&w))
}

/// Remembers the lookup for `pc` in cache generation `generation`.
pub(crate) fn put(pc: u64, generation: u64, lookup: &Lookup) {
    if let Some(w) = pack(lookup) {
        CACHE.put(pc, generation, w);
    }
}

fn pack_reg(rule: RegRule) -> u64 {
    let (kind, reg, off) = match rule {
        RegRule::Undefined => (0, 0, 0),
        RegRule::SameValue => (1, 0, 0),
        RegRule::AtCfa(o) => (2, 0, o),
        RegRule::RegPlus { reg, offset } => (3, reg, offset),
        RegRule::AtRegPlus { reg, offset } => (4, reg, offset),
    };
    kind | u64::from(reg) << 8 | u64::from(off as u32) << 32
}

fn unpack_reg(w: u64) -> Option<RegRule> {
    let (reg, off) = ((w >> 8) as u16, (w >> 32) as u32 as i32);
    Some(match w & 0xff {
        0 => RegRule::Undefined,
        1 => RegRule::SameValue,
        2 => RegRule::AtCfa(off),
        3 => RegRule::RegPlus { reg, offset: off },
        4 => RegRule::AtRegPlus { reg, offset: off },
        _ => return None,
    })
}

/// Packs a lookup into five words; word 0's low byte is the kind.
fn pack(l: &Lookup) -> Option<[u64; 5]> {
    Some(match *l {
        Lookup::Outside => [1, 0, 0, 0, 0],
        Lookup::NoInfo => [2, 0, 0, 0, 0],
        Lookup::Compact {
            encoding,
            func_start,
        } => [3, u64::from(encoding), func_start, 0, 0],
        Lookup::SFrame(r) | Lookup::Cfi(r) => {
            let (kind, reg, off) = match r.cfa {
                CfaRule::SpPlus(o) => (0, 0, o),
                CfaRule::FpPlus(o) => (1, 0, o),
                CfaRule::RegPlus { reg, offset } => (2, reg, offset),
                CfaRule::AtRegPlus { reg, offset } => (3, reg, offset),
            };
            let flags = u64::from(r.mangled_ra) | u64::from(r.signal_frame) << 1;
            let tag = if matches!(l, Lookup::Cfi(_)) { 5 } else { 4 };
            let w0 =
                tag | kind << 8 | flags << 12 | u64::from(reg) << 16 | u64::from(off as u32) << 32;
            let span = u64::from(r.func_size) | r.row_start.wrapping_sub(r.func_start) << 32;
            [w0, pack_reg(r.ra), pack_reg(r.fp), r.func_start, span]
        }
    })
}

fn unpack(w: &[u64; 5]) -> Option<Lookup> {
    Some(match w[0] & 0xff {
        1 => Lookup::Outside,
        2 => Lookup::NoInfo,
        3 => Lookup::Compact {
            encoding: w[1] as u32,
            func_start: w[2],
        },
        tag @ (4 | 5) => {
            let (reg, off) = ((w[0] >> 16) as u16, (w[0] >> 32) as u32 as i32);
            let cfa = match (w[0] >> 8) & 0xf {
                0 => CfaRule::SpPlus(off),
                1 => CfaRule::FpPlus(off),
                2 => CfaRule::RegPlus { reg, offset: off },
                _ => CfaRule::AtRegPlus { reg, offset: off },
            };
            let row = Row {
                func_start: w[3],
                func_size: w[4] as u32,
                row_start: w[3].wrapping_add(w[4] >> 32),
                cfa,
                ra: unpack_reg(w[1])?,
                fp: unpack_reg(w[2])?,
                mangled_ra: (w[0] >> 12) & 1 != 0,
                signal_frame: (w[0] >> 13) & 1 != 0,
            };
            if tag == 5 {
                Lookup::Cfi(row)
            } else {
                Lookup::SFrame(row)
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cfa: CfaRule, ra: RegRule, fp: RegRule) -> Row {
        Row {
            func_start: 0x7fff_1234_0000,
            func_size: 0x1234,
            row_start: 0x7fff_1234_0040,
            cfa,
            ra,
            fp,
            mangled_ra: true,
            signal_frame: false,
        }
    }

    #[test]
    fn every_kind_of_lookup_round_trips() {
        let cases = [
            Lookup::Outside,
            Lookup::NoInfo,
            Lookup::Compact {
                encoding: 0x0401_0000,
                func_start: 0x1_0000_2000,
            },
            Lookup::SFrame(row(
                CfaRule::SpPlus(-8),
                RegRule::AtCfa(-8),
                RegRule::SameValue,
            )),
            Lookup::SFrame(row(
                CfaRule::AtRegPlus {
                    reg: 6,
                    offset: -48,
                },
                RegRule::RegPlus { reg: 2, offset: 0 },
                RegRule::AtRegPlus { reg: 6, offset: 0 },
            )),
            Lookup::SFrame(row(
                CfaRule::FpPlus(16),
                RegRule::Undefined,
                RegRule::AtCfa(-16),
            )),
            Lookup::Cfi(row(
                CfaRule::FpPlus(16),
                RegRule::Undefined,
                RegRule::AtCfa(-16),
            )),
            Lookup::Cfi(row(
                CfaRule::RegPlus { reg: 10, offset: 0 },
                RegRule::AtCfa(-8),
                RegRule::SameValue,
            )),
        ];
        for (i, l) in cases.iter().enumerate() {
            let pc = 0x5000 + i as u64 * 0x1_0000;
            put(pc, 7, l);
            assert_eq!(get(pc, 7), Some(*l));
            assert_eq!(get(pc, 8), None, "another generation misses");
            assert_eq!(get(pc + 1, 7), None);
        }
    }

    #[test]
    fn concurrent_writers_never_produce_a_wrong_hit() {
        // Two threads write different lookups for the same pc; readers must
        // only ever see one of the two.
        let pc = 0xabc0;
        let a = Lookup::NoInfo;
        let b = Lookup::SFrame(row(
            CfaRule::SpPlus(8),
            RegRule::AtCfa(-8),
            RegRule::SameValue,
        ));
        std::thread::scope(|s| {
            for l in [a, b] {
                s.spawn(move || {
                    for _ in 0..20_000 {
                        put(pc, 3, &l);
                    }
                });
            }
            s.spawn(move || {
                for _ in 0..20_000 {
                    if let Some(got) = get(pc, 3) {
                        assert!(got == a || got == b, "{got:?}");
                    }
                }
            });
        });
    }
}
