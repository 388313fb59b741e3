//! The `.eh_frame` / `.eh_frame_hdr` reader on arbitrary bytes: the input
//! is a flags byte, the header's address and length, the header, then
//! `.eh_frame`. Nothing may panic; rows lie in their FDEs, in order,
//! without gaps; a row found for a pc holds it and agrees with the FDE's
//! rows, the walker's row, its quick row, and a linear search.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stackmark_fuzz_support::cfi_parse(data);
});

mod stackmark_fuzz_support {
    include!("../../tests/fuzz_support/mod.rs");
}
