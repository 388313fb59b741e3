//! Hand-made programs for the instructions real sections seldom use; the
//! real sections themselves are checked against gimli in
//! `tests/offline/cfi_conformance.rs`.

use super::*;

/// A CIE (x86_64: CFA = rsp + 8, RA at CFA - 8, fde encoding pcrel sdata4,
/// augmentation `zR` plus `extra`) at offset 0, then one FDE for
/// `0x1000..0x1100` with instructions `program`, then a terminator. The
/// section is at 0x2000.
fn section(extra: &[u8], cie_program: &[u8], program: &[u8]) -> Vec<u8> {
    let mut cie = vec![0, 0, 0, 0, 1, b'z', b'R'];
    cie.extend_from_slice(extra);
    cie.extend_from_slice(&[0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8, 0x90, 1]);
    cie.extend_from_slice(cie_program);
    while (cie.len() + 4) % 8 != 0 {
        cie.push(0);
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(cie.len() as u32).to_le_bytes());
    out.extend_from_slice(&cie);
    let fde_at = out.len();
    let mut fde = Vec::new();
    fde.extend_from_slice(&((fde_at + 4) as u32).to_le_bytes());
    let field = 0x2000 + fde_at as i64 + 8;
    fde.extend_from_slice(&((0x1000 - field) as i32).to_le_bytes());
    fde.extend_from_slice(&0x100u32.to_le_bytes());
    fde.push(0);
    fde.extend_from_slice(program);
    out.extend_from_slice(&(fde.len() as u32).to_le_bytes());
    out.extend_from_slice(&fde);
    out.extend_from_slice(&[0; 4]);
    out
}

fn rows(data: &[u8]) -> Result<Vec<CfiRow>, Error> {
    let cfi = Cfi::without_index(data, 0x2000, Registers::X86_64);
    let (fde, cie) = cfi.find_fde(0x1000)?.expect("an FDE at 0x1000");
    let mut out = Vec::new();
    for_each_row(data, &cie, &fde, 6, &cfi.bases(), |r| {
        out.push(*r);
        true
    })?;
    Ok(out)
}

fn sp(offset: i64) -> Cfa {
    Cfa::RegOffset { reg: 7, offset }
}

#[test]
fn remember_and_restore_state_bring_back_the_cfa_and_the_saved_registers() {
    // +1: push rbp (CFA rsp+16, rbp at -16); +4: mov rbp,rsp (CFA rbp+16);
    // +8: remember; +9: an epilogue (CFA rsp+8, rbp restored); +10:
    // restore_state: back to rbp+16 with rbp saved.
    let program = [
        0x41, 0x0e, 0x10, 0x86, 0x02, 0x43, 0x0d, 0x06, 0x44, 0x0a, 0x0c, 0x07, 0x08, 0xc6, 0x41,
        0x0b, 0x41,
    ];
    let got = rows(&section(&[], &[], &program)).unwrap();
    let fp16 = Cfa::RegOffset { reg: 6, offset: 16 };
    let want = [
        (0x1000, 0x1001, sp(8), Rule::Unspecified),
        (0x1001, 0x1004, sp(16), Rule::Offset(-16)),
        (0x1004, 0x1008, fp16, Rule::Offset(-16)),
        (0x1008, 0x1009, sp(8), Rule::Unspecified),
        (0x1009, 0x100a, fp16, Rule::Offset(-16)),
        (0x100a, 0x1100, fp16, Rule::Offset(-16)),
    ];
    let got: Vec<_> = got.iter().map(|r| (r.start, r.end, r.cfa, r.fp)).collect();
    assert_eq!(got, want);
}

#[test]
fn every_advance_form_moves_by_the_code_alignment_factor() {
    // advance_loc 1, advance_loc1 2, advance_loc2 3, advance_loc4 4,
    // set_loc 0x1020 (pcrel sdata4, relative to its own field).
    let mut program = vec![
        0x41, 0x02, 2, 0x03, 3, 0, 0x04, 4, 0, 0, 0, 0x01, 0, 0, 0, 0,
    ];
    // The FDE is the last record before the terminator: its length field,
    // then CIE pointer, pc_begin, range and augmentation length (13 bytes)
    // before the program; set_loc's operand is 12 bytes into it.
    let fde_start = section(&[], &[], &program).len() - 4 - 4 - (13 + program.len());
    let field = 0x2000 + (fde_start + 4 + 13 + 12) as i64;
    program[12..16].copy_from_slice(&((0x1020 - field) as i32).to_le_bytes());
    let data = section(&[], &[], &program);
    let got: Vec<_> = rows(&data).unwrap().iter().map(|r| r.start).collect();
    assert_eq!(got, [0x1000, 0x1001, 0x1003, 0x1006, 0x100a, 0x1020]);
}

