//! Every thread's stack, in a crash report and on demand (Linux).
//!
//! The thread that reports lists the process's threads with `getdents64`
//! on `/proc/self/task` and reads each one's name, scheduler state and
//! blocked signals from `/proc/self/task/TID/status`. It then queues a
//! reserved real-time signal ([`Options::signal`]) to each thread with
//! `rt_tgsigqueueinfo`; the thread's handler walks its own stack from its
//! `ucontext` into a slot reserved by [`configure`], and the reporter
//! waits for the answers until [`Options::deadline`]. Nothing on that path
//! allocates or takes a lock: the slots and the list of threads are
//! reserved once, outside any handler.
//!
//! A thread that cannot answer is listed with the reason and no stack: it
//! blocks the signal (a thread inside a crash handler does), it is stopped
//! (`SIGSTOP`, a debugger), it did not answer before the deadline (asleep
//! in the kernel, state `D`), or every slot was taken. A thread that
//! exited meanwhile is listed as gone. See `docs/threads.md` for the
//! report's format.
//!
//! [`crate::install_crash_handler`] reserves all this with the default
//! [`Options`], so a crash report shows every thread unless
//! [`set_in_crash_reports`] turned that off.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::OnceLock;

use crate::markup::{FdSink, Markup, MarkupModule};
use crate::walk::Frame;

/// The options of the thread dump, fixed by the first [`configure`] (or by
/// the first crash-handler install or dump, with the defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The signal each thread is interrupted with. Default: 50
    /// (`SIGRTMIN + 16` with glibc), a real-time signal in the middle of
    /// the range: glibc takes 32 and 33 for itself, runtimes that use
    /// real-time signals take theirs from either end (`SIGRTMIN`,
    /// `SIGRTMAX`), and qemu-user reserves the top two.
    pub signal: c_int,
    /// How long a report waits, in all, for the threads to answer.
    /// Default: 200 ms. Walks take microseconds; a thread that has not
    /// answered by then is listed without its stack.
    pub deadline: core::time::Duration,
    /// How many threads can be walked in one report (one slot each), up
    /// to 2^20. Default: 256. Threads past them are listed without a
    /// stack.
    pub slots: usize,
    /// Most frames kept per thread. Default: 128.
    pub frames: usize,
    /// Whether the handler is installed with `SA_RESTART`, so that a system
    /// call the signal interrupts is restarted where the kernel can (else
    /// it fails with `EINTR`). Default: `true`.
    pub restart: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            signal: DEFAULT_SIGNAL,
            deadline: core::time::Duration::from_millis(200),
            slots: 256,
            frames: 128,
            restart: true,
        }
    }
}

/// The default [`Options::signal`].
const DEFAULT_SIGNAL: c_int = 50;

/// Most threads a report lists (walked or not); more are counted only.
const MAX_LISTED: usize = 4096;

/// Why the thread dump could not be set up or run.
#[derive(Debug)]
pub enum Error {
    /// The options were fixed already, by an earlier [`configure`] or by
    /// the crash handler's install or a dump with the defaults.
    AlreadyConfigured,
    /// The signal is not one this can use: outside 1..=64, one of the
    /// crash signals, or `SIGKILL`/`SIGSTOP`.
    BadSignal(c_int),
    /// The program has its own handler for the signal; it is left alone.
    /// Choose another [`Options::signal`].
    SignalTaken(c_int),
    /// The module table could not be built.
    Init(crate::live::InitError),
    /// A system call failed.
    Os(std::io::Error),
    /// Another report kept the report turn for its whole wait, or a crash
    /// is being reported.
    Busy,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::AlreadyConfigured => f.write_str("the thread dump is configured already"),
            Error::BadSignal(s) => write!(f, "signal {s} cannot be used for the thread dump"),
            Error::SignalTaken(s) => write!(f, "the program has its own handler for signal {s}"),
            Error::Init(e) => write!(f, "building the module table: {e}"),
            Error::Os(e) => write!(f, "setting up the thread dump: {e}"),
            Error::Busy => f.write_str("another report kept the report turn"),
        }
    }
}

impl std::error::Error for Error {}

