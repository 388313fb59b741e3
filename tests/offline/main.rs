//! One test binary for the tests that need no process of their own: the
//! format readers against real toolchain output and their oracles, the
//! markup through llvm-symbolizer, the build recipes, the scripts and the
//! layer check. Tests that install handlers, take signals, fork, sample or
//! count allocations keep binaries of their own beside this folder.

#[path = "../common/mod.rs"]
mod common;
#[path = "../fuzz_support/mod.rs"]
mod fuzz_support;
#[path = "../macho_support/mod.rs"]
mod macho_support;
#[path = "../sframe_support/mod.rs"]
mod sframe_support;

mod bench_goals_script;
mod cfi_conformance;
mod compact_unwind_macho;
mod compact_unwind_objdump;
mod compact_unwind_step;
mod compact_unwind_walk;
mod fuzz_regressions;
mod layers;
mod markup_build_id_tree;
mod markup_symbolizer;
mod recipe;
mod scripts_and_examples_bad_input;
mod sframe_hostile;
mod sframe_live;
mod sframe_rows;
mod sframe_testcases;
