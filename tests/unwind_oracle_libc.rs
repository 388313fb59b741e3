//! libgcc's `_Unwind_Backtrace` (through the `backtrace` crate) as an
//! in-process oracle, where gdb cannot follow (AArch64 under qemu-user) and
//! on the host alike: from inside user callbacks that the C library calls
//! (a `qsort` and a `bsearch` comparator, a `dl_iterate_phdr` callback, a
//! `pthread_once` init routine, a `twalk` action, a `fopencookie` read
//! function under `fgetc`, a signal handler entered through `raise`), the
//! frames `stackmark::walk_here` finds must be libgcc's, address for
//! address, from the callback's caller down to the outermost frame, which
//! the C library's CFI must mark as such (return address undefined).
//!
//! The two lists start differently: `walk_here`'s frame 0 is the walking
//! function at its call (an exact pc) and libgcc's begin with the backtrace
//! crate's own frames. They are aligned on `walk_here`'s frame 1 (the
//! return address into the walking function's caller), which libgcc's list
//! must hold, just after a return address in the walking function itself.
//! From there on both lists are return addresses, except past a signal
//! frame, where both give the trampoline and the interrupted instruction
//! exactly.

#![cfg(target_os = "linux")]

mod common;

use std::ffi::{c_char, c_int, c_void};
use std::hint::black_box;
use std::sync::Mutex;

use stackmark::Frame;

/// Both walks of one callback: stackmark's frames and libgcc's return
/// addresses.
struct Walks {
    ours: Vec<Frame>,
    libgcc: Vec<u64>,
}

/// Walks the calling thread with stackmark and with libgcc from the same
/// function (this one): the walks the callbacks compare.
#[inline(never)]
fn both_walks() -> Walks {
    let mut frames = [Frame::default(); 256];
    let n = stackmark::walk_here(&mut frames);
    let libgcc = common::libgcc_trace();
    Walks {
        ours: frames[..n].to_vec(),
        libgcc: black_box(libgcc),
    }
}

/// One line per frame of both lists, aligned at libgcc's `at`, with the
/// names the modules' symbol tables give (for failure messages).
fn side_by_side(w: &Walks, at: Option<usize>) -> String {
    let name = |pc: u64, precise: bool| {
        let look = if precise { pc } else { pc.wrapping_sub(1) };
        let sym = common::symbol_at(look).unwrap_or_default();
        format!("{pc:#14x} {:<28} {sym}", common::module_offset(pc))
    };
    let mut s = String::from("stackmark (method) | libgcc\n");
    let skip = at.map_or(0, |a| a.saturating_sub(1));
    let rows = w.ours.len().max(w.libgcc.len().saturating_sub(skip));
    for i in 0..rows {
        let ours = w.ours.get(i).map_or(String::new(), |f| {
            format!("{} ({:?})", name(f.pc, f.pc_kind.is_exact()), f.method)
        });
        let theirs = w
            .libgcc
            .get(skip + i)
            .map_or(String::new(), |&pc| name(pc, false));
        s += &format!("{i:3} {ours:<80} | {theirs}\n");
    }
    s
}