/// What one dump found: every listed thread falls in one of the counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Threads listed, the calling (or crashing) thread included.
    pub threads: usize,
    /// Threads whose stack is shown.
    pub walked: usize,
    /// Threads listed without a stack (blocked, stopped, no answer, no
    /// slot, gone).
    pub without_stack: usize,
    /// Threads beyond the 4096 a report lists, counted only.
    pub not_listed: usize,
}

/// What became of one listed thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Asked, and answering (its slot holds its frames once done).
    Asked,
    /// Its slot holds its walk.
    Walked,
    /// It blocks the signal.
    Blocked,
    /// Stopped by a signal (`T`).
    Stopped,
    /// No answer by the deadline.
    NoAnswer,
    /// Answered, but its walk was still running at the deadline.
    WalkUnfinished,
    /// Every slot was in use.
    NoSlot,
    /// It exited before it could be asked or answer.
    Gone,
    /// The signal could not be queued (the queue limit).
    NotQueued,
}

/// One listed thread, written by the reporter only.
#[derive(Clone, Copy)]
struct Listed {
    tid: i32,
    state: u8,
    name: [u8; 16],
    name_len: u8,
    outcome: Outcome,
    slot: u32,
}

const EMPTY_LISTED: Listed = Listed {
    tid: 0,
    state: b'?',
    name: [0; 16],
    name_len: 0,
    outcome: Outcome::Gone,
    slot: 0,
};

/// A slot's `token`: 0 free, else `dump << 2 | phase`.
const REQUESTED: u64 = 1;
const WALKING: u64 = 2;
const DONE: u64 = 3;

/// One thread's walk. The token orders the handler's writes before the
/// reporter's reads.
struct Slot {
    token: AtomicU64,
    len: AtomicUsize,
    more: AtomicBool,
}

/// Everything [`configure`] reserves.
struct Reserved {
    opts: Options,
    slots: Box<[Slot]>,
    /// `opts.frames` frames per slot, slot after slot.
    frames: Box<[UnsafeCell<Frame>]>,
    listed: Box<[UnsafeCell<Listed>]>,
    /// The reporter's own walk (the calling thread of a dump).
    own: Box<[UnsafeCell<Frame>]>,
}

// SAFETY: a slot's frames are written only by the handler that moved its
// token from REQUESTED to WALKING for the current dump, and read by the
// reporter only after the handler stored DONE; `listed` and `own` are
// used only by the thread holding the report turn.
unsafe impl Sync for Reserved {}

static RESERVED: OnceLock<Reserved> = OnceLock::new();
/// The number of the current (or last) dump.
static DUMP: AtomicU64 = AtomicU64::new(0);
/// Whether crash reports show the other threads.
static IN_CRASH_REPORTS: AtomicBool = AtomicBool::new(true);
/// Set when the program had its own handler for the signal at setup: the
/// crash report says so instead of the other threads.
static TAKEN_BY_PROGRAM: AtomicI32 = AtomicI32::new(0);

/// Turns the other threads' sections of crash reports on (the default) or
/// off. Off, a crash report shows the crashing thread only and interrupts
/// no other thread.
pub fn set_in_crash_reports(on: bool) {
    IN_CRASH_REPORTS.store(on, SeqCst);
}

/// Reserves the slots and installs the signal handler with `opts`. Call it
/// before [`crate::install_crash_handler`] to change the defaults; the
/// options are fixed from then on. Fails with [`Error::SignalTaken`],
/// changing nothing, if the program already handles the signal.
pub fn configure(opts: Options) -> Result<(), Error> {
    if RESERVED.get().is_some() {
        return Err(Error::AlreadyConfigured);
    }
    setup(opts)
}

