//! Unwinding Mach-O code (macOS, iOS) from its own tables: Apple's compact
//! unwind format (`__TEXT,__unwind_info`: one 32-bit encoding per function,
//! found by two binary searches, parsed by Mozilla's `macho-unwind-info`
//! crate, framehop's), falling back to `__TEXT,__eh_frame` where a
//! function's encoding says DWARF or the table has none, all turned into
//! the rows the DWARF path makes, which the walk applies and the rule cache
//! keeps as it does theirs.
//!
//! The encodings are those of Apple's `compact_unwind_encoding.h` and LLVM
//! libunwind's `CompactUnwinder.hpp`, which defines what they mean:
//! - x86_64 RBP frame: the caller's rsp is rbp + 16, rbp saved at rbp, the
//!   return address above it, up to five callee-saved registers in the slots
//!   from rbp − 8 × offset up, as the encoding lists them;
//! - x86_64 frameless, immediate or indirect: the frame is `size` bytes
//!   with the return address at its top and the registers pushed below it
//!   (the indirect kind reads `size` from the function's `sub rsp`
//!   instruction, plus an adjustment for the pushes);
//! - arm64 frame: the caller's sp is x29 + 16, x29 and lr saved at x29,
//!   then the pairs x19/x20 … x27/x28 (and d8/d9 … d14/d15, not tracked)
//!   below it, in that order;
//! - arm64 frameless: the frame is `size` bytes and the return address is
//!   still in lr (a leaf);
//! - DWARF: the FDE in `__eh_frame` (looked up by address, as the
//!   encoding's offset names the same one).
//!
//! An encoding describes a function's body: after its prologue, before its
//! epilogue. A pc that is not a return address (frame 0's, an interrupted
//! frame's) may be at a function's first instruction, where nothing is
//! pushed yet, at its `ret`, or between the two halves of a frame record's
//! set-up or tear-down: those instructions are read and the row made for
//! them.

use std::ops::Range;

use macho_unwind_info::opcodes::{OpcodeArm64, OpcodeX86_64, RegisterNameX86_64};

use crate::arch::Arch;
use crate::space::macho::MachoImage;
use crate::space::sections::ModuleSections;
use crate::unwind::cfi::{CfaRule, ForeignCfi, LookupError, RegRule, Row, UnwindInfo};

/// DWARF columns: x86_64's rbp, rsp and return address; arm64's x29, x30
/// (lr, the return address) and sp.
const RBP: u16 = 6;
const RSP: u16 = 7;
const RIP: u16 = 16;
const X29: u16 = 29;
const X30: u16 = 30;
const SP: u16 = 31;

/// A Mach-O file's unwind tables, as rules (see the module's
/// documentation). Offsets are from the Mach header (the `__TEXT`
/// segment's start), where the dump's module list places the module.
pub struct CompactUnwind {
    image: MachoImage,
    /// `__eh_frame`'s FDEs, at the file's addresses.
    dwarf: Option<UnwindInfo>,
    /// The compact unwind table passed [`checked`]: else it is not read,
    /// and `__eh_frame` alone unwinds the module.
    table_whole: bool,
}

fn bad(why: &'static str) -> LookupError {
    LookupError::Compact(why)
}

