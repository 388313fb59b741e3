//! `sample::ThreadTimer`: a per-thread wall-clock timer samples the thread
//! that created it, and only that thread, until it is dropped. A process of
//! its own, so no other test's samples reach the ring.

#![cfg(target_os = "linux")]

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One test at a time: each counts the process's samples.
static SERIAL: Mutex<()> = Mutex::new(());

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
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    stackmark::sample::drain(|_| {});
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

/// A profiler keeps its threads' timers in one place and stops them from a
/// controller thread: the timer is `Send`, and dropping it elsewhere stops
/// the samples of the thread that made it.
#[test]
fn a_thread_timer_sent_to_another_thread_stops_its_thread_when_dropped_there() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    static STOP: AtomicBool = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        stackmark::register_thread();
        tx.send(stackmark::sample::ThreadTimer::start(1000).unwrap())
            .unwrap();
        while !STOP.load(SeqCst) {
            spin(Duration::from_millis(5));
        }
    });
    let timer = rx.recv().unwrap();
    spin(Duration::from_millis(200));
    let before_drop = stackmark::sample::stats().taken;
    drop(timer);
    // A signal already sent may still land; none after that.
    std::thread::sleep(Duration::from_millis(20));
    let taken = stackmark::sample::stats().taken;
    std::thread::sleep(Duration::from_millis(100));
    let later = stackmark::sample::stats().taken;
    STOP.store(true, SeqCst);
    worker.join().unwrap();
    stackmark::sample::drain(|_| {});
    assert!(before_drop > 0, "no sample in 200 ms at 1000 Hz");
    assert_eq!(
        later, taken,
        "samples after the timer was dropped elsewhere"
    );
}
