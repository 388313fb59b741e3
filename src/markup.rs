//! The allocation-free symbolizer markup writer.
//!
//! It writes LLVM symbolizer markup: `{{{reset}}}`, one `{{{module}}}` per
//! module with a build ID, one `{{{mmap}}}` per loaded segment, then one
//! `{{{bt}}}` per frame with the frame's method as plain text after it.
//! `llvm-symbolizer --filter-markup` turns it into function names and lines
//! later, on another machine.
//!
//! Rules the output keeps, for llvm-symbolizer 15 and later:
//! * addresses are full 64-bit, `0x` and 16 hex digits, never adjusted (the
//!   `:ra` suffix tells the filter to look up `ra - 1` itself);
//! * module names lose `:`, `}`, `{` and control characters (each becomes `_`);
//! * a module without a build ID gets no context element: its frames are
//!   printed as plain `name+offset` text instead;
//! * context elements sit on lines of their own (the filter drops other text
//!   on such lines).
//!
//! Nothing here allocates; [`FdSink`] writes each line with one `write(2)`
//! where it fits its 1 KiB buffer.
//!
//! ```
//! use stackmark::markup::{Markup, SliceSink};
//! let mut buf = [0u8; 128];
//! let mut sink = SliceSink::new(&mut buf);
//! let mut m = Markup::new(&mut sink);
//! m.reset();
//! m.text("crashed at ").hex(0x5555_0000_1234).newline();
//! assert_eq!(sink.as_bytes(), b"{{{reset}}}\ncrashed at 0x0000555500001234\n");
//! ```

use crate::modules::{Module, Segment};
use crate::walk::Frame;

/// Where markup goes.
pub trait Sink {
    /// Appends bytes.
    fn write(&mut self, bytes: &[u8]);
    /// Pushes out anything buffered (called at the end of each line).
    fn flush(&mut self) {}
}

/// A sink over a fixed byte buffer; what does not fit is dropped and
/// reported by [`SliceSink::truncated`].
#[derive(Debug)]
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
    truncated: bool,
}

impl<'a> SliceSink<'a> {
    /// An empty sink writing into `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink {
            buf,
            len: 0,
            truncated: false,
        }
    }
    /// What was written.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    /// Whether some output did not fit.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl Sink for SliceSink<'_> {
    fn write(&mut self, bytes: &[u8]) {
        let room = self.buf.len() - self.len;
        let n = bytes.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        self.truncated |= n < bytes.len();
    }
}

/// A sink that writes to a file descriptor with `write(2)`, buffering up to
/// a line (1 KiB) so each line normally leaves in one system call.
/// Async-signal-safe.
#[derive(Debug)]
pub struct FdSink {
    fd: i32,
    buf: [u8; 1024],
    len: usize,
    failed: bool,
}

impl FdSink {
    /// A sink writing to `fd`.
    pub fn new(fd: i32) -> Self {
        FdSink {
            fd,
            buf: [0; 1024],
            len: 0,
            failed: false,
        }
    }

    /// Whether a write failed (the output is incomplete).
    pub fn failed(&self) -> bool {
        self.failed
    }

    fn write_all(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.failed {
            // SAFETY: writes from a valid slice; async-signal-safe.
            let n = unsafe { libc::write(self.fd, bytes.as_ptr().cast(), bytes.len()) };
            if n > 0 {
                bytes = &bytes[n as usize..];
            } else if n < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            } else {
                self.failed = true;
            }
        }
    }
}

impl Sink for FdSink {
    fn write(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > self.buf.len() {
            self.flush();
        }
        if bytes.len() > self.buf.len() {
            self.write_all(bytes);
        } else {
            self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    fn flush(&mut self) {
        let len = core::mem::take(&mut self.len);
        let buf = self.buf;
        self.write_all(&buf[..len]);
    }
}

impl Drop for FdSink {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Which modules the context describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every module in the table.
    #[default]
    AllModules,
    /// Only modules that hold a frame of the trace.
    TraceModules,
}

/// Writes markup and plain text to a [`Sink`].
#[derive(Debug)]
pub struct Markup<'s, S: Sink> {
    sink: &'s mut S,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl<'s, S: Sink> Markup<'s, S> {
    /// A writer over `sink`.
    pub fn new(sink: &'s mut S) -> Self {
        Markup { sink }
    }

    /// Plain text.
    pub fn text(&mut self, s: &str) -> &mut Self {
        self.sink.write(s.as_bytes());
        self
    }

    /// Plain bytes (written as they are).
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.sink.write(b);
        self
    }

    /// Bytes with every character the markup syntax or a terminal could
    /// misread (`:`, `{`, `}`, control characters) replaced by `_`.
    pub fn sanitized(&mut self, b: &[u8]) -> &mut Self {
        for chunk in b.chunks(64) {
            let mut out = [0u8; 64];
            for (o, &c) in out.iter_mut().zip(chunk) {
                *o = if c == b':' || c == b'{' || c == b'}' || c < 0x20 || c == 0x7f {
                    b'_'
                } else {
                    c
                };
            }
            self.sink.write(&out[..chunk.len()]);
        }
        self
    }

