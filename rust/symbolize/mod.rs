//! Naming addresses, for every source (cores, captures, perf recordings):
//! the modules placed in an address space ([`Symbolizer`]), each with its
//! file's symbol table, loaded on first use. Tables of files on disk are
//! kept for the life of the process ([`file_table`]): a directory of cores
//! names the same libraries again and again.
//!
//! Where a mapping of a file goes (its bias) is `crate::space`'s rule;
//! this module only looks addresses up in what was placed.

pub mod breakpad;
pub mod lines;
pub mod pdb;
pub mod pyframes;
pub mod stack_win;
pub mod symbols;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::source::files::FileCache;
use crate::source::memory::Data;
use crate::symbolize::breakpad::{parse_counted, BreakpadSymbols};
use crate::symbolize::lines::{DebugInfo, SourceFrame};
use crate::symbolize::pdb::{PdbSymbols, MAGIC as PDB_MAGIC};
use crate::symbolize::symbols::{PltEntries, SymbolTable};
use crate::unwind::cfi::ForeignCfi;

/// A module's symbols kept apart from its file, found by its debug id: a
/// Breakpad symbol file (`.sym`), or a Windows module's PDB. Their
/// addresses are module offsets (a PE file's RVAs); their unwind rules, if
/// any (`STACK CFI`, x86 frame data), are the unwinder's
/// ([`ForeignCfi`]).
pub trait ModuleSymbols: ForeignCfi {
    /// The debug id of the module the file is the symbols of.
    fn debug_id(&self) -> &str;
    /// The function at `address` and its start.
    fn lookup(&self, address: u64) -> Option<(&str, u64)>;
    /// The functions at `address`, innermost first (inlined ones at their
    /// call sites).
    fn frames(&self, address: u64) -> Vec<SourceFrame>;
    /// Whether the file has unwind rules.
    fn has_rules(&self) -> bool;
}

impl ModuleSymbols for BreakpadSymbols {
    fn debug_id(&self) -> &str {
        BreakpadSymbols::debug_id(self)
    }
    fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        BreakpadSymbols::lookup(self, address)
    }
    fn frames(&self, address: u64) -> Vec<SourceFrame> {
        BreakpadSymbols::frames(self, address)
    }
    fn has_rules(&self) -> bool {
        self.has_cfi() || self.has_frame_data()
    }
}

impl ModuleSymbols for PdbSymbols {
    fn debug_id(&self) -> &str {
        PdbSymbols::debug_id(self)
    }
    fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        PdbSymbols::lookup(self, address)
    }
    fn frames(&self, address: u64) -> Vec<SourceFrame> {
        PdbSymbols::frames(self, address)
    }
    fn has_rules(&self) -> bool {
        self.has_frame_data()
    }
}

/// Symbol files read, for at most 64 files.
static SYMBOL_FILES: FileCache<Result<Arc<dyn ModuleSymbols>, Arc<str>>> = FileCache::new(64);

/// The symbols of the file at `path`, a PDB or a Breakpad symbol file (by
/// its first bytes), mapped and read once per process while the file is
/// unchanged. The error names the file.
pub fn symbols_file(path: &Path) -> Result<Arc<dyn ModuleSymbols>, String> {
    let read = SYMBOL_FILES.get(path, None, |file| {
        let data = crate::source::files::map_file(file).map_err(|e| Arc::from(e.to_string()))?;
        let symbols: Arc<dyn ModuleSymbols> = if data.starts_with(PDB_MAGIC) {
            Arc::new(PdbSymbols::parse(Data::Mapped(data))?)
        } else {
            Arc::new(parse_counted(Data::Mapped(data)).map_err(|e| e.to_string())?)
        };
        Ok::<_, Arc<str>>(symbols)
    });
    let named = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    match read {
        Ok(Ok(symbols)) => Ok(symbols),
        Ok(Err(e)) => Err(named(&e)),
        Err(e) => Err(named(&e)),
    }
}

/// Where a file's symbols come from.
pub enum Source {
    /// The file at this path, read through the process-wide cache
    /// ([`file_table`]).
    Path(PathBuf),
    /// ELF bytes at hand (a vdso image read from a core or from this
    /// process): the image's own symbols.
    Image(Arc<Data>),
    /// No symbols: the module is known by name and place only.
    None,
}

/// A module's symbol file as its file keeps it: the symbols, where their
/// offsets are from, and whether the file is a PE file.
type Kept = (Arc<dyn ModuleSymbols>, u64, bool);

