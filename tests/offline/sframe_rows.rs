//! What `find_row` answers, feature by feature, on sections GNU as and ld
//! wrote (`tests/data/sframe/testcases/`): the rules the walker applies.

use crate::sframe_support;

use sframe_support::Case;
use stackmark::formats::sframe::{CfaRule, RegRule, Row, SFrame};

/// Looks `pc` up in the recorded section `name`.
fn row(name: &str, pc: u64) -> Option<Row> {
    let c = Case::load(name);
    let s = SFrame::parse(&c.content, c.section_base).unwrap();
    s.find_row(pc)
}

fn rules(r: Option<Row>) -> (CfaRule, RegRule, RegRule) {
    let r = r.expect("a row");
    (r.cfa, r.ra, r.fp)
}

use CfaRule::{FpPlus, SpPlus};
use RegRule::{AtCfa, SameValue, Undefined};

#[test]
fn amd64_return_address_comes_from_the_fixed_offset_in_every_version() {
    // objdump 2.40 prints "u" for it, later ones "f": it is CFA-8 in all.
    for name in [
        "test-x86_64-2.40",
        "test-x86_64-2.42",
        "test-x86_64-2.45",
        "test-x86_64-2.46",
    ] {
        assert_eq!(
            rules(row(name, 0x112e)),
            (SpPlus(32), AtCfa(-8), SameValue),
            "{name}"
        );
    }
}

#[test]
fn amd64_frame_pointer_is_saved_when_the_row_tracks_it() {
    // test-fp-x86_64: push %rbp; mov %rsp,%rbp; ...; leave
    let name = "test-fp-x86_64-2.46";
    assert_eq!(rules(row(name, 0x1129)), (SpPlus(8), AtCfa(-8), SameValue));
    assert_eq!(
        rules(row(name, 0x112a)),
        (SpPlus(16), AtCfa(-8), AtCfa(-16))
    );
    assert_eq!(
        rules(row(name, 0x1150)),
        (FpPlus(16), AtCfa(-8), AtCfa(-16))
    );
    assert_eq!(rules(row(name, 0x116b)), (SpPlus(8), AtCfa(-8), AtCfa(-16)));
}

#[test]
fn aarch64_return_address_is_in_x30_until_the_row_says_it_was_saved() {
    // test-aarch64 main: stp x29, x30, [sp, #-32]! ... ldp; ret.
    for name in [
        "test-aarch64-2.40",
        "test-aarch64-2.45",
        "test-aarch64-2.46",
    ] {
        let c = Case::load(name);
        let s = SFrame::parse(&c.content, c.section_base).unwrap();
        let main = s.functions().next().unwrap().fde.start;
        let at = |pc| rules(s.find_row(pc));
        assert_eq!(at(main), (SpPlus(0), SameValue, SameValue), "{name}");
        assert_eq!(at(main + 8), (SpPlus(32), AtCfa(-32), SameValue), "{name}");
        assert_eq!(at(main + 76), (SpPlus(0), SameValue, SameValue), "{name}");
    }
    assert_eq!(
        rules(row("test-fp-aarch64-2.46", 0x7a0)),
        (SpPlus(48), AtCfa(-40), AtCfa(-48))
    );
}

#[test]
fn signed_return_addresses_are_marked_mangled_with_either_key() {
    // Key A (func 0) and key B (func 1); the bit is per row, from paciasp on.
    for name in [
        "cfi-sframe-aarch64-pac-ab-key-1-2.40",
        "cfi-sframe-aarch64-pac-ab-key-1-2.45",
        "cfi-sframe-aarch64-pac-ab-key-1-2.46",
    ] {
        let c = Case::load(name);
        let s = SFrame::parse(&c.content, c.section_base).unwrap();
        let fs: Vec<_> = s.functions().collect();
        assert_eq!(fs.len(), 2, "{name}");
        assert!(!fs[0].fde.pauth_key_b && fs[1].fde.pauth_key_b, "{name}");
        for f in &fs {
            let rows: Vec<Row> = f.rows().collect();
            let mangled: Vec<bool> = rows.iter().map(|r| r.mangled_ra).collect();
            assert_eq!(mangled, [false, true, true], "{name}");
            let last = rows[2];
            assert_eq!(
                s.find_row(last.row_start).unwrap(),
                last,
                "{name}: lookup gives the row"
            );
            assert_eq!((last.ra, last.fp), (AtCfa(-8), AtCfa(-16)), "{name}");
        }
    }
}

