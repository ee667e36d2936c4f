//! What the walk does where call frame information is missing or fails:
//! follow the frame-pointer chain, and, as the last resort, scan the stack
//! for a return address (Breakpad's and rust-minidump's strategies).
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
use crate::unwind::{EndDetail, EndReason, ProcessFacts};

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
    /// Its return address was found among the stack's words, not where a
    /// frame record or the ABI puts it: the frame's trust is `scan`.
    pub scanned: bool,
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

/// The first address from `from` up (16-byte aligned, as the kernel places
/// its signal frames) where [`crate::source::sigframe::restore`] finds the kernel's
/// signal frame, within [`SIGNAL_FRAME_REACH`]. aarch64 only: the one
/// architecture whose handlers return to a page in no module (qemu-user's
/// trampoline, where a real kernel's is the vdso's).
pub(crate) fn signal_frame_above<M: Memory + ?Sized>(
    arch: Arch,
    from: u64,
    mem: &mut M,
) -> Option<u64> {
    if arch != Arch::Aarch64 {
        return None;
    }
    let first = from.checked_add(15)? & !15;
    let mut scratch = Registers::new();
    (first..from.saturating_add(SIGNAL_FRAME_REACH)).step_by(16).find(|&at| {
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
            Some(code) if !self.arch.call_before(code.get()) => Err(RaProblem::NoCall),
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
    /// "same value"), sp, fp, and the pc column; lr is unknown in a caller
    /// (it held this frame's return address).
    fn set_caller(
        &self,
        regs: &Registers,
        caller: &mut Registers,
        pc: u64,
        sp: u64,
        fp: Option<u64>,
    ) {
        let arch = self.arch;
        caller.inherit(regs, arch.same_value_mask());
        caller.set(arch.sp(), sp);
        match fp {
            Some(fp) => caller.set(arch.fp(), fp),
            None => caller.forget(arch.fp()),
        }
        if let Some(lr) = arch.link_register() {
            caller.forget(lr);
        }
        if let Some(col) = arch.pc_column() {
            caller.set(col, pc);
        }
    }

    /// One frame-pointer step: the frame record at fp gives the caller's pc
    /// and fp; the caller's sp is just above the record. Frame 0, or a frame
    /// a signal interrupted, may be a leaf that made no record (see `leaf`).
    pub fn frame_pointer<M: Memory + ?Sized>(
        &mut self,
        callee: &Callee,
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> StepResult<Found> {
        let arch = self.arch;
        let w = arch.word_size();
        let fp = regs.get(arch.fp());
        if callee.interrupted {
            if let Some(found) = self.leaf(callee, fp, regs, caller, mem) {
                return Ok(found);
            }
        }
        let Some(fp) = fp else {
            return Err((EndReason::MissingRegister, EndDetail::Register(arch.fp())));
        };
        // Go on aarch64 keeps a function's frame record one word below its
        // sp (the caller's fp at sp - 8, its own return address at sp).
        let floor = if self.go_record_below_sp(callee.pc) {
            callee.sp.saturating_sub(w)
        } else {
            callee.sp
        };
        if let Err(problem) = self.check_fp(fp, floor) {
            return Err((EndReason::FpInvalid, EndDetail::FramePointer { fp, problem }));
        }
        let (fp_slot, ra_slot) = arch.frame_record();
        let outside = (
            EndReason::FpInvalid,
            EndDetail::FramePointer { fp, problem: FpProblem::OutsideStack },
        );
        let caller_fp = mem.read_sized(fp + fp_slot, w as u8).ok_or(outside)?;
        let raw = mem.read_sized(fp + ra_slot, w as u8).ok_or(outside)?;
        let ra = arch.strip_return_address(raw);
        // A record of two zeros is how the outermost frames end the chain
        // where lr is a register (musl's `_start` clears x29 and x30, then
        // branches); a lone 0 is damage. Where a call pushes the return
        // address (x86), no record holds 0: two zeros are data (code built
        // without frame pointers keeps anything in rbp), not the end.
        if ra == 0 && caller_fp == 0 && arch.link_register().is_some() {
            return Err((EndReason::PcZero, EndDetail::None));
        }
        // Go's signal handler makes a faulting goroutine call sigpanic as if
        // from the faulting instruction: sigpanic's return address is that
        // instruction's, which follows no call, and its frame the interrupted
        // one (found here where a stripped program has no CFI).
        let interrupted = self.in_go_sigpanic(callee.pc);
        let checked = self.check_return_address(ra, mem);
        // A signal handler's return address in no module may be a trampoline
        // on a page of its own (qemu-user's on aarch64): believed where the
        // kernel's signal frame lies above the record, which then gives the
        // trampoline frame's sp exactly.
        if checked == Err(RaProblem::NotInCode)
            && self.modules.index_of(ra.wrapping_sub(1)).is_none()
        {
            if let Some(sp) = signal_frame_above(arch, fp + 2 * w, mem) {
                self.set_caller(regs, caller, ra, sp, Some(caller_fp));
                self.last_fp = Some(fp);
                return Ok(Found {
                    pc: ra,
                    sp,
                    sp_exact: true,
                    interrupted: false,
                    scanned: false,
                });
            }
        }
        match checked {
            Err(RaProblem::NoCall) if interrupted => {}
            Err(problem) => {
                return Err((
                    EndReason::BadReturnAddress,
                    EndDetail::ReturnAddress { address: ra, problem },
                ))
            }
            Ok(()) => {}
        }
        // The record must be this frame's. A frame that made no record of its
        // own (code built without frame pointers: glibc's raise keeps rbp as
        // abort's caller left it) points at a record further up, and following
        // it would hide the frames between: refused where the call before the
        // record's return address is a direct call of another function, and a
        // word between the frame's sp and the record is a return address after
        // a call of the frame's own function -- its real return address, taken
        // instead (trust `scan`). (A tail call, or an ABI wrapper's jump,
        // leaves nothing below the record that returns to the frame.)
        if !interrupted {
            if let Some(found) = self.hides_frames(callee, fp, ra, mem) {
                return Ok(self.scanned(found, regs, caller, mem));
            }
        }
        let sp = fp + 2 * w;
        self.set_caller(regs, caller, ra, sp, Some(caller_fp));
        if interrupted {
            self.go_faulting_lr(caller_fp, caller, mem);
        }
        self.last_fp = Some(fp);
        let sp_exact = arch.frame_record_gives_exact_sp();
        Ok(Found { pc: ra, sp, sp_exact, interrupted, scanned: false })
    }

    /// Where the record at `fp`, whose return address is `ra`, is another
    /// function's further up the stack (see [`Context::frame_pointer`]): the
    /// frame's own return address below it, and its slot.
    fn hides_frames<M: Memory + ?Sized>(
        &self,
        callee: &Callee,
        fp: u64,
        ra: u64,
        mem: &mut M,
    ) -> Option<(u64, u64)> {
        let lookup = if callee.interrupted { callee.pc } else { callee.pc.wrapping_sub(1) };
        if !matches!(self.call_before(ra, lookup, mem), CallBefore::OtherFunction) {
            return None;
        }
        let w = self.arch.word_size();
        let from = callee.sp.checked_next_multiple_of(w).unwrap_or(callee.sp);
        let slots = (0..self.scan_words as u64).map_while(|i| from.checked_add(i * w));
        slots.take_while(|&at| at < fp).find_map(|at| {
            let word = self.arch.strip_return_address(mem.read_sized(at, w as u8)?);
            let own = word != ra
                && self.check_return_address(word, mem).is_ok()
                && matches!(self.call_before(word, lookup, mem), CallBefore::ThisFunction);
            own.then_some((at, word))
        })
    }

    /// Frame 0 without CFI (or a frame a signal interrupted, which may be
    /// anywhere too) may be a leaf that made no frame record: its fp
    /// is still its caller's, and its return address is in lr (aarch64) or
    /// at sp (x86_64, where a call pushes it). Or it is in its prologue,
    /// between `push rbp` and `mov rbp, rsp`: [sp] is fp itself, and the
    /// return address is the word above. Taken when that is a plausible
    /// return address that the record at fp does not repeat, and either it
    /// is in another module than the pc, or the direct call before it calls
    /// the function holding the pc: its target is at or below the pc, and
    /// the call itself lies outside [target, pc] (a non-leaf's lr points
    /// after a call inside itself).
    ///
    /// Code known by its functions alone (JIT code named by a perf map: no
    /// code bytes, no CFI) has no call to look at, and a frame past its
    /// prologue may hold anything at sp (V8's optimized code keeps stale
    /// return addresses into node there): its frame 0 is a leaf only where
    /// its pc shows that it has made no record yet, at its function's first
    /// instruction, or with fp pushed within its first `PROLOGUE` bytes.
    pub fn leaf<M: Memory + ?Sized>(
        &self,
        callee: &Callee,
        fp: Option<u64>,
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Option<Found> {
        let arch = self.arch;
        let w = arch.word_size();
        let (raw, sp, pushed) = match arch.link_register() {
            Some(lr) => (regs.get(lr)?, callee.sp, false),
            None => {
                let top = mem.read_sized(callee.sp, w as u8)?;
                let above = callee.sp.checked_add(w)?;
                if top != 0 && fp == Some(top) {
                    (mem.read_sized(above, w as u8)?, above.checked_add(w)?, true)
                } else {
                    (top, above, false)
                }
            }
        };
        let pc_module = self.modules.index_of(callee.pc);
        let known = pc_module.and_then(|m| {
            let module = &self.modules.modules()[m];
            module.function_offset(callee.pc.wrapping_sub(module.bias))
        });
        if let Some(offset) = known {
            let unframed = if pushed { offset <= PROLOGUE } else { offset == 0 };
            if !unframed {
                return None;
            }
        }
        let ra = arch.strip_return_address(raw);
        self.check_return_address(ra, mem).ok()?;
        let in_record = fp.and_then(|fp| mem.read_sized(fp.checked_add(w)?, w as u8));
        if in_record.map(|r| arch.strip_return_address(r)) == Some(ra) {
            return None;
        }
        let ra_module = self.modules.index_of(ra.wrapping_sub(1))?;
        // A call the frame made would have left a return address into its
        // own module: one into another module (or a pc in no module) is
        // the one it was called with. Within one module, the direct call
        // before it must call the pc's function, unless the pc's place in
        // its function said so already.
        if pc_module == Some(ra_module) && known.is_none() {
            let module = &self.modules.modules()[ra_module];
            let code = self.code_before(module, ra, mem)?;
            let target = arch.direct_call_target(ra, code.get())?;
            let call = ra - 1; // the call's last byte
            let calls_this_function = target <= callee.pc && callee.pc - target < 1 << 20;
            if !calls_this_function || (target <= call && call <= callee.pc) {
                return None;
            }
        }
        self.set_caller(regs, caller, ra, sp, fp);
        let sp_exact = arch.link_register().is_none();
        Some(Found { pc: ra, sp, sp_exact, interrupted: false, scanned: false })
    }

    /// Whether the direct call before return address `ra` calls the function
    /// it is in: by the module's symbols, else (a module without them, or
    /// without its file) a call back to at most 1 MiB before it.
    fn recursive_call<M: Memory + ?Sized>(&self, ra: u64, mem: &mut M) -> bool {
        let Some(m) = self.modules.index_of(ra.wrapping_sub(1)) else { return false };
        let module = &self.modules.modules()[m];
        let Some(code) = self.code_before(module, ra, mem) else { return false };
        let Some(target) = self.arch.direct_call_target(ra, code.get()) else { return false };
        let call = ra - 1;
        let elf = call.wrapping_sub(module.bias);
        match module.code_map().function(elf) {
            Some(function) => function.start == target.wrapping_sub(module.bias),
            None => target <= call && call - target < 1 << 20,
        }
    }

    /// Whether return address `ra` is left over from a call the function
    /// holding `pc` made itself: its direct call lies at or below the pc and
    /// at or above the called function (a stale word below the frame's true
    /// sp, e.g. from i386's `call __x86.get_pc_thunk`).
    fn made_here<M: Memory + ?Sized>(&self, ra: u64, pc: u64, mem: &mut M) -> bool {
        // The frame's own return address again: the call that made the frame,
        // a level deeper in a recursion, not a stale one.
        if ra == pc {
            return false;
        }
        let Some(m) = self.modules.index_of(ra.wrapping_sub(1)) else { return false };
        if self.modules.index_of(pc) != Some(m) {
            return false;
        }
        let module = &self.modules.modules()[m];
        let Some(code) = self.code_before(module, ra, mem) else { return false };
        let Some(target) = self.arch.direct_call_target(ra, code.get()) else { return false };
        let call = ra - 1;
        target <= call && call <= pc
    }

    /// Whether the frame at `pc` is an aarch64 Go function's, whose prologue
    /// stores the caller's fp one word below its new sp and points fp there
    /// (`MOVD.W R30, -size(RSP); MOVD R29, -8(RSP); SUB $8, RSP, R29`).
    fn go_record_below_sp(&self, pc: u64) -> bool {
        if self.arch != Arch::Aarch64 {
            return false;
        }
        let Some(m) = self.modules.index_of(pc) else { return false };
        self.modules.modules()[m].is_go()
    }

    /// The faulting frame's lr, where Go's signal handler saved it (aarch64):
    /// `preparePanic` moves sp down 16 bytes and stores lr there before
    /// making the faulting pc look like sigpanic's caller, so it lies one
    /// word below the faulting frame's record (fp = sp − 8 in a Go frame, or
    /// the caller's, at the same place, in a frameless leaf). A leaf's lr is
    /// its return address; [`Context::leaf`] decides whether the frame was
    /// one.
    fn go_faulting_lr<M: Memory + ?Sized>(&self, fp: u64, caller: &mut Registers, mem: &mut M) {
        let Some(lr) = self.arch.link_register() else { return };
        let w = self.arch.word_size();
        if let Some(saved) = fp.checked_sub(w).and_then(|at| mem.read_sized(at, w as u8)) {
            caller.set(lr, saved);
        }
    }

    /// Whether `ra` is runtime.goexit's second instruction, the return
    /// address the Go runtime gives every goroutine's first frame.
    fn go_exit_return(&self, ra: u64) -> bool {
        let Some(m) = self.modules.index_of(ra.wrapping_sub(1)) else { return false };
        let module = &self.modules.modules()[m];
        self.go_exit_in(module, ra.wrapping_sub(module.bias))
    }

    /// [`Context::go_exit_return`] for a return address at `elf` in `module`.
    fn go_exit_in(&self, module: &Module, elf: u64) -> bool {
        let quantum = self.arch.min_instruction_size();
        module.is_go()
            && module.code_map().go_exit(elf.wrapping_sub(1)) == Some(elf.wrapping_sub(quantum))
    }

    /// Whether `pc` is in Go's `runtime.sigpanic`, by the module's symbols.
    fn in_go_sigpanic(&self, pc: u64) -> bool {
        let Some(m) = self.modules.index_of(pc) else { return false };
        let module = &self.modules.modules()[m];
        module.in_go_sigpanic(pc.wrapping_sub(module.bias))
    }

    /// What the direct call before return address `ra` says of it as the
    /// return address of the frame at `pc` (see [`Context::scan`]): whether
    /// it calls the frame's function, by address in its own module, or
    /// through a PLT entry named after one of that function's symbols.
    fn call_before<M: Memory + ?Sized>(&self, ra: u64, pc: u64, mem: &mut M) -> CallBefore {
        let modules = self.modules.modules();
        let (Some(m), Some(pc_m)) =
            (self.modules.index_of(ra.wrapping_sub(1)), self.modules.index_of(pc))
        else {
            return CallBefore::Other;
        };
        let (caller, callee) = (&modules[m], &modules[pc_m]);
        let Some(code) = self.code_before(caller, ra, mem) else {
            return CallBefore::Other;
        };
        // (ELF addresses from here: the modules' maps are in those.)
        let Some(target) = self.arch.direct_call_target(ra, code.get()) else {
            return CallBefore::Other;
        };
        let target = target.wrapping_sub(caller.bias);
        let callee_map = callee.code_map();
        let Some(function) = callee_map.function(pc.wrapping_sub(callee.bias)) else {
            return CallBefore::Other;
        };
        let caller_map = caller.code_map();
        if let Some(name) = caller_map.plt_target(target) {
            return match callee_map.is_named(function.start, name) {
                true => CallBefore::ThisFunction,
                false => CallBefore::OtherFunction,
            };
        }
        if m != pc_m || caller_map.in_plt(target) {
            return CallBefore::Other; // a PLT entry that names nothing
        }
        if function.start == target {
            CallBefore::ThisFunction
        } else if function.contains(&target) {
            CallBefore::Other // a call into the function itself
        } else {
            // Another function's code, named or not (a stripped library's
            // `.dynsym` names only its exported functions).
            CallBefore::OtherFunction
        }
    }

    /// Scan up to `scan_words` stack words from the frame's sp for a
    /// plausible return address; the caller's sp is just above its slot.
    ///
    /// The first one is taken, unless the direct call before it calls code
    /// outside the frame's function (by the module's symbols) and outside
    /// the PLT: such a word is often stale, left in the frame's own
    /// uninitialized space by an earlier call (musl's `raise`, called by
    /// `abort`, keeps `main`'s old return address from `abort` below its
    /// own), though it may also be a caller that reached the frame's
    /// function by a tail call. So the scan goes on, and takes a later
    /// return address after a direct call of the frame's own function, if
    /// there is one before any other plausible word; else the first one.
    pub fn scan<M: Memory + ?Sized>(
        &mut self,
        callee: &Callee,
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> StepResult<Found> {
        let arch = self.arch;
        let w = arch.word_size();
        let from = callee.sp.checked_next_multiple_of(w).unwrap_or(callee.sp);
        let mut slot = from;
        // The first plausible word after a call of another function.
        let mut other_function = None;
        if !self.modules.modules().is_empty() {
            for _ in 0..self.scan_words {
                let Some(end) = slot.checked_add(w) else { break };
                if self.stack.is_some_and(|(_, stack_end)| end > stack_end) {
                    break;
                }
                let Some(value) = mem.read_sized(slot, w as u8) else { break };
                let ra = arch.strip_return_address(value);
                // A frame found by a fallback step may have come from a copy
                // of its return address (i386's `main` copies it when it
                // realigns the stack): the original, above the guessed sp, is
                // not another frame, even where the call was indirect. (The
                // same return address after a call of its own function is a
                // recursion's next level.)
                let copy = callee.guessed && ra == callee.pc && !self.recursive_call(ra, mem);
                if ra != 0
                    && !copy
                    && self.check_return_address(ra, mem).is_ok()
                    && !self.made_here(ra, callee.pc, mem)
                {
                    // goexit's return address lies only at the top of a
                    // goroutine's stack, where the runtime put it: no stale
                    // copy of it is left below a frame.
                    let found = match self.go_exit_return(ra) {
                        true => CallBefore::ThisFunction,
                        false => self.call_before(ra, callee.pc, mem),
                    };
                    let taken = match found {
                        CallBefore::OtherFunction => {
                            other_function.get_or_insert((slot, ra));
                            slot = end;
                            continue;
                        }
                        CallBefore::ThisFunction => (slot, ra),
                        CallBefore::Other => other_function.unwrap_or((slot, ra)),
                    };
                    return Ok(self.scanned(taken, regs, caller, mem));
                }
                slot = end;
            }
        }
        match other_function {
            Some(taken) => Ok(self.scanned(taken, regs, caller, mem)),
            None => Err((EndReason::ScanFailed, EndDetail::Scan { from, to: slot })),
        }
    }

    /// The caller a scan found: return address `ra`, read at `slot`.
    fn scanned<M: Memory + ?Sized>(
        &self,
        (slot, ra): (u64, u64),
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Found {
        let arch = self.arch;
        let w = arch.word_size();
        let end = slot + w;
        // The word below a return address is the caller's fp when the
        // function it returns from made a frame record (aarch64 always
        // stores lr with x29; x86_64 pushes rbp right after the call): taken
        // when it looks like one, else the frame's fp is kept (callee-saved).
        let below = slot.checked_sub(w).and_then(|a| mem.read_sized(a, w as u8));
        let caller_fp = match below {
            Some(v) if v % w == 0 && v > slot && self.stack.is_none_or(|(_, e)| v < e) => Some(v),
            _ => regs.get(arch.fp()),
        };
        self.set_caller(regs, caller, ra, end, caller_fp);
        let sp_exact = !arch.return_address_is_in_a_record();
        Found { pc: ra, sp: end, sp_exact, interrupted: false, scanned: true }
    }
}

/// What the direct call before a plausible return address calls, against
/// the function of the frame a scan looks for the caller of.
enum CallBefore {
    /// That function's first instruction.
    ThisFunction,
    /// Code outside that function, by the module's symbols, and outside
    /// its PLT; or a PLT entry named after another function.
    OtherFunction,
    /// Nothing known: an indirect call, a call through a PLT entry that
    /// names no symbol, a module without symbols.
    Other,
}
