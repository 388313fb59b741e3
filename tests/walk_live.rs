//! In-process walks through the C fixtures and back into Rust: SFrame-only
//! frames, frame-pointer frames, frames only scanning recovers, signal
//! frames, corrupted stacks and a library loaded with dlopen.

#![cfg(target_os = "linux")]

mod common;

use std::hint::black_box;
use std::sync::Mutex;

use common::{assert_chain, names, Rng};
use stackmark::{Frame, Method};
use stackmark_fixtures as fx;

static FRAMES: Mutex<Vec<Frame>> = Mutex::new(Vec::new());

fn setup() {
    stackmark::init().expect("init");
}

/// Walks from here and keeps the frames.
#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_cb_walk(x: u64) -> u64 {
    // A static buffer: frames kept on this stack would be scanned too.
    static BUF: Mutex<[Frame; 64]> = Mutex::new(
        [Frame {
            pc: 0,
            sp: 0,
            pc_kind: stackmark::PcKind::ReturnAddress,
            method: Method::Context,
        }; 64],
    );
    let mut buf = BUF.lock().unwrap_or_else(|e| e.into_inner());
    let n = stackmark::walk_here(&mut buf[..]);
    *FRAMES.lock().unwrap() = buf[..n].to_vec();
    black_box(x) + 1
}

fn take_frames() -> Vec<Frame> {
    std::mem::take(&mut *FRAMES.lock().unwrap())
}

static SERIAL: Mutex<()> = Mutex::new(());

#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_sframe_outer() -> u64 {
    // SAFETY: fixture functions only call the callback.
    black_box(unsafe { fx::c_level_1(sm_test_cb_walk, black_box(5)) }) + 1
}

#[test]
fn walks_through_sframe_only_c_frames_back_into_rust() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    sm_test_sframe_outer();
    let frames = take_frames();
    let got = names(&frames);
    assert_chain(
        &got,
        0,
        &[
            "sm_test_cb_walk",
            "c_level_2",
            "c_level_1",
            "sm_test_sframe_outer",
        ],
    );
    assert!(
        frames.len() > 5,
        "walk continues past the test function: {got:?}"
    );
    assert_eq!(frames[0].method, Method::Context);
    assert!(
        frames[0].pc_kind.is_exact(),
        "frame 0 is the capture's call instruction"
    );
    // Stepping out of each C frame used its SFrame row.
    assert_eq!(frames[2].method, Method::SFrame, "{frames:#?}");
    assert_eq!(frames[3].method, Method::SFrame, "{frames:#?}");
    assert!(
        stackmark::walk::sp_order_holds(&frames),
        "sp strictly increases: {frames:#?}"
    );
}

#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_fp_outer() -> u64 {
    // SAFETY: fixture functions only call the callback.
    black_box(unsafe { fx::c_fp_level_1(sm_test_cb_walk, black_box(5)) }) + 1
}

#[test]
fn walks_frame_pointer_code_without_sframe_by_frame_pointers() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    sm_test_fp_outer();
    let frames = take_frames();
    let got = names(&frames);
    assert_chain(
        &got,
        0,
        &[
            "sm_test_cb_walk",
            "c_fp_level_2",
            "c_fp_level_1",
            "sm_test_fp_outer",
        ],
    );
    // The C functions' callers come from their frame pointers; the
    // callback's own caller from the Rust code's DWARF CFI.
    assert_eq!(frames[1].method, Method::Cfi, "{frames:#?}");
    for f in &frames[2..4] {
        assert_eq!(f.method, Method::FramePointer, "{frames:#?}");
    }
}

#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_noinfo_outer() -> u64 {
    // SAFETY: fixture functions only call the callback.
    black_box(unsafe { fx::c_noinfo(sm_test_cb_walk, black_box(5)) }) + 1
}

