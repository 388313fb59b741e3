//! macOS: the module table from dyld, and `__unwind_info` and `__eh_frame`
//! from each image's `__TEXT`.
//!
//! Each image becomes a [`Module`], made from its header by
//! [`super::macho_module`]: its path, its slide as the bias, one
//! [`Segment`](crate::modules::Segment) per `LC_SEGMENT_64` (at
//! `slide + vmaddr`, `__PAGEZERO` and `__LINKEDIT` left out: the shared
//! cache's images share one `__LINKEDIT`, and the symbolizer rejects
//! overlapping mmaps), its `LC_UUID` as the build ID (markup writes it as
//! `elf:UUIDHEX`, which llvm-symbolizer finds under `.build-id`); and here a
//! copy of its `__unwind_info` with the runtime address of its
//! `mach_header`.
//!
//! [`refresh`] rebuilds the table from `_dyld_image_count` and friends and,
//! the first time, registers `_dyld_register_func_for_add_image` and
//! `_dyld_register_func_for_remove_image` callbacks that keep it current:
//! an added image is appended, a removed one dropped (in a table published
//! before dyld unmaps it; walks already under way may still read the
//! replaced table's entry, whose unwind data the table owns, and a
//! refresh that cannot run because a thread holds a walk across two
//! refreshes leaves the image listed: see [`modules::REFRESH_WAIT`]).
//! Image memory is only ever read with
//! [`read_checked`], so an image unloaded while the table is rebuilt gives
//! a missing module, not a fault; a refresh during which an image came or
//! went reads dyld's list again (see `CHANGES`).
//!
//! Stack bounds come from the calling thread's pthread at each walk, not
//! from thread-local storage, whose first use in a thread may allocate.

use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use super::address_set::AddressSet;
use crate::formats::cfi::Cfi;
use crate::formats::compact_unwind::UnwindInfo;
use crate::formats::macho::{self, MachO};
use crate::modules::{self, Module, RefreshError, Table, MAX_MODULES};
use crate::sys::read_checked;

// Declared here: the libc crate marks the dyld functions deprecated and
// lacks the rest.
extern "C" {
    fn _dyld_image_count() -> u32;
    fn _dyld_get_image_header(index: u32) -> *const c_void;
    fn _dyld_register_func_for_add_image(f: extern "C" fn(*const c_void, isize));
    fn _dyld_register_func_for_remove_image(f: extern "C" fn(*const c_void, isize));
}
// --- Module discovery ---------------------------------------------------------

const PAGE: usize = 16384;
/// Longest header plus load commands read from an image.
const MAX_HEADER: usize = 32 * 1024;

