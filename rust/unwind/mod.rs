//! The unwind loop: from a frame's registers, find the rules for its pc,
//! compute the CFA, recover the caller's registers, repeat.

pub mod cfi;
pub mod compact;
pub mod expr;
pub mod fallback;
pub mod file;
pub mod frame_data;
pub mod jit;
pub mod modules;
pub mod pe;
pub mod rule_cache;

mod apply;
mod fallback_walk;
mod frame;
mod process;
mod records;
mod walk;

use std::ops::Range;
use std::sync::Arc;

use gimli::UnwindContext;

use crate::arch::registers::Registers;
use crate::arch::Arch;
use crate::source::memory::Memory;
use crate::unwind::cfi::{FullRow, LookupError, Module};
use crate::unwind::fallback::Strategies;
pub use crate::unwind::fallback::{FpProblem, RaProblem, Strategy, UnknownStrategy};
use crate::unwind::modules::ModuleSet;
pub use crate::unwind::modules::OverlapError;
pub use crate::unwind::rule_cache::Stats;
use crate::unwind::rule_cache::{PackedRow, RuleCache, NO_FDE};
use apply::{apply, apply_context, apply_in_place, apply_saved, fast_step, finish, Fast};
pub use frame::{End, EndDetail, EndReason, Frame, Trust};
pub use process::{stack_owners, ProcessFacts};

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
    /// Where the main thread's stack began ([`Unwinder::set_initial_stack`]).
    initial_stack: Option<u64>,
    /// The program's entry point and its threads' stacks
    /// ([`Unwinder::set_process`]).
    process: Arc<ProcessFacts>,
    /// The walk's frame limit is the bound of the stack frame 0 is on
    /// ([`stack_frame_bound`]), not the caller's: the walk may raise it to
    /// that of every stack it goes on ([`Unwinder::regrow_bound`]). Kept
    /// here, not in the walk's state, which the hot loop holds in registers.
    implicit_limit: bool,
    /// A CFI-only walk's frame limit as it stands, for its runs of frame
    /// records ([`records::run`], out of the walk's loop): kept here for the
    /// same reason.
    frame_limit: usize,
    /// Each frame's registers, kept by [`Unwinder::unwind_with_registers`].
    recorder: Recorder,
}

/// The registers of each frame of a recording walk, as the walk recovered
/// them. A register is kept only where the walk proved it: every frame's
/// pc, and its sp unless only a bound (an aarch64 frame found by its
/// callee's frame record); the rest as CFI recovered them up to the first
/// frame a fallback found. From there on callee-saved registers are the callee's
/// taken as they were (a frame record or a scan says nothing of them), so
/// only the frame pointer a frame record held is kept besides.
#[derive(Default)]
struct Recorder {
    frames: Vec<Registers>,
    unproven: bool,
}

/// The architectures as const generic parameters: the walk is compiled once
/// for each, so that its word size, address mask and register columns are
/// constants rather than a match on the unwinder's architecture per use.
const X86_64: u8 = 0;
const AARCH64: u8 = 1;
const I386: u8 = 2;
const ARM: u8 = 3;

/// `$body` with `$a` the const parameter ([`arch_of`]) of the architecture `$arch`.
macro_rules! with_arch {
    ($arch:expr, $a:ident => $body:expr) => {
        match $arch {
            $crate::arch::Arch::X86_64 => {
                const $a: u8 = $crate::unwind::X86_64;
                $body
            }
            $crate::arch::Arch::Aarch64 => {
                const $a: u8 = $crate::unwind::AARCH64;
                $body
            }
            $crate::arch::Arch::I386 => {
                const $a: u8 = $crate::unwind::I386;
                $body
            }
            $crate::arch::Arch::Arm => {
                const $a: u8 = $crate::unwind::ARM;
                $body
            }
        }
    };
}
use with_arch;

#[inline(always)]
const fn arch_of(a: u8) -> Arch {
    match a {
        AARCH64 => Arch::Aarch64,
        I386 => Arch::I386,
        ARM => Arch::Arm,
        _ => Arch::X86_64,
    }
}

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

