//! A cache of `W` words per key, in static memory, direct-mapped or
//! two-way (a key's slot or the one next to it): the sequence-locked store behind the per-pc caches
//! ([`super`], whose documentation gives the protocol, and
//! [`super::step`]) and the remembered scans ([`super::scan`]).

use core::sync::atomic::{fence, AtomicU64, Ordering::*};

/// One entry: generation (high 32 bits of `seq`) and write count (low 32;
/// odd while written), the key, and the cached words.
pub(crate) struct Entry<const W: usize> {
    seq: AtomicU64,
    key: AtomicU64,
    words: [AtomicU64; W],
}

impl<const W: usize> Entry<W> {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Entry<W> = Entry {
        seq: AtomicU64::new(0),
        key: AtomicU64::new(0),
        words: [const { AtomicU64::new(0) }; W],
    };
}

/// `N` entries (a power of two) of `W` words each, aligned so that
/// 32-byte entries never straddle a cache line (of 24-byte ones, a quarter
/// do; each word still sits in one line).
#[repr(align(64))]
pub(crate) struct SeqCache<const N: usize, const W: usize> {
    entries: [Entry<W>; N],
}

const LOW: u64 = 0xffff_ffff;

impl<const N: usize, const W: usize> SeqCache<N, W> {
    /// An empty cache.
    pub(crate) const fn new() -> Self {
        SeqCache {
            entries: [Entry::EMPTY; N],
        }
    }

