//! Crashes on purpose and prints the crash report: a markup backtrace on
//! standard error, for `llvm-symbolizer --filter-markup`.
//!
//! The call chain from the crash site outward is `write_through_null` <-
//! `rust_callback` <- `c_level_2` <- `c_level_1` (C, no frame pointers,
//! SFrame only) <- `rust_entry` <- `main`.
//!
//! `cargo run --example crash [MODE]` where MODE is one of `segv` (the
//! default), `bus`, `ill`, `fpe`, `abrt`, `trap`, `overflow` (main thread),
//! `thread-overflow`, `threads` (8 threads crash at once), `nested` (the
//! handler itself faults), `sigpipe-segv` (`segv` with `SIGPIPE` at its
//! default action, for a report into a pipe nobody reads), `gp` (x86_64: a
//! general-protection fault, which has no fault address), `double-free`
//! (glibc finds a block freed twice and aborts), `memcpy-null` (SIGSEGV
//! inside glibc's `memcpy`), `qsort-abrt` and `qsort-segv` (a comparator
//! called by glibc's `qsort` aborts, or writes through null), `thread-segv`
//! (`segv` on one spawned thread while the main thread joins it); the tests
//! also use `gap-sp`, `chain` and `sampled-abrt` (see `main` below).
//! `double-free`, `memcpy-null` and the `qsort` modes put glibc's own frames,
//! which have DWARF CFI only, on the crashing stack.

#[cfg(target_os = "linux")]
use std::alloc::{GlobalAlloc, Layout, System};
#[cfg(target_os = "linux")]
use std::hint::black_box;

/// Forwards to the system allocator, but ends the process with status 99
/// if called while this thread writes a crash report: reports must not
/// allocate.
#[cfg(target_os = "linux")]
struct GuardAlloc;

#[cfg(target_os = "linux")]
fn guard() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    if stackmark::crash::reporting_thread() == tid {
        let msg = b"stackmark example: allocation during a crash report\n";
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(99);
        }
    }
}

// SAFETY: forwards to the system allocator.
#[cfg(target_os = "linux")]
unsafe impl GlobalAlloc for GuardAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        guard();
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        guard();
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: GuardAlloc = GuardAlloc;

/// Performs an invalid write through a null pointer.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn write_through_null(x: u64) -> u64 {
    let p = black_box(std::ptr::null_mut::<u64>());
    // SAFETY: none: this is the crash the example exists for.
    unsafe { p.write_volatile(x) }; // CRASH-SITE
    x + 1
}

/// Calls code at `addr`, where there is none: a call through a wild
/// function pointer (a freed vtable, say). The report's frame 1 must be
/// this function, which the frame pointer alone would skip.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn call_through_wild_pointer(addr: usize) -> u64 {
    // SAFETY: none: this is the crash the mode exists for.
    let f: extern "C" fn() -> u64 = unsafe { std::mem::transmute(addr) };
    black_box(f()) + 1 // WILD-CALL-SITE
}

/// Called back by the C fixture.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn rust_callback(x: u64) -> u64 {
    black_box(write_through_null(black_box(x))) + 1
}

/// Enters the C fixture chain.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn rust_entry(x: u64) -> u64 {
    // SAFETY: the fixture only calls the callback.
    black_box(unsafe { stackmark_fixtures::c_level_1(rust_callback, black_box(x)) }) + 1
}

/// Frees one heap block twice through libc: glibc detects the double free
/// and aborts (SIGABRT from inside `free`).
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn free_twice(size: usize) -> u64 {
    // SAFETY: none for the second free: the double free is the point.
    unsafe {
        let p = black_box(libc::malloc(black_box(size)));
        libc::free(black_box(p));
        libc::free(black_box(p));
    }
    black_box(size as u64) + 1
}

/// Copies `len` bytes to a null destination with libc's `memcpy`: SIGSEGV
/// inside `memcpy`. The work after the call keeps it from being a tail call.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn copy_to_null(len: usize) -> u64 {
    let src = black_box([7u8; 64]);
    let dst = black_box(std::ptr::null_mut::<libc::c_void>());
    // SAFETY: none: the write to null is the crash the mode exists for.
    unsafe { libc::memcpy(dst, src.as_ptr().cast(), black_box(len.min(src.len()))) };
    black_box(src[1] as u64) + 1
}

/// A `qsort` comparator that aborts on its first call.
#[cfg(target_os = "linux")]
#[inline(never)]
extern "C" fn compare_then_abort(_: *const libc::c_void, _: *const libc::c_void) -> libc::c_int {
    std::process::abort()
}

