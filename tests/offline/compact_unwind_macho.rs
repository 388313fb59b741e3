//! The Mach-O header reader against the `object` crate, on every fixture
//! linked by ld64.lld-16: segments, the sections the macOS module table
//! looks for, and the UUID; then the module the macOS table makes of each
//! image, and the markup a report writes for it.

use std::fmt::Write;

use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};
use stackmark::formats::compact_unwind::UnwindInfo;
use stackmark::formats::elf::{PF_R, PF_W, PF_X};
use stackmark::formats::macho::{self, MachO};
use stackmark::markup::{Markup, Scope, SliceSink};
use stackmark::modules::Segment;
use stackmark::{Frame, Method};

use crate::macho_support;
use macho_support::fixtures;

#[test]
fn fixture_headers_read_as_the_object_crate_reads_them() {
    let mut checked = 0;
    for (path, data) in fixtures() {
        let file = object::File::parse(&*data).unwrap();
        let size = macho::header_size(&data).unwrap();
        assert!(size < data.len());
        let m = MachO::parse(&data[..size]).unwrap();
        let want_cpu = match file.architecture() {
            object::Architecture::X86_64 => macho::CPU_TYPE_X86_64,
            object::Architecture::Aarch64 => macho::CPU_TYPE_ARM64,
            a => panic!("{a:?}"),
        };
        assert_eq!(m.cpu_type(), want_cpu);

        let got: Vec<_> = m
            .segments()
            .map(|s| {
                let name = String::from_utf8(s.name().to_vec()).unwrap();
                (name, s.vmaddr, s.vmsize, s.fileoff, s.filesize, s.initprot)
            })
            .collect();
        let want: Vec<_> = file
            .segments()
            .map(|s| {
                let (off, len) = s.file_range();
                let SegmentFlags::MachO { initprot, .. } = s.flags() else {
                    panic!()
                };
                let name = s.name().unwrap().unwrap().to_string();
                (name, s.address(), s.size(), off, len, initprot)
            })
            .collect();
        assert_eq!(got, want, "{}", path.display());
        assert_eq!(got[0].0, "__TEXT");
        assert_eq!(
            got[0].5,
            macho::VM_PROT_READ | macho::VM_PROT_EXECUTE,
            "{}",
            path.display()
        );

        for (seg, sect) in [
            ("__TEXT", "__unwind_info"),
            ("__TEXT", "__text"),
            ("__TEXT", "__eh_frame"),
        ] {
            let got = m.section(seg.as_bytes(), sect.as_bytes());
            let want = file.section_by_name(sect).map(|s| macho::Section {
                addr: s.address(),
                size: s.size(),
                offset: s.file_range().map_or(0, |r| r.0 as u32),
            });
            assert_eq!(got, want, "{} {sect}", path.display());
        }
        assert!(m.section(b"__DATA", b"__unwind_info").is_none());

        // Loaded with its header at `mh`, the image slid by `mh` less the
        // link-time address of `__TEXT`, where the header is.
        let text = file.segments().find(|s| s.name() == Ok(Some("__TEXT")));
        let mh = 0x1_2345_0000 + text.unwrap().address();
        assert_eq!(m.slide_at(mh), Some(0x1_2345_0000), "{}", path.display());
        // The fixtures are dylibs, linked at 0; an executable's `__TEXT`
        // is linked at 4 GiB. The same header with that address:
        let mut exe = data[..size].to_vec();
        let at = exe.windows(8).position(|w| w == b"__TEXT\0\0").unwrap() + 16;
        exe[at..at + 8].copy_from_slice(&0x1_0000_0000u64.to_le_bytes());
        let exe = MachO::parse(&exe).unwrap();
        assert_eq!(exe.slide_at(0x1_2345_0000), Some(0x2345_0000));

        let uuid = file.mach_uuid().unwrap().expect("LC_UUID");
        assert_eq!(m.uuid(), Some(uuid), "{}", path.display());
        checked += 1;
    }
    assert_eq!(checked, 8, "fixtures in {}", macho_support::dir().display());
}

