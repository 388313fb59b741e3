//! `formats::cfi` against gimli (a test-only oracle) on real `.eh_frame`
//! and `.eh_frame_hdr` sections: the host's libc, ld.so, libgcc_s and
//! libstdc++, the same four for AArch64 (Debian's cross packages, which
//! scripts/test.sh installs), this test's own executable (rustc), and two
//! AArch64 programs built here by gcc with signed return addresses (key A
//! and key B), since Debian's AArch64 libraries sign none.
//!
//! For every FDE gimli finds, every row gimli gives must be the row
//! stackmark's [`Cfi::find_row`] gives (through the index) at the row's
//! first and last address: the same FDE, the same row bounds, the same CFA
//! rule, the same rules for the return-address column and the frame
//! pointer, and on AArch64 the same return-address signing state. The rows
//! [`for_each_row`] hands out must be exactly gimli's, and
//! [`Cfi::unwind_row`] must be the walker's form of the row (or the reason
//! the walker cannot take it). The index must be gimli's, entry by entry,
//! and a linear search must find what the index finds. The return-address
//! column is each CIE's: glibc's AArch64 `rawmemchr` keeps its return
//! address in x15, and the walker's row then reads it from there.
//!
//! Run with `--nocapture` to see, per file, how many FDEs and rows were
//! compared and how many rows the walker cannot take, by reason.
//!
//! Known differences, each asserted as such:
//! * gimli keeps no "unspecified" rule: a register no instruction named
//!   and one `DW_CFA_undefined` named both read `Undefined`. Stackmark
//!   tells them apart (`Rule::Unspecified`, `Rule::Undefined`); both match
//!   gimli's `Undefined`, and a stackmark `Undefined` must come from a
//!   `DW_CFA_undefined` of that register in the CIE or FDE.
//! * gimli hands out empty rows (an advance by 0) and does not clip rows
//!   at the FDE's end; stackmark merges the first and clips the second.
//!   The comparison drops gimli's empty rows and clips its rows at the FDE's
//!   end; the counts say how many there were.
//! * gimli 0.31 does not know the CIE augmentation `B` (AArch64 key B) and
//!   rejects the CIE: for the key B program gimli reads a copy where it is
//!   `S`, which changes no rule, and its "signal trampoline" is read as
//!   "key B".
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use gimli::{
    BaseAddresses, CallFrameInstruction, CfaRule as GCfa, CieOrFde, EhFrame, EndianSlice,
    LittleEndian, Register, RegisterRule, UnwindContext, UnwindSection,
};
use object::{Object, ObjectSection};
use stackmark::formats::cfi::{for_each_row, Cfa, Cfi, CfiRow, Registers, Rule};
use stackmark::formats::sframe::{CfaRule, QuickRow, RegRule, Row};

type Slice<'a> = EndianSlice<'a, LittleEndian>;
type GRule = RegisterRule<usize>;

const X86_64_LIBS: &[&str] = &[
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
];

const AARCH64_LIBS: &[&str] = &[
    "/usr/aarch64-linux-gnu/lib/libc.so.6",
    "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1",
    "/usr/aarch64-linux-gnu/lib/libgcc_s.so.1",
    "/usr/aarch64-linux-gnu/lib/libstdc++.so.6",
];

/// The architecture's registers as DWARF numbers.
#[derive(Clone, Copy)]
struct Arch {
    regs: Registers,
    aarch64: bool,
}

const X86_64: Arch = Arch {
    regs: Registers::X86_64,
    aarch64: false,
};

const AARCH64: Arch = Arch {
    regs: Registers::AARCH64,
    aarch64: true,
};

/// What one file gave.
#[derive(Debug, Default)]
struct Counts {
    fdes: usize,
    /// FDEs covering no byte (gimli gives them rows; stackmark finds no pc
    /// in them).
    empty_fdes: usize,
    rows: usize,
    pcs: usize,
    /// gimli's rows of no bytes (dropped) and rows past the FDE's end
    /// (clipped or dropped).
    empty_rows: usize,
    clipped_rows: usize,
    /// Rows with the return address signed.
    signed_rows: usize,
    /// Rows where stackmark reads `DW_CFA_undefined` for the return address.
    ra_undefined_rows: usize,
    /// Rows of CIEs whose return address column is not the usual one.
    other_ra_column_rows: usize,
    /// Rows the walker can take, and those it cannot, by reason.
    taken: usize,
    untaken: BTreeMap<&'static str, usize>,
    /// Pcs looked up both through the index and by a linear search.
    linear_pcs: usize,
    /// Pcs whose row `Cfi::quick_row` gives.
    quick_pcs: usize,
}

