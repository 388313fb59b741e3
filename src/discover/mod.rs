//! Module discovery per OS: what fills the module table
//! ([`crate::modules`]) from the loader's list, with each module's unwind
//! tables, pinning and signal trampolines.

pub mod address_set;
mod macho_image;

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::refresh;

#[cfg(target_os = "macos")]
pub mod macos;
#[cfg(target_os = "macos")]
pub use macos::refresh;

pub use macho_image::macho_module;
