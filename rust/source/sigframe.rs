//! Kernel signal frames recognised by their layout on the stack: the
//! `ucontext` the kernel writes, a context layout as a core's notes and a
//! minidump's context are, read by the unwinder and by the live-process
//! snapshot.
//!
//! A signal handler returns into a trampoline (glibc's `__restore_rt` on
//! x86_64) that calls `rt_sigreturn`; the registers of the interrupted code
//! are in the `ucontext` the kernel pushed, right at the trampoline frame's
//! sp. The trampoline's CFI describes them; when its library is missing
//! (not found, or another build), that CFI is too, and a scan from there
//! finds stale return addresses (the dynamic linker's, from a lazy binding)
//! instead of the interrupted frame. The kernel's frame is checked field by
//! field before it is believed: `uc_link` 0, `uc_flags` the kernel's, the
//! user code segment in `cs`, user addresses in rip and rsp, the FPU state
//! pointer on the stack above it.
//!
//! aarch64's kernel frame too: its trampoline is the vdso's, with CFI, but
//! musl's `__restore_rt` has none, and qemu-user (7.2) returns from a
//! guest's handler through a page of its own, in no module. There the
//! checks are `uc_flags` and `uc_link` 0, a pstate of user code (EL0,
//! AArch64), user addresses in pc and sp, and the FP/SIMD record that the
//! kernel (and qemu) always put first in the context's records. 32-bit
//! ARM's handlers installed without a restorer of their own return through
//! the kernel's `[sigpage]` or qemu-user's page, in no module. i386's
//! trampolines are in the vdso, whose image and CFI every core holds.

use crate::arch::registers::Registers;
use crate::arch::Arch;
use crate::source::memory::Memory;

/// `struct ucontext` (x86_64): uc_flags, uc_link, uc_stack (24 bytes),
/// then `struct sigcontext`'s general registers in this order (DWARF
/// numbers), then eflags, then cs/gs/fs/ss packed in one word, ... fpstate.
const UC_FLAGS: u64 = 0;
const UC_LINK: u64 = 8;
const MCONTEXT: u64 = 40;
/// r8–r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip as DWARF columns.
const GREGS: [u16; 17] = [8, 9, 10, 11, 12, 13, 14, 15, 5, 4, 6, 3, 1, 0, 2, 7, 16];
const RSP_INDEX: u64 = 15;
const RIP_INDEX: u64 = 16;
const CSGSFS_INDEX: u64 = 18;
const FPSTATE_INDEX: u64 = 23;
/// UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS: the flags the
/// kernel sets; any other bit is not a kernel frame.
const UC_KERNEL_FLAGS: u64 = 0x7;
/// `__USER_CS`: the code segment of 64-bit user code.
const USER_CS: u64 = 0x33;
/// How far above the ucontext the FPU state may be (the xsave area follows
/// the frame; AVX-512 makes it some 2.7 KiB).
const FPSTATE_REACH: u64 = 1 << 16;

/// Whether the words of a candidate `ucontext` (`word(offset)`, None where
/// not captured) begin as the kernel's x86_64 signal frame does: `uc_flags`
/// the kernel's, `uc_link` 0, the user code segment. [`restore`] checks these
/// first, then the rest; a search over many words filters with them alone.
pub(crate) fn frame_begins(mut word: impl FnMut(u64) -> Option<u64>) -> bool {
    word(UC_FLAGS).is_some_and(|f| f & !UC_KERNEL_FLAGS == 0)
        && word(UC_LINK) == Some(0)
        && word(MCONTEXT + 8 * CSGSFS_INDEX).is_some_and(|cs| cs & 0xffff == USER_CS)
}

/// The interrupted frame's pc and sp, its registers written into `caller`,
/// if the stack at `sp` holds a kernel signal frame.
pub(crate) fn restore<M: Memory + ?Sized>(
    arch: Arch,
    sp: u64,
    caller: &mut Registers,
    mem: &mut M,
) -> Option<(u64, u64)> {
    match arch {
        Arch::X86_64 => restore_x86_64(sp, caller, mem),
        Arch::Aarch64 => aarch64::restore(sp, caller, mem),
        Arch::Arm => arm::restore(sp, caller, mem),
        Arch::I386 => None,
    }
}

