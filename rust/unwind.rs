//! The unwind loop: from a frame's registers, find the rules for its pc,
//! compute the CFA, recover the caller's registers, repeat.

use std::ops::Range;
use std::sync::Arc;

use gimli::UnwindContext;

use crate::arch::{Arch, DefaultRule};
use crate::cfi::{CfaRule, ExprRef, FullRow, LookupError, Module, RegRule, Rules};
use crate::expr::{self, ExprError};
use crate::fallback::{self, Strategies};
pub use crate::fallback::{FpProblem, RaProblem, Strategy, UnknownStrategy};
use crate::memory::Memory;
use crate::modules::ModuleSet;
pub use crate::modules::OverlapError;
use crate::registers::Registers;
pub use crate::rule_cache::Stats;
use crate::rule_cache::{PackedRow, RuleCache, Saved};

/// How a frame was found, best first (rust-minidump's trust levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trust {
    /// Frame 0: the registers were given.
    Context,
    /// Recovered with call frame information.
    Cfi,
    /// Recovered from the frame-pointer chain (or, for a leaf frame 0
    /// without CFI, from lr on aarch64 or the word at sp on x86_64).
    FramePointer,
    /// Recovered with call frame information applied to a frame found by
    /// scanning: the CFI is right, but the registers it started from were
    /// guessed (the registers a scan cannot recover are the callee's).
    CfiScan,
    /// A plausible return address found by scanning the stack.
    Scan,
}

impl Trust {
    /// Every trust level, most trusted first.
    pub const ALL: [Trust; 5] =
        [Trust::Context, Trust::Cfi, Trust::FramePointer, Trust::CfiScan, Trust::Scan];

    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Context => "context",
            Trust::Cfi => "cfi",
            Trust::FramePointer => "frame_pointer",
            Trust::CfiScan => "cfi_scan",
            Trust::Scan => "scan",
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
    /// The outermost frame (`_start`, `clone`): its return-address rule is
    /// undefined, or, where CFI cannot unwind it and the fallback strategies
    /// would be tried, it is in the function at its module's entry point or
    /// has the ABI's zero frame pointer (the detail says which).
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
    /// The frame-pointer step was refused: fp zero, misaligned, outside the
    /// stack, below sp, or not above the previous one (a loop).
    FpInvalid,
    /// The return address a fallback step found is not plausible.
    BadReturnAddress,
    /// Stack scanning found no plausible return address in its window.
    ScanFailed,
}

impl EndReason {
    /// Every reason, the clean ends first.
    pub const ALL: [EndReason; 12] = [
        EndReason::EndOfStack,
        EndReason::PcZero,
        EndReason::CfaNotIncreasing,
        EndReason::Memory,
        EndReason::NoModule,
        EndReason::NoUnwindInfo,
        EndReason::MissingRegister,
        EndReason::BadCfi,
        EndReason::FrameLimit,
        EndReason::FpInvalid,
        EndReason::BadReturnAddress,
        EndReason::ScanFailed,
    ];

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
            EndReason::FpInvalid => "fp_invalid",
            EndReason::BadReturnAddress => "bad_return_address",
            EndReason::ScanFailed => "scan_failed",
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
    /// The frame pointer a frame-pointer step refused.
    FramePointer {
        fp: u64,
        problem: FpProblem,
    },
    /// The return address a fallback step refused.
    ReturnAddress {
        address: u64,
        problem: RaProblem,
    },
    /// The stack words scanned, `from..to`.
    Scan {
        from: u64,
        to: u64,
    },
    /// The frame's pc is in the function at its module's entry point (this
    /// runtime address): the outermost frame.
    EntryPoint {
        entry: u64,
    },
    /// The frame has no CFI and its frame pointer is 0: the ABI's mark of
    /// the outermost frame (x86_64, aarch64).
    ZeroFramePointer,
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
    strategies: Strategies,
    scan_words: usize,
}

/// The architectures as const generic parameters: the walk is compiled once
/// for each, so that its word size, address mask and register columns are
/// constants rather than a match on the unwinder's architecture per use.
const X86_64: u8 = 0;
const AARCH64: u8 = 1;
const I386: u8 = 2;

/// `$body` with `$a` the const parameter ([`arch_of`]) of the architecture `$arch`.
macro_rules! with_arch {
    ($arch:expr, $a:ident => $body:expr) => {
        match $arch {
            Arch::X86_64 => {
                const $a: u8 = X86_64;
                $body
            }
            Arch::Aarch64 => {
                const $a: u8 = AARCH64;
                $body
            }
            Arch::I386 => {
                const $a: u8 = I386;
                $body
            }
        }
    };
}

#[inline(always)]
const fn arch_of(a: u8) -> Arch {
    match a {
        AARCH64 => Arch::Aarch64,
        I386 => Arch::I386,
        _ => Arch::X86_64,
    }
}

/// The module index the rule cache records for an address no FDE covers.
const NO_FDE: usize = u32::MAX as usize;
const NO_FDE_ROW: PackedRow = PackedRow::EMPTY;

/// How many stack words a scan looks at by default.
pub const DEFAULT_SCAN_WORDS: usize = 1024;

/// The frames a walk may find when neither a limit is given nor the memory
/// says which captured region holds the stack pointer (a closure, or an sp
/// outside every region): what the usual 8 MiB stack limit holds of 8-byte
/// words, plus one.
pub const UNKNOWN_STACK_FRAMES: usize = (8 << 20) / 8 + 1;

