//! Per-OS glue: module discovery, thread stack bounds, checked reads of
//! possibly-unmapped memory, and `ucontext` conversion.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::{
    checked_reads, read_checked, refresh, register_thread, registered_stack, regs_from_ucontext,
    write_registers,
};

#[cfg(target_os = "macos")]
pub mod macos;
#[cfg(target_os = "macos")]
pub use macos::{
    read_checked, refresh, register_thread, registered_stack, regs_from_ucontext, write_registers,
};

mod macho_image;
mod stack;
pub use macho_image::macho_module;
pub use stack::{current_altstack, LiveMemory};

/// The names of AArch64 `x0`..`x30` as crash reports print them.
#[cfg(all(any(target_os = "linux", target_os = "macos"), target_arch = "aarch64"))]
const A64_X_NAMES: [&str; 31] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "fp", "lr",
];

/// Writes a crash report's register dump: `name value` pairs, four to a
/// line, each line marked as the report's.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn write_register_lines<'a, S: crate::markup::Sink>(
    m: &mut crate::markup::Markup<'_, S>,
    regs: impl IntoIterator<Item = (&'a str, u64)>,
) {
    let mut regs = regs.into_iter().enumerate().peekable();
    while let Some((i, (name, value))) = regs.next() {
        m.text(if i % 4 == 0 { "stackmark:   " } else { "  " });
        m.text(name).text(" ").hex(value);
        if i % 4 == 3 || regs.peek().is_none() {
            m.newline();
        }
    }
}
