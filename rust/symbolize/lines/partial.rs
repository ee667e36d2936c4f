//! A compressed `.debug_info` of which only the units looked up are read.
//!
//! A distribution's debug file compresses its sections with zlib, and a
//! zlib stream is read from its start: the unit at 40% of libc's 5.8 MB of
//! `.debug_info` costs 40% of the 30–40 ms it takes to decompress it all,
//! and addr2line, given the whole section, parses every unit's header,
//! abbreviations and line-program header (30 MB for libc's 1,900 units).
//! A crash's stack, or a profile's hot code, touches a few units of each
//! library, found by address in `.debug_aranges`. The section is
//! decompressed only as far as the furthest of them, and addr2line is given
//! a view of it that holds those units at their own offsets, each run of
//! the others replaced by one empty type unit (which addr2line skips): it
//! parses what the lookups need and nothing else. Units needed later get a
//! view, and a context, of their own: those parsed already are not parsed
//! again (no unit refers into another here, see below).
//!
//! The whole section is given instead (decompressed to its end, parsed
//! once) when an address of the file's code (`.text`) is in no arange
//! (clang writes none; an address outside the code, in the PLT say, is in
//! no unit), when a unit may refer into another (`DW_FORM_ref_addr`: LTO
//! builds, whose inlined functions are described in other units), and once
//! lookups have needed many units (a profile all over the file: the views
//! would cost more than the whole).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use gimli::{Endianity, Reader as _};

use super::SectionBytes;
use crate::source::memory::Data;
use crate::space::sections::plausible;

/// Below this size a section is decompressed whole.
pub(super) const MIN_PARTIAL: u64 = 256 << 10;

/// Past this many units, the whole section.
const MAX_UNITS: usize = 48;

/// The run of units a view leaves out is one DWARF 5 type unit (32-bit):
/// length, version, unit type, address size, abbreviations' offset, type
/// signature, type offset. A shorter run is kept as it is.
const SKIP_UNIT: usize = 24;

/// A section read as far as asked: a zlib stream decompressed up to there,
/// or the section's bytes as they are.
pub(super) enum Lazy {
    Plain(SectionBytes),
    Zlib(Box<Inflating>),
    /// The section cache's entry, each block checked as it is first read;
    /// where one is damaged, the zlib stream is read instead.
    Cached(Box<Checked>),
}

/// A cached section, its blocks checked as read, and the zlib stream it
/// was decompressed from.
pub(super) struct Checked {
    bytes: SectionBytes,
    blocks: super::cache::Blocks,
    stream: SectionBytes,
    full: u64,
}

/// A zlib stream and what has been decompressed of it.
pub(super) struct Inflating {
    stream: SectionBytes,
    inflater: flate2::Decompress,
    /// Decompressed so far, while growing; empty when `given` holds it.
    out: Vec<u8>,
    /// What was decompressed when a prefix was last given out: the prefix
    /// is a range of it, and it is copied into `out` only to grow.
    given: Option<Arc<Data>>,
    /// The section's size once decompressed.
    full: usize,
    /// The stream cannot be read further (damaged, or shorter than it
    /// says): what was decompressed is all there is.
    stuck: bool,
}

impl Lazy {
    /// The zlib `stream` of a section of `full` bytes; None where that is
    /// more than zlib can expand it to ([`plausible`]).
    pub(super) fn zlib(stream: SectionBytes, full: u64) -> Option<Lazy> {
        if !plausible(object::CompressionFormat::Zlib, stream.len(), full) {
            return None;
        }
        let full = usize::try_from(full).ok()?;
        let inflater = flate2::Decompress::new(true);
        Some(Lazy::Zlib(Box::new(Inflating {
            stream,
            inflater,
            out: Vec::new(),
            given: None,
            full,
            stuck: false,
        })))
    }

    /// The section cache's entry `bytes`, its `blocks` checked as they are
    /// read, decompressed from the zlib `stream` of a section of `full`
    /// bytes (read instead where a block is damaged).
    pub(super) fn cached(
        bytes: SectionBytes,
        blocks: super::cache::Blocks,
        stream: SectionBytes,
        full: u64,
    ) -> Lazy {
        Lazy::Cached(Box::new(Checked { bytes, blocks, stream, full }))
    }

