//! x64 unwinding from a PE file's own tables: the function table
//! (`.pdata`, `RUNTIME_FUNCTION` entries) and each function's `UNWIND_INFO`
//! (`.xdata`), parsed by Mozilla's `pe-unwind-info` crate and turned here
//! into the rows the DWARF path makes, which the walk applies and the rule
//! cache keeps as it does theirs.
//!
//! The rules are Windows' own (`RtlVirtualUnwind`, Microsoft's "x64
//! exception handling"):
//! - the unwind codes of a function whose prolog has run up to the pc are
//!   undone in the order listed (the reverse of the prolog's), those of
//!   chained entries wholly after them;
//! - a pc in an epilog (frame 0, or a frame interrupted there) is unwound
//!   by reading the instructions left to run (`add rsp` or `lea rsp`, pops,
//!   then `ret` or a jump out of the function);
//! - a function with no entry is a leaf: its return address is at `[rsp]`
//!   (where the pc is exact: a caller's return address always has an entry
//!   in code that follows the ABI, and one without is left to the fallback
//!   strategies, which check what they find).
//!
//! Register numbers: the unwind codes number registers as the instruction
//! set does (rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8–r15); the rows use
//! DWARF's columns.

use std::ops::Range;

use pe_unwind_info::x86_64::{
    FunctionEpilogInstruction, FunctionTableEntries, Register, UnwindInfo, UnwindInfoFlags,
    UnwindOperation, FUNCTION_EPILOG_LIMIT,
};

use crate::arch::Arch;
use crate::space::pe::PeImage;
use crate::unwind::cfi::{CfaRule, ForeignCfi, LookupError, RegRule, Row};

/// x86_64's stack pointer and return-address columns (DWARF's).
const RSP: u16 = 7;
const RA: u16 = 16;

/// Chained unwind info deeper than this is taken for a loop (Windows'
/// compilers chain a function's pieces once or twice).
const MAX_CHAIN: usize = 32;

/// A PE file's x64 unwind tables, as rules (see the module's
/// documentation). Offsets are RVAs: from where the image is loaded.
pub struct PeUnwind {
    image: PeImage,
}

impl PeUnwind {
    /// The tables of `image`; why they cannot be used (not an x64 file).
    pub fn new(image: PeImage) -> Result<PeUnwind, String> {
        if image.headers.arch != Arch::X86_64 {
            return Err(format!(
                "a PE file for {}: only x64 unwind tables are read",
                image.headers.arch.name()
            ));
        }
        Ok(PeUnwind { image })
    }

    fn table(&self) -> FunctionTableEntries<'_> {
        FunctionTableEntries::parse(self.image.function_table())
    }

    /// The bytes of the unwind info at `rva` (to the end of its section).
    fn info(&self, rva: u32) -> Result<&[u8], LookupError> {
        self.image.bytes_at(rva).ok_or(bad("unwind info outside the file"))
    }

    fn in_code(&self, rva: u32) -> bool {
        self.image.headers.code().any(|r| r.contains(&u64::from(rva)))
    }

    /// The rules at `rva`; `exact`: the pc itself (frame 0, an interrupted
    /// frame), not a return address less one.
    pub fn row_at(&self, rva: u32, exact: bool) -> Result<Row, LookupError> {
        let Some(function) = self.table().lookup(rva) else {
            return match exact && self.in_code(rva) {
                true => Undo::new().row(),
                false => Err(LookupError::NoFde),
            };
        };
        let (begin, end) = (function.begin_address.get(), function.end_address.get());
        // (A table out of order, or an entry that ends before it starts: damaged.)
        let offset = rva.checked_sub(begin).filter(|_| rva < end);
        let offset = offset.ok_or(bad("a function table out of order"))?;
        let raw = self.info(function.unwind_info_address.get())?;
        let info = parse_info(raw)?;
        if exact && offset >= u32::from(info.prolog_size) {
            if let Some(row) = self.epilog_row(rva, begin..end, &info) {
                return row;
            }
        }
        let mut undo = Undo::new();
        let mut next = undo.function(&info, raw, Some(offset))?;
        for _ in 0..MAX_CHAIN {
            let Some(chained) = next else { return undo.row() };
            let raw = self.info(chained)?;
            next = undo.function(&parse_info(raw)?, raw, None)?;
        }
        Err(bad("a chain of unwind info that does not end"))
    }

    /// The row of a pc in an epilog, where the instructions from `rva` on
    /// are the rest of one: (optionally `add rsp, N` or `lea rsp, [fp +
    /// N]`, then) pops, then `ret` or a jump out of `function`. None where
    /// they are not.
    fn epilog_row(
        &self,
        rva: u32,
        function: Range<u32>,
        info: &UnwindInfo<'_>,
    ) -> Option<Result<Row, LookupError>> {
        let code = self.image.bytes_at(rva)?;
        let code = &code[..code.len().min(function.end.saturating_sub(rva) as usize)];
        let frame_register = info.frame_register();
        let mut undo = Undo::new();
        let mut rest = code;
        for i in 0..=FUNCTION_EPILOG_LIMIT {
            let parsed = match FunctionEpilogInstruction::parse(rest, frame_register, i == 0) {
                Ok(parsed) => parsed,
                // `rex.w jmp` through a register or memory: a tail call, which
                // Windows takes for an epilog's end (the crate does not).
                Err(_) if matches!(rest, [0x48..=0x4f, 0xff, m, ..] if m & 0x38 == 0x20) => None,
                Err(_) => return None,
            };
            match parsed {
                Some((instruction, after)) => {
                    match instruction {
                        FunctionEpilogInstruction::AddSP(n) => undo.sp.1 += i64::from(n),
                        FunctionEpilogInstruction::AddSPFromFP(n) => {
                            undo.sp = (column(frame_register?), i64::from(n));
                        }
                        FunctionEpilogInstruction::Pop(Register::RSP) => return None,
                        FunctionEpilogInstruction::Pop(reg) => undo.push(reg),
                    }
                    rest = after;
                }
                None => {
                    // A relative jump is a tail call only out of the function.
                    let at = rva + (code.len() - rest.len()) as u32;
                    let target = match rest {
                        [0xeb, d, ..] => Some(i64::from(at) + 2 + i64::from(*d as i8)),
                        [0xe9, d @ ..] if d.len() >= 4 => {
                            let d = i32::from_le_bytes([d[0], d[1], d[2], d[3]]);
                            Some(i64::from(at) + 5 + i64::from(d))
                        }
                        _ => None,
                    };
                    let inside = i64::from(function.start)..i64::from(function.end);
                    if target.is_some_and(|t| inside.contains(&t)) {
                        return None;
                    }
                    return Some(undo.row());
                }
            }
        }
        None
    }
}

