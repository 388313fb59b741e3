//! Hostile stacks: real frames on a thread's own stack are overwritten with
//! garbage, loops and bad pointers, and the walk runs in process from there.
//! Every walk must end, without a fault, with sp strictly increasing.
//!
//! `STACKMARK_HOSTILE_WALKS` sets how many walks to run (default 10,000).

#![cfg(target_os = "linux")]

mod common;

use std::hint::black_box;

use common::Rng;

use stackmark::{Frame, WalkOptions};

#[derive(Clone, Copy, Debug)]
enum Kind {
    RandomWords,
    MidFunctionPointers,
    FramePointerLoop,
    DownwardPointers,
    UnmappedPc,
    StackEdge,
}

const KINDS: [Kind; 6] = [
    Kind::RandomWords,
    Kind::MidFunctionPointers,
    Kind::FramePointerLoop,
    Kind::DownwardPointers,
    Kind::UnmappedPc,
    Kind::StackEdge,
];

struct Env {
    code: Vec<(u64, u64)>,
    stack: (u64, u64),
    unmapped: u64,
}

fn code_addr(env: &Env, rng: &mut Rng) -> u64 {
    let (s, n) = env.code[rng.below(env.code.len() as u64) as usize];
    s + rng.below(n)
}

fn check(frames: &[Frame]) {
    assert!(!frames.is_empty());
    assert!(
        stackmark::walk::sp_order_holds(frames),
        "sp must increase: {frames:#?}"
    );
}

#[cfg(target_arch = "x86_64")]
fn set(r: &mut stackmark::Regs, pc: u64, sp: u64, fp: u64) {
    (r.rip, r.rsp, r.rbp) = (pc, sp, fp);
}
#[cfg(target_arch = "aarch64")]
fn set(r: &mut stackmark::Regs, pc: u64, sp: u64, fp: u64) {
    (r.pc, r.sp, r.fp, r.lr) = (pc, sp, fp, pc);
}

/// Overwrites `lo..hi` (frames of this thread's callers), walks twice — from
/// here and from crafted registers — then restores the bytes.
#[inline(never)]
fn corrupt_and_walk(env: &Env, rng: &mut Rng, kind: Kind, lo: u64, hi: u64) {
    let words = ((hi - lo) / 8) as usize;
    let region = lo as *mut u64;
    let mut saved = [0u64; 512];
    assert!(words <= saved.len());
    // SAFETY: lo..hi lies in this thread's stack above this function's frame
    // (the callers' locals and records); it is restored before returning.
    unsafe {
        for (i, s) in saved.iter_mut().enumerate().take(words) {
            *s = region.add(i).read_volatile();
        }
        for i in 0..words {
            let slot = lo + i as u64 * 8;
            let w = match kind {
                Kind::RandomWords => rng.next(),
                Kind::MidFunctionPointers => {
                    if i % 2 == 0 {
                        code_addr(env, rng)
                    } else {
                        lo + rng.below(words as u64) * 8
                    }
                }
                // Records that point at each other: a -> b -> a.
                Kind::FramePointerLoop => match i % 4 {
                    0 => lo + ((i as u64 + 2) % words as u64) * 8,
                    1 | 3 => code_addr(env, rng),
                    _ => lo + ((i as u64 + words as u64 - 2) % words as u64) * 8,
                },
                Kind::DownwardPointers => {
                    if i % 2 == 0 {
                        slot.saturating_sub(8 * (1 + rng.below(64)))
                    } else {
                        code_addr(env, rng)
                    }
                }
                Kind::UnmappedPc => {
                    if i % 2 == 0 {
                        env.unmapped + rng.below(4096)
                    } else {
                        lo + rng.below(words as u64) * 8
                    }
                }
                Kind::StackEdge => {
                    if i % 2 == 0 {
                        env.stack.1 - 8 * rng.below(3)
                    } else {
                        code_addr(env, rng)
                    }
                }
            };
            region.add(i).write_volatile(w);
        }
    }
    let mut frames = [Frame::default(); 64];
    let n = stackmark::walk_here(&mut frames);
    check(&frames[..n]);

    let mut regs = stackmark::capture();
    let (pc, sp, fp) = match kind {
        Kind::UnmappedPc => (
            env.unmapped + rng.below(4096),
            lo + 8 * rng.below(words as u64),
            lo,
        ),
        Kind::StackEdge => {
            let edge = [
                env.stack.1 - 8,
                env.stack.1,
                env.stack.1 + 8,
                env.stack.0,
                env.stack.0 - 8,
            ];
            let sp = edge[rng.below(edge.len() as u64) as usize];
            (code_addr(env, rng), sp, sp)
        }
        _ => (
            code_addr(env, rng),
            lo + 8 * rng.below(words as u64),
            lo + 8 * rng.below(words as u64),
        ),
    };
    set(&mut regs, pc, sp, fp);
    let n = stackmark::walk_from(
        regs,
        stackmark::PcKind::exact_if(rng.below(2) == 0),
        WalkOptions::default(),
        &mut frames,
    );
    check(&frames[..n]);

    // SAFETY: puts back exactly the bytes saved above.
    unsafe {
        for (i, s) in saved.iter().enumerate().take(words) {
            region.add(i).write_volatile(*s);
        }
    }
}

