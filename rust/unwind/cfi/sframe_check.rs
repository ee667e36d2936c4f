//! A file's `.sframe` table checked against its DWARF CFI: for every
//! SFrame row, at every address it holds over, the CFA, the return
//! address's place and the frame pointer's are compared with the DWARF row
//! there (`.eh_frame`, else `.debug_frame`). For the people writing these
//! tables (assemblers, linkers, JITs): the places they disagree, where an
//! SFrame row has no DWARF row, and the DWARF functions no SFrame function
//! describes.
//!
//! Both are written in SFrame's notation, as `objdump --sframe` prints it:
//! the CFA `sp+16`, `fp+16` or `(fp-8)` (the word there); the return
//! address and the frame pointer `c-8` (saved at the CFA − 8), `u` (not
//! saved: still in its register), `U` (undefined: the outermost frame), or
//! the DWARF rule SFrame cannot say (`r12`, `expr`...). A DWARF CFA given
//! by an expression (a PLT's) is evaluated at each address of the row.

use std::ops::Range;

use gimli::UnwindContext;

use super::rules::{CfaRule, FullRow, RegRule};
use super::sframe::{Entry, Function, PcType, Place, SFrame};
use super::{LookupError, UnwindInfo};
use crate::arch::registers::Registers;
use crate::arch::Arch;

/// Where the two tables say different things, over `range`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    pub range: Range<u64>,
    /// The SFrame function's start.
    pub function: u64,
    /// "cfa", "ra", "fp", or "coverage" (no DWARF row there).
    pub field: &'static str,
    pub sframe: String,
    pub dwarf: String,
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub version: u8,
    pub functions: usize,
    pub rows: usize,
    /// The bytes of code compared.
    pub bytes: u64,
    pub disagreements: Vec<Disagreement>,
    /// DWARF FDEs no SFrame function overlaps.
    pub without_sframe: Vec<Range<u64>>,
    /// SFrame functions whose rows could not be read, and why.
    pub errors: Vec<(u64, String)>,
}

/// Stand-in register values the rules are evaluated with.
const SP: u64 = 0x7000_0000;
const FP: u64 = 0x7100_0000;
/// Pieces of a row with a DWARF expression are evaluated at each address
/// up to this many.
const MAX_EVALUATED: u64 = 64;
/// The most pieces (rows times repeat blocks) of a function checked.
const MAX_PIECES: u64 = 1 << 22;

/// `info`'s `.sframe` table against its DWARF CFI; why it cannot be read.
pub fn verify(info: &UnwindInfo) -> Result<Report, String> {
    let table = match (info.sframe(), info.sframe_error()) {
        (Some(table), _) => table,
        (None, Some(why)) => return Err(format!("the .sframe section cannot be read: {why}")),
        (None, None) => return Err("the file has no .sframe section".to_owned()),
    };
    let mut report =
        Report { version: table.version, functions: table.function_count(), ..Report::default() };
    let mut ctx = UnwindContext::new();
    let mut covered = Vec::new();
    for index in 0..table.function_count() {
        let function = match table.function(index) {
            Ok(f) => f,
            Err(why) => {
                report.errors.push((index as u64, format!("descriptor {index}: {why}")));
                continue;
            }
        };
        covered.push(function.start..function.end);
        let entries: Result<Vec<Entry>, _> = table.entries(&function).collect();
        let entries = match entries {
            Ok(e) => e,
            Err(why) => {
                report.errors.push((function.start, why.to_owned()));
                continue;
            }
        };
        report.rows += entries.len();
        let Some(pieces) = pieces(&function, &entries) else {
            report
                .errors
                .push((function.start, "too many rows in its repeat blocks to check".to_owned()));
            continue;
        };
        for (entry, piece) in pieces {
            report.bytes += piece.end - piece.start;
            compare(info, &table, &function, entry, piece, &mut ctx, &mut report);
        }
    }
    covered.sort_unstable_by_key(|r| r.start);
    report.without_sframe = info
        .fde_ranges()
        .into_iter()
        .filter(|fde| fde.start < fde.end)
        .filter(|fde| {
            let after = covered.partition_point(|c| c.end <= fde.start);
            covered.get(after).is_none_or(|c| c.start >= fde.end)
        })
        .collect();
    Ok(report)
}

