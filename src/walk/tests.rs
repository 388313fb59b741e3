//! The step logic on captured stacks: hand-built rows and memory, so each
//! rule and each stop condition is exercised exactly.
use super::*;
use crate::arch::aarch64::{self, Aarch64};
use crate::arch::x86_64::{self, X86_64};
use crate::arch::Arch;
use crate::formats::sframe::CfaRule;
use crate::memory::MemoryReader;
use crate::memory::SliceMemory;

pub(crate) const CODE: u64 = 0x40_0000;
pub(crate) const STACK: u64 = 0x7fff_0000;

/// Code at CODE..CODE+0x1000 filled with `call rel32` (x86_64) or `bl`
/// (AArch64) so every 4th/5th byte ends a call; rows per pc range.
#[derive(Clone)]
pub(crate) struct Fake {
    code: Vec<u8>,
    rows: Vec<(u64, u64, Row)>,
    trampoline: Option<u64>,
    /// Code the map calls outermost (`is_outermost`), as the module table
    /// calls the program's entry function.
    outermost: Option<(u64, u64)>,
}

impl Fake {
    fn x86() -> Self {
        // e8 00 00 00 00 repeated: every multiple of 5 ends a call.
        let code = (0..0x1000)
            .map(|i| if i % 5 == 0 { 0xe8 } else { 0 })
            .collect();
        Fake {
            code,
            rows: vec![],
            trampoline: None,
            outermost: None,
        }
    }
    fn a64() -> Self {
        let code = (0..0x1000)
            .flat_map(|_| 0x9400_0000u32.to_le_bytes())
            .take(0x1000)
            .collect();
        Fake {
            code,
            rows: vec![],
            trampoline: None,
            outermost: None,
        }
    }
    fn row(mut self, start: u64, end: u64, row: Row) -> Self {
        self.rows.push((start, end, row));
        self
    }
}

impl CodeMap for Fake {
    fn lookup(&self, pc: u64) -> Lookup {
        if !self.is_code(pc) {
            return Lookup::Outside;
        }
        self.rows
            .iter()
            .find(|r| pc >= r.0 && pc < r.1)
            .map_or(Lookup::NoInfo, |r| Lookup::SFrame(r.2))
    }
    fn is_code(&self, addr: u64) -> bool {
        addr >= CODE && addr < CODE + self.code.len() as u64
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        SliceMemory::new(&[(CODE, &self.code)]).read(addr, buf)
    }
    fn is_known_trampoline(&self, pc: u64) -> bool {
        self.trampoline == Some(pc)
    }
    fn is_outermost(&self, pc: u64) -> bool {
        self.outermost.is_some_and(|(lo, hi)| pc >= lo && pc < hi)
    }
}

fn row(cfa: CfaRule, ra: RegRule, fp: RegRule) -> Row {
    Row {
        func_start: CODE,
        func_size: 0x100,
        row_start: CODE,
        cfa,
        ra,
        fp,
        mangled_ra: false,
        signal_frame: false,
    }
}

/// The row just after a call: `cfa = sp + 8`, the return address at
/// `cfa - 8`.
fn at_call() -> Row {
    row(CfaRule::SpPlus(8), RegRule::AtCfa(-8), RegRule::SameValue)
}

/// The row of an outermost frame: no return address.
fn outermost() -> Row {
    row(CfaRule::SpPlus(8), RegRule::Undefined, RegRule::SameValue)
}

pub(crate) fn stack(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn walk<A: Arch>(regs: A::Regs, precise: bool, st: &[u8], code: Fake) -> (Vec<Frame>, StopReason) {
    walk_with::<A>(regs, precise, st, code, WalkOptions::default())
}

/// Walks `st` with `opts`; the general step alone must give the same walk.
fn walk_with<A: Arch>(
    regs: A::Regs,
    precise: bool,
    st: &[u8],
    code: Fake,
    opts: WalkOptions,
) -> (Vec<Frame>, StopReason) {
    let regions = [(STACK, st)];
    let mut w: Walker<A, _, _> = Walker::new(
        regs,
        PcKind::exact_if(precise),
        SliceMemory::new(&regions),
        code.clone(),
        opts,
    );
    let frames: Vec<Frame> = w.by_ref().collect();
    let general = WalkOptions {
        fast_path: false,
        ..opts
    };
    let mut g: Walker<A, _, _> = Walker::new(
        regs,
        PcKind::exact_if(precise),
        SliceMemory::new(&regions),
        code,
        general,
    );
    assert_eq!(g.by_ref().collect::<Vec<_>>(), frames);
    assert_eq!(g.stop_reason(), w.stop_reason());
    (frames, w.stop_reason())
}

/// The default options with scanning off: a walk that ends where the
/// steps under test do, rather than scanning on.
fn without_scans() -> WalkOptions {
    WalkOptions {
        scan_words: 0,
        ..Default::default()
    }
}

pub(crate) fn x86(rip: u64, rsp: u64, rbp: u64) -> x86_64::Regs {
    x86_64::Regs {
        rip,
        rsp,
        rbp,
        ..Default::default()
    }
}

#[test]
fn x86_64_sframe_rows_recover_ra_at_cfa_minus_8_and_saved_fp() {
    // f at 0x400010 (CFA = sp+16, RA at CFA-8, FP at CFA-16) called from
    // g at 0x400105 (CFA = sp+8) called from h, whose row ends the walk.
    let code = Fake::x86()
        .row(
            CODE,
            CODE + 0x100,
            row(CfaRule::SpPlus(16), RegRule::AtCfa(-8), RegRule::AtCfa(-16)),
        )
        .row(CODE + 0x100, CODE + 0x200, at_call())
        .row(CODE + 0x200, CODE + 0x300, outermost());
    let st = stack(&[0x1111, CODE + 0x105, CODE + 0x20a, 0]);
    let (frames, stop) = walk::<X86_64>(x86(CODE + 0x10, STACK, 0xdead), true, &st, code);
    let pcs: Vec<u64> = frames.iter().map(|f| f.pc).collect();
    assert_eq!(pcs, [CODE + 0x10, CODE + 0x105, CODE + 0x20a]);
    assert_eq!(frames[1].sp, STACK + 16);
    assert_eq!(frames[2].sp, STACK + 24);
    assert_eq!(frames[1].method, Method::SFrame);
    assert!(frames[0].pc_kind.is_exact() && !frames[1].pc_kind.is_exact());
    assert_eq!(stop, StopReason::Outermost);
}

#[test]
fn return_addresses_are_looked_up_one_byte_earlier() {
    // The caller's row starts exactly at the return address; the byte
    // before belongs to a row that says "outermost". ra - 1 must pick it.
    let code = Fake::x86()
        .row(CODE, CODE + 0x100, at_call())
        .row(CODE + 0x100, CODE + 0x105, outermost())
        .row(CODE + 0x105, CODE + 0x200, at_call());
    let st = stack(&[CODE + 0x105, CODE + 0x50, 0]);
    let (frames, stop) = walk::<X86_64>(x86(CODE + 0x10, STACK, 0), true, &st, code);
    assert_eq!(frames.len(), 2);
    assert_eq!(stop, StopReason::Outermost);
}

#[test]
fn frame_pointers_are_followed_where_no_row_applies() {
    // Frame records at STACK+16 -> STACK+48 -> 0.
    let st = stack(&[0, 0, STACK + 48, CODE + 0x55, 0, 0, 0, CODE + 0x64, 0]);
    let (frames, stop) =
        walk::<X86_64>(x86(CODE + 0x10, STACK, STACK + 16), true, &st, Fake::x86());
    let got: Vec<(u64, u64, Method)> = frames.iter().map(|f| (f.pc, f.sp, f.method)).collect();
    assert_eq!(
        got[..3],
        [
            (CODE + 0x10, STACK, Method::Context),
            (CODE + 0x55, STACK + 32, Method::FramePointer),
            (CODE + 0x64, STACK + 64, Method::FramePointer),
        ]
    );
    // The last frame pointer is 0, the ABI's end marker.
    assert_eq!(stop, StopReason::Outermost);
}

#[test]
fn a_frame_pointer_loop_ends_the_walk() {
    // rbp points at itself: the second step would not raise sp.
    let st = stack(&[STACK, CODE + 0x55, 0]);
    let opts = without_scans();
    let (frames, stop) =
        walk_with::<X86_64>(x86(CODE + 0x10, STACK, STACK), true, &st, Fake::x86(), opts);
    assert_eq!(frames.len(), 2);
    assert_eq!(stop, StopReason::NoValidCaller);
}

#[test]
fn scanning_accepts_only_words_just_after_a_call_and_marks_them_low_trust() {
    // rbp is garbage; on the stack: a code address not after a call
    // (CODE+0x13), a non-code word, then a return address (CODE+0x55).
    let st = stack(&[CODE + 0x13, 0x1234, CODE + 0x55, 0]);
    let (frames, _) = walk::<X86_64>(x86(CODE + 0x10, STACK, 3), true, &st, Fake::x86());
    assert_eq!(frames[1].pc, CODE + 0x55);
    assert_eq!(frames[1].sp, STACK + 24);
    assert_eq!(frames[1].method, Method::Scan);
    assert!(frames[1].method.is_low_trust());
}

/// [`Fake`] that remembers scans, as the module table does, and counts
/// the scans it recalls.
pub(crate) struct Remembering<C = Fake> {
    code: C,
    scans: std::cell::RefCell<Vec<(u64, Vec<u64>)>>,
    recalled: std::cell::Cell<usize>,
    pub(crate) ends: std::cell::RefCell<Vec<(u64, [u64; END_WORDS])>>,
}

impl<C: CodeMap> CodeMap for Remembering<C> {
    fn lookup(&self, pc: u64) -> Lookup {
        self.code.lookup(pc)
    }
    fn is_code(&self, addr: u64) -> bool {
        self.code.is_code(addr)
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.code.read_code(addr, buf)
    }
    fn follows_call<A: Arch>(&self, ra: u64) -> bool {
        self.code.follows_call::<A>(ra)
    }
    fn is_outermost(&self, pc: u64) -> bool {
        self.code.is_outermost(pc)
    }
    fn recall_scan(&self, start: u64, words: &mut [u64; SCAN_MEMO_WORDS]) -> Option<usize> {
        let scans = self.scans.borrow();
        let (_, w) = scans.iter().find(|s| s.0 == start)?;
        words[..w.len()].copy_from_slice(w);
        self.recalled.set(self.recalled.get() + 1);
        Some(w.len())
    }
    fn remember_scan(&self, start: u64, words: &[u64]) {
        let mut scans = self.scans.borrow_mut();
        scans.retain(|s| s.0 != start);
        scans.push((start, words.to_vec()));
    }
    fn recall_end<R>(
        &self,
        key: u64,
        take: impl FnOnce(&[core::sync::atomic::AtomicU64; END_WORDS]) -> R,
    ) -> Option<R> {
        let ends = self.ends.borrow();
        let e = ends.iter().find(|e| e.0 == key)?;
        Some(take(&e.1.map(core::sync::atomic::AtomicU64::new)))
    }
    fn remember_end(&self, key: u64, words: &[u64; END_WORDS]) {
        let mut ends = self.ends.borrow_mut();
        ends.retain(|e| e.0 != key);
        ends.push((key, *words));
    }
}

impl<C> Remembering<C> {
    pub(crate) fn new(code: C) -> Self {
        Remembering {
            code,
            scans: Default::default(),
            recalled: Default::default(),
            ends: Default::default(),
        }
    }
}

/// Slice memory that counts its reads.
struct Counting<'a> {
    inner: SliceMemory<'a>,
    reads: std::cell::Cell<usize>,
}