/// The most frames a walk from stack pointer `sp` over `mem` can find, when
/// no limit is given: what the captured stack can hold, each frame past the
/// first taking at least one word of it (a return address on x86, a frame
/// record on aarch64). That is the words from `sp` to the end of the captured
/// region holding it, plus one (plus one more where a leaf's caller is in a
/// link register: an aarch64 frame 0 at the very end of the capture still has
/// one); [`UNKNOWN_STACK_FRAMES`] where no region holds it. It bounds every
/// walk whatever the memory holds: a CFA that loops at one sp (past signal
/// frames, where the sp may stay) still ends.
pub fn stack_frame_bound<M: Memory + ?Sized>(arch: Arch, sp: u64, mem: &mut M) -> usize {
    let Some((_, end)) = mem.region_of(sp) else { return UNKNOWN_STACK_FRAMES };
    let words = usize::try_from(end.saturating_sub(sp) / arch.word_size()).unwrap_or(usize::MAX);
    let leaf = usize::from(arch.link_register().is_some());
    words.saturating_add(1 + leaf)
}

/// What the fallback strategies keep across the frames of one walk.
struct WalkState<'a> {
    /// The captured region holding frame 0's sp (None inside: unknown),
    /// once a fallback needed it.
    stack: &'a mut Option<Option<(u64, u64)>>,
    /// The frame pointer the last frame-pointer step used.
    last_fp: &'a mut Option<u64>,
}

/// The frame being unwound.
struct FrameState {
    pc: u64,
    sp: u64,
    /// Frame 0, or interrupted by a signal: its pc was not a return address.
    interrupted: bool,
    /// False where sp is only a lower bound (an aarch64 frame found by its
    /// callee's frame record or by scanning).
    sp_exact: bool,
    trust: Trust,
}

/// The caller found by one step (its registers are written in place).
struct Caller {
    pc: u64,
    sp: u64,
    /// The callee's CIE marks a signal frame: the caller was interrupted.
    interrupted: bool,
    sp_exact: bool,
}

impl Caller {
    /// The caller's frame, its CFA not known yet.
    #[inline(always)]
    fn frame(&self, trust: Trust) -> Frame {
        let (pc, sp, interrupted) = (self.pc, self.sp, self.interrupted);
        Frame { pc, sp, cfa: None, trust, interrupted, signal_frame: false }
    }
}

type Step = Result<Caller, (EndReason, EndDetail)>;

impl Unwinder {
    pub fn new(arch: Arch) -> Self {
        Unwinder {
            arch,
            modules: Arc::new(ModuleSet::new()),
            ctx: Box::new(UnwindContext::new()),
            cache: RuleCache::new(),
            strategies: Strategies::new(&[Strategy::Cfi]),
            scan_words: DEFAULT_SCAN_WORDS,
        }
    }

    /// A new unwinder over the same modules, strategies and scan window, with
    /// caches of its own: one per worker thread of a batch.
    pub fn worker(&self) -> Self {
        Unwinder {
            arch: self.arch,
            modules: self.modules.clone(),
            ctx: Box::new(UnwindContext::new()),
            cache: RuleCache::new(),
            strategies: self.strategies,
            scan_words: self.scan_words,
        }
    }

    /// Walk as `base` walks (its modules, strategies and scan window),
    /// keeping this unwinder's caches: a worker thread's unwinder, reused
    /// from batch to batch (the rule cache is keyed by module set, so what
    /// it holds stays right).
    pub fn follow(&mut self, base: &Unwinder) {
        self.modules = base.modules.clone();
        self.strategies = base.strategies;
        self.scan_words = base.scan_words;
    }

    /// The ways a frame's caller is looked for, tried in this order for
    /// every frame (CFI first wherever it covers the pc, as crash processors
    /// do: `[Cfi, FramePointer, Scan]`). A new unwinder uses CFI alone.
    /// Repeats are dropped; an empty list leaves only frame 0.
    pub fn set_strategies(&mut self, order: &[Strategy]) {
        self.strategies = Strategies::new(order);
    }

    pub fn strategies(&self) -> &[Strategy] {
        self.strategies.as_slice()
    }

    /// How many stack words a scan looks at above a frame's sp (default
    /// [`DEFAULT_SCAN_WORDS`]).
    pub fn set_scan_words(&mut self, words: usize) {
        self.scan_words = words;
    }