#[test]
fn rules_the_walker_cannot_take_are_named() {
    let cfi_of = |program: &[u8]| section(&[], &[], program);
    let row = |data: &[u8], pc| {
        Cfi::without_index(data, 0x2000, Registers::X86_64).unwrap_or_else_row(pc)
    };
    // def_cfa_expression (DW_OP_breg7 8).
    let data = cfi_of(&[0x0f, 2, 0x77, 8]);
    assert_eq!(row(&data, 0x1000), Err(Inexpressible::CfaExpression));
    // expression for rip (16).
    let data = cfi_of(&[0x10, 16, 2, 0x77, 8]);
    assert_eq!(row(&data, 0x1000), Err(Inexpressible::ReturnAddressRule));
    // val_offset for rbp.
    let data = cfi_of(&[0x14, 6, 2]);
    assert_eq!(row(&data, 0x1000), Err(Inexpressible::FramePointerRule));
    // An expression for another register is dropped: the row stands.
    let data = cfi_of(&[0x10, 3, 2, 0x77, 8]);
    assert!(row(&data, 0x1000).is_ok());
    // A signal frame (`zRS`).
    let data = section(b"S", &[], &[]);
    assert_eq!(row(&data, 0x1000), Err(Inexpressible::SignalFrame));
    // The CFA from another register: the walker's FLEX form.
    let data = cfi_of(&[0x0c, 10, 0]);
    let got = row(&data, 0x1000).unwrap();
    assert_eq!(
        got.cfa,
        crate::formats::sframe::CfaRule::RegPlus { reg: 10, offset: 0 }
    );
}

trait RowOf {
    fn unwrap_or_else_row(&self, pc: u64) -> Result<Row, Inexpressible>;
}

impl RowOf for Cfi<'_> {
    fn unwrap_or_else_row(&self, pc: u64) -> Result<Row, Inexpressible> {
        self.unwind_row(pc).map(|r| r.expect("a row"))
    }
}

#[test]
fn negate_ra_state_toggles_the_signed_return_address() {
    let data = section(&[], &[], &[0x2d, 0x41, 0x2d, 0x41, 0x2d]);
    let got: Vec<_> = rows(&data).unwrap().iter().map(|r| r.ra_signed).collect();
    assert_eq!(got, [true, false, true]);
}

#[test]
fn malformed_programs_give_errors_not_rows_past_them() {
    let cases: &[(&[u8], Error)] = &[
        (&[0x0b], Error::StateStackUnderflow { offset: 0 }),
        (
            &[0x3f],
            Error::UnknownOpcode {
                opcode: 0x3f,
                offset: 0,
            },
        ),
        (
            &[0x0f, 1, 0x77, 0x0e, 8],
            Error::BadInstruction { offset: 0 },
        ),
        (
            &[0x02],
            Error::Truncated {
                what: "instruction",
                offset: 0,
            },
        ),
    ];
    for (program, want) in cases {
        let data = section(&[], &[], program);
        // Offsets in errors count from the section start: compare kinds.
        let got = rows(&data).unwrap_err();
        assert_eq!(
            core::mem::discriminant(&got),
            core::mem::discriminant(want),
            "{program:x?}: {got}"
        );
    }
    let deep = [0x0a; MAX_STATE_DEPTH + 1];
    let got = rows(&section(&[], &[], &deep)).unwrap_err();
    assert!(matches!(got, Error::StateStackOverflow { .. }), "{got}");
    // An advance inside a CIE's initial instructions.
    let got = rows(&section(&[], &[0x41], &[])).unwrap_err();
    assert!(matches!(got, Error::BadInstruction { .. }), "{got}");
}

