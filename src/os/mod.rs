//! Per-OS glue: module discovery, thread stack bounds, checked reads of
//! possibly-unmapped memory, and `ucontext` conversion.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::{read_checked, refresh, register_thread, regs_from_ucontext, LiveMemory};
