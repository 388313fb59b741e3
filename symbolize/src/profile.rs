//! Profile logs to pprof: the profile example's output, or any log in its
//! format (`docs/profiling.md`), read into stacks, threads and samples, then
//! written as a pprof [`Profile`] with one mapping per markup module and
//! one location per code address, symbolized or not.
//!
//! The log is read line by line and reading stops at the first line that
//! is malformed or cut short: what came before it is still converted, and
//! the error names the line.

use std::collections::HashMap;
use std::io::BufRead;

use crate::demangle::demangle;
use crate::markup::{parse_line, Element, PcKind, Piece};
use crate::pprof::{self, Profile, Strings};
use crate::sources::Sources;

/// A line of the log that could not be read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogError {
    /// The line's number, from 1.
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

/// A module of the markup context, with every segment it maps.
#[derive(Clone, Debug, Default)]
struct Module {
    name: String,
    build_id: Vec<u8>,
    /// (runtime start, size, module-relative address, executable) per
    /// `mmap`.
    mmaps: Vec<(u64, u64, u64, bool)>,
}

/// One frame's address: the address looked up (a return address already
/// moved back into its call) and the module it lies in, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Addr {
    module: Option<usize>,
    addr: u64,
}

/// A stack line: its frames, leaf first, and the count it gives.
#[derive(Clone, Debug)]
struct Stack {
    frames: Vec<Addr>,
    count: u64,
    line: usize,
}

/// One `# sample` line.
#[derive(Clone, Copy, Debug)]
struct Record {
    stack: usize,
    tid: i32,
    time_ns: u64,
}

/// The `# stackmark-profile` header.
#[derive(Clone, Copy, Debug, Default)]
struct Header {
    period_ns: u64,
    /// A `CLOCK_MONOTONIC` and `CLOCK_REALTIME` pair read together.
    clocks: Option<(u64, u64)>,
}

/// What a profile log holds, as far as it could be read.
#[derive(Debug, Default)]
pub struct ProfileLog {
    /// Every module declared, across resets.
    modules: Vec<Module>,
    /// Markup module ID -> index in `modules`, for the current context.
    current: HashMap<u64, usize>,
    stacks: Vec<Stack>,
    threads: HashMap<i32, Vec<u8>>,
    records: Vec<Record>,
    header: Option<Header>,
    end: Option<(usize, u64)>,
    line: usize,
}

