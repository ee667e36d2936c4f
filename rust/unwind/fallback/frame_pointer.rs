//! The frame-pointer strategy: a frame record's step, checked, and the
//! leaf frames that made none yet (see the module above for the checks).

use super::scan::CallBefore;
use super::*;
use crate::arch::FrameRecord;

/// A frame record read at a frame's fp: the register that pointed at it,
/// its lowest address and its end, the caller's fp and the return address it
/// holds, and whether that is a plausible one.
#[derive(Clone, Copy)]
struct Record {
    reg: u16,
    base: u64,
    end: u64,
    caller_fp: u64,
    ra: u64,
    checked: Result<(), RaProblem>,
}

impl Context<'_> {
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
        if let Some(found) = self.prologue(callee, regs, caller, mem) {
            return Ok(found);
        }
        if callee.interrupted {
            if let Some(found) = self.leaf(callee, regs.get(arch.fp()), regs, caller, mem) {
                return Ok(self.leaf_prologue(callee, found, regs, caller, mem));
            }
        }
        let Record { reg, base, end, caller_fp, ra, checked } = self.record(callee, regs, mem)?;
        // A record of two zeros is how the outermost frames end the chain
        // where lr is a register (musl's `_start` clears x29 and x30, then
        // branches); a lone 0 is damage. Where a call pushes the return
        // address (x86), a record holds 0 only at the very top of a
        // thread's stack, where Windows' thread start leaves it (XP's
        // `BaseProcessStart`, Wine's `call_thread_func`): the end there;
        // elsewhere two zeros are data (code built without frame pointers
        // keeps anything in rbp), not the end.
        if ra == 0
            && caller_fp == 0
            && (arch.link_register().is_some() || at_stack_top(end, arch.word_size(), mem))
        {
            return Err((EndReason::PcZero, EndDetail::None));
        }
        // Go's signal handler makes a faulting goroutine call sigpanic as if
        // from the faulting instruction: sigpanic's return address is that
        // instruction's, which follows no call, and its frame the interrupted
        // one (found here where a stripped program has no CFI).
        let interrupted = self.in_go_sigpanic(callee.pc);
        // A signal handler's return address in no module may be a trampoline
        // on a page of its own (qemu-user's on aarch64): believed where the
        // kernel's signal frame lies above the record, which then gives the
        // trampoline frame's sp exactly.
        if checked == Err(RaProblem::NotInCode)
            && self.modules.index_of(ra.wrapping_sub(1)).is_none()
        {
            if let Some(sp) = signal_frame_above(arch, end, mem) {
                self.set_caller(regs, caller, ra, sp, Some((reg, caller_fp)));
                self.last_fp = Some(base);
                return Ok(Found {
                    pc: ra,
                    sp,
                    sp_exact: true,
                    interrupted: false,
                    trust: Trust::FramePointer,
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
            if let Some(found) = self.hides_frames(callee, base, ra, mem) {
                return Ok(self.scanned(found, regs, caller, mem));
            }
        }
        self.set_caller(regs, caller, ra, end, Some((reg, caller_fp)));
        if interrupted {
            self.go_faulting_lr(caller_fp, caller, mem);
        }
        self.last_fp = Some(base);
        let sp_exact = arch.frame_record_gives_exact_sp();
        Ok(Found { pc: ra, sp: end, sp_exact, interrupted, trust: Trust::FramePointer })
    }

    /// The frame's record, by the architecture's layouts in turn (32-bit
    /// ARM's three; one elsewhere): the first whose return address is
    /// plausible and whose caller's fp is 0 or above the record, in the
    /// stack; else the first with a plausible return address; else the
    /// first layout's, or why it has none.
    fn record<M: Memory + ?Sized>(
        &self,
        callee: &Callee,
        regs: &Registers,
        mem: &mut M,
    ) -> StepResult<Record> {
        let mut first = None;
        let mut plausible = None;
        for layout in self.arch.frame_records() {
            let read = self.read_record(callee, regs, layout, mem);
            if let Ok(record) = &read {
                if record.checked.is_ok() {
                    if self.chains_on(record) {
                        return read;
                    }
                    plausible.get_or_insert(*record);
                }
            }
            first.get_or_insert(read);
        }
        match (plausible, first) {
            (Some(record), _) => Ok(record),
            (None, Some(read)) => read,
            (None, None) => Err((EndReason::MissingRegister, EndDetail::Register(self.arch.fp()))),
        }
    }

    /// The record `layout` says the frame has, its fp checked (see
    /// [`Context::check_fp`]) and its return address looked at.
    fn read_record<M: Memory + ?Sized>(
        &self,
        callee: &Callee,
        regs: &Registers,
        layout: &FrameRecord,
        mem: &mut M,
    ) -> StepResult<Record> {
        let arch = self.arch;
        let w = arch.word_size();
        let Some(fp) = regs.get(layout.reg) else {
            return Err((EndReason::MissingRegister, EndDetail::Register(layout.reg)));
        };
        let base = fp.wrapping_add_signed(layout.base()) & arch.address_mask();
        // Go on aarch64 keeps a function's frame record one word below its
        // sp (the caller's fp at sp - 8, its own return address at sp).
        let floor = if self.go_record_below_sp(callee.pc) {
            callee.sp.saturating_sub(w)
        } else {
            callee.sp
        };
        if let Err(problem) = self.check_fp(base, floor) {
            return Err((EndReason::FpInvalid, EndDetail::FramePointer { fp, problem }));
        }
        let outside = (
            EndReason::FpInvalid,
            EndDetail::FramePointer { fp, problem: FpProblem::OutsideStack },
        );
        let caller_fp = mem
            .read_sized(base.wrapping_add((layout.fp_slot - layout.base()) as u64), w as u8)
            .ok_or(outside)?;
        let raw = mem
            .read_sized(base.wrapping_add((layout.ra_slot - layout.base()) as u64), w as u8)
            .ok_or(outside)?;
        let ra = arch.strip_return_address(raw);
        let checked = self.check_saved_return_address(raw, mem);
        let end = base.checked_add(2 * w).ok_or(outside)?;
        Ok(Record { reg: layout.reg, base, end, caller_fp, ra, checked })
    }

    /// Whether a record's saved fp could be its caller's: 0 (the outermost
    /// frame's), or an aligned address above the record, in the stack.
    fn chains_on(&self, record: &Record) -> bool {
        let fp = record.caller_fp;
        fp == 0
            || (fp % self.arch.word_size() == 0
                && fp >= record.end
                && self.stack.is_none_or(|(start, end)| start <= fp && fp < end))
    }

    /// Where the record at `fp`, whose return address is `ra`, is another
    /// function's further up the stack (see [`Context::frame_pointer`]): the
    /// frame's own return address below it, and its slot.
    pub(super) fn hides_frames<M: Memory + ?Sized>(
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
            let raw = mem.read_sized(at, w as u8)?;
            let word = self.arch.strip_return_address(raw);
            let own = word != ra
                && self.check_saved_return_address(raw, mem).is_ok()
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
        self.check_saved_return_address(raw, mem).ok()?;
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
        self.set_caller(regs, caller, ra, sp, fp.map(|fp| (arch.fp(), fp)));
        // Where lr holds the return address, a leaf may have moved sp without saving it; not
        // where the pc is in no module and no memory at all (a call through a bad pointer,
        // whose target ran nothing).
        let never_ran = pc_module.is_none() && mem.read_sized(callee.pc, 1).is_none();
        let sp_exact = arch.link_register().is_none() || never_ran;
        Some(Found { pc: ra, sp, sp_exact, interrupted: false, trust: Trust::FramePointer })
    }

    /// Whether the direct call before return address `ra` calls the function
    /// it is in: by the module's symbols, else (a module without them, or
    /// without its file) a call back to at most 1 MiB before it.
    pub(super) fn recursive_call<M: Memory + ?Sized>(&self, ra: u64, mem: &mut M) -> bool {
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
    pub(super) fn made_here<M: Memory + ?Sized>(&self, ra: u64, pc: u64, mem: &mut M) -> bool {
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
    pub(super) fn go_record_below_sp(&self, pc: u64) -> bool {
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
    pub(super) fn go_faulting_lr<M: Memory + ?Sized>(
        &self,
        fp: u64,
        caller: &mut Registers,
        mem: &mut M,
    ) {
        let Some(lr) = self.arch.link_register() else { return };
        let w = self.arch.word_size();
        if let Some(saved) = fp.checked_sub(w).and_then(|at| mem.read_sized(at, w as u8)) {
            caller.set(lr, saved);
        }
    }

    /// Whether `ra` is runtime.goexit's second instruction, the return
    /// address the Go runtime gives every goroutine's first frame.
    pub(super) fn go_exit_return(&self, ra: u64) -> bool {
        let Some(m) = self.modules.index_of(ra.wrapping_sub(1)) else { return false };
        let module = &self.modules.modules()[m];
        self.go_exit_in(module, ra.wrapping_sub(module.bias))
    }

    /// [`Context::go_exit_return`] for a return address at `elf` in `module`.
    pub(super) fn go_exit_in(&self, module: &Module, elf: u64) -> bool {
        let quantum = self.arch.min_instruction_size();
        module.is_go()
            && module.code_map().go_exit(elf.wrapping_sub(1)) == Some(elf.wrapping_sub(quantum))
    }

    /// Whether `pc` is in Go's `runtime.sigpanic`, by the module's symbols.
    pub(super) fn in_go_sigpanic(&self, pc: u64) -> bool {
        let Some(m) = self.modules.index_of(pc) else { return false };
        let module = &self.modules.modules()[m];
        module.in_go_sigpanic(pc.wrapping_sub(module.bias))
    }
}

/// Whether `end` (the end of a frame record) is within four words of the
/// end of the captured region holding it: the top of a thread's stack.
fn at_stack_top<M: Memory + ?Sized>(end: u64, w: u64, mem: &mut M) -> bool {
    mem.region_of(end - 1).is_some_and(|(_, top)| top >= end && top - end <= 4 * w)
}
