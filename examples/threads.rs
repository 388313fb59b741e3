//! Every thread in a crash report, and dumps on demand.
//!
//! `cargo run --example threads [MODE]`:
//! * `crash` (the default): fifteen threads wait in different ways (see
//!   [`spawn_all`]), then the main thread writes through null. The report
//!   shows each thread's stack; a thread that blocks every signal is
//!   listed without one.
//! * `dump`: eight workers count, sleep, and pass bytes through pipes
//!   while the main thread writes 100 dumps to standard output; the
//!   workers then check that none of their system calls lost a result and
//!   the process exits 0.
//! * `quit`: as `dump`, but each dump is asked for with `SIGQUIT`, whose
//!   handler [`stackmark::threads::dump_on_signal`] installed.
//! * `off`: `crash` with the other threads turned off.
//! * `crash-in-dump`: a thread crashes while a watchdog dumps in a loop.
//! * `taken`: the program handles the dump's signal itself.
//!
//! `STACKMARK_DEADLINE_MS` sets the dump's deadline (under a debugger,
//! which stops every thread at each signal, the default is too short),
//! `STACKMARK_SLOTS` its number of slots.
//!
//! While a report or a dump runs, any allocation, on any thread, ends the
//! process with status 99.

#[cfg(target_os = "linux")]
mod linux {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::hint::black_box;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    /// Set while nothing may allocate.
    static ARMED: AtomicBool = AtomicBool::new(false);

    /// Forwards to the system allocator, but ends the process with status
    /// 99 if called while [`ARMED`].
    struct GuardAlloc;

