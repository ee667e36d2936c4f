//! The last resort: scanning the stack for a return address, each
//! candidate taken only after a call that could have made the frame.

use super::*;

impl Context<'_> {
    /// What the direct call before return address `ra` says of it as the
    /// return address of the frame at `pc` (see [`Context::scan`]): whether
    /// it calls the frame's function, by address in its own module, or
    /// through a PLT entry named after one of that function's symbols.
    pub(super) fn call_before<M: Memory + ?Sized>(
        &self,
        ra: u64,
        pc: u64,
        mem: &mut M,
    ) -> CallBefore {
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
                    && self.check_saved_return_address(value, mem).is_ok()
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
    pub(super) fn scanned<M: Memory + ?Sized>(
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
        self.set_caller(regs, caller, ra, end, caller_fp.map(|fp| (arch.fp(), fp)));
        let sp_exact = !arch.return_address_is_in_a_record();
        Found { pc: ra, sp: end, sp_exact, interrupted: false, trust: Trust::Scan }
    }
}

/// What the direct call before a plausible return address calls, against
/// the function of the frame a scan looks for the caller of.
pub(super) enum CallBefore {
    /// That function's first instruction.
    ThisFunction,
    /// Code outside that function, by the module's symbols, and outside
    /// its PLT; or a PLT entry named after another function.
    OtherFunction,
    /// Nothing known: an indirect call, a call through a PLT entry that
    /// names no symbol, a module without symbols.
    Other,
}
