//! Apple compact unwind (`__unwind_info`) reader.
//!
//! [`UnwindInfo::parse`] validates a section once: the header, the common
//! encodings, the first-level index and its sentinel, the LSDA index, and
//! every second-level page, regular or compressed, with every encoding index
//! resolved. Lookups then binary-search without further checks that could
//! fail. Function offsets are relative to the image's `mach_header`.
//!
//! ```
//! use stackmark::formats::compact_unwind::UnwindInfo;
//! // The smallest valid section: a header, no encodings, only a sentinel.
//! let mut s = Vec::new();
//! for w in [1u32, 28, 0, 28, 0, 28, 1, 0x1000, 0, 40] {
//!     s.extend_from_slice(&w.to_le_bytes());
//! }
//! let info = UnwindInfo::parse(&s).unwrap();
//! assert_eq!(info.entries().count(), 0);
//! assert!(info.lookup(0x800).is_none());
//! ```

use super::cursor::{u16_at, u32_at};

/// Regular second-level page.
const REGULAR: u32 = 2;
/// Compressed second-level page.
const COMPRESSED: u32 = 3;

/// The encoding flag: the function has an LSDA.
pub const UNWIND_HAS_LSDA: u32 = 0x4000_0000;

/// What is wrong with a section. Offsets are from its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The data ends inside a structure.
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// A version other than 1.
    UnsupportedVersion(u32),
    /// The first-level index is empty: not even the sentinel.
    NoSentinel,
    /// First-level entries out of order.
    IndexNotSorted {
        /// The entry out of order.
        index: usize,
    },
    /// A second-level page of a kind other than regular (2) or compressed (3).
    BadPageKind {
        /// Where the page is.
        offset: usize,
        /// Its kind.
        kind: u32,
    },
    /// A compressed entry names an encoding that neither palette has.
    BadEncodingIndex {
        /// Where the page is.
        page: usize,
        /// The index.
        index: u32,
    },
    /// Page entries out of order, or outside their first-level range.
    PageNotSorted {
        /// Where the page is.
        page: usize,
    },
    /// The pages' entries take more bytes than the section holds: pages
    /// shared by several first-level entries, which no linker writes, and
    /// which would let a small section cost a validation read per entry
    /// and first-level entry pair.
    PagesShared {
        /// The page that went past the budget.
        page: usize,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::Truncated { what, offset } => write!(f, "{what} at {offset:#x} is truncated"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported __unwind_info version {v}"),
            Error::NoSentinel => f.write_str("the first-level index has no sentinel entry"),
            Error::IndexNotSorted { index } => {
                write!(f, "first-level entry {index} starts before its predecessor")
            }
            Error::BadPageKind { offset, kind } => {
                write!(f, "second-level page at {offset:#x} has kind {kind}")
            }
            Error::BadEncodingIndex { page, index } => {
                write!(
                    f,
                    "page at {page:#x} uses encoding index {index}, which no palette has"
                )
            }
            Error::PageNotSorted { page } => {
                write!(
                    f,
                    "page at {page:#x} has entries out of order or out of range"
                )
            }
            Error::PagesShared { page } => {
                write!(f, "page at {page:#x} is shared by first-level entries")
            }
        }
    }
}

impl std::error::Error for Error {}

/// One function's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the function's first instruction from the `mach_header`.
    pub func_start: u32,
    /// Offset just past the function (the next entry's start).
    pub func_end: u32,
    /// The 32-bit compact encoding.
    pub encoding: u32,
    /// Offset of the LSDA from the `mach_header`, if the function has one.
    pub lsda: Option<u32>,
}

/// The format of a second-level page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Kind 2: each entry is a 32-bit function offset and a 32-bit encoding.
    Regular,
    /// Kind 3: each entry is a 24-bit offset from the first-level entry's
    /// function and an 8-bit index into the common or the page's encodings.
    Compressed,
}

