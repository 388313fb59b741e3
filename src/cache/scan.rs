//! Remembered stack scans. The outermost frames of every thread (glibc's
//! start code, `start_thread`) have neither unwind rows nor frame pointers,
//! so each walk finds them by scanning, from the same stack pointers over
//! the same words, walk after walk. This cache keeps, per scan start, the
//! words the scan read, the last being the one it took; a walk takes that
//! word again without testing the others only if the stack still holds
//! every one of them. Same words and same module table give the same
//! answer, so this changes no walk. A sequence-locked cache, as
//! [`super`] describes.

use super::seq::SeqCache;
use crate::walk::SCAN_MEMO_WORDS;

/// Number of entries: 64 × 280 bytes = 17.5 KiB.
pub const ENTRIES: usize = 64;

/// Word 0: the count; then the words.
static CACHE: SeqCache<ENTRIES, { SCAN_MEMO_WORDS + 1 }> = SeqCache::new();

/// Copies the words remembered for a scan from `start` in cache generation
/// `generation` into `words`; their count, if any.
pub fn get(start: u64, generation: u64, words: &mut [u64; SCAN_MEMO_WORDS]) -> Option<usize> {
    use core::sync::atomic::Ordering::Relaxed;
    CACHE
        .get_with(start, generation, |w| {
            let n = (w[0].load(Relaxed) as usize).min(SCAN_MEMO_WORDS);
            for (out, w) in words.iter_mut().zip(&w[1..=n]) {
                *out = w.load(Relaxed);
            }
            n
        })
        .filter(|&n| n > 0)
}

/// Remembers the words a scan from `start` read, the last one taken
/// (at most [`SCAN_MEMO_WORDS`]; longer scans are not remembered).
pub(crate) fn put(start: u64, generation: u64, words: &[u64]) {
    if words.is_empty() || words.len() > SCAN_MEMO_WORDS {
        return;
    }
    let mut w = [0u64; SCAN_MEMO_WORDS + 1];
    w[0] = words.len() as u64;
    w[1..=words.len()].copy_from_slice(words);
    // Only the count and the words it covers: `get` reads no further.
    CACHE.put_prefix(start, generation, &w[..=words.len()]);
}

/// Empties the cache (for measuring cold walks). Safe at any time.
pub fn clear() {
    CACHE.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_per_start_and_generation() {
        let start = 0x7ffd_0000_1000;
        put(start, 3, &[1, 2, 0x40_1005]);
        let mut got = [0; SCAN_MEMO_WORDS];
        assert_eq!(get(start, 3, &mut got), Some(3));
        assert_eq!(got[..3], [1, 2, 0x40_1005]);
        assert_eq!(get(start, 4, &mut got), None);
        assert_eq!(get(start + 8, 3, &mut got), None);
        // Too long to keep.
        put(start + 16, 3, &[7; SCAN_MEMO_WORDS + 1]);
        assert_eq!(get(start + 16, 3, &mut got), None);
    }
}
