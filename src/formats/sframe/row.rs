//! The typed result of an SFrame lookup: which rules recover the caller.
//!
//! These types are shared with the walker (`crate::arch`), which applies them
//! to registers. They name registers the way SFrame does: the stack pointer,
//! the frame pointer, or (in version 3 FLEX FDEs) a DWARF register number.

/// The architecture an SFrame section describes (`sfh_abi_arch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abi {
    /// `SFRAME_ABI_AARCH64_ENDIAN_BIG` (1).
    Aarch64BigEndian,
    /// `SFRAME_ABI_AARCH64_ENDIAN_LITTLE` (2).
    Aarch64LittleEndian,
    /// `SFRAME_ABI_AMD64_ENDIAN_LITTLE` (3).
    Amd64LittleEndian,
    /// `SFRAME_ABI_S390X_ENDIAN_BIG` (4).
    S390xBigEndian,
}

/// How to compute the canonical frame address (CFA): the caller's stack pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CfaRule {
    /// `CFA = SP + offset`.
    SpPlus(i32),
    /// `CFA = FP + offset`.
    FpPlus(i32),
    /// `CFA = reg + offset`, with `reg` a DWARF register number (FLEX FDEs).
    RegPlus {
        /// DWARF register number.
        reg: u16,
        /// Byte offset added to the register.
        offset: i32,
    },
    /// `CFA = *(reg + offset)`, with `reg` a DWARF register number (FLEX FDEs).
    AtRegPlus {
        /// DWARF register number.
        reg: u16,
        /// Byte offset added to the register before the load.
        offset: i32,
    },
}

/// How to recover a saved register (the return address or the frame pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegRule {
    /// The value cannot be recovered. For the return address this marks the
    /// outermost frame (an "RA undefined" row): the walk stops.
    Undefined,
    /// The register still holds the caller's value: the FP was not saved, or
    /// on AArch64 the return address is still in x30 (LR).
    SameValue,
    /// `value = *(CFA + offset)`.
    AtCfa(i32),
    /// `value = reg + offset`, with `reg` a DWARF register number (FLEX FDEs).
    RegPlus {
        /// DWARF register number.
        reg: u16,
        /// Byte offset added to the register.
        offset: i32,
    },
    /// `value = *(reg + offset)`, with `reg` a DWARF register number (FLEX FDEs).
    AtRegPlus {
        /// DWARF register number.
        reg: u16,
        /// Byte offset added to the register before the load.
        offset: i32,
    },
}

/// The unwind row that applies at one pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Runtime address of the function's first instruction.
    pub func_start: u64,
    /// Size of the function in bytes.
    pub func_size: u32,
    /// Runtime address where this row starts to apply.
    pub row_start: u64,
    /// How to compute the CFA.
    pub cfa: CfaRule,
    /// How to recover the return address.
    pub ra: RegRule,
    /// How to recover the frame pointer.
    pub fp: RegRule,
    /// The saved return address carries pointer-authentication bits (AArch64
    /// "mangled RA"): strip them before use.
    pub mangled_ra: bool,
    /// The function is a signal trampoline (version 3 signal-frame attribute).
    pub signal_frame: bool,
}

impl Row {
    /// Whether a rule of this row names a register by its DWARF number
    /// (FLEX rows: the CFA, return address or frame pointer from any
    /// register), beyond the stack and frame pointers the plain rules use.
    ///
    /// ```
    /// use stackmark::formats::sframe::{CfaRule, RegRule, Row};
    /// let mut row = Row {
    ///     func_start: 0x1000,
    ///     func_size: 0x10,
    ///     row_start: 0x1000,
    ///     cfa: CfaRule::SpPlus(8),
    ///     ra: RegRule::AtCfa(-8),
    ///     fp: RegRule::SameValue,
    ///     mangled_ra: false,
    ///     signal_frame: false,
    /// };
    /// assert!(!row.names_registers());
    /// row.cfa = CfaRule::RegPlus { reg: 3, offset: 16 };
    /// assert!(row.names_registers());
    /// ```
    pub fn names_registers(&self) -> bool {
        let named = |r: RegRule| matches!(r, RegRule::RegPlus { .. } | RegRule::AtRegPlus { .. });
        matches!(
            self.cfa,
            CfaRule::RegPlus { .. } | CfaRule::AtRegPlus { .. }
        ) || named(self.ra)
            || named(self.fp)
    }
}
