//! The `__unwind_info` reader on arbitrary bytes: parse, iteration and
//! lookups must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stackmark_fuzz_support::unwind_info_parse(data);
});

mod stackmark_fuzz_support {
    include!("../../tests/fuzz_support/mod.rs");
}