/// Sets up with `opts` unless set up already (by anyone).
fn setup(opts: Options) -> Result<(), Error> {
    let sig = opts.signal;
    if !(1..=64).contains(&sig)
        || crate::report::CRASH_SIGNALS.contains(&sig)
        || sig == libc::SIGKILL
        || sig == libc::SIGSTOP
    {
        return Err(Error::BadSignal(sig));
    }
    if crate::modules::current().is_none() {
        crate::live::init_table().map_err(Error::Init)?;
    }
    let mut result = Ok(());
    RESERVED.get_or_init(|| {
        result = install_handler(&opts);
        // A request names its slot in the low 20 bits of its value.
        let slots = if result.is_ok() {
            opts.slots.min(1 << 20)
        } else {
            0
        };
        let frames = opts.frames.max(1);
        let cell = |_| UnsafeCell::new(Frame::default());
        Reserved {
            opts: Options { frames, ..opts },
            slots: (0..slots)
                .map(|_| Slot {
                    token: AtomicU64::new(0),
                    len: AtomicUsize::new(0),
                    more: AtomicBool::new(false),
                })
                .collect(),
            frames: (0..slots * frames).map(cell).collect(),
            listed: (0..MAX_LISTED)
                .map(|_| UnsafeCell::new(EMPTY_LISTED))
                .collect(),
            own: (0..crate::report::MAX_CRASH_FRAMES).map(cell).collect(),
        }
    });
    crate::report::forget_reports_in_child();
    result
}

/// Installs [`on_signal`] for `opts.signal`, unless the program handles
/// that signal already.
fn install_handler(opts: &Options) -> Result<(), Error> {
    // SAFETY: reads the current action, then installs a fully initialised
    // one.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(opts.signal, core::ptr::null(), &mut old) != 0 {
            return Err(Error::Os(std::io::Error::last_os_error()));
        }
        if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
            TAKEN_BY_PROGRAM.store(opts.signal, SeqCst);
            return Err(Error::SignalTaken(opts.signal));
        }
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        if opts.restart {
            sa.sa_flags |= libc::SA_RESTART;
        }
        // The walk runs on the thread's own stack: the alternate stacks
        // threads get are small.
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(opts.signal, &sa, core::ptr::null_mut()) != 0 {
            return Err(Error::Os(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Sets up with the default options unless done already; the crash
/// handler's install calls it. A program handling the default signal
/// itself keeps its handler, and its crash reports say so.
pub(crate) fn setup_default() {
    if RESERVED.get().is_none() {
        let _ = setup(Options::default());
    }
}

/// The head of a Linux `siginfo_t` sent with `SI_QUEUE`: three ints,
/// padding, then the sender's pid and uid and the value (64-bit layout).
#[repr(C)]
struct QueuedInfo {
    signo: c_int,
    errno: c_int,
    code: c_int,
    _pad: c_int,
    pid: c_int,
    uid: u32,
    value: u64,
    _rest: [u64; 12],
}

const _: () = assert!(core::mem::size_of::<QueuedInfo>() == 128);
const SI_QUEUE: c_int = -1;

/// The value a request carries: the dump's number and the slot's index.
fn request_value(dump: u64, slot: usize) -> u64 {
    dump << 20 | slot as u64
}

extern "C" fn on_signal(_sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // SAFETY: the kernel's siginfo is 128 bytes.
    let q = unsafe { &*(info as *const QueuedInfo) };
    // SAFETY: getpid has no preconditions.
    if q.code != SI_QUEUE || q.pid != unsafe { libc::getpid() } {
        return;
    }
    let Some(r) = RESERVED.get() else {
        return;
    };
    let (dump, index) = (q.value >> 20, (q.value & 0xf_ffff) as usize);
    let Some(slot) = r.slots.get(index) else {
        return;
    };
    // A request of a dump given up on, or a signal that is no request:
    // the token tells.
    if slot
        .token
        .compare_exchange(dump << 2 | REQUESTED, dump << 2 | WALKING, AcqRel, Relaxed)
        .is_err()
    {
        return;
    }
    crate::sys::keeping_errno(|| {
        let n = r.opts.frames;
        // SAFETY: the token makes this handler the slot's only writer
        // until it stores DONE.
        let out = unsafe { frames_mut(&r.frames[index * n..(index + 1) * n]) };
        // SAFETY: `uc` is the kernel's ucontext.
        let regs = unsafe { crate::arch::regs_from_ucontext(uc) };
        let (len, more) = crate::live::walk_for_report(regs, crate::walk::PcKind::Exact, out);
        slot.len.store(len, Relaxed);
        slot.more.store(more, Relaxed);
    });
    slot.token.store(dump << 2 | DONE, Release);
}

/// The frames of a run of cells, writable.
///
/// # Safety
/// The caller must be their only user for the borrow.
#[allow(clippy::mut_from_ref)]
unsafe fn frames_mut(cells: &[UnsafeCell<Frame>]) -> &mut [Frame] {
    // SAFETY: UnsafeCell<Frame> has Frame's layout; exclusive use by the
    // caller's contract.
    unsafe { core::slice::from_raw_parts_mut(cells.as_ptr() as *mut Frame, cells.len()) }
}

/// The frames of a run of cells.
///
/// # Safety
/// Nobody may write them for the borrow.
unsafe fn frames_ref(cells: &[UnsafeCell<Frame>]) -> &[Frame] {
    // SAFETY: as in `frames_mut`.
    unsafe { core::slice::from_raw_parts(cells.as_ptr() as *const Frame, cells.len()) }
}

/// Opens `path` (NUL-terminated) read-only.
fn open(path: &[u8]) -> Option<c_int> {
    // SAFETY: `path` is NUL-terminated; open is async-signal-safe.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    (fd >= 0).then_some(fd)
}

/// Reads what fits of `/proc/self/task/TID/status` into `buf`; its length.
fn read_status(tid: i32, buf: &mut [u8]) -> Option<usize> {
    let mut path = [0u8; 48];
    let mut n = 0;
    for part in [
        &b"/proc/self/task/"[..],
        decimal(tid as u64, &mut [0; 20]),
        b"/status\0",
    ] {
        path[n..n + part.len()].copy_from_slice(part);
        n += part.len();
    }
    let fd = open(&path)?;
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reads into the rest of `buf`; async-signal-safe.
        let r = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if r <= 0 {
            break;
        }
        len += r as usize;
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    (len > 0).then_some(len)
}

/// `v` in decimal, in the end of `buf`.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// The value of `key` (as `Key:\t`) in a status file.
fn field<'a>(status: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    status.split(|&b| b == b'\n').find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(b":")?;
        let start = rest.iter().position(|&b| b != b'\t' && b != b' ')?;
        Some(&rest[start..])
    })
}