/// One second-level page, as [`UnwindInfo::pages`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageInfo {
    /// Its format.
    pub kind: PageKind,
    /// The function offset its first-level entry starts at.
    pub first_function: u32,
    /// How many entries it holds.
    pub entries: usize,
    /// How many encodings its own palette holds (0 for a regular page).
    pub page_encodings: usize,
}

/// A validated `__unwind_info` section.
#[derive(Clone, Copy, Debug)]
pub struct UnwindInfo<'a> {
    data: &'a [u8],
    common: usize,
    common_count: u32,
    index: usize,
    /// First-level entries, the sentinel included.
    index_count: usize,
}

fn word(data: &[u8], off: usize, what: &'static str) -> Result<u32, Error> {
    u32_at(data, off).ok_or(Error::Truncated { what, offset: off })
}

fn half(data: &[u8], off: usize, what: &'static str) -> Result<u16, Error> {
    u16_at(data, off).ok_or(Error::Truncated { what, offset: off })
}

/// A second-level page, decoded enough to walk its entries.
#[derive(Clone, Copy, Debug)]
struct Page {
    at: usize,
    compressed: bool,
    entries: usize,
    count: usize,
    encodings: usize,
    encodings_count: u32,
    /// The first-level entry's function offset (base of compressed offsets).
    base: u32,
}

