//! An index of a concatenated section's pieces, sorted by address. rust-lld
//! and mold leave one piece per object (tens to thousands of them), and
//! without an index a lookup searches every piece in turn. With it, a
//! lookup searches only the pieces whose span holds the pc: one, unless
//! pieces interleave. The caller provides the memory, so building it does
//! not allocate.

use super::header::Header;
use super::{extents, unsorted_bit, Abi, Function, SFrame};

/// One piece of a concatenated section in a piece index: its header and
/// the span of its functions. See [`SFrame::with_piece_index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieceEntry {
    header: Header,
    /// The piece's position in the section: where two pieces both describe
    /// a pc, the first one answers, as without an index.
    ordinal: u32,
    in_order: bool,
    /// `[lowest function start, highest function end)`.
    lo: u64,
    hi: u64,
    /// The highest `hi` of this entry and every entry before it.
    reach: u64,
}

impl PieceEntry {
    /// An unused slot, to fill the memory an index is built in.
    pub const EMPTY: PieceEntry = PieceEntry {
        header: Header {
            at: 0,
            version: 0,
            flags: 0,
            abi: Abi::Amd64LittleEndian,
            fixed_fp_offset: 0,
            fixed_ra_offset: 0,
            num_fdes: 0,
            num_fres: 0,
            fdes: 0,
            fres: 0,
            end: 0,
        },
        ordinal: 0,
        in_order: true,
        lo: 0,
        hi: 0,
        reach: 0,
    };
}

/// `[lowest start, highest end)` of the piece's functions; `None` without
/// functions (or for input that validation rejects).
pub(super) fn span(data: &[u8], h: Header, base: u64) -> Option<(u64, u64)> {
    extents(data, h, base).reduce(|(lo, hi), (start, end)| (lo.min(start), hi.max(end)))
}

impl<'a> SFrame<'a> {
    /// How many slots [`Self::with_piece_index`] needs: the number of
    /// pieces of a concatenation, 0 for an ordinary section.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let piece = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `piece`: cfi-sframe-x86_64-3 (GNU as/ld 2.46).
    /// assert_eq!(SFrame::parse(&piece, 0x401000).unwrap().piece_index_len(), 0);
    /// let mut data = piece.to_vec();
    /// data.extend([0; 4]);
    /// data.extend(piece);
    /// assert_eq!(SFrame::parse(&data, 0x401000).unwrap().piece_index_len(), 2);
    /// ```
    pub fn piece_index_len(&self) -> usize {
        if self.pieces > 1 {
            self.pieces as usize
        } else {
            0
        }
    }

    /// How many pieces `data` holds, by walking their headers only: to
    /// size an index's memory before the data is copied and parsed. An
    /// upper bound for a section that [`Self::parse`] accepts.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let piece = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// let mut data = piece.to_vec();
    /// data.extend([0; 4]);
    /// data.extend(piece);
    /// assert_eq!(SFrame::count_pieces(&data), 2);
    /// assert_eq!(SFrame::count_pieces(&[0; 8]), 0);
    /// ```
    pub fn count_pieces(data: &[u8]) -> usize {
        Self::walk_pieces(data).0
    }

    /// How many bytes of `data` its pieces take: from the start to the end
    /// of the last piece whose header follows on from the one before, by
    /// their headers only. GNU ld 2.40 makes `PT_GNU_SFRAME` larger than
    /// the section it merged (by the size of the input it dropped), and
    /// what lies past the section there is not SFrame.
    ///
    /// ```
    /// use stackmark::formats::sframe::SFrame;
    /// # let piece = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `piece`: 52 bytes. Then padding and another piece, then other data.
    /// let mut data = piece.to_vec();
    /// data.extend([0; 4]);
    /// data.extend(piece);
    /// data.extend(b"other section");
    /// assert_eq!(SFrame::pieces_len(&data), 108);
    /// assert_eq!(SFrame::pieces_len(b"no SFrame"), 0);
    /// ```
    pub fn pieces_len(data: &[u8]) -> usize {
        Self::walk_pieces(data).1
    }

