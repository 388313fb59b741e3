//! Walking the live process: capture here, or start from a signal's
//! `ucontext`, against the published module table.

use core::ffi::c_void;

use crate::arch::{Arch, Native};
use crate::memory::LiveMemory;
use crate::modules::{self, TableGuard};
use crate::walk::{CodeMap, Frame, PcKind, WalkOptions, Walker};

/// The native register set.
pub type Regs = <Native as Arch>::Regs;

/// A walk of the live process: an iterator of [`Frame`]s that pins the
/// module table while it lives.
pub type LiveWalker = Walker<Native, LiveMemory, TableGuard>;

/// The guard walks as the table it pins.
impl CodeMap for TableGuard {
    crate::walk::code_map_through_deref!();
}

/// Why [`init`](crate::init) or [`refresh`] failed. The published module table stays as
/// it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitError {
    /// Images kept being loaded or unloaded through every attempt to read
    /// the loader's list (macOS; dyld's callbacks still keep the table
    /// current).
    Busy,
    /// A walk or guard still held the table this refresh would reuse, the
    /// one the previous refresh replaced, after
    /// `REFRESH_WAIT` (two seconds): a [`LiveWalker`] or
    /// table guard kept across two refreshes (see
    /// `RefreshError::InUse`). Drop it and refresh again.
    InUse,
}

impl From<modules::RefreshError> for InitError {
    fn from(e: modules::RefreshError) -> InitError {
        match e {
            modules::RefreshError::Busy => InitError::Busy,
            modules::RefreshError::InUse => InitError::InUse,
        }
    }
}

impl core::fmt::Display for InitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            InitError::Busy => "libraries kept being loaded or unloaded while the module table was read",
            InitError::InUse => {
                "a walk or table guard still holds the module table replaced by the previous refresh"
            }
        })
    }
}

impl std::error::Error for InitError {}

/// Builds the module table and records this thread's stack bounds:
/// [`crate::init`] without readying the sample ring, for the reporters
/// inside the crate. Returns the table's generation.
pub(crate) fn init_table() -> Result<u64, InitError> {
    register_thread();
    refresh()
}

/// Rebuilds the module table from the loader's list of objects. Not
/// async-signal-safe; walks running meanwhile keep using the previous table.
///
/// The table it replaces stays intact, so a thread may refresh while it
/// holds a [`LiveWalker`] or a table guard. The next refresh
/// reuses that table's memory: it first waits for walks and guards still
/// on it, at most `REFRESH_WAIT` (two seconds), and then fails with
/// [`InitError::InUse`], changing nothing. So drop guards and walkers
/// before refreshing a second time.
pub fn refresh() -> Result<u64, InitError> {
    crate::discover::refresh().map_err(InitError::from)
}

/// Records the calling thread's stack bounds so walks on this thread,
/// including from signal handlers, read its stack without probing. Threads
/// that never call it are walked too, with a checked read (a system call)
/// per stack page. On Linux the bounds go in a fixed table, not in
/// thread-local storage, until the thread exits; with 4,096 threads
/// registered at once (or a crowded corner of the table) a thread stays
/// unregistered. Not async-signal-safe.
pub fn register_thread() {
    crate::sys::register_thread();
}

/// Captures the registers of the calling function, just after the capture.
/// The pc is a return address (the walk looks it up as `pc - 1`).
#[inline(always)]
pub fn capture() -> Regs {
    crate::arch::native::capture()
}

/// A live walk from `regs`. `pc_kind` says whether the pc is an exact
/// instruction (a signal context) rather than a return address. `None`
/// before [`init`](crate::init). The walker pins the module table: the refresh after the
/// one that replaces it waits for it (see [`refresh`]).
pub fn walker(regs: Regs, pc_kind: PcKind, opts: WalkOptions) -> Option<LiveWalker> {
    let table = modules::current()?;
    let mem = LiveMemory::new(Native::sp(&regs));
    Some(Walker::new(regs, pc_kind, mem, table, opts))
}

/// Walks from `regs` into `out`; returns the number of frames written (0
/// before [`init`](crate::init)); `out` past them is unspecified ([`Walker::fill`]).
/// Allocation-free, lock-free and async-signal-safe.
pub fn walk_from(regs: Regs, pc_kind: PcKind, opts: WalkOptions, out: &mut [Frame]) -> usize {
    // Built in place rather than through `walker`: moving the walker out of
    // an `Option` costs a copy of it per walk.
    let Some(table) = modules::current() else {
        return 0;
    };
    let mem = LiveMemory::new(Native::sp(&regs));
    LiveWalker::new(regs, pc_kind, mem, table, opts).fill(out)
}

