//! The SFrame reader on arbitrary bytes: parse must not panic, and for a
//! section it accepts, every lookup and the function/row iteration must not
//! panic either, a lookup must find the first function in table order that
//! covers the pc, and a piece index must not change it. The first 8 bytes
//! choose the section address.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stackmark_fuzz_support::sframe_parse(data);
});

mod stackmark_fuzz_support {
    include!("../../tests/fuzz_support/mod.rs");
}
