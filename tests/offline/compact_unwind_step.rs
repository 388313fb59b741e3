//! The compact-unwind steppers on simulated stacks. Each case takes a
//! function's real encoding from a Mach-O fixture (clang-16, ld64.lld-16;
//! `scripts/build-macho-fixtures.sh`), lays out the stack the way the
//! function's disassembly (quoted in each case) leaves it at its call or in
//! its body, and checks the caller's pc, sp, fp and callee-saved registers.

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol};
use stackmark::arch::aarch64::{self, compact as a64};
use stackmark::arch::x86_64::{self, compact as x64};
use stackmark::arch::CompactStep;
use stackmark::formats::compact_unwind::UnwindInfo;
use stackmark::memory::SliceMemory;

const SP: u64 = 0x7000_0000;
const RA: u64 = 0x4000_1234;
const CALLER_FP: u64 = 0x7000_1000;

/// A fixture: its bytes (also its `__TEXT` as mapped: the file starts at
/// the `mach_header`, linked at 0).
struct Fixture {
    data: Vec<u8>,
}

impl Fixture {
    fn open(name: &str) -> Self {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/macho")
            .join(name);
        Fixture {
            data: std::fs::read(&path).unwrap(),
        }
    }

    /// The address of `symbol` and its encoding, as the reader finds it.
    fn function(&self, symbol: &str) -> (u64, u32) {
        let file = object::File::parse(&*self.data).unwrap();
        let addr = file
            .symbols()
            .find(|s| s.name() == Ok(symbol))
            .unwrap_or_else(|| panic!("{symbol}"))
            .address();
        let s = file.section_by_name("__unwind_info").unwrap();
        let info = UnwindInfo::parse(s.data().unwrap()).unwrap();
        let e = info.lookup(addr as u32).unwrap();
        assert_eq!(u64::from(e.func_start), addr);
        (addr, e.encoding)
    }
}

/// Little-endian stack words from `SP` upwards.
fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// --- x86_64 ----------------------------------------------------------------

fn x86(rsp: u64, rbp: u64) -> x86_64::Regs {
    x86_64::Regs {
        rip: 0,
        rsp,
        rbp,
        rbx: 0xb0,
        r12: 0xc0,
        r13: 0xd0,
        r14: 0xe0,
        r15: 0xf0,
    }
}

#[test]
fn x86_64_rbp_frame_restores_rbp_rip_and_the_four_listed_registers() {
    // _framed_saved (fp): push rbp; mov rsp,rbp; push r15; push r14;
    // push r12; push rbx; subq $0x10,rsp  -> rbx at rbp-32 .. r15 at rbp-8.
    let f = Fixture::open("encodings-fp-x86_64.dylib");
    let (start, enc) = f.function("_framed_saved");
    assert_eq!(enc, 0x0104_0b11);
    let stack = words(&[0, 0, 0x1b, 0x12, 0x14, 0x15, CALLER_FP, RA]);
    let regions = [(SP, &stack[..])];
    let n = x64::step(enc, start, &x86(SP, SP + 48), &SliceMemory::new(&regions)).unwrap();
    assert_eq!((n.rip, n.rsp, n.rbp), (RA, SP + 64, CALLER_FP));
    assert_eq!(
        (n.rbx, n.r12, n.r13, n.r14, n.r15),
        (0x1b, 0x12, 0xd0, 0x14, 0x15)
    );
}

#[test]
fn x86_64_rbp_frame_restores_all_five_callee_saved_registers() {
    // _all_saved (fp): push rbp; mov rsp,rbp; push r15; push r14; push r13;
    // push r12; push rbx; push rax -> rbx at rbp-40 .. r15 at rbp-8.
    let f = Fixture::open("encodings-fp-x86_64.dylib");
    let (start, enc) = f.function("_all_saved");
    assert_eq!(enc, 0x0105_58d1);
    let stack = words(&[0, 0x1b, 0x12, 0x13, 0x14, 0x15, CALLER_FP, RA]);
    let regions = [(SP, &stack[..])];
    let n = x64::step(enc, start, &x86(SP, SP + 48), &SliceMemory::new(&regions)).unwrap();
    assert_eq!((n.rip, n.rsp, n.rbp), (RA, SP + 64, CALLER_FP));
    assert_eq!(
        (n.rbx, n.r12, n.r13, n.r14, n.r15),
        (0x1b, 0x12, 0x13, 0x14, 0x15)
    );
}

