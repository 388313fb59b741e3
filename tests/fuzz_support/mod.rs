// The bodies of the fuzz targets, shared with tests/offline/fuzz_regressions.rs so
// every saved finding is replayed by `cargo test` on stable.
#[allow(dead_code)]
pub fn sframe_parse(data: &[u8]) {
    use stackmark::formats::sframe::{PieceEntry, SFrame};
    if data.len() < 8 {
        return;
    }
    let base = u64::from_le_bytes(data[..8].try_into().unwrap());
    let section = &data[8..];
    let Ok(sf) = SFrame::parse(section, base) else {
        return;
    };
    assert!(SFrame::count_pieces(section) >= sf.piece_count() as usize);
    // Every lookup answers the same through an index of the pieces.
    let mut slots = vec![PieceEntry::EMPTY; sf.piece_index_len()];
    let indexed = sf.with_piece_index(&mut slots);
    // And through an index of an ordinary section's FDEs, as large as it
    // asks for, sized from the bytes alone as discovery does.
    let len = sf.fde_index_len();
    if len > 0 {
        assert!(SFrame::fde_index_len_of(section, base) >= len, "{len}");
    }
    let mut buckets = vec![0; len];
    let by_fde = sf.with_fde_index(&mut buckets);
    // The function found is the first in table order that covers the pc.
    let probe = |pc: u64| {
        assert_eq!(indexed.find_row(pc), sf.find_row(pc), "at {pc:#x}");
        assert_eq!(by_fde.find_row(pc), sf.find_row(pc), "at {pc:#x}");
        assert_eq!(
            sf.find_function(pc).map(|f| f.fde.at),
            first_covering(&sf, pc),
            "at {pc:#x}"
        );
        // A lookup decodes its FDE without validation's checks: as
        // `functions()` decodes it with them.
        for s in [&sf, &by_fde] {
            let found = s.find_function(pc).map(|f| f.fde);
            let listed = found.and_then(|f| sf.functions().find(|g| g.fde.at == f.at));
            assert_eq!(found, listed.map(|g| g.fde), "at {pc:#x}");
        }
    };
    let _ = sf.pc_range();
    for f in sf.functions() {
        for fre in f.fres() {
            let _ = f.row(&fre);
        }
        let start = f.fde.start;
        for off in [
            0u64,
            1,
            7,
            u64::from(f.fde.size.saturating_sub(1)),
            u64::from(f.fde.size),
        ] {
            probe(start.wrapping_add(off));
        }
    }
    for piece in sf.pieces() {
        let _ = piece.pc_range();
    }
    for w in data.chunks_exact(8).take(64) {
        probe(u64::from_le_bytes(w.try_into().unwrap()));
    }
}

/// The function a lookup of `pc` in `s` must find (the offset of its FDE):
/// the first one in table order, piece after piece, whose
/// `[start, start + size)` holds `pc`.
#[allow(dead_code)]
pub fn first_covering(s: &stackmark::formats::sframe::SFrame<'_>, pc: u64) -> Option<usize> {
    s.functions()
        .find(|f| pc >= f.fde.start && pc - f.fde.start < u64::from(f.fde.size))
        .map(|f| f.fde.at)
}

/// Input layout shared by the walk targets: 7 header bytes (3 x u16
/// lengths of the stack, the code and the table, then flags: bit 0 a
/// precise pc, bit 1 AArch64), 5 register words, then the three regions.
/// Addresses are fixed so pointers in the data can aim at them.
struct WalkInput<'d> {
    h: &'d [u8],
    r: &'d [u8],
    stack: &'d [u8],
    code: &'d [u8],
    table: &'d [u8],
}

const STACK: u64 = 0x7fff_0000;
const CODE: u64 = 0x40_0000;
const SECTION: u64 = 0x60_0000;
/// The most stack reads one walk may make, whatever the input (a
/// signal-frame search once scanned up to a hostile fp).
const MAX_READS: u64 = 1_000_000;