#[test]
fn an_index_finds_the_fde_a_linear_scan_finds_and_rejects_bad_tables() {
    let data = section(&[], &[], &[0x41, 0x0e, 0x10]);
    let hdr = index_of(&data);
    let cfi = Cfi::new(&hdr, 0x1800, &data, Registers::X86_64).unwrap();
    assert_eq!(cfi.eh_frame_addr(), 0x2000);
    assert_eq!(cfi.index().map(|i| i.len()), Some(1));
    let linear = Cfi::without_index(&data, 0x2000, Registers::X86_64);
    for pc in [0xfff, 0x1000, 0x1001, 0x10ff, 0x1100] {
        assert_eq!(cfi.find_row(pc), linear.find_row(pc), "{pc:#x}");
    }
    assert!(cfi.find_row(0x1001).unwrap().is_some());
    // A count past the data.
    let mut long = hdr.clone();
    long[8..12].copy_from_slice(&2u32.to_le_bytes());
    assert!(matches!(
        Cfi::new(&long, 0x1800, &data, Registers::X86_64),
        Err(Error::Truncated { .. })
    ));
    // An entry pointing outside .eh_frame.
    let mut wild = hdr.clone();
    wild[16..20].copy_from_slice(&0x7000_0000i32.to_le_bytes());
    let cfi = Cfi::new(&wild, 0x1800, &data, Registers::X86_64).unwrap();
    assert_eq!(
        cfi.find_fde(0x1000),
        Err(Error::IndexOutOfBounds { entry: 0 })
    );
    assert!(matches!(
        Cfi::new(&[2, 0, 0, 0], 0, &data, Registers::X86_64),
        Err(Error::BadHeader { version: 2 })
    ));
    // A table relative to the text or a function, bases the header does
    // not have, cannot be read: it is ignored and the records searched.
    for base in [0x20, 0x40] {
        let mut rel = hdr.clone();
        rel[3] = base | 0x0b;
        let cfi = Cfi::new(&rel, 0x1800, &data, Registers::X86_64).unwrap();
        assert!(cfi.index().is_none(), "{base:#x}");
        assert_eq!(cfi.find_row(0x1001), linear.find_row(0x1001));
    }
}

#[test]
fn no_prefix_of_a_section_panics_or_loops() {
    let data = section(b"S", &[0x0a, 0x0b], &[0x41, 0x0e, 0x10, 0x86, 2, 0x2e, 8]);
    for n in 0..=data.len() {
        let cfi = Cfi::without_index(&data[..n], 0x2000, Registers::X86_64);
        let _ = cfi.find_row(0x1004);
        let _ = extent(&data[..n]);
    }
}

#[test]
fn a_return_address_column_other_than_the_link_register_names_its_register() {
    use crate::formats::sframe::RegRule;
    // `section`'s CIE names its return address column (16) at byte 14;
    // make it rbx (3), as glibc's AArch64 rawmemchr makes it x15. Its CIE
    // rule for 16 is then for another register, and the return address,
    // unchanged, is rbx's value.
    let mut data = section(&[], &[], &[0x41, 0x08, 3]);
    assert_eq!(data[14], 0x10);
    data[14] = 3;
    let cfi = Cfi::without_index(&data, 0x2000, Registers::X86_64);
    assert_eq!(cfi.find_row(0x1000).unwrap().unwrap().1.ra_register, 3);
    let row = cfi.unwrap_or_else_row(0x1000).unwrap();
    assert_eq!(row.ra, RegRule::RegPlus { reg: 3, offset: 0 });
    // DW_CFA_same_value says the same.
    let row = cfi.unwrap_or_else_row(0x1001).unwrap();
    assert_eq!(row.ra, RegRule::RegPlus { reg: 3, offset: 0 });
}

#[test]
fn a_frame_pointer_that_is_the_return_address_column_gets_both_rules() {
    // Return address column rbp (6); rbp saved at CFA - 16 from +1,
    // restored at +2.
    let mut data = section(&[], &[], &[0x41, 0x86, 2, 0x41, 0xc6]);
    data[14] = 6;
    let got: Vec<_> = rows(&data)
        .unwrap()
        .iter()
        .map(|r| (r.start, r.ra, r.fp))
        .collect();
    assert_eq!(
        got,
        [
            (0x1000, Rule::Unspecified, Rule::Unspecified),
            (0x1001, Rule::Offset(-16), Rule::Offset(-16)),
            (0x1002, Rule::Unspecified, Rule::Unspecified),
        ]
    );
}