impl ForeignCfi for PeUnwind {
    fn row(&self, arch: Arch, offset: u64, exact: bool) -> Result<(Row, Range<u64>), LookupError> {
        if arch != Arch::X86_64 {
            return Err(bad("x64 unwind tables for another architecture"));
        }
        let rva = u32::try_from(offset).map_err(|_| LookupError::NoFde)?;
        Ok((self.row_at(rva, exact)?, offset..offset + 1))
    }

    fn function_start(&self, offset: u64) -> bool {
        u32::try_from(offset)
            .is_ok_and(|rva| self.table().lookup(rva).is_some_and(|f| f.begin_address.get() == rva))
    }

    fn functions(&self) -> Vec<Range<u64>> {
        let image = &self.image;
        let ranges = image.headers.function_ranges(&image.data);
        ranges.map(|(start, end)| u64::from(start)..u64::from(end)).collect()
    }
}

fn parse_info(raw: &[u8]) -> Result<UnwindInfo<'_>, LookupError> {
    UnwindInfo::parse(raw).ok_or(bad("unwind info of an unknown version, or cut short"))
}

fn bad(why: &'static str) -> LookupError {
    LookupError::Pe(why)
}

/// The DWARF column of a register as the unwind codes number it.
fn column(reg: Register) -> u16 {
    const COLUMNS: [u16; 16] = [0, 2, 1, 3, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15];
    COLUMNS[reg as usize & 15]
}

/// Where a register was saved: a column's value plus an offset.
type Place = (u16, i64);

/// The effect of a frame's prolog undone so far: where the frame's stack
/// pointer was before it (a register plus an offset), where registers are
/// saved, and whether it ended at a machine frame.
struct Undo {
    sp: Place,
    saved: Vec<(u16, Place)>,
    /// A machine frame (an interrupt's or an exception's: the pc and sp at
    /// the interruption) at this place.
    machine: Option<Place>,
}

impl Undo {
    fn new() -> Undo {
        Undo { sp: (RSP, 0), saved: Vec::new(), machine: None }
    }

    /// `pop reg`: the register is where sp points.
    fn push(&mut self, reg: Register) {
        self.save(column(reg), self.sp);
        self.sp.1 += 8;
    }

    /// The last place a register is saved at is the one its caller's value
    /// is in (the earliest save in the prolog: a chained entry's is its
    /// function's first part).
    fn save(&mut self, reg: u16, place: Place) {
        if reg == RSP {
            return;
        }
        self.saved.retain(|(r, _)| *r != reg);
        self.saved.push((reg, place));
    }