impl<'d> WalkInput<'d> {
    fn parse(data: &'d [u8]) -> Option<Self> {
        let mut c = data;
        let mut take = |n: usize| -> Option<&'d [u8]> {
            let (a, b) = (c.get(..n)?, c.get(n..)?);
            c = b;
            Some(a)
        };
        let (h, r) = (take(7)?, take(40)?);
        let len = |i: usize| usize::from(u16::from_le_bytes([h[i], h[i + 1]])) % 4096;
        let (stack, code, table) = (take(len(0))?, take(len(2))?, take(len(4))?);
        Some(WalkInput {
            h,
            r,
            stack,
            code,
            table,
        })
    }

    fn word(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.r[i * 8..i * 8 + 8].try_into().unwrap())
    }

    /// Register words point into the regions most of the time.
    fn aim(&self, w: u64) -> u64 {
        match w % 4 {
            0 => STACK + (w >> 8) % (self.stack.len() as u64 + 16),
            1 => CODE + (w >> 8) % (self.code.len() as u64 + 16),
            _ => w,
        }
    }

    /// The stack with one aligned word replaced by a code address.
    fn changed_stack(&self) -> Vec<u8> {
        let (ls, lc) = (self.stack.len(), self.code.len() as u64);
        let mut changed = self.stack.to_vec();
        if ls >= 8 {
            let at = (self.word(3) >> 8) as usize % (ls / 8) * 8;
            let w = CODE + (self.word(2) >> 16) % (lc + 16);
            changed[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
        changed
    }

    /// Walks from the input's registers, on the architecture its flags
    /// name, every way [`walk_all_ways`] does, with `map` as the code.
    fn walk<C: stackmark::walk::CodeMap + Copy>(&self, map: C) {
        use stackmark::arch::aarch64::{Aarch64, Regs as A64};
        use stackmark::arch::x86_64::{Regs as X64, X86_64};
        use stackmark::memory::SliceMemory;
        let regions = [(STACK, self.stack)];
        let changed_stack = self.changed_stack();
        let changed_regions = [(STACK, &changed_stack[..])];
        let mem = Counting {
            inner: SliceMemory::new(&regions),
            reads: core::cell::Cell::new(0),
        };
        let changed = Counting {
            inner: SliceMemory::new(&changed_regions),
            reads: core::cell::Cell::new(0),
        };
        let precise = stackmark::PcKind::exact_if(self.h[6] & 1 != 0);
        if self.h[6] & 2 == 0 {
            let regs = X64 {
                rip: self.aim(self.word(0)),
                rsp: self.aim(self.word(1)),
                rbp: self.aim(self.word(2)),
                rbx: self.word(3),
                ..Default::default()
            };
            walk_all_ways::<X86_64, C>(regs, precise, &mem, &changed, map);
        } else {
            let regs = A64 {
                pc: self.aim(self.word(0)),
                sp: self.aim(self.word(1)),
                fp: self.aim(self.word(2)),
                lr: self.aim(self.word(3)),
                ..Default::default()
            };
            walk_all_ways::<Aarch64, C>(regs, precise, &mem, &changed, map);
        }
    }
}

/// Counts reads: a walk's work is bounded by its depth, whatever the input.
struct Counting<'a> {
    inner: stackmark::memory::SliceMemory<'a>,
    reads: core::cell::Cell<u64>,
}

impl stackmark::memory::MemoryReader for Counting<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.reads.set(self.reads.get() + 1);
        self.inner.read(addr, buf)
    }
}

/// The same code map, but with a cache that lacks every other answer,
/// so the hot path leaves its inner loop to look them up.
#[derive(Clone, Copy)]
struct HalfCached<C>(C);

impl<C: stackmark::walk::CodeMap> stackmark::walk::CodeMap for HalfCached<C> {
    fn lookup(&self, pc: u64) -> stackmark::walk::Lookup {
        self.0.lookup(pc)
    }
    fn is_code(&self, addr: u64) -> bool {
        self.0.is_code(addr)
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.0.read_code(addr, buf)
    }
    fn is_known_trampoline(&self, pc: u64) -> bool {
        self.0.is_known_trampoline(pc)
    }
    fn is_sigreturn<A: stackmark::arch::Arch>(&self, pc: u64) -> bool {
        self.0.is_sigreturn::<A>(pc)
    }
    fn cached_answer(&self, key: u64, context: u64) -> Option<stackmark::walk::answer::Answer> {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 63 == 0).then(|| self.answer_at(key, context))
    }
}

/// The same code map, remembering walk ends as the module table does.
struct Ends<C> {
    map: C,
    ends: core::cell::RefCell<Vec<(u64, [u64; stackmark::walk::END_WORDS])>>,
}

