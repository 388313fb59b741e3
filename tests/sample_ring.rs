//! The sample ring as a profiler uses it: samples recorded on one thread
//! while another drains. Every sample taken is handed out once.

#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

#[test]
fn every_sample_taken_while_draining_runs_alongside_is_handed_out_once() {
    stackmark::init().unwrap();
    static DONE: AtomicBool = AtomicBool::new(false);
    const SAMPLES: usize = 5_000;
    let before = stackmark::sample::stats();
    let (taken0, dropped0) = (before.taken, before.dropped);
    let writer = std::thread::spawn(|| {
        // SAFETY: an all-zero ucontext_t is valid storage for getcontext.
        let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
        for _ in 0..SAMPLES {
            // SAFETY: getcontext fills `uc` with this thread's context,
            // which `record` walks as a signal handler's would be.
            unsafe {
                libc::getcontext(&mut uc);
                stackmark::sample::record((&uc as *const libc::ucontext_t).cast());
            }
        }
        DONE.store(true, SeqCst);
    });
    let mut drained = 0;
    let mut lens = Vec::new();
    while !DONE.load(SeqCst) {
        drained += stackmark::sample::drain(|s| lens.push(s.frames().len()));
    }
    writer.join().unwrap();
    drained += stackmark::sample::drain(|s| lens.push(s.frames().len()));
    let after = stackmark::sample::stats();
    let (taken, dropped) = (
        (after.taken - taken0) as usize,
        (after.dropped - dropped0) as usize,
    );
    assert_eq!(taken + dropped, SAMPLES);
    assert_eq!(
        drained, taken,
        "{taken} taken, {dropped} dropped, {drained} handed out"
    );
    assert_eq!(lens.len(), drained);
    assert!(lens.iter().all(|&n| n > 1), "every sample walked");
}
