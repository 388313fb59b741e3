//! Instructions per frame on the stacks of distinct functions, for
//! callgrind: `scripts/bench-goals.sh` runs this binary under
//! `valgrind --tool=callgrind --toggle-collect=*counted_walks*` once per
//! stack and divides the count by the walks and the frames.
//!
//! ```text
//! instructions (sframe|fp) DEPTH (warm|cold) WALKS
//! ```
//!
//! It walks the stack of `DEPTH` distinct C functions
//! (`stackmark_fixtures::at_distinct_depth`) once outside the counted part
//! (the warm case then finds the caches filled), then `WALKS` times inside
//! `counted_walks`; the cold case empties the caches before each walk,
//! outside the counted part too. It prints `frames N`. Without arguments
//! (as `cargo bench` runs every bench) it does nothing.
//!
//! With `STACKMARK_TIME` set it also prints `best NS`: the fastest of 400
//! timed batches (50 warm walks, or one cold walk after emptying the
//! caches), in ns per frame. On a machine others load, the fastest batch
//! is the one the others left alone, where criterion's estimates move
//! with the load; run two builds' binaries in turn, a few processes each
//! (the layout moves with every process), to compare them.

#[cfg(target_os = "linux")]
mod bench {
    use std::hint::black_box;

    use stackmark::{Frame, Regs, WalkOptions};
    use stackmark_fixtures::{at_distinct_depth, Chain};

    /// The part callgrind counts: one walk.
    #[inline(never)]
    #[no_mangle]
    fn counted_walks(
        regs: Regs,
        pc_kind: stackmark::PcKind,
        opts: WalkOptions,
        out: &mut [Frame],
    ) -> usize {
        stackmark::walk_from(black_box(regs), pc_kind, opts, out)
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let [chain, depth, warmth, walks] = &args[..] else {
            return;
        };
        let chain = match chain.as_str() {
            "sframe" => Chain::Sframe,
            "fp" => Chain::FramePointers,
            _ => panic!("chain: sframe or fp"),
        };
        let opts = WalkOptions {
            max_depth: 512,
            use_tables: chain == Chain::Sframe,
            ..WalkOptions::default()
        };
        let cold = warmth == "cold";
        let depth: usize = depth.parse().unwrap();
        let walks: usize = walks.parse().unwrap();
        stackmark::init().unwrap();
        at_distinct_depth(chain, depth, &mut || {
            let (regs, pc_kind) = stackmark::capture_here();
            let mut frames = [Frame::default(); 512];
            let n = stackmark::walk_from(regs, pc_kind, opts, &mut frames);
            for _ in 0..walks {
                if cold {
                    stackmark::clear_caches();
                }
                assert_eq!(counted_walks(regs, pc_kind, opts, &mut frames), n);
            }
            // Not under callgrind: `counted_walks` counts these walks too.
            if std::env::var_os("STACKMARK_TIME").is_some() {
                let mut best = f64::MAX;
                let batch = if cold { 1 } else { 50 };
                for _ in 0..400 {
                    if cold {
                        stackmark::clear_caches();
                    }
                    let t = std::time::Instant::now();
                    for _ in 0..batch {
                        counted_walks(regs, pc_kind, opts, &mut frames);
                    }
                    best = best.min(t.elapsed().as_nanos() as f64 / batch as f64 / n as f64);
                }
                println!("best {best:.2}");
            }
            println!("frames {n}");
        });
    }
}

fn main() {
    #[cfg(target_os = "linux")]
    bench::main();
}
