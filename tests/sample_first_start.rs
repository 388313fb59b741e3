//! Threads of a profiled program that start their timers at the same
//! moment rebuild the module table once between them. Its own process: no
//! other test has started a timer in it.

#![cfg(target_os = "linux")]

use std::sync::{Arc, Barrier};

use stackmark::sample::ThreadTimer;

#[test]
fn threads_starting_their_first_timers_together_rebuild_the_table_once() {
    stackmark::init().unwrap();
    let before = stackmark::modules::current().unwrap().generation();
    let n = 4;
    let barrier = Arc::new(Barrier::new(n));
    let workers: Vec<_> = (0..n)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                drop(ThreadTimer::start(100).unwrap());
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let after = stackmark::modules::current().unwrap().generation();
    assert_eq!(after, before + 1, "one rebuild for {n} first starts");
}
