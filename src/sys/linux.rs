//! Linux: reads that cannot fault and the calling thread's stack bounds.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};

use super::thread_table::ThreadTable;

const PAGE: u64 = 4096;

// --- Reads that cannot fault -------------------------------------------------

/// 0 = not probed yet, 1 = process_vm_readv works, 2 = it does not.
static VM_READ: AtomicU8 = AtomicU8::new(0);

fn vm_read(addr: u64, buf: &mut [u8]) -> isize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf` and
    // reports EFAULT instead of faulting on an unmapped remote address.
    unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) }
}

/// Copies through a fresh pipe: the kernel's copy of the source fails with
/// EFAULT instead of faulting. Four system calls, all async-signal-safe; a
/// pipe of its own per call, so concurrent callers never mix their bytes.
fn pipe_read(addr: u64, buf: &mut [u8]) -> bool {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 fills `fds`; write reads from `addr` in the kernel,
    // which reports EFAULT rather than faulting; read fills `buf`; both fds
    // are closed on every path.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) != 0 {
            return false;
        }
        let ok = buf.len() <= 4096
            && libc::write(fds[1], addr as *const c_void, buf.len()) == buf.len() as isize
            && libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) == buf.len() as isize;
        libc::close(fds[0]);
        libc::close(fds[1]);
        ok
    }
}

static CHECKED_READS: AtomicU64 = AtomicU64::new(0);

/// How many checked reads ([`read_checked`]) the process has made: each
/// costs one or more system calls. Walks read the code of the modules
/// [`crate::modules::Module::read_directly`] names without them.
pub fn checked_reads() -> u64 {
    CHECKED_READS.load(Relaxed)
}

/// Copies `buf.len()` bytes from `addr` in this process, returning `false`
/// instead of faulting when any of them is unmapped or unreadable. It uses
/// `process_vm_readv` on the process itself: one system call,
/// async-signal-safe. Where that call is refused (seccomp filters,
/// qemu-user), it copies through a pipe instead. Bytes no user mapping can
/// hold (the first page, or at or above 2^56) fail at once, with no call.
pub fn read_checked(addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    if !super::may_be_mapped(addr, buf.len()) {
        return false;
    }
    CHECKED_READS.fetch_add(1, Relaxed);
    // A walk may run in a signal handler: a failed read must not leave
    // its errno to the interrupted code.
    super::keeping_errno(|| read_learning(&VM_READ, addr, buf))
}

/// [`read_checked`]'s copy, with `how` the state of what it has learnt
/// about `process_vm_readv` (as [`VM_READ`]).
fn read_learning(how: &AtomicU8, addr: u64, buf: &mut [u8]) -> bool {
    if how.load(Relaxed) == 2 {
        return pipe_read(addr, buf);
    }
    let n = vm_read(addr, buf);
    if n == buf.len() as isize {
        how.store(1, Relaxed);
        return true;
    }
    if n < 0 && how.load(Relaxed) == 0 {
        // Did the address fail, or the call? Asked once: either answer is
        // kept, so later failed reads cost one system call, not two.
        let probe = [0u8; 1];
        let mut out = [1u8; 1];
        if vm_read(probe.as_ptr() as u64, &mut out) != 1 {
            how.store(2, Relaxed);
            return pipe_read(addr, buf);
        }
        how.store(1, Relaxed);
    }
    false
}

// --- Thread stacks ------------------------------------------------------------

/// Registered threads' stack bounds, keyed by `pthread_self`.
static THREADS: ThreadTable = ThreadTable::new();

thread_local! {
    /// Removes this thread from [`THREADS`] when it exits. Thread-local
    /// storage is touched only here, when registering, never by a walk.
    static REGISTERED: Registered = const { Registered };
}

struct Registered;

impl Drop for Registered {
    fn drop(&mut self) {
        THREADS.remove(thread_key());
    }
}

/// This thread's key in [`THREADS`]: its `pthread_t`, the address of its
/// thread control block, unique among live threads. Async-signal-safe in
/// practice: glibc and musl read it from the thread pointer.
#[inline(always)]
fn thread_key() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// In a child after `fork`: only the forking thread is left.
extern "C" fn forget_other_threads() {
    THREADS.retain_only(thread_key());
}

/// Finds this thread's stack bounds with `pthread_getattr_np` and records
/// them for walks on this thread, including from signal handlers. Not
/// async-signal-safe (glibc reads `/proc/self/maps` for the main thread).
/// The bounds are kept in a fixed table, not in thread-local storage, and
/// dropped when the thread exits; with [`SLOTS`](super::thread_table::SLOTS)
/// threads registered (or a crowded corner of the table) a thread stays
/// unregistered, and its walks probe its stack instead.
pub fn register_thread() -> Option<(u64, u64)> {
    // SAFETY: `attr` is initialised by pthread_getattr_np before use and
    // destroyed after; the out-pointers are valid locals.
    let bounds = unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = core::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            return None;
        }
        (addr as u64, addr as u64 + size as u64)
    };
    let bounds = if is_main_thread() {
        main_thread_bounds(bounds, &bounds as *const _ as u64)
    } else {
        (past_guard(bounds.0, bounds.1, read_checked), bounds.1)
    };
    static AT_FORK: AtomicBool = AtomicBool::new(false);
    super::once_in_fork_child(&AT_FORK, forget_other_threads);
    // Only a thread whose exit will remove its entry gets one: a stale
    // entry would give a later thread with the same key wrong bounds.
    if REGISTERED.try_with(|_| ()).is_ok() {
        THREADS.insert(thread_key(), bounds.0, bounds.1);
    }
    Some(bounds)
}

/// Whether the calling thread is the process's first.
fn is_main_thread() -> bool {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() == crate::sys::gettid() }
}

/// Pages below a mapping into which the kernel does not grow a stack: its
/// default `stack_guard_gap`.
const STACK_GUARD_PAGES: u64 = 256;

/// How many unreadable pages at the bottom of a thread's stack
/// registration looks past.
const BOTTOM_GUARD_PAGES: u64 = 64;

/// The start of a thread's stack `lo..hi` raised past unreadable pages at
/// its bottom: glibc leaves its own guard page out of the bounds, but a
/// stack the program gave the thread (`pthread_attr_setstack`) may hold a
/// guard page it made itself, which a walk from an sp inside it would
/// otherwise read directly. `readable` is the checked read. Where no page of
/// the first [`BOTTOM_GUARD_PAGES`] reads, nothing is registered (`hi`).
fn past_guard(lo: u64, hi: u64, readable: impl Fn(u64, &mut [u8]) -> bool) -> u64 {
    let mut page = lo;
    for _ in 0..BOTTOM_GUARD_PAGES {
        if page >= hi || readable(page, &mut [0u8; 1]) {
            return page.min(hi);
        }
        page += PAGE;
    }
    hi
}

/// The most of the main thread's stack below its top that is registered:
/// with an unlimited stack rlimit glibc's bounds reach down to the heap,
/// and a read far below the stack in use would fault (or grow the stack by
/// that much). A walk from deeper still probes its way.
const MAIN_STACK_REACH: u64 = 1 << 30;

/// The main thread's bounds `(lo, hi)` as glibc gives them, made safe to
/// read directly; `here` is an address on the thread's stack now. glibc's
/// `lo` follows the stack rlimit, capped at the end of the mapping below:
/// the stack grows into that range on demand, except within the kernel's
/// guard gap above another mapping, where a read faults. So `lo` moves up
/// by the gap (but never above the stack in use); a walk below it proves
/// each page with a checked read. Where `here` lies outside glibc's bounds
/// (the thread registered while running on a stack of its own making, a
/// coroutine's), it says nothing of the main stack: the holes between the
/// two are not the stack.
fn main_thread_bounds((lo, hi): (u64, u64), here: u64) -> (u64, u64) {
    let page = super::page_size();
    let in_use = (lo..hi).contains(&here).then_some(here & !(page - 1));
    let lo = lo
        .saturating_add(STACK_GUARD_PAGES * page)
        .max(hi.saturating_sub(MAIN_STACK_REACH));
    (in_use.map_or(lo, |p| lo.min(p)), hi)
}

/// This thread's recorded stack bounds, if [`register_thread`] ran on it.
/// Async-signal-safe: a lookup in a fixed table, no thread-local storage.
#[inline(always)]
pub fn registered_stack() -> Option<(u64, u64)> {
    THREADS.get(thread_key())
}
#[cfg(test)]
mod tests {
    use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

    #[test]
    fn registration_looks_past_unreadable_pages_at_a_stacks_bottom() {
        const P: u64 = super::PAGE;
        let lo = 0x7000_0000_0000;
        // Pages 0 and 1 unreadable (a guard the program made itself).
        let guarded = |at: u64, _: &mut [u8]| at >= lo + 2 * P;
        assert_eq!(super::past_guard(lo, lo + 16 * P, guarded), lo + 2 * P);
        // glibc's own stacks start readable: one probe, nothing moves.
        assert_eq!(super::past_guard(lo, lo + 16 * P, |_, _| true), lo);
        // Nothing readable near the bottom: nothing registered.
        assert_eq!(
            super::past_guard(lo, lo + 16 * P, |_, _| false),
            lo + 16 * P
        );
        assert_eq!(
            super::past_guard(lo, lo + 512 * P, |_, _| false),
            lo + 512 * P
        );
        // The real thing, on a page this process cannot read.
        let page = stackmark_fixtures::UnreadablePage::new();
        let a = page.addr();
        assert_eq!(super::past_guard(a, a + P, super::read_checked), a + P);
    }

    #[test]
    fn the_main_threads_bounds_leave_out_the_guard_gap_and_stay_within_reach() {
        let hi = 0x7ffd_5776_9000u64;
        let here = hi - 0x3000;
        // An 8 MiB rlimit: glibc's lo moves up by the kernel's guard gap.
        let lo = hi - (8 << 20);
        assert_eq!(
            super::main_thread_bounds((lo, hi), here),
            (lo + (1 << 20), hi)
        );
        // Unlimited: glibc's lo is the heap's end, terabytes below.
        let heap_end = 0x55cd_ba66_9000;
        let (lo, _) = super::main_thread_bounds((heap_end, hi), here);
        assert_eq!(lo, hi - super::MAIN_STACK_REACH);
        // Never above the stack in use.
        assert_eq!(super::main_thread_bounds((hi - 0x4000, hi), here).0, here);
        // But a stack in use elsewhere (registered from a coroutine's stack
        // far below) is not the main stack: the gap between stays out.
        let lo = hi - (8 << 20);
        let elsewhere = hi - (256 << 20);
        assert_eq!(
            super::main_thread_bounds((lo, hi), elsewhere),
            (lo + (1 << 20), hi)
        );
    }

    #[test]
    fn a_failed_checked_read_learns_once_whether_the_call_works() {
        let page = stackmark_fixtures::UnreadablePage::new();
        // As in a process that has made no checked read yet.
        let how = AtomicU8::new(0);
        let mut buf = [0u8; 8];
        assert!(!super::read_learning(&how, page.addr(), &mut buf));
        // The probe's answer is kept (1, or 2 where the call is refused, as
        // under qemu-user), so the next failure does not probe again.
        assert_ne!(how.load(Relaxed), 0);
        assert!(!super::read_learning(&how, page.addr(), &mut buf));
    }

    #[test]
    fn checked_reads_fail_on_unmapped_memory_and_succeed_on_mapped() {
        let word = 0x1122_3344_5566_7788u64;
        let mut buf = [0u8; 8];
        assert!(super::read_checked(&word as *const u64 as u64, &mut buf));
        assert_eq!(u64::from_ne_bytes(buf), word);
        assert!(!super::read_checked(8, &mut buf));
    }
}