    /// The index of `key`'s own entry.
    #[inline(always)]
    fn home(key: u64) -> usize {
        let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - N.trailing_zeros())) as usize
    }

    #[inline(always)]
    fn slot(&self, key: u64) -> &Entry<W> {
        &self.entries[Self::home(key)]
    }

    /// The words cached for `key` in cache generation `generation`, if
    /// any. Generation 0 (low 32 bits) never hits: the empty entries carry
    /// it, and nothing is stored under it.
    #[inline(always)]
    pub(crate) fn get(&self, key: u64, generation: u64) -> Option<[u64; W]> {
        self.get_with(key, generation, |words| {
            core::array::from_fn(|i| words[i].load(Relaxed))
        })
    }

    /// What `read` makes of the words cached for `key` in generation
    /// `generation`, if any: `read` may see a torn entry, but its result is
    /// returned only if the entry did not change meanwhile.
    #[inline(always)]
    pub(crate) fn get_with<R>(
        &self,
        key: u64,
        generation: u64,
        read: impl FnOnce(&[AtomicU64; W]) -> R,
    ) -> Option<R> {
        if generation & LOW == 0 {
            return None;
        }
        Self::read_with(self.slot(key), key, generation, read)
    }

    /// Remembers `words` for `key` in cache generation `generation`. Gives
    /// up rather than wait when another writer holds the entry.
    pub(crate) fn put(&self, key: u64, generation: u64, words: [u64; W]) {
        self.put_prefix(key, generation, &words);
    }

    /// [`Self::put`] of the first `words.len()` words only; the rest keep
    /// whatever they held (for entries whose head says how much is used).
    pub(crate) fn put_prefix(&self, key: u64, generation: u64, words: &[u64]) {
        if generation & LOW == 0 {
            return;
        }
        Self::write(self.slot(key), key, generation, words);
    }

    /// The two entries a key whose own slot is `home` (modulo `N`) may sit
    /// in when the cache is used two-way: that slot and its neighbour,
    /// mostly in the same cache line. The cache's user picks the home slot
    /// (the step cache: by address).
    #[inline(always)]
    fn set(&self, home: usize) -> [&Entry<W>; 2] {
        const { assert!(N >= 2, "a two-way cache needs two entries or more") };
        let i = home & (N - 1);
        [&self.entries[i], &self.entries[i ^ 1]]
    }

    /// [`Self::get`] for a cache used two-way: the key may sit in its own
    /// slot or in the slot next to it ([`Self::put_2way`]). Use one way of
    /// storing per cache. Unlike [`Self::get`], a probe of generation 0
    /// (low 32 bits) may hit: an empty or cleared entry, whose words are
    /// all 0, so a cache must read zero words as "nothing known" (the step
    /// cache's answer 0 is no answer, which the walk leaves to the general
    /// step). Leaving out that check saves the hot loop two instructions a
    /// frame (callgrind).
    #[inline(always)]
    pub(crate) fn get_2way(&self, home: usize, key: u64, generation: u64) -> Option<[u64; W]> {
        let [a, b] = self.set(home);
        Self::read(a, key, generation).or_else(|| Self::read(b, key, generation))
    }

    /// [`Self::put`] for a cache used two-way: into whichever of the key's
    /// two entries holds `key` already, else its own slot if that holds
    /// nothing of this generation, else the neighbour, so that two keys
    /// that share a slot both stay, and a third displaces only the one in
    /// the neighbour.
    pub(crate) fn put_2way(&self, home: usize, key: u64, generation: u64, words: [u64; W]) {
        if generation & LOW == 0 {
            return;
        }
        let [a, b] = self.set(home);
        // Each sequence word read once: a cold walk puts at every frame.
        let live = |e: &Entry<W>| e.seq.load(Relaxed) >> 32 == generation & LOW;
        let a_live = live(a);
        let e = if a_live && a.key.load(Relaxed) == key {
            a
        } else if a_live || live(b) && b.key.load(Relaxed) == key {
            b
        } else {
            a
        };
        Self::write(e, key, generation, &words);
    }

    /// The words of entry `e` if it holds `key` in `generation`, whole.
    #[inline(always)]
    fn read(e: &Entry<W>, key: u64, generation: u64) -> Option<[u64; W]> {
        Self::read_with(e, key, generation, |words| {
            core::array::from_fn(|i| words[i].load(Relaxed))
        })
    }

    /// What `read` makes of entry `e`'s words if it holds `key` in
    /// `generation`: `read` may see a torn entry, but its result is
    /// returned only if the entry did not change meanwhile.
    #[inline(always)]
    fn read_with<R>(
        e: &Entry<W>,
        key: u64,
        generation: u64,
        read: impl FnOnce(&[AtomicU64; W]) -> R,
    ) -> Option<R> {
        let s1 = e.seq.load(Acquire);
        // Even and of `generation` in one compare: the xor clears the high
        // half and leaves bit 0 (odd: being written) as it was; rotated
        // right by one, bit 0 lands on top, and both hold exactly when
        // bits 31 to 63 are clear (xor, rotate, compare: two instructions
        // fewer than two tests).
        let unlike = (s1 ^ (generation & LOW) << 32).rotate_right(1);
        if unlike >= 1 << 31 || e.key.load(Relaxed) != key {
            return None;
        }
        let r = read(&e.words);
        fence(Acquire);
        (e.seq.load(Relaxed) == s1).then_some(r)
    }

    /// Writes `key` and `words` into `e` under the sequence lock, or gives
    /// up if another writer holds it.
    #[inline(always)]
    fn write(e: &Entry<W>, key: u64, generation: u64, words: &[u64]) {
        let s = e.seq.load(Relaxed);
        if s & 1 != 0 {
            return;
        }
        let count = s & LOW;
        let claimed = (s & !LOW) | (count.wrapping_add(1) & LOW);
        if e.seq
            .compare_exchange(s, claimed, Acquire, Relaxed)
            .is_err()
        {
            return;
        }
        fence(Release);
        e.key.store(key, Relaxed);
        for (slot, &w) in e.words.iter().zip(words) {
            slot.store(w, Relaxed);
        }
        let done = (generation & LOW) << 32 | (count.wrapping_add(2) & LOW);
        e.seq.store(done, Release);
    }

    /// Empties the cache. Safe at any time: a walk racing it only misses.
    /// The write count goes on, so a reader that read an entry before the
    /// clear cannot mistake a later one for it. Each entry is written as an
    /// empty one is, key and words 0 under generation 0, so that in a
    /// two-way cache, whose probes skip the generation-0 check, a probe of
    /// generation 0 finds only zero words ([`Self::get_2way`]).
    pub(crate) fn clear(&self) {
        for e in &self.entries {
            Self::write(e, 0, 0, &[0; W]);
        }
    }

    /// Marks `key`'s entry as held by a writer (`true`) or released, for
    /// tests of the protocol.
    #[cfg(test)]
    pub(crate) fn hold(&self, key: u64, held: bool) {
        let e = self.slot(key);
        let s = e.seq.load(Relaxed);
        e.seq.store(if held { s | 1 } else { s & !1 }, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static CACHE: SeqCache<64, 2> = SeqCache::new();

    #[test]
    fn words_round_trip_per_key_and_generation() {
        for i in 0..8u64 {
            let key = 0x7f00_0000_5000 + i * 0x1_0000;
            CACHE.put(key, 7, [i, !i]);
            assert_eq!(CACHE.get(key, 7), Some([i, !i]));
            assert_eq!(CACHE.get(key, 8), None, "another generation misses");
            assert_eq!(
                CACHE.get(key, 7 + (1 << 32)),
                Some([i, !i]),
                "32 bits of generation"
            );
            assert_eq!(CACHE.get(key + 1, 7), None);
        }
    }

    #[test]
    fn generation_0_never_hits_an_empty_entry_and_stores_nothing() {
        static FRESH: SeqCache<64, 2> = SeqCache::new();
        assert_eq!(FRESH.get(0, 0), None, "an empty entry: key 0, generation 0");
        assert_eq!(FRESH.get(0, 1 << 32), None);
        FRESH.put(0x4000, 0, [5, 6]);
        assert_eq!(FRESH.get(0x4000, 0), None);
        FRESH.put(0x4000, 3, [5, 6]);
        assert_eq!(FRESH.get(0x4000, 3), Some([5, 6]));
    }

    #[test]
    fn a_held_entry_reads_as_a_miss_and_a_second_writer_gives_up() {
        let key = 0xdead_0000;
        CACHE.put(key, 1, [1, 2]);
        CACHE.hold(key, true);
        assert_eq!(CACHE.get(key, 1), None);
        CACHE.put(key, 1, [3, 4]);
        CACHE.hold(key, false);
        assert_eq!(CACHE.get(key, 1), Some([1, 2]));
    }

    #[test]
    fn two_keys_that_share_a_set_both_stay_and_a_third_displaces_the_second() {
        static TWO: SeqCache<64, 1> = SeqCache::new();
        // Homes modulo 64: 10, 74 and 138 are one set.
        let [a, b, c] = [(10, 0x5000), (74, 0x5010), (138, 0x5020)];
        let put = |(h, k): (usize, u64), g, w| TWO.put_2way(h, k, g, [w]);
        let get = |(h, k): (usize, u64), g| TWO.get_2way(h, k, g).map(|[w]| w);
        put(a, 4, 1);
        put(b, 4, 2);
        put(a, 4, 3);
        assert_eq!((get(a, 4), get(b, 4)), (Some(3), Some(2)));
        put(c, 4, 5);
        assert_eq!(get(a, 4), Some(3), "the first way stays");
        assert_eq!((get(b, 4), get(c, 4)), (None, Some(5)));
        assert_eq!(get(a, 5), None, "another generation misses");
        assert_eq!(
            TWO.get_2way(11, a.1, 4),
            Some([3]),
            "from the neighbour's home"
        );
        assert_eq!(TWO.get_2way(12, a.1, 4), None, "another set misses");
        // An entry of an older generation is free again.
        put(b, 5, 7);
        assert_eq!(get(b, 5), Some(7));
        assert_eq!(get(c, 5), None);
        TWO.clear();
        assert_eq!(get(b, 5), None);
    }

    #[test]
    fn clear_empties_every_entry() {
        let key = 0xbeef_0000;
        CACHE.put(key, 5, [9, 9]);
        CACHE.clear();
        assert_eq!(CACHE.get(key, 5), None);
        CACHE.put(key, 5, [9, 9]);
        assert_eq!(CACHE.get(key, 5), Some([9, 9]));
    }

    #[test]
    fn concurrent_writers_never_produce_a_torn_hit() {
        static SHARED: SeqCache<2, 2> = SeqCache::new();
        let key = 0xabc0;
        let (a, b) = ([1, 1], [2, 2]);
        std::thread::scope(|s| {
            for w in [a, b] {
                s.spawn(move || {
                    for _ in 0..50_000 {
                        SHARED.put(key, 3, w);
                    }
                });
            }
            s.spawn(move || {
                for _ in 0..50_000 {
                    if let Some(got) = SHARED.get(key, 3) {
                        assert!(got == a || got == b, "{got:?}");
                    }
                }
            });
        });
    }

    #[test]
    fn a_two_way_probe_of_generation_0_finds_only_zero_words() {
        static ZERO: SeqCache<8, 2> = SeqCache::new();
        let zero_or_none = |k| matches!(ZERO.get_2way(k as usize, k, 0), None | Some([0, 0]));
        assert!(zero_or_none(0) && zero_or_none(0x4000), "empty entries");
        ZERO.put_2way(0x4000, 0x4000, 0, [5, 6]);
        assert!(zero_or_none(0x4000), "nothing is stored under generation 0");
        ZERO.put_2way(0x4000, 0x4000, 3, [5, 6]);
        assert_eq!(ZERO.get_2way(0x4000, 0x4000, 3 + (1 << 32)), Some([5, 6]));
        assert!(zero_or_none(0x4000), "another generation");
        ZERO.clear();
        assert!(zero_or_none(0x4000), "a cleared entry keeps no words");
        assert_eq!(ZERO.get_2way(0x4000, 0x4000, 3), None);
    }

    #[test]
    fn concurrent_writers_never_produce_a_torn_hit_in_either_way() {
        static SHARED: SeqCache<4, 2> = SeqCache::new();
        // Three keys of one set (home 2, modulo 4).
        let keys = [0xabc0u64, 0xabc4, 0xabc8];
        std::thread::scope(|s| {
            for (i, &key) in keys.iter().enumerate() {
                s.spawn(move || {
                    for n in 0..50_000u64 {
                        SHARED.put_2way(2, key, 3, [key ^ n, n + i as u64]);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..50_000 {
                    for (i, &key) in keys.iter().enumerate() {
                        if let Some([x, y]) = SHARED.get_2way(2, key, 3) {
                            assert_eq!(x ^ key, y - i as u64, "{key:x}: {x:x} {y:x}");
                        }
                    }
                }
            });
        });
    }

    /// A signal handler on the thread that is writing an entry reads and
    /// writes that same entry (a profiler's walk interrupting a walk): it
    /// must neither wait nor take a half-written entry, and the entry must
    /// work afterwards. Fails if a read does not recheck the sequence.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_handler_that_interrupts_a_write_of_its_entry_never_waits_nor_sees_it_torn() {
        use core::sync::atomic::AtomicUsize;
        static SIG: SeqCache<2, 4> = SeqCache::new();
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        static TORN: AtomicUsize = AtomicUsize::new(0);
        const KEY: u64 = 0x1234_0000;
        extern "C" fn on_signal(_: i32, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
            RUNS.fetch_add(1, Relaxed);
            if let Some(w) = SIG.get(KEY, 5) {
                if w.iter().any(|&x| x != w[0]) {
                    TORN.fetch_add(1, Relaxed);
                }
            }
            SIG.put(KEY, 5, [0xdead; 4]);
        }
        // SIGUSR2, which only this test sends; as often as it can.
        let torn = crate::sys::signalled_while(
            libc::SIGUSR2,
            on_signal,
            std::time::Duration::ZERO,
            || {
                // A million rounds, and on until the handler has run often:
                // on a busy machine the sender may get little time. Bounded
                // in time, not rounds, so that it waits long enough.
                let give_up = std::time::Instant::now() + std::time::Duration::from_secs(120);
                for i in 0u64.. {
                    SIG.put(KEY, 5, [i; 4]);
                    match SIG.get(KEY, 5) {
                        Some(w) if w.iter().any(|&x| x != w[0]) => return Some(w),
                        _ if i >= 1_000_000 && RUNS.load(Relaxed) >= 10_000 => break,
                        _ if i % 65_536 == 0 && std::time::Instant::now() > give_up => break,
                        _ => {}
                    }
                }
                None
            },
        );
        assert_eq!(torn, None);
        assert!(RUNS.load(Relaxed) >= 10_000, "too few signals landed");
        assert_eq!(TORN.load(Relaxed), 0, "the handler took a torn entry");
        SIG.put(KEY, 5, [7; 4]);
        assert_eq!(SIG.get(KEY, 5), Some([7; 4]));
    }
}
