//! Panics on purpose with stackmark's panic hook installed: the message, its
//! location and thread, then a markup backtrace on standard error.
//!
//! The call chain is `panicking_function` <- `main`. `panicking_function`
//! is `extern "C"`, so in the `main` mode the panic cannot unwind out of it:
//! Rust then panics a second time ("panic in a function that cannot
//! unwind"), which the hook reports too, and aborts (SIGABRT).
//!
//! `cargo run --example panic [MODE]` where MODE is one of `main` (the
//! default), `threads` (four threads panic at once, with a message of two
//! lines), `deep` (a panic 300 calls deep, past the report's frame limit)
//! or `sigpipe` (a spawned thread panics, with `SIGPIPE` at its default
//! action, for a report into a pipe nobody reads; the process ends well).

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

/// Panics `n` calls further down.
#[inline(never)]
fn recurse(n: u32) -> u32 {
    if black_box(n) == 0 {
        panic!("deep enough");
    }
    black_box(recurse(n - 1)) + 1
}

fn main() {
    stackmark::install_panic_hook();
    let mode = std::env::args().nth(1).unwrap_or_else(|| "main".into());
    match mode.as_str() {
        "main" => {
            black_box(panicking_function(black_box(42)));
        }
        "sigpipe" => {
            // SAFETY: restores the default action of one signal, as a C
            // program has it.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            // A thread's panic, which only the hook reports: the process
            // goes on and ends well.
            let t = std::thread::spawn(|| black_box(recurse(black_box(3))));
            assert!(t.join().is_err());
        }
        "threads" => {
            let start = std::sync::Arc::new(std::sync::Barrier::new(4));
            let threads: Vec<_> = (0..4)
                .map(|i| {
                    let start = start.clone();
                    std::thread::Builder::new()
                        .name(format!("worker:{i}"))
                        .spawn(move || {
                            start.wait();
                            let r: Result<u32, _> = "12x".parse::<u32>();
                            panic!("worker {i} failed: {r:?}\nsecond line {{{{{{reset}}}}}}");
                        })
                        .unwrap()
                })
                .collect();
            for t in threads {
                let _ = t.join();
            }
        }
        "deep" => {
            black_box(recurse(black_box(300)));
        }
        "twice" => {
            // A library installs the hook again, chaining to what it finds
            // (the first install): one report, then Rust's default message.
            use stackmark::panic_hook::{install_panic_hook_with, PanicHookOptions};
            install_panic_hook_with(PanicHookOptions {
                chain_previous: true,
                ..Default::default()
            });
            let t = std::thread::spawn(|| black_box(recurse(black_box(3))));
            assert!(t.join().is_err());
        }
        other => {
            eprintln!("panic: unknown mode {other}; modes: main sigpipe threads deep twice");
            std::process::exit(2);
        }
    }
}
