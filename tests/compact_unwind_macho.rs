//! The Mach-O header reader against the `object` crate, on every fixture
//! linked by ld64.lld-16: segments, the sections the macOS module table
//! looks for, and the UUID.

use std::path::Path;

use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};
use stackmark::formats::macho::{self, MachO};

#[test]
fn fixture_headers_read_as_the_object_crate_reads_them() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/macho");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("dylib") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
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

        let uuid = file.mach_uuid().unwrap().expect("LC_UUID");
        assert_eq!(m.uuid(), Some(uuid), "{}", path.display());
        checked += 1;
    }
    assert_eq!(checked, 8, "fixtures in {}", dir.display());
}
