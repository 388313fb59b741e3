//! A walk makes no heap allocation: a counting global allocator, armed only
//! on the walking thread and only during the walk, must count zero.

#![cfg(target_os = "linux")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use stackmark::Frame;
use stackmark_fixtures as fx;

struct Counting;

static COUNT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.with(|a| a.get()) {
            COUNT.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if ARMED.with(|a| a.get()) {
            COUNT.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

static FRAMES: AtomicUsize = AtomicUsize::new(0);

extern "C" fn walk_armed(x: u64) -> u64 {
    let mut buf = [Frame::default(); 128];
    ARMED.with(|a| a.set(true));
    let n = stackmark::walk_here(&mut buf);
    let mut w = stackmark::walker(stackmark::capture(), false, Default::default()).unwrap();
    let m = w.by_ref().count();
    drop(w);
    ARMED.with(|a| a.set(false));
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