/// Each row's addresses: from its start to the next row's (in every
/// repeat block, for a masked function), within the function. None where
/// a masked function's rows in all its blocks would be more than
/// [`MAX_PIECES`] (a damaged size: no linker writes a PLT of millions of
/// entries).
fn pieces<'e>(function: &Function, entries: &'e [Entry]) -> Option<Vec<(&'e Entry, Range<u64>)>> {
    let mut out = Vec::new();
    let (block, blocks) = match function.pc_type {
        PcType::Increasing => (0, 1),
        PcType::Mask(size) => (size, (function.end - function.start).div_ceil(size)),
    };
    if blocks.saturating_mul(entries.len() as u64) > MAX_PIECES {
        return None;
    }
    for b in 0..blocks {
        let base = function.start.saturating_add(b * block);
        for (i, entry) in entries.iter().enumerate() {
            let (start, end) = match function.pc_type {
                PcType::Increasing => {
                    (entry.start, entries.get(i + 1).map_or(function.end, |n| n.start))
                }
                PcType::Mask(size) => (
                    base.saturating_add(entry.start),
                    base.saturating_add(entries.get(i + 1).map_or(size, |n| n.start.min(size))),
                ),
            };
            let (start, end) = (start.max(function.start), end.min(function.end));
            if start < end {
                out.push((entry, start..end));
            }
        }
    }
    Some(out)
}

/// Compare `entry` with the DWARF rows over `piece`.
fn compare(
    info: &UnwindInfo,
    table: &SFrame<'_>,
    function: &Function,
    entry: &Entry,
    piece: Range<u64>,
    ctx: &mut UnwindContext<usize>,
    report: &mut Report,
) {
    let arch = table.arch;
    let mut pc = piece.start;
    while pc < piece.end {
        let (row, end) = match info.dwarf_row(pc, ctx) {
            Ok((row, range)) => (Some(row), range.end.clamp(pc + 1, piece.end)),
            Err(LookupError::NoFde) => {
                let next = info.next_fde_start(pc).unwrap_or(u64::MAX);
                (None, next.clamp(pc + 1, piece.end))
            }
            Err(e) => {
                report.errors.push((pc, format!("DWARF CFI at {pc:#x}: {e}")));
                (None, piece.end)
            }
        };
        let Some(row) = row else {
            let text = "no FDE".to_owned();
            push(report, function, pc..end, "coverage", describe_cfa(arch, entry), text);
            pc = end;
            continue;
        };
        // A CFA expression (a PLT's) depends on the pc: each address apart.
        let step_end = match row.cfa {
            CfaRule::Expr(_) if end - pc <= MAX_EVALUATED => pc + 1,
            _ => end,
        };
        let cfa = dwarf_cfa(info, arch, &row, pc);
        let ours = describe_cfa(arch, entry);
        if cfa != ours {
            push(report, function, pc..step_end, "cfa", ours, cfa);
        }
        let ra = match entry.ra {
            None => "U".to_owned(),
            Some(place) => describe_place(arch, place),
        };
        let theirs = dwarf_rule(arch, &row, row.ra);
        if ra != theirs {
            push(report, function, pc..step_end, "ra", ra, theirs);
        }
        let fp = describe_place(arch, entry.fp);
        let theirs = dwarf_rule(arch, &row, arch.fp());
        if fp != theirs {
            push(report, function, pc..step_end, "fp", fp, theirs);
        }
        pc = step_end;
    }
}

