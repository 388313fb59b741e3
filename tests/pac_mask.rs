//! Pointer-authentication signatures are stripped from return addresses
//! above the user-address bits of the kernel the walk runs on, not above a
//! fixed 48: a kernel with a 39-bit user space puts them from bit 39 up.
//! One test, so that nothing else in this process sees the mask change.

use stackmark::arch::aarch64;

#[test]
fn signatures_are_stripped_above_the_user_address_bits_of_the_kernel() {
    // The highest bit of an address at the top of user space gives its size.
    for (top, bits) in [
        (0xffff_f7ff_e000u64, 48),
        (0x7fff_ffff_f000, 47),
        (0x3ff_fff0_0000, 42),
        (0x7f_ffa0_0000, 39),
        (0xf_fff0_0000, 36),
        (0x1000, 36),
        (u64::MAX, 48),
    ] {
        assert_eq!(aarch64::user_address_bits(top), bits, "{top:#x}");
    }

    // A return address in a 39-bit user space, signed in bits 39 to 54.
    let ra = 0x7f_9a12_3454u64;
    let signed = ra | 0x002a_5a80_0000_0000;
    aarch64::set_user_address_bits(48);
    assert_ne!(
        aarch64::strip_pac(signed),
        ra,
        "a 48-bit mask keeps bits 39-47 of the signature"
    );
    aarch64::set_user_address_bits(39);
    assert_eq!(aarch64::strip_pac(signed), ra);
    aarch64::set_user_address_bits(aarch64::user_address_bits(u64::MAX));
    assert_eq!(aarch64::user_address_mask(), (1 << 48) - 1);

    // On this machine, `init` sizes the mask from the top of the initial
    // stack, and walks still find their callers through it.
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    {
        aarch64::set_user_address_bits(36);
        stackmark::init().expect("init");
        // SAFETY: getauxval only reads the auxiliary vector.
        let top = unsafe { libc::getauxval(libc::AT_EXECFN) };
        let bits = aarch64::user_address_bits(top);
        assert_eq!(aarch64::user_address_mask(), (1 << bits) - 1);
        let mut frames = [stackmark::Frame::default(); 64];
        let n = stackmark::walk_here(&mut frames);
        assert!(n >= 3, "{:x?}", &frames[..n]);
        assert!(
            frames[..n].iter().all(|f| f.pc >> bits == 0),
            "{bits} bits: {:x?}",
            &frames[..n]
        );
    }
}
