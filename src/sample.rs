//! The sampling profiler: a SIGPROF handler that walks the interrupted
//! thread from its `ucontext` into a fixed, lock-free ring of samples, and a
//! reader that drains it outside the handler.
//!
//! The handler allocates nothing and takes no lock, so it is safe wherever
//! the signal lands: inside malloc, the dynamic loader, or a walk. Samples
//! that find the ring full are counted and dropped, never waited for.
//!
//! ```no_run
//! stackmark::init().unwrap();
//! stackmark::sample::start(1000).unwrap(); // 1 kHz of CPU time, all threads
//! // ... the workload ...
//! stackmark::sample::stop();
//! stackmark::sample::drain(|s| println!("{} frames", s.frames().len()));
//! ```

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use crate::walk::{Frame, PcKind};

/// Most frames kept per sample.
pub const SAMPLE_DEPTH: usize = 64;
/// Samples the ring holds before new ones are dropped.
pub const RING_SLOTS: usize = 4096;

/// One sample: the pcs of the interrupted thread, innermost first. Frame 0
/// is the exact interrupted pc; the others are return addresses, except
/// where the walk crossed a signal frame ([`Sample::pc_kind`]).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// The sampled thread's id.
    pub tid: i32,
    len: u16,
    /// Bytes of `name` in use.
    name_len: u8,
    /// Bit `i` set: frame `i` is an exact pc ([`Frame::pc_kind`]).
    precise: u64,
    /// `CLOCK_MONOTONIC` when the handler started, in nanoseconds.
    time_ns: u64,
    /// The thread's name, filled in by [`drain`], never by the handler.
    name: [u8; THREAD_NAME_MAX],
    pcs: [u64; SAMPLE_DEPTH],
}

/// Longest thread name Linux keeps (`TASK_COMM_LEN` less its NUL).
const THREAD_NAME_MAX: usize = 15;

// One bit per frame.
const _: () = assert!(SAMPLE_DEPTH <= 64);

impl Sample {
    /// The pcs, innermost first: the interrupted instruction, then mostly
    /// return addresses. Look a frame up at its pc where
    /// [`Sample::pc_kind`] says so (markup `:pc`), else at `pc - 1`
    /// (`:ra`).
    pub fn frames(&self) -> &[u64] {
        &self.pcs[..self.len as usize]
    }

    /// What frame `i`'s pc is: an exact instruction for frame 0, and, when the
    /// sampled thread was inside a signal handler, for the signal
    /// trampoline the walk crossed and the frame that signal interrupted;
    /// a return address otherwise.
    pub fn pc_kind(&self, i: usize) -> PcKind {
        PcKind::exact_if(i < self.len as usize && self.precise >> i & 1 != 0)
    }

    /// When the sample was taken: `CLOCK_MONOTONIC` in nanoseconds, read
    /// by the handler as it started (comparable with
    /// `clock_gettime(CLOCK_MONOTONIC)` anywhere in the process).
    pub fn time_ns(&self) -> u64 {
        self.time_ns
    }

    /// The sampled thread's name (`/proc/self/task/TID/comm`, at most 15
    /// bytes), read by [`drain`] as it hands the sample out; empty when
    /// the thread had already exited by then.
    pub fn thread_name(&self) -> &[u8] {
        &self.name[..self.name_len as usize]
    }
}

/// The name of thread `tid` of this process, as its `comm` file gives it;
/// empty when there is no such thread (any more) or no procfs.
fn read_thread_name(tid: i32) -> ([u8; THREAD_NAME_MAX], u8) {
    use std::io::Read;
    let mut name = [0u8; THREAD_NAME_MAX];
    let Ok(mut f) = std::fs::File::open(format!("/proc/self/task/{tid}/comm")) else {
        return (name, 0);
    };
    // The name and its newline: 16 bytes at most.
    let mut buf = [0u8; THREAD_NAME_MAX + 1];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    let text = buf[..n].strip_suffix(b"\n").unwrap_or(&buf[..n]);
    let len = text.len().min(THREAD_NAME_MAX);
    name[..len].copy_from_slice(&text[..len]);
    (name, len as u8)
}