impl MemoryReader for Counting<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.reads.set(self.reads.get() + 1);
        self.inner.read(addr, buf)
    }
}

#[test]
fn a_remembered_walk_end_is_replayed_only_while_the_stack_holds_its_words() {
    // Frame 0 has a row (cfa = sp + 8); its caller (CODE+0x205) has none
    // and a bad rbp, so the rest of the walk is general steps: a scan to
    // CODE+0x1fe, then a scan that runs off the stack.
    let code = Fake::x86().row(CODE, CODE + 0x100, at_call());
    let memo = Remembering::new(code.clone());
    let regs = x86(CODE + 0x10, STACK, 3);
    let walk = |st: &[u8], opts: WalkOptions| {
        let regions = [(STACK, st)];
        let mem = Counting {
            inner: SliceMemory::new(&regions),
            reads: Default::default(),
        };
        let mut w: Walker<X86_64, _, _> = Walker::new(regs, PcKind::Exact, &mem, &memo, opts);
        let mut buf = [Frame::default(); 16];
        let n = w.fill(&mut buf);
        let fresh = walk_with::<X86_64>(regs, true, st, code.clone(), opts);
        assert_eq!(
            (buf[..n].to_vec(), w.stop_reason()),
            fresh,
            "remembering changes no walk"
        );
        (fresh.0, mem.reads.get())
    };
    let opts = WalkOptions::default();
    let mut words = [CODE + 0x205, 0x1234, CODE + 0x1fe, 0];
    let (first, _) = walk(&stack(&words), opts);
    let methods: Vec<_> = first.iter().map(|f| f.method).collect();
    assert_eq!(methods, [Method::Context, Method::SFrame, Method::Scan]);
    assert!(
        memo.ends.borrow().len() == 1,
        "the first walk marks the state"
    );
    let (_, recording) = walk(&stack(&words), opts);
    let (again, replaying) = walk(&stack(&words), opts);
    assert_eq!(again, first);
    // Frame 0's row, the window and the failed read past the stack.
    assert_eq!(
        replaying, 3,
        "the third walk replays ({recording} reads recording)"
    );
    // Too close to the depth limit: the general steps give the stop.
    let (limited, _) = walk(
        &stack(&words),
        WalkOptions {
            max_depth: 3,
            ..opts
        },
    );
    assert_eq!(limited, first);
    // A word the recorded scan passed over now holds a return address.
    words[1] = CODE + 0x30c;
    let (changed, _) = walk(&stack(&words), opts);
    assert_eq!(changed[2].pc, CODE + 0x30c);
    assert_eq!(changed[2].sp, STACK + 16);
}

#[test]
fn a_remembered_scan_is_taken_again_only_while_the_stack_holds_its_words() {
    let memo = Remembering::new(Fake::x86());
    let walk = |st: &[u8]| {
        let regions = [(STACK, st)];
        let mem = SliceMemory::new(&regions);
        let regs = x86(CODE + 0x10, STACK, 3);
        let w: Walker<X86_64, _, _> =
            Walker::new(regs, PcKind::Exact, mem, &memo, WalkOptions::default());
        let frames: Vec<Frame> = w.collect();
        let fresh = walk::<X86_64>(regs, true, st, Fake::x86()).0;
        assert_eq!(frames, fresh, "remembering changes no walk");
        frames
    };
    let mut words = [CODE + 0x13, 0x1234, CODE + 0x55, 0];
    let first = walk(&stack(&words));
    assert_eq!(first[1].pc, CODE + 0x55);
    assert_eq!(memo.recalled.get(), 0);
    assert_eq!(memo.scans.borrow()[0], (STACK, words[..3].to_vec()));
    assert_eq!(walk(&stack(&words)), first);
    assert_eq!(memo.recalled.get(), 1, "the second walk recalls the scan");
    // A word below the one taken now holds a return address: the scan
    // must find it, not the remembered one.
    words[1] = CODE + 0x0a;
    let changed = walk(&stack(&words));
    assert_eq!(changed[1].pc, CODE + 0x0a);
    assert_eq!(changed[1].sp, STACK + 16);
}

#[test]
fn a_zero_return_address_ends_the_walk() {
    let code = Fake::x86().row(CODE, CODE + 0x100, at_call());
    let st = stack(&[0, 0]);
    let (frames, stop) = walk::<X86_64>(x86(CODE + 0x10, STACK, 0), true, &st, code);
    assert_eq!(frames.len(), 1);
    assert_eq!(stop, StopReason::ReturnAddressZero);
}

#[test]
fn the_depth_limit_is_respected() {
    // A row that steps 8 bytes up the stack forever, through return
    // addresses that all land in the same function.
    let code = Fake::x86().row(CODE, CODE + 0x100, at_call());
    let st = stack(&[CODE + 0x55; 64]);
    let opts = WalkOptions {
        max_depth: 10,
        ..Default::default()
    };
    let (frames, stop) = walk_with::<X86_64>(x86(CODE + 0x10, STACK, 0), true, &st, code, opts);
    assert_eq!(frames.len(), 10);
    assert_eq!(stop, StopReason::DepthLimit);
}