#[test]
fn x86_64_rbp_frame_skips_the_slot_of_an_empty_register_field() {
    // The format lets saved registers sit apart: each of the five fields
    // names one slot upwards from rbp - 8 * offset, and a field of 0 (no
    // register) leaves its slot unused (the compact unwind spec, RBP frame:
    // "continue iterating the offset forward"; LLVM libunwind reads it so).
    // No toolchain here emits such a gap: clang's assembler packs the
    // fields (for `push r12; sub $8,rsp; push rbx` it gives 0x01020011,
    // which puts rbx where the gap is), so the encoding is written out.
    // Offset 3: rbx at rbp-24, an unused slot at rbp-16, r12 at rbp-8.
    let enc = 0x0100_0000 | 3 << 16 | 2 << 6 | 1;
    let stack = words(&[0x1b, 0xdead, 0x12, CALLER_FP, RA]);
    let regions = [(SP, &stack[..])];
    let n = x64::step(enc, 0, &x86(SP, SP + 24), &SliceMemory::new(&regions)).unwrap();
    assert_eq!((n.rip, n.rsp, n.rbp), (RA, SP + 40, CALLER_FP));
    assert_eq!(
        (n.rbx, n.r12, n.r13, n.r14, n.r15),
        (0x1b, 0x12, 0xd0, 0xe0, 0xf0),
        "r12 comes from rbp-8, past the unused slot"
    );
}

#[test]
fn x86_64_frameless_decodes_the_permutation_of_four_registers() {
    // _framed_saved (no fp): push rbp; push r15; push r14; push rbx;
    // push rax -> 48 bytes, registers rbx, r14, r15, rbp from rsp+8 upwards.
    let f = Fixture::open("encodings-nofp-x86_64.dylib");
    let (start, enc) = f.function("_framed_saved");
    assert_eq!(enc, 0x0206_1020);
    let stack = words(&[0, 0x1b, 0x14, 0x15, CALLER_FP, RA]);
    let regions = [(SP, &stack[..])];
    let n = x64::step(enc, start, &x86(SP, 0x55), &SliceMemory::new(&regions)).unwrap();
    assert_eq!((n.rip, n.rsp, n.rbp), (RA, SP + 48, CALLER_FP));
    assert_eq!(
        (n.rbx, n.r12, n.r13, n.r14, n.r15),
        (0x1b, 0xc0, 0xd0, 0x14, 0x15)
    );
}

#[test]
fn x86_64_frameless_decodes_the_permutation_of_five_registers() {
    // _all_saved (no fp): push r15; push r14; push r13; push r12; push rbx
    // -> 48 bytes, rbx at rsp .. r15 at rsp+32; rbp untouched.
    let f = Fixture::open("encodings-nofp-x86_64.dylib");
    let (start, enc) = f.function("_all_saved");
    assert_eq!(enc, 0x0206_1400);
    let stack = words(&[0x1b, 0x12, 0x13, 0x14, 0x15, RA]);
    let regions = [(SP, &stack[..])];
    let n = x64::step(enc, start, &x86(SP, 0x55), &SliceMemory::new(&regions)).unwrap();
    assert_eq!((n.rip, n.rsp, n.rbp), (RA, SP + 48, 0x55));
    assert_eq!(
        (n.rbx, n.r12, n.r13, n.r14, n.r15),
        (0x1b, 0x12, 0x13, 0x14, 0x15)
    );
}

