//! `stackmark-symbolize`: reads a log holding symbolizer markup (stackmark's
//! crash, panic and profile reports) and writes it back with every `bt`
//! element replaced by its frames (function, file, line, inlined frames),
//! in the layout of `llvm-symbolizer --filter-markup`.
//!
//! Symbols come from sources tried in the order the user gives, each module
//! matched by its build ID:
//! - [`breakpad`]: a Breakpad symbol store (`NAME/DEBUGID/NAME.sym`);
//! - [`gsym`]: a directory of GSYM files (matched by the UUID in their header);
//! - [`dwarf`]: ELF or Mach-O files with DWARF in a `.build-id` tree, read
//!   with `addr2line`.
//!
//! With `--pprof`, [`profile`] turns a profile log into a pprof file
//! ([`pprof`]) instead: mappings with build IDs, locations, and with
//! sources, functions and lines.
//!
//! The parsers of both symbol file formats take any bytes without
//! panicking and report a malformed input with its byte offset.

pub mod breakpad;
pub mod demangle;
pub mod dwarf;
pub mod filter;
pub mod gsym;
pub mod markup;
pub mod pprof;
pub mod profile;
pub mod sources;

mod frame;
pub use frame::SymFrame;
