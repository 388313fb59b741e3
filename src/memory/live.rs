//! The live stack reader, the same on Linux and macOS: it reads only this
//! thread's stacks, found from the bounds the OS module records and by
//! probing pages with its checked read.

use core::cell::Cell;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::MemoryReader;
use crate::sys::{read_checked, registered_stack};

const PAGE: u64 = 4096;

/// How far above a walk's starting sp an unregistered stack may be probed.
const PROBE_LIMIT: u64 = 64 << 20;

/// How many unreadable pages above a walk's first sp an unregistered
/// stack may start: a guard page (or a few) that an overflowing sp sits in.
const GUARD_PAGES: u32 = 64;

/// Whether the page at `page` can be read.
fn probe(page: u64) -> bool {
    let mut b = [0u8; 1];
    read_checked(page, &mut b)
}

/// The alternate signal stack, if this thread is running on it.
pub fn current_altstack() -> Option<(u64, u64)> {
    // SAFETY: sigaltstack with a null new stack only reports the current one.
    let ss = unsafe {
        let mut ss: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut ss) != 0 {
            return None;
        }
        ss
    };
    (ss.ss_flags & libc::SS_ONSTACK != 0)
        .then(|| (ss.ss_sp as u64, ss.ss_sp as u64 + ss.ss_size as u64))
}

/// `sp`'s page, or `lo` if that is higher, if `sp` lies in `lo..hi`.
#[inline(always)]
fn sp_page_in(lo: u64, hi: u64, sp: u64) -> Option<u64> {
    (sp >= lo && sp < hi).then(|| lo.max(sp & !(PAGE - 1)))
}

/// Where a known stack `lo..hi` is read from by a walk at `sp`: `sp`'s page
/// if `sp` lies in it, else where it was.
#[inline(always)]
fn below_sp(lo: u64, hi: u64, sp: u64) -> u64 {
    sp_page_in(lo, hi, sp).unwrap_or(lo)
}

/// Where the registered stack `lo..hi` is read from by a walk whose first
/// sp is `sp`: `sp`'s page if `sp` lies in it, else nowhere (`hi`, an empty
/// range) until the walk crosses a signal frame onto it. Only from a stack
/// pointer up is a stack surely mapped: registered bounds may hold pages
/// that are not (a guard page a program made itself inside a stack it gave
/// a thread; the main thread's room to grow, which with an unlimited stack
/// rlimit reaches down to the heap). A walk starting elsewhere (an
/// alternate signal stack, a fiber, a guard page after an overflow) learns
/// its own stack by probing pages instead.
#[inline(always)]
fn registered_from(lo: u64, hi: u64, sp: u64) -> u64 {
    sp_page_in(lo, hi, sp).unwrap_or(hi)
}

/// One stack range: `lo..hi` is known readable; `hi` may grow by probing
/// pages up to `limit`.
#[derive(Clone, Copy, Debug, Default)]
struct Region {
    lo: u64,
    hi: u64,
    limit: u64,
    /// Found by probing (a stack nobody registered): it is read only
    /// through checked reads, since a probe proves only that the page was
    /// readable then, and memory the thread does not own (the next stack
    /// of a fiber pool, a heap trimmed under a coroutine's stack) may be
    /// unmapped by another thread meanwhile.
    checked: bool,
}

/// A region's known part as one subtraction and one compare check it: a
/// read of up to 16 bytes at `addr` lies in `lo..hi` when `addr - lo`
/// (wrapping) is below `room`, the count of start addresses with 16 bytes
/// before `hi` (0 for a region shorter than that, which nothing passes).
/// A shorter read in the region's last 15 bytes fails here and takes the
/// slow check, which answers the same: a hot read pays four instructions
/// for its check where an overflow check and two compares against the
/// bounds took eight.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    lo: u64,
    room: u64,
}

impl Window {
    fn of(r: Region) -> Window {
        Window {
            lo: r.lo,
            room: r.hi.saturating_sub(r.lo).saturating_sub(15),
        }
    }