/// A file as the symbolizer knows it: its name, and its symbol table,
/// loaded on first use.
pub struct SymbolFile {
    /// Never reused in this process (caches key on it).
    id: u64,
    pub path: Arc<str>,
    source: Source,
    /// Where a file with only `.dynsym` has its separate debug file's
    /// `.symtab` looked for (by build id); None: not looked for.
    debug_root: Option<PathBuf>,
    table: OnceLock<Option<Arc<SymbolTable>>>,
    lines: OnceLock<Option<Arc<DebugInfo>>>,
    /// A Breakpad symbol file, used where the file gives no name or line.
    breakpad: Option<PathBuf>,
    /// The symbol file, where its offsets are from in the file's addresses
    /// (a PE file's image base; 0 for an ELF file), and whether the file is
    /// a PE file.
    sym: OnceLock<Option<Kept>>,
    /// Its PLT entries, read where the table first names nothing.
    plt: OnceLock<PltEntries>,
}

impl SymbolFile {
    pub fn new(path: Arc<str>, source: Source, debug_root: Option<PathBuf>) -> SymbolFile {
        SymbolFile {
            id: next_id(),
            path,
            source,
            debug_root,
            table: OnceLock::new(),
            lines: OnceLock::new(),
            breakpad: None,
            sym: OnceLock::new(),
            plt: OnceLock::new(),
        }
    }

    /// This file, with the Breakpad symbol file at `path` for the names
    /// and lines its own symbols and DWARF lack.
    pub fn with_breakpad(mut self, path: PathBuf) -> SymbolFile {
        self.breakpad = Some(path);
        self
    }

    /// Its Breakpad symbol file's tables (read through the process's
    /// cache), and the address in the file its offsets are from (a Windows
    /// module's are from its PE file's image base): None without one, or
    /// when it cannot be read.
    pub fn breakpad(&self) -> Option<(&dyn ModuleSymbols, u64)> {
        let sym = self.sym.get_or_init(|| {
            let symbols = symbols_file(self.breakpad.as_deref()?).ok()?;
            let pe = |path: &PathBuf| {
                let data = crate::source::files::map(path).ok()?;
                Some(crate::space::pe::headers(&data).ok()?.image_base)
            };
            let base = match &self.source {
                Source::Path(path) => pe(path),
                Source::Image(_) | Source::None => None,
            };
            Some((symbols, base.unwrap_or(0), base.is_some()))
        });
        sym.as_ref().map(|(symbols, base, _)| (&**symbols, *base))
    }

    /// [`SymbolFile::breakpad`] where the file is a PE file: a Windows
    /// module's symbol file is its PDB's, whose names and lines win over
    /// the file's own (COFF symbols or exports, with their decorations;
    /// DWARF where mingw wrote some), as they do in the tools a Windows
    /// crash is read with.
    fn pdb_breakpad(&self) -> Option<(&dyn ModuleSymbols, u64)> {
        self.breakpad()?;
        match self.sym.get() {
            Some(Some((symbols, base, true))) => Some((&**symbols, *base)),
            _ => None,
        }
    }

    /// Its PLT entries (`name@plt`): read once, where its symbol table
    /// first names nothing (reading them with every table cost a command
    /// 0.2-0.4 ms a library).
    pub fn plt(&self) -> &PltEntries {
        self.plt.get_or_init(|| match &self.source {
            Source::Path(path) => crate::source::files::map(path)
                .map_or_else(|_| PltEntries::empty(), |d| PltEntries::of(&d)),
            Source::Image(data) => PltEntries::of(data),
            Source::None => PltEntries::empty(),
        })
    }

    /// Unique in this process, never 0.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its symbol table: None when it has none or cannot be read.
    pub fn table(&self) -> Option<&SymbolTable> {
        let table = self.table.get_or_init(|| match &self.source {
            Source::Path(path) => file_table(path, self.debug_root.as_deref()),
            Source::Image(data) => read_table(data, self.debug_root.as_deref()).map(Arc::new),
            Source::None => None,
        });
        table.as_deref()
    }

    /// Whether [`lines`](SymbolFile::lines) gives its answer without
    /// reading a file (and if so, takes it from the process's cache).
    fn lines_at_hand(&self) -> bool {
        if self.lines.get().is_some() {
            return true;
        }
        let path = match &self.source {
            Source::Path(path) => path,
            // Nothing to read (a module known by its symbol file alone).
            Source::None => return true,
            Source::Image(_) => return false,
        };
        match LINES.peek(path, self.debug_root.as_deref()) {
            Some(lines) => {
                // Set here or by another thread meanwhile: the same either way.
                let _ = self.lines.set(lines.ok().flatten());
                true
            }
            None => false,
        }
    }

