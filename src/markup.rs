//! The allocation-free symbolizer markup writer.
//!
//! It writes [LLVM symbolizer markup](https://llvm.org/docs/SymbolizerMarkupFormat.html):
//! `{{{reset}}}`, one `{{{module:ID:NAME:elf:BUILDID}}}` per module, one
//! `{{{mmap:START:SIZE:load:ID:PERMS:VADDR}}}` per loaded segment, then one
//! `{{{bt:N:ADDR:pc}}}` or `{{{bt:N:ADDR:ra}}}` per frame with the frame's
//! method as plain text after it. `llvm-symbolizer --filter-markup` turns it
//! into function names and lines later, on another machine.
//!
//! Rules the output keeps, so that llvm-symbolizer 15 and later accept it:
//! * addresses are full 64-bit, `0x` and 16 hex digits, never adjusted (the
//!   `:ra` suffix tells the filter to look up `ra - 1` itself);
//! * module names lose `:`, `{`, `}` and control characters (each becomes
//!   `_`): the filter splits fields at `:` and ends elements at `}`;
//! * each mmap covers exactly its segment (`bias + p_vaddr`, `p_memsz`), not
//!   whole pages: two segments sharing a page would otherwise overlap, which
//!   the filter rejects;
//! * a frame gets a `bt` element only when an mmap written for the report
//!   covers the address the filter looks up (`pc`, or `pc - 1` for `:ra`),
//!   since the filter reports an error for any other. A frame in a module
//!   without a build ID is written as plain `#N ADDR NAME+OFFSET METHOD`
//!   text instead (the offset is ADDR's link-time address in the module,
//!   what `addr2line -e NAME` takes; for a return address, a frame other
//!   than frame 0 and `signal` frames, give it OFFSET − 1 to name the call,
//!   as the filter does for `:ra`), and a frame in no known module as
//!   `#N ADDR ?? METHOD`;
//! * context elements sit on lines of their own (the filter drops any other
//!   text on such lines).
//!
//! The writer reads modules through the [`MarkupModule`] trait, which the
//! module table implements, and writes to a [`Sink`]: a fixed buffer
//! ([`SliceSink`]) or a file descriptor ([`FdSink`]). Nothing here
//! allocates, locks or uses `core::fmt`, so it may run in a signal handler.
//!
//! ```
//! use stackmark::markup::{Markup, MarkupModule, MarkupSegment, Perms, Scope, SliceSink};
//! use stackmark::{Frame, Method, PcKind};
//!
//! struct Lib;
//! impl MarkupModule for Lib {
//!     fn name(&self) -> &[u8] { b"/usr/lib/libdemo.so" }
//!     fn build_id(&self) -> &[u8] { &[0xab, 0xcd] }
//!     fn segments(&self) -> impl Iterator<Item = MarkupSegment> + '_ {
//!         let perms = Perms { read: true, write: false, execute: true };
//!         [MarkupSegment { start: 0x7f00_0000_1000, size: 0x800, perms, vaddr: 0x1000 }]
//!             .into_iter()
//!     }
//! }
//!
//! let frames = [
//!     Frame { pc: 0x7f00_0000_1234, sp: 0, pc_kind: PcKind::Exact, method: Method::Context },
//!     Frame { pc: 0x7f00_0000_1400, sp: 0, pc_kind: PcKind::ReturnAddress, method: Method::FramePointer },
//! ];
//! let mut buf = [0u8; 512];
//! let mut sink = SliceSink::new(&mut buf);
//! Markup::new(&mut sink).backtrace(&[Lib], &frames, Scope::AllModules);
//! assert_eq!(
//!     core::str::from_utf8(sink.as_bytes()).unwrap(),
//!     "{{{reset}}}\n\
//!      {{{module:0:/usr/lib/libdemo.so:elf:abcd}}}\n\
//!      {{{mmap:0x00007f0000001000:0x800:load:0:rx:0x0000000000001000}}}\n\
//!      {{{bt:0:0x00007f0000001234:pc}}} context\n\
//!      {{{bt:1:0x00007f0000001400:ra}}} fp\n"
//! );
//! ```

// The writer needs no unsafe code: its output goes through `sys`, its
// registers come from `arch`. (Its tests make pipes and sockets with libc.)
#![cfg_attr(not(test), forbid(unsafe_code))]

mod registers;
pub use registers::write_registers;

mod sink;

pub use sink::{FdSink, Sink, SliceSink, FD_SINK_BUFFER, FD_SINK_WAIT_MS};

use crate::formats::elf::{PF_R, PF_W, PF_X};
use crate::walk::Frame;

