//! Registered threads' stack bounds in fixed memory, keyed by a value unique
//! to each live thread (on Linux its `pthread_self`).
//!
//! Not thread-local storage: in a library loaded with `dlopen`, glibc gives
//! a thread its block of that library's thread-local storage on first
//! access, with `malloc`, and a walk in a signal handler must not allocate.
//!
//! Each key lives in one of the [`WINDOW`] slots from its home slot, and
//! only the thread that owns a key writes its slot, so a lookup (from that
//! thread, perhaps in a signal handler that interrupted the write) needs no
//! lock: a slot being written has `hi == 0` and reads as unregistered.

use core::sync::atomic::{AtomicU64, Ordering::*};

/// Slots in a table: at most this many threads registered at once.
pub const SLOTS: usize = 4096;
/// How many slots from its home slot a key may occupy. A thread whose
/// slots are all taken stays unregistered (its walks probe its stack).
pub const WINDOW: usize = 8;

#[derive(Debug)]
struct Slot {
    key: AtomicU64,
    lo: AtomicU64,
    hi: AtomicU64,
}

/// A fixed table of threads' stack bounds; see the module docs.
#[derive(Debug)]
pub struct ThreadTable {
    slots: [Slot; SLOTS],
}

impl Default for ThreadTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadTable {
    /// An empty table.
    pub const fn new() -> Self {
        ThreadTable {
            slots: [const {
                Slot {
                    key: AtomicU64::new(0),
                    lo: AtomicU64::new(0),
                    hi: AtomicU64::new(0),
                }
            }; SLOTS],
        }
    }

    /// The slots `key` may occupy.
    #[inline(always)]
    fn window(&self, key: u64) -> impl Iterator<Item = &Slot> {
        // Thread pointers differ mostly in their high bits (one per stack
        // mapping): a multiplicative hash takes the product's top bits.
        let home =
            (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize;
        (0..WINDOW).map(move |i| &self.slots[(home + i) % SLOTS])
    }

    /// Records `key`'s bounds `lo..hi`; returns whether there was room.
    /// Only the thread that `key` names may call it.
    pub fn insert(&self, key: u64, lo: u64, hi: u64) -> bool {
        if key == 0 {
            return false;
        }
        let slot = self.window(key).find(|s| s.key.load(Acquire) == key);
        let slot = slot.or_else(|| {
            self.window(key)
                .find(|s| s.key.compare_exchange(0, key, AcqRel, Relaxed).is_ok())
        });
        let Some(s) = slot else {
            return false;
        };
        // Invalid while written, for a signal handler that interrupts this.
        s.hi.store(0, SeqCst);
        s.lo.store(lo, SeqCst);
        s.hi.store(hi, SeqCst);
        true
    }

    /// `key`'s bounds, if recorded and not empty. Async-signal-safe.
    #[inline(always)]
    pub fn get(&self, key: u64) -> Option<(u64, u64)> {
        let s = self.window(key).find(|s| s.key.load(Relaxed) == key)?;
        let (lo, hi) = (s.lo.load(Relaxed), s.hi.load(Relaxed));
        (key != 0 && lo < hi).then_some((lo, hi))
    }

    /// Forgets `key`'s bounds (its thread is exiting).
    pub fn remove(&self, key: u64) {
        if let Some(s) = self.window(key).find(|s| s.key.load(Acquire) == key) {
            // Empty before free: whoever claims the slot next sees hi == 0.
            s.hi.store(0, SeqCst);
            s.key.store(0, SeqCst);
        }
    }

    /// Forgets every thread but `key`'s: in a child after `fork`, where
    /// the others no longer exist and new threads may reuse their keys.
    pub fn retain_only(&self, key: u64) {
        for s in &self.slots {
            if s.key.load(Acquire) != key {
                s.hi.store(0, SeqCst);
                s.key.store(0, SeqCst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_back_its_own_bounds_until_removed() {
        let t = Box::new(ThreadTable::new());
        assert_eq!(t.get(0x7f00_0000_1000), None);
        assert!(t.insert(0x7f00_0000_1000, 0x10, 0x20));
        assert!(t.insert(0x7f00_0080_1000, 0x30, 0x40));
        assert_eq!(t.get(0x7f00_0000_1000), Some((0x10, 0x20)));
        assert_eq!(t.get(0x7f00_0080_1000), Some((0x30, 0x40)));
        // Registering again replaces the bounds, in the same slot.
        assert!(t.insert(0x7f00_0000_1000, 0x50, 0x60));
        assert_eq!(t.get(0x7f00_0000_1000), Some((0x50, 0x60)));
        t.remove(0x7f00_0000_1000);
        assert_eq!(t.get(0x7f00_0000_1000), None);
        assert_eq!(t.get(0x7f00_0080_1000), Some((0x30, 0x40)));
        // Key 0 (no thread) is never recorded; empty bounds read as none.
        assert!(!t.insert(0, 1, 2));
        assert_eq!(t.get(0), None);
        assert!(t.insert(0x7f00_0100_1000, 0x70, 0x70));
        assert_eq!(t.get(0x7f00_0100_1000), None);
    }

    #[test]
    fn keys_sharing_a_home_slot_fill_its_window_and_then_are_refused() {
        let t = Box::new(ThreadTable::new());
        // WINDOW + 1 keys with the same home slot.
        let home = |k: u64| t.window(k).next().map(|s| s as *const Slot);
        let first = 0x7f00_0000_1000u64;
        let same: Vec<u64> = (0..)
            .map(|i| first + i * 0x1000)
            .filter(|&k| home(k) == home(first))
            .take(WINDOW + 1)
            .collect();
        for (i, &k) in same[..WINDOW].iter().enumerate() {
            assert!(t.insert(k, i as u64, i as u64 + 1), "key {i}");
        }
        assert!(!t.insert(same[WINDOW], 1, 2), "the window is full");
        assert_eq!(t.get(same[WINDOW]), None);
        for (i, &k) in same[..WINDOW].iter().enumerate() {
            assert_eq!(t.get(k), Some((i as u64, i as u64 + 1)));
        }
        // A freed slot is taken again, and the others keep their bounds.
        t.remove(same[3]);
        assert!(t.insert(same[WINDOW], 100, 200));
        assert_eq!(t.get(same[WINDOW]), Some((100, 200)));
        assert_eq!(t.get(same[3]), None);
        assert_eq!(t.get(same[4]), Some((4, 5)));
    }

    #[test]
    fn after_fork_only_the_surviving_thread_stays_registered() {
        let t = Box::new(ThreadTable::new());
        for k in 1..=100u64 {
            assert!(t.insert(k << 23, k, k + 1));
        }
        t.retain_only(7 << 23);
        assert_eq!(t.get(7 << 23), Some((7, 8)));
        assert!((1..=100u64)
            .filter(|&k| k != 7)
            .all(|k| t.get(k << 23).is_none()));
    }
}
