use super::*;
use crate::walk::Method;

/// A module as a test describes it.
struct Lib {
    name: &'static [u8],
    build_id: &'static [u8],
    segments: Vec<MarkupSegment>,
}

impl MarkupModule for Lib {
    fn name(&self) -> &[u8] {
        self.name
    }
    fn build_id(&self) -> &[u8] {
        self.build_id
    }
    fn segments(&self) -> impl Iterator<Item = MarkupSegment> + '_ {
        self.segments.iter().copied()
    }
}

const R: Perms = Perms::from_elf_flags(PF_R);
const RX: Perms = Perms::from_elf_flags(PF_R | PF_X);
const RW: Perms = Perms::from_elf_flags(PF_R | PF_W);

fn seg(start: u64, size: u64, perms: Perms, vaddr: u64) -> MarkupSegment {
    MarkupSegment {
        start,
        size,
        perms,
        vaddr,
    }
}

/// A module laid out as GNU ld 2.40 lays out a small program (R, RX, R, and
/// RW from its RELRO start), loaded at `bias`.
fn lib(name: &'static [u8], build_id: &'static [u8], bias: u64) -> Lib {
    Lib {
        name,
        build_id,
        segments: vec![
            seg(bias, 0x618, R, 0),
            seg(bias + 0x1000, 0x179, RX, 0x1000),
            seg(bias + 0x2000, 0x114, R, 0x2000),
            seg(bias + 0x3dd0, 0x250, RW, 0x3dd0),
        ],
    }
}

fn frame(pc: u64, precise: bool, method: Method) -> Frame {
    Frame {
        pc,
        sp: 0,
        pc_kind: crate::walk::PcKind::exact_if(precise),
        method,
    }
}

fn render(f: impl FnOnce(&mut Markup<'_, SliceSink<'_>>)) -> String {
    let mut buf = [0u8; 4096];
    let mut sink = SliceSink::new(&mut buf);
    f(&mut Markup::new(&mut sink));
    assert!(!sink.truncated());
    String::from_utf8(sink.as_bytes().to_vec()).unwrap()
}

#[test]
fn a_backtrace_is_reset_modules_mmaps_then_one_bt_per_frame() {
    let mods = [
        lib(b"/usr/bin/app", &[0xab, 0x01], 0x5555_5555_4000),
        lib(b"/lib/libc.so.6", &[0x0f; 20], 0x7f3a_1000_0000),
    ];
    let frames = [
        frame(0x7f3a_1000_1100, true, Method::Context),
        frame(0x5555_5555_5042, false, Method::SFrame),
        frame(0x5555_5555_5100, false, Method::FramePointer),
        frame(0x5555_5555_5170, false, Method::Scan),
    ];
    let out = render(|m| {
        m.backtrace(&mods, &frames, Scope::AllModules);
    });
    assert_eq!(
        out,
        "{{{reset}}}\n\
         {{{module:0:/usr/bin/app:elf:ab01}}}\n\
         {{{mmap:0x0000555555554000:0x618:load:0:r:0x0000000000000000}}}\n\
         {{{mmap:0x0000555555555000:0x179:load:0:rx:0x0000000000001000}}}\n\
         {{{mmap:0x0000555555556000:0x114:load:0:r:0x0000000000002000}}}\n\
         {{{mmap:0x0000555555557dd0:0x250:load:0:rw:0x0000000000003dd0}}}\n\
         {{{module:1:/lib/libc.so.6:elf:0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f}}}\n\
         {{{mmap:0x00007f3a10000000:0x618:load:1:r:0x0000000000000000}}}\n\
         {{{mmap:0x00007f3a10001000:0x179:load:1:rx:0x0000000000001000}}}\n\
         {{{mmap:0x00007f3a10002000:0x114:load:1:r:0x0000000000002000}}}\n\
         {{{mmap:0x00007f3a10003dd0:0x250:load:1:rw:0x0000000000003dd0}}}\n\
         {{{bt:0:0x00007f3a10001100:pc}}} context\n\
         {{{bt:1:0x0000555555555042:ra}}} sframe\n\
         {{{bt:2:0x0000555555555100:ra}}} fp\n\
         {{{bt:3:0x0000555555555170:ra}}} scan\n"
    );
}