    /// Undo the codes of one `UNWIND_INFO` that have run (`offset`: the
    /// pc's offset in the function, None: all of them, a chained entry's);
    /// the RVA of the entry chained after it.
    fn function(
        &mut self,
        info: &UnwindInfo<'_>,
        raw: &[u8],
        offset: Option<u32>,
    ) -> Result<Option<u32>, LookupError> {
        if self.machine.is_some() {
            return Ok(None);
        }
        let mut ops = info.unwind_operations();
        loop {
            let before = ops;
            let Some((at, op)) = ops.next() else {
                if before.unwind_code().is_some() {
                    return Err(bad("an unwind code that is unknown or cut short"));
                }
                break;
            };
            if offset.is_some_and(|o| u32::from(at) > o)
                && !matches!(op, UnwindOperation::EpilogInformation(_))
            {
                continue;
            }
            match op {
                UnwindOperation::EpilogInformation(_) | UnwindOperation::ReadXMM(..) => {}
                UnwindOperation::PopNonVolatile(reg) => self.push(reg),
                UnwindOperation::UnStackAlloc(n) => self.sp.1 += i64::from(n),
                UnwindOperation::RestoreSPFromFP => {
                    let fp = info.frame_register().ok_or(bad("a frame pointer set without one"))?;
                    self.sp = (column(fp), -i64::from(info.frame_register_offset()));
                }
                UnwindOperation::ReadNonVolatile(reg, offset) => {
                    // From the frame pointer less its offset where there is one, else sp.
                    let base = match info.frame_register() {
                        Some(fp) => (column(fp), -i64::from(info.frame_register_offset())),
                        None => self.sp,
                    };
                    let offset = stack_offset(info, offset);
                    self.save(column(reg), (base.0, base.1 + offset));
                }
                UnwindOperation::PopMachineFrame { error_code } => {
                    let at = (self.sp.0, self.sp.1 + if error_code { 8 } else { 0 });
                    self.machine = Some(at);
                    return Ok(None);
                }
            }
        }
        if !info.flags().contains(UnwindInfoFlags::CHAININFO) {
            return Ok(None);
        }
        chained_entry(raw).map(Some).ok_or(bad("chained unwind info cut short"))
    }

    /// The row: the caller's sp (the CFA) above the return address, each
    /// saved register at its place.
    fn row(&self) -> Result<Row, LookupError> {
        let offset = |o: i64| i32::try_from(o).map_err(|_| bad("a stack offset past 2 GiB"));
        let (cfa, ra, signal_frame) = match self.machine {
            // The interrupted rip at the frame, its rsp three words above it.
            Some((reg, at)) => {
                let cfa = CfaRule::DerefRegister { reg, offset: offset(at + 24)? };
                (cfa, RegRule::AtRegister { reg, offset: offset(at)? }, true)
            }
            None => {
                let cfa = CfaRule::RegOffset { reg: self.sp.0, offset: self.sp.1 + 8 };
                (cfa, RegRule::Offset(-8), false)
            }
        };
        let mut row = Row::new(cfa, RA, signal_frame);
        row.push(RA, ra);
        for &(reg, (base, at)) in &self.saved {
            let rule = match cfa {
                CfaRule::RegOffset { reg: r, offset: o } if r == base => RegRule::Offset(at - o),
                _ => RegRule::AtRegister { reg: base, offset: offset(at)? },
            };
            // A row has room for every column; a register is saved once.
            row.push(reg, rule);
        }
        Ok(row)
    }
}

/// The RVA of the unwind info of the entry chained after an `UNWIND_INFO`
/// (`raw`): the `RUNTIME_FUNCTION` that follows its codes, whose array is
/// padded to an even number of slots (which the crate's `trailer` misses).
fn chained_entry(raw: &[u8]) -> Option<u32> {
    let slots = (usize::from(*raw.get(2)?) + 1) & !1;
    let at = 4 + 2 * slots + 8;
    Some(u32::from_le_bytes(raw.get(at..at + 4)?.try_into().ok()?))
}

