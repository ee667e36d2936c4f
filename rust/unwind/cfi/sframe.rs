//! The Simple Frame format (`.sframe`, GNU binutils' `as --gsframe`; the
//! kernel's user-space unwinder and glibc's backtrace read it): for each
//! function, rows that say where the CFA is (sp or fp plus an offset) and
//! where the return address and the frame pointer are saved (offsets from
//! the CFA), turned into the rules DWARF CFI gives.
//!
//! Versions 1 (binutils 2.40), 2 (2.41–2.45) and 3 (2.46) share a 28-byte
//! header (magic 0xdee2, version, flags, ABI, the fixed FP and RA offsets,
//! the auxiliary header's length, the counts, and the offsets of the
//! function descriptors and the rows from the header's end, auxiliary header
//! included). They differ in the function descriptor:
//! - v1: 17 bytes, packed: start (i32), size (u32), first row's offset
//!   (u32), row count (u32), info (u8);
//! - v2: 20 bytes: v1's, then the repeat block's size (u8) and padding;
//! - v3: a 16-byte index entry, start (i64), size (u32), the offset of the
//!   function's attributes in the row sub-section (u32); there, 5 bytes:
//!   row count (u16), info (u8), info2 (u8: the FDE type, default or
//!   flexible), repeat block size (u8); its rows right after them.
//!
//! A start is the distance from the section's first byte to the function,
//! or, with `SFRAME_F_FDE_FUNC_START_PCREL` (v2's errata, every v3 table
//! `as` writes), from the start field itself. The info byte: the row
//! type (the width of a row's start: 1, 2 or 4 bytes), the PC type (rows
//! by increasing pc, or by pc modulo the repeat block, as for PLT entries),
//! aarch64's pointer-authentication key, and in v3 a signal frame.
//!
//! A row: its start (from the function's start), an info byte (the CFA's
//! base, fp 0 or sp 1; the count and width of the data words; aarch64's
//! mangled return address), then the words: the CFA's offset; on aarch64
//! the return address's offset and then the frame pointer's; on x86_64 the
//! frame pointer's, the return address being at a fixed offset the header
//! gives (CFA − 8). A row of no words has no return address: the outermost
//! frame. A v3 flexible FDE's words come in pairs, a control word (register
//! number << 3, dereference << 1, register-based) and an offset, for the
//! CFA, the return address (0: the header's fixed rule) and the frame
//! pointer (as x86_64's DRAP prologues need: CFA = *(rbp − 8)).
//!
//! Version 1 has no repeat block size: its only masked functions are the
//! linkers' PLT sections, whose entries are 16 bytes on both ABIs.
//!
//! The reader is written here rather than taken from the `simple-frame-rs`
//! crate, whose masked lookup returns a PLT entry's first row at every pc
//! (it stops at the first row starting at or below the pc) and which
//! allocates for every row read; everything is read checked against the
//! section, as tables come from any file.

use std::ops::Range;

use super::rules::{CfaRule, RegRule, Row};
use super::LookupError;
use crate::arch::Arch;
use crate::source::bytes::{le_u16 as u16_at, le_u32 as u32_at, le_u64};

const MAGIC: u16 = 0xdee2;
const HEADER: usize = 28;
const F_FDE_SORTED: u8 = 0x1;
const F_FUNC_START_PCREL: u8 = 0x4;
const ABI_AARCH64_LE: u8 = 2;
const ABI_AMD64_LE: u8 = 3;
/// Version 1's PLT entries (see the module's documentation).
const V1_REPEAT: u64 = 16;

fn bad(why: &'static str) -> LookupError {
    LookupError::SFrame(why)
}

/// A module's `.sframe` section, its header read and its sub-sections
/// checked to lie inside it.
#[derive(Clone, Copy, Debug)]
pub struct SFrame<'a> {
    bytes: &'a [u8],
    /// The section's ELF address.
    address: u64,
    pub version: u8,
    pub flags: u8,
    pub arch: Arch,
    fixed_fp: i8,
    fixed_ra: i8,
    functions: usize,
    /// Where the function descriptors and the rows start, and the rows' end
    /// (offsets into the section).
    fde_start: usize,
    fre_start: usize,
    fre_end: usize,
}

