//! Source lines and inline frames: the DWARF (`.debug_info`, `.debug_line`,
//! DWARF 4 and 5) of an ELF file or of its separate debug file, read with
//! gimli's `addr2line`. Split DWARF (`-gsplit-dwarf`): a skeleton unit's
//! functions are read from its `.dwo` file (the name the unit gives, under
//! its compilation directory, else next to the file) or from the DWARF
//! package `FILE.dwp` next to the file, as gdb finds them. Units, lines and functions are parsed on first use,
//! one unit at a time; a file's [`DebugInfo`] is kept for the life of the
//! process next to its symbol table (`crate::symbolize::file_lines`).

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Range};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use object::{Object, ObjectSection};

use crate::source::memory::Data;
use crate::space::sections::plausible;

mod cache;
mod partial;

pub use cache::SectionCache;

/// Bytes of one section: a range of a mapped file, or a decompressed copy.
#[derive(Clone)]
pub struct SectionBytes {
    data: Arc<Data>,
    range: Range<usize>,
}

impl SectionBytes {
    /// All of `bytes`.
    pub fn whole(bytes: Vec<u8>) -> SectionBytes {
        let len = bytes.len();
        SectionBytes { data: Arc::new(Data::Owned(bytes)), range: 0..len }
    }
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data[self.range.clone()]
    }
}

impl fmt::Debug for SectionBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SectionBytes({} bytes)", self.range.len())
    }
}

// SAFETY: the bytes are those of an `Arc<Data>` (a read-only mapping or a
// vector never resized), which stay where they are while any clone lives.
unsafe impl gimli::StableDeref for SectionBytes {}
// SAFETY: as above; a clone shares the same `Arc`.
unsafe impl gimli::CloneStableDeref for SectionBytes {}

type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionBytes>;

/// The sections addr2line reads.
const NEEDED: [gimli::SectionId; 10] = {
    use gimli::SectionId::*;
    [
        DebugAbbrev,
        DebugAddr,
        DebugAranges,
        DebugInfo,
        DebugLine,
        DebugLineStr,
        DebugRanges,
        DebugRngLists,
        DebugStr,
        DebugStrOffsets,
    ]
};

/// The sections of a split unit's `.dwo` file (or of a `.dwp`) read: all of
/// them, as a package's index slices every section it names (a section
/// left out would be one the index points past the end of).
const NEEDED_DWO: [gimli::SectionId; 13] = {
    use gimli::SectionId::*;
    [
        DebugAbbrev,
        DebugCuIndex,
        DebugInfo,
        DebugLine,
        DebugLoc,
        DebugLocLists,
        DebugMacinfo,
        DebugMacro,
        DebugRngLists,
        DebugStr,
        DebugStrOffsets,
        DebugTuIndex,
        DebugTypes,
    ]
};

/// One function at an address: the innermost is where the pc is, each next
/// one the function it was inlined into, at the call site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFrame {
    /// As DWARF names it, demangled.
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// None where unknown (DWARF's 0, the left edge, included).
    pub column: Option<u32>,
}

/// The DWARF of one file, parsed as lookups need it.
pub struct DebugInfo {
    /// addr2line parses into cells that are not `Sync`: one lookup at a time.
    parsed: Mutex<Parsed>,
    /// Where split units are looked for.
    split: SplitFiles,
}

/// The file's DWARF as far as it has been read.
struct Parsed {
    /// The whole file's, or, with `partial`, one of no unit.
    context: addr2line::Context<Reader>,
    sections: Sections,
    /// A compressed `.debug_info` of which only the units lookups have
    /// needed so far are read.
    partial: Option<partial::PartialInfo>,
    /// With `partial`: the contexts of those units, one per cover that added
    /// some (each parsed once, never again as more are needed), and each
    /// unit's context, by the unit's offset.
    unit_contexts: Vec<addr2line::Context<Reader>>,
    by_unit: rustc_hash::FxHashMap<usize, usize>,
}