    pub fn scan_words(&self) -> usize {
        self.scan_words
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
    /// first, so one vector can be reused without allocating): at most
    /// `max_frames`, or, when None, as many as the captured stack can hold
    /// ([`stack_frame_bound`]).
    pub fn unwind<M: Memory + ?Sized>(
        &mut self,
        pc: u64,
        regs: &Registers,
        mem: &mut M,
        max_frames: Option<usize>,
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
        let max_frames = max_frames.unwrap_or_else(|| stack_frame_bound(arch, sp, mem));
        if max_frames == 0 {
            return end;
        }
        let callee =
            FrameState { pc, sp, interrupted: true, sp_exact: true, trust: Trust::Context };
        // Two register files, the callee's and the caller's, swapped by
        // index rather than by copying.
        let mut files = [*regs, Registers::new()];
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
        // CFI alone (the profiler's walk) is compiled without the fallback
        // path, so it costs nothing there.
        if self.strategies.as_slice() == [Strategy::Cfi] {
            self.walk_arch::<M, false>(callee, files, mem, max_frames, frames, end)
        } else {
            self.walk_arch::<M, true>(callee, files, mem, max_frames, frames, end)
        }
    }

    /// [`Unwinder::unwind`] for a sample, which may land anywhere, also in
    /// code without CFI that calls nothing (hand-written assembly, a
    /// module's `_init`, clone3 right after its system call): where CFI
    /// has no FDE for frame 0's pc, frame 0 is taken for a leaf that has
    /// not touched the stack, as profilers do (framehop's "just return if
    /// first frame" rule). Its return address is at sp (x86) or in lr
    /// (aarch64), checked as the frame-pointer strategy checks a leaf frame
    /// 0 (a plausible return address right after a call that calls the
    /// pc's function, or into another module), and the frame gets that
    /// strategy's trust, [`Trust::FramePointer`]. The walk goes on from the
    /// caller with the fallback path's checks: CFI applied to the caller
    /// must give a plausible return address too. Where there is none, the
    /// walk ends at frame 0 as [`Unwinder::unwind`] ends it.
    ///
    /// A method of its own rather than an option of `unwind`, whose code
    /// (every other caller's walk) stays exactly as it is.
    pub fn unwind_sample<M: Memory + ?Sized>(
        &mut self,
        pc: u64,
        regs: &Registers,
        mem: &mut M,
        max_frames: Option<usize>,
        frames: &mut Vec<Frame>,
    ) -> End {
        let end = self.unwind(pc, regs, mem, max_frames, frames);
        // Matched, not compared: `==` is a call that takes the end's address.
        let no_fde = matches!(end.detail, EndDetail::Lookup(LookupError::NoFde));
        if no_fde && frames.len() == 1 {
            return self.leaf_walk(regs, mem, max_frames, frames);
        }
        end
    }

    /// Frame 0 has no FDE: take it for a leaf (see
    /// [`Unwinder::unwind_sample`]) and walk on from its caller.
    #[cold]
    #[inline(never)]
    fn leaf_walk<M: Memory + ?Sized>(
        &mut self,
        regs: &Registers,
        mem: &mut M,
        max_frames: Option<usize>,
        frames: &mut Vec<Frame>,
    ) -> End {
        let arch = self.arch;
        let Some(&first) = frames.first() else {
            return End {
                reason: EndReason::FrameLimit,
                frame: 0,
                lookup_pc: 0,
                module: None,
                detail: EndDetail::None,
            };
        };
        // How `unwind` ended (rebuilt: the hot caller keeps none of it).
        let mut end = End {
            reason: EndReason::NoUnwindInfo,
            frame: 0,
            lookup_pc: first.pc,
            module: self.module_index(first.pc),
            detail: EndDetail::Lookup(LookupError::NoFde),
        };
        let mut callee_regs = *regs;
        if let Some(col) = arch.pc_column() {
            callee_regs.set(col, first.pc);
        }
        let mut caller_regs = Registers::new();
        let ctx = fallback::Context {
            arch,
            modules: &self.modules,
            stack: mem.region_of(first.sp),
            last_fp: None,
            scan_words: self.scan_words,
        };
        let callee = fallback::Callee { index: 0, pc: first.pc, sp: first.sp, guessed: false };
        let fp = callee_regs.get(arch.fp());
        let Some(found) = ctx.leaf(&callee, fp, &callee_regs, &mut caller_regs, mem) else {
            return end;
        };
        end.module = None;
        end.detail = EndDetail::None;
        let max_frames = max_frames.unwrap_or_else(|| stack_frame_bound(arch, first.sp, mem));
        if frames.len() >= max_frames {
            end.reason = EndReason::FrameLimit;
            return end;
        }
        if found.sp_exact {
            frames[0].cfa = Some(found.sp);
        }
        let trust = Trust::FramePointer;
        frames.push(Frame {
            pc: found.pc,
            sp: found.sp,
            cfa: None,
            trust,
            interrupted: false,
            signal_frame: false,
        });
        let callee = FrameState {
            pc: found.pc,
            sp: found.sp,
            interrupted: false,
            sp_exact: found.sp_exact,
            trust,
        };
        let files = [caller_regs, Registers::new()];
        self.walk_arch::<M, true>(callee, files, mem, max_frames, frames, end)
    }

    /// [`Unwinder::walk`] compiled for this unwinder's architecture.
    #[inline(always)]
    fn walk_arch<M: Memory + ?Sized, const FALLBACK: bool>(
        &mut self,
        callee: FrameState,
        files: [Registers; 2],
        mem: &mut M,
        max_frames: usize,
        frames: &mut Vec<Frame>,
        end: End,
    ) -> End {
        with_arch!(self.arch, A => {
            if FALLBACK {
                self.walk::<M, true, A>(callee, files, mem, max_frames, frames, end)
            } else {
                self.walk_cfi::<M, A>(callee, files, mem, max_frames, frames, end)
            }
        })
    }

    /// [`Unwinder::walk`] for CFI alone (the default, and the profiler's):
    /// a frame's registers are always in `files[0]`, and the commonest rows
    /// ([`Saved`]) found in the rule cache recover the caller's in place,
    /// with no second register file to fill. Where CFI fails, the walk ends,
    /// so the callee's registers are never needed after its step.
    fn walk_cfi<M: Memory + ?Sized, const A: u8>(
        &mut self,
        mut callee: FrameState,
        mut files: [Registers; 2],
        mem: &mut M,
        max_frames: usize,
        frames: &mut Vec<Frame>,
        mut end: End,
    ) -> End {
        let generation = self.modules.generation();
        // The fast steps' cache hits, added to the counts once.
        let mut hits = 0;
        let end = loop {
            let lookup = if callee.interrupted { callee.pc } else { callee.pc.wrapping_sub(1) };
            let key = (lookup, generation);
            let stepped = match fast_step::<M, A>(
                &mut self.cache,
                key,
                &callee,
                &mut files[0],
                mem,
                frames,
            ) {
                Fast::Next { pc, sp, interrupted } => {
                    hits += 1;
                    if frames.len() >= max_frames {
                        end.frame = frames.len() - 1;
                        end.lookup_pc = lookup;
                        end.reason = EndReason::FrameLimit;
                        end.detail = EndDetail::None;
                        break end;
                    }
                    let (trust, signal_frame, cfa) = (Trust::Cfi, false, None);
                    frames.push(Frame { pc, sp, cfa, trust, interrupted, signal_frame });
                    callee.pc = pc;
                    callee.sp = sp;
                    callee.interrupted = interrupted;
                    continue;
                }
                Fast::Stop { ra_column, signal_frame } => {
                    hits += 1;
                    let arch = arch_of(A);
                    finish(arch, ra_column, None, signal_frame, &callee, &mut files[0])
                }
                Fast::Slow => self.slow_step::<M, A>(key, &callee, &mut files, mem, frames),
            };
            end.frame = frames.len() - 1;
            end.lookup_pc = lookup;
            match stepped {
                Err((reason, detail)) => {
                    end.module = self.end_module_index(lookup, generation);
                    end.reason = reason;
                    end.detail = detail;
                    break end;
                }
                Ok(caller) => {
                    if frames.len() >= max_frames {
                        end.reason = EndReason::FrameLimit;
                        end.detail = EndDetail::None;
                        break end;
                    }
                    frames.push(caller.frame(Trust::Cfi));
                    callee.pc = caller.pc;
                    callee.sp = caller.sp;
                    callee.interrupted = caller.interrupted;
                }
            }
        };
        self.cache.add_hits(hits);
        end
    }

    /// A step of [`Unwinder::walk_cfi`] that [`fast_step`] did not take:
    /// the rule cache's other rows, or a miss. The caller's registers go to
    /// `files[0]`.
    #[inline(never)]
    fn slow_step<M: Memory + ?Sized, const A: u8>(
        &mut self,
        (lookup, generation): (u64, u64),
        callee: &FrameState,
        files: &mut [Registers; 2],
        mem: &mut M,
        frames: &mut [Frame],
    ) -> Step {
        if let Some(step) = self.step_cached::<M, A>(lookup, generation, callee, files, mem, frames)
        {
            return step;
        }
        let [a, b] = files;
        let step = self.step::<M, false, A>(lookup, callee, a, b, mem, frames);
        if step.is_ok() {
            *a = *b;
        }
        step
    }

    /// The module of `lookup` for a walk's end: the one its cached rules
    /// came from, else found by search.
    #[inline(always)]
    fn end_module_index(&mut self, lookup: u64, generation: u64) -> Option<usize> {
        match self.cache.peek(lookup, generation) {
            Some(m) if m != NO_FDE => Some(m),
            _ => self.module_index(lookup),
        }
    }

    /// One step of [`Unwinder::walk_cfi`] from the rule cache: None on a
    /// miss (nothing done, nothing counted). The caller's registers go to
    /// `files[0]`.
    #[inline(always)]
    fn step_cached<M: Memory + ?Sized, const A: u8>(
        &mut self,
        lookup: u64,
        generation: u64,
        callee: &FrameState,
        files: &mut [Registers; 2],
        mem: &mut M,
        frames: &mut [Frame],
    ) -> Option<Step> {
        let (m, row) = self.cache.get(lookup, generation)?;
        if m == NO_FDE {
            return Some(Err((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde))));
        }
        let [a, b] = files;
        if let Some(saved) = row.saved() {
            let (ra, signal_frame) = (row.ra(), row.signal_frame());
            if let Some(step) =
                apply_in_place::<M, A>(&saved, (ra, signal_frame), callee, a, mem, frames)
            {
                return Some(step);
            }
        }
        let step =
            apply::<M, _, false>(arch_of(A), (&self.modules, m), row, callee, a, b, mem, frames);
        if step.is_ok() {
            *a = *b;
        }
        Some(step)
    }