/// Walks from `regs` into `out` for a report, and says whether the stack
/// goes on beyond it (frames the report leaves out).
pub(crate) fn walk_for_report(regs: Regs, pc_kind: PcKind, out: &mut [Frame]) -> (usize, bool) {
    let opts = WalkOptions {
        max_depth: out.len().saturating_add(1),
        ..WalkOptions::default()
    };
    let Some(mut w) = walker(regs, pc_kind, opts) else {
        return (0, false);
    };
    let n = w.fill(out);
    // Through `fill` again, not `next`: a second caller of the general
    // step would take it out of line in every walk.
    (n, n == out.len() && w.fill(&mut [Frame::default()]) == 1)
}

/// The default options with `out`'s length as the depth limit: the walks
/// that take no options fill the buffer they are given, however long.
fn filling(out: &[Frame]) -> WalkOptions {
    WalkOptions {
        max_depth: out.len(),
        ..WalkOptions::default()
    }
}

/// Walks the calling thread's stack from the caller of this function into
/// `out`; returns the number of frames written. Frame 0 is the function
/// that calls `walk_here`, at the call instruction (precise, `:pc`). The
/// walk goes on until the stack ends or `out` is full: `out`'s length is
/// the depth limit.
#[inline(always)]
pub fn walk_here(out: &mut [Frame]) -> usize {
    let (regs, pc_kind) = capture_here();
    walk_from(regs, pc_kind, filling(out), out)
}

/// Captures the calling function's registers with the pc at the call
/// instruction itself: `(regs, true)`. Where the call cannot be decoded the
/// pc stays the return address: `(regs, false)`. Pass the flag as
/// its [`PcKind`] to [`walk_from`] or [`walker`].
#[inline(always)]
pub fn capture_here() -> (Regs, PcKind) {
    let mut regs = capture();
    // SAFETY: `regs` comes straight from `capture`.
    let precise = unsafe { crate::arch::native::call_site(&mut regs, read_got_slot) };
    (regs, PcKind::exact_if(precise))
}

/// Reads the GOT slot a call before `ra` names: directly where it lies in
/// the data of a module read directly that `ra` is in (the usual case: the
/// main program), otherwise through a checked read (a system call), since
/// the bytes may not be a call at all.
#[cold]
fn read_got_slot(ra: u64, slot: u64) -> Option<u64> {
    let direct = modules::current().is_some_and(|t| t.direct_readable(ra.wrapping_sub(1), slot, 8));
    let mut word = [0u8; 8];
    if direct {
        // SAFETY: the slot lies in a readable segment of a module that is
        // never unloaded and whose file cannot shrink.
        word = unsafe { core::ptr::read_unaligned(slot as *const [u8; 8]) };
    } else if !crate::sys::read_checked(slot, &mut word) {
        return None;
    }
    Some(u64::from_le_bytes(word))
}

/// The interrupted registers held by a signal handler's `ucontext_t`.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`, such as the third argument of an
/// `SA_SIGINFO` handler.
pub unsafe fn regs_from_ucontext(uc: *const c_void) -> Regs {
    // SAFETY: forwarded from the caller.
    unsafe { crate::arch::regs_from_ucontext(uc) }
}

/// Walks from a signal handler's `ucontext_t` into `out`: frame 0 is the
/// interrupted instruction (precise). Like [`walk_here`], it stops where
/// the stack ends or `out` is full. Allocation-free, lock-free and
/// async-signal-safe.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`, such as the third argument of an
/// `SA_SIGINFO` handler.
pub unsafe fn walk_ucontext(uc: *const c_void, out: &mut [Frame]) -> usize {
    // SAFETY: forwarded from the caller.
    let regs = unsafe { regs_from_ucontext(uc) };
    walk_from(regs, PcKind::Exact, filling(out), out)
}

#[cfg(test)]
mod tests {
    /// `<T as NotSend<_>>::check()` compiles only while `T` is not `Send`:
    /// for a `Send` type both impls apply and the call is ambiguous.
    trait NotSend<A> {
        fn check() {}
    }
    impl<T: ?Sized> NotSend<()> for T {}
    struct IsSend;
    impl<T: ?Sized + Send> NotSend<IsSend> for T {}

    /// A reader sent to another thread read its stack after the thread had
    /// exited and glibc had unmapped it: SIGSEGV in safe code.
    #[test]
    fn a_live_reader_and_a_live_walker_stay_on_their_thread() {
        <crate::memory::LiveMemory as NotSend<_>>::check();
        <super::LiveWalker as NotSend<_>>::check();
    }
}
