//! How much stack a walk needs. A profiler's signal handler walks on the
//! interrupted thread's own stack, below whatever that thread was doing, so
//! the walk's stack use is part of its signal safety: it must stay small and
//! bounded whatever the walk does (a first walk with empty caches, a walk
//! that records its end, a walk that replays it).
//!
//! The stack below the caller is painted with a pattern, the walk runs, and
//! the lowest byte it overwrote gives its high-water mark. This binary has
//! no other test, so no other thread or signal handler writes there.

#![cfg(target_os = "linux")]

use std::hint::black_box;

use stackmark::Frame;

/// How far below the caller the paint reaches.
const PAINTED: usize = 64 * 1024;
/// Left unpainted just below the caller, for `paint`'s own frame.
const MARGIN: usize = 1024;
/// The budget: the README promises a walk well under this (about 2 KiB,
/// and 6 KiB for a walk that records its end, in release builds; tests build
/// at opt-level 1, whose frames are larger).
const BUDGET: usize = 16 * 1024;
const PATTERN: u8 = 0xA5;

#[inline(never)]
fn paint(top: usize) {
    // SAFETY: the range lies below this thread's live frames and inside its
    // stack (2 MiB for a test thread, and this test is shallow); nothing
    // else uses it until the walk below runs there.
    unsafe { core::ptr::write_bytes((top - PAINTED) as *mut u8, PATTERN, PAINTED - MARGIN) };
}

/// The distance from `top` down to the lowest overwritten byte.
#[inline(never)]
fn high_water(top: usize) -> usize {
    let mut a = top - PAINTED;
    // SAFETY: the painted range, still mapped (it is this thread's stack).
    while a < top - MARGIN && unsafe { core::ptr::read_volatile(a as *const u8) } == PATTERN {
        a += 1;
    }
    top - a
}

/// Walks from here with painted stack below; returns the frames walked and
/// the stack the walk used.
#[inline(never)]
fn measured_walk(out: &mut [Frame]) -> (usize, usize) {
    let marker = 0u64;
    let top = black_box(&marker) as *const u64 as usize;
    paint(top);
    let n = stackmark::walk_here(black_box(out));
    black_box(&out[..n]);
    (n, high_water(top))
}

#[test]
fn a_walk_stays_within_its_stack_budget_cold_recording_and_replaying() {
    stackmark::init().expect("init");
    stackmark::clear_caches();
    let mut frames = vec![Frame::default(); 256];
    // The first walk fills the caches; the second, from the same place,
    // records its end; the later ones replay it.
    let mut used = Vec::new();
    for _ in 0..4 {
        let (n, bytes) = measured_walk(&mut frames);
        assert!(n > 3, "the walk found only {n} frames");
        used.push(bytes);
    }
    eprintln!("stack used per walk: {used:?} bytes");
    for (i, &bytes) in used.iter().enumerate() {
        // The paint is seen: a walk writes its frames below the caller.
        assert!(
            bytes > MARGIN + 64,
            "walk {i}: no stack use seen ({bytes} B)"
        );
        assert!(
            bytes <= BUDGET,
            "walk {i} used {bytes} B of stack, over the {BUDGET} B budget"
        );
    }
}
