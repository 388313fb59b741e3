//! The Mach-O fixtures in `tests/data/macho`, for the tests that read every
//! one of them.

use std::path::{Path, PathBuf};

/// The folder the fixtures live in.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/macho")
}

/// Every `.dylib` fixture with its bytes, sorted by path; there are 8.
pub fn fixtures() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = dir();
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("dylib"))
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect();
    out.sort();
    assert_eq!(out.len(), 8, "fixtures in {}", dir.display());
    out
}