#[test]
fn every_row_of_real_sections_matches_gimli() {
    let mut all = Vec::new();
    for path in X86_64_LIBS {
        all.push(check_file(Path::new(path), X86_64, None));
    }
    for path in AARCH64_LIBS {
        all.push(check_file(Path::new(path), AARCH64, None));
    }
    let exe = std::env::current_exe().unwrap();
    all.push(check_file(&exe, X86_64, None));
    for (key, b_key) in [("pac-ret+leaf", false), ("pac-ret+leaf+b-key", true)] {
        let dir = common::workdir(&format!("cfi-{key}"));
        let prog = build_aarch64(&dir, key);
        let oracle = b_key.then(|| {
            let file = std::fs::read(&prog).unwrap();
            common::replace_all(&file, b"zRB\0", b"zRS\0")
        });
        let c = check_file(&prog, AARCH64, oracle.as_deref());
        assert!(c.signed_rows > 10, "{key}: {c:?}");
        all.push(c);
        let _ = std::fs::remove_dir_all(&dir);
    }

    let (libc, ld, libgcc, libstdcxx) = (&all[0], &all[1], &all[2], &all[3]);
    let (a_libc, a_ld, a_libgcc, a_libstdcxx) = (&all[4], &all[5], &all[6], &all[7]);
    // Enough that the test cannot pass on nothing.
    assert!(
        libc.fdes > 1000 && a_libc.fdes > 1000,
        "{libc:?} {a_libc:?}"
    );
    assert!(libstdcxx.fdes > 1000 && a_libstdcxx.fdes > 1000);
    assert!(ld.fdes > 100 && a_ld.fdes > 100 && libgcc.fdes > 50 && a_libgcc.fdes > 50);
    assert!(all[8].fdes > 1000, "this test's executable: {:?}", all[8]);
    for c in &all {
        assert!(
            c.rows > c.fdes && c.linear_pcs > 5 * c.fdes.min(100),
            "{c:?}"
        );
        assert!(c.quick_pcs > 0, "{c:?}");
    }
    // On x86_64 nearly every row has the quick shape; on AArch64 the rows
    // before the link register is saved do not.
    for c in &all[..4] {
        assert!(c.quick_pcs * 100 > c.pcs * 99, "{c:?}");
    }
    for c in &all[4..8] {
        assert!(c.quick_pcs * 2 > c.pcs, "{c:?}");
    }
    // x86_64 glibc's signal trampoline (__restore_rt) is a signal frame
    // (AArch64's is in the vDSO).
    assert!(libc.untaken.get("signal frame") > Some(&0), "{libc:?}");
    // _start ends the stack.
    assert!(libc.ra_undefined_rows > 0 && a_libc.ra_undefined_rows > 0);
    // AArch64 glibc's rawmemchr keeps its return address in x15.
    assert!(a_libc.other_ra_column_rows > 0, "{a_libc:?}");
}

