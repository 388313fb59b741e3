//! Sections from live producers, built on the spot, checked against the
//! `.eh_frame` CFI of the same binary (read with gimli, a test-only oracle):
//!
//! * gcc `-O2 -fomit-frame-pointer -Wa,--gsframe`, linked by GNU ld: SFrame
//!   version 1 in `PT_GNU_SFRAME`, for x86_64 and (aarch64-linux-gnu-gcc)
//!   for AArch64, plain and with PAC-signed return addresses;
//! * rustc `-C llvm-args=--gsframe`, linked by rust-lld with the crate's
//!   linker script: version 2 with PCREL start addresses, one piece per
//!   object, concatenated.
//!
//! For every function with an SFrame FDE, the SFrame row at every
//! instruction boundary must give the CFA, RA and FP rules (and the signed-RA
//! state) that the CFI gives there. Where the installed binutils reads the
//! section, `sframe_dump FILE` must also print what `objdump --sframe` does.

use crate::common;
use crate::sframe_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gimli::{
    BaseAddresses, CfaRule as GCfa, EhFrame, EhFrameHdr, EndianSlice, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection,
};
use object::{Object, ObjectSection};
use sframe_support::{function_lines, quick_row_oracle, run_dump, scratch};
use stackmark::formats::elf::{ElfFile, PT_GNU_SFRAME};
use stackmark::formats::sframe::{Abi, CfaRule, PieceEntry, RegRule, Row, SFrame};

/// The C program: recursion, VLAs and alloca (CFA on the frame pointer),
/// frames needing 2- and 4-byte offsets, many callee-saved registers, a
/// function over 256 bytes and one over 64 KiB (2- and 4-byte FRE start
/// addresses), a noreturn function and calls through the PLT.
const C_PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <alloca.h>

#define NOINLINE __attribute__((noinline))
volatile long sink_v;
NOINLINE void sink(long v) { sink_v += v; }

NOINLINE long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) * 3; }

NOINLINE long vla(int n) {
  char buf[n];
  memset(buf, n, n);
  sink(buf[n / 2]);
  return buf[0];
}

NOINLINE long with_alloca(int n) {
  char *p = alloca(n);
  memset(p, 1, n);
  sink(p[n - 1]);
  return p[0];
}

NOINLINE long medium_frame(int i) {
  volatile char buf[1000];
  buf[i] = 1;
  sink(buf[i / 2]);
  return buf[3];
}

NOINLINE long huge_frame(int i) {
  volatile char buf[100000];
  buf[i] = 1;
  sink(buf[i / 2]);
  return buf[7];
}

NOINLINE long many_regs(long a, long b, long c, long d, long e, long f) {
  long x = a * b, y = c * d, z = e * f, w = a + f, u = b + e, t = c + d;
  sink(x); sink(y); sink(z);
  return x + y + z + w + u + t + fib(a & 7);
}

#define R2(x) x x
#define R4(x) R2(R2(x))
#define R16(x) R4(R4(x))
#define R256(x) R16(R16(x))
NOINLINE long long_function(long v) {
  R16(sink(v++); v = v * 7 + 3;)
  return fib(v & 3);
}

NOINLINE long very_long_function(long v) {
  R4(R4(R2(R256(sink(v++);))))
  return fib(v & 3);
}

NOINLINE __attribute__((noreturn)) void die(const char *why) {
  fputs(why, stderr);
  abort();
}

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], 0, 10) : 5;
  if (n < 0)
    die("negative\n");
  long r = fib(n) + vla(n + 8) + with_alloca(n + 16) + medium_frame(n) + huge_frame(n);
  r += many_regs(n, n + 1, n + 2, n + 3, n + 4, n + 5) + long_function(n) + very_long_function(n);
  printf("%ld\n", r);
  puts("done");
  return 0;
}
"#;

/// The Rust program: recursion, large frames (LLVM leaves out functions
/// whose stack probes move the CFA off SP), and enough code in several
/// codegen units for several objects.
const RUST_PROGRAM: &str = r#"
use std::hint::black_box;

