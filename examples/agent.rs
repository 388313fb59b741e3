//! stackmark inside a shared library that a host loads with `dlopen`: a
//! profiler agent, or a language runtime's native extension. The host calls
//! `agent_init` once, then `agent_walk` from its own `SA_SIGINFO` handler,
//! on any of its threads, including threads that never called into the
//! agent before.
//!
//! `cargo build --example agent` builds `target/debug/examples/libagent.so`
//! (`libagent.dylib` on macOS). `tests/dlopen_agent.rs` loads it and checks
//! that a walk on a fresh thread allocates no thread-local storage, which
//! glibc gives a `dlopen`ed library with `malloc` on a thread's first use.

use core::ffi::c_void;

use stackmark::Frame;

/// Builds the module table. Returns 0 on success, -1 if it failed. Not
/// async-signal-safe: call it once, outside signal handlers.
#[no_mangle]
pub extern "C" fn agent_init() -> i32 {
    match stackmark::init() {
        Ok(_) => 0,
        Err(_) => -1,
    }
}

/// Walks from a signal handler's `ucontext_t` and writes up to `len`
/// program counters to `out`; returns how many it wrote. Allocation-free,
/// lock-free and async-signal-safe.
///
/// # Safety
/// `uc` must be the third argument of an `SA_SIGINFO` handler and `out`
/// must be valid for `len` writes.
#[no_mangle]
pub unsafe extern "C" fn agent_walk(uc: *const c_void, out: *mut u64, len: usize) -> usize {
    let mut frames = [Frame::default(); 64];
    let n = len.min(frames.len());
    // SAFETY: `uc` is a handler's context, as the caller promises.
    let n = unsafe { stackmark::walk_ucontext(uc, &mut frames[..n]) };
    for (i, f) in frames[..n].iter().enumerate() {
        // SAFETY: `i < n <= len`, and `out` is valid for `len` writes.
        unsafe { out.add(i).write(f.pc) };
    }
    n
}

/// Records the calling thread's stack bounds, so walks on it read its stack
/// without probing it. Optional; not async-signal-safe.
#[no_mangle]
pub extern "C" fn agent_register_thread() {
    stackmark::register_thread();
}