impl Parsed {
    /// Makes sure the units of these ELF addresses are read and parsed.
    fn cover(&mut self, addresses: impl IntoIterator<Item = u64>) {
        let Some(partial) = self.partial.as_mut() else { return };
        if let Some(given) = partial.cover(addresses) {
            let mut sections = self.sections.clone();
            sections.set(gimli::SectionId::DebugInfo, given.info);
            sections.set(gimli::SectionId::DebugAbbrev, given.abbrev);
            sections.set(gimli::SectionId::DebugLine, given.line);
            let context = sections.context();
            if given.units.is_empty() {
                // The whole sections.
                self.sections = sections;
                if let Some(context) = context {
                    self.context = context;
                }
                (self.unit_contexts, self.by_unit) = Default::default();
            } else if let Some(context) = context {
                let index = self.unit_contexts.len();
                self.unit_contexts.push(context);
                self.by_unit.extend(given.units.into_iter().map(|unit| (unit, index)));
            }
        }
        if partial.done() {
            self.partial = None;
        }
    }

    /// The context of the unit that holds ELF address `address`, as far as
    /// it is read.
    fn context_for(&self, address: u64) -> &addr2line::Context<Reader> {
        let unit = self.partial.as_ref().and_then(|p| p.unit_of(address));
        match unit.and_then(|unit| self.by_unit.get(&unit)) {
            Some(&index) => &self.unit_contexts[index],
            None => &self.context,
        }
    }
}

/// Where the split units (`-gsplit-dwarf`) of a file are: next to the file
/// (a `.dwo` named relative to it) and in its DWARF package.
#[derive(Default)]
struct SplitFiles {
    /// The file's directory.
    dir: Option<PathBuf>,
    /// `FILE.dwp`.
    dwp_path: Option<PathBuf>,
    /// The package, read on first need; None inside: there is none.
    dwp: OnceLock<Option<gimli::DwarfPackage<Reader>>>,
}

impl DebugInfo {
    /// The DWARF of the ELF file `data` (at `path`, if it came from a file):
    /// its own, else its separate debug file's (see
    /// [`crate::space::debugfile::find`]; `debug_root` None: not looked for). None
    /// when neither has any, or it cannot be read.
    pub fn load(data: Arc<Data>, path: Option<&Path>, debug_root: Option<&Path>) -> Option<Self> {
        let mut info = match DebugInfo::from_elf(data.clone()) {
            Some(info) => info,
            None => {
                let (_, debug) = crate::space::debugfile::find(&data, path, debug_root?)?;
                DebugInfo::from_elf(Arc::new(debug))?
            }
        };
        info.split.dir = path.and_then(Path::parent).map(Path::to_path_buf);
        info.split.dwp_path = path.map(|p| {
            let mut name = p.as_os_str().to_owned();
            name.push(".dwp");
            PathBuf::from(name)
        });
        Some(info)
    }

    /// The pages of its mapped file and sections out of the resident
    /// memory (read back when touched again); what was parsed stays.
    pub fn release_resident(&self) {
        let parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        parsed.sections.data.release_resident();
        for bytes in &parsed.sections.bytes {
            bytes.data.release_resident();
        }
    }

    /// The DWARF of the ELF file `data` itself; None without `.debug_info`.
    pub fn from_elf(data: Arc<Data>) -> Option<Self> {
        let (sections, partial) = Sections::read(data, false)?;
        let context = sections.context()?;
        let parsed = Parsed {
            context,
            sections,
            partial,
            unit_contexts: Vec::new(),
            by_unit: Default::default(),
        };
        Some(DebugInfo { parsed: Mutex::new(parsed), split: SplitFiles::default() })
    }

    /// Reads what the lookups of these ELF addresses will need, at once:
    /// of a compressed `.debug_info`, their units (see [`partial`]), parsed
    /// at once.
    pub fn prepare(&self, addresses: impl IntoIterator<Item = u64>) {
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        parsed.cover(addresses);
    }

