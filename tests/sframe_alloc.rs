//! `SFrame::parse` and every lookup run without allocating: a counting
//! global allocator sees no allocation while they run, over every recorded
//! section and a concatenation of real pieces.

mod alloc_counter;
mod sframe_support;

use alloc_counter::{allocations, Counting};
use sframe_support::{cases_dir, Case};
use stackmark::formats::sframe::SFrame;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Parses and looks up everything in `data`; returns the rows found.
fn work(data: &[u8], base: u64) -> usize {
    let Ok(s) = SFrame::parse(data, base) else {
        return 0;
    };
    let mut rows = 0;
    if let Some((lo, hi)) = s.pc_range() {
        for pc in lo.saturating_sub(4)..hi.min(lo + 4096) + 4 {
            rows += usize::from(s.find_row(pc).is_some());
        }
    }
    for f in s.functions() {
        rows += f.rows().count();
    }
    rows += s.pieces().count();
    rows
}

#[test]
fn parse_and_lookups_do_not_allocate() {
    let mut inputs: Vec<(Vec<u8>, u64)> = std::fs::read_dir(cases_dir())
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            let c = Case::load(n.strip_suffix(".json")?);
            Some((c.content, c.section_base))
        })
        .collect();
    // Two real PCREL pieces, concatenated.
    let (a, b) = (
        Case::load("test-x86_64-2.46"),
        Case::load("cfi-sframe-x86_64-esc-expr-1-2.46"),
    );
    let mut both = a.content.clone();
    both.resize(both.len().div_ceil(8) * 8, 0);
    both.extend(&b.content);
    inputs.push((both, a.section_base));

    let (rows, count) =
        allocations(|| inputs.iter().map(|(d, base)| work(d, *base)).sum::<usize>());
    assert_eq!(count, 0, "allocations while parsing and looking up");
    assert!(rows > 2000, "{rows}");
}
