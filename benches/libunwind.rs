//! libunwind 1.6's `unw_backtrace` on the same stacks as `benches/walk.rs`
//! (16, 64 and 256 frames of `c_bench_recurse`). A binary of its own:
//! linking libunwind replaces glibc's `backtrace`.
//!
//! `cargo bench --bench libunwind`; `STACKMARK_BENCH_QUICK=1` for a short run.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod bench {
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
        c.final_summary();
    }
}

fn main() {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    bench::main();
}