    /// Whether a read of up to 16 bytes at `addr` lies in the region.
    #[inline(always)]
    fn holds(self, addr: u64) -> bool {
        addr.wrapping_sub(self.lo) < self.room
    }
}

/// How a range may be read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// In this thread's own stack: directly.
    Direct,
    /// In a probed region: through [`read_checked`].
    Checked,
    /// Not at all.
    No,
}

/// The live stack reader: direct reads inside this thread's registered
/// stack and its alternate signal stack, page probes (with
/// `read_checked`) to discover an unregistered stack's extent upwards
/// from the walk's sp, page by page, checked reads there, and nothing
/// else. What it reads is contiguous with a stack pointer of the walk, so
/// it never reads the heap or another thread's stack, unless one is mapped
/// directly above an unregistered stack's top with no gap (read, then,
/// only through checked reads).
///
/// It belongs to the thread that made it (it is neither `Send` nor `Sync`,
/// and so neither is a [`crate::LiveWalker`]): its ranges are that thread's
/// stack, which another thread could read after it has exited and its
/// stack is unmapped.
#[derive(Debug)]
pub struct LiveMemory {
    regions: [Cell<Region>; 4],
    /// Region 0's known part as the hot reads check it ([`Window`]), kept
    /// in step with it by [`Self::set_region`].
    window: Cell<Window>,
    count: Cell<usize>,
    /// The walk's first sp while the regions beyond the registered stack
    /// are still to be learned ([`Self::learn`]).
    unlearned: Cell<Option<u64>>,
    /// Keeps the reader on its thread.
    _thread: core::marker::PhantomData<*const ()>,
}

impl LiveMemory {
    /// A reader for a walk whose first frame has stack pointer `sp`. It
    /// knows the registered stack at once; the rest (the alternate signal
    /// stack, an unregistered stack) only when a read falls outside it.
    /// Built in one go, so a walker holding it is built in place, without
    /// copying it through a temporary.
    #[inline(always)]
    pub fn new(sp: u64) -> Self {
        let (first, count) = match registered_stack() {
            Some((lo, hi)) => (
                Region {
                    lo: registered_from(lo, hi, sp),
                    hi,
                    limit: hi,
                    checked: false,
                },
                1,
            ),
            // Region 0 is the registered stack's alone, read directly
            // on the hot path: empty here.
            None => (Region::default(), 1),
        };
        LiveMemory {
            regions: [
                Cell::new(first),
                Cell::default(),
                Cell::default(),
                Cell::default(),
            ],
            window: Cell::new(Window::of(first)),
            count: Cell::new(count),
            unlearned: Cell::new(Some(sp)),
            _thread: core::marker::PhantomData,
        }
    }

