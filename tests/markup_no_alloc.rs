//! Writing markup makes no heap allocation: a counting global allocator,
//! armed only on the writing thread and only while it writes, must count
//! zero for whole reports over the live module table, through both sinks.

mod alloc_counter;

use std::os::fd::AsRawFd;

use alloc_counter::{allocations, Counting};
use stackmark::markup::{FdSink, Markup, Scope, SliceSink};
use stackmark::Frame;

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn whole_reports_through_both_sinks_allocate_nothing() {
    stackmark::init().unwrap();
    let mut frames = [Frame::default(); 64];
    let n = stackmark::walk_here(&mut frames);
    assert!(n > 2, "the walk found frames");
    let table = stackmark::modules::current().unwrap();
    let null = std::fs::File::create("/dev/null").unwrap();
    let mut buf = vec![0u8; 256 * 1024];

    let mut written = 0;
    let ((), count) = allocations(|| {
        for scope in [Scope::AllModules, Scope::TraceModules] {
            let mut sink = SliceSink::new(&mut buf);
            let mut m = Markup::new(&mut sink);
            m.text("stackmark: header ")
                .dec(7)
                .text(" ")
                .hex(0x1234)
                .newline();
            m.backtrace(table.modules(), &frames[..n], scope);
            assert!(!sink.truncated());
            written += sink.as_bytes().len();

            let mut sink = FdSink::new(null.as_raw_fd());
            Markup::new(&mut sink).backtrace(table.modules(), &frames[..n], scope);
            assert!(!sink.failed());
        }
    });

    assert_eq!(count, 0, "allocations while writing");
    let text = String::from_utf8_lossy(&buf);
    assert!(
        text.contains("{{{module:") && text.contains("{{{bt:0:0x"),
        "{text}"
    );
    assert!(written > 200);
}