/// The macOS module table makes each image a module from its header
/// (`os::macho_module`): the slide as the bias, every segment but
/// `__PAGEZERO` and `__LINKEDIT` where the slide puts it, with its initial
/// protection, and the `LC_UUID` as the build ID. A report then names the
/// image by its UUID, gives one mmap per segment, and writes `bt` elements
/// for the frames inside it. The expected lines come from the `object`
/// crate's reading of the file.
#[test]
fn each_image_becomes_a_module_named_by_its_uuid_with_an_mmap_per_segment() {
    const SLIDE: u64 = 0x1_0a34_c000;
    for (path, data) in fixtures() {
        let name = path.file_name().unwrap().to_str().unwrap();
        let file = object::File::parse(&*data).unwrap();
        let image = MachO::parse(&data[..macho::header_size(&data).unwrap()]).unwrap();
        let path = format!("/Applications/Demo.app/Contents/Frameworks/{name}");
        let module = stackmark::discover::macho_module(&image, SLIDE, path.as_bytes());

        assert_eq!(module.name(), path.as_bytes());
        assert_eq!(module.bias, SLIDE);
        let uuid = file.mach_uuid().unwrap().unwrap();
        assert_eq!(module.build_id(), uuid, "{name}");
        let mut want = Vec::new();
        let mut mmaps = String::new();
        for s in file.segments() {
            let SegmentFlags::MachO { initprot, .. } = s.flags() else {
                panic!()
            };
            if initprot == 0 || s.name().unwrap() == Some("__LINKEDIT") {
                continue;
            }
            let bit = |b: u32, f: u32| if initprot & b != 0 { f } else { 0 };
            want.push(Segment {
                start: SLIDE + s.address(),
                size: s.size(),
                vaddr: s.address(),
                flags: bit(1, PF_R) | bit(2, PF_W) | bit(4, PF_X),
            });
            let letters: String = [(1, 'r'), (2, 'w'), (4, 'x')]
                .iter()
                .filter(|(b, _)| initprot & b != 0)
                .map(|(_, c)| *c)
                .collect();
            writeln!(
                mmaps,
                "{{{{{{mmap:{:#018x}:{:#x}:load:0:{letters}:{:#018x}}}}}}}",
                SLIDE + s.address(),
                s.size(),
                s.address()
            )
            .unwrap();
        }
        assert_eq!(module.segments(), want, "{name}");
        assert!(module.segments()[0].executable(), "{name}: __TEXT first");

        // The dylibs link __TEXT, and so the mach_header, at 0: function
        // offsets are addresses. Frame 0 at a function's first instruction,
        // frame 1 a return address at the end of the next one, frame 2 below
        // the image.
        let section = file.section_by_name("__unwind_info").unwrap();
        let info = UnwindInfo::parse(section.data().unwrap()).unwrap();
        let e = info.entries().nth(1).unwrap();
        let frames = [
            Frame {
                pc: SLIDE + u64::from(e.func_start),
                sp: 0,
                pc_kind: stackmark::PcKind::Exact,
                method: Method::Context,
            },
            Frame {
                pc: SLIDE + u64::from(e.func_end),
                sp: 0,
                pc_kind: stackmark::PcKind::ReturnAddress,
                method: Method::CompactUnwind,
            },
            Frame {
                pc: SLIDE - 0x1000,
                sp: 0,
                pc_kind: stackmark::PcKind::ReturnAddress,
                method: Method::Scan,
            },
        ];
        let mut buf = vec![0u8; 4096];
        let mut sink = SliceSink::new(&mut buf);
        Markup::new(&mut sink).backtrace(&[module], &frames, Scope::TraceModules);
        let got = std::str::from_utf8(sink.as_bytes()).unwrap();
        let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
        let expected = format!(
            "{{{{{{reset}}}}}}\n\
             {{{{{{module:0:{path}:elf:{hex}}}}}}}\n\
             {mmaps}\
             {{{{{{bt:0:{:#018x}:pc}}}}}} context\n\
             {{{{{{bt:1:{:#018x}:ra}}}}}} compact\n\
             #2 {:#018x} ?? scan\n",
            frames[0].pc, frames[1].pc, frames[2].pc
        );
        assert_eq!(got, expected, "{name}");
    }
}