/// A `qsort` comparator that writes through null (in
/// [`write_through_null`]) on its first call.
#[cfg(target_os = "linux")]
#[inline(never)]
extern "C" fn compare_then_segv(a: *const libc::c_void, _: *const libc::c_void) -> libc::c_int {
    black_box(write_through_null(black_box(a as u64))) as libc::c_int
}

/// Sorts a small array with libc's `qsort` and `compare`, which crashes:
/// glibc's frames then sit between the comparator and this function.
#[cfg(target_os = "linux")]
#[no_mangle]
#[inline(never)]
pub extern "C" fn sort_with(
    compare: extern "C" fn(*const libc::c_void, *const libc::c_void) -> libc::c_int,
) -> u64 {
    let mut values = black_box([5u64, 3, 8, 1, 9, 2, 7, 4]);
    // SAFETY: `values` holds `values.len()` elements of the size given;
    // `compare` only crashes.
    unsafe {
        libc::qsort(
            values.as_mut_ptr().cast(),
            values.len(),
            std::mem::size_of::<u64>(),
            Some(compare),
        )
    };
    black_box(values[0]) + 1
}

#[cfg(target_os = "linux")]
#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(n: u64) -> u64 {
    let pad = black_box([n; 64]);
    black_box(recurse(n + 1)) + pad[3]
}

#[cfg(target_os = "linux")]
fn raise(sig: i32) {
    // SAFETY: sends the signal to this thread.
    unsafe { libc::raise(sig) };
}

/// The address the `chain` mode faults at.
#[cfg(target_os = "linux")]
const CHAIN_FAULT: u64 = 0x10008;
/// `si_code` of a fault at an address nothing maps.
#[cfg(target_os = "linux")]
const SEGV_MAPERR: i32 = 1;

/// A SIGSEGV handler installed before stackmark's, as a runtime with its
/// own fault handling would have: exits 42 if it sees the fault itself
/// (`SEGV_MAPERR` at [`CHAIN_FAULT`]), 43 for anything else.
#[cfg(target_os = "linux")]
extern "C" fn previous_segv(_: i32, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo; _exit is async-signal-safe.
    unsafe {
        let fault = (*info).si_code == SEGV_MAPERR && (*info).si_addr() as u64 == CHAIN_FAULT;
        libc::_exit(if fault { 42 } else { 43 });
    }
}

