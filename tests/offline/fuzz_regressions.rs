//! Replays every saved fuzz input (tests/data/fuzz/<target>/*) through the
//! fuzz targets' bodies, on stable: each finding, once fixed, stays fixed.

use crate::fuzz_support;

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/fuzz")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let data = std::fs::read(entry.path()).unwrap();
        f(&data);
        n += 1;
    }
    n
}

#[test]
fn saved_sframe_inputs_parse_without_panics() {
    let n = replay("sframe_parse", fuzz_support::sframe_parse);
    assert!(n > 0, "seeds are saved in tests/data/fuzz/sframe_parse");
}

#[test]
fn saved_walk_inputs_walk_without_panics() {
    let n = replay("walk_synthetic", fuzz_support::walk_synthetic);
    assert!(n > 0, "seeds are saved in tests/data/fuzz/walk_synthetic");
}

#[test]
fn saved_compact_walk_inputs_walk_without_panics() {
    let n = replay("walk_compact", fuzz_support::walk_compact);
    assert!(n > 0, "seeds are saved in tests/data/fuzz/walk_compact");
}

#[test]
fn saved_unwind_info_inputs_parse_without_panics() {
    let n = replay("unwind_info_parse", fuzz_support::unwind_info_parse);
    assert!(
        n > 0,
        "seeds are saved in tests/data/fuzz/unwind_info_parse"
    );
}

#[test]
fn saved_cfi_inputs_parse_without_panics() {
    let n = replay("cfi", fuzz_support::cfi_parse);
    assert!(n > 0, "seeds are saved in tests/data/fuzz/cfi");
}
