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

/// Removes pointer-authentication bits from a code address.
///
/// User-space addresses on Linux and macOS fit in the low 48 bits; a signed
/// pointer keeps its PAC in the bits above. Clearing them is what `xpaci`
/// does for a user address, without needing the instruction.
pub fn strip_pac(addr: u64) -> u64 {
    addr & 0x0000_ffff_ffff_ffff
}
