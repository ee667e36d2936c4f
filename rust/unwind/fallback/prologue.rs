//! 32-bit ARM code without unwind tables: the frame's function known by its
//! symbol, what its prologue did by the pc (see `arch::arm_prologue`) gives
//! the caller, as gdb's prologue analyzer does (armhf glibc's `abort`).

use super::*;
use crate::arch::arm_prologue::{self, Prologue};

impl Context<'_> {
    /// The caller by the prologue of the frame's function: its sp (the
    /// frame's plus what the prologue pushed and reserved), its return
    /// address where the prologue saved lr, and the registers it saved.
    /// None where the prologue has not saved lr by the pc (a leaf: see
    /// [`Context::leaf`], then [`Context::leaf_prologue`]) or cannot be read
    /// ([`Context::analyzed`]), and where the return address read is not a
    /// plausible one for its instruction set.
    pub fn prologue<M: Memory + ?Sized>(
        &self,
        callee: &Callee,
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Option<Found> {
        let (prologue, cfa) = self.analyzed(callee)?;
        let raw = mem.read_sized(cfa.checked_add_signed(prologue.lr()?)?, 4)?;
        self.check_saved_return_address(raw, mem).ok()?;
        let ra = self.arch.strip_return_address(raw);
        Some(self.restore_saved(&prologue, cfa, ra, regs, caller, mem))
    }

    /// A leaf frame's caller (found by [`Context::leaf`]: its return address
    /// in lr) made exact by the leaf's prologue where it saved registers
    /// without lr (gcc's leaf in ARM code pushes fp alone): the caller's sp
    /// above them, and their values, the caller's frame pointer among them.
    pub fn leaf_prologue<M: Memory + ?Sized>(
        &self,
        callee: &Callee,
        found: Found,
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Found {
        match self.analyzed(callee) {
            Some((prologue, cfa)) if prologue.lr().is_none() && prologue.size > 0 => {
                self.restore_saved(&prologue, cfa, found.pc, regs, caller, mem)
            }
            _ => found,
        }
    }

    /// The prologue of the frame's function up to the pc, and the CFA it
    /// gives: 32-bit ARM only, where the frame's sp is known exactly and its
    /// function by a symbol, and the function's code is in its file.
    fn analyzed(&self, callee: &Callee) -> Option<(Prologue, u64)> {
        if self.arch != Arch::Arm || !callee.sp_known {
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
        Some((prologue, cfa))
    }

    /// The caller at `cfa` returning to `ra`, the registers the prologue
    /// saved read back (unknown where not captured).
    fn restore_saved<M: Memory + ?Sized>(
        &self,
        prologue: &Prologue,
        cfa: u64,
        ra: u64,
        regs: &Registers,
        caller: &mut Registers,
        mem: &mut M,
    ) -> Found {
        let arch = self.arch;
        caller.inherit(regs, arch.same_value_mask());
        for (reg, at) in prologue.saved() {
            match cfa.checked_add_signed(at).and_then(|a| mem.read_sized(a, 4)) {
                Some(value) => caller.set(reg, value),
                None => caller.forget(reg),
            }
        }
        caller.set(arch.sp(), cfa);
        if let Some(lr) = arch.link_register() {
            caller.forget(lr);
        }
        Found { pc: ra, sp: cfa, sp_exact: true, interrupted: false, trust: Trust::Prologue }
    }
}