impl ProfileLog {
    /// Reads the log from `input`: everything up to the first bad line,
    /// and that line's error, if any.
    pub fn read(input: &mut dyn BufRead) -> (ProfileLog, Option<LogError>) {
        let mut log = ProfileLog::default();
        let mut raw = Vec::new();
        loop {
            raw.clear();
            match input.read_until(b'\n', &mut raw) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    let at = log.line + 1;
                    return log.fail(at, format!("read error: {e}"));
                }
            }
            log.line += 1;
            let at = log.line;
            let Some(body) = raw.strip_suffix(b"\n") else {
                return log.fail(at, "cut short: no newline at the end".into());
            };
            if let Err(message) = log.take(body) {
                return log.fail(at, message);
            }
        }
        if let Err(e) = log.finish() {
            return (log, Some(e));
        }
        (log, None)
    }

    fn fail(self, line: usize, message: String) -> (ProfileLog, Option<LogError>) {
        (self, Some(LogError { line, message }))
    }

    /// The checks only a whole log passes: its end line, and stack counts
    /// that agree with the sample lines.
    fn finish(&self) -> Result<(), LogError> {
        if self.header.is_none() {
            return Ok(());
        }
        let Some((end_line, n)) = self.end else {
            return Err(LogError {
                line: self.line + 1,
                message: "cut short: the log ends without its `# end` line".into(),
            });
        };
        if n != self.records.len() as u64 {
            return Err(LogError {
                line: end_line,
                message: format!(
                    "the end line counts {n} samples, the sample lines {}",
                    self.records.len()
                ),
            });
        }
        let mut per_stack = vec![0u64; self.stacks.len()];
        for r in &self.records {
            per_stack[r.stack] += 1;
        }
        for (s, n) in self.stacks.iter().zip(per_stack) {
            if s.count != n {
                return Err(LogError {
                    line: s.line,
                    message: format!("the stack counts {} samples, the sample lines {n}", s.count),
                });
            }
        }
        Ok(())
    }

    /// Takes one line (without its newline).
    fn take(&mut self, body: &[u8]) -> Result<(), String> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        if self.end.is_some() {
            return Err("a line after the `# end` line".into());
        }
        if let Some(rest) = body.strip_prefix(b"#") {
            let text = std::str::from_utf8(rest).map_err(|_| "a # line that is not UTF-8")?;
            return self.hash_line(text.trim_start());
        }
        let pieces = parse_line(body).map_err(|e| format!("offset {}: {}", e.offset, e.message))?;
        let mut context = false;
        for p in &pieces {
            if let Piece::Element(e, _) = p {
                context |= self.context(e)?;
            }
        }
        if context {
            return Ok(());
        }
        self.stack_line(body)
    }

    /// Applies a context element; whether it was one.
    fn context(&mut self, e: &Element) -> Result<bool, String> {
        match e {
            Element::Reset => self.current.clear(),
            Element::Module { id, name, build_id } => {
                self.modules.push(Module {
                    name: name.clone(),
                    build_id: build_id.clone(),
                    mmaps: Vec::new(),
                });
                self.current.insert(*id, self.modules.len() - 1);
            }
            Element::Mmap {
                start,
                size,
                module,
                vaddr,
                perms,
            } => {
                let i = *self
                    .current
                    .get(module)
                    .ok_or_else(|| format!("mmap of undeclared module {module}"))?;
                self.modules[i]
                    .mmaps
                    .push((*start, *size, *vaddr, perms.contains('x')));
            }
            Element::Bt { .. } | Element::Pc { .. } => return Ok(false),
        }
        Ok(true)
    }

    /// `FRAME;FRAME;... COUNT`, outermost first; a frame is a `{{{pc}}}`
    /// element or a bare `0x` address that no module covered.
    fn stack_line(&mut self, body: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(body).map_err(|_| "a stack line that is not UTF-8")?;
        let (stack, count) = text
            .trim_end()
            .rsplit_once(' ')
            .ok_or("neither context, a stack with its count, nor a # line")?;
        let count: u64 = count
            .parse()
            .map_err(|_| format!("stack count {count:?} is not a number"))?;
        let mut frames = Vec::new();
        for part in stack.split(';') {
            let part = part.trim();
            let pieces = parse_line(part.as_bytes())
                .map_err(|e| format!("frame {part:?}: {}", e.message))?;
            let addr = match pieces.as_slice() {
                [Piece::Element(Element::Pc { addr, kind }, _)] => (*addr, *kind),
                _ => match part.strip_prefix("0x").map(|h| u64::from_str_radix(h, 16)) {
                    Some(Ok(a)) => (a, PcKind::Unknown),
                    _ => {
                        return Err(format!(
                            "frame {part:?} is neither a pc element nor 0x an address"
                        ))
                    }
                },
            };
            frames.push(addr);
        }
        let n = frames.len();
        let frames = frames
            .into_iter()
            .enumerate()
            .rev()
            .map(|(i, (addr, kind))| {
                // The last frame written is the leaf: without a kind, it is
                // the pc and the others return addresses.
                let addr = match kind {
                    PcKind::Ra => addr.wrapping_sub(1),
                    PcKind::Unknown if i + 1 < n => addr.wrapping_sub(1),
                    _ => addr,
                };
                Addr {
                    module: self.module_of(addr),
                    addr,
                }
            })
            .collect();
        self.stacks.push(Stack {
            frames,
            count,
            line: self.line,
        });
        Ok(())
    }

    fn module_of(&self, addr: u64) -> Option<usize> {
        self.current.values().copied().find(|&i| {
            self.modules[i]
                .mmaps
                .iter()
                .any(|&(s, n, _, _)| addr >= s && addr - s < n)
        })
    }

    /// `# stackmark-profile ...`, `# thread ...`, `# sample ...`,
    /// `# end ...`; any other `#` line is a comment.
    fn hash_line(&mut self, text: &str) -> Result<(), String> {
        let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
        match word {
            "stackmark-profile" => {
                let f = fields(rest)?;
                let period_ns = number(&f, "period_ns")?;
                if period_ns == 0 {
                    return Err("period_ns is 0".into());
                }
                let clocks = match (f.get("monotonic_ns"), f.get("realtime_ns")) {
                    (Some(_), Some(_)) => {
                        Some((number(&f, "monotonic_ns")?, number(&f, "realtime_ns")?))
                    }
                    _ => None,
                };
                self.header = Some(Header { period_ns, clocks });
            }
            "thread" => {
                let (tid, name) = rest
                    .strip_prefix("tid=")
                    .and_then(|r| r.split_once(" name=\""))
                    .ok_or("thread needs tid=TID name=\"NAME\"")?;
                let tid: i32 = tid.parse().map_err(|_| format!("thread id {tid:?}"))?;
                let name = name
                    .strip_suffix('"')
                    .ok_or("thread name without its closing quote")?;
                self.threads.insert(tid, unquote(name)?);
            }
            "sample" => {
                if self.header.is_none() {
                    return Err("a sample line before the `# stackmark-profile` line".into());
                }
                let f = fields(rest)?;
                let stack = number(&f, "stack")?;
                if stack >= self.stacks.len() as u64 {
                    return Err(format!(
                        "stack {stack}, but only {} stack lines came before",
                        self.stacks.len()
                    ));
                }
                let tid = number(&f, "tid")?;
                self.records.push(Record {
                    stack: stack as usize,
                    tid: i32::try_from(tid).map_err(|_| format!("thread id {tid}"))?,
                    time_ns: number(&f, "time_ns")?,
                });
            }
            "end" => {
                let f = fields(rest)?;
                self.end = Some((self.line, number(&f, "samples")?));
            }
            _ => {}
        }
        Ok(())
    }

    /// How many samples the log gave: its sample lines where it has them,
    /// else its stacks' counts.
    pub fn samples(&self) -> u64 {
        if self.header.is_some() {
            self.records.len() as u64
        } else {
            self.stacks.iter().map(|s| s.count).sum()
        }
    }
}

