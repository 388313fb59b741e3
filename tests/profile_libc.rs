//! The profiler on threads that spend their time inside the C library,
//! whose code has neither SFrame nor frame pointers on Debian, only DWARF
//! CFI: a loop of large `memcpy`s, a loop of `malloc` and `free` of varied
//! sizes, and `qsort` with a Rust comparator (samples land in glibc's
//! `msort_with_tmp` and in the comparator, with glibc frames between it and
//! the worker). Each worker is sampled by its own thread timer; at least
//! 99% of its samples, and of those that landed in the C library, must
//! reach the thread's outermost frame: glibc's thread start (`clone3` on
//! x86_64, `thread_start` in `clone` on AArch64, whose CFI leaves the
//! return address undefined), and end with the very frames libgcc's
//! `_Unwind_Backtrace` finds below the worker's loop (which the worker's
//! own `walk_here` must find too).

#![cfg(target_os = "linux")]

mod common;

use std::ffi::{c_int, c_void};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use stackmark::sample::{Sample, ThreadTimer};
use stackmark::Frame;

/// Samples per second of each worker's wall-clock timer.
const HZ: u32 = 1000;
/// Samples of each worker after which sampling stops (past [`MIN_TIME`]).
const WANT: usize = 500;
/// Samples each worker must have, so the test cannot pass on a few.
const MIN_SAMPLES: usize = 100;
/// Samples of each worker that must land in the C library itself.
const MIN_IN_LIBC: usize = 50;
/// Sampling runs at least this long, and gives up waiting for [`WANT`]
/// samples after [`DEADLINE`] (emulation is slow).
const MIN_TIME: Duration = Duration::from_millis(300);
const DEADLINE: Duration = Duration::from_secs(60);

/// The workers' names, in the order of [`WORKERS`].
const NAMES: [&str; 3] = ["memcpy", "malloc/free", "qsort"];
/// The workers' loops, each until `stop`.
const WORKERS: [fn(&AtomicBool) -> u64; 3] = [memcpy_loop, malloc_loop, qsort_loop];

/// Large copies of several sizes, so the C library's copy loops (on x86_64
/// `rep movsb` and the non-temporal loop past its threshold) all run.
fn memcpy_loop(stop: &AtomicBool) -> u64 {
    const SIZES: [usize; 4] = [8 << 20, 1 << 20, (256 << 10) + 3, (16 << 10) + 5];
    let src = vec![1u8; SIZES[0]];
    let mut dst = vec![0u8; SIZES[0]];
    let mut x = 0u64;
    while !stop.load(Relaxed) {
        for n in SIZES {
            // SAFETY: both buffers hold at least `n` bytes and do not overlap.
            unsafe {
                libc::memcpy(
                    black_box(dst.as_mut_ptr()).cast(),
                    black_box(src.as_ptr()).cast(),
                    black_box(n),
                )
            };
            x = x.wrapping_add(u64::from(black_box(dst[n - 1])));
        }
    }
    x
}

/// `malloc` and `free` of sizes from 16 bytes to 1 MiB (the largest
/// through `mmap`), with 64 blocks live at a time.
fn malloc_loop(stop: &AtomicBool) -> u64 {
    let mut rng = common::Rng(0x2545_f491_4f6c_dd1d);
    let mut live = [std::ptr::null_mut::<c_void>(); 64];
    let mut x = 0u64;
    while !stop.load(Relaxed) {
        for _ in 0..256 {
            let size = match rng.below(100) {
                0..=69 => 16 + rng.below(1024),
                70..=94 => 1024 + rng.below(64 << 10),
                _ => (128 << 10) + rng.below(896 << 10),
            } as usize;
            let slot = &mut live[rng.below(64) as usize];
            // SAFETY: the slot holds null or a block malloc gave, freed
            // once and replaced.
            unsafe {
                libc::free(*slot);
                *slot = black_box(libc::malloc(size));
            }
            x = x.wrapping_add(*slot as u64);
        }
    }
    for p in live {
        // SAFETY: each is null or a live block from malloc.
        unsafe { libc::free(p) };
    }
    x
}

/// The comparator of [`qsort_loop`]: glibc's merge sort calls it.
#[no_mangle]
#[inline(never)]
unsafe extern "C" fn profile_libc_cmp(a: *const c_void, b: *const c_void) -> c_int {
    // SAFETY: qsort passes pointers to two u32s of the array.
    let (a, b) = unsafe { (*(a as *const u32), *(b as *const u32)) };
    black_box(a).cmp(&black_box(b)) as c_int
}

