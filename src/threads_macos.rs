//! Every thread in the crash report (macOS): the crashing thread lists the
//! task's threads with `task_threads`, and for each other one reads its
//! id, name and run state (`thread_info`), suspends it (`thread_suspend`),
//! reads its registers (`thread_get_state`), walks its stack into fixed
//! memory, and resumes it. Mach calls are system calls: nothing here
//! allocates from the heap or takes a lock (the thread list the kernel
//! returns is mapped into the task, and unmapped after).
//!
//! Compile-checked only: this project's tests run on Linux. The dump on
//! demand is Linux's alone.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, Ordering::SeqCst};

use crate::markup::{Markup, MarkupModule};
use crate::walk::Frame;

/// Threads a report walks; more are counted.
const SLOTS: usize = 64;
/// Frames kept per thread.
const FRAMES: usize = 128;

static IN_CRASH_REPORTS: AtomicBool = AtomicBool::new(true);

/// Turns the other threads' sections of crash reports on (the default) or
/// off. Off, a crash report shows the crashing thread only and suspends no
/// other thread.
pub fn set_in_crash_reports(on: bool) {
    IN_CRASH_REPORTS.store(on, SeqCst);
}

#[derive(Clone, Copy)]
struct Listed {
    tid: u64,
    name: [u8; 64],
    name_len: usize,
    state: u8,
    walked: bool,
    len: usize,
    more: bool,
}

const EMPTY: Listed = Listed {
    tid: 0,
    name: [0; 64],
    name_len: 0,
    state: b'?',
    walked: false,
    len: 0,
    more: false,
};

struct Store {
    listed: UnsafeCell<[Listed; SLOTS]>,
    frames: UnsafeCell<[[Frame; FRAMES]; SLOTS]>,
}

// SAFETY: used only by the thread holding the report turn.
unsafe impl Sync for Store {}

static STORE: Store = Store {
    listed: UnsafeCell::new([EMPTY; SLOTS]),
    frames: UnsafeCell::new(
        [[Frame {
            pc: 0,
            sp: 0,
            pc_kind: crate::walk::PcKind::ReturnAddress,
            method: crate::walk::Method::Context,
        }; FRAMES]; SLOTS],
    ),
};

// Declared here: the libc crate marks its Mach task and thread functions
// deprecated in favour of another crate.
extern "C" {
    /// The task port, which dyld sets before any code runs.
    static mach_task_self_: libc::mach_port_t;
    fn mach_thread_self() -> libc::mach_port_t;
    fn thread_suspend(thread: libc::thread_act_t) -> libc::kern_return_t;
    fn thread_resume(thread: libc::thread_act_t) -> libc::kern_return_t;
    fn thread_get_state(
        thread: libc::thread_act_t,
        flavor: c_int,
        state: *mut u32,
        count: *mut libc::mach_msg_type_number_t,
    ) -> libc::kern_return_t;
    fn mach_port_deallocate(
        task: libc::mach_port_t,
        name: libc::mach_port_t,
    ) -> libc::kern_return_t;
}

/// `x86_THREAD_STATE64` and its size in 32-bit words.
#[cfg(target_arch = "x86_64")]
const FLAVOR: (c_int, usize) = (4, 42);
/// `ARM_THREAD_STATE64` and its size in 32-bit words.
#[cfg(target_arch = "aarch64")]
const FLAVOR: (c_int, usize) = (6, 68);

/// The walk's registers from a thread state, laid out as the `__ss` of a
/// signal's machine context (which is the same structure).
#[cfg(target_arch = "x86_64")]
fn regs_of(s: &[u64; 34]) -> crate::live::Regs {
    crate::arch::x86_64::ucontext::regs_from_state(s)
}

/// As above: `x[29]`, `fp`, `lr`, `sp`, `pc`, stripped of
/// pointer-authentication bits.
#[cfg(target_arch = "aarch64")]
fn regs_of(s: &[u64; 34]) -> crate::live::Regs {
    use crate::arch::aarch64::strip_pac;
    let mut x19_x28 = [0u64; 10];
    x19_x28.copy_from_slice(&s[19..29]);
    crate::arch::aarch64::Regs {
        pc: strip_pac(s[32]),
        sp: strip_pac(s[31]),
        fp: strip_pac(s[29]),
        lr: strip_pac(s[30]),
        x19_x28,
    }
}

/// One report's other threads.
pub(crate) struct Gathered {
    listed: usize,
    not_listed: usize,
    off: bool,
}

/// Reads `t`'s id, name and run state into `l`.
fn describe(t: libc::thread_act_t, l: &mut Listed) {
    // SAFETY: zeroed plain structures for the kernel to fill, with their
    // sizes in words.
    unsafe {
        let mut id: libc::thread_identifier_info = core::mem::zeroed();
        let mut n = libc::THREAD_IDENTIFIER_INFO_COUNT;
        if libc::thread_info(
            t,
            libc::THREAD_IDENTIFIER_INFO as _,
            (&mut id as *mut libc::thread_identifier_info).cast(),
            &mut n,
        ) == 0
        {
            l.tid = id.thread_id;
        }
        let mut ext: libc::thread_extended_info = core::mem::zeroed();
        let mut n = libc::THREAD_EXTENDED_INFO_COUNT;
        if libc::thread_info(
            t,
            libc::THREAD_EXTENDED_INFO as _,
            (&mut ext as *mut libc::thread_extended_info).cast(),
            &mut n,
        ) == 0
        {
            let name = ext.pth_name.map(|c| c as u8);
            l.name_len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            l.name = name;
            l.state = match ext.pth_run_state {
                libc::TH_STATE_RUNNING => b'R',
                libc::TH_STATE_STOPPED => b'T',
                libc::TH_STATE_WAITING => b'S',
                libc::TH_STATE_UNINTERRUPTIBLE => b'D',
                libc::TH_STATE_HALTED => b'H',
                _ => b'?',
            };
        }
    }
}