#[cfg(target_os = "linux")]
#[allow(clippy::zero_ptr)]
fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "segv".into());
    if mode == "sigpipe-segv" {
        // As in a C program: a write to a pipe nobody reads kills the
        // process with SIGPIPE. The report's writes must not.
        // SAFETY: restores the default action of one signal.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if mode == "chain" {
        // SAFETY: installs a plain handler; the sigaction is zeroed first.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = previous_segv as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        }
    }
    if mode == "stdout-then-default" {
        // A program sends reports to its log (here standard output); a
        // library then makes sure a handler is in place, which must not
        // take the reports back to standard error.
        stackmark::crash::install_crash_handler_to_fd(1).expect("install the crash handler");
    }
    stackmark::install_crash_handler().expect("install the crash handler");
    match mode.as_str() {
        "segv" | "sigpipe-segv" | "stdout-then-default" => {
            black_box(rust_entry(7));
        }
        "wild-call" => {
            black_box(call_through_wild_pointer(black_box(0x10)));
        }
        "gp" => {
            // x86_64: a non-canonical address faults as a general-protection
            // fault, which the kernel reports with SI_KERNEL and no address.
            #[cfg(target_arch = "x86_64")]
            // SAFETY: none: the fault is the point.
            unsafe {
                (black_box(0x8000_0000_0000_1000u64) as *mut u64).write_volatile(1)
            };
        }
        "bus" => {
            // Touch a page of a mapped file past its end.
            let path = std::env::temp_dir().join(format!("stackmark-bus-{}", std::process::id()));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: maps an empty file and reads its first page: SIGBUS.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    0,
                );
                let _ = std::fs::remove_file(&path);
                black_box((p as *const u8).read_volatile());
            }
        }
        "ill" => {
            // SAFETY: executes an undefined instruction.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                std::arch::asm!("ud2")
            };
            // SAFETY: as above, AArch64's undefined instruction.
            #[cfg(target_arch = "aarch64")]
            unsafe {
                std::arch::asm!("udf #0")
            };
        }
        "fpe" => {
            // x86_64 traps on integer division by zero; AArch64 does not,
            // so there the signal is sent.
            #[cfg(target_arch = "x86_64")]
            {
                let zero = black_box(0u64);
                let r: u64;
                // SAFETY: divides by zero on purpose.
                unsafe {
                    std::arch::asm!("div {z}", z = in(reg) zero, inout("rax") 1u64 => r, inout("rdx") 0u64 => _)
                };
                black_box(r);
            }
            raise(libc::SIGFPE);
        }
        "abrt" => std::process::abort(),
        "gap-sp" => {
            // A mapping 4 MiB below the main thread's stack: glibc then
            // gives the stack's low bound as that mapping's end, but the
            // kernel does not grow the stack within its guard gap above it.
            // A crash with the stack pointer (and frame pointer) there must
            // still give a whole report.
            let here = &black_box(0u8) as *const u8 as u64 & !0xfff;
            // SAFETY: maps one page where nothing is (MAP_FIXED_NOREPLACE
            // fails rather than replace a mapping).
            let block = unsafe {
                libc::mmap(
                    (here - (4 << 20)) as *mut libc::c_void,
                    4096,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            assert_ne!(block, libc::MAP_FAILED, "map below the stack");
            // Registered again: the bounds now end at the new mapping.
            stackmark::register_thread();
            let sp = block as u64 + 4096 + 0x8000;
            // SAFETY: none: the crash is the point.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                std::arch::asm!("mov rbp, {sp}", "mov rsp, {sp}", "ud2", sp = in(reg) sp, options(noreturn))
            };
            // SAFETY: as above.
            #[cfg(target_arch = "aarch64")]
            unsafe {
                std::arch::asm!("mov x29, {sp}", "mov sp, {sp}", "udf #0", sp = in(reg) sp, options(noreturn))
            };
        }
        "chain" => {
            // SAFETY: none: the fault is the point.
            unsafe { black_box(CHAIN_FAULT as *mut u64).write_volatile(1) };
        }
        "trap" => {
            // SAFETY: a breakpoint instruction.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                std::arch::asm!("int3")
            };
            // SAFETY: as above, AArch64's breakpoint instruction.
            #[cfg(target_arch = "aarch64")]
            unsafe {
                std::arch::asm!("brk #0")
            };
        }
        "overflow" => {
            black_box(recurse(0));
        }
        "thread-overflow" => {
            std::thread::spawn(|| black_box(recurse(0))).join().unwrap();
        }
        "threads" => {
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let threads: Vec<_> = (0..8)
                .map(|i| {
                    let start = start.clone();
                    std::thread::Builder::new()
                        .name(format!("crasher-{i}"))
                        .spawn(move || {
                            start.wait();
                            black_box(rust_entry(i))
                        })
                        .unwrap()
                })
                .collect();
            for t in threads {
                let _ = t.join();
            }
        }
        "double-free" => {
            black_box(free_twice(black_box(64)));
        }
        "memcpy-null" => {
            black_box(copy_to_null(black_box(64)));
        }
        "qsort-abrt" => {
            black_box(sort_with(black_box(compare_then_abort)));
        }
        "qsort-segv" => {
            black_box(sort_with(black_box(compare_then_segv)));
        }
        "thread-segv" => {
            // One spawned thread crashes (`segv`'s chain); the main thread
            // waits in `join`.
            std::thread::Builder::new()
                .name("crasher".into())
                .spawn(|| black_box(rust_entry(3)))
                .unwrap()
                .join()
                .unwrap();
        }
        "sampled-abrt" => {
            // A thread being sampled at 5 kHz aborts: the profiler's signals
            // must not land on top of the crash handler and overflow the
            // thread's small alternate stack.
            std::thread::spawn(|| {
                let _timer = stackmark::sample::ThreadTimer::start(5000).expect("a thread timer");
                let end = std::time::Instant::now() + std::time::Duration::from_millis(20);
                while std::time::Instant::now() < end {
                    black_box(0);
                }
                std::process::abort()
            })
            .join()
            .unwrap();
        }
        "nested" => {
            // A handler that faults: the report must still end the process.
            stackmark::crash::corrupt_for_test();
            black_box(rust_entry(1));
        }
        other => {
            eprintln!(
                "crash: unknown mode {other}; modes: segv bus ill fpe abrt trap overflow \
                 thread-overflow threads nested sigpipe-segv gp wild-call gap-sp chain \
                 sampled-abrt stdout-then-default double-free memcpy-null qsort-abrt \
                 qsort-segv thread-segv"
            );
            std::process::exit(2);
        }
    }
    eprintln!("stackmark example: still alive after mode {mode}");
}

/// Elsewhere the example is an empty program: its call chain runs through the
/// Linux-only C fixtures.
#[cfg(not(target_os = "linux"))]
fn main() {}
