//! Walk speed, side by side in one run, on the same stacks. First, stacks
//! of distinct functions, as real stacks are (`distinct{16,64,256}`, with
//! SFrame and no frame pointers; `distinct-fp{16,64,256}`, with frame
//! pointers and no SFrame: `distinct_stacks`). Then a recursion in C that
//! has both SFrame and frame pointers (`c_bench_recurse`), 16, 64 and 256
//! frames deep (plus the harness's own frames below it), kept as a row of
//! its own:
//!
//! * `stackmark/sframe`: the full walk (SFrame, then frame pointers);
//! * `stackmark/fp`: the same walker with tables off (frame pointers only);
//! * `backtrace-rs`: the `backtrace` crate's `trace` (libgcc's unwinder);
//! * `glibc`: glibc's `backtrace()`;
//! * `framehop`: framehop 0.16 with this binary's `.eh_frame` registered.
//!
//! And a stack that crosses the C library (`qsort8`: 8 nested `qsort`
//! calls, each through a Rust comparator; `common::at_qsort_depth`), where
//! every frame is walked by its DWARF CFI: stackmark warm and cold, and
//! framehop with the `.eh_frame` of every module registered (with this
//! binary's alone it stops at glibc's first frame). The bench first checks
//! that both walk the same frames, and that stackmark took glibc's frames
//! from their CFI, and fails otherwise.
//!
//! Plus: the module table (`init`), a full markup report of a 48-deep
//! recursion (60 frames) with every module, a cold walk (the per-pc
//! caches, remembered scans and remembered walk ends emptied before each
//! walk), and the 16-deep walk cut short at the borders of its parts
//! (`depth16-parts`), which shows where a short walk's time goes.
//!
//! stackmark and framehop walk from registers captured once, outside the
//! timed loop; `backtrace-rs` and glibc capture their own inside it, and
//! walk the timing harness's few frames too. The README compares time per
//! frame.
//! libunwind is measured by `benches/libunwind.rs`, a binary of its own,
//! because linking it replaces glibc's `backtrace`.
//!
//! `cargo bench --bench walk`; `STACKMARK_BENCH_QUICK=1` for a short run;
//! `scripts/bench-goals.sh` runs this and `benches/libunwind.rs` and prints
//! the README's tables.

#[cfg(target_os = "linux")]
mod common;

#[cfg(target_os = "linux")]
mod bench {
    use super::common;
    use std::ffi::c_void;
    use std::hint::black_box;
    use std::time::Duration;

    use criterion::{BatchSize, Criterion};
    use stackmark::{Frame, WalkOptions};

    use stackmark_fixtures::at_depth;

    extern "C" {
        fn backtrace(buffer: *mut *mut c_void, size: i32) -> i32;
    }

    #[cfg(target_arch = "x86_64")]
    mod fh {
        use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
        use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
        use object::{Object, ObjectSection, ObjectSegment};

        pub struct Framehop {
            unwinder: UnwinderX86_64<Vec<u8>>,
            cache: CacheX86_64,
            stack: (u64, u64),
        }

        impl Framehop {
            /// Registers this executable's `.eh_frame` with framehop.
            pub fn new() -> Framehop {
                Framehop::of(1)
            }

            /// Registers the `.eh_frame` of every module of the table that
            /// has a file (the executable, the C library, the dynamic
            /// linker, libgcc_s...): what an unwinder needs to cross them.
            pub fn with_every_module() -> Framehop {
                Framehop::of(usize::MAX)
            }