    /// Its DWARF, for source lines and inline frames: None when neither it
    /// nor its separate debug file has any.
    pub fn lines(&self) -> Option<&DebugInfo> {
        let lines = self.lines.get_or_init(|| match &self.source {
            Source::Path(path) => file_lines(path, self.debug_root.as_deref()),
            Source::Image(data) => {
                DebugInfo::load(data.clone(), None, self.debug_root.as_deref()).map(Arc::new)
            }
            Source::None => None,
        });
        lines.as_deref()
    }
}

/// A new id for a file, unique in this process.
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The symbols of ELF `data`: its own, completed from its separate debug
/// file under `debug_root` when it has only exported names.
fn read_table(data: &[u8], debug_root: Option<&Path>) -> Option<SymbolTable> {
    match debug_root {
        Some(root) => SymbolTable::for_file(data, root).ok(),
        None => SymbolTable::from_elf(data).ok(),
    }
}

/// The symbol table of the ELF file at `path` (see [`SymbolTable::for_file`];
/// `debug_root` None: its own symbols only), read once per process and file
/// (see [`cached`]). None when it cannot be read or is no ELF file
/// (remembered too, until the file changes).
pub fn file_table(path: &Path, debug_root: Option<&Path>) -> Option<Arc<SymbolTable>> {
    TABLES
        .get(path, debug_root, |file| {
            crate::source::files::map_file(file)
                .ok()
                .map(Data::Mapped)
                .and_then(|data| read_table(&data, debug_root))
                .map(Arc::new)
        })
        .ok()?
}

/// Symbol tables of files, for at most 256 files.
static TABLES: FileCache<Option<Arc<SymbolTable>>> = FileCache::new(256);

/// The DWARF of files, for fewer: a distribution's debug file takes tens
/// of megabytes once decompressed.
static LINES: FileCache<Option<Arc<DebugInfo>>> = FileCache::new(64);

/// The mapped pages of the DWARF kept out of the resident memory, what was
/// parsed of it kept (see [`DebugInfo::release_resident`]).
pub fn release_resident() {
    LINES.for_each(|info| {
        if let Some(info) = info {
            info.release_resident();
        }
    });
}

/// Drop the symbol files, tables and DWARF used longest ago, keeping `keep`
/// (0 to 1) of each cache: how many were dropped.
pub fn trim_caches(keep: f64) -> usize {
    SYMBOL_FILES.trim(keep) + TABLES.trim(keep) + LINES.trim(keep)
}

/// The DWARF of the ELF file at `path`, its own or its separate debug
/// file's (see [`DebugInfo::load`]), kept as [`file_table`] keeps tables.
/// None when it has none.
pub fn file_lines(path: &Path, debug_root: Option<&Path>) -> Option<Arc<DebugInfo>> {
    LINES
        .get(path, debug_root, |file| {
            let data = Arc::new(Data::Mapped(crate::source::files::map_file(file).ok()?));
            DebugInfo::load(data, Some(path), debug_root).map(Arc::new)
        })
        .ok()?
}

/// A module placed in an address space, for symbolizing.
#[derive(Clone)]
pub struct Placed {
    /// Runtime addresses.
    pub range: Range<u64>,
    /// Runtime − ELF address, modulo 2^64.
    pub bias: u64,
    /// The file offset the mapping starts at.
    pub pgoff: u64,
    pub file: Arc<SymbolFile>,
    /// Its file is not surely the one the process ran (another build id,
    /// used as asked): the frames in it, and those unwound through its CFI,
    /// may be wrong.
    pub doubtful: bool,
}

/// Where an address is: module, ELF address, function.
pub struct Location<'s> {
    pub module: Option<&'s Placed>,
    /// The ELF address (pc − bias, modulo 2^64); the pc itself outside
    /// every module.
    pub offset: u64,
    /// Where the lookup address is in the file (the mapping's file offset
    /// plus the distance into it), as perf script prints it.
    pub file_offset: u64,
    /// The function's (demangled) name and the pc's offset in it.
    pub function: Option<(&'s str, u64)>,
    /// The function's index in its file's symbol table.
    pub symbol: Option<usize>,
}

impl Location<'_> {
    pub fn file(&self) -> Option<&Arc<SymbolFile>> {
        self.module.map(|m| &m.file)
    }
}