/// A hexadecimal number.
fn parse_hex(s: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for &b in s {
        let d = (b as char).to_digit(16)?;
        v = v.checked_mul(16)? | u64::from(d);
    }
    (!s.is_empty()).then_some(v)
}

/// Fills `l` from the thread's status file: name, state, and whether it
/// blocks `sig`. `None` if the thread is gone.
fn describe(tid: i32, sig: c_int, l: &mut Listed) -> Option<bool> {
    let mut buf = [0u8; 2048];
    let len = read_status(tid, &mut buf)?;
    let status = &buf[..len];
    if let Some(name) = field(status, b"Name") {
        let n = name.len().min(16);
        l.name[..n].copy_from_slice(&name[..n]);
        l.name_len = n as u8;
    }
    l.state = field(status, b"State")
        .and_then(|s| s.first().copied())
        .unwrap_or(b'?');
    let blocked = field(status, b"SigBlk").and_then(parse_hex).unwrap_or(0);
    Some(blocked >> (sig - 1) & 1 != 0)
}

/// A `linux_dirent64`'s fixed head.
const DIRENT_NAME: usize = 19;

/// Calls `f` with each thread id in `/proc/self/task`; returns false if
/// the directory could not be read.
fn each_task(mut f: impl FnMut(i32)) -> bool {
    let Some(fd) = open(b"/proc/self/task\0") else {
        return false;
    };
    let mut buf = [0u64; 512];
    loop {
        // SAFETY: getdents64 fills at most `buf`'s bytes; a raw system
        // call, async-signal-safe.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd,
                buf.as_mut_ptr(),
                core::mem::size_of_val(&buf),
            )
        };
        if n <= 0 {
            break;
        }
        // SAFETY: the bytes of `buf`, of which the kernel wrote `n`.
        let bytes = unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
        let mut at = 0;
        while at + DIRENT_NAME <= bytes.len() {
            let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
            if reclen == 0 || at + reclen > bytes.len() {
                break;
            }
            let name = &bytes[at + DIRENT_NAME..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let mut tid: i64 = 0;
            if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
                for &d in name {
                    tid = tid * 10 + i64::from(d - b'0');
                }
                if tid > 0 && tid <= i64::from(i32::MAX) {
                    f(tid as i32);
                }
            }
            at += reclen;
        }
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    true
}