#[test]
fn recovers_a_frame_with_neither_table_nor_frame_pointer_by_scanning() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    // A thread with a stack size of its own gets a fresh, zeroed stack (not
    // one of glibc's cached ones), so no stale return address from an
    // earlier test lies where the scan looks.
    std::thread::Builder::new()
        .stack_size((3 << 20) + 7 * 4096)
        .spawn(|| sm_test_noinfo_outer())
        .unwrap()
        .join()
        .unwrap();
    let frames = take_frames();
    let got = names(&frames);
    assert_chain(
        &got,
        0,
        &["sm_test_cb_walk", "c_noinfo", "sm_test_noinfo_outer"],
    );
    assert_eq!(frames[2].method, Method::Scan, "{frames:#?}");
    assert!(frames[2].method.is_low_trust());
    // The walk goes on past the scanned frame, up to the thread's start.
    assert!(got.iter().any(|n| n.contains("thread_start")), "{got:#?}");
}

// --- Signals -------------------------------------------------------------------

struct SigBufs {
    own: [Frame; 64],
    own_n: usize,
    uc: [Frame; 64],
    uc_n: usize,
}

struct SyncCell(std::cell::UnsafeCell<SigBufs>);
// SAFETY: only the test thread and its own synchronous signal handler touch
// it, never at the same time (the SERIAL lock serialises tests).
unsafe impl Sync for SyncCell {}

static SIG: SyncCell = SyncCell(std::cell::UnsafeCell::new(SigBufs {
    own: [Frame {
        pc: 0,
        sp: 0,
        pc_kind: stackmark::PcKind::ReturnAddress,
        method: Method::Context,
    }; 64],
    own_n: 0,
    uc: [Frame {
        pc: 0,
        sp: 0,
        pc_kind: stackmark::PcKind::ReturnAddress,
        method: Method::Context,
    }; 64],
    uc_n: 0,
}));

extern "C" fn on_usr1(_sig: i32, _info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: see SyncCell; `uc` is the kernel's ucontext_t.
    unsafe {
        let b = &mut *SIG.0.get();
        b.own_n = stackmark::walk_here(&mut b.own);
        b.uc_n = stackmark::walk_ucontext(uc, &mut b.uc);
    }
}

/// Sends SIGUSR1 to this thread with a raw system call, so the signal
/// interrupts this very function (not libc).
#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_raise_usr1() {
    // SAFETY: getpid/gettid/tgkill on ourselves.
    unsafe {
        let pid = libc::getpid() as u64;
        let tid = libc::gettid() as u64;
        #[cfg(target_arch = "x86_64")]
        core::arch::asm!("syscall", inout("rax") 234u64 => _, in("rdi") pid, in("rsi") tid,
                         in("rdx") libc::SIGUSR1 as u64, out("rcx") _, out("r11") _);
        #[cfg(target_arch = "aarch64")]
        core::arch::asm!("svc 0", in("x8") 131u64, inout("x0") pid => _, in("x1") tid,
                         in("x2") libc::SIGUSR1 as u64);
    }
    black_box(());
}

#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_signal_outer() -> u64 {
    sm_test_raise_usr1();
    black_box(7)
}

#[test]
fn walks_through_a_signal_frame_from_the_handler_and_from_its_ucontext() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    signal_walks(0);
}

/// A crash handler's case: the handler runs on an alternate signal stack,
/// so its own walk starts off the registered stack, on a stack the reader
/// learns only when it first reads there.
#[test]
fn walks_from_a_handler_on_an_alternate_signal_stack() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    let mut alt = vec![0u8; 64 << 10];
    let (lo, hi) = (alt.as_ptr() as u64, alt.as_ptr() as u64 + alt.len() as u64);
    // SAFETY: `alt` outlives the handler's run; the alternate stack is
    // disabled again before it is freed.
    unsafe {
        let ss = libc::stack_t {
            ss_sp: alt.as_mut_ptr().cast(),
            ss_flags: 0,
            ss_size: alt.len(),
        };
        assert_eq!(libc::sigaltstack(&ss, std::ptr::null_mut()), 0);
    }
    signal_walks(libc::SA_ONSTACK);
    // SAFETY: as above.
    unsafe {
        let off = libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        assert_eq!(libc::sigaltstack(&off, std::ptr::null_mut()), 0);
    }
    // SAFETY: the handler has finished.
    let b = unsafe { &*SIG.0.get() };
    let sp = b.own[0].sp;
    assert!(
        (lo..hi).contains(&sp),
        "the handler ran on the alternate stack: {sp:#x}"
    );
    drop(alt);
}

