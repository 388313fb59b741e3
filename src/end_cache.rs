//! Remembered walk ends. Below the last frame with a row or a frame
//! pointer, every walk on a thread takes the same general steps (scans
//! through glibc's start code or `start_thread`) from the same state over
//! the same stack words. This cache keeps, per such state, the frames the
//! rest of the walk gave and the stack words its steps read; a walk that
//! reaches the same state finds every one of those words unchanged before
//! it takes the remembered frames ([`crate::walk`] says why that gives the
//! same walk). A sequence-locked cache, as [`crate::rule_cache`] describes.

use crate::seq_cache::SeqCache;
use crate::walk::end::{END_HEAD, END_WORDS};

/// Number of entries: 32 × 600 bytes = 19 KiB.
pub const ENTRIES: usize = 32;

static CACHE: SeqCache<ENTRIES, END_WORDS> = SeqCache::new();

/// Copies the entry remembered for `key` in table generation `generation`
/// into `words`: the head always, the rest as far as `used` (given the
/// head) says it reaches. `false` on a miss.
pub(crate) fn get(
    key: u64,
    generation: u64,
    words: &mut [u64; END_WORDS],
    used: impl Fn(&[u64]) -> usize,
) -> bool {
    use core::sync::atomic::Ordering::Relaxed;
    CACHE
        .get_with(key, generation, |w| {
            for (out, w) in words[..END_HEAD].iter_mut().zip(w) {
                *out = w.load(Relaxed);
            }
            // A torn head may claim any length: bound it, and the
            // sequence check discards what was read.
            let n = used(&words[..END_HEAD]).clamp(END_HEAD, END_WORDS);
            for (out, w) in words[END_HEAD..n].iter_mut().zip(&w[END_HEAD..n]) {
                *out = w.load(Relaxed);
            }
        })
        .is_some()
}

/// Remembers `words` for `key` in table generation `generation`, as far as
/// `used` (given the head) says it reaches.
pub(crate) fn put(
    key: u64,
    generation: u64,
    words: &[u64; END_WORDS],
    used: impl Fn(&[u64]) -> usize,
) {
    let n = used(&words[..END_HEAD]).clamp(END_HEAD, END_WORDS);
    CACHE.put_prefix(key, generation, &words[..n]);
}

/// Empties the cache (for measuring cold walks). Safe at any time.
pub fn clear() {
    CACHE.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_per_key_and_generation_as_far_as_used() {
        let mut w = [0u64; END_WORDS];
        for (i, x) in w.iter_mut().enumerate() {
            *x = i as u64 + 1;
        }
        put(0x7ffd_0000_2000, 9, &w, |_| END_WORDS);
        let mut got = [0u64; END_WORDS];
        assert!(get(0x7ffd_0000_2000, 9, &mut got, |_| END_HEAD + 2));
        assert_eq!(got[..END_HEAD + 2], w[..END_HEAD + 2]);
        assert_eq!(got[END_HEAD + 2], 0, "not copied past what is used");
        assert!(!get(0x7ffd_0000_2000, 10, &mut got, |_| END_WORDS));
        assert!(!get(0x7ffd_0000_2008, 9, &mut got, |_| END_WORDS));
        clear();
        assert!(!get(0x7ffd_0000_2000, 9, &mut got, |_| END_WORDS));
    }
}