impl CompactUnwind {
    /// The tables of `image`; why they cannot be used.
    pub fn new(image: MachoImage) -> Result<CompactUnwind, String> {
        let eh_frame = image.headers.eh_frame;
        let sections = ModuleSections { eh_frame, ..ModuleSections::default() };
        let dwarf = match eh_frame {
            Some(_) => Some(
                UnwindInfo::new(image.headers.arch, image.data.clone(), sections)
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        let table_whole = image
            .headers
            .unwind_info
            .is_some_and(|section| checked(image.headers.section(&image.data, section)).is_ok());
        Ok(CompactUnwind { image, dwarf, table_whole })
    }

    /// The compact unwind table, where it is whole (see [`checked`]).
    fn table(&self) -> Option<macho_unwind_info::UnwindInfo<'_>> {
        if !self.table_whole {
            return None;
        }
        let section = self.image.headers.unwind_info?;
        macho_unwind_info::UnwindInfo::parse(self.image.headers.section(&self.image.data, section))
            .ok()
    }

    /// The function holding `offset` (from the Mach header) and its
    /// encoding, where the table has one.
    fn function(&self, offset: u64) -> Result<Option<macho_unwind_info::Function>, LookupError> {
        let (Some(table), Ok(offset)) = (self.table(), u32::try_from(offset)) else {
            return Ok(None);
        };
        let function = table.lookup(offset).map_err(|_| bad("a damaged __unwind_info"))?;
        // (The last entry runs to the table's end sentinel; an entry that
        // ends before it starts is damage.)
        Ok(function.filter(|f| f.start_address <= offset && offset < f.end_address))
    }

    /// The code at file address `address`, at most `len` bytes.
    fn code(&self, address: u64, len: usize) -> &[u8] {
        let code = self.image.bytes_at(address).unwrap_or(&[]);
        &code[..code.len().min(len)]
    }

    /// The rules `__eh_frame` gives at `offset`.
    fn dwarf_row(&self, offset: u64, exact: bool) -> Result<(Row, Range<u64>), LookupError> {
        let Some(dwarf) = &self.dwarf else { return Err(LookupError::NoFde) };
        let text = self.image.headers.text_address;
        let mut ctx = gimli::UnwindContext::new();
        let (row, range) = dwarf.find_row(text.wrapping_add(offset), exact, &mut ctx)?;
        Ok((row, range.start.wrapping_sub(text)..range.end.wrapping_sub(text)))
    }

    /// The row of a function's body at `offset`, by its encoding.
    fn encoded_row(
        &self,
        arch: Arch,
        function: &Range<u64>,
        encoding: u32,
    ) -> Result<Row, LookupError> {
        match arch {
            Arch::X86_64 => {
                let start = self.image.headers.text_address.wrapping_add(function.start);
                x86_64_row(&OpcodeX86_64::parse(encoding), |at| {
                    let bytes = self.code(start.wrapping_add(u64::from(at)), 4);
                    Some(u32::from_le_bytes(bytes.try_into().ok()?))
                })
            }
            Arch::Aarch64 => arm64_row(&OpcodeArm64::parse(encoding)),
            _ => Err(bad("compact unwind info of an architecture it has none for")),
        }
    }

    /// Where the function holding `offset` starts: the last of
    /// `LC_FUNCTION_STARTS` at or before it, else its compact unwind
    /// entry's start (which may be an earlier function's, merged with it).
    fn function_start_of(&self, offset: u64, entry: Option<u64>) -> Option<u64> {
        let text = self.image.headers.text_address;
        let starts = &self.image.headers.function_starts;
        let address = text.wrapping_add(offset);
        let i = starts.partition_point(|&s| s <= address);
        match i.checked_sub(1) {
            Some(i) => Some(starts[i].wrapping_sub(text)),
            None => entry,
        }
    }

    /// The row of a pc (not a return address) in a function's prologue or
    /// epilogue, read from its instructions (see `crate::arch::edges`).
    fn edge_row(&self, arch: Arch, offset: u64, entry: Option<u64>) -> Option<Row> {
        let start = self.function_start_of(offset, entry)?;
        let into = usize::try_from(offset.checked_sub(start)?).ok()?;
        let text = self.image.headers.text_address;
        let code = self.code(text.wrapping_add(start), into.saturating_add(EPILOGUE_REACH));
        let (edge, sp, ra) = match arch {
            Arch::X86_64 => (crate::arch::edges::x86_64(code, into)?, RSP, RIP),
            Arch::Aarch64 => (crate::arch::edges::aarch64(code, into)?, SP, X30),
            _ => return None,
        };
        let mut row = Row::new(CfaRule::RegOffset { reg: sp, offset: edge.cfa }, ra, false);
        row.push(ra, edge.ra.map_or(RegRule::SameValue, RegRule::Offset));
        for (reg, at) in edge.saved {
            if usize::from(reg) < crate::arch::NUM_REGS && reg != ra && reg != sp {
                row.push(reg, RegRule::Offset(at));
            }
        }
        Some(row)
    }
}

/// How far past the pc an epilogue is read (arm64's longest: a dozen
/// reloads of pairs, then `ret`).
const EPILOGUE_REACH: usize = 128;

impl ForeignCfi for CompactUnwind {
    fn row(&self, arch: Arch, offset: u64, exact: bool) -> Result<(Row, Range<u64>), LookupError> {
        let function = self.function(offset)?;
        if exact {
            let entry = function.as_ref().map(|f| u64::from(f.start_address));
            if let Some(row) = self.edge_row(arch, offset, entry) {
                return Ok((row, offset..offset + 1));
            }
        }
        let Some(function) = function else { return self.dwarf_row(offset, exact) };
        let range = u64::from(function.start_address)..u64::from(function.end_address);
        let dwarf = match arch {
            Arch::X86_64 => {
                matches!(OpcodeX86_64::parse(function.opcode), OpcodeX86_64::Dwarf { .. })
            }
            _ => matches!(OpcodeArm64::parse(function.opcode), OpcodeArm64::Dwarf { .. }),
        };
        // (No encoding: the table says nothing of the function; its FDE may.)
        if dwarf || function.opcode & ENCODING_MODE_MASK == 0 {
            return self.dwarf_row(offset, exact);
        }
        let row = self.encoded_row(arch, &range, function.opcode)?;
        Ok((row, range))
    }