    /// The walk from frame 0 (in `frames`, its registers in `files[0]`) on.
    /// `FALLBACK`: the strategies are not CFI alone; `A`: the architecture
    /// ([`arch_of`]), which is the unwinder's.
    fn walk<M: Memory + ?Sized, const FALLBACK: bool, const A: u8>(
        &mut self,
        mut callee: FrameState,
        mut files: [Registers; 2],
        mem: &mut M,
        max_frames: usize,
        frames: &mut Vec<Frame>,
        mut end: End,
    ) -> End {
        // The captured stack's bounds, looked up when a fallback first needs them.
        let mut stack = None;
        let mut last_fp = None;
        let mut current = 0;
        loop {
            // Frame 0 and frames interrupted by a signal are looked up at
            // their pc; the others at pc - 1, inside the call that made them.
            let lookup = if callee.interrupted { callee.pc } else { callee.pc.wrapping_sub(1) };
            end.frame = frames.len() - 1;
            end.lookup_pc = lookup;
            let [a, b] = &mut files;
            let (callee_regs, caller_regs) = if current == 0 { (&*a, b) } else { (&*b, a) };
            // CFI first (the usual case, kept on the hot path); the other
            // strategies only where it fails without saying the stack ends.
            let strategies = self.strategies;
            let cfi_first = !FALLBACK || strategies.first() == Some(Strategy::Cfi);
            let stepped = if cfi_first {
                self.step::<M, FALLBACK, A>(lookup, &callee, callee_regs, caller_regs, mem, frames)
            } else {
                Err((EndReason::NoUnwindInfo, EndDetail::None))
            };
            // CFI applied to a frame that a fallback step found starts from
            // guessed registers (an i386 `main` that realigned its stack
            // leaves its frame record away from its caller's sp): the return
            // address it gives must pass the fallback checks too, else the
            // other strategies are tried.
            let stepped = match stepped {
                Ok(caller)
                    if FALLBACK
                        && !caller.interrupted
                        && !matches!(callee.trust, Trust::Context | Trust::Cfi) =>
                {
                    self.check_guess(caller, &mut stack, frames, mem)
                }
                other => other,
            };
            let outcome = match stepped {
                Ok(caller) => {
                    let trust =
                        if callee.trust == Trust::Scan { Trust::CfiScan } else { Trust::Cfi };
                    Ok((caller, trust))
                }
                Err(e) if !FALLBACK || e.0.is_clean() => Err(e),
                Err(e) => {
                    let rest = &strategies.as_slice()[usize::from(cfi_first)..];
                    let failure = if cfi_first { Some(e) } else { None };
                    let walk = WalkState { stack: &mut stack, last_fp: &mut last_fp };
                    let frame = (lookup, &callee, callee_regs);
                    self.fall_back(failure, rest, frame, caller_regs, mem, frames, walk)
                }
            };
            match outcome {
                Err((reason, detail)) => {
                    end.module = self.module_index(lookup);
                    end.reason = reason;
                    end.detail = detail;
                    return end;
                }
                Ok((caller, trust)) => {
                    if frames.len() >= max_frames {
                        end.reason = EndReason::FrameLimit;
                        end.detail = EndDetail::None;
                        return end;
                    }
                    frames.push(caller.frame(trust));
                    callee.pc = caller.pc;
                    callee.sp = caller.sp;
                    callee.interrupted = caller.interrupted;
                    callee.sp_exact = caller.sp_exact;
                    callee.trust = trust;
                    current ^= 1;
                }
            }
        }
    }