#[test]
fn x86_64_frameless_small_pops_its_one_slot_and_the_return_address() {
    // _frameless_small (no fp): push rax; call -> 16 bytes, nothing saved.
    let f = Fixture::open("encodings-nofp-x86_64.dylib");
    let (start, enc) = f.function("_frameless_small");
    assert_eq!(enc, 0x0202_0000);
    let stack = words(&[0x99, RA]);
    let regions = [(SP, &stack[..])];
    let n = x64::step(enc, start, &x86(SP, 0x55), &SliceMemory::new(&regions)).unwrap();
    assert_eq!(
        n,
        x86_64::Regs {
            rip: RA,
            rsp: SP + 16,
            ..x86(SP, 0x55)
        }
    );
}

#[test]
fn x86_64_stack_indirect_reads_the_subq_immediate_from_the_code() {
    // _big_frame (no fp, optnone): subq $0x11188,%rsp at the start; its
    // imm32 sits at function+3; plus 8 for the return address.
    let f = Fixture::open("encodings-nofp-x86_64.dylib");
    let (start, enc) = f.function("_big_frame");
    assert_eq!(enc, 0x0303_2000);
    let at = start as usize;
    assert_eq!(f.data[at..at + 3], [0x48, 0x81, 0xec], "subq $imm32, %rsp");
    let mut stack = vec![0u8; 0x11190];
    stack[0x11188..].copy_from_slice(&RA.to_le_bytes());
    let regions = [(SP, &stack[..]), (0, &f.data[..])];
    let n = x64::step(enc, start, &x86(SP, 0x55), &SliceMemory::new(&regions)).unwrap();
    assert_eq!((n.rip, n.rsp, n.rbp), (RA, SP + 0x11190, 0x55));
    // Without the code the frame size is unknown: a broken frame.
    let stack_only = [(SP, &stack[..])];
    assert!(matches!(
        x64::step(enc, start, &x86(SP, 0x55), &SliceMemory::new(&stack_only)),
        Err(CompactStep::Broken(_))
    ));
}

#[test]
fn x86_64_dwarf_and_null_encodings_fall_back_to_frame_pointers() {
    let f = Fixture::open("encodings-nofp-x86_64.dylib");
    let regions: [(u64, &[u8]); 0] = [];
    for (symbol, mode) in [("_leaf", 4), ("_no_unwind", 0)] {
        let (start, enc) = f.function(symbol);
        assert_eq!(enc >> 24 & 0xf, mode, "{symbol}");
        assert_eq!(
            x64::step(enc, start, &x86(SP, SP + 16), &SliceMemory::new(&regions)),
            Err(CompactStep::Fallback),
            "{symbol}"
        );
    }
}

// --- arm64 -------------------------------------------------------------------

fn a64regs(sp: u64, fp: u64, lr: u64) -> aarch64::Regs {
    aarch64::Regs {
        pc: 0,
        sp,
        fp,
        lr,
        x19_x28: [19, 20, 21, 22, 23, 24, 25, 26, 27, 28],
    }
}

/// A return address with pointer-authentication bits in its top byte and
/// above bit 47, as arm64e system libraries sign them.
const SIGNED_RA: u64 = 0x8023_0000_4000_1234;

#[test]
fn arm64_frame_restores_every_register_pair_and_skips_the_d_pairs() {
    // _all_saved (fp): stp d15,d14,[sp,#-0xa0]!; stp d13,d12; stp d11,d10;
    // stp d9,d8; stp x28,x27,[sp,#0x40]; ... stp x20,x19,[sp,#0x80];
    // stp x29,x30,[sp,#0x90]; add x29,sp,#0x90.
    let f = Fixture::open("encodings-fp-arm64.dylib");
    let (_, enc) = f.function("_all_saved");
    assert_eq!(enc, 0x0400_0f1f);
    let mut st = [0xd0d0u64; 20]; // d-registers below sp+0x40
    for (slot, v) in [(8, 0x28), (9, 0x27), (10, 0x26), (11, 0x25), (12, 0x24)] {
        st[slot] = v;
    }
    for (slot, v) in [(13, 0x23), (14, 0x22), (15, 0x21), (16, 0x20), (17, 0x19)] {
        st[slot] = v;
    }
    st[18] = CALLER_FP;
    st[19] = SIGNED_RA;
    let stack = words(&st);
    let regions = [(SP, &stack[..])];
    let r = a64regs(SP, SP + 0x90, 0x1111);
    let n = a64::step(enc, &r, &SliceMemory::new(&regions), false).unwrap();
    assert_eq!((n.pc, n.sp, n.fp), (RA, SP + 0xa0, CALLER_FP));
    assert_eq!(
        n.x19_x28,
        [0x19, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28]
    );
}