/// The access rights of a loaded segment: the `rwx` letters of an mmap
/// element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Perms {
    /// Readable (`r`).
    pub read: bool,
    /// Writable (`w`).
    pub write: bool,
    /// Executable (`x`).
    pub execute: bool,
}

impl Perms {
    /// The rights an ELF program header's `p_flags` grant.
    ///
    /// ```
    /// use stackmark::markup::Perms;
    /// let p = Perms::from_elf_flags(0x5); // PF_R | PF_X
    /// assert!(p.read && !p.write && p.execute);
    /// ```
    pub const fn from_elf_flags(flags: u32) -> Perms {
        Perms {
            read: flags & PF_R != 0,
            write: flags & PF_W != 0,
            execute: flags & PF_X != 0,
        }
    }

    /// Whether no right is granted (such a segment gets no mmap element:
    /// the format wants at least one letter).
    pub const fn is_empty(self) -> bool {
        !(self.read || self.write || self.execute)
    }

    /// The letters in the order the format requires, and how many there are.
    fn letters(self) -> ([u8; 3], usize) {
        let mut out = [0u8; 3];
        let mut n = 0;
        for (granted, letter) in [(self.read, b'r'), (self.write, b'w'), (self.execute, b'x')] {
            if granted {
                out[n] = letter;
                n += 1;
            }
        }
        (out, n)
    }
}

/// One loaded segment, as an mmap element describes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MarkupSegment {
    /// Runtime address of the segment's first byte (load bias + `p_vaddr`).
    pub start: u64,
    /// Size in memory (`p_memsz`).
    pub size: u64,
    /// Access rights (from `p_flags`).
    pub perms: Perms,
    /// The address the file links the segment at (`p_vaddr`; for a Mach-O
    /// image, the segment's `vmaddr`).
    pub vaddr: u64,
}

impl MarkupSegment {
    /// Whether `addr` (a runtime address) lies in the segment.
    ///
    /// ```
    /// use stackmark::markup::MarkupSegment;
    /// let s = MarkupSegment { start: 0x1000, size: 0x10, ..Default::default() };
    /// assert!(s.contains(0x100f) && !s.contains(0x1010));
    /// ```
    pub fn contains(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.start) < self.size
    }

    /// The link-time address of the runtime address `addr` in this segment,
    /// as the symbolizer computes it: `addr - start + vaddr`.
    ///
    /// ```
    /// use stackmark::markup::MarkupSegment;
    /// let s = MarkupSegment { start: 0x5555_0000_1000, size: 0x100, vaddr: 0x1000, ..Default::default() };
    /// assert_eq!(s.module_address(0x5555_0000_1042), 0x1042);
    /// ```
    pub fn module_address(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start).wrapping_add(self.vaddr)
    }

    /// Whether the segment gets an mmap element: it must map something and
    /// grant at least one right.
    fn described(&self) -> bool {
        self.size != 0 && !self.perms.is_empty()
    }
}

/// What the writer needs to know about a loaded module.
///
/// The module table implements it for
/// the module table's modules; anything else (a module list
/// read back from a core file, a test) can too.
pub trait MarkupModule {
    /// The module's path or name, as loaded (the writer sanitises it).
    fn name(&self) -> &[u8];
    /// The GNU build ID (for a Mach-O image, its 16-byte `LC_UUID`); empty
    /// when the module has none.
    fn build_id(&self) -> &[u8];
    /// The loaded segments. They must not overlap each other or another
    /// module's (loaded ELF segments never do): the symbolizer rejects
    /// overlapping mmaps.
    fn segments(&self) -> impl Iterator<Item = MarkupSegment> + '_;
}

impl MarkupModule for crate::modules::Module {
    fn name(&self) -> &[u8] {
        crate::modules::Module::name(self)
    }

    fn build_id(&self) -> &[u8] {
        crate::modules::Module::build_id(self)
    }

    fn segments(&self) -> impl Iterator<Item = MarkupSegment> + '_ {
        crate::modules::Module::segments(self)
            .iter()
            .map(|s| MarkupSegment {
                start: s.start,
                size: s.size,
                perms: Perms::from_elf_flags(s.flags),
                vaddr: s.vaddr,
            })
    }
}

impl<M: MarkupModule> MarkupModule for &M {
    fn name(&self) -> &[u8] {
        (**self).name()
    }
    fn build_id(&self) -> &[u8] {
        (**self).build_id()
    }
    fn segments(&self) -> impl Iterator<Item = MarkupSegment> + '_ {
        (**self).segments()
    }
}

/// The segment of `m` that holds `addr` and gets an mmap element.
fn described_segment<M: MarkupModule>(m: &M, addr: u64) -> Option<MarkupSegment> {
    m.segments().find(|s| s.described() && s.contains(addr))
}

