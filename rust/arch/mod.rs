//! Architectures: DWARF register numbering, register names, and the ABI's
//! default rule for registers the CFI says nothing about.

pub mod registers;

mod aarch64;
mod arm;
pub mod arm_prologue;
pub mod edges;
mod i386;
mod x86_64;

use std::fmt;
use std::str::FromStr;

/// Number of DWARF register columns tracked per frame. x86_64 uses 0..=16
/// (16 being the return-address column), aarch64 0..=31, i386 0..=8, arm 0..=14. Rules for columns
/// beyond this (vector registers) are ignored: no unwinding rule reads them.
pub const NUM_REGS: usize = 33;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Arch {
    X86_64,
    Aarch64,
    /// 32-bit x86.
    I386,
    /// 32-bit ARM (ARM and Thumb code).
    Arm,
}

/// A frame record's layout: the register pointing at it, and the offsets
/// from that register's value of the caller's saved frame pointer and of
/// the return address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRecord {
    pub reg: u16,
    pub fp_slot: i64,
    pub ra_slot: i64,
}

impl FrameRecord {
    pub const fn at(reg: u16, fp_slot: i64, ra_slot: i64) -> Self {
        FrameRecord { reg, fp_slot, ra_slot }
    }

    /// The record's lowest offset from the register (its first slot's).
    pub fn base(&self) -> i64 {
        self.fp_slot.min(self.ra_slot)
    }
}

/// Where a register sampled by perf goes in the unwinder's register file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PerfReg {
    Column(u16),
    Pc,
    Ignored,
}

/// Where a core file's NT_PRSTATUS note (the kernel's `struct elf_prstatus`;
/// for a 32-bit process `struct compat_elf_prstatus`, with 4-byte words)
/// holds what a core reader needs. `pr_reg` is `names.len()` words of
/// [`Arch::word_size`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrStatus {
    /// Offset of `pr_cursig` (a 16-bit signed `short`).
    pub cursig: usize,
    /// Offset of `pr_pid` (a 32-bit signed `pid_t`): the thread's id.
    pub pid: usize,
    /// Offset of `pr_reg`.
    pub regs: usize,
    /// The registers of `pr_reg` in order, named as `register_by_name`
    /// takes them (it knows no flags or segment registers: they are kept
    /// for the record).
    pub names: &'static [&'static str],
}

