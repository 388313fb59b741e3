//! Samples its own workload on all its threads with SIGPROF, then prints the
//! samples as markup context plus folded stacks, and its own overhead. Each
//! worker thread arms its own timer (`sample::ThreadTimer`, `timer_create`
//! per thread), which keeps the rate asked; the process-wide CPU-time timer
//! of `sample::start` is held to the kernel's tick rate.
//!
//! `cargo run --release --example profile [SECONDS] [HZ] [itimer] >
//! profile.txt` (defaults: 3 s at 1000 Hz; `itimer` samples with
//! `sample::start` instead, for comparison). The workload runs 60 frames deep, through
//! SFrame-only C frames (`c_recurse`) and Rust frames.
//!
//! Output, on standard output: the markup context (`{{{reset}}}`,
//! `{{{module}}}`, `{{{mmap}}}`), then one line per distinct stack,
//! outermost frame first, in the folded format flame graph tools read:
//! `{{{pc:0x...:ra}}};...;{{{pc:0x...:pc}}} COUNT`; then `#` lines with
//! each sample's stack, thread and time, and each thread's name (the
//! profile log format of `docs/profiling.md`, which `stackmark-symbolize
//! --pprof` converts). The overhead report goes to standard error. See the
//! README for turning it into a flame graph.

#[cfg(target_os = "linux")]
use std::collections::HashMap;
#[cfg(target_os = "linux")]
use std::hint::black_box;
#[cfg(target_os = "linux")]
use std::io::Write;
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
#[cfg(target_os = "linux")]
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use stackmark::markup::{Markup, Scope, SliceSink};

#[cfg(target_os = "linux")]
static STOP: AtomicBool = AtomicBool::new(false);
#[cfg(target_os = "linux")]
static WORK: AtomicU64 = AtomicU64::new(0);

/// A hot loop in Rust.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn profile_rust_hot(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    acc
}

/// Called back at the bottom of the C recursion: alternates between the
/// Rust hot loop and the C one.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn profile_leaf_work(_: u64) -> u64 {
    let mut x = 0;
    while !STOP.load(SeqCst) {
        x ^= profile_rust_hot(50_000);
        // SAFETY: a plain computation in the fixture.
        x ^= unsafe { stackmark_fixtures::c_hot_caller(50_000) };
        WORK.fetch_add(1, SeqCst);
    }
    x
}

/// A worker thread: 60 SFrame-only C frames, then the hot loops.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn profile_worker() -> u64 {
    // SAFETY: the fixture recurses, then calls back.
    unsafe { stackmark_fixtures::c_recurse(profile_leaf_work, 56) }
}

#[cfg(target_os = "linux")]
fn cpu_time_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs the workload on `threads` threads for `secs`, each sampled at `hz`
/// if given; returns work done.
#[cfg(target_os = "linux")]
fn run(threads: usize, secs: f64, hz: Option<u32>, mut on_tick: impl FnMut()) -> u64 {
    STOP.store(false, SeqCst);
    WORK.store(0, SeqCst);
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            // Named, so that a profile can be split by thread name.
            let thread = std::thread::Builder::new().name(format!("worker-{i}"));
            thread.spawn(move || {
                stackmark::register_thread();
                // Held, so sampling this thread, until the worker returns.
                let _timer = hz.map(|hz| stackmark::sample::ThreadTimer::start(hz).expect("timer"));
                profile_worker()
            })
        })
        .collect::<Result<_, _>>()
        .expect("spawn a worker");
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
        on_tick();
    }
    STOP.store(true, SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    WORK.load(SeqCst)
}

