//! Call frame information: a module's `.eh_frame` / `.eh_frame_hdr` /
//! `.debug_frame`, and finding the FDE for an address without scanning;
//! the rules of a row, and their making from gimli's rows, in `rules`.

use std::ops::Range;
use std::sync::OnceLock;

use gimli::{
    BaseAddresses, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian, UnwindContext,
    UnwindSection, UnwindTableRow,
};

use crate::arch::{Arch, NUM_REGS};
use crate::source::memory::Data;
use crate::space::sections::{
    decompress_section, CodeSegment, Compression, ModuleSections, SectionInfo,
};

type Slice<'a> = EndianSlice<'a, LittleEndian>;
type Cie<'a> = gimli::CommonInformationEntry<Slice<'a>>;
type Fde<'a> = gimli::FrameDescriptionEntry<Slice<'a>>;

mod ehabi;
mod errors;
mod foreign;
mod rules;
pub mod sframe;
pub mod sframe_check;
pub use errors::{LookupError, ModuleError};
use foreign::foreign_row;
pub use foreign::ForeignCfi;
use rules::{convert_cfa, convert_rules, register_offset, return_column};
pub use rules::{CfaRule, CompactRow, ExprRef, FullRow, RegRule, Row, RuleSet, Rules, SectionKind};

/// `DW_EH_PE_datarel | DW_EH_PE_sdata4`: the search table's encoding.
const DW_EH_PE_DATAREL_SDATA4: u8 = 0x3b;

/// The size of a `DW_EH_PE_*`-encoded value of fixed size, whatever its
/// application (pcrel, datarel...); None for LEB128, omitted or indirect.
fn encoded_len(enc: u8) -> Option<usize> {
    if enc & 0x80 != 0 {
        return None;
    }
    match enc & 0x0f {
        0x02 | 0x0a => Some(2),
        0x03 | 0x0b => Some(4),
        0x04 | 0x0c => Some(8),
        _ => None,
    }
}

/// Where `.eh_frame_hdr`'s search table is: byte offset in the section and
/// number of 8-byte rows (checked to fit).
#[derive(Clone, Copy, Debug)]
struct HdrTable {
    offset: usize,
    rows: usize,
}

/// An FDE's address range and its offset in its section, for the sorted
/// index built when a section has no `.eh_frame_hdr` search table.
#[derive(Clone, Copy, Debug)]
struct IndexEntry {
    start: u64,
    end: u64,
    offset: usize,
}

/// One ELF file's unwind tables: its bytes, where its CFI sections are,
/// and the FDE indexes built once. Shared (`Arc`) by every place the file is
/// loaded at, in every process.
pub struct UnwindInfo {
    arch: Arch,
    data: std::sync::Arc<Data>,
    /// A separate debug file's bytes, which `sections.debug_frame` is in.
    debug_data: Option<std::sync::Arc<Data>>,
    /// `.debug_frame` decompressed (the file's own or its debug file's),
    /// where it is compressed: `sections.debug_frame` is then in these bytes.
    debug_frame_data: Option<std::sync::Arc<Data>>,
    sections: ModuleSections,
    bases: BaseAddresses,
    /// `.eh_frame_hdr`'s binary-search table, when it has one we can use.
    hdr_table: Option<HdrTable>,
    /// Sorted FDE index of `.eh_frame`, built only when there is no table.
    eh_index: Vec<IndexEntry>,
    /// Sorted FDE index of `.debug_frame`.
    debug_index: Vec<IndexEntry>,
    /// Errors met while indexing (the entries before the damage are kept).
    pub index_errors: Vec<(SectionKind, gimli::Error)>,
    /// No file: only where the module's code is, known (see
    /// [`UnwindInfo::without_file`]).
    missing: bool,
    /// The function holding the entry point, found when first asked for
    /// (see [`UnwindInfo::entry_function`]).
    entry_function: OnceLock<Option<EntryFunction>>,
    /// The function symbols' extents and the PLT's, read at the first need
    /// (see [`UnwindInfo::code_map`]).
    code_map: OnceLock<crate::space::codemap::CodeMap>,
    /// A missing file's rules from elsewhere (its Breakpad symbol file's
    /// `STACK CFI` records), standing in for its CFI, and the runtime
    /// address their offsets are from.
    foreign: Option<(std::sync::Arc<dyn ForeignCfi>, u64)>,
    /// Where the functions of code without a file start: JIT code's, as its
    /// perf map names them (see [`UnwindInfo::with_functions`]).
    functions: Option<std::sync::Arc<crate::space::perfmap::PerfMap>>,
}

