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
//!
//! On x86_64 it then prints `floor NS` and `libunwind NS` too, timed the
//! same way. The floor is the chain of dependent loads every walk waits
//! for: for the SFrame stack, a loop that only reads each frame's return
//! address from the stack, finds it in a table of 8,192 16-byte entries
//! (slotted as the step cache's, two ways) and adds the CFA offset found
//! there, with no check of any read and no answer to decode; for the
//! frame-pointer stack, a loop that only follows the links. For the
//! SFrame stack it also prints `predicted NS` and `predicted-in-order NS`:
//! the same loop for a walk that predicts each caller (every entry names
//! the entry its caller had, so the return address read from the stack
//! only confirms it, and a miss looks it up), with the entries in the step
//! cache's slots, and side by side in the order the walk meets them; and
//! `checked-predicting NS` and `checked-looking-up NS`: the in-order loop
//! with a real step's checks and output, predicting or not.
//! `libunwind` is `unw_backtrace` from the same point.
//! `docs/performance.md` sets them beside the goals.

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

    /// The fastest of 400 timed batches of `batch` calls of `walk`, each
    /// batch after an untimed call of `before`, in ns for each of the
    /// `frames` frames a call walks.
    pub(crate) fn fastest(
        frames: usize,
        batch: usize,
        mut before: impl FnMut(),
        mut walk: impl FnMut(),
    ) -> f64 {
        let mut best = f64::MAX;
        for _ in 0..400 {
            before();
            let t = std::time::Instant::now();
            for _ in 0..batch {
                walk();
            }
            best = best.min(t.elapsed().as_nanos() as f64 / batch as f64 / frames as f64);
        }
        best
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
                let best = fastest(
                    n,
                    if cold { 1 } else { 50 },
                    || {
                        if cold {
                            stackmark::clear_caches();
                        }
                    },
                    || {
                        counted_walks(regs, pc_kind, opts, &mut frames);
                    },
                );
                println!("best {best:.2}");
                #[cfg(target_arch = "x86_64")]
                {
                    println!("floor {:.2}", crate::floor::best(chain, regs, &frames[..n]));
                    println!("libunwind {:.2}", crate::floor::libunwind(n));
                }
            }
            println!("frames {n}");
        });
    }
}

