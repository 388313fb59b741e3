//! The walk: table row, else frame pointer, else scan; generic over the reader.

/// Which method produced a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// Frame 0: taken directly from the captured or signal-provided registers.
    Context,
    /// Recovered with an SFrame row.
    SFrame,
    /// Recovered with an Apple compact-unwind encoding.
    CompactUnwind,
    /// Recovered by following the frame-pointer chain.
    FramePointer,
    /// Recovered by scanning the stack for a plausible return address.
    /// Low trust: it may name a stale frame.
    Scan,
    /// Recovered from the `ucontext` a signal trampoline left on the stack; the
    /// pc is the exact interrupted instruction.
    SignalFrame,
}

impl Method {
    /// A short lowercase name, as printed after each markup `bt` element.
    pub fn name(self) -> &'static str {
        match self {
            Method::Context => "context",
            Method::SFrame => "sframe",
            Method::CompactUnwind => "compact",
            Method::FramePointer => "fp",
            Method::Scan => "scan",
            Method::SignalFrame => "signal",
        }
    }

    /// Whether frames found this way may be wrong (stack scanning).
    pub fn is_low_trust(self) -> bool {
        matches!(self, Method::Scan)
    }
}

/// One frame of a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The frame's pc: the exact instruction when `precise`, else a return
    /// address (the instruction after the call).
    pub pc: u64,
    /// The stack pointer in this frame.
    pub sp: u64,
    /// `true` for frame 0 and for a frame interrupted by a signal: `pc` is the
    /// instruction itself (markup `:pc`). `false` for a return address (`:ra`).
    pub precise: bool,
    /// How this frame was found.
    pub method: Method,
}

impl Frame {
    /// The address to look up for this frame: `pc` if precise, else `pc - 1`,
    /// which lies inside the call instruction even after a noreturn call.
    pub fn lookup_pc(&self) -> u64 {
        if self.precise {
            self.pc
        } else {
            self.pc.wrapping_sub(1)
        }
    }
}

use crate::arch::{Arch, StepError};
use crate::formats::sframe::{RegRule, Row};
use crate::memory::MemoryReader;

/// What the module table knows about one pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The pc lies in no executable segment of a known module.
    Outside,
    /// The pc is in known code, but no unwind table covers it.
    NoInfo,
    /// An SFrame row covers the pc.
    SFrame(Row),
    /// An Apple compact-unwind entry covers the pc.
    Compact {
        /// The 32-bit compact encoding.
        encoding: u32,
        /// Runtime address of the function's first instruction.
        func_start: u64,
    },
}

/// The walker's view of the loaded code: where the unwind rows are and which
/// addresses are code.
pub trait CodeMap {
    /// The unwind information for `pc` (already adjusted: the exact pc or
    /// `ra - 1`).
    fn lookup(&self, pc: u64) -> Lookup;
    /// Whether `addr` lies in an executable segment of a known module.
    fn is_code(&self, addr: u64) -> bool;
    /// Reads code bytes at `addr`; `false` unless the whole range is known,
    /// readable code.
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool;
    /// Whether `pc` is the first instruction of a signal-return trampoline.
    /// The default compares the code at `pc` with the architecture's.
    fn is_sigreturn<A: Arch>(&self, pc: u64) -> bool {
        let mut code = [0u8; 16];
        let code = &mut code[..A::SIGRETURN_CODE.len()];
        self.read_code(pc, code) && code == A::SIGRETURN_CODE
    }
}

/// Limits and switches for one walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOptions {
    /// The most frames to produce.
    pub max_depth: usize,
    /// Use unwind tables (SFrame, compact unwind). Off gives a frame-pointer
    /// walk, for comparison.
    pub use_tables: bool,
    /// Follow frame pointers where no table applies.
    pub use_frame_pointers: bool,
    /// How many stack words stack scanning may inspect per frame; 0 disables
    /// scanning.
    pub scan_words: usize,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            max_depth: 256,
            use_tables: true,
            use_frame_pointers: true,
            scan_words: 512,
        }
    }
}

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Still walking (or the walk has not started).
    Running,
    /// An unwind row marked the outermost frame.
    Outermost,
    /// The return address was 0.
    ReturnAddressZero,
    /// No method recovered a caller that passed validation (return address
    /// in known code, stack pointer strictly increasing, memory readable).
    NoValidCaller,
    /// The depth limit or the output buffer was reached.
    DepthLimit,
}

/// A walk over the stack, one [`Frame`] at a time.
///
/// It is generic over the architecture, the memory reader and the code map,
/// so the same step logic walks the live process and captured stacks.
#[derive(Debug)]
pub struct Walker<A: Arch, M, C> {
    regs: A::Regs,
    mem: M,
    code: C,
    opts: WalkOptions,
    /// The current frame, not yet returned (`None` once returned).
    pending: Option<Frame>,
    depth: usize,
    /// The current frame may hold its return address in a register: it is
    /// frame 0 or was interrupted by a signal.
    ra_in_register_ok: bool,
    stop: StopReason,
}

