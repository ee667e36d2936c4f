//! The unwind loop: from a frame's registers, find the rules for its pc,
//! compute the CFA, recover the caller's registers, repeat.

use std::ops::Range;
use std::sync::Arc;

use gimli::UnwindContext;

use crate::arch::{Arch, DefaultRule};
use crate::cfi::{CfaRule, FullRow, LookupError, Module, RegRule, RuleSet};
use crate::expr::{self, ExprError};
use crate::memory::Memory;
use crate::modules::ModuleSet;
pub use crate::modules::OverlapError;
use crate::registers::Registers;
use crate::rule_cache::RuleCache;
pub use crate::rule_cache::Stats;

/// How a frame was found, best first (rust-minidump's trust levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trust {
    /// Frame 0: the registers were given.
    Context,
    /// Recovered with call frame information.
    Cfi,
}

impl Trust {
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Context => "context",
            Trust::Cfi => "cfi",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Frame 0: the instruction pointer; later frames: the return address.
    pub pc: u64,
    pub sp: u64,
    /// The canonical frame address, once it was computed.
    pub cfa: Option<u64>,
    pub trust: Trust,
    /// The pc is not a return address but where the thread was stopped:
    /// frame 0, and the frame a signal interrupted.
    pub interrupted: bool,
    /// This frame's own CIE has the `S` augmentation: a signal trampoline
    /// (glibc's `__restore_rt`), whose pc the kernel set, not a call.
    pub signal_frame: bool,
}

impl Frame {
    /// The address to look up this frame's function and line at: the pc
    /// itself where it was not reached by a call, else pc − 1, inside the
    /// call instruction (a call can be the last instruction of a function).
    pub fn lookup_pc(&self) -> u64 {
        if self.interrupted || self.signal_frame {
            self.pc
        } else {
            self.pc.wrapping_sub(1)
        }
    }
}

/// Why a walk stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndReason {
    /// The return-address rule is undefined: the outermost frame (`_start`, `clone`).
    EndOfStack,
    /// The recovered return address is 0.
    PcZero,
    /// The caller's stack pointer is not above the frame's.
    CfaNotIncreasing,
    /// A read fell outside the captured memory.
    Memory,
    /// The pc is in no module that was added.
    NoModule,
    /// The pc's module has no FDE covering it.
    NoUnwindInfo,
    /// A rule needs a register whose value is not known.
    MissingRegister,
    /// The CFI or an expression in it is malformed.
    BadCfi,
    /// `max_frames` frames were found and the walk could go on.
    FrameLimit,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::EndOfStack => "end_of_stack",
            EndReason::PcZero => "pc_zero",
            EndReason::CfaNotIncreasing => "cfa_not_increasing",
            EndReason::Memory => "memory",
            EndReason::NoModule => "no_module",
            EndReason::NoUnwindInfo => "no_unwind_info",
            EndReason::MissingRegister => "missing_register",
            EndReason::BadCfi => "bad_cfi",
            EndReason::FrameLimit => "frame_limit",
        }
    }

    /// Whether this is how a complete stack ends.
    pub fn is_clean(self) -> bool {
        matches!(self, EndReason::EndOfStack | EndReason::PcZero)
    }
}

/// What exactly went wrong, for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndDetail {
    None,
    /// The address read or looked up.
    Address(u64),
    Register(u16),
    Expr(ExprError),
    Lookup(LookupError),
    /// Caller sp vs this frame's sp.
    Sp {
        caller: u64,
        frame: u64,
    },
}

/// How and where the walk ended. Copy, so ending allocates nothing; the
/// message is made on demand by [`Unwinder::describe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    pub reason: EndReason,
    /// The index of the frame being unwound when the walk stopped.
    pub frame: usize,
    /// The address used to look up that frame's rules.
    pub lookup_pc: u64,
    /// The module that address fell in, if any (index into the unwinder's modules).
    pub module: Option<usize>,
    pub detail: EndDetail,
}

/// Unwinds stacks for one architecture over a set of modules. One
/// `Unwinder` keeps its caches warm across calls; it is not `Sync`: use one
/// per thread (the modules themselves are shared through `Arc`).
pub struct Unwinder {
    arch: Arch,
    modules: Arc<ModuleSet>,
    ctx: Box<UnwindContext<usize>>,
    cache: RuleCache,
}

/// The frame being unwound.
struct FrameState {
    pc: u64,
    sp: u64,
    /// Frame 0, or interrupted by a signal: its pc was not a return address.
    interrupted: bool,
}

/// The caller found by one step (its registers are written in place).
struct Caller {
    pc: u64,
    sp: u64,
    /// The callee's CIE marks a signal frame: the caller was interrupted.
    interrupted: bool,
}