/// How samples walk: as a crash report does, to [`SAMPLE_DEPTH`] frames.
/// Scanning stays on, up to three frames in a row: a sample that lands in
/// code with neither a table nor a frame pointer (most of glibc: `malloc`,
/// a futex wait under `pthread_join`) finds each of those frames only by
/// scanning, and one scan in a row left such samples at two frames.
pub const PROFILE_OPTIONS: crate::walk::WalkOptions = crate::walk::WalkOptions {
    max_depth: SAMPLE_DEPTH,
    use_tables: true,
    use_frame_pointers: true,
    scan_words: 64,
    max_scans_in_a_row: 3,
    #[cfg(feature = "internals")]
    fast_path: true,
};

/// A slot of the ring. Position `p` of the ring (counting every sample
/// ever claimed) uses slot `p % RING_SLOTS` in lap `p / RING_SLOTS`; the
/// slot's `lap` word says where it is: `2 * lap` free for that lap's
/// writer, `2 * lap + 1` holding that lap's sample, which the reader turns
/// into `2 * (lap + 1)`. `lap` comes first ([`prefault_ring`] relies on it).
#[repr(C)]
struct Slot {
    lap: AtomicUsize,
    sample: UnsafeCell<Sample>,
}

/// A bounded queue of samples: writers (signal handlers, on any thread)
/// claim positions in order with a compare-exchange on `next`, only when
/// the slot is free for them; the reader takes positions in order from
/// `read`, and stops at one claimed but not yet written, which a later
/// drain takes. Writers never wait: a full ring drops the sample. `next`
/// follows the slots directly ([`prefault_ring`] relies on it). Whole
/// pages of its own, so that a fork child can be given a zeroed copy
/// ([`wipe_ring_on_fork`]).
#[repr(C, align(4096))]
struct Ring {
    slots: [Slot; RING_SLOTS],
    next: AtomicUsize,
    read: AtomicUsize,
    dropped: AtomicU64,
    taken: AtomicU64,
    /// Timer expirations the kernel merged into a signal already pending.
    missed: AtomicU64,
    /// Nanoseconds spent inside the handler, for overhead reports.
    handler_ns: AtomicU64,
}

impl Ring {
    /// The counters [`stats`] reports.
    fn counters(&self) -> [&AtomicU64; 4] {
        [&self.taken, &self.dropped, &self.missed, &self.handler_ns]
    }
}

// SAFETY: a slot's sample is written only by the writer that claimed its
// position (while the slot was free for that lap), and read only by the
// reader after the writer published it; the `lap` word orders the two.
unsafe impl Sync for Ring {}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT: Slot = Slot {
    lap: AtomicUsize::new(0),
    sample: UnsafeCell::new(Sample {
        tid: 0,
        len: 0,
        name_len: 0,
        precise: 0,
        time_ns: 0,
        name: [0; THREAD_NAME_MAX],
        pcs: [0; SAMPLE_DEPTH],
    }),
};

static RING: Ring = Ring {
    slots: [SLOT; RING_SLOTS],
    next: AtomicUsize::new(0),
    read: AtomicUsize::new(0),
    dropped: AtomicU64::new(0),
    taken: AtomicU64::new(0),
    missed: AtomicU64::new(0),
    handler_ns: AtomicU64::new(0),
};

/// Records one sample of the interrupted context `uc`. This is what the
/// SIGPROF handler does; call it from a handler of your own to sample on
/// another signal, after [`crate::init`] (which also readies the ring for
/// `fork`). Async-signal-safe, lock-free, allocation-free.
///
/// # Safety
/// `uc` must be the `ucontext_t` the kernel passed to an `SA_SIGINFO`
/// handler.
pub unsafe fn record(uc: *const c_void) {
    let start = crate::sys::monotonic_ns();
    let mut frames = [Frame::default(); SAMPLE_DEPTH];
    // SAFETY: forwarded from the caller.
    let regs = unsafe { crate::arch::regs_from_ucontext(uc) };
    let n = crate::live::walk_from(regs, PcKind::Exact, PROFILE_OPTIONS, &mut frames);
    match claim() {
        Some((slot, lap)) => {
            // SAFETY: the claim makes this writer the slot's only user
            // until it publishes the sample.
            let s = unsafe { &mut *slot.sample.get() };
            s.tid = crate::sys::gettid();
            s.time_ns = start;
            s.len = n as u16;
            s.precise = 0;
            for (i, (d, f)) in s.pcs.iter_mut().zip(&frames[..n]).enumerate() {
                *d = f.pc;
                s.precise |= u64::from(f.pc_kind.is_exact()) << i;
            }
            slot.lap.store(2 * lap + 1, Release);
            RING.taken.fetch_add(1, Relaxed);
        }
        None => {
            RING.dropped.fetch_add(1, Relaxed);
        }
    }
    RING.handler_ns
        .fetch_add(crate::sys::monotonic_ns().saturating_sub(start), Relaxed);
}