#[test]
fn module_names_lose_colons_braces_and_control_characters() {
    for (name, want) in [
        (&b"/tmp/a:b"[..], "/tmp/a_b"),
        (b"/tmp/x}}}y", "/tmp/x___y"),
        (b"/tmp/{{{z", "/tmp/___z"),
        (b"line\nbreak\ttab\x7f", "line_break_tab_"),
        (b"/opt/caf\xc3\xa9 app/lib.so", "/opt/caf\u{e9} app/lib.so"),
    ] {
        let m = lib(name, &[1], 0x1000);
        let out = render(|w| {
            w.module(3, &m);
        });
        assert_eq!(out, format!("{{{{{{module:3:{want}:elf:01}}}}}}\n"));
    }
}

#[test]
fn c1_control_characters_in_utf8_are_replaced_like_ascii_ones() {
    // U+009B (CSI) and U+0085 (NEL), each two bytes in UTF-8; U+00A0 and
    // U+00E9 are printable and stay. A C1 character split across the
    // writer's 64-byte chunks is caught too.
    let text = "x\u{9b}31mRED\u{85}y \u{a0}\u{e9}";
    let want = "x__31mRED__y \u{a0}\u{e9}";
    assert_eq!(
        render(|m| {
            m.free_text(text.as_bytes());
        }),
        want
    );
    assert_eq!(
        render(|m| {
            m.sanitized(text.as_bytes());
        }),
        want
    );
    let long = format!("{}\u{9b}2J", "a".repeat(63));
    let got = render(|m| {
        m.free_text(long.as_bytes());
    });
    assert_eq!(got, format!("{}__2J", "a".repeat(63)));
    // A lone continuation byte or a lead at the end is left as it is.
    let odd = [b'a', 0x9b, b'b', 0xc2];
    let mut buf = [0u8; 8];
    let mut sink = SliceSink::new(&mut buf);
    Markup::new(&mut sink).sanitized(&odd);
    assert_eq!(sink.as_bytes(), odd);
}

#[test]
fn a_full_slice_sink_offers_the_lines_that_fit_whole() {
    let libs = [lib(b"/lib/a.so", &[0xab; 20], 0x7f00_0000_0000)];
    let mut full = [0u8; 4096];
    let mut sink = SliceSink::new(&mut full);
    Markup::new(&mut sink).context(&libs, &[], Scope::AllModules);
    let whole = sink.as_bytes().to_vec();
    assert_eq!(sink.complete_lines(), &whole[..]);
    // Every cut point: what is offered is a prefix of whole lines.
    for size in 0..whole.len() {
        let mut buf = vec![0u8; size];
        let mut sink = SliceSink::new(&mut buf);
        Markup::new(&mut sink).context(&libs, &[], Scope::AllModules);
        let lines = sink.complete_lines();
        assert!(sink.truncated());
        assert!(whole.starts_with(lines));
        assert!(lines.is_empty() || lines.ends_with(b"\n"), "{size}");
        assert!(
            size - lines.len() < 128,
            "{size}: only the last line is left out"
        );
    }
}

#[test]
fn a_long_name_is_sanitised_across_its_whole_length() {
    // Longer than the 64-byte chunks the sanitiser works in.
    let name: &'static [u8] = b"/a:".repeat(50).leak();
    let m = lib(name, &[1], 0x1000);
    let out = render(|w| {
        w.module(0, &m);
    });
    assert_eq!(
        out,
        format!("{{{{{{module:0:{}:elf:01}}}}}}\n", "/a_".repeat(50))
    );
}

#[test]
fn addresses_are_full_width_and_never_adjusted() {
    for (bias, pc) in [
        (0x1000, 0x2010),
        (0xffff_ffff_0000_0000, 0xffff_ffff_0000_1001),
        (0x0000_7fff_f000_0000, 0x0000_7fff_f000_1178),
    ] {
        let mods = [lib(b"m", &[1], bias)];
        let out = render(|m| {
            m.frame(7, &frame(pc, false, Method::FramePointer), &mods);
            m.mmap(0, &mods[0].segments[1]);
        });
        // The return address is printed as it is: the filter subtracts 1.
        assert_eq!(
            out,
            format!(
                "{{{{{{bt:7:0x{pc:016x}:ra}}}}}} fp\n\
                 {{{{{{mmap:0x{:016x}:0x179:load:0:rx:0x0000000000001000}}}}}}\n",
                bias + 0x1000
            )
        );
    }
}

