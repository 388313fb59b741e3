//! Signal safety under stress: SIGPROF at 10 kHz (a sender thread signals
//! the workers in turn every 100 µs) while they allocate and free, load and
//! unload an SFrame library and refresh the table, panic and catch the
//! panic, and register threads that come and go (and themselves again).
//! Every signal walks the interrupted thread. The run must finish
//! without a deadlock or a crash.
//!
//! `STACKMARK_STRESS_SECS` sets the duration (default 3; the full run is 10).

#![cfg(target_os = "linux")]

mod common;

use std::ffi::CString;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn sampling_at_10_khz_survives_allocation_loading_and_panics() {
    stackmark::init().unwrap();
    let secs: u64 = std::env::var("STACKMARK_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // Installs the SIGPROF handler; its own timer stays off.
    stackmark::sample::start(1).unwrap();
    stackmark::sample::stop();
    std::panic::set_hook(Box::new(|_| {}));

    let stop = Arc::new(AtomicBool::new(false));
    let work = Arc::new(AtomicU64::new(0));
    let tids: Arc<[AtomicI32; 4]> = Arc::new(Default::default());
    let spawn = |i: usize, f: fn(u64) -> u64| {
        let (stop, work, tids) = (stop.clone(), work.clone(), tids.clone());
        std::thread::spawn(move || {
            stackmark::register_thread();
            tids[i].store(common::tid(), SeqCst);
            let mut n = 0;
            while !stop.load(SeqCst) {
                black_box(f(n));
                n += 1;
            }
            work.fetch_add(n, SeqCst);
        })
    };
    let workers = [
        // Allocation churn.
        spawn(0, |n| {
            let v: Vec<Vec<u8>> = (0..64).map(|i| vec![n as u8; 16 + i * 8]).collect();
            v.iter().map(|x| x.len() as u64).sum()
        }),
        // Library churn: dlopen, refresh, dlclose, refresh.
        spawn(1, |_| {
            let path = CString::new(stackmark_fixtures::DLOPEN_LIB).unwrap();
            // SAFETY: loading and unloading our fixture library.
            unsafe {
                let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
                assert!(!h.is_null());
                stackmark::refresh().unwrap();
                libc::dlclose(h);
            }
            stackmark::refresh().unwrap();
            1
        }),
        // Panics, caught.
        spawn(2, |n| {
            std::panic::catch_unwind(|| {
                if black_box(n) < u64::MAX {
                    panic!("caught {n}");
                }
            })
            .is_err() as u64
        }),
        // Registration churn: a thread registers and exits (its entry
        // goes), and this one registers again, rewriting its own entry
        // while signals walk it.
        spawn(3, |_| {
            std::thread::spawn(stackmark::register_thread)
                .join()
                .unwrap();
            stackmark::register_thread();
            1
        }),
    ];
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut sent = 0u64;
    while Instant::now() < deadline {
        for t in tids.iter() {
            let t = t.load(SeqCst);
            if t != 0 {
                // SAFETY: signals one of our own threads.
                unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), t, libc::SIGPROF) };
                sent += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(100));
        stackmark::sample::drain(|_| {});
    }
    stop.store(true, SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    let _ = std::panic::take_hook();
    stackmark::sample::drain(|_| {});
    let stackmark::sample::Stats {
        taken,
        dropped,
        handler_ns: ns,
        ..
    } = stackmark::sample::stats();
    println!(
        "stress: {secs} s, {sent} signals sent, {taken} samples, {dropped} dropped, {} µs in the handler, {} units of work",
        ns / 1000,
        work.load(SeqCst)
    );
    assert!(taken > 100, "{taken} samples");
    assert!(work.load(SeqCst) > 0);
}