impl<'a> UnwindInfo<'a> {
    /// Validates the whole section.
    pub fn parse(data: &'a [u8]) -> Result<UnwindInfo<'a>, Error> {
        let version = word(data, 0, "header")?;
        if version != 1 {
            return Err(Error::UnsupportedVersion(version));
        }
        let common = word(data, 4, "header")? as usize;
        let common_count = word(data, 8, "header")?;
        let index = word(data, 20, "header")? as usize;
        let index_count = word(data, 24, "header")? as usize;
        // The common encodings and the index must lie in the section.
        if common_count > 0 {
            word(
                data,
                common + 4 * (common_count as usize - 1),
                "common encodings",
            )?;
        }
        if index_count == 0 {
            return Err(Error::NoSentinel);
        }
        word(data, index + 12 * index_count - 4, "first-level index")?;
        let info = UnwindInfo {
            data,
            common,
            common_count,
            index,
            index_count,
        };
        let mut prev = 0;
        for i in 0..index_count {
            let start = info.first_level(i).0;
            if start < prev {
                return Err(Error::IndexNotSorted { index: i });
            }
            prev = start;
        }
        // Bytes of page entries read so far: at most the section, once each.
        let mut entry_bytes = 0usize;
        for i in 0..index_count - 1 {
            let page = info.page(i)?;
            entry_bytes += page.count * if page.compressed { 4 } else { 8 };
            if entry_bytes > data.len() {
                return Err(Error::PagesShared { page: page.at });
            }
            let end = info.first_level(i + 1).0;
            let mut last = page.base;
            for j in 0..page.count {
                let (start, enc_index) = info.raw_entry(&page, j)?;
                if start < last || start > end {
                    return Err(Error::PageNotSorted { page: page.at });
                }
                last = start;
                if page.compressed && enc_index >= info.common_count + page.encodings_count {
                    return Err(Error::BadEncodingIndex {
                        page: page.at,
                        index: enc_index,
                    });
                }
            }
        }
        Ok(info)
    }

    /// `(function offset, page offset, LSDA index offset)` of first-level entry `i`.
    fn first_level(&self, i: usize) -> (u32, usize, usize) {
        let at = self.index + 12 * i;
        let w = |k: usize| u32_at(self.data, at + 4 * k).unwrap_or(0);
        (w(0), w(1) as usize, w(2) as usize)
    }

    fn page(&self, i: usize) -> Result<Page, Error> {
        let (base, at, _) = self.first_level(i);
        let kind = word(self.data, at, "second-level page")?;
        let entries = at + half(self.data, at + 4, "second-level page")? as usize;
        let count = half(self.data, at + 6, "second-level page")? as usize;
        let page = match kind {
            REGULAR => Page {
                at,
                compressed: false,
                entries,
                count,
                encodings: 0,
                encodings_count: 0,
                base,
            },
            COMPRESSED => Page {
                at,
                compressed: true,
                entries,
                count,
                encodings: at + half(self.data, at + 8, "compressed page")? as usize,
                encodings_count: u32::from(half(self.data, at + 10, "compressed page")?),
                base,
            },
            kind => return Err(Error::BadPageKind { offset: at, kind }),
        };
        let size = if page.compressed { 4 } else { 8 };
        if page.count > 0 {
            word(
                self.data,
                page.entries + size * page.count - 4,
                "page entries",
            )?;
        }
        if page.encodings_count > 0 {
            word(
                self.data,
                page.encodings + 4 * page.encodings_count as usize - 4,
                "page encodings",
            )?;
        }
        Ok(page)
    }

    /// `(function offset, encoding or encoding index)` of a page entry.
    fn raw_entry(&self, p: &Page, j: usize) -> Result<(u32, u32), Error> {
        if p.compressed {
            let w = word(self.data, p.entries + 4 * j, "page entries")?;
            Ok((p.base.wrapping_add(w & 0x00ff_ffff), w >> 24))
        } else {
            let at = p.entries + 8 * j;
            Ok((
                word(self.data, at, "page entries")?,
                word(self.data, at + 4, "page entries")?,
            ))
        }
    }

    fn encoding(&self, p: &Page, raw: u32) -> u32 {
        if !p.compressed {
            return raw;
        }
        if raw < self.common_count {
            u32_at(self.data, self.common + 4 * raw as usize).unwrap_or(0)
        } else {
            u32_at(
                self.data,
                p.encodings + 4 * (raw - self.common_count) as usize,
            )
            .unwrap_or(0)
        }
    }

    /// The LSDA offset for `func`: a binary search of the first-level
    /// entry's slice of the LSDA index, which is sorted by function.
    fn lsda(&self, i: usize, func: u32) -> Option<u32> {
        let (_, _, lo) = self.first_level(i);
        let (_, _, hi) = self.first_level(i + 1);
        let func_at = |k: usize| u32_at(self.data, lo + 8 * k);
        let count = hi.checked_sub(lo)? / 8;
        let (mut a, mut b) = (0, count);
        while a < b {
            let mid = (a + b) / 2;
            if func_at(mid)? < func {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        // Past the last entry lies the next page's range: no match there.
        (a < count && func_at(a)? == func)
            .then(|| u32_at(self.data, lo + 8 * a + 4))
            .flatten()
    }

    fn entry(&self, i: usize, p: &Page, j: usize) -> Option<Entry> {
        let (start, raw) = self.raw_entry(p, j).ok()?;
        let end = if j + 1 < p.count {
            self.raw_entry(p, j + 1).ok()?.0
        } else {
            self.first_level(i + 1).0
        };
        let encoding = self.encoding(p, raw);
        let lsda = if encoding & UNWIND_HAS_LSDA != 0 {
            self.lsda(i, start)
        } else {
            None
        };
        Some(Entry {
            func_start: start,
            func_end: end,
            encoding,
            lsda,
        })
    }

    /// The entry covering `func_offset` (an offset from the `mach_header`).
    pub fn lookup(&self, func_offset: u32) -> Option<Entry> {
        // Last first-level entry starting at or below the offset (not the sentinel).
        let (mut lo, mut hi) = (0, self.index_count - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.first_level(mid + 1).0 <= func_offset {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo >= self.index_count - 1 || self.first_level(lo).0 > func_offset {
            return None;
        }
        let page = self.page(lo).ok()?;
        let (mut a, mut b) = (0, page.count);
        while a < b {
            let mid = (a + b) / 2;
            if self.raw_entry(&page, mid).ok()?.0 <= func_offset {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        let e = self.entry(lo, &page, a.checked_sub(1)?)?;
        (func_offset < e.func_end).then_some(e)
    }

    /// Every entry, in order.
    pub fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        (0..self.index_count - 1).flat_map(move |i| {
            let page = self.page(i).ok();
            (0..page.map_or(0, |p| p.count)).filter_map(move |j| self.entry(i, page.as_ref()?, j))
        })
    }

    /// The second-level pages, in order (the sentinel has none).
    pub fn pages(&self) -> impl Iterator<Item = PageInfo> + '_ {
        (0..self.index_count - 1).filter_map(move |i| {
            let p = self.page(i).ok()?;
            Some(PageInfo {
                kind: if p.compressed {
                    PageKind::Compressed
                } else {
                    PageKind::Regular
                },
                first_function: p.base,
                entries: p.count,
                page_encodings: p.encodings_count as usize,
            })
        })
    }

    /// The common encodings palette.
    pub fn common_encodings(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.common_count as usize).filter_map(move |k| u32_at(self.data, self.common + 4 * k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A section with one regular page of one function at 0x1000 (marked
    /// as having an LSDA) and an LSDA index whose range for that page is
    /// empty, but which has an entry for 0x1000 just past the range.
    fn one_page_with_a_stray_lsda() -> Vec<u8> {
        #[rustfmt::skip]
        let words: &[u32] = &[
            // Header: version, common encodings (none), personalities
            // (none), first-level index at 28 with 2 entries.
            1, 28, 0, 28, 0, 28, 2,
            // First level: the page at 68, then the sentinel at 0x1100;
            // both LSDA offsets are 52, so the page's LSDA range is empty.
            0x1000, 68, 52, 0x1100, 0, 52,
            // At 52: an LSDA entry for 0x1000, outside every page's range;
            // then padding to 68.
            0x1000, 0xabc, 0, 0,
            // At 68: a regular page (kind 2), entries at +8, one entry.
            2, 8 | 1 << 16, 0x1000, UNWIND_HAS_LSDA | 0x0100_0000,
        ];
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn an_lsda_entry_past_the_pages_range_is_not_the_functions() {
        let data = one_page_with_a_stray_lsda();
        let info = UnwindInfo::parse(&data).unwrap();
        let e = info.lookup(0x1000).unwrap();
        assert_eq!((e.func_start, e.func_end), (0x1000, 0x1100));
        assert_ne!(e.encoding & UNWIND_HAS_LSDA, 0);
        assert_eq!(e.lsda, None);
    }

    /// `k` first-level entries that all name one compressed page of `n`
    /// entries, every function at offset 0x1000: sorted, in range, and
    /// without a bound read once per first-level entry.
    fn shared_page(k: u32, n: u32) -> Vec<u8> {
        let index = 28u32;
        let common = index + 12 * (k + 1);
        let page = common + 4;
        // Header: version, common encodings (offset, count), personalities
        // (offset, count), index (offset, count).
        let mut w: Vec<u32> = vec![1, common, 1, 28, 0, index, k + 1];
        for _ in 0..k {
            w.extend([0x1000, page, page]);
        }
        w.extend([0x1000, 0, page]);
        w.push(0x0200_0000);
        // A compressed page (kind 3): entries at +12, n of them; no
        // encodings of its own.
        w.extend([3, 12 | n << 16, 12]);
        w.extend(std::iter::repeat_n(0u32, n as usize));
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn first_level_entries_that_share_a_page_are_refused_before_it_is_read_again() {
        // The page's 64 entries take 256 of the section's 336 bytes: read
        // twice, they would take more than it holds.
        assert!(UnwindInfo::parse(&shared_page(1, 64)).is_ok());
        let page = 28 + 12 * 3 + 4;
        assert_eq!(
            UnwindInfo::parse(&shared_page(2, 64)).map(|_| ()),
            Err(Error::PagesShared { page })
        );
        // 8,000 entries sharing a page of 65,535 (350 KB) took seconds to
        // accept.
        assert!(matches!(
            UnwindInfo::parse(&shared_page(8_000, 65_535)),
            Err(Error::PagesShared { .. })
        ));
    }
}