/// Copies `len` bytes at `addr` into an anonymous mapping the table owns.
fn copy_out(addr: u64, len: u64) -> Option<(&'static [u8], (usize, usize))> {
    if len == 0 || len > (1 << 30) {
        return None;
    }
    let size = (len as usize).div_ceil(PAGE) * PAGE;
    // SAFETY: a fresh anonymous mapping of `size` bytes, checked for
    // failure; the checked read writes at most `len <= size` bytes into it.
    unsafe {
        let p = libc::mmap(
            core::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANON,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        let buf = core::slice::from_raw_parts_mut(p as *mut u8, len as usize);
        if !read_checked(addr, buf) {
            libc::munmap(p, size);
            return None;
        }
        libc::mprotect(p, size, libc::PROT_READ);
        Some((
            core::slice::from_raw_parts(p as *const u8, len as usize),
            (p as usize, size),
        ))
    }
}

fn release_copy((ptr, size): (usize, usize)) {
    if ptr != 0 {
        // SAFETY: `(ptr, size)` is a mapping made by `copy_out` that no
        // published table references any more.
        unsafe { libc::munmap(ptr as *mut c_void, size) };
    }
}

/// The module for the image whose `mach_header` is at `mh`, or `None` if
/// its header cannot be read (it was unloaded meanwhile). Reuses `old`'s
/// copy of its `__unwind_info` when `old` holds the same image. The slide
/// comes from the header itself, as dyld computes it, not from a second
/// query that could answer for another image.
fn image_module(mh: u64, name: &[u8], old: &Table) -> Option<Module> {
    let mut head = [0u8; MAX_HEADER];
    if !read_checked(mh, &mut head[..32]) {
        return None;
    }
    let size = macho::header_size(&head)?.min(MAX_HEADER);
    if !read_checked(mh, &mut head[..size]) {
        return None;
    }
    let image = MachO::parse(&head[..size]).ok()?;
    let slide = image.slide_at(mh)?;
    let mut m = super::macho_module(&image, slide, name);
    let reused = old
        .modules()
        .iter()
        // Only the same image: one unloaded and replaced on disk can come
        // back at the same address under the same name, with a new UUID.
        .find(|o| {
            o.compact.is_some_and(|(_, base)| base == mh)
                && o.name() == m.name()
                && !m.build_id().is_empty()
                && o.build_id() == m.build_id()
                && o.segments() == m.segments()
        });
    if let Some(o) = reused {
        m.compact = o.compact;
        m.sframe_copy = o.sframe_copy;
        m.cfi = o.cfi;
        m.cfi_copy = o.cfi_copy;
        return Some(m);
    }
    if let Some(sect) = image.section(b"__TEXT", b"__unwind_info") {
        if let Some((bytes, copy)) = copy_out(slide.wrapping_add(sect.addr), sect.size) {
            match UnwindInfo::parse(bytes) {
                Ok(info) => {
                    m.compact = Some((info, mh));
                    m.sframe_copy = copy;
                }
                Err(_) => release_copy(copy),
            }
        }
    }
    // The DWARF CFI that compact entries in DWARF mode name by offset
    // (`__eh_frame` has no index on macOS).
    if let Some(sect) = image.section(b"__TEXT", b"__eh_frame") {
        let addr = slide.wrapping_add(sect.addr);
        if let Some((bytes, copy)) = copy_out(addr, sect.size) {
            m.cfi = Some(Cfi::without_index(
                bytes,
                addr,
                crate::arch::native::CFI_REGISTERS,
            ));
            m.cfi_copy = copy;
        }
    }
    Some(m)
}

/// Appends `m`; when the table is full, releases its copy of
/// `__unwind_info` unless it was reused from `old` ([`Table::push_or_release`]).
fn push(table: &mut Table, old: &Table, m: Module) {
    table.push_or_release(m, old, release_copy);
}

/// Carries `old`'s modules over into `new`, but that of the image whose
/// header is at `except`, and its count of modules left out.
fn carry_over(new: &mut Table, old: &Table, except: Option<u64>) {
    let kept = |m: &&Module| !except.is_some_and(|mh| is_image(m, mh));
    for m in old.modules().iter().filter(kept) {
        push(new, old, m.duplicate());
    }
    new.count_dropped(old.dropped_modules());
}

/// Whether module `m` is the image whose `mach_header` is at `mh`.
fn is_image(m: &Module, mh: u64) -> bool {
    m.compact.is_some_and(|(_, base)| base == mh) || m.contains(mh)
}

/// One image as dyld lists it.
#[derive(Clone, Copy)]
struct Image {
    mh: u64,
    name: *const c_char,
}

fn name_bytes<'a>(name: *const c_char) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // SAFETY: dyld's image names are NUL-terminated and live as long as the
    // image; the table copies the bytes at once. The callers make sure the
    // image is still loaded (see `CHANGES`).
    unsafe { CStr::from_ptr(name) }.to_bytes()
}

/// Counts the add- and remove-image callbacks that have started. Each one
/// counts itself before it waits for the table, so before dyld frees
/// anything of an image being removed. A refresh that finds the count
/// unchanged once it holds the table knows that every image it listed is
/// still loaded (a removal starting later waits for it; one that started
/// earlier put its image in [`REMOVED`], which the listing leaves out), and
/// that no image was added behind its back.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// How often [`refresh`] starts over because dyld's list changed meanwhile.
const MAX_ATTEMPTS: usize = 64;

/// Headers of images whose remove callback has run. dyld calls the remove
/// callbacks before it takes an image off its list, so a refresh that reads
/// the list meanwhile (after the callback counted itself in [`CHANGES`])
/// would find the image still there, with its name about to be freed.
static REMOVED: AddressSet = AddressSet::new();

/// Reads dyld's list of images into `images`, leaving out those being
/// removed; returns how many it holds and how many did not fit. Only the
/// header is taken from the
/// list: indexes shift when an image leaves it, so a second query by index
/// could answer for another image. The name comes from the header's own
/// image, through `dladdr` (not called with the table held: it takes
/// dyld's lock, which a thread in one of our callbacks holds).
fn list_images(images: &mut [Image]) -> (usize, usize) {
    let (mut n, mut left_out) = (0, 0);
    // SAFETY: the dyld query takes an index below the count; an index that
    // went stale (an image unloaded meanwhile) yields a null header.
    let count = unsafe { _dyld_image_count() };
    for i in 0..count {
        // SAFETY: as above.
        let mh = unsafe { _dyld_get_image_header(i) } as u64;
        if mh == 0 || REMOVED.contains(mh) {
            continue;
        }
        if n == images.len() {
            left_out += 1;
            continue;
        }
        images[n] = Image {
            mh,
            name: image_name(mh),
        };
        n += 1;
    }
    (n, left_out)
}