/// Compares every FDE of `path`'s `.eh_frame` with gimli, which reads
/// `oracle` (the same file with its `.eh_frame` patched) where given.
fn check_file(path: &Path, arch: Arch, oracle: Option<&[u8]>) -> Counts {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let label = format!(
        "{name} ({})",
        if arch.aarch64 { "aarch64" } else { "x86_64" }
    );
    let file = std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: the x86_64 libraries come with Debian, the AArch64 ones with \
             libc6-dev-arm64-cross, libgcc-s1-arm64-cross and libstdc++6-arm64-cross \
             (scripts/test.sh installs them)",
            path.display()
        )
    });
    let obj = object::File::parse(&*file).unwrap();
    let want_arch = if arch.aarch64 {
        object::Architecture::Aarch64
    } else {
        object::Architecture::X86_64
    };
    assert_eq!(obj.architecture(), want_arch, "{label}");
    let section = |name: &str| {
        let s = obj
            .section_by_name(name)
            .unwrap_or_else(|| panic!("{label}: no {name}"));
        (s.data().unwrap(), s.address())
    };
    let (hdr, hdr_addr) = section(".eh_frame_hdr");
    let (eh_frame, eh_addr) = section(".eh_frame");
    let text_addr = obj.section_by_name(".text").map_or(0, |s| s.address());
    let oracle_obj = oracle.map(|o| object::File::parse(o).unwrap());
    let oracle_eh = match &oracle_obj {
        Some(o) => o.section_by_name(".eh_frame").unwrap().data().unwrap(),
        None => eh_frame,
    };
    assert_eq!(oracle_eh.len(), eh_frame.len());

    let cfi = Cfi::new(hdr, hdr_addr, eh_frame, arch.regs).unwrap();
    assert_eq!(cfi.eh_frame_addr(), eh_addr, "{label}");
    let linear = Cfi::without_index(eh_frame, eh_addr, arch.regs);
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_addr)
        .set_eh_frame(eh_addr)
        .set_text(text_addr);
    compare_index(&cfi, hdr, &bases, &label);

    let mut eh = EhFrame::new(oracle_eh, LittleEndian);
    eh.set_address_size(8);
    if arch.aarch64 {
        eh.set_vendor(gimli::Vendor::AArch64);
    }
    let mut ctx = UnwindContext::new();
    let mut counts = Counts::default();
    let mut ranges = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Some(entry) = entries.next().unwrap() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial
            .parse(|s, b, o| s.cie_from_offset(b, o))
            .unwrap_or_else(|e| panic!("{label}: gimli: {e}"));
        counts.fdes += 1;
        ranges.push((fde.initial_address(), fde.len()));
        compare_fde(
            &cfi,
            &eh,
            &bases,
            &fde,
            arch,
            oracle.is_some(),
            &mut ctx,
            &mut counts,
        )
        .unwrap_or_else(|e| panic!("{label}: FDE at {:#x}: {e}", fde.offset()));
    }
    compare_linear(&cfi, &linear, &ranges, &mut counts, &label);

    let untaken: Vec<String> = counts
        .untaken
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    eprintln!(
        "cfi conformance: {label}: {} FDEs ({} empty), {} rows, {} pcs, {} by linear search; \
         the walker takes {} rows, not {} [{}]; {} rows signed, {} with RA undefined, \
         {} with RA in another column, {} pcs with a quick row; gimli's empty rows dropped: {}, \
         rows clipped at the FDE's end: {}",
        counts.fdes,
        counts.empty_fdes,
        counts.rows,
        counts.pcs,
        counts.linear_pcs,
        counts.taken,
        counts.untaken.values().sum::<usize>(),
        untaken.join(", "),
        counts.signed_rows,
        counts.ra_undefined_rows,
        counts.other_ra_column_rows,
        counts.quick_pcs,
        counts.empty_rows,
        counts.clipped_rows,
    );
    counts
}

/// The index's every entry is gimli's.
fn compare_index(cfi: &Cfi<'_>, hdr: &[u8], bases: &BaseAddresses, label: &str) {
    let parsed = gimli::EhFrameHdr::new(hdr, LittleEndian)
        .parse(bases, 8)
        .unwrap();
    assert_eq!(
        parsed.eh_frame_ptr().direct().unwrap(),
        cfi.eh_frame_addr(),
        "{label}"
    );
    let table = parsed.table().expect("a search table");
    let index = cfi.index().expect("an index");
    let mut iter = table.iter(bases);
    let mut i = 0;
    while let Some((loc, fde)) = iter.next().unwrap() {
        let want = (loc.direct().unwrap(), fde.direct().unwrap());
        assert_eq!(index.entry(i), Some(want), "{label}: entry {i}");
        i += 1;
    }
    assert_eq!(index.len(), i, "{label}");
    assert!(index.entry(i).is_none());
}

/// One gimli row, as the comparison needs it.
#[derive(Clone, Debug)]
struct GRow {
    start: u64,
    end: u64,
    cfa: GCfa<usize>,
    ra: GRule,
    fp: GRule,
    signed: bool,
}

