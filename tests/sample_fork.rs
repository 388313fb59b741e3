//! A program that samples from a handler of its own, calling
//! `sample::record` after `init` and never starting stackmark's timers: a
//! child after `fork` still starts with an empty ring, so a sample another
//! thread was writing at the fork cannot hold its drains up. Its own
//! process, so no other test has readied the ring for it.

#![cfg(target_os = "linux")]

mod common;

use common::record_here;
use stackmark::sample;

#[test]
fn init_alone_readies_the_ring_for_fork() {
    stackmark::init().unwrap();
    // Samples the parent has not drained at the fork (as one a thread
    // was still writing would be): the child must not be handed them.
    for _ in 0..3 {
        record_here();
    }
    // SAFETY: the child records, drains and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let me = unsafe { libc::getpid() };
        record_here();
        let (mut mine, mut inherited) = (0, 0);
        sample::drain(|s| {
            if s.tid == me {
                mine += 1;
            } else {
                inherited += 1;
            }
        });
        let taken = sample::stats().taken;
        let ok = (mine, inherited, taken) == (1, 0, 1);
        // SAFETY: _exit is async-signal-safe and ends the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child was handed the parent's samples ({status:#x})"
    );
    let mut parent = 0;
    sample::drain(|_| parent += 1);
    assert_eq!(parent, 3, "the parent keeps its own");
}