#[test]
fn a_module_without_build_id_gets_no_context_and_module_plus_offset_frames() {
    let mods = [lib(b"/lib/lib:noid.so", b"", 0x7f00_5000_0000)];
    let frames = [
        frame(0x7f00_5000_1042, true, Method::Context),
        frame(0x7f00_5000_1100, false, Method::FramePointer),
    ];
    for scope in [Scope::AllModules, Scope::TraceModules] {
        let out = render(|m| {
            m.backtrace(&mods, &frames, scope);
        });
        // Offsets are link-time addresses (what addr2line takes) of the
        // unadjusted pc.
        assert_eq!(
            out,
            "{{{reset}}}\n\
             #0 0x00007f0050001042 /lib/lib_noid.so+0x1042 context\n\
             #1 0x00007f0050001100 /lib/lib_noid.so+0x1100 fp\n"
        );
    }
}

#[test]
fn module_plus_offset_uses_the_link_address_of_the_segment_holding_the_pc() {
    // Segments whose runtime distance differs from their link distance: the
    // offset must come from the segment holding the pc, not the first one.
    let m = Lib {
        name: b"odd.so",
        build_id: b"",
        segments: vec![
            seg(0x10_0000, 0x100, R, 0),
            seg(0x20_0000, 0x100, RX, 0x4000),
        ],
    };
    let out = render(|w| {
        w.frame(0, &frame(0x20_0010, true, Method::Scan), &[m]);
    });
    assert_eq!(out, "#0 0x0000000000200010 odd.so+0x4010 scan\n");
}

#[test]
fn a_frame_in_no_module_is_plain_text_not_a_bt_the_filter_would_reject() {
    let mods = [lib(b"a", &[1], 0x10_0000)];
    let out = render(|m| {
        m.frame(4, &frame(0xdead_beef, false, Method::Scan), &mods);
        m.frame(5, &frame(0, false, Method::FramePointer), &mods);
    });
    assert_eq!(
        out,
        "#4 0x00000000deadbeef ?? scan\n#5 0x0000000000000000 ?? fp\n"
    );
}

#[test]
fn whether_a_frame_gets_a_bt_depends_on_the_address_the_filter_looks_up() {
    // The RX segment is [bias + 0x1000, bias + 0x1179). A return address at
    // its end (a call as its last instruction) is looked up at 0x1178:
    // covered. A precise pc there is not, nor is a return address at its
    // first byte (looked up in the gap before it).
    let bias = 0x40_0000;
    let mods = [lib(b"a", &[1], bias)];
    let out = render(|m| {
        m.frame(0, &frame(bias + 0x1179, false, Method::SFrame), &mods);
        m.frame(1, &frame(bias + 0x1179, true, Method::SignalFrame), &mods);
        m.frame(2, &frame(bias + 0x1000, false, Method::Scan), &mods);
        m.frame(3, &frame(bias + 0x1000, true, Method::Context), &mods);
    });
    assert_eq!(
        out,
        "{{{bt:0:0x0000000000401179:ra}}} sframe\n\
         #1 0x0000000000401179 ?? signal\n\
         #2 0x0000000000401000 ?? scan\n\
         {{{bt:3:0x0000000000401000:pc}}} context\n"
    );
}

#[test]
fn trace_scope_describes_only_modules_holding_a_frame() {
    let mods = [
        lib(b"a", &[1], 0x10_0000),
        lib(b"b", &[2], 0x90_0000),
        lib(b"c", &[3], 0xa0_0000),
    ];
    // Frame 0 lies in b; frame 1 is a return address one byte into c,
    // looked up at c's first byte: b and c are described, a is not.
    let frames = [
        frame(0x90_1010, true, Method::Context),
        frame(0xa0_0001, false, Method::Scan),
    ];
    let out = render(|m| {
        m.context(&mods, &frames, Scope::TraceModules);
    });
    let modules: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("{{{module:"))
        .collect();
    assert_eq!(
        modules,
        ["{{{module:1:b:elf:02}}}", "{{{module:2:c:elf:03}}}"]
    );
    assert_eq!(out.matches(":load:0:").count(), 0);
    assert_eq!(out.matches(":load:1:").count(), 4);
    assert_eq!(out.matches(":load:2:").count(), 4);

    let all = render(|m| {
        m.context(&mods, &frames, Scope::AllModules);
    });
    assert_eq!(all.matches("{{{module:").count(), 3);
    assert_eq!(all.matches("{{{mmap:").count(), 12);
}

