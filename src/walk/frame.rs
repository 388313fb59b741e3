//! What a walk produces and is told: frames, their methods and pc kinds,
//! the table's answer for a pc, the options and why a walk ended.

use crate::arch::Arch;
use crate::formats::sframe::Row;

/// Which method produced a frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Method {
    /// Frame 0: taken directly from the captured or signal-provided registers.
    #[default]
    Context,
    /// Recovered with an SFrame row.
    SFrame,
    /// Recovered with an Apple compact-unwind encoding.
    CompactUnwind,
    /// Recovered with a row of the module's DWARF call frame information
    /// (`.eh_frame`), where no SFrame or compact-unwind entry covers the pc.
    Cfi,
    /// Recovered by following the frame-pointer chain.
    FramePointer,
    /// Recovered by scanning the stack for a plausible return address.
    /// Low trust: it may name a stale frame.
    Scan,
    /// Recovered from the `ucontext` a signal trampoline left on the stack; the
    /// pc is the exact interrupted instruction.
    SignalFrame,
    /// The caller of a frame 0 (or signal-interrupted frame) whose pc lies in
    /// no known code, as after a call through a null or wild pointer: the
    /// return address the call left, at the stack pointer on x86_64 or in
    /// the link register on AArch64, taken when it follows a call in known
    /// code. Also, on AArch64, a signal trampoline still in the link
    /// register of such a frame that has no table row and has not saved it
    /// in a frame record (a leaf signal handler, say).
    Entry,
}

impl Method {
    /// A short lowercase name, as printed after each markup `bt` element.
    pub fn name(self) -> &'static str {
        match self {
            Method::Context => "context",
            Method::SFrame => "sframe",
            Method::CompactUnwind => "compact",
            Method::Cfi => "cfi",
            Method::FramePointer => "fp",
            Method::Scan => "scan",
            Method::SignalFrame => "signal",
            Method::Entry => "entry",
        }
    }

    /// Whether frames found this way may be wrong (stack scanning).
    pub fn is_low_trust(self) -> bool {
        matches!(self, Method::Scan)
    }
}

/// What a frame's pc is, which says where it is looked up and how markup
/// marks it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PcKind {
    /// A return address, the instruction after a call: looked up at
    /// `pc - 1`, which lies inside the call even after a call that never
    /// returns (markup `:ra`).
    #[default]
    ReturnAddress,
    /// The instruction itself: frame 0, a frame a signal interrupted, and
    /// a signal trampoline the walk crossed, whose address the kernel (not
    /// a call) left (markup `:pc`).
    Exact,
}

impl PcKind {
    /// [`PcKind::Exact`] if `exact`, else [`PcKind::ReturnAddress`].
    #[inline(always)]
    pub const fn exact_if(exact: bool) -> PcKind {
        if exact {
            PcKind::Exact
        } else {
            PcKind::ReturnAddress
        }
    }

    /// Whether the pc is the instruction itself.
    #[inline(always)]
    pub const fn is_exact(self) -> bool {
        matches!(self, PcKind::Exact)
    }
}

/// One frame of a walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// The frame's pc: an instruction or a return address, as `pc_kind`
    /// says.
    pub pc: u64,
    /// The stack pointer in this frame.
    pub sp: u64,
    /// What `pc` is.
    pub pc_kind: PcKind,
    /// How this frame was found.
    pub method: Method,
}

impl Frame {
    /// The address to look up for this frame: `pc` if exact, else `pc - 1`,
    /// which lies inside the call instruction even after a noreturn call.
    pub fn lookup_pc(&self) -> u64 {
        if self.pc_kind.is_exact() {
            self.pc
        } else {
            self.pc.wrapping_sub(1)
        }
    }
}

/// What the module table knows about one pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The pc lies in no executable segment of a known module.
    Outside,
    /// The pc is in known code, but no unwind table covers it.
    NoInfo,
    /// An SFrame row covers the pc.
    SFrame(Row),
    /// A row of DWARF call frame information (`.eh_frame`) covers the pc,
    /// in the walker's terms.
    Cfi(Row),
    /// An Apple compact-unwind entry covers the pc.
    Compact {
        /// The 32-bit compact encoding.
        encoding: u32,
        /// Runtime address of the function's first instruction.
        func_start: u64,
    },
}