    /// By `LC_FUNCTION_STARTS` where the file has it, else the compact
    /// unwind table's entries (which merge neighbours of one encoding).
    fn function_start(&self, offset: u64) -> bool {
        let starts = &self.image.headers.function_starts;
        if !starts.is_empty() {
            let address = self.image.headers.text_address.wrapping_add(offset);
            return starts.binary_search(&address).is_ok();
        }
        matches!(self.function(offset), Ok(Some(f)) if u64::from(f.start_address) == offset)
    }

    /// Each function from its start to the next one's (the last to the end
    /// of its code segment), by `LC_FUNCTION_STARTS` where the file has it,
    /// else the compact unwind table's entries.
    fn functions(&self) -> Vec<Range<u64>> {
        let headers = &self.image.headers;
        if !headers.function_starts.is_empty() {
            let text = headers.text_address;
            let starts = &headers.function_starts;
            let ends = starts.iter().skip(1).copied().map(Some).chain([None]);
            return starts
                .iter()
                .zip(ends)
                .filter_map(|(&start, next)| {
                    let segment = headers.code().find(|c| c.contains(&start))?;
                    let end = next.unwrap_or(segment.end).min(segment.end);
                    (start < end).then(|| start.wrapping_sub(text)..end.wrapping_sub(text))
                })
                .collect();
        }
        let Some(table) = self.table() else { return Vec::new() };
        let mut functions = table.functions();
        let mut out = Vec::new();
        while let Ok(Some(f)) = functions.next() {
            if f.start_address < f.end_address {
                out.push(u64::from(f.start_address)..u64::from(f.end_address));
            }
        }
        out
    }
}

/// Whether the compact unwind table `data` can be read whole: every
/// second-level page parses, and each compressed entry's encoding index
/// is within the table's common encodings and its page's own, and its
/// address within 32 bits. (The crate indexes a page's encodings unchecked,
/// and adds addresses without a check: a damaged table would panic it.)
pub fn checked(data: &[u8]) -> Result<(), &'static str> {
    use macho_unwind_info::raw::consts::{PAGE_KIND_COMPRESSED, PAGE_KIND_REGULAR};
    use macho_unwind_info::raw::{
        CompactUnwindInfoHeader, CompressedFunctionEntry, CompressedPage, RegularPage,
    };
    let header = CompactUnwindInfoHeader::parse(data).map_err(|_| "no header")?;
    let global = header.global_opcodes(data).map_err(|_| "encodings outside the section")?.len();
    let pages = header.pages(data).map_err(|_| "pages outside the section")?;
    let Some((_sentinel, pages)) = pages.split_last() else { return Ok(()) };
    for page in pages {
        let offset = page.page_offset();
        match page.page_kind(data).map_err(|_| "a page outside the section")? {
            PAGE_KIND_REGULAR => {
                let regular = RegularPage::parse(data, offset.into()).map_err(|_| "a bad page")?;
                regular.functions(data, offset).map_err(|_| "a page's entries outside it")?;
            }
            PAGE_KIND_COMPRESSED => {
                let compressed =
                    CompressedPage::parse(data, offset.into()).map_err(|_| "a bad page")?;
                let entries = compressed
                    .functions(data, offset)
                    .map_err(|_| "a page's entries outside it")?;
                let local = compressed
                    .local_opcodes(data, offset)
                    .map_err(|_| "a page's encodings outside it")?
                    .len();
                for &entry in entries {
                    let entry = CompressedFunctionEntry::new(entry.into());
                    if usize::from(entry.opcode_index()) >= global + local {
                        return Err("an entry's encoding index past the encodings");
                    }
                    if page.first_address().checked_add(entry.relative_address()).is_none() {
                        return Err("an entry's address past 4 GiB");
                    }
                }
            }
            _ => return Err("a page of an unknown kind"),
        }
    }
    Ok(())
}

