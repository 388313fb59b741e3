//! The per-pc cache of [`Hot`] answers that the walk's hot path probes once
//! per frame: a sequence-locked cache of one word per pc (see
//! [`super`] for the protocol).

use super::seq::SeqCache;
use crate::walk::fast::Hot;

/// Number of entries: 8192 × 24 bytes = 192 KiB.
pub const ENTRIES: usize = 8192;

static CACHE: SeqCache<ENTRIES, 1> = SeqCache::new();

/// The cached answer for `key` in cache generation `generation`, if any.
#[inline(always)]
pub fn get(key: u64, generation: u64) -> Option<Hot> {
    CACHE.get(key, generation).map(|[w]| Hot::from_word(w))
}

/// Remembers `hot` for `key` in cache generation `generation`.
pub(crate) fn put(key: u64, generation: u64, hot: Hot) {
    CACHE.put(key, generation, [hot.pack()]);
}

/// Empties the cache (for measuring cold walks). Safe at any time.
pub fn clear() {
    CACHE.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::fast::FastRule;

    #[test]
    fn every_kind_of_answer_round_trips() {
        let rule = |cfa_off| {
            Hot::from_rule(FastRule {
                cfa_fp: cfa_off % 2 == 0,
                cfa_off,
                ra_off: -8,
                fp_off: Some(-16),
                mangled_ra: true,
                cfi: cfa_off % 3 == 0,
            })
        };
        let cases = [
            Hot::OUTSIDE,
            Hot::NO_INFO,
            Hot::SLOW,
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
}