#[test]
fn records_with_64_bit_lengths_keep_4_byte_cie_pointers() {
    let cie_body = [
        1, b'z', b'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8, 0x90, 1,
    ];
    let mut data = vec![0xff; 4];
    data.extend_from_slice(&(4 + cie_body.len() as u64).to_le_bytes());
    data.extend_from_slice(&[0; 4]);
    data.extend_from_slice(&cie_body);
    let fde_at = data.len();
    let id_at = fde_at + 12;
    let program = [0x41, 0x0e, 0x10];
    data.extend_from_slice(&[0xff; 4]);
    data.extend_from_slice(&(4 + 4 + 4 + 1 + program.len() as u64).to_le_bytes());
    data.extend_from_slice(&(id_at as u32).to_le_bytes());
    let field = 0x2000 + id_at as i64 + 4;
    data.extend_from_slice(&((0x1000 - field) as i32).to_le_bytes());
    data.extend_from_slice(&0x100u32.to_le_bytes());
    data.push(0);
    data.extend_from_slice(&program);
    data.extend_from_slice(&[0; 4]);
    assert_eq!(extent(&data), data.len());
    let cfi = Cfi::without_index(&data, 0x2000, Registers::X86_64);
    let row = cfi.unwrap_or_else_row(0x1001).unwrap();
    assert_eq!((row.func_start, row.func_size), (0x1000, 0x100));
    assert_eq!(row.cfa, crate::formats::sframe::CfaRule::SpPlus(16));
}

