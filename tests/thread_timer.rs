//! `sample::ThreadTimer`: a per-thread wall-clock timer samples the thread
//! that created it, and only that thread, until it is dropped. A process of
//! its own, so no other test's samples reach the ring.

#![cfg(target_os = "linux")]

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

fn spin(d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..1000 {
            x = black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
    x
}

#[test]
fn a_thread_timer_samples_its_own_thread_only_and_stops_when_dropped() {
    stackmark::init().unwrap();
    static DONE: AtomicBool = AtomicBool::new(false);
    // A second busy thread, never sampled: a process-wide timer would
    // sample it too.
    let other = std::thread::spawn(|| {
        stackmark::register_thread();
        let t = common::tid();
        while !DONE.load(SeqCst) {
            spin(Duration::from_millis(5));
        }
        t
    });
    let (sampled, taken, after_drop) = std::thread::spawn(|| {
        stackmark::register_thread();
        let timer = stackmark::sample::ThreadTimer::start(1000).unwrap();
        spin(Duration::from_millis(300));
        drop(timer);
        // After the drop nothing more arrives, though this thread runs on.
        let taken = stackmark::sample::stats().taken;
        spin(Duration::from_millis(50));
        (common::tid(), taken, stackmark::sample::stats().taken)
    })
    .join()
    .unwrap();
    DONE.store(true, SeqCst);
    let other = other.join().unwrap();
    let mut tids = Vec::new();
    let mut depths = Vec::new();
    stackmark::sample::drain(|s| {
        tids.push(s.tid);
        depths.push(s.frames().len());
    });

    assert_eq!(after_drop, taken, "samples after the timer was dropped");
    assert!(!tids.is_empty(), "no sample in 300 ms at 1000 Hz");
    assert!(
        tids.iter().all(|&t| t == sampled),
        "samples from threads {:?}, not only {sampled} (the other was {other})",
        tids.iter().filter(|&&t| t != sampled).collect::<Vec<_>>()
    );
    // Each sample walked the interrupted thread: its frame 0 and callers.
    assert!(depths.iter().all(|&d| d >= 2), "{depths:?}");
}
