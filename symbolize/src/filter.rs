//! The filter: markup in, symbolized text out, line by line.
//!
//! The layout is `llvm-symbolizer --filter-markup`'s:
//! - `reset`, `module` and `mmap` lines are taken in and not printed; when
//!   a run of them ends, each module gets one summary line,
//!   `[[[ELF module #0x0 "NAME"; BuildID=... [0xSTART-0xEND](PERMS),...]]]`;
//! - a `bt` element becomes one line per frame, inlined frames first as
//!   `#N.1`, `#N.2`..., innermost first, then `#N`, each
//!   `#N 0xADDR FUNCTION FILE:LINE:COLUMN (MODULE+0xOFFSET)`, the last one
//!   followed by the text after the element (stackmark's method);
//! - every other line is copied as it is.
//!
//! A return address (`:ra`) is looked up, and printed, one byte back, in
//! its call instruction, as llvm-symbolizer does.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::rc::Rc;

use crate::demangle::demangle;
use crate::markup::{parse_line, Element, PcKind, Piece};
use crate::sources::Sources;
use crate::SymFrame;

struct Mapping {
    start: u64,
    size: u64,
    vaddr: u64,
    perms: String,
}

struct Module {
    name: String,
    build_id: Vec<u8>,
    mmaps: Vec<Mapping>,
}

/// What to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The log, with `bt` elements symbolized.
    Log,
    /// Only the folded stacks (`{{{pc}}};...;{{{pc}}} COUNT` lines), each
    /// pc replaced by its function names (inlined frames included),
    /// outermost first.
    Folded,
}

/// The filter's state: the sources, the report's modules, and every
/// address already symbolized.
pub struct Filter {
    sources: Sources,
    mode: Mode,
    modules: HashMap<u64, Module>,
    /// Modules declared since the last summary, in order.
    pending: Vec<u64>,
    /// A reset that forgot modules, to be shown before the next summary.
    reset_pending: bool,
    cache: HashMap<(Vec<u8>, u64), Rc<Vec<SymFrame>>>,
    /// Modules already reported as without symbols.
    reported: std::collections::HashSet<Vec<u8>>,
    /// The input's name, for messages.
    input: String,
    line_no: usize,
    offset: usize,
    /// Messages for standard error.
    pub messages: Vec<String>,
}

/// A frame's address after adjustment, and where it lies.
struct Located<'a> {
    module: &'a Module,
    rel: u64,
}

impl Filter {
    /// A filter over the input named `input` (for messages).
    pub fn new(sources: Sources, mode: Mode, input: &str) -> Filter {
        Filter {
            sources,
            mode,
            modules: HashMap::new(),
            pending: Vec::new(),
            reset_pending: false,
            cache: HashMap::new(),
            reported: Default::default(),
            input: input.to_string(),
            line_no: 0,
            offset: 0,
            messages: Vec::new(),
        }
    }

    /// Filters all of `input` into `out`; messages go to `err` as they come.
    pub fn run(
        &mut self,
        input: &mut dyn BufRead,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> io::Result<()> {
        let mut line = Vec::new();
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            self.line(&line, out)?;
            for m in self
                .messages
                .drain(..)
                .chain(self.sources.warnings.drain(..))
            {
                writeln!(err, "stackmark-symbolize: {m}")?;
            }
        }
        self.flush_summaries(out)?;
        Ok(())
    }

    fn line(&mut self, raw: &[u8], out: &mut dyn Write) -> io::Result<()> {
        self.line_no += 1;
        let at = self.offset;
        self.offset += raw.len();
        let (body, eol): (&[u8], &[u8]) = match raw.strip_suffix(b"\n") {
            Some(b) => (b, b"\n"),
            None => (raw, b""),
        };
        let pieces = match parse_line(body) {
            Ok(p) => p,
            Err(e) => {
                self.messages.push(format!(
                    "{}:{}: offset {}: {}; line left as it is",
                    self.input,
                    self.line_no,
                    at + e.offset,
                    e.message
                ));
                if self.mode == Mode::Log {
                    self.flush_summaries(out)?;
                    out.write_all(raw)?;
                }
                return Ok(());
            }
        };
        let context = pieces.iter().any(|p| {
            matches!(
                p,
                Piece::Element(
                    Element::Reset | Element::Module { .. } | Element::Mmap { .. },
                    _
                )
            )
        });
        if context {
            // llvm-symbolizer drops the text sharing a line with these.
            for p in pieces {
                if let Piece::Element(e, _) = p {
                    self.context(e);
                }
            }
            return Ok(());
        }
        match self.mode {
            Mode::Log => {
                self.flush_summaries(out)?;
                self.log_line(&pieces, eol, out)
            }
            Mode::Folded => self.folded_line(&pieces, out),
        }
    }