    /// What can be read now (of a cached section: after [`Lazy::ensure_range`]).
    fn bytes(&self) -> &[u8] {
        match self {
            Lazy::Plain(bytes) => bytes,
            Lazy::Zlib(z) => z.bytes(),
            Lazy::Cached(c) => &c.bytes,
        }
    }

    /// Whether more cannot be read.
    fn exhausted(&self) -> bool {
        match self {
            Lazy::Plain(_) | Lazy::Cached(_) => true,
            Lazy::Zlib(z) => z.stuck || z.bytes().len() >= z.full,
        }
    }

    /// Reads on until the bytes in `range` can be read (at most the whole
    /// section), or the stream stops; of a cached section, checks their
    /// blocks, and where one is damaged, reads the stream instead. A cached
    /// section is read only through this (`.debug_info`'s units).
    fn ensure_range(&mut self, range: Range<usize>) {
        if let Lazy::Cached(c) = self {
            if c.blocks.check(range.clone()) {
                return;
            }
            c.blocks.discard();
            let (stream, full) = (c.stream.clone(), c.full);
            // A stream that cannot hold the section: nothing to read.
            *self = Lazy::zlib(stream, full)
                .unwrap_or_else(|| Lazy::Plain(SectionBytes::whole(Vec::new())));
        }
        self.ensure(range.end);
    }

    /// Reads on until `end` bytes can be read (at most the whole section),
    /// or the stream stops. (A cached section's bytes can all be read, but
    /// only those checked are to be: [`Lazy::ensure_range`].)
    fn ensure(&mut self, end: usize) {
        if let Lazy::Zlib(z) = self {
            z.inflate_to(end);
        }
    }

    /// The first `end` bytes, for addr2line (all of them, for plain bytes).
    fn prefix(&mut self, end: usize) -> SectionBytes {
        match self {
            Lazy::Plain(bytes) => bytes.clone(),
            Lazy::Zlib(z) => {
                let given = z.give();
                let range = 0..end.min(given.len());
                SectionBytes { data: given, range }
            }
            Lazy::Cached(_) => {
                self.ensure_range(0..end);
                match self {
                    Lazy::Cached(c) => {
                        let mut bytes = c.bytes.clone();
                        bytes.range.end = bytes.range.start + end.min(bytes.range.len());
                        bytes
                    }
                    _ => self.prefix(end),
                }
            }
        }
    }

    /// The whole section (as much of it as the stream holds); nothing can be
    /// read of it after.
    fn whole(&mut self) -> SectionBytes {
        match self {
            Lazy::Plain(bytes) => bytes.clone(),
            Lazy::Zlib(z) => {
                z.inflate_to(z.full);
                let given = z.give();
                z.stuck = true;
                let range = 0..given.len();
                SectionBytes { data: given, range }
            }
            Lazy::Cached(c) => {
                let len = c.bytes.len();
                self.ensure_range(0..len);
                match self {
                    Lazy::Cached(c) => c.bytes.clone(),
                    _ => self.whole(),
                }
            }
        }
    }
}

impl Inflating {
    /// What was decompressed.
    fn bytes(&self) -> &[u8] {
        match &self.given {
            Some(given) if self.out.is_empty() => given,
            _ => &self.out,
        }
    }

    /// What was decompressed, to give out: the buffer itself, kept.
    fn give(&mut self) -> Arc<Data> {
        if !self.out.is_empty() || self.given.is_none() {
            self.given = Some(Arc::new(Data::Owned(std::mem::take(&mut self.out))));
        }
        self.given.clone().unwrap_or_else(|| Arc::new(Data::Owned(Vec::new())))
    }