/// [`restore`] on x86_64.
fn restore_x86_64<M: Memory + ?Sized>(
    sp: u64,
    caller: &mut Registers,
    mem: &mut M,
) -> Option<(u64, u64)> {
    let arch = Arch::X86_64;
    let word = |mem: &mut M, offset: u64| mem.read_u64(sp.checked_add(offset)?);
    let greg = |mem: &mut M, index: u64| word(mem, MCONTEXT + 8 * index);
    if !frame_begins(|offset| word(mem, offset)) {
        return None;
    }
    let fpstate = greg(mem, FPSTATE_INDEX)?;
    if fpstate != 0 && !(fpstate > sp && fpstate - sp < FPSTATE_REACH) {
        return None;
    }
    let (pc, caller_sp) = (greg(mem, RIP_INDEX)?, greg(mem, RSP_INDEX)?);
    if pc == 0 || !arch.is_user_address(pc) || !arch.is_user_address(caller_sp) {
        return None;
    }
    let mut regs = Registers::new();
    for (i, &column) in GREGS.iter().enumerate() {
        regs.set(column, greg(mem, i as u64)?);
    }
    *caller = regs;
    Some((pc, caller_sp))
}

mod aarch64 {
    use crate::arch::registers::Registers;
    use crate::arch::Arch;
    use crate::source::memory::Memory;

    // `struct rt_sigframe` (arch/arm64/kernel/signal.c, and qemu's
    // `target_rt_sigframe`): a siginfo of 128 bytes, then `struct ucontext`:
    // uc_flags, uc_link, uc_stack (24 bytes), uc_sigmask padded to 128 bytes
    // of sigset, then `struct sigcontext` at 16-byte alignment:
    // fault_address, regs[31] (x0-x30), sp, pc, pstate, then the records
    // (`__reserved`, 16-byte aligned), the FP/SIMD state's always first.
    const UC: u64 = 128;
    pub(super) const UC_FLAGS: u64 = UC;
    pub(super) const UC_LINK: u64 = UC + 8;
    const MCONTEXT: u64 = UC + 176;
    pub(super) const REGS: u64 = MCONTEXT + 8;
    pub(super) const SP: u64 = REGS + 31 * 8;
    pub(super) const PC: u64 = SP + 8;
    pub(super) const PSTATE: u64 = PC + 8;
    pub(super) const RECORDS: u64 = PSTATE + 16;
    /// `struct fpsimd_context`'s header: `FPSIMD_MAGIC` and its size.
    pub(super) const FPSIMD: u64 = 0x210 << 32 | 0x4650_8001;
    /// pstate's mode bits: M[4] (AArch32) and M[3:0] (exception level and
    /// stack), all 0 for user code (EL0t, AArch64).
    const PSTATE_MODE: u64 = 0x1f;

    /// [`super::restore`] on aarch64.
    pub(super) fn restore<M: Memory + ?Sized>(
        sp: u64,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Option<(u64, u64)> {
        let arch = Arch::Aarch64;
        let mut word = |offset: u64| mem.read_u64(sp.checked_add(offset)?);
        if word(UC_FLAGS)? != 0
            || word(UC_LINK)? != 0
            || word(PSTATE)? & PSTATE_MODE != 0
            || word(RECORDS)? != FPSIMD
        {
            return None;
        }
        let (pc, caller_sp) = (word(PC)?, word(SP)?);
        if pc == 0 || !arch.is_user_address(pc) || !arch.is_user_address(caller_sp) {
            return None;
        }
        let mut regs = Registers::new();
        for column in 0..31 {
            regs.set(column, word(REGS + 8 * u64::from(column))?);
        }
        regs.set(arch.sp(), caller_sp);
        *caller = regs;
        Some((pc, caller_sp))
    }
}

mod arm {
    use crate::arch::registers::Registers;
    use crate::arch::Arch;
    use crate::source::memory::Memory;

    // The kernel's 32-bit ARM frames (arch/arm/kernel/signal.c, and qemu's
    // `sigframe_v2`/`rt_sigframe_v2`): `struct sigframe` is a `struct
    // ucontext` then the return code; `struct rt_sigframe` a siginfo of 128
    // bytes, then the same. The ucontext: uc_flags, uc_link, uc_stack (12
    // bytes), then `struct sigcontext`: trap_no, error_code, oldmask, r0-r10,
    // fp, ip, sp, lr, pc, cpsr, fault_address; then uc_sigmask with its
    // padding (128 bytes), then uc_regspace, where the kernel (and qemu)
    // put the VFP registers' record first on every armhf CPU.
    const UC_FLAGS: u64 = 0;
    const UC_LINK: u64 = 4;
    const R0: u64 = 20 + 12;
    const CPSR: u64 = R0 + 16 * 4;
    const REGSPACE: u64 = 20 + 21 * 4 + 128;
    /// `struct vfp_sigframe`'s header: VFP_MAGIC, then its size.
    const VFP_MAGIC: u64 = 0x5646_5001;
    const VFP_SIZE: u64 = 0x120;
    /// The mode bits of a cpsr in user mode (USR, 0x10).
    const MODE: u64 = 0x1f;
    const USER: u64 = 0x10;
    /// Where the ucontext is: after the siginfo of an rt frame, or at sp.
    const FRAMES: [u64; 2] = [128, 0];

