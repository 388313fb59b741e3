//! Pinned modules: the main program, the dynamic linker, the vDSO and what
//! they depend on can never be unloaded; a library loaded with `dlopen` can
//! be, so its code is only read through checked reads. Walks read directly
//! only the code of pinned modules whose file cannot be cut short under
//! them without a checked read faulting too: the program, the vDSO, and the
//! C library a checked read runs. The dependencies come from each module's
//! dynamic section, checked here against `readelf -d`.

#![cfg(target_os = "linux")]

use std::ffi::CString;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use stackmark::arch::Native;
use stackmark::formats::elf::{Dynamic, ElfFile};
use stackmark::modules::Module;
use stackmark::walk::CodeMap;
use stackmark::{Frame, Method};
use stackmark_fixtures as fx;

fn file_name(m: &Module) -> String {
    let name = String::from_utf8_lossy(m.name()).into_owned();
    name.rsplit('/').next().unwrap_or_default().to_owned()
}

#[test]
fn the_program_and_what_it_needs_are_pinned_and_a_dlopened_library_is_not_and_code_is_read_directly_only_where_no_truncation_can_fault(
) {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    let table = stackmark::modules::current().unwrap();
    let mods = table.modules();
    assert!(mods[0].pinned(), "the main program");
    let libc = mods.iter().find(|m| file_name(m) == "libc.so.6");
    assert!(
        libc.is_some_and(|m| m.pinned()),
        "libc, which the program needs"
    );
    // Under qemu-user there may be no vDSO.
    let vdso = mods.iter().find(|m| file_name(m).starts_with("linux-vdso"));
    assert!(vdso.is_none_or(|m| m.pinned()), "the vDSO");
    // The dynamic linker: its name varies by architecture.
    assert!(mods
        .iter()
        .any(|m| file_name(m).starts_with("ld-linux") && m.pinned()));
    // Read directly: the program (exec keeps its file from being written),
    // the vDSO (no file), libc (whose code a checked read runs). Not the
    // dynamic linker, whose file can be truncated under it.
    assert!(mods[0].read_directly(), "the main program");
    assert!(vdso.is_none_or(|m| m.read_directly()), "the vDSO");
    assert!(libc.is_some_and(|m| m.read_directly()), "libc");
    let ld = mods.iter().find(|m| file_name(m).starts_with("ld-linux"));
    assert!(ld.is_some_and(|m| !m.read_directly()), "the dynamic linker");
    let code = |m: &Module| {
        let s = m.segments().iter().find(|s| s.executable()).unwrap();
        s.start + 16
    };
    let mut buf = [0u8; 8];
    let before = stackmark::sys::checked_reads();
    assert!(table.read_code(code(libc.unwrap()), &mut buf));
    assert_eq!(stackmark::sys::checked_reads(), before);
    assert!(table.read_code(code(ld.unwrap()), &mut buf));
    assert_eq!(stackmark::sys::checked_reads(), before + 1);
    drop(table);

    let path = CString::new(fx::DLOPEN_LIB).unwrap();
    // SAFETY: loading the fixture library, which has no constructors that
    // matter here; it is closed below.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null());
    stackmark::refresh().unwrap();
    let table = stackmark::modules::current().unwrap();
    let lib = table
        .modules()
        .iter()
        .find(|m| m.name() == fx::DLOPEN_LIB.as_bytes())
        .expect("the library is listed");
    assert!(!lib.pinned(), "a dlopened library can be unloaded");
    // Its code goes through a checked read; the program's does not.
    let before = stackmark::sys::checked_reads();
    assert!(table.read_code(code(&table.modules()[0]), &mut buf));
    assert_eq!(stackmark::sys::checked_reads(), before);
    assert!(table.read_code(code(lib), &mut buf));
    assert_eq!(stackmark::sys::checked_reads(), before + 1);
    drop(table);
    // SAFETY: the handle came from dlopen above.
    unsafe { libc::dlclose(h) };
    stackmark::refresh().unwrap();
}

/// Held by the tests that count checked reads, so that none of them counts
/// another's.
static COUNTING: Mutex<()> = Mutex::new(());

