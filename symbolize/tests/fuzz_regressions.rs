//! Replays every saved input of the `symbol_files` fuzz target
//! (tests/data/fuzz/symbol_files/*, at the workspace root) through its body,
//! on stable: the seeds (a small real `.sym` and GSYM) and each finding,
//! once fixed, stay fixed.

use stackmark_symbolize::{breakpad, gsym};

#[path = "fuzz_support/mod.rs"]
mod fuzz_support;

#[test]
fn every_saved_symbol_file_input_parses_without_panicking() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/fuzz/symbol_files");
    let mut n = 0;
    let mut kinds = [0; 2];
    for e in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        if let Some(&k) = data.first() {
            kinds[usize::from(k & 1)] += 1;
        }
        fuzz_support::symbol_files(&data);
        n += 1;
    }
    assert!(
        n > 0 && kinds[0] > 0 && kinds[1] > 0,
        "seeds of both formats in {}",
        dir.display()
    );
}
