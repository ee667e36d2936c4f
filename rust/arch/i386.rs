//! i386 (System V i386 psABI, Linux): DWARF columns 0-8, 8 being the
//! return address (`eip`). Linux's `.eh_frame` and `.debug_frame` number
//! esp 4 and ebp 5 alike (only Darwin's `.eh_frame` swapped them), as
//! `readelf --debug-dump=frames-interp` shows for glibc's i386 code.
//! Words and addresses are 4 bytes: every address computed wraps at 32 bits.

use super::PerfReg;

pub const SP: u16 = 4;
pub const FP: u16 = 5;
pub const RA: u16 = 8;

/// ebx, ebp, esi, edi survive calls; eax, ecx, edx are caller-saved.
pub const CALLEE_SAVED: [u16; 4] = [3, 5, 6, 7];

pub const NAMES: [&str; 9] = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"];

/// The 32-bit address space: every address and word is reduced to it.
pub const ADDRESS_MASK: u64 = 0xffff_ffff;

/// `pr_reg` of a core's NT_PRSTATUS: the kernel's `struct user_regs_struct`
/// (arch/x86/include/asm/user_32.h), 17 32-bit words.
pub const PRSTATUS_REGS: [&str; 17] = [
    "ebx", "ecx", "edx", "esi", "edi", "ebp", "eax", "ds", "es", "fs", "gs", "orig_eax", "eip",
    "cs", "eflags", "esp", "ss",
];

pub fn register_by_name(name: &str) -> Option<Option<u16>> {
    if name == "eip" {
        return Some(None);
    }
    NAMES.iter().position(|n| *n == name).map(|i| Some(i as u16))
}

/// The code at the start of a signal trampoline (the vdso's
/// `__kernel_sigreturn`, `__kernel_rt_sigreturn`): `pop %eax; mov $119,
/// %eax; int $0x80` (sigreturn) and `mov $173, %eax; int $0x80`
/// (rt_sigreturn).
pub const SIGRETURN: [&[u8]; 2] =
    [&[0x58, 0xb8, 0x77, 0, 0, 0, 0xcd, 0x80], &[0xb8, 0xad, 0, 0, 0, 0xcd, 0x80]];

/// perf's x86 user registers (a 32-bit process sampled by an x86_64
/// kernel), to i386's DWARF numbering: eax ecx edx ebx esp ebp esi edi.
pub fn perf_reg(index: u32) -> PerfReg {
    match index {
        0 => PerfReg::Column(0),
        1 => PerfReg::Column(3),
        2 => PerfReg::Column(1),
        3 => PerfReg::Column(2),
        4 => PerfReg::Column(6),
        5 => PerfReg::Column(7),
        6 => PerfReg::Column(5),
        7 => PerfReg::Column(4),
        8 => PerfReg::Pc,
        _ => PerfReg::Ignored,
    }
}