#[test]
fn x86_64_signal_frame_restores_the_interrupted_registers_from_the_ucontext() {
    use x86_64::ucontext_offsets as o;
    let tramp = CODE + 0x300;
    let mut words = vec![0u64; 64];
    words[0] = tramp; // the handler's return address
    let uc = 8u64; // ucontext at the sp after the handler returns
    words[((uc + o::RIP) / 8) as usize] = CODE + 0x42;
    words[((uc + o::RSP) / 8) as usize] = STACK + 0x100;
    words[((uc + o::RBP) / 8) as usize] = 0x77;
    let st = stack(&words);
    let mut code = Fake::x86().row(CODE, CODE + 0x100, at_call());
    code.trampoline = Some(tramp);
    let (frames, _) = walk::<X86_64>(x86(CODE + 0x10, STACK, 0), true, &st, code);
    assert_eq!(frames[1].pc, tramp);
    // No call left the trampoline's address: it is exact, or it would
    // symbolize as the byte before it.
    assert!(frames[1].pc_kind.is_exact());
    assert_eq!(frames[2].pc, CODE + 0x42);
    assert_eq!(frames[2].sp, STACK + 0x100);
    assert_eq!(frames[2].method, Method::SignalFrame);
    assert!(frames[2].pc_kind.is_exact());
}

#[test]
fn aarch64_a_handler_returning_to_the_trampoline_gives_it_as_an_exact_pc() {
    use aarch64::sigframe_offsets as o;
    // A leaf handler: its return address, the trampoline, still in lr, and
    // x29 the kernel's frame record above the signal frame (its copy of the
    // interrupted x29/x30 in the ucontext). With a leaf row, the row says
    // so; without one, the trampoline in lr is still taken (`entry`): a
    // frame-pointer step would take that record and skip both the
    // trampoline and the interrupted pc.
    let tramp = CODE + 0x300;
    let mut words = vec![0u64; 112];
    words[(o::PC / 8) as usize] = CODE + 0x40;
    words[(o::SP / 8) as usize] = STACK + 0x400;
    words[0x308 / 8] = CODE + 0x80;
    words[((o::REGS + 30 * 8) / 8) as usize] = CODE + 0x80;
    let st = stack(&words);
    let leaf = row(CfaRule::SpPlus(0), RegRule::SameValue, RegRule::SameValue);
    for (code, method) in [
        (Fake::a64().row(CODE, CODE + 0x100, leaf), Method::SFrame),
        (Fake::a64(), Method::Entry),
    ] {
        let mut code = code;
        code.trampoline = Some(tramp);
        let regs = a64(CODE + 0x10, STACK, STACK + 0x300, tramp);
        let (frames, _) = walk::<Aarch64>(regs, true, &st, code);
        let f = |i: usize| {
            frames
                .get(i)
                .map(|f| (f.pc, f.pc_kind.is_exact(), f.method))
        };
        assert_eq!(f(1), Some((tramp, true, method)), "{frames:x?}");
        assert_eq!(
            f(2),
            Some((CODE + 0x40, true, Method::SignalFrame)),
            "{frames:x?}"
        );
    }
}

#[test]
fn a_signal_between_a_trampolines_two_instructions_is_crossed() {
    // The timer's signal lands after `mov $15, %rax` (x86_64) or
    // `mov x8, #139` (AArch64): the exact pc is inside the trampoline and
    // the stack is as at its start. It used to be stepped as plain code.
    let tramp = CODE + 0x300;
    let opts = without_scans();
    {
        use x86_64::ucontext_offsets as o;
        let mut words = vec![0u64; 80];
        words[(o::RIP / 8) as usize] = CODE + 0x42;
        words[(o::RSP / 8) as usize] = STACK + 0x100;
        words[0x208 / 8] = CODE + 0x80;
        let st = stack(&words);
        let mut code = Fake::x86();
        code.trampoline = Some(tramp);
        for at in [0, 7] {
            let regs = x86(tramp + at, STACK, STACK + 0x200);
            let frames = walk_with::<X86_64>(regs, true, &st, code.clone(), opts).0;
            let f = frames.get(1).map(|f| (f.pc, f.sp, f.method));
            assert_eq!(
                f,
                Some((CODE + 0x42, STACK + 0x100, Method::SignalFrame)),
                "x86_64 +{at}: {frames:x?}"
            );
        }
    }
    {
        use aarch64::sigframe_offsets as o;
        let mut words = vec![0u64; 112];
        words[(o::PC / 8) as usize] = CODE + 0x40;
        words[(o::SP / 8) as usize] = STACK + 0x400;
        // The kernel's frame record above the signal frame, as saved in it.
        words[0x308 / 8] = CODE + 0x80;
        words[((o::REGS + 30 * 8) / 8) as usize] = CODE + 0x80;
        let st = stack(&words);
        let mut code = Fake::a64();
        code.trampoline = Some(tramp);
        for at in [0, 4] {
            let regs = a64(tramp + at, STACK, STACK + 0x300, 0);
            let frames = walk_with::<Aarch64>(regs, true, &st, code.clone(), opts).0;
            let f = frames.get(1).map(|f| (f.pc, f.sp, f.method));
            assert_eq!(
                f,
                Some((CODE + 0x40, STACK + 0x400, Method::SignalFrame)),
                "AArch64 +{at}: {frames:x?}"
            );
        }
    }
}

#[test]
fn a_known_trampoline_right_after_a_function_with_a_row_is_still_crossed() {
    use x86_64::ucontext_offsets as o;
    // The function before the trampoline ends where it starts, so the
    // handler's return address, looked up one byte early, finds its row.
    let walk_to = |tramp: u64| {
        let mut before = at_call();
        before.func_start = CODE + 0x80;
        before.func_size = (tramp - before.func_start) as u32;
        let mut words = vec![0u64; 64];
        words[0] = tramp;
        let uc = 8u64;
        words[((uc + o::RIP) / 8) as usize] = CODE + 0x42;
        words[((uc + o::RSP) / 8) as usize] = STACK + 0x100;
        let mut code =
            Fake::x86()
                .row(CODE, CODE + 0x80, at_call())
                .row(CODE + 0x80, tramp, before);
        code.trampoline = Some(tramp);
        walk::<X86_64>(x86(CODE + 0x10, STACK, 0), true, &stack(&words), code)
    };
    // No call ends at CODE + 0x101: only a signal frame returns there.
    let (frames, _) = walk_to(CODE + 0x101);
    assert_eq!(frames[1].pc, CODE + 0x101);
    assert_eq!(
        (frames[2].pc, frames[2].sp, frames[2].method),
        (CODE + 0x42, STACK + 0x100, Method::SignalFrame)
    );
    // A call ends at CODE + 0x104: a call that never returns leaves that
    // return address too, so the row is applied (it reads a zero there).
    let (frames, stop) = walk_to(CODE + 0x104);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].pc, CODE + 0x104);
    assert_eq!(stop, StopReason::ReturnAddressZero);
}

fn a64(pc: u64, sp: u64, fp: u64, lr: u64) -> aarch64::Regs {
    aarch64::Regs {
        pc,
        sp,
        fp,
        lr,
        ..Default::default()
    }
}

#[test]
fn aarch64_ra_in_lr_is_used_in_the_first_frame_only() {
    // Leaf row (CFA = sp + 0, RA in x30) for the first function; the
    // caller at CODE+0x104 has the same row, which is illegal there.
    let leaf = row(CfaRule::SpPlus(0), RegRule::SameValue, RegRule::SameValue);
    let code = Fake::a64().row(CODE, CODE + 0x200, leaf);
    let st = stack(&[0; 8]);
    let opts = WalkOptions {
        scan_words: 0,
        use_frame_pointers: false,
        ..Default::default()
    };
    let regs = a64(CODE + 0x10, STACK, 0, CODE + 0x104);
    let (frames, stop) = walk_with::<Aarch64>(regs, true, &st, code, opts);
    // A leaf before its prologue (CFA = sp): the step keeps sp but takes
    // the return address from x30, once; the same rule in frame 1 is
    // refused, so the walk ends there.
    assert_eq!(
        frames.iter().map(|f| (f.pc, f.sp)).collect::<Vec<_>>(),
        [(CODE + 0x10, STACK), (CODE + 0x104, STACK)]
    );
    assert_eq!(stop, StopReason::NoValidCaller);
    // With a frame, likewise.
    let leaf = row(CfaRule::SpPlus(16), RegRule::SameValue, RegRule::SameValue);
    let code = Fake::a64().row(CODE, CODE + 0x200, leaf);
    let (frames, stop) = walk_with::<Aarch64>(regs, true, &st, code, opts);
    assert_eq!(
        frames.iter().map(|f| f.pc).collect::<Vec<_>>(),
        [CODE + 0x10, CODE + 0x104]
    );
    assert_eq!(
        stop,
        StopReason::NoValidCaller,
        "RA-in-LR refused in frame 1"
    );
}

