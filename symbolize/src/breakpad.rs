//! Breakpad symbol files (`.sym`): `MODULE`, `FILE`, `INLINE_ORIGIN`,
//! `FUNC` with its line and `INLINE` records, and `PUBLIC`. `STACK`, `INFO`
//! and unknown records are skipped.
//!
//! The file is indexed once ([`SymFile::parse`]): functions and public
//! symbols sorted by address, each function's lines and inlines sorted, so
//! that a lookup is a few binary searches. A malformed record is reported
//! with its byte offset and left out; the rest of the file is still used.
//! No input makes the parser panic.

use std::collections::HashMap;

use crate::SymFrame;

/// A malformed record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymError {
    /// Byte offset of the record's line in the file.
    pub offset: usize,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for SymError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.message)
    }
}

#[derive(Debug)]
struct Line {
    addr: u64,
    size: u64,
    line: u32,
    file: u32,
}

#[derive(Debug)]
struct Inline {
    depth: u32,
    call_line: u32,
    call_file: u32,
    origin: u32,
    ranges: Vec<(u64, u64)>,
}

#[derive(Debug)]
struct Func {
    addr: u64,
    size: u64,
    name: String,
    lines: Vec<Line>,
    inlines: Vec<Inline>,
}

/// An indexed Breakpad symbol file.
#[derive(Debug, Default)]
pub struct SymFile {
    /// The `MODULE` record's debug ID, if there was one.
    pub debug_id: Option<String>,
    files: HashMap<u32, String>,
    origins: HashMap<u32, String>,
    funcs: Vec<Func>,
    publics: Vec<(u64, String)>,
}

fn fields(s: &str, n: usize) -> Option<(Vec<&str>, &str)> {
    // The first n space-separated fields, then the rest (a name, which may
    // hold spaces).
    let mut out = Vec::with_capacity(n);
    let mut rest = s;
    for _ in 0..n {
        let (f, r) = rest.split_once(' ').unwrap_or((rest, ""));
        if f.is_empty() {
            return None;
        }
        out.push(f);
        rest = r;
    }
    Some((out, rest))
}

fn hex(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s, 16).map_err(|_| format!("{s:?} is not a hexadecimal number"))
}

fn dec(s: &str) -> Result<u32, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not a decimal number"))
}

impl SymFile {
    /// Indexes `data`; returns the file and the malformed records left out.
    pub fn parse(data: &[u8]) -> (SymFile, Vec<SymError>) {
        let mut sym = SymFile::default();
        let mut errors = Vec::new();
        let mut offset = 0;
        // Line and INLINE records belong to the last FUNC; after a
        // malformed FUNC they belong to nothing and are dropped.
        let mut in_func = false;
        for raw in data.split(|&b| b == b'\n') {
            let at = offset;
            offset += raw.len() + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            if raw.is_empty() {
                continue;
            }
            let line = match std::str::from_utf8(raw) {
                Ok(l) => l,
                Err(_) => {
                    errors.push(SymError {
                        offset: at,
                        message: "record is not UTF-8".into(),
                    });
                    continue;
                }
            };
            if let Err(message) = sym.record(line, &mut in_func) {
                errors.push(SymError {
                    offset: at,
                    message,
                });
            }
        }
        sym.funcs.sort_by_key(|f| f.addr);
        for f in &mut sym.funcs {
            f.lines.sort_by_key(|l| l.addr);
        }
        sym.publics.sort_by_key(|p| p.0);
        (sym, errors)
    }

