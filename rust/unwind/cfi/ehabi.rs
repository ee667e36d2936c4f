//! ARM's exception-handling ABI tables ("EHABI": `.ARM.exidx`, `.ARM.extab`;
//! ARM IHI 0038, §§5-10) as rows of the same rules DWARF CFI gives, for
//! 32-bit ARM code without `.eh_frame` (C code, Debian's armhf libraries).
//!
//! The index is a table of pairs of words sorted by function: a prel31
//! offset to the function's start, then `EXIDX_CANTUNWIND` (1), or an
//! inline compact entry (bit 31 set: personality routine 0 and three
//! opcode bytes), or a prel31 offset to the function's entry in `.ARM.extab`
//! (compact: personality 0, or 1 and 2 with more words of opcodes; generic:
//! a personality routine's address, then the opcodes in personality 1's
//! layout, as GCC's `__gxx_personality_v0` reads them). An entry covers its
//! function up to the next entry's start.
//!
//! The opcodes undo the prologue: they move a virtual stack pointer (vsp,
//! first the frame's sp) and pop registers from it, in order; `finish`
//! ends them, and the caller's pc is then lr unless pc was popped. They are
//! turned into a row: the CFA is where vsp ends, each popped register saved
//! at its offset from there. They hold in the body of a function, not in its
//! prologue or epilogue: at a function's first instruction (frame 0 only),
//! nothing is pushed yet and the row says so. Opcodes that pop pc itself
//! restore a whole context (glibc's sigreturn restorers, a `nop` before each
//! so that a handler's return address less one finds them): their row is a
//! signal frame's. `EXIDX_CANTUNWIND` is read as
//! gdb reads it for a pc (no rules) and as the end of a stack for a return
//! address into the function it is for (see [`Tables::row`]).

use std::ops::Range;

use super::rules::{CfaRule, RegRule, Row};
use super::{LookupError, UnwindInfo};
use crate::arch::Arch;
use crate::source::bytes::le_u32 as word;

const SP: u16 = 13;
const LR: u16 = 14;
const PC: u16 = 15;
const CANTUNWIND: u32 = 1;
/// Opcodes are read from at most this many words (personality 1 and 2
/// count theirs in a byte: 255 words at most).
const MAX_WORDS: usize = 256;

/// The address a prel31 word at `place` points to.
fn prel31(place: u64, value: u32) -> u64 {
    let offset = ((value << 1) as i32 >> 1) as i64;
    place.wrapping_add(offset as u64) & 0xffff_ffff
}

fn bad(why: &'static str) -> LookupError {
    LookupError::Ehabi(why)
}

/// A module's EHABI tables: the index's and `.ARM.extab`'s bytes, and their
/// ELF addresses.
#[derive(Clone, Copy)]
pub struct Tables<'a> {
    pub exidx: &'a [u8],
    pub exidx_address: u64,
    pub extab: &'a [u8],
    pub extab_address: u64,
}

