//! The two tables in static memory, which one is published, and the
//! guards that keep a table in use while a refresh builds the other.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

use super::{Module, Table};

/// How long a refresh waits for walks and guards still on the table it is
/// about to reuse (the one the refresh before it replaced) before it gives
/// up with [`RefreshError::InUse`]. A walk takes microseconds; only a guard
/// or walker held across two refreshes, or pinned by a thread that no
/// longer runs (see [`RefreshError::InUse`]), lasts this long.
pub const REFRESH_WAIT: core::time::Duration = core::time::Duration::from_secs(2);

/// The two tables and the state that publishes one of them.
pub(crate) struct Registry {
    tables: [UnsafeCell<Table>; 2],
    /// Index of the published table; `usize::MAX` before the first refresh.
    active: AtomicUsize,
    readers: [AtomicUsize; 2],
    writing: AtomicBool,
    generation: AtomicUsize,
    /// Index of a table a refresh in a parent was writing when the process
    /// forked (`usize::MAX`: none): in the child it may be half written,
    /// so the next refresh there clears it without releasing its copies.
    abandoned: AtomicUsize,
}

// SAFETY: a table is written only by the refresh that holds `writing`, and
// only while it is unpublished and has no readers (see
// `Registry::refresh_within`); published tables are only read.
unsafe impl Sync for Registry {}

pub(crate) static REGISTRY: Registry = Registry::new();

/// A pinned, published table. While it lives, no refresh reuses its memory
/// (see [`current`]).
pub struct TableGuard {
    /// The reader count that pins the table.
    readers: &'static AtomicUsize,
    /// The pinned table, resolved once: the walk dereferences the guard for
    /// every lookup. It is only handed out as a borrow of the guard.
    table: &'static Table,
}

impl core::ops::Deref for TableGuard {
    type Target = Table;
    #[inline(always)]
    fn deref(&self) -> &Table {
        self.table
    }
}

impl Drop for TableGuard {
    fn drop(&mut self) {
        self.readers.fetch_sub(1, SeqCst);
    }
}

impl core::fmt::Debug for TableGuard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TableGuard(gen {})", self.generation())
    }
}

/// Pins the published table. Lock-free and async-signal-safe. `None` before
/// the first refresh. The table stays intact while the guard lives: a
/// refresh replaces it at once, but the refresh after that, which reuses
/// its memory, waits for the guard (at most [`REFRESH_WAIT`], then fails
/// with [`RefreshError::InUse`]). Drop guards before refreshing twice.
pub fn current() -> Option<TableGuard> {
    REGISTRY.current()
}

/// Why a refresh did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshError {
    /// Images kept being loaded or unloaded through every attempt to read
    /// the loader's list (macOS).
    Busy,
    /// A walk or a guard still held the table this refresh would reuse
    /// (the one the previous refresh replaced) after [`REFRESH_WAIT`]: a
    /// [`TableGuard`] or walker kept across two refreshes, by this thread
    /// or another, or, in a child after `fork`, a walk that another thread
    /// of the parent had under way, which never ends. The published table
    /// stays as it was.
    InUse,
}

impl Registry {
    /// Two empty tables, none published.
    pub(crate) const fn new() -> Registry {
        Registry {
            tables: [UnsafeCell::new(Table::EMPTY), UnsafeCell::new(Table::EMPTY)],
            active: AtomicUsize::new(usize::MAX),
            readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            writing: AtomicBool::new(false),
            generation: AtomicUsize::new(0),
            abandoned: AtomicUsize::new(usize::MAX),
        }
    }

    /// In a child after `fork`: a refresh another thread of the parent was
    /// running never finishes here. Lets the next refresh run, and marks
    /// the table that refresh was writing as abandoned.
    pub(crate) fn forget_refresh_in_child(&self) {
        if self.writing.load(SeqCst) {
            // The slot `refresh_within` writes: 0 before the first refresh.
            let unpublished = 1usize.saturating_sub(self.active.load(SeqCst));
            self.abandoned.store(unpublished, SeqCst);
            self.writing.store(false, SeqCst);
        }
    }

