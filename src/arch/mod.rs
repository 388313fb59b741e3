//! Per-architecture pieces: the register set, how it is captured (inline asm)
//! or taken from a signal's `ucontext`, and how each kind of unwind rule moves
//! the registers from a callee to its caller.
//!
//! Both architectures compile on every host so their step logic is tested
//! everywhere against captured stacks; only capture and `ucontext` glue are
//! gated on the target.

pub mod aarch64;
pub mod x86_64;

#[cfg(target_arch = "aarch64")]
pub use aarch64 as native;
#[cfg(target_arch = "x86_64")]
pub use x86_64 as native;
