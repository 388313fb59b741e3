//! x86_64 (AMD64): registers, capture and unwind rules.

/// The registers the walk tracks on x86_64: the pc, the stack and frame
/// pointers, and the callee-saved registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// Instruction pointer.
    pub rip: u64,
    /// Stack pointer.
    pub rsp: u64,
    /// Frame pointer.
    pub rbp: u64,
    /// Callee-saved `rbx`.
    pub rbx: u64,
    /// Callee-saved `r12`.
    pub r12: u64,
    /// Callee-saved `r13`.
    pub r13: u64,
    /// Callee-saved `r14`.
    pub r14: u64,
    /// Callee-saved `r15`.
    pub r15: u64,
}
