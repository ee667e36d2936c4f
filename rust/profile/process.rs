//! Each profiled process's address space: the files it maps and where.

use std::path::Path;
use std::sync::Arc;

use crate::source::memory::Data;
use crate::space::finder::{hex, same_build_id, Identity, Located};
use crate::space::jitdump::JitDump;
use crate::space::perfmap::PerfMap;
use crate::space::sections::CodeSegment;
use crate::space::Segment;
use crate::symbolize::{Placed, Source, SymbolFile, Symbolizer};
use crate::unwind::cfi::{Module, UnwindInfo};
use crate::unwind::jit::JitCfi;
use crate::unwind::modules::ModuleSet;

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

/// A process's perf map (or its jitdump's names), the name its code is
/// shown under (the file's path, as perf script shows a perf map's), and
/// its jitdump's unwind tables.
pub(super) struct JitMap {
    map: Arc<PerfMap>,
    file: Arc<SymbolFile>,
    cfi: Option<Arc<JitCfi>>,
}

/// A mapping of no file, as perf names it: where a JIT puts its code.
fn is_anonymous(filename: &[u8]) -> bool {
    filename == b"//anon"
        || filename.starts_with(b"/dev/zero")
        || filename.starts_with(b"/anon_hugepage")
        || filename.starts_with(b"[anon:")
}