/// Claims the next position of the ring: its slot and lap, or `None` when
/// the ring is full (the slot still holds a sample of an earlier lap, read
/// or written by no one yet). Lock-free: a writer retries only when another
/// claimed the position first.
fn claim() -> Option<(&'static Slot, usize)> {
    let mut pos = RING.next.load(Relaxed);
    loop {
        let slot = &RING.slots[pos % RING_SLOTS];
        let lap = pos / RING_SLOTS;
        let at = slot.lap.load(Acquire);
        if at == 2 * lap {
            match RING
                .next
                .compare_exchange_weak(pos, pos + 1, Relaxed, Relaxed)
            {
                Ok(_) => return Some((slot, lap)),
                Err(now) => pos = now,
            }
        } else if at < 2 * lap {
            return None;
        } else {
            pos = RING.next.load(Relaxed);
        }
    }
}

/// `si_code` of a signal from a POSIX timer (`timer_create`).
const SI_TIMER: c_int = -2;

/// The head of a Linux `siginfo_t` for a timer's signal (64-bit layout:
/// three ints, padding, then the union's `_timer` member).
#[repr(C)]
struct TimerInfo {
    signo: c_int,
    errno: c_int,
    code: c_int,
    _pad: c_int,
    timer_id: c_int,
    overrun: c_int,
    /// The timer's `sigev_value`.
    value: usize,
}

const _: () = assert!(core::mem::offset_of!(TimerInfo, value) == 24);

/// What a [`ThreadTimer`] puts in its signals' value: the address of this
/// static, which no other timer of the program has reason to name.
static OURS: u8 = 0;

/// How many expirations of the [`ThreadTimer`] that sent `info` gave no
/// signal of their own (0 for any other signal, another timer's too).
///
/// # Safety
/// `info` must be the kernel's siginfo for this handler.
unsafe fn timer_overrun(info: *const libc::siginfo_t) -> u64 {
    // SAFETY: the kernel's siginfo is 128 bytes, of which the timer
    // fields are the first 32; they hold the overrun and value only for
    // SI_TIMER.
    let t = unsafe { &*(info as *const TimerInfo) };
    if t.code == SI_TIMER && t.value == &OURS as *const u8 as usize {
        t.overrun.max(0) as u64
    } else {
        0
    }
}

extern "C" fn on_sigprof(_sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // A thread timer that expired again while its signal was pending (the
    // thread waited for a CPU) gives one signal for several periods: those
    // samples are lost, and counted.
    // SAFETY: `info` comes from the kernel.
    let overrun = unsafe { timer_overrun(info) };
    if overrun > 0 {
        RING.missed.fetch_add(overrun, Relaxed);
    }
    // SAFETY: `uc` comes from the kernel.
    crate::sys::keeping_errno(|| unsafe { record(uc) });
}

/// Starts sampling every thread at `hz` samples per second of CPU time
/// (`setitimer(ITIMER_PROF)` and SIGPROF). Builds the module table first if
/// needed. Not async-signal-safe; call from normal code.
///
/// The kernel advances CPU-time timers at its scheduler tick (`CONFIG_HZ`,
/// 250 on Debian's kernels), so whatever rate is asked, each busy thread
/// gets at most that many samples per second. For a higher rate, see
/// [`ThreadTimer`].
pub fn start(hz: u32) -> std::io::Result<()> {
    let p = period(hz)?;
    install()?;
    set_timer(p)
}

/// The highest rate [`start`] and [`ThreadTimer::start`] take: a sample
/// every 100 µs. A walk in the handler takes about a microsecond in an
/// optimised build, but many times that in a debug build or under
/// emulation, and a timer that fires again before its handler returns
/// leaves the thread no time to run.
pub const MAX_HZ: u32 = 10_000;

