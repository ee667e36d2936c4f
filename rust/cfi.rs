//! Call frame information: a module's `.eh_frame` / `.eh_frame_hdr` /
//! `.debug_frame`, finding the FDE for an address without scanning, and
//! turning gimli's unwind rows into small `Copy` rules.

use std::fmt;
use std::ops::Range;

use gimli::{
    BaseAddresses, CieOrFde, DebugFrame, EhFrame, EhFrameHdr, EndianSlice, LittleEndian,
    UnwindContext, UnwindSection, UnwindTableRow,
};

use crate::arch::{Arch, NUM_REGS};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// Which section an expression's bytes live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionKind {
    EhFrame,
    DebugFrame,
}

/// Where a DWARF expression's bytes are: resolved against the module's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExprRef {
    pub section: SectionKind,
    pub offset: u32,
    pub len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CfaRule {
    RegOffset { reg: u16, offset: i64 },
    Expr(ExprRef),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegRule {
    Undefined,
    SameValue,
    Offset(i64),
    ValOffset(i64),
    Register(u16),
    Expr(ExprRef),
    ValExpr(ExprRef),
}

/// The unwind rules in force at one address: the CFA rule and a rule for
/// every register column the CIE and FDE instructions mention (columns not
/// listed take the architecture's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleSet<const N: usize> {
    pub cfa: CfaRule,
    /// The return-address column of the CIE.
    pub ra: u16,
    /// The CIE has the `S` augmentation: the frame is a signal trampoline.
    pub signal_frame: bool,
    len: u8,
    rules: [(u16, RegRule); N],
}

/// A full row: room for a rule for every tracked column.
pub type Row = RuleSet<NUM_REGS>;
/// What the rule cache keeps: ordinary functions save a handful of registers.
pub type CompactRow = RuleSet<8>;

impl<const N: usize> RuleSet<N> {
    pub fn new(cfa: CfaRule, ra: u16, signal_frame: bool) -> Self {
        RuleSet { cfa, ra, signal_frame, len: 0, rules: [(0, RegRule::Undefined); N] }
    }

    #[inline]
    pub fn rules(&self) -> &[(u16, RegRule)] {
        &self.rules[..self.len as usize]
    }

    /// Add a rule; false when there is no room.
    pub fn push(&mut self, reg: u16, rule: RegRule) -> bool {
        if (self.len as usize) < N {
            self.rules[self.len as usize] = (reg, rule);
            self.len += 1;
            true
        } else {
            false
        }
    }

    pub fn rule(&self, reg: u16) -> Option<RegRule> {
        self.rules().iter().find(|(r, _)| *r == reg).map(|(_, rule)| *rule)
    }

    /// The same rules in a set of another capacity, if they fit.
    pub fn resize<const M: usize>(&self) -> Option<RuleSet<M>> {
        let mut out = RuleSet::<M>::new(self.cfa, self.ra, self.signal_frame);
        for &(reg, rule) in self.rules() {
            if !out.push(reg, rule) {
                return None;
            }
        }
        Some(out)
    }
}

/// A file's bytes: mapped from disk (zero-copy) or owned (e.g. a vdso image
/// copied out of a core).
pub enum Data {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
        }
    }
}

/// A section as found by the ELF reader: where its bytes are in the file
/// and the address it is loaded at (ELF virtual address, before bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    pub file_offset: u64,
    pub size: u64,
    pub address: u64,
}

/// The pieces of an ELF file the unwinder needs.
#[derive(Clone, Debug, Default)]
pub struct ModuleSections {
    pub eh_frame: Option<SectionInfo>,
    pub eh_frame_hdr: Option<SectionInfo>,
    pub debug_frame: Option<SectionInfo>,
    pub text: Option<u64>,
    pub got: Option<u64>,
}

#[derive(Debug)]
#[non_exhaustive]
pub enum ModuleError {
    /// A section lies (partly) outside the file.
    SectionOutOfFile { section: &'static str, offset: u64, size: u64, file_size: u64 },
    /// The address range of the module is empty or inverted.
    BadRange { start: u64, end: u64 },
}

impl fmt::Display for ModuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleError::SectionOutOfFile { section, offset, size, file_size } => write!(
                f,
                "section {section} at file offset {offset:#x} size {size:#x} lies outside the \
                 file ({file_size:#x} bytes)"
            ),
            ModuleError::BadRange { start, end } => {
                write!(f, "empty address range {start:#x}..{end:#x}")
            }
        }
    }
}