/// Queues the request to thread `tid`.
fn request(sig: c_int, tid: i32, value: u64) -> Result<(), c_int> {
    let mut info: QueuedInfo = QueuedInfo {
        signo: sig,
        errno: 0,
        code: SI_QUEUE,
        _pad: 0,
        // SAFETY: getpid and getuid have no preconditions.
        pid: unsafe { libc::getpid() },
        // SAFETY: as above.
        uid: unsafe { libc::getuid() },
        value,
        _rest: [0; 12],
    };
    // SAFETY: a 128-byte siginfo; a raw system call, async-signal-safe.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid,
            sig,
            &mut info as *mut QueuedInfo,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        // SAFETY: the calling thread's errno.
        Err(unsafe { *libc::__errno_location() })
    }
}

/// One dump's findings, read by [`write_sections`].
pub(crate) struct Gathered {
    dump: u64,
    listed: usize,
    not_listed: usize,
    /// Why the other threads are not shown at all, if they are not.
    missing: Option<&'static str>,
}

/// Lists and walks every thread but `me`. Async-signal-safe; the caller
/// holds the report turn.
pub(crate) fn gather(me: i32, crash: bool) -> Gathered {
    let none = |why| Gathered {
        dump: 0,
        listed: 0,
        not_listed: 0,
        missing: Some(why),
    };
    if crash && !IN_CRASH_REPORTS.load(SeqCst) {
        return none("");
    }
    if TAKEN_BY_PROGRAM.load(SeqCst) != 0 {
        return none("the program handles the thread-dump signal itself (see stackmark::threads)");
    }
    let Some(r) = RESERVED.get() else {
        return none("the thread dump is not set up (stackmark::threads::configure)");
    };
    let dump = DUMP.fetch_add(1, SeqCst) + 1;
    let sig = r.opts.signal;
    let (mut listed, mut not_listed, mut next_slot) = (0, 0, 0);
    let start = crate::sys::monotonic_ns();
    let listed_ok = each_task(|tid| {
        if tid == me {
            return;
        }
        if listed == r.listed.len() {
            not_listed += 1;
            return;
        }
        // SAFETY: the caller holds the report turn: this thread alone uses
        // `listed`.
        let l = unsafe { &mut *r.listed[listed].get() };
        listed += 1;
        *l = Listed {
            tid,
            ..EMPTY_LISTED
        };
        l.outcome = match describe(tid, sig, l) {
            None => Outcome::Gone,
            Some(true) => Outcome::Blocked,
            // Stopped by a signal: a queued one waits for SIGCONT. A
            // thread a debugger stopped (`t`) is asked all the same: the
            // debugger lets it go on, or the deadline passes.
            Some(false) if l.state == b'T' => Outcome::Stopped,
            Some(false) => {
                // A slot whose walk of an earlier dump never finished
                // stays out of use.
                while next_slot < r.slots.len()
                    && r.slots[next_slot].token.load(Acquire) & 3 == WALKING
                {
                    next_slot += 1;
                }
                match r.slots.get(next_slot) {
                    None => Outcome::NoSlot,
                    Some(slot) => {
                        l.slot = next_slot as u32;
                        next_slot += 1;
                        slot.token.store(dump << 2 | REQUESTED, Release);
                        match request(sig, tid, request_value(dump, l.slot as usize)) {
                            Ok(()) => Outcome::Asked,
                            Err(e) => {
                                slot.token.store(0, Release);
                                if e == libc::ESRCH {
                                    Outcome::Gone
                                } else {
                                    Outcome::NotQueued
                                }
                            }
                        }
                    }
                }
            }
        };
    });
    if !listed_ok {
        return none("/proc/self/task could not be read");
    }
    // SAFETY: as above.
    let all = unsafe { core::slice::from_raw_parts_mut(r.listed.as_ptr() as *mut Listed, listed) };
    let deadline = start + r.opts.deadline.as_nanos() as u64;
    wait_for_answers(r, dump, all, deadline);
    Gathered {
        dump,
        listed,
        not_listed,
        missing: None,
    }
}