type Step = Result<Caller, (EndReason, EndDetail)>;

impl Unwinder {
    pub fn new(arch: Arch) -> Self {
        Unwinder {
            arch,
            modules: Arc::new(ModuleSet::new()),
            ctx: Box::new(UnwindContext::new()),
            cache: RuleCache::new(),
        }
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    pub fn modules(&self) -> &[Arc<Module>] {
        self.modules.modules()
    }

    /// The module set walks use now.
    pub fn module_set(&self) -> &Arc<ModuleSet> {
        &self.modules
    }

    /// Walk over another set of modules (another process of a profile). The
    /// rule cache is keyed by set, so nothing cached is lost or misused.
    pub fn set_modules(&mut self, modules: Arc<ModuleSet>) {
        self.modules = modules;
    }

    /// Add a module; its runtime range must not overlap one already added.
    pub fn add_module(&mut self, module: Arc<Module>) -> Result<(), OverlapError> {
        self.modules = Arc::new(self.modules.with_module(module)?);
        Ok(())
    }

    /// Hits and misses of the rule cache since the unwinder was made.
    pub fn cache_stats(&self) -> Stats {
        self.cache.stats
    }

    /// The index of the module whose range holds `pc`.
    pub fn module_index(&self, pc: u64) -> Option<usize> {
        self.modules.index_of(pc)
    }

    /// The rules in force at runtime address `pc`, with the FDE's runtime
    /// range: for introspection and tests (bypasses the cache).
    pub fn row_at(&mut self, pc: u64) -> Result<(usize, FullRow, Range<u64>), LookupError> {
        let index = self.module_index(pc).ok_or(LookupError::NoFde)?;
        let module = &self.modules.modules()[index];
        let (row, range) = module.find_full_row(pc.wrapping_sub(module.bias), &mut self.ctx)?;
        let bias = module.bias;
        Ok((index, row, range.start.wrapping_add(bias)..range.end.wrapping_add(bias)))
    }

    /// Unwind from `pc` and `regs` (which must hold the stack pointer),
    /// reading memory through `mem`. The frames go into `frames` (cleared
    /// first, so one vector can be reused without allocating).
    pub fn unwind<M: Memory + ?Sized>(
        &mut self,
        pc: u64,
        regs: &Registers,
        mem: &mut M,
        max_frames: usize,
        frames: &mut Vec<Frame>,
    ) -> End {
        frames.clear();
        let arch = self.arch;
        let mut end = End {
            reason: EndReason::FrameLimit,
            frame: 0,
            lookup_pc: pc,
            module: None,
            detail: EndDetail::None,
        };
        let Some(sp) = regs.get(arch.sp()) else {
            end.reason = EndReason::MissingRegister;
            end.detail = EndDetail::Register(arch.sp());
            return end;
        };
        if max_frames == 0 {
            return end;
        }
        let mut callee = FrameState { pc, sp, interrupted: true };
        // Two register files, the callee's and the caller's, swapped by
        // index rather than by copying.
        let mut files = [*regs, Registers::new()];
        let mut current = 0;
        if let Some(col) = arch.pc_column() {
            files[0].set(col, pc);
        }
        frames.push(Frame {
            pc,
            sp,
            cfa: None,
            trust: Trust::Context,
            interrupted: true,
            signal_frame: false,
        });
        loop {
            // Frame 0 and frames interrupted by a signal are looked up at
            // their pc; the others at pc - 1, inside the call that made them.
            let lookup = if callee.interrupted { callee.pc } else { callee.pc.wrapping_sub(1) };
            end.frame = frames.len() - 1;
            end.lookup_pc = lookup;
            let [a, b] = &mut files;
            let (callee_regs, caller_regs) = if current == 0 { (&*a, b) } else { (&*b, a) };
            match self.step(lookup, &callee, callee_regs, caller_regs, mem, frames) {
                Err((reason, detail)) => {
                    end.module = self.module_index(lookup);
                    end.reason = reason;
                    end.detail = detail;
                    return end;
                }
                Ok(caller) => {
                    if frames.len() >= max_frames {
                        end.reason = EndReason::FrameLimit;
                        end.detail = EndDetail::None;
                        return end;
                    }
                    frames.push(Frame {
                        pc: caller.pc,
                        sp: caller.sp,
                        cfa: None,
                        trust: Trust::Cfi,
                        interrupted: caller.interrupted,
                        signal_frame: false,
                    });
                    callee.pc = caller.pc;
                    callee.sp = caller.sp;
                    callee.interrupted = caller.interrupted;
                    current ^= 1;
                }
            }
        }
    }

    /// Unwind one frame: find the rules for `lookup` in module `m` (cached),
    /// then recover the caller into `caller_regs`.
    // The hot path: the state is passed as borrowed pieces rather than
    // bundled, so that the two register files can be borrowed apart.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn step<M: Memory + ?Sized>(
        &mut self,
        lookup: u64,
        callee: &FrameState,
        callee_regs: &Registers,
        caller_regs: &mut Registers,
        mem: &mut M,
        frames: &mut [Frame],
    ) -> Step {
        // The cache is keyed by address alone: it is cleared whenever the
        // modules change, so a hit also names the module, without a search.
        let generation = self.modules.generation();
        if let Some((m, row)) = self.cache.get(lookup, generation) {
            let module = &*self.modules.modules()[m];
            return apply(self.arch, module, row, callee, callee_regs, caller_regs, mem, frames);
        }
        let Some(m) = self.module_index(lookup) else {
            return Err((EndReason::NoModule, EndDetail::Address(lookup)));
        };
        self.cache.record_miss();
        let module = &self.modules.modules()[m];
        let row = match module.find_row(lookup.wrapping_sub(module.bias), &mut self.ctx) {
            Ok((row, _)) => row,
            Err(LookupError::NoFde) => {
                return Err((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde)))
            }
            Err(e) => return Err((EndReason::BadCfi, EndDetail::Lookup(e))),
        };
        if let Some(compact) = row.resize::<8>() {
            self.cache.insert(lookup, generation, m, compact);
        }
        apply(
            self.arch,
            &self.modules.modules()[m],
            &row,
            callee,
            callee_regs,
            caller_regs,
            mem,
            frames,
        )
    }

    /// A one-line account of how a walk ended.
    pub fn describe(&self, end: &End) -> String {
        let module = end.module.and_then(|m| self.modules().get(m));
        end.describe(self.arch, module.map(|m| m.name.as_str()))
    }

    /// The module a walk's end refers to, if any.
    pub fn end_module(&self, end: &End) -> Option<Arc<Module>> {
        end.module.and_then(|m| self.modules().get(m)).cloned()
    }
}