impl Profiler {
    /// A new executable mapping in process `pid`.
    pub(super) fn map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, filename: &[u8]) {
        if crate::space::jitdump::is_jitdump_name(filename) {
            // Read where the JIT's code is mapped (here or later); a map
            // looked for before this, and not found, is looked for again.
            let path = std::path::PathBuf::from(String::from_utf8_lossy(filename).into_owned());
            self.jit_dumps.insert(pid, path);
            if self.perf_maps.get(&pid).is_some_and(Option::is_none) {
                self.perf_maps.remove(&pid);
            }
            return;
        }
        if is_anonymous(filename) {
            if let Some(jit) = self.perf_map(pid) {
                return self.map_jit(pid, start..start.saturating_add(len), &jit);
            }
        }
        let file = self.file(filename);
        let range = start..start.saturating_add(len);
        let bias = crate::space::bias(&file.loads, start, pgoff, 0x1000);
        let module = file.unwind.as_ref().and_then(|info| {
            let elf_range = range.start.wrapping_sub(bias)..range.end.wrapping_sub(bias);
            Module::place(file.symbols.path.to_string(), info.clone(), elf_range, bias).ok()
        });
        let placed = Placed { range, bias, pgoff, file: file.symbols.clone(), doubtful: false };
        self.install(pid, placed, module, None);
    }

    /// An anonymous executable mapping of a process with a perf map: JIT
    /// code, named by the map, without CFI (a module of code alone, so that
    /// return addresses into it are taken as in code).
    fn map_jit(&mut self, pid: i32, range: std::ops::Range<u64>, jit: &JitMap) {
        let code = vec![CodeSegment {
            address: range.start,
            size: range.end - range.start,
            file_offset: 0,
            file_size: 0,
        }];
        let mut info = UnwindInfo::without_file(self.arch, code).with_functions(jit.map.clone());
        if let Some(cfi) = &jit.cfi {
            info = info.with_foreign_cfi(cfi.clone(), 0);
        }
        let info = Arc::new(info);
        let module = Module::place(jit.file.path.to_string(), info, range.clone(), 0).ok();
        // Shown at their addresses, as perf script shows JIT code.
        let placed = Placed {
            range: range.clone(),
            bias: 0,
            pgoff: range.start,
            file: jit.file.clone(),
            doubtful: false,
        };
        self.install(pid, placed, module, Some(jit.map.clone()));
    }

    /// Process `pid`'s address space from now on: `placed` mapped over what
    /// was there, with `module` for unwinding (None: no unwind info), and
    /// `perf_map` naming its JIT code (the process then walks by frame
    /// pointers where CFI is missing).
    fn install(
        &mut self,
        pid: i32,
        placed: Placed,
        module: Option<Module>,
        perf_map: Option<Arc<PerfMap>>,
    ) {
        let id = next_id();
        let process = self.processes.entry(pid).or_default();
        let mut modules = process.modules.without_range(placed.range.clone());
        if let Some(set) = module.and_then(|m| modules.with_module(Arc::new(m)).ok()) {
            modules = set;
        }
        let mut symbolizer = process.symbolizer.with_mapping(placed);
        if let Some(map) = perf_map {
            symbolizer = symbolizer.with_perf_map(map);
        }
        *process = Process { id, modules: Arc::new(modules), symbolizer: Arc::new(symbolizer) };
    }

    /// Process `pid`'s JIT: its jitdump (where the recording saw it mapped,
    /// else `jit-PID.dump` in the options' directory), else its perf map
    /// (`perf-PID.map` there), read once; None when there is neither.
    fn perf_map(&mut self, pid: i32) -> Option<Arc<JitMap>> {
        let dir = self.options.perf_map_dir.clone();
        let recorded = self.jit_dumps.get(&pid).cloned();
        let arch = self.arch;
        let warnings = &mut self.summary.warnings;
        self.perf_maps
            .entry(pid)
            .or_insert_with(|| {
                let dumps = [recorded, dir.as_ref().map(|d| d.join(format!("jit-{pid}.dump")))];
                for path in dumps.into_iter().flatten() {
                    match JitDump::read(&path) {
                        Ok(dump) => {
                            let name: Arc<str> = path.to_string_lossy().into();
                            let file = Arc::new(SymbolFile::new(name, Source::None, None));
                            let cfi = JitCfi::new(&dump, arch).map(Arc::new);
                            return Some(Arc::new(JitMap {
                                map: Arc::new(dump.perf_map()),
                                file,
                                cfi,
                            }));
                        }
                        Err(e) if path.exists() => {
                            warnings.push(format!("{}: {e}: not used", path.display()));
                        }
                        Err(_) => {}
                    }
                }
                let path = dir?.join(format!("perf-{pid}.map"));
                let map = PerfMap::read(&path).ok()?;
                let name: Arc<str> = path.to_string_lossy().into();
                let file = Arc::new(SymbolFile::new(name, Source::None, None));
                Some(Arc::new(JitMap { map: Arc::new(map), file, cfi: None }))
            })
            .clone()
    }

    pub(super) fn file(&mut self, filename: &[u8]) -> Arc<FileInfo> {
        if let Some(f) = self.files.get(filename) {
            return f.clone();
        }
        let path: Arc<str> = String::from_utf8_lossy(filename).into();
        // The file read: the one at the path, unless it is another build
        // than the recording's; then perf's own copy, by build id.
        let mut file_path = std::path::PathBuf::from(&*path);
        let data = if filename == b"[vdso]" {
            self.vdso.clone()
        } else {
            let recorded = self.recorded.get(filename).filter(|id| !id.is_empty()).cloned();
            let want = recorded.clone().map(Identity::BuildId);
            let located = self.options.files.locate(Path::new(&*path), want.as_ref(), self.arch);
            let mut data = match (located, &want) {
                (Located { file: Some((found, summary)), .. }, Some(want))
                    if !want.matches(&summary) =>
                {
                    let has = match summary.build_id {
                        Some(_) => format!("build id {}", want.of_file(&summary)),
                        None => "no build id".to_owned(),
                    };
                    let shown = found.display();
                    self.summary
                        .warnings
                        .push(format!("{shown} has {has}, the recording's is {want}: not used"));
                    None
                }
                (Located { file: Some((found, _)), .. }, _) => {
                    let data = crate::source::files::map(&found).ok().map(Arc::new);
                    file_path = found;
                    data
                }
                (Located { file: None, .. }, _) => None,
            };
            if let (None, Some(want)) = (&data, &recorded) {
                let from_perf = perf_cached(want).map(|c| (c, "perf's build-id cache"));
                let cached = from_perf
                    .or_else(|| debuginfod_cached(want).map(|c| (c, "debuginfod's cache")));
                if let Some(((cached, d), whose)) = cached {
                    self.summary
                        .warnings
                        .push(format!("{path} read from {whose}: {}", cached.display()));
                    file_path = cached;
                    data = Some(Arc::new(d));
                }
            }
            data
        };
        let mut unwind = None;
        let mut loads = Vec::new();
        if let Some(data) = &data {
            // No .debug_frame of its own: its separate debug file's, if
            // there is one (.eh_frame may lack functions).
            let debug_root = self.options.debug_root.as_path();
            let debug = filename.starts_with(b"/").then_some((file_path.as_path(), debug_root));
            unwind = match crate::unwind::file::index_file(data.clone(), debug) {
                Ok(file) if file.arch == self.arch => Some(file.info),
                _ => None,
            };
            if let Ok(summary) = crate::space::elf::summarize(data) {
                loads = summary.segments().collect();
            }
        }
        if unwind.is_none() && path.starts_with('/') && !is_anonymous(filename) {
            self.summary.modules_missing.push(path.to_string());
        }
        // Symbols from the file at its path, through the process's cache;
        // the vdso's from its image.
        let source = match data {
            Some(_) if path.starts_with('/') => Source::Path(file_path),
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

impl Profiler {
    /// The recorded files (`HEADER_BUILD_ID`: those with samples) that are
    /// not here as recorded, nor in perf's build-id cache, fetched by build
    /// id; and, with inline frames and lines wanted, the DWARF of those
    /// without it here. Several downloads at once; each file no server
    /// gave is a warning, and its frames go without it.
    pub(super) fn fetch_missing(&mut self, config: &crate::space::debuginfod::Config) {
        use crate::space::debuginfod::{fetch_all_reporting, fetch_missing, Wanted};
        // The bar of the downloads is over with them: dropped on the way out.
        let downloads = self.options.downloads.take();
        let report = |d| {
            if let Some(report) = &downloads {
                report(d);
            }
        };
        if config.urls.is_empty() {
            return;
        }
        let mut files: Vec<(String, String, Option<std::path::PathBuf>)> = Vec::new();
        for (name, id) in &self.recorded {
            let path = String::from_utf8_lossy(name).into_owned();
            if !path.starts_with('/') || id.is_empty() || is_anonymous(name) {
                continue;
            }
            let want = Identity::BuildId(id.clone());
            let here = match self.options.files.locate(Path::new(&path), Some(&want), self.arch) {
                Located { file: Some((here, summary)), .. } if want.matches(&summary) => Some(here),
                _ => None,
            };
            let found =
                here.or_else(|| perf_cached(id).or_else(|| debuginfod_cached(id)).map(|(p, _)| p));
            files.push((path, hex(id), found));
        }
        let wanted: Vec<Wanted<'_>> = files
            .iter()
            .map(|(name, id, file)| Wanted { name, build_id: id, file: file.as_deref() })
            .collect();
        // Debug files only for inline frames and lines.
        let root = self.options.debug_root.clone();
        let debug_root = self.options.inline.then_some(root.as_path());
        fetch_missing(
            &wanted,
            debug_root,
            &mut |requests| {
                let answers = fetch_all_reporting(config, requests, &report);
                answers.into_iter().map(|a| a.map_err(|e| e.to_string())).collect()
            },
            &|_| true,
            &mut self.summary.warnings,
        );
    }
}

/// A file of build id `id` fetched before from debuginfod: its path in
/// debuginfod's cache, and its bytes.
fn debuginfod_cached(id: &[u8]) -> Option<(std::path::PathBuf, Data)> {
    let path = crate::space::debuginfod::cached(id, crate::space::debuginfod::Kind::Executable)?;
    let data = crate::source::files::map(&path).ok()?;
    Some((path, data))
}

/// perf's build-id cache: `$PERF_BUILDID_DIR`, else `~/.debug`.
pub(super) fn perf_buildid_dir() -> Option<std::path::PathBuf> {
    let set = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    set("PERF_BUILDID_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| set("HOME").map(|home| std::path::Path::new(&home).join(".debug")))
}

/// The copy of the file of build id `id` that `perf record` left in its
/// cache (`.build-id/xx/rest/elf`), checked to carry that build id.
fn perf_cached(id: &[u8]) -> Option<(std::path::PathBuf, Data)> {
    let hex = hex(id);
    let dir = perf_buildid_dir()?.join(".build-id").join(hex.get(..2)?).join(hex.get(2..)?);
    let path = dir.join("elf");
    let data = crate::source::files::map(&path).ok()?;
    let theirs = crate::space::elf::summarize(&data).ok()?.build_id?;
    same_build_id(id, &theirs).then_some((path, data))
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
    let ours = crate::space::elf::summarize(image).ok()?.build_id?;
    same_build_id(build_id, &ours).then(|| Data::Owned(image.to_vec()))
}
