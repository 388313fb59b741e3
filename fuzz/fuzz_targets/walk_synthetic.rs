//! The walker over arbitrary memory: a synthetic stack, synthetic code and a
//! synthetic SFrame section behind the bounded reader. Every walk must end,
//! without a panic, with sp strictly increasing between non-signal frames.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stackmark_fuzz_support::walk_synthetic(data);
});

mod stackmark_fuzz_support {
    include!("../../tests/fuzz_support/mod.rs");
}
