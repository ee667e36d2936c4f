//! A minidump thread's CPU context as registers by name, with the names the
//! unwinder takes (those of a core's `NT_PRSTATUS`: `crate::arch`).

use minidump::{Minidump, MinidumpContext, MinidumpRawContext, MinidumpStream};
use minidump::{MinidumpSystemInfo, MinidumpThreadList};

use crate::arch::Arch;

/// The architecture a minidump's system info stream names (rust-minidump's
/// `Cpu`), if stackwalk unwinds it.
pub fn arch_of(cpu: minidump::system_info::Cpu) -> Option<Arch> {
    use minidump::system_info::Cpu;
    match cpu {
        Cpu::X86_64 => Some(Arch::X86_64),
        Cpu::Arm64 => Some(Arch::Aarch64),
        Cpu::X86 => Some(Arch::I386),
        Cpu::Arm => Some(Arch::Arm),
        _ => None,
    }
}

/// `context_flags`' architecture bits (`CONTEXT_AMD64` at offset 48 of an
/// x86_64 context, `CONTEXT_ARM64`, `CONTEXT_X86` and `CONTEXT_ARM` at offset
/// 0 of theirs) and the `processor_architecture` of the system info stream
/// they go with.
const CONTEXT_KINDS: [(usize, u64, u16); 4] =
    [(48, 0x0010_0000, 9), (0, 0x0040_0000, 12), (0, 0x0001_0000, 0), (0, 0x4000_0000, 5)];
const CONTEXT_CPU_MASK: u64 = 0xffff_ff00;
const SYSTEM_INFO_SIZE: usize = 56;
const PLATFORM_LINUX: u32 = 0x8201;

/// A system info stream for a dump that lost its own (a truncated file):
/// the architecture of the first thread context that names one.
pub fn system_info_from_contexts(
    dump: &Minidump<'_, &[u8]>,
    data: &[u8],
) -> Option<MinidumpSystemInfo> {
    let threads = dump.get_stream::<MinidumpThreadList>().ok()?;
    let architecture = threads.threads.iter().find_map(|thread| {
        let at = thread.raw.thread_context;
        let context = data.get(at.rva as usize..)?.get(..at.data_size as usize)?;
        CONTEXT_KINDS.iter().find_map(|&(offset, flag, architecture)| {
            let flags = crate::source::corefile::le(context, offset, 4)?;
            (flags & CONTEXT_CPU_MASK == flag).then_some(architecture)
        })
    })?;
    let mut raw = [0u8; SYSTEM_INFO_SIZE];
    raw[..2].copy_from_slice(&architecture.to_le_bytes());
    raw[20..24].copy_from_slice(&PLATFORM_LINUX.to_le_bytes());
    MinidumpSystemInfo::read(&raw, &raw, minidump::Endian::Little, None).ok()
}

/// The registers of `context` by name; None for a context of another
/// architecture than `arch`.
pub fn registers(arch: Arch, context: &MinidumpContext) -> Option<Vec<(&'static str, u64)>> {
    match (&context.raw, arch) {
        (MinidumpRawContext::Amd64(c), Arch::X86_64) => Some(vec![
            ("rax", c.rax),
            ("rcx", c.rcx),
            ("rdx", c.rdx),
            ("rbx", c.rbx),
            ("rsp", c.rsp),
            ("rbp", c.rbp),
            ("rsi", c.rsi),
            ("rdi", c.rdi),
            ("r8", c.r8),
            ("r9", c.r9),
            ("r10", c.r10),
            ("r11", c.r11),
            ("r12", c.r12),
            ("r13", c.r13),
            ("r14", c.r14),
            ("r15", c.r15),
            ("rip", c.rip),
            ("eflags", u64::from(c.eflags)),
        ]),
        (MinidumpRawContext::Arm64(c), Arch::Aarch64) => {
            // x0..x30: the first 31 names of a core's NT_PRSTATUS.
            let names = Arch::Aarch64.prstatus().names.iter().copied();
            let mut regs: Vec<(&'static str, u64)> = names.zip(c.iregs.iter().copied()).collect();
            regs.extend([("sp", c.sp), ("pc", c.pc), ("pstate", u64::from(c.cpsr))]);
            Some(regs)
        }
        (MinidumpRawContext::Arm(c), Arch::Arm) => {
            // r0..r12, sp, lr, pc: the first 16 names of a core's NT_PRSTATUS.
            let names = Arch::Arm.prstatus().names.iter().copied();
            let mut regs: Vec<(&'static str, u64)> =
                names.zip(c.iregs.iter().map(|&r| u64::from(r))).collect();
            regs.push(("cpsr", u64::from(c.cpsr)));
            Some(regs)
        }
        (MinidumpRawContext::X86(c), Arch::I386) => Some(
            [
                ("eax", c.eax),
                ("ecx", c.ecx),
                ("edx", c.edx),
                ("ebx", c.ebx),
                ("esp", c.esp),
                ("ebp", c.ebp),
                ("esi", c.esi),
                ("edi", c.edi),
                ("eip", c.eip),
                ("eflags", c.eflags),
            ]
            .map(|(name, value)| (name, u64::from(value)))
            .to_vec(),
        ),
        _ => None,
    }
}
