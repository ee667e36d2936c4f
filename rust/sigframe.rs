//! Kernel signal frames recognised by their layout on the stack.
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
//! pointer on the stack above it. Only x86_64: the aarch64 and i386
//! trampolines are in the vdso, whose image and CFI every core holds.

use crate::arch::Arch;
use crate::memory::Memory;
use crate::registers::Registers;

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
    if arch != Arch::X86_64 {
        return None;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Regions;

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
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn restored(bytes: &[u8]) -> Option<(u64, u64, Registers)> {
        let mut mem = Regions::new();
        mem.add(SP, bytes);
        let mut regs = Registers::new();
        restore(Arch::X86_64, SP, &mut regs, &mut mem).map(|(pc, sp)| (pc, sp, regs))
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
        let mut mem = Regions::new();
        let bytes = frame();
        mem.add(SP, &bytes);
        assert_eq!(restore(Arch::Aarch64, SP, &mut Registers::new(), &mut mem), None);
    }
}
