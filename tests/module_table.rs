//! The module table over libraries built here with gcc and GNU ld and
//! loaded with `dlopen`: odd layouts the loader accepts, long build IDs, and
//! a library replaced on disk and loaded again.

#![cfg(target_os = "linux")]

mod common;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSection};
use stackmark::formats::sframe::{Row, SFrame};
use stackmark::markup::{Markup, Scope, SliceSink};
use stackmark::modules::Module;
use stackmark::{Frame, Method};

/// The C compiler for the target these tests run on.
fn cc() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu-gcc"
    } else {
        "gcc"
    }
}

/// Builds `src` into the shared library `dir/out` with extra flags.
fn library(dir: &Path, src: &str, out: &str, flags: &[&str]) -> PathBuf {
    let c = dir.join(format!("{out}.c"));
    std::fs::write(&c, src).unwrap();
    let lib = dir.join(out);
    common::run(
        Command::new(cc())
            .args([
                "-O2",
                "-fPIC",
                "-shared",
                "-fomit-frame-pointer",
                "-Wa,--gsframe",
            ])
            .args(flags)
            .arg("-o")
            .arg(&lib)
            .arg(&c),
    );
    lib
}

fn dlopen(path: &Path) -> *mut libc::c_void {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: loading a library built above, which has no constructors.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null(), "dlopen {}", path.display());
    h
}

/// What `f` makes of the live table's entry for `path` (a module is only
/// lent, while the table is held).
fn module<R>(path: &Path, f: impl FnOnce(&Module) -> R) -> R {
    let table = stackmark::modules::current().unwrap();
    let name = path.as_os_str().as_encoded_bytes();
    f(table
        .modules()
        .iter()
        .find(|m| m.name() == name)
        .expect("the library is listed"))
}

const TEST_STRAY: &str = "a_note_segment_that_no_load_segment_maps_is_not_read";

