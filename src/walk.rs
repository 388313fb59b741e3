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