/// Waits until every asked thread answered or `deadline` passed; then
/// marks the others.
fn wait_for_answers(r: &Reserved, dump: u64, all: &mut [Listed], deadline: u64) {
    loop {
        let mut waiting = false;
        for l in all.iter_mut().filter(|l| l.outcome == Outcome::Asked) {
            if r.slots[l.slot as usize].token.load(Acquire) == dump << 2 | DONE {
                l.outcome = Outcome::Walked;
            } else {
                waiting = true;
            }
        }
        if !waiting {
            return;
        }
        if crate::sys::monotonic_ns() >= deadline {
            break;
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000,
        };
        // SAFETY: a valid timespec; async-signal-safe.
        unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
    }
    for l in all.iter_mut().filter(|l| l.outcome == Outcome::Asked) {
        let slot = &r.slots[l.slot as usize];
        // Withdrawn, unless its handler started: then the walk is left to
        // finish, and the slot to it.
        l.outcome = match slot
            .token
            .compare_exchange(dump << 2 | REQUESTED, 0, AcqRel, Acquire)
        {
            Ok(_) => Outcome::NoAnswer,
            Err(t) if t == dump << 2 | DONE => Outcome::Walked,
            Err(_) => Outcome::WalkUnfinished,
        };
    }
}

impl Gathered {
    /// The listed threads.
    fn listed(&self) -> &[Listed] {
        match RESERVED.get() {
            // SAFETY: written by `gather`, which is done; the report turn
            // is still the caller's.
            Some(r) => unsafe {
                core::slice::from_raw_parts(r.listed.as_ptr() as *const Listed, self.listed)
            },
            None => &[],
        }
    }

    /// The frames of a walked thread.
    fn frames(&self, l: &Listed) -> (&[Frame], bool) {
        let Some(r) = RESERVED.get() else {
            return (&[], false);
        };
        let slot = &r.slots[l.slot as usize];
        if l.outcome != Outcome::Walked || slot.token.load(Acquire) != self.dump << 2 | DONE {
            return (&[], false);
        }
        let n = r.opts.frames;
        let i = l.slot as usize;
        let len = slot.len.load(Relaxed).min(n);
        // SAFETY: DONE for this dump: the handler wrote them and is done,
        // and no request reuses the slot while the caller holds the turn.
        let frames = unsafe { frames_ref(&r.frames[i * n..i * n + len]) };
        (frames, slot.more.load(Relaxed))
    }

    /// Whether module `m` holds a frame of any walked thread.
    pub(crate) fn holds_a_frame<M: MarkupModule>(&self, m: &M) -> bool {
        self.listed()
            .iter()
            .any(|l| self.frames(l).0.iter().any(|f| crate::markup::holds(m, f)))
    }

    /// The counts of this dump, `own` being the reporting thread's.
    fn summary(&self) -> Summary {
        let walked = self
            .listed()
            .iter()
            .filter(|l| l.outcome == Outcome::Walked)
            .count();
        Summary {
            threads: self.listed + 1,
            walked: walked + 1,
            without_stack: self.listed - walked,
            not_listed: self.not_listed,
        }
    }
}

