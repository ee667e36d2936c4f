//! x86_64 (System V psABI): DWARF columns 0-16, 16 being the return address.

use super::PerfReg;

pub const SP: u16 = 7;
pub const FP: u16 = 6;
pub const RA: u16 = 16;

/// rbx, rbp, r12-r15 survive calls; everything else is caller-saved.
pub const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];

pub const NAMES: [&str; 17] = [
    "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip",
];

/// `pr_reg` of a core's NT_PRSTATUS: the kernel's `struct user_regs_struct`
/// (arch/x86/include/asm/user_64.h), 27 words.
pub const PRSTATUS_REGS: [&str; 27] = [
    "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi",
    "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds", "es", "fs",
    "gs",
];

pub fn register_by_name(name: &str) -> Option<Option<u16>> {
    if name == "rip" {
        return Some(None);
    }
    NAMES.iter().position(|n| *n == name).map(|i| Some(i as u16))
}

/// perf's user registers: ax bx cx dx si di bp sp ip flags cs ss ds es fs
/// gs r8..r15.
pub fn perf_reg(index: u32) -> PerfReg {
    match index {
        0 => PerfReg::Column(0),
        1 => PerfReg::Column(3),
        2 => PerfReg::Column(2),
        3 => PerfReg::Column(1),
        4..=7 => PerfReg::Column(index as u16),
        8 => PerfReg::Pc,
        16..=23 => PerfReg::Column(index as u16 - 8),
        _ => PerfReg::Ignored,
    }
}

/// The highest user-space address: the lower canonical half of 48-bit addressing.
pub const USER_MAX: u64 = (1 << 47) - 1;

/// The longest call instruction looked for: `ff /2` with a SIB byte and a 32-bit displacement.
pub const CALL_WINDOW: usize = 7;

/// The length of an `ff /2` (indirect call) instruction from its ModRM byte
/// on, given the ModRM byte and the SIB byte after it.
fn indirect_call_len(modrm: u8, sib: Option<u8>) -> usize {
    let (md, rm) = (modrm >> 6, modrm & 7);
    match (md, rm) {
        (3, _) => 2,
        (0, 4) => match sib {
            Some(s) if s & 7 == 5 => 7, // SIB without a base: disp32
            _ => 3,
        },
        (0, 5) => 6, // rip + disp32
        (0, _) => 2,
        (1, 4) => 4,
        (1, _) => 3,
        (2, 4) => 7,
        _ => 6,
    }
}

/// `code` ends with `call rel32` (e8) or `call r/m64` (ff /2, any addressing form).
pub fn call_before(code: &[u8]) -> bool {
    let n = code.len();
    if n >= 5 && code[n - 5] == 0xe8 {
        return true;
    }
    (2..=CALL_WINDOW.min(n)).any(|len| {
        let at = n - len;
        let modrm = code[at + 1];
        code[at] == 0xff
            && (modrm >> 3) & 7 == 2
            && indirect_call_len(modrm, code.get(at + 2).copied()) == len
    })
}

/// The code at the start of a signal trampoline, where a handler returns:
/// `mov $15, %rax; syscall` (rt_sigreturn; glibc's and musl's `__restore_rt`)
/// or its `mov $15, %eax` form (Go's `runtime.sigreturn`).
pub const SIGRETURN: [&[u8]; 2] =
    [&[0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05], &[0xb8, 0x0f, 0, 0, 0, 0x0f, 0x05]];

/// The target of a `call rel32` ending `code`, the bytes right before `return_address`.
pub fn direct_call_target(return_address: u64, code: &[u8]) -> Option<u64> {
    let n = code.len();
    if n < 5 || code[n - 5] != 0xe8 {
        return None;
    }
    let rel = i32::from_le_bytes(code[n - 4..].try_into().ok()?);
    Some(return_address.wrapping_add(i64::from(rel) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_recognised() {
        assert!(call_before(&[0x90, 0x90, 0xe8, 1, 2, 3, 4])); // call rel32
        assert!(call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xd0])); // call rax
        assert!(call_before(&[0x90, 0x90, 0x90, 0x90, 0x41, 0xff, 0xd3])); // call r11
        assert!(call_before(&[0x90, 0xff, 0x15, 1, 2, 3, 4])); // call [rip + x]
        assert!(call_before(&[0x90, 0x90, 0x90, 0x90, 0xff, 0x50, 0x08])); // call [rax + 8]
        assert!(call_before(&[0x90, 0x90, 0x90, 0xff, 0x54, 0x24, 0x08])); // call [rsp + 8]
        assert!(call_before(&[0xff, 0x94, 0xc8, 1, 2, 3, 4])); // call [rax + rcx*8 + x]
        assert!(!call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xe0])); // jmp rax
        assert!(!call_before(&[0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10])); // mov; sub
        assert!(!call_before(&[]));
        assert_eq!(direct_call_target(0x1005, &[0x90, 0x90, 0xe8, 0x0b, 0, 0, 0]), Some(0x1010));
        let back = [0x90, 0x90, 0xe8, 0xfb, 0xff, 0xff, 0xff];
        assert_eq!(direct_call_target(0x1005, &back), Some(0x1000));
    }
}