impl<C: stackmark::walk::CodeMap> stackmark::walk::CodeMap for Ends<C> {
    fn lookup(&self, pc: u64) -> stackmark::walk::Lookup {
        self.map.lookup(pc)
    }
    fn is_code(&self, addr: u64) -> bool {
        self.map.is_code(addr)
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.map.read_code(addr, buf)
    }
    fn is_known_trampoline(&self, pc: u64) -> bool {
        self.map.is_known_trampoline(pc)
    }
    fn is_sigreturn<A: stackmark::arch::Arch>(&self, pc: u64) -> bool {
        self.map.is_sigreturn::<A>(pc)
    }
    fn recall_end<R>(
        &self,
        key: u64,
        take: impl FnOnce(&[core::sync::atomic::AtomicU64; stackmark::walk::END_WORDS]) -> R,
    ) -> Option<R> {
        let ends = self.ends.borrow();
        let e = ends.iter().find(|e| e.0 == key)?;
        Some(take(&e.1.map(core::sync::atomic::AtomicU64::new)))
    }
    fn remember_end(&self, key: u64, words: &[u64; stackmark::walk::END_WORDS]) {
        let mut ends = self.ends.borrow_mut();
        ends.retain(|e| e.0 != key);
        ends.push((key, *words));
    }
}

/// Walks from `regs` five ways: the iterator (its frames must keep the
/// sp order and its reads stay bounded), the general step alone,
/// `fill`, `fill` with half the hot path's answers uncached, and `fill`
/// remembering walk ends over three walks (mark, record, replay), which
/// must all agree. Then, with the walk ends remembered, a walk over
/// `changed` (the stack with one word replaced) must agree with the
/// general step there.
fn walk_all_ways<A: stackmark::arch::Arch, C: stackmark::walk::CodeMap + Copy>(
    regs: A::Regs,
    precise: stackmark::PcKind,
    mem: &Counting<'_>,
    changed: &Counting<'_>,
    map: C,
) {
    use stackmark::walk::{WalkOptions, Walker};
    let opts = WalkOptions {
        max_depth: 64,
        scan_words: 64,
        ..WalkOptions::default()
    };
    let mut w = Walker::<A, _, _>::new(regs, precise, mem, map, opts);
    let frames: Vec<_> = w.by_ref().collect();
    assert!(frames.len() <= 64);
    assert!(
        stackmark::walk::sp_order_holds(&frames),
        "sp must increase: {frames:?}"
    );
    assert!(mem.reads.get() <= MAX_READS, "{} reads", mem.reads.get());
    let general = WalkOptions {
        fast_path: false,
        ..opts
    };
    let mut g = Walker::<A, _, _>::new(regs, precise, mem, map, general);
    let general_frames: Vec<_> = g.by_ref().collect();
    assert_eq!(frames, general_frames, "the hot path changed the walk");
    assert_eq!(w.stop_reason(), g.stop_reason());
    let mut buf = [stackmark::Frame::default(); 64];
    let n = Walker::<A, _, _>::new(regs, precise, mem, map, opts).fill(&mut buf);
    assert_eq!(&buf[..n], &frames[..], "fill and the iterator agree");
    let mut half = Walker::<A, _, _>::new(regs, precise, mem, HalfCached(map), opts);
    let n = half.fill(&mut buf);
    assert_eq!(&buf[..n], &frames[..], "cache misses change nothing");
    assert_eq!(half.stop_reason(), g.stop_reason());
    let ends = Ends {
        map,
        ends: Default::default(),
    };
    for _ in 0..3 {
        let mut w = Walker::<A, _, _>::new(regs, precise, mem, &ends, opts);
        let n = w.fill(&mut buf);
        assert_eq!(&buf[..n], &frames[..], "remembered ends change nothing");
        assert_eq!(w.stop_reason(), g.stop_reason());
    }
    let mut w = Walker::<A, _, _>::new(regs, precise, changed, &ends, opts);
    let n = w.fill(&mut buf);
    let mut g = Walker::<A, _, _>::new(regs, precise, changed, map, general);
    let fresh: Vec<_> = g.by_ref().collect();
    assert_eq!(&buf[..n], &fresh[..], "a remembered end outlived its stack");
    assert_eq!(w.stop_reason(), g.stop_reason());
}