impl std::error::Error for ModuleError {}

/// Why no rule could be found for an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupError {
    /// No FDE covers the address.
    NoFde,
    /// The CFI is malformed (where gimli found it so).
    Cfi(gimli::Error),
    /// The return-address column is one this unwinder does not track.
    BadReturnColumn(u16),
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::NoFde => f.write_str("no FDE covers the address"),
            LookupError::Cfi(e) => write!(f, "malformed CFI: {e}"),
            LookupError::BadReturnColumn(r) => write!(f, "unsupported return-address column {r}"),
        }
    }
}

impl From<gimli::Error> for LookupError {
    fn from(e: gimli::Error) -> Self {
        match e {
            gimli::Error::NoUnwindInfoForAddress => LookupError::NoFde,
            e => LookupError::Cfi(e),
        }
    }
}

/// An FDE's address range and its offset in its section, for the sorted
/// index built when a section has no `.eh_frame_hdr` search table.
#[derive(Clone, Copy, Debug)]
struct IndexEntry {
    start: u64,
    end: u64,
    offset: usize,
}

/// One loaded ELF module with its unwind tables.
pub struct Module {
    pub name: String,
    /// Runtime address range (ELF addresses + bias).
    pub range: Range<u64>,
    /// Runtime address − ELF virtual address.
    pub bias: u64,
    arch: Arch,
    data: Data,
    sections: ModuleSections,
    bases: BaseAddresses,
    /// Whether `.eh_frame_hdr` has a usable binary-search table.
    eh_hdr_table: bool,
    /// Sorted FDE index of `.eh_frame`, built only when there is no table.
    eh_index: Vec<IndexEntry>,
    /// Sorted FDE index of `.debug_frame`.
    debug_index: Vec<IndexEntry>,
    /// Errors met while indexing (the entries before the damage are kept).
    pub index_errors: Vec<(SectionKind, gimli::Error)>,
}

impl Module {
    /// Build a module. `range` is the ELF address range of its loadable
    /// segments; runtime addresses are those plus `bias`.
    pub fn new(
        name: String,
        arch: Arch,
        data: Data,
        sections: ModuleSections,
        range: Range<u64>,
        bias: u64,
    ) -> Result<Module, ModuleError> {
        if range.start >= range.end {
            return Err(ModuleError::BadRange { start: range.start, end: range.end });
        }
        for (name, s) in [
            (".eh_frame", sections.eh_frame),
            (".eh_frame_hdr", sections.eh_frame_hdr),
            (".debug_frame", sections.debug_frame),
        ] {
            if let Some(s) = s {
                let fits =
                    s.file_offset.checked_add(s.size).is_some_and(|e| e <= data.len() as u64);
                if !fits {
                    return Err(ModuleError::SectionOutOfFile {
                        section: name,
                        offset: s.file_offset,
                        size: s.size,
                        file_size: data.len() as u64,
                    });
                }
            }
        }
        let mut bases = BaseAddresses::default();
        if let Some(s) = sections.eh_frame_hdr {
            bases = bases.set_eh_frame_hdr(s.address);
        }
        if let Some(s) = sections.eh_frame {
            bases = bases.set_eh_frame(s.address);
        }
        if let Some(t) = sections.text {
            bases = bases.set_text(t);
        }
        if let Some(g) = sections.got {
            bases = bases.set_got(g);
        }
        let runtime = range.start.wrapping_add(bias)..range.end.wrapping_add(bias);
        let mut module = Module {
            name,
            range: runtime,
            bias,
            arch,
            data,
            sections,
            bases,
            eh_hdr_table: false,
            eh_index: Vec::new(),
            debug_index: Vec::new(),
            index_errors: Vec::new(),
        };
        module.eh_hdr_table = module.has_hdr_table();
        if !module.eh_hdr_table {
            if let Some(eh) = module.eh_frame() {
                let (index, err) = build_index(&eh, &module.bases);
                module.eh_index = index;
                module.index_errors.extend(err.map(|e| (SectionKind::EhFrame, e)));
            }
        }
        if let Some(df) = module.debug_frame() {
            let (index, err) = build_index(&df, &module.bases);
            module.debug_index = index;
            module.index_errors.extend(err.map(|e| (SectionKind::DebugFrame, e)));
        }
        Ok(module)
    }

