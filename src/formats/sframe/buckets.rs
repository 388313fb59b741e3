//! An index of an ordinary section's FDEs by address, for the binary search
//! that finds a pc's function. The span of the section's functions is cut
//! into buckets of `2^shift` bytes; each bucket keeps how many FDEs start
//! at or below its first byte. A pc's function is then searched among the
//! FDEs that start in its bucket (one to three, with buckets about the size
//! of a function) instead of among all of them (a dozen probes or more in a
//! large program, each one a bounds-checked read of an FDE). The caller
//! provides the memory, so building it does not allocate.

use super::fde::Fde;
use super::header::Header;
use super::index::span;
use super::SFrame;

/// The smallest bucket: 16 bytes, the alignment compilers give functions.
const MIN_SHIFT: u32 = 4;
/// The largest bucket an index is sized for: 256 bytes, so that a section
/// describing a few functions among much code without tables still finds
/// them in a probe or two.
const MAX_SHIFT: u32 = 8;
/// The most slots an index is sized for (4 MiB); a larger span gets larger
/// buckets.
const MAX_SLOTS: usize = 1 << 20;

/// Slots for buckets about the size of the average function over a span
/// of `span` bytes with `fdes` functions, no larger than `MAX_SHIFT` gives.
fn slots_for(span: u64, fdes: u32) -> usize {
    if fdes == 0 || span == 0 {
        return 0;
    }
    let per_fde = span / u64::from(fdes);
    let shift = per_fde.checked_ilog2().unwrap_or(0).clamp(MIN_SHIFT, MAX_SHIFT);
    usize::try_from(span.div_ceil(1 << shift) + 1).map_or(MAX_SLOTS, |n| n.min(MAX_SLOTS))
}

/// A built FDE index: the counts, and the bucket size as a power of two.
#[derive(Clone, Copy, Debug)]
pub(super) struct Buckets<'a> {
    counts: &'a [u32],
    shift: u32,
}

impl Buckets<'_> {
    /// The range of FDE counts `[lo, hi]` within which the number of FDEs
    /// starting at or below `pc` lies, for `pc` in `[range_lo, range_hi)`.
    #[inline]
    pub(super) fn bounds(&self, range_lo: u64, pc: u64) -> Option<(u32, u32)> {
        let b = usize::try_from((pc - range_lo) >> self.shift).ok()?;
        Some((*self.counts.get(b)?, *self.counts.get(b + 1)?))
    }
}

/// The shift that gives at most `slots - 1` buckets over `span` bytes, and
/// no fewer bytes a bucket than `MIN_SHIFT` gives.
fn shift_for(span: u64, slots: usize) -> Option<u32> {
    let buckets = u64::try_from(slots.checked_sub(1)?).ok()?.max(1);
    let mut shift = MIN_SHIFT;
    while shift < 63 && span.div_ceil(1 << shift) > buckets {
        shift += 1;
    }
    Some(shift)
}

impl<'a> SFrame<'a> {
    /// How many slots [`Self::with_fde_index`] needs, for buckets about the
    /// size of the average function and no larger than 256 bytes (at most
    /// 2^20 slots): 0 for a section it does not index, a concatenation of
    /// pieces (which the piece index serves) or FDEs out of address order.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let data = [0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0];
    /// // `data`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.46): two
    /// // functions over 32 bytes, so two 16-byte buckets and their end.
    /// assert_eq!(SFrame::parse(&data, 0x400138).unwrap().fde_index_len(), 3);
    /// // The same from the bytes alone, before they are validated.
    /// assert_eq!(SFrame::fde_index_len_of(&data, 0x400138), 3);
    /// ```
    pub fn fde_index_len(&self) -> usize {
        match self.range {
            Some((lo, hi)) if self.pieces == 1 && self.unsorted == 0 => {
                slots_for(hi - lo, self.first.num_fdes)
            }
            _ => 0,
        }
    }

