//! DWARF of an ELF or Mach-O file found by build ID under a debug file
//! directory (`DIR/.build-id/xx/rest.debug`, the tree
//! `scripts/build-id-tree.sh` makes), read with `addr2line`.

use std::path::{Path, PathBuf};

use crate::SymFrame;

/// Where a build ID's file would be under `dir`.
pub fn build_id_path(dir: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    if hex.len() < 4 {
        return None;
    }
    Some(
        dir.join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..])),
    )
}

/// An object file's DWARF and symbol table.
pub struct Dwarf {
    loader: addr2line::Loader,
    symbols: Vec<Symbol>,
}

/// A symbol as llvm-symbolizer keeps it: start, size, name, and for a
/// local symbol the source file the symbol table names before it.
struct Symbol {
    addr: u64,
    size: u64,
    name: String,
    file: Option<String>,
}

/// The symbol table the way llvm-symbolizer reads it: function, object,
/// ifunc and untyped symbols of allocated sections (not ARM mapping
/// symbols), one per address: the largest, and of those the last in the
/// table. The `.dynsym` is read only when there is no `.symtab`.
fn symbol_table(data: &[u8]) -> Result<Vec<Symbol>, String> {
    use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SymbolKind};
    let file = object::File::parse(data).map_err(|e| e.to_string())?;
    let is_macho = matches!(file.format(), object::BinaryFormat::MachO);
    let mut syms = Vec::new();
    let mut stt_file: Option<String> = None;
    let table: Vec<_> = if file.symbols().next().is_some() {
        file.symbols().collect()
    } else {
        file.dynamic_symbols().collect()
    };
    for s in table {
        if s.kind() == SymbolKind::File {
            stt_file = s.name().ok().map(str::to_string);
            continue;
        }
        if !matches!(
            s.kind(),
            SymbolKind::Text | SymbolKind::Data | SymbolKind::Unknown
        ) || s.is_undefined()
        {
            continue;
        }
        let Some(index) = s.section_index() else {
            continue;
        };
        let Ok(section) = file.section_by_index(index) else {
            continue;
        };
        if let SectionFlags::Elf { sh_flags, .. } = section.flags() {
            if sh_flags.0 & object::elf::SHF_ALLOC.0 == 0 {
                continue;
            }
        }
        let Ok(mut name) = s.name() else {
            continue;
        };
        // AArch64 and ARM mapping symbols ($x, $d) mark code and data, not functions.
        if s.kind() == SymbolKind::Unknown && name.starts_with('$') {
            continue;
        }
        if is_macho {
            name = name.strip_prefix('_').unwrap_or(name);
        }
        syms.push(Symbol {
            addr: s.address(),
            size: s.size(),
            name: name.to_string(),
            file: if s.is_local() { stt_file.clone() } else { None },
        });
    }
    syms.sort_by_key(|s| (s.addr, s.size));
    // Keep the last of each address: the largest, the last in the table.
    let mut out: Vec<Symbol> = Vec::with_capacity(syms.len());
    for s in syms {
        match out.last_mut() {
            Some(l) if l.addr == s.addr => *l = s,
            _ => out.push(s),
        }
    }
    Ok(out)
}

impl Dwarf {
    /// Opens `path` (an ELF or Mach-O file).
    pub fn open(path: &Path) -> Result<Dwarf, String> {
        let loader = addr2line::Loader::new(path).map_err(|e| e.to_string())?;
        let data = std::fs::read(path).map_err(|e| e.to_string())?;
        let symbols = symbol_table(&data)?;
        Ok(Dwarf { loader, symbols })
    }

    /// The frames at `addr` (a virtual address of the file), innermost
    /// first. Where DWARF names no function, the symbol table does, as in
    /// llvm-symbolizer.
    pub fn lookup(&self, addr: u64) -> Result<Vec<SymFrame>, String> {
        let mut frames = Vec::new();
        let mut iter = self.loader.find_frames(addr).map_err(|e| e.to_string())?;
        while let Some(f) = iter.next().map_err(|e| e.to_string())? {
            let function = f
                .function
                .as_ref()
                .and_then(|n| n.raw_name().ok())
                .map(|n| n.into_owned());
            let (file, line, column) = match &f.location {
                // A line-table row with line 0 (code the compiler made up)
                // names no place: llvm-symbolizer prints `<invalid>:0:0`
                // for it, not the row's file.
                Some(l) if l.line.is_none() && frames.is_empty() => (None, 0, 0),
                Some(l) => (
                    l.file.map(str::to_string),
                    l.line.unwrap_or(0),
                    l.column.unwrap_or(0),
                ),
                None => (None, 0, 0),
            };
            frames.push(SymFrame {
                function,
                file,
                line,
                column,
            });
        }
        // llvm-symbolizer names the outermost frame from the symbol table
        // when a symbol covers the address (a symbol without a size covers
        // everything after it), and DWARF only otherwise.
        let i = self.symbols.partition_point(|s| s.addr <= addr);
        let sym = i
            .checked_sub(1)
            .map(|i| &self.symbols[i])
            .filter(|s| s.size == 0 || addr - s.addr < s.size);
        if let Some(sym) = sym {
            match frames.last_mut() {
                Some(f) => {
                    f.function = Some(sym.name.clone());
                    if f.file.is_none() {
                        f.file = sym.file.clone();
                    }
                }
                None => frames.push(SymFrame {
                    function: Some(sym.name.clone()),
                    file: sym.file.clone(),
                    ..SymFrame::default()
                }),
            }
        }
        Ok(frames)
    }
}
