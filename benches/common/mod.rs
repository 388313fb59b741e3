//! What both benches share: a stack that crosses the C library, and the
//! check that two walkers report the same frames on it.
//!
//! [`at_qsort_depth`] runs a closure under `levels` nested `qsort` calls:
//! glibc's `qsort` sorts two numbers with a Rust `extern "C"` comparator,
//! which sorts two more with the same comparator, and so on. On glibc 2.36
//! (Debian 12) each level is four frames, the comparator's and three of
//! glibc's (`qsort`, `__qsort_r` with the outer `msort_with_tmp` inlined,
//! and `msort_with_tmp`), and glibc's have neither SFrame nor frame
//! pointers: only DWARF CFI (`.eh_frame`) unwinds them.

use std::cell::Cell;
use std::ffi::{c_int, c_void};

/// The comparator `qsort` calls.
type Compare = extern "C" fn(*const c_void, *const c_void) -> c_int;

extern "C" {
    fn qsort(base: *mut c_void, n: usize, size: usize, compare: Compare);
}

thread_local! {
    static TASK: Cell<Option<*mut (dyn FnMut() + 'static)>> = const { Cell::new(None) };
    /// How many more `qsort` levels to open before running the task.
    static LEFT: Cell<u32> = const { Cell::new(0) };
}

/// Sorts two numbers with [`compare`]: one call of the comparator.
#[inline(always)]
fn sort_two() {
    let mut pair = [2u64, 1];
    // SAFETY: two 8-byte elements, and a comparator that reads two of them.
    unsafe { qsort(pair.as_mut_ptr().cast(), 2, 8, compare) };
    std::hint::black_box(&pair);
}

/// The comparator: opens the next level, or at the last one runs the task
/// (once), then compares. Its own frame stays on the stack under both.
extern "C" fn compare(a: *const c_void, b: *const c_void) -> c_int {
    let left = LEFT.get();
    if left > 0 {
        LEFT.set(left - 1);
        sort_two();
    } else if let Some(task) = TASK.take() {
        // SAFETY: `at_qsort_depth` keeps the closure alive for this call.
        unsafe { (*task)() };
    }
    // SAFETY: `qsort` passes pointers to two elements of the array it sorts.
    let (a, b) = unsafe { (*a.cast::<u64>(), *b.cast::<u64>()) };
    a.cmp(&b) as c_int
}

/// Runs `f` under `levels` (at least 1) nested `qsort` calls, each calling
/// the comparator, which opens the next level or, in the last one, calls
/// `f`.
pub fn at_qsort_depth(levels: u32, f: &mut dyn FnMut()) {
    assert!(levels > 0);
    // SAFETY: the pointer is used only during the call below, while `f`
    // lives; the lifetime is erased to keep it in the thread-local.
    let f: *mut (dyn FnMut() + 'static) = unsafe { std::mem::transmute(f) };
    TASK.set(Some(f));
    LEFT.set(levels - 1);
    sort_two();
    let ran = TASK.take().is_none();
    assert!(ran, "qsort never called the comparator at the last level");
}

/// Where a pc lies, for a message: `module+offset`.
fn place(pc: u64) -> String {
    let Some(table) = stackmark::modules::current() else {
        return format!("{pc:#x}");
    };
    match table.module_for_addr(pc) {
        Some(m) => {
            let name = String::from_utf8_lossy(m.name()).into_owned();
            let short = name.rsplit('/').next().unwrap_or(&name).to_string();
            format!("{short}+{:#x}", pc.wrapping_sub(m.bias))
        }
        None => format!("{pc:#x}"),
    }
}

/// Checks that `theirs` (another walker's pcs, from the same stack) names
/// the frames `ours` does, frame for frame: as many frames, and the same pc
/// in each from frame `skip` on (before it, each walker's own start).
/// Returns the frames compared, or a message listing both walks.
// Both of its callers (framehop and libunwind) run on x86_64 only.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn same_frames(
    who: &str,
    ours: &[stackmark::Frame],
    skip: usize,
    theirs: &[u64],
) -> Result<usize, String> {
    let same = ours.len() == theirs.len()
        && ours.len() > skip
        && ours[skip..]
            .iter()
            .zip(&theirs[skip..])
            .all(|(f, &pc)| f.pc == pc);
    if same {
        return Ok(ours.len() - skip);
    }
    let mut msg = format!(
        "stackmark and {who} walked different frames ({} and {}):\n",
        ours.len(),
        theirs.len()
    );
    for i in 0..ours.len().max(theirs.len()) {
        let a = ours
            .get(i)
            .map_or(String::new(), |f| format!("{} {:?}", place(f.pc), f.method));
        let b = theirs.get(i).map_or(String::new(), |&pc| place(pc));
        msg += &format!("  #{i:<3} {a:<40} {b}\n");
    }
    Err(msg)
}

/// How many `qsort` levels the benches' stack through the C library has.
pub const QSORT_LEVELS: u32 = 8;

/// Checks that stackmark took every frame in the C library from its CFI
/// (the row measures CFI frames, or it fails), and says how many frames
/// each method found: `"context 1, cfi 33"`.
pub fn methods(frames: &[stackmark::Frame]) -> Result<String, String> {
    let table = stackmark::modules::current().ok_or("stackmark::init was not called")?;
    let in_libc = |pc: u64| {
        table.module_for_addr(pc).is_some_and(|m| {
            let name = String::from_utf8_lossy(m.name());
            name.rsplit('/')
                .next()
                .is_some_and(|f| f.starts_with("libc.so"))
        })
    };
    let libc = frames.iter().filter(|f| in_libc(f.pc)).count();
    if libc < QSORT_LEVELS as usize {
        return Err(format!(
            "only {libc} of the {} frames lie in the C library",
            frames.len()
        ));
    }
    if let Some(f) = frames
        .iter()
        .find(|f| in_libc(f.pc) && f.method != stackmark::Method::Cfi)
    {
        return Err(format!(
            "the C library's frame at {} was found by {}, not cfi",
            place(f.pc),
            f.method.name()
        ));
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for f in frames {
        match counts.iter_mut().find(|(m, _)| *m == f.method.name()) {
            Some((_, k)) => *k += 1,
            None => counts.push((f.method.name(), 1)),
        }
    }
    Ok(counts
        .iter()
        .map(|(m, k)| format!("{m} {k}"))
        .collect::<Vec<_>>()
        .join(", "))
}

/// libgcc's return addresses (`_Unwind_Backtrace`, through the `backtrace`
/// crate) from the caller of this function on: the list starts with the
/// return address into the caller, as stackmark's frame 1 is.
// Used by benches/walk.rs alone.
#[allow(dead_code)]
#[inline(never)]
pub fn libgcc_pcs() -> Vec<u64> {
    let mut ips = Vec::with_capacity(512);
    backtrace::trace(|f| {
        ips.push(f.ip() as u64);
        ips.len() < 512
    });
    // Drop the frames of `backtrace::trace` and of this function: the
    // first return address into this function's caller is where the
    // caller's walk (its frame 1) starts.
    let own = ips.iter().position(|&ip| {
        let here = libgcc_pcs as *const () as usize as u64;
        ip > here && ip < here + 4096
    });
    match own {
        Some(i) => ips
            .split_off(i + 1)
            .into_iter()
            .filter(|&ip| ip != 0)
            .collect(),
        None => ips,
    }
}