/// The time between samples at `hz` samples a second; an error outside
/// 1..=[`MAX_HZ`] (a zero period would disarm the timer, and the call would
/// seem to work but take no sample).
fn period(hz: u32) -> std::io::Result<core::time::Duration> {
    if hz == 0 || hz > MAX_HZ {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "sampling rate out of range: 1 to stackmark::sample::MAX_HZ (10,000) Hz",
        ));
    }
    Ok(core::time::Duration::from_nanos(
        1_000_000_000 / u64::from(hz),
    ))
}

/// Installs the SIGPROF handler and, the first time, readies the ring and
/// refreshes the module table (building it first if needed).
fn install() -> std::io::Result<()> {
    if crate::modules::current().is_none() {
        let _ = crate::live::init_table();
    }
    // SAFETY: installs a handler that only records samples.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_sigprof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGPROF, &sa, core::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    ready_for_fork();
    // Once, by whichever start claims it; the others go on without waiting
    // (a handler walks from its `ucontext` and needs neither step). A
    // refresh per timer started would cost every new thread of a profiled
    // program a rebuild of the table.
    static READY: AtomicBool = AtomicBool::new(false);
    if READY.compare_exchange(false, true, SeqCst, SeqCst).is_ok() {
        // The handler's trampoline is known now: let walks cross it. Not
        // worth a wait for a guard someone holds on the table this reuses:
        // failing leaves it to the program's next refresh.
        let _ = crate::discover::linux::refresh_waiting(FIRST_START_WAIT);
        wipe_ring_on_fork();
        prefault_ring();
    }
    Ok(())
}

/// How long the first start's refresh waits for walks on the table it
/// reuses: walks take microseconds; a guard held longer makes it give up.
const FIRST_START_WAIT: core::time::Duration = core::time::Duration::from_millis(20);

/// Has [`forget_samples_in_child`] run after every `fork`. Called by
/// [`crate::init`] and whatever starts the SIGPROF handler, so that a
/// handler of the program's own that calls [`record`] is covered too.
pub(crate) fn ready_for_fork() {
    static AT_FORK: AtomicBool = AtomicBool::new(false);
    crate::sys::once_in_fork_child(&AT_FORK, forget_samples_in_child);
}

/// In a child after `fork`: only the forking thread is left, so a slot
/// another thread had claimed but not yet written would never be, and
/// every drain would stop there for good. The child drops what the ring
/// held (the parent's samples, which the parent drains), touching only the
/// slots in use, and starts its counters from zero. A drain another thread
/// was running is over too.
extern "C" fn forget_samples_in_child() {
    let (read, next) = (RING.read.load(Relaxed), RING.next.load(Relaxed));
    for p in read..next {
        RING.slots[p % RING_SLOTS]
            .lap
            .store(2 * (p / RING_SLOTS + 1), Relaxed);
    }
    RING.read.store(next, Relaxed);
    for c in RING.counters() {
        c.store(0, Relaxed);
    }
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    if DRAINER.load(Relaxed) != me {
        DRAINER.store(0, Relaxed);
    }
}

/// Samples the thread that creates it, `hz` times per second of wall-clock
/// time, until dropped: a `timer_create(CLOCK_MONOTONIC)` timer whose
/// SIGPROF goes to that thread alone (`SIGEV_THREAD_ID`), recorded by the
/// same handler and ring as [`start`]'s.
///
/// Unlike the CPU-time timer of [`start`], which the kernel advances only
/// at its scheduler tick (at most `CONFIG_HZ`, often 250, samples per
/// second), this is a high-resolution timer and keeps the rate asked (998
/// signals a second asked at 1000 Hz on a 250 Hz kernel, against 250 from
/// `ITIMER_PROF`). It counts wall time: a thread that sleeps or blocks is
/// sampled where it waits. Create it on each thread to be sampled; it may
/// be sent to another thread (a profiler's controller, say) and dropped
/// there, which stops the samples of the thread that made it.
///
/// Two things follow from signalling a thread that waits:
/// * System calls the kernel does not restart after a handler, even with
///   `SA_RESTART` (`poll`, `epoll_wait`, `select`, `nanosleep`, socket
///   reads and writes with a timeout set), fail with `EINTR` in the
///   sampled thread, and Rust's standard library passes that on
///   (`ErrorKind::Interrupted`) for some of them. Code sampled this way
///   must retry on `EINTR`, as code run under any signal-based profiler
///   must.
/// * Periods that end while the thread waits for a CPU give one signal
///   between them; the samples lost so are counted in [`Stats::missed`].
///
/// An error for a rate outside 1..=[`MAX_HZ`].
///
/// ```no_run
/// stackmark::init().unwrap();
/// let timer = stackmark::sample::ThreadTimer::start(1000).unwrap();
/// // ... this thread's work ...
/// drop(timer);
/// stackmark::sample::drain(|s| println!("{} frames", s.frames().len()));
/// ```
#[derive(Debug)]
pub struct ThreadTimer {
    id: libc::timer_t,
    /// The process that made the timer: a child after `fork` inherits the
    /// value but not the timer, and its own first timer may get the same id.
    pid: libc::pid_t,
}