/// `key=value` words.
fn fields(text: &str) -> Result<HashMap<&str, &str>, String> {
    text.split_ascii_whitespace()
        .map(|w| {
            w.split_once('=')
                .ok_or_else(|| format!("{w:?} is not key=value"))
        })
        .collect()
}

fn number(f: &HashMap<&str, &str>, key: &str) -> Result<u64, String> {
    let v = f.get(key).ok_or_else(|| format!("no {key}="))?;
    v.parse().map_err(|_| format!("{key}={v} is not a number"))
}

/// A quoted thread name: `\xNN` stands for a byte; `"` and `\` only so.
fn unquote(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let hex = s
                    .get(i + 1..i + 4)
                    .and_then(|e| e.strip_prefix('x'))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad escape in thread name {s:?}"))?;
                out.push(hex);
                i += 4;
            }
            b'"' => return Err(format!("unescaped quote in thread name {s:?}")),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// How to write the profile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// One pprof sample per sample line, with a `timestamp` label, rather
    /// than one per stack and thread.
    pub timestamps: bool,
}

/// The pprof profile of `log`. With `sources`, every location gets its
/// functions and lines (inlined frames included) from them, and the
/// sources' warnings are left in them; without, the profile holds only
/// mappings and addresses, for a server or `pprof` to symbolize.
pub fn to_pprof(log: &ProfileLog, mut sources: Option<&mut Sources>, options: Options) -> Profile {
    let mut strings = Strings::default();
    let mut p = Profile::default();
    let header = log.header;
    let period = header.map(|h| h.period_ns);
    let mut value_types = vec![("samples", "count")];
    if let Some(period) = period {
        value_types.push(("cpu", "nanoseconds"));
        p.period_type = Some(pprof::ValueType {
            r#type: strings.get("cpu"),
            unit: strings.get("nanoseconds"),
        });
        p.period = period as i64;
    }
    p.sample_type = value_types
        .iter()
        .map(|(t, u)| pprof::ValueType {
            r#type: strings.get(t),
            unit: strings.get(u),
        })
        .collect();
    p.default_sample_type = p.sample_type.last().map_or(0, |v| v.r#type);

    // One mapping per module, in the order declared (the executable first,
    // as stackmark writes the context, and as pprof expects): its
    // executable segments, as /proc/PID/maps and Go's own profiles give
    // them, which is the range pprof translates addresses by.
    let mut symbolized = vec![false; log.modules.len()];
    for (i, m) in log.modules.iter().enumerate() {
        let (start, limit, vaddr) = code_range(m);
        let build_id: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
        let has = match sources.as_deref_mut() {
            Some(s) => s.module(&m.build_id, &m.name).symbols.is_some(),
            None => false,
        };
        symbolized[i] = has;
        p.mapping.push(pprof::Mapping {
            id: i as u64 + 1,
            memory_start: start,
            memory_limit: limit,
            file_offset: file_offset(m, vaddr),
            filename: strings.get(&m.name),
            build_id: strings.get(&build_id),
            has_functions: has,
            has_filenames: has,
            has_line_numbers: has,
            has_inline_frames: has,
        });
    }

    // Locations by address, functions by name and file.
    let mut locations: HashMap<Addr, u64> = HashMap::new();
    let mut functions: HashMap<(String, String, String), u64> = HashMap::new();
    let mut stack_locations: Vec<Vec<u64>> = Vec::with_capacity(log.stacks.len());
    for s in &log.stacks {
        let mut ids = Vec::with_capacity(s.frames.len());
        for a in &s.frames {
            if let Some(&id) = locations.get(a) {
                ids.push(id);
                continue;
            }
            let id = p.location.len() as u64 + 1;
            let mut loc = pprof::Location {
                id,
                mapping_id: a.module.map_or(0, |m| m as u64 + 1),
                address: a.addr,
                line: Vec::new(),
            };
            if let (Some(src), Some(m)) = (sources.as_deref_mut(), a.module) {
                if symbolized[m] {
                    let module = &log.modules[m];
                    let lowest = module.mmaps.iter().map(|s| s.2).min().unwrap_or(0);
                    let rel = module
                        .mmaps
                        .iter()
                        .find(|&&(st, n, _, _)| a.addr >= st && a.addr - st < n)
                        .map_or(0, |&(st, _, v, _)| a.addr - st + v);
                    for f in src.lookup(&module.build_id, rel, lowest) {
                        let Some(raw) = f.function else { continue };
                        let file = f.file.unwrap_or_default();
                        let key = (readable(&raw), raw, file);
                        let next = p.function.len() as u64 + 1;
                        let fid = *functions.entry(key.clone()).or_insert_with(|| {
                            p.function.push(pprof::Function {
                                id: next,
                                name: strings.get(&key.0),
                                system_name: strings.get(&key.1),
                                filename: strings.get(&key.2),
                            });
                            next
                        });
                        loc.line.push(pprof::Line {
                            function_id: fid,
                            line: i64::from(f.line),
                        });
                    }
                }
            }
            p.location.push(loc);
            locations.insert(*a, id);
            ids.push(id);
        }
        stack_locations.push(ids);
    }

    // Samples: from the sample lines where there are any, else the stacks'
    // counts. Samples of one stack and thread are merged unless each keeps
    // its time.
    let times = log.records.iter().map(|r| r.time_ns);
    let (first, last) = (times.clone().min(), times.max());
    let to_real = |t: u64| match header.and_then(|h| h.clocks) {
        Some((mono, real)) => real.wrapping_sub(mono.wrapping_sub(t)),
        None => t,
    };
    if let (Some(first), Some(last)) = (first, last) {
        if header.is_some_and(|h| h.clocks.is_some()) {
            p.time_nanos = to_real(first) as i64;
        }
        p.duration_nanos = (last - first + period.unwrap_or(0)) as i64;
    }
    let values = |n: u64| {
        let mut v = vec![n as i64];
        if let Some(period) = period {
            v.push((n * period) as i64);
        }
        v
    };
    if header.is_none() {
        for (s, ids) in log.stacks.iter().zip(&stack_locations) {
            p.sample.push(pprof::Sample {
                location_id: ids.clone(),
                value: values(s.count),
                label: Vec::new(),
            });
        }
    } else {
        let (thread, tid, timestamp, ns) = (
            strings.get("thread"),
            strings.get("tid"),
            strings.get("timestamp"),
            strings.get("nanoseconds"),
        );
        let mut merged: HashMap<(usize, i32, u64), usize> = HashMap::new();
        for r in &log.records {
            let time = if options.timestamps { r.time_ns } else { 0 };
            if let Some(&at) = merged.get(&(r.stack, r.tid, time)) {
                let s: &mut pprof::Sample = &mut p.sample[at];
                s.value = values(s.value[0] as u64 + 1);
                continue;
            }
            let mut label = Vec::new();
            if let Some(name) = log.threads.get(&r.tid) {
                label.push(pprof::Label {
                    key: thread,
                    str: strings.get(&String::from_utf8_lossy(name)),
                    ..Default::default()
                });
            }
            label.push(pprof::Label {
                key: tid,
                num: i64::from(r.tid),
                ..Default::default()
            });
            if options.timestamps {
                label.push(pprof::Label {
                    key: timestamp,
                    num: to_real(r.time_ns) as i64,
                    num_unit: ns,
                    ..Default::default()
                });
            }
            merged.insert((r.stack, r.tid, time), p.sample.len());
            p.sample.push(pprof::Sample {
                location_id: stack_locations[r.stack].clone(),
                value: values(1),
                label,
            });
        }
    }
    p.comment
        .push(strings.get("converted by stackmark-symbolize --pprof"));
    p.string_table = strings.into_table();
    p
}

/// A function's name for pprof's readers: Rust names without their hash
/// (`<core::ops::range::Range<T> as Iterator>::next`, as `rustc-demangle`
/// and pprof's own Rust support write them), others as llvm-symbolizer
/// demangles them. The mangled name stays in `system_name`.
fn readable(raw: &str) -> String {
    match rustc_demangle::try_demangle(raw) {
        Ok(d) => format!("{d:#}"),
        Err(_) => demangle(raw),
    }
}

/// A module's code: the start and end of its executable segments (all
/// of its segments if none is marked so), and the module-relative address
/// of the start.
fn code_range(m: &Module) -> (u64, u64, u64) {
    let code: Vec<_> = m.mmaps.iter().filter(|s| s.3).collect();
    let segs = if code.is_empty() {
        m.mmaps.iter().collect()
    } else {
        code
    };
    let first = segs.iter().min_by_key(|s| s.0);
    let start = first.map_or(0, |s| s.0);
    let limit = segs.iter().map(|s| s.0 + s.1).max().unwrap_or(0);
    (start, limit, first.map_or(0, |s| s.2))
}

/// The file offset of the module-relative address `vaddr`. Markup gives
/// no file offsets: they come from the module's file when it is at its
/// path with the same build ID (the machine that wrote the log). Else they
/// are taken as the distance from the module's first page, which holds
/// where the linker laid the file out as it is loaded (GNU ld, gold, mold;
/// lld with `-z separate-code`), and pprof itself uses them only to pick
/// the segment.
fn file_offset(m: &Module, vaddr: u64) -> u64 {
    if let Some(off) = offset_in_file(m, vaddr) {
        return off;
    }
    let lowest = m.mmaps.iter().map(|s| s.2).min().unwrap_or(0);
    vaddr - (lowest & !0xfff)
}

/// `vaddr`'s offset in the module's own file, if that file is there.
fn offset_in_file(m: &Module, vaddr: u64) -> Option<u64> {
    use object::{Object, ObjectSegment};
    let data = std::fs::read(&m.name).ok()?;
    let file = object::File::parse(&*data).ok()?;
    if file.build_id().ok()?? != m.build_id.as_slice() {
        return None;
    }
    file.segments().find_map(|seg| {
        let (off, _) = seg.file_range();
        (vaddr >= seg.address() && vaddr - seg.address() < seg.size())
            .then(|| off + (vaddr - seg.address()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTEXT: &str = "{{{reset}}}\n{{{module:0:/bin/app:elf:0102}}}\n\
        {{{mmap:0x1000:0x1000:load:0:r:0x0}}}\n{{{mmap:0x2000:0x1000:load:0:rx:0x1000}}}\n";

    fn read(text: &str) -> (ProfileLog, Option<LogError>) {
        ProfileLog::read(&mut text.as_bytes())
    }

    #[test]
    fn an_old_log_gives_its_stacks_counts_and_bare_frames_no_mapping() {
        let log = format!("{CONTEXT}0x7000;{{{{{{pc:0x2010:ra}}}}}};{{{{{{pc:0x2020:pc}}}}}} 5\n");
        let (log, err) = read(&log);
        assert_eq!(err, None);
        assert_eq!(log.samples(), 5);
        let p = to_pprof(&log, None, Options::default());
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].value, [5]);
        // Leaf first: the exact pc, the return address less one, the bare
        // address (not the leaf, so a return address too) without a mapping.
        let loc = |id: u64| &p.location[id as usize - 1];
        let got: Vec<(u64, u64)> = p.sample[0]
            .location_id
            .iter()
            .map(|&id| (loc(id).address, loc(id).mapping_id))
            .collect();
        assert_eq!(got, [(0x2020, 1), (0x200f, 1), (0x6fff, 0)]);
        // The executable segment, at its distance from the first page.
        let m = &p.mapping[0];
        assert_eq!(
            (m.memory_start, m.memory_limit, m.file_offset),
            (0x2000, 0x3000, 0x1000)
        );
        assert_eq!(p.string_table[m.build_id as usize], "0102");
    }

    #[test]
    fn thread_names_unquote_and_samples_merge_by_stack_and_thread() {
        let log = format!(
            "{CONTEXT}{{{{{{pc:0x2010:pc}}}}}} 3\n\
             # stackmark-profile version=1 period_ns=1000 monotonic_ns=100 realtime_ns=5000\n\
             # thread tid=7 name=\"a \\x22b\\x5c\"\n\
             # sample stack=0 tid=7 time_ns=10\n# sample stack=0 tid=7 time_ns=20\n\
             # sample stack=0 tid=8 time_ns=30\n# end samples=3\n"
        );
        let (log, err) = read(&log);
        assert_eq!(err, None);
        let p = to_pprof(&log, None, Options::default());
        let s = |i: i64| p.string_table[i as usize].as_str();
        type Labels<'a> = Vec<(&'a str, &'a str, i64)>;
        let merged: Vec<(Vec<i64>, Labels)> = p
            .sample
            .iter()
            .map(|x| {
                let labels = x
                    .label
                    .iter()
                    .map(|l| (s(l.key), s(l.str), l.num))
                    .collect();
                (x.value.clone(), labels)
            })
            .collect();
        assert_eq!(
            merged,
            [
                (
                    vec![2, 2000],
                    vec![("thread", "a \"b\\", 0), ("tid", "", 7)]
                ),
                (vec![1, 1000], vec![("tid", "", 8)]),
            ]
        );
        // Wall clock: 5000 - (100 - 10).
        assert_eq!((p.time_nanos, p.duration_nanos), (4910, 20 + 1000));
        let p = to_pprof(&log, None, Options { timestamps: true });
        assert_eq!(p.sample.len(), 3);
    }

    #[test]
    fn counts_that_disagree_or_a_missing_end_are_errors_after_the_whole_log() {
        let head = format!(
            "{CONTEXT}{{{{{{pc:0x2010:pc}}}}}} 2\n# stackmark-profile period_ns=1000\n\
             # sample stack=0 tid=7 time_ns=10\n"
        );
        let (_, err) = read(&head);
        assert_eq!(err.unwrap().line, 8, "the line after the last");
        let (_, err) = read(&format!("{head}# end samples=1\n"));
        let err = err.unwrap();
        assert_eq!(err.line, 5, "the stack line: {}", err.message);
        let (_, err) = read(&format!("{head}# end samples=2\n"));
        assert_eq!(err.unwrap().line, 8);
    }
}
