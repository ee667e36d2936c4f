//! One step's work: a row of rules applied to a frame's registers, giving
//! its caller's, and the checks that make the caller a frame.

use super::{arch_of, Caller, EndDetail, EndReason, Frame, FrameState, Step};
use crate::arch::registers::Registers;
use crate::arch::{Arch, DefaultRule};
use crate::source::memory::Memory;
use crate::unwind::cfi::{CfaRule, ExprRef, RegRule, Rules};
use crate::unwind::expr::{self, ExprError};
use crate::unwind::modules::ModuleSet;
use crate::unwind::rule_cache::{Context, RuleCache, Saved};

/// Apply a row's rules to the callee's state; the frame's CFA goes into
/// the last of `frames`. `FALLBACK`: the walk may have guessed the callee's
/// sp (compiled out of the CFI-only walk).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn apply<M: Memory + ?Sized, R: Rules, const FALLBACK: bool>(
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
        CfaRule::DerefRegister { reg, offset } => {
            let Some(base) = regs.get(reg) else {
                return Err((EndReason::MissingRegister, EndDetail::Register(reg)));
            };
            let addr = base.wrapping_add(offset as u64) & mask;
            match read_word(mem, arch, addr) {
                Some(v) => v & mask,
                None => return Err((EndReason::Memory, EndDetail::Address(addr))),
            }
        }
    };
    if let Some(f) = frames.last_mut() {
        f.cfa = Some(cfa);
    }
    // Columns the CFI says nothing about take the ABI default.
    caller.inherit_fixed(regs, arch.same_value_mask());
    caller.set(arch.sp(), cfa);
    let mut ra_rule = None;
    // Where both the return address and sp are saved in words that cannot be read, the
    // return address's is the one the walk ends at, whichever rule comes first: the rule
    // cache puts the return address's first in a row whose saved words it reads at once
    // (a `Saved` row), and a walk from the cache must end where the first did.
    let mut unread_sp = None;
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
                None if reg == ra_column => {
                    return Err((EndReason::Memory, EndDetail::Address(addr)));
                }
                None => {
                    if essential {
                        unread_sp.get_or_insert(addr);
                    }
                    caller.forget(reg);
                }
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
                saved_word(mem, arch, cfa.wrapping_add(n as u64) & mask, essential)?
            }
            RegRule::ValOffset(n) => Some(cfa.wrapping_add(n as u64) & mask),
            RegRule::Register(r) => regs.get(r),
            RegRule::Expr(e) => {
                match expr::evaluate(expr_bytes(e), Some(cfa), regs, mem, address_size) {
                    Ok(addr) => saved_word(mem, arch, addr, essential)?,
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
            RegRule::AtRegister { reg: base, offset } => match regs.get(base) {
                Some(b) => saved_word(mem, arch, b.wrapping_add(offset as u64) & mask, essential)?,
                None if essential => {
                    return Err((EndReason::MissingRegister, EndDetail::Register(base)))
                }
                None => None,
            },
        };
        match value {
            Some(v) => caller.set(reg, v),
            None => caller.forget(reg),
        }
        if reg == ra_column {
            ra_rule = Some(rule);
        }
    }
    if let Some(addr) = unread_sp {
        return Err((EndReason::Memory, EndDetail::Address(addr)));
    }
    finish(arch, ra_column, ra_rule, row.signal_frame(), callee, caller, frames)
}

