//! The walker over a synthetic stack and synthetic code described by Apple
//! compact-unwind entries: compact steps and the prologue and epilogue
//! decoders on hostile code and stacks. Every walk must end, without a
//! panic, with sp strictly increasing between non-signal frames.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stackmark_fuzz_support::walk_compact(data);
});

mod stackmark_fuzz_support {
    include!("../../tests/fuzz_support/mod.rs");
}
