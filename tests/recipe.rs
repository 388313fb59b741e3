//! The README recipe for Rust programs: a crate that depends on stackmark as
//! users do, built with `-C llvm-args=--gsframe` and the shipped linker
//! script, linked by rust-lld. Its Rust frames have no frame pointers, so
//! only SFrame version 2 (PCREL, concatenated per object) can walk them.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol};

fn name_at(file: &object::File<'_>, addr: u64) -> String {
    file.symbols()
        .filter(|s| {
            s.kind() == object::SymbolKind::Text
                && s.address() <= addr
                && addr < s.address() + s.size()
        })
        .map(|s| s.name().unwrap_or("?").to_string())
        .next()
        .unwrap_or_else(|| format!("?{addr:#x}"))
}

#[test]
fn recipe_binary_walks_rust_frames_by_sframe_v2() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = root.join("tests/recipe");
    let target = root.join("target/recipe");
    let script = root.join("link/sframe.ld");
    let flags = format!(
        "-C llvm-args=--gsframe -C link-arg=-Wl,-T,{} -C force-frame-pointers=no -C opt-level=1",
        script.display()
    );
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--manifest-path"])
        .arg(krate.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTFLAGS", &flags)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("cargo build of the recipe crate");
    assert!(status.success());
    let exe = target.join("debug/stackmark-recipe-check");

    // Depending on stackmark builds none of its test fixtures.
    let built: Vec<String> = std::fs::read_dir(target.join("debug/build"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        built.iter().any(|d| d.starts_with("stackmark-")),
        "{built:?}"
    );
    assert!(
        !built.iter().any(|d| d.starts_with("stackmark-fixtures")),
        "fixtures were built for a dependent crate: {built:?}"
    );

    // The linked binary holds a v2 section with FDE_FUNC_START_PCREL.
    let data = std::fs::read(&exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sframe = file
        .section_by_name(".sframe")
        .expect(".sframe kept by the script");
    let bytes = sframe.data().unwrap();
    assert_eq!(&bytes[..2], &[0xe2, 0xde], "SFrame magic");
    assert_eq!(bytes[2], 2, "version 2");
    assert_ne!(bytes[3] & 0x4, 0, "FDE_FUNC_START_PCREL");

    let out = Command::new(&exe).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("sframe true"), "{text}");
    let pieces: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("pieces "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .expect("a pieces line");
    assert!(pieces > 1, "{text}");
    assert!(text.contains("indexed true"), "{text}");
    let frames: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("frame "))
        .map(|l| {
            let mut w = l.split_whitespace();
            let pc = w.next().unwrap();
            let method = w.next().unwrap().to_string();
            let name = match pc.strip_prefix("0x") {
                Some(h) => name_at(&file, u64::from_str_radix(h, 16).unwrap()),
                None => "ext".to_string(),
            };
            (name, method)
        })
        .collect();
    let short: Vec<(String, String)> = frames
        .iter()
        .map(|(n, m)| {
            let n = ["recipe_level_3", "recipe_level_2", "recipe_level_1", "main"]
                .iter()
                .find(|want| n.contains(&format!("{}{}", want.len(), want)) || n == *want)
                .map(|s| s.to_string())
                .unwrap_or_else(|| n.clone());
            (n, m.clone())
        })
        .collect();
    let names: Vec<&str> = short.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..4],
        &["recipe_level_3", "recipe_level_2", "recipe_level_1", "main"],
        "{frames:#?}"
    );
    for (name, method) in &short[1..4] {
        assert_eq!(method, "sframe", "{name} found by SFrame: {frames:#?}");
    }
}
