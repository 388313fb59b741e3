//! Which parts of a section's pc range its functions cover, in 256 equal
//! parts. A module whose own code has SFrame but whose statically linked
//! code has none (C built with `-Wa,--gsframe` beside the prebuilt Rust
//! standard library, say) spans both with one range; a pc in a part no
//! function reaches is turned away without a search.

/// A bit per part of `[lo, lo + 256 << shift)`: set where some function
/// covers a byte of the part. Built at parse time; no lookup allocates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Coverage {
    shift: u32,
    bits: [u64; 4],
}

impl Coverage {
    const PARTS: u64 = 256;

    /// Nothing covered yet, for a range `width` bytes wide.
    pub(super) fn new(width: u64) -> Coverage {
        let span_bits = 64 - width.saturating_sub(1).leading_zeros();
        Coverage {
            shift: span_bits.saturating_sub(Self::PARTS.trailing_zeros()),
            bits: [0; 4],
        }
    }

    /// Marks the parts that `[start, end)` reaches, offsets from the
    /// range's start; an empty function reaches none.
    pub(super) fn mark(&mut self, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let first = (start >> self.shift).min(Self::PARTS - 1);
        let last = ((end - 1) >> self.shift).min(Self::PARTS - 1);
        for (w, word) in self.bits.iter_mut().enumerate() {
            let (lo, hi) = (w as u64 * 64, w as u64 * 64 + 63);
            if last < lo || first > hi {
                continue;
            }
            let (a, b) = (first.max(lo) - lo, last.min(hi) - lo);
            *word |= (u64::MAX >> (63 - b)) & (u64::MAX << a);
        }
    }

    /// Whether a function may cover the byte at `offset` from the range's
    /// start (`offset` below the range's width).
    #[inline(always)]
    pub(super) fn may_cover(&self, offset: u64) -> bool {
        let part = (offset >> self.shift).min(Self::PARTS - 1);
        self.bits[(part / 64) as usize] >> (part % 64) & 1 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a byte-by-byte oracle, over widths that give every shift
    /// from 0 to 9 and functions at the parts' edges.
    #[test]
    fn marks_exactly_the_parts_a_function_reaches() {
        for width in [1u64, 7, 255, 256, 257, 1000, 4096, 65536, 100_003] {
            let mut c = Coverage::new(width);
            let part = 1u64 << c.shift;
            assert!(Coverage::PARTS * part >= width && (c.shift == 0 || 128 * part < width));
            let fns = [
                (0, 1),
                (part - 1, part + 1),
                (width / 2, width / 2),
                (width * 3 / 4, width * 3 / 4 + 1),
                (width - 1, width),
            ];
            for &(s, e) in &fns {
                c.mark(s, e);
            }
            for offset in 0..width {
                let p = offset / part;
                let want = fns
                    .iter()
                    .any(|&(s, e)| s < e && s / part <= p && p <= (e - 1) / part);
                assert_eq!(c.may_cover(offset), want, "width {width} offset {offset}");
            }
        }
    }
}
