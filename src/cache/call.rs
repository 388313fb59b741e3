//! Whether a call instruction precedes an address: the answers a scan and
//! the walk's end checks ask of return addresses, remembered per address
//! in a key space of their own. The protocol: [`super`].

use super::seq::SeqCache;

/// Number of entries (a power of two): 1024 × 24 bytes = 24 KiB.
pub const ENTRIES: usize = 1024;

static CACHE: SeqCache<ENTRIES, 1> = SeqCache::new();

const YES: u64 = 1;
const NO: u64 = 2;

/// The remembered answer for `ra` in cache generation `generation`, if any.
pub fn get(ra: u64, generation: u64) -> Option<bool> {
    match CACHE.get(ra, generation)? {
        [YES] => Some(true),
        [NO] => Some(false),
        _ => None,
    }
}

/// Remembers whether a call precedes `ra`, in cache generation `generation`.
pub(crate) fn put(ra: u64, generation: u64, follows_call: bool) {
    CACHE.put(ra, generation, [if follows_call { YES } else { NO }]);
}

/// Empties the cache. Safe at any time: a walk racing it only misses.
pub fn clear() {
    CACHE.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_per_address_and_generation() {
        put(0x7f00_0000_1000, 3, true);
        put(0x7f00_0000_2000, 3, false);
        assert_eq!(get(0x7f00_0000_1000, 3), Some(true));
        assert_eq!(get(0x7f00_0000_2000, 3), Some(false));
        assert_eq!(get(0x7f00_0000_1000, 4), None, "another table's");
        assert_eq!(get(0x7f00_0000_3000, 3), None);
    }
}
