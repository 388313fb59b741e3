//! stackmark-symbolize's two symbol-file parsers on arbitrary bytes: the
//! first byte picks Breakpad `.sym` (even) or GSYM (odd). Nothing may
//! panic, errors must lie within the file, and a lookup's frames must end
//! in a named function. The parsers are taken by path, without the rest of
//! the symbolizer (its DWARF reader and demanglers).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../symbolize/src/frame.rs"]
mod frame;
use frame::SymFrame;

#[path = "../../symbolize/src/breakpad.rs"]
mod breakpad;
#[path = "../../symbolize/src/gsym.rs"]
mod gsym;

#[path = "../../symbolize/tests/fuzz_support/mod.rs"]
mod fuzz_support;

fuzz_target!(|data: &[u8]| {
    fuzz_support::symbol_files(data);
});