impl Tables<'_> {
    fn entries(&self) -> usize {
        self.exidx.len() / 8
    }

    /// The start of the function entry `i` is for.
    fn start(&self, i: usize) -> Option<u64> {
        let place = self.exidx_address.wrapping_add(8 * i as u64);
        Some(prel31(place, word(self.exidx, 8 * i)?))
    }

    /// The entry covering ELF address `address` and the range it covers
    /// (to the next entry's start; the last entry's to the end of the
    /// address space).
    fn entry(&self, address: u64) -> Result<(usize, Range<u64>), LookupError> {
        if address > 0xffff_ffff {
            return Err(LookupError::NoFde); // outside a 32-bit address space
        }
        let n = self.entries();
        // The index is sorted by start: the last entry starting at or before `address`.
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.start(mid) {
                Some(start) if start <= address => lo = mid + 1,
                _ => hi = mid,
            }
        }
        let i = lo.checked_sub(1).ok_or(LookupError::NoFde)?;
        let start = self.start(i).ok_or(LookupError::NoFde)?;
        let end = (i + 1 < n).then(|| self.start(i + 1)).flatten().unwrap_or(0x1_0000_0000);
        if end <= start {
            return Err(bad("index not sorted"));
        }
        Ok((i, start..end))
    }

    /// The extab bytes from ELF address `address` on.
    fn extab_at(&self, address: u64) -> Option<&[u8]> {
        let offset = usize::try_from(address.checked_sub(self.extab_address)?).ok()?;
        self.extab.get(offset..)
    }

    /// The opcodes of entry `i` (None: `EXIDX_CANTUNWIND`).
    fn opcodes(&self, i: usize) -> Result<Option<Vec<u8>>, LookupError> {
        let data = word(self.exidx, 8 * i + 4).ok_or(LookupError::NoFde)?;
        if data == CANTUNWIND {
            return Ok(None);
        }
        if data & 0x8000_0000 != 0 {
            // Inline: personality 0, three opcodes.
            if (data >> 24) & 0x0f != 0 {
                return Err(bad("inline entry of a personality other than 0"));
            }
            return Ok(Some(data.to_be_bytes()[1..].to_vec()));
        }
        let place = self.exidx_address.wrapping_add(8 * i as u64 + 4);
        let extab = self.extab_at(prel31(place, data)).ok_or(bad("entry outside .ARM.extab"))?;
        let first = word(extab, 0).ok_or(bad("entry cut short"))?;
        // How many more words of opcodes, the opcodes of the first word, and
        // where the others start.
        let (count, head, words_at) = if first & 0x8000_0000 != 0 {
            let bytes = first.to_be_bytes();
            match bytes[0] & 0x0f {
                0 => return Ok(Some(bytes[1..].to_vec())),
                1 | 2 => (usize::from(bytes[1]), bytes[2..].to_vec(), 4),
                _ => return Err(bad("unknown personality routine index")),
            }
        } else {
            // A generic personality routine (its address first): GCC's layout.
            let bytes = word(extab, 4).ok_or(bad("entry cut short"))?.to_be_bytes();
            (usize::from(bytes[0]), bytes[1..].to_vec(), 8)
        };
        let mut out = head;
        for k in 0..count.min(MAX_WORDS) {
            let w = word(extab, words_at + 4 * k).ok_or(bad("entry cut short"))?;
            out.extend_from_slice(&w.to_be_bytes());
        }
        Ok(Some(out))
    }

    /// The rules at ELF address `address` and the addresses they hold over.
    /// `exact`: `address` is a pc (frame 0's), not a return address less
    /// one; at the first instruction of a function nothing is pushed yet.
    /// `own(start)`: whether `address` may lie in the function at `start`
    /// (false where the module's symbols show it in a later one).
    pub fn row(
        &self,
        address: u64,
        exact: bool,
        own: impl FnOnce(u64) -> bool,
    ) -> Result<(Row, Range<u64>), LookupError> {
        let (i, range) = self.entry(address)?;
        let Some(opcodes) = self.opcodes(i)? else {
            // EXIDX_CANTUNWIND: code that cannot be unwound through. The
            // compiler marks hand-written code so (glibc's assembly), and the
            // linker code without tables: it ends each section of code
            // without them with such an entry and merges it with the one
            // before, so that one entry may cover functions after its own
            // (ld puts the C runtime's `_start` before the program's functions
            // built without tables). As frame 0 (a pc) it is most often a
            // leaf, `strlen`, whose return address is still in lr: no rules,
            // so that the walk takes it as it takes any leaf without CFI. A
            // return address into it is a call from code that does not
            // return, the end of a stack, as gdb takes it: `_start`'s call of
            // `__libc_start_main`, `start_thread`'s of a thread's function.
            // Where the module's symbols show the address in a function after
            // the entry's start, the entry says nothing of it: no rules.
            if exact || !own(range.start) {
                return Err(LookupError::NoFde);
            }
            let mut row = Row::new(CfaRule::RegOffset { reg: SP, offset: 0 }, LR, false);
            row.push(LR, RegRule::Undefined);
            return Ok((row, range));
        };
        if exact && address == range.start {
            let row = Row::new(CfaRule::RegOffset { reg: SP, offset: 0 }, LR, false);
            return Ok((row, range.start..range.start + 1));
        }
        Ok((execute(&opcodes)?, range))
    }
}