/// Apply a row's rules to the callee's state; the frame's CFA goes into
/// the last of `frames`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn apply<M: Memory + ?Sized, const N: usize>(
    arch: Arch,
    module: &Module,
    row: &RuleSet<N>,
    callee: &FrameState,
    regs: &Registers,
    caller: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Step {
    if let Some(f) = frames.last_mut() {
        f.signal_frame = row.signal_frame;
    }
    let sp = callee.sp;
    let expr_end = |e: ExprError| match e {
        ExprError::Memory(a) => Err((EndReason::Memory, EndDetail::Address(a))),
        ExprError::MissingRegister(r) => Err((EndReason::MissingRegister, EndDetail::Register(r))),
        e => Err((EndReason::BadCfi, EndDetail::Expr(e))),
    };
    // Addresses wrap at the width of the address space (32 bits on i386).
    let mask = arch.address_mask();
    let address_size = arch.word_size() as u8;
    let cfa = match row.cfa {
        CfaRule::RegOffset { reg, offset } => match regs.get(reg) {
            Some(v) => v.wrapping_add(offset as u64) & mask,
            None => return Err((EndReason::MissingRegister, EndDetail::Register(reg))),
        },
        CfaRule::Expr(e) => {
            match expr::evaluate(module.expr_bytes(e), None, regs, mem, address_size) {
                Ok(v) => v,
                Err(e) => return expr_end(e),
            }
        }
    };
    if let Some(f) = frames.last_mut() {
        f.cfa = Some(cfa);
    }
    // Columns the CFI says nothing about take the ABI default.
    caller.inherit(regs, arch.same_value_mask());
    caller.set(arch.sp(), cfa);
    let mut ra_rule = None;
    for &(reg, rule) in row.rules() {
        // A saved register outside the captured memory is unknown in the
        // caller (epilogue CFI still points at slots already popped below
        // sp); only the return address and the stack pointer are essential.
        let essential = reg == row.ra || reg == arch.sp();
        let value = match rule {
            RegRule::Undefined => None,
            RegRule::SameValue => regs.get(reg),
            RegRule::Offset(n) => {
                let addr = cfa.wrapping_add(n as u64) & mask;
                match read_word(mem, arch, addr) {
                    None if essential => return Err((EndReason::Memory, EndDetail::Address(addr))),
                    v => v,
                }
            }
            RegRule::ValOffset(n) => Some(cfa.wrapping_add(n as u64) & mask),
            RegRule::Register(r) => regs.get(r),
            RegRule::Expr(e) => {
                match expr::evaluate(module.expr_bytes(e), Some(cfa), regs, mem, address_size) {
                    Ok(addr) => match read_word(mem, arch, addr) {
                        None if essential => {
                            return Err((EndReason::Memory, EndDetail::Address(addr)))
                        }
                        v => v,
                    },
                    Err(ExprError::Memory(_)) if !essential => None,
                    Err(e) => return expr_end(e),
                }
            }
            RegRule::ValExpr(e) => {
                match expr::evaluate(module.expr_bytes(e), Some(cfa), regs, mem, address_size) {
                    Ok(v) => Some(v),
                    Err(ExprError::Memory(_)) if !essential => None,
                    Err(e) => return expr_end(e),
                }
            }
        };
        match value {
            Some(v) => caller.set(reg, v),
            None => caller.forget(reg),
        }
        if reg == row.ra {
            ra_rule = Some(rule);
        }
    }
    // The outermost frame says so with an undefined return-address rule (or,
    // where the ABI default is "undefined", with no rule at all); a return
    // address that merely could not be recovered is not the end.
    let ra = match caller.get(row.ra) {
        Some(ra) => ra,
        None => {
            let no_caller = match ra_rule {
                Some(rule) => rule == RegRule::Undefined,
                None => arch.default_rule(row.ra) == DefaultRule::Undefined,
            };
            return Err(if no_caller {
                (EndReason::EndOfStack, EndDetail::None)
            } else {
                (EndReason::MissingRegister, EndDetail::Register(row.ra))
            });
        }
    };
    let caller_pc = arch.strip_return_address(ra);
    if caller_pc == 0 {
        return Err((EndReason::PcZero, EndDetail::None));
    }
    // SP = CFA was set above, unless the row's own sp rule left it unknown.
    let Some(caller_sp) = caller.get(arch.sp()) else {
        return Err((EndReason::MissingRegister, EndDetail::Register(arch.sp())));
    };
    if caller_sp < sp || (caller_sp == sp && !callee.interrupted) {
        return Err((EndReason::CfaNotIncreasing, EndDetail::Sp { caller: caller_sp, frame: sp }));
    }
    if let Some(col) = arch.pc_column() {
        caller.set(col, caller_pc);
    }
    Ok(Caller { pc: caller_pc, sp: caller_sp, interrupted: row.signal_frame })
}

