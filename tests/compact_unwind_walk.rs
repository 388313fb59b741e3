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
        precise,
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