/// Writes one section per listed thread, then a line of counts.
pub(crate) fn write_sections<S: crate::markup::Sink, M: MarkupModule>(
    m: &mut Markup<'_, S>,
    modules: &[M],
    g: &Gathered,
) {
    if let Some(why) = g.missing {
        if !why.is_empty() {
            m.text("stackmark: other threads not shown: ")
                .text(why)
                .newline();
        }
        return;
    }
    for l in g.listed() {
        m.text("stackmark: thread ").dec(l.tid as u64).text(" \"");
        m.free_text(&l.name[..l.name_len as usize])
            .text("\" state ");
        m.free_text(&[l.state]);
        let reason = match l.outcome {
            Outcome::Walked => None,
            Outcome::Blocked => Some("it blocks the signal"),
            Outcome::Stopped => Some("it is stopped"),
            Outcome::NoAnswer if l.state == b'D' => {
                Some("no answer by the deadline (asleep in the kernel)")
            }
            Outcome::NoAnswer | Outcome::Asked => Some("no answer by the deadline"),
            Outcome::WalkUnfinished => Some("its walk did not end by the deadline"),
            Outcome::NoSlot => Some("no slot left (stackmark::threads::Options::slots)"),
            Outcome::Gone => Some("gone: it exited during the report"),
            Outcome::NotQueued => Some("the signal could not be queued"),
        };
        match reason {
            Some(why) => {
                m.text(": no stack: ").text(why).newline();
            }
            None => {
                let (frames, more) = g.frames(l);
                m.text(": ").dec(frames.len() as u64).text(" frames");
                if more {
                    m.text(", the stack goes on");
                }
                m.newline();
                for (i, f) in frames.iter().enumerate() {
                    m.frame(i, f, modules);
                }
            }
        }
    }
    let s = g.summary();
    m.text("stackmark: ")
        .dec(s.threads as u64)
        .text(" threads, ")
        .dec(s.walked as u64)
        .text(" with a stack, ")
        .dec(s.without_stack as u64)
        .text(" without");
    if s.not_listed > 0 {
        m.text(", ")
            .dec(s.not_listed as u64)
            .text(" more not listed");
    }
    m.newline();
}

/// Writes a dump of every thread to `fd`: the calling thread's section
/// first, then every other thread's, in the crash report's format (see
/// `docs/threads.md`). Call it from any thread (a watchdog that sees a
/// hang, say); the process goes on afterwards. Sets up with the default
/// [`Options`] the first time if [`configure`] was not called; from then
/// on it allocates nothing, takes no lock, and is async-signal-safe.
/// Waits for a crash or panic report under way to end, and the reports
/// wait for it.
pub fn dump_all_threads(fd: c_int) -> Result<Summary, Error> {
    if RESERVED.get().is_none() {
        setup(Options::default())?;
    }
    let (regs, precise) = crate::live::capture_here();
    dump(fd, regs, precise, "on demand")
}

