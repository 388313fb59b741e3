//! Every section in `tests/data/sframe/testcases/` (written by GNU as and ld
//! 2.40 to 2.46 for x86_64 and AArch64: versions 1, 2 and 3, relative and
//! PCREL start addresses, PLT entries, signed return addresses with keys A
//! and B, RA-undefined rows, signal frames, FLEX FDEs) dumps through
//! `sframe_dump --raw` to exactly the function lines and rows binutils'
//! `objdump --sframe` printed for it. Each section also looks up, pc by pc,
//! the same rows a plain linear search over its functions finds.

use crate::sframe_support;

use sframe_support::{cases_dir, function_lines, quick_row_oracle, run_dump, scratch, Case};
use stackmark::formats::sframe::{Row, SFrame};

/// The rows a linear scan over all functions finds at `pc`: the reference
/// the binary search must agree with.
fn linear_lookup(sframe: &SFrame<'_>, pc: u64) -> Option<Row> {
    let f = sframe
        .functions()
        .find(|f| pc >= f.fde.start && pc - f.fde.start < u64::from(f.fde.size))?;
    let mut off = pc - f.fde.start;
    let mut block = f.fde.start;
    if f.fde.pc_mask {
        let rep = u64::from(f.fde.rep_size);
        block += off / rep * rep;
        off %= rep;
    }
    let fre = f.fres().filter(|r| u64::from(r.start) <= off).last()?;
    let mut row = f.row(&fre)?;
    row.row_start = block + u64::from(fre.start);
    Some(row)
}