    /// The functions at ELF address `address`, innermost first: the last is
    /// the function the machine code belongs to, the others were inlined,
    /// each into the next, at the file and line they give. Empty where the
    /// DWARF says nothing of the address (or is damaged there).
    pub fn frames(&self, address: u64) -> Vec<SourceFrame> {
        // No code ends the address space, and addr2line's lookup of the last
        // address overflows (`address + 1`: a panic where overflow is checked).
        if address == u64::MAX {
            return Vec::new();
        }
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        parsed.cover([address]);
        let mut out = Vec::new();
        let mut lookup = parsed.context_for(address).find_frames(address);
        let found = loop {
            match lookup {
                addr2line::LookupResult::Output(found) => break found,
                addr2line::LookupResult::Load { load, continuation } => {
                    use addr2line::LookupContinuation as _;
                    lookup = continuation.resume(self.split.load(&load));
                }
            }
        };
        let Ok(mut frames) = found else {
            return out;
        };
        while let Ok(Some(frame)) = frames.next() {
            let function = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|name| crate::symbolize::symbols::demangle(&name).into_owned());
            let location = frame.location.as_ref();
            out.push(SourceFrame {
                function,
                file: location.and_then(|l| l.file).map(str::to_owned),
                line: location.and_then(|l| l.line).filter(|&l| l != 0),
                column: location.and_then(|l| l.column).filter(|&c| c != 0),
            });
        }
        out
    }
}

/// The DWARF sections of an ELF file that lines and inline chains need,
/// each a range of the mapped file or a decompressed copy.
#[derive(Clone)]
struct Sections {
    data: Arc<Data>,
    ids: &'static [gimli::SectionId],
    bytes: Vec<SectionBytes>,
    endian: gimli::RunTimeEndian,
}