/// The bits of an encoding that say its kind (`UNWIND_*_MODE_MASK`): 0 is
/// no information.
const ENCODING_MODE_MASK: u32 = 0x0F00_0000;

/// x86_64's DWARF column of a register compact unwind names.
fn x86_64_column(reg: RegisterNameX86_64) -> u16 {
    match reg {
        RegisterNameX86_64::Rbx => 3,
        RegisterNameX86_64::R12 => 12,
        RegisterNameX86_64::R13 => 13,
        RegisterNameX86_64::R14 => 14,
        RegisterNameX86_64::R15 => 15,
        RegisterNameX86_64::Rbp => RBP,
    }
}

/// The row of an x86_64 function's body; `code_u32(at)`: the 32-bit word
/// `at` bytes into the function (a frameless-indirect frame's size).
fn x86_64_row(
    opcode: &OpcodeX86_64,
    code_u32: impl Fn(u8) -> Option<u32>,
) -> Result<Row, LookupError> {
    match *opcode {
        OpcodeX86_64::FrameBased { stack_offset_in_bytes, saved_regs } => {
            // CFA = rbp + 16: rbp saved at CFA − 16, the registers from
            // rbp − offset up, the last listed lowest.
            let mut row = Row::new(CfaRule::RegOffset { reg: RBP, offset: 16 }, RIP, false);
            row.push(RIP, RegRule::Offset(-8));
            row.push(RBP, RegRule::Offset(-16));
            let lowest = -16 - i64::from(stack_offset_in_bytes);
            for (i, reg) in saved_regs.iter().rev().enumerate() {
                if let Some(reg) = reg {
                    row.push(x86_64_column(*reg), RegRule::Offset(lowest + 8 * i as i64));
                }
            }
            Ok(row)
        }
        OpcodeX86_64::FramelessImmediate { stack_size_in_bytes, saved_regs } => {
            Ok(frameless_row(i64::from(stack_size_in_bytes), &saved_regs))
        }
        OpcodeX86_64::FramelessIndirect {
            immediate_offset_from_function_start,
            stack_adjust_in_bytes,
            saved_regs,
        } => {
            let sub = code_u32(immediate_offset_from_function_start)
                .ok_or(bad("a frameless-indirect size outside the function's code"))?;
            let size = i64::from(sub) + i64::from(stack_adjust_in_bytes);
            Ok(frameless_row(size, &saved_regs))
        }
        OpcodeX86_64::InvalidFrameless => Err(bad("a frameless encoding's registers undecodable")),
        OpcodeX86_64::Null | OpcodeX86_64::Dwarf { .. } => Err(LookupError::NoFde),
        OpcodeX86_64::UnrecognizedKind(_) => Err(bad("an encoding of an unknown kind")),
    }
}