/// `qsort` of 20,000 random `u32`s, again and again.
fn qsort_loop(stop: &AtomicBool) -> u64 {
    let mut rng = common::Rng(0x9e37_79b9_7f4a_7c15);
    let mut v = vec![0u32; 20_000];
    let mut x = 0u64;
    while !stop.load(Relaxed) {
        v.iter_mut().for_each(|e| *e = rng.next() as u32);
        // SAFETY: `v` holds `v.len()` u32s, which the comparator reads.
        unsafe { libc::qsort(v.as_mut_ptr().cast(), v.len(), 4, Some(profile_libc_cmp)) };
        x = x.wrapping_add(u64::from(v[v.len() / 2]));
    }
    x
}

/// The frames of the calling function's callers, down to the thread's
/// outermost frame: as libgcc's `_Unwind_Backtrace` finds them (the
/// reference every sample taken inside the caller must end with), and as
/// stackmark's own walk does (which must be the same).
#[inline(never)]
fn outer_frames() -> (Vec<u64>, Vec<u64>) {
    let mut frames = [Frame::default(); 256];
    let n = stackmark::walk_here(&mut frames);
    let libgcc = common::libgcc_trace();
    // libgcc's list: its own frames, a return address into this function,
    // one into the caller, then the caller's callers.
    let me = common::symbol_at(outer_frames as *const () as u64);
    let at = libgcc
        .iter()
        .position(|&ip| common::symbol_at(ip - 1) == me)
        .expect("libgcc's walk passes through outer_frames");
    let ours = frames[2.min(n)..n].iter().map(|f| f.pc).collect();
    (libgcc[(at + 2).min(libgcc.len())..].to_vec(), ours)
}

/// What a worker tells the test when it starts: which it is, its thread id
/// and the frames below its closure ([`outer_frames`]).
struct Started {
    worker: usize,
    tid: i32,
    /// libgcc's frames, the reference.
    outer: Vec<u64>,
    /// stackmark's.
    own: Vec<u64>,
}

/// What one worker's samples show.
#[derive(Default, Debug)]
struct Counts {
    /// The worker's samples, those that reached its outermost frame, and
    /// those that end with the very frames libgcc found below the worker.
    samples: usize,
    reached: usize,
    exact_tail: usize,
    /// Samples whose frame 0 is in the C library, and those that reached.
    in_libc: usize,
    in_libc_reached: usize,
    /// Samples in the qsort comparator under C library frames.
    in_cmp: usize,
    in_cmp_reached: usize,
    /// The most frames in a sample.
    deepest: usize,
}

/// The frames of `s`, named, for failure messages.
fn named(s: &Sample) -> Vec<String> {
    s.frames()
        .iter()
        .enumerate()
        .map(|(i, &pc)| {
            let look = if s.pc_kind(i).is_exact() { pc } else { pc - 1 };
            let sym = common::symbol_at(look).unwrap_or_default();
            format!("{} {sym}", common::module_offset(pc))
        })
        .collect()
}

