//! A crash report's register dump (the registers come from
//! `arch::all_registers`).

use super::{Markup, Sink};

/// Writes a crash report's register dump: `name value` pairs, four to a
/// line, each line marked as the report's.
pub fn write_registers<S: Sink>(m: &mut Markup<'_, S>, regs: &[(&str, u64)]) {
    let mut regs = regs.iter().copied().enumerate().peekable();
    while let Some((i, (name, value))) = regs.next() {
        m.text(if i % 4 == 0 { "stackmark:   " } else { "  " });
        m.text(name).text(" ").hex(value);
        if i % 4 == 3 || regs.peek().is_none() {
            m.newline();
        }
    }
}