/// A handler installed through `rt_sigaction` with the program's own
/// restorer, not the C library's: the refresh after it learns that
/// trampoline from the kernel's view of the installed handlers.
#[test]
fn walks_through_a_signal_frame_whose_restorer_nothing_registered() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    walk_through_own_restorer(fx::sm_restorer_after_trap as *const () as u64);
}

/// A restorer right after a function with an SFrame row: the handler's
/// return address, looked up one byte early, finds that function's row,
/// and the walk must still take the signal frame (it did not: the row won).
#[test]
fn walks_through_a_restorer_placed_right_after_a_function_with_a_row() {
    use stackmark::walk::{CodeMap, Lookup};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    let restorer = fx::sm_restorer_after_row as *const () as u64;
    let before = fx::sm_row_before_restorer as *const () as u64;
    // SAFETY: a leaf of the fixtures that returns 0.
    assert_eq!(unsafe { fx::sm_row_before_restorer() }, 0);
    // The guard is dropped at the end of the statement: held across the
    // refreshes below, it would make the second fail (`InitError::InUse`).
    match stackmark::modules::current().unwrap().lookup(restorer - 1) {
        Lookup::SFrame(row) => assert_eq!(
            (row.func_start, row.func_start + u64::from(row.func_size)),
            (before, restorer),
            "the row before the restorer ends where it starts"
        ),
        other => panic!("no row just before the restorer: {other:?}"),
    }
    walk_through_own_restorer(restorer);
}

/// Installs the SIGUSR1 handler through `rt_sigaction` with `restorer`,
/// refreshes, and checks the handler's walks: the frame before the signal
/// frame is the restorer.
fn walk_through_own_restorer(restorer: u64) {
    const SA_RESTORER: u64 = 0x0400_0000;
    // The kernel's `struct sigaction` on x86_64 and AArch64 alike: handler,
    // flags, restorer, mask.
    let act: [u64; 4] = [
        on_usr1 as *const () as usize as u64,
        libc::SA_SIGINFO as u64 | SA_RESTORER,
        restorer,
        0,
    ];
    // SAFETY: rt_sigaction with a kernel-layout action whose handler and
    // restorer are functions of this program; SIGUSR1 is only used by
    // these tests, which run one at a time.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            libc::SIGUSR1,
            act.as_ptr(),
            std::ptr::null_mut::<u64>(),
            8usize,
        )
    };
    assert_eq!(rc, 0);
    stackmark::refresh().unwrap();
    let own = check_signal_walks();
    let i = own
        .iter()
        .position(|f| f.method == Method::SignalFrame)
        .unwrap();
    assert_eq!(
        own[i - 1].pc,
        restorer,
        "the frame before the signal frame is the restorer"
    );
    // Exact: looked up a byte early, it would name the function before.
    let name = names(&own[i - 1..i]).remove(0);
    assert!(name.starts_with("sm_restorer_after"), "{name}");
}

/// Raises SIGUSR1 under a handler installed with `flags` and checks both
/// of the handler's walks: its own, through the signal frame, and the one
/// from its `ucontext`.
fn signal_walks(flags: i32) {
    // SAFETY: installing a handler for SIGUSR1, used only by these tests.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | flags;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    // The handler is installed now, so glibc's restorer is known: refresh.
    stackmark::refresh().unwrap();
    check_signal_walks();
}

/// Raises SIGUSR1 under the handler installed and checks both of its walks;
/// returns the handler's own.
fn check_signal_walks() -> Vec<Frame> {
    sm_test_signal_outer();
    // SAFETY: the handler has finished.
    let b = unsafe { &*SIG.0.get() };
    let uc = &b.uc[..b.uc_n];
    let got = names(uc);
    assert_chain(&got, 0, &["sm_test_raise_usr1", "sm_test_signal_outer"]);
    assert!(uc[0].pc_kind.is_exact(), "the interrupted pc is exact");

    let own = &b.own[..b.own_n];
    let got = names(own);
    assert_eq!(got[0], "on_usr1", "{got:?}");
    let i = own
        .iter()
        .position(|f| f.method == Method::SignalFrame)
        .unwrap_or_else(|| panic!("no signal frame: {own:#?} {got:?}"));
    assert!(own[i].pc_kind.is_exact());
    assert_chain(&got, i, &["sm_test_raise_usr1", "sm_test_signal_outer"]);
    assert_eq!(
        own[i].pc, uc[0].pc,
        "both walks agree on the interrupted pc"
    );
    own.to_vec()
}

