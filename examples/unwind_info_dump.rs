//! Prints the entries of an Apple `__unwind_info` section, one per line: the
//! function offset, the encoding, and what the encoding says.
//!
//! ```text
//! cargo run --example unwind_info_dump -- FILE                      # a Mach-O image
//! cargo run --example unwind_info_dump -- --raw FILE --arch x86_64  # a bare section (or arm64)
//! ```

use object::{Object, ObjectSection};
use stackmark::formats::compact_unwind::{UnwindInfo, UNWIND_HAS_LSDA};

#[derive(Clone, Copy, PartialEq)]
enum Arch {
    X86_64,
    Arm64,
}

/// A human description of a compact encoding.
fn describe(arch: Arch, enc: u32) -> String {
    let mode = (enc >> 24) & 0xf;
    let mut s = match (arch, mode) {
        (_, 0) => "null (no unwind information)".to_string(),
        (Arch::X86_64, 1) => {
            let offset = (enc >> 16) & 0xff;
            let regs = enc & 0x7fff;
            let names: Vec<&str> = (0..5)
                .map(|i| (regs >> (3 * i)) & 7)
                .filter(|&r| r != 0)
                .map(|r| ["-", "rbx", "r12", "r13", "r14", "r15"][r as usize])
                .collect();
            format!("rbp frame, saved registers at rbp-{} [{}]", offset * 8, names.join(","))
        }
        (Arch::X86_64, 2) => format!(
            "frameless, stack size {} bytes, {} saved registers (permutation {:#x})",
            ((enc >> 16) & 0xff) * 8,
            (enc >> 10) & 7,
            enc & 0x3ff
        ),
        (Arch::X86_64, 3) => format!(
            "frameless, stack size from the subq at function+{} (+{} bytes), {} saved registers (permutation {:#x})",
            (enc >> 16) & 0xff,
            ((enc >> 13) & 7) * 8,
            (enc >> 10) & 7,
            enc & 0x3ff
        ),
        (Arch::X86_64, 4) | (Arch::Arm64, 3) => format!("DWARF, FDE at __eh_frame+{:#x}", enc & 0x00ff_ffff),
        (Arch::Arm64, 2) => format!("frameless, stack size {} bytes, return address in lr", ((enc >> 12) & 0xfff) * 16),
        (Arch::Arm64, 4) => {
            let pairs = [
                (0x1, "x19/x20"),
                (0x2, "x21/x22"),
                (0x4, "x23/x24"),
                (0x8, "x25/x26"),
                (0x10, "x27/x28"),
                (0x100, "d8/d9"),
                (0x200, "d10/d11"),
                (0x400, "d12/d13"),
                (0x800, "d14/d15"),
            ];
            let saved: Vec<&str> = pairs.iter().filter(|(b, _)| enc & b != 0).map(|(_, n)| *n).collect();
            format!("frame (fp, lr), saved pairs [{}]", saved.join(","))
        }
        (_, m) => format!("unknown mode {m}"),
    };
    if enc & UNWIND_HAS_LSDA != 0 {
        s.push_str(", has LSDA");
    }
    let personality = (enc >> 28) & 3;
    if personality != 0 {
        s.push_str(&format!(", personality {personality}"));
    }
    s
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: unwind_info_dump FILE | --raw FILE --arch x86_64|arm64";
    let (data, arch) = if args.first().map(String::as_str) == Some("--raw") {
        let file = args.get(1).expect(usage);
        let arch = match args
            .iter()
            .position(|a| a == "--arch")
            .and_then(|i| args.get(i + 1))
        {
            Some(a) if a == "arm64" || a == "aarch64" => Arch::Arm64,
            Some(a) if a == "x86_64" => Arch::X86_64,
            _ => panic!("{usage}"),
        };
        (std::fs::read(file).expect("read the section"), arch)
    } else {
        let file = args.first().expect(usage);
        let bytes = std::fs::read(file).expect("read the file");
        let obj = object::File::parse(&*bytes).expect("a Mach-O file");
        let arch = match obj.architecture() {
            object::Architecture::Aarch64 => Arch::Arm64,
            _ => Arch::X86_64,
        };
        let section = obj
            .section_by_name("__unwind_info")
            .expect("no __unwind_info section");
        (section.data().expect("section data").to_vec(), arch)
    };
    let info = match UnwindInfo::parse(&data) {
        Ok(info) => info,
        Err(e) => {
            eprintln!("unwind_info_dump: {e}");
            std::process::exit(1);
        }
    };
    for e in info.entries() {
        let lsda = e
            .lsda
            .map(|l| format!(" lsda=0x{l:08x}"))
            .unwrap_or_default();
        println!(
            "0x{:08x} 0x{:08x} {}{lsda}",
            e.func_start,
            e.encoding,
            describe(arch, e.encoding)
        );
    }
}
