//! Pure readers of unwind and object formats: SFrame, DWARF CFI (`.eh_frame`),
//! Apple compact unwind, ELF and Mach-O headers.
//!
//! Everything here takes `&[u8]` and returns typed rows. Nothing here knows the
//! host OS or architecture, touches process memory, or uses `unsafe`; every
//! malformed input gives a typed error, never a panic.

#![forbid(unsafe_code)]

pub mod cfi;
pub mod compact_unwind;
pub mod cursor;
pub mod elf;
pub mod macho;
pub mod sframe;
