//! A run of frame records: the steps of a CFI-only walk through frames
//! whose rows are all a frame record's (code built at `-O0`, or with frame
//! pointers and nothing else saved; see [`Saved::frame_record`]), with the
//! frame pointer held in a register from one frame to the next.
//!
//! Each step is the one [`super::apply::apply_in_place`] would take with the
//! same row: the same words read, the same checks, the same registers. What
//! differs is what a step waits for. The general step finds the saved words
//! from the row's data (its offsets), so every frame waits for its row
//! before it reads the stack; here the words are at fixed places from the
//! frame pointer and the row only confirms it, a branch the processor
//! predicts: the stack's reads run ahead of the rows' lookups.

use super::apply::{stack_window, window_word};
use super::{arch_of, Caller, Frame, FrameState, Trust};
use crate::arch::registers::Registers;
use crate::source::memory::Memory;
use crate::unwind::rule_cache::{RuleCache, Saved};

/// The walk's steps from `callee` (the last of `frames`, whose row at
/// `lookup` is a frame record's), on while each frame's row is one too,
/// with the frame pointer as the CFA's register: each frame found is pushed
/// but the last, which is returned, with its registers in `regs`, as a
/// step's caller. The run stops before a step it would not take as the
/// general step does (a row of another kind, or not cached; words outside
/// the captured memory; a caller that fails a check; the frame limit,
/// `max_frames`), changing nothing for it: the walk then takes that step
/// the general way, which says why the walk ends there if it does. None
/// where it took no step.
#[inline(always)]
pub(super) fn run<M: Memory + ?Sized, const A: u8>(
    cache: &mut RuleCache,
    (lookup, generation): (u64, u64),
    callee: &FrameState,
    regs: &mut Registers,
    mem: &mut M,
    max_frames: usize,
    frames: &mut Vec<Frame>,
) -> Option<Caller> {
    let arch = arch_of(A);
    let (fp_column, mask, word) = (arch.fp(), arch.address_mask(), arch.word_size());
    let len = 2 * word;
    let mut fp = regs.get(fp_column)?;
    let (mut sp, mut interrupted) = (callee.sp, callee.interrupted);
    // The row's CFA register and return address column.
    let columns = |r: &Saved| (u16::from(r.cfa_reg), u16::from(r.ra));
    let mut row = cache.find_record(lookup, generation).map(columns)?;
    // The caller the last step found, not pushed yet: its pc, and its return
    // address and the column the row gave it.
    let mut found: Option<(u64, u16, u64)> = None;
    let mut hits = 0;
    loop {
        if row.0 != fp_column {
            break;
        }
        let Some(window) = stack_window(mem, mask, (fp, 0), len) else { break };
        let (Some(saved_fp), Some(ra)) =
            (window_word(window, 0, word), window_word(window, word as usize, word))
        else {
            break;
        };
        let cfa = fp.wrapping_add(len) & mask;
        let pc = arch.strip_return_address(ra);
        if pc == 0 || cfa < sp || (cfa == sp && !interrupted) {
            break;
        }
        if let Some((pc, ..)) = found {
            if frames.len() >= max_frames {
                break;
            }
            let (cfa, trust) = (None, Trust::Cfi);
            frames.push(Frame { pc, sp, cfa, trust, interrupted, signal_frame: false });
        }
        if let Some(f) = frames.last_mut() {
            f.signal_frame = false;
            f.cfa = Some(cfa);
        }
        hits += 1;
        (sp, fp, interrupted) = (cfa, saved_fp, false);
        found = Some((pc, row.1, ra));
        match cache.find_record(pc.wrapping_sub(1), generation) {
            Some(r) => row = columns(r),
            None => break,
        }
    }
    cache.add_hits(hits);
    let (pc, ra_column, ra) = found?;
    // The registers as the steps left them: each recovered the same columns
    // (the first forgot the others).
    let mut out = regs.recover_in_place(arch.same_value_mask());
    out.set(arch.sp(), sp);
    out.set(fp_column, fp);
    out.set(ra_column, ra);
    drop(out);
    if let Some(col) = arch.pc_column() {
        regs.set(col, pc);
    }
    Some(Caller { pc, sp, interrupted: false, sp_exact: true })
}
