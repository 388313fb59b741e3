//! The panic hook: prints the panic message, its location and the thread,
//! then the markup backtrace of the panicking thread, starting at the hook.

use std::panic::PanicHookInfo;

use crate::markup::{FdSink, Markup, Scope};
use crate::walk::Frame;

/// Most frames a panic report shows.
pub const MAX_PANIC_FRAMES: usize = 128;

/// How the panic hook behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PanicHookOptions {
    /// Call the hook that was installed before (Rust's default prints the
    /// message again, and its own backtrace if `RUST_BACKTRACE` is set).
    pub chain_previous: bool,
    /// The file descriptor the report goes to. The crate does not own it:
    /// it must stay open for the life of the process, or a report may go
    /// to whatever file or socket reuses its number.
    pub fd: i32,
    /// Which modules the markup context describes.
    pub scope: Scope,
}

impl Default for PanicHookOptions {
    fn default() -> Self {
        PanicHookOptions {
            chain_previous: false,
            fd: 2,
            scope: Scope::TraceModules,
        }
    }
}

/// Installs the panic hook with default options: reports go to standard
/// error, the previous hook is not called. Builds the module table first if
/// [`crate::init`] has not run.
pub fn install_panic_hook() {
    install_panic_hook_with(PanicHookOptions::default())
}

/// Installs the panic hook with `opts`. Installing it again replaces the
/// options; with `chain_previous` the new hook chains to what it replaced,
/// through any earlier install of ours to the hook from before it, and a
/// panic is still reported once.
///
/// ```
/// use stackmark::panic_hook::{install_panic_hook_with, PanicHookOptions};
/// // Report, then let the hook that was installed before run too.
/// install_panic_hook_with(PanicHookOptions { chain_previous: true, ..Default::default() });
/// ```
pub fn install_panic_hook_with(opts: PanicHookOptions) {
    if crate::modules::current().is_none() {
        let _ = crate::live::init_table();
    }
    crate::report::forget_reports_in_child();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // A hook of ours reached from another of ours (installed twice,
        // the second chaining to the first) does not report again and
        // passes the panic on: the options of the last install apply, and
        // that one chose to chain.
        let outer = REPORTING.try_with(|r| !r.replace(true)).unwrap_or(true);
        if outer {
            report(info, &opts);
        }
        if opts.chain_previous || !outer {
            previous(info);
        }
        if outer {
            let _ = REPORTING.try_with(|r| r.set(false));
        }
    }));
}

thread_local! {
    /// Whether this thread is inside one of our hooks (no destructor, so
    /// usable in any thread-local destructor's panic).
    static REPORTING: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Writes one panic report. Allocates nothing itself once it has its turn.
#[inline(never)]
fn report(info: &PanicHookInfo<'_>, opts: &PanicHookOptions) {
    // Before the turn: a thread's handle may be made (allocated) on first use.
    let thread = std::thread::current();
    let _turn = crate::report::ReportTurn::take();
    // Dropped last, after the sink's final write.
    let _quiet = crate::sys::QuietSigpipe::new();
    let mut frames = [Frame::default(); MAX_PANIC_FRAMES];
    let (regs, precise) = crate::live::capture_here();
    let (n, more) = crate::live::walk_for_report(regs, precise, &mut frames);
    let mut sink = FdSink::new(opts.fd);
    let mut m = Markup::new(&mut sink);
    m.text("stackmark: panic in ");
    crate::report::write_thread(&mut m);
    if let Some(name) = thread.name() {
        m.text(" (").free_text(name.as_bytes()).text(")");
    }
    m.newline();
    if let Some(loc) = info.location() {
        m.text("stackmark: at ")
            .free_text(loc.file().as_bytes())
            .text(":");
        m.dec(u64::from(loc.line()))
            .text(":")
            .dec(u64::from(loc.column()))
            .newline();
    }
    let message = info
        .payload()
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| info.payload().downcast_ref::<String>().map(|s| s.as_str()));
    // Plain text, as the payload says; each of its lines is marked as
    // the report's.
    match message {
        Some(msg) => {
            for line in msg.split('\n') {
                m.text("stackmark: message: ")
                    .free_text(line.as_bytes())
                    .newline();
            }
        }
        None => {
            m.text("stackmark: message: (not a string)").newline();
        }
    }
    if let Some(table) = crate::modules::current() {
        m.backtrace(table.modules(), &frames[..n], opts.scope);
    }
    crate::report::write_trailer(&mut m, n, more);
}
