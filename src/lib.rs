//! stackmark walks the stack of its own process without allocating and
//! prints the result as [LLVM symbolizer markup]: a crash handler, a panic
//! hook and a sampling profiler, safe inside signal handlers, whose output
//! is symbolized later, off the machine.
//!
//! [LLVM symbolizer markup]: https://llvm.org/docs/SymbolizerMarkupFormat.html
//!
//! # Setting up
//!
//! [`init`] builds the module table (the loaded modules and their unwind
//! tables: SFrame, Apple compact unwind, DWARF CFI). Call it once, outside
//! any signal handler, and [`refresh`] after `dlopen` or `dlclose`. Threads
//! created by C code should call [`register_thread`] and
//! [`install_altstack`].
//!
//! # A crash handler and a panic hook
//!
//! ```no_run
//! # #[cfg(target_os = "linux")] {
//! stackmark::init().unwrap();
//! stackmark::install_crash_handler().unwrap(); // SEGV, BUS, ILL, FPE, ABRT, TRAP
//! stackmark::install_panic_hook();
//! # }
//! ```
//!
//! A crash writes a report to standard error ([`crash::install_crash_handler_to_fd`]
//! chooses another descriptor), with every other thread's stack after the
//! crashing one's ([`threads`]), then the process dies of the same signal.
//! [`panic_hook::install_panic_hook_with`] can also call the hook it
//! replaces.
//!
//! # A sampling profiler (Linux)
//!
//! ```no_run
//! # #[cfg(target_os = "linux")] {
//! # fn work() {}
//! stackmark::init().unwrap();
//! let timer = stackmark::sample::ThreadTimer::start(1000).unwrap(); // this thread, 1000 Hz of CPU time
//! work();
//! drop(timer);
//! stackmark::sample::drain(|s| println!("{} frames on thread {}", s.frames().len(), s.tid));
//! # }
//! ```
//!
//! [`sample::start`] samples the whole process instead.
//!
//! # Walking by hand
//!
//! ```no_run
//! # #[cfg(target_os = "linux")] {
//! stackmark::init().unwrap();
//! let mut frames = [stackmark::Frame::default(); 64];
//! let n = stackmark::walk_here(&mut frames); // frame 0: this call
//! for f in &frames[..n] {
//!     println!("{:#x} {}", f.pc, f.method.name());
//! }
//! # }
//! ```
//!
//! A walk fills the buffer it is given until the stack ends. In a
//! `SA_SIGINFO` handler, [`walk_ucontext`] starts from the interrupted
//! registers. Each [`Frame`] says how it was found ([`Method`]); the walk
//! says why it ended ([`StopReason`], through [`walker`]).
//!
//! # Walking a captured stack
//!
//! [`Walker`] is generic over the architecture ([`arch::x86_64::X86_64`],
//! [`arch::aarch64::Aarch64`]), the memory it reads ([`memory::MemoryReader`]) and
//! the code it knows ([`walk::CodeMap`]), so the same steps walk a stack
//! captured elsewhere:
//!
//! ```
//! use stackmark::arch::x86_64::{Regs, X86_64};
//! use stackmark::memory::SliceMemory;
//! use stackmark::walk::{CodeMap, Lookup};
//! use stackmark::{Method, PcKind, WalkOptions, Walker};
//!
//! /// Code at 0x1000..0x2000 with no unwind table: frame pointers only.
//! struct Code;
//! impl CodeMap for Code {
//!     fn lookup(&self, pc: u64) -> Lookup {
//!         if self.is_code(pc) { Lookup::NoInfo } else { Lookup::Outside }
//!     }
//!     fn is_code(&self, addr: u64) -> bool {
//!         (0x1000..0x2000).contains(&addr)
//!     }
//!     fn read_code(&self, _addr: u64, _buf: &mut [u8]) -> bool {
//!         false
//!     }
//! }
//!
//! // A frame record at 0x8000: the caller's frame pointer (none), then a
//! // return address into 0x1234.
//! let mut stack = [0u8; 32];
//! stack[8..16].copy_from_slice(&0x1234u64.to_le_bytes());
//! let regions = [(0x8000, &stack[..])];
//! let regs = Regs { rip: 0x1010, rsp: 0x8000, rbp: 0x8000, ..Regs::default() };
//! let walker: Walker<X86_64, _, _> =
//!     Walker::new(regs, PcKind::Exact, SliceMemory::new(&regions), Code, WalkOptions::default());
//! let frames: Vec<_> = walker.collect();
//! assert_eq!(frames[1].pc, 0x1234);
//! assert_eq!(frames[1].method, Method::FramePointer);
//! ```
//!
//! # Markup
//!
//! [`markup::Markup`] writes frames with the module table's `module` and
//! `mmap` lines into any [`markup::Sink`]. `llvm-symbolizer --filter-markup`
//! or the workspace's `stackmark-symbolize` turns the output into names and
//! lines.
//!
//! # What is not here
//!
//! The format readers, the module table, the caches and the OS glue are
//! internal (public only with the `internals` feature, for the crate's own
//! tests). `docs/ARCHITECTURE.md` gives the layers and the public items.
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

/// Declares modules public with the `internals` feature, which the crate's
/// own tests, benches and fuzz targets turn on, and crate-private without
/// it: they are not part of the API (docs/ARCHITECTURE.md lists what is).
macro_rules! internal {
    ($($(#[$attr:meta])* mod $name:ident;)*) => {$(
        $(#[$attr])*
        #[cfg(feature = "internals")]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports, clippy::all)]
        pub(crate) mod $name;
    )*};
}

pub mod arch;
mod cache;
pub mod markup;
pub mod memory;
pub mod walk;
internal! {
    mod discover;
    mod formats;
    mod modules;
    mod sys;
}

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
pub use walk::{Frame, Method, PcKind, StopReason, WalkOptions, Walker};

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
