//! Prints the function index and rows of an SFrame section in the layout of
//! binutils' `objdump --sframe`, so the two can be diffed. It reads versions
//! 1 to 3 and concatenated sections, also where the installed binutils is too
//! old to read version 2 or 3.
//!
//! ```text
//! sframe_dump FILE                     # an ELF file, read as the walker reads it
//! sframe_dump --raw FILE --base ADDR   # the bare section, loaded at ADDR
//! ```
//!
//! Rows print as objdump prints them: the CFA as `sp+16` or `fp+16` (FLEX
//! rows: any register, `(reg+off)` for a load), the FP and RA as `c-16`
//! (saved at CFA-16), `u` (not saved), `f` (the header's fixed RA offset),
//! `U` (RA padding) and `[s]` for a signed RA; `RA undefined` marks the
//! outermost frame. Version 1 sections print `u` for a fixed RA offset, as
//! binutils 2.40 does.

use std::fmt::Write as _;
use std::process::ExitCode;

use stackmark::formats::elf::{ElfFile, PT_GNU_SFRAME};
use stackmark::formats::sframe::{
    Abi, Fre, Function, Header, SFrame, F_FDE_FUNC_START_PCREL, F_FDE_SORTED, F_FRAME_POINTER,
};

const USAGE: &str = "usage: sframe_dump FILE | sframe_dump --raw FILE --base ADDR";