/// An x86_64 frameless frame of `size` bytes (the return address included),
/// the registers pushed right below the return address, the first listed
/// lowest.
fn frameless_row(size: i64, saved: &[Option<RegisterNameX86_64>; 6]) -> Row {
    let mut row = Row::new(CfaRule::RegOffset { reg: RSP, offset: size }, RIP, false);
    row.push(RIP, RegRule::Offset(-8));
    let saved: Vec<RegisterNameX86_64> = saved.iter().flatten().copied().collect();
    let lowest = -8 - 8 * saved.len() as i64;
    for (i, reg) in saved.into_iter().enumerate() {
        row.push(x86_64_column(reg), RegRule::Offset(lowest + 8 * i as i64));
    }
    row
}

/// The row of an arm64 function's body.
fn arm64_row(opcode: &OpcodeArm64) -> Result<Row, LookupError> {
    match *opcode {
        OpcodeArm64::FrameBased {
            x19_and_x20_saved,
            x21_and_x22_saved,
            x23_and_x24_saved,
            x25_and_x26_saved,
            x27_and_x28_saved,
            ..
        } => {
            let mut row = Row::new(CfaRule::RegOffset { reg: X29, offset: 16 }, X30, false);
            row.push(X29, RegRule::Offset(-16));
            row.push(X30, RegRule::Offset(-8));
            let pairs = [
                (x19_and_x20_saved, 19),
                (x21_and_x22_saved, 21),
                (x23_and_x24_saved, 23),
                (x25_and_x26_saved, 25),
                (x27_and_x28_saved, 27),
            ];
            let mut at = -16;
            for (saved, first) in pairs {
                if saved {
                    row.push(first, RegRule::Offset(at - 8));
                    row.push(first + 1, RegRule::Offset(at - 16));
                    at -= 16;
                }
            }
            // (d8-d15 are saved below them: no tracked register.)
            Ok(row)
        }
        OpcodeArm64::Frameless { stack_size_in_bytes } => Ok(leaf(i64::from(stack_size_in_bytes))),
        OpcodeArm64::Null | OpcodeArm64::Dwarf { .. } => Err(LookupError::NoFde),
        OpcodeArm64::UnrecognizedKind(_) => Err(bad("an encoding of an unknown kind")),
    }
}