/// How a function's rows are matched to a pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcType {
    /// Each row holds from its start to the next row's.
    Increasing,
    /// Each row holds at the same place in every block of this many bytes
    /// (PLT entries).
    Mask(u64),
}

/// A function descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its ELF address range.
    pub start: u64,
    pub end: u64,
    pub pc_type: PcType,
    /// A v3 flexible FDE: its rows' words are control words and offsets.
    pub flexible: bool,
    /// A v3 signal frame (its rows restore an interrupted context).
    pub signal: bool,
    /// aarch64's key B signs the return address (else key A).
    pub pauth_key_b: bool,
    rows: u32,
    /// The width of a row's start (1, 2 or 4 bytes).
    start_width: u8,
    /// The offset of its first row in the section.
    first_row: usize,
}

/// Where a register's value comes from in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Not said: the register keeps its value (the frame pointer), or is
    /// still in its register (aarch64's return address in lr).
    Unchanged,
    /// Saved at the CFA plus this offset.
    AtCfa(i32),
    /// A flexible FDE's other rules: the value is `register + offset`,
    /// or the word there (`deref`).
    Register { reg: u16, offset: i32, deref: bool },
    /// Its value is the CFA plus this offset.
    CfaPlus(i32),
}

impl Function {
    pub fn contains(&self, pc: u64) -> bool {
        self.start <= pc && pc < self.end
    }
}

/// One row: from `start` (an ELF address; for a masked function, the
/// offset into its repeat block) on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub start: u64,
    /// The CFA: `register + offset`, or the word there (`deref`, a
    /// flexible FDE's).
    pub cfa_reg: u16,
    pub cfa_offset: i32,
    pub cfa_deref: bool,
    /// None: the return address is undefined (the outermost frame).
    pub ra: Option<Place>,
    pub fp: Place,
    /// aarch64: the saved return address is signed.
    pub mangled_ra: bool,
}

impl<'a> SFrame<'a> {
    /// The table in `bytes`, a section at ELF address `address`, for code of
    /// `arch`; why it cannot be read (a damaged or foreign header, another
    /// ABI's table, sub-sections outside the section).
    pub fn parse(bytes: &'a [u8], address: u64, arch: Arch) -> Result<SFrame<'a>, &'static str> {
        if bytes.len() < HEADER {
            return Err("section shorter than its header");
        }
        match u16_at(bytes, 0) {
            Some(MAGIC) => {}
            Some(m) if m.swap_bytes() == MAGIC => return Err("big-endian table"),
            _ => return Err("bad magic"),
        }
        let (version, flags, abi) = (bytes[2], bytes[3], bytes[4]);
        if !(1..=3).contains(&version) {
            return Err("unknown version");
        }
        let abi_arch = match abi {
            ABI_AMD64_LE => Arch::X86_64,
            ABI_AARCH64_LE => Arch::Aarch64,
            _ => return Err("unsupported ABI"),
        };
        if abi_arch != arch {
            return Err("table for another architecture");
        }
        let field = |at| u32_at(bytes, at).map(|v| v as usize).ok_or("cut header");
        let (functions, fre_len) = (field(8)?, field(16)?);
        let header = HEADER + usize::from(bytes[7]);
        let fde_start = header.checked_add(field(20)?).ok_or("bad offset")?;
        let fre_start = header.checked_add(field(24)?).ok_or("bad offset")?;
        let fde_size = Self::fde_size(version);
        let fde_end = functions
            .checked_mul(fde_size)
            .and_then(|n| n.checked_add(fde_start))
            .ok_or("function count too large")?;
        let fre_end = fre_start.checked_add(fre_len).ok_or("bad row length")?;
        if fde_end > bytes.len() {
            return Err("function descriptors past the section's end");
        }
        if fre_end > bytes.len() {
            return Err("rows past the section's end");
        }
        Ok(SFrame {
            bytes,
            address,
            version,
            flags,
            arch,
            fixed_fp: bytes[5] as i8,
            fixed_ra: bytes[6] as i8,
            functions,
            fde_start,
            fre_start,
            fre_end,
        })
    }

    fn fde_size(version: u8) -> usize {
        match version {
            1 => 17,
            2 => 20,
            _ => 16,
        }
    }

    /// How many function descriptors there are.
    pub fn function_count(&self) -> usize {
        self.functions
    }

