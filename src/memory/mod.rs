//! The bounded memory reader: the only way the walker reads memory it does
//! not own.
//!
//! The walk is generic over [`MemoryReader`], so the same step logic runs on
//! the live process (through the OS layer's checked reads, which only touches the
//! thread's stack and mapped code) and on a captured stack in tests
//! ([`SliceMemory`]).

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A source of memory for the walker. Every read names its address range and
/// fails (returns `false` / `None`) rather than faulting when the range is not
/// known to be readable.
pub trait MemoryReader {
    /// Fills `buf` with the bytes at `addr..addr + buf.len()`. Returns `false`
    /// and leaves `buf` unspecified if any byte of the range is not readable.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    /// Called when the walk crosses a signal frame onto the stack holding
    /// `sp`, which may be another stack (the handler ran on an alternate
    /// one). Readers that bound reads by stack may admit that stack now.
    fn enter_stack(&self, sp: u64) {
        let _ = sp;
    }

    /// Whether `addr` lies in a stack this reader already knows to be
    /// readable (so it is data, never code). The default knows none.
    fn is_stack(&self, addr: u64) -> bool {
        let _ = addr;
        false
    }

    /// Reads a native-endian `u64` at `addr` (any alignment).
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_ne_bytes(b))
    }

    /// Reads the two native-endian `u64`s at `addr` and `addr + 8` (a
    /// frame record: saved frame pointer, return address).
    fn read_u64_pair(&self, addr: u64) -> Option<[u64; 2]> {
        Some([self.read_u64(addr)?, self.read_u64(addr.checked_add(8)?)?])
    }

    /// [`Self::read_u64`] for the walk's hot path, which may also give
    /// `None` where this reader would need a slow read (a system call): the
    /// walk then leaves that frame to its general step, which reads with
    /// [`Self::read_u64`]. The default is that.
    #[inline(always)]
    fn read_u64_fast(&self, addr: u64) -> Option<u64> {
        self.read_u64(addr)
    }

    /// [`Self::read_u64_pair`] for the walk's hot path, as
    /// [`Self::read_u64_fast`] is for [`Self::read_u64`].
    #[inline(always)]
    fn read_u64_pair_fast(&self, addr: u64) -> Option<[u64; 2]> {
        self.read_u64_pair(addr)
    }

    /// Reads a native-endian `u32` at `addr` (any alignment).
    fn read_u32(&self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b).then(|| u32::from_ne_bytes(b))
    }

    /// Whether the native-endian words at `addr..addr + 8 * expected.len()`
    /// are all readable and equal to `expected`, as loaded now (how a
    /// remembered walk end checks its window of stack words, held in a
    /// shared cache). The default reads blocks of eight words; a reader of
    /// directly readable memory compares in place, without a copy.
    fn words_are(&self, addr: u64, expected: &[AtomicU64]) -> bool {
        words_are_by_blocks(self, addr, expected)
    }
}

/// [`MemoryReader::words_are`] through `mem`'s reads, eight words at a
/// time: the default, and a reader's way where it cannot compare in place.
pub(crate) fn words_are_by_blocks<M: MemoryReader + ?Sized>(
    mem: &M,
    addr: u64,
    expected: &[AtomicU64],
) -> bool {
    let mut at = addr;
    for block in expected.chunks(8) {
        let mut buf = [0u8; 64];
        let bytes = &mut buf[..block.len() * 8];
        if !mem.read(at, bytes) {
            return false;
        }
        let same = bytes
            .chunks_exact(8)
            .zip(block)
            .all(|(b, e)| b == e.load(Relaxed).to_ne_bytes());
        if !same {
            return false;
        }
        at = at.wrapping_add(64);
    }
    true
}

impl<M: MemoryReader + ?Sized> MemoryReader for &M {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        (**self).read(addr, buf)
    }
    fn enter_stack(&self, sp: u64) {
        (**self).enter_stack(sp)
    }
    fn is_stack(&self, addr: u64) -> bool {
        (**self).is_stack(addr)
    }
    fn read_u64(&self, addr: u64) -> Option<u64> {
        (**self).read_u64(addr)
    }
    fn read_u64_pair(&self, addr: u64) -> Option<[u64; 2]> {
        (**self).read_u64_pair(addr)
    }
    fn read_u64_fast(&self, addr: u64) -> Option<u64> {
        (**self).read_u64_fast(addr)
    }
    fn read_u64_pair_fast(&self, addr: u64) -> Option<[u64; 2]> {
        (**self).read_u64_pair_fast(addr)
    }
    fn words_are(&self, addr: u64, expected: &[AtomicU64]) -> bool {
        (**self).words_are(addr, expected)
    }
}

/// Memory made of a few byte slices placed at chosen addresses: a captured
/// stack, a copy of some code, a synthetic section.
///
/// ```
/// use stackmark::memory::{MemoryReader, SliceMemory};
/// let stack = 0x1122_3344_5566_7788u64.to_ne_bytes();
/// let regions = [(0x7000, &stack[..])];
/// let mem = SliceMemory::new(&regions);
/// assert_eq!(mem.read_u64(0x7000), Some(0x1122_3344_5566_7788));
/// assert_eq!(mem.read_u64(0x7001), None); // runs past the end
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SliceMemory<'a> {
    regions: &'a [(u64, &'a [u8])],
}

impl<'a> SliceMemory<'a> {
    /// Memory holding each `(address, bytes)` region; everything else is unreadable.
    pub fn new(regions: &'a [(u64, &'a [u8])]) -> Self {
        SliceMemory { regions }
    }
}

impl MemoryReader for SliceMemory<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        for &(base, bytes) in self.regions {
            let Some(off) = addr.checked_sub(base) else {
                continue;
            };
            let Ok(off) = usize::try_from(off) else {
                continue;
            };
            if let Some(src) = off
                .checked_add(buf.len())
                .and_then(|end| bytes.get(off..end))
            {
                buf.copy_from_slice(src);
                return true;
            }
        }
        false
    }
}

/// `*v`, loaded at its own width. Out-of-line callers (the hot loop, a
/// replay) hand values back through memory a field at a time; a struct
/// copy would load them in wider pieces, and a load that spans two pending
/// stores cannot take its value from the store buffer: it waits until they
/// reach the cache (a store-forwarding stall, about 5 ns a walk).
#[inline(always)]
pub(crate) fn load_at_width<T: Copy>(v: &T) -> T {
    // SAFETY: a reference is valid and aligned for a read of `T`.
    unsafe { core::ptr::read_volatile(v) }
}

mod live;
pub use live::{current_altstack, LiveMemory};
