//! The fixed-memory module table and how it is refreshed.
//!
//! Two tables live in static memory. A refresh (never from a signal handler)
//! fills the inactive one and publishes it with one atomic store. The table
//! it replaces stays intact until the next refresh, which first waits for
//! walks still reading it. A walk pins the active table with an atomic
//! reader count: no lock, no allocation, safe in a signal handler,
//! including one that interrupts a refresh.
//!
//! Each module's SFrame data is copied at refresh into memory the table owns
//! (an anonymous mapping), so a library unloaded between refreshes leaves the
//! walk with stale addresses but never with unmapped unwind data; code bytes
//! are only read through a checked copy (see [`crate::discover`]).


mod lookup;
mod module;
mod registry;
mod table;

pub use lookup::CfiFallback;
pub use module::{Module, Segment, MAX_BUILD_ID, MAX_NAME, MAX_SEGMENTS};
pub(crate) use registry::refresh_with;
pub use registry::{current, RefreshError, TableGuard, REFRESH_WAIT};
pub use table::{Table, MAX_MODULES, MAX_TRAMPOLINES};


#[cfg(test)]
mod tests {
    use super::registry::Registry;
    use super::table::{starts_at_or_below, ENTRY_SPAN};
    use super::*;
    use crate::formats::elf::{PF_R, PF_W, PF_X};
    use crate::walk::{CodeMap, Lookup};

    fn module(name: &[u8], code: &[(u64, u64)], data: &[(u64, u64)]) -> Module {
        let mut m = Module::EMPTY;
        m.set_name(name);
        let segs = code.iter().map(|&s| (s, PF_R | PF_X));
        for ((start, end), flags) in segs.chain(data.iter().map(|&s| (s, PF_R))) {
            let size = end - start;
            assert!(m.push_segment(Segment {
                start,
                size,
                vaddr: start,
                flags,
            }));
        }
        m
    }

    #[test]
    fn code_addresses_find_their_module_even_inside_another_modules_text_range() {
        let mut t = Box::new(Table::EMPTY);
        // "a" has two executable segments with a gap, in which "b" (one
        // segment) and a data segment sit; "c" lies apart, above a gap.
        t.push(module(b"a", &[(0x1000, 0x2000), (0x8000, 0x9000)], &[]));
        t.push(module(b"c", &[(0x20000, 0x21000)], &[(0x21000, 0x22000)]));
        t.push(module(b"b", &[(0x4000, 0x5000)], &[(0x5000, 0x6000)]));
        t.finish(1);
        let oracle = |addr: u64| t.modules().iter().find(|m| m.is_code(addr));
        for addr in (0..0x23000)
            .step_by(0x80)
            .chain([0x1fff, 0x2000, 0x4fff, 0x8fff])
        {
            let got = t.module_for_code(addr).map(Module::name);
            assert_eq!(got, oracle(addr).map(Module::name), "{addr:#x}");
        }
        // Whichever module the search found last (the first probe's).
        let probes = [0x1800, 0x1fff, 0x2000, 0x4800, 0x6800, 0x8800, 0x20010, 0x21800];
        for first in probes {
            for addr in probes {
                t.module_for_code(first);
                let got = t.module_for_code(addr).map(Module::name);
                assert_eq!(got, oracle(addr).map(Module::name), "{first:#x} {addr:#x}");
            }
        }
        assert_eq!(t.module_for_code(0x4800).map(Module::name), Some(&b"b"[..]));
        assert_eq!(t.module_for_code(0x8800).map(Module::name), Some(&b"a"[..]));
        assert!(t.module_for_code(0x6800).is_none(), "a gap in a's range");
        assert!(t.module_for_code(0x21800).is_none(), "c's data");
        assert_eq!(t.code_range(0x20010), Some((0x20000, 0x21000)));
        assert_eq!(t.code_range(0x8010), Some((0x8000, 0x9000)));
    }