/// The modules of an address space, sorted by start.
#[derive(Clone, Default)]
pub struct Symbolizer {
    modules: Vec<Placed>,
    /// Names of JIT code outside every module (a perf map).
    jit: Option<Arc<crate::space::perfmap::PerfMap>>,
}

impl Symbolizer {
    /// The modules in any order; where two start at the same address the
    /// last given wins.
    pub fn new(mut modules: Vec<Placed>) -> Symbolizer {
        modules.sort_by_key(|m| m.range.start);
        Symbolizer { modules, jit: None }
    }

    /// These modules, and the JIT code a perf map names outside them.
    pub fn with_perf_map(mut self, map: Arc<crate::space::perfmap::PerfMap>) -> Symbolizer {
        self.jit = Some(map);
        self
    }

    pub fn modules(&self) -> &[Placed] {
        &self.modules
    }

    /// These modules with `module` mapped over them: every module it
    /// overlaps is gone (a new mapping replaces what was there).
    pub fn with_mapping(&self, module: Placed) -> Symbolizer {
        let range = &module.range;
        let mut modules: Vec<Placed> = self
            .modules
            .iter()
            .filter(|p| p.range.end <= range.start || range.end <= p.range.start)
            .cloned()
            .collect();
        let at = modules.partition_point(|p| p.range.start < range.start);
        modules.insert(at, module);
        Symbolizer { modules, jit: self.jit.clone() }
    }

    /// The module holding `address`.
    pub fn module_at(&self, address: u64) -> Option<&Placed> {
        let i = self.modules.partition_point(|p| p.range.start <= address).checked_sub(1)?;
        Some(&self.modules[i]).filter(|p| address < p.range.end)
    }

    /// Where `pc` is, its function looked up at `lookup` (a frame's lookup
    /// pc: pc − 1 for a return address, which may lie just past the end of
    /// a noreturn call's function, as gdb and eu-stack do).
    pub fn locate(&self, pc: u64, lookup: u64) -> Location<'_> {
        self.locate_with(pc, lookup, |_, table, address| table.index(address))
    }

    /// As [`locate`](Symbolizer::locate), the symbol looked up through a
    /// worker's `cache`.
    pub fn locate_cached(&self, pc: u64, lookup: u64, cache: &mut SymbolCache) -> Location<'_> {
        self.locate_with(pc, lookup, |file, table, address| cache.index(file, table, address))
    }

    /// Reads the DWARF of the modules holding these lookup pcs, several
    /// files at once (decompressing a distribution's debug file takes tens
    /// of milliseconds), as far as their lookups need it (see
    /// [`DebugInfo::prepare`]): the lookups that follow find it ready.
    pub fn load_lines(&self, lookups: impl Iterator<Item = u64>) {
        use rayon::prelude::*;
        let mut wanted: Vec<(&Arc<SymbolFile>, u64)> = lookups
            .filter_map(|pc| self.module_at(pc).map(|p| (&p.file, pc.wrapping_sub(p.bias))))
            .collect();
        wanted.sort_unstable_by_key(|&(f, address)| (f.id, address));
        let files: Vec<(&Arc<SymbolFile>, Vec<u64>)> = wanted
            .chunk_by(|a, b| a.0.id == b.0.id)
            .map(|run| (run[0].0, run.iter().map(|&(_, address)| address).collect()))
            .collect();
        let prepare = |(file, addresses): &(&Arc<SymbolFile>, Vec<u64>)| {
            if let Some(lines) = file.lines() {
                lines.prepare(addresses.iter().copied());
            }
        };
        // Side by side only when several files are read for the first time: a parallel loop
        // wakes the thread pool, whose threads then spin for a while, taking a CPU from the
        // other workers of `core --dir` at every core.
        let (at_hand, new): (Vec<_>, Vec<_>) =
            files.into_iter().partition(|(f, _)| f.lines_at_hand());
        at_hand.iter().for_each(prepare);
        match new.as_slice() {
            [] => {}
            [one] => prepare(one),
            _ if crate::threads::may_spread() => new.par_iter().for_each(prepare),
            _ => new.iter().for_each(prepare),
        }
    }

    /// The functions at `lookup` (a frame's lookup pc) as its module's DWARF
    /// gives them, innermost first (see [`DebugInfo::frames`]); empty
    /// outside every module or without DWARF.
    pub fn source_frames(&self, lookup: u64) -> Vec<SourceFrame> {
        let Some(p) = self.module_at(lookup) else { return Vec::new() };
        let address = lookup.wrapping_sub(p.bias);
        if let Some((symbols, base)) = p.file.pdb_breakpad() {
            let frames = symbols.frames(address.wrapping_sub(base));
            if !frames.is_empty() {
                return frames;
            }
        }
        match p.file.lines() {
            Some(lines) => lines.frames(address),
            None => match p.file.breakpad() {
                Some((symbols, base)) => symbols.frames(address.wrapping_sub(base)),
                None => Vec::new(),
            },
        }
    }

    fn locate_with(
        &self,
        pc: u64,
        lookup: u64,
        index: impl FnOnce(&SymbolFile, &SymbolTable, u64) -> Option<usize>,
    ) -> Location<'_> {
        let Some(p) = self.module_at(lookup) else {
            let function = self.jit.as_ref().and_then(|map| {
                let (name, offset) = map.lookup(lookup)?;
                Some((name, offset.wrapping_add(pc.wrapping_sub(lookup))))
            });
            return Location {
                module: None,
                offset: pc,
                file_offset: lookup,
                function,
                symbol: None,
            };
        };
        let table = p.file.table();
        let address = lookup.wrapping_sub(p.bias);
        let symbol = table.and_then(|t| index(&p.file, t, address));
        let pdb = || {
            let (symbols, base) = p.file.pdb_breakpad()?;
            let (name, start) = symbols.lookup(address.wrapping_sub(base))?;
            Some((name, start.wrapping_add(base)))
        };
        let function = pdb()
            .or_else(|| table.zip(symbol).and_then(|(t, i)| t.demangled(i)))
            .or_else(|| p.file.plt().lookup(address))
            .or_else(|| {
                let (symbols, base) = p.file.breakpad()?;
                let (name, start) = symbols.lookup(address.wrapping_sub(base))?;
                Some((name, start.wrapping_add(base)))
            })
            .map(|(name, start)| (name, (address - start).wrapping_add(pc.wrapping_sub(lookup))))
            // JIT code placed as a module of its own (a perf recording's
            // anonymous mappings): named by the perf map.
            .or_else(|| {
                let (name, offset) = self.jit.as_ref()?.lookup(lookup)?;
                Some((name, offset.wrapping_add(pc.wrapping_sub(lookup))))
            });
        let file_offset = lookup.wrapping_sub(p.range.start).wrapping_add(p.pgoff);
        Location { module: Some(p), offset: pc.wrapping_sub(p.bias), file_offset, function, symbol }
    }
}