/// What a register column becomes in the caller when no CFI rule names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultRule {
    SameValue,
    Undefined,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::X86_64, Arch::Aarch64, Arch::I386, Arch::Arm];

    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
            Arch::I386 => "i386",
            Arch::Arm => "arm",
        }
    }

    /// The size of a machine word, a pointer and a return address, in bytes.
    #[inline]
    pub fn word_size(self) -> u64 {
        match self {
            Arch::X86_64 | Arch::Aarch64 => 8,
            Arch::I386 | Arch::Arm => 4,
        }
    }

    /// The mask of the address space: addresses and words computed while
    /// unwinding wrap at this width (32 bits on i386 and arm).
    #[inline]
    pub fn address_mask(self) -> u64 {
        match self {
            Arch::X86_64 | Arch::Aarch64 => u64::MAX,
            Arch::I386 => i386::ADDRESS_MASK,
            Arch::Arm => arm::ADDRESS_MASK,
        }
    }

    /// The bytes below the stack pointer a function may use without moving
    /// it (the x86_64 System V ABI's red zone; none on the others).
    pub fn red_zone(self) -> u64 {
        match self {
            Arch::X86_64 => 128,
            Arch::Aarch64 | Arch::I386 | Arch::Arm => 0,
        }
    }

    /// The DWARF column of the stack pointer.
    #[inline]
    pub fn sp(self) -> u16 {
        match self {
            Arch::X86_64 => x86_64::SP,
            Arch::Aarch64 => aarch64::SP,
            Arch::I386 => i386::SP,
            Arch::Arm => arm::SP,
        }
    }

    /// The DWARF column of the frame pointer.
    #[inline]
    pub fn fp(self) -> u16 {
        match self {
            Arch::X86_64 => x86_64::FP,
            Arch::Aarch64 => aarch64::FP,
            Arch::I386 => i386::FP,
            Arch::Arm => arm::FP,
        }
    }

    /// The return-address column CIEs of this architecture use.
    #[inline]
    pub fn ra(self) -> u16 {
        match self {
            Arch::X86_64 => x86_64::RA,
            Arch::Aarch64 => aarch64::RA,
            Arch::I386 => i386::RA,
            Arch::Arm => arm::RA,
        }
    }

    /// The column that holds the program counter itself, if the ABI gives it
    /// one (x86_64: 16, `rip`; i386: 8, `eip`; aarch64 and arm have none).
    #[inline]
    pub fn pc_column(self) -> Option<u16> {
        match self {
            Arch::X86_64 => Some(x86_64::RA),
            Arch::I386 => Some(i386::RA),
            Arch::Aarch64 | Arch::Arm => None,
        }
    }

    /// The name the program counter goes by (`rip`, `eip`, `pc`).
    pub fn pc_name(self) -> &'static str {
        self.pc_column().and_then(|col| self.register_name(col)).unwrap_or("pc")
    }

    /// The rule that applies to `reg` in the caller when the CFI gives none.
    #[inline]
    pub fn default_rule(self, reg: u16) -> DefaultRule {
        if reg < 64 && self.same_value_mask() & (1 << reg) != 0 {
            DefaultRule::SameValue
        } else {
            DefaultRule::Undefined
        }
    }

    /// The columns whose default rule is "same value", as a bit mask.
    #[inline]
    pub fn same_value_mask(self) -> u64 {
        match self {
            Arch::X86_64 => x86_64::CALLEE_SAVED.iter().fold(0, |m, r| m | 1 << r),
            Arch::Aarch64 => (19..=30).fold(0, |m, r| m | 1 << r),
            Arch::I386 => i386::CALLEE_SAVED.iter().fold(0, |m, r| m | 1 << r),
            Arch::Arm => arm::CALLEE_SAVED.iter().fold(0, |m, r| m | 1 << r),
        }
    }

    /// The register named `name` (as given by users: `rip`, `rsp`, `x29`,
    /// `fp`, ...): `Some(Some(column))` for a DWARF column, `Some(None)` for
    /// the program counter, `None` for a name this architecture doesn't know.
    pub fn register_by_name(self, name: &str) -> Option<Option<u16>> {
        match self {
            Arch::X86_64 => x86_64::register_by_name(name),
            Arch::Aarch64 => aarch64::register_by_name(name),
            Arch::I386 => i386::register_by_name(name),
            Arch::Arm => arm::register_by_name(name),
        }
    }

    /// Where the user register perf numbers `index` (its bit in
    /// `sample_regs_user`) goes in the unwinder's register file.
    pub(crate) fn perf_reg(self, index: u32) -> PerfReg {
        match self {
            Arch::X86_64 => x86_64::perf_reg(index),
            Arch::I386 => i386::perf_reg(index),
            Arch::Aarch64 => aarch64::perf_reg(index),
            Arch::Arm => arm::perf_reg(index),
        }
    }

    /// The conventional name of a DWARF column, for messages.
    pub fn register_name(self, reg: u16) -> Option<&'static str> {
        match self {
            Arch::X86_64 => x86_64::NAMES.get(reg as usize).copied(),
            Arch::Aarch64 => aarch64::NAMES.get(reg as usize).copied(),
            Arch::I386 => i386::NAMES.get(reg as usize).copied(),
            Arch::Arm => arm::NAMES.get(reg as usize).copied(),
        }
    }

    /// Turn a recovered return address into a code address: aarch64 return
    /// addresses may carry pointer-authentication bits above the 48-bit
    /// user address space; i386 ones are 32 bits; arm ones are 32 bits
    /// with bit 0 set where the caller is Thumb code.
    #[inline]
    pub fn strip_return_address(self, ra: u64) -> u64 {
        match self {
            Arch::X86_64 => ra,
            Arch::Aarch64 => ra & aarch64::USER_ADDRESS_MASK,
            Arch::I386 => ra & i386::ADDRESS_MASK,
            Arch::Arm => ra & arm::CODE_MASK,
        }
    }

    /// Whether `addr` (a code address, return-address bits already
    /// stripped) can be a user-space address at all: x86_64's lower
    /// canonical half (47 bits), aarch64's 48-bit user range, i386's 32 bits.
    pub fn is_user_address(self, addr: u64) -> bool {
        match self {
            Arch::X86_64 => addr <= x86_64::USER_MAX,
            Arch::Aarch64 => addr <= aarch64::USER_ADDRESS_MASK,
            Arch::I386 => addr <= i386::ADDRESS_MASK,
            Arch::Arm => addr <= arm::ADDRESS_MASK,
        }
    }

    /// Where frame records are, in the order a frame-pointer step tries
    /// them: x86's (`push rbp; mov rbp, rsp`) and aarch64's (`stp x29, x30,
    /// [sp, #-n]!; mov x29, sp`) at fp, the caller's fp first; 32-bit ARM's
    /// three (see [`arm::FRAME_RECORDS`]).
    pub fn frame_records(self) -> &'static [FrameRecord] {
        const X86_64: [FrameRecord; 1] = [FrameRecord::at(x86_64::FP, 0, 8)];
        const I386: [FrameRecord; 1] = [FrameRecord::at(i386::FP, 0, 4)];
        const AARCH64: [FrameRecord; 1] = [FrameRecord::at(aarch64::FP, 0, 8)];
        match self {
            Arch::X86_64 => &X86_64,
            Arch::I386 => &I386,
            Arch::Aarch64 => &AARCH64,
            Arch::Arm => &arm::FRAME_RECORDS,
        }
    }

    /// Whether the caller's sp is exactly fp + 2 words after a frame-record
    /// step. On x86 the record sits right below the caller's sp (the call
    /// pushed the return address, the prologue the frame pointer). On aarch64
    /// the record is usually at the bottom of the callee's frame, so fp + 2
    /// words is only a lower bound of the caller's sp.
    pub fn frame_record_gives_exact_sp(self) -> bool {
        match self {
            Arch::X86_64 | Arch::I386 => true,
            Arch::Aarch64 | Arch::Arm => false,
        }
    }

    /// Whether a return address found on the stack is always the second word
    /// of a frame record, so the word below it is the caller's fp (aarch64:
    /// the return address is in lr until a prologue stores it with x29).
    pub fn return_address_is_in_a_record(self) -> bool {
        match self {
            Arch::X86_64 | Arch::I386 => false,
            Arch::Aarch64 | Arch::Arm => true,
        }
    }

    /// The register that holds the return address in a leaf function that
    /// has not saved it (aarch64's lr); None where a call pushes it.
    pub fn link_register(self) -> Option<u16> {
        match self {
            Arch::X86_64 | Arch::I386 => None,
            Arch::Aarch64 => Some(aarch64::RA),
            Arch::Arm => Some(arm::RA),
        }
    }

    /// The size of the smallest instruction (Go's `PCQuantum`): 1 on x86,
    /// 4 on aarch64, 2 on arm (Thumb).
    pub fn min_instruction_size(self) -> u64 {
        match self {
            Arch::Aarch64 => 4,
            Arch::Arm => 2,
            Arch::X86_64 | Arch::I386 => 1,
        }
    }

    /// How many code bytes before a return address [`Arch::call_before`] looks at.
    pub fn call_window(self) -> usize {
        match self {
            // i386's call instructions are x86_64's, REX prefixes aside.
            Arch::X86_64 | Arch::I386 => x86_64::CALL_WINDOW,
            Arch::Aarch64 => aarch64::CALL_WINDOW,
            Arch::Arm => arm::CALL_WINDOW,
        }
    }

    /// Whether the code bytes right before a return address (`code`: the
    /// last `call_window()` bytes before it, or fewer at the start of a
    /// segment) end with a call instruction.
    pub fn call_before(self, code: &[u8]) -> bool {
        match self {
            Arch::X86_64 | Arch::I386 => x86_64::call_before(code),
            Arch::Aarch64 => aarch64::call_before(code),
            Arch::Arm => arm::call_before(code),
        }
    }

    /// [`Arch::call_before`] in one instruction set where it is known
    /// (`thumb`: 32-bit ARM's, from a return address's bit 0).
    pub fn call_before_in(self, code: &[u8], thumb: Option<bool>) -> bool {
        match (self, thumb) {
            (Arch::Arm, Some(thumb)) => arm::call_before_in(code, thumb),
            _ => self.call_before(code),
        }
    }

    /// Whether the caller a return address as saved (`raw`) returns to is
    /// Thumb code: 32-bit ARM's bit 0; None elsewhere.
    pub fn thumb_caller(self, raw: u64) -> Option<bool> {
        (self == Arch::Arm).then_some(raw & 1 != 0)
    }

    /// How many code bytes at an address [`Arch::sigreturn_at`] looks at.
    pub const SIGRETURN_WINDOW: usize = 9;

    /// Whether `code` (the bytes at an address, up to
    /// [`Arch::SIGRETURN_WINDOW`]) starts with a signal trampoline's code:
    /// where a signal handler returns, which follows no call.
    pub fn sigreturn_at(self, code: &[u8]) -> bool {
        let patterns: &[&[u8]] = match self {
            Arch::X86_64 => &x86_64::SIGRETURN,
            Arch::I386 => &i386::SIGRETURN,
            Arch::Aarch64 => &aarch64::SIGRETURN,
            Arch::Arm => &arm::SIGRETURN,
        };
        patterns.iter().any(|p| code.starts_with(p))
    }

    /// The target of the direct call that made `return_address` (`code`:
    /// the `call_window()` bytes before it), if that call is direct.
    pub fn direct_call_target(self, return_address: u64, code: &[u8]) -> Option<u64> {
        match self {
            Arch::X86_64 => x86_64::direct_call_target(return_address, code),
            Arch::I386 => {
                x86_64::direct_call_target(return_address, code).map(|t| t & i386::ADDRESS_MASK)
            }
            Arch::Aarch64 => aarch64::direct_call_target(return_address, code),
            Arch::Arm => arm::direct_call_target(return_address, code),
        }
    }

    /// The vendor extensions gimli must accept in this architecture's CFI.
    pub fn gimli_vendor(self) -> gimli::Vendor {
        match self {
            Arch::X86_64 | Arch::I386 | Arch::Arm => gimli::Vendor::Default,
            Arch::Aarch64 => gimli::Vendor::AArch64,
        }
    }

    /// The layout of NT_PRSTATUS in a core file of a process of this
    /// architecture.
    pub fn prstatus(self) -> PrStatus {
        match self {
            Arch::X86_64 => {
                PrStatus { cursig: 12, pid: 32, regs: 112, names: &x86_64::PRSTATUS_REGS }
            }
            Arch::Aarch64 => {
                PrStatus { cursig: 12, pid: 32, regs: 112, names: &aarch64::PRSTATUS_REGS }
            }
            // Both 32-bit: the compat layout (4-byte words and longs).
            Arch::I386 => PrStatus { cursig: 12, pid: 24, regs: 72, names: &i386::PRSTATUS_REGS },
            Arch::Arm => PrStatus { cursig: 12, pid: 24, regs: 72, names: &arm::PRSTATUS_REGS },
        }
    }

    /// The ELF `e_machine` value of this architecture.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => object::elf::EM_X86_64,
            Arch::Aarch64 => object::elf::EM_AARCH64,
            Arch::I386 => object::elf::EM_386,
            Arch::Arm => object::elf::EM_ARM,
        }
    }

    /// The architecture of an ELF `e_machine` value.
    pub fn from_elf_machine(machine: u16) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.elf_machine() == machine)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownArch(pub String);

