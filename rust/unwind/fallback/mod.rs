//! What the walk does where call frame information is missing or fails:
//! follow the frame-pointer chain (or, in 32-bit ARM code, read what the
//! function's prologue did), and, as the last resort, scan the stack for a
//! return address (Breakpad's and rust-minidump's strategies).
//!
//! Every step is validated the way Windows' `RtlWalkFrameChain` and the
//! crash processors do: the frame pointer must be word-aligned, inside the
//! stack, not below the frame's sp and strictly above the previous frame
//! pointer; a return address must be a user address, not point into the
//! stack, and land in an executable segment of a known module right after a
//! call instruction (where the module's code bytes are at hand). A step that
//! fails these checks ends the walk with a reason instead of guessing.
//!
//! Nothing here allocates: the walk's hot path stays allocation-free.

use std::fmt;
use std::str::FromStr;

use crate::arch::registers::Registers;
use crate::arch::Arch;
use crate::source::memory::Memory;
use crate::unwind::cfi::Module;
use crate::unwind::modules::ModuleSet;
use crate::unwind::{EndDetail, EndReason, ProcessFacts, Trust};

/// A way of finding a frame's caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// DWARF call frame information (`.eh_frame`, `.debug_frame`).
    Cfi,
    /// The frame-pointer chain (`[fp]` = caller's fp, `[fp + word]` = return address).
    FramePointer,
    /// The first plausible return address in the stack words above sp.
    Scan,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::Cfi, Strategy::FramePointer, Strategy::Scan];

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Cfi => "cfi",
            Strategy::FramePointer => "frame_pointer",
            Strategy::Scan => "scan",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStrategy(pub String);

impl fmt::Display for UnknownStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown unwinding strategy {:?} (expected cfi, frame_pointer or scan)", self.0)
    }
}

impl std::error::Error for UnknownStrategy {}

impl FromStr for Strategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownStrategy(s.to_owned()))
    }
}

/// An ordered set of strategies, without allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strategies {
    list: [Strategy; 3],
    len: u8,
}

impl Strategies {
    /// The strategies in the order given, each once (later repeats are dropped).
    pub fn new(order: &[Strategy]) -> Self {
        let mut out = Strategies { list: [Strategy::Cfi; 3], len: 0 };
        for &s in order {
            if !out.as_slice().contains(&s) && (out.len as usize) < out.list.len() {
                out.list[out.len as usize] = s;
                out.len += 1;
            }
        }
        out
    }

    pub fn as_slice(&self) -> &[Strategy] {
        &self.list[..self.len as usize]
    }

    pub fn first(&self) -> Option<Strategy> {
        self.as_slice().first().copied()
    }
}

/// Why a frame pointer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpProblem {
    /// 0: the outermost frame cleared it, or the register was reused.
    Zero,
    /// Not a multiple of the word size.
    Misaligned,
    /// Below the frame's own stack pointer.
    BelowSp(u64),
    /// Not above the frame pointer of the previous frame-pointer step: the
    /// chain loops or points backwards.
    NotIncreasing(u64),
    /// Its frame record is not inside the captured stack.
    OutsideStack,
    /// The return address in its record follows a direct call of another
    /// function than the frame's: the record is a caller's further up,
    /// whose frames between a frame-pointer step would hide.
    AnotherFunctionsRecord(u64),
}

/// Why a return address was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaProblem {
    /// 0 (with a non-zero fp beside it: not the end of a chain).
    Zero,
    /// Not a user-space address (x86_64: not canonical in the lower half).
    NotUserAddress,
    /// It points into the stack.
    InStack,
    /// It is in no executable segment of a known module.
    NotInCode,
    /// The instruction before it is not a call.
    NoCall,
    /// It is the program's entry point, which nothing calls.
    EntryPoint,
    /// It is a function's first byte, and no code shows a call before it.
    FunctionStart,
}