    fn section_bytes(&self, s: SectionInfo) -> &[u8] {
        // Checked against the data's length in `new`.
        &self.data[s.file_offset as usize..(s.file_offset + s.size) as usize]
    }

    fn eh_frame(&self) -> Option<EhFrame<Slice<'_>>> {
        let s = self.sections.eh_frame?;
        let mut eh = EhFrame::new(self.section_bytes(s), LittleEndian);
        eh.set_address_size(8);
        eh.set_vendor(self.arch.gimli_vendor());
        Some(eh)
    }

    fn debug_frame(&self) -> Option<DebugFrame<Slice<'_>>> {
        let s = self.sections.debug_frame?;
        let mut df = DebugFrame::new(self.section_bytes(s), LittleEndian);
        df.set_address_size(8);
        df.set_vendor(self.arch.gimli_vendor());
        Some(df)
    }

    fn has_hdr_table(&self) -> bool {
        let (Some(hdr), Some(_)) = (self.sections.eh_frame_hdr, self.sections.eh_frame) else {
            return false;
        };
        let hdr = EhFrameHdr::new(self.section_bytes(hdr), LittleEndian);
        hdr.parse(&self.bases, 8).is_ok_and(|p| p.table().is_some())
    }

    /// Whether the module has any call frame information at all.
    pub fn has_cfi(&self) -> bool {
        self.sections.eh_frame.is_some() || self.sections.debug_frame.is_some()
    }

    /// The bytes of an expression a rule refers to.
    pub fn expr_bytes(&self, e: ExprRef) -> &[u8] {
        let section = match e.section {
            SectionKind::EhFrame => self.sections.eh_frame,
            SectionKind::DebugFrame => self.sections.debug_frame,
        };
        let bytes = section.map(|s| self.section_bytes(s)).unwrap_or(&[]);
        let start = e.offset as usize;
        bytes.get(start..start + e.len as usize).unwrap_or(&[])
    }

    /// The rules in force at `address` (an ELF address, bias removed), with
    /// the FDE's ELF address range. `.eh_frame` is tried first, then
    /// `.debug_frame`.
    pub fn find_row(
        &self,
        address: u64,
        ctx: &mut UnwindContext<usize>,
    ) -> Result<(Row, Range<u64>), LookupError> {
        let eh_result = match self.eh_frame() {
            Some(eh) => self.find_in_eh_frame(&eh, address, ctx),
            None => Err(LookupError::NoFde),
        };
        match eh_result {
            Err(LookupError::NoFde) => {}
            other => return other,
        }
        match self.debug_frame() {
            Some(df) => {
                self.find_indexed(&df, SectionKind::DebugFrame, &self.debug_index, address, ctx)
            }
            None => Err(LookupError::NoFde),
        }
    }

    fn find_in_eh_frame(
        &self,
        eh: &EhFrame<Slice<'_>>,
        address: u64,
        ctx: &mut UnwindContext<usize>,
    ) -> Result<(Row, Range<u64>), LookupError> {
        if !self.eh_hdr_table {
            return self.find_indexed(eh, SectionKind::EhFrame, &self.eh_index, address, ctx);
        }
        let Some(hdr) = self.sections.eh_frame_hdr else {
            return Err(LookupError::NoFde);
        };
        let parsed =
            EhFrameHdr::new(self.section_bytes(hdr), LittleEndian).parse(&self.bases, 8)?;
        let table = parsed.table().ok_or(LookupError::NoFde)?;
        let fde = table.fde_for_address(eh, &self.bases, address, EhFrame::cie_from_offset)?;
        let row = fde.unwind_info_for_address(eh, &self.bases, ctx, address)?;
        let out = convert_row(row, fde.cie(), SectionKind::EhFrame)?;
        Ok((out, fde.initial_address()..fde.end_address()))
    }

    fn find_indexed<'d, S: UnwindSection<Slice<'d>>>(
        &'d self,
        section: &S,
        kind: SectionKind,
        index: &[IndexEntry],
        address: u64,
        ctx: &mut UnwindContext<usize>,
    ) -> Result<(Row, Range<u64>), LookupError> {
        let pos = index.partition_point(|e| e.start <= address);
        // Overlapping FDEs are rare; look at the nearest few that start below.
        for entry in index[..pos].iter().rev().take(4) {
            if address >= entry.end {
                continue;
            }
            let fde = section.fde_from_offset(
                &self.bases,
                S::Offset::from(entry.offset),
                S::cie_from_offset,
            )?;
            let row = fde.unwind_info_for_address(section, &self.bases, ctx, address)?;
            let out = convert_row(row, fde.cie(), kind)?;
            return Ok((out, fde.initial_address()..fde.end_address()));
        }
        Err(LookupError::NoFde)
    }
}