/// The header lines of a dump, from `Header :` to `Function Index :`,
/// trimmed.
fn header_lines(dump: &str) -> Vec<&str> {
    dump.lines()
        .skip_while(|l| !l.contains("Header :"))
        .take_while(|l| !l.contains("Function Index :"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

fn check(name: &str) {
    let case = Case::load(name);
    let dir = scratch(name);
    let raw = dir.join("section.bin");
    std::fs::write(&raw, &case.content).unwrap();
    let base = format!("{:#x}", case.section_base);
    let (ok, out, err) = run_dump(&[
        "--raw".as_ref(),
        raw.as_os_str(),
        "--base".as_ref(),
        base.as_ref(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "{name}: sframe_dump failed: {err}");
    let (got, want) = (function_lines(&out), function_lines(&case.groundtruth));
    assert_eq!(got, want, "{name}: dump differs from objdump --sframe");
    assert_eq!(
        header_lines(&out),
        header_lines(&case.groundtruth),
        "{name}: header differs from objdump --sframe"
    );
    if case.content.is_empty() {
        assert!(want.is_empty());
        return;
    }

    let sframe =
        SFrame::parse(&case.content, case.section_base).unwrap_or_else(|e| panic!("{name}: {e}"));
    let functions = sframe.functions().count();
    assert_eq!(functions, sframe.header().num_fdes as usize);
    let Some((lo, hi)) = sframe.pc_range() else {
        assert_eq!(functions, 0);
        return;
    };
    let expected_quick_row = quick_row_oracle(&sframe);
    for pc in lo.saturating_sub(8)..hi + 8 {
        assert_eq!(
            sframe.find_row(pc),
            linear_lookup(&sframe, pc),
            "{name}: lookup at {pc:#x}"
        );
        assert_eq!(
            sframe.quick_row(pc),
            expected_quick_row(pc),
            "{name}: quick row at {pc:#x}"
        );
    }
}

macro_rules! cases {
    ($($test:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check($file);
            }
        )*
        const ALL: &[&str] = &[$($file),*];
    };
}

cases! {
    cfi_sframe_aarch64_1_2_40 => "cfi-sframe-aarch64-1-2.40",
    cfi_sframe_aarch64_1_2_45 => "cfi-sframe-aarch64-1-2.45",
    cfi_sframe_aarch64_1_2_46 => "cfi-sframe-aarch64-1-2.46",
    cfi_sframe_aarch64_2_2_40 => "cfi-sframe-aarch64-2-2.40",
    cfi_sframe_aarch64_2_2_45 => "cfi-sframe-aarch64-2-2.45",
    cfi_sframe_aarch64_2_2_46 => "cfi-sframe-aarch64-2-2.46",
    cfi_sframe_aarch64_3_2_46 => "cfi-sframe-aarch64-3-2.46",
    cfi_sframe_aarch64_4_2_45 => "cfi-sframe-aarch64-4-2.45",
    cfi_sframe_aarch64_pac_ab_key_1_2_40 => "cfi-sframe-aarch64-pac-ab-key-1-2.40",
    cfi_sframe_aarch64_pac_ab_key_1_2_45 => "cfi-sframe-aarch64-pac-ab-key-1-2.45",
    cfi_sframe_aarch64_pac_ab_key_1_2_46 => "cfi-sframe-aarch64-pac-ab-key-1-2.46",
    cfi_sframe_aarch64_ra_undefined_1_2_46 => "cfi-sframe-aarch64-ra-undefined-1-2.46",
    cfi_sframe_common_1_2_40 => "cfi-sframe-common-1-2.40",
    cfi_sframe_common_1_2_45 => "cfi-sframe-common-1-2.45",
    cfi_sframe_common_1_2_46 => "cfi-sframe-common-1-2.46",
    cfi_sframe_common_10_2_45 => "cfi-sframe-common-10-2.45",
    cfi_sframe_common_10_2_46 => "cfi-sframe-common-10-2.46",
    cfi_sframe_common_11_2_45 => "cfi-sframe-common-11-2.45",
    cfi_sframe_common_11_2_46 => "cfi-sframe-common-11-2.46",
    cfi_sframe_common_12_2_46 => "cfi-sframe-common-12-2.46",
    cfi_sframe_common_1b_2_45 => "cfi-sframe-common-1b-2.45",
    cfi_sframe_common_1b_2_46 => "cfi-sframe-common-1b-2.46",
    cfi_sframe_common_1c_2_45 => "cfi-sframe-common-1c-2.45",
    cfi_sframe_common_1c_2_46 => "cfi-sframe-common-1c-2.46",
    cfi_sframe_common_2_2_40 => "cfi-sframe-common-2-2.40",
    cfi_sframe_common_2_2_45 => "cfi-sframe-common-2-2.45",
    cfi_sframe_common_2_2_46 => "cfi-sframe-common-2-2.46",
    cfi_sframe_common_3_2_40 => "cfi-sframe-common-3-2.40",
    cfi_sframe_common_3_2_45 => "cfi-sframe-common-3-2.45",
    cfi_sframe_common_3_2_46 => "cfi-sframe-common-3-2.46",
    cfi_sframe_common_4_2_40 => "cfi-sframe-common-4-2.40",
    cfi_sframe_common_4_2_45 => "cfi-sframe-common-4-2.45",
    cfi_sframe_common_4_2_46 => "cfi-sframe-common-4-2.46",
    cfi_sframe_common_5_2_40 => "cfi-sframe-common-5-2.40",
    cfi_sframe_common_5_2_45 => "cfi-sframe-common-5-2.45",
    cfi_sframe_common_5_2_46 => "cfi-sframe-common-5-2.46",
    cfi_sframe_common_6_2_40 => "cfi-sframe-common-6-2.40",
    cfi_sframe_common_6_2_45 => "cfi-sframe-common-6-2.45",
    cfi_sframe_common_6_2_46 => "cfi-sframe-common-6-2.46",
    cfi_sframe_common_7_2_40 => "cfi-sframe-common-7-2.40",
    cfi_sframe_common_7_2_45 => "cfi-sframe-common-7-2.45",
    cfi_sframe_common_7_2_46 => "cfi-sframe-common-7-2.46",
    cfi_sframe_common_8_2_40 => "cfi-sframe-common-8-2.40",
    cfi_sframe_common_8_2_45 => "cfi-sframe-common-8-2.45",
    cfi_sframe_common_8_2_46 => "cfi-sframe-common-8-2.46",
    cfi_sframe_common_9_2_45 => "cfi-sframe-common-9-2.45",
    cfi_sframe_common_9_2_46 => "cfi-sframe-common-9-2.46",
    cfi_sframe_x86_64_1_2_40 => "cfi-sframe-x86_64-1-2.40",
    cfi_sframe_x86_64_1_2_45 => "cfi-sframe-x86_64-1-2.45",
    cfi_sframe_x86_64_1_2_46 => "cfi-sframe-x86_64-1-2.46",
    cfi_sframe_x86_64_2_2_45 => "cfi-sframe-x86_64-2-2.45",
    cfi_sframe_x86_64_2_2_46 => "cfi-sframe-x86_64-2-2.46",
    cfi_sframe_x86_64_3_2_46 => "cfi-sframe-x86_64-3-2.46",
    cfi_sframe_x86_64_4_2_46 => "cfi-sframe-x86_64-4-2.46",
    cfi_sframe_x86_64_5_2_46 => "cfi-sframe-x86_64-5-2.46",
    cfi_sframe_x86_64_6_2_46 => "cfi-sframe-x86_64-6-2.46",
    cfi_sframe_x86_64_empty_1_2_45 => "cfi-sframe-x86_64-empty-1-2.45",
    cfi_sframe_x86_64_empty_1_2_46 => "cfi-sframe-x86_64-empty-1-2.46",
    cfi_sframe_x86_64_empty_2_2_45 => "cfi-sframe-x86_64-empty-2-2.45",
    cfi_sframe_x86_64_empty_2_2_46 => "cfi-sframe-x86_64-empty-2-2.46",
    cfi_sframe_x86_64_empty_3_2_45 => "cfi-sframe-x86_64-empty-3-2.45",
    cfi_sframe_x86_64_empty_3_2_46 => "cfi-sframe-x86_64-empty-3-2.46",
    cfi_sframe_x86_64_empty_4_2_45 => "cfi-sframe-x86_64-empty-4-2.45",
    cfi_sframe_x86_64_empty_4_2_46 => "cfi-sframe-x86_64-empty-4-2.46",
    cfi_sframe_x86_64_empty_5_2_46 => "cfi-sframe-x86_64-empty-5-2.46",
    cfi_sframe_x86_64_esc_expr_1_2_46 => "cfi-sframe-x86_64-esc-expr-1-2.46",
    cfi_sframe_x86_64_esc_expr_2_2_46 => "cfi-sframe-x86_64-esc-expr-2-2.46",
    cfi_sframe_x86_64_ra_undefined_1_2_46 => "cfi-sframe-x86_64-ra-undefined-1-2.46",
    cfi_sframe_x86_64_signal_1_2_46 => "cfi-sframe-x86_64-signal-1-2.46",
    simple_aarch64 => "simple-aarch64",
    simple => "simple",
    test_aarch64_2_40 => "test-aarch64-2.40",
    test_aarch64_2_41 => "test-aarch64-2.41",
    test_aarch64_2_43 => "test-aarch64-2.43",
    test_aarch64_2_44 => "test-aarch64-2.44",
    test_aarch64_2_45 => "test-aarch64-2.45",
    test_aarch64_2_46 => "test-aarch64-2.46",
    test_fp_aarch64_2_40 => "test-fp-aarch64-2.40",
    test_fp_aarch64_2_41 => "test-fp-aarch64-2.41",
    test_fp_aarch64_2_42 => "test-fp-aarch64-2.42",
    test_fp_aarch64_2_43 => "test-fp-aarch64-2.43",
    test_fp_aarch64_2_45 => "test-fp-aarch64-2.45",
    test_fp_aarch64_2_46 => "test-fp-aarch64-2.46",
    test_fp_x86_64_2_40 => "test-fp-x86_64-2.40",
    test_fp_x86_64_2_42 => "test-fp-x86_64-2.42",
    test_fp_x86_64_2_43 => "test-fp-x86_64-2.43",
    test_fp_x86_64_2_44 => "test-fp-x86_64-2.44",
    test_fp_x86_64_2_45 => "test-fp-x86_64-2.45",
    test_fp_x86_64_2_46 => "test-fp-x86_64-2.46",
    test_x86_64_2_40 => "test-x86_64-2.40",
    test_x86_64_2_41 => "test-x86_64-2.41",
    test_x86_64_2_42 => "test-x86_64-2.42",
    test_x86_64_2_44 => "test-x86_64-2.44",
    test_x86_64_2_45 => "test-x86_64-2.45",
    test_x86_64_2_46 => "test-x86_64-2.46",
}

#[test]
fn every_recorded_case_has_a_test() {
    let mut files: Vec<String> = std::fs::read_dir(cases_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    files.sort();
    let mut listed: Vec<&str> = ALL.to_vec();
    listed.sort();
    assert_eq!(files, listed);
}

#[test]
fn recorded_cases_span_versions_producers_and_features() {
    // The cases above prove what they cover only if it is there: count the
    // features across all sections.
    let (mut versions, mut pcrel, mut pc_mask, mut key_b, mut signal, mut flex) =
        ([0; 4], 0, 0, 0, 0, 0);
    let (mut ra_undefined, mut mangled, mut addr_sizes, mut word_sizes) = (0, 0, [0; 5], [0; 5]);
    // The pcs `quick_row` answers, by version and architecture: it must
    // take the common rows of both, with and without signed return
    // addresses, for the tests of it above to mean anything.
    let (mut quick, mut quick_mangled) = ([[0; 2]; 4], 0);
    for name in ALL {
        let case = Case::load(name);
        let Ok(sframe) = SFrame::parse(&case.content, case.section_base) else {
            assert!(case.content.is_empty(), "{name}");
            continue;
        };
        if let Some((lo, hi)) = sframe.pc_range() {
            let arch = usize::from(sframe.header().fixed_ra_offset != 0);
            for q in (lo..hi).filter_map(|pc| sframe.quick_row(pc)) {
                quick[usize::from(sframe.version())][arch] += 1;
                quick_mangled += usize::from(q.mangled_ra);
            }
        }
        versions[usize::from(sframe.version())] += 1;
        pcrel += usize::from(sframe.header().pcrel());
        for f in sframe.functions() {
            pc_mask += usize::from(f.fde.pc_mask);
            key_b += usize::from(f.fde.pauth_key_b);
            signal += usize::from(f.fde.signal);
            flex += usize::from(f.fde.is_flex());
            addr_sizes[usize::from(f.fde.addr_size)] += 1;
            for fre in f.fres() {
                ra_undefined += usize::from(fre.count() == 0);
                mangled += usize::from(fre.mangled_ra);
                word_sizes[usize::from(fre.word_size)] += 1;
            }
        }
    }
    assert!(
        versions[1] > 0 && versions[2] > 0 && versions[3] > 0,
        "{versions:?}"
    );
    assert!(pcrel > 0 && pc_mask > 0 && key_b > 0 && signal > 0 && flex > 0);
    assert!(ra_undefined > 0 && mangled > 0);
    assert!(
        addr_sizes[1] > 0 && word_sizes[1] > 0 && word_sizes[2] > 0,
        "{word_sizes:?}"
    );
    // Versions 1 and 2, AArch64 (RA in the row) and x86_64 (fixed RA).
    assert!(quick[1..3].iter().flatten().all(|&n| n > 0), "{quick:?}");
    assert!(quick_mangled > 0 && quick[3] == [0, 0], "{quick:?}");
}