impl Sections {
    /// Those of ELF file `data` (a split unit's `.dwo` sections when
    /// `dwo`); None without `.debug_info` (`.debug_info.dwo`). A large
    /// zlib-compressed `.debug_info` (a distribution's debug file) is left
    /// empty, to be read as lookups need it.
    fn read(data: Arc<Data>, dwo: bool) -> Option<(Sections, Option<partial::PartialInfo>)> {
        use gimli::SectionId::{DebugAbbrev, DebugInfo, DebugLine};
        let file = object::File::parse(&**data).ok()?;
        let info = file.section_by_name(if dwo { ".debug_info.dwo" } else { ".debug_info" });
        // A stripped file's section headers may remain, with no bytes (NOBITS).
        info.as_ref().and_then(|s| s.file_range()).filter(|&(_, size)| size > 0)?;
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let base = data.as_ptr() as usize;
        // A section's bytes as a range of the file. object gives an empty section (NOBITS,
        // or of size 0) as a slice of its own, outside the file: an empty range.
        let borrowed = |slice: &[u8]| {
            let start = (slice.as_ptr() as usize).checked_sub(base);
            let range = match start {
                Some(start) if start + slice.len() <= data.len() => start..start + slice.len(),
                _ => 0..0,
            };
            SectionBytes { data: data.clone(), range }
        };
        let empty = SectionBytes { data: data.clone(), range: 0..0 };
        // A large compressed section decompressed once for every process, by build id.
        let build_id = file.build_id().ok().flatten().unwrap_or_default();
        let cache = SectionCache::from_env();
        let cached = |name: &str, c: &object::CompressedData<'_>| -> Option<SectionBytes> {
            let (cache, full) = (cache?, c.uncompressed_size);
            if !plausible(c.format, c.data.len(), full) {
                return None;
            }
            match c.format {
                object::CompressionFormat::Zlib => cache.zlib(build_id, name, c.data, full),
                object::CompressionFormat::Zstandard => {
                    let decompress = || c.decompress().ok().map(Cow::into_owned);
                    cache.decompressed(build_id, (name, "zstd"), (c.data.len(), full), decompress)
                }
                _ => None,
            }
        };
        // A large zlib-compressed .debug_info is read in part, and with it .debug_abbrev and
        // .debug_line (compressed or not).
        let lazy = |section: Option<object::Section<'_, '_>>| -> Option<partial::Lazy> {
            let section = section?;
            let c = section.compressed_data().ok()?;
            if let Some(bytes) = cached(section.name().unwrap_or_default(), &c) {
                return Some(partial::Lazy::Plain(bytes));
            }
            match c.format {
                object::CompressionFormat::None => Some(partial::Lazy::Plain(borrowed(c.data))),
                object::CompressionFormat::Zlib => {
                    partial::Lazy::zlib(borrowed(c.data), c.uncompressed_size)
                }
                _ => None,
            }
        };
        let in_part = info.filter(|_| !dwo).and_then(|info| {
            let c = info.compressed_data().ok()?;
            let large = c.format == object::CompressionFormat::Zlib
                && c.uncompressed_size >= partial::MIN_PARTIAL;
            if !large {
                return None;
            }
            // Its cache entry's blocks are checked as the units in them are read: a profile
            // or a core needs a few of libc's 1,900.
            let name = info.name().unwrap_or_default();
            let entry = cache
                .filter(|_| plausible(c.format, c.data.len(), c.uncompressed_size))
                .and_then(|cache| cache.zlib_blocks(build_id, name, c.data, c.uncompressed_size));
            let info = match entry {
                Some((bytes, Some(blocks))) => {
                    partial::Lazy::cached(bytes, blocks, borrowed(c.data), c.uncompressed_size)
                }
                Some((bytes, None)) => partial::Lazy::Plain(bytes),
                None => partial::Lazy::zlib(borrowed(c.data), c.uncompressed_size)?,
            };
            Some((
                info,
                lazy(file.section_by_name(".debug_abbrev"))?,
                lazy(file.section_by_name(".debug_line"))?,
            ))
        });
        // Only what lines and inline chains need: location lists, macros and the like are
        // never read (nor decompressed). A distribution's debug sections are compressed:
        // they are decompressed side by side, on the rayon pool.
        let whole_of = |id: &gimli::SectionId| -> SectionBytes {
            let name = if dwo { id.dwo_name() } else { Some(id.name()) };
            let compressed = name.and_then(|n| file.section_by_name(n)?.compressed_data().ok());
            if let Some(bytes) = compressed.as_ref().zip(name).and_then(|(c, n)| cached(n, c)) {
                return bytes;
            }
            // A header that claims more than its stream can hold is not believed: object
            // would allocate the whole claim first.
            let decompressed = compressed
                .filter(|c| plausible(c.format, c.data.len(), c.uncompressed_size))
                .map(|c| c.decompress());
            match decompressed {
                Some(Ok(Cow::Borrowed(slice))) => borrowed(slice),
                Some(Ok(Cow::Owned(vec))) => {
                    let len = vec.len();
                    SectionBytes { data: Arc::new(Data::Owned(vec)), range: 0..len }
                }
                // Missing, or compressed with a damaged stream: none.
                _ => empty.clone(),
            }
        };
        let read_in_part = in_part.is_some();
        let bytes_of = |id: &gimli::SectionId| -> SectionBytes {
            match id {
                DebugInfo | DebugAbbrev | DebugLine if read_in_part => empty.clone(),
                _ => whole_of(id),
            }
        };
        let ids: &'static [gimli::SectionId] = if dwo { &NEEDED_DWO } else { &NEEDED };
        let bytes = if crate::threads::may_spread() {
            use rayon::prelude::*;
            ids.par_iter().map(bytes_of).collect()
        } else {
            ids.iter().map(bytes_of).collect()
        };
        let mut sections = Sections { data: data.clone(), ids, bytes, endian };
        let Some((info, abbrev, line)) = in_part else {
            return Some((sections, None));
        };
        // The code's sections: their headers remain in a separate debug file.
        let code = file
            .sections()
            .filter(|s| s.name().is_ok_and(|n| n == ".text" || n.starts_with(".text.")))
            .map(|s| s.address()..s.address().saturating_add(s.size()))
            .collect();
        let aranges = sections.section(gimli::SectionId::DebugAranges);
        let parts = partial::Parts { info, abbrev, line, aranges, code };
        let partial = partial::PartialInfo::new(parts, endian);
        if partial.is_none() {
            // No aranges to find units by: the whole sections, now.
            for id in [DebugInfo, DebugAbbrev, DebugLine] {
                sections.set(id, whole_of(&id));
            }
        }
        Some((sections, partial))
    }

    /// The bytes of section `id` (none where it is not read).
    fn section(&self, id: gimli::SectionId) -> SectionBytes {
        match self.ids.iter().position(|&n| n == id) {
            Some(i) => self.bytes[i].clone(),
            None => SectionBytes { data: self.data.clone(), range: 0..0 },
        }
    }

    /// Section `id` for gimli.
    fn reader(&self, id: gimli::SectionId) -> Reader {
        gimli::EndianReader::new(self.section(id), self.endian)
    }

    /// Section `id`'s bytes are now `bytes`.
    fn set(&mut self, id: gimli::SectionId, bytes: SectionBytes) {
        if let Some(i) = self.ids.iter().position(|&n| n == id) {
            self.bytes[i] = bytes;
        }
    }

    /// addr2line's parse of the sections; None where they cannot be read.
    fn context(&self) -> Option<addr2line::Context<Reader>> {
        let dwarf = gimli::Dwarf::load(|id| Ok::<_, ()>(self.reader(id))).ok()?;
        addr2line::Context::from_dwarf(dwarf).ok()
    }
}

