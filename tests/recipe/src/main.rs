//! Walks its own stack through Rust functions built without frame pointers
//! but with SFrame (the README recipe), and prints each frame as
//! `<module-relative pc> <method> <precise>` for the test to resolve.

use std::hint::black_box;

#[inline(never)]
fn recipe_level_3(x: u64) -> u64 {
    let mut frames = [stackmark::Frame::default(); 64];
    let n = stackmark::walk_here(&mut frames);
    let table = stackmark::modules::current().expect("table");
    let exe = &table.modules()[0];
    println!("sframe {}", exe.sframe().is_some());
    // One piece per object, so the table looks pcs up through a piece index.
    let pieces = exe.sframe().map_or(0, |s| s.piece_count());
    let indexed = exe.sframe().is_some_and(|s| s.is_indexed());
    println!("pieces {pieces} indexed {indexed}");
    for f in &frames[..n] {
        match table.module_for_addr(f.lookup_pc()) {
            Some(m) if m.bias == exe.bias && m.name() == exe.name() => {
                println!("frame {:#x} {} {}", f.lookup_pc() - m.bias, f.method.name(), f.precise)
            }
            _ => println!("frame ext {} {}", f.method.name(), f.precise),
        }
    }
    black_box(x) + n as u64
}

#[inline(never)]
fn recipe_level_2(x: u64) -> u64 {
    let v = black_box([x; 4]);
    recipe_level_3(v[1]) + v[2]
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