/// Where a walk starts: the frame to unwind first (already in the frames),
/// its registers, and the end the walk gives if it stops at once.
struct Start {
    callee: FrameState,
    regs: Registers,
    end: End,
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
            initial_stack: None,
            process: Arc::new(ProcessFacts::default()),
            implicit_limit: false,
            frame_limit: 0,
            recorder: Recorder::default(),
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
            initial_stack: self.initial_stack,
            process: self.process.clone(),
            implicit_limit: false,
            frame_limit: 0,
            recorder: Recorder::default(),
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
        self.initial_stack = base.initial_stack;
        self.process = base.process.clone();
    }

    /// What is known of the process whose threads are walked (a core's, a
    /// dump's, a live process's): its program's entry point, which no call
    /// returns to, and where each of its threads' stacks is. A return
    /// address found by a fallback step is never one of those; and a walk
    /// ends where its sp enters the live part of another thread's stack
    /// (from that thread's sp up), where no frame of its own can be.
    pub fn set_process(&mut self, mut process: ProcessFacts) {
        process.apple = self.process.apple;
        self.process = Arc::new(process);
    }

    /// The threads walked ran on an Apple platform, whose frame-record
    /// chains end with a saved frame pointer of 0 (see
    /// [`ProcessFacts::apple`]); kept over [`Unwinder::set_process`].
    pub fn set_apple(&mut self, apple: bool) {
        let mut process = (*self.process).clone();
        process.apple = apple;
        self.process = Arc::new(process);
    }

    /// Where the main thread's stack began (a core's or a process's: the
    /// address of its `argc`, below the arguments, environment and auxiliary
    /// vector the kernel put there). Nothing above it is a frame: the
    /// fallback strategies look no further in a walk whose stack holds it
    /// (the auxiliary vector holds the entry point's address, which a scan
    /// would take for a return address).
    pub fn set_initial_stack(&mut self, address: Option<u64>) {
        self.initial_stack = address;
    }

    /// A walk at its frame limit: whether it may go on, the limit having
    /// been none given (the bound of the stack frame 0 is on), with
    /// `max_frames` raised to the bound of every stack it has been on. Past a
    /// signal frame a walk goes on on the stack the handler interrupted, above
    /// or below its own (a small alternate stack, `sigaltstack`, where a stack
    /// overflow is handled), and that stack's frames may follow too. Each run
    /// of frames on one captured region adds what that region holds from the
    /// run's lowest sp, its first frame's; frames in no region add nothing.
    #[cold]
    #[inline(never)]
    fn regrow_bound<M: Memory + ?Sized>(
        &mut self,
        frames: &[Frame],
        mem: &mut M,
        max_frames: &mut usize,
    ) -> bool {
        if !self.implicit_limit {
            return false;
        }
        let mut bound = 0usize;
        let mut run = None;
        for f in frames {
            let region = mem.region_of(f.sp);
            if region.is_some() && region != run {
                bound = bound.saturating_add(stack_frame_bound(self.arch, f.sp, mem));
            }
            run = region;
        }
        *max_frames = (*max_frames).max(bound);
        self.frame_limit = *max_frames;
        frames.len() < *max_frames
    }

    /// A walk's stack region ([`Unwinder::stack_region`] at frame 0's sp),
    /// found at its first need and kept in `known` for the rest of the walk.
    fn walk_stack_region<M: Memory + ?Sized>(
        &self,
        known: &mut Option<Option<(u64, u64)>>,
        frames: &[Frame],
        mem: &mut M,
    ) -> Option<(u64, u64)> {
        *known.get_or_insert_with(|| frames.first().and_then(|f| self.stack_region(mem, f.sp)))
    }

    /// The captured region holding `sp`, as far as the stack goes: cut at
    /// the initial stack where it holds it.
    fn stack_region<M: Memory + ?Sized>(&self, mem: &mut M, sp: u64) -> Option<(u64, u64)> {
        let (start, end) = mem.region_of(sp)?;
        Some(match self.initial_stack {
            Some(top) if start <= sp && sp < top && top < end => (start, top),
            _ => (start, end),
        })
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
        let (row, range) =
            module.find_full_row(pc.wrapping_sub(module.bias), true, &mut self.ctx)?;
        let bias = module.bias;
        Ok((index, row, range.start.wrapping_add(bias)..range.end.wrapping_add(bias)))
    }

    /// Unwind from `pc` and `regs` (which must hold the stack pointer),
    /// reading memory through `mem`. The frames go into `frames` (cleared
    /// first, so one vector can be reused without allocating): at most
    /// `max_frames`, or, when None, as many as the captured stack can hold
    /// ([`stack_frame_bound`]; the stacks, where the walk goes on another past
    /// a signal frame, [`Unwinder::regrow_bound`]).
    pub fn unwind<M: Memory + ?Sized>(
        &mut self,
        pc: u64,
        regs: &Registers,
        mem: &mut M,
        max_frames: Option<usize>,
        frames: &mut Vec<Frame>,
    ) -> End {
        self.unwind_from::<M, false>(pc, regs, mem, max_frames, frames)
    }

    /// [`Unwinder::unwind`], also giving each frame's registers as the walk
    /// recovered them, one file a frame in `registers` (cleared first): what
    /// a debugger shows in that frame (`frame N`, `info registers`). Frame 0
    /// holds the registers given; a caller found by CFI the callee-saved
    /// registers as its rows restored them or left them, the registers a
    /// signal frame restored, its pc and sp (the CFA); the other
    /// registers are unknown. Past the first frame a fallback strategy found,
    /// only pc, sp (where exact) and a frame record's frame pointer (see
    /// [`Recorder`]).
    /// Walked by the general loop, not the CFI-only one: the same frames,
    /// more slowly, and the profiler's walk is untouched.
    pub fn unwind_with_registers<M: Memory + ?Sized>(
        &mut self,
        pc: u64,
        regs: &Registers,
        mem: &mut M,
        max_frames: Option<usize>,
        frames: &mut Vec<Frame>,
        registers: &mut Vec<Registers>,
    ) -> End {
        registers.clear();
        self.recorder = Recorder { frames: std::mem::take(registers), unproven: false };
        let end = self.unwind_from::<M, true>(pc, regs, mem, max_frames, frames);
        *registers = std::mem::take(&mut self.recorder.frames);
        end
    }

    /// Keep a recording walk's registers of `frame`, just found (see [`Recorder`]).
    #[cold]
    #[inline(never)]
    fn record(&mut self, regs: &Registers, frame: &Frame, sp_exact: bool) {
        let arch = self.arch;
        let recorder = &mut self.recorder;
        recorder.unproven |= !matches!(frame.trust, Trust::Context | Trust::Cfi);
        let mut kept = Registers::new();
        if !recorder.unproven {
            kept = *regs;
        } else if let Some(fp) = regs.get(arch.fp()).filter(|_| frame.trust == Trust::FramePointer)
        {
            kept.set(arch.fp(), fp);
        }
        // An aarch64 frame a frame record found has no exact sp, only a bound.
        if sp_exact {
            kept.set(arch.sp(), frame.sp);
        }
        if let Some(col) = arch.pc_column() {
            kept.set(col, frame.pc);
        }
        recorder.frames.push(kept);
    }

    #[inline(always)]
    fn unwind_from<M: Memory + ?Sized, const REC: bool>(
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
        self.implicit_limit = max_frames.is_none();
        let max_frames = max_frames.unwrap_or_else(|| stack_frame_bound(arch, sp, mem));
        if max_frames == 0 {
            return end;
        }
        let callee =
            FrameState { pc, sp, interrupted: true, sp_exact: true, trust: Trust::Context };
        let mut regs = *regs;
        if let Some(col) = arch.pc_column() {
            regs.set(col, pc);
        }
        frames.push(Frame {
            pc,
            sp,
            cfa: None,
            trust: Trust::Context,
            interrupted: true,
            signal_frame: false,
        });
        if REC {
            self.record(&regs, &frames[0], true);
        }
        // CFI alone (the profiler's walk) is compiled without the fallback
        // path, so it costs nothing there. (The test written as a method
        // call changed what LLVM inlined here: 1.4 ns a frame more on the
        // python3 stack, see benches/NOTES.md.)
        // (A process's threads' stacks are checked by the general walk, which
        // a core's or a dump's threads take whatever the strategies.)
        if self.strategies.as_slice() == [Strategy::Cfi] && !self.process.knows_live_stacks() {
            self.walk_arch::<M, false, REC>(Start { callee, regs, end }, mem, max_frames, frames)
        } else {
            self.walk_arch::<M, true, REC>(Start { callee, regs, end }, mem, max_frames, frames)
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
    /// With fallback strategies besides CFI ([`Unwinder::set_strategies`]),
    /// a sample is walked by CFI alone first, the fast walk, and walked
    /// again with them only where that walk ended where they may go on:
    /// not at the stack's end, the frame limit, or the end of the stack
    /// copy (the frame record of a frame whose CFI read past the copy lies
    /// about as high), nor at a pc outside every module: code a profile
    /// cannot name (JIT code without a perf map), where a leaf's return
    /// address would be a guess from a word at sp, stale in a function
    /// with a frame (a module without its file, or a perf map's JIT code,
    /// is walked on). Frame 0 without CFI is then left to the frame-pointer
    /// step, which takes a leaf the same way. The samples CFI walks to their
    /// end pay nothing for the fallbacks.
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
        // The walk of CFI alone; `unwind`'s code stays as every other caller's.
        let strategies = std::mem::replace(&mut self.strategies, Strategies::new(&[Strategy::Cfi]));
        let end = self.unwind(pc, regs, mem, max_frames, frames);
        self.strategies = strategies;
        if strategies.as_slice() == [Strategy::Cfi] {
            // Matched, not compared: `==` is a call that takes the end's address.
            let no_fde = matches!(end.detail, EndDetail::Lookup(LookupError::NoFde));
            if no_fde && frames.len() == 1 {
                return self.leaf_walk(regs, mem, max_frames, frames);
            }
            return end;
        }
        match end.reason {
            EndReason::EndOfStack
            | EndReason::PcZero
            | EndReason::FrameLimit
            | EndReason::Memory => end,
            EndReason::NoModule if end.module.is_none() => end,
            _ => self.unwind_fallback(pc, regs, mem, max_frames, frames),
        }
    }

    /// The walk with the fallback strategies, out of the sample's hot path.
    #[cold]
    #[inline(never)]
    fn unwind_fallback<M: Memory + ?Sized>(
        &mut self,
        pc: u64,
        regs: &Registers,
        mem: &mut M,
        max_frames: Option<usize>,
        frames: &mut Vec<Frame>,
    ) -> End {
        self.unwind(pc, regs, mem, max_frames, frames)
    }

    /// [`Unwinder::walk`] compiled for this unwinder's architecture.
    /// `REC`: a recording walk ([`Unwinder::unwind_with_registers`]), by the
    /// general loop whatever the strategies.
    #[inline(always)]
    fn walk_arch<M: Memory + ?Sized, const FALLBACK: bool, const REC: bool>(
        &mut self,
        start: Start,
        mem: &mut M,
        max_frames: usize,
        frames: &mut Vec<Frame>,
    ) -> End {
        with_arch!(self.arch, A => {
            if REC {
                self.walk::<M, FALLBACK, A, true>(start, mem, max_frames, frames)
            } else if FALLBACK {
                self.walk::<M, true, A, false>(start, mem, max_frames, frames)
            } else {
                self.walk_cfi::<M, A>(start, mem, max_frames, frames)
            }
        })
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