mod numbers {
    #[inline(never)]
    pub fn fib(n: u64) -> u64 {
        if n < 2 { n } else { fib(n - 1).wrapping_add(fib(n - 2).wrapping_mul(3)) }
    }

    #[inline(never)]
    pub fn big_frame(i: usize) -> u8 {
        let mut buf = [0u8; 100_000];
        buf[i % 100_000] = i as u8;
        std::hint::black_box(&mut buf);
        buf[(i * 7) % 100_000]
    }
}

mod text {
    #[inline(never)]
    pub fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(|w| w.to_uppercase()).collect()
    }

    #[inline(never)]
    pub fn medium_frame(i: usize) -> u32 {
        let mut buf = [0u32; 300];
        buf[i % 300] = i as u32;
        std::hint::black_box(&mut buf);
        buf.iter().copied().fold(0, u32::wrapping_add)
    }
}

fn main() {
    let n = std::env::args().count() as u64;
    let w = text::words(black_box("a quick brown fox"));
    let r = numbers::fib(black_box(n + 10)) as usize + numbers::big_frame(n as usize) as usize;
    let m = text::medium_frame(n as usize) as usize;
    println!("{} {} {}", w.len(), r, m);
}
"#;

fn build_c(dir: &Path, compiler: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join("prog.c");
    std::fs::write(&src, C_PROGRAM).unwrap();
    let exe = dir.join("prog");
    common::run(
        Command::new(compiler)
            .args(["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"])
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .arg(&src),
    );
    exe
}

/// The registers the comparison needs, as DWARF numbers.
struct Arch {
    sp: gimli::Register,
    fp: gimli::Register,
    ra: gimli::Register,
    pc: gimli::Register,
}

fn arch(abi: Abi) -> Arch {
    match abi {
        Abi::Amd64LittleEndian => Arch {
            sp: gimli::X86_64::RSP,
            fp: gimli::X86_64::RBP,
            ra: gimli::X86_64::RA,
            pc: gimli::X86_64::RA,
        },
        _ => Arch {
            sp: gimli::AArch64::SP,
            fp: gimli::AArch64::X29,
            ra: gimli::AArch64::X30,
            pc: gimli::Register(32),
        },
    }
}

