//! An alternate signal stack per thread, so that a stack overflow can be
//! reported.

use core::ffi::{c_int, c_void};

use super::CrashError;

/// Size of the alternate signal stack [`install_altstack`] gives a thread.
pub const ALTSTACK_SIZE: usize = 64 * 1024;

thread_local! {
    /// The alternate stack [`install_altstack`] mapped for this thread,
    /// unmapped when the thread exits.
    static OWN_ALTSTACK: OwnAltstack = const { OwnAltstack(core::cell::Cell::new(0)) };
}

/// The address of a mapping of [`ALTSTACK_SIZE`] bytes plus a guard page.
struct OwnAltstack(core::cell::Cell<usize>);

impl Drop for OwnAltstack {
    fn drop(&mut self) {
        let p = self.0.get();
        if p == 0 {
            return;
        }
        // SAFETY: the mapping this thread made; at its exit nothing runs on
        // it. It is taken out of use first if it is still installed.
        unsafe {
            let mut cur: libc::stack_t = core::mem::zeroed();
            if libc::sigaltstack(core::ptr::null(), &mut cur) == 0
                && cur.ss_sp as usize == p + altstack_guard()
            {
                let off = libc::stack_t {
                    ss_sp: core::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                if libc::sigaltstack(&off, core::ptr::null_mut()) != 0 {
                    return;
                }
            }
            unmap_altstack(p);
        }
    }
}

/// The guard page below an alternate stack: a whole page of the system's
/// (16 KiB on Apple silicon, up to 64 KiB on AArch64 Linux), since
/// `mprotect` covers whole pages, and a 4 KiB guard would take the rest of
/// its page from the stack.
fn altstack_guard() -> usize {
    crate::sys::page_size() as usize
}

/// Unmaps an alternate stack that [`install_altstack`] mapped at `p`, with
/// its guard page.
///
/// # Safety
/// Nothing may use that stack any more.
unsafe fn unmap_altstack(p: usize) {
    // SAFETY: the whole mapping install_altstack made, unused by the
    // caller's contract.
    unsafe { libc::munmap(p as *mut c_void, ALTSTACK_SIZE + altstack_guard()) };
}

/// Gives the calling thread an alternate signal stack of [`ALTSTACK_SIZE`]
/// bytes (plus a guard page), so its crash handler runs even after a stack
/// overflow. Threads spawned by Rust's `std::thread` already get one from
/// the standard library; call this at the start of other threads (C
/// threads, or when the program disables std's). A thread that already has
/// an alternate stack of at least half that size keeps it; the one this
/// makes is unmapped when the thread exits.
pub fn install_altstack() -> Result<(), CrashError> {
    // SAFETY: queries the current alternate stack, then maps a fresh region
    // (checked for failure) and installs it; the mapping is freed only at
    // the thread's exit, after it is taken out of use.
    unsafe {
        let mut cur: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut cur) == 0
            && cur.ss_flags & libc::SS_DISABLE == 0
            && cur.ss_size >= ALTSTACK_SIZE / 2
        {
            return Ok(());
        }
        let guard = altstack_guard();
        let p = libc::mmap(
            core::ptr::null_mut(),
            ALTSTACK_SIZE + guard,
            libc::PROT_READ | libc::PROT_WRITE,
            MAP_FLAGS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(CrashError::Os(std::io::Error::last_os_error()));
        }
        libc::mprotect(p, guard, libc::PROT_NONE);
        let ss = libc::stack_t {
            ss_sp: p.cast::<u8>().add(guard).cast(),
            ss_flags: 0,
            ss_size: ALTSTACK_SIZE,
        };
        if libc::sigaltstack(&ss, core::ptr::null_mut()) != 0 {
            let err = std::io::Error::last_os_error();
            unmap_altstack(p as usize);
            return Err(CrashError::Os(err));
        }
        // Where the thread is exiting already, its stack stays mapped, as
        // before: there is no exit hook left to unmap it.
        let _ = OWN_ALTSTACK.try_with(|own| {
            let old = own.0.replace(p as usize);
            if old != 0 {
                // A stack this thread mapped earlier, replaced since.
                unmap_altstack(old);
            }
        });
    }
    Ok(())
}

/// The alternate stack's mapping.
#[cfg(target_os = "linux")]
const MAP_FLAGS: c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK;

#[cfg(target_os = "macos")]
const MAP_FLAGS: c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_altstack_guard_is_a_whole_page_of_the_system() {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        assert_eq!(altstack_guard(), page.max(4096));
        // On a thread of its own: the test harness's has std's stack.
        let ss = std::thread::spawn(|| {
            install_altstack().unwrap();
            // SAFETY: only reports the current alternate stack.
            unsafe {
                let mut ss: libc::stack_t = core::mem::zeroed();
                assert_eq!(libc::sigaltstack(core::ptr::null(), &mut ss), 0);
                (ss.ss_sp as usize, ss.ss_size)
            }
        })
        .join()
        .unwrap();
        // The stack starts right above the guard, on a page boundary.
        assert_eq!((ss.0 % page, ss.1), (0, ALTSTACK_SIZE), "{ss:x?}");
    }
}
