//! The walker on compact unwind: a code map over a Mach-O fixture loaded at
//! a slide answers `Lookup::Compact` from the fixture's `__unwind_info`, and
//! a simulated stack chains real functions of the fixture. Every caller must
//! be recovered by its compact encoding, with the sp its frame implies.

use std::path::Path;

use object::{Object, ObjectSection};
use stackmark::arch::aarch64::{self, Aarch64};
use stackmark::arch::x86_64::{self, X86_64};
use stackmark::arch::Arch;
use stackmark::formats::compact_unwind::UnwindInfo;
use stackmark::memory::{MemoryReader, SliceMemory};
use stackmark::walk::{CodeMap, Frame, Lookup, Method, StopReason, WalkOptions, Walker};

/// Where the fixture's `mach_header` is "loaded".
const BASE: u64 = 0x1_0000_0000;
const SP: u64 = 0x7000_0000;

/// A fixture mapped at `BASE`: its `__text` is the only code.
struct Image {
    data: Vec<u8>,
    unwind: (usize, usize),
    text: (u64, u64),
}

impl Image {
    fn open(name: &str) -> Self {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/macho")
            .join(name);
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let (off, len) = file
            .section_by_name("__unwind_info")
            .unwrap()
            .file_range()
            .unwrap();
        let text = file.section_by_name("__text").unwrap();
        let text = (BASE + text.address(), BASE + text.address() + text.size());
        Image {
            unwind: (off as usize, len as usize),
            text,
            data,
        }
    }
}

impl CodeMap for Image {
    fn lookup(&self, pc: u64) -> Lookup {
        if !self.is_code(pc) {
            return Lookup::Outside;
        }
        let (off, len) = self.unwind;
        let info = UnwindInfo::parse(&self.data[off..off + len]).unwrap();
        match info.lookup((pc - BASE) as u32) {
            Some(e) => Lookup::Compact {
                encoding: e.encoding,
                func_start: BASE + u64::from(e.func_start),
            },
            None => Lookup::NoInfo,
        }
    }
    fn is_code(&self, addr: u64) -> bool {
        addr >= self.text.0 && addr < self.text.1
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        SliceMemory::new(&[(BASE, &self.data[..])]).read(addr, buf)
    }
}

fn walk<A: Arch>(
    regs: A::Regs,
    precise: bool,
    stack: &[u8],
    image: Image,
) -> (Vec<Frame>, StopReason) {
    let regions = [(SP, stack)];
    let mut w: Walker<A, _, _> = Walker::new(
        regs,
        stackmark::PcKind::exact_if(precise),
        SliceMemory::new(&regions),
        image,
        WalkOptions::default(),
    );
    let frames: Vec<Frame> = w.by_ref().collect();
    (frames, w.stop_reason())
}

