//! Each profiled process's address space: the files it maps and where.

use std::sync::Arc;

use crate::cfi::{Data, Module, UnwindInfo};
use crate::modules::ModuleSet;
use crate::space::Segment;
use crate::symbolize::{Placed, Source, SymbolFile, Symbolizer};

use super::{next_id, Profiler};

/// A file mapped by the profiled processes, with what unwinding needs.
pub(super) struct FileInfo {
    /// None when the file could not be read (missing, not ELF).
    pub(super) unwind: Option<Arc<UnwindInfo>>,
    /// PT_LOADs, to place mappings.
    pub(super) loads: Vec<Segment>,
    /// Its name, and its symbols for the symbolizer.
    pub(super) symbols: Arc<SymbolFile>,
}

/// A process's address space at one moment; replaced, never changed.
#[derive(Clone, Default)]
pub(super) struct Process {
    /// Tells snapshots apart in the folded stacks' address keys (0: none).
    pub(super) id: u64,
    pub(super) modules: Arc<ModuleSet>,
    /// The same modules, for symbolizing.
    pub(super) symbolizer: Arc<Symbolizer>,
}

impl Profiler {
    /// A new executable mapping in process `pid`.
    pub(super) fn map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, filename: &[u8]) {
        let file = self.file(filename);
        let range = start..start.saturating_add(len);
        let id = next_id();
        let process = self.processes.entry(pid).or_default();
        let mut modules = process.modules.without_range(range.clone());
        let bias = crate::space::bias(&file.loads, start, pgoff, 0x1000);
        if let Some(info) = &file.unwind {
            let elf_range = range.start.wrapping_sub(bias)..range.end.wrapping_sub(bias);
            let name = file.symbols.path.to_string();
            if let Ok(module) = Module::place(name, info.clone(), elf_range, bias) {
                if let Ok(set) = modules.with_module(Arc::new(module)) {
                    modules = set;
                }
            }
        }
        let placed = Placed { range, bias, pgoff, file: file.symbols.clone(), doubtful: false };
        let symbolizer = Arc::new(process.symbolizer.with_mapping(placed));
        *process = Process { id, modules: Arc::new(modules), symbolizer };
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
        // Symbols from the file at its path, through the process's cache;
        // the vdso's from its image.
        let source = match data {
            Some(_) if path.starts_with('/') => Source::Path(path.to_string().into()),
            Some(data) => Source::Image(data),
            None => Source::None,
        };
        let debug_root = Some(self.options.debug_root.clone());
        let symbols = Arc::new(SymbolFile::new(path, source, debug_root));
        let info = Arc::new(FileInfo { unwind, loads, symbols });
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
