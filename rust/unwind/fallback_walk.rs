//! The walk with fallback strategies (frame pointers, scanning) after CFI, and
//! the CFI-only walk of a sample whose frame 0 has no CFI, and the caller of
//! Go's sigpanic on aarch64 (from either walk).

use super::apply::{applied, read_word, stack_switch};
use super::{
    stack_frame_bound, with_arch, Caller, End, EndDetail, EndReason, Frame, FrameState, Start,
    Step, Trust, Unwinder, WalkState, AARCH64,
};
use crate::arch::registers::Registers;
use crate::source::memory::Memory;
use crate::unwind::cfi::LookupError;
use crate::unwind::fallback::{self, RaProblem, Strategy};

impl Unwinder {
    /// Frame 0 has no FDE: take it for a leaf (see
    /// [`Unwinder::unwind_sample`]) and walk on from its caller.
    #[cold]
    #[inline(never)]
    pub(super) fn leaf_walk<M: Memory + ?Sized>(
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
            stack: self.stack_region(mem, first.sp),
            last_fp: None,
            scan_words: self.scan_words,
            process: &self.process,
        };
        let callee = fallback::Callee {
            pc: first.pc,
            sp: first.sp,
            guessed: false,
            sp_known: true,
            interrupted: true,
        };
        let fp = callee_regs.get(arch.fp());
        let Some(found) = ctx.leaf(&callee, fp, &callee_regs, &mut caller_regs, mem) else {
            return end;
        };
        end.module = None;
        end.detail = EndDetail::None;
        self.implicit_limit = max_frames.is_none();
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
        self.walk_arch::<M, true, false>(
            Start { callee, regs: caller_regs, end },
            mem,
            max_frames,
            frames,
        )
    }

    /// The walk from frame 0 (in `frames`, its registers in `start`) on.
    /// `FALLBACK`: the strategies are not CFI alone; `A`: the architecture
    /// ([`arch_of`]), which is the unwinder's; `REC`: each frame's registers
    /// are kept ([`Unwinder::unwind_with_registers`]).
    pub(super) fn walk<M: Memory + ?Sized, const FALLBACK: bool, const A: u8, const REC: bool>(
        &mut self,
        start: Start,
        mem: &mut M,
        max_frames: usize,
        frames: &mut Vec<Frame>,
    ) -> End {
        let Start { mut callee, regs, mut end } = start;
        let mut max_frames = max_frames;
        // Two register files, the callee's and the caller's, swapped by
        // index rather than by copying.
        let mut files = [regs, Registers::new()];
        // The captured stack's bounds, looked up when a fallback first needs them.
        let mut stack = None;
        let mut last_fp = None;
        let mut current = 0;
        // Where the live parts of other threads' stacks are known, no
        // caller's sp may be in one (see `ProcessFacts`).
        let live_stacks = self.process.knows_live_stacks();
        let own_sp = callee.sp;
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
            // Go's sigpanic (a signal frame's row) on aarch64.
            let stepped = match stepped {
                Ok(c) if A == AARCH64 && frames.last().is_some_and(|f| f.signal_frame) => {
                    self.go_sigpanic_caller(lookup, c, caller_regs, mem)
                }
                other => other,
            };
            // CFI applied to a frame that a fallback step found starts from
            // guessed registers (an i386 `main` that realigned its stack
            // leaves its frame record away from its caller's sp): the return
            // address it gives must pass the fallback checks too, else the
            // other strategies are tried.
            // And CFI applied to any frame must give a return address in a
            // module's code, off the stack: a damaged `.eh_frame` can give one
            // on the stack with every other rule intact. Where it does not,
            // the other strategies are tried, with their trust.
            let stepped = match stepped {
                Ok(caller) if FALLBACK && !caller.interrupted => {
                    let guessed = !matches!(callee.trust, Trust::Context | Trust::Cfi);
                    self.check_guess(caller, guessed, &mut stack, frames, mem)
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
                    if live_stacks {
                        if let Some(other) = self.process.live_stack_of_another(caller.sp, own_sp) {
                            end.module = self.module_index(lookup);
                            end.reason = EndReason::OtherThreadStack;
                            end.detail =
                                EndDetail::OtherThreadStack { sp: caller.sp, tid: other.tid };
                            return end;
                        }
                    }
                    if caller.sp < callee.sp {
                        // Another stack (past a signal frame): the fallbacks
                        // look at it, not at frame 0's, and its frame
                        // pointers are not above the last stack's.
                        stack = Some(self.stack_region(mem, caller.sp));
                        last_fp = None;
                    }
                    if frames.len() >= max_frames
                        && !self.regrow_bound(frames, mem, &mut max_frames)
                    {
                        end.reason = EndReason::FrameLimit;
                        end.detail = EndDetail::None;
                        return end;
                    }
                    frames.push(caller.frame(trust));
                    if REC {
                        self.record(caller_regs, &caller.frame(trust), caller.sp_exact);
                    }
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
    pub(super) fn fall_back<M: Memory + ?Sized>(
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
        // signal trampoline, as may one whose code is a trampoline's but has
        // no CFI (musl's, Go's): the kernel's frame on the stack says so, and
        // holds the interrupted frame's registers (whatever its fp).
        let trampoline = match failure {
            Some((EndReason::NoModule, _)) => true,
            _ => fallback::sigreturn_at(arch, &self.modules, callee.pc),
        };
        if trampoline {
            let restored = crate::source::sigframe::restore(arch, callee.sp, caller_regs, mem);
            // Above the frame, or on another stack below the whole walk.
            if let Some((pc, sp)) =
                restored.filter(|&(_, sp)| sp > callee.sp || stack_switch(true, sp, frames))
            {
                // The frame is the trampoline's: named, like glibc's whose CFI
                // says so, at its pc, where the handler returned (not after a call).
                if let Some(f) = frames.last_mut() {
                    f.signal_frame = true;
                }
                let caller = Caller { pc, sp, interrupted: true, sp_exact: true };
                return Ok((caller, Trust::Context));
            }
        }
        if let Some(end) = self.outermost(failure.as_ref(), lookup, callee, callee_regs, mem) {
            return Err(end);
        }
        let stack = self.walk_stack_region(walk.stack, frames, mem);
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
                    process: &self.process,
                };
                let frame = fallback::Callee {
                    pc: callee.pc,
                    sp: callee.sp,
                    guessed: matches!(callee.trust, Trust::FramePointer | Trust::Scan),
                    sp_known: matches!(callee.trust, Trust::Context | Trust::Cfi | Trust::Prologue),
                    interrupted: callee.interrupted,
                };
                let found = match strategy {
                    Strategy::Scan => {
                        ctx.scan(&frame, callee_regs, caller_regs, mem).map(|f| (f, Trust::Scan))
                    }
                    // (A frame record found not to be the frame's gives way to
                    // the frame's return address among the words below it.)
                    _ => ctx.frame_pointer(&frame, callee_regs, caller_regs, mem).map(|f| {
                        let trust = f.trust;
                        (f, trust)
                    }),
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
                    let caller = Caller {
                        pc: f.pc,
                        sp: f.sp,
                        interrupted: f.interrupted,
                        sp_exact: f.sp_exact,
                    };
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
    pub(super) fn outermost<M: Memory + ?Sized>(
        &self,
        failure: Option<&(EndReason, EndDetail)>,
        lookup: u64,
        callee: &FrameState,
        regs: &Registers,
        mem: &mut M,
    ) -> Option<(EndReason, EndDetail)> {
        let exact_fp = match callee.trust {
            Trust::Cfi | Trust::Prologue | Trust::FramePointer => regs.get(self.arch.fp()),
            _ => None,
        };
        let no_fde = matches!(
            failure,
            Some((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde)))
        );
        // (Read only where the ABI makes a zero saved fp the chain's end.)
        let record_ends_chain = self.process.apple
            && exact_fp.is_some_and(|fp| fp != 0 && read_word(mem, self.arch, fp) == Some(0));
        let frame = fallback::Unwound { lookup, exact_fp, no_fde, record_ends_chain };
        let detail = fallback::outermost(self.arch, &self.modules, &self.process, &frame)?;
        Some((EndReason::EndOfStack, detail))
    }

    /// `caller`, found by CFI, if its return address is plausible: every
    /// check of a fallback step's where the frame it was found from is one a
    /// fallback found (`guessed`), else those any return address must pass
    /// ([`fallback::Context::check_code_address`]).
    #[inline(never)]
    pub(super) fn check_guess<M: Memory + ?Sized>(
        &self,
        caller: Caller,
        guessed: bool,
        stack: &mut Option<Option<(u64, u64)>>,
        frames: &mut [Frame],
        mem: &mut M,
    ) -> Step {
        let stack = self.walk_stack_region(stack, frames, mem);
        let ctx = fallback::Context {
            arch: self.arch,
            modules: &self.modules,
            stack,
            last_fp: None,
            scan_words: self.scan_words,
            process: &self.process,
        };
        let checked = match guessed {
            true => ctx.check_return_address(caller.pc, mem),
            false => match ctx.check_code_address(caller.pc) {
                // A signal handler returns to a trampoline on a page of its own
                // (qemu-user's, on aarch64, next to the stack it may be copied
                // with): in no module, where the kernel's signal frame lies
                // just above (as the frame-pointer step takes such a return
                // address).
                Err(RaProblem::NotInCode | RaProblem::InStack)
                    if self.module_index(caller.pc.wrapping_sub(1)).is_none()
                        && fallback::signal_frame_above(self.arch, caller.sp, mem).is_some() =>
                {
                    Ok(())
                }
                other => other,
            },
        };
        match checked {
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
    pub(super) fn step_cold<M: Memory + ?Sized>(
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
}

impl Unwinder {
    /// The caller a step found, on aarch64, where the callee is Go's
    /// `runtime.sigpanic` (a signal frame's row, at `lookup`): the runtime,
    /// making a faulting goroutine call sigpanic, moved its sp down 16
    /// bytes, stored its lr there and set lr to the faulting pc (the
    /// caller's pc, as sigpanic's row recovers it). The faulting frame's sp
    /// is 16 bytes above sigpanic's CFA, and its own lr the word stored
    /// there: a leaf that keeps its return address in lr returns there (Go's
    /// traceback reads the frame the same way). Any other caller as it is.
    /// Called where `A` is aarch64 and the callee is a signal frame, so
    /// compiled out of the other architectures' walks.
    #[cold]
    #[inline(never)]
    pub(super) fn go_sigpanic_caller<M: Memory + ?Sized>(
        &self,
        lookup: u64,
        caller: Caller,
        regs: &mut Registers,
        mem: &mut M,
    ) -> Step {
        let in_sigpanic = self.module_index(lookup).is_some_and(|m| {
            let module = &self.modules.modules()[m];
            module.in_go_sigpanic(lookup.wrapping_sub(module.bias))
        });
        if !in_sigpanic {
            return Ok(caller);
        }
        let arch = self.arch;
        let Some(lr) = mem.read_u64(caller.sp) else {
            return Err((EndReason::Memory, EndDetail::Address(caller.sp)));
        };
        let sp = caller.sp.wrapping_add(16);
        regs.set(arch.ra(), lr);
        regs.set(arch.sp(), sp);
        Ok(Caller { sp, ..caller })
    }
}