    /// A decimal number.
    pub fn dec(&mut self, mut v: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.sink.write(&digits[i..]);
        self
    }

    /// A signed decimal number.
    pub fn signed(&mut self, v: i64) -> &mut Self {
        if v < 0 {
            self.text("-");
        }
        self.dec(v.unsigned_abs())
    }

    /// A full-width address: `0x` and 16 hex digits.
    pub fn hex(&mut self, v: u64) -> &mut Self {
        let mut out = *b"0x0000000000000000";
        for i in 0..16 {
            out[17 - i] = HEX[((v >> (4 * i)) & 0xf) as usize];
        }
        self.sink.write(&out);
        self
    }

    /// A number in hex without leading zeros: `0x1a4`.
    pub fn hex_short(&mut self, v: u64) -> &mut Self {
        let mut out = [0u8; 18];
        let digits = (64 - v.leading_zeros()).div_ceil(4).max(1) as usize;
        out[0] = b'0';
        out[1] = b'x';
        for i in 0..digits {
            out[1 + digits - i] = HEX[((v >> (4 * i)) & 0xf) as usize];
        }
        self.sink.write(&out[..2 + digits]);
        self
    }

    /// Bytes as hex digits without a prefix (a build ID).
    pub fn hex_bytes(&mut self, b: &[u8]) -> &mut Self {
        for &c in b {
            self.sink
                .write(&[HEX[(c >> 4) as usize], HEX[(c & 0xf) as usize]]);
        }
        self
    }

    /// Ends the line and flushes it.
    pub fn newline(&mut self) -> &mut Self {
        self.sink.write(b"\n");
        self.sink.flush();
        self
    }

    /// `{{{reset}}}` on a line of its own.
    pub fn reset(&mut self) -> &mut Self {
        self.text("{{{reset}}}").newline()
    }

    /// `{{{module:ID:NAME:elf:BUILDID}}}` on a line of its own. Does nothing
    /// for a module without a build ID (see [`Markup::frame`]).
    pub fn module(&mut self, id: usize, m: &Module) -> &mut Self {
        if m.build_id().is_empty() {
            return self;
        }
        self.text("{{{module:").dec(id as u64).text(":");
        self.sanitized(m.name());
        self.text(":elf:")
            .hex_bytes(m.build_id())
            .text("}}}")
            .newline()
    }

    /// `{{{mmap:START:SIZE:load:ID:PERMS:VADDR}}}` on a line of its own.
    pub fn mmap(&mut self, id: usize, s: &Segment) -> &mut Self {
        let mut perms = [0u8; 3];
        let mut n = 0;
        for (flag, c) in [
            (s.readable(), b'r'),
            (s.writable(), b'w'),
            (s.executable(), b'x'),
        ] {
            if flag {
                perms[n] = c;
                n += 1;
            }
        }
        if n == 0 {
            // The filter wants at least one letter; such a segment maps nothing
            // useful anyway.
            return self;
        }
        self.text("{{{mmap:")
            .hex(s.start)
            .text(":")
            .hex_short(s.size);
        self.text(":load:")
            .dec(id as u64)
            .text(":")
            .bytes(&perms[..n]);
        self.text(":").hex(s.vaddr).text("}}}").newline()
    }

    /// The context for `modules`: `{{{reset}}}`, then each module (with a
    /// build ID) and its segments. With [`Scope::TraceModules`], only modules
    /// holding one of `frames`.
    pub fn context(&mut self, modules: &[Module], frames: &[Frame], scope: Scope) -> &mut Self {
        self.reset();
        for (id, m) in modules.iter().enumerate() {
            if m.build_id().is_empty() || m.segments().iter().all(|s| s.size == 0) {
                continue;
            }
            if scope == Scope::TraceModules && !frames.iter().any(|f| m.contains(f.lookup_pc())) {
                continue;
            }
            self.module(id, m);
            for s in m.segments() {
                if s.size != 0 {
                    self.mmap(id, s);
                }
            }
        }
        self
    }

    /// Frame `n`: `{{{bt:N:ADDR:pc|ra}}} METHOD`, or, in a module without a
    /// build ID, `#N ADDR NAME+OFFSET METHOD` as plain text.
    pub fn frame(&mut self, n: usize, f: &Frame, modules: &[Module]) -> &mut Self {
        let m = modules.iter().find(|m| m.contains(f.lookup_pc()));
        match m {
            Some(m) if m.build_id().is_empty() => {
                self.text("#").dec(n as u64).text(" ").hex(f.pc).text(" ");
                self.sanitized(m.name())
                    .text("+")
                    .hex_short(f.pc.wrapping_sub(m.bias));
            }
            _ => {
                self.text("{{{bt:").dec(n as u64).text(":").hex(f.pc);
                self.text(if f.precise { ":pc}}}" } else { ":ra}}}" });
            }
        }
        self.text(" ").text(f.method.name()).newline()
    }

