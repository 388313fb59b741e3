//! The README's one line, then a C library built by `cc` as a `-sys` crate
//! would build it: optimised, without frame pointers, SFrame from the
//! README's `CFLAGS`.

fn main() {
    // Which linker links the program: tests/offline/recipe.rs builds it with each,
    // without rebuilding its dependencies (RUSTFLAGS would).
    println!("cargo:rerun-if-env-changed=RECIPE_FUSE_LD");
    let ld = std::env::var("RECIPE_FUSE_LD");

    if ld.as_deref() == Ok("mold") {
        // mold reads no SECTIONS script; it keeps SFrame only without
        // section garbage collection (docs/sframe.md).
        println!("cargo:rustc-link-arg=-Wl,--no-gc-sections");
    } else {
        // The README's set-up line.
        if let Ok(s) = std::env::var("DEP_STACKMARK_SFRAME_LD") { println!("cargo:rustc-link-arg=-Wl,-T,{s}") }
    }

    if let Ok(ld) = ld {
        println!("cargo:rustc-link-arg=-fuse-ld={ld}");
        if ld == "lld" {
            // gcc (the AArch64 cross linker driver) looks for ld.lld on
            // its search path; Debian's lld-16 does not put it on PATH.
            println!("cargo:rustc-link-arg=-B/usr/lib/llvm-16/bin");
        }
    }
    println!("cargo:rerun-if-changed=c");
    cc::Build::new()
        .file("c/outer.c")
        .file("c/inner.c")
        .opt_level(2)
        .flag("-fomit-frame-pointer")
        .compile("cdep");
}