/// Recurses so there are real frames to destroy, then corrupts the ones
/// between `depth` 0 and the top and walks.
#[inline(never)]
fn descend(env: &Env, rng: &mut Rng, kind: Kind, depth: u32, top: u64) -> u64 {
    let marker = [depth as u64; 4];
    let here = marker.as_ptr() as u64;
    let top = if depth == 8 { here } else { top };
    if depth == 0 {
        let lo = (here + 64) & !7;
        let hi = top.min(lo + 512 * 8) & !7;
        assert!(hi > lo + 256, "frames to corrupt: {lo:#x}..{hi:#x}");
        corrupt_and_walk(env, rng, kind, lo, hi);
        return black_box(marker[0]);
    }
    black_box(descend(env, rng, kind, depth - 1, top)) + black_box(&marker)[1]
}

#[test]
fn hostile_stacks_never_fault_the_walk() {
    stackmark::init().unwrap();
    let walks: usize = std::env::var("STACKMARK_HOSTILE_WALKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let code = common::code_segments();
    // A page that is certainly unmapped: one mapped, then unmapped as it
    // drops.
    let unmapped = stackmark_fixtures::UnreadablePage::new().addr();
    std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            stackmark::register_thread();
            let stack = stackmark::sys::linux::registered_stack().unwrap();
            let env = Env {
                code,
                stack,
                unmapped,
            };
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            for i in 0..walks {
                descend(&env, &mut rng, KINDS[i % KINDS.len()], 12, 0);
            }
            walks
        })
        .unwrap()
        .join()
        .expect("the walking thread survived");
}

#[test]
fn the_live_reader_reads_nothing_below_the_page_of_the_walks_sp() {
    use stackmark::memory::MemoryReader;
    // The main thread's registered bounds follow the stack rlimit, not the
    // mapping; below the walk's sp nothing is surely mapped, and nothing
    // there belongs to the walk.
    let (lo, hi) = stackmark::sys::register_thread().expect("stack bounds");
    let local = 0u64;
    let sp = std::hint::black_box(&local) as *const u64 as u64;
    let page = sp & !4095;
    assert!(
        lo + 8192 <= page && page + 8192 <= hi,
        "{lo:#x} {sp:#x} {hi:#x}"
    );
    let mem = stackmark::memory::LiveMemory::new(sp);
    assert!(mem.read_u64(sp).is_some());
    assert!(mem.read_u64(page).is_some());
    assert_eq!(mem.read_u64(page - 8), None);
    assert_eq!(mem.read_u64(page - 4096), None);
    assert_eq!(mem.read_u64(lo), None);
    // Crossing a signal frame onto a higher sp of the same stack: the walk
    // goes on from there.
    let higher = page + 4096 + 16;
    mem.enter_stack(higher);
    assert!(mem.read_u64(higher).is_some());
    assert_eq!(mem.read_u64(page), None);
    assert_eq!(mem.read_u64(higher - 4096), None);
}