#[test]
fn row_at_matches_the_general_machine_on_every_opcode_and_truncation() {
    // Instructions of every kind the machine knows (and some it does
    // not), with operands of one and more bytes and registers out of range.
    const PIECES: &[&[u8]] = &[
        &[0x40],
        &[0x41],
        &[0x43],
        &[0x7f],
        &[0x02, 3],
        &[0x03, 2, 0],
        &[0x04, 1, 0, 0, 0],
        &[0x04, 0, 0, 0, 0x80],
        &[0x01, 0, 0, 0, 0],
        &[0x86, 2],
        &[0x86, 0x82, 0x01],
        &[0x90, 1],
        &[0x90, 0xff, 0x7f],
        &[0x83, 3],
        &[0xbf, 1],
        &[0xc6],
        &[0xd0],
        &[0xc3],
        &[0x00],
        &[0x0c, 7, 8],
        &[0x0c, 6, 0x90, 0x01],
        &[0x0c, 0x80, 0x80, 0x04, 8],
        &[0x0d, 6],
        &[0x0d, 0xff, 0xff, 0x7f],
        &[0x0e, 0x10],
        &[0x0e, 0x80, 0x02],
        &[0x12, 7, 0x7e],
        &[0x13, 0x7c],
        &[0x0a],
        &[0x0a],
        &[0x0b],
        &[0x0b],
        &[0x0f, 2, 0x77, 8],
        &[0x10, 16, 1, 0x77],
        &[0x16, 6, 1, 0x77],
        &[0x07, 16],
        &[0x08, 6],
        &[0x09, 6, 3],
        &[0x05, 16, 1],
        &[0x05, 6, 0x81, 0x01],
        &[0x06, 6],
        &[0x11, 6, 0x7e],
        &[0x14, 16, 2],
        &[0x15, 6, 0x7f],
        &[0x2d],
        &[0x2e, 8],
        &[0x2f, 6, 2],
        &[0x3f],
        &[0x1c],
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut checked = 0;
    for _ in 0..1500 {
        // Half the programs keep to the first pieces, which `row_at` runs
        // itself, so they get far before the general machine takes over.
        let kinds = [26, PIECES.len()][next(2)];
        let mut program = Vec::new();
        for _ in 0..next(24) {
            program.extend_from_slice(PIECES[next(kinds)]);
        }
        // Cut anywhere: an operand may run past the FDE's end.
        program.truncate(program.len() - next(3).min(program.len()));
        let mut cie_program = Vec::new();
        for _ in 0..next(4) {
            // Mostly the instructions a CIE has; sometimes any.
            let piece = match next(4) {
                0 => PIECES[next(PIECES.len())],
                1 => &[0x86, 2][..],
                2 => &[0x0c, 6, 16][..],
                _ => &[0x0a, 0x0e, 8, 0x0b][..],
            };
            cie_program.extend_from_slice(piece);
        }
        let data = section(&[], &cie_program, &program);
        let cfi = Cfi::without_index(&data, 0x2000, Registers::X86_64);
        let Ok(Some((fde, cie))) = cfi.find_fde(0x1000) else {
            panic!("no FDE for {program:x?}");
        };
        let bases = cfi.bases();
        for fp in [6, 16, 3] {
            let mut rows = Vec::new();
            let all = for_each_row(&data, &cie, &fde, fp, &bases, |r| {
                rows.push(*r);
                true
            });
            for pc in 0x0fff..=0x1100 {
                let got = row_at(&data, &cie, &fde, fp, &bases, pc);
                let want = program::row_at_general(&data, &cie, &fde, fp, &bases, pc);
                assert_eq!(got, want, "{cie_program:x?} {program:x?} fp {fp} at {pc:#x}");
                // Where every row was made, the row found is one of them.
                if all.is_ok() {
                    let row = rows.iter().find(|r| r.start <= pc && pc < r.end);
                    assert_eq!(got, Ok(row.copied()), "{program:x?} at {pc:#x}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 1_000_000);
}

/// An `.eh_frame_hdr` at 0x1800 indexing `section`'s one FDE: version 1,
/// eh_frame_ptr pcrel sdata4, count udata4, table datarel sdata4.
fn index_of(data: &[u8]) -> Vec<u8> {
    let fde_at = u32::from_le_bytes(data[0..4].try_into().unwrap()) as usize + 4;
    let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
    hdr.extend_from_slice(&(0x2000i32 - 0x1804).to_le_bytes());
    hdr.extend_from_slice(&1u32.to_le_bytes());
    hdr.extend_from_slice(&(0x1000i32 - 0x1800).to_le_bytes());
    hdr.extend_from_slice(&((0x2000 + fde_at) as i32 - 0x1800).to_le_bytes());
    hdr
}

#[test]
fn the_quick_row_is_the_unwind_rows_brief_wherever_it_has_the_shape() {
    use crate::formats::sframe::QuickRow;
    // (augmentation, program, whether some pc has a quick row)
    let cases: &[(&[u8], &[u8], bool)] = &[
        // push rbp; mov rbp, rsp; ... pop rbp.
        (b"", &[0x41, 0x0e, 0x10, 0x86, 2, 0x43, 0x0d, 6, 0x48, 0x0c, 7, 8], true),
        // remember and restore state, run by the general machine.
        (b"", &[0x41, 0x0e, 0x10, 0x86, 2, 0x41, 0x0a, 0x0e, 8, 0x41, 0x0b], true),
        // An offset past 32 bits.
        (b"", &[0x41, 0x0e, 0x80, 0x80, 0x80, 0x80, 0x10], true),
        // PAC's toggle (any registers).
        (b"", &[0x2d, 0x41, 0x2d], true),
        // A signal frame: never quick, whatever its rows.
        (b"S", &[0x41, 0x0e, 0x10], false),
        // The CFA as an expression, the RA as one, rbp as CFA + n, rbp in
        // another register, the CFA from another register.
        (b"", &[0x0f, 2, 0x77, 8], false),
        (b"", &[0x10, 16, 2, 0x77, 8], false),
        (b"", &[0x41, 0x14, 6, 2], true),
        (b"", &[0x41, 0x09, 6, 3], true),
        (b"", &[0x0c, 10, 0], false),
        // The RA undefined (the outermost frame).
        (b"", &[0x07, 16], false),
    ];
    for &(aug, program, some) in cases {
        let data = section(aug, &[], program);
        let hdr = index_of(&data);
        let cfi = Cfi::new(&hdr, 0x1800, &data, Registers::X86_64).unwrap();
        let mut quick = 0;
        for pc in 0xff0..0x1110 {
            let brief = cfi.unwind_row(pc).ok().flatten().and_then(|r| QuickRow::of(&r));
            assert_eq!(cfi.quick_row(pc), brief, "{aug:?} {program:x?} at {pc:#x}");
            quick += usize::from(brief.is_some());
        }
        assert_eq!(quick > 0, some, "{aug:?} {program:x?}");
        // Without an index it answers nothing.
        let linear = Cfi::without_index(&data, 0x2000, Registers::X86_64);
        assert_eq!(linear.quick_row(0x1000), None);
    }
}