#[test]
fn arm64_frame_restores_only_the_listed_pairs() {
    // _with_lsda (fp): stp x20,x19,[sp,#-0x20]!; stp x29,x30,[sp,#0x10];
    // add x29,sp,#0x10 -> x19 at fp-8, x20 at fp-16.
    let f = Fixture::open("encodings-fp-arm64.dylib");
    let (_, enc) = f.function("_with_lsda");
    assert_eq!(enc, 0x5400_0001);
    let stack = words(&[0x20, 0x19, CALLER_FP, SIGNED_RA]);
    let regions = [(SP, &stack[..])];
    let r = a64regs(SP, SP + 0x10, 0x1111);
    let n = a64::step(enc, &r, &SliceMemory::new(&regions), false).unwrap();
    assert_eq!((n.pc, n.sp, n.fp), (RA, SP + 0x20, CALLER_FP));
    assert_eq!(n.x19_x28, [0x19, 0x20, 21, 22, 23, 24, 25, 26, 27, 28]);
}

#[test]
fn arm64_frameless_leaf_returns_to_lr_only_in_the_top_or_interrupted_frame() {
    // _leaf (fp): no stack at all; the return address stays in lr.
    let f = Fixture::open("encodings-fp-arm64.dylib");
    let (_, enc) = f.function("_leaf");
    assert_eq!(enc, 0x0200_0000);
    let regions: [(u64, &[u8]); 0] = [];
    let mem = SliceMemory::new(&regions);
    let r = a64regs(SP, CALLER_FP, SIGNED_RA);
    let n = a64::step(enc, &r, &mem, true).unwrap();
    assert_eq!((n.pc, n.sp, n.fp), (RA, SP, CALLER_FP));
    assert!(matches!(
        a64::step(enc, &r, &mem, false),
        Err(CompactStep::Broken(_))
    ));
}

#[test]
fn arm64_frameless_with_a_stack_size_pops_it() {
    // _leaf_stack (no fp): sub sp,sp,#0x20 ... add sp,sp,#0x20; ret.
    let f = Fixture::open("encodings-nofp-arm64.dylib");
    let (_, enc) = f.function("_leaf_stack");
    assert_eq!(enc, 0x0200_2000);
    let regions: [(u64, &[u8]); 0] = [];
    let mem = SliceMemory::new(&regions);
    let r = a64regs(SP, CALLER_FP, RA);
    let n = a64::step(enc, &r, &mem, true).unwrap();
    assert_eq!((n.pc, n.sp, n.fp), (RA, SP + 0x20, CALLER_FP));
    assert_eq!(n.x19_x28, r.x19_x28);
    assert!(a64::step(enc, &r, &mem, false).is_err());
}

#[test]
fn arm64_dwarf_and_null_encodings_fall_back_to_frame_pointers() {
    let f = Fixture::open("encodings-nofp-arm64.dylib");
    let regions: [(u64, &[u8]); 0] = [];
    for (symbol, mode) in [("_framed_saved", 3), ("_with_lsda", 3), ("_no_unwind", 0)] {
        let (_, enc) = f.function(symbol);
        assert_eq!(enc >> 24 & 0xf, mode, "{symbol}");
        assert_eq!(
            a64::step(enc, &a64regs(SP, SP, RA), &SliceMemory::new(&regions), true),
            Err(CompactStep::Fallback),
            "{symbol}"
        );
    }
}