    /// Learns, once, the regions a walk starting off the registered stack
    /// needs: the alternate signal stack (worth its system call only
    /// there) and the stack holding the first sp.
    #[inline(always)]
    fn learn(&self) {
        if self.unlearned.get().is_some() {
            self.learn_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn learn_now(&self) {
        // Only the registered stack is known yet: a walk starting on it
        // needs nothing more.
        let Some(sp) = self.unlearned.take().filter(|&sp| !self.holds(sp)) else {
            return;
        };
        if let Some((lo, hi)) = current_altstack() {
            // As a registered stack, only from an sp up: the range a
            // program declares may hold pages it never mapped (a guard of
            // its own). This very frame is on it, since the thread runs
            // there; a walk starting on it opens it from its own sp.
            let anchor = 0u8;
            let here = core::hint::black_box(&anchor) as *const u8 as u64;
            let from = sp_page_in(lo, hi, sp)
                .or_else(|| sp_page_in(lo, hi, here))
                .unwrap_or(hi);
            self.push(Region {
                lo: from,
                hi,
                limit: hi,
                checked: false,
            });
        }
        self.admit(sp);
    }

    /// Whether `addr` lies in the part of a region known to be readable.
    fn proven(&self, addr: u64) -> bool {
        self.regions[..self.count.get()].iter().any(|r| {
            let r = r.get();
            addr >= r.lo && addr < r.hi
        })
    }

    /// Whether a known region may hold `sp`.
    fn holds(&self, sp: u64) -> bool {
        self.regions[..self.count.get()]
            .iter()
            .any(|r| sp >= r.get().lo && sp < r.get().limit)
    }

    /// Admits the stack holding `sp`, from `sp`'s page upwards, unless a
    /// known region's proven part holds it. Past that part a region is
    /// only a guess (an unregistered stack may end at its next page): a
    /// second stack a little above it, behind an unreadable gap, would be
    /// lost if its sp were taken for part of the first.
    fn admit(&self, sp: u64) {
        if sp != 0 && !self.proven(sp) {
            let lo = sp & !(PAGE - 1);
            self.push(Region {
                lo,
                hi: lo,
                limit: lo.saturating_add(PROBE_LIMIT),
                checked: true,
            });
        }
    }

    /// Sets region `i`, and with region 0 the hot reads' window.
    fn set_region(&self, i: usize, r: Region) {
        self.regions[i].set(r);
        if i == 0 {
            self.window.set(Window::of(r));
        }
    }

    fn push(&self, r: Region) {
        let n = self.count.get();
        if n < self.regions.len() {
            self.set_region(n, r);
            self.count.set(n + 1);
        }
    }

    /// Whether `addr..end` lies in the first region's known part, where
    /// most reads fall. Region 0 is empty (all zero) until one is pushed,
    /// so no range passes before then.
    #[inline(always)]
    fn in_first(&self, addr: u64, end: u64) -> bool {
        let first = self.regions[0].get();
        addr >= first.lo && end <= first.hi
    }

    /// The slow check: every region, probing pages where needed.
    #[cold]
    #[inline(never)]
    fn readable(&self, addr: u64, end: u64) -> Access {
        self.learn();
        for i in 0..self.count.get() {
            let mut r = self.regions[i].get();
            if addr < r.lo || end > r.limit {
                continue;
            }
            let covered = prove(&mut r, addr, end);
            self.set_region(i, r);
            // A region whose stack ended short of the range leaves it to
            // the others (a stack above a gap).
            if covered {
                return if r.checked {
                    Access::Checked
                } else {
                    Access::Direct
                };
            }
        }
        Access::No
    }
}

/// Probes pages of `r` until `addr..end` is proven readable; `false` if
/// the stack ends first (its limit then drops to where it ended).
fn prove(r: &mut Region, addr: u64, end: u64) -> bool {
    // Nothing proved yet: the stack starts at sp's page, or, where sp sits
    // in a guard page (an overflow), at the first readable page a few
    // above. It never jumps over readable memory to what is read: that
    // could be any mapping, not this stack.
    if r.hi == r.lo {
        let mut skipped = 0;
        while !probe(r.lo) {
            skipped += 1;
            if skipped > GUARD_PAGES || r.lo.saturating_add(PAGE) >= r.limit {
                r.limit = r.lo;
                return false;
            }
            r.lo += PAGE;
        }
        r.hi = r.lo + PAGE;
        if addr < r.lo {
            return false;
        }
    }
    // Probe whole pages until the range is covered; the first unreadable
    // one ends the stack.
    while end > r.hi {
        let Some(next) = r.hi.checked_add(PAGE).filter(|_| probe(r.hi)) else {
            r.limit = r.hi;
            return false;
        };
        r.hi = next;
    }
    true
}

impl LiveMemory {
    /// How `addr..addr + len` may be read: the first region's known part
    /// (the registered stack) at once, else every region, probing pages.
    #[inline(always)]
    fn covers(&self, addr: u64, len: u64) -> Access {
        match addr.checked_add(len) {
            Some(end) if self.in_first(addr, end) => Access::Direct,
            Some(end) => self.readable(addr, end),
            None => Access::No,
        }
    }

    /// `N` words (one or two) at `addr` (any alignment) where they may be
    /// read directly, without a byte copy loop; `None` elsewhere, a probed
    /// region included. The registered stack's check is inline, the rest
    /// out of line and answering only yes or no, so the hot loops keep
    /// their registers.
    #[inline(always)]
    fn load_direct<const N: usize>(&self, addr: u64) -> Option<[u64; N]> {
        const { assert!(N <= 2, "the window holds reads of 16 bytes at most") };
        if !self.window.get().holds(addr) {
            let end = addr.checked_add(N as u64 * 8)?;
            if self.readable(addr, end) != Access::Direct {
                return None;
            }
        }
        // SAFETY: the range lies in this thread's own stack (registered or
        // alternate), as the window or `readable` established, which stays
        // mapped while the thread runs this code.
        Some(unsafe { core::ptr::read_unaligned(addr as *const [u64; N]) })
    }

    /// `N` words (one or two) at `addr`: directly where they may be read
    /// so, else through a checked read in a probed region.
    #[inline(always)]
    fn load<const N: usize>(&self, addr: u64) -> Option<[u64; N]> {
        match self.covers(addr, N as u64 * 8) {
            // SAFETY: the range lies in this thread's own stack, as in
            // `load_direct`.
            Access::Direct => Some(unsafe { core::ptr::read_unaligned(addr as *const [u64; N]) }),
            Access::Checked => load_checked(addr),
            Access::No => None,
        }
    }
}

/// `N` words (one or two) at `addr`, in a probed region, through one
/// checked read.
#[cold]
#[inline(never)]
fn load_checked<const N: usize>(addr: u64) -> Option<[u64; N]> {
    let mut b = [0u8; 16];
    if !read_checked(addr, b.get_mut(..N * 8)?) {
        return None;
    }
    Some(core::array::from_fn(|i| {
        u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]))
    }))
}