/// The dependency floor of a walk (see the top of this file).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod floor {
    use stackmark::{Frame, Regs};
    use stackmark_fixtures::Chain;

    /// Entries of the table the SFrame floor looks return addresses up in.
    const ENTRIES: usize = 8192;

    /// Follows the chain the table describes from `pc` at `sp`, writing
    /// each pc: per frame one table load (two where a pc sits in the
    /// second way) and one stack load, each waiting for the one before.
    #[inline(never)]
    fn table_chain(
        table: &[[u64; 2]; ENTRIES],
        mut pc: u64,
        mut sp: u64,
        out: &mut [u64],
    ) -> usize {
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = pc;
            let home = (pc >> 2) as usize & (ENTRIES - 1);
            let mut e = table[home];
            if e[0] != pc {
                // The second way, as the step cache's.
                e = table[(home + 1) & (ENTRIES - 1)];
                if e[0] != pc {
                    return i + 1;
                }
            }
            sp = sp.wrapping_add(e[1]);
            // SAFETY: `sp - 8` is where this thread's walk, a moment ago,
            // read the next frame's return address (the table holds its
            // frames), on the stack below the caller, which is still live.
            pc = unsafe { ((sp - 8) as *const u64).read() };
        }
        out.len()
    }

    /// The first of return address `pc`'s two slots, as the step cache
    /// has them (its home, `pc / 4` modulo the entries, then the next one),
    /// where `hit` holds.
    fn way(pc: u64, hit: impl Fn(usize) -> bool) -> Option<usize> {
        let home = (pc >> 2) as usize & (ENTRIES - 1);
        [home, (home + 1) & (ENTRIES - 1)]
            .into_iter()
            .find(|&k| hit(k))
    }

    /// As [`table_chain`], for a walk that predicts each caller: every
    /// entry (pc, step to the caller's sp, the caller's entry last time)
    /// names the entry its caller had, so the next entry's load waits only
    /// for this one's, and the return address read from the stack only
    /// confirms the prediction; a miss (a function with more than one
    /// caller on the stack) looks the return address up with `find`.
    #[inline(never)]
    fn predicted_chain(
        entries: &[[u64; 3]; ENTRIES],
        find: impl Fn(u64) -> Option<usize>,
        mut at: usize,
        mut sp: u64,
        out: &mut [u64],
    ) -> usize {
        for (i, o) in out.iter_mut().enumerate() {
            let e = entries[at & (ENTRIES - 1)];
            *o = e[0];
            sp = sp.wrapping_add(e[1]);
            at = e[2] as usize;
            // SAFETY: as in `table_chain`.
            let ra = unsafe { ((sp - 8) as *const u64).read() };
            if entries[at & (ENTRIES - 1)][0] != ra {
                match find(ra) {
                    Some(k) => at = k,
                    None => return i + 1,
                }
            }
        }
        out.len()
    }

    /// An entry of [`checked_chain`]'s store: a sequence word (the
    /// store's generation, as the step cache keeps one), the pc, the
    /// packed answer (bit 0: the CFA from fp; bit 1: the frame pointer
    /// saved; bits 8-23 the RA's offset from the CFA, 24-39 the FP's,
    /// 40-63 the RA's from the CFA's base) and the entry the caller had.
    #[derive(Clone, Copy, Default)]
    #[repr(C)]
    struct Entry {
        seq: u64,
        pc: u64,
        answer: u64,
        next: u64,
    }

    /// [`predicted_chain`] over entries in the order met, with the checks
    /// and output of a real step: each read within the stack's bounds, the
    /// entry's sequence word matched with the store's generation, the
    /// answer decoded (CFA from sp or fp, the frame pointer restored where
    /// saved), a return address of 0 or a CFA at or below sp ending the
    /// walk, and each frame written whole. Without `PREDICT`, every caller
    /// is looked up (two dependent loads: the index, then the entry).
    #[inline(never)]
    fn checked_chain<const PREDICT: bool>(
        entries: &[Entry; ENTRIES],
        find: impl Fn(u64) -> Option<usize>,
        generation: u64,
        (lo, len): (u64, u64),
        (mut at, mut sp, mut fp): (usize, u64, u64),
        out: &mut [Frame],
    ) -> usize {
        let read = |addr: u64| -> Option<u64> {
            if addr.wrapping_sub(lo) > len - 8 {
                return None;
            }
            // SAFETY: the bounds are the walk's frames give or take 4 KiB,
            // on this thread's stack: below them the frames of this call,
            // above the outermost one the process's arguments.
            Some(unsafe { (addr as *const u64).read() })
        };
        let len_out = out.len();
        let mut slots = out.iter_mut();
        for slot in slots.by_ref() {
            let e = &entries[at & (ENTRIES - 1)];
            let (pc, a, next) = (e.pc, e.answer, e.next as usize);
            if e.seq != generation {
                return 0;
            }
            let base = if a & 1 != 0 { fp } else { sp };
            let ra_at = base.wrapping_add(((a as i64) >> 40) as u64);
            let Some(ra) = read(ra_at) else { break };
            let cfa = ra_at.wrapping_sub((a >> 8) as u16 as i16 as i64 as u64);
            if a & 2 != 0 {
                let Some(v) = read(cfa.wrapping_add((a >> 24) as u16 as i16 as i64 as u64)) else {
                    break;
                };
                fp = v;
            }
            *slot = Frame {
                pc,
                sp,
                pc_kind: stackmark::PcKind::ReturnAddress,
                method: stackmark::Method::SFrame,
            };
            if ra == 0 || cfa <= sp {
                break;
            }
            sp = cfa;
            at = next;
            if !PREDICT || entries[at & (ENTRIES - 1)].pc != ra {
                match find(ra) {
                    Some(k) => at = k,
                    None => break,
                }
            }
        }
        len_out - slots.len()
    }

    /// Follows the frame records from `fp` while they go up the stack and
    /// stay below `top`, writing each return address.
    #[inline(never)]
    fn link_chain(mut fp: u64, top: u64, out: &mut [u64]) -> usize {
        for (i, slot) in out.iter_mut().enumerate() {
            // SAFETY: `fp` lies between the frame this runs under and `top`,
            // the outermost frame's sp: on this thread's live stack.
            let [next, ra] = unsafe { (fp as *const [u64; 2]).read() };
            *slot = ra;
            if next <= fp || next >= top {
                return i + 1;
            }
            fp = next;
        }
        out.len()
    }

    #[link(name = "unwind")]
    extern "C" {
        fn unw_backtrace(buffer: *mut *mut std::ffi::c_void, size: i32) -> i32;
    }

    /// [`fastest`](crate::bench::fastest) of batches of 50 calls.
    fn fastest(frames: usize, walk: impl FnMut()) -> f64 {
        crate::bench::fastest(frames, 50, || {}, walk)
    }

    /// The fastest of 400 batches of 50 walks of libunwind's
    /// `unw_backtrace` from here, in ns a frame, after checking that it
    /// finds the `n` frames the walk found (or one more: its own).
    pub fn libunwind(n: usize) -> f64 {
        let mut buf = [std::ptr::null_mut(); 512];
        // SAFETY: the buffer holds 512 pointers.
        let mut walk = || unsafe { unw_backtrace(buf.as_mut_ptr(), 512) } as usize;
        let k = walk();
        assert!(
            k == n || k == n + 1,
            "libunwind found {k} frames, the walk {n}"
        );
        fastest(k, || {
            std::hint::black_box(walk());
        })
    }

    /// The fastest of 400 batches of 50 floor walks over the frames
    /// `frames` the walk found from `regs`, in ns a frame.
    pub fn best(chain: Chain, regs: Regs, frames: &[Frame]) -> f64 {
        let mut out = [0u64; 512];
        let n = frames.len();
        let mut table = Box::new([[0u64; 2]; ENTRIES]);
        if chain == Chain::Sframe {
            // Each frame's pc and the step to its caller's sp (the Rust
            // frames between the C ones share a pc, and so a step).
            for w in frames.windows(2) {
                let step = [w[0].pc, w[1].sp - w[0].sp];
                let free = way(w[0].pc, |k| table[k][0] == 0 || table[k] == step)
                    .expect("three pcs of the stack share two entries");
                table[free] = step;
            }
        }
        let walk = |out: &mut [u64]| match chain {
            Chain::Sframe => table_chain(&table, frames[0].pc, frames[0].sp, out),
            _ => link_chain(regs.rbp, frames[n - 1].sp, out),
        };
        // The floor follows the frames the walk found: the frame-pointer
        // chain gives their callers' return addresses, from frame 1 on, and
        // ends in the C library's start code, which keeps no frame pointer
        // (the walk takes its last frames by their CFI).
        let k = walk(&mut out[..n]);
        let found: Vec<u64> = frames.iter().map(|f| f.pc).collect();
        match chain {
            Chain::Sframe => assert_eq!(&out[..k], &found[..]),
            _ => assert!(k + 4 >= n && out[..k] == found[1..=k]),
        }
        let best = fastest(k, || {
            std::hint::black_box(walk(std::hint::black_box(&mut out[..k])));
        });
        if chain == Chain::Sframe {
            let [slotted, in_order, checked, looking_up] = predicted(&table, frames, &mut out);
            println!("predicted {slotted:.2}");
            println!("predicted-in-order {in_order:.2}");
            println!("checked-predicting {checked:.2}");
            println!("checked-looking-up {looking_up:.2}");
        }
        best
    }

    /// [`predicted_chain`]'s fastest batch, as [`best`]'s, with each pc's
    /// entry in the slot `table` has it in, and with the entries side by
    /// side in the order the walk first meets their pcs (as an allocator
    /// handing each new pc the next entry would leave them; a two-way
    /// index by return address finds them on a miss).
    fn predicted(table: &[[u64; 2]; ENTRIES], frames: &[Frame], out: &mut [u64]) -> [f64; 4] {
        let n = frames.len();
        let found: Vec<u64> = frames.iter().map(|f| f.pc).collect();
        let slot_of = |pc: u64| way(pc, |k| table[k][0] == pc);
        // Entries by slot; the last frame's caller, which has none, is
        // predicted to be in a slot that matches no pc.
        let empty = (0..ENTRIES).find(|&k| table[k][0] == 0).unwrap();
        let mut slotted = Box::new([[0u64; 3]; ENTRIES]);
        for (k, e) in table.iter().enumerate() {
            slotted[k] = [e[0], e[1], 0];
        }
        for w in frames.windows(2) {
            slotted[slot_of(w[0].pc).unwrap()][2] = slot_of(w[1].pc).unwrap_or(empty) as u64;
        }
        // Entries in the order met, and the index a miss searches.
        let mut in_order = Box::new([[0u64; 3]; ENTRIES]);
        let mut index = Box::new([[0u64; 2]; ENTRIES]);
        let mut met: Vec<u64> = Vec::new();
        for f in &frames[..n - 1] {
            if !met.contains(&f.pc) {
                met.push(f.pc);
            }
        }
        let order_of = |pc: u64| met.iter().position(|&p| p == pc);
        for (k, &pc) in met.iter().enumerate() {
            let w = frames.windows(2).find(|w| w[0].pc == pc).unwrap();
            let next = order_of(w[1].pc).unwrap_or(met.len());
            in_order[k] = [pc, w[1].sp - w[0].sp, next as u64];
            let free =
                way(pc, |s| index[s][0] == 0).expect("three pcs of the stack share two entries");
            index[free] = [pc, k as u64];
        }
        let find_in_order = |ra: u64| way(ra, |s| index[s][0] == ra).map(|s| index[s][1] as usize);
        let mut time =
            |entries: &[[u64; 3]; ENTRIES], find: &dyn Fn(u64) -> Option<usize>, first| {
                let k = predicted_chain(entries, find, first, frames[0].sp, &mut out[..n]);
                assert!(k + 1 >= n && out[..k] == found[..k], "{k} of {n}");
                fastest(k, || {
                    let out = std::hint::black_box(&mut out[..k]);
                    std::hint::black_box(predicted_chain(entries, find, first, frames[0].sp, out));
                })
            };
        let first = slot_of(frames[0].pc).unwrap();
        let slotted = time(&slotted, &slot_of, first);
        let unchecked = time(&in_order, &find_in_order, 0);
        // The checked loop's entries: the same, with a sequence word and
        // the rule packed as an answer (CFA = sp + step, RA at CFA - 8).
        let generation = 0x5eed_0002;
        let mut checked = Box::new([Entry::default(); ENTRIES]);
        for (k, e) in in_order.iter().enumerate().take(met.len()) {
            let ra_from_base = (e[1] as i64 - 8) as u64;
            checked[k] = Entry {
                seq: generation,
                pc: e[0],
                answer: (ra_from_base << 40) | ((-8i16 as u16 as u64) << 8),
                next: e[2],
            };
        }
        let lo = frames[0].sp - 4096;
        let bounds = (lo, frames[n - 1].sp + 4096 - lo);
        let start = (0, frames[0].sp, 0);
        let mut fr = [Frame::default(); 512];
        let mut time_checked = |chain: &dyn Fn(&mut [Frame]) -> usize| {
            let k = chain(&mut fr[..n]);
            assert!(k + 1 >= n && fr[..k].iter().zip(&found).all(|(f, p)| f.pc == *p));
            fastest(k, || {
                std::hint::black_box(chain(std::hint::black_box(&mut fr[..k])));
            })
        };
        let find = &find_in_order;
        let predicting = time_checked(&|out| {
            checked_chain::<true>(&checked, find, generation, bounds, start, out)
        });
        let looking_up = time_checked(&|out| {
            checked_chain::<false>(&checked, find, generation, bounds, start, out)
        });
        [slotted, unchecked, predicting, looking_up]
    }
}

fn main() {
    #[cfg(target_os = "linux")]
    bench::main();
}