            /// Registers the first `count` modules of the table that have
            /// a file.
            fn of(count: usize) -> Framehop {
                let table = stackmark::modules::current().expect("init");
                let mut unwinder = UnwinderX86_64::new();
                let files = table.modules().iter().filter_map(|m| {
                    let path = String::from_utf8_lossy(m.name()).into_owned();
                    Some((m.bias, std::fs::read(&path).ok()?, path))
                });
                for (bias, data, path) in files.take(count) {
                    let file = object::File::parse(&*data).unwrap();
                    let section = |name: &str| {
                        let s = file.section_by_name(name)?;
                        Some((s.address()..s.address() + s.size(), s.data().ok()?.to_vec()))
                    };
                    let (text_svma, text) = section(".text").unzip();
                    let (eh_frame_svma, eh_frame) = section(".eh_frame").unzip();
                    let (eh_frame_hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr").unzip();
                    let got_svma = section(".got").map(|s| s.0);
                    let end = file
                        .segments()
                        .map(|s| s.address() + s.size())
                        .max()
                        .unwrap();
                    let info = ExplicitModuleSectionInfo {
                        base_svma: 0,
                        text_svma,
                        text,
                        got_svma,
                        eh_frame_svma,
                        eh_frame,
                        eh_frame_hdr_svma,
                        eh_frame_hdr,
                        ..Default::default()
                    };
                    unwinder.add_module(Module::new(path, bias..bias + end, bias, info));
                }
                let stack = stackmark::sys::linux::registered_stack().expect("registered thread");
                Framehop {
                    unwinder,
                    cache: CacheX86_64::new(),
                    stack,
                }
            }

            /// Walks from the given registers; returns the frame count.
            pub fn walk(&mut self, rip: u64, rsp: u64, rbp: u64) -> usize {
                self.walk_with(rip, rsp, rbp, |_| ())
            }

            /// Walks from the given registers; returns each frame's address
            /// (the pc, then return addresses).
            pub fn frames(&mut self, rip: u64, rsp: u64, rbp: u64) -> Vec<u64> {
                let mut out = Vec::new();
                self.walk_with(rip, rsp, rbp, |pc| out.push(pc));
                out
            }

            #[inline(always)]
            fn walk_with(
                &mut self,
                rip: u64,
                rsp: u64,
                rbp: u64,
                mut each: impl FnMut(u64),
            ) -> usize {
                let (lo, hi) = self.stack;
                let mut read = |addr: u64| {
                    if addr >= lo && addr + 8 <= hi && addr.is_multiple_of(8) {
                        // SAFETY: inside this thread's stack.
                        Ok(unsafe { *(addr as *const u64) })
                    } else {
                        Err(())
                    }
                };
                let mut it = self.unwinder.iter_frames(
                    rip,
                    UnwindRegsX86_64::new(rip, rsp, rbp),
                    &mut self.cache,
                    &mut read,
                );
                let mut n = 0;
                while let Ok(Some(frame)) = it.next() {
                    each(frame.address());
                    n += 1;
                }
                n
            }
        }
    }

