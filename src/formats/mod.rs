//! Pure readers of unwind and object formats.
//!
//! Everything here takes `&[u8]` and returns typed rows. Nothing here knows the
//! host OS or architecture, touches process memory, or uses `unsafe`; every
//! malformed input gives a typed error, never a panic.

pub mod compact_unwind;
pub mod cursor;
pub mod elf;
pub mod macho;
pub mod sframe;