#[allow(clippy::too_many_arguments)]
fn compare_fde(
    cfi: &Cfi<'_>,
    eh: &EhFrame<Slice<'_>>,
    bases: &BaseAddresses,
    fde: &gimli::FrameDescriptionEntry<Slice<'_>>,
    arch: Arch,
    b_key_as_signal: bool,
    ctx: &mut UnwindContext<usize>,
    counts: &mut Counts,
) -> Result<(), String> {
    let (begin, len) = (fde.initial_address(), fde.len());
    let end = begin + len;
    let gcie = fde.cie();
    let ra = gcie.return_address_register().0;
    // Registers some instruction of the CIE or FDE makes undefined.
    let mut undefined = BTreeSet::new();
    for mut insns in [gcie.instructions(eh, bases), fde.instructions(eh, bases)] {
        while let Some(i) = insns.next().map_err(|e| format!("gimli: {e}"))? {
            if let CallFrameInstruction::Undefined { register } = i {
                undefined.insert(register.0);
            }
        }
    }
    // gimli's rows, empty ones dropped and all clipped to the FDE.
    let mut grows = Vec::new();
    let mut table = fde
        .rows(eh, bases, ctx)
        .map_err(|e| format!("gimli: {e}"))?;
    while let Some(r) = table.next_row().map_err(|e| format!("gimli: {e}"))? {
        let (start, row_end) = (r.start_address(), r.end_address());
        if start >= row_end || start >= end {
            counts.empty_rows += usize::from(start == row_end);
            counts.clipped_rows += usize::from(start != row_end);
            continue;
        }
        counts.clipped_rows += usize::from(row_end > end);
        let sign_state = r.register(gimli::AArch64::RA_SIGN_STATE);
        let signed = match sign_state {
            RegisterRule::Undefined | RegisterRule::Constant(0) => false,
            RegisterRule::Constant(1) => true,
            other => return Err(format!("RA sign state {other:?}")),
        };
        grows.push(GRow {
            start,
            end: row_end.min(end),
            cfa: r.cfa().clone(),
            ra: r.register(Register(ra)),
            fp: r.register(Register(arch.regs.fp)),
            // On x86_64 register 34 is a floating-point register.
            signed: arch.aarch64 && signed,
        });
    }
    if len == 0 {
        counts.empty_fdes += 1;
        return match cfi.find_row(begin) {
            Ok(Some((f, ..))) if f.offset == fde.offset() => {
                Err("an empty FDE covers its start".into())
            }
            _ => Ok(()),
        };
    }

    // The FDE the index finds at its start, and all its rows.
    let (sfde, scie) = cfi
        .find_fde(begin)
        .map_err(|e| format!("find_fde: {e}"))?
        .ok_or("find_fde found nothing at the start")?;
    if (sfde.offset, sfde.pc_begin, sfde.pc_range) != (fde.offset(), begin, len) {
        return Err(format!("find_fde found {sfde:?}"));
    }
    let signal = if b_key_as_signal {
        if scie.b_key != gcie.is_signal_trampoline() {
            return Err(format!("B augmentation: {scie:?}"));
        }
        false
    } else {
        if scie.b_key {
            return Err(format!("B augmentation gimli does not see: {scie:?}"));
        }
        gcie.is_signal_trampoline()
    };
    if scie.signal_frame != signal || scie.ra_register != ra {
        return Err(format!("CIE {scie:?}"));
    }
    let mut srows = Vec::new();
    for_each_row(
        cfi.eh_frame(),
        &scie,
        &sfde,
        arch.regs.fp,
        &cfi.bases(),
        |r| {
            srows.push(*r);
            true
        },
    )
    .map_err(|e| format!("for_each_row: {e}"))?;
    if srows.len() != grows.len() {
        return Err(format!("rows: stackmark {srows:#x?}\ngimli {grows:#x?}"));
    }
    for (s, g) in srows.iter().zip(&grows) {
        same_row(s, g, ra, arch.regs.fp, &undefined)?;
    }

    for g in &grows {
        counts.rows += 1;
        counts.signed_rows += usize::from(g.signed);
        counts.other_ra_column_rows += usize::from(ra != arch.regs.ra);
        let last = g.end - 1;
        for pc in [g.start, last]
            .into_iter()
            .take(if last == g.start { 1 } else { 2 })
        {
            counts.pcs += 1;
            let (f, c, s) = cfi
                .find_row(pc)
                .map_err(|e| format!("find_row({pc:#x}): {e}"))?
                .ok_or_else(|| format!("find_row({pc:#x}) found nothing"))?;
            if (f, c) != (sfde, scie) {
                return Err(format!("find_row({pc:#x}) found {f:?}"));
            }
            same_row(&s, g, ra, arch.regs.fp, &undefined)
                .map_err(|e| format!("at {pc:#x}: {e}"))?;
            let want = walker_row(begin, len, signal, ra, g, &s, arch.regs);
            let got = cfi.unwind_row(pc).map_err(|e| e.name());
            if got != want.map(Some) {
                return Err(format!("unwind_row({pc:#x}) = {got:?}, want {want:?}"));
            }
            // The quick row is that row in brief, wherever it has the shape.
            let quick = cfi.quick_row(pc);
            let brief = got.ok().flatten().and_then(|r| QuickRow::of(&r));
            if quick != brief {
                return Err(format!("quick_row({pc:#x}) = {quick:?}, want {brief:?}"));
            }
            counts.quick_pcs += usize::from(quick.is_some());
            if pc == g.start {
                match got {
                    Ok(_) => counts.taken += 1,
                    Err(why) => *counts.untaken.entry(why).or_default() += 1,
                }
                counts.ra_undefined_rows += usize::from(s.ra == Rule::Undefined);
            }
        }
    }
    Ok(())
}

