//! Walks on the process's main thread, whose stack ends in the program's
//! start code (glibc's `_start`, then `argv`, the environment and the
//! auxiliary vector). The test harness runs tests on threads of its own,
//! so this test has its own `main` (`harness = false` in Cargo.toml) and
//! prints a summary line in the harness's format.

#[cfg(target_os = "linux")]
fn main() {
    use stackmark::{Frame, StopReason, WalkOptions};

    stackmark::init().expect("init");
    // SAFETY: getauxval only reads the auxiliary vector.
    let entry = unsafe { libc::getauxval(libc::AT_ENTRY) };
    assert_ne!(entry, 0, "the kernel gives the entry point");
    let mut checks = 0;
    let mut ends = Vec::new();
    for use_tables in [true, false] {
        for fast_path in [true, false] {
            let opts = WalkOptions {
                use_tables,
                fast_path,
                max_depth: 512,
                ..WalkOptions::default()
            };
            // Three walks from one place: the first marks its end, the
            // second records it, the third replays it (with the hot path).
            let mut walks = Vec::new();
            for _ in 0..3 {
                let (regs, precise) = stackmark::capture_here();
                let mut w = stackmark::walker(regs, precise, opts).expect("after init");
                let mut frames = [Frame::default(); 512];
                let n = w.fill(&mut frames);
                walks.push((frames[..n].to_vec(), w.stop_reason()));
            }
            let what = format!("tables {use_tables}, hot path {fast_path}");
            let (frames, stop) = &walks[0];
            // The last frame returns into `_start`, which has no caller: the
            // walk ends there, without scanning what lies above it.
            assert_eq!(*stop, StopReason::Outermost, "{what}: {frames:x?}");
            let last = frames.last().expect("frames");
            assert!(
                last.pc > entry && last.pc - entry < 0x40,
                "{what}: the walk ends in _start (entry {entry:#x}): {frames:x?}"
            );
            assert!(
                frames.iter().all(|f| f.pc != entry),
                "{what}: the entry point is no frame: {frames:x?}"
            );
            // The frames below `main` differ by capture site only.
            for (i, w) in walks.iter().enumerate().skip(1) {
                let pcs = |f: &[Frame]| f.iter().skip(1).map(|f| f.pc).collect::<Vec<_>>();
                assert_eq!(
                    (pcs(&w.0), w.1),
                    (pcs(frames), *stop),
                    "{what}: walk {i} gives what the first gave"
                );
            }
            ends.push((what, last.pc));
            checks += 1;
        }
    }
    // With tables or without, the walk ends at the same return address.
    assert!(
        ends.iter().all(|e| e.1 == ends[0].1),
        "every walk ends at the same frame: {ends:x?}"
    );
    checks += 1;
    println!("test result: ok. {checks} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}

#[cfg(not(target_os = "linux"))]
fn main() {}