    /// Context and every frame.
    pub fn backtrace(&mut self, modules: &[Module], frames: &[Frame], scope: Scope) -> &mut Self {
        self.context(modules, frames, scope);
        for (i, f) in frames.iter().enumerate() {
            self.frame(i, f, modules);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::elf::{PF_R, PF_W, PF_X};
    use crate::walk::Method;

    fn module(name: &[u8], bias: u64, id: &[u8]) -> Module {
        let mut m = Module::EMPTY;
        m.set_name(name);
        m.bias = bias;
        m.set_build_id(id);
        m.push_segment(Segment {
            start: bias,
            size: 0x1000,
            vaddr: 0,
            flags: PF_R,
        });
        m.push_segment(Segment {
            start: bias + 0x1000,
            size: 0x2345,
            vaddr: 0x1000,
            flags: PF_R | PF_X,
        });
        m.push_segment(Segment {
            start: bias + 0x4000,
            size: 0x10,
            vaddr: 0x4000,
            flags: PF_R | PF_W,
        });
        m
    }

    fn render(f: impl FnOnce(&mut Markup<'_, SliceSink<'_>>)) -> String {
        let mut buf = [0u8; 4096];
        let mut sink = SliceSink::new(&mut buf);
        f(&mut Markup::new(&mut sink));
        assert!(!sink.truncated());
        String::from_utf8(sink.as_bytes().to_vec()).unwrap()
    }

    fn frame(pc: u64, precise: bool, method: Method) -> Frame {
        Frame {
            pc,
            sp: 0,
            precise,
            method,
        }
    }

    #[test]
    fn full_report_follows_the_spec_with_full_width_addresses() {
        let mods = [module(
            b"/usr/bin/app",
            0x7fff_0000_0000_0000,
            &[0xab, 0x01],
        )];
        let frames = [
            frame(0x7fff_0000_0000_1234, true, Method::Context),
            frame(0x7fff_0000_0000_2001, false, Method::SFrame),
        ];
        let out = render(|m| {
            m.backtrace(&mods, &frames, Scope::AllModules);
        });
        assert_eq!(
            out,
            "{{{reset}}}\n\
             {{{module:0:/usr/bin/app:elf:ab01}}}\n\
             {{{mmap:0x7fff000000000000:0x1000:load:0:r:0x0000000000000000}}}\n\
             {{{mmap:0x7fff000000001000:0x2345:load:0:rx:0x0000000000001000}}}\n\
             {{{mmap:0x7fff000000004000:0x10:load:0:rw:0x0000000000004000}}}\n\
             {{{bt:0:0x7fff000000001234:pc}}} context\n\
             {{{bt:1:0x7fff000000002001:ra}}} sframe\n"
        );
    }

    #[test]
    fn module_names_lose_colons_and_braces() {
        let m = module(b"/tmp/a:b}c{d\ne", 0x1000, &[1]);
        let out = render(|w| {
            w.module(3, &m);
        });
        assert_eq!(out, "{{{module:3:/tmp/a_b_c_d_e:elf:01}}}\n");
    }

    #[test]
    fn a_module_without_build_id_gets_module_plus_offset_text() {
        let mods = [module(b"/lib/libnoid.so", 0x5000_0000, &[])];
        let frames = [frame(0x5000_1a40, false, Method::FramePointer)];
        let out = render(|m| {
            m.backtrace(&mods, &frames, Scope::AllModules);
        });
        assert_eq!(
            out,
            "{{{reset}}}\n#0 0x0000000050001a40 /lib/libnoid.so+0x1a40 fp\n"
        );
    }

    #[test]
    fn trace_scope_limits_context_to_modules_with_frames() {
        let mods = [module(b"a", 0x1_0000, &[1]), module(b"b", 0x9_0000, &[2])];
        let frames = [frame(0x9_1000, true, Method::Context)];
        let out = render(|m| {
            m.context(&mods, &frames, Scope::TraceModules);
        });
        assert!(!out.contains("module:0:"), "{out}");
        assert!(out.contains("{{{module:1:b:elf:02}}}"), "{out}");
    }

    #[test]
    fn numbers_format_exactly() {
        let out = render(|m| {
            m.dec(0)
                .text(" ")
                .dec(u64::MAX)
                .text(" ")
                .signed(-42)
                .text(" ");
            m.hex_short(0)
                .text(" ")
                .hex_short(0x1a4)
                .text(" ")
                .hex(u64::MAX);
        });
        assert_eq!(
            out,
            "0 18446744073709551615 -42 0x0 0x1a4 0xffffffffffffffff"
        );
    }

    #[test]
    fn a_full_slice_sink_reports_truncation() {
        let mut buf = [0u8; 8];
        let mut sink = SliceSink::new(&mut buf);
        Markup::new(&mut sink).reset();
        assert!(sink.truncated());
        assert_eq!(sink.as_bytes(), b"{{{reset");
    }
}
