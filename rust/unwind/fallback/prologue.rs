//! 32-bit ARM code without unwind tables: the frame's function known by its
//! symbol, what its prologue did by the pc (see `arch::arm_prologue`) gives
//! the caller, as gdb's prologue analyzer does (armhf glibc's `abort`).

use super::*;
use crate::arch::arm_prologue;

impl Context<'_> {
    /// The caller by the prologue of the frame's function: its sp (the
    /// frame's plus what the prologue pushed and reserved), its return
    /// address where the prologue saved lr, and the registers it saved.
    /// None where the frame's sp is not known exactly, its function is not
    /// known by a symbol, or the prologue has not saved lr by the pc (a
    /// leaf: see [`Context::leaf`]); and where the return address read is
    /// not a plausible one for its instruction set.
    pub fn prologue<M: Memory + ?Sized>(
        &self,
        callee: &Callee,
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Option<Found> {
        let arch = self.arch;
        if arch != Arch::Arm || !callee.sp_known {
            return None;
        }
        let module = &self.modules.modules()[self.modules.index_of(callee.pc)?];
        let lookup = if callee.interrupted { callee.pc } else { callee.pc.wrapping_sub(1) };
        let map = module.code_map();
        let function = map.function(lookup.wrapping_sub(module.bias))?;
        // The code that ran before the pc (before the call, for a return address).
        let ran = callee.pc.wrapping_sub(module.bias).checked_sub(function.start)?;
        let len = usize::try_from(ran).ok()?.min(arm_prologue::REACH);
        let code = module.code_at(function.start, len)?;
        let prologue = arm_prologue::analyze(code, map.is_thumb(function.start));
        let cfa = callee.sp.checked_add(prologue.size)?;
        let slot = |at: i64| cfa.checked_add_signed(at);
        let raw = mem.read_sized(slot(prologue.lr()?)?, 4)?;
        self.check_saved_return_address(raw, mem).ok()?;
        let ra = arch.strip_return_address(raw);
        caller.inherit(regs, arch.same_value_mask());
        for (reg, at) in prologue.saved() {
            match slot(at).and_then(|a| mem.read_sized(a, 4)) {
                Some(value) => caller.set(reg, value),
                None => caller.forget(reg),
            }
        }
        caller.set(arch.sp(), cfa);
        if let Some(lr) = arch.link_register() {
            caller.forget(lr);
        }
        Some(Found { pc: ra, sp: cfa, sp_exact: true, interrupted: false, trust: Trust::Prologue })
    }
}
