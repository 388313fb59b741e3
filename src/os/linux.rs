//! Linux: the module table from `dl_iterate_phdr`, SFrame from
//! `PT_GNU_SFRAME` or the `.sframe` section, DWARF CFI from
//! `PT_GNU_EH_FRAME`, stack bounds, and reads that cannot fault.

use core::ffi::{c_int, c_void, CStr};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};

use crate::formats::cfi::{self, Cfi, EhFrameHdr};
use crate::formats::cursor::u64_at;
use crate::formats::elf::{
    self, Dynamic, ElfFile, ProgramHeader, PHDR_SIZE, PT_DYNAMIC, PT_GNU_EH_FRAME, PT_GNU_SFRAME,
    PT_LOAD, PT_NOTE,
};
use crate::formats::sframe::{PieceEntry, SFrame};
use crate::modules::{self, Module, RefreshError, Segment, Table, MAX_MODULES};

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
    unsafe { libc::getpid() == crate::crash::gettid() }
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

// --- Module discovery ---------------------------------------------------------

/// Reads a loaded module's memory while `dl_iterate_phdr` holds it loaded.
fn loaded<'a>(addr: u64, len: u64) -> Option<&'a [u8]> {
    if addr == 0 || len == 0 || len > (1 << 32) {
        return None;
    }
    // SAFETY: only called inside dl_iterate_phdr's callback for ranges inside
    // the module's own readable PT_LOAD segments, which stay mapped for the
    // duration of the callback.
    Some(unsafe { core::slice::from_raw_parts(addr as *const u8, len as usize) })
}

/// A file's bytes as far as a section lookup reads them: copied with
/// `pread` into an anonymous mapping as long as the file was, where the
/// parts never read are zero. Not a mapping of the file itself: a page of
/// that past the end of a file shortened meanwhile raises SIGBUS, and the
/// section headers sit at the end, on pages no loaded segment covers.
struct FileCopy {
    fd: i32,
    ptr: *mut c_void,
    len: usize,
}

impl FileCopy {
    fn open(path: &CStr) -> Option<Self> {
        // SAFETY: plain system calls on a NUL-terminated path; the mapping
        // is checked for MAP_FAILED and the fd is closed on every failure.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let mut st: libc::stat = core::mem::zeroed();
            let len = if libc::fstat(fd, &mut st) == 0 {
                st.st_size as usize
            } else {
                0
            };
            let ptr = if len > 0 {
                libc::mmap(
                    core::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            } else {
                libc::MAP_FAILED
            };
            if ptr == libc::MAP_FAILED {
                libc::close(fd);
                return None;
            }
            Some(FileCopy { fd, ptr, len })
        }
    }