/// Index every FDE of a section once, sorted by start address. Returns the
/// entries found before any damage, and the error that stopped the walk.
fn build_index<'d, S: UnwindSection<Slice<'d>>>(
    section: &S,
    bases: &BaseAddresses,
) -> (Vec<IndexEntry>, Option<gimli::Error>) {
    let mut index = Vec::new();
    let mut entries = section.entries(bases);
    let error = loop {
        match entries.next() {
            Ok(None) => break None,
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(Some(CieOrFde::Fde(partial))) => match partial.parse(S::cie_from_offset) {
                Ok(fde) if fde.len() > 0 => index.push(IndexEntry {
                    start: fde.initial_address(),
                    end: fde.end_address(),
                    offset: fde.offset(),
                }),
                Ok(_) => {}
                Err(e) => break Some(e),
            },
            Err(e) => break Some(e),
        }
    };
    index.sort_unstable_by_key(|e| (e.start, e.end));
    (index, error)
}

fn expr_ref(
    e: &gimli::UnwindExpression<usize>,
    section: SectionKind,
) -> Result<ExprRef, LookupError> {
    let too_big = || LookupError::Cfi(gimli::Error::UnsupportedOffset);
    Ok(ExprRef {
        section,
        offset: u32::try_from(e.offset).map_err(|_| too_big())?,
        len: u32::try_from(e.length).map_err(|_| too_big())?,
    })
}

fn convert_row(
    row: &UnwindTableRow<usize>,
    cie: &gimli::CommonInformationEntry<Slice<'_>>,
    section: SectionKind,
) -> Result<Row, LookupError> {
    let ra = cie.return_address_register().0;
    if ra as usize >= NUM_REGS {
        return Err(LookupError::BadReturnColumn(ra));
    }
    let cfa = match row.cfa() {
        gimli::CfaRule::RegisterAndOffset { register, offset } => {
            CfaRule::RegOffset { reg: register.0, offset: *offset }
        }
        gimli::CfaRule::Expression(e) => CfaRule::Expr(expr_ref(e, section)?),
    };
    let mut out = Row::new(cfa, ra, cie.is_signal_trampoline());
    for (register, rule) in row.registers() {
        if register.0 as usize >= NUM_REGS {
            continue; // vector registers, pointer-authentication state: never needed
        }
        let rule = match rule {
            gimli::RegisterRule::Undefined => RegRule::Undefined,
            gimli::RegisterRule::SameValue => RegRule::SameValue,
            gimli::RegisterRule::Offset(n) => RegRule::Offset(*n),
            gimli::RegisterRule::ValOffset(n) => RegRule::ValOffset(*n),
            gimli::RegisterRule::Register(r) => RegRule::Register(r.0),
            gimli::RegisterRule::Expression(e) => RegRule::Expr(expr_ref(e, section)?),
            gimli::RegisterRule::ValExpression(e) => RegRule::ValExpr(expr_ref(e, section)?),
            // Augmenter-defined rules have no meaning we can apply.
            _ => RegRule::Undefined,
        };
        // Each register appears once in a row, and a row holds at most
        // NUM_REGS tracked columns, so this cannot run out of room.
        out.push(register.0, rule);
    }
    Ok(out)
}