    /// Whether the descriptors are sorted by address (as linkers write
    /// them): else a lookup reads them all.
    pub fn sorted(&self) -> bool {
        self.flags & F_FDE_SORTED != 0
    }

    /// Descriptor `index`'s start address, without reading the rest.
    fn start_of(&self, index: usize) -> Option<u64> {
        let at = self.fde_start + index * Self::fde_size(self.version);
        let value = match self.version {
            1 | 2 => i64::from(u32_at(self.bytes, at)? as i32),
            _ => le_u64(self.bytes, at)? as i64,
        };
        let from = if self.flags & F_FUNC_START_PCREL != 0 { at as u64 } else { 0 };
        Some(self.address.wrapping_add(from).wrapping_add(value as u64))
    }

    /// Descriptor `index` (below [`SFrame::function_count`]).
    pub fn function(&self, index: usize) -> Result<Function, &'static str> {
        let at = self.fde_start + index * Self::fde_size(self.version);
        let start = self.start_of(index).ok_or("descriptor past the section's end")?;
        let b = self.bytes;
        let cut = "descriptor past the section's end";
        let size = u32_at(b, at + if self.version < 3 { 4 } else { 8 }).ok_or(cut)?;
        let row_offset = u32_at(b, at + if self.version < 3 { 8 } else { 12 }).ok_or(cut)? as usize;
        let in_rows = self.fre_start.checked_add(row_offset).ok_or("bad row offset")?;
        let (rows, info, info2, repeat, first_row) = match self.version {
            1 | 2 => {
                let rows = u32_at(b, at + 12).ok_or(cut)?;
                let info = b[at + 16];
                let repeat = if self.version == 2 { b[at + 17] } else { 0 };
                (rows, info, 0, repeat, in_rows)
            }
            _ => {
                // The attributes, then the rows.
                let attr = b
                    .get(in_rows..in_rows.saturating_add(5))
                    .filter(|_| in_rows + 5 <= self.fre_end);
                let attr = attr.ok_or("function attributes past the rows' end")?;
                let rows = u32::from(u16::from_le_bytes([attr[0], attr[1]]));
                (rows, attr[2], attr[3], attr[4], in_rows + 5)
            }
        };
        let start_width = match info & 0xf {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => return Err("unknown row type"),
        };
        let pc_type = if info & 0x10 == 0 {
            PcType::Increasing
        } else if self.version == 1 {
            PcType::Mask(V1_REPEAT)
        } else if repeat == 0 {
            return Err("masked function without a repeat size");
        } else {
            PcType::Mask(u64::from(repeat))
        };
        let flexible = match info2 & 0x1f {
            0 => false,
            1 => true,
            _ => return Err("unknown FDE type"),
        };
        Ok(Function {
            start,
            end: start.saturating_add(u64::from(size)),
            pc_type,
            flexible,
            signal: self.version >= 3 && info & 0x80 != 0,
            pauth_key_b: info & 0x20 != 0,
            rows,
            start_width,
            first_row,
        })
    }

    /// The function holding ELF address `pc`, if any.
    pub fn function_at(&self, pc: u64) -> Result<Option<Function>, &'static str> {
        let candidate = if self.sorted() {
            // The last descriptor starting at or below `pc`.
            let (mut lo, mut hi) = (0, self.functions);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.start_of(mid).ok_or("descriptor past the section's end")? <= pc {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo.checked_sub(1)
        } else {
            (0..self.functions).find(|&i| self.function(i).is_ok_and(|f| f.contains(pc)))
        };
        let Some(index) = candidate else { return Ok(None) };
        let function = self.function(index)?;
        Ok(function.contains(pc).then_some(function))
    }

    /// The rows of `function`, in order.
    pub fn entries(&self, function: &Function) -> Entries<'_, 'a> {
        Entries { table: self, function: *function, at: function.first_row, left: function.rows }
    }

    /// The row of `function` in force at ELF address `pc` (in the
    /// function), and the addresses it holds over.
    pub fn entry_at(
        &self,
        function: &Function,
        pc: u64,
    ) -> Result<Option<(Entry, Range<u64>)>, &'static str> {
        let offset = pc.saturating_sub(function.start);
        let (block, within, block_end) = match function.pc_type {
            PcType::Increasing => (0, offset, u64::MAX),
            PcType::Mask(size) => (offset - offset % size, offset % size, size),
        };
        let mut found = None;
        for entry in self.entries(function) {
            let entry = entry?;
            let start = match function.pc_type {
                // (The row's own offset, however its address wrapped.)
                PcType::Increasing => entry.start.wrapping_sub(function.start),
                PcType::Mask(_) => entry.start,
            };
            if start > within {
                let end = function.start.saturating_add(block).saturating_add(start);
                return Ok(found.map(|(e, s)| (e, s..end)));
            }
            found = Some((entry, function.start.saturating_add(block).saturating_add(start)));
        }
        let end = function.start.saturating_add(block).saturating_add(block_end);
        Ok(found.map(|(e, s)| (e, s..end.min(function.end))))
    }

    /// The rules at ELF address `pc`: `LookupError::NoFde` where no function
    /// holds it.
    pub fn row(&self, pc: u64) -> Result<(Row, Range<u64>), LookupError> {
        let function = self.function_at(pc).map_err(bad)?.ok_or(LookupError::NoFde)?;
        let (entry, range) = self
            .entry_at(&function, pc)
            .map_err(bad)?
            .ok_or(bad("no row at the function's start"))?;
        Ok((self.rules(&function, &entry).map_err(bad)?, range))
    }

    /// `entry`'s rules, as DWARF CFI's row for the same place would give
    /// them: the CFA, the return-address column, the frame pointer's.
    pub fn rules(&self, function: &Function, entry: &Entry) -> Result<Row, &'static str> {
        let (ra_column, fp_column) = match self.arch {
            Arch::Aarch64 => (30, 29),
            _ => (16, 6),
        };
        let cfa = match entry.cfa_deref {
            false => CfaRule::RegOffset { reg: entry.cfa_reg, offset: entry.cfa_offset.into() },
            true => CfaRule::DerefRegister { reg: entry.cfa_reg, offset: entry.cfa_offset },
        };
        let mut row = Row::new(cfa, ra_column, function.signal);
        let rule = |place: Place| match place {
            Place::Unchanged => Ok(None),
            Place::AtCfa(n) => Ok(Some(RegRule::Offset(n.into()))),
            Place::CfaPlus(n) => Ok(Some(RegRule::ValOffset(n.into()))),
            Place::Register { reg, offset, deref: true } => {
                Ok(Some(RegRule::AtRegister { reg, offset }))
            }
            Place::Register { reg, offset: 0, deref: false } => Ok(Some(RegRule::Register(reg))),
            Place::Register { .. } => Err("a register plus an offset as a value"),
        };
        match entry.ra {
            None => {
                row.push(ra_column, RegRule::Undefined);
            }
            Some(place) => {
                if let Some(r) = rule(place)? {
                    row.push(ra_column, r);
                }
            }
        }
        if let Some(r) = rule(entry.fp)? {
            row.push(fp_column, r);
        }
        Ok(row)
    }

    /// The row at `at` of `function` (checked to lie among the rows), and
    /// where the next one starts.
    fn read_entry(&self, function: &Function, at: usize) -> Result<(Entry, usize), &'static str> {
        let rows = &self.bytes[..self.fre_end];
        let cut = "row past the rows' end";
        let width = usize::from(function.start_width);
        let start = match width {
            1 => u64::from(*rows.get(at).ok_or(cut)?),
            2 => u64::from(u16_at(rows, at).ok_or(cut)?),
            _ => u64::from(u32_at(rows, at).ok_or(cut)?),
        };
        let info = *rows.get(at + width).ok_or(cut)?;
        let count = usize::from((info >> 1) & 0xf);
        let size = match (info >> 5) & 0x3 {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => return Err("unknown offset size"),
        };
        let words_at = at + width + 1;
        let words = rows.get(words_at..words_at + count * size).ok_or(cut)?;
        let word = |i: usize| -> Option<i32> {
            let w = words.get(i * size..(i + 1) * size)?;
            Some(match size {
                1 => i32::from(w[0] as i8),
                2 => i32::from(i16::from_le_bytes([w[0], w[1]])),
                _ => i32::from_le_bytes([w[0], w[1], w[2], w[3]]),
            })
        };
        let start = match function.pc_type {
            PcType::Increasing => function.start.wrapping_add(start),
            PcType::Mask(_) => start,
        };
        let (sp, fp_reg) = match self.arch {
            Arch::Aarch64 => (31, 29),
            _ => (7, 6),
        };
        let mut entry = Entry {
            start,
            cfa_reg: if info & 1 == 1 { sp } else { fp_reg },
            cfa_offset: 0,
            cfa_deref: false,
            ra: None,
            fp: Place::Unchanged,
            mangled_ra: info & 0x80 != 0,
        };
        let next = words_at + count * size;
        if count == 0 {
            // No return address: the outermost frame.
            return Ok((entry, next));
        }
        if function.flexible {
            // Control words are unsigned.
            let mask = u32::MAX >> (32 - 8 * size as u32);
            let control = |i: usize| word(i).map(|w| w as u32 & mask);
            self.flexible(&mut entry, count, word, control)?;
            return Ok((entry, next));
        }
        entry.cfa_offset = word(0).ok_or(cut)?;
        let fixed = |offset: i8| (offset != 0).then_some(Place::AtCfa(offset.into()));
        let (ra, fp_index) = match fixed(self.fixed_ra) {
            Some(place) => (place, 1),
            None => (word(1).map_or(Place::Unchanged, Place::AtCfa), 2),
        };
        entry.ra = Some(ra);
        entry.fp = match fixed(self.fixed_fp) {
            Some(place) => place,
            None => word(fp_index).map_or(Place::Unchanged, Place::AtCfa),
        };
        Ok((entry, next))
    }

    /// A flexible FDE's row: (control, offset) pairs for the CFA, the return
    /// address (a control word of 0: the header's fixed rule) and the frame
    /// pointer.
    fn flexible(
        &self,
        entry: &mut Entry,
        count: usize,
        word: impl Fn(usize) -> Option<i32>,
        control: impl Fn(usize) -> Option<u32>,
    ) -> Result<(), &'static str> {
        let cut = "flexible row too short";
        let place = |control: u32, offset: i32| -> Place {
            let (reg_based, deref) = (control & 1 != 0, control & 2 != 0);
            match (reg_based, deref) {
                (true, _) => Place::Register { reg: (control >> 3) as u16, offset, deref },
                (false, true) => Place::AtCfa(offset),
                (false, false) => Place::CfaPlus(offset),
            }
        };
        let cfa = control(0).ok_or(cut)?;
        if cfa & 1 == 0 {
            return Err("flexible CFA not register-based");
        }
        entry.cfa_reg = (cfa >> 3) as u16;
        entry.cfa_deref = cfa & 2 != 0;
        entry.cfa_offset = word(1).ok_or(cut)?;
        let fixed_ra = (self.fixed_ra != 0).then_some(Place::AtCfa(self.fixed_ra.into()));
        let fixed_fp = (self.fixed_fp != 0).then_some(Place::AtCfa(self.fixed_fp.into()));
        let fp_at = match control(2) {
            // Padding where there is no return-address rule but a frame
            // pointer's.
            Some(0) => {
                entry.ra = Some(fixed_ra.unwrap_or(Place::Unchanged));
                3
            }
            Some(control) => {
                entry.ra = Some(place(control, word(3).ok_or(cut)?));
                4
            }
            None => {
                entry.ra = Some(fixed_ra.unwrap_or(Place::Unchanged));
                count
            }
        };
        entry.fp = match (control(fp_at), count > fp_at) {
            (Some(control), true) => place(control, word(fp_at + 1).ok_or(cut)?),
            _ => fixed_fp.unwrap_or(Place::Unchanged),
        };
        Ok(())
    }
}