#[test]
fn segments_without_size_or_rights_get_no_mmap_and_their_frames_no_bt() {
    let m = Lib {
        name: b"z",
        build_id: &[9],
        segments: vec![
            seg(0x1000, 0, RX, 0),
            seg(0x2000, 0x100, Perms::default(), 0x1000),
            seg(0x3000, 0x100, RX, 0x2000),
        ],
    };
    let frames = [
        frame(0x2010, true, Method::Context),
        frame(0x3010, true, Method::Context),
    ];
    let out = render(|w| {
        w.backtrace(&[m], &frames, Scope::TraceModules);
    });
    assert_eq!(
        out,
        "{{{reset}}}\n\
         {{{module:0:z:elf:09}}}\n\
         {{{mmap:0x0000000000003000:0x100:load:0:rx:0x0000000000002000}}}\n\
         #0 0x0000000000002010 ?? context\n\
         {{{bt:1:0x0000000000003010:pc}}} context\n"
    );
}

#[test]
fn perms_are_written_as_rwx_letters_in_order() {
    for (flags, want) in [
        (PF_R, "r"),
        (PF_W, "w"),
        (PF_X, "x"),
        (PF_R | PF_W, "rw"),
        (PF_R | PF_X, "rx"),
        (PF_W | PF_X, "wx"),
        (PF_R | PF_W | PF_X, "rwx"),
    ] {
        let out = render(|m| {
            m.mmap(0, &seg(0x1000, 1, Perms::from_elf_flags(flags), 0));
        });
        assert_eq!(
            out,
            format!("{{{{{{mmap:0x0000000000001000:0x1:load:0:{want}:0x0000000000000000}}}}}}\n")
        );
    }
    assert!(Perms::from_elf_flags(0).is_empty());
}

#[test]
fn module_table_entries_describe_their_elf_segments() {
    use crate::modules::{Module, Segment};
    let mut m = Module::EMPTY;
    m.set_name(b"/usr/lib/libx.so");
    m.set_build_id(&[0xde, 0xad]);
    m.bias = 0x7f00_0000_0000;
    for (vaddr, size, flags) in [(0, 0x618, PF_R), (0x1000, 0x179, PF_R | PF_X)] {
        m.push_segment(Segment {
            start: m.bias + vaddr,
            size,
            vaddr,
            flags,
        });
    }
    let segs: Vec<MarkupSegment> = MarkupModule::segments(&m).collect();
    assert_eq!(
        segs,
        [
            seg(0x7f00_0000_0000, 0x618, R, 0),
            seg(0x7f00_0000_1000, 0x179, RX, 0x1000)
        ]
    );
    let out = render(|w| {
        w.backtrace(
            &[m],
            &[frame(0x7f00_0000_1010, false, Method::SFrame)],
            Scope::TraceModules,
        );
    });
    assert_eq!(
        out,
        "{{{reset}}}\n\
         {{{module:0:/usr/lib/libx.so:elf:dead}}}\n\
         {{{mmap:0x00007f0000000000:0x618:load:0:r:0x0000000000000000}}}\n\
         {{{mmap:0x00007f0000001000:0x179:load:0:rx:0x0000000000001000}}}\n\
         {{{bt:0:0x00007f0000001010:ra}}} sframe\n"
    );
}

