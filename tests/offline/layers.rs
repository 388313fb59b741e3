//! The layer check (`scripts/check-layers.py`, docs/ARCHITECTURE.md): no
//! file of `src/` uses a file of a layer above its own, and no files use
//! each other in a cycle.

use std::process::Command;

#[test]
fn no_file_uses_a_layer_above_it_and_no_files_form_a_cycle() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/scripts/check-layers.py"))
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("no use upward, no cycle"), "{text}");
}

#[test]
fn the_check_finds_a_use_upward_and_a_cycle() {
    // A copy of src/ with faults put in: the OS leaf and the walk naming
    // layers above them, and the crash handler and the panic hook naming
    // each other.
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = std::env::temp_dir().join(format!("stackmark-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let copy = |from: &str, to: &std::path::Path| {
        let status = Command::new("cp")
            .args(["-r", from])
            .arg(to)
            .status()
            .unwrap();
        assert!(status.success());
    };
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    copy(&format!("{root}/src"), &dir.join("src"));
    copy(
        &format!("{root}/scripts/check-layers.py"),
        &dir.join("scripts/check-layers.py"),
    );
    let append = |file: &str, text: &str| {
        let path = dir.join("src").join(file);
        let mut s = std::fs::read_to_string(&path).unwrap();
        s.push_str(text);
        std::fs::write(path, s).unwrap();
    };
    append(
        "sys/mod.rs",
        "\nfn upward() -> crate::walk::Frame { todo!() }\n",
    );
    append(
        "walk/ending.rs",
        "\nfn back() { crate::panic_hook::install_panic_hook(); }\n",
    );
    append(
        "crash/mod.rs",
        "\nfn one() { crate::panic_hook::install_panic_hook(); }\n",
    );
    append(
        "panic_hook.rs",
        "\nfn other() { let _ = crate::crash::install_crash_handler(); }\n",
    );
    let out = Command::new("python3")
        .arg(dir.join("scripts/check-layers.py"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("src/sys/mod.rs (sys) uses src/walk/frame.rs (walk), a layer above it"),
        "{text}"
    );
    assert!(
        text.contains("src/walk/ending.rs (walk) uses src/panic_hook.rs (edge), a layer above it"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("cycle between")
            && l.contains("src/crash/mod.rs")
            && l.contains("src/panic_hook.rs")),
        "{text}"
    );
}
