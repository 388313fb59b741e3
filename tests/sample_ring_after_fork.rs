//! After a `fork`, the parent's samples land on ring pages that are still
//! its own: a child gets a zeroed ring rather than sharing the parent's
//! pages, which would turn copy-on-write and be faulted in again, one by
//! one, inside the handler. Its own process: no other test shares the
//! ring's state.

#![cfg(target_os = "linux")]

mod common;

use common::record_here;
use stackmark::sample;

/// Minor page faults this thread has taken.
fn faults() -> i64 {
    // SAFETY: getrusage fills `ru`.
    unsafe {
        let mut ru: libc::rusage = core::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut ru), 0);
        ru.ru_minflt
    }
}

/// Page faults taken while recording `n` samples (then drained).
fn faults_recording(n: usize) -> i64 {
    let before = faults();
    for _ in 0..n {
        record_here();
    }
    let taken = faults() - before;
    sample::drain(|_| {});
    taken
}

/// Whether this system gives a fork child zeroed `MADV_WIPEONFORK` pages
/// (Linux 4.14 and later; qemu-user takes the advice and ignores it).
fn wipe_on_fork_works() -> bool {
    let page = stackmark_fixtures::Mapping::new(4096);
    let p = page.addr() as *mut u8;
    // SAFETY: a private anonymous page of this function's, advised and
    // written; the child only reads it and leaves.
    unsafe {
        let advised = libc::madvise(p.cast(), 4096, libc::MADV_WIPEONFORK) == 0;
        *p = 1;
        let pid = libc::fork();
        if pid == 0 {
            libc::_exit(i32::from(*p));
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        advised && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

#[test]
fn samples_after_a_fork_fault_in_no_ring_page_again() {
    stackmark::init().unwrap();
    // The first start readies (prefaults) the ring; no timer runs after.
    sample::start(1).unwrap();
    sample::stop();
    sample::drain(|_| {});
    faults_recording(64);
    // 256 samples of some 540 bytes span about 34 pages of the ring.
    let before = faults_recording(256);
    // A page of anything may fault now and then on its own (this machine's
    // kernel pages out memory it finds cold), but a ring shared with the
    // child would fault in all its pages again after every fork: the
    // fewest faults of three forks tell the two apart.
    let mut after = i64::MAX;
    for _ in 0..3 {
        after = after.min(faults_after_a_fork());
    }
    if !wipe_on_fork_works() {
        eprintln!("MADV_WIPEONFORK is not honoured here: {before} faults before, {after} after");
        return;
    }
    assert!(
        after <= before + 2,
        "ring pages faulted in again after a fork: {before} faults before, {after} after"
    );
}

/// Forks a child that records into its own ring, then counts the page
/// faults of 256 of this process's samples.
fn faults_after_a_fork() -> i64 {
    // SAFETY: the child only leaves.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // A child's first samples go into an empty ring.
        record_here();
        let mut n = 0;
        sample::drain(|_| n += 1);
        // SAFETY: leaves the child without running the parent's exit code.
        unsafe { libc::_exit(if n == 1 { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    // The fork left this thread's stack pages shared with the child, so
    // the first sample writes its own copies of those: not ring pages.
    // One sample first takes them, so the count below is the ring's.
    record_here();
    sample::drain(|_| {});
    faults_recording(256)
}