/// The walker over a synthetic stack, synthetic code and a synthetic
/// SFrame section (the input's table). The hot path must give exactly the
/// walk the general step gives, through the iterator and through `fill`.
#[allow(dead_code)]
pub fn walk_synthetic(data: &[u8]) {
    use stackmark::formats::sframe::SFrame;
    use stackmark::walk::SnapshotCode;
    let Some(input) = WalkInput::parse(data) else {
        return;
    };
    let sframes: Vec<SFrame<'_>> = SFrame::parse(input.table, SECTION).into_iter().collect();
    let code_regions = [(CODE, input.code)];
    let trampolines = [input.aim(input.word(4))];
    input.walk(SnapshotCode::new(&code_regions, &sframes, &trampolines));
}

/// Apple compact-unwind entries over the synthetic code: each covers from
/// its function's start to the next entry's, the last to the code's end,
/// as a lookup in `__unwind_info` finds them.
#[derive(Clone, Copy)]
struct CompactCode<'a> {
    code: stackmark::walk::SnapshotCode<'a>,
    /// `(func_start, encoding)`, sorted by start.
    entries: &'a [(u64, u32)],
}

impl stackmark::walk::CodeMap for CompactCode<'_> {
    fn lookup(&self, pc: u64) -> stackmark::walk::Lookup {
        use stackmark::walk::Lookup;
        if !self.is_code(pc) {
            return Lookup::Outside;
        }
        match self.entries.partition_point(|e| e.0 <= pc) {
            0 => Lookup::NoInfo,
            i => Lookup::Compact {
                encoding: self.entries[i - 1].1,
                func_start: self.entries[i - 1].0,
            },
        }
    }
    fn is_code(&self, addr: u64) -> bool {
        self.code.is_code(addr)
    }
    fn read_code(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.code.read_code(addr, buf)
    }
    fn is_known_trampoline(&self, pc: u64) -> bool {
        self.code.is_known_trampoline(pc)
    }
    fn is_sigreturn<A: stackmark::arch::Arch>(&self, pc: u64) -> bool {
        self.code.is_sigreturn::<A>(pc)
    }
}

/// The walker over a synthetic stack and synthetic code described by
/// compact-unwind entries (the input's table, 8 bytes an entry: the
/// function's offset in the code as a u16, 2 bytes unused, the encoding),
/// on either architecture: compact steps and the prologue and epilogue
/// decoders on hostile code and stacks. Checked as
/// [`walk_synthetic`]'s walks are.
#[allow(dead_code)]
pub fn walk_compact(data: &[u8]) {
    use stackmark::walk::SnapshotCode;
    let Some(input) = WalkInput::parse(data) else {
        return;
    };
    let code_end = input.code.len() as u64 + 1;
    let mut entries: Vec<(u64, u32)> = input
        .table
        .chunks_exact(8)
        .map(|e| {
            let start = u64::from(u16::from_le_bytes([e[0], e[1]])) % code_end;
            (CODE + start, u32::from_le_bytes([e[4], e[5], e[6], e[7]]))
        })
        .collect();
    entries.sort_by_key(|e| e.0);
    entries.dedup_by_key(|e| e.0);
    let code_regions = [(CODE, input.code)];
    let trampolines = [input.aim(input.word(4))];
    input.walk(CompactCode {
        code: SnapshotCode::new(&code_regions, &[], &trampolines),
        entries: &entries,
    });
}

/// The `__unwind_info` reader on arbitrary bytes: parse must not panic, and
/// for a section it accepts, iteration and lookups must not either, and
/// every entry must be found by a lookup of its own start.
#[allow(dead_code)]
pub fn unwind_info_parse(data: &[u8]) {
    use stackmark::formats::compact_unwind::UnwindInfo;
    let Ok(info) = UnwindInfo::parse(data) else {
        return;
    };
    let _ = info.common_encodings().count();
    // Every page parse validated is listed, and the pages hold every entry.
    let entries: usize = info.pages().take(4096).map(|p| p.entries).sum();
    if entries <= 1 << 16 && info.pages().nth(4096).is_none() {
        assert_eq!(entries, info.entries().count());
    }
    for e in info.entries().take(4096) {
        if e.func_end > e.func_start {
            assert!(info.lookup(e.func_start).is_some(), "{e:?}");
        }
        let _ = info.lookup(e.func_end);
    }
    for w in data.chunks_exact(4).take(64) {
        let _ = info.lookup(u32::from_le_bytes(w.try_into().unwrap()));
    }
}

