//! Per-OS glue: module discovery, thread stack bounds, checked reads of
//! possibly-unmapped memory, and `ucontext` conversion.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::{
    current_altstack, read_checked, refresh, register_thread, registered_stack, regs_from_ucontext,
    write_registers,
};

#[cfg(target_os = "macos")]
pub mod macos;
#[cfg(target_os = "macos")]
pub use macos::{
    current_altstack, read_checked, refresh, register_thread, registered_stack, regs_from_ucontext,
    write_registers,
};

mod macho_image;
mod stack;
pub use macho_image::macho_module;
pub use stack::LiveMemory;