/// Whether stackmark's row `s` is gimli's `g`.
fn same_row(
    s: &CfiRow,
    g: &GRow,
    ra: u16,
    fp: u16,
    undefined: &BTreeSet<u16>,
) -> Result<(), String> {
    let cfa_same = match (&s.cfa, &g.cfa) {
        (
            Cfa::RegOffset { reg, offset },
            GCfa::RegisterAndOffset {
                register,
                offset: o,
            },
        ) => *reg == register.0 && offset == o,
        (Cfa::Expression, GCfa::Expression(_)) => true,
        _ => false,
    };
    let ok = (s.start, s.end) == (g.start, g.end)
        && cfa_same
        && same_rule(s.ra, &g.ra, ra, undefined)
        && same_rule(s.fp, &g.fp, fp, undefined)
        && s.ra_signed == g.signed;
    if ok {
        Ok(())
    } else {
        Err(format!("stackmark {s:#x?}\ngimli {g:#x?}"))
    }
}

/// Whether stackmark's rule for `reg` is gimli's. gimli reads both "no
/// rule" and `DW_CFA_undefined` as `Undefined`; stackmark's `Undefined`
/// must come from a `DW_CFA_undefined` of the register.
fn same_rule(s: Rule, g: &GRule, reg: u16, undefined: &BTreeSet<u16>) -> bool {
    match (s, g) {
        (Rule::Unspecified, RegisterRule::Undefined) => true,
        (Rule::Undefined, RegisterRule::Undefined) => undefined.contains(&reg),
        (Rule::SameValue, RegisterRule::SameValue) => true,
        (Rule::Offset(a), RegisterRule::Offset(b)) => a == *b,
        (Rule::ValOffset(a), RegisterRule::ValOffset(b)) => a == *b,
        (Rule::Register(a), RegisterRule::Register(b)) => a == b.0,
        (Rule::Expression, RegisterRule::Expression(_)) => true,
        (Rule::ValExpression, RegisterRule::ValExpression(_)) => true,
        _ => false,
    }
}