/// Checks `w`: the lists agree from `walk_here`'s frame 1 to the end, and
/// the last frame is one the CFI marks outermost. `label` names the
/// callback. Returns the number of frames compared.
fn check(label: &str, w: &Walks) -> usize {
    let ours = &w.ours;
    assert!(ours.len() >= 3, "{label}: stackmark: {ours:#x?}");
    let first = ours[1].pc;
    let Some(at) = w.libgcc.iter().position(|&pc| pc == first) else {
        panic!(
            "{label}: libgcc's list lacks stackmark's frame 1\n{}",
            side_by_side(w, None)
        );
    };
    // The frame before is libgcc's return address into `both_walks`, where
    // stackmark's frame 0 is.
    assert!(at >= 1, "{label}\n{}", side_by_side(w, Some(at)));
    assert_eq!(
        common::symbol_at(w.libgcc[at - 1] - 1),
        common::symbol_at(ours[0].pc),
        "{label}: the lists do not start in the same function\n{}",
        side_by_side(w, Some(at))
    );
    let pcs: Vec<u64> = ours[1..].iter().map(|f| f.pc).collect();
    assert_eq!(
        pcs,
        w.libgcc[at..],
        "{label}: the walks differ\n{}",
        side_by_side(w, Some(at))
    );
    let last = ours.last().unwrap();
    assert_eq!(
        common::cfi_leaves_ra_undefined(last.lookup_pc()),
        Some(true),
        "{label}: the last frame is not one the CFI marks outermost\n{}",
        side_by_side(w, Some(at))
    );
    eprintln!(
        "{label}: {} frames equal to libgcc's, down to {}",
        pcs.len(),
        common::module_offset(last.pc)
    );
    pcs.len()
}

/// Walks kept from inside the callbacks (a callback cannot return them).
static WALKS: Mutex<Vec<Walks>> = Mutex::new(Vec::new());

/// Runs `f` on a new thread (whose outermost frame is glibc's thread start)
/// and returns the walks its callbacks kept.
fn on_a_thread(f: fn()) -> Vec<Walks> {
    std::thread::spawn(move || {
        stackmark::register_thread();
        WALKS.lock().unwrap().clear();
        f();
        std::mem::take(&mut *WALKS.lock().unwrap())
    })
    .join()
    .unwrap()
}