/// The path of the image whose header is at `mh` (null if dyld knows none).
fn image_name(mh: u64) -> *const c_char {
    // SAFETY: an all-zero Dl_info is valid (null pointers); dladdr fills it
    // for an address inside a loaded image.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(mh as *const c_void, &mut info) } != 0 {
        info.dli_fname
    } else {
        core::ptr::null()
    }
}

/// Rebuilds the module table from dyld's list of images and, the first
/// time, registers the callbacks that keep it current. Never from a signal
/// handler. [`RefreshError::Busy`] if images kept being loaded or unloaded
/// through every attempt (the callbacks still keep the table current).
pub fn refresh() -> Result<u64, RefreshError> {
    watch_images();
    let mut images = [Image {
        mh: 0,
        name: core::ptr::null(),
    }; MAX_MODULES];
    for _ in 0..MAX_ATTEMPTS {
        // dyld's list is read before the table is locked for writing: a
        // dlopen on another thread holds dyld's lock while its callback
        // waits for the table.
        let seen = CHANGES.load(SeqCst);
        let (n, left_out) = list_images(&mut images);
        let mut stale = false;
        let generation = modules::refresh_with(
            modules::REFRESH_WAIT,
            |new, old| {
                if CHANGES.load(SeqCst) != seen {
                    // An image came or went after the list was read: its
                    // name may be freed already. Keep the table as it is
                    // and read the list again.
                    stale = true;
                    carry_over(new, old, None);
                    return;
                }
                for im in &images[..n] {
                    if let Some(m) = image_module(im.mh, name_bytes(im.name), old) {
                        push(new, old, m);
                    }
                }
                new.count_dropped(left_out);
            },
            release_copy,
        )?;
        if !stale {
            return Ok(generation);
        }
    }
    Err(RefreshError::Busy)
}

static WATCHING: AtomicBool = AtomicBool::new(false);
/// Set while the callbacks are being registered: dyld then calls the add
/// callback for every image already loaded, which the full refresh that
/// follows covers at once.
static REGISTERING: AtomicBool = AtomicBool::new(false);

fn watch_images() {
    if WATCHING.swap(true, SeqCst) {
        return;
    }
    // A refresh holds the table while it copies sections: every call it
    // makes then must already be bound. Where dyld binds symbols lazily, the
    // first call of each takes dyld's lock, which a thread in one of our
    // callbacks holds while it waits for the table. So make each call once
    // now, before there are callbacks.
    if let Some((_, copy)) = copy_out(&WATCHING as *const AtomicBool as u64, 1) {
        release_copy(copy); // mmap, mach_vm_read_overwrite, mprotect, munmap
    }
    let _ = name_bytes(core::hint::black_box(c"stackmark".as_ptr())); // strlen
    std::thread::yield_now();
    REGISTERING.store(true, SeqCst);
    // SAFETY: the callbacks are plain functions that live as long as the
    // process, with the signature dyld calls them with:
    // `void (*)(const struct mach_header *, intptr_t vmaddr_slide)`.
    unsafe {
        _dyld_register_func_for_add_image(on_add_image);
        _dyld_register_func_for_remove_image(on_remove_image);
    }
    REGISTERING.store(false, SeqCst);
}

/// dyld calls this on the thread that loads an image, after adding it to
/// its list and before `dlopen` returns. The image replaces any module the
/// table holds at its address: an image removed there may still be listed
/// (see [`REMOVED`]), and the new one is not it.
extern "C" fn on_add_image(mh: *const c_void, _slide: isize) {
    let mh = mh as u64;
    // Before counting: a refresh that reads the list after this count must
    // not take the new image for the removed one.
    REMOVED.remove(mh);
    CHANGES.fetch_add(1, SeqCst);
    if REGISTERING.load(SeqCst) || mh == 0 {
        return;
    }
    // The image being added stays loaded while dyld runs this callback,
    // and with it the name dladdr points at.
    let name = name_bytes(image_name(mh));
    let _ = modules::refresh_with(
        modules::REFRESH_WAIT,
        |new, old| {
            carry_over(new, old, Some(mh));
            if let Some(m) = image_module(mh, name, old) {
                push(new, old, m);
            }
        },
        release_copy,
    );
}

/// dyld calls this on the thread that unloads an image, before it unmaps
/// the image: once it returns, no published table lists the image.
extern "C" fn on_remove_image(mh: *const c_void, _slide: isize) {
    let mh = mh as u64;
    // Before counting: a refresh that read the count after this must leave
    // the image out even if dyld still lists it.
    REMOVED.insert(mh);
    CHANGES.fetch_add(1, SeqCst);
    let _ = modules::refresh_with(
        modules::REFRESH_WAIT,
        |new, old| carry_over(new, old, Some(mh)),
        release_copy,
    );
}