/// The walker's row for gimli's row `g` of the FDE `[begin, begin + len)`
/// (return address column `ra`), or the name of the reason it cannot take
/// it, as `Cfi::unwind_row` documents them: a signal frame first, then the
/// CFA, the return address, the frame pointer and the function's size. `s`
/// (stackmark's row, checked against `g` already) only tells an
/// unspecified rule from an undefined one, which gimli does not.
fn walker_row(
    begin: u64,
    len: u64,
    signal: bool,
    ra: u16,
    g: &GRow,
    s: &CfiRow,
    regs: Registers,
) -> Result<Row, &'static str> {
    if signal {
        return Err("signal frame");
    }
    let off32 = |o: i64| i32::try_from(o).map_err(|_| "offset too large");
    let cfa = match g.cfa {
        GCfa::Expression(_) => return Err("CFA expression"),
        GCfa::RegisterAndOffset { register, offset } => {
            let offset = off32(offset)?;
            match register.0 {
                r if r == regs.sp => CfaRule::SpPlus(offset),
                r if r == regs.fp => CfaRule::FpPlus(offset),
                reg => CfaRule::RegPlus { reg, offset },
            }
        }
    };
    // No rule is "unchanged": for the frame pointer a callee-saved
    // register, for AArch64's return address the link register, or the
    // register the CIE keeps it in.
    let rule = |g: &GRule, s: Rule, bad: &'static str| -> Result<RegRule, &'static str> {
        Ok(match g {
            RegisterRule::Undefined if s == Rule::Undefined => RegRule::Undefined,
            RegisterRule::Undefined | RegisterRule::SameValue if bad == RA && ra != regs.ra => {
                RegRule::RegPlus { reg: ra, offset: 0 }
            }
            RegisterRule::Undefined | RegisterRule::SameValue => RegRule::SameValue,
            RegisterRule::Offset(o) => RegRule::AtCfa(off32(*o)?),
            RegisterRule::Register(r) => RegRule::RegPlus {
                reg: r.0,
                offset: 0,
            },
            RegisterRule::ValOffset(_)
            | RegisterRule::Expression(_)
            | RegisterRule::ValExpression(_) => return Err(bad),
            other => panic!("gimli rule {other:?} for a real register"),
        })
    };
    let ra = rule(&g.ra, s.ra, RA)?;
    let fp = rule(&g.fp, s.fp, "frame pointer rule")?;
    Ok(Row {
        func_start: begin,
        func_size: u32::try_from(len).map_err(|_| "function too large")?,
        row_start: g.start,
        cfa,
        ra,
        fp,
        mangled_ra: g.signed,
        signal_frame: false,
    })
}

const RA: &str = "return address rule";

/// A linear search finds what the index finds, at the edges and middle of
/// a sample of FDEs and around them.
fn compare_linear(
    cfi: &Cfi<'_>,
    linear: &Cfi<'_>,
    ranges: &[(u64, u64)],
    counts: &mut Counts,
    label: &str,
) {
    let step = (ranges.len() / 100).max(1);
    let mut pcs = vec![0, u64::MAX];
    for &(begin, len) in ranges.iter().step_by(step) {
        pcs.extend([
            begin.wrapping_sub(1),
            begin,
            begin + len / 2,
            (begin + len).saturating_sub(1),
            begin + len,
        ]);
    }
    let mut found = 0;
    for pc in pcs {
        let indexed = cfi.find_row(pc);
        assert_eq!(indexed, linear.find_row(pc), "{label}: at {pc:#x}");
        assert_eq!(
            cfi.unwind_row(pc),
            linear.unwind_row(pc),
            "{label}: at {pc:#x}"
        );
        found += usize::from(matches!(indexed, Ok(Some(_))));
        counts.linear_pcs += 1;
    }
    assert!(found * 2 > counts.linear_pcs, "{label}: {found}");
    assert_eq!(cfi.find_row(0), Ok(None), "{label}");
}

/// A small AArch64 program built by gcc with `-mbranch-protection=KEY`:
/// calls, recursion, a leaf, a variable-sized frame.
fn build_aarch64(dir: &Path, key: &str) -> PathBuf {
    let src = dir.join("prog.c");
    std::fs::write(&src, C_PROGRAM).unwrap();
    let exe = dir.join(format!("prog-{key}"));
    common::run(
        Command::new("aarch64-linux-gnu-gcc")
            .args(["-O2", &format!("-mbranch-protection={key}")])
            .arg("-o")
            .arg(&exe)
            .arg(&src),
    );
    exe
}

const C_PROGRAM: &str = r#"
#include <stdlib.h>
#include <string.h>
#define NOINLINE __attribute__((noinline))
volatile long sink_v;
NOINLINE void sink(long v) { sink_v += v; }
NOINLINE long leaf(long n) { return n * 3 + 1; }
NOINLINE long fib(long n) { return n < 2 ? leaf(n) : fib(n - 1) + fib(n - 2) * 3; }
NOINLINE long vla(int n) {
  char buf[n];
  memset(buf, n, n);
  sink(buf[n / 2]);
  return buf[0];
}
NOINLINE long big(int i) {
  volatile char buf[5000];
  buf[i] = 1;
  sink(buf[i / 2]);
  return buf[3];
}
int main(int argc, char **argv) {
  (void)argv;
  long r = fib(argc + 10) + vla(argc + 20) + big(argc);
  return (int)(r & 1);
}
"#;