/// Record a disagreement, joined to the last one where it goes on from it.
fn push(
    report: &mut Report,
    function: &Function,
    range: Range<u64>,
    field: &'static str,
    sframe: String,
    dwarf: String,
) {
    if let Some(last) = report.disagreements.last_mut() {
        if last.range.end == range.start
            && last.field == field
            && last.sframe == sframe
            && last.dwarf == dwarf
        {
            last.range.end = range.end;
            return;
        }
    }
    let function = function.start;
    report.disagreements.push(Disagreement { range, function, field, sframe, dwarf });
}

fn register_name(arch: Arch, reg: u16) -> String {
    if reg == arch.sp() {
        "sp".to_owned()
    } else if reg == arch.fp() {
        "fp".to_owned()
    } else {
        format!("r{reg}")
    }
}

/// A row's CFA in SFrame's notation (`sp+16`, `(fp-8)`).
pub fn describe_cfa(arch: Arch, entry: &Entry) -> String {
    let text = format!("{}{:+}", register_name(arch, entry.cfa_reg), entry.cfa_offset);
    if entry.cfa_deref {
        format!("({text})")
    } else {
        text
    }
}

/// Where a row says a register is, in SFrame's notation (`c-8`, `u`).
pub fn describe_place(arch: Arch, place: Place) -> String {
    match place {
        Place::Unchanged => "u".to_owned(),
        Place::AtCfa(n) => format!("c{n:+}"),
        Place::CfaPlus(n) => format!("=c{n:+}"),
        Place::Register { reg, offset, deref: true } => {
            format!("({}{offset:+})", register_name(arch, reg))
        }
        Place::Register { reg, offset, deref: false } => {
            format!("{}{offset:+}", register_name(arch, reg))
        }
    }
}

/// The DWARF row's CFA in the same notation; an expression evaluated at
/// `pc` with stand-in registers, and written as the register plus offset
/// it comes to.
fn dwarf_cfa(info: &UnwindInfo, arch: Arch, row: &FullRow, pc: u64) -> String {
    match row.cfa {
        CfaRule::RegOffset { reg, offset } => format!("{}{offset:+}", register_name(arch, reg)),
        CfaRule::DerefRegister { reg, offset } => {
            format!("({}{offset:+})", register_name(arch, reg))
        }
        CfaRule::Expr(e) => {
            let mut regs = Registers::new();
            regs.set(arch.sp(), SP);
            regs.set(arch.fp(), FP);
            if let Some(column) = arch.pc_column() {
                regs.set(column, pc);
            }
            let mut memory = crate::source::memory::Buffer { start: 0, bytes: &[] };
            let word = arch.word_size() as u8;
            match crate::unwind::expr::evaluate(info.expr_bytes(e), None, &regs, &mut memory, word)
            {
                Ok(value) => {
                    let from_sp = value.wrapping_sub(SP) as i64;
                    let from_fp = value.wrapping_sub(FP) as i64;
                    if from_sp.unsigned_abs() < 1 << 20 {
                        format!("sp{from_sp:+}")
                    } else if from_fp.unsigned_abs() < 1 << 20 {
                        format!("fp{from_fp:+}")
                    } else {
                        "expr".to_owned()
                    }
                }
                Err(_) => "expr".to_owned(),
            }
        }
    }
}

/// The DWARF row's rule for column `reg` in the same notation.
fn dwarf_rule(arch: Arch, row: &FullRow, reg: u16) -> String {
    let rule = row.rules.iter().find(|(r, _)| *r == reg).map(|(_, rule)| *rule);
    match rule {
        None | Some(RegRule::SameValue) => "u".to_owned(),
        Some(RegRule::Undefined) => "U".to_owned(),
        Some(RegRule::Offset(n)) => format!("c{n:+}"),
        Some(RegRule::ValOffset(n)) => format!("=c{n:+}"),
        Some(RegRule::Register(r)) => format!("{}+0", register_name(arch, r)),
        Some(RegRule::AtRegister { reg, offset }) => {
            format!("({}{offset:+})", register_name(arch, reg))
        }
        Some(RegRule::Expr(_)) => "expr".to_owned(),
        Some(RegRule::ValExpr(_)) => "val_expr".to_owned(),
    }
}
