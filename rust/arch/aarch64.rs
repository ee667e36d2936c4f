//! aarch64 (AAPCS64): DWARF columns 0-30 for x0-x30, 31 for sp; x30 (lr) is
//! the return-address column. The pc has no column of its own.

use super::PerfReg;

pub const SP: u16 = 31;
pub const FP: u16 = 29;
pub const RA: u16 = 30;

// x19-x29 are callee-saved, and x30 keeps its value when the CIE says
// nothing (a leaf function's return address is still in lr): see
// `Arch::same_value_mask`.

/// User-space addresses fit in 48 bits; bits above hold PAC signatures.
pub const USER_ADDRESS_MASK: u64 = (1 << 48) - 1;

pub const NAMES: [&str; 32] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "x29", "x30", "sp",
];

/// `pr_reg` of a core's NT_PRSTATUS: the kernel's `struct user_pt_regs`
/// (arch/arm64/include/uapi/asm/ptrace.h), 34 words.
pub const PRSTATUS_REGS: [&str; 34] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "x29", "x30", "sp", "pc", "pstate",
];

pub fn register_by_name(name: &str) -> Option<Option<u16>> {
    match name {
        "pc" => Some(None),
        "fp" => Some(Some(FP)),
        "lr" => Some(Some(RA)),
        _ => NAMES.iter().position(|n| *n == name).map(|i| Some(i as u16)),
    }
}

/// perf's user registers: x0..x30, sp, pc, with the DWARF numbering of
/// x0..x30, sp.
pub fn perf_reg(index: u32) -> PerfReg {
    match index {
        0..=31 => PerfReg::Column(index as u16),
        32 => PerfReg::Pc,
        _ => PerfReg::Ignored,
    }
}

/// One instruction: the `bl` or `blr` that made a return address.
pub const CALL_WINDOW: usize = 4;

fn last_insn(code: &[u8]) -> Option<u32> {
    let n = code.len();
    Some(u32::from_le_bytes(code.get(n.checked_sub(4)?..)?.try_into().ok()?))
}

/// `code` ends with `bl`, `blr` or a pointer-authenticating `blraa`/`blrab`/`blraaz`/`blrabz`.
pub fn call_before(code: &[u8]) -> bool {
    last_insn(code).is_some_and(|insn| {
        insn & 0xfc00_0000 == 0x9400_0000 // bl imm26
            || insn & 0xffff_fc1f == 0xd63f_0000 // blr xn
            || insn & 0xfeff_f800 == 0xd63f_0800 // blraa, blrab, blraaz, blrabz
    })
}

/// The code at the start of a signal trampoline (the vdso's
/// `__kernel_rt_sigreturn`, musl's `__restore_rt`): `mov x8, #139; svc #0`.
pub const SIGRETURN: [&[u8]; 1] = [&[0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4]];

/// The target of a `bl` ending `code`, the bytes right before `return_address`.
pub fn direct_call_target(return_address: u64, code: &[u8]) -> Option<u64> {
    let insn = last_insn(code)?;
    if insn & 0xfc00_0000 != 0x9400_0000 {
        return None;
    }
    // imm26, in words, sign-extended.
    let offset = (((insn & 0x03ff_ffff) << 6) as i32 >> 6) as i64 * 4;
    Some(return_address.wrapping_sub(4).wrapping_add(offset as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_recognised() {
        let le = |i: u32| i.to_le_bytes();
        assert!(call_before(&le(0x9400_0010))); // bl +0x40
        assert!(call_before(&le(0xd63f_0060))); // blr x3
        assert!(call_before(&le(0xd63f_087f))); // blraaz x3
        assert!(!call_before(&le(0xd65f_03c0))); // ret
        assert!(!call_before(&le(0x1400_0010))); // b +0x40
        assert!(!call_before(&[0x94]));
        assert_eq!(direct_call_target(0x1004, &le(0x9400_0010)), Some(0x1040));
        assert_eq!(direct_call_target(0x1004, &le(0x97ff_ffff)), Some(0xffc)); // bl -4
        assert_eq!(direct_call_target(0x1004, &le(0xd63f_0060)), None);
    }
}