    fn guard() {
        if ARMED.load(SeqCst) {
            let msg = b"threads example: allocation during a report\n";
            // SAFETY: write and _exit are async-signal-safe.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::_exit(99);
            }
        }
    }

    // SAFETY: forwards to the system allocator.
    unsafe impl GlobalAlloc for GuardAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            guard();
            // SAFETY: forwarded unchanged.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            guard();
            // SAFETY: forwarded unchanged.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static ALLOC: GuardAlloc = GuardAlloc;

    /// Threads that reached their waiting place.
    static READY: AtomicUsize = AtomicUsize::new(0);

    /// Spins in Rust for ever.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn spin_in_rust(seed: u64) -> u64 {
        READY.fetch_add(1, SeqCst);
        let mut x = seed;
        loop {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }

    /// Waits for ever on a mutex the main thread holds.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn wait_on_mutex(m: &Mutex<u64>) -> u64 {
        READY.fetch_add(1, SeqCst);
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        black_box(*g)
    }

    /// Waits for ever on a condition variable nobody signals.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn wait_on_condvar(pair: &(Mutex<bool>, Condvar)) -> u64 {
        let mut g = pair.0.lock().unwrap();
        READY.fetch_add(1, SeqCst);
        while !*g {
            g = pair.1.wait(g).unwrap();
        }
        1
    }

    /// Reads for ever from a pipe nobody writes.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn block_in_read(fd: i32) -> u64 {
        READY.fetch_add(1, SeqCst);
        let mut b = [0u8; 8];
        loop {
            // SAFETY: reads into `b`.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
            black_box(n);
        }
    }

    /// Sleeps in `nanosleep` for ever.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sleep_in_nanosleep(s: u64) -> u64 {
        READY.fetch_add(1, SeqCst);
        loop {
            let ts = libc::timespec {
                tv_sec: black_box(s) as _,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec.
            black_box(unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) });
        }
    }

    /// Runs the C fixture's hot loop (SFrame, no frame pointer) for ever.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn spin_in_c(n: u64) -> u64 {
        READY.fetch_add(1, SeqCst);
        let mut acc = 0u64;
        loop {
            // SAFETY: a pure loop in C.
            acc = acc.wrapping_add(unsafe { stackmark_fixtures::c_hot_caller(black_box(n)) });
            black_box(acc);
        }
    }

    /// Blocks every signal, then sleeps for ever.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn block_every_signal(s: u64) -> u64 {
        // SAFETY: a full set, applied to this thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        }
        READY.fetch_add(1, SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(black_box(s)));
        }
    }

    /// Performs an invalid write through a null pointer.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn write_through_null(x: u64) -> u64 {
        let p = black_box(std::ptr::null_mut::<u64>());
        // SAFETY: none: this is the crash the example exists for.
        unsafe { p.write_volatile(x) }; // CRASH-SITE
        x + 1
    }

    fn spawn(name: String, f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .expect("spawn a thread");
    }

    /// Spawns fifteen threads: three spinning in Rust, two on a mutex the
    /// returned guard holds, two on a condition variable, two in `read`
    /// on a pipe, two in `nanosleep`, two in C code with SFrame only and
    /// no frame pointer, two that block every signal. Returns once each
    /// is at its place.
    pub fn spawn_all() -> std::sync::MutexGuard<'static, u64> {
        static HELD: Mutex<u64> = Mutex::new(7);
        let held = HELD.lock().unwrap();
        let pair: &'static (Mutex<bool>, Condvar) =
            Box::leak(Box::new((Mutex::new(false), Condvar::new())));
        let mut fds = [0i32; 2];
        // SAFETY: fills `fds`; the write end stays open, unused.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let rd = fds[0];
        for i in 0..3 {
            spawn(format!("spin-{i}"), move || {
                spin_in_rust(i);
            });
        }
        for i in 0..2 {
            spawn(format!("mutex-{i}"), || {
                wait_on_mutex(&HELD);
            });
            spawn(format!("condvar-{i}"), move || {
                wait_on_condvar(pair);
            });
            spawn(format!("read-{i}"), move || {
                block_in_read(rd);
            });
            spawn(format!("sleep-{i}"), || {
                sleep_in_nanosleep(1000);
            });
            spawn(format!("sframe-{i}"), || {
                spin_in_c(1 << 40);
            });
            spawn(format!("blocked-{i}"), || {
                block_every_signal(1000);
            });
        }
        while READY.load(SeqCst) < 15 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Into their system calls.
        std::thread::sleep(Duration::from_millis(50));
        held
    }

    fn configure() {
        let mut opts = stackmark::threads::Options::default();
        if let Some(ms) = std::env::var("STACKMARK_DEADLINE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            opts.deadline = Duration::from_millis(ms);
        }
        if let Some(n) = std::env::var("STACKMARK_SLOTS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            opts.slots = n;
        }
        stackmark::threads::configure(opts).expect("configure the thread dump");
    }

    fn crash(all: bool) {
        configure();
        stackmark::install_crash_handler().expect("install the crash handler");
        stackmark::threads::set_in_crash_reports(all);
        let held = spawn_all();
        ARMED.store(true, SeqCst);
        black_box(write_through_null(black_box(*held)));
    }

    /// Per worker: rounds done, and system calls whose result was wrong.
    static ROUNDS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
    static LOST: AtomicU64 = AtomicU64::new(0);
    static STOP: AtomicBool = AtomicBool::new(false);

    /// A worker: counts, sleeps a little, and sends a byte round a pipe,
    /// checking every call's result (a call the signal cut short is
    /// retried, as a program must; what it returns must be right).
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn work(i: usize) -> u64 {
        let mut fds = [0i32; 2];
        // SAFETY: fills `fds`.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut n = 0u64;
        while !STOP.load(SeqCst) {
            n = black_box(n.wrapping_add(1));
            let byte = [n as u8];
            // SAFETY: writes and reads one byte of a pipe of this thread's.
            let w = loop {
                let w = unsafe { libc::write(fds[1], byte.as_ptr().cast(), 1) };
                if w >= 0 || errno() != libc::EINTR {
                    break w;
                }
            };
            let mut back = [0u8];
            let r = loop {
                // SAFETY: as above.
                let r = unsafe { libc::read(fds[0], back.as_mut_ptr().cast(), 1) };
                if r >= 0 || errno() != libc::EINTR {
                    break r;
                }
            };
            if w != 1 || r != 1 || back != byte {
                LOST.fetch_add(1, SeqCst);
            }
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 100_000,
            };
            let mut left = ts;
            // SAFETY: valid timespecs; an interrupted sleep sleeps the rest.
            while unsafe { libc::nanosleep(&left, &mut left) } != 0 {
                if errno() != libc::EINTR {
                    LOST.fetch_add(1, SeqCst);
                    break;
                }
            }
            ROUNDS[i].fetch_add(1, SeqCst);
        }
        n
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    fn dumps(by_signal: bool) {
        configure();
        stackmark::init().expect("init");
        if by_signal {
            stackmark::threads::dump_on_signal(libc::SIGQUIT, 1).expect("dump on SIGQUIT");
        }
        let workers: Vec<_> = (0..8)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || work(i))
                    .unwrap()
            })
            .collect();
        // Past their start, which allocates, before anything is armed.
        while ROUNDS.iter().any(|r| r.load(SeqCst) == 0) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut seen = [0u64; 8];
        let mut stalled = 0;
        for d in 0..100 {
            ARMED.store(true, SeqCst);
            if by_signal {
                // SAFETY: sends SIGQUIT to this thread; its handler dumps.
                unsafe { libc::raise(libc::SIGQUIT) };
            } else {
                stackmark::threads::dump_all_threads(1).expect("a dump");
            }
            ARMED.store(false, SeqCst);
            // Every ten dumps, every worker must have gone on (within 2 s:
            // eight workers share the machine's cores).
            if d % 10 == 9 {
                let end = std::time::Instant::now() + Duration::from_secs(2);
                while ROUNDS.iter().zip(&seen).any(|(r, s)| r.load(SeqCst) == *s)
                    && std::time::Instant::now() < end
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                for (r, s) in ROUNDS.iter().zip(&mut seen) {
                    let now = r.load(SeqCst);
                    stalled += u64::from(now == *s);
                    *s = now;
                }
            }
        }
        STOP.store(true, SeqCst);
        for w in workers {
            w.join().unwrap();
        }
        let lost = LOST.load(SeqCst);
        println!("threads example: 100 dumps; {stalled} stalls, {lost} lost results");
        std::process::exit(if stalled == 0 && lost == 0 { 0 } else { 1 });
    }

    /// A worker crashes while another thread dumps in a loop: the crash
    /// waits for the dump under way, then reports, and the process dies.
    fn crash_in_dump() {
        configure();
        stackmark::install_crash_handler().expect("install the crash handler");
        let _held = spawn_all();
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(|| loop {
                let _ = stackmark::threads::dump_all_threads(1);
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::thread::Builder::new()
            .name("crasher".into())
            .spawn(|| {
                black_box(write_through_null(1));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    extern "C" fn programs_own(_: i32, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

    /// The program handles the dump's signal itself: the setup says so
    /// and leaves the handler alone; the crash report says the other
    /// threads are not shown.
    fn taken() {
        let sig = stackmark::threads::Options::default().signal;
        // SAFETY: installs a handler that does nothing.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = programs_own as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        match stackmark::threads::configure(Default::default()) {
            Err(stackmark::threads::Error::SignalTaken(s)) if s == sig => {}
            other => panic!("configure: {other:?}"),
        }
        stackmark::install_crash_handler().expect("install the crash handler");
        // SAFETY: reads the current action.
        let kept = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut sa);
            sa.sa_sigaction == programs_own as *const () as usize
        };
        eprintln!("threads example: the program's handler kept: {kept}");
        let _held = spawn_all();
        ARMED.store(true, SeqCst);
        black_box(write_through_null(3));
    }

    pub fn main() {
        let mode = std::env::args().nth(1).unwrap_or_else(|| "crash".into());
        match mode.as_str() {
            "crash" => crash(true),
            "off" => crash(false),
            "crash-in-dump" => crash_in_dump(),
            "taken" => taken(),
            "dump" => dumps(false),
            "quit" => dumps(true),
            other => {
                eprintln!(
                    "threads: unknown mode {other}; modes: crash off dump quit crash-in-dump taken"
                );
                std::process::exit(2);
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

/// Elsewhere the example is an empty program: the thread dump is Linux's.
#[cfg(not(target_os = "linux"))]
fn main() {}