/// Instruction addresses in `[lo, hi)`: from objdump on x86_64, every 4
/// bytes on AArch64.
fn instruction_boundaries(exe: &Path, abi: Abi, lo: u64, hi: u64) -> BTreeSet<u64> {
    if abi != Abi::Amd64LittleEndian {
        return (lo..hi).step_by(4).collect();
    }
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--start-address={lo:#x}"))
        .arg(format!("--stop-address={hi:#x}"))
        .arg(exe)
        .output()
        .expect("run objdump");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.trim_start().split_once(":\t")?;
            (!rest.is_empty()).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .collect()
}

/// The CFA a row gives with `sp` and `fp` holding these values.
fn sframe_cfa(row: &Row, sp: u64, fp: u64) -> Option<u64> {
    match row.cfa {
        CfaRule::SpPlus(o) => sp.checked_add_signed(o.into()),
        CfaRule::FpPlus(o) => fp.checked_add_signed(o.into()),
        _ => None,
    }
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// The `.eh_frame` side of a binary.
struct Cfi<'a> {
    eh_frame: EhFrame<Slice<'a>>,
    bases: BaseAddresses,
    hdr: gimli::ParsedEhFrameHdr<Slice<'a>>,
}

impl<'a> Cfi<'a> {
    fn new(file: &'a [u8], abi: Abi) -> Cfi<'a> {
        let obj = object::File::parse(file).unwrap();
        let section = |name| {
            let s = obj
                .section_by_name(name)
                .unwrap_or_else(|| panic!("no {name}"));
            (s.address(), s.data().unwrap())
        };
        let (eh_addr, eh_data) = section(".eh_frame");
        let (hdr_addr, hdr_data) = section(".eh_frame_hdr");
        let text_addr = obj.section_by_name(".text").unwrap().address();
        let mut eh_frame = EhFrame::new(eh_data, LittleEndian);
        eh_frame.set_address_size(8);
        if abi != Abi::Amd64LittleEndian {
            eh_frame.set_vendor(gimli::Vendor::AArch64);
        }
        let bases = BaseAddresses::default()
            .set_eh_frame(eh_addr)
            .set_eh_frame_hdr(hdr_addr)
            .set_text(text_addr);
        let hdr = EhFrameHdr::new(hdr_data, LittleEndian)
            .parse(&bases, 8)
            .unwrap();
        Cfi {
            eh_frame,
            bases,
            hdr,
        }
    }
}

/// What one comparison covered.
#[derive(Default, Debug)]
struct Tally {
    functions: usize,
    pcs: usize,
    pc_mask: usize,
    expressions: usize,
    fp_based: usize,
    fp_saved: usize,
    ra_saved: usize,
    mangled: usize,
    addr_sizes: BTreeSet<u8>,
    word_sizes: BTreeSet<u8>,
}

/// Checks every SFrame function of `sframe` against the CFI in `file`, at
/// every instruction boundary.
fn compare_with_cfi(exe: &Path, file: &[u8], sframe: &SFrame<'_>) -> Tally {
    // Every FDE of every piece starts at a function symbol.
    let starts = sframe_support::fde_starts(exe).expect("SFrame");
    assert!(
        starts.fdes > 0 && starts.off_symbol.is_empty(),
        "{exe:?}: {starts:x?}"
    );
    let abi = sframe.abi();
    let regs = arch(abi);
    let cfi = Cfi::new(file, abi);
    let table = cfi.hdr.table().expect(".eh_frame_hdr has a search table");
    let (lo, hi) = sframe.pc_range().expect("functions");
    // Every byte of the span, in a function or between functions: found
    // exactly where a function covers it.
    let spans: Vec<(u64, u64)> = sframe
        .functions()
        .map(|f| (f.fde.start, f.fde.start + u64::from(f.fde.size)))
        .collect();
    for pc in lo - 16..hi + 16 {
        let covered = spans.iter().any(|&(s, e)| s <= pc && pc < e);
        assert_eq!(sframe.find_function(pc).is_some(), covered, "at {pc:#x}");
    }
    let boundaries = instruction_boundaries(exe, abi, lo, hi);
    let mut ctx = UnwindContext::new();
    let mut tally = Tally::default();
    for f in sframe.functions() {
        let (start, end) = (f.fde.start, f.fde.start + u64::from(f.fde.size));
        tally.functions += 1;
        tally.pc_mask += usize::from(f.fde.pc_mask);
        tally.addr_sizes.insert(f.fde.addr_size);
        for fre in f.fres() {
            tally.word_sizes.insert(fre.word_size);
        }
        let fde = table
            .fde_for_address(&cfi.eh_frame, &cfi.bases, start, EhFrame::cie_from_offset)
            .unwrap_or_else(|e| panic!("no CFI for the SFrame function at {start:#x}: {e}"));
        assert!(
            fde.initial_address() <= start && end <= fde.end_address(),
            "the SFrame function {start:#x}..{end:#x} is not inside its CFI FDE"
        );
        let mut rows = Vec::new();
        let mut iter = fde.rows(&cfi.eh_frame, &cfi.bases, &mut ctx).unwrap();
        while let Some(r) = iter.next_row().unwrap() {
            rows.push(r.clone());
        }
        for &pc in boundaries.range(start..end) {
            let cfi_row = rows
                .iter()
                .find(|r| r.contains(pc))
                .unwrap_or_else(|| panic!("no CFI row at {pc:#x}"));
            let row = sframe
                .find_row(pc)
                .unwrap_or_else(|| panic!("no SFrame row at {pc:#x}"));
            assert_eq!((row.func_start, row.func_size), (start, f.fde.size));
            let at = format!("at {pc:#x} (function {start:#x}): {row:?} vs {cfi_row:?}");

            // CFA: the same register and offset, or the same value as the
            // CFI expression (PLT entries) for sample register values.
            let (sp, fp) = (0x7ffd_0000_1000u64, 0x7ffd_0000_8000u64);
            match cfi_row.cfa() {
                GCfa::RegisterAndOffset { register, offset } => {
                    let want = match row.cfa {
                        CfaRule::SpPlus(o) => (regs.sp, o),
                        CfaRule::FpPlus(o) => (regs.fp, o),
                        CfaRule::RegPlus { reg, offset } => (gimli::Register(reg), offset),
                        CfaRule::AtRegPlus { .. } => panic!("a load where CFI has none {at}"),
                    };
                    assert_eq!(
                        (*register, *offset),
                        (want.0, i64::from(want.1)),
                        "CFA {at}"
                    );
                    tally.fp_based += usize::from(*register == regs.fp);
                }
                GCfa::Expression(e) => {
                    let expr = e.get(&cfi.eh_frame).unwrap();
                    let encoding = gimli::Encoding {
                        format: gimli::Format::Dwarf32,
                        version: 4,
                        address_size: 8,
                    };
                    let mut eval = expr.evaluation(encoding);
                    let mut state = eval.evaluate().unwrap();
                    while let gimli::EvaluationResult::RequiresRegister { register, .. } = state {
                        let value = match register {
                            r if r == regs.sp => sp,
                            r if r == regs.fp => fp,
                            r if r == regs.pc => pc,
                            r => panic!("CFA expression reads register {r:?} {at}"),
                        };
                        state = eval
                            .resume_with_register(gimli::Value::Generic(value))
                            .unwrap();
                    }
                    assert!(matches!(state, gimli::EvaluationResult::Complete), "{at}");
                    let cfa = match eval.result()[0].location {
                        gimli::Location::Address { address } => address,
                        ref l => panic!("CFA expression gives {l:?} {at}"),
                    };
                    assert_eq!(sframe_cfa(&row, sp, fp), Some(cfa), "CFA value {at}");
                    tally.expressions += 1;
                }
            }

            // RA and FP: saved at the same CFA offset, or not saved at all.
            let saved = |rule: RegisterRule<usize>| match rule {
                RegisterRule::Offset(o) => RegRule::AtCfa(o as i32),
                RegisterRule::Undefined | RegisterRule::SameValue => RegRule::SameValue,
                other => panic!("CFI rule {other:?} {at}"),
            };
            assert_eq!(row.ra, saved(cfi_row.register(regs.ra)), "RA {at}");
            assert_eq!(row.fp, saved(cfi_row.register(regs.fp)), "FP {at}");
            if abi == Abi::Aarch64LittleEndian {
                let signed = matches!(
                    cfi_row.register(gimli::AArch64::RA_SIGN_STATE),
                    RegisterRule::Constant(1)
                );
                assert_eq!(row.mangled_ra, signed, "signed RA {at}");
                tally.mangled += usize::from(signed);
                tally.ra_saved += usize::from(matches!(row.ra, RegRule::AtCfa(_)));
            }
            tally.fp_saved += usize::from(matches!(row.fp, RegRule::AtCfa(_)));
            tally.pcs += 1;
        }
    }
    tally
}

/// `sframe_dump FILE` (ELF mode) prints what the installed objdump prints
/// for the same file, from the first function on.
fn assert_dump_matches_objdump(exe: &Path, objdump: &str) {
    let (ok, ours, err) = run_dump(&[exe.as_os_str()]);
    assert!(ok, "sframe_dump failed: {err}");
    let out = Command::new(objdump)
        .arg("--sframe")
        .arg(exe)
        .output()
        .expect("run objdump");
    assert!(out.status.success());
    let theirs = String::from_utf8_lossy(&out.stdout);
    let (ours, theirs) = (function_lines(&ours), function_lines(&theirs));
    assert!(theirs.len() > 40, "{objdump} printed {theirs:?}");
    assert_eq!(ours, theirs, "sframe_dump and {objdump} differ");
}

/// The `PT_GNU_SFRAME` segment of a GNU ld output, parsed.
fn gnu_sframe(file: &[u8]) -> SFrame<'_> {
    let elf = ElfFile::parse(file).unwrap();
    let ph = elf
        .program_headers()
        .find(|p| p.p_type == PT_GNU_SFRAME)
        .expect("GNU ld makes PT_GNU_SFRAME");
    let data = &file[ph.offset as usize..(ph.offset + ph.filesz) as usize];
    SFrame::parse(data, ph.vaddr).unwrap()
}

/// Through an index of its FDEs by address, with buckets as small as
/// `fde_index_len` asks for and with fewer, larger ones, every pc of a GNU
/// ld output finds the function and row it finds without; and the size
/// read from the bytes alone is enough. How many pcs found a row.
fn fde_index_agrees(file: &[u8]) -> usize {
    let elf = ElfFile::parse(file).unwrap();
    let ph = elf
        .program_headers()
        .find(|p| p.p_type == PT_GNU_SFRAME)
        .unwrap();
    let data = &file[ph.offset as usize..(ph.offset + ph.filesz) as usize];
    let sframe = SFrame::parse(data, ph.vaddr).unwrap();
    let len = sframe.fde_index_len();
    assert!(len > 1, "{len}");
    assert!(SFrame::fde_index_len_of(data, ph.vaddr) >= len);
    let (lo, hi) = sframe.pc_range().unwrap();
    let mut found = 0;
    let expected_quick_row = quick_row_oracle(&sframe);
    for slots in [len, len / 3, 2] {
        let mut memory = vec![0; slots.max(2)];
        let indexed = sframe.with_fde_index(&mut memory);
        assert!(indexed.is_fde_indexed());
        found = 0;
        for pc in lo - 16..hi + 16 {
            let row = indexed.find_row(pc);
            assert_eq!(row, sframe.find_row(pc), "at {pc:#x} with {slots} slots");
            assert_eq!(
                indexed.quick_row(pc),
                expected_quick_row(pc),
                "at {pc:#x} with {slots} slots"
            );
            let fde = indexed.find_function(pc).map(|f| f.fde);
            assert_eq!(
                fde,
                sframe.find_function(pc).map(|f| f.fde),
                "at {pc:#x} with {slots} slots"
            );
            // Decoded for the lookup as `functions()` decodes it, with
            // every check of validation.
            if let Some(fde) = fde {
                let listed = sframe.functions().find(|f| f.fde.at == fde.at);
                assert_eq!(Some(fde), listed.map(|f| f.fde), "at {pc:#x}");
            }
            found += usize::from(row.is_some());
        }
    }
    found
}

#[test]
fn gcc_and_gnu_ld_on_x86_64_give_version_1_matching_the_cfi() {
    let dir = scratch("gcc-x86_64");
    let exe = build_c(&dir, "gcc", &[]);
    let file = std::fs::read(&exe).unwrap();
    let sframe = gnu_sframe(&file);
    assert_eq!(
        (sframe.abi(), sframe.version(), sframe.piece_count()),
        (Abi::Amd64LittleEndian, 1, 1)
    );
    assert!(sframe.header().sorted());
    let t = compare_with_cfi(&exe, &file, &sframe);
    // PLT0, the PLT entries (PCMASK, CFA by expression in the CFI), the
    // C functions, with every offset and start-address size.
    assert!(t.functions >= 12 && t.pcs > 300, "{t:?}");
    assert!(t.pc_mask >= 1 && t.expressions > 0, "{t:?}");
    assert!(t.fp_based > 0 && t.fp_saved > 0, "{t:?}");
    assert_eq!(t.addr_sizes, BTreeSet::from([1, 2, 4]), "{t:?}");
    assert_eq!(t.word_sizes, BTreeSet::from([1, 2, 4]), "{t:?}");
    assert!(fde_index_agrees(&file) > 300);
    assert_dump_matches_objdump(&exe, "objdump");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A function with no instructions between `.cfi_startproc` and
/// `.cfi_endproc` gets a zero-size FDE from GNU as. Here GNU ld puts the
/// empty `g` (in `.text.unlikely`, which its default script places first)
/// at the address of `f`, and the sorted table lists `g` after `f`: a
/// lookup in `f` must not stop at `g`.
const EMPTY_AT_F: &str = "
\t.text
\t.globl f
\t.type f, @function
f:
\t.cfi_startproc
\tpushq %rbp
\t.cfi_def_cfa_offset 16
\t.cfi_offset 6, -16
\tpopq %rbp
\t.cfi_def_cfa_offset 8
\tret
\t.cfi_endproc
\t.size f, .-f
\t.section .text.unlikely,\"ax\",@progbits
\t.globl g
\t.type g, @function
g:
\t.cfi_startproc
\t.cfi_endproc
\t.size g, .-g
";

#[test]
fn an_empty_function_at_the_same_address_does_not_hide_the_one_there() {
    let dir = scratch("gnu-empty-fde");
    let (src, obj, exe) = (dir.join("tie.s"), dir.join("tie.o"), dir.join("tie"));
    std::fs::write(&src, EMPTY_AT_F).unwrap();
    common::run(
        Command::new("as")
            .arg("--gsframe")
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    common::run(
        Command::new("ld")
            .args(["--eh-frame-hdr", "-e", "f"])
            .arg(&obj)
            .arg("-o")
            .arg(&exe),
    );
    let file = std::fs::read(&exe).unwrap();
    let sframe = gnu_sframe(&file);
    let fdes: Vec<(u64, u32)> = sframe
        .functions()
        .map(|f| (f.fde.start, f.fde.size))
        .collect();
    assert!(
        fdes.len() == 2 && fdes[0].0 == fdes[1].0 && fdes[0].1 == 3 && fdes[1].1 == 0,
        "the linker laid them out otherwise: {fdes:?}"
    );
    // Every instruction of `f` has its row, as its CFI says.
    let t = compare_with_cfi(&exe, &file, &sframe);
    assert_eq!((t.functions, t.pcs), (2, 3), "{t:?}");
    assert_eq!(fde_index_agrees(&file), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn aarch64_gcc_and_gnu_ld_give_version_1_matching_the_cfi() {
    let dir = scratch("gcc-aarch64");
    let exe = build_c(&dir, "aarch64-linux-gnu-gcc", &[]);
    let file = std::fs::read(&exe).unwrap();
    let sframe = gnu_sframe(&file);
    assert_eq!(
        (sframe.abi(), sframe.version()),
        (Abi::Aarch64LittleEndian, 1)
    );
    let t = compare_with_cfi(&exe, &file, &sframe);
    assert!(t.functions >= 10 && t.pcs > 20000, "{t:?}");
    assert!(t.fp_based > 0 && t.fp_saved > 0 && t.ra_saved > 0, "{t:?}");
    assert_eq!(t.addr_sizes, BTreeSet::from([1, 2, 4]), "{t:?}");
    assert_eq!(t.word_sizes, BTreeSet::from([1, 2, 4]), "{t:?}");
    assert!(fde_index_agrees(&file) > 20000);
    assert_dump_matches_objdump(&exe, "aarch64-linux-gnu-objdump");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn aarch64_pac_signed_return_addresses_match_the_cfi_sign_state() {
    for (key, b_key) in [("pac-ret+leaf", false), ("pac-ret+leaf+b-key", true)] {
        let dir = scratch(key);
        let exe = build_c(
            &dir,
            "aarch64-linux-gnu-gcc",
            &[&format!("-mbranch-protection={key}")],
        );
        let file = std::fs::read(&exe).unwrap();
        let sframe = gnu_sframe(&file);
        // gimli does not know the CIE augmentation 'B' (key B): the oracle
        // reads a copy where it is 'S', which changes no rule.
        let cfi_file = if b_key {
            common::replace_all(&file, b"zRB\0", b"zRS\0")
        } else {
            file.clone()
        };
        let t = compare_with_cfi(&exe, &cfi_file, &sframe);
        assert!(t.mangled > 100, "{key}: {t:?}");
        // Every function signs, and says with which key.
        assert!(
            sframe.functions().all(|f| f.fde.pauth_key_b == b_key),
            "{key}"
        );
        assert_dump_matches_objdump(&exe, "aarch64-linux-gnu-objdump");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn rustc_and_rust_lld_give_concatenated_pcrel_version_2_matching_the_cfi() {
    let dir = scratch("rustc");
    let src = dir.join("prog.rs");
    std::fs::write(&src, RUST_PROGRAM).unwrap();
    let exe = dir.join("prog");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("link/sframe.ld");
    common::run(
        Command::new("rustc")
            .args(["-O", "-C", "codegen-units=4", "-C", "llvm-args=--gsframe"])
            .arg("-C")
            .arg(format!("link-arg=-Wl,-T,{}", script.display()))
            .arg("-o")
            .arg(&exe)
            .arg(&src),
    );
    let file = std::fs::read(&exe).unwrap();
    let elf = ElfFile::parse(&file).unwrap();
    assert!(
        elf.program_headers().all(|p| p.p_type != PT_GNU_SFRAME),
        "lld makes no PT_GNU_SFRAME"
    );
    // The script routes every object's pieces to `.sframe.rust` (none is
    // a static library's member).
    let section = elf.section_by_name(b".sframe.rust").expect("SFrame kept");
    assert_eq!(elf.sframe_extent(), Some((section.addr, section.size)));
    let data = elf.section_data(&section).unwrap();
    let sframe = SFrame::parse(data, section.addr).unwrap();
    assert!(sframe.piece_count() >= 2, "{}", sframe.piece_count());
    for piece in sframe.pieces() {
        assert_eq!(piece.version(), 2);
        assert!(piece.header().pcrel());
    }
    assert_eq!(sframe.pieces().count() as u32, sframe.piece_count());
    // Through an index of the pieces, every pc finds what it finds without.
    let mut slots = vec![PieceEntry::EMPTY; sframe.piece_index_len()];
    let indexed = sframe.with_piece_index(&mut slots);
    assert!(indexed.is_indexed());
    let (lo, hi) = sframe.pc_range().unwrap();
    let mut found = 0;
    for pc in lo - 16..hi + 16 {
        let row = indexed.find_row(pc);
        assert_eq!(row, sframe.find_row(pc), "at {pc:#x}");
        // A concatenation is left to `find_row`.
        assert_eq!(indexed.quick_row(pc), None, "at {pc:#x}");
        found += usize::from(row.is_some());
    }
    assert!(found > 1000, "{found}");
    let t = compare_with_cfi(&exe, &file, &sframe);
    assert!(t.functions >= 10 && t.pcs > 200 && t.fp_saved > 0, "{t:?}");
    assert!(t.word_sizes.contains(&2), "{t:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The newest build of each test and example binary of this run's
/// target directory.
fn built_binaries() -> Vec<PathBuf> {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let examples = deps.parent().unwrap().join("examples");
    let mut newest: BTreeMap<String, (std::time::SystemTime, PathBuf)> = BTreeMap::new();
    for dir in [deps, examples] {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            let meta = e.metadata().unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 || name.contains('.') {
                continue;
            }
            let key = format!(
                "{}/{}",
                dir.display(),
                name.rsplit_once('-').map_or(&*name, |p| p.0)
            );
            let t = meta.modified().unwrap();
            if newest.get(&key).is_none_or(|(old, _)| t > *old) {
                newest.insert(key, (t, path));
            }
        }
    }
    newest.into_values().map(|(_, p)| p).collect()
}

#[test]
fn every_fde_of_the_test_binaries_starts_at_a_function_symbol() {
    // Linked by GNU ld with link/sframe-merge.ld: the C fixtures' pieces
    // merged into one sorted table, its starts relative to its header.
    let mut checked = 0;
    for exe in built_binaries() {
        let Some(starts) = sframe_support::fde_starts(&exe) else {
            continue;
        };
        if starts.fdes == 0 {
            continue;
        }
        assert_eq!(starts.pieces.len(), 1, "{exe:?}: {starts:x?}");
        assert!(!starts.pieces[0].2, "{exe:?}: {starts:x?}");
        assert!(starts.off_symbol.is_empty(), "{exe:?}: {starts:x?}");
        checked += 1;
    }
    // The binaries that link the fixtures: tests and examples (not all
    // are built when a single test is run).
    assert!(checked >= 1, "{checked}");
    eprintln!("{checked} binaries: every FDE starts at a function symbol");
}