impl SplitFiles {
    /// The split unit `load` asks for, from its `.dwo` file or the `.dwp`;
    /// None where neither has it (the lookup then goes on without it).
    fn load(&self, load: &addr2line::SplitDwarfLoad<Reader>) -> Option<Arc<gimli::Dwarf<Reader>>> {
        use gimli::Reader as _;
        let text = |r: &Option<Reader>| {
            let bytes = r.as_ref()?.to_slice().ok()?;
            Some(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
        };
        let (comp_dir, name) = (text(&load.comp_dir), text(&load.path));
        let mut candidates = Vec::new();
        if let Some(name) = &name {
            candidates.extend(comp_dir.map(|d| d.join(name)));
            candidates.push(name.clone());
            if let (Some(dir), Some(base)) = (&self.dir, name.file_name()) {
                candidates.push(dir.join(base));
            }
        }
        for candidate in candidates {
            let Ok(data) = crate::source::files::map(&candidate) else { continue };
            let Some((sections, _)) = Sections::read(Arc::new(data), true) else { continue };
            let Ok(mut dwarf) = gimli::Dwarf::load(|id| Ok::<_, ()>(sections.reader(id))) else {
                continue;
            };
            // A .dwo of another build is not this unit's.
            let unit_type = dwarf.units().next().ok().flatten().map(|h| h.type_());
            if matches!(unit_type, Some(gimli::UnitType::SplitCompilation(id)) if id != load.dwo_id)
            {
                continue;
            }
            dwarf.make_dwo(&load.parent);
            return Some(Arc::new(dwarf));
        }
        let dwp = self.dwp.get_or_init(|| {
            let data = crate::source::files::map(self.dwp_path.as_deref()?).ok()?;
            let (sections, _) = Sections::read(Arc::new(data), true)?;
            let empty = SectionBytes { data: sections.data.clone(), range: 0..0 };
            let empty = gimli::EndianReader::new(empty, sections.endian);
            gimli::DwarfPackage::load(|id| Ok::<_, gimli::Error>(sections.reader(id)), empty).ok()
        });
        let dwarf = dwp.as_ref()?.find_cu(load.dwo_id, &load.parent).ok()??;
        Some(Arc::new(dwarf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test program's own DWARF (tests are built with debug info): the
    /// function at an address inside this test is this test, in this file.
    #[test]
    fn names_and_places_its_own_functions() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let table = crate::symbolize::symbols::SymbolTable::from_elf(&exe).unwrap();
        let (name, start) = (0..table.len())
            .filter_map(|i| table.demangled(i))
            .find(|(name, _)| name.ends_with("lines::tests::names_and_places_its_own_functions"))
            .map(|(n, s)| (n.to_owned(), s))
            .expect("this test in the symbol table");
        let info = DebugInfo::load(Arc::new(Data::Owned(exe)), None, None).expect("DWARF");
        let frames = info.frames(start + 1);
        let own = frames.last().expect("a frame");
        assert_eq!(own.function.as_deref(), Some(name.as_str()));
        assert!(
            own.file.as_deref().is_some_and(|f| f.ends_with("rust/symbolize/lines/mod.rs")),
            "{own:?}"
        );
        assert!(own.line.is_some_and(|l| l > 100), "{own:?}");
        // Nothing where no code is, up to the last address (found by the fuzz target
        // `lines`: addr2line's lookup of it overflowed).
        assert_eq!(info.frames(u64::MAX - 16), vec![]);
        assert_eq!(info.frames(u64::MAX), vec![]);
    }

    #[test]
    fn damaged_or_dwarfless_files_have_none() {
        let garbage = Arc::new(Data::Owned(b"\x7fELF not really".to_vec()));
        assert!(DebugInfo::from_elf(garbage.clone()).is_none());
        assert!(DebugInfo::load(garbage, None, Some(Path::new("/nonexistent"))).is_none());
    }
}