#[test]
fn the_live_reader_compares_words_in_place_only_within_the_stack() {
    use core::sync::atomic::AtomicU64;
    use stackmark::memory::{MemoryReader, SliceMemory};
    // The replay of a remembered walk end checks its window with
    // `words_are`: every word must match, and a window that reaches past
    // what the reader may read must fail, not be read.
    stackmark::sys::register_thread().expect("stack bounds");
    let words: [u64; 13] = core::array::from_fn(|i| 0x5a5a_0000 + i as u64);
    let words = std::hint::black_box(words);
    let at = words.as_ptr() as u64;
    let expected = |w: &[u64]| w.iter().map(|&v| AtomicU64::new(v)).collect::<Vec<_>>();
    let mem = stackmark::memory::LiveMemory::new(at);
    let same = expected(&words);
    assert!(mem.words_are(at, &same));
    assert!(mem.words_are(at, &[]));
    for i in 0..words.len() {
        let mut other = words;
        other[i] ^= 1 << (i % 64);
        assert!(!mem.words_are(at, &expected(&other)), "word {i} differs");
    }
    // Misaligned by four bytes: still compared, as native-endian words.
    let shifted: Vec<u64> = (0..12)
        .map(|i| {
            let lo = words[i] >> 32;
            lo | words[i + 1] << 32
        })
        .collect();
    assert!(mem.words_are(at + 4, &expected(&shifted)));
    // Starting below the walk's sp page, or wrapping the address space.
    let page = at & !4095;
    assert!(!mem.words_are(page - 8, &expected(&[0, 0])));
    assert!(!mem.words_are(u64::MAX - 7, &expected(&[0, 0])));

    // The default, through blocks of reads: the same answers.
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let regions = [(0x7000u64, &bytes[..])];
    let slices = SliceMemory::new(&regions);
    assert!(slices.words_are(0x7000, &same));
    assert!(!slices.words_are(0x7008, &same), "one word past the end");
    let mut other = words;
    other[12] += 1;
    assert!(
        !slices.words_are(0x7000, &expected(&other)),
        "the last block"
    );
}

#[test]
fn a_walk_that_starts_off_the_registered_stack_reads_none_of_it_until_it_crosses_onto_it() {
    use stackmark::memory::MemoryReader;
    // A walk from an alternate signal stack or a fiber: registered bounds
    // may hold pages that are not mapped (the main thread's room to grow,
    // down to the heap with an unlimited rlimit; a guard page a program
    // made inside a stack it gave a thread), so a wild frame pointer into
    // them must not be read directly. Crossing a signal frame onto the
    // stack opens it from the interrupted sp up.
    std::thread::spawn(|| {
        let (lo, hi) = stackmark::sys::register_thread().expect("stack bounds");
        let local = 0x5eedu64;
        let here = black_box(&local) as *const u64 as u64;
        let other = vec![0u64; 1024];
        let elsewhere = other.as_ptr() as u64 + 4096;
        let mem = stackmark::memory::LiveMemory::new(elsewhere);
        assert_eq!(mem.read_u64(here), None, "read before crossing");
        assert_eq!(mem.read_u64(lo), None);
        mem.enter_stack(here);
        assert_eq!(mem.read_u64(here), Some(0x5eed));
        assert!(mem.read_u64(hi - 8).is_some());
        assert_eq!(
            mem.read_u64((here & !4095) - 8),
            None,
            "below the sp's page"
        );
        // Its own stack (here a heap block) it learns page by page.
        assert_eq!(mem.read_u64(elsewhere + 8), Some(0));
    })
    .join()
    .unwrap();
}

