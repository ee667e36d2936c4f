//! 32-bit ARM (AAPCS, Linux's EABI): DWARF columns 0-15 for r0-r15, r13
//! being sp, r14 lr (the return-address column of the CIEs gcc and clang
//! write) and r15 the pc, which is given apart from the columns, as
//! aarch64's is. Code is ARM (4-byte instructions) or Thumb (2 or 4
//! bytes), mixed in one process: a return address into Thumb code has bit 0
//! set, which is cleared before it is a pc. Words and addresses are 4 bytes.

use super::PerfReg;

pub const SP: u16 = 13;
/// ARM code's frame pointer (gcc's and clang's); Thumb code's is r7.
pub const FP: u16 = 11;
pub const RA: u16 = 14;

/// The frame records of ARM code, tried in this order: clang's in ARM code
/// (`push {r11, lr}; mov r11, sp`: r11 at the saved r11, lr above it),
/// gcc's in ARM code (`push {fp, lr}; add fp, sp, #4`: fp at the saved lr,
/// the caller's fp below it), and clang's in Thumb code (`push {r7, lr};
/// mov r7, sp`). gcc's Thumb code points r7 at the bottom of its frame,
/// below its locals, not at a record: nothing to follow there.
pub const FRAME_RECORDS: [super::FrameRecord; 3] = [
    super::FrameRecord::at(FP, 0, 4),
    super::FrameRecord::at(FP, -4, 0),
    super::FrameRecord::at(THUMB_FP, 0, 4),
];
/// Thumb code's frame pointer.
pub const THUMB_FP: u16 = 7;

/// r4-r11 survive calls (AAPCS); lr keeps its value when the CFI says
/// nothing of it (a leaf function returns through it): see
/// `Arch::same_value_mask`.
pub const CALLEE_SAVED: [u16; 9] = [4, 5, 6, 7, 8, 9, 10, 11, RA];

pub const NAMES: [&str; 15] =
    ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "sp", "lr"];

/// The 32-bit address space; a pc's bit 0 (the Thumb bit of a return
/// address) is cleared.
pub const ADDRESS_MASK: u64 = 0xffff_ffff;
pub const CODE_MASK: u64 = 0xffff_fffe;

/// `pr_reg` of a core's NT_PRSTATUS: the kernel's `struct pt_regs`
/// (arch/arm/include/uapi/asm/ptrace.h, `ARM_r0`..`ARM_ORIG_r0`), 18
/// words, as gdb names them.
pub const PRSTATUS_REGS: [&str; 18] = [
    "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11", "r12", "sp", "lr",
    "pc", "cpsr", "orig_r0",
];

pub fn register_by_name(name: &str) -> Option<Option<u16>> {
    match name {
        "pc" | "r15" => Some(None),
        "fp" => Some(Some(FP)),
        "ip" => Some(Some(12)),
        "r13" => Some(Some(SP)),
        "r14" => Some(Some(RA)),
        _ => NAMES.iter().position(|n| *n == name).map(|i| Some(i as u16)),
    }
}

/// perf's user registers (arch/arm/include/uapi/asm/perf_regs.h): r0..r10,
/// fp, ip, sp, lr, pc, in the DWARF numbering but for the pc.
pub fn perf_reg(index: u32) -> PerfReg {
    match index {
        0..=14 => PerfReg::Column(index as u16),
        15 => PerfReg::Pc,
        _ => PerfReg::Ignored,
    }
}

/// The call that made a return address: an ARM `bl`/`blx` or a Thumb-2
/// `bl`/`blx` (4 bytes), or a Thumb `blx rm` (2 bytes).
pub const CALL_WINDOW: usize = 4;

fn half(code: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(code.get(at..at + 2)?.try_into().ok()?))
}

/// The 4 bytes before the return address as an ARM instruction.
fn arm_insn(code: &[u8]) -> Option<u32> {
    let n = code.len();
    Some(u32::from_le_bytes(code.get(n.checked_sub(4)?..)?.try_into().ok()?))
}

/// The 4 bytes before the return address as a Thumb-2 instruction: its two
/// halfwords, the first at the lower address.
fn thumb2_insn(code: &[u8]) -> Option<(u16, u16)> {
    let n = code.len().checked_sub(4)?;
    Some((half(code, n)?, half(code, n + 2)?))
}

/// ARM `bl` (any condition) and `blx imm`; `blx rm`.
fn arm_call(insn: u32) -> bool {
    let cond = insn >> 28;
    (cond != 0xf && insn & 0x0f00_0000 == 0x0b00_0000)
        || insn & 0xfe00_0000 == 0xfa00_0000
        || (cond != 0xf && insn & 0x0fff_fff0 == 0x012f_ff30)
}

/// Thumb-2 `bl` and `blx imm`: 11110 S imm10, then 11 J1 x J2 imm11.
fn thumb2_call((first, second): (u16, u16)) -> bool {
    first & 0xf800 == 0xf000 && second & 0xc000 == 0xc000
}

/// Thumb `blx rm`: 010001111 rm 000.
fn thumb_register_call(insn: u16) -> bool {
    insn & 0xff87 == 0x4780
}

/// Whether `code` ends with a call, in ARM or in Thumb code (the return
/// address, its Thumb bit cleared, does not say which).
pub fn call_before(code: &[u8]) -> bool {
    arm_insn(code).is_some_and(arm_call)
        || thumb2_insn(code).is_some_and(thumb2_call)
        || code.len().checked_sub(2).and_then(|n| half(code, n)).is_some_and(thumb_register_call)
}