    /// Decompresses until `target` bytes are (at most the whole section),
    /// or the stream stops.
    fn inflate_to(&mut self, target: usize) {
        let target = target.min(self.full);
        if self.bytes().len() >= target || self.stuck {
            return;
        }
        if self.out.capacity() == 0 {
            // (Capacity only: pages are touched as they are written.)
            if self.out.try_reserve_exact(self.full).is_err() {
                self.stuck = true;
                return;
            }
            // What was given out, copied to grow on.
            if let Some(given) = &self.given {
                self.out.extend_from_slice(given);
            }
        }
        let mut buf = vec![0u8; 256 << 10];
        while self.out.len() < target && !self.stuck {
            let want = (target - self.out.len()).min(buf.len());
            let (read, written) = (self.inflater.total_in(), self.inflater.total_out());
            let input = self.stream.get(read as usize..).unwrap_or_default();
            let status =
                self.inflater.decompress(input, &mut buf[..want], flate2::FlushDecompress::None);
            let produced = (self.inflater.total_out() - written) as usize;
            self.out.extend_from_slice(&buf[..produced]);
            match status {
                Ok(flate2::Status::Ok) if produced > 0 => {}
                // The end of the stream (the section ends here, whatever its header said), no
                // progress, or a damaged stream.
                _ => self.stuck = self.out.len() < self.full,
            }
        }
    }
}

/// A unit in the view: its length, and where its abbreviations and its
/// line program end (0: it has none).
#[derive(Clone, Copy)]
struct Unit {
    len: usize,
    abbrev_end: usize,
    line_end: usize,
}

/// `.debug_info`, `.debug_abbrev` and `.debug_line` as addr2line is to
/// read them now: a view of the units a cover added (`units`, their
/// offsets), or the whole sections (`units` empty).
pub(super) struct Given {
    pub info: SectionBytes,
    pub abbrev: SectionBytes,
    pub line: SectionBytes,
    pub units: Vec<usize>,
}

/// The decompressed bytes of a compressed `.debug_info`, its abbreviations
/// and line programs, as far as needed, and the units looked up in it.
pub(super) struct PartialInfo {
    info: Lazy,
    abbrev: Lazy,
    line: Lazy,
    /// The whole sections have been given out.
    whole: bool,
    endian: gimli::RunTimeEndian,
    /// `.debug_aranges`: (start, end, offset of the unit), by start.
    aranges: Vec<(u64, u64, usize)>,
    /// The file's code (its `.text` sections): where an address in no
    /// arange may still be in a unit.
    code: Vec<Range<u64>>,
    /// The units in the view, by offset.
    units: BTreeMap<usize, Unit>,
}

/// What [`PartialInfo::new`] reads.
pub(super) struct Parts {
    /// `.debug_info` (a zlib stream), `.debug_abbrev`, `.debug_line`.
    pub info: Lazy,
    pub abbrev: Lazy,
    pub line: Lazy,
    /// `.debug_aranges`, decompressed.
    pub aranges: SectionBytes,
    /// The address ranges of the file's `.text` sections.
    pub code: Vec<Range<u64>>,
}

impl PartialInfo {
    /// The sections to read in part; None without aranges (every lookup
    /// would need the whole of them).
    pub(super) fn new(parts: Parts, endian: gimli::RunTimeEndian) -> Option<PartialInfo> {
        let aranges = read_aranges(&parts.aranges, endian);
        if aranges.is_empty() {
            return None;
        }
        Some(PartialInfo {
            info: parts.info,
            abbrev: parts.abbrev,
            line: parts.line,
            whole: false,
            endian,
            aranges,
            code: parts.code,
            units: BTreeMap::new(),
        })
    }

    /// Whether the whole sections have been given out: no lookup can need
    /// more.
    pub(super) fn done(&self) -> bool {
        self.whole
    }

    /// The sections to give addr2line when the units of the ELF addresses
    /// are not all in those given out before: a view of `.debug_info` with
    /// the units not given out yet (a context of their own: the units given
    /// out before are parsed already, and no unit refers into another), with
    /// what they need of the others, or the whole sections; None when they
    /// are all given out.
    pub(super) fn cover(&mut self, addresses: impl IntoIterator<Item = u64>) -> Option<Given> {
        if self.whole {
            return None;
        }
        let (mut added, mut whole) = (Vec::new(), false);
        for address in addresses {
            let Some(offset) = self.unit_of(address) else {
                // Outside the code: in no unit. In it: in a unit without aranges, perhaps.
                whole = self.code.is_empty() || self.code.iter().any(|c| c.contains(&address));
                if whole {
                    break;
                }
                continue;
            };
            if self.units.contains_key(&offset) {
                continue;
            }
            match self.read_unit(offset) {
                Some(unit) => {
                    self.units.insert(offset, unit);
                    added.push(offset);
                }
                None => {
                    whole = true;
                    break;
                }
            }
        }
        if whole || self.units.len() > MAX_UNITS {
            return Some(self.give_whole());
        }
        if added.is_empty() {
            return None;
        }
        added.sort_unstable();
        self.view(added).or_else(|| Some(self.give_whole()))
    }