impl MemoryReader for LiveMemory {
    /// Inlined: the replay of a remembered walk end reads its window with
    /// one call, and out of line it costs some 20 instructions a walk.
    #[inline]
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        match self.covers(addr, buf.len() as u64) {
            Access::Direct => {
                // SAFETY: as in `load`: the range lies in this thread's own
                // stack.
                unsafe {
                    core::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len())
                };
                true
            }
            Access::Checked => read_checked(addr, buf),
            Access::No => false,
        }
    }

    #[inline]
    fn read_u64(&self, addr: u64) -> Option<u64> {
        self.load::<1>(addr).map(|[w]| w)
    }

    #[inline]
    fn read_u64_pair(&self, addr: u64) -> Option<[u64; 2]> {
        self.load(addr)
    }

    /// The hot read of the walk: direct reads only.
    #[inline(always)]
    fn read_u64_fast(&self, addr: u64) -> Option<u64> {
        self.load_direct::<1>(addr).map(|[w]| w)
    }

    /// A frame record in the hot loops: both words under one check, direct
    /// reads only.
    #[inline(always)]
    fn read_u64_pair_fast(&self, addr: u64) -> Option<[u64; 2]> {
        self.load_direct(addr)
    }

    /// In place: the window of a remembered walk end is read once, with
    /// no copy, and every word is compared (no early exit to predict).
    #[inline]
    fn words_are(&self, addr: u64, expected: &[AtomicU64]) -> bool {
        if expected.is_empty() {
            return true;
        }
        match self.covers(addr, expected.len() as u64 * 8) {
            Access::Direct => {}
            Access::Checked => return crate::memory::words_are_by_blocks(self, addr, expected),
            Access::No => return false,
        }
        let words = addr as *const u64;
        let mut diff = 0;
        for (i, e) in expected.iter().enumerate() {
            // SAFETY: as in `load`: `covers` established that the whole
            // range lies in this thread's stack.
            let v = unsafe { core::ptr::read_unaligned(words.wrapping_add(i)) };
            diff |= v ^ e.load(Relaxed);
        }
        diff == 0
    }

    /// The known-readable part of each stack: never code.
    #[inline]
    fn is_stack(&self, addr: u64) -> bool {
        self.learn();
        self.proven(addr)
    }

    /// Admits the stack holding `sp`, from `sp`'s page upwards. A known
    /// region holding it now starts there: the walk goes on upwards.
    fn enter_stack(&self, sp: u64) {
        self.learn();
        for i in 0..self.count.get() {
            let r = self.regions[i].get();
            self.set_region(
                i,
                Region {
                    lo: below_sp(r.lo, r.hi, sp),
                    ..r
                },
            );
        }
        // The registered stack, still closed to a walk that started off
        // it, opens from the interrupted sp up.
        if let Some((lo, hi)) = registered_stack() {
            let first = self.regions[0].get();
            if self.count.get() > 0 && first.lo == hi && first.hi == hi {
                let from = registered_from(lo, hi, sp);
                self.set_region(0, Region { lo: from, ..first });
            }
        }
        self.admit(sp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk off every known stack (an alternate stack set up with
    /// `SS_AUTODISARM`, which reports none) crosses a signal frame onto a
    /// stack a little above, behind an unreadable page. The new sp was
    /// taken for part of the first, probed stack, whose probing then
    /// stopped at the gap: every frame beyond the signal frame was lost.
    #[test]
    fn a_second_stack_just_above_an_unregistered_one_behind_a_gap_is_read() {
        const P: usize = PAGE as usize;
        let pages = stackmark_fixtures::Mapping::new(9 * P);
        pages.protect(4 * P, P, libc::PROT_NONE);
        let base = pages.addr();
        let (sp_a, sp_b) = (base + 0x100, base + 5 * PAGE + 0x100);
        // SAFETY: inside the mapping, in a readable page.
        unsafe { (sp_b as *mut u64).write(0x1234) };
        let mem = LiveMemory::new(sp_a);
        let first = mem.read_u64(sp_a);
        mem.enter_stack(sp_b);
        let second = mem.read_u64(sp_b);
        // The gap itself stays unread.
        let gap = mem.read_u64(base + 4 * PAGE);
        assert_eq!((first, second, gap), (Some(0), Some(0x1234), None));
    }

    /// The window passes exactly the reads of 16 bytes that lie in the
    /// region, whatever wraps around, and nothing of an empty region.
    #[test]
    fn the_window_holds_the_reads_that_lie_in_its_region() {
        let region = |lo, hi| Region {
            lo,
            hi,
            limit: hi,
            checked: false,
        };
        for (lo, hi) in [
            (0x7000u64, 0x9000u64),
            (0, 0x40),
            (u64::MAX - 0x40, u64::MAX),
        ] {
            let w = Window::of(region(lo, hi));
            for addr in [
                lo.wrapping_sub(16),
                lo.wrapping_sub(1),
                lo,
                lo + 1,
                hi - 16,
                hi - 15,
                hi - 1,
                hi,
                u64::MAX,
            ] {
                let fits = addr >= lo && addr.checked_add(16).is_some_and(|end| end <= hi);
                assert_eq!(w.holds(addr), fits, "{addr:#x} in {lo:#x}..{hi:#x}");
            }
        }
        for (lo, hi) in [(0, 0), (0x7000, 0x7000), (0x7000, 0x700f)] {
            let w = Window::of(region(lo, hi));
            for addr in [0, lo, lo.wrapping_sub(1), hi, u64::MAX] {
                assert!(!w.holds(addr), "{addr:#x} in {lo:#x}..{hi:#x}");
            }
        }
        let w = Window::of(region(0x7000, 0x7010));
        assert!(w.holds(0x7000) && !w.holds(0x7001) && !w.holds(0x6fff));
    }
}