/// One test at a time: they share [`WALKS`].
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f` on a thread and checks every walk its callbacks kept (at least
/// `min` of them).
fn run(label: &str, min: usize, f: fn()) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    let walks = on_a_thread(f);
    assert!(walks.len() >= min, "{label}: {} walks", walks.len());
    for (i, w) in walks.iter().enumerate() {
        check(&format!("{label} #{i}"), w);
    }
    // The first walk in full, for the record (shown with --nocapture).
    let at = walks[0]
        .libgcc
        .iter()
        .position(|&pc| pc == walks[0].ours[1].pc);
    eprintln!("{label} #0:\n{}", side_by_side(&walks[0], at));
}

/// How many comparator calls of a sort walk (every [`SORT_EVERY`]th).
static CALLS: Mutex<usize> = Mutex::new(0);
const SORT_EVERY: usize = 97;

/// Called by the sorts' comparators: walks at every [`SORT_EVERY`]th call,
/// up to 24 walks. Inlined, so the comparator is the walking function's
/// caller.
#[inline(always)]
fn walk_now_and_then() {
    let mut calls = CALLS.lock().unwrap();
    *calls += 1;
    if calls.is_multiple_of(SORT_EVERY) && WALKS.lock().unwrap().len() < 24 {
        drop(calls);
        let w = both_walks();
        WALKS.lock().unwrap().push(w);
    }
}

/// A `qsort` comparator of `u32`s that walks now and then (glibc's
/// `msort_with_tmp`, at several depths of its recursion, and `qsort_r`
/// lie between it and the caller).
#[no_mangle]
#[inline(never)]
unsafe extern "C" fn oracle_qsort_cmp(a: *const c_void, b: *const c_void) -> c_int {
    // SAFETY: qsort passes pointers to two elements of the u32 array.
    let (a, b) = unsafe { (*(a as *const u32), *(b as *const u32)) };
    walk_now_and_then();
    a.cmp(&b) as c_int
}

/// A `qsort` comparator of 48-byte records (glibc sorts pointers to them,
/// then moves them: `msort_with_tmp`'s indirect variant).
#[no_mangle]
#[inline(never)]
unsafe extern "C" fn oracle_qsort_big_cmp(a: *const c_void, b: *const c_void) -> c_int {
    // SAFETY: qsort passes pointers to two records of the array.
    let (a, b) = unsafe { (*(a as *const [u64; 6]), *(b as *const [u64; 6])) };
    walk_now_and_then();
    a[0].cmp(&b[0]) as c_int
}

#[test]
fn qsort_comparator_walks_as_libgcc_does() {
    run("qsort", 8, || {
        *CALLS.lock().unwrap() = 0;
        let mut rng = common::Rng(0x9e37_79b9_7f4a_7c15);
        let mut v: Vec<u32> = (0..2000).map(|_| rng.next() as u32).collect();
        // SAFETY: `v` holds `v.len()` u32s, which the comparator reads.
        unsafe { libc::qsort(v.as_mut_ptr().cast(), v.len(), 4, Some(oracle_qsort_cmp)) };
        assert!(v.windows(2).all(|p| p[0] <= p[1]));
        let mut big: Vec<[u64; 6]> = (0..500).map(|_| [rng.next(); 6]).collect();
        // SAFETY: `big` holds `big.len()` records of 48 bytes.
        unsafe {
            libc::qsort(
                big.as_mut_ptr().cast(),
                big.len(),
                48,
                Some(oracle_qsort_big_cmp),
            )
        };
        assert!(big.windows(2).all(|p| p[0][0] <= p[1][0]));
    });
}

/// A `bsearch` comparator that walks at each probe.
#[no_mangle]
#[inline(never)]
unsafe extern "C" fn oracle_bsearch_cmp(key: *const c_void, elem: *const c_void) -> c_int {
    WALKS.lock().unwrap().push(both_walks());
    // SAFETY: bsearch passes the key and an element of the u32 array.
    let (k, e) = unsafe { (*(key as *const u32), *(elem as *const u32)) };
    k.cmp(&e) as c_int
}

#[test]
fn bsearch_comparator_walks_as_libgcc_does() {
    run("bsearch", 5, || {
        let v: Vec<u32> = (0..1000).map(|i| i * 3).collect();
        let key = 1011u32;
        // SAFETY: `v` is sorted and holds `v.len()` u32s; `key` is a u32.
        let found = unsafe {
            libc::bsearch(
                (&key as *const u32).cast(),
                v.as_ptr().cast(),
                v.len(),
                4,
                Some(oracle_bsearch_cmp),
            )
        };
        assert_eq!(found as *const u32, &v[337] as *const u32);
    });
}

/// A `dl_iterate_phdr` callback that walks for the first two objects (the
/// loader's list is walked under its lock in the C library).
#[no_mangle]
#[inline(never)]
unsafe extern "C" fn oracle_phdr_callback(
    _info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    WALKS.lock().unwrap().push(both_walks());
    // SAFETY: `data` is the counter the test passed.
    let seen = unsafe { &mut *(data as *mut usize) };
    *seen += 1;
    c_int::from(*seen >= 2)
}

#[test]
fn dl_iterate_phdr_callback_walks_as_libgcc_does() {
    run("dl_iterate_phdr", 2, || {
        let mut seen = 0usize;
        // SAFETY: the callback reads nothing of `info` and counts in
        // `seen`, which outlives the call.
        unsafe {
            libc::dl_iterate_phdr(Some(oracle_phdr_callback), (&mut seen as *mut usize).cast())
        };
        assert_eq!(seen, 2);
    });
}

/// A `pthread_once` init routine that walks (`__pthread_once_slow` calls
/// it).
#[no_mangle]
#[inline(never)]
extern "C" fn oracle_once_routine() {
    WALKS.lock().unwrap().push(both_walks());
}

#[test]
fn pthread_once_routine_walks_as_libgcc_does() {
    run("pthread_once", 1, || {
        static mut ONCE: libc::pthread_once_t = libc::PTHREAD_ONCE_INIT;
        // SAFETY: the once control is used by this call only.
        let rc = unsafe { libc::pthread_once(&raw mut ONCE, oracle_once_routine) };
        assert_eq!(rc, 0);
    });
}

extern "C" {
    fn tsearch(
        key: *const c_void,
        root: *mut *mut c_void,
        cmp: unsafe extern "C" fn(*const c_void, *const c_void) -> c_int,
    ) -> *mut c_void;
    fn twalk(root: *const c_void, action: unsafe extern "C" fn(*const c_void, c_int, c_int));
    fn tdestroy(root: *mut c_void, free: unsafe extern "C" fn(*mut c_void));
    fn fopencookie(
        cookie: *mut c_void,
        mode: *const c_char,
        funcs: CookieFunctions,
    ) -> *mut libc::FILE;
}

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieFunctions {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut u8, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const u8, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

/// A `tsearch` comparator of keys stored as the pointers themselves.
unsafe extern "C" fn tree_cmp(a: *const c_void, b: *const c_void) -> c_int {
    (a as usize).cmp(&(b as usize)) as c_int
}

/// Frees nothing: the keys are plain numbers.
unsafe extern "C" fn tree_free(_: *mut c_void) {}

/// A `twalk` action that walks at the leaves (glibc's `trecurse`, at the
/// leaves' depth, lies between it and `twalk`).
#[no_mangle]
#[inline(never)]
unsafe extern "C" fn oracle_twalk_action(_node: *const c_void, which: c_int, _depth: c_int) {
    const LEAF: c_int = 3;
    if which == LEAF {
        WALKS.lock().unwrap().push(both_walks());
    }
}

#[test]
fn twalk_action_walks_as_libgcc_does() {
    run("twalk", 4, || {
        let mut root: *mut c_void = std::ptr::null_mut();
        for k in 1..=20usize {
            // SAFETY: the keys are numbers compared as such; `root` is the
            // tree's root.
            unsafe { tsearch(k as *const c_void, &mut root, tree_cmp) };
        }
        // SAFETY: `root` is a tree tsearch built; the action reads no node.
        unsafe {
            twalk(root, oracle_twalk_action);
            tdestroy(root, tree_free);
        }
    });
}

/// A `fopencookie` read function that walks (glibc's stdio layers,
/// `_IO_cookie_read` under `__underflow` under `fgetc` or `fread`, lie
/// between it and the caller) and gives `n` bytes of `x`.
#[no_mangle]
#[inline(never)]
unsafe extern "C" fn oracle_cookie_read(_cookie: *mut c_void, buf: *mut u8, n: usize) -> isize {
    WALKS.lock().unwrap().push(both_walks());
    // SAFETY: stdio passes a buffer of `n` bytes.
    unsafe { std::ptr::write_bytes(buf, b'x', n) };
    n as isize
}

#[test]
fn fopencookie_read_walks_as_libgcc_does() {
    run("fopencookie", 2, || {
        let funcs = CookieFunctions {
            read: Some(oracle_cookie_read),
            write: None,
            seek: None,
            close: None,
        };
        // SAFETY: a read-only stream over the read function, closed below.
        unsafe {
            let f = fopencookie(std::ptr::null_mut(), c"r".as_ptr(), funcs);
            assert!(!f.is_null());
            assert_eq!(libc::fgetc(f), c_int::from(b'x'));
            let mut buf = vec![0u8; 1 << 16];
            assert_eq!(
                libc::fread(buf.as_mut_ptr().cast(), 1, buf.len(), f),
                buf.len()
            );
            libc::fclose(f);
        }
    });
}

/// A signal handler that walks: both walks cross the kernel's signal
/// frame (the trampoline, then the instruction `raise` was at).
extern "C" fn oracle_on_signal(_: c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    // The signal comes from `raise` on this thread, which holds no lock
    // (malloc's included) while it runs: the handler may take them.
    WALKS.lock().unwrap().push(both_walks());
}

#[test]
fn signal_handler_walks_as_libgcc_does() {
    run("signal handler", 1, || {
        // SAFETY: installs a handler for SIGUSR1, which nothing else in
        // this test binary uses, and raises it on this thread.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = oracle_on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
            assert_eq!(libc::raise(libc::SIGUSR1), 0);
        }
    });
}