#[test]
fn aarch64_a_row_naming_x19_applies_in_the_first_frame_only() {
    // As on x86_64 (`a_row_naming_another_register_...`): B's FLEX row
    // takes the CFA from x19, which only frame 0 knows. Frame 1 in B falls
    // back to its frame record (returning to C at +0x0a) instead of the
    // stale word x19 = STACK + 0x40 would find (C at +0x0f).
    let record = row(CfaRule::SpPlus(16), RegRule::AtCfa(-8), RegRule::AtCfa(-16));
    let flex = row(
        CfaRule::RegPlus {
            reg: 19,
            offset: 16,
        },
        RegRule::AtCfa(-8),
        RegRule::AtCfa(-16),
    );
    let code = Fake::a64()
        .row(CODE, CODE + 0x100, record)
        .row(CODE + 0x100, CODE + 0x200, flex)
        .row(CODE + 0x200, CODE + 0x300, outermost());
    let mut w = [0u64; 12];
    w[0] = STACK + 0x20; // A's frame record: B's frame pointer
    w[1] = CODE + 0x104; // and return address
    w[5] = CODE + 0x20a; // B's frame record at STACK + 0x20
    w[9] = CODE + 0x20f; // the stale word
    let st = stack(&w);
    let opts = without_scans();
    let regs = |pc| aarch64::Regs {
        x19_x28: [STACK + 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ..a64(pc, STACK, STACK, 0)
    };
    let (frames, _) = walk_with::<Aarch64>(regs(CODE + 0x10), true, &st, code.clone(), opts);
    let found: Vec<_> = frames.iter().map(|f| (f.pc, f.method)).collect();
    assert_eq!(
        found,
        [
            (CODE + 0x10, Method::Context),
            (CODE + 0x104, Method::SFrame),
            (CODE + 0x20a, Method::FramePointer),
        ]
    );
    let (frames, _) = walk_with::<Aarch64>(regs(CODE + 0x110), true, &st, code, opts);
    assert_eq!(
        (frames[1].pc, frames[1].method),
        (CODE + 0x20f, Method::SFrame)
    );
}

#[test]
fn aarch64_mangled_return_addresses_are_stripped() {
    let mut r = row(CfaRule::SpPlus(16), RegRule::AtCfa(-8), RegRule::AtCfa(-16));
    r.mangled_ra = true;
    let code = Fake::a64().row(CODE, CODE + 0x100, r);
    let signed = (CODE + 0x104) | 0x002a_0000_0000_0000;
    let st = stack(&[0x99, signed, 0, 0]);
    let (frames, _) = walk::<Aarch64>(a64(CODE + 0x10, STACK, 0, 0), true, &st, code);
    assert_eq!(frames[1].pc, CODE + 0x104);
    assert_eq!(frames[1].sp, STACK + 16);
}

#[test]
fn aarch64_signal_frame_offsets_match_the_kernel_layout() {
    use aarch64::sigframe_offsets as o;
    assert_eq!(o::REGS - 8, 304, "sigcontext at sp + 304");
    assert_eq!(o::PC, 568, "pc at sp + 568");
}

#[test]
fn pac_stripping_keeps_exactly_the_user_address_bits_of_the_target() {
    // Apple's arm64e signatures start at bit 47 (user addresses stay below
    // 0x7fff_fe00_0000); Linux user addresses use 48 bits until `init`
    // finds the kernel's user space smaller (under qemu-user, 39 bits).
    let bits = if cfg!(target_vendor = "apple") {
        47
    } else {
        48
    };
    assert_eq!(aarch64::USER_ADDRESS_MASK, (1u64 << bits) - 1);
    let mask = aarch64::user_address_mask();
    assert!(mask == aarch64::USER_ADDRESS_MASK || !cfg!(target_vendor = "apple"));
    assert!(((1 << 36) - 1..=aarch64::USER_ADDRESS_MASK).contains(&mask));
    assert_eq!(mask & (mask + 1), 0, "{mask:#x} is a run of low bits");
    // An address below every user space, signed in every bit above this one.
    let user = 0x0000_000f_1234_5678u64;
    let signed = user | 0x0035_8000_0000_0000 & !mask;
    assert_ne!(signed, user);
    assert_eq!(aarch64::strip_pac(signed), user);
    assert_eq!(aarch64::strip_pac(u64::MAX), mask);
}

/// Walks `st` from `regs` through `map` into a buffer (remembered ends
/// and all), and again afresh over `code` ([`walk_with`]).
fn remembered_and_fresh<C: CodeMap>(
    regs: x86_64::Regs,
    st: &[u8],
    map: &C,
    code: &Fake,
) -> ((Vec<Frame>, StopReason), (Vec<Frame>, StopReason)) {
    let regions = [(STACK, st)];
    let opts = WalkOptions::default();
    let mut w: Walker<X86_64, _, _> =
        Walker::new(regs, PcKind::Exact, SliceMemory::new(&regions), map, opts);
    let mut buf = [Frame::default(); 16];
    let n = w.fill(&mut buf);
    let fresh = walk_with::<X86_64>(regs, true, st, code.clone(), opts);
    ((buf[..n].to_vec(), w.stop_reason()), fresh)
}

#[test]
fn a_row_naming_another_register_applies_only_where_the_walk_knows_that_register() {
    // Function B's FLEX row takes the CFA from rbx (stack realignment can
    // use any register). In frame 0 rbx is the captured register; in an
    // outer frame it holds whatever a callee left there (SFrame does not
    // say where callees saved it), so that frame falls back to its frame
    // record. The stack holds a frame record at rbp returning to C at
    // +0x0a, and, 32 bytes up, a stale word that reads as a return to C at
    // +0x0f: what rbx = STACK + 48 would find.
    let code = Fake::x86()
        .row(CODE, CODE + 0x100, at_call())
        .row(
            CODE + 0x100,
            CODE + 0x200,
            row(
                CfaRule::RegPlus { reg: 3, offset: 16 },
                RegRule::AtCfa(-8),
                RegRule::SameValue,
            ),
        )
        .row(CODE + 0x200, CODE + 0x300, outermost());
    let mut words = [0u64; 8];
    words[0] = CODE + 0x105; // A returns into B
    words[3] = CODE + 0x20a; // B's frame record at rbp = STACK + 16
    words[7] = CODE + 0x20f; // the stale word
    let st = stack(&words);
    let memo = Remembering::new(code.clone());
    let regs = |rip, rbx| x86_64::Regs {
        rbx,
        ..x86(rip, STACK, STACK + 16)
    };
    // Frame 1 in B: rbx is not its own, whatever it holds. The walk end
    // from there is remembered (marked, recorded, replayed) and stays
    // right for another rbx.
    for rbx in [STACK + 16, STACK + 16, STACK + 16, STACK + 48, STACK + 48] {
        let (got, fresh) = remembered_and_fresh(regs(CODE + 0x10, rbx), &st, &memo, &code);
        assert_eq!(got, fresh, "rbx {rbx:#x}");
        let found: Vec<_> = got.0.iter().map(|f| (f.pc, f.method)).collect();
        assert_eq!(
            found,
            [
                (CODE + 0x10, Method::Context),
                (CODE + 0x105, Method::SFrame),
                (CODE + 0x20a, Method::FramePointer),
            ],
            "rbx {rbx:#x}"
        );
    }
    // Frame 0 in B: its rbx is the captured register, and the row applies.
    for (rbx, ra) in [(STACK + 16, 0x20a), (STACK + 48, 0x20f)] {
        let (frames, _) = walk::<X86_64>(regs(CODE + 0x110, rbx), true, &st, code.clone());
        assert_eq!(
            (frames[1].pc, frames[1].method),
            (CODE + ra, Method::SFrame)
        );
    }
}

/// [`Remembering`] whose idea of whether a pc outside the code is a signal
/// trampoline comes from memory that can change, as the module table's
/// does for a pc in no module (its code is read with a checked read).
struct OutsideCode {
    memo: Remembering,
    sigreturn_at: std::cell::Cell<Option<u64>>,
}

impl CodeMap for OutsideCode {
    fn lookup(&self, pc: u64) -> Lookup {
        self.memo.lookup(pc)
    }
    fn is_code(&self, addr: u64) -> bool {
        self.memo.is_code(addr)
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.memo.read_code(addr, buf)
    }
    fn is_sigreturn<A: Arch>(&self, pc: u64) -> bool {
        self.sigreturn_at.get() == Some(pc)
    }
    fn sigreturn_reads_memory<A: Arch>(&self, pc: u64) -> bool {
        !self.is_code(pc)
    }
    fn recall_end<R>(
        &self,
        key: u64,
        take: impl FnOnce(&[core::sync::atomic::AtomicU64; END_WORDS]) -> R,
    ) -> Option<R> {
        self.memo.recall_end(key, take)
    }
    fn remember_end(&self, key: u64, words: &[u64; END_WORDS]) {
        self.memo.remember_end(key, words)
    }
}

#[test]
fn a_walk_end_that_asked_memory_whether_a_pc_is_a_trampoline_is_not_remembered() {
    // Frame 0: cfa = sp + 8; its caller has no row, and the frame record
    // at rbp holds a return address in no module. Whether that is a signal
    // trampoline is decided by the memory there, which changes between the
    // walks (code mapped there by a JIT, say).
    const OUTSIDE: u64 = 0x9000_0000;
    let code = Fake::x86().row(CODE, CODE + 0x100, at_call());
    let st = stack(&[CODE + 0x105, 0, 0, OUTSIDE]);
    let map = OutsideCode {
        memo: Remembering::new(code.clone()),
        sigreturn_at: Default::default(),
    };
    let regs = x86(CODE + 0x10, STACK, STACK + 16);
    for _ in 0..3 {
        let (got, fresh) = remembered_and_fresh(regs, &st, &map, &code);
        assert_eq!(got, fresh);
        assert_eq!(got.0.len(), 2);
    }
    map.sigreturn_at.set(Some(OUTSIDE));
    let regions = [(STACK, &st[..])];
    let mut w: Walker<X86_64, _, _> = Walker::new(
        regs,
        PcKind::Exact,
        SliceMemory::new(&regions),
        &map,
        WalkOptions {
            fast_path: false,
            ..Default::default()
        },
    );
    let general: Vec<Frame> = w.by_ref().collect();
    assert_eq!(general.len(), 3, "the trampoline is now a frame");
    let (got, _) = remembered_and_fresh(regs, &st, &map, &code);
    assert_eq!(got.0, general);
}

#[test]
fn a_depth_limit_of_zero_gives_no_frame() {
    let st = stack(&[0; 4]);
    let opts = WalkOptions {
        max_depth: 0,
        ..Default::default()
    };
    let (frames, stop) =
        walk_with::<X86_64>(x86(CODE + 0x10, STACK, 0), true, &st, Fake::x86(), opts);
    assert_eq!((frames.len(), stop), (0, StopReason::DepthLimit));
}

#[test]
fn a_signal_frame_that_names_its_own_trampoline_is_crossed_a_bounded_number_of_times() {
    // Frame 0 returns into a known trampoline whose ucontext names the
    // trampoline again, one word up: each signal step lowers nothing, and
    // without a bound the walk would repeat to its depth limit.
    use x86_64::ucontext_offsets as o;
    let tramp = CODE + 0x300;
    let mut words = vec![0u64; 64];
    words[0] = tramp;
    let uc = 8u64;
    words[((uc + o::RIP) / 8) as usize] = tramp;
    words[((uc + o::RSP) / 8) as usize] = STACK + uc;
    let st = stack(&words);
    let mut code = Fake::x86().row(CODE, CODE + 0x100, at_call());
    code.trampoline = Some(tramp);
    for fast_path in [true, false] {
        let opts = WalkOptions {
            max_depth: 10_000,
            fast_path,
            ..Default::default()
        };
        let (frames, stop) =
            walk_with::<X86_64>(x86(CODE + 0x10, STACK, 0), true, &st, code.clone(), opts);
        let signal = frames
            .iter()
            .filter(|f| f.method == Method::SignalFrame)
            .count();
        assert_eq!(signal, usize::from(MAX_SIGNAL_FRAMES), "{frames:x?}");
        assert!(frames.len() < 2 * usize::from(MAX_SIGNAL_FRAMES) + 4);
        assert_ne!(stop, StopReason::DepthLimit);
    }
}

#[test]
fn aarch64_an_inexact_sp_is_fixed_by_the_frame_record_the_chain_points_at() {
    // Frame 0 has no row; its frame record (x29 = STACK+0x20) returns into
    // F1, whose sp is then only bounded below (STACK+0x30). F1's row:
    // CFA = sp + 32, RA at CFA-8, FP at CFA-16, so its record sits at the
    // x29 frame 0 saved (STACK+0x50) and its real sp is STACK+0x40. A stale
    // return address lies lower, at STACK+0x48, in F1's locals.
    let f1 = row(CfaRule::SpPlus(32), RegRule::AtCfa(-8), RegRule::AtCfa(-16));
    let code = Fake::a64().row(CODE + 0x100, CODE + 0x200, f1);
    let mut w = [0u64; 16];
    w[0x20 / 8] = STACK + 0x50;
    w[0x28 / 8] = CODE + 0x104;
    w[0x48 / 8] = CODE + 0x3f8;
    w[0x50 / 8] = 0;
    w[0x58 / 8] = CODE + 0x208;
    let st = stack(&w);
    let regs = a64(CODE + 0x10, STACK, STACK + 0x20, 0);
    let opts = without_scans();
    let (frames, _) = walk_with::<Aarch64>(regs, true, &st, code.clone(), opts);
    assert_eq!(frames[1].method, Method::FramePointer);
    assert_eq!(
        (frames[2].pc, frames[2].sp, frames[2].method),
        (CODE + 0x208, STACK + 0x60, Method::SFrame),
        "{frames:x?}"
    );
    // A row that does not save the frame pointer (code without frame
    // records) leaves only the search over stack slots, which takes the
    // lowest slot that gives a return address after a call.
    let f1 = row(CfaRule::SpPlus(32), RegRule::AtCfa(-8), RegRule::SameValue);
    let code = Fake::a64().row(CODE + 0x100, CODE + 0x200, f1);
    let (frames, _) = walk_with::<Aarch64>(regs, true, &st, code, opts);
    assert_eq!(
        (frames[2].pc, frames[2].method),
        (CODE + 0x3f8, Method::SFrame),
        "{frames:x?}"
    );
}

#[test]
fn aarch64_the_frame_record_fixes_an_inexact_sp_below_a_large_callee_frame() {
    // As above, but frame 0 (no row; its frame record at the bottom of its
    // frame, as GCC lays it out) has 0x400 bytes of locals above its
    // record, and a stale return address lies in them. F1's row (CFA = sp
    // + 48, RA at CFA-40, FP at CFA-48, as GCC emits) and the x29 frame 0
    // saved (STACK+0x400, F1's record) still fix F1's sp: STACK+0x400.
    let f1 = row(
        CfaRule::SpPlus(48),
        RegRule::AtCfa(-40),
        RegRule::AtCfa(-48),
    );
    let code = Fake::a64().row(CODE + 0x100, CODE + 0x200, f1);
    let mut w = [0u64; 0x480 / 8];
    w[0] = STACK + 0x400;
    w[1] = CODE + 0x104;
    w[0x40 / 8] = CODE + 0x3f8;
    w[0x400 / 8] = 0;
    w[0x408 / 8] = CODE + 0x208;
    let st = stack(&w);
    let regs = a64(CODE + 0x10, STACK, STACK, 0);
    let opts = without_scans();
    let (frames, _) = walk_with::<Aarch64>(regs, true, &st, code, opts);
    assert_eq!(frames[1].method, Method::FramePointer);
    assert_eq!(
        (frames[2].pc, frames[2].sp, frames[2].method),
        (CODE + 0x208, STACK + 0x430, Method::SFrame),
        "{frames:x?}"
    );
}

#[test]
fn aarch64_a_rewritten_ucontext_never_makes_the_kernels_frame_record_a_signal_frame() {
    use aarch64::sigframe_offsets as o;
    // A handler (frame 0, its frame record at its sp) returns to the
    // trampoline; the signal frame is at STACK+0x40 and, as the kernel
    // lays it out (siginfo, then the ucontext with its 4 KiB of reserved
    // space), the kernel's frame record {x29, x30} lies just above it, at
    // STACK+0x1290, just below the interrupted sp, whose frame holds words
    // of its own. The handler rewrote x30 in the ucontext (as one that
    // redirects the interrupted code does), so the saved x29/x30 no longer
    // equal the kernel's record.
    let tramp = CODE + 0x300;
    let frame = 0x40u64;
    let record = frame + 0x1250;
    let mut w = vec![0u64; 0x1400 / 8];
    let at = |off: u64| (off / 8) as usize;
    w[0] = STACK + record;
    w[1] = tramp;
    for i in 0..29u64 {
        w[at(frame + o::REGS + i * 8)] = 0x1111 * (i + 1);
    }
    w[at(frame + o::PC)] = CODE + 0x40;
    w[at(frame + o::SP)] = STACK + record + 16;
    w[at(frame + o::REGS + 29 * 8)] = STACK + 0x1300;
    w[at(frame + o::REGS + 30 * 8)] = CODE + 0x99;
    w[at(record)] = STACK + 0x1300;
    w[at(record + 8)] = CODE + 0x84;
    w[at(record + 16)] = STACK + 0x1380;
    w[at(record + 24)] = CODE + 0x64;
    let st = stack(&w);
    let opts = without_scans();
    let regs = a64(CODE + 0x10, STACK, STACK, tramp);
    // With a row for the handler (CFA = sp + 0x40, x29 and x30 at its
    // bottom), the trampoline's sp is exact and the ucontext is read
    // there. Without one, the sp is only a lower bound and no position
    // matches the record: the signal frame is not crossed.
    let handler = row(
        CfaRule::SpPlus(0x40),
        RegRule::AtCfa(-0x38),
        RegRule::AtCfa(-0x40),
    );
    for with_row in [true, false] {
        let mut code = Fake::a64();
        if with_row {
            code = code.row(CODE, CODE + 0x20, handler);
        }
        code.trampoline = Some(tramp);
        let (frames, _) = walk_with::<Aarch64>(regs, true, &st, code, opts);
        assert_eq!(frames[1].pc, tramp, "{frames:x?}");
        let signal = frames.iter().find(|f| f.method == Method::SignalFrame);
        if with_row {
            let f = signal.unwrap_or_else(|| panic!("{frames:x?}"));
            assert_eq!(
                (f.pc, f.sp, f.pc_kind.is_exact()),
                (CODE + 0x40, STACK + record + 16, true),
                "{frames:x?}"
            );
        } else {
            assert!(signal.is_none(), "{frames:x?}");
            // Its return address is both in x30 and in its frame record:
            // one frame, not two.
            let trampolines = frames.iter().filter(|f| f.pc == tramp).count();
            assert_eq!(trampolines, 1, "{frames:x?}");
        }
    }
}

#[test]
fn aarch64_the_slot_search_prefers_a_return_address_after_a_direct_call_to_the_function() {
    // As above, without F1's frame record: the stale return address at
    // STACK+0x48 follows a call too, but the one at STACK+0x58 follows a
    // `bl` to F1 itself, and wins.
    let mut f1 = row(CfaRule::SpPlus(32), RegRule::AtCfa(-8), RegRule::SameValue);
    f1.func_start = CODE + 0x100;
    let mut code = Fake::a64().row(CODE + 0x100, CODE + 0x200, f1);
    let call = |at: u64, to: u64| {
        let words = (to.wrapping_sub(at) as i64 / 4) as u32 & 0x03ff_ffff;
        (0x9400_0000 | words).to_le_bytes()
    };
    let at = 0x204usize;
    code.code[at..at + 4].copy_from_slice(&call(CODE + 0x204, CODE + 0x100));
    let mut before = [0u8; 8];
    assert!(code.read_code(CODE + 0x200, &mut before));
    assert_eq!(
        Aarch64::direct_call_target(&before, CODE + 0x208),
        Some(CODE + 0x100)
    );
    let mut w = [0u64; 16];
    w[0x20 / 8] = STACK + 0x50;
    w[0x28 / 8] = CODE + 0x104;
    w[0x48 / 8] = CODE + 0x3f8;
    w[0x58 / 8] = CODE + 0x208;
    let opts = without_scans();
    let regs = a64(CODE + 0x10, STACK, STACK + 0x20, 0);
    let (frames, _) = walk_with::<Aarch64>(regs, true, &stack(&w), code, opts);
    assert_eq!(
        (frames[2].pc, frames[2].sp, frames[2].method),
        (CODE + 0x208, STACK + 0x60, Method::SFrame),
        "{frames:x?}"
    );
}

#[test]
fn direct_call_targets_are_decoded_on_both_architectures() {
    // x86_64: `call rel32` ending at the return address, and a `call *%rax`.
    let ra = 0x1000u64;
    let rel = (-0x100i32).to_le_bytes();
    let code = [0x90, 0x90, 0x90, 0xe8, rel[0], rel[1], rel[2], rel[3]];
    assert_eq!(X86_64::direct_call_target(&code, ra), Some(0xf00));
    assert_eq!(X86_64::direct_call_target(&[0x90; 8], ra), None);
    let code = [0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xd0];
    assert_eq!(X86_64::direct_call_target(&code, ra), None);
    // AArch64: `bl` backwards and forwards, and a `blr x0`.
    let bl = |words: i32| (0x9400_0000 | (words as u32 & 0x03ff_ffff)).to_le_bytes();
    let with = |insn: [u8; 4]| [0, 0, 0, 0, insn[0], insn[1], insn[2], insn[3]];
    assert_eq!(
        Aarch64::direct_call_target(&with(bl(-0x40)), ra),
        Some(0xffc - 0x100)
    );
    assert_eq!(
        Aarch64::direct_call_target(&with(bl(0x40)), ra),
        Some(0xffc + 0x100)
    );
    let blr = 0xd63f_0000u32.to_le_bytes();
    assert_eq!(Aarch64::direct_call_target(&with(blr), ra), None);
}

#[test]
fn the_frame_pointer_end_marker_is_reported_the_same_whatever_turns_scanning_off() {
    // Frame records STACK+16 -> STACK+48 -> rbp 0 (the ABI's end marker).
    let st = stack(&[0, 0, STACK + 48, CODE + 0x55, 0, 0, 0, CODE + 0x64, 0]);
    let regs = x86(CODE + 0x10, STACK, STACK + 16);
    let stop_with = |opts| walk_with::<X86_64>(regs, true, &st, Fake::x86(), opts).1;
    for opts in [
        without_scans(),
        WalkOptions {
            max_scans_in_a_row: 0,
            ..Default::default()
        },
        WalkOptions::default(),
    ] {
        assert_eq!(stop_with(opts), StopReason::Outermost, "{opts:?}");
    }
}

#[test]
fn a_zero_word_under_a_first_frames_stray_frame_pointer_does_not_end_the_walk() {
    // Frame 0 (interrupted, in code without a row) uses rbp as a general
    // register: it points at zeroed stack. The return address into its
    // caller is at [rsp]; the caller has a row, and its caller's row is
    // the outermost.
    let code = Fake::x86().row(CODE + 0x100, CODE + 0x200, at_call()).row(
        CODE + 0x200,
        CODE + 0x300,
        outermost(),
    );
    let st = stack(&[CODE + 0x104, CODE + 0x208, 0, 0, 0, 0]);
    let regs = x86(CODE + 0x410, STACK, STACK + 16);
    for fast_path in [true, false] {
        let opts = WalkOptions {
            fast_path,
            ..Default::default()
        };
        let (frames, stop) = walk_with::<X86_64>(regs, true, &st, code.clone(), opts);
        let pcs: Vec<u64> = frames.iter().map(|f| f.pc).collect();
        assert_eq!(
            pcs,
            [CODE + 0x410, CODE + 0x104, CODE + 0x208],
            "{frames:x?}"
        );
        assert_eq!(stop, StopReason::Outermost);
    }
    // Reached through the chain, the same zero still ends the walk.
    let st = stack(&[0, 0, STACK + 32, CODE + 0x55, 0, 0, 0, 0]);
    let (frames, stop) =
        walk::<X86_64>(x86(CODE + 0x10, STACK, STACK + 16), true, &st, Fake::x86());
    assert_eq!((frames.len(), stop), (2, StopReason::ReturnAddressZero));
}

#[test]
fn x86_64_a_call_through_a_null_pointer_keeps_the_function_that_made_it() {
    // F (frame record at STACK + 16, return address CODE + 0x205 into G)
    // called through a null pointer: pc 0, and the call's return address
    // CODE + 0x104 into F at [rsp]. A frame-pointer step from pc 0 went
    // straight to G, leaving out F, the function with the bug.
    let st = stack(&[CODE + 0x104, 0, STACK + 48, CODE + 0x205, 0, 0, 0, 0]);
    for pc in [0, 0xdead_0000] {
        let (frames, _) = walk::<X86_64>(x86(pc, STACK, STACK + 16), true, &st, Fake::x86());
        let got: Vec<(u64, Method)> = frames.iter().map(|f| (f.pc, f.method)).collect();
        assert_eq!(
            got[..3.min(got.len())],
            [
                (pc, Method::Context),
                (CODE + 0x104, Method::Entry),
                (CODE + 0x205, Method::FramePointer)
            ],
            "{frames:x?}"
        );
        assert_eq!(frames[1].sp, STACK + 8);
    }
    // A word at [rsp] that follows no call is not taken for one.
    let st = stack(&[CODE + 0x106, 0, STACK + 48, CODE + 0x205, 0, 0, 0, 0]);
    let (frames, _) = walk::<X86_64>(x86(0, STACK, STACK + 16), true, &st, Fake::x86());
    assert_eq!(
        (frames[1].pc, frames[1].method),
        (CODE + 0x205, Method::FramePointer)
    );
    // Only a precise frame's pc: a return address outside code is not a
    // call's target, even over a word at [rsp] that follows a call.
    let st = stack(&[CODE + 0x104, 0, STACK + 48, CODE + 0x205, 0, 0, 0, 0]);
    let (frames, _) = walk::<X86_64>(x86(0, STACK, STACK + 16), false, &st, Fake::x86());
    assert_ne!(frames.get(1).map(|f| f.method), Some(Method::Entry));
}

#[test]
fn aarch64_a_call_through_a_null_pointer_keeps_the_function_that_made_it() {
    // As on x86_64, with the return address in the link register.
    let st = stack(&[0, 0, STACK + 48, CODE + 0x204, 0, 0, 0, 0]);
    let (frames, _) = walk::<Aarch64>(
        a64(0, STACK, STACK + 16, CODE + 0x104),
        true,
        &st,
        Fake::a64(),
    );
    let got: Vec<(u64, Method)> = frames.iter().map(|f| (f.pc, f.method)).collect();
    assert_eq!(
        got[..3],
        [
            (0, Method::Context),
            (CODE + 0x104, Method::Entry),
            (CODE + 0x204, Method::FramePointer)
        ],
        "{frames:x?}"
    );
    assert_eq!(frames[1].sp, STACK);
    // A link register that follows no call is left alone.
    let (frames, _) = walk::<Aarch64>(
        a64(0, STACK, STACK + 16, CODE + 0x106),
        true,
        &st,
        Fake::a64(),
    );
    assert_eq!(
        (frames[1].pc, frames[1].method),
        (CODE + 0x204, Method::FramePointer)
    );
}

#[test]
fn regs_are_those_of_the_next_frame_to_be_returned() {
    let code = Fake::x86().row(CODE, CODE + 0x100, at_call());
    let st = stack(&[CODE + 0x55, 0]);
    let regions = [(STACK, &st[..])];
    for fast_path in [false, true] {
        let opts = WalkOptions {
            fast_path,
            ..Default::default()
        };
        let start = x86(CODE + 0x10, STACK, 0);
        let mut w: Walker<X86_64, _, _> = Walker::new(
            start,
            PcKind::Exact,
            SliceMemory::new(&regions),
            code.clone(),
            opts,
        );
        assert_eq!(w.regs(), &start);
        let f0 = w.next().unwrap();
        assert_eq!(f0.pc, CODE + 0x10);
        let r = *w.regs();
        let f1 = w.next().unwrap();
        assert_eq!((r.rip, r.rsp), (f1.pc, f1.sp), "fast_path {fast_path}");
    }
}

/// How a test recursion's frame record at a given depth is spoiled.
#[derive(Clone, Copy, Debug)]
enum Spoil {
    None,
    /// Its saved frame pointer is misaligned.
    Misaligned,
    /// Its return address is 0.
    ZeroReturn,
    /// Its saved frame pointer points back down the stack.
    Downwards,
    /// Its saved frame pointer leads off the stack.
    OffStack,
    /// Its saved frame pointer is just below the next frame's sp, at a
    /// record that returns into the recursion again.
    Overlapping,
    /// Its saved frame pointer is misaligned, at a record that returns
    /// into the recursion again.
    MisalignedRecursing,
}

/// A chain of frame records from STACK + 16: six returning to `rec` (a
/// recursion), one to `other`, one to `last` whose saved frame pointer is
/// the ABI's end marker; record 3 spoiled as `spoil` says.
fn recursion_stack(rec: u64, other: u64, last: u64, spoil: Spoil) -> Vec<u8> {
    let ras = [rec, rec, rec, rec, rec, rec, other, last];
    let mut words = vec![0u64, 0];
    for (i, &ra) in ras.iter().enumerate() {
        let next = if i + 1 == ras.len() {
            0
        } else {
            STACK + 16 * (i as u64 + 2)
        };
        words.extend([next, ra]);
    }
    let at = 2 + 2 * 3;
    match spoil {
        Spoil::None => {}
        Spoil::Misaligned => words[at] += 4,
        Spoil::ZeroReturn => words[at + 1] = 0,
        Spoil::Downwards => words[at] = STACK + 16,
        Spoil::OffStack => words[at] = STACK + 0x10_0000,
        // Record 3 is at STACK + 64, record 4 at STACK + 80.
        Spoil::Overlapping => {
            words[at] = STACK + 72;
            words[at + 2] = rec;
        }
        Spoil::MisalignedRecursing => words[at] = STACK + 84,
    }
    let mut st = stack(&words);
    if let Spoil::MisalignedRecursing = spoil {
        st[92..100].copy_from_slice(&rec.to_ne_bytes());
    }
    st
}

/// Walks `st` as [`walk_with`] does (the general step must agree), then
/// with `fill` in buffers of every size from 1 to 12 frames until the walk
/// ends: each must give the same frames and stop. Returns the walk.
fn walks_alike_in_any_buffer<A: Arch>(
    regs: A::Regs,
    st: &[u8],
    code: &Fake,
    opts: WalkOptions,
    what: &str,
) -> (Vec<Frame>, StopReason) {
    let expected = walk_with::<A>(regs, true, st, code.clone(), opts);
    let regions = [(STACK, st)];
    for chunk in 1..=12 {
        let mem = SliceMemory::new(&regions);
        let mut w: Walker<A, _, _> = Walker::new(regs, PcKind::Exact, mem, code.clone(), opts);
        let mut all = Vec::new();
        let mut buf = vec![Frame::default(); chunk];
        loop {
            let n = w.fill(&mut buf);
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            (all, w.stop_reason()),
            expected,
            "{what}, buffers of {chunk}, rows {}, {opts:?}",
            code.rows.len()
        );
    }
    expected
}

#[test]
fn a_recursion_through_frame_records_walks_as_the_general_step_does_in_any_buffer() {
    let spoils = [
        Spoil::None,
        Spoil::Misaligned,
        Spoil::ZeroReturn,
        Spoil::Downwards,
        Spoil::OffStack,
        Spoil::Overlapping,
        Spoil::MisalignedRecursing,
    ];
    // Tables and frame pointers, frame pointers alone (rows of the record's
    // shape then step as links), tables alone.
    let options = [
        WalkOptions::default(),
        WalkOptions {
            use_tables: false,
            ..Default::default()
        },
        WalkOptions {
            use_frame_pointers: false,
            ..Default::default()
        },
    ];
    // x86_64, as frame-pointer links (no rows) and as SFrame rows of the
    // frame record's shape.
    let fp_row = row(CfaRule::FpPlus(16), RegRule::AtCfa(-8), RegRule::AtCfa(-16));
    for code in [Fake::x86(), Fake::x86().row(CODE, CODE + 0x100, fp_row)] {
        for (spoil, opts) in spoils.iter().flat_map(|&s| options.map(|o| (s, o))) {
            let st = recursion_stack(CODE + 0x55, CODE + 0x105, CODE + 0x205, spoil);
            let regs = x86(CODE + 0x10, STACK, STACK + 16);
            let what = format!("{spoil:?}");
            let expected = walks_alike_in_any_buffer::<X86_64>(regs, &st, &code, opts, &what);
            if let (Spoil::None, true) = (spoil, opts.use_frame_pointers) {
                let pcs: Vec<u64> = expected.0.iter().map(|f| f.pc).collect();
                let mut want = vec![CODE + 0x10];
                want.extend([CODE + 0x55; 6]);
                want.extend([CODE + 0x105, CODE + 0x205]);
                assert_eq!(pcs, want);
                assert_eq!(expected.1, StopReason::Outermost);
            }
        }
    }
    // AArch64, as frame-pointer links and as SFrame rows of the record's
    // shape that mark the return address signed: the return addresses
    // carry PAC bits, so the recursion shows only once they are stripped.
    let pac = 0x007f_0000_0000_0000;
    let mut signed = fp_row;
    signed.mangled_ra = true;
    for code in [Fake::a64(), Fake::a64().row(CODE, CODE + 0x100, signed)] {
        for (spoil, opts) in spoils.iter().flat_map(|&s| options.map(|o| (s, o))) {
            let st = recursion_stack(
                (CODE + 0x54) | pac,
                (CODE + 0x104) | pac,
                CODE + 0x204,
                spoil,
            );
            let regs = a64(CODE + 0x10, STACK, STACK + 16, 0);
            let what = format!("AArch64, {spoil:?}");
            let expected = walks_alike_in_any_buffer::<Aarch64>(regs, &st, &code, opts, &what);
            if let (Spoil::None, true) = (spoil, opts.use_frame_pointers) {
                assert_eq!(expected.0.len(), 9, "{:x?}", expected.0);
                assert!(expected.0[1..7].iter().all(|f| f.pc == CODE + 0x54));
            }
        }
    }
}

#[test]
fn without_tables_the_fast_path_stops_at_the_outermost_function_as_the_general_step_does() {
    // Frame records at STACK+16 -> STACK+48 -> STACK+80; the first return
    // address lies in the outermost function, and a record goes on past it.
    let st = stack(&[
        0,
        0,
        STACK + 48,
        CODE + 0x55,
        0,
        0,
        STACK + 80,
        CODE + 0x64,
        0,
        0,
        0,
        0,
    ]);
    let regs = x86(CODE + 0x10, STACK, STACK + 16);
    let code = Fake {
        outermost: Some((CODE + 0x50, CODE + 0x60)),
        ..Fake::x86()
    };
    let regions = [(STACK, &st[..])];
    for fast_path in [true, false] {
        let opts = WalkOptions {
            use_tables: false,
            fast_path,
            ..Default::default()
        };
        let mut w: Walker<X86_64, _, _> = Walker::new(
            regs,
            PcKind::Exact,
            SliceMemory::new(&regions),
            code.clone(),
            opts,
        );
        let pcs: Vec<u64> = w.by_ref().map(|f| f.pc).collect();
        assert_eq!(pcs, [CODE + 0x10, CODE + 0x55], "fast path {fast_path}");
        assert_eq!(
            w.stop_reason(),
            StopReason::Outermost,
            "fast path {fast_path}"
        );
    }
}

/// A walk that fills a buffer ends at a return address into the entry
/// function as the general step does, with or without tables: there at
/// once, or, at the depth limit or at a known trampoline there (with a
/// ucontext above it), however the general step ends it.
#[test]
fn a_filled_walk_ends_in_the_entry_function_as_the_general_step_does() {
    use x86_64::ucontext_offsets as o;
    // f (CFA = sp+16, RA at CFA-8, and a frame record at sp) returns into
    // the entry function, whose row has no return address. Above: a
    // ucontext (for the trampoline's case) and a frame record.
    let after_call = CODE + 0x203;
    let trampoline = CODE + 0x206;
    let cases = [
        (after_call, None, 64),
        (after_call, None, 2),
        (trampoline, Some(trampoline), 64),
    ];
    for (ra, tramp, max_depth) in cases {
        let mut words = vec![0u64; 64];
        words[..2].copy_from_slice(&[STACK + 16, ra]);
        let uc = 16u64;
        words[((uc + o::RIP) / 8) as usize] = CODE + 0x42;
        words[((uc + o::RSP) / 8) as usize] = STACK + 0x1f0;
        let st = stack(&words);
        let code = Fake {
            trampoline: tramp,
            outermost: Some((CODE + 0x200, CODE + 0x300)),
            ..Fake::x86()
        }
        .row(
            CODE,
            CODE + 0x100,
            row(CfaRule::SpPlus(16), RegRule::AtCfa(-8), RegRule::SameValue),
        )
        .row(CODE + 0x200, CODE + 0x300, outermost());
        let regs = x86(CODE + 0x10, STACK, STACK);
        let regions = [(STACK, &st[..])];
        for use_tables in [true, false] {
            let opts = WalkOptions {
                use_tables,
                max_depth,
                ..Default::default()
            };
            let walker = |opts| {
                Walker::<X86_64, _, _>::new(
                    regs,
                    PcKind::Exact,
                    SliceMemory::new(&regions),
                    code.clone(),
                    opts,
                )
            };
            let mut filled = walker(opts);
            let mut buf = [Frame::default(); 8];
            let n = filled.fill(&mut buf);
            let mut general = walker(WalkOptions {
                fast_path: false,
                ..opts
            });
            let frames: Vec<Frame> = general.by_ref().collect();
            let case = format!("ra {ra:#x}, tables {use_tables}, depth {max_depth}");
            assert_eq!(buf[..n], frames[..], "{case}");
            assert_eq!(filled.stop_reason(), general.stop_reason(), "{case}");
            let methods: Vec<Method> = frames.iter().map(|f| f.method).collect();
            let crossed = methods.contains(&Method::SignalFrame);
            match (tramp, max_depth) {
                (None, 2) => assert_eq!(general.stop_reason(), StopReason::DepthLimit, "{case}"),
                (None, _) => assert_eq!(general.stop_reason(), StopReason::Outermost, "{case}"),
                // With tables, a trampoline where the entry function's row
                // ends is one (its signal frame is crossed); without, the
                // entry function ends the walk first.
                (Some(_), _) => assert_eq!(crossed, use_tables, "{case}: {frames:x?}"),
            }
        }
    }
}

#[test]
fn a_scan_takes_a_known_trampoline_and_crosses_its_signal_frame() {
    use x86_64::ucontext_offsets as o;
    // A handler with neither a row nor a frame pointer: its return address
    // into the trampoline (which follows no call) lies above one local,
    // and the ucontext at the sp after its return.
    let tramp = CODE + 0x301;
    let mut words = vec![0u64; 64];
    words[0] = 0x1234;
    words[1] = tramp;
    let uc = 16u64;
    words[((uc + o::RIP) / 8) as usize] = CODE + 0x42;
    words[((uc + o::RSP) / 8) as usize] = STACK + 0x1f0;
    words[((uc + o::RBP) / 8) as usize] = 0x77;
    let st = stack(&words);
    let mut code = Fake::x86();
    code.trampoline = Some(tramp);
    let (frames, _) = walk::<X86_64>(x86(CODE + 0x10, STACK, 3), true, &st, code);
    let got: Vec<_> = frames.iter().map(|f| (f.pc, f.method)).collect();
    assert_eq!(
        got.get(1..3),
        Some(&[(tramp, Method::Scan), (CODE + 0x42, Method::SignalFrame)][..]),
        "{frames:x?}"
    );
}

#[test]
fn a_zero_read_through_a_scanned_frames_row_does_not_end_the_walk() {
    // S at CODE+0x100: CFA = sp + 16, RA at CFA-8. A stale return address
    // into S, dead words, then frame 0's real return address (into code
    // without a row). The scan takes the stale one first; S's row then
    // reads a dead word as its return address: zero or not, a stale frame's
    // row proves nothing, and the scan goes on to the real caller.
    let code = Fake::x86().row(
        CODE + 0x100,
        CODE + 0x200,
        row(CfaRule::SpPlus(16), RegRule::AtCfa(-8), RegRule::SameValue),
    );
    let walk_with_dead_word = |dead: u64| {
        let st = stack(&[CODE + 0x104, 0, dead, CODE + 0x55, 0, 0]);
        let (frames, stop) = walk::<X86_64>(x86(CODE + 0x10, STACK, 3), true, &st, code.clone());
        let got: Vec<_> = frames.iter().map(|f| (f.pc, f.method)).collect();
        (got, stop)
    };
    let garbage = walk_with_dead_word(0x1234);
    assert!(
        garbage.0.contains(&(CODE + 0x55, Method::Scan)),
        "{garbage:x?}"
    );
    assert_eq!(walk_with_dead_word(0), garbage, "a dead zero, not 0x1234");
}

#[test]
fn a_scan_in_the_last_slot_of_the_address_space_does_not_wrap_the_sp() {
    // At TOP: a frame record [16, ra], a stale word, and a return address
    // in the last slot. At 0: a frame record at 16 leading back to TOP. A
    // scanned sp that wrapped to 0 would let the walk cycle to its depth
    // limit.
    const TOP: u64 = 0u64.wrapping_sub(32);
    let top = stack(&[16, CODE + 0x55, 0x1234, CODE + 0x55]);
    let low = stack(&[0, 0, TOP, CODE + 0x55, 0]);
    let regions = [(TOP, &top[..]), (0, &low[..])];
    let w: Walker<X86_64, _, _> = Walker::new(
        x86(CODE + 0x10, 8, TOP),
        PcKind::Exact,
        SliceMemory::new(&regions),
        Fake::x86(),
        WalkOptions::default(),
    );
    let frames: Vec<Frame> = w.collect();
    assert!(
        frames.windows(2).all(|f| f[1].sp > f[0].sp),
        "{} frames: {:x?}",
        frames.len(),
        &frames[..frames.len().min(6)]
    );
}
