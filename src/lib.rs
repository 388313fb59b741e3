//! stackmark walks the stack of its own process without allocating and prints
//! the result as LLVM symbolizer markup.
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod arch;
pub mod formats;
pub mod markup;
pub mod memory;
pub mod walk;