impl fmt::Display for FpProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FpProblem::Zero => f.write_str("is 0"),
            FpProblem::Misaligned => f.write_str("is not word-aligned"),
            FpProblem::BelowSp(sp) => write!(f, "is below the frame's sp {sp:#x}"),
            FpProblem::NotIncreasing(prev) => {
                write!(
                    f,
                    "is not above the previous frame pointer {prev:#x} (a loop or a backward link)"
                )
            }
            FpProblem::OutsideStack => f.write_str("points outside the captured stack"),
            FpProblem::AnotherFunctionsRecord(ra) => write!(
                f,
                "holds return address {ra:#x}, after a call of another function: not this \
                 frame's record"
            ),
        }
    }
}

impl fmt::Display for RaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RaProblem::Zero => "is 0",
            RaProblem::NotUserAddress => "is not a user-space code address",
            RaProblem::InStack => "points into the stack",
            RaProblem::NotInCode => "is in no executable segment of a known module",
            RaProblem::NoCall => "does not follow a call instruction",
            RaProblem::EntryPoint => "is the program's entry point",
            RaProblem::FunctionStart => {
                "is a function's first instruction, with no code before it to show a call"
            }
        })
    }
}

/// A frame that CFI could not unwind, as the outermost-frame rule sees it.
pub(crate) struct Unwound {
    /// The address its function is looked up at.
    pub lookup: u64,
    /// Its frame pointer, where it is known exactly: recovered by CFI or
    /// read from a frame record (not frame 0's, which may be any -O2 code's
    /// data, nor one a scan guessed).
    pub exact_fp: Option<u64>,
    /// CFI was tried and no FDE covers the pc, in a known module.
    pub no_fde: bool,
    /// The frame's exact fp points at a frame record whose saved fp is 0.
    pub record_ends_chain: bool,
}

/// Whether a frame that CFI could not unwind is the outermost one of its
/// stack, with how that is known:
/// - its pc is in the function holding its module's entry point (`_start`:
///   nothing calls it). Where the file has no symbols, that function's
///   extent is a guess that may take in the functions after it that have no
///   CFI either, so the frame must also have the zero frame pointer every
///   `_start` sets (glibc's and musl's, i386 included).
/// - on x86_64 and aarch64, it has no CFI and its frame pointer is 0, which
///   the ABIs have the outermost frame set (`_start`, and `clone`'s child
///   before it calls the thread's function: glibc, musl). A zero fp in a
///   frame that CFI covers means nothing (rbp and x29 are ordinary
///   registers in code built without frame pointers), so that rule needs
///   the FDE to be missing.
/// - on Apple's platforms, whose ABI keeps a frame record in every frame
///   ([`ProcessFacts::apple`]), its frame pointer is 0 (`thread_start`'s:
///   `_pthread_start` saved 0), or its frame record's saved fp is (dyld
///   pushes a zero record before it calls the program's `start`), with or
///   without CFI.
pub(crate) fn outermost(
    arch: Arch,
    modules: &ModuleSet,
    process: &ProcessFacts,
    frame: &Unwound,
) -> Option<EndDetail> {
    let m = modules.index_of(frame.lookup)?;
    let module = &modules.modules()[m];
    let zero_fp = frame.exact_fp == Some(0);
    // The program's entry point, where its file is missing (its symbols and
    // CFI with it): `_start` sets the zero frame pointer before it calls,
    // and the frame is within its first bytes.
    if let Some(entry) = process.entry.filter(|_| module.is_missing() && zero_fp) {
        if frame.lookup.wrapping_sub(entry) < ENTRY_REACH && modules.index_of(entry) == Some(m) {
            return Some(EndDetail::EntryPoint { entry });
        }
    }
    if let Some(function) = module.entry_function() {
        let inside = function.range.contains(&frame.lookup.wrapping_sub(module.bias));
        if inside && (function.by_symbol || zero_fp) {
            let entry = module.entry()?.wrapping_add(module.bias) & arch.address_mask();
            return Some(EndDetail::EntryPoint { entry });
        }
    }
    if module.is_go() && module.code_map().go_top_frame(frame.lookup.wrapping_sub(module.bias)) {
        return Some(EndDetail::GoTopFrame);
    }
    if process.apple {
        if zero_fp {
            return Some(EndDetail::ZeroFramePointer);
        }
        if let (true, Some(record)) = (frame.record_ends_chain, frame.exact_fp) {
            return Some(EndDetail::ChainEnd { record });
        }
    }
    let zero_fp_ends = matches!(arch, Arch::X86_64 | Arch::Aarch64);
    (zero_fp_ends && frame.no_fde && zero_fp).then_some(EndDetail::ZeroFramePointer)
}

