//! Threads of a profiled program that start their timers at the same
//! moment rebuild the module table once between them. Its own process: no
//! other test has started a timer in it.

#![cfg(target_os = "linux")]

mod common;

use stackmark::sample::ThreadTimer;

#[test]
fn threads_starting_their_first_timers_together_rebuild_the_table_once() {
    stackmark::init().unwrap();
    let before = stackmark::modules::current().unwrap().generation();
    common::together(4, || drop(ThreadTimer::start(100).unwrap()));
    let after = stackmark::modules::current().unwrap().generation();
    assert_eq!(after, before + 1, "one rebuild for 4 first starts");
}