/// Suspends `t`, walks it into `out` (noting the walk in `l`), resumes it.
fn walk_suspended(t: libc::thread_act_t, l: &mut Listed, out: &mut [Frame]) {
    let mut state = [0u64; 34];
    let mut count = FLAVOR.1 as libc::mach_msg_type_number_t;
    // SAFETY: the state buffer holds `count` words and more; the thread is
    // resumed below whatever the walk finds.
    unsafe {
        if thread_suspend(t) != 0 {
            return;
        }
        if thread_get_state(t, FLAVOR.0, state.as_mut_ptr().cast(), &mut count) == 0 {
            let (len, more) =
                crate::live::walk_for_report(regs_of(&state), crate::walk::PcKind::Exact, out);
            (l.len, l.more, l.walked) = (len, more, true);
        }
        thread_resume(t);
    }
}

/// Lists and walks every thread but the calling one. The caller holds the
/// report turn.
pub(crate) fn gather(_me: i32, _crash: bool) -> Gathered {
    let mut g = Gathered {
        listed: 0,
        not_listed: 0,
        off: !IN_CRASH_REPORTS.load(SeqCst),
    };
    if g.off {
        return g;
    }
    // SAFETY: the caller holds the report turn: this thread alone uses
    // STORE. The thread list and its ports are the kernel's, released here.
    unsafe {
        let listed = &mut *STORE.listed.get();
        let frames = &mut *STORE.frames.get();
        let task = mach_task_self_;
        let me = mach_thread_self();
        let mut list: libc::thread_act_array_t = core::ptr::null_mut();
        let mut count: libc::mach_msg_type_number_t = 0;
        if libc::task_threads(task, &mut list, &mut count) != 0 {
            mach_port_deallocate(task, me);
            g.off = true;
            return g;
        }
        for i in 0..count as usize {
            let t = *list.add(i);
            if t != me {
                if g.listed < SLOTS {
                    let l = &mut listed[g.listed];
                    *l = EMPTY;
                    describe(t, l);
                    walk_suspended(t, l, &mut frames[g.listed]);
                    g.listed += 1;
                } else {
                    g.not_listed += 1;
                }
            }
            mach_port_deallocate(task, t);
        }
        mach_port_deallocate(task, me);
        libc::vm_deallocate(
            task,
            list as libc::vm_address_t,
            count as libc::vm_size_t * core::mem::size_of::<libc::thread_act_t>(),
        );
    }
    g
}

impl Gathered {
    fn listed(&self) -> &[Listed] {
        // SAFETY: written by `gather`, which is done; the turn is the
        // caller's still.
        unsafe { &(&*STORE.listed.get())[..self.listed] }
    }

    fn frames(&self, i: usize) -> &[Frame] {
        let l = &self.listed()[i];
        // SAFETY: as above.
        unsafe { &(&*STORE.frames.get())[i][..l.len.min(FRAMES)] }
    }

    /// Whether module `m` holds a frame of any walked thread.
    pub(crate) fn holds_a_frame<M: MarkupModule>(&self, m: &M) -> bool {
        (0..self.listed).any(|i| self.frames(i).iter().any(|f| crate::markup::holds(m, f)))
    }
}

/// Writes one section per listed thread, then a line of counts, in the
/// format of Linux's (`docs/threads.md`).
pub(crate) fn write_sections<S: crate::markup::Sink, M: MarkupModule>(
    m: &mut Markup<'_, S>,
    modules: &[M],
    g: &Gathered,
) {
    if g.off {
        return;
    }
    let mut walked = 0;
    for (i, l) in g.listed().iter().enumerate() {
        m.text("stackmark: thread ").dec(l.tid).text(" \"");
        m.free_text(&l.name[..l.name_len]).text("\" state ");
        m.free_text(&[l.state]);
        if !l.walked {
            m.text(": no stack: it could not be suspended or read")
                .newline();
            continue;
        }
        walked += 1;
        let frames = g.frames(i);
        m.text(": ").dec(frames.len() as u64).text(" frames");
        if l.more {
            m.text(", the stack goes on");
        }
        m.newline();
        for (n, f) in frames.iter().enumerate() {
            m.frame(n, f, modules);
        }
    }
    m.text("stackmark: ")
        .dec(g.listed as u64 + 1)
        .text(" threads, ")
        .dec(walked + 1)
        .text(" with a stack, ")
        .dec(g.listed as u64 - walked)
        .text(" without");
    if g.not_listed > 0 {
        m.text(", ")
            .dec(g.not_listed as u64)
            .text(" more not listed");
    }
    m.newline();
}
