// The body of the `symbol_files` fuzz target (fuzz/fuzz_targets/), shared
// with tests/fuzz_regressions.rs so that every saved input is replayed by
// `cargo test` on stable. The parent module provides `breakpad` and `gsym`.

use super::{breakpad, gsym};

/// Addresses to look up: fixed ones, and every 8-byte window of the input
/// (so that the fuzzer can aim at the addresses the file holds), each also
/// one byte on.
fn probes(data: &[u8]) -> Vec<u64> {
    let mut p = vec![0, 1, u64::MAX];
    for w in data.windows(8).step_by(3).take(64) {
        let a = u64::from_le_bytes(w.try_into().unwrap());
        p.extend([a, a.wrapping_add(1), a & 0xffff_ffff]);
    }
    p
}

/// The first byte picks the parser (even: Breakpad `.sym`, odd: GSYM); the
/// rest is the file. Nothing may panic; errors lie within the file; a frame
/// list found ends in a named function (the FUNC, PUBLIC or GSYM function
/// holding the address).
#[allow(dead_code)]
pub fn symbol_files(data: &[u8]) {
    let Some((&which, file)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        let (sym, errors) = breakpad::SymFile::parse(file);
        for e in &errors {
            assert!(e.offset < file.len().max(1), "{e:?}");
        }
        for a in probes(file) {
            let frames = sym.lookup(a);
            if let Some(outer) = frames.last() {
                assert!(outer.function.is_some(), "{a:#x}: {frames:?}");
            }
        }
    } else {
        let _ = gsym::header_uuid(file);
        match gsym::Gsym::parse(file.to_vec()) {
            Ok(g) => {
                for a in probes(file) {
                    match g.lookup(a) {
                        Ok(frames) => {
                            if let Some(outer) = frames.last() {
                                assert!(outer.function.is_some(), "{a:#x}: {frames:?}");
                            }
                        }
                        Err(e) => assert!(e.offset <= file.len(), "{e:?}"),
                    }
                }
            }
            Err(e) => assert!(e.offset <= file.len(), "{e:?}"),
        }
    }
}