    /// Try `strategies` in turn for one frame, after `failure` (CFI's, if it
    /// was tried first), until one finds the caller or one says the stack
    /// ends here; none where the frame is the outermost one
    /// ([`fallback::outermost`]). The walk's end is the first failure of a strategy that
    /// applied to the frame: CFI where an FDE covers the pc (a memory error
    /// there says more than a failed scan after it), the frame-pointer step
    /// where there is an fp.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn fall_back<M: Memory + ?Sized>(
        &mut self,
        failure: Option<(EndReason, EndDetail)>,
        strategies: &[Strategy],
        (lookup, callee, callee_regs): (u64, &FrameState, &Registers),
        caller_regs: &mut Registers,
        mem: &mut M,
        frames: &mut [Frame],
        walk: WalkState<'_>,
    ) -> Result<(Caller, Trust), (EndReason, EndDetail)> {
        let arch = self.arch;
        // A frame in no module, or in one whose file is missing, may be a
        // signal trampoline: the kernel's frame on the stack says so, and
        // holds the interrupted frame's registers (whatever its fp).
        if matches!(failure, Some((EndReason::NoModule, _))) {
            if let Some((pc, sp)) = crate::sigframe::restore(arch, callee.sp, caller_regs, mem) {
                let caller = Caller { pc, sp, interrupted: true, sp_exact: true };
                return Ok((caller, Trust::Context));
            }
        }
        if let Some(end) = self.outermost(failure.as_ref(), lookup, callee, callee_regs) {
            return Err(end);
        }
        let stack =
            *walk.stack.get_or_insert_with(|| frames.first().and_then(|f| mem.region_of(f.sp)));
        let mut outcome = Err(failure.unwrap_or((EndReason::NoUnwindInfo, EndDetail::None)));
        for &strategy in strategies {
            let found = if strategy == Strategy::Cfi {
                let trust = if callee.trust == Trust::Scan { Trust::CfiScan } else { Trust::Cfi };
                self.step_cold(lookup, callee, callee_regs, caller_regs, mem, frames)
                    .map(|c| (c, trust))
            } else {
                let mut ctx = fallback::Context {
                    arch,
                    modules: &self.modules,
                    stack,
                    last_fp: *walk.last_fp,
                    scan_words: self.scan_words,
                };
                let frame = fallback::Callee {
                    index: frames.len() - 1,
                    pc: callee.pc,
                    sp: callee.sp,
                    guessed: matches!(callee.trust, Trust::FramePointer | Trust::Scan),
                };
                let found = match strategy {
                    Strategy::Scan => {
                        ctx.scan(&frame, callee_regs, caller_regs, mem).map(|f| (f, Trust::Scan))
                    }
                    _ => ctx
                        .frame_pointer(&frame, callee_regs, caller_regs, mem)
                        .map(|f| (f, Trust::FramePointer)),
                };
                *walk.last_fp = ctx.last_fp;
                found.map(|(f, trust)| {
                    // Where the step knows the caller's sp exactly, that is
                    // the frame's CFA.
                    if f.sp_exact {
                        if let Some(frame) = frames.last_mut() {
                            frame.cfa = Some(f.sp);
                        }
                    }
                    let caller =
                        Caller { pc: f.pc, sp: f.sp, interrupted: false, sp_exact: f.sp_exact };
                    (caller, trust)
                })
            };
            let stop = match &found {
                Ok(_) => true,
                Err((reason, _)) => reason.is_clean(),
            };
            let replace = match &outcome {
                Err(failure) => !applied(arch, failure),
                Ok(_) => true,
            };
            if stop || replace {
                outcome = found;
            }
            if stop {
                break;
            }
        }
        outcome
    }

    /// The end of the stack, if the frame that CFI could not unwind
    /// (`failure`: how CFI failed, if it was tried) is the outermost one
    /// ([`fallback::outermost`]).
    #[cold]
    #[inline(never)]
    fn outermost(
        &self,
        failure: Option<&(EndReason, EndDetail)>,
        lookup: u64,
        callee: &FrameState,
        regs: &Registers,
    ) -> Option<(EndReason, EndDetail)> {
        let exact_fp = match callee.trust {
            Trust::Cfi | Trust::FramePointer => regs.get(self.arch.fp()),
            _ => None,
        };
        let no_fde = matches!(
            failure,
            Some((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde)))
        );
        let frame = fallback::Unwound { lookup, exact_fp, no_fde };
        let detail = fallback::outermost(self.arch, &self.modules, &frame)?;
        Some((EndReason::EndOfStack, detail))
    }

    /// `caller`, found by CFI from a frame a fallback found, if its return
    /// address is plausible.
    #[cold]
    #[inline(never)]
    fn check_guess<M: Memory + ?Sized>(
        &self,
        caller: Caller,
        stack: &mut Option<Option<(u64, u64)>>,
        frames: &mut [Frame],
        mem: &mut M,
    ) -> Step {
        let stack = *stack.get_or_insert_with(|| frames.first().and_then(|f| mem.region_of(f.sp)));
        let ctx = fallback::Context {
            arch: self.arch,
            modules: &self.modules,
            stack,
            last_fp: None,
            scan_words: self.scan_words,
        };
        match ctx.check_return_address(caller.pc) {
            Ok(()) => Ok(caller),
            Err(problem) => {
                if let Some(f) = frames.last_mut() {
                    f.cfa = None;
                }
                let detail = EndDetail::ReturnAddress { address: caller.pc, problem };
                Err((EndReason::BadReturnAddress, detail))
            }
        }
    }

    /// [`Unwinder::step`] out of line, for the fallback path.
    #[inline(never)]
    fn step_cold<M: Memory + ?Sized>(
        &mut self,
        lookup: u64,
        callee: &FrameState,
        callee_regs: &Registers,
        caller_regs: &mut Registers,
        mem: &mut M,
        frames: &mut [Frame],
    ) -> Step {
        with_arch!(self.arch, A => {
            self.step::<M, true, A>(lookup, callee, callee_regs, caller_regs, mem, frames)
        })
    }

    /// Unwind one frame: find the rules for `lookup` in module `m` (cached),
    /// then recover the caller into `caller_regs`.
    // The hot path: the state is passed as borrowed pieces rather than
    // bundled, so that the two register files can be borrowed apart.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn step<M: Memory + ?Sized, const FALLBACK: bool, const A: u8>(
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
            if m == NO_FDE {
                return Err((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde)));
            }
            // The commonest rows, where the callee's sp is exact (always,
            // in the CFI-only walk), by the short way.
            if !FALLBACK || callee.sp_exact {
                if let Some(saved) = row.saved() {
                    let signal_frame = row.signal_frame();
                    let ra = row.ra();
                    return apply_saved::<M, A>(
                        &saved,
                        (ra, signal_frame),
                        callee,
                        callee_regs,
                        caller_regs,
                        mem,
                        frames,
                    );
                }
            }
            return apply::<M, _, FALLBACK>(
                arch_of(A),
                (&self.modules, m),
                row,
                callee,
                callee_regs,
                caller_regs,
                mem,
                frames,
            );
        }
        if let Some((m, row)) = self.cache.get_wide(lookup, generation) {
            return apply::<M, _, FALLBACK>(
                arch_of(A),
                (&self.modules, m),
                row,
                callee,
                callee_regs,
                caller_regs,
                mem,
                frames,
            );
        }
        let Some(m) =
            self.module_index(lookup).filter(|&m| !self.modules.modules()[m].is_missing())
        else {
            return Err((EndReason::NoModule, EndDetail::Address(lookup)));
        };
        self.cache.record_miss();
        let module = &self.modules.modules()[m];
        let row = match module.find_row(lookup.wrapping_sub(module.bias), &mut self.ctx) {
            Ok((row, _)) => row,
            Err(LookupError::NoFde) => {
                // Remembered too: code without CFI is walked by the
                // fallback strategies, which should not search for an FDE
                // again at every frame.
                self.cache.insert(lookup, generation, NO_FDE, NO_FDE_ROW);
                return Err((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde)));
            }
            Err(e) => return Err((EndReason::BadCfi, EndDetail::Lookup(e))),
        };
        match PackedRow::pack(&row, arch_of(A).sp()) {
            Some(packed) => self.cache.insert(lookup, generation, m, packed),
            None => self.cache.insert_wide(lookup, generation, m, row),
        }
        apply::<M, _, FALLBACK>(
            arch_of(A),
            (&self.modules, m),
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
/// the last of `frames`. `FALLBACK`: the walk may have guessed the callee's
/// sp (compiled out of the CFI-only walk).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn apply<M: Memory + ?Sized, R: Rules, const FALLBACK: bool>(
    arch: Arch,
    (modules, m): (&ModuleSet, usize),
    row: &R,
    callee: &FrameState,
    regs: &Registers,
    caller: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Step {
    if let Some(f) = frames.last_mut() {
        f.signal_frame = row.signal_frame();
    }
    let ra_column = row.ra();
    // The module (module `m` of `modules`) is looked up only for an
    // expression's bytes: a row without one needs nothing but the row.
    let expr_bytes = |e: ExprRef| modules.modules().get(m).map_or(&[][..], |m| m.expr_bytes(e));
    let sp = callee.sp;
    let expr_end = |e: ExprError| match e {
        ExprError::Memory(a) => Err((EndReason::Memory, EndDetail::Address(a))),
        ExprError::MissingRegister(r) => Err((EndReason::MissingRegister, EndDetail::Register(r))),
        e => Err((EndReason::BadCfi, EndDetail::Expr(e))),
    };
    // Where this frame's sp is a guess (an aarch64 frame found from its
    // callee's frame record or by scanning) and the frame saved its fp,
    // which points at that saved copy (a frame record, AAPCS64), the CFA is
    // exact from fp instead of sp.
    let fp_cfa = if !FALLBACK || callee.sp_exact { None } else { fp_based_cfa(arch, row, regs) };
    // Addresses wrap at the width of the address space (32 bits on i386).
    let mask = arch.address_mask();
    let address_size = arch.word_size() as u8;
    let cfa = match row.cfa() {
        CfaRule::RegOffset { reg, .. } if reg == arch.sp() && fp_cfa.is_some_and(|c| c >= sp) => {
            fp_cfa.unwrap_or(sp)
        }
        CfaRule::RegOffset { reg, offset } => match regs.get(reg) {
            Some(v) => v.wrapping_add(offset as u64) & mask,
            None => return Err((EndReason::MissingRegister, EndDetail::Register(reg))),
        },
        CfaRule::Expr(e) => match expr::evaluate(expr_bytes(e), None, regs, mem, address_size) {
            Ok(v) => v,
            Err(e) => return expr_end(e),
        },
    };
    if let Some(f) = frames.last_mut() {
        f.cfa = Some(cfa);
    }
    // Columns the CFI says nothing about take the ABI default.
    caller.inherit_fixed(regs, arch.same_value_mask());
    caller.set(arch.sp(), cfa);
    let mut ra_rule = None;
    for i in 0..row.count() {
        let (reg, rule) = row.at(i);
        // A saved register outside the captured memory is unknown in the
        // caller (epilogue CFI still points at slots already popped below
        // sp); only the return address and the stack pointer are essential.
        let essential = reg == ra_column || reg == arch.sp();
        // Saved on the stack: nearly every rule of every row, tested first
        // rather than through the match's jump table.
        if let RegRule::Offset(n) = rule {
            let addr = cfa.wrapping_add(n as u64) & mask;
            match read_word(mem, arch, addr) {
                Some(v) => caller.set(reg, v),
                None if essential => return Err((EndReason::Memory, EndDetail::Address(addr))),
                None => caller.forget(reg),
            }
            if reg == ra_column {
                ra_rule = Some(rule);
            }
            continue;
        }
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
                match expr::evaluate(expr_bytes(e), Some(cfa), regs, mem, address_size) {
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
                match expr::evaluate(expr_bytes(e), Some(cfa), regs, mem, address_size) {
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
        if reg == ra_column {
            ra_rule = Some(rule);
        }
    }
    finish(arch, ra_column, ra_rule, row.signal_frame(), callee, caller)
}

/// [`apply`] for a [`Saved`] row (`(ra, signal_frame)`: its return-address
/// column and whether it is a signal frame's), whose callee's sp is exact:
/// the CFA from a register, every rule a word read at an offset from it,
/// read from one window of the stack where the memory lends one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn apply_saved<M: Memory + ?Sized, const A: u8>(
    row: &Saved<'_>,
    (ra_column, signal_frame): (u16, bool),
    callee: &FrameState,
    regs: &Registers,
    caller: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Step {
    // The caller's file starts as the callee's, and is recovered in place.
    *caller = *regs;
    let rules = (ra_column, signal_frame);
    if let Some(step) = apply_in_place::<M, A>(row, rules, callee, caller, mem, frames) {
        return step;
    }
    // No window: word by word, each read checked.
    let arch = arch_of(A);
    let mask = arch.address_mask();
    let Some(base) = regs.get(row.cfa_reg) else {
        return Err((EndReason::MissingRegister, EndDetail::Register(row.cfa_reg)));
    };
    let cfa = base.wrapping_add(row.cfa_offset as u64) & mask;
    if let Some(f) = frames.last_mut() {
        f.signal_frame = signal_frame;
        f.cfa = Some(cfa);
    }
    let mut out = caller.recover_in_place(arch.same_value_mask());
    out.set(arch.sp(), cfa);
    for rule in row.rules {
        let reg = rule.reg();
        let addr = cfa.wrapping_add(rule.offset() as u64) & mask;
        match read_word(mem, arch, addr) {
            Some(v) => out.set(reg, v),
            None if reg == ra_column || reg == arch.sp() => {
                return Err((EndReason::Memory, EndDetail::Address(addr)))
            }
            None => out.forget(reg),
        }
    }
    drop(out);
    // A rule for the return-address column always recovers it (or the walk
    // ended above): where it is unknown, there was none.
    finish(arch, ra_column, None, signal_frame, callee, caller)
}

/// [`apply_saved`] in place: `regs` becomes the caller's. None, with
/// nothing done, where the memory lends no window holding every saved word
/// or the CFA's register is unknown (the word-by-word way then gives the
/// same answer, or the right error).
#[inline(always)]
fn apply_in_place<M: Memory + ?Sized, const A: u8>(
    row: &Saved<'_>,
    (ra_column, signal_frame): (u16, bool),
    callee: &FrameState,
    regs: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Option<Step> {
    let base = regs.get(row.cfa_reg)?;
    let (cfa, _) = recover_saved::<M, A>(row, base, regs, mem)?;
    if let Some(f) = frames.last_mut() {
        f.signal_frame = signal_frame;
        f.cfa = Some(cfa);
    }
    Some(finish(arch_of(A), ra_column, None, signal_frame, callee, regs))
}

/// The work of [`apply_in_place`], from `base`, the value of the CFA's
/// register: `regs` recovered in place, the caller's sp the CFA. The CFA
/// and the value of the first rule's register (0 if there is none); None,
/// with nothing done, where the memory lends no window holding every saved
/// word.
#[inline(always)]
fn recover_saved<M: Memory + ?Sized, const A: u8>(
    row: &Saved<'_>,
    base: u64,
    regs: &mut Registers,
    mem: &mut M,
) -> Option<(u64, u64)> {
    let arch = arch_of(A);
    let mask = arch.address_mask();
    let cfa = base.wrapping_add(row.cfa_offset as u64) & mask;
    let word = arch.word_size();
    let lo = cfa.wrapping_add(row.lo as u64) & mask;
    let len = row.span + word;
    let window = if row.rules.is_empty() {
        &[][..]
    } else if lo > mask - (len - 1) {
        return None;
    } else {
        mem.window(lo, len)?
    };
    // The callee-saved columns keep their values, the others are unknown.
    let mut out = regs.recover_in_place(arch.same_value_mask());
    out.set(arch.sp(), cfa);
    let mut first = 0;
    for (i, rule) in row.rules.iter().enumerate() {
        // At most `span`, a u16: one bounds test a word, which always passes
        // (the window holds `span` bytes and a word).
        let at = usize::from((rule.offset() - row.lo) as u16);
        let value = match word {
            8 => {
                window.get(at..at + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            }
            _ => window
                .get(at..at + 4)
                .map(|w| u64::from(u32::from_le_bytes(w.try_into().unwrap_or_default()))),
        };
        match value {
            Some(v) => {
                out.set(rule.reg(), v);
                if i == 0 {
                    first = v;
                }
            }
            None => out.forget(rule.reg()),
        }
    }
    drop(out);
    Some((cfa, first))
}

/// What [`fast_step`] did.
enum Fast {
    /// The caller, its registers recovered in place.
    Next { pc: u64, sp: u64, interrupted: bool },
    /// The registers were recovered in place, but they give no caller (the
    /// end of the stack, or a check failed): [`finish`] says why.
    Stop { ra_column: u16, signal_frame: bool },
    /// Nothing done: the general step applies.
    Slow,
}

/// The commonest step of a CFI-only walk, kept small enough for the walk's
/// state to stay in registers: a [`Saved`] row from the rule cache, applied
/// in place ([`recover_saved`]), and [`finish`]'s checks, which a caller that
/// passes them always passes. Hits are the caller's to count.
#[inline(always)]
fn fast_step<M: Memory + ?Sized, const A: u8>(
    cache: &mut RuleCache,
    (lookup, generation): (u64, u64),
    callee: &FrameState,
    regs: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Fast {
    let arch = arch_of(A);
    let Some((_, row)) = cache.find(lookup, generation) else { return Fast::Slow };
    let Some(saved) = row.saved() else { return Fast::Slow };
    let (ra_column, signal_frame) = (row.ra(), row.signal_frame());
    // The callee's sp is at hand, not only in its register file.
    let base = if saved.cfa_reg == arch.sp() {
        callee.sp
    } else {
        let Some(base) = regs.get(saved.cfa_reg) else { return Fast::Slow };
        base
    };
    let Some((cfa, first)) = recover_saved::<M, A>(&saved, base, regs, mem) else {
        return Fast::Slow;
    };
    if let Some(f) = frames.last_mut() {
        f.signal_frame = signal_frame;
        f.cfa = Some(cfa);
    }
    let stop = Fast::Stop { ra_column, signal_frame };
    // The return address and sp as read, rather than through the register
    // file, where the row says which they are.
    let ra = if saved.ra_first {
        first
    } else if let Some(ra) = regs.get(ra_column) {
        ra
    } else {
        return stop;
    };
    let pc = arch.strip_return_address(ra);
    let sp = if !saved.sp_saved {
        cfa
    } else if let Some(sp) = regs.get(arch.sp()) {
        sp
    } else {
        return stop;
    };
    if pc == 0 || sp < callee.sp || (sp == callee.sp && !callee.interrupted) {
        return stop;
    }
    if let Some(col) = arch.pc_column() {
        regs.set(col, pc);
    }
    Fast::Next { pc, sp, interrupted: signal_frame }
}

/// The caller found by a step, from the registers recovered into `caller`:
/// its pc (the return address in `ra_column`, whose rule, if the row had
/// one, was `ra_rule`) and sp, checked.
#[inline(always)]
fn finish(
    arch: Arch,
    ra_column: u16,
    ra_rule: Option<RegRule>,
    signal_frame: bool,
    callee: &FrameState,
    caller: &mut Registers,
) -> Step {
    let sp = callee.sp;
    // The outermost frame says so with an undefined return-address rule (or,
    // where the ABI default is "undefined", with no rule at all); a return
    // address that merely could not be recovered is not the end.
    let ra = match caller.get(ra_column) {
        Some(ra) => ra,
        None => {
            let no_caller = match ra_rule {
                Some(rule) => rule == RegRule::Undefined,
                None => arch.default_rule(ra_column) == DefaultRule::Undefined,
            };
            return Err(if no_caller {
                (EndReason::EndOfStack, EndDetail::None)
            } else {
                (EndReason::MissingRegister, EndDetail::Register(ra_column))
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
    Ok(Caller { pc: caller_pc, sp: caller_sp, interrupted: signal_frame, sp_exact: true })
}

/// Whether a strategy's failure means it applied to the frame (and failed),
/// rather than that it had nothing to go on (no module, no FDE, no fp).
fn applied(arch: Arch, (reason, detail): &(EndReason, EndDetail)) -> bool {
    match reason {
        EndReason::NoModule | EndReason::NoUnwindInfo => false,
        EndReason::MissingRegister => *detail != EndDetail::Register(arch.fp()),
        _ => true,
    }
}

/// The CFA as `fp − n` where the row saves fp at CFA + n.
fn fp_based_cfa<R: Rules>(arch: Arch, row: &R, regs: &Registers) -> Option<u64> {
    match row.rule_for(arch.fp())? {
        RegRule::Offset(n) => Some(regs.get(arch.fp())?.wrapping_sub(n as u64)),
        _ => None,
    }
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
            (EndReason::EndOfStack, EndDetail::EntryPoint { entry }) => format!(
                "frame {frame}: {place} is in the function at the entry point {entry:#x} (outermost frame)"
            ),
            (EndReason::EndOfStack, EndDetail::ZeroFramePointer) => format!(
                "frame {frame}: frame pointer 0 and no CFI at {place}, the ABI's mark of the outermost frame"
            ),
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
            (EndReason::FpInvalid, EndDetail::FramePointer { fp, problem }) => {
                format!("frame {frame}: frame pointer {fp:#x} {problem} at {place}")
            }
            (EndReason::BadReturnAddress, EndDetail::ReturnAddress { address, problem }) => {
                format!("frame {frame}: return address {address:#x} {problem} at {place}")
            }
            (EndReason::ScanFailed, EndDetail::Scan { from, to }) => format!(
                "frame {frame}: no plausible return address in the stack words {from:#x}..{to:#x} at {place}"
            ),
            (reason, _) => format!("frame {frame}: {} at {place}", reason.as_str()),
        }
    }
}
