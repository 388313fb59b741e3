//! The sampling profiler on a known workload: hot loops in a Rust function
//! and in an SFrame-only C leaf, sampled with SIGPROF. After symbolizing,
//! at least 95% of the samples that land in each hot function carry its
//! exact callers and then the very frames of the worker thread's own walk,
//! down to its outermost one, and no sample of the worker is cut short.

#![cfg(target_os = "linux")]

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use stackmark_fixtures as fx;

#[no_mangle]
#[inline(never)]
extern "C" fn prof_rust_spin(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_mul(31).wrapping_add(i));
    }
    acc
}

#[no_mangle]
#[inline(never)]
extern "C" fn prof_rust_outer(n: u64) -> u64 {
    black_box(prof_rust_spin(n)) + 1
}

#[no_mangle]
#[inline(never)]
extern "C" fn prof_c_path(n: u64) -> u64 {
    // SAFETY: a plain computation in the fixture.
    black_box(unsafe { fx::c_hot_caller(n) }) + 1
}

/// The return addresses of `prof_worker`'s callers, down to the worker
/// thread's outermost frame: what every sample inside it must end with.
static OUTER: Mutex<Vec<u64>> = Mutex::new(Vec::new());

#[no_mangle]
#[inline(never)]
extern "C" fn prof_worker(stop: &AtomicBool) -> u64 {
    let (regs, precise) = stackmark::capture_here();
    let mut w = stackmark::walker(regs, precise, stackmark::sample::PROFILE_OPTIONS).unwrap();
    let outer: Vec<u64> = w.by_ref().skip(1).map(|f| f.pc).collect();
    assert_eq!(
        w.stop_reason(),
        stackmark::StopReason::Outermost,
        "{outer:x?}"
    );
    *OUTER.lock().unwrap() = outer;
    let mut x = 0;
    while !stop.load(SeqCst) {
        x ^= prof_rust_outer(200_000);
        x ^= prof_c_path(200_000);
    }
    black_box(x)
}

#[test]
fn samples_name_the_hot_functions_with_their_exact_callers() {
    stackmark::init().unwrap();
    let secs: u64 = std::env::var("STACKMARK_PROFILE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    static WORKER: AtomicI32 = AtomicI32::new(0);
    static STOP: AtomicBool = AtomicBool::new(false);
    let worker = std::thread::spawn(|| {
        stackmark::register_thread();
        // SAFETY: gettid has no preconditions.
        WORKER.store(unsafe { libc::syscall(libc::SYS_gettid) } as i32, SeqCst);
        prof_worker(&STOP)
    });
    stackmark::sample::start(1000).unwrap();
    // ITIMER_PROF fires at most once a scheduler tick of the worker's CPU
    // time: on a loaded machine or a 100 Hz kernel, `secs` may give too
    // few samples, so sampling goes on (up to 30 s) until the worker has
    // 300 of them.
    let start = Instant::now();
    let (end, deadline) = (
        start + Duration::from_secs(secs),
        start + Duration::from_secs(30),
    );
    let mut samples = Vec::new();
    let mut theirs = 0;
    while Instant::now() < end || (theirs < 300 && Instant::now() < deadline) {
        std::thread::sleep(Duration::from_millis(20));
        let tid = WORKER.load(SeqCst);
        stackmark::sample::drain(|s| {
            theirs += usize::from(s.tid == tid);
            samples.push(*s)
        });
    }
    stackmark::sample::stop();
    STOP.store(true, SeqCst);
    worker.join().unwrap();
    stackmark::sample::drain(|s| samples.push(*s));

    let tid = WORKER.load(SeqCst);
    let outer = OUTER.lock().unwrap().clone();
    assert!(outer.len() >= 2, "the worker's own walk: {outer:x?}");
    let name = |pc: u64, i: usize| {
        // Frame 0 is exact; the others are return addresses.
        let pc = if i == 0 { pc } else { pc - 1 };
        common::symbol_at(pc).unwrap_or_default()
    };
    const HOT: [&[&str]; 2] = [
        &["prof_rust_spin", "prof_rust_outer", "prof_worker"],
        &["c_hot_leaf", "c_hot_caller", "prof_c_path", "prof_worker"],
    ];
    let (mut hot, mut good) = ([0usize; 2], [0usize; 2]);
    let (mut bad, mut cut) = (Vec::new(), Vec::new());
    let mut theirs = 0;
    for s in samples.iter().filter(|s| s.tid == tid) {
        theirs += 1;
        let pcs = s.frames();
        let names: Vec<String> = pcs.iter().enumerate().map(|(i, &pc)| name(pc, i)).collect();
        // Wherever it landed in the worker (in its loop or, before that, in
        // its start), a sample goes on to the thread's outermost frame.
        if pcs.last() != outer.last() {
            cut.push(names.clone());
        }
        let Some(k) = HOT
            .iter()
            .position(|want| names.first().map(String::as_str) == Some(want[0]))
        else {
            continue;
        };
        let want = HOT[k];
        hot[k] += 1;
        let exact = names.len() == want.len() + outer.len()
            && names[..want.len()] == *want
            && pcs[want.len()..] == outer[..];
        if exact {
            good[k] += 1;
        } else if bad.len() < 5 {
            bad.push(names);
        }
    }
    println!(
        "profile: {} samples, {theirs} of the worker, {hot:?} in the Rust and C hot functions, \
         {good:?} with the exact callers and the worker's outer frames, {} cut short",
        samples.len(),
        cut.len()
    );
    assert!(
        cut.is_empty(),
        "samples cut short: {:#?}",
        &cut[..cut.len().min(5)]
    );
    for k in 0..2 {
        assert!(
            hot[k] >= 50,
            "too few samples in {}: {hot:?} of {theirs}",
            HOT[k][0]
        );
        assert!(
            good[k] * 100 >= hot[k] * 95,
            "{}: {} of {} exact; e.g. {bad:#?}",
            HOT[k][0],
            good[k],
            hot[k]
        );
    }
}