impl<A: Arch, M: MemoryReader, C: CodeMap> Walker<A, M, C> {
    /// A walk starting at `regs`. `precise` says whether the pc is the exact
    /// instruction (a signal context) or a return address (a capture).
    pub fn new(regs: A::Regs, precise: bool, mem: M, code: C, opts: WalkOptions) -> Self {
        let first = Frame {
            pc: A::pc(&regs),
            sp: A::sp(&regs),
            precise,
            method: Method::Context,
        };
        Walker {
            regs,
            mem,
            code,
            opts,
            pending: Some(first),
            depth: 0,
            ra_in_register_ok: true,
            stop: StopReason::Running,
        }
    }

    /// Why the walk ended ([`StopReason::Running`] while it goes on).
    pub fn stop_reason(&self) -> StopReason {
        self.stop
    }

    /// The registers of the frame most recently returned.
    pub fn regs(&self) -> &A::Regs {
        &self.regs
    }

    /// Walks into `out`, returning the number of frames written.
    pub fn fill(&mut self, out: &mut [Frame]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.next() {
                Some(f) => {
                    out[n] = f;
                    n += 1;
                }
                None => return n,
            }
        }
        if self.stop == StopReason::Running {
            self.stop = StopReason::DepthLimit;
        }
        n
    }

    fn accept(&self, cur: &Frame, next: &A::Regs, check_sp: bool) -> bool {
        let pc = A::pc(next);
        pc != 0 && (!check_sp || A::sp(next) > cur.sp) && self.code.is_code(pc.wrapping_sub(1))
    }

    /// One step from `cur` to its caller.
    fn step(&mut self, cur: &Frame) -> Result<(A::Regs, Method, bool), StopReason> {
        let regs = self.regs;
        if self.code.is_sigreturn::<A>(cur.pc) {
            if let Ok(next) = A::signal_frame_regs(&regs, &self.mem) {
                // The handler may run on an alternate stack, below or above
                // the interrupted one: no sp ordering across a signal frame.
                if A::pc(&next) != 0 && A::sp(&next) != 0 {
                    self.mem.enter_stack(A::sp(&next));
                    return Ok((next, Method::SignalFrame, true));
                }
            }
        }
        if self.opts.use_tables {
            match self.code.lookup(cur.lookup_pc()) {
                Lookup::SFrame(row) => {
                    if row.ra == RegRule::Undefined {
                        return Err(StopReason::Outermost);
                    }
                    match A::step_sframe(&row, &regs, &self.mem, self.ra_in_register_ok) {
                        Ok(next) if A::pc(&next) == 0 => return Err(StopReason::ReturnAddressZero),
                        Ok(next) if self.accept(cur, &next, true) => {
                            return Ok((next, Method::SFrame, false))
                        }
                        Err(StepError::Outermost) => return Err(StopReason::Outermost),
                        _ => {}
                    }
                }
                Lookup::Compact { .. } | Lookup::NoInfo | Lookup::Outside => {}
            }
        }
        if self.opts.use_frame_pointers {
            if let Ok(next) = A::step_frame_pointer(&regs, &self.mem) {
                if A::pc(&next) == 0 {
                    return Err(StopReason::ReturnAddressZero);
                }
                if self.accept(cur, &next, true) {
                    return Ok((next, Method::FramePointer, false));
                }
            }
        }
        self.scan_stack(cur).ok_or(StopReason::NoValidCaller)
    }

    /// Looks upwards from sp for a word that points just after a call
    /// instruction in known code.
    fn scan_stack(&self, cur: &Frame) -> Option<(A::Regs, Method, bool)> {
        let start = cur.sp.checked_add(7)? & !7;
        for i in 0..self.opts.scan_words as u64 {
            let slot = start.checked_add(i * 8)?;
            let word = self.mem.read_u64(slot)?;
            let ra = A::strip_pac(word);
            if ra < 8 || !self.code.is_code(ra - 1) {
                continue;
            }
            let mut before = [0u8; 8];
            if self.code.read_code(ra - 8, &mut before) && A::ends_with_call(&before) {
                // The word below a return address is often the caller's
                // saved frame pointer (x86_64 `push rbp`, AArch64 frame
                // records): adopt it when it points further up the stack, so
                // the walk can resume by frame pointer.
                let fp = self
                    .mem
                    .read_u64(slot.wrapping_sub(8))
                    .filter(|&fp| fp > slot && fp % 8 == 0);
                return Some((A::scanned(&self.regs, ra, slot, fp), Method::Scan, false));
            }
        }
        None
    }
}

impl<A: Arch, M: MemoryReader, C: CodeMap> Iterator for Walker<A, M, C> {
    type Item = Frame;

    fn next(&mut self) -> Option<Frame> {
        let cur = self.pending.take()?;
        self.depth += 1;
        if self.depth >= self.opts.max_depth {
            self.stop = StopReason::DepthLimit;
            return Some(cur);
        }
        match self.step(&cur) {
            Ok((regs, method, precise)) => {
                self.regs = regs;
                self.ra_in_register_ok = method == Method::SignalFrame;
                self.pending = Some(Frame {
                    pc: A::pc(&regs),
                    sp: A::sp(&regs),
                    precise,
                    method,
                });
            }
            Err(reason) => self.stop = reason,
        }
        Some(cur)
    }
}
