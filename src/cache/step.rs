//! The per-pc cache of [`Answer`] answers that the walk's hot path probes once
//! per frame: a sequence-locked cache of one word per pc (see
//! [`super`] for the protocol), two-way: a pc's answer sits in its home
//! entry or in the entry next to it.
//!
//! A pc's home entry is picked by its address ([`home`]), not hashed,
//! and the key an entry holds is the return address itself, not the
//! lookup pc (one less): the probe's chain starts from the address the
//! walk read, one operation sooner.
//!
//! Why two ways: direct-mapped, two pcs of one stack that share a
//! slot evict each other at every walk, and each then pays a table lookup
//! (some 1,300 instructions). Of `n` distinct pcs in 8,192 direct-mapped
//! slots, about `n (1 - e^(-n/8192))` share a slot: 10 of the 282 of the
//! 256-deep distinct-function stack, 115 of 1,000. With a second way a pc
//! is displaced only where three or more meet: under one of the 282, some
//! 25 of 1,000. Measured (callgrind, `benches/instructions.rs`):
//! direct-mapped, one build of the benchmark missed twice a 256-deep warm
//! walk (9 instructions a frame on average; which pcs collide moves with
//! the code's layout), and no build measured with two ways missed.
//!
//! Why the neighbour, not an aligned pair: a probe of the home entry is
//! then exactly the direct-mapped probe, the same instructions and the
//! same chain of dependent operations from the return address to the
//! answer (an aligned pair costs one more operation in that chain, and
//! with it the SFrame walk ran some 5-10% slower in our timing, within the
//! spread between builds but in every run), and a pc that hits at home
//! pays nothing for the second way. The neighbour mostly shares the home
//! entry's cache line. Entries stay 24 bytes: padding them to 32 (one pair
//! a line) cost instructions and gained no time.
use super::seq::SeqCache;
use crate::walk::answer::Answer;

/// Number of entries: 8192 × 24 bytes = 192 KiB.
pub const ENTRIES: usize = 8192;

static CACHE: SeqCache<ENTRIES, 1> = SeqCache::new();

/// The home slot of return address `ra`: `ra / 4`, modulo the entries.
///
/// By address, not hashed: two return addresses lie at least 5 bytes
/// apart on x86_64 (but after a 2-byte indirect call, and then the two
/// ways take both) and 4 on AArch64, so nearby code keeps distinct,
/// nearby slots; the probe's chain is a shift and a mask, not a
/// multiply; and callers near their callees are probed in address order.
/// Measured (best of 400 batches, three processes each without
/// address-space randomisation): warm SFrame walks of 16, 64 and 256
/// distinct functions 9.26 → 8.57, 7.76 → 7.10 and 9.92 → 8.16 ns a
/// frame against a multiplicative hash, frame-pointer walks unchanged.
#[inline(always)]
fn home(ra: u64) -> usize {
    (ra >> 2) as usize
}

/// The cached answer for lookup pc `key` (a return address less one) in
/// cache generation `generation`, if any.
#[inline(always)]
pub fn get(key: u64, generation: u64) -> Option<Answer> {
    let ra = key.wrapping_add(1);
    CACHE
        .get_2way(home(ra), ra, generation)
        .map(|[w]| Answer::from_word(w))
}

/// Remembers `hot` for lookup pc `key` in cache generation `generation`.
pub(crate) fn put(key: u64, generation: u64, hot: Answer) {
    let ra = key.wrapping_add(1);
    CACHE.put_2way(home(ra), ra, generation, [hot.pack()]);
}

/// Empties the cache (for measuring cold walks). Safe at any time.
pub fn clear() {
    CACHE.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::answer::SimpleRule;

    #[test]
    fn every_kind_of_answer_round_trips() {
        let rule = |cfa_off| {
            Answer::from_rule(SimpleRule {
                cfa_fp: cfa_off % 2 == 0,
                cfa_off,
                ra_off: -8,
                fp_off: Some(-16),
                mangled_ra: true,
                cfi: cfa_off % 3 == 0,
            })
        };
        let cases = [
            Answer::OUTSIDE,
            Answer::NO_INFO,
            Answer::SLOW,
            rule(-4096),
            rule(1 << 20),
        ];
        for (i, h) in cases.into_iter().enumerate() {
            let key = 0x7f10_0000_5000 + i as u64 * 0x1_0000;
            put(key, 7, h);
            assert_eq!(get(key, 7), Some(h));
            assert_eq!(get(key, 8), None);
        }
    }

    /// Slots by address: return addresses of nearby code, 4 bytes apart
    /// or more (a call on AArch64, or a 5-byte call on x86_64), keep one
    /// slot each, and two 2 bytes apart (back-to-back indirect calls on
    /// x86_64) take the two ways of one set.
    #[test]
    fn nearby_return_addresses_keep_a_slot_each() {
        static NEAR: SeqCache<64, 1> = SeqCache::new();
        let base = 0x5555_5555_1000u64;
        let slot = |ra: u64| home(ra) % 64;
        for spacing in [4u64, 5, 7, 12] {
            let slots: std::collections::HashSet<_> =
                (0..16).map(|i| slot(base + i * spacing)).collect();
            assert_eq!(slots.len(), 16, "16 return addresses {spacing} bytes apart");
        }
        // As many return addresses 4 bytes apart as there are entries:
        // every one stays.
        for i in 0..64 {
            let ra = base + i * 4;
            NEAR.put_2way(home(ra), ra, 2, [i + 1]);
        }
        for i in 0..64 {
            let ra = base + i * 4;
            assert_eq!(NEAR.get_2way(home(ra), ra, 2), Some([i + 1]));
        }
        NEAR.clear();
        let (a, b) = (base + 0x100, base + 0x102);
        assert_eq!(slot(a), slot(b));
        NEAR.put_2way(home(a), a, 3, [1]);
        NEAR.put_2way(home(b), b, 3, [2]);
        assert_eq!(
            (NEAR.get_2way(home(a), a, 3), NEAR.get_2way(home(b), b, 3)),
            (Some([1]), Some([2]))
        );
    }
}
