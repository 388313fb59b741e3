//! What the symbolizer's tests share: running a target binary, under qemu
//! when it is an AArch64 one and the runner has no binfmt.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs a target binary; a foreign one (AArch64, under a qemu runner
/// without binfmt) runs under qemu-aarch64.
pub fn run_target(bin: &Path, args: &[&str], input: Option<&[u8]>) -> Output {
    let spawn = |mut c: Command| {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().unwrap();
        if let Some(i) = input {
            stdin.write_all(i).unwrap();
        }
        drop(stdin);
        child.wait_with_output()
    };
    let qemu = || {
        let mut c = Command::new("qemu-aarch64");
        c.args(["-L", "/usr/aarch64-linux-gnu"]).arg(bin).args(args);
        spawn(c).unwrap()
    };
    let mut c = Command::new(bin);
    c.args(args);
    match spawn(c) {
        Ok(out)
            if cfg!(target_arch = "aarch64")
                && out.status.code() == Some(127)
                && out.stderr.is_empty() =>
        {
            qemu()
        }
        Ok(out) => out,
        Err(e) if e.raw_os_error() == Some(8) => qemu(), // ENOEXEC
        Err(e) => panic!("running {}: {e}", bin.display()),
    }
}