#[test]
fn a_cold_walk_through_pinned_code_makes_no_checked_reads() {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    // Without frame pointers, the Rust frames below the recursion are found
    // from the program's DWARF CFI, read in place; without tables too, by
    // scanning, which asks of each candidate whether a call precedes it: a
    // read of the program's code.
    let cfi = stackmark::WalkOptions {
        use_frame_pointers: false,
        ..Default::default()
    };
    let scan = stackmark::WalkOptions {
        use_tables: false,
        ..cfi
    };
    for (opts, method) in [(cfi, Method::Cfi), (scan, Method::Scan)] {
        let mut frames = [Frame::default(); 128];
        let (mut n, mut reads, mut exact) = (0, u64::MAX, false);
        fx::at_depth(8, &mut || {
            stackmark::clear_caches();
            let before = stackmark::sys::checked_reads();
            // The capture decodes its own call (through the GOT, as rustc
            // calls it here) without a checked read: the slot lies in the
            // program's data.
            let (regs, precise) = stackmark::capture_here();
            n = stackmark::walk_from(regs, precise, opts, &mut frames);
            reads = stackmark::sys::checked_reads() - before;
            exact = precise.is_exact();
        });
        let methods: Vec<_> = frames[..n].iter().map(|f| f.method).collect();
        assert!(exact, "the capture's call was decoded");
        assert!(n >= 3, "{methods:?}");
        assert!(methods.contains(&method), "{methods:?}");
        assert_eq!(reads, 0, "{methods:?}");
    }
}

#[test]
fn a_return_address_no_mapping_can_hold_is_no_trampoline_and_costs_no_read() {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    let table = stackmark::modules::current().unwrap();
    // Words a frame-pointer step through code without frame pointers (glibc's
    // start code) reads as return addresses: a small count, all ones, a
    // kernel address. None is in known code, so each is asked whether it is
    // a signal trampoline outside every module.
    let before = stackmark::sys::checked_reads();
    for pc in [0x38, 0xfff, u64::MAX, 0xffff_8000_0000_1000] {
        assert!(!table.is_sigreturn::<Native>(pc), "{pc:#x}");
    }
    assert_eq!(stackmark::sys::checked_reads(), before, "no system call");
    // Nor does the address of a writable static: a module's data, never
    // code (read-only data may share the code's segment, as on AArch64).
    static DATA: AtomicU64 = AtomicU64::new(7);
    let data = std::ptr::addr_of!(DATA) as u64;
    assert!(table.module_for_code(data).is_none());
    assert!(!table.is_sigreturn::<Native>(data));
    assert_eq!(
        stackmark::sys::checked_reads(),
        before,
        "a static's address"
    );
    // An address user space can hold is still read (and fails: the page
    // there allows no access).
    let page = fx::UnreadablePage::new();
    assert!(!table.is_sigreturn::<Native>(page.addr()));
    assert_eq!(stackmark::sys::checked_reads(), before + 1);
}

/// `readelf -d`'s `(NEEDED)` lines for `path`; `None` where readelf cannot
/// open it (under qemu-user, the guest's library paths are not the host's).
fn readelf_needed(path: &str) -> Option<Vec<String>> {
    let out = Command::new("readelf").args(["-d", path]).output().unwrap();
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_owned()))
            .collect()
    })
}

#[test]
fn dynamic_section_needs_and_soname_match_readelf() {
    // init registers this thread, with a checked read off the main thread:
    // not while another test counts them.
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    stackmark::init().unwrap();
    let table = stackmark::modules::current().unwrap();
    let mut checked = 0;
    for m in table.modules() {
        let path = String::from_utf8_lossy(m.name()).into_owned();
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        let elf = ElfFile::parse(&data).unwrap();
        let (Some(dynamic), Some(dynstr)) = (
            elf.section_by_name(b".dynamic"),
            elf.section_by_name(b".dynstr"),
        ) else {
            continue;
        };
        let d = Dynamic::parse(elf.section_data(&dynamic).unwrap());
        let strings = elf.section_data(&dynstr).unwrap();
        let at = |off: u64| {
            let s = &strings[off as usize..];
            String::from_utf8_lossy(&s[..s.iter().position(|&b| b == 0).unwrap()]).into_owned()
        };
        let needed: Vec<String> = d.needed().iter().map(|&o| at(o)).collect();
        let Some(want) = readelf_needed(&path) else {
            continue;
        };
        assert_eq!(needed, want, "{path}");
        if file_name(m).starts_with("libc.so") {
            assert_eq!(d.soname.map(at).as_deref(), Some("libc.so.6"));
            assert!(!d.nodelete);
        }
        checked += 1;
    }
    // The program at least; on the host, libc and the dynamic linker too.
    let least = if cfg!(target_arch = "x86_64") { 3 } else { 1 };
    assert!(checked >= least, "{checked} modules checked");
}
