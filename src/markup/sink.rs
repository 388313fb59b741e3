//! Where markup goes: a fixed buffer or a file descriptor.

use core::sync::atomic::{AtomicI32, Ordering::Relaxed};

/// Where markup goes.
///
/// [`Markup`](super::Markup) calls [`Sink::flush`] at the end of every
/// line, so a buffering sink can hand each line to the system whole.
pub trait Sink {
    /// Appends bytes.
    fn write(&mut self, bytes: &[u8]);
    /// Pushes out anything buffered (called at the end of each line).
    fn flush(&mut self) {}
}

/// A sink over a fixed byte buffer; what does not fit is dropped and
/// reported by [`SliceSink::truncated`]. [`SliceSink::complete_lines`]
/// leaves out a line cut short, which could end inside a markup element.
///
/// ```
/// use stackmark::markup::{Sink, SliceSink};
/// let mut buf = [0u8; 4];
/// let mut sink = SliceSink::new(&mut buf);
/// sink.write(b"abcdef");
/// assert_eq!(sink.as_bytes(), b"abcd");
/// assert!(sink.truncated());
/// ```
#[derive(Debug)]
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// Where the last line that fit whole ends.
    lines: usize,
    truncated: bool,
}

impl<'a> SliceSink<'a> {
    /// An empty sink writing into `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink {
            buf,
            len: 0,
            lines: 0,
            truncated: false,
        }
    }

    /// What was written (all of it, unless [`SliceSink::truncated`]).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// What was written, less a line the buffer cut short: all of it
    /// unless [`SliceSink::truncated`], else every line that fit whole
    /// (lines end at each [`Sink::flush`], which [`Markup`] calls at every
    /// line's end).
    ///
    /// [`Markup`]: super::Markup
    ///
    /// ```
    /// use stackmark::markup::{Markup, SliceSink};
    /// let mut buf = [0u8; 24];
    /// let mut sink = SliceSink::new(&mut buf);
    /// Markup::new(&mut sink).reset().text("{{{bt:0:0x1234:ra}}}").newline();
    /// assert_eq!(sink.complete_lines(), b"{{{reset}}}\n");
    /// ```
    pub fn complete_lines(&self) -> &[u8] {
        &self.buf[..if self.truncated { self.lines } else { self.len }]
    }

    /// Whether some output did not fit and was dropped.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl Sink for SliceSink<'_> {
    fn write(&mut self, bytes: &[u8]) {
        let free = &mut self.buf[self.len..];
        let n = bytes.len().min(free.len());
        free[..n].copy_from_slice(&bytes[..n]);
        self.len += n;
        self.truncated |= n < bytes.len();
    }

    fn flush(&mut self) {
        if !self.truncated {
            self.lines = self.len;
        }
    }
}

/// Bytes an [`FdSink`] buffers: more than the lines of a backtrace take
/// (a module line is at most about 300 bytes), so each leaves in one
/// `write(2)`. Free text can make a longer line (a panic message, a thread
/// name, a file path), which leaves in several.
pub const FD_SINK_BUFFER: usize = 1024;

/// A sink that writes to a file descriptor with `write(2)`.
///
/// It keeps up to [`FD_SINK_BUFFER`] bytes in a buffer inside itself (on
/// the caller's stack) and writes them at the end of each line, or earlier
/// when the buffer fills, so a line normally leaves in one system call and
/// lines from several threads writing to one pipe do not mix. Interrupted
/// (`EINTR`) and partial writes are retried, and a full non-blocking
/// descriptor (`EAGAIN`) is waited on with `poll(2)`, up to
/// [`FD_SINK_WAIT_MS`] each time; any other failure stops the output and is
/// reported by [`FdSink::failed`]. If a failure leaves part of a line on
/// the descriptor, the next `FdSink` on the same descriptor number in the
/// process starts with a newline, so its first line (a report's
/// `{{{reset}}}`) is not glued to the fragment. Async-signal-safe; the
/// buffer is flushed on drop.
///
/// ```
/// use std::os::fd::AsRawFd;
/// use stackmark::markup::{FdSink, Markup};
/// let null = std::fs::File::create("/dev/null").unwrap();
/// let mut sink = FdSink::new(null.as_raw_fd());
/// Markup::new(&mut sink).text("one line").newline();
/// assert!(!sink.failed());
/// ```
#[derive(Debug)]
pub struct FdSink {
    fd: i32,
    buf: [u8; FD_SINK_BUFFER],
    len: usize,
    state: SendState,
}