#[test]
fn a_wild_sp_at_the_top_of_the_address_space_ends_the_walk_quietly() {
    use stackmark::memory::MemoryReader;
    // The page probes of an unknown stack used to overflow their address
    // arithmetic there: a panic (with overflow checks) inside a signal
    // handler's walk.
    stackmark::init().unwrap();
    for sp in [!4095, u64::MAX - 8, !4095 - 63 * 4096] {
        let mem = stackmark::memory::LiveMemory::new(sp);
        assert_eq!(mem.read_u64(sp), None);
        assert_eq!(mem.read_u64(u64::MAX - 7), None);
        let mut regs = stackmark::capture();
        let pc = regs_pc(&regs);
        set(&mut regs, pc, sp, 0);
        let mut out = [Frame::default(); 16];
        let n = stackmark::walk_from(
            regs,
            stackmark::PcKind::Exact,
            WalkOptions::default(),
            &mut out,
        );
        assert!(n >= 1, "{sp:#x}");
    }
}

#[test]
fn a_guard_page_inside_a_stack_given_to_a_thread_is_not_registered() {
    // pthread_attr_setstack on a mapping whose first page the program
    // protected itself: an sp there (an overflow) used to be read
    // directly, and the walk faulted.
    const SIZE: usize = 256 * 1024;
    // SAFETY: a fresh anonymous mapping, its first page made unreadable;
    // unmapped below once the thread has ended.
    let base = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(libc::mprotect(p, 4096, libc::PROT_NONE), 0);
        p
    };
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    // What the thread saw: its registered bottom, and the frames walked.
    static LO: AtomicU64 = AtomicU64::new(0);
    static FRAMES: AtomicU64 = AtomicU64::new(0);
    extern "C" fn body(guard: *mut libc::c_void) -> *mut libc::c_void {
        let guard = guard as u64;
        let lo = stackmark::sys::register_thread().map_or(0, |b| b.0);
        LO.store(lo, SeqCst);
        let mut regs = stackmark::capture();
        let pc = regs_pc(&regs);
        set(&mut regs, pc, guard + 0x800, 0);
        let mut out = [Frame::default(); 16];
        let n = stackmark::walk_from(
            regs,
            stackmark::PcKind::Exact,
            WalkOptions::default(),
            &mut out,
        );
        FRAMES.store(n as u64, SeqCst);
        std::ptr::null_mut()
    }
    stackmark::init().unwrap();
    // SAFETY: the attribute and thread calls get valid pointers; the
    // thread runs on the mapping above, which outlives it.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        assert_eq!(libc::pthread_attr_setstack(&mut attr, base, SIZE), 0);
        let mut t: libc::pthread_t = 0;
        assert_eq!(libc::pthread_create(&mut t, &attr, body, base), 0);
        let mut ret = std::ptr::null_mut();
        assert_eq!(libc::pthread_join(t, &mut ret), 0);
        libc::pthread_attr_destroy(&mut attr);
        libc::munmap(base, SIZE);
    }
    assert_eq!(
        LO.load(SeqCst),
        base as u64 + 4096,
        "the guard page is left out"
    );
    // The walk ended, with the interrupted frame at least.
    assert!(FRAMES.load(SeqCst) >= 1);
}

#[cfg(target_arch = "x86_64")]
fn regs_pc(r: &stackmark::Regs) -> u64 {
    r.rip
}
#[cfg(target_arch = "aarch64")]
fn regs_pc(r: &stackmark::Regs) -> u64 {
    r.pc
}