    #[test]
    fn a_pc_within_a_span_after_a_trampoline_is_found_in_one_pass_as_one_by_one() {
        use crate::walk::CodeMap;
        let mut t = Box::new(Table::EMPTY);
        for pc in [0x5000, 0x9000, u64::MAX - 2] {
            t.add_trampoline(pc);
        }
        // The trait's default asks about each address in turn.
        struct OneByOne<'a>(&'a Table);
        impl CodeMap for OneByOne<'_> {
            fn lookup(&self, _: u64) -> crate::walk::Lookup {
                crate::walk::Lookup::Outside
            }
            fn is_code(&self, _: u64) -> bool {
                false
            }
            fn read_code(&self, _: u64, _: &mut [u8]) -> bool {
                false
            }
            fn is_known_trampoline(&self, pc: u64) -> bool {
                self.0.is_trampoline(pc)
            }
        }
        let each = OneByOne(&t);
        for pc in (0x4ff0..0x5010)
            .chain(0x8ff0..0x9010)
            .chain(u64::MAX - 4..=u64::MAX)
            .chain(0..4)
        {
            for span in [0, 1, 4, 8] {
                assert_eq!(
                    t.known_trampoline_within(pc, span),
                    each.known_trampoline_within(pc, span),
                    "{pc:#x} {span}"
                );
            }
        }
        assert!(t.known_trampoline_within(0x5007, 8));
        assert!(!t.known_trampoline_within(0x4fff, 8));
    }

    #[test]
    fn counting_the_ranges_at_or_below_agrees_with_a_binary_search_at_every_length() {
        // Lengths on both sides of the switch from counting to halving,
        // with repeated starts (nested ranges) and addresses between,
        // on and around every start.
        for len in 0..=40u64 {
            let texts: Vec<(u64, u64)> = (0..len).map(|i| (0x1000 * (i / 2 * 2), 0)).collect();
            for addr in (0..0x1000 * (len + 2))
                .step_by(0x800)
                .chain([0x0fff, u64::MAX])
            {
                assert_eq!(
                    starts_at_or_below(&texts, addr),
                    texts.partition_point(|t| t.0 <= addr),
                    "{len} ranges, {addr:#x}"
                );
            }
        }
    }

    #[test]
    fn a_table_of_many_modules_finds_each_ones_code() {
        // 40 modules: more text ranges than the count takes, so the
        // halving search runs; each has code then data, and a gap after.
        let mut t = Box::new(Table::EMPTY);
        for i in 0..40u64 {
            let base = 0x10_0000 + i * 0x1_0000;
            let name = [b'a' + (i % 26) as u8, b'0' + (i / 26) as u8];
            t.push(module(
                &name,
                &[(base, base + 0x4000)],
                &[(base + 0x4000, base + 0x6000)],
            ));
        }
        t.finish(1);
        let oracle = |addr: u64| t.modules().iter().find(|m| m.is_code(addr));
        for addr in (0x0f_0000..0x39_0000).step_by(0x700) {
            let got = t.module_for_code(addr).map(Module::name);
            assert_eq!(got, oracle(addr).map(Module::name), "{addr:#x}");
        }
        assert!(t
            .module_for_code(0x10_0000 + 17 * 0x1_0000 + 0x10)
            .is_some());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pinned_modules_execute_only_code_is_read_only_through_checked_reads() {
        use crate::walk::CodeMap;
        // A page mapped without access stands for execute-only code: read
        // directly, it would fault this test.
        let page = stackmark_fixtures::UnreadablePage::new();
        let segment = |flags| Segment {
            start: page.addr(),
            size: 4096,
            vaddr: page.addr(),
            flags,
        };
        let mut m = Module::EMPTY;
        m.set_name(b"x");
        assert!(m.push_segment(segment(PF_X)));
        m.pin();
        m.fix();
        let mut t = Box::new(Table::EMPTY);
        t.push(m);
        t.finish(1);
        let mut buf = [0u8; 8];
        assert!(!t.read_code(page.addr() + 16, &mut buf));
        // Readable code is what direct reads rely on.
        let mut m = Module::EMPTY;
        assert!(m.push_segment(segment(PF_R | PF_X)));
        assert!(!m.exec_only);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn data_is_read_directly_only_inside_one_readable_segment_of_a_pinned_module_with_a_fixed_file()
    {
        // "a": code at 0x1000, read-only data at 0x3000, writable data at
        // 0x4000 (adjacent), a segment with no access at 0x6000.
        let mut a = module(b"a", &[(0x1000, 0x2000)], &[(0x3000, 0x4000)]);
        for (start, flags) in [(0x4000, PF_R | PF_W), (0x6000, 0)] {
            assert!(a.push_segment(Segment {
                start,
                size: 0x1000,
                vaddr: start,
                flags,
            }));
        }
        let b = module(b"b", &[(0x10000, 0x11000)], &[(0x12000, 0x13000)]);
        let mut t = Box::new(Table::EMPTY);
        t.push(a.clone());
        t.push(b.clone());
        t.finish(1);
        // Not pinned: never direct.
        assert!(!t.direct_readable(0x1800, 0x3000, 8));
        // Pinned, but from a file that may be truncated: not direct either.
        a.pin();
        let mut t = Box::new(Table::EMPTY);
        t.push(a.clone());
        t.push(b.clone());
        t.finish(2);
        assert!(!t.direct_readable(0x1800, 0x3000, 8));
        a.fix();
        let mut t = Box::new(Table::EMPTY);
        t.push(a);
        t.push(b);
        t.finish(3);
        assert!(t.direct_readable(0x1800, 0x3000, 8));
        assert!(t.direct_readable(0x1800, 0x3ff8, 8));
        assert!(t.direct_readable(0x1800, 0x4ff8, 8));
        // Across two segments, past the last, without access, in another
        // module, empty, or wrapping around.
        assert!(!t.direct_readable(0x1800, 0x3ffc, 8));
        assert!(!t.direct_readable(0x1800, 0x5000, 8));
        assert!(!t.direct_readable(0x1800, 0x6000, 8));
        assert!(!t.direct_readable(0x1800, 0x12000, 8));
        assert!(!t.direct_readable(0x1800, 0x3000, 0));
        assert!(!t.direct_readable(0x1800, u64::MAX - 3, 8));
        // Code that is not the module's own, or no code at all.
        assert!(!t.direct_readable(0x10800, 0x3000, 8));
        assert!(!t.direct_readable(0x3000, 0x3000, 8));
    }

    #[test]
    fn a_full_module_still_takes_code_in_place_of_its_last_data_segment() {
        let seg = |i: u64, flags| Segment {
            start: 0x10_0000 * (i + 1),
            size: 0x1000,
            vaddr: 0x10_0000 * (i + 1),
            flags,
        };
        let mut m = Module::EMPTY;
        assert!(m.push_segment(seg(0, PF_R | PF_X)));
        for i in 1..MAX_SEGMENTS as u64 {
            assert!(m.push_segment(seg(i, PF_R | PF_W)));
        }
        let data = seg(20, PF_R);
        assert!(!m.push_segment(data), "full: data is left out");
        let code = seg(21, PF_R | PF_X);
        assert!(m.push_segment(code));
        assert!(m.is_code(code.start) && m.is_code(0x10_0000));
        // The last data segment made room; the order is kept.
        let starts: Vec<u64> = m.segments().iter().map(|s| s.start).collect();
        let mut want: Vec<u64> = (0..MAX_SEGMENTS as u64 - 1)
            .map(|i| seg(i, 0).start)
            .collect();
        want.push(code.start);
        assert_eq!(starts, want);
        // Code by code only: once all are code, more is left out.
        for i in 0..MAX_SEGMENTS as u64 - 2 {
            assert!(m.push_segment(seg(30 + i, PF_R | PF_X)));
        }
        assert!(m.segments().iter().all(Segment::executable));
        assert!(!m.push_segment(seg(40, PF_R | PF_X)));
        assert!(m.is_code(0x10_0000 * 31) && !m.is_code(0x10_0000 * 41));
    }

    #[test]
    fn a_wild_pc_never_shares_a_cached_answer_with_a_return_address_check() {
        use crate::arch::Native;
        use crate::walk::CodeMap;
        // Code that ends in a call on either architecture (x86_64's e8 at
        // ra - 5, AArch64's bl at ra - 4), at two return addresses.
        let mut code = [0u8; 64];
        for ra_off in [16, 48] {
            code[ra_off - 8..ra_off].copy_from_slice(&[0, 0, 0, 0xe8, 0, 0, 0, 0x94]);
        }
        let base = code.as_ptr() as u64;
        let mut t = Box::new(Table::EMPTY);
        t.push(module(b"calls", &[(base, base + 64)], &[]));
        // Its own generation: the rule cache is shared by every test.
        t.finish(0x5eed_0063);
        let (a, b) = (base + 16, base + 48);
        // A scan asks first, then a walk looks up a pc in no module that
        // differs from the return address only in bit 63 ...
        assert!(t.follows_call::<Native>(a));
        assert_eq!(t.lookup(a | 1 << 63), Lookup::Outside);
        // ... or the other way round.
        assert_eq!(t.lookup(b | 1 << 63), Lookup::Outside);
        assert!(t.follows_call::<Native>(b));
        assert!(t.follows_call::<Native>(b), "and again, from the cache");
        assert_eq!(t.lookup(a), Lookup::NoInfo);
    }

    #[test]
    fn the_entry_function_is_outermost_even_where_an_sframe_row_covers_it() {
        use crate::formats::sframe::{CfaRule, RegRule, SFrame};
        let (base, entry, section) = (0x40_0000u64, 0x40_0100u64, 0x40_2000u64);
        // A version 2 x86_64 section (FDEs sorted, function starts relative
        // to the section) with one function at the entry point, 0x22 bytes,
        // whose one row is `cfa = sp + 8` (return address at cfa - 8).
        let mut bytes = vec![0xe2, 0xde, 2, 1, 3, 0, (-8i8) as u8, 0];
        for w in [1u32, 1, 3, 0, 20] {
            bytes.extend(w.to_le_bytes());
        }
        bytes.extend(((entry as i64 - section as i64) as i32).to_le_bytes());
        for w in [0x22u32, 0, 1] {
            bytes.extend(w.to_le_bytes());
        }
        bytes.extend([0, 0, 0, 0]);
        bytes.extend([0, 0x03, 8]);
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        let sf = SFrame::parse(bytes, section).expect("a valid section");
        let row = sf.find_row(entry + 5).expect("the row");
        assert_eq!((row.cfa, row.ra), (CfaRule::SpPlus(8), RegRule::AtCfa(-8)));
        let mut m = module(b"main", &[(base, base + 0x1000)], &[]);
        m.sframe = Some(sf);
        let mut t = Box::new(Table::EMPTY);
        t.push(m);
        t.finish(0x5eed_0e17);
        assert_eq!(
            t.lookup(entry + 5),
            Lookup::SFrame(row),
            "no entry point known"
        );
        t.set_entry(entry);
        let outermost = t.lookup_uncached(entry + 5);
        assert!(
            matches!(outermost, Lookup::SFrame(r) if r.ra == RegRule::Undefined),
            "{outermost:?}"
        );
        assert!(t.is_outermost(entry + 5));
        // The hot path leaves such a pc to the general step, with or
        // without tables.
        let hot = t.answer_at(entry + 5, t.answer_generation());
        assert_eq!(hot.kind(), crate::walk::answer::AnswerKind::Slow);
    }

    #[test]
    fn the_programs_entry_point_is_never_taken_for_a_return_address() {
        use crate::arch::Native;
        use crate::walk::CodeMap;
        // A function that ends in a call (x86_64's e8, AArch64's bl), with
        // the entry point right after it, as lld may lay out `_start`.
        let mut code = [0u8; 128];
        code[24..32].copy_from_slice(&[0, 0, 0, 0xe8, 0, 0, 0, 0x94]);
        let base = code.as_ptr() as u64;
        let entry = base + 32;
        let mut t = Box::new(Table::EMPTY);
        t.push(module(b"start", &[(base, base + 128)], &[]));
        t.finish(0x5eed_0064);
        assert!(t.follows_call::<Native>(entry), "a call precedes it");
        // Set on the same finished table (as a refresh does, after
        // `finish`): the rule cache still holds the answer above, so the
        // entry check must come first.
        t.set_entry(entry);
        assert_eq!(t.entry(), entry);
        assert!(!t.follows_call::<Native>(entry));
        assert!(
            !t.follows_call::<Native>(entry),
            "and again (the check comes before the rule cache)"
        );
        // A return address into the entry function (glibc's `_start`)
        // marks the outermost frame; just past it, code is code again.
        let outermost = t.lookup(entry + ENTRY_SPAN - 1);
        assert!(
            matches!(outermost, Lookup::SFrame(row) if row.ra == crate::formats::sframe::RegRule::Undefined),
            "{outermost:?}"
        );
        assert_eq!(t.lookup(entry + ENTRY_SPAN), Lookup::NoInfo);
        assert_eq!(t.lookup(entry - 1), Lookup::NoInfo);
        t.clear();
        assert_eq!(t.entry(), 0, "a refill starts without one");
    }

    #[test]
    fn tables_given_the_same_generation_never_share_cached_answers() {
        use crate::walk::CodeMap;
        let pc = 0x5a5a_0010;
        let mut a = Box::new(Table::EMPTY);
        a.push(module(b"a", &[(0x5a5a_0000, 0x5a5a_1000)], &[]));
        a.finish(0x000a_0d17);
        let mut b = Box::new(Table::EMPTY);
        b.finish(0x000a_0d17);
        assert_eq!(a.generation(), b.generation());
        assert_eq!(a.lookup(pc), Lookup::NoInfo);
        assert_eq!(b.lookup(pc), Lookup::Outside, "not a's cached answer");
        assert_eq!(a.lookup(pc), Lookup::NoInfo, "nor the other way round");
        // Finished again, a table starts afresh in the caches too.
        let before = a.answer_generation();
        a.finish(0x000a_0d17);
        assert_ne!(a.answer_generation(), before);
        assert_ne!(a.answer_generation() & 0xffff_ffff, 0);
        // Unfinished, nothing is cached for it.
        let unfinished = Table::EMPTY;
        assert_eq!(unfinished.answer_generation(), 0);
    }

    /// `docs/guarantees.md` states the tables' fixed memory (914 KiB);
    /// keep it under 1 MiB.
    #[test]
    fn the_two_tables_take_the_documented_fixed_memory() {
        let bytes = 2 * core::mem::size_of::<Table>();
        println!("module tables: {bytes} bytes");
        assert!(bytes <= 1024 * 1024, "{bytes}");
        assert!(bytes > MAX_MODULES * (MAX_NAME + MAX_SEGMENTS * 32));
    }

    /// A module named `name` holding the copy `copy` (a made-up address:
    /// these tests' release only records it).
    fn with_copy(name: &[u8], copy: usize) -> Module {
        let base = copy as u64 * 0x1_0000;
        let mut m = module(name, &[(base, base + 0x1000)], &[]);
        m.sframe_copy = (copy, 0x1000);
        m
    }

    /// Refreshes `r` to hold `mods`, recording released copies in `freed`.
    fn publish(
        r: &'static Registry,
        wait: core::time::Duration,
        mods: &[Module],
        freed: &std::cell::RefCell<Vec<usize>>,
    ) -> Result<u64, RefreshError> {
        let release = |c: (usize, usize)| freed.borrow_mut().push(c.0);
        r.refresh_within(
            wait,
            |new, old| {
                for m in mods {
                    new.push_or_release(m.clone(), old, release);
                }
            },
            release,
        )
    }

    fn names(t: &Table) -> Vec<&[u8]> {
        t.modules().iter().map(Module::name).collect()
    }

    #[test]
    fn a_thread_may_refresh_while_it_holds_the_table_the_refresh_replaces() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let wait = REFRESH_WAIT;
        assert_eq!(publish(&R, wait, &[with_copy(b"a", 1)], &freed), Ok(1));
        let held = R.current().unwrap();
        // Before the change this waited for `held` forever.
        assert_eq!(publish(&R, wait, &[with_copy(b"b", 2)], &freed), Ok(2));
        assert_eq!(R.current().unwrap().generation(), 2);
        // The replaced table is as it was, and its copy is not freed.
        assert_eq!((held.generation(), names(&held)), (1, vec![&b"a"[..]]));
        assert!(freed.borrow().is_empty());
        drop(held);
        // The next refresh reuses it: only now is its copy freed.
        assert_eq!(publish(&R, wait, &[with_copy(b"c", 3)], &freed), Ok(3));
        assert_eq!(*freed.borrow(), [1]);
        assert_eq!(names(&R.current().unwrap()), [&b"c"[..]]);
    }

    #[test]
    fn a_refresh_that_would_reuse_a_pinned_table_fails_and_changes_nothing() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let short = core::time::Duration::from_millis(50);
        publish(&R, short, &[with_copy(b"a", 1)], &freed).unwrap();
        let held = R.current().unwrap();
        publish(&R, short, &[with_copy(b"b", 2)], &freed).unwrap();
        let mut filled = false;
        let got = R.refresh_within(short, |_, _| filled = true, |_| panic!("released"));
        assert_eq!(got, Err(RefreshError::InUse));
        assert!(!filled, "the pinned table was refilled");
        let now = R.current().unwrap();
        assert_eq!((now.generation(), names(&now)), (2, vec![&b"b"[..]]));
        assert_eq!((held.generation(), names(&held)), (1, vec![&b"a"[..]]));
        drop((now, held));
        // The failed refresh let go of the writer's flag.
        assert_eq!(publish(&R, short, &[with_copy(b"c", 3)], &freed), Ok(3));
        assert_eq!(*freed.borrow(), [1]);
    }

    #[test]
    fn a_copy_the_published_table_shares_is_freed_only_with_the_last_table_holding_it() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let wait = REFRESH_WAIT;
        let (a, b, c) = (with_copy(b"a", 1), with_copy(b"b", 2), with_copy(b"c", 3));
        publish(&R, wait, &[a.clone(), b], &freed).unwrap();
        publish(&R, wait, &[a.clone(), c], &freed).unwrap();
        // Reusing [a, b]: a is shared with the published [a, c].
        publish(&R, wait, &[a], &freed).unwrap();
        assert_eq!(*freed.borrow(), [2]);
        publish(&R, wait, &[], &freed).unwrap();
        assert_eq!(*freed.borrow(), [2, 3]);
        publish(&R, wait, &[], &freed).unwrap();
        assert_eq!(*freed.borrow(), [2, 3, 1]);
    }

    #[test]
    fn a_full_table_leaves_a_module_out_but_keeps_a_copy_the_published_table_reads() {
        let mut old = Box::new(Table::EMPTY);
        old.push(with_copy(b"kept", 7));
        let mut new = Box::new(Table::EMPTY);
        for i in 0..MAX_MODULES {
            assert!(new.push(with_copy(b"m", 100 + i)));
        }
        let mut freed = vec![];
        // Reused from the published table, which walks may be reading.
        assert!(!new.push_or_release(with_copy(b"kept", 7), &old, |c| freed.push(c.0)));
        // A copy made for the new table alone.
        assert!(!new.push_or_release(with_copy(b"fresh", 8), &old, |c| freed.push(c.0)));
        assert_eq!(freed, [8]);
        assert_eq!(new.dropped_modules(), 2);
    }

    #[test]
    fn a_fork_child_refreshes_although_another_thread_of_the_parent_was_refreshing() {
        static R: Registry = Registry::new();
        let freed = std::cell::RefCell::new(vec![]);
        let short = core::time::Duration::from_millis(50);
        publish(&R, short, &[with_copy(b"a", 1)], &freed).unwrap();
        let (in_fill, filling) = std::sync::mpsc::channel();
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        let refresher = std::thread::spawn(move || {
            R.refresh_within(
                REFRESH_WAIT,
                |new, _| {
                    new.push(with_copy(b"half", 2));
                    in_fill.send(()).unwrap();
                    wait_go.recv().unwrap();
                },
                |_| {},
            )
        });
        filling.recv().unwrap();
        // SAFETY: the child refreshes a private registry and leaves with
        // _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // What the atfork handler does for the live registry.
            R.forget_refresh_in_child();
            let freed = std::cell::RefCell::new(vec![]);
            let code = match publish(&R, short, &[with_copy(b"c", 3)], &freed) {
                Err(_) => 1,
                // The half-written table's copy is left alone.
                Ok(_) if !freed.borrow().is_empty() => 2,
                Ok(_) if names(&R.current().unwrap()) != [&b"c"[..]] => 3,
                Ok(_) => 0,
            };
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(code) };
        }
        go.send(()).unwrap();
        refresher.join().unwrap().unwrap();
        let since = std::time::Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: polls the child forked above.
            let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if got == pid {
                break;
            }
            if since.elapsed() > core::time::Duration::from_secs(60) {
                // SAFETY: the child forked above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child's refresh waited for the parent's forever");
            }
            std::thread::sleep(core::time::Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "{status:#x}");
    }

    mod walks {
        //! Walks over a real table (the walk's own tests use a fake code map).
        use crate::arch::x86_64::X86_64;
        use crate::memory::SliceMemory;
        use crate::modules::{Module, Segment, Table};
        use crate::walk::tests::{stack, x86, Remembering, CODE, STACK};
        use crate::walk::{Frame, StopReason, WalkOptions, Walker};

        /// A module table of one module whose code is `[start, start + size)`,
        /// finished as cache generation `generation`.
        fn one_module_table(start: u64, size: u64, generation: u64) -> Box<Table> {
            let mut m = Module::EMPTY;
            m.set_name(b"m");
            assert!(m.push_segment(Segment {
                start,
                size,
                vaddr: start,
                flags: 5,
            }));
            let mut t = Box::new(Table::EMPTY);
            t.push(m);
            t.finish(generation);
            t
        }

        #[test]
        fn a_table_finished_as_generation_0_walks_the_same_with_and_without_the_hot_path() {
            let t = one_module_table(CODE, 0x1000, 0);
            // Frame 0 in the module, no row; its frame record returns to pc 1,
            // whose lookup key (0) is what every empty cache entry holds.
            let st = stack(&[0, 0, 0, 1, 0, 0]);
            let regions = [(STACK, &st[..])];
            let regs = x86(CODE + 0x10, STACK, STACK + 16);
            let run = |fast_path| {
                let opts = WalkOptions {
                    fast_path,
                    ..Default::default()
                };
                let mut w: Walker<X86_64, _, _> =
                    Walker::new(regs, crate::walk::PcKind::Exact, SliceMemory::new(&regions), &*t, opts);
                let mut buf = [Frame::default(); 8];
                let n = w.fill(&mut buf);
                (buf[..n].to_vec(), w.stop_reason())
            };
            let general = run(false);
            assert_eq!(general.0.len(), 1, "{general:x?}");
            assert_eq!(run(true), general);
        }

        #[test]
        fn a_return_address_into_the_entry_function_ends_every_walk_there_with_or_without_tables() {
            // Real code bytes: an x86_64 `call rel32` ending at +32 (the entry
            // point follows it) and another ending at +72, which a scan would take.
            let mut code = [0u8; 128];
            code[27] = 0xe8;
            code[67] = 0xe8;
            let base = code.as_ptr() as u64;
            let entry = base + 32;
            let mut t = one_module_table(base, 128, 0x5eed_00e1);
            t.set_entry(entry);
            // Frame 0's record returns into the entry function with a frame
            // pointer that leads nowhere (glibc's start code keeps none); further
            // up, a word a scan would take for a caller.
            let st = stack(&[0, 0, 0x10, entry + 5, 0, 0, base + 72, 0]);
            let regions = [(STACK, &st[..])];
            let regs = x86(base + 0x10, STACK, STACK + 16);
            for use_tables in [true, false] {
                for fast_path in [true, false] {
                    let opts = WalkOptions {
                        use_tables,
                        fast_path,
                        ..Default::default()
                    };
                    // Three walks, as a walk end is marked, recorded and
                    // replayed over three: all three must agree.
                    let memo = Remembering::new(&*t);
                    for pass in 0..3 {
                        let mut w: Walker<X86_64, _, _> =
                            Walker::new(regs, crate::walk::PcKind::Exact, SliceMemory::new(&regions), &memo, opts);
                        let mut buf = [Frame::default(); 8];
                        let n = w.fill(&mut buf);
                        let pcs: Vec<u64> = buf[..n].iter().map(|f| f.pc).collect();
                        assert_eq!(
                            (pcs, w.stop_reason()),
                            (vec![base + 0x10, entry + 5], StopReason::Outermost),
                            "tables {use_tables}, hot path {fast_path}, pass {pass}"
                        );
                    }
                    // The hot path's walk ends there at once, with nothing to
                    // remember.
                    assert_eq!(memo.ends.borrow().len(), 0, "no walk end is kept");
                }
            }
        }
    }
}