    fn record(&mut self, line: &str, in_func: &mut bool) -> Result<(), String> {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kind {
            "MODULE" => {
                let (f, _) = fields(rest, 3).ok_or("MODULE needs OS ARCH ID NAME")?;
                self.debug_id = Some(f[2].to_string());
            }
            "FILE" => {
                let (f, name) = fields(rest, 1).ok_or("FILE needs NUMBER NAME")?;
                self.files.insert(dec(f[0])?, name.to_string());
            }
            "INLINE_ORIGIN" => {
                let (f, name) = fields(rest, 1).ok_or("INLINE_ORIGIN needs NUMBER NAME")?;
                self.origins.insert(dec(f[0])?, name.to_string());
            }
            "FUNC" | "PUBLIC" => {
                let rest = rest.strip_prefix("m ").unwrap_or(rest);
                if kind == "FUNC" {
                    *in_func = false;
                    let (f, name) = fields(rest, 3).ok_or("FUNC needs ADDRESS SIZE PARAMS NAME")?;
                    hex(f[2])?;
                    self.funcs.push(Func {
                        addr: hex(f[0])?,
                        size: hex(f[1])?,
                        name: name.to_string(),
                        lines: Vec::new(),
                        inlines: Vec::new(),
                    });
                    *in_func = true;
                } else {
                    *in_func = false;
                    let (f, name) = fields(rest, 2).ok_or("PUBLIC needs ADDRESS PARAMS NAME")?;
                    hex(f[1])?;
                    self.publics.push((hex(f[0])?, name.to_string()));
                }
            }
            "INLINE" => {
                let (f, ranges) =
                    fields(rest, 4).ok_or("INLINE needs LEVEL LINE FILE ORIGIN ranges")?;
                let nums: Vec<&str> = ranges.split(' ').filter(|s| !s.is_empty()).collect();
                if nums.is_empty() || !nums.len().is_multiple_of(2) {
                    return Err("INLINE needs ADDRESS SIZE pairs".into());
                }
                let ranges = nums
                    .chunks(2)
                    .map(|p| Ok((hex(p[0])?, hex(p[1])?)))
                    .collect::<Result<Vec<_>, String>>()?;
                let inline = Inline {
                    depth: dec(f[0])?,
                    call_line: dec(f[1])?,
                    call_file: dec(f[2])?,
                    origin: dec(f[3])?,
                    ranges,
                };
                match self.funcs.last_mut() {
                    Some(func) if *in_func => func.inlines.push(inline),
                    _ => return Err("INLINE outside a FUNC".into()),
                }
            }
            "STACK" | "INFO" => *in_func = false,
            _ if kind.bytes().all(|b| b.is_ascii_hexdigit()) => {
                let (f, _) = fields(line, 4).ok_or("line record needs ADDRESS SIZE LINE FILE")?;
                let l = Line {
                    addr: hex(f[0])?,
                    size: hex(f[1])?,
                    // Breakpad writes line 0 as is; a negative one (old
                    // dump_syms) is taken as unknown.
                    line: f[2]
                        .parse::<i64>()
                        .map_err(|_| format!("line {:?}", f[2]))?
                        .max(0) as u32,
                    file: dec(f[3])?,
                };
                match self.funcs.last_mut() {
                    Some(func) if *in_func => func.lines.push(l),
                    _ => return Err("line record outside a FUNC".into()),
                }
            }
            _ => return Err(format!("unknown record {kind:?}")),
        }
        Ok(())
    }

    /// The frames at `addr` (module-relative), innermost first; empty when
    /// no FUNC or PUBLIC covers it.
    pub fn lookup(&self, addr: u64) -> Vec<SymFrame> {
        let i = self.funcs.partition_point(|f| f.addr <= addr);
        let func = i
            .checked_sub(1)
            .map(|i| &self.funcs[i])
            .filter(|f| addr - f.addr < f.size.max(1));
        let Some(func) = func else {
            return self.public(addr).into_iter().collect();
        };
        let file = |n: u32| self.files.get(&n).cloned();
        let j = func.lines.partition_point(|l| l.addr <= addr);
        let line = j
            .checked_sub(1)
            .map(|j| &func.lines[j])
            .filter(|l| addr - l.addr < l.size.max(1));
        // The INLINE records covering addr, outermost first: one per
        // level, each within the one before.
        let mut chain: Vec<&Inline> = Vec::new();
        for inl in &func.inlines {
            if inl.depth as usize != chain.len() {
                continue;
            }
            if inl.ranges.iter().any(|&(a, s)| a <= addr && addr - a < s) {
                chain.push(inl);
            }
        }
        let mut frames = Vec::with_capacity(chain.len() + 1);
        let (mut f, mut l) = match line {
            // Line 0 (code the compiler made up) names no place, as in
            // llvm-symbolizer.
            Some(l) if l.line == 0 => (None, 0),
            Some(l) => (file(l.file), l.line),
            None => (None, 0),
        };
        for inl in chain.iter().rev() {
            frames.push(SymFrame {
                function: self.origins.get(&inl.origin).cloned(),
                file: f,
                line: l,
                column: 0,
            });
            f = file(inl.call_file);
            l = inl.call_line;
        }
        frames.push(SymFrame {
            function: Some(func.name.clone()),
            file: f,
            line: l,
            column: 0,
        });
        frames
    }