/// An arm64 frame of `size` bytes whose return address is still in lr.
fn leaf(size: i64) -> Row {
    let mut row = Row::new(CfaRule::RegOffset { reg: SP, offset: size }, X30, false);
    row.push(X30, RegRule::SameValue);
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(row: &Row) -> Vec<(u16, RegRule)> {
        let mut rules = row.rules().to_vec();
        rules.sort_by_key(|r| r.0);
        rules
    }

    /// An `__unwind_info` of one second-level page of `kind` (2: regular,
    /// 3: compressed) for functions at 0x1000 (RBP frame) and 0x1800
    /// (frameless, 16 bytes), ending at 0x2000; a compressed page's second
    /// entry takes encoding index `second`.
    fn table(kind: u32, second: u32) -> Vec<u8> {
        let le = |v: u32| v.to_le_bytes();
        let mut t = Vec::new();
        // Header: version, common encodings (at 28, 2), personalities (none), index (at 36, 2).
        for v in [1, 28, 2, 36, 0, 36, 2] {
            t.extend(le(v));
        }
        t.extend(le(0x0100_0000));
        t.extend(le(0x0202_0000));
        let page = 36 + 2 * 12;
        for (first, at) in [(0x1000, page), (0x2000, 0)] {
            t.extend(le(first));
            t.extend(le(at));
            t.extend(le(0));
        }
        match kind {
            2 => {
                t.extend(le(2));
                t.extend(8u16.to_le_bytes());
                t.extend(2u16.to_le_bytes());
                for (address, encoding) in [(0x1000, 0x0100_0000), (0x1800, 0x0202_0000)] {
                    t.extend(le(address));
                    t.extend(le(encoding));
                }
            }
            _ => {
                t.extend(le(3));
                for v in [12u16, 2, 0, 0] {
                    t.extend(v.to_le_bytes());
                }
                t.extend(le(0));
                t.extend(le(0x800 | second << 24));
            }
        }
        t
    }

    #[test]
    fn regular_and_compressed_pages_are_read_and_damage_is_refused() {
        for kind in [2, 3] {
            let data = table(kind, 1);
            assert_eq!(checked(&data), Ok(()));
            let info = macho_unwind_info::UnwindInfo::parse(&data).unwrap();
            let f = info.lookup(0x1804).unwrap().unwrap();
            assert_eq!((f.start_address, f.end_address, f.opcode), (0x1800, 0x2000, 0x0202_0000));
            let row = x86_64_row(&OpcodeX86_64::parse(f.opcode), |_| None).unwrap();
            assert_eq!(row.cfa, CfaRule::RegOffset { reg: RSP, offset: 16 });
        }
        // An encoding index past the common encodings and the page's own (none).
        assert!(checked(&table(3, 7)).is_err());
        // Cut short: a page outside the section.
        assert!(checked(&table(2, 0)[..64]).is_err());
        assert!(checked(b"").is_err());
    }

    #[test]
    fn an_rbp_frame_saves_its_registers_from_the_offset_up() {
        // Offset 2 words, rbx (1) in the lowest 3 bits, r12 (2) in the next: rbx at rbp - 16,
        // r12 at rbp - 8, as libunwind's stepWithCompactEncodingRBPFrame reads them.
        let encoding = 0x0100_0000 | (2 << 16) | (2 << 3) | 1;
        let row = x86_64_row(&OpcodeX86_64::parse(encoding), |_| None).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: RBP, offset: 16 });
        assert_eq!(
            offsets(&row),
            vec![
                (3, RegRule::Offset(-32)),
                (RBP, RegRule::Offset(-16)),
                (12, RegRule::Offset(-24)),
                (RIP, RegRule::Offset(-8)),
            ]
        );
    }

    #[test]
    fn a_frameless_frame_has_its_pushes_under_the_return_address() {
        // 48 bytes, two registers pushed (permutation of count 2: rbx then r12 => first listed
        // lowest: the last pushed).
        let count = 2;
        // Registers rbx (1) and r12 (2): compressed indexes 0 then 0 => permutation 0.
        let encoding = 0x0200_0000 | (6 << 16) | (count << 10);
        let row = x86_64_row(&OpcodeX86_64::parse(encoding), |_| None).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: RSP, offset: 48 });
        assert_eq!(
            offsets(&row),
            vec![(3, RegRule::Offset(-24)), (12, RegRule::Offset(-16)), (RIP, RegRule::Offset(-8))]
        );
    }

    #[test]
    fn an_indirect_frame_reads_its_size_from_the_sub_instruction() {
        // Size at byte 7 of the function, plus 3 words of pushes and return address.
        let encoding = 0x0300_0000 | (7 << 16) | (3 << 13);
        let row = x86_64_row(&OpcodeX86_64::parse(encoding), |at| (at == 7).then_some(0x1000));
        assert_eq!(row.unwrap().cfa, CfaRule::RegOffset { reg: RSP, offset: 0x1000 + 24 });
        let missing = x86_64_row(&OpcodeX86_64::parse(encoding), |_| None);
        assert!(matches!(missing, Err(LookupError::Compact(_))));
    }

    #[test]
    fn an_arm64_frame_keeps_its_pairs_below_the_record() {
        let encoding = 0x0400_0000 | 0b101; // x19/x20 and x23/x24
        let row = arm64_row(&OpcodeArm64::parse(encoding)).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: X29, offset: 16 });
        assert_eq!(
            offsets(&row),
            vec![
                (19, RegRule::Offset(-24)),
                (20, RegRule::Offset(-32)),
                (23, RegRule::Offset(-40)),
                (24, RegRule::Offset(-48)),
                (X29, RegRule::Offset(-16)),
                (X30, RegRule::Offset(-8)),
            ]
        );
        let leaf = arm64_row(&OpcodeArm64::parse(0x0200_0000 | (3 << 12))).unwrap();
        assert_eq!(leaf.cfa, CfaRule::RegOffset { reg: SP, offset: 48 });
    }
}
