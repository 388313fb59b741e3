//! The sources of symbols, in the user's order, and the symbols each
//! module of a report gets from the first source that has its build ID.
//! Every symbol file is read and indexed once, when the first frame in its
//! module needs it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::breakpad::{self, SymFile};
use crate::dwarf::{self, Dwarf};
use crate::gsym::{self, Gsym};
use crate::SymFrame;

/// A place to look for symbols.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A Breakpad symbol store: `DIR/NAME/DEBUGID/NAME.sym`.
    Breakpad(PathBuf),
    /// A directory of GSYM files, matched by the UUID in their header.
    Gsym(PathBuf),
    /// A debug file directory holding `.build-id/xx/rest.debug`.
    BuildId(PathBuf),
}

impl Source {
    /// How the source is named on the command line and in messages.
    pub fn describe(&self) -> String {
        match self {
            Source::Breakpad(d) => format!("--breakpad {}", d.display()),
            Source::Gsym(d) => format!("--gsym {}", d.display()),
            Source::BuildId(d) => format!("--debug-file-directory {}", d.display()),
        }
    }
}

/// A module's symbols, from one source.
pub enum Symbols {
    /// An indexed `.sym` file.
    Breakpad(SymFile),
    /// A checked GSYM file.
    Gsym(Gsym),
    /// An object file's DWARF (boxed: it is much the largest).
    Dwarf(Box<Dwarf>),
}

/// What a module of the report resolved to.
pub struct Found {
    /// The symbols, if a source had them.
    pub symbols: Option<Symbols>,
    /// The file they came from.
    pub path: Option<PathBuf>,
    /// For a module without symbols, why each source had none.
    pub tried: Vec<String>,
}

