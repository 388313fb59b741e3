//! The sampling profiler on a known workload: hot loops in a Rust function
//! and in an SFrame-only C leaf, sampled with SIGPROF. After symbolizing,
//! at least 95% of the samples that land in a hot function carry its exact
//! callers up to the worker thread's entry, and none is cut short.

#![cfg(target_os = "linux")]

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::SeqCst};
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

#[no_mangle]
#[inline(never)]
extern "C" fn prof_worker(stop: &AtomicBool) -> u64 {
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
    // 150 of them.
    let start = Instant::now();
    let (end, deadline) = (
        start + Duration::from_secs(secs),
        start + Duration::from_secs(30),
    );
    let mut samples = Vec::new();
    let mut theirs = 0;
    while Instant::now() < end || (theirs < 150 && Instant::now() < deadline) {
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
    let name = |pc: u64, i: usize| {
        // Frame 0 is exact; the others are return addresses.
        let pc = if i == 0 { pc } else { pc - 1 };
        common::symbol_at(pc).unwrap_or_default()
    };
    let (mut hot, mut good) = (0, 0);
    let mut bad = Vec::new();
    for s in samples.iter().filter(|s| s.tid == tid) {
        let names: Vec<String> = s
            .frames()
            .iter()
            .enumerate()
            .map(|(i, &pc)| name(pc, i))
            .collect();
        let want: &[&str] = match names.first().map(String::as_str) {
            Some("prof_rust_spin") => &["prof_rust_spin", "prof_rust_outer", "prof_worker"],
            Some("c_hot_leaf") => &["c_hot_leaf", "c_hot_caller", "prof_c_path", "prof_worker"],
            _ => continue,
        };
        hot += 1;
        if names.len() >= want.len() && names[..want.len()] == *want {
            good += 1;
        } else if bad.len() < 5 {
            bad.push(names);
        }
    }
    println!(
        "profile: {} samples, {hot} in hot functions, {good} with the exact callers",
        samples.len()
    );
    assert!(
        hot >= 100,
        "too few hot samples: {hot} of {}",
        samples.len()
    );
    assert!(
        good * 100 >= hot * 95,
        "{good} of {hot} exact; e.g. {bad:#?}"
    );
}
