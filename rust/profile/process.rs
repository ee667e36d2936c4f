//! Each profiled process's address space: the files it maps and where.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use crate::cfi::{Data, Module, UnwindInfo};
use crate::modules::ModuleSet;
use crate::space::Segment;
use crate::symbols::SymbolTable;

use super::cache::SymbolCache;
use super::{next_id, Profiler};

/// A file mapped by the profiled processes, with what symbolizing needs.
pub(super) struct FileInfo {
    /// Never reused in this process (caches key on it).
    pub(super) id: u64,
    pub(super) path: Arc<str>,
    /// None when the file could not be read (missing, not ELF).
    pub(super) unwind: Option<Arc<UnwindInfo>>,
    /// PT_LOADs, to place mappings.
    pub(super) loads: Vec<Segment>,
    pub(super) data: Option<Arc<Data>>,
    pub(super) symbols: OnceLock<Option<SymbolTable>>,
}

/// A module as mapped in one process: which file, at which bias.
#[derive(Clone)]
pub(super) struct Placed {
    pub(super) range: Range<u64>,
    pub(super) bias: u64,
    /// File offset the mapping starts at.
    pub(super) pgoff: u64,
    pub(super) file: Arc<FileInfo>,
}

/// A process's address space at one moment; replaced, never changed.
#[derive(Clone, Default)]
pub(super) struct Process {
    /// Tells snapshots apart in the folded stacks' address keys (0: none).
    pub(super) id: u64,
    pub(super) modules: Arc<ModuleSet>,
    /// The same modules, for symbolizing (sorted by start).
    pub(super) placed: Arc<Vec<Placed>>,
}

impl Profiler {
    /// A new executable mapping in process `pid`.
    pub(super) fn map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, filename: &[u8]) {
        let file = self.file(filename);
        let range = start..start.saturating_add(len);
        let id = next_id();
        let process = self.processes.entry(pid).or_default();
        let mut modules = process.modules.without_range(range.clone());
        let mut placed: Vec<Placed> = process
            .placed
            .iter()
            .filter(|p| p.range.end <= range.start || range.end <= p.range.start)
            .cloned()
            .collect();
        let bias = crate::space::bias(&file.loads, start, pgoff, 0x1000);
        if let Some(info) = &file.unwind {
            let elf_range = range.start.wrapping_sub(bias)..range.end.wrapping_sub(bias);
            if let Ok(module) = Module::place(file.path.to_string(), info.clone(), elf_range, bias)
            {
                if let Ok(set) = modules.with_module(Arc::new(module)) {
                    modules = set;
                }
            }
        }
        let at = placed.partition_point(|p| p.range.start < range.start);
        placed.insert(at, Placed { range, bias, pgoff, file });
        *process = Process { id, modules: Arc::new(modules), placed: Arc::new(placed) };
    }

    pub(super) fn file(&mut self, filename: &[u8]) -> Arc<FileInfo> {
        if let Some(f) = self.files.get(filename) {
            return f.clone();
        }
        let path: Arc<str> = String::from_utf8_lossy(filename).into();
        let data = if filename == b"[vdso]" {
            self.vdso.clone()
        } else {
            crate::files::map(std::path::Path::new(&*path)).ok().map(Arc::new)
        };
        let mut unwind = None;
        let mut loads = Vec::new();
        if let Some(data) = &data {
            if let Ok(elf) = crate::elf::read_elf(data) {
                if elf.machine == self.arch.elf_machine() {
                    // No .debug_frame of its own: its separate debug file's,
                    // if there is one (.eh_frame may lack functions).
                    let debug = match elf.sections.debug_frame {
                        None if filename.starts_with(b"/") => {
                            crate::debugfile::separate_debug_frame(
                                data,
                                Some(std::path::Path::new(&*path)),
                                &self.options.debug_root,
                            )
                            .map(|(bytes, section, _)| (bytes, section))
                        }
                        _ => None,
                    };
                    unwind =
                        UnwindInfo::with_debug_file(self.arch, data.clone(), elf.sections, debug)
                            .ok()
                            .map(Arc::new);
                }
            }
            if let Ok(summary) = crate::elf::summarize(data) {
                loads = summary.segments().collect();
            }
        }
        if unwind.is_none() && path.starts_with('/') {
            self.summary.modules_missing.push(path.to_string());
        }
        let id = next_id();
        let info = Arc::new(FileInfo { id, path, unwind, loads, data, symbols: OnceLock::new() });
        self.files.insert(filename.to_vec(), info.clone());
        info
    }
}

/// This process's vdso image, if its build id is `build_id`.
pub(super) fn own_vdso(build_id: &[u8]) -> Option<Data> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (range, _) = line.split_once(' ')?;
    let (start, end) = range.split_once('-')?;
    let (start, end) =
        (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
    // SAFETY: the kernel maps the vdso readable for the life of the process.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, end.checked_sub(start)?) };
    let ours = crate::elf::summarize(image).ok()?.build_id?;
    // perf pads build ids to 20 bytes.
    (build_id.starts_with(&ours) && build_id[ours.len()..].iter().all(|&b| b == 0))
        .then(|| Data::Owned(image.to_vec()))
}

pub(super) struct Location<'p> {
    pub(super) file: Option<&'p Arc<FileInfo>>,
    /// ELF address (pc − bias).
    pub(super) offset: u64,
    /// Where the lookup address is in the file, as perf script prints it.
    pub(super) file_offset: u64,
    /// The function's (demangled) name and the pc's offset in it.
    pub(super) function: Option<(&'p str, u64)>,
    /// The function's index in its file's symbol table.
    pub(super) symbol: Option<usize>,
}

pub(super) fn locate<'p>(
    process: &'p Process,
    pc: u64,
    lookup: u64,
    debug_root: &std::path::Path,
    cache: Option<&mut SymbolCache>,
) -> Location<'p> {
    let placed = &process.placed;
    let i = placed.partition_point(|p| p.range.start <= lookup);
    let Some(p) = i.checked_sub(1).map(|i| &placed[i]).filter(|p| lookup < p.range.end) else {
        return Location {
            file: None,
            offset: pc,
            file_offset: lookup,
            function: None,
            symbol: None,
        };
    };
    let table = p.file.symbols.get_or_init(|| {
        let data = p.file.data.as_ref()?;
        SymbolTable::for_file(data, debug_root).ok()
    });
    let address = lookup.wrapping_sub(p.bias);
    let symbol = table.as_ref().and_then(|t| match cache {
        Some(cache) => cache.index(&p.file, t, address),
        None => t.index(address),
    });
    let function = table.as_ref().zip(symbol).and_then(|(t, i)| {
        let (name, start) = t.demangled(i)?;
        Some((name, address - start + (pc - lookup)))
    });
    let file_offset = lookup.wrapping_sub(p.range.start).wrapping_add(p.pgoff);
    Location { file: Some(&p.file), offset: pc.wrapping_sub(p.bias), file_offset, function, symbol }
}