// --- Corrupted stacks ---------------------------------------------------------

#[test]
fn a_thousand_walks_over_corrupted_stacks_end_without_fault() {
    setup();
    let code = common::code_segments();
    std::thread::spawn(move || {
        stackmark::register_thread();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut frames = [Frame::default(); 128];
        for i in 0..1000 {
            let mut area = [0u64; 512];
            let base = area.as_ptr() as u64;
            for w in area.iter_mut() {
                *w = match rng.next() % 5 {
                    0 => rng.next(),
                    1 => {
                        let (s, n) = code[(rng.next() % code.len() as u64) as usize];
                        s + rng.next() % n
                    }
                    2 => base + (rng.next() % 600) * 8,
                    3 => base.wrapping_sub((rng.next() % 64) * 8),
                    _ => 0,
                };
            }
            let pick = |rng: &mut Rng| area[(rng.next() % 512) as usize];
            let mut regs = stackmark::capture();
            set_regs(
                &mut regs,
                pick(&mut rng),
                base + (rng.next() % 256) * 8,
                pick(&mut rng),
            );
            let n = stackmark::walk_from(
                regs,
                stackmark::PcKind::exact_if(i % 2 == 0),
                stackmark::WalkOptions::default(),
                &mut frames,
            );
            assert!((1..=frames.len()).contains(&n));
            assert!(
                stackmark::walk::sp_order_holds(&frames[..n]),
                "sp must increase: {:#?}",
                &frames[..n]
            );
            black_box(&mut area);
        }
    })
    .join()
    .unwrap();
}

#[cfg(target_arch = "x86_64")]
fn set_regs(r: &mut stackmark::Regs, pc: u64, sp: u64, fp: u64) {
    r.rip = pc;
    r.rsp = sp;
    r.rbp = fp;
}

#[cfg(target_arch = "aarch64")]
fn set_regs(r: &mut stackmark::Regs, pc: u64, sp: u64, fp: u64) {
    r.pc = pc;
    r.sp = sp;
    r.fp = fp;
    r.lr = pc ^ 0x40;
}

// --- dlopen -------------------------------------------------------------------

type SoEntry = unsafe extern "C" fn(fx::Callback, u64) -> u64;

static SO_ENTRY: Mutex<Option<usize>> = Mutex::new(None);

#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_dl_outer() -> u64 {
    let f = SO_ENTRY.lock().unwrap().unwrap();
    // SAFETY: `f` is so_level_1 from the loaded fixture library.
    let f: SoEntry = unsafe { std::mem::transmute(f) };
    // SAFETY: the fixture only calls the callback.
    black_box(unsafe { f(sm_test_cb_walk, 3) }) + 1
}

#[test]
fn walks_through_a_dlopened_sframe_library_after_a_refresh() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    let path = std::ffi::CString::new(fx::DLOPEN_LIB).unwrap();
    // SAFETY: loading our own fixture library and looking up a symbol in it.
    let sym = unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen {}", fx::DLOPEN_LIB);
        libc::dlsym(h, c"so_level_1".as_ptr())
    };
    assert!(!sym.is_null());
    *SO_ENTRY.lock().unwrap() = Some(sym as usize);
    stackmark::refresh().unwrap();
    let table = stackmark::modules::current().unwrap();
    let m = table
        .module_for_addr(sym as u64)
        .expect("library in the table");
    assert!(m.sframe().is_some(), "library has SFrame");
    drop(table);
    sm_test_dl_outer();
    let frames = take_frames();
    let got = names(&frames);
    assert_chain(
        &got,
        0,
        &[
            "sm_test_cb_walk",
            "so_level_2",
            "so_level_1",
            "sm_test_dl_outer",
        ],
    );
    assert_eq!(frames[2].method, Method::SFrame, "{frames:#?}");
    assert_eq!(frames[3].method, Method::SFrame, "{frames:#?}");
}