/// The most words a remembered scan may have read
/// ([`CodeMap::recall_scan`](crate::walk::CodeMap::recall_scan)).
pub const SCAN_MEMO_WORDS: usize = 32;

/// Whether a walk's frames keep the ordering the walker guarantees: each
/// stack pointer is higher than the one before, except that a frame
/// reached through a signal frame may be on another stack, and the caller
/// of frame 0 or of a signal-interrupted frame may share its stack pointer
/// (a leaf that had not allocated a frame yet, its return address still in
/// a register).
pub fn sp_order_holds(frames: &[Frame]) -> bool {
    frames.windows(2).enumerate().all(|(i, w)| {
        let from_register_ok = i == 0 || w[0].method == Method::SignalFrame;
        w[1].method == Method::SignalFrame
            || w[1].sp > w[0].sp
            || (from_register_ok && w[1].sp == w[0].sp)
    })
}

/// Whether a frame found by `method` has an exact stack pointer, not just a
/// lower bound (left by an AArch64 frame-pointer step or a scan).
#[inline(always)]
pub(crate) fn sp_exact<A: Arch>(method: Method) -> bool {
    match method {
        Method::FramePointer | Method::Scan => A::FP_STEP_GIVES_CFA,
        _ => true,
    }
}

/// Limits and switches for one walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOptions {
    /// The most frames to produce: 256 by default. `walk_here` and
    /// `walk_ucontext` take the length of the buffer they fill instead.
    pub max_depth: usize,
    /// Use unwind tables (SFrame, compact unwind). Off gives a frame-pointer
    /// walk, for comparison.
    pub use_tables: bool,
    /// Follow frame pointers where no table applies.
    pub use_frame_pointers: bool,
    /// How many stack words stack scanning may inspect per frame; 0 disables
    /// scanning.
    pub scan_words: usize,
    /// How many frames in a row scanning may produce before the walk stops:
    /// past the outermost real frame (above `_start`, in the environment
    /// and auxiliary vector) scanning only finds stale code addresses.
    pub max_scans_in_a_row: usize,
    /// Try the specialised step for simple rows and frame pointers first
    /// (`walk::fast`). It never changes the frames a walk gives, only its cost;
    /// off sends every step through the general path, for comparison. A
    /// test hook: only with the `internals` feature (always on without it).
    #[cfg(feature = "internals")]
    pub fast_path: bool,
}

impl WalkOptions {
    /// Whether the walk tries the hot path first ([`WalkOptions::fast_path`]
    /// with the `internals` feature; always otherwise).
    #[inline(always)]
    pub(super) fn takes_fast_path(&self) -> bool {
        #[cfg(feature = "internals")]
        return self.fast_path;
        #[cfg(not(feature = "internals"))]
        true
    }
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            max_depth: 256,
            use_tables: true,
            use_frame_pointers: true,
            scan_words: 512,
            max_scans_in_a_row: 3,
            #[cfg(feature = "internals")]
            fast_path: true,
        }
    }
}

/// How many signal frames one walk crosses at most. A signal frame is the
/// one step that may move the stack pointer down (the handler may run on
/// an alternate stack), so without a bound a ucontext that names its own
/// trampoline would repeat until the depth limit; real nesting of handlers
/// interrupted by further signals stays far below it.
pub const MAX_SIGNAL_FRAMES: u8 = 16;

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Still walking (or the walk has not started).
    Running,
    /// The outermost frame was reached: a row with an undefined return
    /// address, the program's entry function (walks without tables), or a
    /// frame-pointer chain ending in 0.
    Outermost,
    /// The return address was 0.
    ReturnAddressZero,
    /// No method recovered a caller that passed validation (return address
    /// in known code, stack pointer strictly increasing, memory readable).
    NoValidCaller,
    /// The depth limit or the output buffer was reached.
    DepthLimit,
}
