//! The per-pc cache of [`Hot`] answers that the walk's hot path probes once
//! per frame.
//!
//! Direct-mapped, in static memory, shared by every thread and safe in
//! signal handlers: no lock, no allocation, no waiting. Each entry is a
//! sequence lock: a writer claims it by making its sequence word odd (and
//! gives up if another writer holds it), writes the key and the two answer
//! words, then publishes an even sequence word that also carries the
//! module table's generation. A reader takes the entry only if the
//! sequence word is even, of its generation, and unchanged after reading,
//! so a torn entry reads as a miss and a refresh of the module table
//! invalidates every entry at once.

use core::sync::atomic::{fence, AtomicU64, Ordering::*};

use crate::walk::fast::Hot;

/// Number of entries (a power of two): 8192 × 32 bytes = 256 KiB.
pub const ENTRIES: usize = 8192;

#[repr(align(32))]
struct Entry {
    /// Generation (high 32 bits) and write count (low 32; odd while written).
    seq: AtomicU64,
    key: AtomicU64,
    words: [AtomicU64; 2],
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    seq: AtomicU64::new(0),
    key: AtomicU64::new(0),
    words: [const { AtomicU64::new(0) }; 2],
};

static CACHE: [Entry; ENTRIES] = [EMPTY; ENTRIES];

#[inline(always)]
fn slot(key: u64) -> &'static Entry {
    let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    &CACHE[(h >> (64 - ENTRIES.trailing_zeros())) as usize]
}

/// The cached answer for `key` in table generation `generation`, if any.
/// Generation 0 never hits (the empty entries carry it).
#[inline(always)]
pub fn get(key: u64, generation: u64) -> Option<Hot> {
    let e = slot(key);
    let s1 = e.seq.load(Acquire);
    if s1 & 1 != 0 || s1 >> 32 != generation & 0xffff_ffff || e.key.load(Relaxed) != key {
        return None;
    }
    let w = [e.words[0].load(Relaxed), e.words[1].load(Relaxed)];
    fence(Acquire);
    if e.seq.load(Relaxed) != s1 {
        return None;
    }
    Hot::unpack(w)
}

/// Remembers `hot` for `key` in table generation `generation`. Gives up
/// rather than wait when another writer holds the entry.
pub fn put(key: u64, generation: u64, hot: Hot) {
    let e = slot(key);
    let s = e.seq.load(Relaxed);
    if s & 1 != 0 {
        return;
    }
    let count = s & 0xffff_ffff;
    let claimed = (s & !0xffff_ffff) | (count.wrapping_add(1) & 0xffff_ffff);
    if e.seq
        .compare_exchange(s, claimed, Acquire, Relaxed)
        .is_err()
    {
        return;
    }
    fence(Release);
    let w = hot.pack();
    e.key.store(key, Relaxed);
    e.words[0].store(w[0], Relaxed);
    e.words[1].store(w[1], Relaxed);
    let done = (generation & 0xffff_ffff) << 32 | (count.wrapping_add(2) & 0xffff_ffff);
    e.seq.store(done, Release);
}

/// Empties the cache (for measuring cold walks). Safe at any time: a walk
/// racing it only misses. The write count goes on, so a reader that read
/// an entry before the clear cannot mistake a later one for it.
pub fn clear() {
    for e in &CACHE {
        let s = e.seq.load(Relaxed);
        if s & 1 == 0 {
            let empty = s.wrapping_add(2) & 0xffff_ffff;
            let _ = e.seq.compare_exchange(s, empty, Relaxed, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::fast::FastRule;

    fn rule(cfa_off: i32) -> Hot {
        Hot::from_rule(FastRule {
            cfa_fp: cfa_off % 2 == 0,
            cfa_off,
            ra_off: -8,
            fp_off: Some(-16),
            mangled_ra: true,
        })
    }

    #[test]
    fn answers_round_trip_per_key_and_generation() {
        let cases = [
            Hot::OUTSIDE,
            Hot::NO_INFO,
            Hot::SLOW,
            rule(-4096),
            rule(1 << 20),
        ];
        for (i, h) in cases.into_iter().enumerate() {
            let key = 0x7f00_0000_5000 + i as u64 * 0x1_0000;
            put(key, 7, h);
            assert_eq!(get(key, 7), Some(h));
            assert_eq!(get(key, 8), None, "another generation misses");
            assert_eq!(get(key, 7 + (1 << 32)), Some(h), "32 bits of generation");
            assert_eq!(get(key + 1, 7), None);
        }
    }

    #[test]
    fn a_held_or_torn_entry_reads_as_a_miss() {
        let key = 0xdead_0000;
        put(key, 1, Hot::NO_INFO);
        let e = slot(key);
        let s = e.seq.load(Relaxed);
        e.seq.store(s + 1, Relaxed); // a writer holds it
        assert_eq!(get(key, 1), None);
        put(key, 1, Hot::OUTSIDE); // a second writer gives up
        e.seq.store(s, Relaxed);
        assert_eq!(get(key, 1), Some(Hot::NO_INFO));
    }

    #[test]
    fn clear_empties_every_entry() {
        let key = 0xbeef_0000;
        put(key, 5, Hot::SLOW);
        clear();
        assert_eq!(get(key, 5), None);
        put(key, 5, Hot::SLOW);
        assert_eq!(get(key, 5), Some(Hot::SLOW));
    }

    #[test]
    fn concurrent_writers_never_produce_a_wrong_hit() {
        let key = 0xabc0;
        let (a, b) = (Hot::NO_INFO, rule(24));
        std::thread::scope(|s| {
            for h in [a, b] {
                s.spawn(move || {
                    for _ in 0..50_000 {
                        put(key, 3, h);
                    }
                });
            }
            s.spawn(move || {
                for _ in 0..50_000 {
                    if let Some(got) = get(key, 3) {
                        assert!(got == a || got == b, "{got:?}");
                    }
                }
            });
        });
    }
}