impl fmt::Display for UnknownArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown architecture {:?} (supported: x86_64, aarch64, i386, arm)", self.0)
    }
}

impl std::error::Error for UnknownArch {}

impl FromStr for Arch {
    type Err = UnknownArch;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "x86_64" | "x86-64" | "amd64" => Ok(Arch::X86_64),
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            "i386" | "i686" | "x86" => Ok(Arch::I386),
            "arm" | "armhf" | "armv7" | "armv7l" | "arm32" => Ok(Arch::Arm),
            _ => Err(UnknownArch(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_trampolines_are_known_by_their_code() {
        // glibc's and musl's x86_64 __restore_rt (objdump: mov $0xf,%rax; syscall), Go's.
        let glibc = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05, 0x0f, 0x1f, 0x84];
        assert!(Arch::X86_64.sigreturn_at(&glibc));
        assert!(Arch::X86_64.sigreturn_at(&[0xb8, 0x0f, 0, 0, 0, 0x0f, 0x05, 0xcc]));
        // Another system call (mov $0x3c,%rax: exit), or the code cut short.
        assert!(!Arch::X86_64.sigreturn_at(&[0x48, 0xc7, 0xc0, 0x3c, 0, 0, 0, 0x0f, 0x05]));
        assert!(!Arch::X86_64.sigreturn_at(&glibc[..8]));
        // The i386 vdso's __kernel_sigreturn and __kernel_rt_sigreturn.
        assert!(Arch::I386.sigreturn_at(&[0x58, 0xb8, 0x77, 0, 0, 0, 0xcd, 0x80, 0x90]));
        assert!(Arch::I386.sigreturn_at(&[0xb8, 0xad, 0, 0, 0, 0xcd, 0x80]));
        assert!(!Arch::X86_64.sigreturn_at(&[0xb8, 0xad, 0, 0, 0, 0xcd, 0x80]));
        // aarch64: mov x8, #139; svc #0.
        let a64: Vec<u8> =
            [0xd280_1168u32, 0xd400_0001].iter().flat_map(|i| i.to_le_bytes()).collect();
        assert!(Arch::Aarch64.sigreturn_at(&a64));
        assert!(!Arch::Aarch64.sigreturn_at(&a64[4..]));
    }

    #[test]
    fn register_names_round_trip() {
        for arch in Arch::ALL {
            for reg in 0..NUM_REGS as u16 {
                if arch.pc_column() == Some(reg) {
                    continue; // x86_64 "rip" names the pc, given apart from the columns
                }
                if let Some(name) = arch.register_name(reg) {
                    assert_eq!(arch.register_by_name(name), Some(Some(reg)), "{arch} {name}");
                }
            }
        }
        assert_eq!(Arch::X86_64.register_by_name("rip"), Some(None));
        assert_eq!(Arch::Aarch64.register_by_name("pc"), Some(None));
        assert_eq!(Arch::Aarch64.register_by_name("lr"), Some(Some(30)));
        assert_eq!(Arch::Aarch64.register_by_name("fp"), Some(Some(29)));
        assert_eq!(Arch::X86_64.register_by_name("eflags"), None);
        assert_eq!(Arch::I386.register_by_name("eip"), Some(None));
        for arch in Arch::ALL {
            assert_eq!(arch.register_by_name(arch.pc_name()), Some(None), "{arch}");
        }
        assert_eq!(Arch::I386.register_by_name("esp"), Some(Some(4)));
        assert_eq!(Arch::I386.register_by_name("ebp"), Some(Some(5)));
        assert_eq!(Arch::I386.register_by_name("rsp"), None);
    }

    #[test]
    fn defaults_follow_the_abi() {
        assert_eq!(Arch::X86_64.default_rule(3), DefaultRule::SameValue); // rbx
        assert_eq!(Arch::X86_64.default_rule(0), DefaultRule::Undefined); // rax
        assert_eq!(Arch::X86_64.default_rule(7), DefaultRule::Undefined); // rsp: the CFA
        assert_eq!(Arch::Aarch64.default_rule(19), DefaultRule::SameValue);
        assert_eq!(Arch::Aarch64.default_rule(30), DefaultRule::SameValue);
        assert_eq!(Arch::Aarch64.default_rule(0), DefaultRule::Undefined);
        for callee_saved in [3, 5, 6, 7] {
            // ebx, ebp, esi, edi
            assert_eq!(Arch::I386.default_rule(callee_saved), DefaultRule::SameValue);
        }
        for scratch in [0, 1, 2, 4, 8] {
            // eax, ecx, edx; esp is the CFA; eip is the return address
            assert_eq!(Arch::I386.default_rule(scratch), DefaultRule::Undefined);
        }
    }

    #[test]
    fn words_and_addresses() {
        assert_eq!([Arch::X86_64, Arch::Aarch64, Arch::I386].map(Arch::word_size), [8, 8, 4]);
        assert_eq!(Arch::I386.address_mask(), 0xffff_ffff);
        assert_eq!(Arch::I386.strip_return_address(0x1_0804_9745), 0x0804_9745);
        assert_eq!("i386".parse::<Arch>(), Ok(Arch::I386));
        assert_eq!(Arch::from_elf_machine(3), Some(Arch::I386));
    }

    #[test]
    fn prstatus_registers_are_known_by_name() {
        // Every register the unwinder has a column for is in pr_reg, pc included.
        for arch in Arch::ALL {
            let names = arch.prstatus().names;
            for reg in 0..NUM_REGS as u16 {
                if let Some(name) = arch.register_name(reg) {
                    assert!(names.contains(&name), "{arch}: {name} not in pr_reg");
                }
            }
            assert!(names.contains(&arch.pc_name()), "{arch}");
        }
    }

    #[test]
    fn pointer_authentication_bits_are_stripped() {
        assert_eq!(Arch::Aarch64.strip_return_address(0x003f_0000_0040_1234), 0x40_1234);
        assert_eq!(Arch::X86_64.strip_return_address(0x7fff_1234), 0x7fff_1234);
    }
}