fn le(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn x86_64_walk_recovers_frameless_and_stack_indirect_callers_by_compact_unwind() {
    // _frameless_small (push rax) returns into _all_saved at 0x6be (five
    // pushes), which returns into _framed_saved at 0x59c (five pushes),
    // which returns into _big_frame at 0x628 (subq $0x11188), whose return
    // address is 0: the end.
    let mut st = [
        le(&[0, BASE + 0x6be]),             // _frameless_small: rax slot, RA
        le(&[1, 2, 3, 4, 5, BASE + 0x59c]), // _all_saved: rbx r12 r13 r14 r15, RA
        le(&[0, 6, 7, 8, 9, BASE + 0x628]), // _framed_saved: rax rbx r14 r15 rbp, RA
    ]
    .concat();
    st.resize(st.len() + 0x11190, 0); // _big_frame; its RA slot stays 0
    let regs = x86_64::Regs {
        rip: BASE + 0x5c6,
        rsp: SP,
        rbp: 0x55,
        ..Default::default()
    };
    let image = Image::open("encodings-nofp-x86_64.dylib");
    let (frames, stop) = walk::<X86_64>(regs, false, &st, image);
    let got: Vec<(u64, u64, Method)> = frames.iter().map(|f| (f.pc, f.sp, f.method)).collect();
    assert_eq!(
        got,
        [
            (BASE + 0x5c6, SP, Method::Context),
            (BASE + 0x6be, SP + 16, Method::CompactUnwind),
            (BASE + 0x59c, SP + 64, Method::CompactUnwind),
            (BASE + 0x628, SP + 112, Method::CompactUnwind),
        ]
    );
    assert_eq!(stop, StopReason::ReturnAddressZero);
}

#[test]
fn arm64_walk_recovers_a_leaf_from_lr_then_frame_records_by_compact_unwind() {
    // _leaf (frameless, RA in lr) called from _all_saved at 0x6ec (frame
    // record at sp+0x90, every pair below it), called from _with_lsda at
    // 0x688 (frame record at sp+0x10), whose return address is 0.
    let mut st = vec![0u64; 0xa0 / 8 + 4];
    st[0x90 / 8] = SP + 0xa0 + 0x10; // _all_saved's record: caller fp
    st[0x98 / 8] = 0x8023_0000_0000_0000 | (BASE + 0x688); // signed RA
    st[0xa0 / 8 + 2] = 0; // _with_lsda's record: fp 0, RA 0
    st[0xa0 / 8 + 3] = 0;
    let regs = aarch64::Regs {
        pc: BASE + 0x5ac,
        sp: SP,
        fp: SP + 0x90,
        lr: BASE + 0x6ec,
        x19_x28: [0; 10],
    };
    let image = Image::open("encodings-fp-arm64.dylib");
    let (frames, stop) = walk::<Aarch64>(regs, true, &le(&st), image);
    let got: Vec<(u64, u64, Method)> = frames.iter().map(|f| (f.pc, f.sp, f.method)).collect();
    assert_eq!(
        got,
        [
            (BASE + 0x5ac, SP, Method::Context),
            (BASE + 0x6ec, SP, Method::CompactUnwind),
            (BASE + 0x688, SP + 0xa0, Method::CompactUnwind),
        ]
    );
    assert_eq!(stop, StopReason::ReturnAddressZero);
}

// A compact encoding describes a function's body. Frame 0 and a frame a
// signal interrupted have an exact pc, which may lie in a prologue or an
// epilogue; the instructions there give the caller (a stack overflow's
// fault lands on a prologue's first push or store). Stacks follow the
// fixtures' disassembly (`llvm-objdump-16 -d`).

/// The first two frames of a walk from an exact pc: (offset of pc from
/// `BASE`, sp).
fn first_two<A: Arch>(regs: A::Regs, stack: &[u64], image: &str) -> Vec<(u64, u64)> {
    let (frames, _) = walk::<A>(regs, true, &le(stack), Image::open(image));
    frames.iter().take(2).map(|f| (f.pc - BASE, f.sp)).collect()
}

/// `_framed_saved` (RBP frame) called from `_with_lsda` at 0x69c: below
/// the return address 0x6a1, `_with_lsda` pushed rbx and r14 under its
/// frame record {0, RA 0x5a4} at SP + 32, where its rbp points.
const X86_CALLER: [u64; 4] = [0x1b, 0x14, 0, BASE + 0x5a4];

fn x86_at(rip: u64, rbp: u64) -> x86_64::Regs {
    x86_64::Regs {
        rip: BASE + rip,
        rsp: SP,
        rbp,
        ..Default::default()
    }
}

#[test]
fn x86_64_a_frame_interrupted_at_its_first_instruction_keeps_its_caller() {
    // At `push rbp`: the return address is at rsp, rbp is the caller's.
    let st = [&[BASE + 0x6a1][..], &X86_CALLER].concat();
    let got = first_two::<X86_64>(x86_at(0x570, SP + 24), &st, "encodings-fp-x86_64.dylib");
    assert_eq!(got, [(0x570, SP), (0x6a1, SP + 8)]);
}

#[test]
fn x86_64_a_frame_interrupted_after_pushing_rbp_keeps_its_caller() {
    // At `mov rbp, rsp`: rbp pushed, not yet moved.
    let st = [&[SP + 32, BASE + 0x6a1][..], &X86_CALLER].concat();
    let got = first_two::<X86_64>(x86_at(0x571, SP + 32), &st, "encodings-fp-x86_64.dylib");
    assert_eq!(got, [(0x571, SP), (0x6a1, SP + 16)]);
}

#[test]
fn x86_64_a_frame_interrupted_at_its_ret_keeps_its_caller() {
    // At `retq`: the epilogue popped everything, rbp is the caller's again.
    let st = [&[BASE + 0x6a1][..], &X86_CALLER].concat();
    let got = first_two::<X86_64>(x86_at(0x5c6, SP + 24), &st, "encodings-fp-x86_64.dylib");
    assert_eq!(got, [(0x5c6, SP), (0x6a1, SP + 8)]);
}

#[test]
fn x86_64_a_frameless_function_interrupted_mid_prologue_or_epilogue_keeps_its_caller() {
    // nofp `_framed_saved` (frameless, 48 bytes): push rbp, r15, r14,
    // rbx, rax. At 0x575 three pushes have run; at 0x5b4 (`pop rbx`,
    // after `addq $8`) four pops and `retq` remain. The caller is
    // `_with_lsda`, returned into at 0x67e.
    let image = "encodings-nofp-x86_64.dylib";
    let st = [0x14, 0x15, 0xbb, BASE + 0x67e, 0, 0];
    let got = first_two::<X86_64>(x86_at(0x575, 0x55), &st, image);
    assert_eq!(got, [(0x575, SP), (0x67e, SP + 32)]);
    let st = [0xb0b, 0x14, 0x15, 0xbb, BASE + 0x67e, 0, 0];
    let (frames, _) = walk::<X86_64>(x86_at(0x5b4, 0x55), true, &le(&st), Image::open(image));
    assert_eq!((frames[1].pc - BASE, frames[1].sp), (0x67e, SP + 40));
}

fn a64_at(pc: u64, sp: u64, fp: u64, lr: u64) -> aarch64::Regs {
    aarch64::Regs {
        pc: BASE + pc,
        sp,
        fp,
        lr: BASE + lr,
        x19_x28: [0; 10],
    }
}

#[test]
fn arm64_a_frame_interrupted_at_its_first_instruction_keeps_its_caller() {
    // `_frameless_small` (frame mode) at 0x594, its `stp x29, x30,
    // [sp, #-0x10]!`: the return address into `_with_lsda` (0x688) is only
    // in lr, and fp is still `_with_lsda`'s, whose record {0, RA} is at
    // sp + 0x10.
    let st = [1, 2, 0, BASE + 0x558];
    let got = first_two::<Aarch64>(a64_at(0x594, SP, SP + 0x10, 0x688), &st, FP_ARM64);
    assert_eq!(got, [(0x594, SP), (0x688, SP)]);
}

const FP_ARM64: &str = "encodings-fp-arm64.dylib";

#[test]
fn arm64_a_frame_interrupted_mid_prologue_keeps_its_caller() {
    // `_framed_saved`: sub sp, sp, #0x50, then four pair stores, the
    // frame record last, then `add x29, sp, #0x40`. At 0x530 and at 0x534
    // x29 is still the caller's (its record {0, RA 0x558} at sp + 0x50),
    // and the return address into `_with_lsda` (0x688) is in lr.
    let mut st = vec![0u64; 12];
    st[11] = BASE + 0x558;
    for pc in [0x524, 0x530, 0x534] {
        let got = first_two::<Aarch64>(a64_at(pc, SP, SP + 0x50, 0x688), &st, FP_ARM64);
        assert_eq!(got, [(pc, SP), (0x688, SP + 0x50)], "at {pc:#x}");
    }
}

#[test]
fn arm64_a_frame_interrupted_mid_epilogue_keeps_its_caller() {
    // `_framed_saved` at 0x580: `ldp x29, x30, [sp, #0x40]` has run, so fp
    // and lr are the caller's; three pair loads, `add sp, sp, #0x50` and
    // `ret` remain. At 0x590 only the `ret` does.
    let mut st = vec![0u64; 12];
    st[11] = BASE + 0x558;
    let got = first_two::<Aarch64>(a64_at(0x580, SP, SP + 0x50, 0x688), &st, FP_ARM64);
    assert_eq!(got, [(0x580, SP), (0x688, SP + 0x50)]);
    let got = first_two::<Aarch64>(a64_at(0x590, SP + 0x50, SP + 0x50, 0x688), &st, FP_ARM64);
    assert_eq!(got, [(0x590, SP + 0x50), (0x688, SP + 0x50)]);
}

#[test]
fn arm64_an_epilogue_that_loads_the_frame_record_is_run_to_its_ret() {
    // `_big_frame` at 0x640: `ldp x29, x30, [sp, #0x10]`, `ldp x28, x27,
    // [sp], #0x20`, `ret`. The record read is the caller's RA, and the
    // caller's sp is 0x20 up. (The frame step agrees here: x29 is still
    // this frame's.)
    let st = [0x28, 0x27, SP + 0x40, BASE + 0x688, 0, 0, 0, 0, 0, 0];
    let got = first_two::<Aarch64>(a64_at(0x640, SP, SP + 0x10, 0x5a0), &st, FP_ARM64);
    assert_eq!(got, [(0x640, SP), (0x688, SP + 0x20)]);
}

/// A module table holding one fixture as macOS discovery builds it: its
/// `__unwind_info` and its `__eh_frame` (no index), at `BASE`.
fn table_of(
    name: &str,
    regs: stackmark::formats::cfi::Registers,
) -> Box<stackmark::modules::Table> {
    use stackmark::formats::cfi::Cfi;
    use stackmark::modules::{Module, Segment, Table};
    let image = Image::open(name);
    let data: &'static [u8] = Box::leak(image.data.into_boxed_slice());
    let file = object::File::parse(data).unwrap();
    let (off, len) = image.unwind;
    let info = UnwindInfo::parse(&data[off..off + len]).unwrap();
    let eh = file
        .section_by_name("__eh_frame")
        .expect("the fixture has __eh_frame");
    let (eh_off, eh_len) = eh.file_range().unwrap();
    let eh_bytes = &data[eh_off as usize..(eh_off + eh_len) as usize];
    let mut m = Module::EMPTY;
    m.set_name(name.as_bytes());
    m.push_segment(Segment {
        start: image.text.0,
        size: image.text.1 - image.text.0,
        vaddr: image.text.0 - BASE,
        flags: stackmark::formats::elf::PF_R | stackmark::formats::elf::PF_X,
    });
    m.set_compact(Some((info, BASE)));
    m.set_cfi(Some(Cfi::without_index(
        eh_bytes,
        BASE + eh.address(),
        regs,
    )));
    let mut t = Box::new(Table::EMPTY);
    assert!(t.push(m));
    t.finish(1);
    t
}

/// The compact entries of a fixture in DWARF mode (x86_64 mode 4, arm64
/// mode 3): each function's start and end, as llvm-objdump lists them.
fn dwarf_mode_functions(name: &str, mode: u32) -> Vec<(u64, u64)> {
    let image = Image::open(name);
    let (off, len) = image.unwind;
    let info = UnwindInfo::parse(&image.data[off..off + len]).unwrap();
    let mut starts = Vec::new();
    let mut pc = image.text.0;
    while pc < image.text.1 {
        let e = info.lookup((pc - BASE) as u32).unwrap();
        let start = BASE + u64::from(e.func_start);
        if e.encoding >> 24 & 0xf == mode && !starts.iter().any(|&(s, _)| s == start) {
            starts.push((start, 0));
        }
        pc += 1;
    }
    // Each function ends where the next entry starts (or the text does).
    for f in &mut starts {
        let mut end = f.0 + 1;
        while end < image.text.1
            && BASE + u64::from(info.lookup((end - BASE) as u32).unwrap().func_start) == f.0
        {
            end += 1;
        }
        f.1 = end;
    }
    starts
}

/// Compact entries in DWARF mode name an FDE of `__eh_frame`: the table
/// answers with that FDE's row (a CFI row), the row gimli computes from the
/// same bytes, at every instruction boundary gimli gives a row for.
#[test]
fn dwarf_mode_entries_are_stepped_with_the_fde_they_name() {
    use gimli::{BaseAddresses, EhFrame, LittleEndian, UnwindContext, UnwindSection};
    use stackmark::formats::cfi::Registers;
    use stackmark::formats::sframe::{CfaRule, RegRule};
    let cases = [
        ("encodings-nofp-x86_64.dylib", 4, Registers::X86_64, 16u16),
        ("encodings-nofp-arm64.dylib", 3, Registers::AARCH64, 30),
    ];
    for (name, mode, regs, ra_col) in cases {
        let functions = dwarf_mode_functions(name, mode);
        assert!(!functions.is_empty(), "{name}: some entry is in DWARF mode");
        let table = table_of(name, regs);
        let image = Image::open(name);
        let file = object::File::parse(&*image.data).unwrap();
        let sect = file.section_by_name("__eh_frame").unwrap();
        let eh = EhFrame::new(sect.data().unwrap(), LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(BASE + sect.address());
        let mut ctx = UnwindContext::new();
        let mut checked = 0;
        for &(start, end) in &functions {
            let fde = eh
                .fde_for_address(&bases, start, EhFrame::cie_from_offset)
                .unwrap_or_else(|e| panic!("{name}: gimli finds no FDE at {start:#x}: {e}"));
            let mut rows = fde.rows(&eh, &bases, &mut ctx).unwrap();
            while let Some(row) = rows.next_row().unwrap() {
                let pc = row.start_address();
                if pc >= end {
                    break;
                }
                let Lookup::Cfi(got) = table.lookup_uncached(pc) else {
                    panic!(
                        "{name}: {pc:#x} has no CFI row: {:?}",
                        table.lookup_uncached(pc)
                    );
                };
                assert_eq!(
                    (got.func_start, got.row_start),
                    (start, pc),
                    "{name} {pc:#x}"
                );
                let want_cfa = match row.cfa() {
                    gimli::CfaRule::RegisterAndOffset { register, offset } => {
                        let offset = *offset as i32;
                        match register.0 {
                            r if r == regs.sp => CfaRule::SpPlus(offset),
                            r if r == regs.fp => CfaRule::FpPlus(offset),
                            reg => CfaRule::RegPlus { reg, offset },
                        }
                    }
                    other => panic!("{name} {pc:#x}: {other:?}"),
                };
                assert_eq!(got.cfa, want_cfa, "{name} {pc:#x}");
                let want_ra = match row.register(gimli::Register(ra_col)) {
                    gimli::RegisterRule::Offset(o) => RegRule::AtCfa(o as i32),
                    gimli::RegisterRule::Undefined | gimli::RegisterRule::SameValue => {
                        RegRule::SameValue
                    }
                    other => panic!("{name} {pc:#x}: {other:?}"),
                };
                assert_eq!(got.ra, want_ra, "{name} {pc:#x}");
                checked += 1;
            }
        }
        assert!(checked >= functions.len(), "{name}: {checked} rows");
        eprintln!(
            "{name}: {} DWARF-mode functions, {checked} rows",
            functions.len()
        );
    }
}