/// The loader never reads `PT_NOTE`, so it accepts a library whose note
/// segment lies where nothing is mapped; building the table must not read
/// it there (it did, and died of SIGSEGV). Runs in a child process.
#[test]
fn a_note_segment_that_no_load_segment_maps_is_not_read() {
    if let Ok(lib) = std::env::var("STACKMARK_STRAY_NOTE_LIB") {
        stackmark::init().unwrap();
        dlopen(Path::new(&lib));
        stackmark::refresh().unwrap();
        module(Path::new(&lib), |m| {
            assert!(m.build_id().is_empty(), "{:x?}", m.build_id());
            assert!(!m.segments().is_empty());
        });
        return;
    }
    let dir = common::workdir("stray-note");
    let built = library(
        &dir,
        "int stray_note(int x) { return x + 1; }\n",
        "libnote.so",
        &["-Wl,--build-id"],
    );
    // Move every PT_NOTE (ELF64 program headers) to 64 TiB past the load
    // address: beyond any mapping, and beyond user space.
    let mut data = std::fs::read(&built).unwrap();
    let u64_at = |d: &[u8], at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
    let (phoff, phnum) = (
        u64_at(&data, 32) as usize,
        u16::from_le_bytes([data[56], data[57]]),
    );
    let mut moved = 0;
    for i in 0..usize::from(phnum) {
        let ph = phoff + 56 * i;
        if u32::from_le_bytes(data[ph..ph + 4].try_into().unwrap()) == 4 {
            let far = 0x4000_0000_0000u64.to_le_bytes();
            data[ph + 16..ph + 24].copy_from_slice(&far);
            data[ph + 24..ph + 32].copy_from_slice(&far);
            moved += 1;
        }
    }
    assert!(moved > 0, "gcc wrote a PT_NOTE");
    let lib = dir.join("libstray.so");
    std::fs::write(&lib, &data).unwrap();
    common::in_child(
        TEST_STRAY,
        ("STACKMARK_STRAY_NOTE_LIB", lib.to_str().unwrap()),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// GNU ld takes a build ID of any length (`--build-id=0xHEX`). The table
/// keeps up to `MAX_BUILD_ID` bytes; a longer one is not kept at all, since
/// a shortened one would name no file, and the frame is written as module
/// plus offset instead.
#[test]
fn a_build_id_longer_than_the_table_keeps_is_not_written_cut_short() {
    stackmark::init().unwrap();
    let dir = common::workdir("long-build-id");
    let src = "__attribute__((noinline)) int long_id(int x) { return x * 3 + 1; }\n";
    let ids = [
        ("libid32.so", "ab".repeat(stackmark::modules::MAX_BUILD_ID)),
        (
            "libid33.so",
            "cd".repeat(stackmark::modules::MAX_BUILD_ID + 1),
        ),
    ];
    let mut handles = Vec::new();
    for (name, id) in &ids {
        let lib = library(&dir, src, name, &[&format!("-Wl,--build-id=0x{id}")]);
        handles.push((dlopen(&lib), lib));
    }
    stackmark::refresh().unwrap();
    let (_, ref lib32) = handles[0];
    assert_eq!(
        module(lib32, |m| m.build_id().to_vec()),
        [0xab; 32],
        "kept whole"
    );

    let (h, ref lib33) = handles[1];
    // SAFETY: a symbol of the library loaded above.
    let pc = unsafe { libc::dlsym(h, c"long_id".as_ptr()) } as u64;
    module(lib33, |m| {
        assert!(m.build_id().is_empty(), "{:x?}", m.build_id());
        assert!(m.contains(pc));
    });
    let frames = [Frame {
        pc,
        sp: 0,
        pc_kind: stackmark::PcKind::Exact,
        method: Method::Context,
    }];
    let table = stackmark::modules::current().unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut sink = SliceSink::new(&mut buf);
    Markup::new(&mut sink).backtrace(table.modules(), &frames, Scope::TraceModules);
    let text = String::from_utf8_lossy(sink.as_bytes()).into_owned();
    assert!(!text.contains("cdcdcdcd"), "{text}");
    assert!(
        text.contains(&format!("{}+0x", lib33.display())),
        "module plus offset: {text}"
    );
    drop(table);
    for (h, _) in handles {
        // SAFETY: handles from dlopen above.
        unsafe { libc::dlclose(h) };
    }
    stackmark::refresh().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two versions of one library: the same functions, laid out differently.
const V1: &str = "__attribute__((noinline)) int plug_leaf(int x) { return x * 3 + 1; }\n\
int plug_entry(int x) { return plug_leaf(x) + 2; }\n";
const V2: &str = "__attribute__((noinline)) int plug_sum(volatile int *a, int n) {\n\
  int s = 0; for (int i = 0; i < n; i++) s += a[i]; return s; }\n\
__attribute__((noinline)) int plug_leaf(int x) {\n\
  volatile int a[16]; for (int i = 0; i < 16; i++) a[i] = x + i; return plug_sum(a, 16); }\n\
int plug_entry(int x) { return plug_leaf(x) + 2; }\n";

/// Two versions of one function whose code has the same size, so the two
/// libraries have the same segments; only where the stack pointer moves,
/// and so the SFrame rows, differ. `{A}` and `{B}` are two instructions of
/// one size, swapped in the second version.
#[cfg(target_arch = "x86_64")]
const SAME_LAYOUT: &str = "\t.text\n\t.globl plug\n\t.type plug, @function\nplug:\n\
\t.cfi_startproc\n\t{A}\n\t{B}\n\taddq $8, %rsp\n\t.cfi_def_cfa_offset 8\n\tret\n\
\t.cfi_endproc\n\t.size plug, .-plug\n\t.section .note.GNU-stack,\"\",@progbits\n";
#[cfg(target_arch = "x86_64")]
const SWAPPED: [&str; 2] = ["subq $8, %rsp\n\t.cfi_def_cfa_offset 16", "nopl (%rax)"];
#[cfg(target_arch = "aarch64")]
const SAME_LAYOUT: &str = "\t.text\n\t.globl plug\n\t.type plug, %function\nplug:\n\
\t.cfi_startproc\n\t{A}\n\t{B}\n\tadd sp, sp, #16\n\t.cfi_def_cfa_offset 0\n\tret\n\
\t.cfi_endproc\n\t.size plug, .-plug\n\t.section .note.GNU-stack,\"\",%progbits\n";
#[cfg(target_arch = "aarch64")]
const SWAPPED: [&str; 2] = ["sub sp, sp, #16\n\t.cfi_def_cfa_offset 16", "nop"];

fn same_layout(first: usize) -> String {
    SAME_LAYOUT
        .replace("{A}", SWAPPED[first])
        .replace("{B}", SWAPPED[1 - first])
}

/// Every row of every function in the `.sframe` of the file at `path`,
/// loaded at `bias`.
fn file_rows(path: &Path, bias: u64) -> Vec<Row> {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let s = file.section_by_name(".sframe").expect("gcc -Wa,--gsframe");
    let sframe = SFrame::parse(s.data().unwrap(), bias + s.address()).unwrap();
    rows(&sframe)
}

fn rows(sframe: &SFrame<'_>) -> Vec<Row> {
    sframe.functions().flat_map(|f| f.rows()).collect()
}

fn table_rows(m: &Module) -> Vec<Row> {
    rows(&m.sframe().expect("the table has the library's SFrame"))
}

/// A plugin host's reload: `dlclose`, a new file at the same path, `dlopen`.
/// The loader tends to put it where the old one was; the table must then
/// read the new library's SFrame, not keep its copy of the old one's: with
/// build IDs (which differ), and without, between two versions whose
/// segments are the same (where the bytes themselves are compared).
#[test]
fn a_library_replaced_and_loaded_again_at_the_same_address_gets_its_own_tables() {
    stackmark::init().unwrap();
    let cases = [
        ("id", [V1.to_owned(), V2.to_owned()], "-Wl,--build-id", "c"),
        (
            "noid",
            [same_layout(0), same_layout(1)],
            "-Wl,--build-id=none",
            "assembler",
        ),
    ];
    for (case, [src1, src2], flags, lang) in cases {
        let dir = common::workdir(&format!("reload-{case}"));
        let v1 = library(&dir, &src1, "libv1.so", &[flags, "-x", lang]);
        let v2 = library(&dir, &src2, "libv2.so", &[flags, "-x", lang]);
        let path = dir.join("libplugin.so");
        let mut same_place = 0;
        // The new version usually lands where the old one was; try a few
        // times for the run in which it does.
        for _ in 0..4 {
            std::fs::copy(&v1, &path).unwrap();
            let h = dlopen(&path);
            stackmark::refresh().unwrap();
            let old = module(&path, |m| {
                assert_eq!(table_rows(m), file_rows(&path, m.bias));
                (m.bias, m.segments().to_vec())
            });
            // SAFETY: the handle from dlopen above.
            assert_eq!(unsafe { libc::dlclose(h) }, 0);
            std::fs::remove_file(&path).unwrap();
            std::fs::copy(&v2, &path).unwrap();
            let h = dlopen(&path);
            stackmark::refresh().unwrap();
            module(&path, |new| {
                assert_eq!(
                    table_rows(new),
                    file_rows(&path, new.bias),
                    "{case}: the table kept the old version's SFrame"
                );
                if new.bias == old.0 {
                    same_place += 1;
                    if case == "noid" {
                        assert!(new.build_id().is_empty());
                        assert_eq!(new.segments(), old.1, "the same layout");
                    }
                }
            });
            // SAFETY: as above.
            unsafe { libc::dlclose(h) };
            std::fs::remove_file(&path).unwrap();
            stackmark::refresh().unwrap();
            if same_place > 0 {
                break;
            }
        }
        // qemu-user, which runs the AArch64 tests here, places mappings
        // itself and never hands a freed range back at once: there, each
        // version is only checked to get its own rows.
        assert!(
            same_place > 0 || cfg!(target_arch = "aarch64"),
            "{case}: the loader never reused the place"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A refresh keeps what it learned from an unchanged library's file (the
/// same build ID, loaded where it was) instead of reading the file again:
/// with lld's output, whose SFrame only the section headers in the file
/// locate, the library keeps its rows after its file is gone.
#[test]
fn an_unchanged_library_keeps_its_sframe_without_its_file() {
    stackmark::init().unwrap();
    let dir = common::workdir("unchanged");
    let lib = lld_library(&dir, "libunchanged.so", 1, "a", &["--build-id"]);
    let h = dlopen(&lib);
    stackmark::refresh().unwrap();
    let (rows, bias) = module(&lib, |m| {
        assert!(!m.build_id().is_empty(), "lld --build-id");
        (table_rows(m), m.bias)
    });
    assert_eq!(rows, file_rows(&lib, bias));
    std::fs::remove_file(&lib).unwrap();
    stackmark::refresh().unwrap();
    module(&lib, |m| {
        assert_eq!(table_rows(m), rows, "the rows after the file went")
    });
    // SAFETY: the handle from dlopen above.
    unsafe { libc::dlclose(h) };
    stackmark::refresh().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `as` for the target these tests run on.
fn assembler() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu-as"
    } else {
        "as"
    }
}

/// The shared library `dir/name`, linked by lld (which writes no
/// `PT_GNU_SFRAME`, so the table reads the file's section headers): one C
/// function with SFrame, and `count` one-byte sections with flags `flags`.
fn lld_library_with_sections(dir: &Path, name: &str, count: usize, flags: &str) -> PathBuf {
    lld_library(dir, name, count, flags, &[])
}

/// [`lld_library_with_sections`], with `extra` arguments to lld.
fn lld_library(dir: &Path, name: &str, count: usize, flags: &str, extra: &[&str]) -> PathBuf {
    let c = dir.join("f.c");
    std::fs::write(&c, "int lld_work(int x) { return x * 3 + 1; }\n").unwrap();
    let o = dir.join("f.o");
    common::run(
        Command::new(cc())
            .args(["-O1", "-fPIC", "-Wa,--gsframe", "-c", "-o"])
            .arg(&o)
            .arg(&c),
    );
    let mut asm = String::from(".section .note.GNU-stack,\"\",@progbits\n");
    for i in 0..count {
        asm.push_str(&format!(".section .x{i},\"{flags}\"\n.byte 1\n"));
    }
    let s = dir.join("many.s");
    std::fs::write(&s, asm).unwrap();
    let many = dir.join("many.o");
    common::run(Command::new(assembler()).arg("-o").arg(&many).arg(&s));
    let lib = dir.join(name);
    common::run(
        Command::new("ld.lld-16")
            .args(extra)
            .args(["-shared", "-o"])
            .arg(&lib)
            .arg(&o)
            .arg(&many),
    );
    lib
}

/// lld writes no `PT_GNU_SFRAME`, so the table finds `.sframe` from the
/// section headers in the file. With 65,280 sections or more, the count and
/// the name table's index are kept in section 0, where readelf and the
/// `object` crate find them; the table found no section at all.
#[test]
fn a_library_with_extended_section_numbering_gets_its_sframe_from_the_file() {
    stackmark::init().unwrap();
    let dir = common::workdir("extended-sections");
    let lib = lld_library_with_sections(&dir, "libxsec.so", 65300, "a");
    let data = std::fs::read(&lib).unwrap();
    assert_eq!(&data[60..64], &[0, 0, 0xff, 0xff], "e_shnum 0, SHN_XINDEX");
    let oracle = object::File::parse(&*data).unwrap();
    let want = oracle
        .section_by_name(".sframe")
        .expect("object finds .sframe");
    let elf = stackmark::formats::elf::ElfFile::parse(&data).unwrap();
    let got = elf.section_by_name(b".sframe").expect(".sframe");
    assert_eq!((got.addr, got.size), (want.address(), want.size()));
    dlopen(&lib);
    stackmark::refresh().unwrap();
    assert!(
        module(&lib, |m| m.sframe().is_some()),
        "the table has no SFrame"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Notes in a `PT_NOTE` segment aligned to 8 are padded to 8 bytes. A note
/// whose name and descriptor pad differently to 4 and to 8, before the
/// build ID, used to hide the build ID, and the module's frames named no
/// file.
#[test]
fn a_build_id_after_an_odd_note_in_an_8_aligned_segment_is_found() {
    stackmark::init().unwrap();
    let dir = common::workdir("note8");
    let s = dir.join("n.s");
    std::fs::write(
        &s,
        r#"
    .section .note.GNU-stack,"",@progbits
    .section .note.custom,"a",@note
    .balign 8
    .long 6, 4, 0x100
    .asciz "Linux"
    .balign 8
    .long 0x11223344
    .balign 8
    .long 4, 20, 3
    .asciz "GNU"
    .byte 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20
    .balign 8
"#,
    )
    .unwrap();
    let lib = library(
        &dir,
        "int note8(int x) { return x + 1; }\n",
        "libnote8.so",
        &["-Wl,--build-id=none", s.to_str().unwrap()],
    );
    let data = std::fs::read(&lib).unwrap();
    let want = object::File::parse(&*data)
        .unwrap()
        .build_id()
        .unwrap()
        .expect("object finds the build ID")
        .to_vec();
    assert_eq!(want, (1..=20).collect::<Vec<u8>>());
    dlopen(&lib);
    stackmark::refresh().unwrap();
    assert_eq!(module(&lib, |m| m.build_id().to_vec()), want);
    let _ = std::fs::remove_dir_all(&dir);
}

const TEST_SHORTENED: &str = "a_library_file_shortened_during_a_refresh_does_not_stop_it";

/// The table reads a library's section headers from its file where it has
/// no `PT_GNU_SFRAME`; they sit at the end of the file, on pages no loaded
/// segment covers. Another process may shorten the file meanwhile (cut the
/// headers off, then write them back): the refresh finds no `.sframe` that
/// time. It read the file through a mapping of it, and the page past the
/// new end raised SIGBUS inside `dl_iterate_phdr`.
#[test]
fn a_library_file_shortened_during_a_refresh_does_not_stop_it() {
    if let Ok(lib) = std::env::var("STACKMARK_SHORTENED_LIB") {
        let lib = PathBuf::from(lib);
        let data = std::fs::read(&lib).unwrap();
        let shoff = u64::from_le_bytes(data[40..48].try_into().unwrap());
        stackmark::init().unwrap();
        dlopen(&lib);
        stackmark::refresh().unwrap();
        assert!(
            module(&lib, |m| m.sframe().is_some()),
            "found from the file"
        );
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                use std::os::unix::fs::FileExt;
                let f = std::fs::OpenOptions::new().write(true).open(&lib).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    f.set_len(shoff).unwrap();
                    f.write_all_at(&data[shoff as usize..], shoff).unwrap();
                }
            });
            let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while std::time::Instant::now() < end {
                stackmark::refresh().unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        stackmark::refresh().unwrap();
        assert!(module(&lib, |m| m.sframe().is_some()), "found again");
        return;
    }
    let dir = common::workdir("shortened");
    // 300 small sections that are not loaded: section headers over
    // several pages at the end of the file.
    let lib = lld_library_with_sections(&dir, "libshortened.so", 300, "");
    common::in_child(
        TEST_SHORTENED,
        ("STACKMARK_SHORTENED_LIB", lib.to_str().unwrap()),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const TEST_TRUNCATED: &str = "a_pinned_library_truncated_on_disk_does_not_kill_a_walk";

/// A library that can never be unloaded (`-z nodelete`, or one the program
/// needs) can still have its file truncated under its mapping, as `cp`
/// over it does; every page past the new end then raises SIGBUS. Its code
/// was read directly, so a walk that asked whether a call precedes a
/// return address into it died. Runs in a child process.
#[test]
fn a_pinned_library_truncated_on_disk_does_not_kill_a_walk() {
    if let Ok(lib) = std::env::var("STACKMARK_TRUNCATED_LIB") {
        let lib = PathBuf::from(lib);
        stackmark::init().unwrap();
        let h = dlopen(&lib);
        stackmark::refresh().unwrap();
        assert!(module(&lib, |m| m.pinned() && !m.read_directly()));
        // SAFETY: `site` is the library's `void *site(void)`.
        let site: extern "C" fn() -> u64 =
            unsafe { std::mem::transmute(libc::dlsym(h, c"site".as_ptr())) };
        // A return address just after a call, 16 KiB into the library.
        let ra = site();
        let data = std::fs::read(&lib).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&lib).unwrap();
        file.set_len(0).unwrap();
        // A call through a null pointer: pc 0, the return address at sp.
        let stack = [ra, 0u64, 0, 0];
        let mut regs = stackmark::Regs::default();
        #[cfg(target_arch = "x86_64")]
        {
            regs.rsp = stack.as_ptr() as u64;
        }
        #[cfg(target_arch = "aarch64")]
        {
            regs.sp = stack.as_ptr() as u64;
            regs.lr = ra;
        }
        let mut out = [Frame::default(); 8];
        let n = stackmark::walk_from(
            regs,
            stackmark::PcKind::Exact,
            stackmark::WalkOptions::default(),
            &mut out,
        );
        std::hint::black_box(&stack);
        // The bytes before the return address cannot be read now: the walk
        // goes on without it (scanning on up the real stack) instead of
        // faulting.
        let survived = n >= 1 && out[..n].iter().all(|f| f.pc != ra);
        // Back as it was, for a failure's backtrace, which reads the
        // library's headers.
        std::os::unix::fs::FileExt::write_all_at(&file, &data, 0).unwrap();
        assert!(survived, "{:x?}", &out[..n]);
        // The truncation also dropped the library's relocated data pages,
        // so its destructors would fault at exit: leave without them.
        println!("the walk survived");
        std::io::Write::flush(&mut std::io::stdout()).unwrap();
        // SAFETY: ends the child process at once.
        unsafe { libc::_exit(0) };
    }
    let dir = common::workdir("truncated");
    let src =
        "__attribute__((noinline)) void *get_ra(void) { return __builtin_return_address(0); }\n\
               void pad(void) { __asm__ volatile(\".fill 16384, 1, 0x90\"); }\n\
               void *site(void) { void *volatile r = get_ra(); return r; }\n";
    let lib = library(&dir, src, "libtruncated.so", &["-Wl,-z,nodelete"]);
    common::in_child_printing(
        TEST_TRUNCATED,
        ("STACKMARK_TRUNCATED_LIB", lib.to_str().unwrap()),
        "the walk survived",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pc whose DWARF CFI the walk cannot take (in the program's `.plt`, past
/// its first entry, the CFA is a DWARF expression) is looked up as having
/// no table, and counted by its reason; its neighbour at the `.plt`'s
/// start, `rsp + 16`, is a CFI row. (GNU ld writes that FDE on x86_64.)
#[cfg(target_arch = "x86_64")]
#[test]
fn a_cfi_rule_the_walk_cannot_take_is_counted_and_walked_without() {
    use stackmark::formats::sframe::CfaRule;
    use stackmark::modules::CfiFallback;
    use stackmark::walk::Lookup;
    stackmark::init().unwrap();
    let exe = std::env::current_exe().unwrap();
    let data = std::fs::read(&exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let plt = file
        .section_by_name(".plt")
        .expect("the test binary has a .plt");
    let table = stackmark::modules::current().unwrap();
    let name = exe.as_os_str().as_encoded_bytes();
    let main = table
        .modules()
        .iter()
        .find(|m| m.name() == name)
        .expect("the program is listed");
    let at = main.bias + plt.address();
    assert!(main.cfi().is_some(), "the program's CFI is read");
    match table.lookup_uncached(at) {
        Lookup::Cfi(row) => assert_eq!(row.cfa, CfaRule::SpPlus(16)),
        other => panic!("{other:?}"),
    }
    let before = CfiFallback::CfaExpression.count();
    assert_eq!(table.lookup_uncached(at + 16), Lookup::NoInfo);
    assert_eq!(CfiFallback::CfaExpression.count(), before + 1);
}