#[test]
fn numbers_format_exactly() {
    let out = render(|m| {
        for v in [0, 9, 10, 1234567890, u64::MAX] {
            m.dec(v).text(" ");
        }
        for v in [0, -1, i64::MIN, i64::MAX] {
            m.signed(v).text(" ");
        }
        for v in [0, 0xf, 0x10, 0x1a4, u64::MAX] {
            m.hex_short(v).text(" ");
        }
        m.hex(0).text(" ").hex(0x1234_5678_9abc_def0);
    });
    assert_eq!(
        out,
        "0 9 10 1234567890 18446744073709551615 \
         0 -1 -9223372036854775808 9223372036854775807 \
         0x0 0xf 0x10 0x1a4 0xffffffffffffffff \
         0x0000000000000000 0x123456789abcdef0"
    );
}

#[test]
fn build_ids_of_any_length_are_written_in_lowercase_hex() {
    let id: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
    let want: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let out = render(|m| {
        m.hex_bytes(&id);
    });
    assert_eq!(out, want);
}

#[test]
fn a_full_slice_sink_keeps_what_fits_and_reports_truncation() {
    let mut buf = [0u8; 8];
    let mut sink = SliceSink::new(&mut buf);
    Markup::new(&mut sink).reset();
    assert!(sink.truncated());
    assert_eq!(sink.as_bytes(), b"{{{reset");

    let mut buf = [0u8; 12];
    let mut sink = SliceSink::new(&mut buf);
    Markup::new(&mut sink).reset();
    assert!(!sink.truncated());
    assert_eq!(sink.as_bytes(), b"{{{reset}}}\n");
}

/// Every record waiting on a SOCK_SEQPACKET socket: one per `write(2)`.
fn records(fd: i32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n <= 0 {
            return out;
        }
        out.push(buf[..n as usize].to_vec());
    }
}

fn seqpacket_pair() -> [i32; 2] {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
    assert_eq!(rc, 0);
    fds
}

fn close(fd: i32) {
    // SAFETY: closes a descriptor this test opened.
    unsafe { libc::close(fd) };
}

#[test]
fn an_fd_sink_writes_each_line_with_one_write() {
    let [rx, tx] = seqpacket_pair();
    let mods = [lib(b"/usr/bin/app", &[0xab; 20], 0x5555_5555_4000)];
    let frames = [
        frame(0x5555_5555_5042, true, Method::Context),
        frame(0x5555_5555_5100, false, Method::FramePointer),
    ];
    {
        let mut sink = FdSink::new(tx);
        let mut m = Markup::new(&mut sink);
        m.text("header ").dec(42).newline();
        m.backtrace(&mods, &frames, Scope::AllModules);
        assert!(!sink.failed());
    }
    let got = records(rx);
    let want = render(|m| {
        m.text("header ").dec(42).newline();
        m.backtrace(&mods, &frames, Scope::AllModules);
    });
    let want: Vec<Vec<u8>> = want
        .split_inclusive('\n')
        .map(|l| l.as_bytes().to_vec())
        .collect();
    assert_eq!(want.len(), 9);
    assert_eq!(got, want);
    close(rx);
    close(tx);
}

#[test]
fn an_fd_sink_splits_only_a_line_longer_than_its_buffer_and_flushes_on_drop() {
    let [rx, tx] = seqpacket_pair();
    let long = vec![b'x'; FD_SINK_BUFFER + 100];
    {
        let mut sink = FdSink::new(tx);
        let mut m = Markup::new(&mut sink);
        m.text("ab").bytes(&long).newline();
        m.text("tail without newline");
    }
    let got = records(rx);
    let mut line = b"ab".to_vec();
    line.extend_from_slice(&long);
    line.push(b'\n');
    assert_eq!(got.len(), 4, "prefix, long bytes, newline, tail");
    assert_eq!(got[..3].concat(), line);
    assert_eq!(got[3], b"tail without newline");
    close(rx);
    close(tx);
}

#[test]
fn an_fd_sink_reports_a_failed_write() {
    let [rx, tx] = seqpacket_pair();
    close(rx);
    // The Rust runtime ignores SIGPIPE: the write fails with EPIPE.
    let mut sink = FdSink::new(tx);
    Markup::new(&mut sink).text("lost").newline();
    assert!(sink.failed());
    close(tx);

    let mut sink = FdSink::new(-1);
    Markup::new(&mut sink).text("lost").newline();
    assert!(sink.failed());
}

/// Everything read from `rx` until end of file; closes it.
fn read_to_end(rx: i32) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(rx, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        all.extend_from_slice(&buf[..n as usize]);
    }
    close(rx);
    all
}