/// The sources and what was found in them.
pub struct Sources {
    sources: Vec<Source>,
    /// Per source, built on first use: GSYM UUID -> file, or Breakpad debug
    /// ID -> `.sym` file.
    indexes: Vec<Option<HashMap<String, PathBuf>>>,
    found: HashMap<Vec<u8>, Found>,
    /// Messages about bad symbol files, for standard error.
    pub warnings: Vec<String>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sources {
    /// The sources, tried in this order.
    pub fn new(sources: Vec<Source>) -> Sources {
        let n = sources.len();
        Sources {
            sources,
            indexes: (0..n).map(|_| None).collect(),
            found: HashMap::new(),
            warnings: Vec::new(),
        }
    }

    /// The sources, in order.
    pub fn list(&self) -> &[Source] {
        &self.sources
    }

    /// What the module with `build_id` (named `name` in the report)
    /// resolved to; the first call for a build ID loads its symbols.
    pub fn module(&mut self, build_id: &[u8], name: &str) -> &Found {
        if !self.found.contains_key(build_id) {
            let f = self.load(build_id, name);
            self.found.insert(build_id.to_vec(), f);
        }
        &self.found[build_id]
    }

    fn load(&mut self, build_id: &[u8], name: &str) -> Found {
        let mut tried = Vec::new();
        for i in 0..self.sources.len() {
            let src = self.sources[i].clone();
            let (path, why) = match &src {
                Source::BuildId(dir) => match dwarf::build_id_path(dir, build_id) {
                    Some(p) if p.exists() => (Some(p), String::new()),
                    Some(p) => (None, format!("no {}", p.display())),
                    None => (None, "build ID too short".into()),
                },
                Source::Breakpad(dir) => self.breakpad_path(i, dir, build_id, name),
                Source::Gsym(dir) => {
                    let key = hex(build_id);
                    let index = self.gsym_index(i, dir);
                    match index.get(&key) {
                        Some(p) => (Some(p.clone()), String::new()),
                        None => (None, format!("no GSYM file with UUID {key}")),
                    }
                }
            };
            let Some(path) = path else {
                tried.push(format!("{}: {why}", src.describe()));
                continue;
            };
            match open(&src, &path) {
                Ok((symbols, warnings)) => {
                    self.warnings.extend(warnings);
                    return Found {
                        symbols: Some(symbols),
                        path: Some(path),
                        tried,
                    };
                }
                Err(e) => {
                    self.warnings.push(format!("{}: {e}", path.display()));
                    tried.push(format!(
                        "{}: {} is unreadable",
                        src.describe(),
                        path.display()
                    ));
                }
            }
        }
        Found {
            symbols: None,
            path: None,
            tried,
        }
    }

    fn breakpad_path(
        &mut self,
        i: usize,
        dir: &Path,
        build_id: &[u8],
        name: &str,
    ) -> (Option<PathBuf>, String) {
        let base = name.rsplit('/').next().unwrap_or(name);
        // An ELF build ID's GUID has its fields swapped; a Mach-O UUID
        // (16 bytes) is taken as is. The report does not say which it is.
        let mut ids = vec![breakpad::debug_id(build_id)];
        if build_id.len() == 16 {
            ids.push(breakpad::debug_id_macho(build_id));
        }
        for id in &ids {
            let p = dir.join(base).join(id).join(format!("{base}.sym"));
            if p.is_file() {
                return (Some(p), String::new());
            }
        }
        // The store may file the module under another name (a debug file's
        // name, say): any NAME/DEBUGID/*.sym with the ID will do.
        let index = self.indexes[i].get_or_insert_with(|| {
            let mut m = HashMap::new();
            for name_dir in read_dir(dir) {
                for id_dir in read_dir(&name_dir) {
                    let Some(id) = id_dir
                        .file_name()
                        .map(|s| s.to_string_lossy().to_uppercase())
                    else {
                        continue;
                    };
                    if let Some(sym) = read_dir(&id_dir)
                        .into_iter()
                        .find(|p| p.extension().is_some_and(|e| e == "sym"))
                    {
                        m.entry(id).or_insert(sym);
                    }
                }
            }
            m
        });
        for id in &ids {
            if let Some(p) = index.get(id) {
                return (Some(p.clone()), String::new());
            }
        }
        (None, format!("no {base}/{}/{base}.sym", ids[0]))
    }

    fn gsym_index(&mut self, i: usize, dir: &Path) -> &HashMap<String, PathBuf> {
        let warnings = &mut self.warnings;
        self.indexes[i].get_or_insert_with(|| {
            let mut m = HashMap::new();
            for p in read_dir(dir) {
                let mut head = [0u8; 48];
                let Ok(mut f) = std::fs::File::open(&p) else {
                    continue;
                };
                let n = read_up_to(&mut f, &mut head);
                match gsym::header_uuid(&head[..n]) {
                    Ok(uuid) => {
                        m.entry(hex(&uuid)).or_insert(p);
                    }
                    // Other files may share the directory; a file that
                    // says it is GSYM but is cut short is worth a word.
                    Err(e) if head.starts_with(&0x4753_594du32.to_le_bytes()) => {
                        warnings.push(format!("{}: {e}", p.display()))
                    }
                    Err(_) => {}
                }
            }
            m
        })
    }

    /// The frames at `addr` (the module's own address) in `build_id`'s
    /// module; `lowest_vaddr` is the module's first mapped address, which
    /// Breakpad counts from.
    pub fn lookup(&mut self, build_id: &[u8], addr: u64, lowest_vaddr: u64) -> Vec<SymFrame> {
        let Some(found) = self.found.get(build_id) else {
            return Vec::new();
        };
        let r = match &found.symbols {
            None => return Vec::new(),
            Some(Symbols::Breakpad(s)) => Ok(s.lookup(addr.wrapping_sub(lowest_vaddr & !0xfff))),
            Some(Symbols::Gsym(g)) => g.lookup(addr).map_err(|e| e.to_string()),
            Some(Symbols::Dwarf(d)) => d.lookup(addr),
        };
        match r {
            Ok(f) => f,
            Err(e) => {
                let path = found.path.as_deref().unwrap_or(Path::new("?"));
                self.warnings
                    .push(format!("{}: at address {addr:#x}: {e}", path.display()));
                Vec::new()
            }
        }
    }
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    use std::io::Read;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn open(src: &Source, path: &Path) -> Result<(Symbols, Vec<String>), String> {
    match src {
        Source::BuildId(_) => Ok((Symbols::Dwarf(Box::new(Dwarf::open(path)?)), Vec::new())),
        Source::Breakpad(_) => {
            let data = std::fs::read(path).map_err(|e| e.to_string())?;
            let (sym, errors) = SymFile::parse(&data);
            let warnings = errors
                .iter()
                .map(|e| format!("{}: {e}", path.display()))
                .collect();
            Ok((Symbols::Breakpad(sym), warnings))
        }
        Source::Gsym(_) => {
            let data = std::fs::read(path).map_err(|e| e.to_string())?;
            Ok((
                Symbols::Gsym(Gsym::parse(data).map_err(|e| e.to_string())?),
                Vec::new(),
            ))
        }
    }
}