// --- Pointer authentication (AArch64) --------------------------------------------

#[cfg(target_arch = "aarch64")]
#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_pac_outer(key_b: bool) -> u64 {
    // SAFETY: fixture functions only call the callback.
    black_box(unsafe {
        if key_b {
            fx::c_pacb_level_1(sm_test_cb_walk, black_box(3))
        } else {
            fx::c_paca_level_1(sm_test_cb_walk, black_box(3))
        }
    }) + 1
}

#[cfg(target_arch = "aarch64")]
#[test]
fn walks_through_frames_with_signed_return_addresses_with_keys_a_and_b() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    for (key_b, prefix) in [(false, "c_paca_"), (true, "c_pacb_")] {
        sm_test_pac_outer(key_b);
        let frames = take_frames();
        let got = names(&frames);
        let l2 = format!("{prefix}level_2");
        let l1 = format!("{prefix}level_1");
        assert_chain(&got, 0, &["sm_test_cb_walk", &l2, &l1, "sm_test_pac_outer"]);
        assert_eq!(frames[2].method, Method::SFrame, "{frames:#?}");
        assert_eq!(frames[3].method, Method::SFrame, "{frames:#?}");
    }
}

// --- A leaf interrupted by a signal --------------------------------------------

static LEAF_SAMPLE: Mutex<Vec<Frame>> = Mutex::new(Vec::new());
static LEAF_HITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