/// Where the `cfi` target's input puts what: a flags byte (bit 0: AArch64
/// register numbers), the `.eh_frame_hdr` address (u64), the header's
/// length (u32, cut to what follows), the header, then `.eh_frame` (at the
/// address the header names, or right after the header without one).
/// The saved seeds (tests/data/fuzz/cfi) are real sections laid out so:
/// ld.so's and libgcc_s's for x86_64 and AArch64, and those of two small
/// gcc programs (x86_64; AArch64 with key B signed return addresses).
const CFI_HEAD: usize = 13;

/// The `.eh_frame` / `.eh_frame_hdr` reader on arbitrary bytes: nothing
/// panics; every row handed out lies in its FDE, the rows of an FDE run
/// from its start in order without gaps or overlaps; a row found for a pc
/// holds the pc, is the row the FDE's rows give there, and is what the
/// walker's row says (or the reason it gives none); the index and a linear
/// search give the same row where they find the same FDE. Lookups are
/// sampled (a linear search reads every record) to keep an input fast.
#[allow(dead_code)]
pub fn cfi_parse(data: &[u8]) {
    use stackmark::formats::cfi::{extent, Cfi, Fde, Registers};
    if data.len() < CFI_HEAD {
        return;
    }
    let regs = if data[0] & 1 == 0 {
        Registers::X86_64
    } else {
        Registers::AARCH64
    };
    let hdr_addr = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let hdr_len = u32::from_le_bytes(data[9..13].try_into().unwrap()) as usize;
    let rest = &data[CFI_HEAD..];
    let (hdr, eh_frame) = rest.split_at(hdr_len.min(rest.len()));
    assert!(extent(eh_frame) <= eh_frame.len());
    let indexed = Cfi::new(hdr, hdr_addr, eh_frame, regs).ok();
    let eh_addr = indexed.map_or(hdr_addr.wrapping_add(hdr.len() as u64), |c| {
        c.eh_frame_addr()
    });
    let linear = Cfi::without_index(eh_frame, eh_addr, regs);
    // The index where there is one, else the linear search, which reads
    // every record on each lookup: fewer lookups then.
    let first = indexed.unwrap_or(linear);
    let (fdes, lookups) = if indexed.is_some() {
        (32, 256)
    } else {
        (12, 64)
    };

    let mut pcs: Vec<u64> = data
        .chunks_exact(8)
        .take(16)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .collect();
    // FDEs as a linear search reads them and as the index names them.
    let bases = linear.bases();
    let mut offsets = sample(cfi_records(eh_frame), fdes);
    if let Some(index) = indexed.as_ref().and_then(|c| c.index()) {
        assert!(index.entry(index.len()).is_none());
        let step = (index.len() / fdes).max(1);
        for i in (0..index.len()).step_by(step) {
            let (loc, fde_addr) = index.entry(i).expect("an entry below len");
            pcs.push(loc);
            // The entry found starts at or below the pc, sorted table or not.
            if let Some((found, _, _)) = index.search(loc) {
                assert!(index.entry(found).is_some_and(|e| e.0 <= loc), "{found}");
            }
            if let Ok(off) = usize::try_from(fde_addr.wrapping_sub(eh_addr)) {
                offsets.push(off);
            }
        }
    }
    offsets.sort_unstable();
    offsets.dedup();
    for &off in &offsets {
        let Ok((fde, cie)) = Fde::parse(eh_frame, off, &bases) else {
            continue;
        };
        let end = fde.pc_begin + fde.pc_range;
        let mut here = vec![
            fde.pc_begin.wrapping_sub(1),
            fde.pc_begin,
            fde.pc_begin + fde.pc_range / 2,
            end.wrapping_sub(1),
            end,
        ];
        let rows = cfi_rows(eh_frame, &cie, &fde, regs.fp, &bases);
        for r in sample(rows.clone(), 2).iter().chain(rows.last()) {
            here.extend([r.start, r.end - 1]);
        }
        // A row found in this FDE is the FDE's row there.
        for &pc in &here {
            if let Ok(Some((f, _, row))) = first.find_row(pc) {
                if f == fde {
                    if let Some(r) = rows.iter().find(|r| r.start <= pc && pc < r.end) {
                        assert_eq!(&row, r, "at {pc:#x}");
                    }
                }
            }
        }
        pcs.extend(here);
    }
    for &pc in pcs.iter().take(lookups) {
        cfi_probe(&first, pc);
    }
    if indexed.is_some() {
        for pc in sample(pcs, 32) {
            if let (Some((f1, r1)), Some((f2, r2))) =
                (cfi_probe(&first, pc), cfi_probe(&linear, pc))
            {
                if f1 == f2 {
                    assert_eq!(r1, r2, "the index and a linear search at {pc:#x}");
                }
            }
        }
    }
}