/// [`apply`] for a [`Saved`] row whose callee's sp is exact: the CFA from a
/// register, every rule a word read at an offset from it, read from one
/// window of the stack where the memory lends one.
#[inline(always)]
pub(super) fn apply_saved<M: Memory + ?Sized, const A: u8>(
    row: &Saved,
    callee: &FrameState,
    regs: &Registers,
    caller: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Step {
    // The caller's file starts as the callee's, and is recovered in place.
    *caller = *regs;
    if let Some(step) = apply_in_place::<M, A>(row, callee, caller, mem, frames) {
        return step;
    }
    // No window: word by word, each read checked.
    let arch = arch_of(A);
    let mask = arch.address_mask();
    let (ra_column, signal_frame) = (u16::from(row.ra), row.signal_frame());
    let Some(base) = regs.get(u16::from(row.cfa_reg)) else {
        return Err((EndReason::MissingRegister, EndDetail::Register(u16::from(row.cfa_reg))));
    };
    let cfa = base.wrapping_add(i64::from(row.cfa_offset) as u64) & mask;
    let lo = base.wrapping_add(i64::from(row.window) as u64);
    if let Some(f) = frames.last_mut() {
        f.signal_frame = signal_frame;
        f.cfa = Some(cfa);
    }
    let mut out = caller.recover_in_place(arch.same_value_mask());
    out.set(arch.sp(), cfa);
    for (reg, at) in row.rules() {
        let addr = lo.wrapping_add(at as u64) & mask;
        match read_word(mem, arch, addr) {
            Some(v) => out.set(reg, v),
            None if reg == ra_column || reg == arch.sp() => {
                return Err((EndReason::Memory, EndDetail::Address(addr)))
            }
            None => out.forget(reg),
        }
    }
    if row.ra_rule().is_some() {
        out.forget(ra_column);
    }
    drop(out);
    // A rule for the return-address column always recovers it (or the walk
    // ended above): where it is unknown, it was undefined, or there was none.
    finish(arch, ra_column, row.ra_rule(), signal_frame, callee, caller, frames)
}

/// [`apply_saved`] in place: `regs` becomes the caller's. None, with
/// nothing done, where the memory lends no window holding every saved word
/// or the CFA's register is unknown (the word-by-word way then gives the
/// same answer, or the right error).
#[inline(always)]
pub(super) fn apply_in_place<M: Memory + ?Sized, const A: u8>(
    row: &Saved,
    callee: &FrameState,
    regs: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Option<Step> {
    let base = regs.get(u16::from(row.cfa_reg))?;
    let (cfa, _) = recover_saved::<M, A>(row, base, regs, mem)?;
    let signal_frame = row.signal_frame();
    if let Some(f) = frames.last_mut() {
        f.signal_frame = signal_frame;
        f.cfa = Some(cfa);
    }
    Some(finish(arch_of(A), u16::from(row.ra), row.ra_rule(), signal_frame, callee, regs, frames))
}

/// The work of [`apply_in_place`], from `base`, the value of the CFA's
/// register: `regs` recovered in place, the caller's sp the CFA. The CFA
/// and the value of the first rule's register (0 if there is none); None,
/// with nothing done, where the memory lends no window holding every saved
/// word.
#[inline(always)]
pub(super) fn recover_saved<M: Memory + ?Sized, const A: u8>(
    row: &Saved,
    base: u64,
    regs: &mut Registers,
    mem: &mut M,
) -> Option<(u64, u64)> {
    let arch = arch_of(A);
    let mask = arch.address_mask();
    let cfa = base.wrapping_add(i64::from(row.cfa_offset) as u64) & mask;
    let word = arch.word_size();
    let offset = i64::from(row.window) as u64;
    let lo = base.wrapping_add(offset) & mask;
    let len = u64::from(row.span) + word;
    // `stack_window`'s work, written out in the walk's hot step: through
    // that function the harness measured every stack 0.3-0.9 ns a frame
    // slower in two of three alternating runs (see benches/NOTES.md).
    let window = if row.is_empty() {
        &[][..]
    } else if lo > mask - (len - 1) {
        return None;
    } else if mask == u64::MAX {
        mem.window_from(base, offset, len)?
    } else {
        mem.window(lo, len)?
    };
    // The callee-saved columns keep their values, the others are unknown.
    let mut out = regs.recover_in_place(arch.same_value_mask());
    out.set(arch.sp(), cfa);
    let mut first = 0;
    for (i, (reg, at)) in row.rules().enumerate() {
        // At most `span`: one bounds test a word, which always passes (the
        // window holds `span` bytes and a word).
        match window_word(window, at, word) {
            Some(v) => {
                out.set(reg, v);
                if i == 0 {
                    first = v;
                }
            }
            None => out.forget(reg),
        }
    }
    if row.ra_rule().is_some() {
        out.forget(u16::from(row.ra));
    }
    drop(out);
    Some((cfa, first))
}

/// [`apply`] for a [`Context`] row (a signal trampoline's), in place:
/// `regs`, the callee's, becomes the caller's. None, with nothing done,
/// where the base register is unknown or the memory lends no window holding
/// every word (the general way then gives the same answer, or the right
/// error).
#[inline(always)]
pub(super) fn apply_context<M: Memory + ?Sized, const A: u8>(
    row: &Context,
    callee: &FrameState,
    regs: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Option<Step> {
    let arch = arch_of(A);
    let mask = arch.address_mask();
    let word = arch.word_size();
    let base = regs.get(row.base)?;
    let len = u64::from(row.span) + word;
    let window = stack_window(mem, mask, (base, row.window as u64), len)?;
    // At most `span` into the window, which holds `span` bytes and a word.
    let read = |at: usize| window_word(window, at, word);
    let cfa = if row.cfa_deref {
        read(usize::from(row.cfa_at))? & mask
    } else {
        base.wrapping_add(i64::from(row.cfa_offset) as u64) & mask
    };
    if let Some(f) = frames.last_mut() {
        f.signal_frame = row.signal_frame;
        f.cfa = Some(cfa);
    }
    // The callee-saved columns keep their values, the others are unknown.
    let mut out = regs.recover_in_place(arch.same_value_mask());
    out.set(arch.sp(), cfa);
    for (reg, at) in row.rules() {
        match read(at) {
            Some(v) => out.set(reg, v),
            None => out.forget(reg),
        }
    }
    drop(out);
    // A rule for the return address always recovers it: its rule matters
    // to `finish` only where it is unknown, that is, where it has none.
    Some(finish(arch, row.ra, None, row.signal_frame, callee, regs, frames))
}

/// `len` bytes of the target's memory from `base + offset`, addresses
/// wrapping at `mask` (the address space's width), where one captured
/// region holds them all and they do not run past the top of the address
/// space.
#[inline(always)]
pub(super) fn stack_window<M: Memory + ?Sized>(
    mem: &mut M,
    mask: u64,
    (base, offset): (u64, u64),
    len: u64,
) -> Option<&[u8]> {
    let lo = base.wrapping_add(offset) & mask;
    if lo > mask - (len - 1) {
        None
    } else if mask == u64::MAX {
        mem.window_from(base, offset, len)
    } else {
        mem.window(lo, len)
    }
}

/// The target's word (`word` bytes: 8, or 4 zero-extended) at `at` in a
/// window of its memory, if the window holds it.
#[inline(always)]
pub(super) fn window_word(window: &[u8], at: usize, word: u64) -> Option<u64> {
    match word {
        8 => window.get(at..at + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default())),
        _ => window
            .get(at..at + 4)
            .map(|w| u64::from(u32::from_le_bytes(w.try_into().unwrap_or_default()))),
    }
}

/// What [`fast_step`] did.
pub(super) enum Fast {
    /// The caller, its registers recovered in place.
    Next { pc: u64, sp: u64, interrupted: bool },
    /// The registers were recovered in place, but they give no caller (the
    /// end of the stack, or a check failed): [`finish`] says why, from the
    /// return address's column and rule where the row has one of its own.
    Stop { ra_column: u16, ra_rule: Option<RegRule>, signal_frame: bool },
    /// Nothing done: the general step applies.
    Slow,
}

/// The commonest step of a CFI-only walk, kept small enough for the walk's
/// state to stay in registers: a [`Saved`] row from the rule cache, applied
/// in place ([`recover_saved`]), and [`finish`]'s checks, which a caller that
/// passes them always passes. Hits are the caller's to count.
#[inline(always)]
pub(super) fn fast_step<M: Memory + ?Sized, const A: u8>(
    cache: &mut RuleCache,
    (lookup, generation): (u64, u64),
    callee: &FrameState,
    regs: &mut Registers,
    mem: &mut M,
    frames: &mut [Frame],
) -> Fast {
    let arch = arch_of(A);
    let Some(saved) = cache.find_saved(lookup, generation) else { return Fast::Slow };
    let (ra_column, signal_frame) = (u16::from(saved.ra), saved.signal_frame());
    // The callee's sp is at hand, not only in its register file.
    let base = if u16::from(saved.cfa_reg) == arch.sp() {
        callee.sp
    } else {
        let Some(base) = regs.get(u16::from(saved.cfa_reg)) else { return Fast::Slow };
        base
    };
    let Some((cfa, first)) = recover_saved::<M, A>(saved, base, regs, mem) else {
        return Fast::Slow;
    };
    if let Some(f) = frames.last_mut() {
        f.signal_frame = signal_frame;
        f.cfa = Some(cfa);
    }
    let stop = Fast::Stop { ra_column, ra_rule: saved.ra_rule(), signal_frame };
    // The return address and sp as read, rather than through the register
    // file, where the row says which they are.
    let ra = if saved.ra_first() {
        first
    } else if let Some(ra) = regs.get(ra_column) {
        ra
    } else {
        return stop;
    };
    let pc = arch.strip_return_address(ra);
    let sp = if !saved.sp_saved() {
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
pub(super) fn finish(
    arch: Arch,
    ra_column: u16,
    ra_rule: Option<RegRule>,
    signal_frame: bool,
    callee: &FrameState,
    caller: &mut Registers,
    frames: &[Frame],
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
    if (caller_sp < sp && !stack_switch(signal_frame, caller_sp, frames))
        || (caller_sp == sp && !callee.interrupted)
    {
        return Err((EndReason::CfaNotIncreasing, EndDetail::Sp { caller: caller_sp, frame: sp }));
    }
    if let Some(col) = arch.pc_column() {
        caller.set(col, caller_pc);
    }
    Ok(Caller { pc: caller_pc, sp: caller_sp, interrupted: signal_frame, sp_exact: true })
}

/// Whether a caller's sp below its callee's is a switch of stacks: the callee
/// is a signal frame (the kernel's, on the stack its handler ran on: an
/// alternate one, `sigaltstack`, lies anywhere) and the interrupted frame's sp
/// is below every frame of the walk so far (`frames`, the callee last), so on
/// a stack the walk has not been on, and no frame can come round again.
/// gdb and eu-stack go on there too.
#[cold]
#[inline(never)]
pub(super) fn stack_switch(signal_frame: bool, caller_sp: u64, frames: &[Frame]) -> bool {
    signal_frame && frames.iter().all(|f| caller_sp < f.sp)
}

/// Whether a strategy's failure means it applied to the frame (and failed),
/// rather than that it had nothing to go on (no module, no FDE, no fp).
pub(super) fn applied(arch: Arch, (reason, detail): &(EndReason, EndDetail)) -> bool {
    match reason {
        EndReason::NoModule | EndReason::NoUnwindInfo => false,
        EndReason::MissingRegister => *detail != EndDetail::Register(arch.fp()),
        _ => true,
    }
}

/// The CFA as `fp − n` where the row saves fp at CFA + n.
pub(super) fn fp_based_cfa<R: Rules>(arch: Arch, row: &R, regs: &Registers) -> Option<u64> {
    match row.rule_for(arch.fp())? {
        RegRule::Offset(n) => Some(regs.get(arch.fp())?.wrapping_sub(n as u64)),
        _ => None,
    }
}

/// A register's word saved at `addr`; None (unknown in the caller) where it
/// is outside the captured memory, an end of the walk if the register is
/// `essential` (the return address, the stack pointer).
#[inline(always)]
fn saved_word<M: Memory + ?Sized>(
    mem: &mut M,
    arch: Arch,
    addr: u64,
    essential: bool,
) -> Result<Option<u64>, (EndReason, EndDetail)> {
    match read_word(mem, arch, addr) {
        None if essential => Err((EndReason::Memory, EndDetail::Address(addr))),
        v => Ok(v),
    }
}

/// A word of the target at `addr`: 8 bytes, or 4 on i386 (zero-extended).
#[inline(always)]
pub(super) fn read_word<M: Memory + ?Sized>(mem: &mut M, arch: Arch, addr: u64) -> Option<u64> {
    match arch.word_size() {
        8 => mem.read_u64(addr),
        size => mem.read_sized(addr, size as u8),
    }
}