extern "C" fn on_prof_leaf(_sig: i32, _info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let mut frames = [Frame::default(); 32];
    // SAFETY: `uc` is the kernel's ucontext_t.
    let n = unsafe { stackmark::walk_ucontext(uc, &mut frames) };
    // Keep the first sample whose frame 0 is in the leaf (try_lock: never
    // block in a handler).
    if let Ok(mut keep) = LEAF_SAMPLE.try_lock() {
        if keep.is_empty()
            && n > 0
            && common::symbol_at(frames[0].pc).as_deref() == Some("c_hot_leaf")
        {
            keep.extend_from_slice(&frames[..n]);
            LEAF_HITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

#[no_mangle]
#[inline(never)]
extern "C" fn sm_test_leaf_outer() -> u64 {
    // SAFETY: a plain computation in the fixture.
    black_box(unsafe { fx::c_hot_caller(black_box(2_000_000)) })
}

#[test]
fn walks_out_of_a_leaf_interrupted_by_a_signal_with_the_return_address_in_a_register() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    // SAFETY: a SIGPROF handler used only by this test, sent to this thread.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_prof_leaf as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut());
    }
    stackmark::refresh().unwrap();
    // Load the symbol table now, not in the handler.
    assert_eq!(
        common::symbol_at(fx::c_hot_leaf as *const () as u64).as_deref(),
        Some("c_hot_leaf")
    );
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pinger = {
        let done = done.clone();
        let me = me as usize;
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                // SAFETY: signals the test thread, which handles SIGPROF.
                unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGPROF) };
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while LEAF_HITS.load(std::sync::atomic::Ordering::SeqCst) == 0
        && std::time::Instant::now() < deadline
    {
        sm_test_leaf_outer();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    pinger.join().unwrap();
    let frames = LEAF_SAMPLE.lock().unwrap().clone();
    let got = names(&frames);
    assert_chain(
        &got,
        0,
        &["c_hot_leaf", "c_hot_caller", "sm_test_leaf_outer"],
    );
    assert!(frames[0].pc_kind.is_exact());
    assert_eq!(frames[1].method, Method::SFrame, "{frames:#?}");
}

/// Recurses `n` times through C (SFrame), then walks into a buffer of
/// `len` frames; returns the frames written.
fn walk_at_depth(n: u64, len: usize) -> Vec<Frame> {
    static BUF: Mutex<Vec<Frame>> = Mutex::new(Vec::new());
    static WRITTEN: Mutex<usize> = Mutex::new(0);
    *BUF.lock().unwrap() = vec![Frame::default(); len];
    extern "C" fn walk(x: u64) -> u64 {
        let mut b = BUF.lock().unwrap();
        *WRITTEN.lock().unwrap() = stackmark::walk_here(&mut b[..]);
        black_box(x)
    }
    // SAFETY: c_recurse calls `walk` at the bottom and returns.
    black_box(unsafe { fx::c_recurse(walk, n) });
    let n = *WRITTEN.lock().unwrap();
    BUF.lock().unwrap()[..n].to_vec()
}

#[test]
fn a_walk_fills_the_buffer_it_is_given_past_256_frames() {
    setup();
    // About 400 frames deep: a 512-frame buffer holds them all, down to
    // the test thread's start, and a 300-frame one is filled to the last
    // slot.
    let big = walk_at_depth(400, 512);
    assert!(big.len() > 400 && big.len() < 512, "{}", big.len());
    let got = names(&big);
    assert!(
        got.iter().any(|f| f == "walk_at_depth") && got.iter().any(|f| f.contains("thread_start")),
        "{got:?}"
    );
    let small = walk_at_depth(400, 300);
    assert_eq!(small.len(), 300);
    let pcs = |f: &[Frame]| f.iter().map(|f| f.pc).collect::<Vec<_>>();
    assert_eq!(pcs(&small), pcs(&big[..300]));
}

/// The benchmarks' stacks of distinct functions (`fx::at_distinct_depth`):
/// every C function once, in order, a Rust `hop` after every sixteenth,
/// each C frame unwound by its SFrame rows (or, in the frame-pointer build,
/// by its CFI, and by frame pointers when tables are off), equal to
/// libgcc's walk.
#[test]
fn the_distinct_benchmark_chains_walk_function_by_function() {
    setup();
    for (chain, prefix) in [
        (fx::Chain::Sframe, "dcs_"),
        (fx::Chain::FramePointers, "dcf_"),
    ] {
        let mut frames = Vec::new();
        let mut fp_only = Vec::new();
        let mut libgcc = Vec::new();
        fx::at_distinct_depth(chain, 40, &mut || {
            let (regs, precise) = stackmark::capture_here();
            let mut buf = [Frame::default(); 512];
            let n =
                stackmark::walk_from(regs, precise, stackmark::WalkOptions::default(), &mut buf);
            frames = buf[..n].to_vec();
            let opts = stackmark::WalkOptions {
                use_tables: false,
                ..Default::default()
            };
            let n = stackmark::walk_from(regs, precise, opts, &mut buf);
            fp_only = buf[..n].to_vec();
            libgcc = common::libgcc_trace();
        });
        let got = names(&frames);
        // dc_216 .. dc_255: a hop after dc_223, dc_239 (and the end).
        let mut want = Vec::new();
        for i in (216..256).rev() {
            if i % 16 == 15 && i != 255 {
                want.push("hop".to_string());
            }
            want.push(format!("{prefix}{i}"));
        }
        let start = got
            .iter()
            .position(|n| n == &format!("{prefix}255"))
            .unwrap();
        let chain_names: Vec<String> = got[start..start + want.len()]
            .iter()
            .map(|n| {
                if n.contains("hop") {
                    "hop".into()
                } else {
                    n.clone()
                }
            })
            .collect();
        assert_eq!(chain_names, want, "{got:?}");
        // The frame after each C frame says how the C frame was unwound.
        let want_method = match chain {
            fx::Chain::Sframe => Method::SFrame,
            fx::Chain::FramePointers => Method::Cfi,
        };
        for i in start..start + want.len() {
            if got[i].starts_with(prefix) {
                assert_eq!(
                    frames[i + 1].method,
                    want_method,
                    "after {}: {got:?}",
                    got[i]
                );
            }
        }
        // Without tables, frame pointers give the same frames through the
        // frame-pointer build.
        if chain == fx::Chain::FramePointers {
            let pcs = |f: &[Frame]| {
                f[1..start + want.len()]
                    .iter()
                    .map(|f| f.pc)
                    .collect::<Vec<_>>()
            };
            assert_eq!(pcs(&fp_only), pcs(&frames));
        }
        // libgcc agrees from the closure's caller on.
        let at = libgcc.iter().position(|&pc| pc == frames[1].pc).unwrap();
        let ours: Vec<u64> = frames[1..].iter().map(|f| f.pc).collect();
        assert_eq!(ours, libgcc[at..].to_vec(), "{got:?}");
    }
}
