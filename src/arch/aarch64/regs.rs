//! The registers the walk tracks on AArch64, and the pointer-authentication
//! bits a code address may carry.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The registers the walk tracks on AArch64: pc, sp, the frame record
/// registers x29/x30 and the callee-saved x19-x28. The layout is fixed
/// because the capture routine writes it from assembly.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// Program counter.
    pub pc: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (x29).
    pub fp: u64,
    /// Link register (x30).
    pub lr: u64,
    /// Callee-saved x19 to x28, in order.
    pub x19_x28: [u64; 10],
}

impl Regs {
    /// The value of DWARF register `reg` (x0-x30 = 0-30, sp = 31), if the
    /// walk tracks it.
    pub fn dwarf(&self, reg: u16) -> Option<u64> {
        Some(match reg {
            19..=28 => self.x19_x28[usize::from(reg - 19)],
            29 => self.fp,
            30 => self.lr,
            31 => self.sp,
            _ => return None,
        })
    }
}

/// The bits of a user-space code address until told otherwise: 48 on
/// Linux (the widest user space a process gets without asking for 52-bit
/// addresses); 47 on Apple platforms, whose user addresses lie below
/// `MACH_VM_MAX_ADDRESS` (`0x7fff_fe00_0000`) and whose arm64e signatures
/// start at bit 47.
pub const USER_ADDRESS_MASK: u64 = if cfg!(target_vendor = "apple") {
    (1 << 47) - 1
} else {
    (1 << 48) - 1
};

/// The mask [`strip_pac`] applies: [`USER_ADDRESS_MASK`], or what
/// [`set_user_address_bits`] made it.
static USER_MASK: AtomicU64 = AtomicU64::new(USER_ADDRESS_MASK);

/// The fewest and most user-address bits of a Linux kernel: 36 (16 KiB
/// pages, two levels) to 48 (without opting in to 52-bit addresses).
const USER_BITS: core::ops::RangeInclusive<u32> = 36..=48;

/// How many bits the user addresses of a Linux kernel take, from an
/// address at the top of its user space (the initial stack lies just below
/// the top, less at most 1 GiB of randomisation, so its highest bit is the
/// highest of user space): 36 to 48.
pub fn user_address_bits(top: u64) -> u32 {
    (64 - top.leading_zeros()).clamp(*USER_BITS.start(), *USER_BITS.end())
}

/// Makes [`strip_pac`] keep the low `bits` bits (36 to 48) of a code
/// address: a kernel with a smaller user space (39 bits is a common
/// configuration) puts signatures from that bit up.
pub fn set_user_address_bits(bits: u32) {
    let bits = bits.clamp(*USER_BITS.start(), *USER_BITS.end());
    USER_MASK.store((1 << bits) - 1, Relaxed);
}

/// The mask [`strip_pac`] applies.
#[inline(always)]
pub fn user_address_mask() -> u64 {
    USER_MASK.load(Relaxed)
}

/// Removes pointer-authentication bits from a code address.
///
/// A signed pointer keeps its PAC in the bits above the user address
/// ([`user_address_mask`]). Clearing them is what `xpaci` does for a user
/// address, without needing the instruction (or a CPU that has it).
#[inline(always)]
pub fn strip_pac(addr: u64) -> u64 {
    addr & user_address_mask()
}