/// The extent of the function holding a module's entry point (`_start`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryFunction {
    /// ELF addresses.
    pub range: Range<u64>,
    /// The range is a function symbol's, or a label's at the entry point up to
    /// the next function; else it is a guess, for a file without symbols (see
    /// [`UnwindInfo::entry_function`]).
    pub by_symbol: bool,
}

/// How far past the entry point the function holding it may reach where
/// neither a symbol nor the next FDE says where it ends (a stripped static
/// program whose startup code has no CFI): the call of every `_start` we
/// know (glibc's, musl's, on x86_64, i386 and aarch64) lies within its
/// first 0x50 bytes.
const ENTRY_FUNCTION_MAX: u64 = 0x80;

/// A module as loaded in one address space: its unwind info, placed at a
/// runtime range. Dereferences to its [`UnwindInfo`].
pub struct Module {
    pub name: String,
    /// Runtime address range (ELF addresses + bias).
    pub range: Range<u64>,
    /// Runtime address − ELF virtual address.
    pub bias: u64,
    pub info: std::sync::Arc<UnwindInfo>,
}

impl std::ops::Deref for Module {
    type Target = UnwindInfo;
    fn deref(&self) -> &UnwindInfo {
        &self.info
    }
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
        let info = std::sync::Arc::new(UnwindInfo::new(arch, std::sync::Arc::new(data), sections)?);
        Module::place(name, info, range, bias)
    }

    /// Place unwind info already read at `range` (ELF addresses) + `bias`.
    pub fn place(
        name: String,
        info: std::sync::Arc<UnwindInfo>,
        range: Range<u64>,
        bias: u64,
    ) -> Result<Module, ModuleError> {
        if range.start >= range.end {
            return Err(ModuleError::BadRange { start: range.start, end: range.end });
        }
        let runtime = range.start.wrapping_add(bias)..range.end.wrapping_add(bias);
        Ok(Module { name, range: runtime, bias, info })
    }
}

impl UnwindInfo {
    /// Check that the sections lie inside `data`, and index the FDEs where
    /// there is no `.eh_frame_hdr` search table.
    pub fn new(
        arch: Arch,
        data: std::sync::Arc<Data>,
        sections: ModuleSections,
    ) -> Result<UnwindInfo, ModuleError> {
        UnwindInfo::with_debug_file(arch, data, sections, None)
    }