    /// Copies the file's bytes `off..off + len`, as far as they lie within
    /// its length when opened and it still has them.
    fn fetch(&mut self, off: u64, len: u64) {
        let start = usize::try_from(off).unwrap_or(usize::MAX).min(self.len);
        let want = usize::try_from(len).unwrap_or(usize::MAX);
        let end = start.saturating_add(want).min(self.len);
        let mut at = start;
        while at < end {
            // SAFETY: `at..end` lies in the mapping of `len` bytes, which
            // this `&mut self` alone writes.
            let n = unsafe {
                libc::pread(
                    self.fd,
                    self.ptr.cast::<u8>().add(at).cast(),
                    end - at,
                    at as libc::off_t,
                )
            };
            if n <= 0 {
                break;
            }
            at += n as usize;
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes until drop.
        unsafe { core::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for FileCopy {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`, and closes its fd.
        unsafe {
            libc::munmap(self.ptr, self.len);
            libc::close(self.fd);
        }
    }
}

/// Where a module's SFrame data is at run time, from its file's section
/// headers: `.sframe` and the `.sframe.*` sections beside it
/// ([`ElfFile::sframe_extent`]). rust-lld and mold make no
/// `PT_GNU_SFRAME`, GNU ld's covers `.sframe` alone, and GNU ld 2.40's
/// overstates its size. Reads the ELF header, section 0 (which holds the
/// counts when they do not fit the header), the section headers and their
/// names, each once the one before says where.
fn sframe_from_file(path: &CStr, bias: u64) -> Option<(u64, u64)> {
    let mut file = FileCopy::open(path)?;
    file.fetch(0, 64);
    file.fetch(u64_at(file.bytes(), elf::E_SHOFF_AT)?, 64);
    let (at, len) = ElfFile::parse(file.bytes()).ok()?.section_headers_at();
    file.fetch(at, len);
    let (at, len) = ElfFile::parse(file.bytes()).ok()?.section_names_at()?;
    file.fetch(at, len);
    let (addr, size) = ElfFile::parse(file.bytes()).ok()?.sframe_extent()?;
    Some((bias.wrapping_add(addr), size))
}

/// Copies SFrame data into an anonymous mapping the table owns, validates it
/// there, and, for a concatenation of per-object pieces, builds the index of
/// its pieces after the data in the same mapping.
fn copy_sframe(addr: u64, len: u64) -> Option<(SFrame<'static>, (usize, usize))> {
    let src = loaded(addr, len)?;
    let slots_at = src
        .len()
        .next_multiple_of(core::mem::align_of::<PieceEntry>());
    // A slot per piece (an ordinary section's one goes unused).
    let slots = SFrame::count_pieces(src);
    let bytes = slots_at + slots * core::mem::size_of::<PieceEntry>();
    let size = bytes.div_ceil(PAGE as usize) * PAGE as usize;
    // SAFETY: a fresh anonymous mapping of `size` bytes, checked for failure;
    // the copy and the slots (aligned, each written before the slice over
    // them is formed) stay within it. Nothing writes to it once it is made
    // read-only.
    let (copy, slots): (&'static [u8], &'static mut [PieceEntry]) = unsafe {
        let p = libc::mmap(
            core::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        core::ptr::copy_nonoverlapping(src.as_ptr(), p.cast(), src.len());
        let first = p.cast::<u8>().add(slots_at).cast::<PieceEntry>();
        for i in 0..slots {
            first.add(i).write(PieceEntry::EMPTY);
        }
        (
            core::slice::from_raw_parts(p as *const u8, src.len()),
            core::slice::from_raw_parts_mut(first, slots),
        )
    };
    let mapping = (copy.as_ptr() as usize, size);
    match SFrame::parse(copy, addr) {
        Ok(s) => {
            let s = s.with_piece_index(slots);
            // SAFETY: the whole mapping made above; only reads follow.
            unsafe { libc::mprotect(mapping.0 as *mut c_void, size, libc::PROT_READ) };
            Some((s, mapping))
        }
        Err(_) => {
            release_copy(mapping);
            None
        }
    }
}

/// A module's DWARF CFI from its `PT_GNU_EH_FRAME` (`.eh_frame_hdr`, at
/// `hdr_addr`), while `dl_iterate_phdr` holds the module loaded. A module
/// mapped for good (`in_place`) is read where it lies, its `.eh_frame`
/// given up to the end of its segment (records are read only as far as
/// their lengths say); any other is copied into a mapping the table owns,
/// `.eh_frame` as far as its records go. Returns the CFI and the copy
/// (`(0, 0)` for none).
fn cfi_of(
    m: &Module,
    hdr_addr: u64,
    hdr_len: u64,
    in_place: bool,
) -> Option<(Cfi<'static>, (usize, usize))> {
    if !in_readable(m, hdr_addr, hdr_len) {
        return None;
    }
    let hdr = loaded(hdr_addr, hdr_len)?;
    let eh_frame_addr = EhFrameHdr::parse(hdr, hdr_addr).ok()?.eh_frame_ptr();
    let rest = loaded(
        eh_frame_addr,
        readable_end(m, eh_frame_addr)? - eh_frame_addr,
    )?;
    if in_place {
        let cfi = Cfi::new(hdr, hdr_addr, rest, crate::arch::native::CFI_REGISTERS).ok()?;
        return Some((cfi, (0, 0)));
    }
    let eh_frame = &rest[..cfi::extent(rest)];
    let eh_at = hdr.len().next_multiple_of(8);
    let size = (eh_at + eh_frame.len()).div_ceil(PAGE as usize) * PAGE as usize;
    // SAFETY: a fresh anonymous mapping of `size` bytes, checked for
    // failure; both copies lie within it, and nothing writes to it once it
    // is made read-only. Populated at once: the copy writes every page, and
    // one call maps them for less than a fault each.
    let (hdr_copy, eh_copy): (&'static [u8], &'static [u8]) = unsafe {
        let p = libc::mmap(
            core::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        let p = p.cast::<u8>();
        core::ptr::copy_nonoverlapping(hdr.as_ptr(), p, hdr.len());
        core::ptr::copy_nonoverlapping(eh_frame.as_ptr(), p.add(eh_at), eh_frame.len());
        libc::mprotect(p.cast(), size, libc::PROT_READ);
        (
            core::slice::from_raw_parts(p, hdr.len()),
            core::slice::from_raw_parts(p.add(eh_at), eh_frame.len()),
        )
    };
    let mapping = (hdr_copy.as_ptr() as usize, size);
    match Cfi::new(
        hdr_copy,
        hdr_addr,
        eh_copy,
        crate::arch::native::CFI_REGISTERS,
    ) {
        Ok(cfi) => Some((cfi, mapping)),
        Err(_) => {
            release_copy(mapping);
            None
        }
    }
}

fn release_copy((ptr, size): (usize, usize)) {
    if ptr != 0 {
        // SAFETY: `(ptr, size)` is a mapping made by `copy_sframe` or
        // `cfi_of` that no published table references any more.
        unsafe { libc::munmap(ptr as *mut c_void, size) };
    }
}

struct Fill<'a> {
    new: &'a mut Table,
    old: &'a Table,
    exe: &'a CStr,
    deps: &'a mut Deps,
    /// `AT_SYSINFO_EHDR` and `AT_BASE`: where the vDSO and the dynamic
    /// linker are mapped.
    vdso_and_interp: (u64, u64),
    /// Code a checked read runs: [`read_checked`] itself and the C
    /// library's `process_vm_readv` (a PLT stub in the program, where the
    /// program is not position-independent).
    reader_code: [u64; 2],
}

/// The most `DT_NEEDED` names remembered over all modules in one refresh.
const MAX_DEP_NAMES: usize = 2048;

/// What a refresh learns of each module's dependencies, to find the
/// modules that can never be unloaded: the main program, the dynamic
/// linker, the vDSO and `DF_1_NODELETE` objects (the roots), and
/// everything they depend on, which the loader keeps while they live.
/// Names are kept as 64-bit hashes.
struct Deps {
    /// Per module: the hashes of its soname and of its file name.
    names: [(u64, u64); MAX_MODULES],
    /// Per module: its `DT_NEEDED` hashes, `needed[first..first + count]`.
    ranges: [(u16, u16); MAX_MODULES],
    needed: [u64; MAX_DEP_NAMES],
    used: usize,
    pinned: [bool; MAX_MODULES],
    /// A module was left out of the table (it was full): its names are
    /// unknown, so a needed name may have meant it rather than a module of
    /// the same name that was kept.
    incomplete: bool,
}

impl Deps {
    fn new() -> Self {
        Deps {
            names: [(0, 0); MAX_MODULES],
            ranges: [(0, 0); MAX_MODULES],
            needed: [0; MAX_DEP_NAMES],
            used: 0,
            pinned: [false; MAX_MODULES],
            incomplete: false,
        }
    }

    /// Whether module `i` needs a module with these name hashes.
    fn needs(&self, i: usize, (soname, file): (u64, u64)) -> bool {
        let (first, n) = self.ranges[i];
        self.needed[first as usize..][..n as usize]
            .iter()
            .any(|&h| h == soname || h == file)
    }

    /// Whether module `j` shares a name with another of the first `count`:
    /// a library loaded by path beside a needed one of the same name (a
    /// second copy). A needed name cannot tell such modules apart.
    fn ambiguous(&self, j: usize, count: usize) -> bool {
        let (a, b) = self.names[j];
        (0..count).any(|k| {
            let (c, d) = self.names[k];
            k != j && [c, d].iter().any(|&h| h != 0 && (h == a || h == b))
        })
    }

    /// Marks, from the roots, every module some pinned module needs, until
    /// nothing changes; returns the pinned flags of the first `count`. A
    /// module another shares a name with is pinned only as a root: which
    /// of them the name meant is not known. Nor is it when a module was
    /// left out, whose names were never read: then only the roots are.
    fn close(&mut self, count: usize) -> &[bool] {
        if self.incomplete {
            return &self.pinned[..count];
        }
        loop {
            let mut changed = false;
            for j in 0..count {
                let needed = |i: usize| self.pinned[i] && self.needs(i, self.names[j]);
                if !self.pinned[j] && (0..count).any(needed) && !self.ambiguous(j, count) {
                    self.pinned[j] = true;
                    changed = true;
                }
            }
            if !changed {
                return &self.pinned[..count];
            }
        }
    }
}

/// FNV-1a: a name's hash for [`Deps`]; 0 stands for no name, and is never
/// recorded as needed, so nameless modules match nothing.
fn name_hash(name: &[u8]) -> u64 {
    if name.is_empty() {
        return 0;
    }
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The end of `m`'s readable segment holding `addr`.
fn readable_end(m: &Module, addr: u64) -> Option<u64> {
    m.segments()
        .iter()
        .find(|s| s.readable() && s.contains(addr))
        .map(|s| s.start + s.size)
}

/// Whether `[addr, addr + len)` lies inside one of `m`'s readable segments.
fn in_readable(m: &Module, addr: u64, len: u64) -> bool {
    readable_end(m, addr).is_some_and(|end| addr.checked_add(len).is_some_and(|e| e <= end))
}

/// Whether the copy `copy` (made by [`copy_sframe`], the section first)
/// holds the `len` loaded bytes at `addr`, which lie in a readable segment.
fn same_copy(copy: (usize, usize), addr: u64, len: u64) -> bool {
    let Some(now) = loaded(addr, len) else {
        return false;
    };
    if now.len() > copy.1 {
        return false;
    }
    // SAFETY: the copy's mapping is `copy.1` bytes, read-only and kept
    // until the old table is released, which is at the refresh after this.
    let old = unsafe { core::slice::from_raw_parts(copy.0 as *const u8, now.len()) };
    old == now
}

/// The NUL-terminated string at `addr` inside one of `m`'s readable
/// segments (at most 4 KiB), while `dl_iterate_phdr` holds `m` loaded.
fn loaded_str(m: &Module, addr: u64) -> Option<&[u8]> {
    let len = (readable_end(m, addr)? - addr).min(4096);
    let bytes = loaded(addr, len)?;
    bytes.iter().position(|&b| b == 0).map(|n| &bytes[..n])
}

/// Records `m`'s names and dependencies as module `index`, from its
/// dynamic section at `dynamic`; `root` says whether it is pinned whatever
/// depends on it.
fn record_deps(deps: &mut Deps, index: usize, m: &Module, dynamic: Option<(u64, u64)>, root: bool) {
    let file = m.name().rsplit(|&b| b == b'/').next().unwrap_or(&[]);
    let mut soname = 0;
    let first = deps.used;
    let mut nodelete = false;
    let d = dynamic
        .filter(|&(addr, len)| in_readable(m, addr, len))
        .and_then(|(addr, len)| loaded(addr, len))
        .map(Dynamic::parse);
    if let Some(d) = d {
        nodelete = d.nodelete;
        // The loader relocates DT_STRTAB in place where the dynamic section
        // is writable; elsewhere (the vDSO) it is still link-time.
        let strtab = d.strtab.and_then(|t| {
            [t, t.wrapping_add(m.bias)]
                .into_iter()
                .find(|&a| readable_end(m, a).is_some())
        });
        if let Some(strtab) = strtab {
            let at = |off: u64| loaded_str(m, strtab.wrapping_add(off));
            soname = d.soname.and_then(at).map_or(0, name_hash);
            for &off in d.needed() {
                if deps.used == MAX_DEP_NAMES {
                    break;
                }
                let hash = at(off).map_or(0, name_hash);
                if hash != 0 {
                    deps.needed[deps.used] = hash;
                    deps.used += 1;
                }
            }
        }
    }
    deps.names[index] = (soname, name_hash(file));
    deps.ranges[index] = (first as u16, (deps.used - first) as u16);
    deps.pinned[index] = root || nodelete;
}

unsafe extern "C" fn on_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our `Fill`.
    let (info, fill) = unsafe { (&*info, &mut *(data as *mut Fill<'_>)) };
    let bias = info.dlpi_addr;
    // SAFETY: dlpi_name, when set, is a NUL-terminated string owned by the
    // loader.
    let given = (!info.dlpi_name.is_null()).then(|| unsafe { CStr::from_ptr(info.dlpi_name) });
    // The main program is listed without a name.
    let is_main = given.is_none_or(|n| n.is_empty());
    let name = if is_main {
        fill.exe
    } else {
        given.unwrap_or(c"")
    };
    let mut m = Module::EMPTY;
    m.set_name(name.to_bytes());
    m.bias = bias;
    let phdrs = loaded(
        info.dlpi_phdr as u64,
        info.dlpi_phnum as u64 * PHDR_SIZE as u64,
    )
    .unwrap_or(&[]);
    let mut sframe_at = None;
    let mut eh_frame_hdr_at = None;
    let mut dynamic = None;
    for ph in phdrs
        .chunks_exact(PHDR_SIZE)
        .filter_map(ProgramHeader::parse)
    {
        let start = bias.wrapping_add(ph.vaddr);
        match ph.p_type {
            PT_LOAD => {
                m.push_segment(Segment {
                    start,
                    size: ph.memsz,
                    vaddr: ph.vaddr,
                    flags: ph.flags,
                });
            }
            PT_GNU_SFRAME => sframe_at = Some((start, ph.memsz)),
            PT_GNU_EH_FRAME => eh_frame_hdr_at = Some((start, ph.memsz)),
            PT_DYNAMIC => dynamic = Some((start, ph.memsz)),
            _ => {}
        }
    }
    // The notes once every PT_LOAD is known, and only where one maps them:
    // the loader never reads PT_NOTE, so it may lie anywhere.
    let notes = phdrs
        .chunks_exact(PHDR_SIZE)
        .filter_map(ProgramHeader::parse)
        .filter(|ph| ph.p_type == PT_NOTE);
    for ph in notes {
        let start = bias.wrapping_add(ph.vaddr);
        let id = in_readable(&m, start, ph.memsz)
            .then(|| loaded(start, ph.memsz))
            .flatten()
            .and_then(|notes| elf::gnu_build_id(notes, ph.align));
        if let Some(id) = id {
            m.set_build_id(id);
            break;
        }
    }
    // The section headers say best where the SFrame data is; without a
    // file to read them from, `PT_GNU_SFRAME` is trimmed to the pieces it
    // holds.
    if !m.segments().is_empty() && name.to_bytes().starts_with(b"/") {
        if let Some(at) = sframe_from_file(name, bias) {
            sframe_at = Some(at);
        }
    }
    if let Some((addr, len)) = sframe_at {
        let trimmed = in_readable(&m, addr, len)
            .then(|| loaded(addr, len))
            .flatten()
            .map_or(len, |d| SFrame::pieces_len(d) as u64);
        sframe_at = Some((addr, trimmed));
    }
    if let Some((addr, len)) = sframe_at {
        let inside = in_readable(&m, addr, len);
        // The old table's copy, if it is of these very bytes: a library
        // unloaded, replaced on disk and loaded again can land at the same
        // address under the same name.
        let reused = fill.old.modules().iter().find(|o| {
            o.bias == bias
                && o.name() == m.name()
                && o.sframe_copy.0 != 0
                && o.sframe.is_some_and(|s| s.section_addr() == addr)
                && o.segments() == m.segments()
                && (if m.build_id().is_empty() {
                    inside && same_copy(o.sframe_copy, addr, len)
                } else {
                    o.build_id() == m.build_id()
                })
        });
        if let Some(o) = reused {
            m.sframe = o.sframe;
            m.sframe_copy = o.sframe_copy;
        } else if inside {
            if let Some((s, copy)) = copy_sframe(addr, len) {
                m.sframe = Some(s);
                m.sframe_copy = copy;
            }
        }
    }
    let (vdso, interp) = fill.vdso_and_interp;
    let is_vdso = vdso != 0 && m.contains(vdso);
    let root = is_main || is_vdso || (interp != 0 && m.contains(interp));
    // exec keeps the program's file from being written while it runs, and
    // the vDSO has none. Any other file can be truncated under its mapping
    // (the dynamic linker's too), and a read past its new end faults; but
    // were the files holding the code a checked read runs cut short, that
    // read would fault as well, so their code is read directly too.
    let runs_reads = fill.reader_code.iter().any(|&a| m.is_code(a));
    if is_main || is_vdso || runs_reads {
        m.fix();
    }
    if let Some((addr, len)) = eh_frame_hdr_at {
        // The modules whose code is read directly, read in place: never
        // unloaded (the program, the vDSO) or holding the code every walk
        // runs (stackmark's own and the C library's), and none of their
        // files can be cut short (see above).
        let in_place = is_main || is_vdso || runs_reads;
        let reused = fill.old.modules().iter().find(|o| {
            o.bias == bias
                && o.name() == m.name()
                && o.cfi_copy.0 != 0
                && !m.build_id().is_empty()
                && o.build_id() == m.build_id()
                && o.segments() == m.segments()
                && o.cfi
                    .is_some_and(|c| c.index().is_some_and(|i| i.addr() == addr))
        });
        let found = match reused {
            Some(o) if !in_place => o.cfi.map(|c| (c, o.cfi_copy)),
            _ => cfi_of(&m, addr, len, in_place),
        };
        if let Some((c, copy)) = found {
            m.cfi = Some(c);
            m.cfi_copy = copy;
        }
    }
    let index = fill.new.modules().len();
    if !fill.new.push_or_release(m, fill.old, release_copy) {
        fill.deps.incomplete = true;
        return 0;
    }
    record_deps(fill.deps, index, &fill.new.modules()[index], dynamic, root);
    0
}

/// The kernel's `struct sigaction` on x86_64 and AArch64 alike (not the C
/// library's: the kernel's view holds the restorer whoever installed it).
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// `SA_RESTORER`: the handler returns through `restorer`.
const SA_RESTORER: u64 = 0x0400_0000;

impl KernelSigaction {
    /// The trampoline the handler returns through, if it was given one.
    fn restorer(&self) -> Option<u64> {
        (self.flags & SA_RESTORER != 0).then_some(self.restorer as u64)
    }
}

/// The signals `rt_sigaction` takes: 1 to `SIGRTMAX`, 64 on Linux.
const SIGNALS: core::ops::RangeInclusive<c_int> = 1..=64;

/// The signal's action as the kernel holds it; `None` if the query fails.
fn kernel_action(sig: c_int) -> Option<KernelSigaction> {
    let mut now = KernelSigaction::default();
    // SAFETY: rt_sigaction with a null new action only writes the current
    // one to `now`, a kernel-layout action of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            core::ptr::null::<KernelSigaction>(),
            &mut now as *mut KernelSigaction,
            8usize,
        )
    };
    (rc == 0).then_some(now)
}

/// The restorer of every handler installed with one, as the kernel holds
/// it: the C library's, and any a runtime installed itself through
/// `rt_sigaction` with its own sigreturn trampoline (the first `n` of the
/// array). Handlers installed after this refresh are known only if they
/// share one of these.
fn installed_restorers() -> ([u64; 64], usize) {
    let mut pcs = [0; 64];
    let mut n = 0;
    for pc in SIGNALS.filter_map(|sig| kernel_action(sig)?.restorer()) {
        pcs[n] = pc;
        n += 1;
    }
    (pcs, n)
}

/// The trampolines a walk knows signal frames by: the system's first (it
/// serves handlers installed after this refresh too), then every installed
/// handler's own restorer.
fn signal_trampolines(table: &mut Table) {
    let (pcs, n) = installed_restorers();
    system_trampoline(table, &pcs[..n]);
    for &pc in &pcs[..n] {
        table.add_trampoline(pc);
    }
}

/// glibc's `__restore_rt`, which glibc gives every handler it installs. It
/// is among the `installed` restorers when a handler was installed through
/// glibc (Rust's runtime installs two at start-up); only where none was is
/// it learned by installing one.
#[cfg(target_arch = "x86_64")]
fn system_trampoline(table: &mut Table, installed: &[u64]) {
    let c_library = table.module_for_addr(libc::sigaction as *const () as u64);
    if !installed
        .iter()
        .any(|&pc| c_library.is_some_and(|m| m.contains(pc)))
    {
        learn_glibc_restorer(table);
    }
}

/// glibc's `__restore_rt`, learned from a no-op handler installed through
/// glibc for a moment on a signal that has none. Changing a disposition
/// races with another thread installing its own handler for that signal,
/// which the restore would undo: [`system_trampoline`] does this only when
/// the kernel holds no restorer of the C library's.
#[cfg(target_arch = "x86_64")]
fn learn_glibc_restorer(table: &mut Table) {
    // Ignored by default: a no-op handler there, installed and removed at
    // once, changes nothing a signal arriving meanwhile would see, but for
    // interrupting a call that such a signal would not have.
    for sig in [libc::SIGURG, libc::SIGWINCH, libc::SIGCHLD] {
        if kernel_action(sig).is_none_or(|a| a.handler != libc::SIG_DFL) {
            continue;
        }
        extern "C" fn ignore(_: c_int) {}
        // SAFETY: installs a no-op handler on a signal that had none and
        // whose default is to be ignored, then puts the old action back.
        unsafe {
            let mut tmp: libc::sigaction = core::mem::zeroed();
            tmp.sa_sigaction = ignore as *const () as usize;
            tmp.sa_flags = libc::SA_RESTART;
            let mut old: libc::sigaction = core::mem::zeroed();
            if libc::sigaction(sig, &tmp, &mut old) != 0 {
                continue;
            }
            let glibc = kernel_action(sig);
            // Put the old action back unless another thread has installed
            // its own meanwhile.
            if glibc
                .as_ref()
                .is_some_and(|a| a.handler == ignore as *const () as usize)
            {
                libc::sigaction(sig, &old, core::ptr::null_mut());
            }
            if let Some(pc) = glibc.and_then(|a| a.restorer()) {
                table.add_trampoline(pc);
            }
        }
        return;
    }
}

/// `__kernel_rt_sigreturn` in the vDSO, where the kernel returns from a
/// handler installed without a restorer (glibc's are), found by its code.
#[cfg(target_arch = "aarch64")]
fn system_trampoline(table: &mut Table, _installed: &[u64]) {
    use crate::arch::{Arch, Native};
    // SAFETY: getauxval only reads the auxiliary vector.
    let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let Some(m) = table.module_for_addr(vdso) else {
        return;
    };
    // The code segments, out of the table that learns the trampolines.
    let mut code = [(0u64, 0u64); crate::modules::MAX_SEGMENTS];
    let mut n = 0;
    for s in m.segments().iter().filter(|s| s.executable()) {
        code[n] = (s.start, s.size);
        n += 1;
    }
    for &(start, size) in &code[..n] {
        // SAFETY: the vDSO's executable segment is mapped for the life of the
        // process.
        let code = unsafe { core::slice::from_raw_parts(start as *const u8, size as usize) };
        let pat = Native::SIGRETURN_CODE;
        let mut off = 0;
        while off + pat.len() <= code.len() {
            if &code[off..off + pat.len()] == pat {
                table.add_trampoline(start + off as u64);
            }
            off += 4;
        }
    }
}

/// Rebuilds the module table from the loader's list. Call after loading or
/// unloading libraries; never from a signal handler.
pub fn refresh() -> Result<u64, RefreshError> {
    refresh_waiting(modules::REFRESH_WAIT)
}

/// [`refresh`], waiting at most `wait` for walks and guards on the table it
/// reuses (see [`modules::REFRESH_WAIT`]).
pub(crate) fn refresh_waiting(wait: core::time::Duration) -> Result<u64, RefreshError> {
    // Where this kernel's user space ends, for stripping signatures from
    // return addresses: the file name the kernel put at the top of the
    // initial stack lies there.
    #[cfg(target_arch = "aarch64")]
    {
        use crate::arch::aarch64;
        // SAFETY: getauxval only reads the auxiliary vector.
        let top = unsafe { libc::getauxval(libc::AT_EXECFN) };
        if top != 0 {
            aarch64::set_user_address_bits(aarch64::user_address_bits(top));
        }
    }
    let mut exe_buf = [0u8; 4096];
    // SAFETY: readlink writes at most len-1 bytes into the buffer.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            exe_buf.as_mut_ptr().cast(),
            exe_buf.len() - 1,
        )
    };
    let exe = if n > 0 {
        CStr::from_bytes_until_nul(&exe_buf[..n as usize + 1]).unwrap_or(c"")
    } else {
        c""
    };
    modules::refresh_with(
        wait,
        |new, old| {
            let mut deps = Deps::new();
            // SAFETY: getauxval only reads the auxiliary vector.
            let vdso_and_interp = unsafe {
                (
                    libc::getauxval(libc::AT_SYSINFO_EHDR),
                    libc::getauxval(libc::AT_BASE),
                )
            };
            let mut fill = Fill {
                new,
                old,
                exe,
                deps: &mut deps,
                vdso_and_interp,
                reader_code: [
                    read_checked as *const () as u64,
                    libc::process_vm_readv as *const () as u64,
                ],
            };
            // SAFETY: the callback only uses `fill` for the duration of the call.
            unsafe { libc::dl_iterate_phdr(Some(on_object), (&mut fill as *mut Fill<'_>).cast()) };
            let count = new.modules().len();
            for (m, &pinned) in new.modules_mut().iter_mut().zip(deps.close(count)) {
                if pinned {
                    m.pin();
                }
            }
            new.finish(0);
            signal_trampolines(new);
            // SAFETY: getauxval only reads the auxiliary vector.
            new.set_entry(unsafe { libc::getauxval(libc::AT_ENTRY) });
        },
        release_copy,
    )
}

/// The interrupted registers in a Linux x86_64 `ucontext_t`.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_arch = "x86_64")]
pub unsafe fn regs_from_ucontext(uc: *const c_void) -> crate::arch::x86_64::Regs {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let g = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext.gregs };
    let r = |i: c_int| g[i as usize] as u64;
    crate::arch::x86_64::Regs {
        rip: r(libc::REG_RIP),
        rsp: r(libc::REG_RSP),
        rbp: r(libc::REG_RBP),
        rbx: r(libc::REG_RBX),
        r12: r(libc::REG_R12),
        r13: r(libc::REG_R13),
        r14: r(libc::REG_R14),
        r15: r(libc::REG_R15),
    }
}

/// The interrupted registers in a Linux AArch64 `ucontext_t`.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_arch = "aarch64")]
pub unsafe fn regs_from_ucontext(uc: *const c_void) -> crate::arch::aarch64::Regs {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let m = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext };
    let mut x19_x28 = [0u64; 10];
    x19_x28.copy_from_slice(&m.regs[19..29]);
    crate::arch::aarch64::Regs {
        pc: m.pc,
        sp: m.sp,
        fp: m.regs[29],
        lr: m.regs[30],
        x19_x28,
    }
}

/// Writes the interrupted registers of a Linux x86_64 `ucontext_t`, four to
/// a line.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_arch = "x86_64")]
pub unsafe fn write_registers<S: crate::markup::Sink>(
    m: &mut crate::markup::Markup<'_, S>,
    uc: *const c_void,
) {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let g = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext.gregs };
    const NAMES: [(&str, c_int); 18] = [
        ("rax", libc::REG_RAX),
        ("rbx", libc::REG_RBX),
        ("rcx", libc::REG_RCX),
        ("rdx", libc::REG_RDX),
        ("rsi", libc::REG_RSI),
        ("rdi", libc::REG_RDI),
        ("rbp", libc::REG_RBP),
        ("rsp", libc::REG_RSP),
        ("r8", libc::REG_R8),
        ("r9", libc::REG_R9),
        ("r10", libc::REG_R10),
        ("r11", libc::REG_R11),
        ("r12", libc::REG_R12),
        ("r13", libc::REG_R13),
        ("r14", libc::REG_R14),
        ("r15", libc::REG_R15),
        ("rip", libc::REG_RIP),
        ("eflags", libc::REG_EFL),
    ];
    super::write_register_lines(
        m,
        NAMES
            .iter()
            .map(|&(name, reg)| (name, g[reg as usize] as u64)),
    );
}

/// Writes the interrupted registers of a Linux AArch64 `ucontext_t`, four
/// to a line.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(target_arch = "aarch64")]
pub unsafe fn write_registers<S: crate::markup::Sink>(
    m: &mut crate::markup::Markup<'_, S>,
    uc: *const c_void,
) {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let mc = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext };
    let extra = [("sp", mc.sp), ("pc", mc.pc), ("pstate", mc.pstate)];
    let x = super::A64_X_NAMES.into_iter().zip(mc.regs);
    super::write_register_lines(m, x.chain(extra));
}

#[cfg(test)]
mod tests {
    use core::mem::offset_of;
    use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

    use super::{record_deps, Deps};
    use crate::formats::elf::PF_R;
    use crate::modules::{Module, Segment};

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

    /// A module named `name` whose one readable segment is `mem`.
    fn module(name: &[u8], mem: &[u8]) -> Module {
        let mut m = Module::EMPTY;
        m.set_name(name);
        m.push_segment(Segment {
            start: mem.as_ptr() as u64,
            size: mem.len() as u64,
            vaddr: 0,
            flags: PF_R,
        });
        m
    }

    /// A dynamic section (a `DT_NEEDED` per offset in `needed`, then
    /// `DT_STRTAB` and `DT_NULL`) followed by its string table `strings`,
    /// in one block, and the section's address and length.
    fn dynamic_section(needed: &[u64], strings: &[u8]) -> (Vec<u8>, Option<(u64, u64)>) {
        let len = (needed.len() + 2) * 16;
        let mut mem = vec![0u8; len + strings.len()];
        let strtab = mem.as_ptr() as u64 + len as u64;
        let entries = needed.iter().map(|&off| (1u64, off));
        for (i, (tag, val)) in entries.chain([(5, strtab), (0, 0)]).enumerate() {
            mem[i * 16..i * 16 + 8].copy_from_slice(&tag.to_ne_bytes());
            mem[i * 16 + 8..i * 16 + 16].copy_from_slice(&val.to_ne_bytes());
        }
        mem[len..].copy_from_slice(strings);
        let at = mem.as_ptr() as u64;
        (mem, Some((at, len as u64)))
    }

    /// Records module `index`, a library at `path` that needs nothing (not
    /// a root).
    fn record_library(deps: &mut Deps, index: usize, path: &[u8]) {
        record_deps(deps, index, &module(path, &[0u8; 16]), None, false);
    }

    #[test]
    fn dependencies_of_the_roots_are_pinned_and_nameless_or_same_named_modules_never_are() {
        // Two DT_NEEDED, one of them an empty name.
        let (mem, dynamic) = dynamic_section(&[0, 1], b"\0libc.so.6\0");
        let mut deps = Deps::new();
        record_deps(&mut deps, 0, &module(b"/bin/prog", &mem), dynamic, true);
        record_library(&mut deps, 1, b"");
        record_library(&mut deps, 2, b"/lib/libc.so.6");
        record_library(&mut deps, 3, b"/lib/plugin.so");
        assert_eq!(deps.close(4), [true, false, true, false]);
        // A second libc.so.6, loaded by path from elsewhere: the needed name
        // may mean either copy, so neither is pinned.
        record_library(&mut deps, 4, b"/tmp/copy/libc.so.6");
        deps.pinned[2] = false;
        assert_eq!(deps.close(5), [true, false, false, false, false]);
    }

    /// A module left out of a full table may be the one a needed name
    /// meant, beside a kept module of the same name loaded by path: with
    /// any module left out, only the roots are pinned.
    #[test]
    fn with_a_module_left_out_only_the_roots_are_pinned() {
        // The program needs libx.so.
        let (mem, dynamic) = dynamic_section(&[1], b"\0libx.so\0");
        let build = |incomplete| {
            let mut deps = Deps::new();
            record_deps(&mut deps, 0, &module(b"/bin/prog", &mem), dynamic, true);
            record_library(&mut deps, 1, b"/tmp/a/libx.so");
            deps.incomplete = incomplete;
            deps
        };
        assert_eq!(build(false).close(2), [true, true], "the only libx.so");
        assert_eq!(
            build(true).close(2),
            [true, false],
            "another may be left out"
        );
    }

    /// The signal-frame offsets the walker uses, checked against the C
    /// library's own `ucontext_t` and `siginfo_t` (the kernel's layout).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_ucontext_offsets_match_the_system_headers() {
        use crate::arch::x86_64::ucontext_offsets as o;
        let gregs = offset_of!(libc::ucontext_t, uc_mcontext) as u64;
        assert_eq!(o::GREGS, gregs);
        let at = |r: libc::c_int| gregs + 8 * r as u64;
        assert_eq!(o::RIP, at(libc::REG_RIP));
        assert_eq!(o::RSP, at(libc::REG_RSP));
        assert_eq!(o::RBP, at(libc::REG_RBP));
        assert_eq!(o::RBX, at(libc::REG_RBX));
        assert_eq!(
            o::R12_R15,
            [
                at(libc::REG_R12),
                at(libc::REG_R13),
                at(libc::REG_R14),
                at(libc::REG_R15)
            ]
        );
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn aarch64_sigframe_offsets_match_the_system_headers() {
        use crate::arch::aarch64::sigframe_offsets as o;
        // The kernel's rt_sigframe: a siginfo_t, then the ucontext_t.
        let uc = core::mem::size_of::<libc::siginfo_t>() as u64;
        assert_eq!(uc, 128);
        let mc = uc + offset_of!(libc::ucontext_t, uc_mcontext) as u64;
        assert_eq!(mc, 304, "sigcontext at sp + 304");
        assert_eq!(o::REGS, mc + offset_of!(libc::mcontext_t, regs) as u64);
        assert_eq!(o::SP, mc + offset_of!(libc::mcontext_t, sp) as u64);
        assert_eq!(o::PC, mc + offset_of!(libc::mcontext_t, pc) as u64);
        assert_eq!(o::PC, 568);
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