    fn context(&mut self, e: Element) {
        match e {
            Element::Reset => {
                // llvm-symbolizer says so when a reset forgets modules.
                self.reset_pending |= !self.modules.is_empty();
                self.modules.clear();
                self.pending.clear();
            }
            Element::Module { id, name, build_id } => {
                if self.modules.contains_key(&id) {
                    self.messages.push(format!(
                        "{}:{}: module {id} declared twice",
                        self.input, self.line_no
                    ));
                }
                self.modules.insert(
                    id,
                    Module {
                        name,
                        build_id,
                        mmaps: Vec::new(),
                    },
                );
                self.pending.retain(|&m| m != id);
                self.pending.push(id);
            }
            Element::Mmap {
                start,
                size,
                module,
                perms,
                vaddr,
            } => match self.modules.get_mut(&module) {
                Some(m) => m.mmaps.push(Mapping {
                    start,
                    size,
                    vaddr,
                    perms,
                }),
                None => self.messages.push(format!(
                    "{}:{}: mmap of unknown module {module}",
                    self.input, self.line_no
                )),
            },
            _ => {}
        }
    }

    fn flush_summaries(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.mode != Mode::Log {
            self.pending.clear();
            return Ok(());
        }
        if std::mem::take(&mut self.reset_pending) {
            out.write_all(b"[[[reset]]]\n")?;
        }
        for id in std::mem::take(&mut self.pending) {
            let Some(m) = self.modules.get(&id) else {
                continue;
            };
            write!(
                out,
                "[[[ELF module #{id:#x} \"{}\"; BuildID={} ",
                m.name,
                m.build_id
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )?;
            for (i, s) in m.mmaps.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write!(
                    out,
                    "[{:#x}-{:#x}]({})",
                    s.start,
                    s.start + s.size.saturating_sub(1),
                    s.perms
                )?;
            }
            out.write_all(b"]]]\n")?;
        }
        Ok(())
    }

    fn locate(&self, addr: u64) -> Option<Located<'_>> {
        self.modules.values().find_map(|m| {
            m.mmaps
                .iter()
                .find(|s| addr >= s.start && addr - s.start < s.size)
                .map(|s| Located {
                    module: m,
                    rel: addr - s.start + s.vaddr,
                })
        })
    }

    /// The frames at `addr` and the module+offset text, or why there are none.
    fn resolve(&mut self, addr: u64) -> Result<(Rc<Vec<SymFrame>>, String), String> {
        let Some(loc) = self.locate(addr) else {
            return Err(format!("no mmap covers address {addr:#x}"));
        };
        let rel = loc.rel;
        let build_id = loc.module.build_id.clone();
        let name = loc.module.name.clone();
        let lowest = loc.module.mmaps.iter().map(|s| s.vaddr).min().unwrap_or(0);
        let where_ = format!("{name}+{rel:#x}");
        let key = (build_id, rel);
        if let Some(f) = self.cache.get(&key) {
            return Ok((f.clone(), where_));
        }
        let found = self.sources.module(&key.0, &name);
        if found.symbols.is_none() && self.reported.insert(key.0.clone()) {
            let tried = if found.tried.is_empty() {
                "no sources given".to_string()
            } else {
                found.tried.join("; ")
            };
            self.messages.push(format!(
                "no symbols for {name} (build ID {}): tried {tried}",
                hex(&key.0)
            ));
        }
        let frames = Rc::new(self.sources.lookup(&key.0, rel, lowest));
        self.cache.insert(key, frames.clone());
        Ok((frames, where_))
    }

    fn log_line(
        &mut self,
        pieces: &[Piece<'_>],
        eol: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let mut i = 0;
        while i < pieces.len() {
            match &pieces[i] {
                Piece::Text(t) => out.write_all(t)?,
                Piece::Element(Element::Bt { frame, addr, kind }, _) => {
                    let adjusted = adjust(*addr, *kind, *frame);
                    // The text up to the next element stays with the frame.
                    let trailing: &[u8] = match pieces.get(i + 1) {
                        Some(Piece::Text(t)) => {
                            i += 1;
                            t
                        }
                        _ => b"",
                    };
                    match self.resolve(adjusted) {
                        Ok((frames, where_)) => {
                            let n = frames.len();
                            if n == 0 {
                                // As llvm-symbolizer: no name, no line.
                                write!(
                                    out,
                                    "{:>6}{:<4}{adjusted:#018x} ({where_})",
                                    format!("#{frame}"),
                                    ""
                                )?;
                            }
                            for (k, f) in frames.iter().enumerate() {
                                let sub = if k + 1 == n {
                                    String::new()
                                } else {
                                    format!(".{}", k + 1)
                                };
                                write!(
                                    out,
                                    "{:>6}{:<4}{adjusted:#018x} {} {}:{}:{} ({where_})",
                                    format!("#{frame}"),
                                    sub,
                                    f.function
                                        .as_deref()
                                        .map_or_else(|| "??".to_string(), demangle),
                                    f.file.as_deref().unwrap_or("<invalid>"),
                                    f.line,
                                    f.column
                                )?;
                                if k + 1 < n {
                                    out.write_all(b"\n")?;
                                }
                            }
                        }
                        Err(e) => {
                            self.messages
                                .push(format!("{}:{}: {e}", self.input, self.line_no));
                            write!(out, "[[[bt:{frame}:{addr:#018x}{}]]]", kind_suffix(*kind))?;
                        }
                    }
                    out.write_all(trailing)?;
                }
                Piece::Element(Element::Pc { addr, kind }, _) => {
                    // A pc outside a stack is left for the reader.
                    write!(out, "{{{{{{pc:{addr:#018x}{}}}}}}}", kind_suffix(*kind))?;
                }
                Piece::Element(_, _) => {}
            }
            i += 1;
        }
        out.write_all(eol)
    }

    fn folded_line(&mut self, pieces: &[Piece<'_>], out: &mut dyn Write) -> io::Result<()> {
        let mut names: Vec<String> = Vec::new();
        let mut count: Option<&[u8]> = None;
        for p in pieces {
            match p {
                Piece::Element(Element::Pc { addr, kind }, _) => {
                    let adjusted = adjust(*addr, *kind, 1);
                    match self.resolve(adjusted) {
                        Ok((frames, where_)) if !frames.is_empty() => {
                            // Folded stacks run outermost first.
                            names.extend(frames.iter().rev().map(|f| {
                                f.function
                                    .as_deref()
                                    .map_or_else(|| where_.clone(), demangle)
                            }));
                        }
                        Ok((_, where_)) => names.push(short(&where_)),
                        Err(e) => {
                            self.messages
                                .push(format!("{}:{}: {e}", self.input, self.line_no));
                            names.push(format!("{addr:#x}"));
                        }
                    }
                }
                Piece::Text(t) => {
                    let t = t.trim_ascii();
                    if t.is_empty() || t == b";" {
                        continue;
                    }
                    count = Some(t);
                }
                Piece::Element(_, _) => {}
            }
        }
        let Some(count) = count.filter(|_| !names.is_empty()) else {
            return Ok(());
        };
        // `;` separates frames: a name holding one would split in two.
        let names: Vec<String> = names.into_iter().map(|n| n.replace(';', ",")).collect();
        out.write_all(names.join(";").as_bytes())?;
        out.write_all(b" ")?;
        out.write_all(count)?;
        out.write_all(b"\n")
    }

    /// The sources' summary, for the end of a run.
    pub fn sources(&self) -> &Sources {
        &self.sources
    }
}

/// `module+0xoffset` with the module's directory left out.
fn short(where_: &str) -> String {
    match where_.rsplit_once('/') {
        Some((_, s)) => s.to_string(),
        None => where_.to_string(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn kind_suffix(k: PcKind) -> &'static str {
    match k {
        PcKind::Pc => ":pc",
        PcKind::Ra => ":ra",
        PcKind::Unknown => "",
    }
}

/// A return address moves one byte back, into its call; without a
/// suffix, frame 0 is a pc and the others return addresses.
fn adjust(addr: u64, kind: PcKind, frame: u64) -> u64 {
    match kind {
        PcKind::Ra => addr.wrapping_sub(1),
        PcKind::Unknown if frame > 0 => addr.wrapping_sub(1),
        _ => addr,
    }
}
