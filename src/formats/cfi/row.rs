//! A CFI row in the walker's terms: the [`Row`] an SFrame lookup gives.

use super::program::{Cfa, CfiRow, Rule};
use super::{Cie, Error, Fde};
use crate::formats::sframe::{CfaRule, RegRule, Row};

/// The DWARF numbers of the registers a walk tracks on one architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registers {
    /// The stack pointer.
    pub sp: u16,
    /// The frame pointer.
    pub fp: u16,
    /// The return address column a walk's "return address unchanged"
    /// ([`RegRule::SameValue`]) stands for: the link register where there is
    /// one. A CIE may name another column (glibc's AArch64 `rawmemchr`
    /// keeps its return address in `x15`); a row that leaves that column
    /// unchanged gives the return address as that register's value.
    pub ra: u16,
}

impl Registers {
    /// x86_64: `rsp` is 7, `rbp` 6, the return address column 16.
    pub const X86_64: Registers = Registers {
        sp: 7,
        fp: 6,
        ra: 16,
    };
    /// AArch64: `sp` is 31, `x29` 29, the link register `x30` 30.
    pub const AARCH64: Registers = Registers {
        sp: 31,
        fp: 29,
        ra: 30,
    };
}

/// Why a CFI row gives the walker no [`Row`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inexpressible {
    /// The function is a signal trampoline (`S`): the walk crosses those
    /// by their code and the `ucontext` they leave.
    SignalFrame,
    /// The CFA is a DWARF expression.
    CfaExpression,
    /// A CFA offset or a saved register's offset does not fit 32 bits.
    OffsetTooLarge,
    /// The return address's rule is an expression or `CFA + n`.
    ReturnAddressRule,
    /// The frame pointer's rule is an expression or `CFA + n`.
    FramePointerRule,
    /// The function is longer than 4 GiB.
    FunctionTooLarge,
    /// The data is malformed.
    Malformed(Error),
}

impl Inexpressible {
    /// A short name for counts and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Inexpressible::SignalFrame => "signal frame",
            Inexpressible::CfaExpression => "CFA expression",
            Inexpressible::OffsetTooLarge => "offset too large",
            Inexpressible::ReturnAddressRule => "return address rule",
            Inexpressible::FramePointerRule => "frame pointer rule",
            Inexpressible::FunctionTooLarge => "function too large",
            Inexpressible::Malformed(_) => "malformed",
        }
    }
}

/// The walker's form of `row`, from `fde` under `cie`, with the stack
/// pointer, frame pointer and link register numbered as `regs` says.
#[inline]
pub(crate) fn to_row(
    row: &CfiRow,
    fde: &Fde,
    cie: &Cie,
    regs: Registers,
) -> Result<Row, Inexpressible> {
    if cie.signal_frame {
        return Err(Inexpressible::SignalFrame);
    }
    let off32 = |o: i64| i32::try_from(o).map_err(|_| Inexpressible::OffsetTooLarge);
    let cfa = match row.cfa {
        Cfa::Expression => return Err(Inexpressible::CfaExpression),
        Cfa::RegOffset { reg, offset } => {
            let offset = off32(offset)?;
            if reg == regs.sp {
                CfaRule::SpPlus(offset)
            } else if reg == regs.fp {
                CfaRule::FpPlus(offset)
            } else {
                CfaRule::RegPlus { reg, offset }
            }
        }
    };
    // An unspecified return address is still where the call left it: in
    // the link register on AArch64 (x86_64's CIEs always give a rule), or
    // in the register the CIE names as its return address column.
    let rule = |r: Rule, bad: Inexpressible| -> Result<RegRule, Inexpressible> {
        Ok(match r {
            Rule::Unspecified | Rule::SameValue => RegRule::SameValue,
            Rule::Undefined => RegRule::Undefined,
            Rule::Offset(o) => RegRule::AtCfa(off32(o)?),
            Rule::Register(reg) => RegRule::RegPlus { reg, offset: 0 },
            Rule::ValOffset(_) | Rule::Expression | Rule::ValExpression => return Err(bad),
        })
    };
    let ra = match row.ra {
        Rule::Unspecified | Rule::SameValue if cie.ra_register != regs.ra => RegRule::RegPlus {
            reg: cie.ra_register,
            offset: 0,
        },
        r => rule(r, Inexpressible::ReturnAddressRule)?,
    };
    let fp = rule(row.fp, Inexpressible::FramePointerRule)?;
    Ok(Row {
        func_start: fde.pc_begin,
        func_size: u32::try_from(fde.pc_range).map_err(|_| Inexpressible::FunctionTooLarge)?,
        row_start: row.start,
        cfa,
        ra,
        fp,
        mangled_ra: row.ra_signed,
        signal_frame: false,
    })
}