/// The offset a save code gives, in bytes, from its base: the crate keeps
/// it opaque, and gives it added to the base, which here reads as nothing.
fn stack_offset(info: &UnwindInfo<'_>, offset: pe_unwind_info::x86_64::StackFrameOffset) -> i64 {
    let fp = info.frame_register();
    let fp_offset = u64::from(info.frame_register_offset());
    let base = |reg| if Some(reg) == fp { fp_offset } else { 0 };
    info.resolve_offset(base, offset) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Undo::function` of the unwind info `raw`, parsed.
    fn undo_raw(
        undo: &mut Undo,
        raw: &[u8],
        offset: Option<u32>,
    ) -> Result<Option<u32>, LookupError> {
        undo.function(&parse_info(raw)?, raw, offset)
    }

    /// The row after undoing `info`'s codes that ran by `offset`, and the chained entry's RVA.
    fn undone(info: &[u8], offset: Option<u32>) -> (Result<Row, LookupError>, Option<u32>) {
        let mut undo = Undo::new();
        let next = undo_raw(&mut undo, info, offset).expect("codes");
        (undo.row(), next)
    }

    // An MSVC-style frame function: push rbp; sub rsp, 0x40; lea rbp, [rsp + 0x20] (frame
    // register rbp, offset 2 * 16); mov [rbp + 0x10], rbx (saved 0x30 above the frame base).
    // Codes in reverse order: SAVE_NONVOL rbx (2 slots), SET_FPREG, ALLOC_SMALL, PUSH_NONVOL rbp.
    const FRAME: [u8; 16] = [0x01, 15, 5, 0x25, 15, 0x34, 6, 0, 10, 0x03, 5, 0x72, 1, 0x50, 0, 0];

    #[test]
    fn a_frame_functions_rows_follow_its_prolog() {
        let row = undone(&FRAME, Some(20)).0.expect("row");
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: 6, offset: 0x30 });
        assert_eq!(row.rule(RA), Some(RegRule::Offset(-8)));
        assert_eq!(row.rule(6), Some(RegRule::Offset(-0x10)));
        assert_eq!(row.rule(3), Some(RegRule::Offset(-0x20)));
        // After the allocation, before the frame register is set: rsp's.
        let row = undone(&FRAME, Some(6)).0.expect("row");
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: RSP, offset: 0x50 });
        assert_eq!((row.rule(6), row.rule(3)), (Some(RegRule::Offset(-0x10)), None));
        // At the first instruction: nothing done yet.
        let row = undone(&FRAME, Some(0)).0.expect("row");
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: RSP, offset: 8 });
        assert_eq!(row.rules(), &[(RA, RegRule::Offset(-8))]);
    }

    #[test]
    fn a_machine_frame_gives_the_interrupted_pc_and_sp() {
        // PUSH_MACHFRAME without an error code (the processor's, before any code: listed
        // last), then a push of rbx: rip at [rsp + 8], the interrupted rsp at [rsp + 32].
        let info = [0x01, 1, 2, 0, 1, 0x30, 0, 0x0a];
        let row = undone(&info, None).0.expect("row");
        assert_eq!(row.cfa, CfaRule::DerefRegister { reg: RSP, offset: 8 + 24 });
        assert_eq!(row.rule(RA), Some(RegRule::AtRegister { reg: RSP, offset: 8 }));
        assert_eq!(row.rule(3), Some(RegRule::AtRegister { reg: RSP, offset: 0 }));
        assert!(row.signal_frame);
        // With an error code pushed by the processor, one word more.
        let row = undone(&[0x01, 0, 1, 0, 0, 0x1a, 0, 0], None).0.expect("row");
        assert_eq!(row.cfa, CfaRule::DerefRegister { reg: RSP, offset: 8 + 24 });
        assert_eq!(row.rule(RA), Some(RegRule::AtRegister { reg: RSP, offset: 8 }));
    }

    #[test]
    fn a_chained_entry_is_named_and_damage_is_an_error() {
        // CHAININFO, ALLOC_SMALL 0x20, then the chained RUNTIME_FUNCTION (its info at 0x1234).
        let mut info = vec![0x01 | 4 << 3, 4, 1, 0, 4, 0x32, 0, 0];
        info.extend([0x00, 0x10, 0, 0, 0x80, 0x10, 0, 0, 0x34, 0x12, 0, 0]);
        let (row, next) = undone(&info, Some(8));
        assert_eq!(next, Some(0x1234));
        assert_eq!(row.expect("row").cfa, CfaRule::RegOffset { reg: RSP, offset: 0x28 });
        // The flag without the entry after the codes.
        assert!(undo_raw(&mut Undo::new(), &info[..8], None).is_err());
        // An unknown code (11) where the codes should be.
        assert_eq!(
            undo_raw(&mut Undo::new(), &[0x01, 4, 1, 0, 4, 0x0b, 0, 0], None).err(),
            Some(bad("an unwind code that is unknown or cut short"))
        );
        // SET_FPREG in an entry without a frame register; a version past 2.
        assert!(undo_raw(&mut Undo::new(), &[0x01, 4, 1, 0, 4, 0x03, 0, 0], None).is_err());
        assert!(undo_raw(&mut Undo::new(), &[0x03, 4, 1, 0, 4, 0x32, 0, 0], None).is_err());
    }

    #[test]
    fn registers_are_numbered_as_dwarf_numbers_them() {
        assert_eq!((RSP, RA), (Arch::X86_64.sp(), Arch::X86_64.ra()));
        assert_eq!(column(Register::RCX), 2);
        assert_eq!(column(Register::RSI), 4);
        assert_eq!(column(Register::R15), 15);
    }
}