#[test]
fn ra_undefined_rows_mark_the_outermost_frame() {
    let r = row("cfi-sframe-x86_64-ra-undefined-1-2.46", 0x401005).unwrap();
    assert_eq!((r.row_start, r.ra), (0x401005, Undefined));
    assert_eq!(
        rules(row("cfi-sframe-x86_64-ra-undefined-1-2.46", 0x401004)),
        (FpPlus(16), AtCfa(-8), AtCfa(-16))
    );
    assert_eq!(
        rules(row("cfi-sframe-aarch64-ra-undefined-1-2.46", 0x4000b8)).1,
        Undefined
    );
    assert_eq!(
        rules(row("cfi-sframe-aarch64-ra-undefined-1-2.46", 0x4000b4)),
        (SpPlus(16), AtCfa(-8), AtCfa(-16))
    );
}

#[test]
fn plt_entries_repeat_their_rows_every_block() {
    // test-x86_64-2.46 func 1: .plt.got at 0x1030, 8 bytes, PCMASK with an
    // 8-byte block; one row from offset 0.
    let r = row("test-x86_64-2.46", 0x1035).unwrap();
    assert_eq!(
        (r.func_start, r.row_start, r.cfa),
        (0x1030, 0x1030, SpPlus(16))
    );
    // PLT0 next to it is an ordinary function with two rows.
    let r = row("test-x86_64-2.46", 0x1027).unwrap();
    assert_eq!((r.row_start, r.cfa), (0x1026, SpPlus(24)));
}

#[test]
fn a_pcmask_row_starts_in_the_repetition_the_pc_is_in() {
    // The same .plt.got FDE with its size stretched to four 8-byte blocks:
    // each pc maps to the row at the start of its own block.
    let c = Case::load("test-x86_64-2.46");
    let mut data = c.content.clone();
    let fde_at = 28 + 16;
    data[fde_at + 8] = 32;
    // 0x1030 + 32 still ends before the next function, 0x1129.
    let s = SFrame::parse(&data, c.section_base).unwrap();
    for pc in 0x1030..0x1050 {
        let r = s.find_row(pc).unwrap();
        assert_eq!(r.row_start, pc & !7, "{pc:#x}");
        assert_eq!(r.func_start, 0x1030);
    }
}

#[test]
fn flex_rows_name_registers_and_loads() {
    use CfaRule::{AtRegPlus as CfaAt, RegPlus as CfaReg};
    use RegRule::{AtRegPlus, RegPlus};
    // cfi-sframe-x86_64-esc-expr-1: stack realignment through DRAP (r10).
    let name = "cfi-sframe-x86_64-esc-expr-1-2.46";
    assert_eq!(
        rules(row(name, 0x401000)),
        (SpPlus(8), AtCfa(-8), SameValue)
    );
    assert_eq!(
        rules(row(name, 0x401009)),
        (CfaReg { reg: 10, offset: 0 }, AtCfa(-8), SameValue)
    );
    // RA padding: the fixed RA offset still applies; FP = *(rbp + 0).
    assert_eq!(
        rules(row(name, 0x401018)),
        (
            CfaReg { reg: 10, offset: 0 },
            AtCfa(-8),
            AtRegPlus { reg: 6, offset: 0 }
        )
    );
    assert_eq!(
        rules(row(name, 0x40101a)),
        (
            CfaAt { reg: 6, offset: -8 },
            AtCfa(-8),
            AtRegPlus { reg: 6, offset: 0 }
        )
    );
    // cfi-sframe-x86_64-5: the RA held in a register (rdx).
    assert_eq!(
        rules(row("cfi-sframe-x86_64-5-2.46", 0x401005)),
        (SpPlus(0), RegPlus { reg: 2, offset: 0 }, SameValue)
    );
    // cfi-sframe-x86_64-4: the CFA off rbx.
    assert_eq!(
        rules(row("cfi-sframe-x86_64-4-2.46", 0x401014)),
        (CfaReg { reg: 3, offset: 40 }, AtCfa(-8), SameValue)
    );
    assert!(row(name, 0x401000).is_some_and(|r| !r.signal_frame));
}

#[test]
fn the_signal_frame_attribute_reaches_the_function_and_its_rows() {
    // cfi-sframe-x86_64-signal-1: a signal trampoline with no rows at all.
    let c = Case::load("cfi-sframe-x86_64-signal-1-2.46");
    let s = SFrame::parse(&c.content, c.section_base).unwrap();
    let f = s.find_function(0x401001).unwrap();
    assert!(f.fde.signal);
    assert_eq!(f.fde.num_fres, 0);
    assert_eq!(s.find_row(0x401001), None);
    // Set the attribute on a function with rows: every row carries it.
    let c = Case::load("test-x86_64-2.46");
    let mut data = c.content.clone();
    let s = SFrame::parse(&c.content, c.section_base).unwrap();
    let info = s.functions().nth(2).unwrap().fde.fres - 3;
    data[info] |= 0x80;
    let s = SFrame::parse(&data, c.section_base).unwrap();
    assert!(s.find_row(0x1140).unwrap().signal_frame);
    assert!(!s.find_row(0x1170).unwrap().signal_frame);
}