    /// [`super::restore`] on 32-bit ARM: an rt frame (`rt_sigreturn`'s,
    /// what glibc and the kernel set up for every handler today), else an
    /// old one. Checked: uc_flags and uc_link 0, a user-mode cpsr, the VFP
    /// record, a pc in user space and an sp above the frame; the
    /// interrupted pc's Thumb bit cleared.
    pub(super) fn restore<M: Memory + ?Sized>(
        sp: u64,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Option<(u64, u64)> {
        let arch = Arch::Arm;
        FRAMES.into_iter().find_map(|uc| {
            let mut word = |offset: u64| mem.read_sized(sp.checked_add(uc + offset)?, 4);
            if word(UC_FLAGS)? != 0
                || word(UC_LINK)? != 0
                || word(CPSR)? & MODE != USER
                || (word(REGSPACE)?, word(REGSPACE + 4)?) != (VFP_MAGIC, VFP_SIZE)
            {
                return None;
            }
            let (pc, caller_sp) = (word(R0 + 15 * 4)? & !1, word(R0 + 13 * 4)?);
            if pc == 0 || caller_sp <= sp || !arch.is_user_address(pc) {
                return None;
            }
            let mut regs = Registers::new();
            for column in 0..15 {
                regs.set(column, word(R0 + 4 * u64::from(column))?);
            }
            *caller = regs;
            Some((pc, caller_sp))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::memory::Regions;

    const SP: u64 = 0x7ffd_0000_1000;

    /// A ucontext as the kernel writes it, general registers r8.. = 0x100..
    fn frame() -> Vec<u8> {
        let mut words = vec![0u64; 64];
        words[0] = 0x7; // uc_flags
        for i in 0..17 {
            words[5 + i] = 0x100 + i as u64;
        }
        words[5 + RSP_INDEX as usize] = SP + 0x800;
        words[5 + RIP_INDEX as usize] = 0x5555_5555_5123;
        words[5 + CSGSFS_INDEX as usize] = 0x002b_0000_0000_0033;
        words[5 + FPSTATE_INDEX as usize] = SP + 0x200;
        le_bytes(&words)
    }

    /// What [`restore`] finds for `arch` in `bytes` of stack at `at`.
    fn restored_at(arch: Arch, at: u64, bytes: &[u8]) -> Option<(u64, u64, Registers)> {
        let mut mem = Regions::new();
        mem.add(at, bytes);
        let mut regs = Registers::new();
        restore(arch, at, &mut regs, &mut mem).map(|(pc, sp)| (pc, sp, regs))
    }

    fn restored(bytes: &[u8]) -> Option<(u64, u64, Registers)> {
        restored_at(Arch::X86_64, SP, bytes)
    }

    #[test]
    fn a_kernel_frame_gives_every_register() {
        let (pc, sp, regs) = restored(&frame()).expect("a kernel signal frame");
        assert_eq!((pc, sp), (0x5555_5555_5123, SP + 0x800));
        assert_eq!(regs.get(8), Some(0x100)); // r8
        assert_eq!(regs.get(0), Some(0x100 + 13)); // rax
        assert_eq!(regs.get(6), Some(0x100 + 10)); // rbp
        assert_eq!(regs.get(7), Some(SP + 0x800));
        assert_eq!(regs.get(16), Some(pc));
    }

    #[test]
    fn anything_else_is_not_one() {
        let patch = |index: usize, value: u64| {
            let mut bytes = frame();
            bytes[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
            bytes
        };
        for (index, value) in [
            (0, 0x10),                              // uc_flags
            (1, 0x1234),                            // uc_link
            (5 + CSGSFS_INDEX as usize, 0x10),      // not user code
            (5 + FPSTATE_INDEX as usize, SP - 8),   // below the frame
            (5 + RIP_INDEX as usize, 0),            // pc 0
            (5 + RIP_INDEX as usize, 1 << 63),      // a kernel address
            (5 + RSP_INDEX as usize, 0xffff << 48), // not canonical user
        ] {
            assert_eq!(restored(&patch(index, value)), None, "word {index} = {value:#x}");
        }
        assert_eq!(restored(&frame()[..200]), None, "truncated");
        assert_eq!(restored_at(Arch::Aarch64, SP, &frame()).map(|r| r.0), None);
    }

    const A64_SP: u64 = 0xffff_f000_0000;

    /// An aarch64 rt_sigframe as the kernel writes it, x0.. = 0x1000..
    fn a64_frame() -> Vec<u64> {
        let mut words = vec![0u64; (aarch64::RECORDS / 8 + 4) as usize];
        for (i, w) in words[(aarch64::REGS / 8) as usize..][..31].iter_mut().enumerate() {
            *w = 0x1000 + i as u64;
        }
        words[(aarch64::SP / 8) as usize] = A64_SP + 0x1000;
        words[(aarch64::PC / 8) as usize] = 0x40_0123;
        words[(aarch64::PSTATE / 8) as usize] = 0x6000_0000; // Z and C set, EL0t
        words[(aarch64::RECORDS / 8) as usize] = aarch64::FPSIMD;
        words
    }

    fn le_bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn a64_restored(words: &[u64]) -> Option<(u64, u64, Registers)> {
        restored_at(Arch::Aarch64, A64_SP, &le_bytes(words))
    }

    #[test]
    fn an_aarch64_kernel_frame_gives_every_register() {
        let (pc, sp, regs) = a64_restored(&a64_frame()).expect("a kernel signal frame");
        assert_eq!((pc, sp), (0x40_0123, A64_SP + 0x1000));
        assert_eq!(regs.get(0), Some(0x1000)); // x0
        assert_eq!(regs.get(29), Some(0x1000 + 29)); // fp
        assert_eq!(regs.get(30), Some(0x1000 + 30)); // lr
        assert_eq!(regs.get(31), Some(sp));
    }

    #[test]
    fn anything_else_is_not_an_aarch64_one() {
        let word = |offset: u64| (offset / 8) as usize;
        for (index, value) in [
            (word(aarch64::UC_FLAGS), 1),
            (word(aarch64::UC_LINK), A64_SP),
            (word(aarch64::PSTATE), 0x5),          // EL1h: the kernel's
            (word(aarch64::PSTATE), 0x10),         // AArch32
            (word(aarch64::RECORDS), 0x210 << 32), // no FP/SIMD record first
            (word(aarch64::PC), 0),                // pc 0
            (word(aarch64::PC), 0xffff_8000_0000_0000), // a kernel address
            (word(aarch64::SP), 1 << 60),          // not a user address
        ] {
            let mut words = a64_frame();
            words[index] = value;
            assert_eq!(a64_restored(&words).map(|r| r.0), None, "word {index} = {value:#x}");
        }
        let words = a64_frame();
        assert_eq!(a64_restored(&words[..word(aarch64::RECORDS)]).map(|r| r.0), None, "truncated");
        // The x86_64 layout is not read as aarch64's, nor the other way round.
        assert_eq!(restored_at(Arch::X86_64, A64_SP, &le_bytes(&words)).map(|r| r.0), None);
    }

    /// 32-bit ARM's frames: an rt frame (siginfo, then the ucontext) or an
    /// old one (the ucontext at sp), r0..r15 = 0x4000_0100.. but sp and pc.
    fn arm_frame(rt: bool, cpsr: u32) -> Vec<u8> {
        const ARM_SP: u64 = 0x3fff_f000;
        let mut words = vec![0u32; 128];
        let uc = if rt { 32 } else { 0 };
        for (i, w) in words[uc + 8..uc + 24].iter_mut().enumerate() {
            *w = 0x4000_0100 + i as u32;
        }
        words[uc + 8 + 13] = ARM_SP as u32 + 0x400; // sp
        words[uc + 8 + 15] = 0x4000_0501; // pc, the Thumb bit set
        words[uc + 24] = cpsr;
        words[uc + 58] = 0x5646_5001; // uc_regspace: the VFP record
        words[uc + 59] = 0x120;
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn arm_frames_old_and_rt() {
        const ARM_SP: u64 = 0x3fff_f000;
        for rt in [true, false] {
            let (pc, sp, regs) =
                restored_at(Arch::Arm, ARM_SP, &arm_frame(rt, 0x6000_0030)).expect("a frame");
            assert_eq!((pc, sp), (0x4000_0500, ARM_SP + 0x400));
            assert_eq!(
                (regs.get(0), regs.get(11), regs.get(14)),
                (Some(0x4000_0100), Some(0x4000_010b), Some(0x4000_010e))
            );
        }
        // Not user mode (SVC), no VFP record, or a ucontext linked to another: none.
        assert!(restored_at(Arch::Arm, ARM_SP, &arm_frame(true, 0x6000_0013)).is_none());
        let mut no_vfp = arm_frame(true, 0x10);
        no_vfp[(32 + 58) * 4] = 0;
        assert!(restored_at(Arch::Arm, ARM_SP, &no_vfp).is_none());
        let mut linked = arm_frame(false, 0x10);
        linked[4] = 1;
        assert!(restored_at(Arch::Arm, ARM_SP, &linked).is_none());
    }
}
