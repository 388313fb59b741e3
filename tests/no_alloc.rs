//! A walk makes no heap allocation: a counting global allocator, armed only
//! on the walking thread and only during the walk, must count zero.

#![cfg(target_os = "linux")]

mod alloc_counter;

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use alloc_counter::{allocations, Counting};
use stackmark::Frame;
use stackmark_fixtures as fx;

#[global_allocator]
static ALLOC: Counting = Counting;

static FRAMES: AtomicUsize = AtomicUsize::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);

extern "C" fn walk_armed(x: u64) -> u64 {
    let mut buf = [Frame::default(); 128];
    let ((n, m), count) = allocations(|| {
        let n = stackmark::walk_here(&mut buf);
        let mut w = stackmark::walker(
            stackmark::capture(),
            stackmark::PcKind::ReturnAddress,
            Default::default(),
        )
        .unwrap();
        (n, w.by_ref().count())
    });
    COUNT.fetch_add(count, Ordering::SeqCst);
    FRAMES.store(n.min(m), Ordering::SeqCst);
    black_box(x)
}

#[test]
fn walks_through_every_method_allocate_nothing() {
    stackmark::init().unwrap();
    // SAFETY: the fixtures only call the callback.
    unsafe {
        black_box(fx::c_level_1(walk_armed, 1));
        black_box(fx::c_fp_level_1(walk_armed, 1));
        black_box(fx::c_noinfo(walk_armed, 1));
    }
    assert!(FRAMES.load(Ordering::SeqCst) > 3, "the walks did run");
    assert_eq!(COUNT.load(Ordering::SeqCst), 0, "allocations during walks");
}