#[test]
fn pcs_between_functions_and_outside_the_section_match_nothing() {
    // test-x86_64-2.46: 0x1038..0x1129 lies between .plt.got and main.
    for pc in [0x1038, 0x1100, 0x1128, 0x1181, 0, u64::MAX, 0x101f] {
        assert_eq!(row("test-x86_64-2.46", pc), None, "{pc:#x}");
    }
    assert!(row("test-x86_64-2.46", 0x1129).is_some());
    assert!(row("test-x86_64-2.46", 0x1180).is_some());
}

#[test]
fn offsets_and_start_addresses_of_every_size_decode() {
    // Two- and four-byte data words, two- and four-byte FRE start addresses:
    // the recorded sections use only small ones, so widen them in place.
    // cfi-sframe-common-8-2.46: one function, rows "sp+8" at 0, "sp+16" at 4.
    let c = Case::load("cfi-sframe-common-8-2.46");
    let s = SFrame::parse(&c.content, c.section_base).unwrap();
    let f = s.functions().next().unwrap();
    let (fde, hdr) = (f.fde, f.header);
    let fres: Vec<_> = f.fres().collect();
    assert_eq!(fres.len(), 2);
    for (addr_size, word_size) in [(1u8, 1u8), (2, 2), (4, 4), (4, 1), (1, 4), (2, 1)] {
        // Rebuild the FRE sub-section with the sizes asked for.
        let mut sub = Vec::new();
        sub.extend_from_slice(&2u16.to_le_bytes());
        let info = match addr_size {
            1 => 0,
            2 => 1,
            _ => 2,
        };
        sub.extend([info, 0, 0]);
        for (fre, cfa) in fres.iter().zip([8i32, 0x12345]) {
            let cfa = if word_size == 1 { cfa & 0x7f } else { cfa };
            let cfa = if word_size == 2 { cfa & 0x7fff } else { cfa };
            match addr_size {
                1 => sub.push(fre.start as u8),
                2 => sub.extend((fre.start as u16).to_le_bytes()),
                _ => sub.extend(fre.start.to_le_bytes()),
            }
            let size_bits = match word_size {
                1 => 0,
                2 => 1,
                _ => 2,
            };
            sub.push(1 | (1 << 1) | (size_bits << 5));
            match word_size {
                1 => sub.push(cfa as u8),
                2 => sub.extend((cfa as i16).to_le_bytes()),
                _ => sub.extend(cfa.to_le_bytes()),
            }
        }
        let mut data = c.content[..hdr.fres].to_vec();
        data.extend(&sub);
        data[16..20].copy_from_slice(&(sub.len() as u32).to_le_bytes());
        let s = SFrame::parse(&data, c.section_base).unwrap();
        let r = s.find_row(fde.start + 5).unwrap();
        let want = match word_size {
            1 => 0x45,
            2 => 0x2345,
            _ => 0x12345,
        };
        assert_eq!(r.cfa, SpPlus(want), "addr {addr_size} words {word_size}");
        assert_eq!(r.row_start, fde.start + 4);
        assert_eq!(s.find_row(fde.start).unwrap().cfa, SpPlus(8));
    }
}

/// A header with a fixed FP offset: it applies even where an FRE carries an
/// FP word, as libsframe reads it (`sframe_fre_get_fp_offset`, binutils
/// 2.46). GNU as never fixes the FP offset, so the section is written out.
#[test]
fn a_fixed_fp_offset_in_the_header_wins_over_an_fres_fp_word() {
    // Version 2, AMD64, sorted; fixed FP offset -16, fixed RA offset -8.
    let mut d = vec![0xe2, 0xde, 2, 1, 3, 0xf0, 0xf8, 0];
    // num_fdes, num_fres, fre_len, fde_off, fre_off.
    for w in [1u32, 1, 4, 0, 20] {
        d.extend_from_slice(&w.to_le_bytes());
    }
    // One FDE: the function at section + 0x100, 16 bytes, its FRE at 0.
    for w in [0x100u32, 16, 0, 1] {
        d.extend_from_slice(&w.to_le_bytes());
    }
    d.extend_from_slice(&[0, 0, 0, 0]);
    // The FRE: from offset 0, CFA = SP + 16, an FP word of -24.
    d.extend_from_slice(&[0, 0x05, 16, 0xe8]);
    let s = SFrame::parse(&d, 0x1000).unwrap();
    let r = s.find_row(0x1100).unwrap();
    assert_eq!(
        (r.cfa, r.ra, r.fp),
        (CfaRule::SpPlus(16), RegRule::AtCfa(-8), RegRule::AtCfa(-16))
    );
}