/// Whether `code` ends with a call of Thumb code (`thumb`: a return address
/// with bit 0 set, as `bl`/`blx` from Thumb code leave it in lr) or of ARM
/// code (bit 0 clear).
pub fn call_before_in(code: &[u8], thumb: bool) -> bool {
    if thumb {
        thumb2_insn(code).is_some_and(thumb2_call)
            || code
                .len()
                .checked_sub(2)
                .and_then(|n| half(code, n))
                .is_some_and(thumb_register_call)
    } else {
        arm_insn(code).is_some_and(arm_call)
    }
}

/// The code at the start of a signal trampoline: glibc's
/// `__default_sa_restorer` and `__default_rt_sa_restorer` (Thumb-2 in
/// Debian's armhf: `mov.w r7, #119` or `#173`; `svc 0`), the same in ARM
/// code (`mov r7, #n; svc 0`), and the kernel's vector-page codes (ARM
/// `mov r7, #n; swi #0x900000+n`, Thumb `movs r7, #n; svc 0`).
pub const SIGRETURN: [&[u8]; 8] = [
    &[0x4f, 0xf0, 0x77, 0x07, 0x00, 0xdf],
    &[0x4f, 0xf0, 0xad, 0x07, 0x00, 0xdf],
    &[0x77, 0x70, 0xa0, 0xe3, 0x00, 0x00, 0x00, 0xef],
    &[0xad, 0x70, 0xa0, 0xe3, 0x00, 0x00, 0x00, 0xef],
    &[0x77, 0x70, 0xa0, 0xe3, 0x77, 0x00, 0x90, 0xef],
    &[0xad, 0x70, 0xa0, 0xe3, 0xad, 0x00, 0x90, 0xef],
    &[0x77, 0x27, 0x00, 0xdf],
    &[0xad, 0x27, 0x00, 0xdf],
];

/// The target of the direct call ending `code` (the bytes right before
/// `return_address`): an ARM `bl`, or a Thumb-2 `bl`/`blx`. None where the
/// bytes read as both an ARM and a Thumb call, for a return address does not
/// say which its caller's code is.
pub fn direct_call_target(return_address: u64, code: &[u8]) -> Option<u64> {
    let arm = arm_insn(code).filter(|&i| i >> 28 != 0xf && i & 0x0f00_0000 == 0x0b00_0000);
    let thumb = thumb2_insn(code).filter(|&i| thumb2_call(i));
    match (arm, thumb) {
        (Some(insn), None) => {
            // The pc reads 8 bytes past the bl; imm24 counts words.
            let offset = (((insn & 0x00ff_ffff) << 8) as i32 >> 6) as i64;
            Some(return_address.wrapping_add(4).wrapping_add(offset as u64) & ADDRESS_MASK)
        }
        (None, Some((first, second))) => {
            let s = u32::from(first >> 10 & 1);
            let (j1, j2) = (u32::from(second >> 13 & 1), u32::from(second >> 11 & 1));
            let (i1, i2) = (!(j1 ^ s) & 1, !(j2 ^ s) & 1);
            let imm = s << 24
                | i1 << 23
                | i2 << 22
                | u32::from(first & 0x3ff) << 12
                | u32::from(second & 0x7ff) << 1;
            let offset = ((imm << 7) as i32 >> 7) as i64;
            // The pc reads 4 bytes past the bl's start, the return address; a
            // blx's target (ARM code) is word-aligned.
            let mut target = return_address.wrapping_add(offset as u64);
            if second & 0x1000 == 0 {
                target &= !3;
            }
            Some(target & ADDRESS_MASK)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_in_arm_and_thumb_code() {
        // From arm-linux-gnueabihf-gcc -O1 output (objdump): `bl 504 <leaf>` at 0x528 in ARM
        // code (ebfffff5), at 0x518 in Thumb code (f7ff fff4).
        let arm = 0xebff_fff5u32.to_le_bytes();
        assert!(call_before(&arm));
        assert_eq!(direct_call_target(0x52c, &arm), Some(0x504));
        let thumb = [0xff, 0xf7, 0xf4, 0xff];
        assert!(call_before(&thumb));
        assert_eq!(direct_call_target(0x51c, &thumb), Some(0x504));
        // A forward Thumb bl: `bl 1234` at 0x1000 (f000 f918).
        assert_eq!(direct_call_target(0x1004, &[0x00, 0xf0, 0x18, 0xf9]), Some(0x1234));
        // blx r3 (ARM e12fff33, Thumb 4798), after other code.
        assert!(call_before(&0xe12f_ff33u32.to_le_bytes()));
        assert!(call_before(&[0x00, 0xbf, 0x98, 0x47]));
        assert_eq!(direct_call_target(0x100, &[0x00, 0xbf, 0x98, 0x47]), None);
        // Not calls: ARM `add r0, r0, #1`, Thumb `adds r0, #1; pop {r3, pc}`, a `b` (ea...).
        assert!(!call_before(&0xe280_0001u32.to_le_bytes()));
        assert!(!call_before(&[0x01, 0x30, 0x08, 0xbd]));
        assert!(!call_before(&0xeaff_fff5u32.to_le_bytes()));
        assert!(!call_before(&[0x98]));
        // With the caller's instruction set known (a return address's bit 0): ARM's `ldr pc,
        // [ip, #1944]!` (e5bcf798, a PLT entry's) reads as a Thumb-2 bl (f798 e5bc), a call only
        // for a Thumb return address.
        let ldr = 0xe5bc_f798u32.to_le_bytes();
        assert!(call_before(&ldr) && call_before_in(&ldr, true) && !call_before_in(&ldr, false));
        assert!(call_before_in(&arm, false) && !call_before_in(&arm, true));
        assert!(call_before_in(&thumb, true) && !call_before_in(&thumb, false));
    }
}
