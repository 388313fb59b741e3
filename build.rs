//! Two jobs:
//! - Dependent crates get the path of the linker script that keeps SFrame
//!   (`link/sframe.ld`) as `DEP_STACKMARK_SFRAME_LD` in their build
//!   scripts (through `links = "stackmark"`), so one line links it in.
//! - The crate's own tests, examples and benches (`rustc-link-arg-tests`
//!   and siblings never reach dependent crates) link with GNU ld and
//!   `link/sframe-merge.ld`, so the C fixtures' SFrame sections are merged
//!   into a real `PT_GNU_SFRAME`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/sframe.ld");
    println!("cargo:rerun-if-changed=link/sframe-merge.ld");
    for dir in ["tests", "examples", "benches"] {
        println!("cargo:rerun-if-changed={dir}");
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    // Read when the script runs, not baked in when it is compiled: a build
    // script compiled for one checkout may be run for another.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    println!("cargo:sframe_ld={manifest}/link/sframe.ld");
    let script = format!("{manifest}/link/sframe-merge.ld");
    // Cargo rejects these instructions for a kind with no target at all.
    let has_targets = |dir: &str| {
        std::fs::read_dir(dir).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "rs"))
        })
    };
    for kind in ["tests", "examples", "benches"]
        .into_iter()
        .filter(|k| has_targets(k))
    {
        println!("cargo:rustc-link-arg-{kind}=-fuse-ld=bfd");
        println!("cargo:rustc-link-arg-{kind}=-Wl,-T,{script}");
        println!("cargo:rustc-link-arg-{kind}=-Wl,--build-id");
    }
}
