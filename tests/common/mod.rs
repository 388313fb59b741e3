//! Test helpers: resolve pcs to symbol names from the modules' own symbol
//! tables (an oracle independent of the walker), and small utilities.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;

use object::{Object, ObjectSymbol};

struct Symbols {
    /// (start, end, name), sorted by start.
    ranges: Vec<(u64, u64, String)>,
}

fn load(path: &str) -> Option<Symbols> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let mut ranges: Vec<(u64, u64, String)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            Some((s.address(), s.address() + s.size().max(1), name))
        })
        .collect();
    ranges.sort();
    Some(Symbols { ranges })
}

static CACHE: Mutex<Option<HashMap<String, Option<Symbols>>>> = Mutex::new(None);

/// The name of the function holding `pc` (an exact address), from the
/// symbol table of the module the live table places it in.
pub fn symbol_at(pc: u64) -> Option<String> {
    let table = stackmark::modules::current()?;
    let m = table.module_for_addr(pc)?;
    let path = String::from_utf8_lossy(m.name()).into_owned();
    let rel = pc.wrapping_sub(m.bias);
    let mut cache = CACHE.lock().unwrap();
    let syms = cache
        .get_or_insert_with(HashMap::new)
        .entry(path.clone())
        .or_insert_with(|| load(&path));
    let syms = syms.as_ref()?;
    let i = syms.ranges.partition_point(|r| r.0 <= rel);
    syms.ranges[..i]
        .iter()
        .rev()
        .find(|r| rel < r.1)
        .map(|r| demangle_short(&r.2))
}

/// The symbol for a frame: exact pc if precise, else `pc - 1`.
pub fn frame_symbol(f: &stackmark::Frame) -> String {
    symbol_at(f.lookup_pc()).unwrap_or_else(|| format!("?{:#x}", f.pc))
}

/// The last path component of a Rust symbol, without the hash: enough to
/// match test function names.
pub fn demangle_short(name: &str) -> String {
    // Legacy mangling: _ZN...<len><ident>17h<hash>E
    if let Some(rest) = name.strip_prefix("_ZN") {
        let mut parts = Vec::new();
        let mut s = rest;
        while let Some(c) = s.chars().next() {
            if !c.is_ascii_digit() {
                break;
            }
            let n: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
            let len: usize = n.parse().unwrap();
            s = &s[n.len()..];
            if s.len() < len {
                break;
            }
            parts.push(s[..len].to_string());
            s = &s[len..];
        }
        if let Some(last) = parts
            .iter()
            .rev()
            .find(|p| !(p.starts_with('h') && p.len() == 17))
        {
            return last.clone();
        }
    }
    name.to_string()
}

/// Frame names, outermost last.
pub fn names(frames: &[stackmark::Frame]) -> Vec<String> {
    frames.iter().map(frame_symbol).collect()
}

/// Asserts that `want` appears in `got` as a contiguous run, starting at
/// `got[start]`.
pub fn assert_chain(got: &[String], start: usize, want: &[&str]) {
    let window: Vec<&str> = got
        .iter()
        .skip(start)
        .take(want.len())
        .map(|s| s.as_str())
        .collect();
    assert_eq!(window, want, "full chain: {got:#?}");
}

/// A small deterministic generator (xorshift), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `(start, size)` of every executable segment in the live module table.
pub fn code_segments() -> Vec<(u64, u64)> {
    stackmark::modules::current()
        .unwrap()
        .modules()
        .iter()
        .flat_map(|m| {
            m.segments()
                .iter()
                .filter(|s| s.executable())
                .map(|s| (s.start, s.size))
        })
        .collect()
}

/// The calling thread's kernel id (what `Sample::tid` records).
#[cfg(target_os = "linux")]
pub fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Records a sample of the calling thread through the SIGPROF handler's own
/// path (`sample::record` on a `ucontext`).
#[cfg(target_os = "linux")]
pub fn record_here() {
    // SAFETY: getcontext fills `uc` with this thread's context, which
    // `record` walks as a signal handler's would be.
    unsafe {
        let mut uc: libc::ucontext_t = core::mem::zeroed();
        libc::getcontext(&mut uc);
        stackmark::sample::record((&uc as *const libc::ucontext_t).cast());
    }
}