/// The rows of a function, in order (see [`SFrame::entries`]).
pub struct Entries<'t, 'a> {
    table: &'t SFrame<'a>,
    function: Function,
    at: usize,
    left: u32,
}

impl Iterator for Entries<'_, '_> {
    type Item = Result<Entry, &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match self.table.read_entry(&self.function, self.at) {
            Ok((entry, next)) => {
                self.at = next;
                Some(Ok(entry))
            }
            Err(e) => {
                self.left = 0;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 table of one function at 0x1000 (32 bytes, start from the
    /// section) with `rows` (start, info, words), for x86_64.
    fn table(flags: u8, info: u8, repeat: u8, rows: &[(u8, u8, &[i8])]) -> Vec<u8> {
        let mut fres = Vec::new();
        for &(start, row_info, words) in rows {
            fres.push(start);
            fres.push(row_info);
            fres.extend(words.iter().map(|&w| w as u8));
        }
        let mut out = vec![0xe2, 0xde, 2, flags, ABI_AMD64_LE, 0, -8i8 as u8, 0];
        for v in [1u32, rows.len() as u32, fres.len() as u32, 0, 20] {
            out.extend(v.to_le_bytes());
        }
        // The function at 0x1000, the section at 0x800.
        out.extend(0x800i32.to_le_bytes());
        out.extend(32u32.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((rows.len() as u32).to_le_bytes());
        out.extend([info, repeat, 0, 0]);
        out.extend(fres);
        out
    }

    fn info(base_sp: bool, words: u8) -> u8 {
        u8::from(base_sp) | (words << 1)
    }

    #[test]
    fn rows_by_pc_and_by_mask() {
        let rows: &[(u8, u8, &[i8])] = &[(0, info(true, 1), &[8]), (4, info(true, 1), &[16])];
        let bytes = table(F_FDE_SORTED, 0, 0, rows);
        let t = SFrame::parse(&bytes, 0x800, Arch::X86_64).unwrap();
        let (row, range) = t.row(0x1002).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: 7, offset: 8 });
        assert_eq!(row.rule(16), Some(RegRule::Offset(-8)));
        assert_eq!(range, 0x1000..0x1004);
        let (row, range) = t.row(0x101f).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: 7, offset: 16 });
        assert_eq!(range, 0x1004..0x1020);
        assert!(matches!(t.row(0x1020), Err(LookupError::NoFde)));
        assert!(matches!(t.row(0xfff), Err(LookupError::NoFde)));
        // Masked: every 16 bytes, the second row from offset 4 of each block.
        let bytes = table(F_FDE_SORTED, 0x10, 16, rows);
        let t = SFrame::parse(&bytes, 0x800, Arch::X86_64).unwrap();
        let (row, range) = t.row(0x1013).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: 7, offset: 8 });
        assert_eq!(range, 0x1010..0x1014);
        let (row, range) = t.row(0x1015).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: 7, offset: 16 });
        assert_eq!(range, 0x1014..0x1020);
    }

    #[test]
    fn frame_pointer_rows_and_the_outermost_frame() {
        let rows: &[(u8, u8, &[i8])] = &[(0, info(false, 2), &[16, -16]), (8, 0, &[])];
        let bytes = table(F_FDE_SORTED, 0, 0, rows);
        let t = SFrame::parse(&bytes, 0x800, Arch::X86_64).unwrap();
        let (row, _) = t.row(0x1000).unwrap();
        assert_eq!(row.cfa, CfaRule::RegOffset { reg: 6, offset: 16 });
        assert_eq!(row.rule(6), Some(RegRule::Offset(-16)));
        // No words: the return address is undefined.
        let (row, _) = t.row(0x1008).unwrap();
        assert_eq!(row.rule(16), Some(RegRule::Undefined));
    }

    #[test]
    fn a_damaged_or_foreign_table_is_refused() {
        let rows: &[(u8, u8, &[i8])] = &[(0, info(true, 1), &[8])];
        let good = table(F_FDE_SORTED, 0, 0, rows);
        assert!(SFrame::parse(&good, 0x800, Arch::Aarch64).is_err());
        assert!(SFrame::parse(&good[..20], 0x800, Arch::X86_64).is_err());
        let mut swapped = good.clone();
        swapped.swap(0, 1);
        assert_eq!(SFrame::parse(&swapped, 0x800, Arch::X86_64).err(), Some("big-endian table"));
        let mut counts = good.clone();
        counts[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(SFrame::parse(&counts, 0x800, Arch::X86_64).is_err());
        // A row count past the rows: reading stops with an error (which row holds a pc
        // cannot be known past it), no panic.
        let mut rows_cut = good.clone();
        let at = HEADER + 12;
        rows_cut[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
        let t = SFrame::parse(&rows_cut, 0x800, Arch::X86_64).unwrap();
        let f = t.function(0).unwrap();
        assert!(t.entries(&f).any(|e| e.is_err()));
        assert_eq!(t.row(0x1010).err(), Some(LookupError::SFrame("row past the rows' end")));
    }
}
