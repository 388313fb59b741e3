//! `install_altstack` on threads that come and go: each thread's alternate
//! stack is unmapped when it exits, so a pool that churns threads does not
//! run the process out of mappings; and a walk on an alternate stack
//! reads it only from its sp up.

#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

#[test]
fn a_threads_alternate_stack_is_unmapped_when_it_exits() {
    let spawn = || {
        std::thread::spawn(|| {
            stackmark::install_altstack().unwrap();
            // SAFETY: queries the current alternate stack only.
            let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) }, 0);
            assert!(cur.ss_size >= stackmark::crash::ALTSTACK_SIZE);
        })
        .join()
        .unwrap()
    };
    spawn();
    let before = mappings();
    for _ in 0..200 {
        spawn();
    }
    // Each stack left behind would be two mappings (the stack and its
    // guard page): 400 more.
    let after = mappings();
    assert!(after < before + 20, "{before} mappings, then {after}");
}

/// The first page of the alternate stack below, unreadable.
static GUARD: AtomicU64 = AtomicU64::new(0);
/// 1: the read below the handler's sp failed; 2: it returned a value.
static READ: AtomicU64 = AtomicU64::new(0);

extern "C" fn read_below_sp(_: i32, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    use stackmark::memory::MemoryReader;
    let local = 0u64;
    let sp = std::hint::black_box(&local) as *const u64 as u64;
    let mem = stackmark::memory::LiveMemory::new(sp);
    // A wild address below the handler's sp, in the alternate stack's own
    // unreadable first page: the read must fail, not fault. (`black_box`,
    // or the unused load is optimised away and the test cannot fail.)
    let r = std::hint::black_box(mem.read_u64(GUARD.load(SeqCst) + 8));
    READ.store(if r.is_none() { 1 } else { 2 }, SeqCst);
}

/// An alternate stack whose declared range holds a page the program left
/// unreadable (the kernel checks nothing of `ss_sp..ss_sp + ss_size`): a
/// walk on it reads it only from its sp up, as a registered stack, and a
/// read below goes through the checked read. It read the whole declared
/// range directly, and faulted.
#[test]
fn a_walk_on_an_alternate_stack_reads_below_its_sp_only_through_checked_reads() {
    stackmark::init().unwrap();
    // SAFETY: fork; the child only maps memory, installs an alternate stack
    // and a handler, raises the signal and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        const P: usize = 4096;
        // The alternate stack, its first page unreadable.
        let stack = stackmark_fixtures::Mapping::new(16 * P);
        stack.protect(0, P, libc::PROT_NONE);
        GUARD.store(stack.addr(), SeqCst);
        // SAFETY: the mapping is the alternate stack until the child
        // leaves; the handler reads only through the live reader.
        let code = unsafe {
            let ss = libc::stack_t {
                ss_sp: stack.addr() as *mut libc::c_void,
                ss_flags: 0,
                ss_size: 16 * P,
            };
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = read_below_sp as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            if libc::sigaltstack(&ss, std::ptr::null_mut()) != 0
                || libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()) != 0
            {
                libc::_exit(11);
            }
            libc::raise(libc::SIGUSR2);
            READ.load(SeqCst) as i32
        };
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 1,
        "the child: {}",
        if libc::WIFSIGNALED(status) {
            format!("killed by signal {}", libc::WTERMSIG(status))
        } else {
            format!("exit {}", libc::WEXITSTATUS(status))
        }
    );
}
