//! What is wrong with a `.eh_frame` or `.eh_frame_hdr`.

/// What is wrong with the data. Offsets count from the start of the
/// section they are in (`.eh_frame`, or `.eh_frame_hdr` for
/// [`Error::BadHeader`] and the index's errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The data ends inside a structure.
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// A pointer encoding this reader does not know, `omit` where a value
    /// is needed, a base the context lacks, or `indirect` where an address
    /// is needed.
    BadEncoding {
        /// The encoding byte.
        encoding: u8,
        /// Where the value is.
        offset: usize,
    },
    /// An `.eh_frame_hdr` with a version other than 1.
    BadHeader {
        /// The version found.
        version: u8,
    },
    /// A CIE version other than 1, 3 or 4.
    UnsupportedVersion {
        /// The version found.
        version: u8,
        /// Where the CIE is.
        offset: usize,
    },
    /// A CIE whose augmentation is neither empty nor starts with `z`, so
    /// its instructions cannot be found.
    UnknownAugmentation {
        /// Where the CIE is.
        offset: usize,
    },
    /// A version 4 CIE with an address size other than 8 or a segment
    /// selector.
    UnsupportedAddressSize {
        /// Where the CIE is.
        offset: usize,
    },
    /// A register number past 65535.
    BadRegister {
        /// Where the CIE or instruction is.
        offset: usize,
    },
    /// The record at an offset is an FDE where a CIE was expected.
    NotACie {
        /// Where the record is.
        offset: usize,
    },
    /// The record at an offset is a CIE where an FDE was expected.
    NotAnFde {
        /// Where the record is.
        offset: usize,
    },
    /// An FDE's CIE pointer leads outside the section or to no CIE.
    BadCiePointer {
        /// Where the FDE is.
        offset: usize,
    },
    /// An FDE's range runs past the end of the address space.
    AddressOverflow {
        /// Where the FDE is.
        offset: usize,
    },
    /// A `DW_CFA_*` opcode this reader does not know.
    UnknownOpcode {
        /// The opcode.
        opcode: u8,
        /// Where it is.
        offset: usize,
    },
    /// An instruction that makes no sense where it is: an advance in a CIE
    /// or backwards, a CFA offset or register change while the CFA is an
    /// expression.
    BadInstruction {
        /// Where it is.
        offset: usize,
    },
    /// More nested `DW_CFA_remember_state` than [`MAX_STATE_DEPTH`](super::MAX_STATE_DEPTH).
    StateStackOverflow {
        /// Where it is.
        offset: usize,
    },
    /// `DW_CFA_restore_state` with nothing remembered.
    StateStackUnderflow {
        /// Where it is.
        offset: usize,
    },
    /// The index points at an FDE outside `.eh_frame`.
    IndexOutOfBounds {
        /// The index entry.
        entry: usize,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::Truncated { what, offset } => write!(f, "{what} at {offset:#x} is truncated"),
            Error::BadEncoding { encoding, offset } => {
                write!(
                    f,
                    "pointer encoding {encoding:#x} at {offset:#x} is unusable"
                )
            }
            Error::BadHeader { version } => {
                write!(f, ".eh_frame_hdr version {version} is not 1")
            }
            Error::UnsupportedVersion { version, offset } => {
                write!(f, "CIE at {offset:#x} has version {version}")
            }
            Error::UnknownAugmentation { offset } => {
                write!(f, "CIE at {offset:#x} has an unknown augmentation")
            }
            Error::UnsupportedAddressSize { offset } => {
                write!(f, "CIE at {offset:#x} has an unsupported address size")
            }
            Error::BadRegister { offset } => {
                write!(f, "register number at {offset:#x} is out of range")
            }
            Error::NotACie { offset } => write!(f, "record at {offset:#x} is not a CIE"),
            Error::NotAnFde { offset } => write!(f, "record at {offset:#x} is not an FDE"),
            Error::BadCiePointer { offset } => {
                write!(f, "FDE at {offset:#x} points to no CIE")
            }
            Error::AddressOverflow { offset } => {
                write!(f, "FDE at {offset:#x} runs past the address space")
            }
            Error::UnknownOpcode { opcode, offset } => {
                write!(f, "unknown CFA opcode {opcode:#x} at {offset:#x}")
            }
            Error::BadInstruction { offset } => {
                write!(f, "CFA instruction at {offset:#x} is out of place")
            }
            Error::StateStackOverflow { offset } => {
                write!(f, "remember_state at {offset:#x} nests too deep")
            }
            Error::StateStackUnderflow { offset } => {
                write!(f, "restore_state at {offset:#x} has no state to restore")
            }
            Error::IndexOutOfBounds { entry } => {
                write!(f, ".eh_frame_hdr entry {entry} points outside .eh_frame")
            }
        }
    }
}
