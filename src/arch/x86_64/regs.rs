//! The registers the walk tracks on x86_64.

/// The registers the walk tracks on x86_64: the pc, the stack and frame
/// pointers, and the callee-saved registers. The layout is fixed because the
/// capture routine writes it from assembly.
#[repr(C)]
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

impl Regs {
    /// The value of DWARF register `reg`, if the walk tracks it.
    pub fn dwarf(&self, reg: u16) -> Option<u64> {
        Some(match reg {
            3 => self.rbx,
            6 => self.rbp,
            7 => self.rsp,
            12 => self.r12,
            13 => self.r13,
            14 => self.r14,
            15 => self.r15,
            16 => self.rip,
            _ => return None,
        })
    }
}
