//! `scripts/build-id-tree.sh` over a Cargo target directory and over files:
//! which binaries it links, where, and to what. The binaries are linked by
//! GNU ld with chosen build IDs (`--build-id=0x...`), so each link can be
//! traced to its file.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stackmark-buildid-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn gcc() -> Command {
    // The host's GNU toolchain; the test only reads the files it makes.
    Command::new("gcc")
}

/// Objects to link: a program and a position-independent library.
fn objects(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::write(dir.join("main.c"), "int main(void) { return 0; }\n").unwrap();
    std::fs::write(dir.join("lib.c"), "int f(int x) { return x + 1; }\n").unwrap();
    ok(gcc()
        .current_dir(dir)
        .args(["-c", "main.c", "-o", "main.o"])
        .output()
        .unwrap());
    ok(gcc()
        .current_dir(dir)
        .args(["-c", "-fPIC", "lib.c", "-o", "lib.o"])
        .output()
        .unwrap());
    (dir.join("main.o"), dir.join("lib.o"))
}

/// Links `obj` at `path` with build ID `id` (`None`: no build ID).
fn link(obj: &Path, path: &Path, id: Option<&str>, shared: bool) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut cmd = gcc();
    if shared {
        cmd.arg("-shared");
    }
    cmd.arg(obj).arg("-o").arg(path);
    cmd.arg(match id {
        Some(id) => format!("-Wl,--build-id=0x{id}"),
        None => "-Wl,--build-id=none".to_string(),
    });
    ok(cmd.output().unwrap());
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-id-tree.sh")
}

/// Every link under `out/.build-id` (the `.slices` folder aside): build ID
/// (from the link's path) -> target.
fn links(out: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    for dir in std::fs::read_dir(out.join(".build-id")).unwrap() {
        let dir = dir.unwrap().path();
        let prefix = dir.file_name().unwrap().to_string_lossy().into_owned();
        if prefix == ".slices" {
            continue;
        }
        assert_eq!(prefix.len(), 2, "{}", dir.display());
        for l in std::fs::read_dir(&dir).unwrap() {
            let l = l.unwrap().path();
            let name = l.file_name().unwrap().to_string_lossy().into_owned();
            let rest = name.strip_suffix(".debug").expect("NAME.debug");
            let target = std::fs::read_link(&l).unwrap();
            assert!(
                target.is_absolute(),
                "{} -> {}",
                l.display(),
                target.display()
            );
            found.insert(format!("{prefix}{rest}"), target);
        }
    }
    found
}

