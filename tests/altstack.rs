//! `install_altstack` on threads that come and go: each thread's alternate
//! stack is unmapped when it exits, so a pool that churns threads does not
//! run the process out of mappings.

#![cfg(target_os = "linux")]

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