    /// Like [`UnwindInfo::new`], with the `.debug_frame` of a separate debug
    /// file (see [`crate::space::debugfile`]) when `data` has none of its own: the
    /// file's bytes, where the section is, how it is compressed.
    pub fn with_debug_file(
        arch: Arch,
        data: std::sync::Arc<Data>,
        mut sections: ModuleSections,
        debug: Option<(std::sync::Arc<Data>, SectionInfo, Compression)>,
    ) -> Result<UnwindInfo, ModuleError> {
        let mut debug_data = None;
        if let (None, Some((bytes, section, compression))) = (sections.debug_frame, debug) {
            sections.debug_frame = Some(section);
            sections.debug_frame_compression = compression;
            debug_data = Some(bytes);
        }
        for (name, s, len) in [
            (".eh_frame", sections.eh_frame, data.len()),
            (".eh_frame_hdr", sections.eh_frame_hdr, data.len()),
            (".ARM.exidx", sections.arm_exidx, data.len()),
            (".ARM.extab", sections.arm_extab, data.len()),
            (".sframe", sections.sframe, data.len()),
            (".debug_frame", sections.debug_frame, debug_data.as_ref().unwrap_or(&data).len()),
        ] {
            if let Some(s) = s {
                let fits = s.file_offset.checked_add(s.size).is_some_and(|e| e <= len as u64);
                if !fits {
                    return Err(ModuleError::SectionOutOfFile {
                        section: name,
                        offset: s.file_offset,
                        size: s.size,
                        file_size: len as u64,
                    });
                }
            }
        }
        // `.debug_frame` compressed: read decompressed (none, where its stream
        // does not decompress to what its header says).
        let mut debug_frame_data = None;
        if let (Some(s), Some((format, full))) =
            (sections.debug_frame, sections.debug_frame_compression.take())
        {
            let file = debug_data.as_ref().unwrap_or(&data);
            let stream = &file[s.file_offset as usize..(s.file_offset + s.size) as usize];
            sections.debug_frame = None;
            if let Some(bytes) = decompress_section(format, stream, full) {
                sections.debug_frame =
                    Some(SectionInfo { file_offset: 0, size: full, address: s.address });
                debug_frame_data = Some(std::sync::Arc::new(Data::Owned(bytes)));
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
        let mut info = UnwindInfo {
            arch,
            data,
            debug_data,
            debug_frame_data,
            sections,
            bases,
            hdr_table: None,
            eh_index: Vec::new(),
            debug_index: Vec::new(),
            index_errors: Vec::new(),
            missing: false,
            entry_function: OnceLock::new(),
            code_map: OnceLock::new(),
            foreign: None,
            functions: None,
        };
        info.hdr_table = info.parse_hdr_table();
        if info.hdr_table.is_none() {
            if let Some(eh) = info.eh_frame() {
                let (index, err) = build_index(&eh, &info.bases);
                info.eh_index = index;
                info.index_errors.extend(err.map(|e| (SectionKind::EhFrame, e)));
            }
        }
        if let Some(df) = info.debug_frame() {
            let (index, err) = build_index(&df, &info.bases);
            info.debug_index = index;
            info.index_errors.extend(err.map(|e| (SectionKind::DebugFrame, e)));
        }
        Ok(info)
    }

    /// A module whose file is missing (not found, or not the one the
    /// process ran): no CFI, no code bytes, only where its executable
    /// segments are (ELF addresses). A return address into it is checked
    /// against those segments alone, and the walk can go on from a frame
    /// in it by the other strategies, where otherwise a correct return
    /// address would be rejected for lying in no module.
    pub fn without_file(arch: Arch, code: Vec<CodeSegment>) -> UnwindInfo {
        let code = code.into_iter().map(|c| CodeSegment { file_offset: 0, file_size: 0, ..c });
        let sections = ModuleSections { code: code.collect(), ..ModuleSections::default() };
        UnwindInfo {
            arch,
            data: std::sync::Arc::new(Data::Owned(Vec::new())),
            debug_data: None,
            debug_frame_data: None,
            sections,
            bases: BaseAddresses::default(),
            hdr_table: None,
            eh_index: Vec::new(),
            debug_index: Vec::new(),
            index_errors: Vec::new(),
            missing: true,
            entry_function: OnceLock::new(),
            code_map: OnceLock::new(),
            foreign: None,
            functions: None,
        }
    }

    /// A missing ELF file's info (see [`UnwindInfo::without_file`]) whose
    /// code is read from another file after all (`data`, at the offsets of
    /// `code`: a Windows module's PE file), for the checks of the fallback
    /// strategies (a call before each return address).
    pub fn with_code_bytes(mut self, data: std::sync::Arc<Data>, code: Vec<CodeSegment>) -> Self {
        self.data = data;
        self.sections.code = code;
        self
    }

    /// A missing file's info (see [`UnwindInfo::without_file`]) unwound with
    /// rules from elsewhere (the `STACK CFI` records of its Breakpad symbol
    /// file), whose offsets are from runtime address `base` (the module's
    /// start).
    pub fn with_foreign_cfi(mut self, rules: std::sync::Arc<dyn ForeignCfi>, base: u64) -> Self {
        self.foreign = Some((rules, base));
        self
    }

    /// A missing file's info (see [`UnwindInfo::without_file`]) that knows
    /// where its functions start (`map`, at the module's ELF addresses): JIT
    /// code named by a perf map. Where a frame 0 in it has made no frame
    /// record yet is told by its pc's place in its function.
    pub fn with_functions(mut self, map: std::sync::Arc<crate::space::perfmap::PerfMap>) -> Self {
        self.functions = Some(map);
        self
    }

    /// How far `address` (an ELF address) is into its function, where the
    /// module knows its functions (see [`UnwindInfo::with_functions`]); None
    /// where it does not, or no function holds the address.
    pub fn function_offset(&self, address: u64) -> Option<u64> {
        self.functions.as_ref()?.lookup(address).map(|(_, offset)| offset)
    }

    /// Whether ELF address `address` is the first byte of a function that
    /// the foreign rules' file names (a Breakpad `FUNC` or `PUBLIC` record's),
    /// for a module whose file is missing.
    pub fn foreign_function_start(&self, address: u64) -> bool {
        let Some((rules, base)) = &self.foreign else { return false };
        rules.function_start(address.wrapping_sub(*base))
    }

    /// Whether the module is unwound with foreign rules (Breakpad `STACK CFI`).
    pub fn has_foreign_cfi(&self) -> bool {
        self.foreign.is_some()
    }

    /// The foreign rules' Windows x86 frame data at `address` (see
    /// [`ForeignCfi::frame_data`]).
    pub fn frame_data(&self, address: u64) -> Option<crate::unwind::frame_data::FrameData<'_>> {
        let (rules, base) = self.foreign.as_ref()?;
        rules.frame_data(address.wrapping_sub(*base))
    }

    /// The foreign rules' parameter size of the function at `address` (see
    /// [`ForeignCfi::parameter_size`]).
    pub fn parameter_size(&self, address: u64) -> Option<u32> {
        let (rules, base) = self.foreign.as_ref()?;
        rules.parameter_size(address.wrapping_sub(*base))
    }

    /// Whether the module's file is missing (see [`UnwindInfo::without_file`]).
    pub fn is_missing(&self) -> bool {
        self.missing
    }

    /// The file's bytes (shared, e.g. with a symbol table reader).
    pub fn data(&self) -> &std::sync::Arc<Data> {
        &self.data
    }

    fn section_bytes(&self, s: SectionInfo) -> &[u8] {
        // Checked against the data's length in `new`.
        &self.data[s.file_offset as usize..(s.file_offset + s.size) as usize]
    }

    /// `.debug_frame`'s bytes: in the separate debug file, if it came from one.
    fn debug_frame_bytes(&self, s: SectionInfo) -> &[u8] {
        let data =
            (self.debug_frame_data.as_deref().or(self.debug_data.as_deref())).unwrap_or(&self.data);
        &data[s.file_offset as usize..(s.file_offset + s.size) as usize]
    }

    /// Whether `.debug_frame` comes from a separate debug file.
    pub fn has_separate_debug_frame(&self) -> bool {
        self.debug_data.is_some()
    }

    /// The size of an address in the CFI (`DW_EH_PE_absptr` pointers,
    /// `.debug_frame` initial locations): the architecture's word.
    fn address_size(&self) -> u8 {
        self.arch.word_size() as u8
    }

    fn eh_frame(&self) -> Option<EhFrame<Slice<'_>>> {
        let s = self.sections.eh_frame?;
        let mut eh = EhFrame::new(self.section_bytes(s), LittleEndian);
        eh.set_address_size(self.address_size());
        eh.set_vendor(self.arch.gimli_vendor());
        Some(eh)
    }

