//! The time of a whole dump of every thread (`threads/16`, `threads/128`):
//! the process holds 16 or 128 threads, the bench's own included; the
//! others wait on a condition variable (in `futex`, as idle workers do).
//! Each dump lists them, reads each one's status file, interrupts each
//! with the dump signal, waits for every walk, and writes the markup to
//! `/dev/null`.
//!
//! `cargo bench --bench threads`; `STACKMARK_BENCH_QUICK=1` for a short
//! run; `scripts/bench-goals.sh` runs it with the walk benches and prints
//! the figures with the README's.

#[cfg(target_os = "linux")]
mod bench {
    use criterion::Criterion;
    use std::os::fd::AsRawFd;
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    fn config() -> Criterion {
        let quick = std::env::var_os("STACKMARK_BENCH_QUICK").is_some();
        Criterion::default()
            .warm_up_time(Duration::from_millis(if quick { 100 } else { 500 }))
            .measurement_time(Duration::from_millis(if quick { 300 } else { 3000 }))
            .sample_size(if quick { 10 } else { 50 })
    }

    /// A flag parked threads wait on, and their condition variable.
    type Gate = Arc<(Mutex<bool>, Condvar)>;

    /// Threads waiting until the returned gate's flag is set and signalled.
    fn park(n: usize) -> (Gate, Vec<std::thread::JoinHandle<()>>) {
        let gate: Gate = Arc::new((Mutex::new(false), Condvar::new()));
        let threads = (0..n)
            .map(|i| {
                let gate = gate.clone();
                std::thread::Builder::new()
                    .name(format!("parked-{i}"))
                    .spawn(move || {
                        let mut open = gate.0.lock().unwrap();
                        while !*open {
                            open = gate.1.wait(open).unwrap();
                        }
                    })
                    .unwrap()
            })
            .collect();
        (gate, threads)
    }

    pub fn main() {
        let mut c = config().configure_from_args();
        stackmark::threads::configure(Default::default()).unwrap();
        let null = std::fs::File::create("/dev/null").unwrap();
        let mut g = c.benchmark_group("threads");
        for total in [16usize, 128] {
            let (gate, threads) = park(total - 1);
            // All of them listed, each walked: the figure is of the work,
            // not of threads that were not there yet.
            // A thread still starting blocks every signal: wait for them.
            let end = std::time::Instant::now() + Duration::from_secs(10);
            let s = loop {
                let s = stackmark::threads::dump_all_threads(null.as_raw_fd()).unwrap();
                if s.walked == total || std::time::Instant::now() > end {
                    break s;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            assert_eq!((s.threads, s.walked), (total, total), "{s:?}");
            println!("threads {total}: {} walked", s.walked);
            g.bench_function(total.to_string(), |b| {
                b.iter(|| stackmark::threads::dump_all_threads(null.as_raw_fd()).unwrap())
            });
            *gate.0.lock().unwrap() = true;
            gate.1.notify_all();
            for t in threads {
                t.join().unwrap();
            }
        }
        g.finish();
        c.final_summary();
    }
}

fn main() {
    #[cfg(target_os = "linux")]
    bench::main();
}
