//! The CFI walk's steps: the fast loop over cached rows, the slow step that
//! reads an FDE, and one step with the fallbacks (see the module above).

use super::*;

impl Unwinder {
    /// [`Unwinder::walk`] for CFI alone (the default, and the profiler's):
    /// a frame's registers are always in one file, `regs`, and the commonest
    /// rows ([`Saved`]) found in the rule cache recover the caller's in
    /// place, with no second register file to fill (the other rows fill a
    /// scratch file, made at the walk's first need). Where CFI fails, the
    /// walk ends, so the callee's registers are never needed after its step.
    pub(super) fn walk_cfi<M: Memory + ?Sized, const A: u8>(
        &mut self,
        start: Start,
        mem: &mut M,
        max_frames: usize,
        frames: &mut Vec<Frame>,
    ) -> End {
        let Start { mut callee, mut regs, mut end } = start;
        let mut max_frames = max_frames;
        self.frame_limit = max_frames;
        let mut scratch = None;
        let generation = self.modules.generation();
        // The fast steps' cache hits, added to the counts once.
        let mut hits = 0;
        let end = loop {
            let lookup = if callee.interrupted { callee.pc } else { callee.pc.wrapping_sub(1) };
            let key = (lookup, generation);
            let stepped =
                match fast_step::<M, A>(&mut self.cache, key, &callee, &mut regs, mem, frames) {
                    Fast::Next { pc, sp, interrupted } => {
                        hits += 1;
                        if frames.len() >= max_frames
                            && !self.regrow_bound(frames, mem, &mut max_frames)
                        {
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
                    Fast::Stop { ra_column, ra_rule, signal_frame } => {
                        hits += 1;
                        let arch = arch_of(A);
                        finish(arch, ra_column, ra_rule, signal_frame, &callee, &mut regs, frames)
                    }
                    Fast::Slow => {
                        self.slow_step::<M, A>(key, &callee, (&mut regs, &mut scratch), mem, frames)
                    }
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
                    if frames.len() >= max_frames
                        && !self.regrow_bound(frames, mem, &mut max_frames)
                    {
                        // The last frame's, which a run of frame records
                        // may have put past the callee's.
                        if let Some(last) = frames.last() {
                            end.lookup_pc = last.pc.wrapping_sub(u64::from(!last.interrupted));
                        }
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
    /// a run of frame records ([`records::run`], which pushes the frames it
    /// finds but the last), the rule cache's other rows, or a miss. The
    /// caller's registers go to `regs`, through the walk's scratch file (made
    /// here at the first need: most walks never need it).
    #[inline(never)]
    pub(super) fn slow_step<M: Memory + ?Sized, const A: u8>(
        &mut self,
        (lookup, generation): (u64, u64),
        callee: &FrameState,
        (regs, scratch): (&mut Registers, &mut Option<Registers>),
        mem: &mut M,
        frames: &mut Vec<Frame>,
    ) -> Step {
        let (key, limit, cache) = ((lookup, generation), self.frame_limit, &mut self.cache);
        if let Some(c) = records::run::<M, A>(cache, key, callee, regs, mem, limit, frames) {
            return Ok(c);
        }
        let step =
            self.slow_step_of::<M, A>((lookup, generation), callee, (regs, scratch), mem, frames);
        // Go's sigpanic (a signal frame's row) on aarch64: here, out of the
        // walk's loop, whose code any change moves (see benches/NOTES.md).
        match step {
            Ok(c) if A == AARCH64 && frames.last().is_some_and(|f| f.signal_frame) => {
                self.go_sigpanic_caller(lookup, c, regs, mem)
            }
            other => other,
        }
    }

    /// [`Unwinder::slow_step`]'s own work.
    #[inline(always)]
    pub(super) fn slow_step_of<M: Memory + ?Sized, const A: u8>(
        &mut self,
        (lookup, generation): (u64, u64),
        callee: &FrameState,
        (regs, scratch): (&mut Registers, &mut Option<Registers>),
        mem: &mut M,
        frames: &mut [Frame],
    ) -> Step {
        // A signal trampoline's row, applied in place.
        if let Some(context) = self.cache.find_context(lookup, generation) {
            if let Some(step) = apply_context::<M, A>(context, callee, regs, mem, frames) {
                self.cache.add_hits(1);
                return step;
            }
        }
        let b = scratch.get_or_insert_with(Registers::new);
        if let Some(step) =
            self.step_cached::<M, A>(lookup, generation, callee, (regs, b), mem, frames)
        {
            return step;
        }
        let step = self.step::<M, false, A>(lookup, callee, regs, b, mem, frames);
        if step.is_ok() {
            *regs = *b;
        }
        step
    }

    /// The module of `lookup` for a walk's end: the one its cached rules
    /// came from, else found by search.
    #[inline(always)]
    pub(super) fn end_module_index(&mut self, lookup: u64, generation: u64) -> Option<usize> {
        match self.cache.peek(lookup, generation) {
            Some(m) if m != NO_FDE => Some(m),
            _ => self.module_index(lookup),
        }
    }

    /// One step of [`Unwinder::walk_cfi`] from the rule cache: None on a
    /// miss (nothing done, nothing counted). The caller's registers go to
    /// `a` (the callee's), through `b` where the row is not applied in place.
    #[inline(always)]
    pub(super) fn step_cached<M: Memory + ?Sized, const A: u8>(
        &mut self,
        lookup: u64,
        generation: u64,
        callee: &FrameState,
        (a, b): (&mut Registers, &mut Registers),
        mem: &mut M,
        frames: &mut [Frame],
    ) -> Option<Step> {
        let hit = self.cache.get(lookup, generation)?;
        let (m, row) = (hit.module, hit.row);
        if m == NO_FDE {
            return Some(Err((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde))));
        }
        if let Some(saved) = hit.saved {
            if let Some(step) = apply_in_place::<M, A>(saved, callee, a, mem, frames) {
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

    /// Unwind one frame: find the rules for `lookup` in module `m` (cached),
    /// then recover the caller into `caller_regs`.
    // The hot path: the state is passed as borrowed pieces rather than
    // bundled, so that the two register files can be borrowed apart.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn step<M: Memory + ?Sized, const FALLBACK: bool, const A: u8>(
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
        if let Some(hit) = self.cache.get(lookup, generation) {
            let m = hit.module;
            if m == NO_FDE {
                return Err((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde)));
            }
            // The commonest rows, where the callee's sp is exact (always,
            // in the CFI-only walk), by the short way.
            if !FALLBACK || callee.sp_exact {
                if let Some(saved) = hit.saved {
                    return apply_saved::<M, A>(
                        saved,
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
                hit.row,
                callee,
                callee_regs,
                caller_regs,
                mem,
                frames,
            );
        }
        if let Some((m, row, context)) = self.cache.get_wide(lookup, generation) {
            // A signal trampoline's, by the short way where the callee's sp
            // is exact (always, in the CFI-only walk).
            if let Some(context) = context.filter(|_| !FALLBACK || callee.sp_exact) {
                *caller_regs = *callee_regs;
                if let Some(step) = apply_context::<M, A>(context, callee, caller_regs, mem, frames)
                {
                    return step;
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
        // A module whose file is missing has rules only from its Breakpad
        // symbol file's STACK CFI records, if it has one.
        let usable = |m: &Module| !m.is_missing() || m.has_foreign_cfi();
        let Some(m) = self.module_index(lookup).filter(|&m| usable(&self.modules.modules()[m]))
        else {
            return Err((EndReason::NoModule, EndDetail::Address(lookup)));
        };
        self.cache.record_miss();
        let module = &self.modules.modules()[m];
        // Windows x86 code: its symbol file's frame data first (not cached:
        // a step reads the frame below too).
        if A == I386 {
            let lookup_in = lookup.wrapping_sub(module.bias);
            if let Some(data) = module.frame_data(lookup_in) {
                let step = frame_data_step::<M, A>(
                    &self.modules,
                    &data,
                    callee,
                    (callee_regs, caller_regs),
                    mem,
                    frames,
                );
                if let Some(step) = step {
                    return step;
                }
            }
        }
        let exact = callee.interrupted;
        let row = match module.find_row(lookup.wrapping_sub(module.bias), exact, &mut self.ctx) {
            Ok((row, _)) => row,
            // Where the STACK CFI records say nothing, as where there are
            // none (a signal trampoline's CFI is not in them).
            Err(LookupError::NoFde) if module.is_missing() => {
                return Err((EndReason::NoModule, EndDetail::Address(lookup)));
            }
            Err(LookupError::NoFde) => {
                // Remembered too: code without CFI is walked by the
                // fallback strategies, which should not search for an FDE
                // again at every frame.
                self.cache.insert_no_fde(lookup, generation);
                return Err((EndReason::NoUnwindInfo, EndDetail::Lookup(LookupError::NoFde)));
            }
            Err(e) => return Err((EndReason::BadCfi, EndDetail::Lookup(e))),
        };
        match PackedRow::pack(&row) {
            Some(packed) => self.cache.insert(lookup, generation, m, packed, arch_of(A).sp()),
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
}

/// One step by Windows x86 frame data ([`frame_data`]); None where the
/// record cannot be used (the walk goes on as where there is none).
fn frame_data_step<M: Memory + ?Sized, const A: u8>(
    modules: &ModuleSet,
    data: &frame_data::FrameData<'_>,
    callee: &FrameState,
    (regs, caller): (&Registers, &mut Registers),
    mem: &mut M,
    frames: &mut [Frame],
) -> Option<Step> {
    // The parameters the frame below the callee left on the stack: its
    // function's, found where its pc is.
    let grand_callee_params = match frames.len().checked_sub(2).map(|i| frames[i]) {
        Some(f) => {
            let lookup = if f.interrupted { f.pc } else { f.pc.wrapping_sub(1) };
            let module = modules.index_of(lookup).map(|i| &modules.modules()[i]);
            module.and_then(|m| m.parameter_size(lookup.wrapping_sub(m.bias))).unwrap_or(0)
        }
        None => 0,
    };
    let below = frame_data::Below { grand_callee_params, context_frame: frames.len() == 1 };
    frame_data::unwind(data, below, callee.pc, regs, caller, mem).ok()?;
    if let Some(f) = frames.last_mut() {
        f.signal_frame = false;
    }
    let arch = arch_of(A);
    Some(finish(arch, arch.ra(), None, false, callee, caller, frames))
}