/// Installs a handler for `sig` (such as `SIGQUIT`) that writes
/// [`dump_all_threads`]'s dump to `fd` and lets the process go on. Sets
/// up the dump with the default [`Options`] if not done yet. Fails with
/// [`Error::SignalTaken`] if the program handles `sig` itself.
///
/// The crate does not own `fd`: it must stay open for the life of the
/// process.
pub fn dump_on_signal(sig: c_int, fd: c_int) -> Result<(), Error> {
    if RESERVED.get().is_none() {
        setup(Options::default())?;
    }
    let reserved = RESERVED.get().map(|r| r.opts.signal);
    if sig == libc::SIGKILL
        || sig == libc::SIGSTOP
        || Some(sig) == reserved
        || crate::report::CRASH_SIGNALS.contains(&sig)
    {
        return Err(Error::BadSignal(sig));
    }
    DUMP_FD.store(fd, SeqCst);
    // SAFETY: reads the current action, then installs a fully initialised
    // one.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(sig, core::ptr::null(), &mut old) != 0 {
            return Err(Error::Os(std::io::Error::last_os_error()));
        }
        let ours = on_dump_signal as *const () as usize;
        if ![libc::SIG_DFL, libc::SIG_IGN, ours].contains(&old.sa_sigaction) {
            return Err(Error::SignalTaken(sig));
        }
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = ours;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, core::ptr::null_mut()) != 0 {
            return Err(Error::Os(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Where [`dump_on_signal`]'s dumps go.
static DUMP_FD: AtomicI32 = AtomicI32::new(2);

extern "C" fn on_dump_signal(_sig: c_int, _info: *mut libc::siginfo_t, uc: *mut c_void) {
    crate::sys::keeping_errno(|| {
        // SAFETY: `uc` is the kernel's ucontext.
        let regs = unsafe { crate::arch::regs_from_ucontext(uc) };
        let _ = dump(
            DUMP_FD.load(SeqCst),
            regs,
            crate::walk::PcKind::Exact,
            "on a signal",
        );
    });
}

/// A whole dump, the calling thread's section walked from `regs`.
fn dump(
    fd: c_int,
    regs: crate::live::Regs,
    pc_kind: crate::walk::PcKind,
    why: &str,
) -> Result<Summary, Error> {
    let Some(_turn) = crate::report::ReportTurn::take_for_dump() else {
        return Err(Error::Busy);
    };
    let Some(r) = RESERVED.get() else {
        return Err(Error::Busy);
    };
    let me = crate::sys::gettid();
    // SAFETY: the report turn makes this thread the only user of `own`.
    let own = unsafe { frames_mut(&r.own) };
    let (n, more) = crate::live::walk_for_report(regs, pc_kind, own);
    let g = gather(me, false);
    let _quiet = crate::sys::QuietSigpipe::new();
    let mut sink = FdSink::new(fd);
    let mut m = Markup::new(&mut sink);
    m.text("stackmark: dump of all threads (")
        .text(why)
        .text(")");
    m.newline();
    m.text("stackmark: ");
    crate::report::write_thread(&mut m);
    m.text(": ").dec(n as u64).text(" frames");
    if more {
        m.text(", the stack goes on");
    }
    m.newline();
    let own = &own[..n];
    match crate::modules::current() {
        Some(table) => {
            let modules = table.modules();
            m.context_where(modules, |md| {
                own.iter().any(|f| crate::markup::holds(md, f)) || g.holds_a_frame(md)
            });
            for (i, f) in own.iter().enumerate() {
                m.frame(i, f, modules);
            }
            write_sections(&mut m, modules, &g);
        }
        None => {
            m.text("stackmark: no module table (stackmark::init was not called)")
                .newline();
        }
    }
    let s = match g.missing {
        Some(_) => Summary {
            threads: 1,
            walked: 1,
            ..Summary::default()
        },
        None => g.summary(),
    };
    m.text("stackmark: end of dump (")
        .dec(s.threads as u64)
        .text(" threads)")
        .newline();
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_file_gives_name_state_and_blocked_signals() {
        let status =
            b"Name:\tworker-7\nUmask:\t0022\nState:\tS (sleeping)\nSigBlk:\t0002000000000000\n";
        assert_eq!(field(status, b"Name"), Some(&b"worker-7"[..]));
        assert_eq!(field(status, b"State").map(|s| s[0]), Some(b'S'));
        let blk = field(status, b"SigBlk").and_then(parse_hex).unwrap();
        assert_eq!(blk >> (50 - 1) & 1, 1);
        assert_eq!(field(status, b"Sig"), None);
    }

    #[test]
    fn a_thread_that_exited_is_told_apart_from_one_that_does_not_answer() {
        let tid = std::thread::spawn(crate::sys::gettid).join().unwrap();
        // Joined: the kernel has reaped it (glibc's join waits for that;
        // under qemu-user the host thread may outlive the guest's join by a
        // moment, so wait, briefly, for its task to go).
        let task = std::path::PathBuf::from(format!("/proc/self/task/{tid}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while task.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut l = EMPTY_LISTED;
        assert_eq!(describe(tid, DEFAULT_SIGNAL, &mut l), None);
        assert_eq!(
            request(DEFAULT_SIGNAL, tid, request_value(1, 0)),
            Err(libc::ESRCH)
        );
        // This one is here, and does not block the signal.
        let me = crate::sys::gettid();
        assert_eq!(describe(me, DEFAULT_SIGNAL, &mut l), Some(false));
        assert_eq!(l.state, b'R');
    }

    #[test]
    fn this_process_lists_its_own_threads() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let mut tids = Vec::new();
        assert!(each_task(|t| tids.push(t)));
        // SAFETY: getpid has no preconditions.
        assert!(tids.contains(&unsafe { libc::getpid() }));
        assert!(tids.len() >= 2, "{tids:?}");
        drop(tx);
        t.join().unwrap();
    }
}