#[test]
fn lines_from_several_threads_on_one_pipe_never_mix() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let [rx, tx] = fds;
    let reader = std::thread::spawn(move || read_to_end(rx));
    let writers: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                let path = b"/usr/lib/a/rather/long/path/to/libthread.so";
                let mods = [lib(path, &[0x5a; 20], 0x7f00_0000_0000)];
                let mut sink = FdSink::new(tx);
                let mut m = Markup::new(&mut sink);
                for i in 0..200 {
                    m.text("thread ")
                        .dec(t.into())
                        .text(" line ")
                        .dec(i)
                        .text(" ");
                    m.bytes(&[b'a' + t; 200]).newline();
                    m.context(&mods, &[], Scope::AllModules);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    close(tx);
    let all = String::from_utf8(reader.join().unwrap()).unwrap();
    let mut count = 0;
    for line in all.lines() {
        if let Some(rest) = line.strip_prefix("thread ") {
            let t: u8 = rest[..1].parse().unwrap();
            let payload = String::from_utf8(vec![b'a' + t; 200]).unwrap();
            assert!(line.ends_with(&format!(" {payload}")), "mixed: {line}");
            count += 1;
        } else {
            assert!(
                line.starts_with("{{{")
                    && line.ends_with("}}}")
                    && line.matches("{{{").count() == 1,
                "mixed: {line}"
            );
        }
    }
    assert_eq!(count, 800);
}

/// A pipe whose write end is non-blocking and already full, as a parent's
/// log pipe can be when its reader lags: `[read end, write end]`.
fn full_nonblocking_pipe() -> [i32; 2] {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors; fcntl and write act
    // on descriptors this test owns.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        let flags = libc::fcntl(fds[1], libc::F_GETFL);
        assert_eq!(
            libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK),
            0
        );
        let fill = [b'.'; 4096];
        while libc::write(fds[1], fill.as_ptr().cast(), fill.len()) > 0 {}
    }
    fds
}

#[test]
fn an_fd_sink_waits_for_a_full_nonblocking_pipe_to_drain() {
    let [rx, tx] = full_nonblocking_pipe();
    let reader = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        read_to_end(rx)
    });
    {
        let mut sink = FdSink::new(tx);
        let mut m = Markup::new(&mut sink);
        for i in 0..2000 {
            m.text("line ").dec(i).newline();
        }
        assert!(!sink.failed(), "EAGAIN gave up the output");
    }
    close(tx);
    let all = String::from_utf8(reader.join().unwrap()).unwrap();
    let lines: Vec<&str> = all.trim_start_matches('.').lines().collect();
    let want: Vec<String> = (0..2000).map(|i| format!("line {i}")).collect();
    assert_eq!(lines, want);
}

#[test]
fn an_fd_sink_gives_up_on_a_full_pipe_nobody_drains() {
    // The reader is alive but never reads: the sink waits its time once,
    // then drops the rest rather than hang the report.
    let [rx, tx] = full_nonblocking_pipe();
    let mut sink = FdSink::new(tx);
    let mut m = Markup::new(&mut sink);
    for i in 0..100 {
        m.text("line ").dec(i).newline();
    }
    assert!(sink.failed());
    close(rx);
    close(tx);
}

#[test]
fn an_fd_sink_gives_up_on_a_full_pipe_even_when_signals_keep_interrupting_its_wait() {
    // A sampled thread's timer interrupts poll(2) every millisecond or so,
    // and poll is never restarted: a wait restarted in full after each
    // signal never ended (the report held its turn for good).
    let [rx, tx] = full_nonblocking_pipe();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let every = std::time::Duration::from_micros(500);
        let failed = crate::sys::interrupted_every(every, || {
            let mut sink = FdSink::new(tx);
            Markup::new(&mut sink).text("line").newline();
            sink.failed()
        });
        done_tx.send(failed).unwrap();
    });
    // Far longer than the wait; without a bound the writer never answers.
    let failed = done_rx.recv_timeout(std::time::Duration::from_secs(30));
    assert_eq!(failed, Ok(true), "the sink still waits under signals");
    writer.join().unwrap();
    close(rx);
    close(tx);
}
