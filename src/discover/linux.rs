//! Linux: the module table from `dl_iterate_phdr`, SFrame from
//! `PT_GNU_SFRAME` or the `.sframe` section, DWARF CFI from
//! `PT_GNU_EH_FRAME`, and the signal trampolines.

use core::ffi::{c_int, c_void, CStr};

use crate::formats::cfi::{self, Cfi, EhFrameHdr};
use crate::formats::cursor::u64_at;
use crate::formats::elf::{
    self, Dynamic, ElfFile, ProgramHeader, PHDR_SIZE, PT_DYNAMIC, PT_GNU_EH_FRAME, PT_GNU_SFRAME,
    PT_LOAD, PT_NOTE,
};
use crate::formats::sframe::{PieceEntry, SFrame};
use crate::modules::{self, Module, RefreshError, Segment, Table, MAX_MODULES};

use crate::sys::read_checked;

const PAGE: u64 = 4096;

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
/// there, and builds after the data, in the same mapping, the index that
/// speeds its lookups: of its pieces, for a concatenation of per-object
/// pieces, or of its FDEs by address, for an ordinary section.
fn copy_sframe(addr: u64, len: u64) -> Option<(SFrame<'static>, (usize, usize))> {
    let src = loaded(addr, len)?;
    let slots_at = src
        .len()
        .next_multiple_of(core::mem::align_of::<PieceEntry>());
    // A slot per piece (an ordinary section's one goes unused).
    let slots = SFrame::count_pieces(src);
    let buckets_at = slots_at + slots * core::mem::size_of::<PieceEntry>();
    // An ordinary section's FDE index, sized from its header and first and
    // last FDEs: at most 4 MiB.
    let buckets = SFrame::fde_index_len_of(src, addr);
    let bytes = buckets_at + buckets * core::mem::size_of::<u32>();
    let size = bytes.div_ceil(PAGE as usize) * PAGE as usize;
    // SAFETY: a fresh anonymous mapping of `size` bytes, checked for failure;
    // the copy and the slots (aligned, each written before the slice over
    // them is formed; the u32 slots follow PieceEntry slots, whose alignment
    // is larger) stay within it. Nothing writes to it once it is made
    // read-only.
    let (copy, slots, buckets): (&'static [u8], &'static mut [PieceEntry], &'static mut [u32]) = unsafe {
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
        // A fresh anonymous mapping reads as zeros: the u32 slots are
        // initialised.
        let counts = p.cast::<u8>().add(buckets_at).cast::<u32>();
        (
            core::slice::from_raw_parts(p as *const u8, src.len()),
            core::slice::from_raw_parts_mut(first, slots),
            core::slice::from_raw_parts_mut(counts, buckets),
        )
    };
    let mapping = (copy.as_ptr() as usize, size);
    match SFrame::parse(copy, addr) {
        Ok(s) => {
            let need = s.fde_index_len().min(buckets.len());
            let s = s.with_piece_index(slots).with_fde_index(&mut buckets[..need]);
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

/// Whether the old table's module `o` is `m` loaded as before: the same
/// name, at the same bias, with the same segments.
fn loaded_as_before(o: &Module, m: &Module) -> bool {
    o.bias == m.bias && o.name() == m.name() && o.segments() == m.segments()
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
    // A module the old table holds, unchanged (the same file by its build
    // ID, loaded where it was), keeps the SFrame data it found there, or
    // that it found none: a refresh then opens no file for it (some ten
    // system calls a module, most of a refresh's time).
    let unchanged = (!m.build_id().is_empty())
        .then(|| {
            fill.old
                .modules()
                .iter()
                .find(|o| loaded_as_before(o, &m) && o.build_id() == m.build_id())
        })
        .flatten();
    if let Some(o) = unchanged {
        m.sframe = o.sframe;
        m.sframe_copy = o.sframe_copy;
        sframe_at = None;
    }
    // The section headers say best where the SFrame data is; without a
    // file to read them from, `PT_GNU_SFRAME` is trimmed to the pieces it
    // holds.
    if unchanged.is_none() && !m.segments().is_empty() && name.to_bytes().starts_with(b"/") {
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
        // Without a build ID (a module with one, loaded as before, kept its
        // data above), the old table's copy if it is of these very bytes: a
        // library unloaded, replaced on disk and loaded again can land at
        // the same address under the same name.
        let reused = fill.old.modules().iter().find(|o| {
            m.build_id().is_empty()
                && loaded_as_before(o, &m)
                && o.sframe_copy.0 != 0
                && o.sframe.is_some_and(|s| s.section_addr() == addr)
                && inside
                && same_copy(o.sframe_copy, addr, len)
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
        let reused = unchanged.filter(|o| {
            o.cfi_copy.0 != 0
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
#[cfg(test)]
mod tests {
    use super::{record_deps, Deps};
    use crate::formats::elf::PF_R;
    use crate::modules::{Module, Segment};

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
}