fn parse_addr(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The SFrame bytes of an ELF file and their address, as the walker finds
/// them: the run of `.sframe` and the `.sframe.*` sections beside it (the
/// shipped linker script's `.sframe.c` and `.sframe.rust`), else GNU ld's
/// `PT_GNU_SFRAME` segment, trimmed to the pieces it holds (ld 2.40 makes it
/// too large).
fn sframe_of_elf(file: &[u8]) -> Result<(&[u8], u64), String> {
    let elf = ElfFile::parse(file).map_err(|e| e.to_string())?;
    let slice = |off: u64, len: u64| {
        let off = usize::try_from(off).ok()?;
        file.get(off..off.checked_add(usize::try_from(len).ok()?)?)
    };
    if let Some((addr, len)) = elf.sframe_extent() {
        // The run lies in one section's file range and those after it.
        let first = elf
            .sections()
            .find(|s| s.addr == addr)
            .ok_or("no section starts the SFrame run")?;
        let data = slice(first.offset, len).ok_or("the SFrame sections lie outside the file")?;
        return Ok((data, addr));
    }
    let ph = elf
        .program_headers()
        .find(|ph| ph.p_type == PT_GNU_SFRAME)
        .ok_or("no .sframe section and no PT_GNU_SFRAME segment")?;
    let data = slice(ph.offset, ph.filesz).ok_or("PT_GNU_SFRAME lies outside the file")?;
    Ok((&data[..SFrame::pieces_len(data)], ph.vaddr))
}

fn header_text(out: &mut String, h: &Header) {
    let version = match h.version {
        1 => "SFRAME_VERSION_1",
        2 => "SFRAME_VERSION_2",
        _ => "SFRAME_VERSION_3",
    };
    let _ = write!(out, "\n  Header :\n\n    Version: {version}\n");
    let mut flags = h.flags;
    let mut prefix = "Flags: ";
    if flags == 0 {
        let _ = writeln!(out, "{prefix:>11}NONE");
    }
    let names = [
        (F_FDE_SORTED, "SFRAME_F_FDE_SORTED"),
        (F_FRAME_POINTER, "SFRAME_F_FRAME_POINTER"),
        (F_FDE_FUNC_START_PCREL, "SFRAME_F_FDE_FUNC_START_PCREL"),
    ];
    for (bit, name) in names {
        if flags & bit != 0 {
            flags &= !bit;
            let comma = if flags != 0 { "," } else { "" };
            let _ = writeln!(out, "{prefix:>11}{name}{comma}");
            prefix = " ";
        }
    }
    // binutils 2.40, the only objdump of version 1, prints no fixed offsets.
    if h.version >= 2 && h.fixed_fp_offset != 0 {
        let _ = writeln!(out, "    CFA fixed FP offset: {}", h.fixed_fp_offset);
    }
    if h.version >= 2 && h.fixed_ra_offset != 0 {
        let _ = writeln!(out, "    CFA fixed RA offset: {}", h.fixed_ra_offset);
    }
    let _ = writeln!(out, "    Num FDEs: {}", h.num_fdes);
    let _ = writeln!(out, "    Num FREs: {}", h.num_fres);
    // Not objdump's: where the flags do not say which base the walker
    // counts function starts from (objdump 2.40 takes the section's).
    if h.field_relative() && !h.pcrel() {
        let _ = writeln!(
            out,
            "    Starts relative to: each FDE's field (an assembler's piece: unflagged, unsorted)"
        );
    }
}

/// objdump's name for a DWARF register in a FLEX rule.
fn reg_name(abi: Abi, reg: u32) -> String {
    let (sp, fp) = match abi {
        Abi::Aarch64LittleEndian | Abi::Aarch64BigEndian => (31, 29),
        Abi::S390xBigEndian => (15, 11),
        Abi::Amd64LittleEndian => (7, 6),
    };
    match reg {
        r if r == sp => "sp".into(),
        r if r == fp => "fp".into(),
        r => format!("r{r}"),
    }
}

/// A FLEX rule: `reg+off`, `(reg+off)` for a load, or `c+off` off the CFA.
fn flex_disp(abi: Abi, ctrl: u32, off: i32) -> String {
    if ctrl & 1 == 0 {
        return format!("c{off:+}");
    }
    let name = reg_name(abi, ctrl >> 3);
    if ctrl & 2 != 0 {
        format!("({name}{off:+})")
    } else {
        format!("{name}{off:+}")
    }
}

/// CFA, FP and RA columns of a default (non-FLEX) row.
fn simple_columns(h: &Header, fre: &Fre) -> (String, String, String) {
    let base = if fre.sp_base { "sp" } else { "fp" };
    let cfa = format!("{base}+{}", fre.word(0).unwrap_or(0));
    let fixed_ra = h.fixed_ra_offset != 0;
    let fp_offset = if h.fixed_fp_offset != 0 {
        Some(i32::from(h.fixed_fp_offset))
    } else {
        fre.word(if fixed_ra { 1 } else { 2 })
    };
    let fp = fp_offset.map_or("u".into(), |o| format!("c{o:+}"));
    let ra = match (fixed_ra, fre.word(1)) {
        // binutils 2.40 prints a fixed RA offset as "u"; later ones as "f".
        (true, _) if h.version == 1 => "u".into(),
        (true, _) => "f".into(),
        (false, Some(0)) if h.version > 1 => "U".into(),
        (false, Some(o)) => format!("c{o:+}"),
        (false, None) => "u".into(),
    };
    (cfa, fp, ra)
}

/// CFA, FP and RA columns of a FLEX row: `[cfa_ctrl, cfa_off, ra_ctrl,
/// ra_off, fp_ctrl, fp_off]`, where a zero `ra_ctrl` is a single padding word.
fn flex_columns(h: &Header, fre: &Fre) -> (String, String, String) {
    let cfa = flex_disp(h.abi, fre.uword(0).unwrap_or(0), fre.word(1).unwrap_or(0));
    let ra_ctrl = fre.uword(2);
    let fp_index = if ra_ctrl == Some(0) { 3 } else { 4 };
    let fixed = |o: i8| (o != 0).then_some(i32::from(o));
    let fp_offset = fre.word(fp_index + 1).or_else(|| fixed(h.fixed_fp_offset));
    let fp = match (fre.uword(fp_index), fp_offset) {
        (Some(ctrl), Some(off)) => flex_disp(h.abi, ctrl, off),
        _ => "u".into(),
    };
    let ra = match ra_ctrl {
        None if h.fixed_ra_offset != 0 => "f".into(),
        None => "u".into(),
        Some(0) => "U".into(),
        Some(ctrl) => {
            let off = fre.word(3).or_else(|| fixed(h.fixed_ra_offset));
            flex_disp(h.abi, ctrl, off.unwrap_or(-1))
        }
    };
    (cfa, fp, ra)
}

fn function_text(out: &mut String, f: &Function<'_>) {
    let (h, fde) = (&f.header, &f.fde);
    let _ = write!(
        out,
        "\n    func idx [{}]: pc = {:#x}, size = {} bytes",
        fde.index, fde.start, fde.size as i32
    );
    if h.version > 1 {
        let attrs = format!(
            "{}{}",
            if fde.signal { "S" } else { "" },
            if fde.is_flex() { "F" } else { "" }
        );
        if !attrs.is_empty() {
            let _ = write!(out, ", attr = \"{attrs}\"");
        }
    }
    let aarch64 = matches!(h.abi, Abi::Aarch64LittleEndian | Abi::Aarch64BigEndian);
    if aarch64 && fde.pauth_key_b {
        out.push_str(", pauth = B key");
    }
    let marker = if fde.pc_mask { "[m]" } else { "" };
    let _ = write!(
        out,
        "\n    {:<7}{:<8} {:<10}{:<10}{:<13}",
        "STARTPC", marker, "CFA", "FP", "RA"
    );
    for fre in f.fres() {
        let vma = if fde.pc_mask {
            u64::from(fre.start)
        } else {
            fde.start.wrapping_add(u64::from(fre.start))
        };
        let _ = write!(out, "\n    {vma:016x}");
        if fre.count() == 0 {
            out.push_str("  RA undefined");
            continue;
        }
        let (cfa, fp, mut ra) = if fde.is_flex() {
            flex_columns(h, &fre)
        } else {
            simple_columns(h, &fre)
        };
        ra.push_str(if fre.mangled_ra { "[s]" } else { "   " });
        let _ = write!(out, "  {cfa:<10}{fp:<10}{ra:<13}");
    }
    out.push('\n');
}

/// The whole dump: each piece's header, then its functions.
fn dump(sframe: &SFrame<'_>) -> String {
    let mut out = String::from("Contents of the SFrame section .sframe:");
    let several = sframe.piece_count() > 1;
    for (k, piece) in sframe.pieces().enumerate() {
        let h = piece.header();
        if several {
            let _ = write!(out, "\n  Piece [{k}] at offset {:#x}:\n", h.at);
        }
        header_text(&mut out, h);
        out.push_str("\n  Function Index :\n");
        for f in piece.functions() {
            function_text(&mut out, &f);
        }
    }
    out
}

fn run(args: &[String]) -> Result<String, String> {
    let (path, base) = match args {
        [path] => (path, None),
        [flag, path, b, addr] if flag == "--raw" && b == "--base" => {
            (path, Some(parse_addr(addr).ok_or("bad --base address")?))
        }
        _ => return Err(USAGE.into()),
    };
    let file = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let (data, addr) = match base {
        Some(addr) => (&file[..], addr),
        None => sframe_of_elf(&file).map_err(|e| format!("{path}: {e}"))?,
    };
    let title = match base {
        Some(_) => format!("\n{path}:     raw SFrame section at {addr:#x}\n\n"),
        None => format!("\n{path}:     ELF file, .sframe at {addr:#x}\n\n"),
    };
    if data.is_empty() {
        // A linker leaves an empty .sframe when no input had one; objdump
        // then prints nothing either.
        return Ok(title + "The SFrame section .sframe is empty.");
    }
    let sframe = SFrame::parse(data, addr).map_err(|e| format!("{path}: {e}"))?;
    Ok(title + &dump(&sframe))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sframe_dump: {e}");
            ExitCode::FAILURE
        }
    }
}