impl ThreadTimer {
    /// Arms a timer for the calling thread at `hz` samples a second (1 to
    /// [`MAX_HZ`]). Not async-signal-safe; call from normal code.
    pub fn start(hz: u32) -> std::io::Result<ThreadTimer> {
        let p = period(hz)?;
        install()?;
        // SAFETY: a zeroed sigevent is valid; the fields set below name the
        // signal and the calling thread.
        let mut ev: libc::sigevent = unsafe { core::mem::zeroed() };
        ev.sigev_notify = libc::SIGEV_THREAD_ID;
        ev.sigev_signo = libc::SIGPROF;
        ev.sigev_notify_thread_id = crate::sys::gettid();
        ev.sigev_value = libc::sigval {
            sival_ptr: &OURS as *const u8 as *mut c_void,
        };
        let mut id: libc::timer_t = core::ptr::null_mut();
        // SAFETY: valid sigevent and out-pointer.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let timer = ThreadTimer { id, pid };
        let p = libc::timespec {
            tv_sec: p.as_secs() as _,
            tv_nsec: p.subsec_nanos() as _,
        };
        let spec = libc::itimerspec {
            it_interval: p,
            it_value: p,
        };
        // SAFETY: a timer created above and a valid itimerspec.
        if unsafe { libc::timer_settime(timer.id, 0, &spec, core::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(timer)
    }
}

// SAFETY: a timer id is a process-wide handle: `timer_delete` (the only
// use of it after `start`) may be called from any thread, and dropping the
// timer on another thread stops the signals to the thread that made it.
unsafe impl Send for ThreadTimer {}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != self.pid {
            return;
        }
        // SAFETY: the timer this value created in this process, deleted
        // once; a signal it already sent is still handled by the installed
        // handler.
        unsafe { libc::timer_delete(self.id) };
    }
}

/// Writes every page of the ring once, here rather than in the handler.
/// The ring is 2 MiB of zero-filled static memory: left alone, its pages
/// are faulted in one by one by the samples that first land on them,
/// inside the handler, and in a virtual machine such a fault can cost more
/// than a hundred walks. Each slot's `lap` word is rewritten with its own
/// value by a compare-exchange (a write the compiler keeps, unlike an
/// atomic add of 0), which leaves a sample in flight intact. A slot is
/// smaller than a page, so every page the slots span holds a `lap` word,
/// except perhaps the last, which holds the tail of the last slot only:
/// `next`, just after the slots, is rewritten the same way for that one.
fn prefault_ring() {
    let rewrite = |w: &AtomicUsize| {
        let s = w.load(Relaxed);
        let _ = w.compare_exchange(s, s, Relaxed, Relaxed);
    };
    for slot in &RING.slots {
        rewrite(&slot.lap);
    }
    rewrite(&RING.next);
    rewrite(&RING.read);
    for c in RING.counters() {
        let v = c.load(Relaxed);
        let _ = c.compare_exchange(v, v, Relaxed, Relaxed);
    }
}

/// Has the kernel give a fork child a zeroed ring instead of sharing its
/// pages. Shared, they turn copy-on-write at every `fork` (a `Command`
/// with `pre_exec`, a forking server), and the parent's samples fault them
/// in again one by one, inside the handler, undoing [`prefault_ring`].
/// The child's ring starts empty anyway ([`forget_samples_in_child`]), and
/// all zeros is the empty ring (`RING`'s initial value). Linux 4.14 and
/// later (`MADV_WIPEONFORK`); on an older kernel the pages stay shared.
fn wipe_ring_on_fork() {
    // SAFETY: `RING` is page-aligned and a whole number of pages, in the
    // program's zero-initialised (anonymous) data; the advice changes no
    // byte of it in this process.
    unsafe {
        libc::madvise(
            (&raw const RING).cast_mut().cast(),
            core::mem::size_of::<Ring>(),
            libc::MADV_WIPEONFORK,
        )
    };
}

