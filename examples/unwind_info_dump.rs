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
                .map(|r| ["-", "rbx", "r12", "r13", "r14", "r15", "rbp", "invalid register 7"][r as usize])
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

const USAGE: &str = "usage: unwind_info_dump FILE | --raw FILE --arch x86_64|arm64";

/// The section to dump and its architecture, from the command line.
fn section(args: &[String]) -> Result<(Vec<u8>, Arch), String> {
    let read = |file: &str| std::fs::read(file).map_err(|e| format!("{file}: {e}"));
    if args.first().map(String::as_str) == Some("--raw") {
        let file = args.get(1).ok_or(USAGE)?;
        let arch = match args
            .iter()
            .position(|a| a == "--arch")
            .and_then(|i| args.get(i + 1))
        {
            Some(a) if a == "arm64" || a == "aarch64" => Arch::Arm64,
            Some(a) if a == "x86_64" => Arch::X86_64,
            _ => return Err(USAGE.into()),
        };
        return Ok((read(file)?, arch));
    }
    let [file] = args else {
        return Err(USAGE.into());
    };
    let bytes = read(file)?;
    if matches!(bytes.get(..4), Some([0xca, 0xfe, 0xba, 0xbe | 0xbf])) {
        return Err(format!(
            "{file}: a universal (fat) file: take one architecture out first \
             (llvm-lipo-19 {file} -thin x86_64 -output THIN)"
        ));
    }
    let obj =
        object::File::parse(&*bytes).map_err(|e| format!("{file}: not a Mach-O image ({e})"))?;
    if obj.format() != object::BinaryFormat::MachO {
        return Err(format!("{file}: not a Mach-O image"));
    }
    let arch = match obj.architecture() {
        object::Architecture::Aarch64 => Arch::Arm64,
        _ => Arch::X86_64,
    };
    let data = obj
        .section_by_name("__unwind_info")
        .ok_or_else(|| format!("{file}: no __unwind_info section"))?
        .data()
        .map_err(|e| format!("{file}: __unwind_info lies outside the file ({e})"))?;
    Ok((data.to_vec(), arch))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("unwind_info_dump: {e}");
        std::process::exit(1);
    };
    let (data, arch) = section(&args).unwrap_or_else(|e| fail(&e));
    let info = UnwindInfo::parse(&data).unwrap_or_else(|e| fail(&e));
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