/// At most `n` of `v`, evenly spread.
fn sample<T>(v: Vec<T>, n: usize) -> Vec<T> {
    let step = (v.len() / n).max(1);
    v.into_iter().step_by(step).take(n).collect()
}

/// Offsets of the first records of `.eh_frame`, up to its terminator.
fn cfi_records(data: &[u8]) -> Vec<usize> {
    let word = |at: usize, n: usize| -> Option<u64> {
        let b = data.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0, |v, &x| v << 8 | u64::from(x)))
    };
    let mut out = Vec::new();
    let mut at = 0;
    while out.len() < 4096 {
        let Some(len) = word(at, 4) else { break };
        let (len, body) = match len {
            0 => break,
            0xffff_ffff => match word(at + 4, 8) {
                Some(l) => (l, at + 12),
                None => break,
            },
            l => (l, at + 4),
        };
        out.push(at);
        match usize::try_from(len).ok().and_then(|l| body.checked_add(l)) {
            Some(next) if next <= data.len() => at = next,
            _ => break,
        }
    }
    out
}

/// The rows `for_each_row` hands out for `fde` (those before an error
/// too), which must run in order from the FDE's start, each inside it,
/// none empty, without gaps.
fn cfi_rows(
    data: &[u8],
    cie: &stackmark::formats::cfi::Cie,
    fde: &stackmark::formats::cfi::Fde,
    fp: u16,
    bases: &stackmark::formats::cfi::pointer::Bases,
) -> Vec<stackmark::formats::cfi::CfiRow> {
    let mut rows: Vec<stackmark::formats::cfi::CfiRow> = Vec::new();
    let end = fde.pc_begin + fde.pc_range;
    let _ = stackmark::formats::cfi::for_each_row(data, cie, fde, fp, bases, |r| {
        let from = rows.last().map_or(fde.pc_begin, |p| p.end);
        assert_eq!(r.start, from, "{r:?} after {:?}", rows.last());
        assert!(r.start < r.end && r.end <= end, "{r:?} in {fde:?}");
        rows.push(*r);
        rows.len() < 1 << 16
    });
    rows
}

/// Looks `pc` up in `cfi`: a row found holds it and lies in its FDE, and
/// the walker's row (and its quick row, where there is one) agrees with it.
fn cfi_probe(
    cfi: &stackmark::formats::cfi::Cfi<'_>,
    pc: u64,
) -> Option<(
    stackmark::formats::cfi::Fde,
    stackmark::formats::cfi::CfiRow,
)> {
    use stackmark::formats::cfi::Inexpressible;
    let walker = cfi.unwind_row(pc);
    // A quick row, where there is one, is the walker's row in brief.
    if let Some(q) = cfi.quick_row(pc) {
        let brief = walker
            .ok()
            .flatten()
            .and_then(|r| stackmark::formats::sframe::QuickRow::of(&r));
        assert_eq!(Some(q), brief, "at {pc:#x}");
    }
    match cfi.find_row(pc) {
        Ok(None) => {
            assert_eq!(walker, Ok(None), "at {pc:#x}");
            None
        }
        Err(e) => {
            assert_eq!(walker, Err(Inexpressible::Malformed(e)), "at {pc:#x}");
            None
        }
        Ok(Some((fde, cie, row))) => {
            assert!(fde.contains(pc), "{fde:?} at {pc:#x}");
            assert!(row.start <= pc && pc < row.end, "{row:?} at {pc:#x}");
            assert!(fde.pc_begin <= row.start && row.end - fde.pc_begin <= fde.pc_range);
            assert_eq!(fde.cie_offset, cie.offset);
            match walker {
                Ok(Some(w)) => {
                    assert_eq!((w.func_start, w.row_start), (fde.pc_begin, row.start));
                    assert_eq!(u64::from(w.func_size), fde.pc_range);
                    assert_eq!(w.mangled_ra, row.ra_signed);
                    assert!(!w.signal_frame && !cie.signal_frame);
                }
                Ok(None) | Err(Inexpressible::Malformed(_)) => {
                    panic!("{walker:?} for {row:?} at {pc:#x}")
                }
                Err(_) => {}
            }
            Some((fde, row))
        }
    }
}