#[test]
fn a_cargo_target_dir_gives_links_to_its_binaries_and_libraries_only() {
    let dir = workdir("cargo");
    let (main_o, lib_o) = objects(&dir);
    let t = dir.join("target");
    // (path in target/, build ID, shared library?)
    let wanted = [
        ("debug/app", "a1a1a1a1a1a1a1a1", false),
        ("debug/deps/app-0123abcd", "a2a2a2a2a2a2a2a2", false),
        ("debug/deps/libdep.so", "a3a3a3a3a3a3a3a3", true),
        ("debug/examples/demo", "a4a4a4a4a4a4a4a4", false),
        (
            "debug/build/dep-77/build-script-build",
            "a5a5a5a5a5a5a5a5",
            false,
        ),
        ("release/app", "a6a6a6a6a6a6a6a6", false),
        ("release/deps/bench-99", "a7a7a7a7a7a7a7a7", false),
        (
            "aarch64-unknown-linux-gnu/debug/app",
            "a8a8a8a8a8a8a8a8",
            false,
        ),
        ("debug/deps/libplugin.so.1", "a9a9a9a9a9a9a9a9", true),
    ];
    // ELF files with build IDs that are not wanted: by name or place.
    let unwanted = [
        ("debug/deps/libdep.rlib", "b1b1b1b1b1b1b1b1"),
        ("debug/deps/dep.o", "b2b2b2b2b2b2b2b2"),
        ("debug/deps/app.d", "b3b3b3b3b3b3b3b3"),
        ("debug/deps/libdep.rmeta", "b4b4b4b4b4b4b4b4"),
        ("debug/incremental/app-1/s-2/app", "b5b5b5b5b5b5b5b5"),
        ("debug/.fingerprint/app-3/bin", "b6b6b6b6b6b6b6b6"),
    ];
    for (path, id, shared) in wanted {
        link(
            if shared { &lib_o } else { &main_o },
            &t.join(path),
            Some(id),
            shared,
        );
    }
    for (path, id) in unwanted {
        link(&main_o, &t.join(path), Some(id), false);
    }
    // Not executable and not a library: data, whatever its contents.
    link(
        &main_o,
        &t.join("debug/data.bin"),
        Some("c1c1c1c1c1c1c1c1"),
        false,
    );
    std::fs::set_permissions(
        t.join("debug/data.bin"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    // No build ID, and a script: nothing to link.
    link(&lib_o, &t.join("debug/deps/libnoid.so"), None, true);
    std::fs::write(t.join("debug/run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        t.join("debug/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();

    let out = dir.join("syms");
    for _ in 0..2 {
        // A second run over the same tree replaces the links.
        let run = ok(Command::new("bash")
            .arg(script())
            .arg(&out)
            .arg(&t)
            .output()
            .unwrap());
        let said = String::from_utf8_lossy(&run.stderr);
        assert!(
            said.contains(&format!("linked {} files", wanted.len())),
            "{said}"
        );
        let got = links(&out);
        let want: BTreeMap<String, PathBuf> = wanted
            .iter()
            .map(|(path, id, _)| (id.to_string(), t.join(path)))
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn files_named_by_relative_paths_get_absolute_links() {
    let dir = workdir("files");
    let (main_o, _) = objects(&dir);
    let id = "0123456789abcdef0123456789abcdef01234567";
    link(&main_o, &dir.join("bin/tool"), Some(id), false);
    link(&main_o, &dir.join("bin/noid"), None, false);
    ok(Command::new("bash")
        .current_dir(&dir)
        .arg(script())
        .args(["syms", "bin/tool", "bin/noid", "main.c"])
        .output()
        .unwrap());
    let got = links(&dir.join("syms"));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[id], dir.join("bin/tool"));
    // Where llvm-symbolizer looks for it.
    assert!(dir
        .join("syms/.build-id/01/23456789abcdef0123456789abcdef01234567.debug")
        .exists());
}

#[test]
fn without_arguments_the_script_prints_its_usage_and_fails() {
    let out = Command::new("bash").arg(script()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("build-id-tree.sh OUTDIR"));
}

/// The build ID `path` carries, from `readelf -n`.
fn build_id_of(path: &Path) -> Option<String> {
    let out = Command::new("readelf").arg("-n").arg(path).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

#[test]
fn a_binary_rebuilt_in_place_leaves_no_link_from_its_old_build_id() {
    // The README's recipe keeps one tree (`/tmp/syms`) and runs the script
    // again after each build. Cargo rebuilds `target/debug/app` at the same
    // path, and llvm-symbolizer does not check the build ID of the file a
    // link leads to: a link left from the old ID names an old report's
    // frames from the new code.
    let dir = workdir("rebuilt");
    let (main_o, _) = objects(&dir);
    let t = dir.join("target");
    let app = t.join("debug/app");
    let out = dir.join("syms");
    let (old, new) = ("d1d1d1d1d1d1d1d1", "d2d2d2d2d2d2d2d2");
    // Built, the tree made; rebuilt, the same tree made again.
    for id in [old, new] {
        link(&main_o, &app, Some(id), false);
        ok(Command::new("bash")
            .arg(script())
            .arg(&out)
            .arg(&t)
            .output()
            .unwrap());
    }
    let at = |id: &str| out.join(format!(".build-id/{}/{}.debug", &id[..2], &id[2..]));
    assert_eq!(build_id_of(&at(new)).as_deref(), Some(new));
    let stale = at(old);
    if stale.exists() {
        assert_eq!(
            build_id_of(&stale).as_deref(),
            Some(old),
            "{} leads to a file with another build ID",
            stale.display()
        );
    }
}