/// Symbol lookups a worker made, direct-mapped by (file, ELF address):
/// samples hit the same few hundred return addresses over and over.
pub struct SymbolCache {
    /// (file id, ELF address, symbol index or `NO_SYMBOL`); file ids start at 1.
    slots: Box<[(u64, u64, u32)]>,
}

const NO_SYMBOL: u32 = u32::MAX;

/// Slots of a worker's direct-mapped caches.
pub const CACHE_SLOTS: usize = 1 << 12;

/// The slot of `(id, value)` in a cache of `CACHE_SLOTS`: the top bits of a
/// multiplicative hash.
pub fn cache_slot(id: u64, value: u64) -> usize {
    ((value ^ id.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        >> (64 - CACHE_SLOTS.trailing_zeros())) as usize
}

impl Default for SymbolCache {
    fn default() -> Self {
        SymbolCache { slots: vec![(0, 0, NO_SYMBOL); CACHE_SLOTS].into_boxed_slice() }
    }
}

impl SymbolCache {
    fn index(&mut self, file: &SymbolFile, table: &SymbolTable, address: u64) -> Option<usize> {
        let key = file.id;
        let slot = &mut self.slots[cache_slot(key, address)];
        if slot.0 != key || slot.1 != address {
            let index = table.index(address).map_or(NO_SYMBOL, |i| i as u32);
            *slot = (key, address, index);
        }
        (slot.2 != NO_SYMBOL).then_some(slot.2 as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of this test program, a file of our own to replace.
    fn own_copy(dir: &Path) -> PathBuf {
        let path = dir.join("exe");
        std::fs::copy("/proc/self/exe", &path).unwrap();
        path
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("stackwalk-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_is_read_once_and_again_once_replaced() {
        let dir = temp_dir("symbolize-cache");
        let path = own_copy(&dir);
        let first = file_table(&path, None).expect("an ELF file has symbols");
        let again = file_table(&path, None).expect("still there");
        assert!(Arc::ptr_eq(&first, &again), "read twice");
        // Another debug root is another table.
        let rooted = file_table(&path, Some(Path::new("/nonexistent"))).unwrap();
        assert!(!Arc::ptr_eq(&first, &rooted));
        // Replaced by something else at the same path: read again.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"no longer an ELF file").unwrap();
        assert!(file_table(&path, None).is_none());
        std::fs::remove_file(&path).unwrap();
        assert!(file_table(&path, None).is_none());
        std::fs::copy("/proc/self/exe", &path).unwrap();
        let back = file_table(&path, None).expect("an ELF file again");
        assert!(!Arc::ptr_eq(&first, &back));
        assert_eq!(back.len(), first.len());
        // Its DWARF (tests are built with debug info) is kept the same way.
        let lines = file_lines(&path, None).expect("DWARF");
        assert!(Arc::ptr_eq(&lines, &file_lines(&path, None).unwrap()), "parsed twice");
        std::fs::remove_file(&path).unwrap();
        std::fs::copy("/proc/self/exe", &path).unwrap();
        assert!(!Arc::ptr_eq(&lines, &file_lines(&path, None).unwrap()), "a stale file's");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Jobs on a pool that all want one file's DWARF first read by one of them: the reading
    /// must not take the others' jobs while it holds the file's cell (a job that then wants
    /// the same cell on the same thread waits for itself forever). Each round is a new
    /// file, read by 256 jobs on 64 threads; a watchdog turns a hang into a failure.
    #[test]
    fn jobs_reading_one_file_at_once_do_not_wait_for_themselves() {
        let exe = Arc::new(Data::Owned(std::fs::read("/proc/self/exe").unwrap()));
        let pool = rayon::ThreadPoolBuilder::new().num_threads(64).build().unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..20 {
                let file = SymbolFile::new("exe".into(), Source::Image(exe.clone()), None);
                pool.install(|| {
                    use rayon::prelude::*;
                    (0..256).into_par_iter().for_each(|_| assert!(file.lines().is_some()));
                });
            }
            let _ = done.send(());
        });
        let waited = finished.recv_timeout(std::time::Duration::from_secs(120));
        assert!(waited.is_ok(), "the jobs waited for themselves (or took over two minutes)");
    }

    fn placed(range: Range<u64>, bias: u64, file: &Arc<SymbolFile>) -> Placed {
        Placed { range, bias, pgoff: 0, file: file.clone(), doubtful: false }
    }

    #[test]
    fn locates_by_module_and_symbol() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let table = SymbolTable::from_elf(&exe).unwrap();
        let image = Arc::new(Data::Owned(exe));
        let file = Arc::new(SymbolFile::new("exe".into(), Source::Image(image), None));
        let other = Arc::new(SymbolFile::new("gone".into(), Source::None, None));
        let bias = 0x5555_0000_0000;
        let symbolizer = Symbolizer::new(vec![
            placed(bias + 0x1000_0000..bias + 0x1000_1000, bias + 0x1000_0000, &other),
            placed(bias..bias + 0x1000_0000, bias, &file),
        ]);
        // A return address (5 bytes into a function): named by the call before it.
        let (name, start) = (0..table.len())
            .filter_map(|i| table.demangled(i).filter(|(_, s)| table.index(s + 5) == Some(i)))
            .map(|(n, s)| (n.to_owned(), s))
            .next()
            .expect("a function of more than 5 bytes");
        let pc = bias + start + 5;
        let loc = symbolizer.locate(pc, pc - 1);
        assert_eq!(loc.file().map(|f| &*f.path), Some("exe"));
        assert_eq!(loc.offset, start + 5);
        assert_eq!(loc.function, Some((name.as_str(), 5)));
        let mut cache = SymbolCache::default();
        for _ in 0..2 {
            let cached = symbolizer.locate_cached(pc, pc - 1, &mut cache);
            assert_eq!((cached.function, cached.symbol), (loc.function, loc.symbol));
        }
        // A module without symbols: named by file and ELF address alone.
        let loc = symbolizer.locate(bias + 0x1000_0010, bias + 0x1000_0010);
        assert_eq!(loc.file().map(|f| &*f.path), Some("gone"));
        assert_eq!((loc.offset, loc.function), (0x10, None));
        // Outside every module.
        let loc = symbolizer.locate(0x10, 0xf);
        assert!(loc.module.is_none() && loc.function.is_none());
        assert_eq!(loc.offset, 0x10);
        // A mapping over the modules replaces them.
        let over = symbolizer.with_mapping(placed(bias..bias + 0x2000_0000, 0, &other));
        assert_eq!(over.modules().len(), 1);
    }
}