    /// The number of pieces whose headers chain from the start, and where
    /// the last one ends.
    fn walk_pieces(data: &[u8]) -> (usize, usize) {
        let (mut count, mut end) = (0, 0);
        let mut at = Some(0);
        while let Some(h) = at.and_then(|a| Header::parse(data, a).ok()) {
            count += 1;
            end = h.end;
            at = super::next_piece(data, h.end);
        }
        (count, end)
    }

    /// This section, looking pcs up through an index of its pieces built
    /// in `slots`: a binary search over the pieces' spans, then a search of
    /// only the pieces that span the pc. Every lookup answers as it would
    /// without the index. An ordinary section, or `slots` shorter than
    /// [`Self::piece_index_len`], gives the section back unindexed.
    /// Sorting the pieces does not allocate.
    ///
    /// ```
    /// use stackmark::formats::sframe::{PieceEntry, SFrame};
    /// # let piece = [0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 8];
    /// // `piece`: cfi-sframe-x86_64-3 (GNU as/ld 2.46) with its function
    /// // grown to 4 bytes; twice, as rust-lld concatenates per-object pieces.
    /// let mut piece = piece;
    /// piece[36] = 4;
    /// let mut data = piece.to_vec();
    /// data.extend([0; 4]);
    /// data.extend(piece);
    /// let plain = SFrame::parse(&data, 0x401000).unwrap();
    /// let mut slots = [PieceEntry::EMPTY; 2];
    /// let indexed = plain.with_piece_index(&mut slots);
    /// assert!(indexed.is_indexed());
    /// for pc in 0x400ff0..0x401050 {
    ///     assert_eq!(indexed.find_row(pc), plain.find_row(pc));
    /// }
    /// assert!(indexed.find_row(0x401039).is_some());
    /// ```
    pub fn with_piece_index(self, slots: &'a mut [PieceEntry]) -> SFrame<'a> {
        let count = self.piece_index_len();
        if count == 0 || slots.len() < count {
            return self;
        }
        let mut n = 0;
        for (k, h) in self.headers().enumerate() {
            let Some((lo, hi)) = span(self.data, h, self.base) else {
                continue;
            };
            slots[n] = PieceEntry {
                header: h,
                ordinal: k as u32,
                // The same search per piece as without the index.
                in_order: self.unsorted & unsorted_bit(k as u32) == 0,
                lo,
                hi,
                reach: 0,
            };
            n += 1;
        }
        let (index, _) = slots.split_at_mut(n);
        index.sort_unstable_by_key(|e| (e.lo, e.ordinal));
        let mut reach = 0;
        for e in index.iter_mut() {
            reach = reach.max(e.hi);
            e.reach = reach;
        }
        SFrame {
            index: Some(index),
            ..self
        }
    }

    /// Whether lookups go through a piece index.
    pub fn is_indexed(&self) -> bool {
        self.index.is_some()
    }

    /// [`Self::find_function`] through the piece index: the pieces whose
    /// span holds `pc` are those at or before the last one starting at or
    /// below it, back to the first whose `reach` does not pass it.
    pub(super) fn find_indexed(&self, index: &[PieceEntry], pc: u64) -> Option<Function<'a>> {
        let mut k = index.partition_point(|e| e.lo <= pc);
        let mut best: Option<(u32, Function<'a>)> = None;
        while k > 0 {
            k -= 1;
            let e = &index[k];
            if pc >= e.reach {
                break;
            }
            if pc < e.hi && best.is_none_or(|(first, _)| e.ordinal < first) {
                if let Some(fde) = self.find_in_piece(&e.header, e.in_order, (0, e.header.num_fdes), pc) {
                    best = Some((e.ordinal, Function::new(self.data, e.header, fde)));
                }
            }
        }
        best.map(|(_, f)| f)
    }
}
