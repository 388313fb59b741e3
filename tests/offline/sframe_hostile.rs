//! Hostile input: every way a section can be truncated, misordered or point
//! out of bounds gives its own typed error, and no mutation of a real
//! section makes parsing or lookups panic. The sections start as real GNU
//! as/ld output (`tests/data/sframe/testcases/`) and are broken byte by byte.

use crate::common;
use crate::fuzz_support;
use crate::sframe_support;

use common::Rng;
use fuzz_support::first_covering;

use sframe_support::Case;
use stackmark::formats::sframe::{Error, Header, PieceEntry, SFrame};

fn case(name: &str) -> (Vec<u8>, u64) {
    let c = Case::load(name);
    (c.content, c.section_base)
}

/// Parses a copy of `name` changed by `edit`, which gets the bytes and the
/// original section (for offsets).
fn mutated(name: &str, edit: impl FnOnce(&mut Vec<u8>, &SFrame<'_>)) -> Result<(), Error> {
    let (orig, base) = case(name);
    let sframe = SFrame::parse(&orig, base).expect("the unmodified section parses");
    let mut data = orig.clone();
    edit(&mut data, &sframe);
    SFrame::parse(&data, base).map(|_| ())
}

fn put_u32(d: &mut [u8], at: usize, v: u32) {
    d[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn add_u32(d: &mut [u8], at: usize, delta: u32) {
    let v = u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
    put_u32(d, at, v + delta);
}

// Header fields.
const VERSION: usize = 2;
const FLAGS: usize = 3;
const ABI: usize = 4;
const FIXED_RA: usize = 6;
const AUXHDR_LEN: usize = 7;
const NUM_FDES: usize = 8;
const NUM_FRES: usize = 12;
const FRE_LEN: usize = 16;
const FDEOFF: usize = 20;

#[test]
fn every_truncation_of_a_section_is_an_error() {
    for name in ["test-x86_64-2.40", "test-x86_64-2.45", "test-aarch64-2.46"] {
        let (data, base) = case(name);
        for len in 0..data.len() {
            let err = SFrame::parse(&data[..len], base).unwrap_err();
            let expected = if len < 28 {
                Error::Truncated {
                    what: "header",
                    offset: 0,
                }
            } else {
                Error::OutOfBounds {
                    what: "FRE sub-section",
                    offset: 0,
                }
            };
            assert_eq!(err, expected, "{name} cut to {len} bytes");
        }
    }
}

#[test]
fn a_header_without_magic_is_rejected() {
    let e = mutated("test-x86_64-2.46", |d, _| d[0] = 0);
    assert_eq!(e, Err(Error::BadMagic { offset: 0 }));
    // A big-endian section (magic bytes swapped) does not read as one either.
    let e = mutated("test-x86_64-2.46", |d, _| d.swap(0, 1));
    assert_eq!(e, Err(Error::BadMagic { offset: 0 }));
}

#[test]
fn versions_other_than_1_to_3_are_rejected() {
    for v in [0, 4, 0xff] {
        let e = mutated("test-x86_64-2.46", |d, _| d[VERSION] = v);
        assert_eq!(
            e,
            Err(Error::UnsupportedVersion {
                version: v,
                offset: 0
            })
        );
    }
}

#[test]
fn big_endian_and_unknown_abis_are_rejected() {
    for abi in [0, 1, 4, 5, 0xff] {
        let e = mutated("test-aarch64-2.46", |d, _| d[ABI] = abi);
        assert_eq!(e, Err(Error::UnsupportedAbi { abi, offset: 0 }));
    }
}

#[test]
fn flags_the_version_does_not_define_are_rejected() {
    // Version 3 dropped SFRAME_F_FRAME_POINTER; version 1 predates PCREL.
    let e = mutated("test-x86_64-2.46", |d, _| d[FLAGS] |= 0x2);
    assert_eq!(
        e,
        Err(Error::UnknownFlags {
            flags: 0x7,
            offset: 0
        })
    );
    let e = mutated("test-x86_64-2.40", |d, _| d[FLAGS] |= 0x4);
    assert_eq!(
        e,
        Err(Error::UnknownFlags {
            flags: 0x5,
            offset: 0
        })
    );
    let e = mutated("test-x86_64-2.45", |d, _| d[FLAGS] |= 0x80);
    assert_eq!(
        e,
        Err(Error::UnknownFlags {
            flags: 0x85,
            offset: 0
        })
    );
    // Version 2 knows all three.
    assert_eq!(mutated("test-x86_64-2.45", |d, _| d[FLAGS] |= 0x2), Ok(()));
}

#[test]
fn sub_sections_outside_the_section_are_rejected() {
    let oob = |what| Err(Error::OutOfBounds { what, offset: 0 });
    let name = "test-x86_64-2.46";
    assert_eq!(
        mutated(name, |d, _| d[AUXHDR_LEN] = 0xff),
        oob("auxiliary header")
    );
    assert_eq!(
        mutated(name, |d, _| add_u32(d, FRE_LEN, 1)),
        oob("FRE sub-section")
    );
    assert_eq!(
        mutated(name, |d, _| put_u32(d, FRE_LEN, u32::MAX)),
        oob("FRE sub-section")
    );
    // FDEs that run into the FRE sub-section, or past everything.
    assert_eq!(
        mutated(name, |d, _| put_u32(d, NUM_FDES, 7)),
        oob("FDE sub-section")
    );
    assert_eq!(
        mutated(name, |d, _| put_u32(d, FDEOFF, 8)),
        oob("FDE sub-section")
    );
    assert_eq!(
        mutated(name, |d, _| put_u32(d, NUM_FDES, u32::MAX)),
        oob("FDE sub-section")
    );
}

#[test]
fn an_fde_whose_rows_lie_outside_the_section_is_rejected() {
    for name in ["test-x86_64-2.40", "test-x86_64-2.45", "test-x86_64-2.46"] {
        let e = mutated(name, |d, s| {
            let fde = s.functions().nth(1).unwrap().fde;
            // sfde_func_start_fre_off: past the FRE sub-section.
            let field = if s.version() == 3 { 12 } else { 8 };
            put_u32(d, fde.at + field, 0x1000);
        });
        let (_, base) = case(name);
        let (orig, _) = case(name);
        let fde_at = SFrame::parse(&orig, base)
            .unwrap()
            .functions()
            .nth(1)
            .unwrap()
            .fde
            .at;
        let expected = if name.ends_with("2.46") {
            // Version 3 finds its attribute there first.
            Error::Truncated {
                what: "FDE attribute",
                offset: 0x1000 + 28 + 96,
            }
        } else {
            Error::OutOfBounds {
                what: "FREs of the FDE",
                offset: fde_at,
            }
        };
        assert_eq!(e, Err(expected), "{name}");
    }
    // More FREs than the sub-section holds: the walk runs off its end.
    let e = mutated("test-x86_64-2.45", |d, s| {
        // The FDE whose rows come last in the FRE sub-section.
        let last = s.functions().map(|f| f.fde).max_by_key(|f| f.fres).unwrap();
        put_u32(d, last.at + 12, 3);
        add_u32(d, NUM_FRES, 2);
    });
    assert!(
        matches!(
            e,
            Err(Error::Truncated { what: "FRE", .. }) | Err(Error::OutOfBounds { what: "FRE", .. })
        ),
        "{e:?}"
    );
}

#[test]
fn a_function_outside_the_address_space_is_rejected() {
    let e = mutated("test-x86_64-2.46", |d, s| {
        let at = s.functions().next().unwrap().fde.at;
        d[at..at + 8].copy_from_slice(&i64::MIN.to_le_bytes());
    });
    assert_eq!(e, Err(Error::AddressOverflow { offset: 28 }));
    // Below address 0.
    let e = mutated("test-x86_64-2.42", |d, _| put_u32(d, 28, 0x8000_0000));
    assert_eq!(e, Err(Error::AddressOverflow { offset: 28 }));
}

/// `test-x86_64-2.42`: version 2, section-relative start addresses, five
/// sorted FDEs of 20 bytes. Swaps FDEs 1 and 2.
fn swap_fdes(d: &mut [u8]) {
    let (a, b) = (28 + 20, 28 + 40);
    for k in 0..20 {
        d.swap(a + k, b + k);
    }
}

#[test]
fn misordered_fdes_are_rejected_when_the_header_says_sorted() {
    let e = mutated("test-x86_64-2.42", |d, _| swap_fdes(d));
    assert_eq!(e, Err(Error::FdesNotSorted { piece: 0, index: 2 }));
}

#[test]
fn an_unsorted_fde_table_is_searched_and_finds_the_same_rows() {
    let (orig, base) = case("test-x86_64-2.42");
    let mut data = orig.clone();
    swap_fdes(&mut data);
    // Unsorted, the piece reads as an assembler's: each start counts from
    // its own field (see `Header::field_relative`).
    data[FLAGS] &= !0x1;
    for at in (0..5).map(|i| 28 + 20 * i) {
        let rel = i32::from_le_bytes(data[at..at + 4].try_into().unwrap());
        put_u32(&mut data, at, (rel - at as i32) as u32);
    }
    let sorted = SFrame::parse(&orig, base).unwrap();
    let unsorted = SFrame::parse(&data, base).unwrap();
    assert_eq!(unsorted.pc_range(), sorted.pc_range());
    let (lo, hi) = sorted.pc_range().unwrap();
    let mut found = 0;
    for pc in lo - 4..hi + 4 {
        assert_eq!(unsorted.find_row(pc), sorted.find_row(pc), "{pc:#x}");
        found += usize::from(sorted.find_row(pc).is_some());
    }
    assert!(found > 90);
}

#[test]
fn undefined_fre_types_fde_types_and_word_sizes_are_rejected() {
    let e = mutated("test-x86_64-2.45", |d, s| {
        let at = s.functions().nth(2).unwrap().fde.at;
        d[at + 16] = (d[at + 16] & !0xf) | 3;
    });
    let at = 28 + 2 * 20;
    assert_eq!(
        e,
        Err(Error::BadFreType {
            offset: at,
            fre_type: 3
        })
    );
    // Version 3 keeps the FDE type in info2: only 0 and 1 are defined.
    let e = mutated("test-x86_64-2.46", |d, s| {
        let fres = s.functions().nth(2).unwrap().fde.fres;
        d[fres - 2] = 2;
    });
    assert_eq!(
        e,
        Err(Error::BadFdeType {
            offset: 28 + 32,
            fde_type: 2
        })
    );
    let e = mutated("test-x86_64-2.46", |d, s| {
        let fre = s.functions().nth(2).unwrap().fres().nth(1).unwrap();
        d[fre.at + 1] |= 0x60;
    });
    assert!(matches!(e, Err(Error::BadWordSize { .. })), "{e:?}");
}

#[test]
fn a_pcmask_fde_without_a_repetition_size_is_rejected() {
    // test-x86_64-2.45 FDE 1: the .plt.got entries, repeating every 8 bytes.
    let e = mutated("test-x86_64-2.45", |d, s| {
        let fde = s.functions().nth(1).unwrap().fde;
        assert!(fde.pc_mask);
        d[fde.at + 17] = 0;
    });
    assert_eq!(e, Err(Error::ZeroRepSize { offset: 28 + 20 }));
    let e = mutated("test-x86_64-2.46", |d, s| {
        let fde = s.functions().nth(1).unwrap().fde;
        d[fde.fres - 1] = 0;
    });
    assert_eq!(e, Err(Error::ZeroRepSize { offset: 28 + 16 }));
}

#[test]
fn misordered_fres_and_fres_past_their_function_are_rejected() {
    // test-x86_64-2.46 function 2 (68 bytes): rows at 0, 1, 5, 0x42, 0x43.
    let fre_at = |s: &SFrame<'_>, i| s.functions().nth(2).unwrap().fres().nth(i).unwrap().at;
    let (orig, base) = case("test-x86_64-2.46");
    let third = fre_at(&SFrame::parse(&orig, base).unwrap(), 2);
    let e = mutated("test-x86_64-2.46", |d, s| d[fre_at(s, 2)] = 0);
    assert_eq!(e, Err(Error::FreOutOfOrder { offset: third }));
    let last = fre_at(&SFrame::parse(&orig, base).unwrap(), 4);
    let e = mutated("test-x86_64-2.46", |d, s| d[fre_at(s, 4)] = 69);
    assert_eq!(e, Err(Error::FreOutOfOrder { offset: last }));
    // A row at the very end of the function never applies, but is legal.
    assert_eq!(
        mutated("test-x86_64-2.46", |d, s| d[fre_at(s, 4)] = 68),
        Ok(())
    );
}

#[test]
fn data_words_that_make_no_rule_are_rejected() {
    // AArch64 rows with three words (CFA, RA, FP) read as AMD64, whose RA
    // offset is fixed: one word too many.
    let e = mutated("cfi-sframe-aarch64-pac-ab-key-1-2.46", |d, _| {
        d[ABI] = 3;
        d[FIXED_RA] = 0xf8;
    });
    assert!(matches!(e, Err(Error::BadFreData { .. })), "{e:?}");

    // FLEX (cfi-sframe-x86_64-esc-expr-1): rows of CFA, RA padding and FP.
    let flex = "cfi-sframe-x86_64-esc-expr-1-2.46";
    let fre_at = |s: &SFrame<'_>, i| s.functions().next().unwrap().fres().nth(i).unwrap().at;
    // A CFA control word that names no register.
    let e = mutated(flex, |d, s| d[fre_at(s, 1) + 2] = 0x50);
    assert!(matches!(e, Err(Error::BadFreData { .. })), "{e:?}");
    // An FP rule "CFA + offset" that loads nothing.
    let e = mutated(flex, |d, s| d[fre_at(s, 2) + 5] = 0x04);
    assert!(matches!(e, Err(Error::BadFreData { .. })), "{e:?}");
    // Its FP offset word dropped (five words become four): an FP control
    // word without its offset.
    let (orig, base) = case(flex);
    let third = fre_at(&SFrame::parse(&orig, base).unwrap(), 2);
    let e = mutated(flex, |d, s| {
        let at = fre_at(s, 2);
        d[at + 1] = (d[at + 1] & !0x1e) | (4 << 1);
    });
    assert_eq!(e, Err(Error::BadFreData { offset: third }));
    // The CFA pair grows a third word (the next row's start byte, 9): an RA
    // control word without its offset.
    let e = mutated(flex, |d, s| {
        let at = fre_at(s, 0);
        d[at + 1] = (d[at + 1] & !0x1e) | (3 << 1);
    });
    assert_eq!(
        e,
        Err(Error::BadFreData {
            offset: 28 + 16 + 5
        })
    );
}

#[test]
fn a_header_fre_count_that_disagrees_with_the_fdes_is_rejected() {
    let e = mutated("test-aarch64-2.46", |d, _| put_u32(d, NUM_FRES, 9));
    assert_eq!(
        e,
        Err(Error::FreCountMismatch {
            piece: 0,
            header: 9,
            fdes: 8
        })
    );
}

/// `a`, zero padding to an 8-byte boundary, then `b`.
fn concat(a: &[u8], b: &[u8]) -> (Vec<u8>, usize) {
    let mut d = a.to_vec();
    d.resize(a.len().div_ceil(8) * 8, 0);
    let at = d.len();
    d.extend_from_slice(b);
    (d, at)
}

#[test]
fn concatenated_pieces_must_share_an_abi() {
    let (x86, base) = case("test-x86_64-2.46");
    let (arm, _) = case("test-aarch64-2.46");
    let (d, at) = concat(&x86, &arm);
    assert_eq!(
        SFrame::parse(&d, base).unwrap_err(),
        Error::MixedAbi { piece: at }
    );
}

/// The starts of each function of `s`, in table order.
fn starts(s: &SFrame<'_>) -> Vec<u64> {
    s.functions().map(|f| f.fde.start).collect()
}

#[test]
fn each_piece_of_a_concatenation_counts_starts_from_its_own_base() {
    // GNU ld's outputs: version 2 without PCREL (binutils 2.41 to 2.44) and
    // version 1, both sorted, so their starts count from their headers;
    // and version 2 with PCREL (2.46), from each field.
    let (x86, base) = case("test-x86_64-2.46");
    let (v2, base2) = case("test-x86_64-2.42");
    let (v1, base1) = case("test-x86_64-2.40");
    for (piece, b) in [(&x86, base), (&v2, base2), (&v1, base1)] {
        let alone = starts(&SFrame::parse(piece, b).unwrap());
        // Moved `at` bytes on, behind another piece, a piece describes
        // functions `at` bytes on, whichever its base.
        let (d, at) = concat(&x86, piece);
        let both = SFrame::parse(&d, b).unwrap();
        assert_eq!(both.piece_count(), 2);
        let second = starts(&both.pieces().nth(1).unwrap());
        let moved: Vec<u64> = alone.iter().map(|s| s + at as u64).collect();
        assert_eq!(second, moved);
    }
    // The same version 1 piece as the assembler left it, unsorted: each
    // start counts from its own FDE's field, 17 bytes apart.
    let sorted = SFrame::parse(&v1, base1).unwrap();
    let h = *sorted.header();
    assert!(h.sorted() && !h.field_relative());
    let mut raw = v1.clone();
    raw[3] &= !stackmark::formats::sframe::F_FDE_SORTED;
    let unsorted = SFrame::parse(&raw, base1).unwrap();
    assert!(unsorted.header().field_relative());
    let (before, after) = (starts(&sorted), starts(&unsorted));
    assert!(before.len() > 1, "{before:x?}");
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(*a, b + (h.fdes - h.at + 17 * i) as u64, "FDE {i}");
    }
}

#[test]
fn bytes_after_a_piece_must_be_zero_padding_or_a_header() {
    let (x86, base) = case("test-x86_64-2.46");
    let mut d = x86.clone();
    d.extend([0; 13]);
    let s = SFrame::parse(&d, base).unwrap();
    assert_eq!(s.piece_count(), 1);
    d.extend([0x12, 0x34]);
    assert_eq!(
        SFrame::parse(&d, base).unwrap_err(),
        Error::TrailingGarbage {
            offset: x86.len() + 13
        }
    );
    // Half a header.
    let mut d = x86.clone();
    d.extend([0, 0, 0, 0, 0, 0xe2, 0xde, 3]);
    assert_eq!(
        SFrame::parse(&d, base).unwrap_err(),
        Error::TrailingGarbage {
            offset: x86.len() + 5
        }
    );
}

#[test]
fn errors_name_what_is_wrong_and_where() {
    let e = mutated("test-x86_64-2.42", |d, _| swap_fdes(d)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "FDE 2 of the piece at 0x0 is out of order, but the header says sorted"
    );
    let e: Box<dyn std::error::Error> = Box::new(Error::BadWordSize { offset: 0x41 });
    assert_eq!(
        e.to_string(),
        "the FRE at 0x41 has an undefined data-word size"
    );
}

/// Looks up pcs in and around every function of a parsed section: none may
/// panic, every row found must lie in its function, and the function found
/// must be the first that covers the pc.
fn exercise(s: &SFrame<'_>) -> usize {
    let mut pcs = Vec::new();
    if let Some((lo, hi)) = s.pc_range() {
        for k in 0..64 {
            pcs.push(lo.wrapping_add((hi.wrapping_sub(lo) / 64).wrapping_mul(k)));
        }
        pcs.extend([hi, lo.wrapping_sub(1)]);
    }
    let mut rows = 0;
    for f in s.functions() {
        pcs.extend([f.fde.start, f.fde.start + u64::from(f.fde.size) / 2]);
        rows += f.rows().count();
    }
    for &pc in &pcs {
        s.find_row(pc).inspect(|r| {
            assert!(pc >= r.func_start && pc - r.func_start < u64::from(r.func_size));
            assert!(r.row_start <= pc);
        });
        assert_eq!(
            s.find_function(pc).map(|f| f.fde.at),
            first_covering(s, pc),
            "at {pc:#x}"
        );
    }
    indexed_agrees(*s, pcs);
    for p in s.pieces() {
        rows += p.functions().count();
    }
    rows
}

/// Looks each pc up through a piece index and without one, which must
/// agree; how many pcs were compared.
fn indexed_agrees(s: SFrame<'_>, pcs: impl IntoIterator<Item = u64>) -> usize {
    let mut slots = vec![PieceEntry::EMPTY; s.piece_index_len()];
    let indexed = s.with_piece_index(&mut slots);
    assert_eq!(indexed.is_indexed(), s.piece_count() > 1);
    // And through an index of an ordinary section's FDEs.
    let mut buckets = vec![0; s.fde_index_len()];
    let by_fde = s.with_fde_index(&mut buckets);
    assert_eq!(by_fde.is_fde_indexed(), s.fde_index_len() > 1);
    let mut n = 0;
    for pc in pcs {
        assert_eq!(indexed.find_row(pc), s.find_row(pc), "at {pc:#x}");
        assert_eq!(by_fde.find_row(pc), s.find_row(pc), "at {pc:#x}");
        n += 1;
    }
    n
}

#[test]
fn no_mutation_of_a_real_section_makes_parse_or_lookup_panic() {
    let mut rng = Rng(0x5f3c_9e1d_2b47_a681);
    let (mut parsed, mut rejected) = (0, 0);
    let names: Vec<_> = std::fs::read_dir(sframe_support::cases_dir())
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    for name in &names {
        let (orig, base) = case(name);
        for at in 0..orig.len() {
            for value in [0, 0xff, orig[at] ^ 1, orig[at] ^ 0x80, rng.next() as u8] {
                let mut d = orig.clone();
                d[at] = value;
                match SFrame::parse(&d, base) {
                    Ok(s) => {
                        exercise(&s);
                        parsed += 1;
                    }
                    Err(e) => {
                        assert!(!e.to_string().is_empty());
                        rejected += 1;
                    }
                }
            }
        }
        // Random multi-byte damage and random lengths.
        for _ in 0..50 {
            let mut d = orig.clone();
            for _ in 0..1 + rng.next() % 4 {
                if !d.is_empty() {
                    let at = (rng.next() % d.len() as u64) as usize;
                    d[at] = rng.next() as u8;
                }
            }
            d.truncate((rng.next() % (d.len() as u64 + 8)) as usize);
            if let Ok(s) = SFrame::parse(&d, rng.next()) {
                exercise(&s);
            }
        }
    }
    // Both outcomes must actually have happened for the test to mean much.
    assert!(parsed > 1000 && rejected > 1000, "{parsed} {rejected}");
}

#[test]
fn a_real_concatenation_looks_up_each_piece_at_its_own_addresses() {
    // Two PCREL sections laid end to end, as rust-lld leaves them: the second
    // piece's functions move with it.
    // The second piece lands right after the first one's functions.
    let (a, base_a) = case("test-x86_64-2.46");
    let (b, base_b) = case("cfi-sframe-x86_64-esc-expr-1-2.46");
    let (d, at) = concat(&a, &b);
    let whole = SFrame::parse(&d, base_a).unwrap();
    assert_eq!(whole.piece_count(), 2);
    let shift = (base_a + at as u64).wrapping_sub(base_b);
    let alone_a = SFrame::parse(&a, base_a).unwrap();
    let alone_b = SFrame::parse(&b, base_b).unwrap();
    let pieces: Vec<_> = whole.pieces().collect();
    assert_eq!(pieces.len(), 2);
    assert_eq!(pieces[0].pc_range(), alone_a.pc_range());
    let (lo, hi) = alone_b.pc_range().unwrap();
    assert_eq!(
        pieces[1].pc_range(),
        Some((lo.wrapping_add(shift), hi.wrapping_add(shift)))
    );
    let mut compared = 0;
    for f in alone_b.functions() {
        for pc in f.fde.start..f.fde.start + u64::from(f.fde.size) {
            let want = alone_b.find_row(pc).map(|mut r| {
                r.func_start = r.func_start.wrapping_add(shift);
                r.row_start = r.row_start.wrapping_add(shift);
                r
            });
            assert_eq!(whole.find_row(pc.wrapping_add(shift)), want);
            compared += 1;
        }
    }
    let (lo, hi) = alone_a.pc_range().unwrap();
    for pc in lo..hi {
        assert_eq!(whole.find_row(pc), alone_a.find_row(pc));
    }
    assert!(compared > 90);
    assert_eq!(whole.functions().count(), 7);
    let (lo, hi) = whole.pc_range().unwrap();
    assert!(indexed_agrees(whole, lo - 16..hi + 16) > 90);
}

/// A concatenation of `first` and `second` in which the second piece's one
/// function starts at `start` (its PCREL version 3 start field rewritten).
fn overlapping(first: &[u8], second: &[u8], base: u64, start: u64) -> Vec<u8> {
    let (mut d, at) = concat(first, second);
    move_first_function(&mut d, at, base, start);
    d
}

/// Rewrites the PCREL version 3 start field of the first function of the
/// piece at `at` in the section `d` (loaded at `base`) so that it starts
/// at `start`.
fn move_first_function(d: &mut [u8], at: usize, base: u64, start: u64) {
    let field = Header::parse(d, at).unwrap().fdes;
    let rel = start.wrapping_sub(base + field as u64);
    d[field..field + 8].copy_from_slice(&rel.to_le_bytes());
}

#[test]
fn where_pieces_overlap_the_index_answers_from_the_first_piece_as_a_plain_lookup_does() {
    // Pieces that describe the same code (as a hostile or broken linker
    // could leave them): the first piece in the section answers. The second
    // piece's function starts 2 bytes below the first piece's lowest, so it
    // sorts first in the index whichever piece comes first in the section.
    let (a, base_a) = case("test-x86_64-2.46");
    let (b, _) = case("cfi-sframe-x86_64-esc-expr-1-2.46");
    let a_first = SFrame::parse(&a, base_a)
        .unwrap()
        .functions()
        .next()
        .unwrap()
        .fde;
    let lo_a = a_first.start;
    let start = lo_a - 2;
    let a_then_b = overlapping(&a, &b, base_a, start);
    let whole = SFrame::parse(&a_then_b, base_a).unwrap();
    let b_fn = whole.functions().last().unwrap().fde;
    assert_eq!(b_fn.start, start);
    // Both pieces cover the first piece's first function.
    let overlap = lo_a..lo_a + u64::from(a_first.size);
    assert!(start + u64::from(b_fn.size) >= overlap.end && overlap.end > lo_a + 4);
    for pc in overlap.clone() {
        assert_eq!(whole.find_row(pc).unwrap().func_start, lo_a, "{pc:#x}");
    }
    assert!(indexed_agrees(whole, start - 8..overlap.end + 64) > 70);

    // The other way round: the piece starting lower comes first.
    // Put B first, at the section start, and A after it.
    let (mut b_first, at) = concat(&b, &a);
    let base_b = base_a.wrapping_sub(at as u64);
    move_first_function(&mut b_first, 0, base_b, start);
    let whole = SFrame::parse(&b_first, base_b).unwrap();
    assert_eq!(whole.functions().next().unwrap().fde.start, start);
    for pc in overlap.clone() {
        assert_eq!(whole.find_row(pc).unwrap().func_start, start, "{pc:#x}");
    }
    assert!(indexed_agrees(whole, start - 8..overlap.end + 64) > 70);
}

#[test]
fn a_piece_inside_the_span_of_another_does_not_hide_the_others_later_functions() {
    // The second piece's function sits in a gap between the first piece's
    // functions, so the piece whose span starts last below a later function
    // is the wrong one: the index must go on to the first piece.
    let (a, base_a) = case("test-x86_64-2.46");
    let (b, _) = case("cfi-sframe-x86_64-esc-expr-1-2.46");
    let plain_a = SFrame::parse(&a, base_a).unwrap();
    let starts: Vec<u64> = plain_a.functions().map(|f| f.fde.start).collect();
    let (lo_a, hi_a) = plain_a.pc_range().unwrap();
    // The gap after the PLT entries, before the text.
    let start = lo_a + 0x20;
    let data = overlapping(&a, &b, base_a, start);
    let whole = SFrame::parse(&data, base_a).unwrap();
    let b_fn = whole.functions().last().unwrap().fde;
    assert_eq!(b_fn.start, start);
    assert!(starts
        .iter()
        .all(|&s| s < start || s >= start + u64::from(b_fn.size)));
    let later = *starts.last().unwrap();
    assert!(later > start + u64::from(b_fn.size));
    assert_eq!(whole.find_row(later).unwrap().func_start, later);
    assert!(indexed_agrees(whole, lo_a - 16..hi_a + 16) > 300);
}

#[test]
fn pieces_out_of_address_order_are_found_through_the_index() {
    // A linker script may place objects' code in another order than their
    // `.sframe` pieces: here the section holds a piece for high addresses,
    // then the real one, then one for low addresses.
    let (a, base) = case("test-x86_64-2.46");
    let (b, _) = case("cfi-sframe-x86_64-esc-expr-1-2.46");
    let (lo_a, hi_a) = SFrame::parse(&a, base).unwrap().pc_range().unwrap();
    let (high, low) = (hi_a + 0x1000, lo_a - 0x400);
    let (d, at_a) = concat(&b, &a);
    let (mut d, at_low) = concat(&d, &b);
    let base = base - at_a as u64;
    move_first_function(&mut d, 0, base, high);
    move_first_function(&mut d, at_low, base, low);
    let whole = SFrame::parse(&d, base).unwrap();
    let starts: Vec<u64> = whole.pieces().map(|p| p.pc_range().unwrap().0).collect();
    assert_eq!(starts, [high, lo_a, low]);
    assert!(whole.find_row(low).is_some() && whole.find_row(high).is_some());
    assert!(indexed_agrees(whole, low - 16..high + 128) > 0x1000);
}

/// A version 2 AMD64 section of `n` FDEs that all point at the same `m`
/// FREs, the header counting `n * m`: every count agrees, and without a
/// bound each FDE would read the shared FREs again (`n * m` reads for some
/// `20 n + 2 m` bytes: minutes for a section under a megabyte).
fn shared_fres(n: u32, m: u32) -> Vec<u8> {
    let mut d = vec![0xe2, 0xde, 2, 0, 3, 0, 0xf8, 0];
    // num_fdes, num_fres, fre_len, fde_off, fre_off.
    for w in [n, n * m, 2 * m, 0, 20 * n] {
        d.extend_from_slice(&w.to_le_bytes());
    }
    for i in 0..n {
        d.extend_from_slice(&((i * 16) as i32).to_le_bytes());
        d.extend_from_slice(&16u32.to_le_bytes());
        d.extend_from_slice(&0u32.to_le_bytes()); // every FDE's FREs at 0
        d.extend_from_slice(&m.to_le_bytes());
        d.extend_from_slice(&[0, 0, 0, 0]);
    }
    for _ in 0..m {
        d.extend_from_slice(&[0, 0]); // start 0, no data words
    }
    d
}

#[test]
fn fdes_that_share_their_fres_are_refused_before_a_second_read() {
    // One FDE alone is a valid section.
    assert!(SFrame::parse(&shared_fres(1, 2), 0x1000).is_ok());
    // The second FDE's first FRE would be read a second time.
    let fres = 28 + 3 * 20;
    assert_eq!(
        SFrame::parse(&shared_fres(3, 2), 0x1000).map(|_| ()),
        Err(Error::FresShared {
            piece: 0,
            offset: fres
        })
    );
    // A large one is refused as quickly: 20,000 FDEs sharing 50,000 FREs
    // (500 KB) took minutes to accept.
    assert!(matches!(
        SFrame::parse(&shared_fres(20_000, 50_000), 0x1000),
        Err(Error::FresShared { .. })
    ));
}
