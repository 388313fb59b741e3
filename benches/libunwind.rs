//! libunwind 1.6's `unw_backtrace` on the same stacks as `benches/walk.rs`
//! (16, 64 and 256 frames of `c_bench_recurse`, and 8 nested `qsort`
//! calls, after checking that libunwind walks the frames stackmark does
//! there). A binary of its own: linking libunwind replaces glibc's
//! `backtrace`.
//!
//! `cargo bench --bench libunwind`; `STACKMARK_BENCH_QUICK=1` for a short run.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod common;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod bench {
    use super::common;
    use std::ffi::c_void;
    use std::time::Duration;

    use criterion::Criterion;

    #[link(name = "unwind")]
    extern "C" {
        fn unw_backtrace(buffer: *mut *mut c_void, size: i32) -> i32;
    }

    use stackmark_fixtures::at_depth;

    pub fn main() {
        let quick = std::env::var_os("STACKMARK_BENCH_QUICK").is_some();
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_millis(if quick { 100 } else { 500 }))
            .measurement_time(Duration::from_millis(if quick { 300 } else { 2000 }))
            .sample_size(if quick { 10 } else { 50 })
            .configure_from_args();
        for depth in [16u64, 64, 256] {
            at_depth(depth, &mut || {
                let mut buf = [std::ptr::null_mut::<c_void>(); 512];
                // SAFETY: the buffer holds 512 pointers.
                let n = unsafe { unw_backtrace(buf.as_mut_ptr(), 512) };
                eprintln!("depth {depth}: libunwind {n} frames");
                c.bench_function(&format!("depth{depth}/libunwind"), |b| {
                    // SAFETY: as above.
                    b.iter(|| unsafe { unw_backtrace(buf.as_mut_ptr(), 512) })
                });
            });
        }
        qsort_stack(&mut c);
        distinct_stacks(&mut c);
        c.final_summary();
    }

    /// The stacks of distinct functions `benches/walk.rs` walks, after
    /// checking that libunwind walks the frames stackmark does.
    fn distinct_stacks(c: &mut Criterion) {
        use stackmark_fixtures::{at_distinct_depth, Chain};
        let full = stackmark::WalkOptions {
            max_depth: 512,
            ..Default::default()
        };
        let mut failure = None;
        for (chain, name) in [
            (Chain::Sframe, "distinct"),
            (Chain::FramePointers, "distinct-fp"),
        ] {
            for depth in [16usize, 64, 256] {
                at_distinct_depth(chain, depth, &mut || {
                    let (ours, theirs) = both_walks(full);
                    let n = theirs.len();
                    if let Err(e) = common::same_frames("libunwind", &ours, 1, &theirs) {
                        return failure = Some(format!("{name} {depth}: {e}"));
                    }
                    eprintln!("{name} {depth}: libunwind {n} frames");
                    bench_libunwind(c, &format!("{name}{depth}/libunwind"));
                });
                if let Some(e) = failure.take() {
                    panic!("{e}");
                }
            }
        }
    }

    /// Benchmarks as `id` libunwind's walk from the caller (inlined).
    #[inline(always)]
    fn bench_libunwind(c: &mut Criterion, id: &str) {
        let mut buf = [std::ptr::null_mut::<c_void>(); 512];
        c.bench_function(id, |b| {
            // SAFETY: the buffer holds 512 pointers.
            b.iter(|| unsafe { unw_backtrace(buf.as_mut_ptr(), 512) })
        });
    }

    /// stackmark's frames and libunwind's pcs, both from the caller (this
    /// is inlined into it), stackmark walking with `opts`.
    #[inline(always)]
    fn both_walks(opts: stackmark::WalkOptions) -> (Vec<stackmark::Frame>, Vec<u64>) {
        let mut buf = [std::ptr::null_mut::<c_void>(); 512];
        // SAFETY: the buffer holds 512 pointers.
        let n = unsafe { unw_backtrace(buf.as_mut_ptr(), 512) };
        let (regs, precise) = stackmark::capture_here();
        let mut frames = [stackmark::Frame::default(); 512];
        let m = stackmark::walk_from(regs, precise, opts, &mut frames);
        let theirs = buf[..n.max(0) as usize]
            .iter()
            .map(|&pc| pc as u64)
            .collect();
        (frames[..m].to_vec(), theirs)
    }

    /// The stack through the C library ([`common::at_qsort_depth`]), after
    /// checking that libunwind walks the frames stackmark does.
    fn qsort_stack(c: &mut Criterion) {
        stackmark::init().unwrap();
        let opts = stackmark::WalkOptions {
            max_depth: 512,
            ..Default::default()
        };
        let levels = common::QSORT_LEVELS;
        let mut failure = None;
        common::at_qsort_depth(levels, &mut || {
            let (frames, theirs) = both_walks(opts);
            let n = theirs.len();
            // Frame 0 differs (each walker starts where it was called in
            // this closure); every frame below it must be the same.
            let checked = common::methods(&frames)
                .and_then(|_| common::same_frames("libunwind", &frames, 1, &theirs));
            if let Err(e) = checked {
                return failure = Some(e);
            }
            eprintln!("qsort {levels}: libunwind {n} frames");
            bench_libunwind(c, &format!("qsort{levels}/libunwind"));
        });
        if let Some(e) = failure {
            panic!("the stack through qsort: {e}");
        }
    }
}

fn main() {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    bench::main();
}