/// The EHABI tables of a module's file, where DWARF CFI has no FDE.
impl UnwindInfo {
    /// 32-bit ARM's EHABI tables, where the module is ARM code and has an
    /// index.
    pub(super) fn ehabi(&self) -> Option<Tables<'_>> {
        if self.arch != Arch::Arm {
            return None;
        }
        let exidx = self.sections.arm_exidx?;
        let extab = self.sections.arm_extab;
        Some(Tables {
            exidx: self.section_bytes(exidx),
            exidx_address: exidx.address,
            extab: extab.map_or(&[][..], |s| self.section_bytes(s)),
            extab_address: extab.map_or(0, |s| s.address),
        })
    }

    /// The rules at `address` from DWARF CFI (`with_row`); where no FDE
    /// covers it, or its FDE is damaged, from the `.sframe` table; for ARM
    /// code no FDE covers, from the EHABI tables.
    pub(super) fn dwarf_or_ehabi<T>(
        &self,
        address: u64,
        exact: bool,
        dwarf: Result<(T, Range<u64>), LookupError>,
        from_row: impl FnOnce(Row) -> T,
    ) -> Result<(T, Range<u64>), LookupError> {
        let sframe = match dwarf {
            Err(LookupError::NoFde | LookupError::Cfi(_)) => self.sframe(),
            _ => None,
        };
        if let Some(table) = sframe {
            return match table.row(address) {
                Ok((row, range)) => Ok((from_row(row), range)),
                // No function there: the DWARF answer stands.
                Err(LookupError::NoFde) => dwarf,
                Err(e) => Err(e),
            };
        }
        match dwarf {
            Err(LookupError::NoFde) => match self.ehabi() {
                Some(tables) => {
                    let (row, range) =
                        tables.row(address, exact, |start| self.same_function(start, address))?;
                    Ok((from_row(row), range))
                }
                None => Err(LookupError::NoFde),
            },
            dwarf => dwarf,
        }
    }

    /// Whether ELF address `address` may lie in the function at `start`:
    /// false where the file's symbols (see [`UnwindInfo::code_map`]) put it
    /// in a function that starts after `start`, and, in a file without them,
    /// where `start` is the entry point and `address` beyond the extent
    /// [`UnwindInfo::entry_function`] gives `_start`.
    fn same_function(&self, start: u64, address: u64) -> bool {
        if let Some(function) = self.code_map().function(address) {
            return function.start <= start;
        }
        // (A Thumb entry point has bit 0 set.)
        if self.sections.entry.is_some_and(|entry| entry & !1 == start) {
            return self.entry_function().is_none_or(|f| f.range.contains(&address));
        }
        true
    }
}

/// Where the virtual stack pointer is: a register of the frame (sp, or the
/// one an opcode set it from) plus an offset.
#[derive(Clone, Copy)]
struct Vsp {
    base: u16,
    offset: i64,
}