    /// [`current`] for this registry.
    #[inline(always)]
    pub(crate) fn current(&'static self) -> Option<TableGuard> {
        loop {
            let idx = self.active.load(SeqCst);
            if idx > 1 {
                return None;
            }
            self.readers[idx].fetch_add(1, SeqCst);
            if self.active.load(SeqCst) == idx {
                // SAFETY: the reader count just pinned keeps refreshes from
                // writing this table until the guard is dropped, and the
                // guard lends the reference out no longer than it lives.
                let table = unsafe { &*self.tables[idx].get() };
                return Some(TableGuard {
                    readers: &self.readers[idx],
                    table,
                });
            }
            // A refresh switched tables in between: unpin and retry.
            self.readers[idx].fetch_sub(1, SeqCst);
        }
    }

    /// Fills the unpublished table with `fill(new, old)` and publishes it.
    /// `old` is the published table (empty at first), so `fill` can reuse
    /// per-module copies.
    ///
    /// The unpublished table is the one the previous refresh replaced, left
    /// intact until now for walks and guards that still had it. Those must
    /// finish first: this waits up to `wait` for them, then returns
    /// [`RefreshError::InUse`] with nothing changed. Once they have,
    /// `release(module)` is called for each of its modules whose copy the
    /// published table does not share, and it is refilled. Nothing waits
    /// for the table being replaced, so a thread may refresh while it holds
    /// a guard on it.
    ///
    /// Must not be called from a signal handler: it may wait for walks.
    pub(crate) fn refresh_within(
        &'static self,
        wait: core::time::Duration,
        fill: impl FnOnce(&mut Table, &Table),
        release: impl Fn((usize, usize)),
    ) -> Result<u64, RefreshError> {
        // Refreshes queue up behind each other; none runs in a signal handler.
        while self.writing.swap(true, SeqCst) {
            std::thread::yield_now();
        }
        let active = self.active.load(SeqCst);
        let (old_idx, new_idx) = if active > 1 {
            (1, 0)
        } else {
            (active, 1 - active)
        };
        // Walks and guards that pinned `new_idx` before the last switch must
        // finish first.
        let since = std::time::Instant::now();
        while self.readers[new_idx].load(SeqCst) != 0 {
            if since.elapsed() >= wait {
                self.writing.store(false, SeqCst);
                return Err(RefreshError::InUse);
            }
            std::thread::yield_now();
        }
        let generation = self.generation.fetch_add(1, SeqCst) as u64 + 1;
        // SAFETY: `new_idx` is unpublished and has no readers (checked
        // above, and `current` re-checks `active` after pinning); `writing`
        // excludes other refreshes. `old_idx` is only read here.
        let (new, old) = unsafe {
            (
                &mut *self.tables[new_idx].get(),
                &*self.tables[old_idx].get(),
            )
        };
        // Free what only the replaced table used: the published one may
        // share a copy with it, and the new one reuses only the published
        // one's. A table abandoned half written at a fork keeps its copies
        // (a few leak, once): which of them were mapped is not known.
        if self.abandoned.swap(usize::MAX, SeqCst) != new_idx {
            for c in new.modules().iter().flat_map(Module::copies) {
                if c.0 != 0 && !old.shares_copy(c) {
                    release(c);
                }
            }
        }
        new.clear();
        fill(new, old);
        new.finish(generation);
        self.active.store(new_idx, SeqCst);
        self.writing.store(false, SeqCst);
        Ok(generation)
    }
}

/// [`Registry::refresh_within`] on the live registry, waiting at most
/// `wait` ([`REFRESH_WAIT`] for a refresh the program asked for).
pub(crate) fn refresh_with(
    wait: core::time::Duration,
    fill: impl FnOnce(&mut Table, &Table),
    release: impl Fn((usize, usize)),
) -> Result<u64, RefreshError> {
    static AT_FORK: AtomicBool = AtomicBool::new(false);
    extern "C" fn in_child() {
        REGISTRY.forget_refresh_in_child();
    }
    crate::sys::once_in_fork_child(&AT_FORK, in_child);
    REGISTRY.refresh_within(wait, fill, release)
}