/// How far into the function at the program's entry point a frame whose
/// module is missing is taken for `_start`'s (glibc's `_start` calls at +0x21
/// on x86_64; musl's, aarch64's and i386's sooner).
const ENTRY_REACH: u64 = 64;

/// What the fallback strategies need to know about the walk.
pub(crate) struct Context<'a> {
    pub arch: Arch,
    pub modules: &'a ModuleSet,
    /// The captured region holding frame 0's sp, when the memory knows it.
    pub stack: Option<(u64, u64)>,
    /// The frame pointer the last frame-pointer step used.
    pub last_fp: Option<u64>,
    pub scan_words: usize,
    /// The program's entry point and its threads' stacks, where known.
    pub process: &'a ProcessFacts,
}

/// The frame a fallback step starts from.
pub(crate) struct Callee {
    pub pc: u64,
    pub sp: u64,
    /// The frame itself was found by a fallback step: its sp may lie below
    /// its true one.
    pub guessed: bool,
    /// Its sp is known exactly: frame 0's, or recovered by CFI or a prologue
    /// from a frame whose sp was (not CFI's from a scanned frame).
    pub sp_known: bool,
    /// Frame 0, or a frame a signal interrupted: it may be anywhere in its
    /// function, also where it has made no frame record.
    pub interrupted: bool,
}

/// The caller a fallback step found (its registers are written in place).
pub(crate) struct Found {
    pub pc: u64,
    pub sp: u64,
    pub sp_exact: bool,
    /// The caller was interrupted where its pc is, not at a call (the frame
    /// below is Go's `runtime.sigpanic`).
    pub interrupted: bool,
    /// How it was found: by a frame record or where the ABI puts the
    /// return address (`frame_pointer`), the function's prologue
    /// (`prologue`), or among the stack's words (`scan`).
    pub trust: Trust,
}

type StepResult<T> = Result<T, (EndReason, EndDetail)>;

/// How far into a function known by its start alone (JIT code) `push rbp`
/// may come (V8 makes it the first instruction; an `endbr64` may come
/// before it).
const PROLOGUE: u64 = 16;

/// Whether the code at `pc`, in a module's file, is a signal trampoline's
/// ([`Arch::sigreturn_at`]).
pub(crate) fn sigreturn_at(arch: Arch, modules: &ModuleSet, pc: u64) -> bool {
    let Some(m) = modules.index_of(pc) else { return false };
    let module = &modules.modules()[m];
    let code = module.code_at(pc.wrapping_sub(module.bias), Arch::SIGRETURN_WINDOW);
    code.is_some_and(|code| arch.sigreturn_at(code))
}

/// How far above a handler's frame record its signal frame may begin: the
/// rest of the handler's first frame (Go's sigtramp's is 176 bytes).
const SIGNAL_FRAME_REACH: u64 = 4096;

/// The first address from `from` up (aligned as the kernel places its
/// signal frames) where [`crate::source::sigframe::restore`] finds the
/// kernel's signal frame, within [`SIGNAL_FRAME_REACH`]. aarch64 and 32-bit
/// ARM only: the architectures whose handlers return to a page in no module
/// (qemu-user's trampoline, where a real aarch64 kernel's is the vdso's; a
/// real ARM kernel's `[sigpage]` for a handler installed without a
/// restorer).
pub(crate) fn signal_frame_above<M: Memory + ?Sized>(
    arch: Arch,
    from: u64,
    mem: &mut M,
) -> Option<u64> {
    // The kernel aligns its frame to 16 bytes on aarch64, to 8 on ARM.
    let align = match arch {
        Arch::Aarch64 => 16,
        Arch::Arm => 8,
        _ => return None,
    };
    let first = from.checked_next_multiple_of(align)?;
    let mut scratch = Registers::new();
    (first..from.saturating_add(SIGNAL_FRAME_REACH)).step_by(align as usize).find(|&at| {
        crate::source::sigframe::restore(arch, at, &mut scratch, mem).is_some_and(|(_, sp)| sp > at)
    })
}