    /// The whole sections (as much of them as the streams hold), parsed once.
    fn give_whole(&mut self) -> Given {
        self.whole = true;
        let mut info = self.info.whole();
        // A damaged stream: up to the last whole unit.
        info.range.end = info.range.start + units_end(&info, self.endian);
        Given { info, abbrev: self.abbrev.whole(), line: self.line.whole(), units: Vec::new() }
    }

    /// The unit at `offset`, decompressed with its abbreviations and line
    /// program; None where it is damaged or may refer into other units
    /// (an abbreviation with `DW_FORM_ref_addr`, or `DW_FORM_indirect`
    /// which could be it): a view would not do.
    fn read_unit(&mut self, offset: usize) -> Option<Unit> {
        self.info.ensure_range(offset..offset.saturating_add(12));
        let len = unit_length(self.info.bytes().get(offset..)?, self.endian)?;
        self.info.ensure_range(offset..offset.checked_add(len)?);
        if offset + len > self.info.bytes().len() {
            return None;
        }
        let header = gimli::DebugInfo::new(self.info.bytes(), self.endian)
            .header_from_offset(gimli::DebugInfoOffset(offset))
            .ok()?;
        let table = header.debug_abbrev_offset().0;
        self.abbrev.ensure(table.saturating_add(4 << 10));
        let (refers_out, table_len) = loop {
            if let Some(found) = scan_abbrevs(self.abbrev.bytes().get(table..)?, self.endian) {
                break found;
            }
            if self.abbrev.exhausted() {
                return None;
            }
            self.abbrev.ensure(self.abbrev.bytes().len().saturating_add(64 << 10));
        };
        if refers_out {
            return None;
        }
        let abbrev_end = table + table_len;
        let program = line_program(&header, self.abbrev.bytes(), self.endian);
        let line_end = program.and_then(|at| self.line_program_end(at)).unwrap_or(0);
        Some(Unit { len, abbrev_end, line_end })
    }

    /// Where the line program at `program` ends, read on to there; None
    /// where it cannot be read.
    fn line_program_end(&mut self, program: usize) -> Option<usize> {
        self.line.ensure(program.saturating_add(12));
        let len = unit_length(self.line.bytes().get(program..)?, self.endian)?;
        let end = program.checked_add(len)?;
        self.line.ensure(end);
        (end <= self.line.bytes().len()).then_some(end)
    }

    /// `.debug_info` with only the units at `offsets` (sorted, read), at
    /// their offsets, up to the end of the last; the units between them one
    /// empty type unit per run. The memory of what is left out is never
    /// touched. With it, the abbreviations and line programs up to the last
    /// these units use. None where units read overlap (aranges naming a
    /// unit inside another: damaged).
    fn view(&mut self, offsets: Vec<usize>) -> Option<Given> {
        let mut ends = 0;
        for (&offset, unit) in &self.units {
            if offset < ends {
                return None;
            }
            ends = offset + unit.len;
        }
        // What the view copies: the units (checked as read), and the runs between them too
        // short for an empty unit, kept as they are. (A damaged block of a cached section
        // found now: the stream is read to the end of the view.)
        let mut at = 0;
        for offset in &offsets {
            if offset - at < SKIP_UNIT {
                self.info.ensure_range(at..*offset);
            }
            at = offset + self.units.get(offset)?.len;
        }
        // The last unit's end (none: no view).
        let end = offsets.last().map(|_| at)?;
        self.info.ensure(end);
        let unit = |offset: &usize| self.units.get(offset).copied();
        let mut view = memmap2::MmapMut::map_anon(end).ok()?;
        let (mut at, mut abbrev_end, mut line_end) = (0, 0, 0);
        let info = self.info.bytes();
        for offset in &offsets {
            let (offset, unit) = (*offset, unit(offset)?);
            self.fill_gap(&mut view[at..offset], info.get(at..offset)?);
            view[offset..offset + unit.len].copy_from_slice(info.get(offset..offset + unit.len)?);
            at = offset + unit.len;
            abbrev_end = abbrev_end.max(unit.abbrev_end);
            line_end = line_end.max(unit.line_end);
        }
        let data = Arc::new(Data::Anonymous(view.make_read_only().ok()?));
        Some(Given {
            info: SectionBytes { data, range: 0..end },
            abbrev: self.abbrev.prefix(abbrev_end),
            line: self.line.prefix(line_end),
            units: offsets,
        })
    }

