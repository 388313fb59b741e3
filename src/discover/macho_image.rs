//! The module-table entry for a loaded Mach-O image, made from its header
//! alone: what the macOS module table records of each image dyld lists.
//! Pure and OS-independent, so it is checked on any host against the
//! Mach-O fixtures (`tests/offline/compact_unwind_macho.rs`).

use crate::formats::elf::{PF_R, PF_W, PF_X};
use crate::formats::macho::{MachO, VM_PROT_EXECUTE, VM_PROT_READ, VM_PROT_WRITE};
use crate::modules::{Module, Segment};

/// The segment flags (`PF_R`, `PF_W`, `PF_X`) for a Mach-O protection.
fn flags(prot: u32) -> u32 {
    let mut f = 0;
    if prot & VM_PROT_READ != 0 {
        f |= PF_R;
    }
    if prot & VM_PROT_WRITE != 0 {
        f |= PF_W;
    }
    if prot & VM_PROT_EXECUTE != 0 {
        f |= PF_X;
    }
    f
}

/// The module for `image`, loaded `slide` bytes above its link-time
/// addresses under the path `name`: the slide as the bias, one segment per
/// `LC_SEGMENT_64` at `slide + vmaddr` with its initial protection, except
/// `__PAGEZERO` (no access) and `__LINKEDIT` (the shared cache's images
/// share one, and the symbolizer rejects overlapping mmaps), and the
/// `LC_UUID` as the build ID. The caller adds the `__unwind_info` copy.
pub fn macho_module(image: &MachO<'_>, slide: u64, name: &[u8]) -> Module {
    let mut m = Module::EMPTY;
    m.set_name(name);
    m.bias = slide;
    for s in image.segments() {
        if s.initprot == 0 || s.name() == b"__LINKEDIT" {
            continue;
        }
        m.push_segment(Segment {
            start: slide.wrapping_add(s.vmaddr),
            size: s.vmsize,
            vaddr: s.vmaddr,
            flags: flags(s.initprot),
        });
    }
    if let Some(id) = image.uuid() {
        m.set_build_id(&id);
    }
    m
}
