//! A crash report's register dump, from the signal handler's `ucontext_t`.

#![cfg(any(target_os = "linux", target_os = "macos"))]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use core::ffi::c_int;
use core::ffi::c_void;

use super::{Markup, Sink};

/// The names of AArch64 `x0`..`x30` as crash reports print them.
#[cfg(all(any(target_os = "linux", target_os = "macos"), target_arch = "aarch64"))]
const A64_X_NAMES: [&str; 31] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "fp", "lr",
];

/// Writes a crash report's register dump: `name value` pairs, four to a
/// line, each line marked as the report's.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn write_register_lines<'a, S: Sink>(
    m: &mut Markup<'_, S>,
    regs: impl IntoIterator<Item = (&'a str, u64)>,
) {
    let mut regs = regs.into_iter().enumerate().peekable();
    while let Some((i, (name, value))) = regs.next() {
        m.text(if i % 4 == 0 { "stackmark:   " } else { "  " });
        m.text(name).text(" ").hex(value);
        if i % 4 == 3 || regs.peek().is_none() {
            m.newline();
        }
    }
}

/// The names of x86_64 thread-state registers in Darwin's order.
#[cfg(all(target_os = "macos", target_arch = "x86_64"))]
const X86_NAMES: [&str; 18] = [
    "rax", "rbx", "rcx", "rdx", "rdi", "rsi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip", "rflags",
];

/// Writes the interrupted registers of a Linux x86_64 `ucontext_t`, four to
/// a line.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub unsafe fn write_registers<S: Sink>(m: &mut Markup<'_, S>, uc: *const c_void) {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let g = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext.gregs };
    const NAMES: [(&str, c_int); 18] = [
        ("rax", libc::REG_RAX),
        ("rbx", libc::REG_RBX),
        ("rcx", libc::REG_RCX),
        ("rdx", libc::REG_RDX),
        ("rsi", libc::REG_RSI),
        ("rdi", libc::REG_RDI),
        ("rbp", libc::REG_RBP),
        ("rsp", libc::REG_RSP),
        ("r8", libc::REG_R8),
        ("r9", libc::REG_R9),
        ("r10", libc::REG_R10),
        ("r11", libc::REG_R11),
        ("r12", libc::REG_R12),
        ("r13", libc::REG_R13),
        ("r14", libc::REG_R14),
        ("r15", libc::REG_R15),
        ("rip", libc::REG_RIP),
        ("eflags", libc::REG_EFL),
    ];
    write_register_lines(
        m,
        NAMES
            .iter()
            .map(|&(name, reg)| (name, g[reg as usize] as u64)),
    );
}

/// Writes the interrupted registers of a Linux AArch64 `ucontext_t`, four
/// to a line.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
pub unsafe fn write_registers<S: Sink>(m: &mut Markup<'_, S>, uc: *const c_void) {
    // SAFETY: the caller guarantees `uc` is a valid ucontext_t.
    let mc = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext };
    let extra = [("sp", mc.sp), ("pc", mc.pc), ("pstate", mc.pstate)];
    let x = A64_X_NAMES.into_iter().zip(mc.regs);
    write_register_lines(m, x.chain(extra));
}

/// Writes the interrupted registers of a Darwin x86_64 `ucontext_t`, four
/// to a line.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(all(target_os = "macos", target_arch = "x86_64"))]
pub unsafe fn write_registers<S: Sink>(m: &mut Markup<'_, S>, uc: *const c_void) {
    // SAFETY: forwarded from the caller.
    let s = unsafe { &crate::sys::macos::mcontext(uc).ss };
    write_register_lines(m, X86_NAMES.into_iter().zip(s.iter().copied()));
}

/// Writes the interrupted registers of a Darwin arm64 `ucontext_t`, four to
/// a line.
///
/// # Safety
/// `uc` must point to a valid `ucontext_t`.
#[cfg(all(target_os = "macos", target_arch = "aarch64"))]
pub unsafe fn write_registers<S: Sink>(m: &mut Markup<'_, S>, uc: *const c_void) {
    // SAFETY: forwarded from the caller.
    let mc = unsafe { crate::sys::macos::mcontext(uc) };
    let extra: [(&str, u64); 5] = [
        ("fp", mc.fp),
        ("lr", mc.lr),
        ("sp", mc.sp),
        ("pc", mc.pc),
        ("cpsr", u64::from(mc.cpsr)),
    ];
    let x = A64_X_NAMES[..29].iter().copied().zip(mc.x);
    write_register_lines(m, x.chain(extra));
}