#[test]
fn a_walk_whose_reads_fail_leaves_errno_as_it_was() {
    // Walks run in signal handlers; a checked read that fails (EFAULT)
    // must not leave its errno to the interrupted code. An unregistered
    // thread whose frame pointer points at the top of its stack: the walk
    // probes the page above, which fails.
    stackmark::init().unwrap();
    std::thread::spawn(|| {
        assert_eq!(stackmark::sys::registered_stack(), None);
        let top = {
            let local = 0u64;
            let mut at = black_box(&local) as *const u64 as u64 & !4095;
            let mut b = [0u8; 1];
            while stackmark::sys::read_checked(at + 4096, &mut b) {
                at += 4096;
            }
            at + 4096
        };
        let mut regs = stackmark::capture();
        let pc = regs_pc(&regs);
        set(&mut regs, pc, top - 4096, top - 8);
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = 1234 };
        let before = stackmark::sys::checked_reads();
        let mut out = [Frame::default(); 16];
        stackmark::walk_from(
            regs,
            stackmark::PcKind::Exact,
            WalkOptions::default(),
            &mut out,
        );
        // SAFETY: as above.
        let errno = unsafe { *libc::__errno_location() };
        assert!(
            stackmark::sys::checked_reads() > before,
            "no checked read made"
        );
        assert_eq!(errno, 1234);
    })
    .join()
    .unwrap();
}

#[test]
fn an_unregistered_stack_grows_only_page_by_page_from_the_walks_sp() {
    use stackmark::memory::MemoryReader;
    // Three pages: readable, unreadable, readable. A thread that never
    // registered its stack walks with its sp in the first: the third is
    // some other mapping, beyond the end of "its stack", and a read there
    // must fail rather than be taken for stack.
    std::thread::spawn(|| {
        const P: usize = 4096;
        let pages = stackmark_fixtures::Mapping::new(3 * P);
        pages.protect(P, P, libc::PROT_NONE);
        let base = pages.addr();
        let (a, b, c) = (base, base + P as u64, base + 2 * P as u64);
        assert_eq!(stackmark::sys::registered_stack(), None);

        let mem = stackmark::memory::LiveMemory::new(a + 64);
        assert_eq!(mem.read_u64(c + 8), None, "jumped over the gap");
        assert_eq!(mem.read_u64(a + 128), Some(0));
        assert_eq!(mem.read_u64(b), None);

        // An sp in a guard page (an overflow): the stack starts just above.
        let mem = stackmark::memory::LiveMemory::new(b + 64);
        assert_eq!(mem.read_u64(c + 8), Some(0));
        assert_eq!(mem.read_u64(a + 128), None, "below the sp");
    })
    .join()
    .unwrap();
}

#[test]
fn a_thread_that_reuses_an_exited_threads_pthread_is_not_registered() {
    // Registered bounds are kept per pthread_t, outside thread-local
    // storage; glibc gives a new thread the cached stack and pthread_t of
    // one that exited. The exited thread's entry must be gone by then, or
    // the new thread would walk with bounds it never recorded.
    let spawn = |register: bool| {
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                if register {
                    stackmark::register_thread();
                }
                // SAFETY: pthread_self has no preconditions.
                let key = unsafe { libc::pthread_self() } as u64;
                (key, stackmark::sys::registered_stack())
            })
            .unwrap()
            .join()
            .unwrap()
    };
    let mut reused = 0;
    for _ in 0..20 {
        let (old, bounds) = spawn(true);
        assert!(bounds.is_some(), "a registered thread has bounds");
        let (new, stale) = spawn(false);
        assert_eq!(stale, None, "bounds left behind by the exited thread");
        reused += usize::from(new == old);
    }
    assert!(
        reused > 0,
        "glibc never reused a pthread_t: nothing was tested"
    );
}

/// Written by the child's thread in the fork test: its pthread_t, and
/// whether it found bounds registered for it.
static CHILD_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static CHILD_REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn child_thread(_: *mut libc::c_void) -> *mut libc::c_void {
    use std::sync::atomic::Ordering::SeqCst;
    // SAFETY: pthread_self has no preconditions.
    CHILD_KEY.store(unsafe { libc::pthread_self() } as u64, SeqCst);
    CHILD_REGISTERED.store(stackmark::sys::registered_stack().is_some(), SeqCst);
    std::ptr::null_mut()
}

