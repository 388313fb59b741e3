//! A small set of addresses in fixed memory that one thread at a time
//! writes and any thread reads without a lock. On macOS it holds the
//! headers of images whose removal dyld has announced: dyld calls the
//! remove callbacks before it takes an image off the list a refresh reads,
//! so for a moment the list still shows an image that is going away.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};

/// How many addresses the set holds; adding one more forgets the one added
/// [`HEADERS`] insertions before, even where a removal has freed a slot.
pub const HEADERS: usize = 64;

/// See the module docs.
#[derive(Debug)]
pub struct AddressSet {
    slots: [AtomicU64; HEADERS],
    next: AtomicUsize,
}

impl Default for AddressSet {
    fn default() -> Self {
        Self::new()
    }
}

impl AddressSet {
    /// An empty set.
    pub const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)]
        const EMPTY: AtomicU64 = AtomicU64::new(0);
        AddressSet {
            slots: [EMPTY; HEADERS],
            next: AtomicUsize::new(0),
        }
    }

    /// Adds `addr` (not 0) in the slot after the last one written, in
    /// place of the address added [`HEADERS`] insertions before (the
    /// oldest still held, if any), whether or not other slots are free.
    pub fn insert(&self, addr: u64) {
        if addr == 0 || self.contains(addr) {
            return;
        }
        let i = self.next.fetch_add(1, SeqCst) % HEADERS;
        self.slots[i].store(addr, SeqCst);
    }

    /// Removes `addr`.
    pub fn remove(&self, addr: u64) {
        for s in &self.slots {
            let _ = s.compare_exchange(addr, 0, SeqCst, SeqCst);
        }
    }

    /// Whether the set holds `addr`.
    pub fn contains(&self, addr: u64) -> bool {
        addr != 0 && self.slots.iter().any(|s| s.load(SeqCst) == addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_and_go_and_the_oldest_gives_way() {
        let set = AddressSet::new();
        assert!(!set.contains(0x1000));
        set.insert(0x1000);
        set.insert(0x2000);
        set.insert(0x1000);
        assert!(set.contains(0x1000) && set.contains(0x2000));
        set.remove(0x1000);
        assert!(!set.contains(0x1000) && set.contains(0x2000));
        set.insert(0);
        assert!(!set.contains(0));
        // 0x2000 took the second slot; HEADERS more take every slot from
        // the third on, around to the second.
        for k in 0..HEADERS as u64 {
            set.insert(0x10_0000 + k);
        }
        assert!(!set.contains(0x2000), "the oldest gave way");
        assert!((0..HEADERS as u64).all(|k| set.contains(0x10_0000 + k)));
    }
}
