//! Module churn: one thread loads and unloads an SFrame library in a loop
//! while others walk through it, get sampled by signals, and walk from pcs
//! in the library after it is gone (a stale table). No walk may touch an
//! unloaded module's memory: SFrame data is copied into the table's own
//! memory at refresh and the code of a library that can be unloaded is only
//! read through checked reads, so the process must not fault.
//!
//! `STACKMARK_CHURN_SECS` sets the duration (default 3; the full run is 60).

#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stackmark::{Frame, WalkOptions};
use stackmark_fixtures as fx;

type Entry = unsafe extern "C" fn(fx::Callback, u64) -> u64;

static WALKS: AtomicUsize = AtomicUsize::new(0);
static SAMPLES: AtomicUsize = AtomicUsize::new(0);
static IN_LIBRARY: AtomicUsize = AtomicUsize::new(0);
static STALE_WALKS: AtomicUsize = AtomicUsize::new(0);
/// An address inside the library's code, from the last time it was loaded.
static LIB_PC: AtomicU64 = AtomicU64::new(0);

extern "C" fn walk_cb(x: u64) -> u64 {
    let mut frames = [Frame::default(); 64];
    let n = stackmark::walk_here(&mut frames);
    WALKS.fetch_add(1, SeqCst);
    let pc = LIB_PC.load(SeqCst);
    if frames[..n].iter().any(|f| f.pc.abs_diff(pc) < 4096) {
        IN_LIBRARY.fetch_add(1, SeqCst);
    }
    black_box(x)
}

extern "C" fn on_prof(_: i32, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let mut frames = [Frame::default(); 64];
    // SAFETY: `uc` is the kernel's ucontext_t.
    let n = unsafe { stackmark::walk_ucontext(uc, &mut frames) };
    if n > 0 {
        SAMPLES.fetch_add(1, SeqCst);
    }
}

fn lib_path() -> CString {
    CString::new(fx::DLOPEN_LIB).unwrap()
}

fn open() -> (*mut libc::c_void, Entry) {
    // SAFETY: loading the fixture library and looking up its entry point.
    unsafe {
        let h = libc::dlopen(lib_path().as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null());
        let f = libc::dlsym(h, c"so_level_1".as_ptr());
        assert!(!f.is_null());
        (h, std::mem::transmute::<*mut libc::c_void, Entry>(f))
    }
}

#[test]
fn walks_survive_libraries_loading_and_unloading() {
    stackmark::init().unwrap();
    let secs: u64 = std::env::var("STACKMARK_CHURN_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // SAFETY: a SIGPROF handler that only walks.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_prof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut());
    }
    stackmark::refresh().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(secs);

    let loader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut cycles = 0u64;
            while !stop.load(SeqCst) {
                let (h, f) = open();
                LIB_PC.store(f as usize as u64, SeqCst);
                stackmark::refresh().unwrap();
                // SAFETY: the handle came from dlopen.
                unsafe { libc::dlclose(h) };
                // Walk from a pc in the library while the table still lists
                // it but the library may be gone.
                let mut regs = stackmark::capture();
                set_pc(&mut regs, f as usize as u64 + 4);
                let mut frames = [Frame::default(); 64];
                stackmark::walk_from(
                    regs,
                    stackmark::PcKind::Exact,
                    WalkOptions::default(),
                    &mut frames,
                );
                STALE_WALKS.fetch_add(1, SeqCst);
                stackmark::refresh().unwrap();
                cycles += 1;
            }
            cycles
        })
    };
    let walkers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                stackmark::register_thread();
                // SAFETY: pthread_self has no preconditions.
                let me = unsafe { libc::pthread_self() } as u64;
                while !stop.load(SeqCst) {
                    // Our own handle keeps the library mapped while we are in it.
                    let (h, f) = open();
                    // SAFETY: the library only calls back.
                    black_box(unsafe { f(walk_cb, 1) });
                    // SAFETY: the handle came from dlopen.
                    unsafe { libc::dlclose(h) };
                    walk_cb(2);
                }
                me
            })
        })
        .collect();
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                // SAFETY: signalling ourselves (the whole process): SIGPROF
                // lands on any thread, including the walkers.
                unsafe { libc::kill(libc::getpid(), libc::SIGPROF) };
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, SeqCst);
    let cycles = loader.join().unwrap();
    for w in walkers {
        w.join().unwrap();
    }
    sampler.join().unwrap();
    println!(
        "churn: {secs} s, {cycles} load/unload cycles, {} walks ({} through the library), {} walks from stale pcs, {} signal samples",
        WALKS.load(SeqCst),
        IN_LIBRARY.load(SeqCst),
        STALE_WALKS.load(SeqCst),
        SAMPLES.load(SeqCst)
    );
    assert!(
        cycles > 10,
        "the library was loaded and unloaded {cycles} times"
    );
    assert!(WALKS.load(SeqCst) > 100);
    assert!(
        IN_LIBRARY.load(SeqCst) > 0,
        "some walks went through the library"
    );
    assert!(STALE_WALKS.load(SeqCst) > 10);
    assert!(SAMPLES.load(SeqCst) > 10);
}

#[cfg(target_arch = "x86_64")]
fn set_pc(r: &mut stackmark::Regs, pc: u64) {
    r.rip = pc;
}
#[cfg(target_arch = "aarch64")]
fn set_pc(r: &mut stackmark::Regs, pc: u64) {
    r.pc = pc;
}
