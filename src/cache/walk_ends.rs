//! Remembered walk ends. Below the last frame with a row or a frame
//! pointer, every walk on a thread takes the same general steps (scans
//! through glibc's start code or `start_thread`) from the same state over
//! the same stack words. This cache keeps, per such state, the frames the
//! rest of the walk gave and the stack words its steps read; a walk that
//! reaches the same state finds every one of those words unchanged before
//! it takes the remembered frames ([`crate::walk`] says why that gives the
//! same walk). A sequence-locked cache, as [`super`] describes.

use core::sync::atomic::AtomicU64;

use super::seq::SeqCache;
use crate::walk::{END_HEAD, END_WORDS};

/// Number of entries: 32 × 600 bytes = 19 KiB.
pub const ENTRIES: usize = 32;

static CACHE: SeqCache<ENTRIES, END_WORDS> = SeqCache::new();

/// What `take` makes of the entry remembered for `key` in table
/// cache generation `generation`; `None` on a miss, or if the entry changed while
/// `take` read it.
#[inline(always)]
pub(crate) fn get_with<R>(
    key: u64,
    generation: u64,
    take: impl FnOnce(&[AtomicU64; END_WORDS]) -> R,
) -> Option<R> {
    CACHE.get_with(key, generation, take)
}

/// Remembers `words` for `key` in cache generation `generation`, as far as
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
    use core::sync::atomic::Ordering::Relaxed;

    #[test]
    fn entries_round_trip_per_key_and_generation_as_far_as_used() {
        let key = 0x7ffd_0000_2000;
        let copy = |e: &[AtomicU64; END_WORDS]| e.each_ref().map(|w| w.load(Relaxed));
        let mut w = [0u64; END_WORDS];
        for (i, x) in w.iter_mut().enumerate() {
            *x = i as u64 + 1;
        }
        put(key, 9, &[!0; END_WORDS], |_| END_WORDS);
        put(key, 9, &w, |_| END_HEAD + 2);
        let got = get_with(key, 9, copy).expect("a hit");
        assert_eq!(got[..END_HEAD + 2], w[..END_HEAD + 2]);
        assert_eq!(got[END_HEAD + 2], !0, "not stored past what is used");
        assert!(get_with(key, 10, copy).is_none());
        assert!(get_with(key + 8, 9, copy).is_none());
        clear();
        assert!(get_with(key, 9, copy).is_none());
    }
}
