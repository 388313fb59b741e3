//! stackmark in a library that a host loads with `dlopen` (the `agent`
//! example, a cdylib). glibc gives such a library's thread-local storage to
//! each thread lazily, with `malloc`, on the thread's first access: a walk
//! that touched it from a signal handler could deadlock in a host
//! interrupted inside `malloc`. `dlinfo(RTLD_DI_TLS_DATA)` says whether the
//! calling thread has that storage yet; a walk on a fresh thread must leave
//! it unallocated.
//!
//! glibc gives a library static TLS instead, from a surplus, when it
//! resolves TLS descriptors (AArch64's default) and there is room; the
//! check then runs in a child process with no surplus
//! (`glibc.rtld.optional_static_tls=0`), where the storage is dynamic on
//! every architecture.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

type Walk = unsafe extern "C" fn(*const c_void, *mut u64, usize) -> usize;

/// The agent's `agent_walk`, for the signal handler.
static WALK: AtomicUsize = AtomicUsize::new(0);
/// The frames the handler's walk found, and its first pcs.
static FOUND: AtomicUsize = AtomicUsize::new(0);
static PCS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];

extern "C" fn on_signal(_: i32, _: *mut libc::siginfo_t, uc: *mut c_void) {
    let mut pcs = [0u64; 64];
    // SAFETY: WALK holds the agent's `agent_walk`, set before the signal is
    // raised; `uc` is this handler's context and `pcs` has 64 slots.
    let n = unsafe {
        let walk: Walk = core::mem::transmute(WALK.load(SeqCst));
        walk(uc, pcs.as_mut_ptr(), pcs.len())
    };
    for (slot, &pc) in PCS.iter().zip(&pcs[..n]) {
        slot.store(pc as usize, SeqCst);
    }
    FOUND.store(n, SeqCst);
}

/// Whether the calling thread has the agent's thread-local storage.
fn has_tls(handle: *mut c_void) -> bool {
    let mut block: *mut c_void = core::ptr::null_mut();
    // SAFETY: `handle` is a live dlopen handle; the request writes a pointer.
    let rc = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_TLS_DATA,
            &mut block as *mut _ as *mut c_void,
        )
    };
    assert_eq!(rc, 0, "dlinfo");
    !block.is_null()
}

fn sym(handle: *mut c_void, name: &str) -> *mut c_void {
    let name = CString::new(name).unwrap();
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!p.is_null(), "{name:?} is exported");
    p
}

#[inline(never)]
fn walk_on_a_fresh_thread(handle: *mut c_void) -> (bool, usize, bool) {
    let before = has_tls(handle);
    // SAFETY: raising a signal whose handler is installed.
    unsafe { libc::raise(libc::SIGUSR2) };
    let after = has_tls(handle);
    (before, FOUND.load(SeqCst), after)
}

const TEST: &str =
    "a_walk_on_a_thread_new_to_a_dlopened_stackmark_allocates_no_thread_local_storage";
const TUNABLES: &str = "glibc.rtld.optional_static_tls=0";

#[test]
fn a_walk_on_a_thread_new_to_a_dlopened_stackmark_allocates_no_thread_local_storage() {
    if std::env::var("GLIBC_TUNABLES").as_deref() != Ok(TUNABLES) {
        let exe = std::env::current_exe().unwrap();
        let out = common::run_target_binary(
            &exe,
            &[TEST, "--exact", "--test-threads=1"],
            &[("GLIBC_TUNABLES", TUNABLES)],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("test result: ok. 1 passed"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let path = common::examples_dir().join("libagent.so");
    assert!(path.exists(), "{} is built by cargo test", path.display());
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: loading the agent example, whose constructors are Rust's own.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", path.display());
    // SAFETY: `agent_init` takes nothing and returns an int.
    let init: extern "C" fn() -> i32 = unsafe { core::mem::transmute(sym(handle, "agent_init")) };
    assert_eq!(init(), 0);
    WALK.store(sym(handle, "agent_walk") as usize, SeqCst);
    // SAFETY: installing an SA_SIGINFO handler with a valid action.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, &sa, core::ptr::null_mut()),
            0
        );
    }

    let h = handle as usize;
    let (before, n, after) = std::thread::spawn(move || walk_on_a_fresh_thread(h as *mut c_void))
        .join()
        .unwrap();
    assert!(
        !before,
        "a thread the agent never ran on has no storage of its"
    );
    assert!(n >= 4, "the walk found the thread's frames ({n})");
    // The walk crossed the signal frame into this test's own code.
    stackmark::init().unwrap();
    let table = stackmark::modules::current().unwrap();
    let main = table.modules()[0].bias;
    assert!(
        PCS[..n].iter().any(|pc| table
            .module_for_addr(pc.load(SeqCst) as u64)
            .is_some_and(|m| m.bias == main)),
        "a frame in the test program"
    );
    assert!(
        !after,
        "the walk allocated the agent's thread-local storage"
    );

    // The check can fail: code of the agent that does use its thread-local
    // storage (registering a thread records a destructor in it) allocates it.
    let control = std::thread::spawn(move || {
        let handle = h as *mut c_void;
        // SAFETY: `agent_register_thread` takes nothing and returns nothing.
        let register: extern "C" fn() =
            unsafe { core::mem::transmute(sym(handle, "agent_register_thread")) };
        register();
        has_tls(handle)
    })
    .join()
    .unwrap();
    assert!(control, "registering allocates the agent's storage");
}