// What `prefault_ring` relies on: slots smaller than a page, each
// starting with its `lap`, and `next` just after the last.
const _: () = assert!(core::mem::size_of::<Slot>() <= 4096);
const _: () = assert!(core::mem::offset_of!(Slot, lap) == 0);
const _: () =
    assert!(core::mem::offset_of!(Ring, next) == core::mem::size_of::<[Slot; RING_SLOTS]>());

/// Arms `ITIMER_PROF` every `p`; zero disarms it.
fn set_timer(p: core::time::Duration) -> std::io::Result<()> {
    let tv = libc::timeval {
        tv_sec: p.as_secs() as _,
        tv_usec: p.subsec_micros() as _,
    };
    let it = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: setitimer with a valid itimerval.
    if unsafe { libc::setitimer(libc::ITIMER_PROF, &it, core::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Stops the timer (the handler stays installed, so a late signal is still
/// harmless).
pub fn stop() {
    let _ = set_timer(core::time::Duration::ZERO);
}

/// The thread running [`drain`] (its `pthread_self`), 0 for none.
static DRAINER: AtomicU64 = AtomicU64::new(0);

/// Hands every recorded sample to `f`, oldest first, and frees its slot;
/// returns how many. One drain runs at a time: a call made while another
/// runs, on another thread or from inside `f`, hands out nothing and
/// returns 0. Call it outside signal handlers.
///
/// Each sample gets its thread's name here ([`Sample::thread_name`]): the
/// handler cannot open a file. It is read once per thread per drain, so a
/// thread renamed between the sample and the drain gives its new name,
/// one that has exited gives none, and one whose id a new thread took
/// gives that thread's: drain before joining threads whose names matter.
pub fn drain(mut f: impl FnMut(&Sample)) -> usize {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    if DRAINER.compare_exchange(0, me, Acquire, Relaxed).is_err() {
        return 0;
    }
    /// Ends the drain however `f` leaves it (a panic included).
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            DRAINER.store(0, Release);
        }
    }
    let _done = Done;
    let mut n = 0;
    // Names read during this drain: a file read per thread, not per sample.
    let mut names: Vec<(i32, ([u8; THREAD_NAME_MAX], u8))> = Vec::new();
    loop {
        let r = RING.read.load(Relaxed);
        let slot = &RING.slots[r % RING_SLOTS];
        let lap = r / RING_SLOTS;
        // Not written yet (or not even claimed): a later drain takes it,
        // in its turn.
        if slot.lap.load(Acquire) != 2 * lap + 1 {
            return n;
        }
        // SAFETY: the writer published the sample, and no writer takes
        // the slot until it is handed back below. Copied out first, so `f`
        // never sees a slot a writer may already be reusing, and a sample
        // is handed out once even if `f` panics.
        let mut sample = unsafe { *slot.sample.get() };
        slot.lap.store(2 * (lap + 1), Release);
        RING.read.store(r + 1, Relaxed);
        n += 1;
        let known = names.iter().find(|(t, _)| *t == sample.tid).map(|e| e.1);
        let (name, len) = known.unwrap_or_else(|| {
            let got = read_thread_name(sample.tid);
            names.push((sample.tid, got));
            got
        });
        (sample.name, sample.name_len) = (name, len);
        f(&sample);
    }
}

/// The profiler's counters since the process started (in a child after
/// `fork`, since the fork).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Samples recorded.
    pub taken: u64,
    /// Samples dropped because the ring was full (drain more often).
    pub dropped: u64,
    /// Samples a [`ThreadTimer`] never signalled: periods that ended while
    /// its last signal was still pending (the thread waited for a CPU, or
    /// had the signal blocked), which the kernel merges into that signal.
    pub missed: u64,
    /// Nanoseconds spent in the handler.
    pub handler_ns: u64,
}

/// The counters: samples recorded, dropped and missed, and time spent in
/// the handler.
pub fn stats() -> Stats {
    Stats {
        taken: RING.taken.load(Relaxed),
        dropped: RING.dropped.load(Relaxed),
        missed: RING.missed.load(Relaxed),
        handler_ns: RING.handler_ns.load(Relaxed),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod fork_tests {
    use super::*;

    /// A sample of the calling thread, through the handler's own path.
    fn record_here() {
        // SAFETY: getcontext fills `uc` with this thread's context, which
        // `record` walks as a signal handler's would be.
        unsafe {
            let mut uc: libc::ucontext_t = core::mem::zeroed();
            libc::getcontext(&mut uc);
            record((&uc as *const libc::ucontext_t).cast());
        }
    }

    /// The tests that drain take turns: a drain running elsewhere makes
    /// another hand out nothing.
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn turn() -> std::sync::MutexGuard<'static, ()> {
        TURN.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn a_drain_inside_a_drain_or_beside_one_hands_out_nothing_and_wedges_nothing() {
        let _t = turn();
        crate::live::init_table().unwrap();
        drain(|_| {});
        let me = crate::sys::gettid();
        for _ in 0..3 {
            record_here();
        }
        // From inside the callback: once each, and the ring goes on.
        let (mut outer, mut inner) = (0, 0);
        drain(|s| {
            outer += usize::from(s.tid == me);
            inner += drain(|_| {});
        });
        assert_eq!((outer, inner), (3, 0));
        // From another thread while this one drains.
        record_here();
        let mut beside = None;
        drain(|_| {
            if beside.is_none() {
                beside = Some(std::thread::spawn(|| drain(|_| {})).join().unwrap());
            }
        });
        assert_eq!(beside, Some(0));
        for _ in 0..2 {
            record_here();
        }
        let mut later = 0;
        drain(|s| later += usize::from(s.tid == me));
        assert_eq!(later, 2, "the ring still hands samples out");
    }

    #[test]
    fn a_sample_carries_the_time_it_was_taken_and_its_threads_name() {
        let _t = turn();
        crate::live::init_table().unwrap();
        drain(|_| {});
        let (tid, before, after) = std::thread::Builder::new()
            .name("sampled-thread".into())
            .spawn(|| {
                let before = crate::sys::monotonic_ns();
                record_here();
                (crate::sys::gettid(), before, crate::sys::monotonic_ns())
            })
            .unwrap()
            .join()
            .unwrap();
        // The thread has exited: its name is gone with it. `join` returns
        // once the kernel clears the thread's id, a little before its
        // `/proc` entry goes (later still under qemu-user): wait for that.
        let task = format!("/proc/self/task/{tid}");
        for _ in 0..2000 {
            if !std::path::Path::new(&task).exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut gone = Vec::new();
        drain(|s| gone.extend((s.tid == tid).then(|| (s.thread_name().to_vec(), s.time_ns()))));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, b"");
        // The handler's clock reading lies between the thread's own two.
        assert!(
            (before..=after).contains(&gone[0].1),
            "{before} {gone:?} {after}"
        );
        // Drained while the thread lives: its name, as the kernel keeps it.
        let (ready, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            let t = std::thread::Builder::new()
                .name("a-longer-name-than-fits".into())
                .spawn_scoped(s, || {
                    record_here();
                    ready.wait();
                    done.wait();
                    crate::sys::gettid()
                })
                .unwrap();
            ready.wait();
            let mut seen = Vec::new();
            drain(|s| seen.push((s.tid, s.thread_name().to_vec())));
            done.wait();
            let tid = t.join().unwrap();
            let (_, name) = seen.iter().find(|e| e.0 == tid).expect("its sample");
            // Cut to the kernel's 15 bytes, as `ps` shows it.
            assert_eq!(name, b"a-longer-name-t");
        });
    }

    #[test]
    fn a_child_after_fork_is_not_stuck_behind_a_sample_another_thread_was_writing() {
        let _t = turn();
        install().unwrap();
        drain(|_| {});
        // A thread that was sampled when the process forked: it claimed a
        // slot and had not written it yet.
        let (slot, lap) = claim().expect("a free slot");
        // SAFETY: the child only records, drains and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let me = crate::sys::gettid();
            record_here();
            let mut mine = 0;
            drain(|s| mine += i32::from(s.tid == me));
            // SAFETY: _exit is async-signal-safe and ends the child at once.
            unsafe { libc::_exit(if mine == 1 { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        // Here the writer finishes, as it would have.
        slot.lap.store(2 * lap + 1, Release);
        drain(|_| {});
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's own sample was never handed out ({status:#x})"
        );
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod timer_fork_tests {
    use super::*;

    /// Whether the kernel still holds timer `id` for this process.
    fn alive(id: libc::timer_t) -> bool {
        // SAFETY: a zeroed itimerspec to fill; timer_gettime checks the id.
        let mut spec: libc::itimerspec = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::timer_gettime(id, &mut spec) == 0 }
    }

    /// x86_64 only: qemu-user, which runs the AArch64 tests, keeps its own
    /// table of timers and gives a child other ids.
    #[test]
    fn a_timer_value_a_fork_child_inherits_never_deletes_the_childs_own_timer() {
        let inherited = ThreadTimer::start(10).unwrap();
        // SAFETY: the child makes timers, drops a value and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Timers are not inherited; the child's own get ids from the
            // lowest up, so one of the first lands on the inherited id.
            let mut own = None;
            for _ in 0..64 {
                // SAFETY: a zeroed sigevent is valid.
                let mut ev: libc::sigevent = unsafe { core::mem::zeroed() };
                ev.sigev_notify = libc::SIGEV_NONE;
                let mut id: libc::timer_t = core::ptr::null_mut();
                // SAFETY: valid sigevent and out-pointer.
                if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id) } != 0 {
                    break;
                }
                if id == inherited.id {
                    own = Some(id);
                    break;
                }
            }
            let code = match own {
                None => 2,
                Some(id) => {
                    drop(inherited);
                    if alive(id) {
                        0
                    } else {
                        1
                    }
                }
            };
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        match libc::WEXITSTATUS(status) {
            0 => {}
            1 => panic!("dropping the inherited value deleted the child's timer"),
            c => panic!("the child got no timer with the inherited id ({c})"),
        }
        assert!(alive(inherited.id), "the parent's timer");
    }
}

// x86_64 only: under qemu-user (how the AArch64 tests run), pagemap
// describes the emulator's pages.
#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    /// Whether the page holding `addr` has been written: present and mapped
    /// by this process alone (not the shared zero page), or swapped out
    /// (the zero page never is), from `/proc/self/pagemap` (bits 63, 56
    /// and 62, readable without privileges).
    fn written(pagemap: &mut std::fs::File, addr: usize) -> bool {
        let mut e = [0u8; 8];
        pagemap
            .seek(SeekFrom::Start((addr / 4096 * 8) as u64))
            .unwrap();
        pagemap.read_exact(&mut e).unwrap();
        let e = u64::from_ne_bytes(e);
        (e & (1 << 63) != 0 && e & (1 << 56) != 0) || e & (1 << 62) != 0
    }

    const CHILD: &str = "STACKMARK_PREFAULT_CHECK";

    /// The check runs in a fresh copy of this test binary running only this
    /// test: other tests here fork (which shares every page with the child
    /// for a while) and take samples (which writes ring pages, and would
    /// hide a page the prefault missed).
    #[test]
    fn starting_writes_every_page_of_the_ring_so_the_handler_never_faults_one_in() {
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "sample::tests::starting_writes_every_page_of_the_ring_so_the_handler_never_faults_one_in",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let Ok(mut pagemap) = std::fs::File::open("/proc/self/pagemap") else {
            return; // no procfs: nothing to check against
        };
        let start = RING.slots.as_ptr() as usize;
        let end = start + core::mem::size_of_val(&RING.slots);
        let pages: Vec<usize> = (start / 4096..=(end - 1) / 4096)
            .map(|p| (p * 4096).max(start))
            .collect();
        // Proves the check can fail: before the prefault, the ring's pages
        // (in .bss, and never touched yet in this fresh process) are not
        // all written.
        let before = pages.iter().filter(|&&p| written(&mut pagemap, p)).count();
        assert!(before < pages.len(), "{before} of {} pages", pages.len());
        prefault_ring();
        let mut unwritten: Vec<usize> = pages.clone();
        // A written page can read as absent for a moment, while the kernel
        // migrates it (compaction): look again at those, for up to a second.
        for _ in 0..50 {
            unwritten.retain(|&p| !written(&mut pagemap, p));
            if unwritten.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(unwritten.len(), 0, "of {} pages", pages.len());
    }
}