    /// Benchmarks as `name` a walk from `regs` with the caches emptied
    /// before each (outside the timed part).
    fn cold(
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        regs: stackmark::Regs,
        pc_kind: stackmark::PcKind,
        opts: WalkOptions,
        frames: &mut [Frame],
    ) {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    stackmark::clear_caches();
                },
                |_| stackmark::walk_from(regs, pc_kind, opts, frames),
                BatchSize::PerIteration,
            )
        });
    }

    fn config() -> Criterion {
        let quick = std::env::var_os("STACKMARK_BENCH_QUICK").is_some();
        Criterion::default()
            .warm_up_time(Duration::from_millis(if quick { 100 } else { 500 }))
            .measurement_time(Duration::from_millis(if quick { 300 } else { 2000 }))
            .sample_size(if quick { 10 } else { 50 })
    }

    fn walks(c: &mut Criterion) {
        stackmark::init().unwrap();
        #[cfg(target_arch = "x86_64")]
        let mut framehop = fh::Framehop::new();
        // The whole stack, as the other unwinders walk it: the default depth
        // limit (256) would cut the 256-deep walk short of the harness and
        // the start code.
        let full = WalkOptions {
            max_depth: 512,
            ..WalkOptions::default()
        };
        let fp_only = WalkOptions {
            use_tables: false,
            ..full
        };
        for depth in [16u64, 64, 256] {
            at_depth(depth, &mut || {
                let (regs, pc_kind) = stackmark::capture_here();
                let mut frames = [Frame::default(); 512];
                let mut group = c.benchmark_group(format!("depth{depth}"));
                let n = stackmark::walk_from(regs, pc_kind, full, &mut frames);
                let m = stackmark::walk_from(regs, pc_kind, fp_only, &mut frames);
                eprintln!("depth {depth}: stackmark/sframe {n} frames, stackmark/fp {m} frames");
                group.bench_function("stackmark/sframe", |b| {
                    b.iter(|| stackmark::walk_from(regs, pc_kind, full, &mut frames))
                });
                group.bench_function("stackmark/fp", |b| {
                    b.iter(|| stackmark::walk_from(regs, pc_kind, fp_only, &mut frames))
                });
                cold(
                    &mut group,
                    "stackmark/sframe-cold",
                    regs,
                    pc_kind,
                    full,
                    &mut frames,
                );
                let mut count = 0;
                backtrace::trace(|_| {
                    count += 1;
                    true
                });
                eprintln!("depth {depth}: backtrace-rs {count} frames");
                group.bench_function("backtrace-rs", |b| {
                    b.iter(|| {
                        let mut n = 0usize;
                        backtrace::trace(|_| {
                            n += 1;
                            true
                        });
                        n
                    })
                });
                let mut buf = [std::ptr::null_mut::<c_void>(); 512];
                // SAFETY: the buffer holds 512 pointers.
                let g = unsafe { backtrace(buf.as_mut_ptr(), 512) };
                eprintln!("depth {depth}: glibc {g} frames");
                group.bench_function("glibc", |b| {
                    // SAFETY: as above.
                    b.iter(|| unsafe { backtrace(buf.as_mut_ptr(), 512) })
                });
                #[cfg(target_arch = "x86_64")]
                {
                    let f = framehop.walk(regs.rip, regs.rsp, regs.rbp);
                    eprintln!("depth {depth}: framehop {f} frames");
                    group.bench_function("framehop", |b| {
                        b.iter(|| framehop.walk(regs.rip, regs.rsp, regs.rbp))
                    });
                }
                group.finish();
                if depth == 16 {
                    parts(c, regs, pc_kind, full, &mut frames);
                }
            });
        }
        qsort_stack(c, full);
    }

    /// The stack through the C library ([`common::at_qsort_depth`]): the
    /// warm and the cold walk, and framehop with the `.eh_frame` of every
    /// module registered, after checking that both walk the same frames
    /// and that stackmark took every frame in the C library from its CFI.
    #[inline(never)]
    fn qsort_stack(c: &mut Criterion, opts: WalkOptions) {
        #[cfg(target_arch = "x86_64")]
        let mut framehop = fh::Framehop::with_every_module();
        let levels = common::QSORT_LEVELS;
        let mut failure = None;
        common::at_qsort_depth(levels, &mut || {
            let (regs, pc_kind) = stackmark::capture_here();
            let mut frames = [Frame::default(); 512];
            let n = stackmark::walk_from(regs, pc_kind, opts, &mut frames);
            match common::methods(&frames[..n]) {
                Ok(m) => eprintln!("qsort {levels}: stackmark {n} frames ({m})"),
                Err(e) => return failure = Some(e),
            }
            #[cfg(target_arch = "x86_64")]
            {
                let theirs = framehop.frames(regs.rip, regs.rsp, regs.rbp);
                if let Err(e) = common::same_frames("framehop", &frames[..n], 0, &theirs) {
                    return failure = Some(e);
                }
                eprintln!("qsort {levels}: framehop {} frames", theirs.len());
            }
            let mut group = c.benchmark_group(format!("qsort{levels}"));
            group.bench_function("stackmark", |b| {
                b.iter(|| stackmark::walk_from(regs, pc_kind, opts, &mut frames))
            });
            cold(
                &mut group,
                "stackmark-cold",
                regs,
                pc_kind,
                opts,
                &mut frames,
            );
            #[cfg(target_arch = "x86_64")]
            group.bench_function("framehop", |b| {
                b.iter(|| framehop.walk(regs.rip, regs.rsp, regs.rbp))
            });
            group.finish();
        });
        if let Some(e) = failure {
            panic!("the stack through qsort: {e}");
        }
    }

    /// Where a short walk's time goes: the same walk cut short by smaller
    /// output buffers, at the borders of its parts (nothing; frame 0; up to
    /// the end of the recursion; up to the first frame outside this
    /// executable, where glibc's start code begins; the whole walk).
    /// Each part's cost is the difference between two cuts.
    #[inline(never)]
    fn parts(
        c: &mut Criterion,
        regs: stackmark::Regs,
        pc_kind: stackmark::PcKind,
        opts: WalkOptions,
        frames: &mut [Frame; 512],
    ) {
        let n = stackmark::walk_from(regs, pc_kind, opts, frames);
        let table = stackmark::modules::current().expect("init");
        let exe = &table.modules()[0];
        let recursion_ra = frames[..n]
            .windows(2)
            .find(|w| w[0].pc == w[1].pc)
            .expect("a recursion")[0]
            .pc;
        let after_recursion = 1 + frames[..n]
            .iter()
            .rposition(|f| f.pc == recursion_ra)
            .unwrap();
        let start_code = frames[..n]
            .iter()
            .position(|f| !exe.contains(f.pc))
            .expect("frames outside the executable");
        drop(table);
        let cuts = [
            ("empty", 0),
            ("frame0", 1),
            ("through-recursion", after_recursion),
            ("before-start-code", start_code),
            ("whole", n),
        ];
        let mut group = c.benchmark_group("depth16-parts");
        for (name, len) in cuts {
            eprintln!("depth16 part {name}: {len} frames");
            group.bench_function(name, |b| {
                b.iter(|| stackmark::walk_from(regs, pc_kind, opts, &mut frames[..len]))
            });
        }
        group.finish();
    }

    fn report_and_init(c: &mut Criterion) {
        stackmark::init().unwrap();
        c.bench_function("init/refresh", |b| b.iter(|| stackmark::refresh().unwrap()));
        at_depth(48, &mut || {
            let mut frames = [Frame::default(); 64];
            let n = stackmark::walk_here(&mut frames);
            let table = stackmark::modules::current().unwrap();
            let mut out = vec![0u8; 64 * 1024];
            eprintln!(
                "markup report: {n} frames, {} modules",
                table.modules().len()
            );
            c.bench_function("markup/report-64-frames-all-modules", |b| {
                b.iter(|| {
                    let mut sink = stackmark::markup::SliceSink::new(&mut out);
                    let mut m = stackmark::markup::Markup::new(&mut sink);
                    m.backtrace(
                        table.modules(),
                        &frames[..n],
                        stackmark::markup::Scope::AllModules,
                    );
                    black_box(sink.as_bytes().len())
                })
            });
        });
    }

    /// A lookup in a concatenation of 64 pieces, as rust-lld leaves one per
    /// object: without the piece index every piece before the right one is
    /// searched; with it (as the module table builds it), one is.
    fn concatenated_lookups(c: &mut Criterion) {
        use stackmark::formats::sframe::{PieceEntry, SFrame};
        // cfi-sframe-x86_64-3 as GNU as/ld 2.46 wrote it (version 3, PCREL),
        // its one function grown from 0 to 48 bytes so that pcs hit it.
        let mut piece = [
            0xe2, 0xde, 3, 5, 3, 0, 0xf8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 16, 0,
            0, 0, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0,
            0, 0, 0, 2, 8, 0, 0, 0, 0,
        ];
        piece[36] = 48;
        let data: Vec<u8> = piece
            .iter()
            .copied()
            .cycle()
            .take(piece.len() * 64)
            .collect();
        let base = 0x40_0000;
        let plain = SFrame::parse(&data, base).unwrap();
        let mut slots = vec![PieceEntry::EMPTY; plain.piece_index_len()];
        let indexed = plain.with_piece_index(&mut slots);
        // One pc in each piece's function, in a scattered order.
        let pcs: Vec<u64> = (0..64u64)
            .map(|k| base + (k * 37 % 64) * piece.len() as u64 + 20)
            .collect();
        assert!(pcs.iter().all(|&pc| indexed.find_row(pc).is_some()));
        let mut group = c.benchmark_group("sframe-lookup-64-pieces");
        for (name, s) in [("plain", plain), ("indexed", indexed)] {
            group.bench_function(name, |b| {
                b.iter(|| {
                    pcs.iter()
                        .filter(|&&pc| s.find_row(black_box(pc)).is_some())
                        .count()
                })
            });
        }
    }

    /// Stacks of distinct functions ([`stackmark_fixtures::at_distinct_depth`]):
    /// 16, 64 and 256 generated C functions, with a Rust frame after every
    /// sixteenth, once built with SFrame and no frame pointers
    /// (`distinct{depth}`) and once with frame pointers and no SFrame
    /// (`distinct-fp{depth}`, where stackmark walks with its tables off).
    /// Checks first that framehop and libgcc walk the frames stackmark does.
    #[inline(never)]
    fn distinct_stacks(c: &mut Criterion, full: WalkOptions) {
        use stackmark_fixtures::{at_distinct_depth, Chain};
        #[cfg(target_arch = "x86_64")]
        let mut framehop = fh::Framehop::with_every_module();
        let fp_only = WalkOptions {
            use_tables: false,
            ..full
        };
        let mut failure = None;
        for (chain, name, opts, ours) in [
            (Chain::Sframe, "distinct", full, "stackmark/sframe"),
            (Chain::FramePointers, "distinct-fp", fp_only, "stackmark/fp"),
        ] {
            for depth in [16usize, 64, 256] {
                at_distinct_depth(chain, depth, &mut || {
                    let (regs, pc_kind) = stackmark::capture_here();
                    let mut frames = [Frame::default(); 512];
                    let n = stackmark::walk_from(regs, pc_kind, opts, &mut frames);
                    eprintln!("{name} {depth}: {ours} {n} frames");
                    // Without tables, glibc's start code below `main` (no
                    // frame pointers) is crossed by scanning, which may take
                    // a stale return address (one a constructor left): the
                    // frames compared are those before the first scanned one.
                    let trusted = match chain {
                        Chain::FramePointers => frames[..n]
                            .iter()
                            .position(|f| f.method == stackmark::Method::Scan)
                            .unwrap_or(n),
                        Chain::Sframe => n,
                    };
                    let compared = &frames[..trusted];
                    let prefix = |pcs: &[u64]| pcs[..trusted.min(pcs.len())].to_vec();
                    let libgcc = prefix(&common::libgcc_pcs());
                    if let Err(e) = common::same_frames("libgcc", compared, 1, &libgcc) {
                        return failure = Some(format!("{name} {depth}: {e}"));
                    }
                    #[cfg(target_arch = "x86_64")]
                    {
                        let all = framehop.frames(regs.rip, regs.rsp, regs.rbp);
                        let theirs = prefix(&all);
                        if let Err(e) = common::same_frames("framehop", compared, 0, &theirs) {
                            return failure = Some(format!("{name} {depth}: {e}"));
                        }
                        eprintln!("{name} {depth}: framehop {} frames", all.len());
                    }
                    let mut group = c.benchmark_group(format!("{name}{depth}"));
                    group.bench_function(ours, |b| {
                        b.iter(|| stackmark::walk_from(regs, pc_kind, opts, &mut frames))
                    });
                    if chain == Chain::Sframe {
                        cold(
                            &mut group,
                            "stackmark/sframe-cold",
                            regs,
                            pc_kind,
                            opts,
                            &mut frames,
                        );
                    }
                    #[cfg(target_arch = "x86_64")]
                    group.bench_function("framehop", |b| {
                        b.iter(|| framehop.walk(regs.rip, regs.rsp, regs.rbp))
                    });
                    group.finish();
                });
                if let Some(e) = failure.take() {
                    panic!("{e}");
                }
            }
        }
    }

    pub fn main() {
        let mut c = config().configure_from_args();
        stackmark::init().unwrap();
        distinct_stacks(
            &mut c,
            WalkOptions {
                max_depth: 512,
                ..WalkOptions::default()
            },
        );
        walks(&mut c);
        report_and_init(&mut c);
        concatenated_lookups(&mut c);
        c.final_summary();
    }
}

fn main() {
    #[cfg(target_os = "linux")]
    bench::main();
}