/// `[SECONDS] [HZ] [itimer]` from the command line, checked.
#[cfg(target_os = "linux")]
fn arguments() -> Result<(f64, u32, bool), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs = match args.first() {
        None => 3.0,
        Some(a) => match a.parse::<f64>() {
            Ok(s) if s > 0.0 && s <= 86_400.0 => s,
            _ => {
                return Err(format!(
                    "SECONDS must be a number above 0 and at most 86400, not {a:?}"
                ))
            }
        },
    };
    let max = stackmark::sample::MAX_HZ;
    let hz = match args.get(1) {
        None => 1000,
        Some(a) => match a.parse::<u32>() {
            Ok(hz) if (1..=max).contains(&hz) => hz,
            _ => {
                return Err(format!(
                    "HZ must be a whole number from 1 to {max}, not {a:?}"
                ))
            }
        },
    };
    let itimer = match args.get(2).map(String::as_str) {
        None => false,
        Some("itimer") => true,
        Some(a) => return Err(format!("the third argument may only be itimer, not {a:?}")),
    };
    if args.len() > 3 {
        return Err("too many arguments".into());
    }
    Ok((secs, hz, itimer))
}

#[cfg(target_os = "linux")]
fn main() {
    let (secs, hz, itimer) = arguments().unwrap_or_else(|e| {
        eprintln!("profile: {e}\nusage: profile [SECONDS] [HZ] [itimer]");
        std::process::exit(2);
    });
    let threads = 2;
    stackmark::init().unwrap();

    // The same workload without sampling, for comparison.
    let base_work = run(threads, secs, None, || {});

    // Each frame with whether it is an exact pc (frame 0, or a frame a
    // signal interrupted) rather than a return address; each distinct
    // stack gets a number, in order of first sight.
    let mut folded: HashMap<Vec<(u64, bool)>, usize> = HashMap::new();
    // Per sample: its stack's number, thread id and time.
    let mut records: Vec<(usize, i32, u64)> = Vec::new();
    // Each thread's name, from the first drain that found it alive.
    let mut names: Vec<(i32, Vec<u8>)> = Vec::new();
    let mut keep = |s: &stackmark::sample::Sample| {
        let frames = s.frames().iter().enumerate();
        let key = frames
            .map(|(i, &pc)| (pc, s.pc_kind(i).is_exact()))
            .collect();
        let next = folded.len();
        let stack = *folded.entry(key).or_insert(next);
        records.push((stack, s.tid, s.time_ns()));
        if !s.thread_name().is_empty() && !names.iter().any(|n| n.0 == s.tid) {
            names.push((s.tid, s.thread_name().to_vec()));
        }
    };
    let cpu0 = cpu_time_ns();
    let handler0 = stackmark::sample::stats().handler_ns;
    if itimer {
        stackmark::sample::start(hz).expect("start sampling");
    }
    let per_thread = (!itimer).then_some(hz);
    let work = run(threads, secs, per_thread, || {
        stackmark::sample::drain(&mut keep);
    });
    stackmark::sample::stop();
    stackmark::sample::drain(&mut keep);
    let cpu = cpu_time_ns() - cpu0;
    let stats = stackmark::sample::stats();
    let (taken, dropped, missed) = (stats.taken, stats.dropped, stats.missed);
    let handler = stats.handler_ns - handler0;

    // Context: every module (samples may land anywhere).
    // Written whole: a buffer too small for it grows (a context cut short
    // would end inside an element, which swallows the next line).
    let table = stackmark::modules::current().unwrap();
    let mut size = 256 * 1024;
    let context = loop {
        let mut buf = vec![0u8; size];
        let mut sink = SliceSink::new(&mut buf);
        Markup::new(&mut sink).context(table.modules(), &[], Scope::AllModules);
        if !sink.truncated() {
            break sink.as_bytes().to_vec();
        }
        size *= 2;
    };
    let mut out = std::io::stdout().lock();
    out.write_all(&context).unwrap();
    // Stacks with their counts, most frequent first; `order[n]` is where
    // stack number `n` went, for the sample lines.
    let mut counts = vec![0u64; folded.len()];
    for r in &records {
        counts[r.0] += 1;
    }
    let mut stacks: Vec<_> = folded.into_iter().map(|(k, n)| (k, counts[n], n)).collect();
    stacks.sort_by_key(|s| std::cmp::Reverse(s.1));
    let mut order = vec![0; stacks.len()];
    for (at, s) in stacks.iter().enumerate() {
        order[s.2] = at;
    }
    // A pc no module of the context covers (code made at run time, or in a
    // module without a build ID) is plain text: the filter rejects a pc
    // element with no mmap to resolve it against.
    let covered = |pc: u64| {
        table
            .module_for_addr(pc)
            .is_some_and(|m| !m.build_id().is_empty())
    };
    for (pcs, count, _) in &stacks {
        let mut line = String::new();
        for (i, (pc, precise)) in pcs.iter().enumerate().rev() {
            let kind = if *precise { "pc" } else { "ra" };
            if covered(pc.wrapping_sub(u64::from(!*precise))) {
                line.push_str(&format!("{{{{{{pc:{pc:#018x}:{kind}}}}}}}"));
            } else {
                line.push_str(&format!("{pc:#x}"));
            }
            line.push(if i == 0 { ' ' } else { ';' });
        }
        writeln!(out, "{line}{count}").unwrap();
    }
    write_records(&mut out, hz, &order, &records, &names);
    drop(out);
    let depth: usize = stacks
        .iter()
        .map(|(p, c, _)| p.len() * *c as usize)
        .sum::<usize>()
        / (taken.max(1) as usize);
    eprintln!(
        "profile: {taken} samples ({dropped} dropped, {missed} missed) at {hz} Hz ({}) over {secs} s on {threads} threads ({:.0} per thread-second), {} distinct stacks, {depth} frames deep on average",
        if itimer { "ITIMER_PROF" } else { "a timer per thread" },
        taken as f64 / secs / threads as f64,
        stacks.len()
    );
    eprintln!(
        "profile: {:.1} µs per signal in the handler; {:.3}% of the CPU time ({} ms of {} ms)",
        // A dropped sample was walked too: the handler's time covers both.
        handler as f64 / (taken + dropped).max(1) as f64 / 1000.0,
        handler as f64 * 100.0 / cpu as f64,
        handler / 1_000_000,
        cpu / 1_000_000
    );
    eprintln!(
        "profile: work done {work} with sampling, {base_work} without ({:+.2}%)",
        (work as f64 / base_work.max(1) as f64 - 1.0) * 100.0
    );
}