    /// [`Self::fde_index_len`] for the section `data` at `section_addr`,
    /// from its header and the span of its FDEs: to size the memory for an
    /// index before the section is validated. For a valid section, the same.
    pub fn fde_index_len_of(data: &[u8], section_addr: u64) -> usize {
        let Ok(h) = Header::parse(data, 0) else {
            return 0;
        };
        if super::next_piece(data, h.end).is_some() {
            return 0;
        }
        span(data, h, section_addr).map_or(0, |(lo, hi)| slots_for(hi - lo, h.num_fdes))
    }

    /// This section, finding a pc's function through an index of its FDEs
    /// by address built in `slots` (its buckets as small as `slots` allows,
    /// [`Self::fde_index_len`] for about a function each). Every lookup
    /// answers as it would without the index. A section that length is 0
    /// for, or fewer than 2 slots, gives the section back unindexed.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let data = [0xe2, 0xde, 3, 5, 2, 0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0x5c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 12, 0, 0, 0, 0, 0, 0, 0, 0x58, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0, 3, 0, 0x20, 0, 0, 0, 3, 0, 4, 0x83, 0, 8, 0x87, 16, 0xf8, 0xf0];
    /// // `data`: cfi-sframe-aarch64-pac-ab-key-1 (GNU as/ld 2.46).
    /// let plain = SFrame::parse(&data, 0x400138).unwrap();
    /// let mut slots = vec![0; plain.fde_index_len()];
    /// let indexed = plain.with_fde_index(&mut slots);
    /// assert!(indexed.is_fde_indexed());
    /// for pc in 0x4000a0..0x4000e0 {
    ///     assert_eq!(indexed.find_row(pc), plain.find_row(pc));
    /// }
    /// ```
    pub fn with_fde_index(self, slots: &'a mut [u32]) -> SFrame<'a> {
        let Some((lo, hi)) = self.range.filter(|_| self.fde_index_len() != 0) else {
            return self;
        };
        let Some(shift) = shift_for(hi - lo, slots.len()) else {
            return self;
        };
        let buckets = (hi - lo).div_ceil(1 << shift) as usize;
        let Some(counts) = slots.get_mut(..buckets + 1) else {
            return self;
        };
        let h = &self.first;
        // Sorted starts (validation saw them in order), against bucket
        // starts in order: one pass over each.
        let mut started = 0u32;
        for (b, count) in counts.iter_mut().enumerate() {
            let edge = lo + ((b as u64) << shift);
            while started < h.num_fdes {
                match Fde::start_of(self.data, h, started, self.base) {
                    Some((s, _)) if s <= edge => started += 1,
                    Some(_) => break,
                    None => return self,
                }
            }
            *count = started;
        }
        SFrame {
            buckets: Some(Buckets { counts, shift }),
            ..self
        }
    }

    /// Whether lookups go through an FDE index.
    pub fn is_fde_indexed(&self) -> bool {
        self.buckets.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::{shift_for, slots_for};

    #[test]
    fn buckets_are_as_small_as_the_slots_allow_and_no_smaller_than_16_bytes() {
        // 1 MiB over 4,097 slots: 4,096 buckets of 256 bytes.
        assert_eq!(shift_for(1 << 20, 4097), Some(8));
        assert_eq!(shift_for(1 << 20, 4096), Some(9));
        assert_eq!(shift_for(64, 1000), Some(4));
        assert_eq!(shift_for(64, 0), None);
    }

    #[test]
    fn slots_follow_the_average_function_up_to_256_byte_buckets() {
        // 1,000 functions of 100 bytes: 64-byte buckets.
        assert_eq!(slots_for(100_000, 1000), 100_000usize.div_ceil(64) + 1);
        // 10 functions among 1 MB of other code: 256-byte buckets.
        assert_eq!(slots_for(1 << 20, 10), 4097);
        // 16-byte buckets at the smallest, and a cap.
        assert_eq!(slots_for(64, 64), 5);
        assert_eq!(slots_for(1 << 40, 1), 1 << 20);
        assert_eq!(slots_for(0, 0), 0);
    }
}
