//! stackmark walks the stack of its own process without allocating and prints
//! the result as LLVM symbolizer markup.
//!
//! * [`formats`]: pure readers of SFrame, Apple compact unwind and ELF headers.
//! * [`arch`]: registers, capture and unwind rules per architecture.
//! * [`memory`]: the bounded reader every walk reads through.
//! * [`walk`]: the walk itself, generic over architecture, memory and code map.
//! * [`modules`] and [`discover`]: the fixed-memory module table and its discovery; [`sys`]: the operating system underneath.
//! * [`markup`]: the symbolizer markup writer.
//! * [`crash`], [`panic_hook`], (Linux) [`sample`] and [`threads`]: a crash
//!   handler, a panic hook, a sampling profiler and every thread's stack,
//!   built on the walk.
//!
//! Start with [`init`] (the module table), then walk with [`walk_here`],
//! [`walk_from`] or [`walk_ucontext`], or install [`install_crash_handler`]
//! and [`install_panic_hook`] to have reports written for you:
//!
//! ```no_run
//! # #[cfg(target_os = "linux")] {
//! stackmark::init().unwrap();
//! stackmark::install_crash_handler().unwrap();
//! stackmark::install_panic_hook();
//! let mut frames = [stackmark::Frame::default(); 64];
//! let n = stackmark::walk_here(&mut frames);
//! for f in &frames[..n] {
//!     println!("{:#x} {}", f.pc, f.method.name());
//! }
//! # }
//! ```
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod arch;
mod cache;
pub mod discover;
pub mod formats;
pub mod markup;
pub mod memory;
pub mod modules;
pub mod sys;
pub mod walk;

#[cfg(any(target_os = "linux", target_os = "macos"))]
pub mod crash;
#[cfg(any(target_os = "linux", target_os = "macos"))]
mod live;
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub mod panic_hook;
#[cfg(any(target_os = "linux", target_os = "macos"))]
mod report;
#[cfg(target_os = "linux")]
pub mod sample;
#[cfg(target_os = "linux")]
pub mod threads;
/// Every thread in the crash report (macOS; the dump on demand is Linux's).
#[cfg(target_os = "macos")]
#[path = "threads_macos.rs"]
pub mod threads;
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub use live::*;

#[cfg(any(target_os = "linux", target_os = "macos"))]
pub use crash::{install_altstack, install_crash_handler};
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub use panic_hook::install_panic_hook;
pub use walk::{Frame, Method, StopReason, WalkOptions, Walker};

#[cfg(any(target_os = "linux", target_os = "macos"))]
/// Builds the module table, records this thread's stack bounds and (on
/// Linux) readies the sample ring for `fork`. Call it
/// once at start-up, outside any signal handler, and again (or [`refresh`])
/// after loading or unloading libraries. Returns the table's generation.
pub fn init() -> Result<u64, InitError> {
    #[cfg(target_os = "linux")]
    sample::ready_for_fork();
    live::init_table()
}

/// Empties every cache a walk learns from: the lookups and the hot path's
/// answers per pc, the remembered scans and the remembered walk ends. The
/// next walk then runs cold (for measuring one). Safe at any time.
pub fn clear_caches() {
    cache::clear_all();
}