/// The row the opcodes make.
fn execute(opcodes: &[u8]) -> Result<Row, LookupError> {
    let mut vsp = Vsp { base: SP, offset: 0 };
    // Each popped register and where it was: (column, base, offset).
    let mut popped: Vec<(u16, u16, i64)> = Vec::new();
    let mut sp_popped: Option<(u16, i64)> = None;
    let mut bytes = opcodes.iter().copied();
    // Registers `first` + each bit of `regs`, lowest first.
    fn pop(vsp: &mut Vsp, popped: &mut Vec<(u16, u16, i64)>, regs: u16, first: u16) {
        for bit in 0..16 {
            if regs & (1 << bit) != 0 {
                popped.push((first + bit, vsp.base, vsp.offset));
                vsp.offset += 4;
            }
        }
    }
    while let Some(op) = bytes.next() {
        if sp_popped.is_some() && op != 0xb0 {
            return Err(bad("opcodes after sp was popped"));
        }
        match op {
            0x00..=0x3f => vsp.offset += ((i64::from(op) & 0x3f) << 2) + 4,
            0x40..=0x7f => vsp.offset -= ((i64::from(op) & 0x3f) << 2) + 4,
            0x80..=0x8f => {
                let low = bytes.next().ok_or(bad("opcode cut short"))?;
                let mask = (u16::from(op & 0x0f) << 8) | u16::from(low);
                if mask == 0 {
                    return Err(bad("refuse to unwind"));
                }
                // r4-r15 by mask, lowest first.
                let before = popped.len();
                pop(&mut vsp, &mut popped, mask, 4);
                if let Some(&(_, base, offset)) = popped[before..].iter().find(|p| p.0 == SP) {
                    sp_popped = Some((base, offset));
                }
            }
            0x90..=0x9f => {
                let reg = u16::from(op & 0x0f);
                if reg == 13 || reg == 15 {
                    return Err(bad("reserved opcode"));
                }
                if popped.iter().any(|p| p.0 == reg) {
                    return Err(bad("vsp set from a register popped before"));
                }
                vsp = Vsp { base: reg, offset: 0 };
            }
            0xa0..=0xaf => {
                let regs = (1u16 << ((op & 7) + 1)) - 1; // r4..r[4+nnn]
                pop(&mut vsp, &mut popped, regs, 4);
                if op & 8 != 0 {
                    pop(&mut vsp, &mut popped, 1, LR);
                }
            }
            0xb0 => break,
            0xb1 => {
                let mask = bytes.next().ok_or(bad("opcode cut short"))?;
                if mask == 0 || mask & 0xf0 != 0 {
                    return Err(bad("spare opcode"));
                }
                pop(&mut vsp, &mut popped, u16::from(mask), 0);
            }
            0xb2 => {
                let mut value = 0u64;
                let mut shift = 0;
                loop {
                    let b = bytes.next().ok_or(bad("opcode cut short"))?;
                    if shift > 28 {
                        return Err(bad("vsp adjustment too large"));
                    }
                    value |= u64::from(b & 0x7f) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
                vsp.offset += 0x204 + ((value as i64) << 2);
            }
            0xb3 => {
                // VFP d[s]..d[s+c] saved by FSTMFDX: 8 bytes each, and a word.
                let sc = bytes.next().ok_or(bad("opcode cut short"))?;
                vsp.offset += 8 * (i64::from(sc & 0x0f) + 1) + 4;
            }
            0xb8..=0xbf => vsp.offset += 8 * (i64::from(op & 7) + 1) + 4,
            0xc0..=0xc5 => vsp.offset += 8 * (i64::from(op & 7) + 1),
            0xc6 | 0xc8 | 0xc9 => {
                let sc = bytes.next().ok_or(bad("opcode cut short"))?;
                vsp.offset += 8 * (i64::from(sc & 0x0f) + 1);
            }
            0xc7 => {
                let mask = bytes.next().ok_or(bad("opcode cut short"))?;
                if mask == 0 || mask & 0xf0 != 0 {
                    return Err(bad("spare opcode"));
                }
                vsp.offset += 4 * i64::from(mask.count_ones());
            }
            0xd0..=0xd7 => vsp.offset += 8 * (i64::from(op & 7) + 1),
            _ => return Err(bad("spare opcode")),
        }
        if vsp.offset.abs() > 1 << 24 {
            return Err(bad("vsp adjustment too large"));
        }
    }
    let cfa = match sp_popped {
        Some((base, offset)) => CfaRule::DerefRegister {
            reg: base,
            offset: i32::try_from(offset).map_err(|_| bad("offset too large"))?,
        },
        None => CfaRule::RegOffset { reg: vsp.base, offset: vsp.offset },
    };
    // Opcodes that pop pc itself restore a whole context (glibc's sigreturn
    // restorers: `.pad` to the kernel's sigcontext, then r0-r15): the caller's
    // pc is where a signal interrupted it, not a return address.
    let ra = if popped.iter().any(|p| p.0 == PC) { PC } else { LR };
    let mut row = Row::new(cfa, ra, ra == PC);
    for (reg, base, offset) in popped {
        if reg == SP {
            continue;
        }
        let rule = match sp_popped {
            None if base == vsp.base => RegRule::Offset(offset - vsp.offset),
            _ => RegRule::AtRegister {
                reg: base,
                offset: i32::try_from(offset).map_err(|_| bad("offset too large"))?,
            },
        };
        if row.rule(reg).is_some() {
            return Err(bad("a register popped twice"));
        }
        row.push(reg, rule);
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(row: &Row) -> Vec<(u16, RegRule)> {
        row.rules().to_vec()
    }

    #[test]
    fn opcodes_become_rows() {
        // `push {r4, r5, r6, lr}` (readelf: "pop {r4, r5, r6, r14}; finish").
        let row = execute(&[0xaa, 0xb0, 0xb0]).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: SP, offset: 16 });
        assert_eq!(row.ra, LR);
        let saved = |r| RegRule::Offset(r);
        assert_eq!(
            rules(&row),
            [(4, saved(-16)), (5, saved(-12)), (6, saved(-8)), (14, saved(-4))]
        );
        // libc's `vsp = vsp + 12; pop {r4-r11, r14}`.
        let row = execute(&[0x02, 0xaf, 0xb0]).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: SP, offset: 12 + 36 });
        assert_eq!(row.rule(4), Some(RegRule::Offset(-36)));
        assert_eq!(row.rule(14), Some(RegRule::Offset(-4)));
        // A Thumb frame pointer: `vsp = r7; vsp = vsp + 8; pop {r7, r14}` (0x84 0x08).
        let row = execute(&[0x97, 0x01, 0x84, 0x08]).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: 7, offset: 16 });
        assert_eq!(rules(&row), [(7, RegRule::Offset(-8)), (14, RegRule::Offset(-4))]);
        // A leaf: no opcodes but finish; lr is the return address (its default).
        let row = execute(&[0xb0, 0xb0, 0xb0]).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: SP, offset: 0 });
        assert!(row.rules().is_empty());
        // pc popped (0x88 0x00: bit 11 of r4..r15): the return address is that slot.
        let row = execute(&[0x88, 0x00]).unwrap();
        assert_eq!((row.ra, rules(&row)), (PC, vec![(PC, RegRule::Offset(-4))]));
        // glibc's __default_sa_restorer: vsp + 32 (to the sigcontext's r0), r0-r3, r4-r15. A
        // whole context: the caller was interrupted (a signal frame), sp and pc from memory.
        let row = execute(&[0x07, 0xb1, 0x0f, 0x8f, 0xff, 0xb0]).unwrap();
        assert!(row.signal_frame && row.ra == PC);
        assert_eq!(row.cfa, CfaRule::DerefRegister { reg: SP, offset: 32 + 13 * 4 });
        assert_eq!(row.rule(0), Some(RegRule::AtRegister { reg: SP, offset: 32 }));
        assert_eq!(row.rule(PC), Some(RegRule::AtRegister { reg: SP, offset: 32 + 15 * 4 }));
        assert!(!execute(&[0xaa, 0xb0]).unwrap().signal_frame);
        // `vpop {d8}` (0xd0), then vsp += 0x204 + (0 << 2) (0xb2, uleb128 0).
        let row = execute(&[0xd0, 0xb2, 0x00]).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: SP, offset: 8 + 0x204 });
        // pop {r12} (bit 8), then pop {r13} (bit 9): the CFA is the word sp was popped from.
        let row = execute(&[0x81, 0x00]).unwrap();
        assert_eq!(rules(&row), [(12, RegRule::Offset(-4))]);
        let row = execute(&[0x82, 0x00]).unwrap();
        assert_eq!(row.cfa, CfaRule::DerefRegister { reg: SP, offset: 0 });
    }

    #[test]
    fn bad_opcodes_are_errors() {
        for ops in [
            &[0x80, 0x00][..], // refuse to unwind
            &[0x9d],           // reserved
            &[0xb1, 0x00],     // spare
            &[0xb4],           // spare
            &[0xff],           // spare
            &[0x84],           // cut short
            &[0xb2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
            &[0x82, 0x00, 0x01], // an opcode after sp was popped
            &[0xa8, 0x94],       // vsp = r4 after r4 was popped
        ] {
            assert!(matches!(execute(ops), Err(LookupError::Ehabi(_))), "{ops:x?}");
        }
    }

    /// An index of `entries` (function start, data word) at address 0x1000,
    /// with an empty extab at 0x2000.
    fn tables<'a>(index: &'a mut Vec<u8>, entries: &[(u64, u32)]) -> Tables<'a> {
        for (i, &(start, data)) in entries.iter().enumerate() {
            let place = 0x1000 + 8 * i as u64;
            index.extend_from_slice(
                &((start.wrapping_sub(place) as u32) & 0x7fff_ffff).to_le_bytes(),
            );
            index.extend_from_slice(&data.to_le_bytes());
        }
        Tables { exidx: index, exidx_address: 0x1000, extab: &[], extab_address: 0x2000 }
    }

    #[test]
    fn the_index_covers_each_function_to_the_next() {
        let mut index = Vec::new();
        let t =
            tables(&mut index, &[(0x400, CANTUNWIND), (0x500, 0x80aa_b0b0), (0x600, 0x8000_b0b0)]);
        assert!(matches!(t.row(0x3ff, false, |_| true), Err(LookupError::NoFde)));
        // Cannot be unwound: the end of the stack for a return address, no rules for a pc.
        let (row, range) = t.row(0x440, false, |_| true).unwrap();
        assert_eq!((range, row.rule(LR)), (0x400..0x500, Some(RegRule::Undefined)));
        assert!(matches!(t.row(0x440, true, |_| true), Err(LookupError::NoFde)));
        // Unless the module's symbols show another function there.
        assert!(matches!(t.row(0x440, false, |start| start == 0x440), Err(LookupError::NoFde)));
        let (row, range) = t.row(0x520, false, |_| true).unwrap();
        assert_eq!((range, row.cfa), (0x500..0x600, CfaRule::RegOffset { reg: SP, offset: 16 }));
        // Frame 0 at a function's first instruction: nothing pushed yet.
        let (row, _) = t.row(0x500, true, |_| true).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: SP, offset: 0 });
        assert!(row.rules().is_empty());
        let (row, range) = t.row(0x7000_0000, false, |_| true).unwrap();
        assert_eq!((range.start, row.rules().len()), (0x600, 0));
        // Past 32 bits (found by fuzzing: the last entry's range ends at 2^32).
        assert!(matches!(t.row(u64::MAX, false, |_| true), Err(LookupError::NoFde)));
        // An offset into an extab that is not there.
        let mut index = Vec::new();
        let t = tables(&mut index, &[(0x400, 0x0000_0f00)]);
        assert!(matches!(t.row(0x400, false, |_| true), Err(LookupError::Ehabi(_))));
    }

    #[test]
    fn extab_entries_of_each_personality() {
        // Entry 0 -> extab+0: personality 1, one more word:
        //   0x81 0x01 | 0xaa 0xb0 (count 1) then b0 b0 b0 b0.
        // Entry 1 -> extab+8: a generic personality's address, then GCC's layout:
        //   count 0, opcodes 0x02 0xaf 0xb0.
        let mut extab = Vec::new();
        extab.extend_from_slice(&0x8101_aab0u32.to_le_bytes());
        extab.extend_from_slice(&0xb0b0_b0b0u32.to_le_bytes());
        extab.extend_from_slice(&0x0000_1234u32.to_le_bytes());
        extab.extend_from_slice(&0x0002_afb0u32.to_le_bytes());
        let mut index = Vec::new();
        // prel31 from the data word's place (0x1004, 0x100c) to 0x2000 and 0x2008.
        let t = tables(&mut index, &[(0x400, 0x2000 - 0x1004), (0x500, 0x2008 - 0x100c)]);
        let t = Tables { extab: &extab, ..t };
        let (row, _) = t.row(0x410, false, |_| true).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: SP, offset: 16 });
        let (row, _) = t.row(0x510, false, |_| true).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: SP, offset: 12 + 36 });
    }
}