#[test]
fn samples_inside_the_c_library_reach_the_outermost_frame() {
    stackmark::init().unwrap();
    static STOP: AtomicBool = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = (0..WORKERS.len())
        .map(|worker| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                stackmark::register_thread();
                let (outer, own) = outer_frames();
                tx.send(Started {
                    worker,
                    tid: common::tid(),
                    outer,
                    own,
                })
                .unwrap();
                let timer = ThreadTimer::start(HZ).unwrap();
                let x = WORKERS[worker](&STOP);
                drop(timer);
                x
            })
        })
        .collect();
    drop(tx);
    let mut started: Vec<Started> = rx.iter().take(WORKERS.len()).collect();
    assert_eq!(started.len(), WORKERS.len(), "a worker failed to start");
    started.sort_by_key(|s| s.worker);

    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); WORKERS.len()];
    let keep = |samples: &mut Vec<Vec<Sample>>| {
        stackmark::sample::drain(|s| {
            if let Some(w) = started.iter().position(|w| w.tid == s.tid) {
                samples[w].push(*s);
            }
        })
    };
    let begin = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        keep(&mut samples);
        let took = begin.elapsed();
        let enough = samples.iter().all(|s| s.len() >= WANT);
        if (enough && took >= MIN_TIME) || took >= DEADLINE {
            break;
        }
    }
    STOP.store(true, Relaxed);
    for t in threads {
        black_box(t.join().unwrap());
    }
    keep(&mut samples);
    let took = begin.elapsed();

    let stats = stackmark::sample::stats();
    let mut failures = Vec::new();
    for (w, start) in started.iter().enumerate() {
        let name = NAMES[w];
        let offsets = |pcs: &[u64]| -> Vec<String> {
            pcs.iter().map(|&pc| common::module_offset(pc)).collect()
        };
        // The reference: libgcc's frames, to one the CFI marks outermost.
        let Some(&outermost) = start.outer.last() else {
            failures.push(format!("{name}: libgcc found no frame below the worker"));
            continue;
        };
        if common::cfi_leaves_ra_undefined(outermost - 1) != Some(true) {
            failures.push(format!(
                "{name}: the CFI does not end the stack at libgcc's last frame: {:?}",
                offsets(&start.outer)
            ));
        }
        if start.own != start.outer {
            failures.push(format!(
                "{name}: the worker's own walk is not libgcc's: {:?} against {:?}",
                offsets(&start.own),
                offsets(&start.outer)
            ));
        }
        let mut c = Counts::default();
        let mut cut = Vec::new();
        let mut examples = Vec::new();
        for s in &samples[w] {
            let pcs = s.frames();
            let reached = pcs.last() == start.outer.last();
            let exact_tail = pcs.len() > start.outer.len() && pcs.ends_with(&start.outer);
            let pc0 = pcs.first().copied().unwrap_or_default();
            let libc0 = common::in_libc(pc0);
            let in_cmp = common::symbol_at(pc0).as_deref() == Some("profile_libc_cmp")
                && pcs.get(1).is_some_and(|&pc| common::in_libc(pc));
            c.samples += 1;
            c.reached += usize::from(reached);
            c.exact_tail += usize::from(exact_tail);
            c.in_libc += usize::from(libc0);
            c.in_libc_reached += usize::from(libc0 && reached);
            c.in_cmp += usize::from(in_cmp);
            c.in_cmp_reached += usize::from(in_cmp && reached);
            c.deepest = c.deepest.max(pcs.len());
            if (libc0 || in_cmp) && pcs.len() > start.outer.len() + 2 {
                examples.push(s);
            }
            if !(reached && exact_tail) && cut.len() < 3 {
                cut.push(named(s));
            }
        }
        let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
        let cmp = if name == "qsort" {
            format!(
                "; {} in the comparator under libc, {} reach it",
                c.in_cmp, c.in_cmp_reached
            )
        } else {
            String::new()
        };
        eprintln!(
            "{name}: {} samples, {} ({:.2}%) reach the outermost frame ({}), \
             {} end with libgcc's frames below the worker; {} with frame 0 in libc, \
             {} ({:.2}%) of them reach it{cmp}; deepest {} frames",
            c.samples,
            c.reached,
            pct(c.reached, c.samples),
            common::module_offset(outermost),
            c.exact_tail,
            c.in_libc,
            c.in_libc_reached,
            pct(c.in_libc_reached, c.in_libc),
            c.deepest,
        );
        // One from the middle: the first and last may come from the
        // worker's setup and teardown.
        if let Some(s) = examples.get(examples.len() / 2) {
            eprintln!("  e.g. {}", named(s).join(" <- "));
        }
        let mut fail = |why: String| failures.push(format!("{name}: {why}; {c:?}; e.g. {cut:#?}"));
        if c.samples < MIN_SAMPLES {
            fail(format!("fewer than {MIN_SAMPLES} samples"));
        }
        if c.in_libc < MIN_IN_LIBC {
            fail(format!("fewer than {MIN_IN_LIBC} samples in the C library"));
        }
        if c.reached * 100 < c.samples * 99 {
            fail("under 99% of the samples reach the outermost frame".into());
        }
        if c.exact_tail * 100 < c.samples * 99 {
            fail("under 99% of the samples end with libgcc's frames below the worker".into());
        }
        if c.in_libc_reached * 100 < c.in_libc * 99 {
            fail("under 99% of the samples in libc reach the outermost frame".into());
        }
        if name == "qsort" {
            if c.in_cmp < 10 {
                fail("fewer than 10 samples in the comparator".into());
            }
            if c.in_cmp_reached * 100 < c.in_cmp * 99 {
                fail("under 99% of the comparator's samples reach the outermost frame".into());
            }
        }
    }
    eprintln!(
        "sampled for {:.2} s: {} taken, {} dropped, {} missed",
        took.as_secs_f64(),
        stats.taken,
        stats.dropped,
        stats.missed
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