#[test]
#[cfg_attr(
    target_arch = "aarch64",
    ignore = "qemu-user aborts when a forked child of a threaded process creates a thread"
)]
fn after_fork_a_new_thread_in_the_child_does_not_inherit_a_parents_bounds() {
    use std::sync::atomic::Ordering::SeqCst;
    // A stack larger than any other thread's, so that the child's new
    // thread, asking for the same, gets the cached stack of this one: glibc
    // takes any cached stack from the size asked for to four times it, and
    // after a fork every thread's stack of the parent is in the cache.
    const SIZE: usize = (16 << 20) + 3 * 4096;
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let parked = std::thread::Builder::new()
        .stack_size(SIZE)
        .spawn(move || {
            stackmark::register_thread();
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() } as u64).unwrap();
            done_rx.recv().ok();
        })
        .unwrap();
    let parent_key = rx.recv().unwrap();
    // SAFETY: the child only creates and joins a thread with libc and
    // reads atomics, then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain pthread calls on locals; the thread function only
        // stores atomics.
        let code = unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            libc::pthread_attr_setstacksize(&mut attr, SIZE);
            let mut t: libc::pthread_t = std::mem::zeroed();
            if libc::pthread_create(&mut t, &attr, child_thread, std::ptr::null_mut()) != 0 {
                libc::_exit(3);
            }
            libc::pthread_join(t, std::ptr::null_mut());
            match (
                CHILD_KEY.load(SeqCst) == parent_key,
                CHILD_REGISTERED.load(SeqCst),
            ) {
                (_, true) => 1,
                (false, false) => 2,
                (true, false) => 0,
            }
        };
        // SAFETY: leaving the child without running the parent's exit code.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    done_tx.send(()).unwrap();
    parked.join().unwrap();
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    match libc::WEXITSTATUS(status) {
        0 => {}
        1 => panic!("the child's thread found the parent thread's bounds"),
        2 => panic!("the child's thread got another pthread_t: nothing was tested"),
        c => panic!("the child failed ({c})"),
    }
}

const TEST_PROBE_RACE: &str = "a_probed_page_another_thread_unmaps_does_not_kill_a_walk";

/// A stack nobody registered is found by probing pages upwards from the
/// walk's sp; a readable mapping directly above it (the next stack of a
/// fiber pool, a heap) counts as more of it. A probe proves only that a
/// page was readable then: another thread may take it away meanwhile, and
/// a direct read of it faulted. Probed memory is read through checked
/// reads. Runs in a child process (a fault kills the child).
#[test]
fn a_probed_page_another_thread_unmaps_does_not_kill_a_walk() {
    use std::sync::atomic::{AtomicBool, Ordering};
    if std::env::var("STACKMARK_PROBE_RACE").is_ok() {
        const PAGE: usize = 4096;
        stackmark::init().unwrap();
        // SAFETY: a fresh private anonymous mapping of two pages.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // The "fiber stack" is the first page; the second lies above it.
        let above = base as usize + PAGE;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: the second page of the mapping above.
                    unsafe {
                        libc::mprotect(above as *mut _, PAGE, libc::PROT_NONE);
                        libc::mprotect(above as *mut _, PAGE, libc::PROT_READ);
                    }
                }
            });
            // pc in no code, no frame pointer: the walk scans upwards from
            // sp, into the page above.
            let mut regs = stackmark::Regs::default();
            set(&mut regs, 0x1000, base as u64 + PAGE as u64 - 64, 0);
            let mut out = [Frame::default(); 4];
            // Each walk makes checked reads (under qemu-user, through a
            // pipe: slower), so at most 5 s of them; a direct read faulted
            // within the first few hundred walks.
            let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
            for _ in 0..20_000 {
                if std::time::Instant::now() > end {
                    break;
                }
                stackmark::walk_from(
                    regs,
                    stackmark::PcKind::ReturnAddress,
                    WalkOptions::default(),
                    &mut out,
                );
            }
            stop.store(true, Ordering::Relaxed);
        });
        return;
    }
    common::in_child(TEST_PROBE_RACE, ("STACKMARK_PROBE_RACE", "1"));
}
