//! macOS: reads that cannot fault, the calling thread's stack bounds, and
//! the layout of the Darwin `ucontext_t`.

use core::ffi::{c_int, c_void};

// Declared here: the libc crate lacks them.
extern "C" {
    fn mach_vm_read_overwrite(
        task: u32,
        address: u64,
        size: u64,
        data: u64,
        out_size: *mut u64,
    ) -> c_int;
    static mach_task_self_: u32;
}

// --- Reads that cannot fault -------------------------------------------------

/// Copies `buf.len()` bytes from `addr` in this process, returning `false`
/// instead of faulting when any of them is unmapped or unreadable:
/// `mach_vm_read_overwrite` on the task itself, which reports
/// `KERN_INVALID_ADDRESS` rather than faulting. One Mach call, safe in a
/// signal handler. Bytes no user mapping can hold (the first page, or at or
/// above 2^56) fail at once, with no call.
pub fn read_checked(addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    if !super::may_be_mapped(addr, buf.len()) {
        return false;
    }
    let mut got = 0u64;
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`;
    // `mach_task_self_` is the task port dyld initialises before any code
    // runs.
    let kr = unsafe {
        mach_vm_read_overwrite(
            mach_task_self_,
            addr,
            buf.len() as u64,
            buf.as_mut_ptr() as u64,
            &mut got,
        )
    };
    kr == 0 && got == buf.len() as u64
}

// --- Thread stacks ------------------------------------------------------------

/// This thread's stack bounds from its pthread: `pthread_get_stackaddr_np`
/// (the top) and `pthread_get_stacksize_np`. Both read the calling thread's
/// pthread structure (the main thread's size may take one `getrlimit`, a
/// system call), so this is safe in a signal handler and needs no
/// registration.
fn pthread_stack() -> Option<(u64, u64)> {
    // SAFETY: both calls only read the calling thread's pthread structure.
    let (top, size) = unsafe {
        let me = libc::pthread_self();
        (
            libc::pthread_get_stackaddr_np(me) as u64,
            libc::pthread_get_stacksize_np(me) as u64,
        )
    };
    Some((top.checked_sub(size)?, top)).filter(|&(lo, hi)| lo < hi)
}

/// This thread's stack bounds. On macOS every thread's pthread knows them,
/// so there is nothing to record: this only reports them.
pub fn register_thread() -> Option<(u64, u64)> {
    pthread_stack()
}

/// This thread's stack bounds, read from its pthread each time. No
/// thread-local storage: on macOS the first access to a thread-local
/// variable in a thread may allocate it, which a walk in a signal handler
/// must not do.
pub fn registered_stack() -> Option<(u64, u64)> {
    pthread_stack()
}

// --- The Darwin ucontext -------------------------------------------------------

/// `struct __darwin_ucontext` (64-bit): the machine context is behind a
/// pointer.
#[repr(C)]
struct DarwinUcontext {
    _uc_onstack: c_int,
    _uc_sigmask: u32,
    _uc_stack: libc::stack_t,
    _uc_link: *mut c_void,
    _uc_mcsize: usize,
    uc_mcontext: *const c_void,
}

const _: () = assert!(core::mem::offset_of!(DarwinUcontext, uc_mcontext) == 48);

/// `__darwin_mcontext64` on x86_64 up to its thread state: the exception
/// state (16 bytes), then `rax rbx rcx rdx rdi rsi rbp rsp r8..r15 rip
/// rflags cs fs gs`.
#[cfg(target_arch = "x86_64")]
#[repr(C)]
pub(crate) struct Mcontext {
    _es: [u64; 2],
    pub(crate) ss: [u64; 21],
}

/// `__darwin_mcontext64` on arm64 up to its thread state: the exception
/// state (16 bytes), then `x0..x28 fp lr sp pc cpsr`.
#[cfg(target_arch = "aarch64")]
#[repr(C)]
pub(crate) struct Mcontext {
    _es: [u64; 2],
    pub(crate) x: [u64; 29],
    pub(crate) fp: u64,
    pub(crate) lr: u64,
    pub(crate) sp: u64,
    pub(crate) pc: u64,
    pub(crate) cpsr: u32,
    _pad: u32,
}

/// The machine context of a Darwin `ucontext_t`.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
pub(crate) unsafe fn mcontext<'a>(uc: *const c_void) -> &'a Mcontext {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t, whose
    // `uc_mcontext` points at the kernel's machine context.
    unsafe { &*((*(uc as *const DarwinUcontext)).uc_mcontext as *const Mcontext) }
}