    fn debug_frame(&self) -> Option<DebugFrame<Slice<'_>>> {
        let s = self.sections.debug_frame?;
        let mut df = DebugFrame::new(self.debug_frame_bytes(s), LittleEndian);
        df.set_address_size(self.address_size());
        df.set_vendor(self.arch.gimli_vendor());
        Some(df)
    }

    /// Find `.eh_frame_hdr`'s search table. Every linker (ld, gold, lld,
    /// mold) writes it as `DW_EH_PE_datarel | DW_EH_PE_sdata4` pairs; other
    /// encodings, or a table that claims more rows than the section holds,
    /// are not used (the FDEs are indexed instead). Checked once, in O(1).
    fn parse_hdr_table(&self) -> Option<HdrTable> {
        let hdr = self.sections.eh_frame_hdr?;
        self.sections.eh_frame?;
        let bytes = self.section_bytes(hdr);
        let (&[version, ptr_enc, count_enc, table_enc], rest) = bytes.split_first_chunk::<4>()?;
        if version != 1 || table_enc != DW_EH_PE_DATAREL_SDATA4 {
            return None;
        }
        let ptr_len = encoded_len(ptr_enc)?;
        let count_len = encoded_len(count_enc)?;
        let count_bytes = rest.get(ptr_len..ptr_len + count_len)?;
        let count = match count_enc & 0x0f {
            0x03 | 0x0b => u64::from(u32::from_le_bytes(count_bytes.try_into().ok()?)),
            0x04 | 0x0c => u64::from_le_bytes(count_bytes.try_into().ok()?),
            _ => return None,
        };
        let table_offset = 4 + ptr_len + count_len;
        let available = (bytes.len() - table_offset) as u64 / 8;
        (count <= available && count > 0)
            .then_some(HdrTable { offset: table_offset, rows: count as usize })
    }

    /// Field `col` of row `row` of the search table (0: the FDE's start
    /// address, 1: the FDE's address), resolved against the section.
    fn hdr_field(&self, hdr: SectionInfo, table: HdrTable, row: usize, col: usize) -> u64 {
        let at = table.offset + row * 8 + col * 4;
        let bytes = &self.section_bytes(hdr)[at..at + 4];
        let rel = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        hdr.address.wrapping_add(i64::from(rel) as u64) & self.arch.address_mask()
    }

    /// The first row of the search table starting above `address` (rows are
    /// sorted by start address), or `table.rows`.
    fn hdr_first_above(&self, hdr: SectionInfo, table: HdrTable, address: u64) -> usize {
        let (mut lo, mut hi) = (0, table.rows);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.hdr_field(hdr, table, mid, 0) <= address {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The `.eh_frame` offset of the FDE whose row in the search table is
    /// the last starting at or below `address`.
    fn hdr_lookup(&self, table: HdrTable, address: u64) -> Option<usize> {
        let hdr = self.sections.eh_frame_hdr?;
        let eh = self.sections.eh_frame?;
        let row = self.hdr_first_above(hdr, table, address).checked_sub(1)?;
        let offset = self.hdr_field(hdr, table, row, 1).checked_sub(eh.address)?;
        (offset < eh.size).then_some(offset as usize)
    }

    /// The lowest start address of an FDE above ELF address `address`.
    fn next_fde_start(&self, address: u64) -> Option<u64> {
        let after = |index: &[IndexEntry]| {
            index.get(index.partition_point(|e| e.start <= address)).map(|e| e.start)
        };
        let in_table = match (self.hdr_table, self.sections.eh_frame_hdr) {
            (Some(table), Some(hdr)) => {
                let row = self.hdr_first_above(hdr, table, address);
                (row < table.rows).then(|| self.hdr_field(hdr, table, row, 0))
            }
            _ => None,
        };
        [in_table, after(&self.eh_index), after(&self.debug_index)].into_iter().flatten().min()
    }

    /// The function holding the entry point, the outermost frame of the
    /// stack the program starts on, if the file has an entry point. Its
    /// extent is that of a function symbol with a size that holds the entry
    /// point (the file's, else its separate debug file's); else, for a
    /// stripped file, a guess: from the entry point to the first of the next
    /// FDE, the next function symbol, the end of its code segment, and
    /// `ENTRY_FUNCTION_MAX` bytes (functions without CFI after `_start` may
    /// lie inside it). Found once, when first asked.
    pub fn entry_function(&self) -> Option<&EntryFunction> {
        let entry = self.sections.entry?;
        self.entry_function.get_or_init(|| self.find_entry_function(entry)).as_ref()
    }

    fn find_entry_function(&self, entry: u64) -> Option<EntryFunction> {
        let files = [Some(&self.data), self.debug_data.as_ref()];
        let bounds: Vec<_> = files
            .into_iter()
            .flatten()
            .filter_map(|data| crate::space::symtab::function_bounds(data, entry).ok())
            .collect();
        if let Some(range) = bounds.iter().find_map(|b| b.covering.clone()) {
            return Some(EntryFunction { range, by_symbol: true });
        }
        let segment_end = self
            .sections
            .code
            .iter()
            .find(|s| entry.wrapping_sub(s.address) < s.size)
            .map(|s| s.address.saturating_add(s.size));
        let end = bounds
            .iter()
            .filter_map(|b| b.next_start)
            .chain([self.next_fde_start(entry), segment_end].into_iter().flatten())
            .fold(entry.saturating_add(ENTRY_FUNCTION_MAX), u64::min);
        // A bare label at the entry point (musl's `_start`) names a function
        // there as surely as a sized symbol: it reaches to the next one.
        let by_symbol = bounds.iter().any(|b| b.labelled);
        (entry < end).then_some(EntryFunction { range: entry..end, by_symbol })
    }

    /// Whether ELF address `address` is in Go's `runtime.sigpanic` (or
    /// `runtime.sigpanic0`, its assembly entry), whose rows are taken for a
    /// signal frame's. Where a goroutine faults, the runtime's signal handler
    /// makes it call sigpanic as if from the faulting instruction: it pushes
    /// that instruction's address as the return address (on aarch64, puts it
    /// in lr) and resumes at sigpanic. Its caller is then the interrupted
    /// frame, to be looked up at its pc, as Go's own traceback does: at pc − 1
    /// a fault at a function's first instruction (a nil pointer's field read
    /// by a leaf) is looked up in the function before it. The functions are
    /// found by name in the program's symbols ([`UnwindInfo::code_map`]).
    pub fn in_go_sigpanic(&self, address: u64) -> bool {
        self.sections.go && self.code_map().go_sigpanic(address)
    }

    /// Whether the file is a Go program (`.gopclntab` or `.go.buildinfo`).
    pub fn is_go(&self) -> bool {
        self.sections.go
    }

    /// Where the file's functions are by its symbols (`.symtab`, its debug
    /// file's, else `.dynsym`: whichever names more) and where its PLT is,
    /// read when first asked: for the scan's few questions about which
    /// function a call calls (see `fallback::Context::scan`), and where Go's
    /// runtime functions are.
    pub fn code_map(&self) -> &crate::space::codemap::CodeMap {
        self.code_map.get_or_init(|| {
            // A missing file's functions, as its foreign rules' file knows them.
            if let (true, Some((rules, base))) = (self.missing, &self.foreign) {
                let shift = |r: Range<u64>| r.start.wrapping_add(*base)..r.end.wrapping_add(*base);
                let functions = rules.functions().into_iter().map(shift);
                return crate::space::codemap::CodeMap::of_functions(functions);
            }
            let debug = self.debug_data.as_ref().map(|d| &d[..]);
            crate::space::codemap::CodeMap::of(&self.data, debug)
        })
    }

    /// Whether ELF address `address` is in an executable segment (anywhere
    /// in the module when its segments are unknown).
    pub fn is_code(&self, address: u64) -> bool {
        let code = &self.sections.code;
        code.is_empty() || code.iter().any(|s| address.wrapping_sub(s.address) < s.size)
    }

    /// The (up to) `len` bytes of code right before ELF address `address`,
    /// from the file: fewer at the start of a segment, None where the file
    /// does not hold them.
    pub fn code_before(&self, address: u64, len: usize) -> Option<&[u8]> {
        let s = self.sections.code.iter().find(|s| {
            let off = address.wrapping_sub(s.address);
            off > 0 && off <= s.file_size.min(s.size)
        })?;
        let end = address - s.address;
        self.segment_bytes(s, end.saturating_sub(len as u64)..end)
    }

    /// The (up to) `len` bytes of code from ELF address `address` on, from
    /// the file: fewer at the end of a segment, None where the file does not
    /// hold it.
    pub fn code_at(&self, address: u64, len: usize) -> Option<&[u8]> {
        let s = self
            .sections
            .code
            .iter()
            .find(|s| address.wrapping_sub(s.address) < s.file_size.min(s.size))?;
        let start = address - s.address;
        self.segment_bytes(s, start..start.saturating_add(len as u64).min(s.file_size.min(s.size)))
    }

    /// The file's bytes of code segment `s` at offsets `range` into it.
    fn segment_bytes(&self, s: &CodeSegment, range: Range<u64>) -> Option<&[u8]> {
        let file_start = usize::try_from(s.file_offset.checked_add(range.start)?).ok()?;
        let file_end = usize::try_from(s.file_offset.checked_add(range.end)?).ok()?;
        self.data.get(file_start..file_end)
    }

    /// The entry point (`e_entry`, an ELF address), where the file has one.
    pub fn entry(&self) -> Option<u64> {
        self.sections.entry
    }

    /// The module's `.sframe` table, where it has one this unwinder reads
    /// (its header checked, for the module's architecture).
    pub fn sframe(&self) -> Option<sframe::SFrame<'_>> {
        let s = self.sections.sframe?;
        sframe::SFrame::parse(self.section_bytes(s), s.address, self.arch).ok()
    }

    /// Why the module's `.sframe` table cannot be read, where it has one.
    pub fn sframe_error(&self) -> Option<&'static str> {
        let s = self.sections.sframe?;
        sframe::SFrame::parse(self.section_bytes(s), s.address, self.arch).err()
    }

    /// Whether the module has any call frame information at all.
    pub fn has_cfi(&self) -> bool {
        self.sections.eh_frame.is_some()
            || self.sections.debug_frame.is_some()
            || self.ehabi().is_some()
            || self.sframe().is_some()
    }

    /// The bytes of an expression a rule refers to.
    pub fn expr_bytes(&self, e: ExprRef) -> &[u8] {
        let bytes = match e.section {
            SectionKind::EhFrame => self.sections.eh_frame.map(|s| self.section_bytes(s)),
            SectionKind::DebugFrame => self.sections.debug_frame.map(|s| self.debug_frame_bytes(s)),
        }
        .unwrap_or(&[]);
        let start = e.offset as usize;
        bytes.get(start..start + e.len as usize).unwrap_or(&[])
    }

    /// The rules in force at `address` (an ELF address, bias removed), with
    /// the FDE's ELF address range. `.eh_frame` is tried first, then
    /// `.debug_frame`. Columns the unwinder does not track (vector
    /// registers) are left out. `exact`: `address` is a pc (frame 0's, an
    /// interrupted frame's), not a return address less one (which only
    /// rules from elsewhere tell apart: a PE file's, whose epilogs are read).
    pub fn find_row(
        &self,
        address: u64,
        exact: bool,
        ctx: &mut UnwindContext<usize>,
    ) -> Result<(Row, Range<u64>), LookupError> {
        if let Some((rules, base)) = &self.foreign {
            return foreign_row(&**rules, self.arch, *base, address, exact);
        }
        let dwarf = self.with_row(address, ctx, |row, cie, kind| {
            let cfa = self.decoded_cfa(convert_cfa(row, kind)?);
            let signal_frame = cie.is_signal_trampoline() || self.in_go_sigpanic(address);
            let mut out = Row::new(cfa, return_column(cie)?, signal_frame);
            convert_rules(row, kind, |reg, rule| {
                // A row holds each column once and at most NUM_REGS tracked
                // ones, so there is always room.
                if (reg as usize) < NUM_REGS {
                    out.push(reg, self.decoded_rule(rule));
                }
            })?;
            Ok(out)
        });
        self.dwarf_or_ehabi(address, exact, dwarf, |row| row)
    }

    /// A CFA expression of the one form a rule holds without it
    /// ([`CfaRule::DerefRegister`]) as that rule; any other as it is.
    fn decoded_cfa(&self, cfa: CfaRule) -> CfaRule {
        match cfa {
            CfaRule::Expr(e) => match register_offset(self.expr_bytes(e), true) {
                Some((reg, offset)) => CfaRule::DerefRegister { reg, offset },
                None => cfa,
            },
            _ => cfa,
        }
    }

    /// A register's expression of the one form a rule holds without it
    /// ([`RegRule::AtRegister`]) as that rule; any other as it is.
    fn decoded_rule(&self, rule: RegRule) -> RegRule {
        match rule {
            RegRule::Expr(e) => match register_offset(self.expr_bytes(e), false) {
                Some((reg, offset)) => RegRule::AtRegister { reg, offset },
                None => rule,
            },
            _ => rule,
        }
    }

    /// Like [`Module::find_row`], but with every column the CFI gives a rule
    /// for, tracked or not: for introspection.
    pub fn find_full_row(
        &self,
        address: u64,
        exact: bool,
        ctx: &mut UnwindContext<usize>,
    ) -> Result<(FullRow, Range<u64>), LookupError> {
        if let Some((rules, base)) = &self.foreign {
            let (row, range) = foreign_row(&**rules, self.arch, *base, address, exact)?;
            return Ok((row.into(), range));
        }
        let sigpanic = self.in_go_sigpanic(address);
        let dwarf =
            self.with_row(address, ctx, |row, cie, kind| full_row(row, cie, kind, sigpanic));
        self.dwarf_or_ehabi(address, exact, dwarf, FullRow::from)
    }

    /// The DWARF CFI row at `address` (`.eh_frame`, else `.debug_frame`;
    /// no other tables) with every column, and the addresses the row itself
    /// holds over: what other tables of the same code are compared with.
    pub fn dwarf_row(
        &self,
        address: u64,
        ctx: &mut UnwindContext<usize>,
    ) -> Result<(FullRow, Range<u64>), LookupError> {
        let found = self.with_row(address, ctx, |row, cie, kind| {
            Ok((full_row(row, cie, kind, false)?, row.start_address()..row.end_address()))
        });
        found.map(|(row, _)| row)
    }

    /// The address ranges of every FDE of `.eh_frame` (and `.debug_frame`),
    /// sorted.
    pub fn fde_ranges(&self) -> Vec<Range<u64>> {
        let mut index = match self.eh_frame() {
            Some(eh) if self.eh_index.is_empty() => build_index(&eh, &self.bases).0,
            _ => self.eh_index.clone(),
        };
        index.extend_from_slice(&self.debug_index);
        index.sort_unstable_by_key(|e| (e.start, e.end));
        index.into_iter().map(|e| e.start..e.end).collect()
    }

    /// Find the FDE covering `address`, run its instructions up to it, and
    /// hand the row to `convert`.
    fn with_row<T>(
        &self,
        address: u64,
        ctx: &mut UnwindContext<usize>,
        convert: impl FnOnce(&UnwindTableRow<usize>, &Cie<'_>, SectionKind) -> Result<T, LookupError>,
    ) -> Result<(T, Range<u64>), LookupError> {
        if let Some(eh) = self.eh_frame() {
            let found = match self.hdr_table {
                Some(table) => match self.hdr_lookup(table, address) {
                    Some(offset) => {
                        let fde = eh.fde_from_offset(
                            &self.bases,
                            offset.into(),
                            EhFrame::cie_from_offset,
                        )?;
                        fde.contains(address).then_some(fde)
                    }
                    None => None,
                },
                None => self.indexed_fde(&eh, &self.eh_index, address)?,
            };
            if let Some(fde) = found {
                let row = fde.unwind_info_for_address(&eh, &self.bases, ctx, address)?;
                let out = convert(row, fde.cie(), SectionKind::EhFrame)?;
                return Ok((out, fde.initial_address()..fde.end_address()));
            }
        }
        if let Some(df) = self.debug_frame() {
            if let Some(fde) = self.indexed_fde(&df, &self.debug_index, address)? {
                let row = fde.unwind_info_for_address(&df, &self.bases, ctx, address)?;
                let out = convert(row, fde.cie(), SectionKind::DebugFrame)?;
                return Ok((out, fde.initial_address()..fde.end_address()));
            }
        }
        Err(LookupError::NoFde)
    }

    /// The FDE covering `address` according to a sorted index.
    fn indexed_fde<'d, S: UnwindSection<Slice<'d>>>(
        &'d self,
        section: &S,
        index: &[IndexEntry],
        address: u64,
    ) -> Result<Option<Fde<'d>>, LookupError> {
        let pos = index.partition_point(|e| e.start <= address);
        // Overlapping FDEs are rare; look at the nearest few that start below.
        for entry in index[..pos].iter().rev().take(4) {
            if address < entry.end {
                let offset = S::Offset::from(entry.offset);
                return Ok(Some(section.fde_from_offset(
                    &self.bases,
                    offset,
                    S::cie_from_offset,
                )?));
            }
        }
        Ok(None)
    }
}