/// The most code bytes a call check looks at before a return address.
const MAX_CALL_WINDOW: usize = 16;

/// Code bytes right before a return address, from the module's file or the
/// process's memory.
struct CodeBefore {
    bytes: [u8; MAX_CALL_WINDOW],
    len: usize,
}

impl CodeBefore {
    fn get(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

mod frame_pointer;
mod prologue;
mod scan;

impl Context<'_> {
    fn in_stack(&self, addr: u64) -> bool {
        self.stack.is_some_and(|(start, end)| start <= addr && addr < end)
    }

    /// The `call_window()` code bytes before return address `ra` (a runtime
    /// address) in `module`: from its file, else, where the file is missing
    /// (or does not hold them), from the process's memory -- a core or a
    /// dump holds the code pages a debugger or the kernel wrote into it.
    /// Fewer at the start of a segment; None where neither has them.
    fn code_before<M: Memory + ?Sized>(
        &self,
        module: &Module,
        ra: u64,
        mem: &mut M,
    ) -> Option<CodeBefore> {
        let window = self.arch.call_window().min(MAX_CALL_WINDOW);
        let mut out = CodeBefore { bytes: [0; MAX_CALL_WINDOW], len: 0 };
        if let Some(code) = module.code_before(ra.wrapping_sub(module.bias), window) {
            out.bytes[..code.len()].copy_from_slice(code);
            out.len = code.len();
            return Some(out);
        }
        // From memory: as many of the bytes before `ra` as the module's code
        // and the captured memory hold, the nearest first.
        for back in 1..=window as u64 {
            let at = ra.checked_sub(back)?;
            if !module.is_code(at.wrapping_sub(module.bias)) {
                break;
            }
            let Some(byte) = mem.read_sized(at, 1) else { break };
            out.bytes[window - back as usize] = byte as u8;
            out.len += 1;
        }
        if out.len == 0 {
            return None;
        }
        out.bytes.copy_within(window - out.len..window, 0);
        Some(out)
    }

    /// The checks of [`Context::check_return_address`] that any caller's
    /// return address must pass, CFI's too: a user address, in no thread's
    /// stack, in the code of a known module (where modules are known). A
    /// damaged `.eh_frame` (one bit flipped) can give a return address on the
    /// stack with every other rule intact: that is no frame to call `cfi`.
    pub fn check_code_address(&self, ra: u64) -> Result<(), RaProblem> {
        if !self.arch.is_user_address(ra) {
            return Err(RaProblem::NotUserAddress);
        }
        if self.in_stack(ra) || self.process.in_a_stack(ra) {
            return Err(RaProblem::InStack);
        }
        let modules = self.modules.modules();
        if modules.is_empty() {
            return Ok(());
        }
        let inside = ra.wrapping_sub(1);
        let Some(m) = self.modules.index_of(inside) else { return Err(RaProblem::NotInCode) };
        let module = &modules[m];
        match module.is_code(inside.wrapping_sub(module.bias)) {
            true => Ok(()),
            false => Err(RaProblem::NotInCode),
        }
    }

    /// Check a return address (already stripped of pointer-authentication
    /// bits): a user address, not in the stack, in the code of a known
    /// module, after a call instruction where the code is known (the
    /// module's file, or the process's memory: see [`Context::code_before`]).
    pub fn check_return_address<M: Memory + ?Sized>(
        &self,
        ra: u64,
        mem: &mut M,
    ) -> Result<(), RaProblem> {
        self.check_return_address_in(ra, None, mem)
    }

    /// [`Context::check_return_address`] for a word as the stack holds it
    /// (`raw`, not stripped): a 32-bit ARM return address says in bit 0
    /// whether its caller is Thumb code, and only that instruction set's
    /// calls may precede it.
    pub fn check_saved_return_address<M: Memory + ?Sized>(
        &self,
        raw: u64,
        mem: &mut M,
    ) -> Result<(), RaProblem> {
        let ra = self.arch.strip_return_address(raw);
        self.check_return_address_in(ra, self.arch.thumb_caller(raw), mem)
    }

    fn check_return_address_in<M: Memory + ?Sized>(
        &self,
        ra: u64,
        thumb: Option<bool>,
        mem: &mut M,
    ) -> Result<(), RaProblem> {
        if ra == 0 {
            return Err(RaProblem::Zero);
        }
        if !self.arch.is_user_address(ra) {
            return Err(RaProblem::NotUserAddress);
        }
        // Any thread's stack: the argument strings at the top of the main
        // thread's, a word of another thread's stack.
        if self.in_stack(ra) || self.process.in_a_stack(ra) {
            return Err(RaProblem::InStack);
        }
        if self.process.entry == Some(ra) {
            return Err(RaProblem::EntryPoint);
        }
        let modules = self.modules.modules();
        if modules.is_empty() {
            return Ok(()); // nothing to check against
        }
        // The call may be the last instruction of the module: look at ra − 1.
        let inside = ra.wrapping_sub(1);
        let Some(m) = self.modules.index_of(inside) else {
            return Err(RaProblem::NotInCode);
        };
        let module = &modules[m];
        let elf = ra.wrapping_sub(module.bias);
        if !module.is_code(elf.wrapping_sub(1)) {
            return Err(RaProblem::NotInCode);
        }
        // PLT entries jump, they make no call: a word after one (an ARM
        // entry's `ldr pc, [ip, #n]!` reads as a Thumb-2 `bl`) is none.
        if module.code_map().in_plt(elf.wrapping_sub(1)) {
            return Err(RaProblem::NoCall);
        }
        // A signal handler returns to its trampoline's first instruction.
        if sigreturn_at(self.arch, self.modules, ra) {
            return Ok(());
        }
        // A goroutine's first frame returns to runtime.goexit's second
        // instruction, which no call precedes.
        if self.go_exit_in(module, elf) {
            return Ok(());
        }
        match self.code_before(module, ra, mem) {
            Some(code) if !self.arch.call_before_in(code.get(), thumb) => Err(RaProblem::NoCall),
            Some(_) => Ok(()),
            // No code to look at: a function's first byte is taken for one
            // only where the code before it can be seen to be a call (after
            // a call that does not return); a pointer to a function is more
            // likely.
            None if module.foreign_function_start(elf) => Err(RaProblem::FunctionStart),
            None => Ok(()),
        }
    }

    /// Check `fp` as the frame pointer of a frame whose sp is `sp`.
    fn check_fp(&self, fp: u64, sp: u64) -> Result<(), FpProblem> {
        let w = self.arch.word_size();
        if fp == 0 {
            return Err(FpProblem::Zero);
        }
        if fp % w != 0 {
            return Err(FpProblem::Misaligned);
        }
        if fp < sp {
            return Err(FpProblem::BelowSp(sp));
        }
        if let Some(prev) = self.last_fp {
            if fp <= prev {
                return Err(FpProblem::NotIncreasing(prev));
            }
        }
        if let Some((start, end)) = self.stack {
            let record_end = fp.checked_add(2 * w).ok_or(FpProblem::OutsideStack)?;
            if fp < start || record_end > end {
                return Err(FpProblem::OutsideStack);
            }
        }
        Ok(())
    }

    /// The caller's registers: the callee's callee-saved ones (the ABI's
    /// "same value"), sp, fp (`fp`: the register and its value; unknown
    /// where None), and the pc column; lr is unknown in a caller
    /// (it held this frame's return address).
    fn set_caller(
        &self,
        regs: &Registers,
        caller: &mut Registers,
        pc: u64,
        sp: u64,
        fp: Option<(u16, u64)>,
    ) {
        let arch = self.arch;
        caller.inherit(regs, arch.same_value_mask());
        caller.set(arch.sp(), sp);
        match fp {
            Some((reg, fp)) => caller.set(reg, fp),
            None => caller.forget(arch.fp()),
        }
        if let Some(lr) = arch.link_register() {
            caller.forget(lr);
        }
        if let Some(col) = arch.pc_column() {
            caller.set(col, pc);
        }
    }
}