/// The profile log's sample lines (`docs/profiling.md`): a header with the
/// sampling period and a clock pair to date the samples by, each thread's
/// name, each sample's stack (its folded line, counted from 0), thread and
/// time, and an end line that says the log is whole.
#[cfg(target_os = "linux")]
fn write_records(
    out: &mut impl Write,
    hz: u32,
    order: &[usize],
    records: &[(usize, i32, u64)],
    names: &[(i32, Vec<u8>)],
) {
    let mut real = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut mono = real;
    // SAFETY: clock_gettime fills the timespecs.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut mono);
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut real);
    }
    let ns = |t: libc::timespec| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
    writeln!(
        out,
        "# stackmark-profile version=1 period_ns={} monotonic_ns={} realtime_ns={}",
        1_000_000_000 / u64::from(hz),
        ns(mono),
        ns(real)
    )
    .unwrap();
    for (tid, name) in names {
        // Quoted; a byte outside printable ASCII, a quote or a backslash
        // as \xNN, so that the line stays one line of text.
        let mut quoted = String::new();
        for &b in name {
            match b {
                b' '..=b'~' if b != b'"' && b != b'\\' => quoted.push(b as char),
                _ => quoted.push_str(&format!("\\x{b:02x}")),
            }
        }
        writeln!(out, "# thread tid={tid} name=\"{quoted}\"").unwrap();
    }
    for &(stack, tid, time) in records {
        writeln!(
            out,
            "# sample stack={} tid={tid} time_ns={time}",
            order[stack]
        )
        .unwrap();
    }
    writeln!(out, "# end samples={}", records.len()).unwrap();
}

/// Elsewhere the example is an empty program: it samples with the Linux-only
/// profiler, through the C fixtures.
#[cfg(not(target_os = "linux"))]
fn main() {}