    /// The units `real` of the section, left out of a view: an empty type
    /// unit in their place, or themselves where there is no room for one.
    fn fill_gap(&self, gap: &mut [u8], real: &[u8]) {
        let len = gap.len();
        match u32::try_from(len.saturating_sub(4)) {
            Ok(length) if len >= SKIP_UNIT && length < 0xffff_fff0 => {
                self.endian.write_u32(&mut gap[..4], length);
                self.endian.write_u16(&mut gap[4..6], 5);
                gap[6] = gimli::DW_UT_type.0;
                gap[7] = 8; // address size; the abbreviations' offset, signature and type offset 0
            }
            _ => gap.copy_from_slice(real),
        }
    }

    /// The offset of the unit `.debug_aranges` places `address` in.
    pub(super) fn unit_of(&self, address: u64) -> Option<usize> {
        let after = self.aranges.partition_point(|&(start, _, _)| start <= address);
        let &(_, end, offset) = self.aranges.get(after.checked_sub(1)?)?;
        (address < end).then_some(offset)
    }
}

/// An abbreviation table (`.debug_abbrev` from its offset): whether it has
/// an attribute of form `DW_FORM_ref_addr` or `DW_FORM_indirect`, and its
/// length; None where it cannot be read to its end.
fn scan_abbrevs(table: &[u8], endian: gimli::RunTimeEndian) -> Option<(bool, usize)> {
    let mut r = gimli::EndianSlice::new(table, endian);
    let mut refers_out = false;
    // Each abbreviation: code, tag, children flag, then (name, form[, implicit
    // constant]) pairs up to (0, 0); the table ends with code 0.
    while r.read_uleb128().ok()? != 0 {
        r.read_uleb128().ok()?;
        r.read_u8().ok()?;
        loop {
            let (name, form) = (r.read_uleb128().ok()?, r.read_uleb128().ok()?);
            if name == 0 && form == 0 {
                break;
            }
            match gimli::DwForm(u16::try_from(form).ok()?) {
                gimli::DW_FORM_ref_addr | gimli::DW_FORM_indirect => refers_out = true,
                gimli::DW_FORM_implicit_const => {
                    r.read_sleb128().ok()?;
                }
                _ => {}
            }
        }
    }
    Some((refers_out, table.len() - r.len()))
}

/// The offset of the line program of the unit of `header` (its root
/// entry's `DW_AT_stmt_list`, read with the abbreviations in `abbrev`);
/// None where it has none or they cannot be read.
fn line_program(
    header: &gimli::UnitHeader<gimli::EndianSlice<'_, gimli::RunTimeEndian>>,
    abbrev: &[u8],
    endian: gimli::RunTimeEndian,
) -> Option<usize> {
    let abbrevs = header.abbreviations(&gimli::DebugAbbrev::new(abbrev, endian)).ok()?;
    let mut entries = header.entries_raw(&abbrevs, None).ok()?;
    let root = entries.read_abbreviation().ok()??;
    let mut program = None;
    for spec in root.attributes() {
        if let gimli::AttributeValue::DebugLineRef(at) = entries.read_attribute(*spec).ok()?.value()
        {
            program = Some(at.0);
        }
    }
    program
}