/// The descriptor whose last output a failure cut mid-line (-1: none).
/// A process-wide atomic because each report makes its own sink.
static CUT_MID_LINE: AtomicI32 = AtomicI32::new(-1);

impl FdSink {
    /// A sink writing to `fd` (which it does not close).
    pub fn new(fd: i32) -> Self {
        FdSink {
            fd,
            buf: [0; FD_SINK_BUFFER],
            len: 0,
            state: SendState::default(),
        }
    }

    /// Whether a write failed (the output is incomplete).
    pub fn failed(&self) -> bool {
        self.state.failed
    }
}

/// How long a write to a non-blocking descriptor that is full (`EAGAIN`)
/// waits for room before the output is given up (signals that interrupt
/// the wait do not restart it).
pub const FD_SINK_WAIT_MS: i32 = 2000;

impl FdSink {
    /// [`Sink::write`], handing what leaves the buffer to `emit` (which
    /// writes all of it, or says how much went out before it failed).
    fn write_with(&mut self, bytes: &[u8], mut emit: impl FnMut(&[u8]) -> Result<(), usize>) {
        if self.state.failed {
            return;
        }
        if self.len + bytes.len() > self.buf.len() {
            self.flush_with(&mut emit);
            // Nothing after a gap: the output ends where it failed.
            if self.state.failed {
                return;
            }
        }
        if bytes.len() > self.buf.len() {
            send(self.fd, &mut self.state, bytes, &mut emit);
        } else {
            self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    /// [`Sink::flush`] through `emit`.
    fn flush_with(&mut self, mut emit: impl FnMut(&[u8]) -> Result<(), usize>) {
        let len = core::mem::take(&mut self.len);
        send(self.fd, &mut self.state, &self.buf[..len], &mut emit);
    }
}

/// What an [`FdSink`] has sent so far.
#[derive(Debug, Default)]
struct SendState {
    /// Whether anything has been handed to the descriptor yet.
    started: bool,
    /// Whether a write failed.
    failed: bool,
    /// Whether what went out last left a line open (no newline at its
    /// end): a long line leaves in several pieces.
    mid_line: bool,
}

/// Hands `bytes` for `fd` to `emit`, first ending a line an earlier
/// sink's failure left cut on this descriptor, and noting a line this one
/// leaves cut.
fn send(
    fd: i32,
    state: &mut SendState,
    bytes: &[u8],
    emit: &mut impl FnMut(&[u8]) -> Result<(), usize>,
) {
    if state.failed || bytes.is_empty() {
        return;
    }
    if !state.started {
        state.started = true;
        let cut = CUT_MID_LINE.compare_exchange(fd, -1, Relaxed, Relaxed);
        if cut.is_ok() && emit(b"\n").is_err() {
            // Still cut (a newline is one byte: none of it went out).
            CUT_MID_LINE.store(fd, Relaxed);
            state.failed = true;
            return;
        }
    }
    match emit(bytes) {
        Ok(()) => state.mid_line = bytes[bytes.len() - 1] != b'\n',
        Err(sent) => {
            state.failed = true;
            let open = match sent {
                0 => state.mid_line,
                _ => bytes[sent - 1] != b'\n',
            };
            if open {
                CUT_MID_LINE.store(fd, Relaxed);
            }
        }
    }
}

impl Sink for FdSink {
    fn write(&mut self, bytes: &[u8]) {
        let fd = self.fd;
        self.write_with(bytes, |b| crate::sys::write_all(fd, b, FD_SINK_WAIT_MS));
    }

    fn flush(&mut self) {
        let fd = self.fd;
        self.flush_with(|b| crate::sys::write_all(fd, b, FD_SINK_WAIT_MS));
    }
}

impl Drop for FdSink {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_failed_flush_a_line_longer_than_the_buffer_is_not_written() {
        // The descriptor refuses the flush and would take what follows (a
        // reader that caught up, a descriptor replaced): the output must
        // still end at the failure, not go on after a gap.
        let mut written: Vec<Vec<u8>> = Vec::new();
        let mut calls = 0;
        let mut emit = |b: &[u8]| {
            calls += 1;
            if calls == 1 {
                return Err(0);
            }
            written.push(b.to_vec());
            Ok(())
        };
        let mut sink = FdSink::new(-1);
        sink.write_with(b"the start of a line", &mut emit);
        sink.write_with(&[b'x'; FD_SINK_BUFFER + 1], &mut emit);
        sink.write_with(b"more", &mut emit);
        sink.flush_with(&mut emit);
        assert!(sink.failed());
        assert!(written.is_empty(), "{} writes after the gap", written.len());
        assert_eq!(calls, 1);
    }

    /// Writes `lines` through a sink on `fd` whose `emit` fails, after
    /// `fail_after` bytes, at the call `fail_at` (0 for never); returns
    /// every emitted piece.
    fn report(fd: i32, lines: &[&[u8]], fail_at: usize, fail_after: usize) -> Vec<Vec<u8>> {
        let mut emitted = Vec::new();
        let mut emit = |b: &[u8]| {
            emitted.push(b.to_vec());
            if emitted.len() == fail_at {
                *emitted.last_mut().unwrap() = b[..fail_after].to_vec();
                return Err(fail_after);
            }
            Ok(())
        };
        let mut sink = FdSink::new(fd);
        for line in lines {
            sink.write_with(line, &mut emit);
            sink.flush_with(&mut emit);
        }
        emitted
    }

    #[test]
    fn a_line_cut_by_a_failure_is_ended_before_the_next_sinks_first_line() {
        // Distinct made-up descriptors: the cut line is process-wide.
        let (fd, other) = (-101, -102);
        let cut = report(fd, &[b"{{{reset}}}\n", b"{{{bt:0:0x1234:ra}}}\n"], 2, 5);
        assert_eq!(cut, [&b"{{{reset}}}\n"[..], b"{{{bt"]);
        // Another descriptor is not affected.
        assert_eq!(report(other, &[b"x\n"], 0, 0), [b"x\n"]);
        // The next report on it starts on a line of its own, once.
        let next = report(fd, &[b"{{{reset}}}\n"], 0, 0);
        assert_eq!(next, [&b"\n"[..], b"{{{reset}}}\n"]);
        assert_eq!(report(fd, &[b"{{{reset}}}\n"], 0, 0), [b"{{{reset}}}\n"]);
    }

    #[test]
    fn a_long_line_cut_between_its_pieces_is_ended_before_the_next_sinks_first_line() {
        let fd = -104;
        let mut emitted: Vec<Vec<u8>> = Vec::new();
        {
            // The first piece goes out; the next fails before any byte.
            let mut emit = |b: &[u8]| {
                if emitted.len() == 1 {
                    return Err(0);
                }
                emitted.push(b.to_vec());
                Ok(())
            };
            let mut sink = FdSink::new(fd);
            // A line longer than the buffer, in free text's 64-byte pieces.
            for _ in 0..20 {
                sink.write_with(&[b'm'; 64], &mut emit);
            }
            sink.write_with(b"\n", &mut emit);
            sink.flush_with(&mut emit);
            assert!(sink.failed());
        }
        assert_eq!(emitted.len(), 1);
        assert_ne!(emitted[0].last(), Some(&b'\n'));
        let next = report(fd, &[b"{{{reset}}}\n"], 0, 0);
        assert_eq!(
            next,
            [&b"\n"[..], b"{{{reset}}}\n"],
            "glued to the cut line"
        );
    }

    #[test]
    fn a_failure_at_a_line_boundary_leaves_no_cut_line() {
        let fd = -103;
        // Nothing of the line went out.
        report(fd, &[b"one\n", b"two\n"], 2, 0);
        assert_eq!(report(fd, &[b"x\n"], 0, 0), [b"x\n"]);
        // All of a line went out, then a longer one failed at once.
        let long = [b'y'; FD_SINK_BUFFER + 1];
        report(fd, &[b"one\n", &long], 2, 0);
        assert_eq!(report(fd, &[b"x\n"], 0, 0), [b"x\n"]);
        // Part of a buffer of lines went out, up to a line's end.
        report(fd, &[b"one\ntwo\n"], 1, 4);
        assert_eq!(report(fd, &[b"x\n"], 0, 0), [b"x\n"]);
    }
}
