//! Calls into a C library built by `cc` with SFrame and without frame
//! pointers, and, from the Rust callback the C code calls, walks the stack
//! with stackmark and with libgcc's `_Unwind_Backtrace`. Prints both lists
//! for tests/offline/recipe.rs to compare:
//! - `module <name> sframe <bool> pieces <n> indexed <bool>` for the program;
//! - `ours <pc> <method> <precise> <module-offset>` per stackmark frame;
//! - `libgcc <pc> <module-offset>` per libgcc return address.

use std::hint::black_box;

extern "C" {
    fn cdep_outer(f: extern "C" fn(u64) -> u64, x: u64) -> u64;
}

/// `name+0xoffset` of `pc`, or `?` outside every module.
fn place(table: &stackmark::modules::Table, pc: u64) -> String {
    match table.module_for_addr(pc) {
        Some(m) => {
            let name = String::from_utf8_lossy(m.name());
            format!("{}+{:#x}", name.rsplit('/').next().unwrap_or(""), pc - m.bias)
        }
        None => "?".to_string(),
    }
}

#[inline(never)]
extern "C" fn recipe_callback(x: u64) -> u64 {
    let mut frames = [stackmark::Frame::default(); 128];
    let n = stackmark::walk_here(&mut frames);
    let mut libgcc = Vec::with_capacity(128);
    backtrace::trace(|f| {
        let ip = f.ip() as u64;
        if ip != 0 {
            libgcc.push(ip);
        }
        ip != 0 && libgcc.len() < 128
    });
    let table = stackmark::modules::current().expect("table");
    let exe = &table.modules()[0];
    let sframe = exe.sframe();
    println!(
        "module {} sframe {} pieces {} indexed {}",
        String::from_utf8_lossy(exe.name()),
        sframe.is_some(),
        sframe.map_or(0, |s| s.piece_count()),
        sframe.is_some_and(|s| s.is_indexed())
    );
    for f in &frames[..n] {
        let look = f.lookup_pc();
        println!("ours {:#x} {} {} {}", f.pc, f.method.name(), f.pc_kind.is_exact(), place(&table, look));
    }
    for &pc in &libgcc {
        println!("libgcc {:#x} {}", pc, place(&table, pc.wrapping_sub(1)));
    }
    black_box(x) + n as u64
}

#[inline(never)]
fn recipe_level_2(x: u64) -> u64 {
    let v = black_box([x; 4]);
    // SAFETY: cdep_outer only calls the callback it is given.
    unsafe { cdep_outer(recipe_callback, v[1]) + v[2] }
}

#[inline(never)]
fn recipe_level_1(x: u64) -> u64 {
    let v = black_box([x; 3]);
    recipe_level_2(v[0]) * 2 + v[1]
}

fn main() {
    stackmark::init().expect("init");
    let r = recipe_level_1(black_box(3));
    black_box(r);
}
