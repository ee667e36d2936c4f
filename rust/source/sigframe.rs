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
//! kernel (and qemu) always put first in the context's records. i386's
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
        Arch::I386 | Arch::Arm => None,
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
}