/// Where the last whole unit at the start of `bytes` ends.
fn units_end(bytes: &[u8], endian: gimli::RunTimeEndian) -> usize {
    let mut end = 0usize;
    while let Some(len) = unit_length(bytes.get(end..).unwrap_or_default(), endian) {
        match end.checked_add(len) {
            Some(next) if next <= bytes.len() => end = next,
            _ => break,
        }
    }
    end
}

/// The length, header included, of the unit at the start of `bytes`; None
/// where its initial length cannot be read or is not one.
fn unit_length(bytes: &[u8], endian: gimli::RunTimeEndian) -> Option<usize> {
    let len32 = endian.read_u32(bytes.get(..4)?);
    let (header, len) = match len32 {
        0xffff_ffff => (12, endian.read_u64(bytes.get(4..12)?)),
        0xffff_fff0.. => return None,
        _ => (4, u64::from(len32)),
    };
    let len = usize::try_from(len).ok()?.checked_add(header)?;
    // A unit has at least a version and more.
    (len > header).then_some(len)
}

/// The address ranges of `.debug_aranges`, with their unit's offset, by
/// start; a damaged set is skipped.
fn read_aranges(bytes: &[u8], endian: gimli::RunTimeEndian) -> Vec<(u64, u64, usize)> {
    let aranges = gimli::DebugAranges::new(bytes, endian);
    let mut out = Vec::new();
    let mut headers = aranges.headers();
    while let Ok(Some(header)) = headers.next() {
        let offset = header.debug_info_offset().0;
        let mut entries = header.entries();
        while let Ok(Some(entry)) = entries.next() {
            let range = entry.range();
            if range.begin < range.end {
                out.push((range.begin, range.end, offset));
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const LE: gimli::RunTimeEndian = gimli::RunTimeEndian::Little;

    fn bytes(bytes: Vec<u8>) -> SectionBytes {
        let range = 0..bytes.len();
        SectionBytes { data: Arc::new(Data::Owned(bytes)), range }
    }

    /// A DWARF 5 compilation unit of `len` bytes in all, its abbreviations
    /// at `abbrev`, filled with `fill`.
    fn unit(len: usize, abbrev: u32, fill: u8) -> Vec<u8> {
        let mut unit = ((len - 4) as u32).to_le_bytes().to_vec();
        unit.extend(5u16.to_le_bytes());
        unit.extend([gimli::DW_UT_compile.0, 8]);
        unit.extend(abbrev.to_le_bytes());
        unit.resize(len, fill);
        unit
    }

    fn zlib(data: &[u8]) -> SectionBytes {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(data).unwrap();
        bytes(enc.finish().unwrap())
    }

    /// One arange set per (unit offset, start, length): version 2, 8-byte
    /// addresses.
    fn aranges(sets: &[(u32, u64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(offset, start, len) in sets {
            let mut set = Vec::new();
            set.extend(2u16.to_le_bytes());
            set.extend(offset.to_le_bytes());
            set.extend([8u8, 0]);
            set.extend([0u8; 4]); // padding to twice the address size
            set.extend(start.to_le_bytes());
            set.extend(len.to_le_bytes());
            set.extend([0u8; 16]);
            out.extend((set.len() as u32).to_le_bytes());
            out.extend(set);
        }
        out
    }

    /// Units of 100, 200 and 300 000 bytes at 0x1000, 0x2000, 0x3000, and a
    /// fourth at 0x4000 that refers into others (its abbreviations, at 8,
    /// have a DW_FORM_ref_addr; the others', at 0, a string; none has a
    /// line program); code from 0x1000 to 0x8000. The section, and what to
    /// read it in part from (.debug_abbrev plain, .debug_line none).
    fn section(stream_cut: bool) -> (Vec<u8>, Parts) {
        let units = [unit(100, 0, 1), unit(200, 0, 2), unit(300_000, 0, 3), unit(50, 8, 4)];
        let section = units.concat();
        let sets = [(0, 0x1000, 0x100), (100, 0x2000, 0x100), (300, 0x3000, 0x100)];
        let sets = aranges(&[sets.as_slice(), &[(300_300, 0x4000, 0x100)]].concat());
        let abbrev = vec![1, 0x11, 0, 0x03, 0x08, 0, 0, 0, 1, 0x11, 0, 0x31, 0x10, 0, 0, 0];
        let mut stream = zlib(&section);
        if stream_cut {
            stream.range.end /= 2;
        }
        let info = Lazy::zlib(stream, section.len() as u64).unwrap();
        let (abbrev, line) = (Lazy::Plain(bytes(abbrev)), Lazy::Plain(bytes(Vec::new())));
        let code = std::iter::once(0x1000..0x8000).collect();
        (section, Parts { info, abbrev, line, aranges: bytes(sets), code })
    }

    fn unit_types(view: &[u8]) -> Vec<gimli::UnitType<usize>> {
        let mut units = gimli::DebugInfo::new(view, LE).units();
        std::iter::from_fn(|| units.next().unwrap()).map(|h| h.type_()).collect()
    }

    /// A lookup in the first unit decompresses and gives the first; one in
    /// the third then gives the third alone, the units before it left out
    /// (one empty type unit in their place, which gimli reads as such; the
    /// first is parsed already, in the context of the view before); the
    /// bytes left out of the view are zeros. One cover that adds the first
    /// and the third gives both, the second left out. An address outside
    /// the code is in no unit.
    #[test]
    fn a_view_holds_the_units_looked_up_at_their_offsets() {
        let skipped = gimli::UnitType::Type {
            type_signature: gimli::DebugTypeSignature(0),
            type_offset: gimli::UnitOffset(0),
        };
        let compiled = gimli::UnitType::Compilation;
        let (whole, parts) = section(false);
        let mut partial = PartialInfo::new(parts, LE).unwrap();
        let first = partial.cover([0x1010, 0x500]).expect("the first unit");
        assert_eq!(&first.info[..], &whole[..100]);
        assert_eq!(first.units, [0]);
        assert!(partial.cover([0x1020, 0x1000, 0x9000]).is_none(), "already in");
        assert!(partial.info.bytes().len() < 1000, "decompressed no further than needed");
        let third = partial.cover([0x30ff]).expect("the third unit");
        assert_eq!(third.units, [300]);
        let view = third.info;
        assert_eq!(view.len(), 300_300);
        assert_eq!(&view[300..], &whole[300..300_300]);
        assert_eq!(&view[..8], &[40, 1, 0, 0, 5, 0, gimli::DW_UT_type.0, 8]);
        assert!(view[8..300].iter().all(|&b| b == 0));
        assert_eq!(unit_types(&view), [skipped, compiled]);
        assert!(!partial.done());

        let (_, parts) = section(false);
        let mut both = PartialInfo::new(parts, LE).unwrap();
        let given = both.cover([0x3000, 0x1000]).expect("two units");
        assert_eq!(given.units, [0, 300]);
        assert_eq!(&given.info[..100], &whole[..100]);
        assert_eq!(&given.info[100..108], &[196, 0, 0, 0, 5, 0, gimli::DW_UT_type.0, 8]);
        assert_eq!(unit_types(&given.info), [compiled, skipped, compiled]);
    }

    /// The whole section: for an address of the code in no arange, for a
    /// unit whose entries may refer into others, and past MAX_UNITS units.
    #[test]
    fn the_whole_section_where_a_view_would_not_do() {
        for addresses in [vec![0x1000, 0x5000], vec![0x4010]] {
            let (section, parts) = section(false);
            let mut partial = PartialInfo::new(parts, LE).unwrap();
            assert_eq!(partial.cover(addresses).map(|g| g.info.to_vec()), Some(section));
            assert!(partial.done());
            assert!(partial.cover([0x1000]).is_none());
        }
        let (whole, parts) = section(false);
        let mut many = PartialInfo::new(parts, LE).unwrap();
        let unit = Unit { len: 1, abbrev_end: 0, line_end: 0 };
        many.units.extend((1..=MAX_UNITS).map(|i| (i * 1_000_000, unit)));
        assert_eq!(many.cover([0x1000]).map(|g| g.info.len()), Some(whole.len()));
        let (_, mut parts) = section(false);
        parts.aranges = bytes(Vec::new());
        assert!(PartialInfo::new(parts, LE).is_none());
    }

    /// Aranges that place units inside one another, or outside the section,
    /// and a section that says it is larger than its stream can hold: the
    /// whole section, or none read here; never a panic.
    #[test]
    fn damaged_aranges_and_sizes_are_not_trusted() {
        let (whole_section, mut parts) = section(false);
        let sets = [(0, 0x1000, 0x100), (10, 0x2000, 0x100), (1 << 30, 0x3000, 0x100)];
        parts.aranges = bytes(aranges(&sets));
        let mut partial = PartialInfo::new(parts, LE).unwrap();
        assert!(partial.cover([0x1000]).is_some());
        // The unit at 10 is inside the first: no view of both.
        assert_eq!(partial.cover([0x2000]).map(|g| g.info.len()), Some(whole_section.len()));
        let (_, parts) = section(false);
        let mut outside = PartialInfo::new(Parts { aranges: bytes(aranges(&sets)), ..parts }, LE);
        let whole = outside.as_mut().unwrap().cover([0x3000]).map(|g| g.info.len());
        assert_eq!(whole, Some(whole_section.len()));
        assert!(Lazy::zlib(zlib(&whole_section), u64::MAX >> 4).is_none());
    }

    /// `.debug_info` from the section cache: a unit's blocks are checked as
    /// it is read, no others. A block damaged in the cache, in a unit not
    /// looked up, costs nothing; in one looked up, the entry is removed and
    /// the unit read from the stream, the same as an undamaged one.
    #[test]
    fn a_cached_section_is_checked_block_by_block_as_units_are_read() {
        let dir = std::env::temp_dir().join(format!("partial-blocks-{}", std::process::id()));
        let cache = super::super::cache::SectionCache::at(&dir, 1 << 30);
        let (whole, parts) = section(false);
        let stream = zlib(&whole);
        let full = whole.len() as u64;
        let (made, none) = cache.zlib_blocks(b"\x01", ".debug_info", &stream, full).unwrap();
        assert!(none.is_none() && made[..] == whole[..], "decompressed and stored");
        let entry = std::fs::read_dir(dir.join("sections/01")).unwrap().next().unwrap().unwrap();
        let entry = entry.path();
        // A byte of the third unit (300..300_300), in the third block, damaged.
        let mut stored = std::fs::read(&entry).unwrap();
        let at = stored.len() - whole.len() + 150_000;
        stored[at] ^= 0xff;
        std::fs::write(&entry, &stored).unwrap();
        let (bytes, blocks) = cache.zlib_blocks(b"\x01", ".debug_info", &stream, full).unwrap();
        let info =
            Lazy::cached(bytes, blocks.expect("the entry, its blocks unchecked"), stream, full);
        let mut partial = PartialInfo::new(Parts { info, ..parts }, LE).unwrap();
        let first = partial.cover([0x1010]).expect("the first unit");
        assert_eq!(&first.info[..], &whole[..100]);
        assert!(matches!(partial.info, Lazy::Cached(_)), "the entry still read");
        assert!(entry.exists(), "the damage not met");
        let third = partial.cover([0x3000]).expect("the third unit");
        assert_eq!(&third.info[300..], &whole[300..300_300], "from the stream");
        assert!(matches!(partial.info, Lazy::Zlib(_)), "the stream read instead");
        assert!(!entry.exists(), "the damaged entry removed");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A stream cut short or damaged: the units it holds whole, at most.
    #[test]
    fn a_damaged_stream_gives_what_it_holds() {
        let (_, parts) = section(true);
        let mut partial = PartialInfo::new(parts, LE).unwrap();
        assert_eq!(partial.cover([0x3000]).map(|g| g.info.len()), Some(300));
        assert!(partial.done());
        assert_eq!(unit_length(&0xffff_fff5u32.to_le_bytes(), LE), None);
        assert_eq!(unit_length(&[1, 0], LE), None);
        assert_eq!(scan_abbrevs(&[1, 0x11, 0, 0x03], LE), None);
        assert_eq!(scan_abbrevs(&[1, 0x11, 0, 0x03, 0x08, 0, 0, 0, 9], LE), Some((false, 8)));
    }
}
