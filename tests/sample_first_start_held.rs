//! The first timer start's rebuild of the module table gives up at once on
//! a guard held on the table it would reuse, and no later start tries
//! again. Its own process: no other test has started a timer in it.

#![cfg(target_os = "linux")]

mod common;

use std::time::Instant;

use stackmark::modules::REFRESH_WAIT;
use stackmark::sample::ThreadTimer;

#[test]
fn a_first_start_behind_a_held_guard_waits_for_no_one_and_is_not_retried() {
    stackmark::init().unwrap();
    // A guard kept across a refresh (as after a dlopen): the table it pins
    // is the one the next rebuild would reuse.
    let held = stackmark::modules::current().unwrap();
    stackmark::refresh().unwrap();
    let generation = stackmark::modules::current().unwrap().generation();
    let took = common::together(4, || {
        let t = Instant::now();
        drop(ThreadTimer::start(100).unwrap());
        t.elapsed()
    });
    // A start that waited for the guard took the full refresh wait.
    assert!(took.iter().all(|t| *t < REFRESH_WAIT), "{took:?}");
    drop(held);
    // Nothing holds the table now, so a retry would rebuild it.
    std::thread::spawn(|| drop(ThreadTimer::start(100).unwrap()))
        .join()
        .unwrap();
    let now = stackmark::modules::current().unwrap().generation();
    assert_eq!(now, generation, "a later start rebuilt the table");
}