/// A gimli row as a [`FullRow`]: every column.
fn full_row(
    row: &UnwindTableRow<usize>,
    cie: &Cie<'_>,
    kind: SectionKind,
    signal_frame: bool,
) -> Result<FullRow, LookupError> {
    let mut rules = Vec::new();
    convert_rules(row, kind, |reg, rule| rules.push((reg, rule)))?;
    Ok(FullRow {
        cfa: convert_cfa(row, kind)?,
        ra: cie.return_address_register().0,
        signal_frame: signal_frame || cie.is_signal_trampoline(),
        rules,
    })
}

/// Index every FDE of a section once, sorted by start address. An FDE that
/// does not parse (a bad CIE pointer, say) is skipped, since its length still
/// leads to the next entry; an entry whose length is damaged stops the walk.
/// Returns the entries found and the first error met.
fn build_index<'d, S: UnwindSection<Slice<'d>>>(
    section: &S,
    bases: &BaseAddresses,
) -> (Vec<IndexEntry>, Option<gimli::Error>) {
    let mut index = Vec::new();
    let mut entries = section.entries(bases);
    let mut error = None;
    loop {
        match entries.next() {
            Ok(None) => break,
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(Some(CieOrFde::Fde(partial))) => match partial.parse(S::cie_from_offset) {
                Ok(fde) if fde.len() > 0 => index.push(IndexEntry {
                    start: fde.initial_address(),
                    end: fde.end_address(),
                    offset: fde.offset(),
                }),
                Ok(_) => {}
                Err(e) => {
                    error.get_or_insert(e);
                }
            },
            Err(e) => {
                error.get_or_insert(e);
                break;
            }
        }
    }
    index.sort_unstable_by_key(|e| (e.start, e.end));
    (index, error)
}