/// Runs `f` on `n` new threads that start it together (at a barrier), and
/// returns what each gave.
pub fn together<T: Send + 'static>(n: usize, f: fn() -> T) -> Vec<T> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                f()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Where cargo puts the examples built beside this test binary:
/// target/<triple>/debug/deps/<test>-... -> target/<triple>/debug/examples.
pub fn examples_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

/// Runs a binary built for the target with `envs` added to its
/// environment. Under a cross runner (qemu-user, without binfmt) the exec
/// of a foreign binary fails, in the child (status 127, nothing printed)
/// or in the parent (`ENOEXEC`): then it runs under `qemu-aarch64` too.
pub fn run_target_binary(
    bin: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> std::process::Output {
    use std::process::Command;
    let qemu = || {
        Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(bin)
            .args(args)
            .envs(envs.iter().copied())
            .output()
            .unwrap()
    };
    match Command::new(bin)
        .args(args)
        .envs(envs.iter().copied())
        .output()
    {
        Ok(out)
            if cfg!(target_arch = "aarch64")
                && out.status.code() == Some(127)
                && out.stderr.is_empty() =>
        {
            qemu()
        }
        Ok(out) => out,
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => qemu(),
        Err(e) => panic!("running {}: {e}", bin.display()),
    }
}

/// Runs `cmd`, which must succeed (its standard error goes in the
/// failure message).
pub fn run(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/test.sh installs the toolchains)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A fresh directory for one test, under the system's temporary directory.
pub fn workdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("stackmark-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `scripts/build-id-tree.sh OUT ARGS...`: a `.build-id` tree at `out`
/// of the binaries in `args` (files, or directories to search).
pub fn build_id_tree(out: &std::path::Path, args: &[&std::path::Path]) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-id-tree.sh");
    run(std::process::Command::new("bash")
        .arg(script)
        .arg(out)
        .args(args));
}

/// The output of `cmd` with `input` on its standard input.
pub fn pipe(cmd: &mut std::process::Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/test.sh installs the tools)"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// (stdout, stderr) of `tool --filter-markup` over `input`, with the
/// `.build-id` tree `tree` as its debug file directory.
pub fn symbolize(tool: &str, tree: &std::path::Path, input: &[u8]) -> (String, String) {
    let out = pipe(
        std::process::Command::new(tool)
            .arg("--filter-markup")
            .arg(format!("--debug-file-directory={}", tree.display())),
        input,
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The paths of the modules a report names (`{{{module:ID:PATH:elf:...}}}`).
pub fn module_paths(report: &[u8]) -> Vec<std::path::PathBuf> {
    String::from_utf8_lossy(report)
        .lines()
        .filter_map(|l| l.strip_prefix("{{{module:"))
        .filter_map(|l| l.split(':').nth(1).map(std::path::PathBuf::from))
        // Under qemu-user the guest's libraries live in the cross sysroot.
        .map(|p| {
            let cross = std::path::Path::new("/usr/aarch64-linux-gnu")
                .join(p.strip_prefix("/").unwrap_or(&p));
            if cfg!(target_arch = "aarch64") && cross.exists() {
                cross
            } else {
                p
            }
        })
        .filter(|p| p.exists())
        .collect()
}

/// Runs test `name` of this binary alone in a child with `env` set; it
/// must pass there (a fault kills the child, not this process).
pub fn in_child(name: &str, env: (&str, &str)) {
    in_child_printing(name, env, "test result: ok. 1 passed");
}

/// Runs test `name` of this binary alone in a child with `env` set and its
/// output uncaptured; the child must exit successfully having printed
/// `marker` (as one that leaves with `_exit` prints no test result).
pub fn in_child_printing(name: &str, env: (&str, &str), marker: &str) {
    let exe = std::env::current_exe().unwrap();
    let args = [name, "--exact", "--test-threads=1", "--nocapture"];
    let out = run_target_binary(&exe, &args, &[env]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(marker),
        "the child ({:?}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The return addresses libgcc's `_Unwind_Backtrace` finds (through the
/// `backtrace` crate), innermost first: the crate's own frames, then this
/// function's caller and on to the outermost frame. An `_Unwind_GetIP` of 0
/// (the context past a frame whose CFI leaves the return address
/// undefined) ends the list and is not kept.
#[inline(never)]
pub fn libgcc_trace() -> Vec<u64> {
    let mut ips = Vec::with_capacity(64);
    backtrace::trace(|f| {
        let ip = f.ip() as u64;
        if ip != 0 {
            ips.push(ip);
        }
        ip != 0 && ips.len() < 512
    });
    ips
}

/// Whether the DWARF CFI of the module holding `pc` (its `.eh_frame`, read
/// from the file by gimli, independent of the walker) leaves the return
/// address undefined at `pc`, the mark of a thread's outermost frame
/// (`_start`, glibc's `clone3`). `None` where no FDE covers `pc` or the
/// file cannot be read.
pub fn cfi_leaves_ra_undefined(pc: u64) -> Option<bool> {
    use gimli::{BaseAddresses, EhFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection};
    use object::ObjectSection;
    let table = stackmark::modules::current()?;
    let m = table.module_for_addr(pc)?;
    let data = std::fs::read(String::from_utf8_lossy(m.name()).as_ref()).ok()?;
    let rel = pc.wrapping_sub(m.bias);
    let file = object::File::parse(&*data).ok()?;
    let eh = file.section_by_name(".eh_frame")?;
    let addr = |name: &str| file.section_by_name(name).map_or(0, |s| s.address());
    let bases = BaseAddresses::default()
        .set_eh_frame(eh.address())
        .set_eh_frame_hdr(addr(".eh_frame_hdr"))
        .set_text(addr(".text"))
        .set_got(addr(".got"));
    let mut section = EhFrame::new(eh.data().ok()?, LittleEndian);
    section.set_address_size(8);
    let ra = if cfg!(target_arch = "aarch64") {
        section.set_vendor(gimli::Vendor::AArch64);
        gimli::AArch64::X30
    } else {
        gimli::X86_64::RA
    };
    let mut ctx = UnwindContext::new();
    let row = section
        .unwind_info_for_address(&bases, &mut ctx, rel, EhFrame::cie_from_offset)
        .ok()?;
    Some(matches!(row.register(ra), RegisterRule::Undefined))
}

/// `module+0xoffset` for `pc`, from the live module table (for messages).
pub fn module_offset(pc: u64) -> String {
    let Some(table) = stackmark::modules::current() else {
        return format!("{pc:#x}");
    };
    match table.module_for_addr(pc) {
        Some(m) => {
            let name = String::from_utf8_lossy(m.name()).into_owned();
            let base = name.rsplit('/').next().unwrap_or(&name).to_string();
            format!("{base}+{:#x}", pc.wrapping_sub(m.bias))
        }
        None => format!("{pc:#x}"),
    }
}

/// Whether `pc` lies in the C library (`libc.so.6`).
pub fn in_libc(pc: u64) -> bool {
    stackmark::modules::current()
        .and_then(|t| {
            t.module_for_addr(pc)
                .map(|m| m.name().ends_with(b"/libc.so.6"))
        })
        .unwrap_or(false)
}

/// `data` with every occurrence of `from` replaced by `to` (of the same
/// length), which must occur at least once: a CIE augmentation patched so
/// an oracle that rejects it (gimli and `B`) reads the rest.
pub fn replace_all(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut count = 0;
    for i in 0..out.len().saturating_sub(from.len()) {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            count += 1;
        }
    }
    assert!(count > 0, "no {from:?} found");
    out
}