/// Whether a described segment of `m` holds frame `f`.
pub(crate) fn holds<M: MarkupModule>(m: &M, f: &Frame) -> bool {
    described_segment(m, f.lookup_pc()).is_some()
}

/// The first module whose described segment holds `addr`, and that segment.
fn locate<M: MarkupModule>(modules: &[M], addr: u64) -> Option<(&M, MarkupSegment)> {
    modules
        .iter()
        .find_map(|m| described_segment(m, addr).map(|s| (m, s)))
}

/// Which modules the context describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every module with a build ID.
    #[default]
    AllModules,
    /// Only modules with a build ID that hold a frame of the trace: a short
    /// report that still symbolizes every frame.
    TraceModules,
}

/// Writes markup and plain text to a [`Sink`].
///
/// Module IDs are the modules' indices in the slice given to
/// [`Markup::context`] and [`Markup::frame`]; pass both the same slice.
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

    /// Plain bytes, written as they are.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.sink.write(b);
        self
    }

    /// Bytes with every character the markup syntax or a terminal could
    /// misread (`:`, `{`, `}`, control characters, C1 ones in UTF-8 too)
    /// replaced by `_` (a byte each).
    ///
    /// ```
    /// use stackmark::markup::{Markup, SliceSink};
    /// let mut buf = [0u8; 16];
    /// let mut sink = SliceSink::new(&mut buf);
    /// Markup::new(&mut sink).sanitized(b"a:b}c\n");
    /// assert_eq!(sink.as_bytes(), b"a_b_c_");
    /// ```
    pub fn sanitized(&mut self, b: &[u8]) -> &mut Self {
        self.mapped(b, |c| match c {
            b':' | b'{' | b'}' | 0..=0x1f | 0x7f => b'_',
            _ => c,
        })
    }

    /// `b` with each byte replaced by `f` of it, in order, through a small
    /// buffer (no allocation). The C1 control characters U+0080 to U+009F
    /// (UTF-8 `c2 80` to `c2 9f`), which terminals act on as they do on
    /// ASCII ones (U+009B opens an escape sequence, U+0085 breaks a line),
    /// become `__` first.
    fn mapped(&mut self, b: &[u8], mut f: impl FnMut(u8) -> u8) -> &mut Self {
        let (mut out, mut n) = ([0u8; 64], 0);
        // Whether the byte before began a C1 character: this one ends it.
        let mut c1_lead = false;
        for (i, &c) in b.iter().enumerate() {
            let lead = !c1_lead && c == 0xc2 && matches!(b.get(i + 1), Some(0x80..=0x9f));
            let c1 = core::mem::replace(&mut c1_lead, lead) || lead;
            out[n] = f(if c1 { b'_' } else { c });
            n += 1;
            if n == out.len() {
                self.sink.write(&out);
                n = 0;
            }
        }
        if n > 0 {
            self.sink.write(&out[..n]);
        }
        self
    }

    /// Free text, such as a panic message or a file name, as it is except
    /// for what a symbolizing filter or a terminal would act on: control
    /// characters other than tab (line breaks too: split lines first; C1
    /// ones in UTF-8, a byte each) become `_`, and a
    /// `{` that would make a third in a row, and so open a markup element,
    /// becomes `(`.
    ///
    /// ```
    /// use stackmark::markup::{Markup, SliceSink};
    /// let mut buf = [0u8; 64];
    /// let mut sink = SliceSink::new(&mut buf);
    /// Markup::new(&mut sink).free_text(b"Err: {x: 1} {{{reset}}}\t\x1b[1m");
    /// assert_eq!(sink.as_bytes(), b"Err: {x: 1} {{(reset}}}\t_[1m");
    /// ```
    pub fn free_text(&mut self, b: &[u8]) -> &mut Self {
        let mut braces = 0;
        self.mapped(b, |c| {
            braces = if c == b'{' { braces + 1 } else { 0 };
            match c {
                b'{' if braces >= 3 => {
                    braces = 0;
                    b'('
                }
                b'\t' => c,
                0..=0x1f | 0x7f => b'_',
                _ => c,
            }
        })
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
        for (i, o) in out[2..].iter_mut().rev().enumerate() {
            *o = HEX[((v >> (4 * i)) & 0xf) as usize];
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
        for (i, o) in out[2..2 + digits].iter_mut().rev().enumerate() {
            *o = HEX[((v >> (4 * i)) & 0xf) as usize];
        }
        self.sink.write(&out[..2 + digits]);
        self
    }

    /// Bytes as lowercase hex digits without a prefix (a build ID).
    pub fn hex_bytes(&mut self, b: &[u8]) -> &mut Self {
        for chunk in b.chunks(32) {
            let mut out = [0u8; 64];
            for (o, &c) in out.chunks_exact_mut(2).zip(chunk) {
                o[0] = HEX[(c >> 4) as usize];
                o[1] = HEX[(c & 0xf) as usize];
            }
            self.sink.write(&out[..2 * chunk.len()]);
        }
        self
    }

    /// Ends the line and flushes it.
    pub fn newline(&mut self) -> &mut Self {
        self.sink.write(b"\n");
        self.sink.flush();
        self
    }

    /// `{{{reset}}}` on a line of its own: forget any earlier context.
    pub fn reset(&mut self) -> &mut Self {
        self.text("{{{reset}}}").newline()
    }

    /// `{{{module:ID:NAME:elf:BUILDID}}}` on a line of its own. Writes
    /// nothing for a module without a build ID: the format has no way to
    /// name its file, so its frames are written as plain text (see
    /// [`Markup::frame`]).
    pub fn module<M: MarkupModule>(&mut self, id: usize, m: &M) -> &mut Self {
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
    /// Writes nothing for a segment of size 0 or without rights (the
    /// format wants at least one of `rwx`).
    pub fn mmap(&mut self, id: usize, s: &MarkupSegment) -> &mut Self {
        if !s.described() {
            return self;
        }
        let (letters, n) = s.perms.letters();
        self.text("{{{mmap:")
            .hex(s.start)
            .text(":")
            .hex_short(s.size);
        self.text(":load:")
            .dec(id as u64)
            .text(":")
            .bytes(&letters[..n]);
        self.text(":").hex(s.vaddr).text("}}}").newline()
    }

    /// The context: `{{{reset}}}`, then each module with a build ID and its
    /// segments. With [`Scope::TraceModules`], only the modules that hold
    /// one of `frames` (the frames are otherwise unused).
    pub fn context<M: MarkupModule>(
        &mut self,
        modules: &[M],
        frames: &[Frame],
        scope: Scope,
    ) -> &mut Self {
        self.context_where(modules, |m| match scope {
            Scope::AllModules => m.segments().any(|s| s.described()),
            Scope::TraceModules => frames.iter().any(|f| holds(m, f)),
        })
    }

    /// The context: `{{{reset}}}`, then each module with a build ID for
    /// which `wanted` holds, and its segments.
    pub(crate) fn context_where<M: MarkupModule>(
        &mut self,
        modules: &[M],
        wanted: impl Fn(&M) -> bool,
    ) -> &mut Self {
        self.reset();
        for (id, m) in modules.iter().enumerate() {
            if m.build_id().is_empty() || !wanted(m) {
                continue;
            }
            self.module(id, m);
            for s in m.segments() {
                self.mmap(id, &s);
            }
        }
        self
    }

    /// Frame `n` on a line of its own: `{{{bt:N:ADDR:pc}}} METHOD` for a
    /// exact pc, `{{{bt:N:ADDR:ra}}} METHOD` for a return address. A
    /// frame in a module without a build ID becomes
    /// `#N ADDR NAME+OFFSET METHOD`, and one in no module `#N ADDR ?? METHOD`,
    /// both plain text the symbolizer passes through. OFFSET is ADDR's: when
    /// the frame's [`Frame::pc_kind`] is not exact, ADDR is a return address, and
    /// OFFSET − 1 lies in the call.
    ///
    /// `modules` must be the slice the context was written for, so that a
    /// `bt` element is only written when an mmap covers it.
    pub fn frame<M: MarkupModule>(&mut self, n: usize, f: &Frame, modules: &[M]) -> &mut Self {
        match locate(modules, f.lookup_pc()) {
            Some((m, _)) if !m.build_id().is_empty() => {
                self.text("{{{bt:").dec(n as u64).text(":").hex(f.pc);
                self.text(if f.pc_kind.is_exact() {
                    ":pc}}}"
                } else {
                    ":ra}}}"
                });
            }
            Some((m, seg)) => {
                self.text("#").dec(n as u64).text(" ").hex(f.pc).text(" ");
                self.sanitized(m.name())
                    .text("+")
                    .hex_short(seg.module_address(f.pc));
            }
            None => {
                self.text("#").dec(n as u64).text(" ").hex(f.pc).text(" ??");
            }
        }
        self.text(" ").text(f.method.name()).newline()
    }

    /// A whole backtrace: the context for `modules` (all of them, or only
    /// those holding a frame, per `scope`), then every frame, numbered from 0.
    pub fn backtrace<M: MarkupModule>(
        &mut self,
        modules: &[M],
        frames: &[Frame],
        scope: Scope,
    ) -> &mut Self {
        self.context(modules, frames, scope);
        for (i, f) in frames.iter().enumerate() {
            self.frame(i, f, modules);
        }
        self
    }
}

#[cfg(test)]
mod tests;