    fn public(&self, addr: u64) -> Option<SymFrame> {
        let i = self.publics.partition_point(|p| p.0 <= addr);
        let (start, name) = &self.publics[i.checked_sub(1)?];
        // A PUBLIC has no size: it runs to the next FUNC or PUBLIC.
        let next_func = self.funcs.partition_point(|f| f.addr <= *start);
        if self.funcs.get(next_func).is_some_and(|f| f.addr <= addr) {
            return None;
        }
        Some(SymFrame {
            function: Some(name.clone()),
            ..SymFrame::default()
        })
    }
}

/// The Breakpad debug ID of a module with this build ID (ELF) or UUID
/// (Mach-O): the first 16 bytes (zero-padded) as a GUID whose first three
/// fields are read little-endian, in upper-case hex, then the age, 0.
pub fn debug_id(build_id: &[u8]) -> String {
    let mut g = [0u8; 16];
    let n = build_id.len().min(16);
    g[..n].copy_from_slice(&build_id[..n]);
    g[0..4].reverse();
    g[4..6].reverse();
    g[6..8].reverse();
    let mut s: String = g.iter().map(|b| format!("{b:02X}")).collect();
    s.push('0');
    s
}

/// The debug ID Breakpad gives a Mach-O image: its UUID unswapped (the
/// UUID is already a GUID in memory order), then the age, 0.
pub fn debug_id_macho(uuid: &[u8]) -> String {
    let mut s: String = uuid.iter().map(|b| format!("{b:02X}")).collect();
    s.push('0');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYM: &str = "MODULE Linux x86_64 ABC0 app\n\
INFO CODE_ID 00\n\
FILE 0 a.c\n\
FILE 1 b.h\n\
INLINE_ORIGIN 0 inner\n\
INLINE_ORIGIN 1 middle\n\
FUNC 100 40 0 outer\n\
INLINE 0 10 0 1 110 20\n\
INLINE 1 20 1 0 118 8\n\
100 10 5 0\n\
110 8 30 1\n\
118 8 40 1\n\
120 20 6 0\n\
PUBLIC 200 0 pub_one\n\
FUNC 300 10 0 later\n";

    fn names(f: &[SymFrame]) -> Vec<(Option<&str>, Option<&str>, u32)> {
        f.iter()
            .map(|f| (f.function.as_deref(), f.file.as_deref(), f.line))
            .collect()
    }

    #[test]
    fn inline_records_give_the_chain_with_call_sites() {
        let (s, e) = SymFile::parse(SYM.as_bytes());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            names(&s.lookup(0x11a)),
            vec![
                (Some("inner"), Some("b.h"), 40),
                (Some("middle"), Some("b.h"), 20),
                (Some("outer"), Some("a.c"), 10),
            ]
        );
        assert_eq!(
            names(&s.lookup(0x112)),
            vec![
                (Some("middle"), Some("b.h"), 30),
                (Some("outer"), Some("a.c"), 10)
            ]
        );
        assert_eq!(
            names(&s.lookup(0x130)),
            vec![(Some("outer"), Some("a.c"), 6)]
        );
    }

    #[test]
    fn public_symbols_run_to_the_next_function() {
        let (s, _) = SymFile::parse(SYM.as_bytes());
        assert_eq!(names(&s.lookup(0x250)), vec![(Some("pub_one"), None, 0)]);
        assert_eq!(names(&s.lookup(0x305)), vec![(Some("later"), None, 0)]);
        assert!(s.lookup(0x50).is_empty());
    }

    #[test]
    fn a_malformed_record_is_reported_with_its_offset_and_skipped() {
        let bad = "MODULE Linux x86_64 ABC0 app\nFUNC zz 10 0 f\n100 10 5 0\nFUNC 300 10 0 g\n";
        let (s, e) = SymFile::parse(bad.as_bytes());
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].offset, 29);
        assert!(e[1].message.contains("outside a FUNC"));
        assert_eq!(names(&s.lookup(0x300)), vec![(Some("g"), None, 0)]);
    }

    #[test]
    fn debug_ids_swap_the_guid_fields_of_an_elf_build_id() {
        let id: Vec<u8> = (0u8..20).collect();
        assert_eq!(debug_id(&id), "030201000504070608090A0B0C0D0E0F0");
        assert_eq!(debug_id(&[0xab; 8]), "ABABABABABABABAB00000000000000000");
        assert_eq!(
            debug_id_macho(&id[..16]),
            "000102030405060708090A0B0C0D0E0F0"
        );
    }
}
