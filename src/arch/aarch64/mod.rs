//! AArch64: registers, capture and unwind rules.

/// The registers the walk tracks on AArch64: pc, sp, the frame record
/// registers x29/x30 and the callee-saved x19-x28.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// Program counter.
    pub pc: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (x29).
    pub fp: u64,
    /// Link register (x30).
    pub lr: u64,
    /// Callee-saved x19 to x28, in order.
    pub x19_x28: [u64; 10],
}
