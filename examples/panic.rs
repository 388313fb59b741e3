//! Panics on purpose with stackmark's panic hook installed: the message, its
//! location and thread, then a markup backtrace on standard error.
//!
//! The call chain is `panicking_function` <- `main`.

use std::hint::black_box;

/// Panics.
#[no_mangle]
#[inline(never)]
pub extern "C" fn panicking_function(x: u64) -> u64 {
    if black_box(x) > 1 {
        panic!("the example panics with x = {x}"); // PANIC-SITE
    }
    x
}

fn main() {
    stackmark::install_panic_hook();
    black_box(panicking_function(black_box(42)));
}