/// A word of the target at `addr`: 8 bytes, or 4 on i386 (zero-extended).
#[inline(always)]
fn read_word<M: Memory + ?Sized>(mem: &mut M, arch: Arch, addr: u64) -> Option<u64> {
    match arch.word_size() {
        8 => mem.read_u64(addr),
        size => mem.read_sized(addr, size as u8),
    }
}

impl End {
    /// A one-line account of how the walk ended; `module` is the name of
    /// the module at `lookup_pc`.
    pub fn describe(&self, arch: Arch, module: Option<&str>) -> String {
        let end = self;
        let place = match module {
            Some(name) => format!("pc {:#x} in {}", end.lookup_pc, name),
            None => format!("pc {:#x}", end.lookup_pc),
        };
        let frame = end.frame;
        let reg =
            |r: u16| arch.register_name(r).map(str::to_owned).unwrap_or_else(|| format!("r{r}"));
        match (end.reason, end.detail) {
            (EndReason::EndOfStack, _) => format!("frame {frame}: return address undefined at {place} (outermost frame)"),
            (EndReason::PcZero, _) => format!("frame {frame}: return address 0 at {place}"),
            (EndReason::CfaNotIncreasing, EndDetail::Sp { caller, frame: fsp }) => format!(
                "frame {frame}: caller's sp {caller:#x} is not above this frame's sp {fsp:#x} at {place}"
            ),
            (EndReason::Memory, EndDetail::Address(a)) => {
                format!("frame {frame}: read of {a:#x} outside captured memory at {place}")
            }
            (EndReason::NoModule, _) => format!("frame {frame}: {place} is in no known module"),
            (EndReason::NoUnwindInfo, _) => format!("frame {frame}: no unwind info for {place}"),
            (EndReason::MissingRegister, EndDetail::Register(r)) => {
                format!("frame {frame}: register {} unknown at {place}", reg(r))
            }
            (EndReason::BadCfi, EndDetail::Expr(e)) => format!("frame {frame}: {e} at {place}"),
            (EndReason::BadCfi, EndDetail::Lookup(e)) => format!("frame {frame}: {e} at {place}"),
            (EndReason::FrameLimit, _) => format!("stopped after {} frames (frame limit)", frame + 1),
            (reason, _) => format!("frame {frame}: {} at {place}", reason.as_str()),
        }
    }
}
