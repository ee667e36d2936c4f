//! `Unwinder`, and the `Trace` of `Frame`s it returns: `crate::unwind`'s
//! unwinder, with the registers and memory given as Python values.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use super::errors::{guard, ArchError, CfiError, ElfError, MemoryReadError, StackwalkError};
use super::memory::PyMappedMemory;
use super::registers::PyRegisters;
use super::trace::frame_vector;
pub use super::trace::{PyFrame, PyTrace};
use crate::arch::registers::Registers;
use crate::arch::Arch;
use crate::source::memory::Data;
use crate::source::memory::{Regions, SegmentMemory};
use crate::unwind::cfi::{CfaRule, Module, RegRule, UnwindInfo};
use crate::unwind::file::{index_file, FileError};
use crate::unwind::{self, Frame as RsFrame, Strategy, Unwinder as RsUnwinder};

/// Unwinds native stacks for one architecture.
#[pyclass(module = "stackwalk._core", name = "Unwinder", subclass)]
pub struct PyUnwinder {
    inner: RsUnwinder,
    frames: Vec<RsFrame>,
    /// `unwind`'s scratch, empty between calls and kept for their
    /// allocations: the memory regions' holders, and the regions.
    held: Vec<(u64, HeldBytes)>,
    spans: Vec<(u64, &'static [u8])>,
    /// (module name, separate debug file its `.debug_frame` comes from).
    debug_files: Vec<(String, String)>,
    /// The JIT's perf map (`set_perf_map`): where its functions start.
    perf_map: Option<Arc<crate::space::perfmap::PerfMap>>,
    /// Its jitdump's unwind tables, where it was given one.
    jit_cfi: Option<Arc<crate::unwind::jit::JitCfi>>,
}

#[pymethods]
impl PyUnwinder {
    #[new]
    #[pyo3(signature = (arch = "x86_64", strategies = None, scan_words = 1024))]
    fn new(arch: &str, strategies: Option<Vec<String>>, scan_words: usize) -> PyResult<Self> {
        let arch: Arch = arch
            .parse()
            .map_err(|e: crate::arch::UnknownArch| ArchError::new_err(e.to_string()))?;
        let mut inner = RsUnwinder::new(arch);
        if let Some(names) = strategies {
            inner.set_strategies(&parse_strategies(&names)?);
        }
        inner.set_scan_words(scan_words);
        Ok(PyUnwinder {
            inner,
            frames: Vec::with_capacity(64),
            held: Vec::new(),
            spans: Vec::new(),
            debug_files: Vec::new(),
            perf_map: None,
            jit_cfi: None,
        })
    }

    #[getter]
    fn arch(&self) -> &'static str {
        self.inner.arch().name()
    }

    /// The ways a frame's caller is looked for, in the order tried.
    #[getter]
    fn strategies(&self) -> Vec<&'static str> {
        self.inner.strategies().iter().map(|s| s.as_str()).collect()
    }

    /// How many stack words a scan looks at above a frame's sp.
    #[getter]
    fn scan_words(&self) -> usize {
        self.inner.scan_words()
    }

    /// The modules added: (name, start, end, bias), sorted by address.
    #[getter]
    fn modules(&self) -> Vec<(String, u64, u64, u64)> {
        self.inner
            .modules()
            .iter()
            .map(|m| (m.name.clone(), m.range.start, m.range.end, m.bias))
            .collect()
    }

    /// (hits, misses) of the rule cache since the unwinder was made.
    #[getter]
    fn cache_stats(&self) -> (u64, u64) {
        let stats = self.inner.cache_stats();
        (stats.hits, stats.misses)
    }

    /// Add the ELF file at `path`, loaded at `bias` (runtime address − ELF
    /// virtual address). The file is mapped, not read: only its headers are
    /// touched now, and CFI is parsed on demand. A file without
    /// `.debug_frame` gets its separate debug file's, found under
    /// `debug_root` by build id or `.gnu_debuglink` (None: not looked for).
    /// `ranges` (runtime start, end) are where the file is mapped, when
    /// known (see `crate::space::place`); by default its loadable segments' span.
    #[pyo3(signature = (path, bias = 0, *, ranges = None, debug_root = Some(PathBuf::from("/usr/lib/debug"))))]
    pub(super) fn add_module(
        &mut self,
        path: PathBuf,
        bias: i128,
        ranges: Option<Vec<(u64, u64)>>,
        debug_root: Option<PathBuf>,
    ) -> PyResult<()> {
        let name = path.to_string_lossy().into_owned();
        let root = debug_root.as_deref();
        let file = MODULE_FILES
            .get(&path, root, |file| {
                Arc::new(match crate::source::files::map_file(file) {
                    Ok(data) => {
                        ModuleFile::read(Data::Mapped(data), root.map(|r| (path.as_path(), r)))
                    }
                    Err(e) => ModuleFile::Unreadable(e.to_string()),
                })
            })
            .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        self.add(name, &file, bias, ranges)
    }

    /// The separate debug file whose `.debug_frame` the module added from
    /// `path` uses, if any.
    fn debug_file(&self, path: PathBuf) -> Option<String> {
        let name = path.to_string_lossy();
        self.debug_files.iter().find(|(n, _)| *n == name).map(|(_, d)| d.clone())
    }

    /// Add an ELF image held in memory (e.g. the vdso read from a process),
    /// loaded at `bias`. The bytes are copied.
    pub(super) fn add_module_image(
        &mut self,
        name: &Bound<'_, PyString>,
        image: &Bound<'_, PyAny>,
        bias: i128,
    ) -> PyResult<()> {
        let buf = PyBuffer::<u8>::get(image)?;
        let bytes = buf.to_vec(image.py())?;
        self.add(module_name(name), &ModuleFile::read(Data::Owned(bytes), None), bias, None)
    }

    /// Add a module whose file is missing: only where it is (`ranges`) and
    /// which of it is code (`code`), as runtime (start, end) pairs. Return
    /// addresses into its code are accepted (checked against `code` only);
    /// a frame in it has no CFI, and is walked on by the other strategies,
    /// unless `sym_file` names its Breakpad symbol file, whose `STACK CFI`
    /// records (offsets from `base`, the module's start) then stand in.
    /// `jit`: a JIT's code, whose functions start where the perf map given
    /// to `set_perf_map` says. `pe_file`: its PE file, whose code is the
    /// module's and whose x64 unwind tables (offsets from `base`) unwind it,
    /// whatever the symbol file says (an x86 file has none). `macho_file`:
    /// its Mach-O file, whose code is the module's and whose compact unwind
    /// info and `__eh_frame` (offsets from `base`, its Mach header) unwind it.
    #[pyo3(signature = (name, ranges, code, sym_file = None, base = 0, jit = false, pe_file = None, macho_file = None))]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_missing_module(
        &mut self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        ranges: Vec<(u64, u64)>,
        code: Vec<(u64, u64)>,
        sym_file: Option<PathBuf>,
        base: u64,
        jit: bool,
        pe_file: Option<PathBuf>,
        macho_file: Option<PathBuf>,
    ) -> PyResult<()> {
        let name = module_name(name);
        let code = code
            .iter()
            .filter(|(a, b)| a < b)
            .map(|&(address, end)| crate::space::sections::CodeSegment {
                address,
                size: end - address,
                file_offset: 0,
                file_size: 0,
            })
            .collect();
        let mut info = UnwindInfo::without_file(self.inner.arch(), code);
        if let (true, Some(map)) = (jit, &self.perf_map) {
            info = info.with_functions(map.clone());
        }
        let mut tables = None;
        if let Some(path) = pe_file {
            let image = py
                .detach(|| crate::space::pe::PeImage::open(&path))
                .map_err(StackwalkError::new_err)?;
            // Its code from the file, for the checks of the other strategies.
            info = info.with_code_bytes(image.data.clone(), image.code_segments(base));
            if image.headers.arch == crate::arch::Arch::X86_64 {
                tables =
                    Some(crate::unwind::pe::PeUnwind::new(image).map_err(StackwalkError::new_err)?);
            }
        }
        let mut tables: Option<Arc<dyn crate::unwind::cfi::ForeignCfi>> =
            tables.map(|t| Arc::new(t) as _);
        if let Some(path) = macho_file {
            let arch = Some(self.inner.arch());
            let image = py
                .detach(|| crate::space::macho::MachoImage::open(&path, arch))
                .map_err(StackwalkError::new_err)?;
            info = info.with_code_bytes(image.data.clone(), image.code_segments(base));
            let compact = crate::unwind::compact::CompactUnwind::new(image)
                .map_err(|e| StackwalkError::new_err(format!("{}: {e}", path.display())))?;
            tables = Some(Arc::new(compact));
        }
        if let (true, None, Some(cfi)) = (jit, &tables, &self.jit_cfi) {
            tables = Some(cfi.clone() as _);
        }
        if let Some(rules) = tables {
            info = info.with_foreign_cfi(rules, base);
        } else if let Some(path) = sym_file {
            let symbols = py
                .detach(|| crate::symbolize::symbols_file(&path))
                .map_err(StackwalkError::new_err)?;
            if symbols.has_rules() {
                info = info.with_foreign_cfi(symbols, base);
            }
        }
        let info = Arc::new(info);
        let modules = ranges
            .iter()
            .map(|&(a, b)| Module::place(name.clone(), info.clone(), a..b, 0).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
        self.add_placed(modules)
    }

    /// The perf map of the JIT whose code `add_missing_module(..., jit=True)`
    /// adds from now on (`/tmp/perf-PID.map`): where its functions start,
    /// which tells whether a frame 0 in it has made its frame record yet.
    fn set_perf_map(&mut self, map: &Bound<'_, PyAny>) -> PyResult<()> {
        let (names, cfi) = super::symbolize::jit_of(map)?;
        self.perf_map = Some(names);
        self.jit_cfi = cfi;
        Ok(())
    }

    /// The threads walked ran on an Apple platform (macOS, iOS): frame
    /// records end their chain with a saved frame pointer of 0.
    pub(super) fn set_apple(&mut self, apple: bool) {
        self.inner.set_apple(apple);
    }

    /// Where the main thread's stack began (the address of its argc, as
    /// `CoreFile.initial_stack` finds it): nothing above it is a frame, and
    /// the fallback strategies look no further. None: unknown.
    #[pyo3(signature = (address))]
    fn set_initial_stack(&mut self, address: Option<u64>) {
        self.inner.set_initial_stack(address);
    }

    /// What is known of the process whose threads are walked (see
    /// `crate::unwind::Unwinder::set_process`): its program's entry point
    /// (`AT_ENTRY`), which no fallback step takes for a return address, and
    /// each thread's stack, (tid, start, end, sp, live_end): the captured
    /// region holding its sp, and the top of its own frames there (None:
    /// not walked yet). No scanned word in a stack is a return address, and
    /// a walk ends where its sp enters the live part of another thread's
    /// stack, `sp..live_end` (`other_thread_stack`).
    #[pyo3(signature = (entry = None, stacks = Vec::new()))]
    #[allow(clippy::type_complexity)]
    fn set_process(&mut self, entry: Option<u64>, stacks: Vec<(u32, u64, u64, u64, Option<u64>)>) {
        let stacks = stacks
            .into_iter()
            .map(|(tid, start, end, sp, live_end)| crate::source::memory::ThreadStack {
                tid,
                start,
                end,
                sp,
                live_end,
            })
            .collect();
        self.inner.set_process(crate::unwind::ProcessFacts::new(entry, stacks));
    }

    /// Unwind from `regs` (register name -> value) over `memory` (an
    /// iterable of (start address, bytes-like) regions).
    /// At most `max_frames` frames; None: as many as the captured stack (the
    /// region holding the stack pointer) can hold, a frame taking at least a
    /// word. `registers`: keep each frame's registers (`Trace.registers`).
    #[pyo3(signature = (regs, memory, max_frames = None, registers = false))]
    fn unwind(
        &mut self,
        regs: &Bound<'_, PyAny>,
        memory: &Bound<'_, PyAny>,
        max_frames: Option<usize>,
        registers: bool,
    ) -> PyResult<PyTrace> {
        let arch = self.inner.arch();
        let (pc, shared) = shared_registers(arch, regs)?;
        let mapped = mapped_memory(memory);
        let mut held = std::mem::take(&mut self.held);
        if mapped.is_none() {
            extract_buffers_into(memory, &mut held)?;
        }
        let mut regions = match &mapped {
            Some(m) => m.regions(),
            None => Regions::in_storage(std::mem::take(&mut self.spans)),
        };
        for (start, bytes) in &held {
            regions.add(*start, bytes.as_slice());
        }
        let (inner, frames) = (&mut self.inner, &mut self.frames);
        let mut files = registers.then(Vec::new);
        let regs = shared;
        let end = guard("unwinding", || match &mut files {
            Some(files) => {
                inner.unwind_with_registers(pc, &regs, &mut regions, max_frames, frames, files)
            }
            None => inner.unwind(pc, &regs, &mut regions, max_frames, frames),
        });
        if mapped.is_none() {
            self.spans = regions.into_storage();
        }
        held.clear();
        self.held = held;
        let end = end?;
        Ok(PyTrace {
            // Hand the buffer over rather than copying it; the next walk gets
            // one of the same capacity, a trace's that was let go of if any.
            frames: {
                let capacity = self.frames.len().max(64);
                std::mem::replace(&mut self.frames, frame_vector(capacity))
            },
            end,
            arch,
            end_module: self.inner.end_module(&end),
            registers: files,
        })
    }

    /// The walks of one process's threads (`threads`: objects with a `tid`
    /// and their `regs`, read when a walk needs them, not held; over
    /// `memory`), none going on into another thread's stack
    /// (`crate::unwind::stack_owners`): where two walks share an sp, the
    /// owner's live stack is set (`set_process`, with `entry` and `stacks`:
    /// each thread's (tid, start, end, sp)) and the others are walked
    /// again, to end (`other_thread_stack`) where they enter it. The
    /// traces in the order of `threads`.
    #[pyo3(signature = (threads, memory, stacks, entry = None, max_frames = None, registers = false))]
    #[allow(clippy::type_complexity)]
    fn walk_threads(
        &mut self,
        threads: Vec<Bound<'_, PyAny>>,
        memory: &Bound<'_, PyAny>,
        stacks: Vec<(u32, u64, u64, u64)>,
        entry: Option<u64>,
        max_frames: Option<usize>,
        registers: bool,
    ) -> PyResult<Vec<PyTrace>> {
        let walk = |this: &mut Self, thread: &Bound<'_, PyAny>| {
            let regs = thread.getattr(pyo3::intern!(thread.py(), "regs"))?;
            this.unwind(&regs, memory, max_frames, registers)
        };
        let mut traces = Vec::with_capacity(threads.len());
        for thread in &threads {
            traces.push(walk(self, thread)?);
        }
        let sps: Vec<Vec<u64>> =
            traces.iter().map(|t| t.frames.iter().map(|f| f.sp).collect()).collect();
        let (owned, intruders) = unwind::stack_owners(&sps, self.inner.arch().word_size());
        if owned.iter().all(Option::is_none) {
            return Ok(traces);
        }
        let mut live = std::collections::HashMap::new();
        for (thread, top) in threads.iter().zip(&owned) {
            if let Some(top) = top {
                let tid: u32 = thread.getattr(pyo3::intern!(thread.py(), "tid"))?.extract()?;
                live.insert(tid, *top);
            }
        }
        let stacks = stacks
            .into_iter()
            .map(|(tid, start, end, sp)| (tid, start, end, sp, live.get(&tid).copied()))
            .collect();
        self.set_process(entry, stacks);
        for (thread, (trace, intruder)) in threads.iter().zip(traces.iter_mut().zip(intruders)) {
            if intruder {
                *trace = walk(self, thread)?;
            }
        }
        Ok(traces)
    }

    /// Unwind many stacks at once: `stacks` is an iterable of (regs, memory)
    /// pairs as `unwind` takes them (memory regions are used in place, not
    /// copied). The walks run without the GIL, spread over every CPU, each
    /// worker with caches of its own; the batch holds the frames in flat
    /// arrays, in the order of `stacks`.
    #[pyo3(signature = (stacks, max_frames = None))]
    fn unwind_many(
        &self,
        py: Python<'_>,
        stacks: &Bound<'_, PyAny>,
        max_frames: Option<usize>,
    ) -> PyResult<super::batch::PyTraceBatch> {
        super::batch::unwind_many(py, &self.inner, stacks, max_frames)
    }

    /// Unwind the same stack `iterations` times inside Rust, without the
    /// GIL, and return (frames unwound in all, nanoseconds taken): the
    /// core's own speed, without the Python call around it. For benchmarks.
    #[pyo3(signature = (regs, memory, iterations, max_frames = None))]
    fn _bench_unwind(
        &mut self,
        py: Python<'_>,
        regs: &Bound<'_, PyAny>,
        memory: &Bound<'_, PyAny>,
        iterations: u64,
        max_frames: Option<usize>,
    ) -> PyResult<(u64, u64)> {
        let (pc, registers) = shared_registers(self.inner.arch(), regs)?;
        let owned: Vec<(u64, Vec<u8>)> = extract_buffers(memory)?
            .into_iter()
            .map(|(start, held)| Ok((start, held.as_slice().to_vec())))
            .collect::<PyResult<_>>()?;
        let (inner, frames) = (&mut self.inner, &mut self.frames);
        Ok(py.detach(move || {
            let mut regions = Regions::new();
            for (start, bytes) in &owned {
                regions.add(*start, bytes);
            }
            let started = std::time::Instant::now();
            let mut total = 0u64;
            for _ in 0..iterations {
                inner.unwind(pc, &registers, &mut regions, max_frames, frames);
                total += frames.len() as u64;
            }
            (total, started.elapsed().as_nanos() as u64)
        }))
    }

    /// The CFI row in force at runtime address `pc` (no pc−1 adjustment), or
    /// None if no FDE covers it. For introspection and differential tests.
    fn rule_at<'py>(&mut self, py: Python<'py>, pc: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        let inner = &mut self.inner;
        let (index, row, range) = match guard("looking up CFI", || inner.row_at(pc))? {
            Ok(found) => found,
            Err(crate::unwind::cfi::LookupError::NoFde) => return Ok(None),
            Err(e) => return Err(CfiError::new_err(format!("at {pc:#x}: {e}"))),
        };
        let module = &self.inner.modules()[index];
        let expr = |e| PyBytes::new(py, module.expr_bytes(e));
        let out = PyDict::new(py);
        let cfa = match row.cfa {
            CfaRule::RegOffset { reg, offset } => {
                ("reg", reg, offset).into_pyobject(py)?.into_any()
            }
            CfaRule::Expr(e) => ("expr", expr(e)).into_pyobject(py)?.into_any(),
            // (The row shown is the CFI's own, its expressions undecoded.)
            CfaRule::DerefRegister { reg, offset } => {
                ("deref_reg", reg, offset).into_pyobject(py)?.into_any()
            }
        };
        out.set_item("cfa", cfa)?;
        out.set_item("ra_column", row.ra)?;
        let registers = PyDict::new(py);
        for &(reg, rule) in &row.rules {
            let rule = match rule {
                RegRule::Undefined => PyTuple::new(py, ["undefined"])?.into_any(),
                RegRule::SameValue => PyTuple::new(py, ["same_value"])?.into_any(),
                RegRule::Offset(n) => ("offset", n).into_pyobject(py)?.into_any(),
                RegRule::ValOffset(n) => ("val_offset", n).into_pyobject(py)?.into_any(),
                RegRule::Register(r) => ("register", r).into_pyobject(py)?.into_any(),
                RegRule::Expr(e) => ("expression", expr(e)).into_pyobject(py)?.into_any(),
                RegRule::ValExpr(e) => ("val_expression", expr(e)).into_pyobject(py)?.into_any(),
                RegRule::AtRegister { reg, offset } => {
                    ("at_register", reg, offset).into_pyobject(py)?.into_any()
                }
            };
            registers.set_item(reg, rule)?;
        }
        out.set_item("registers", registers)?;
        out.set_item("signal_frame", row.signal_frame)?;
        out.set_item("fde_start", range.start)?;
        out.set_item("fde_end", range.end)?;
        Ok(Some(out))
    }
}

/// A module's file as `add_module` reads it: its CFI indexed, or why it
/// cannot be used. Kept per file for the life of the process (at most 256
/// files): a directory of cores, or a program unwinding many stacks, adds
/// the same libraries again and again.
#[derive(Clone)]
enum ModuleFile {
    Indexed {
        arch: Arch,
        info: Arc<UnwindInfo>,
        /// The loadable segments' span, in ELF addresses.
        range: std::ops::Range<u64>,
        /// The separate debug file whose `.debug_frame` it uses.
        debug_path: Option<String>,
    },
    /// An ELF file of a machine no unwinder is for (its e_machine).
    OtherMachine(u16),
    /// No usable ELF file: why (an ElfError's message, without the name).
    Unreadable(String),
    /// An internal error while reading it (a StackwalkError's message).
    Internal(String),
}

static MODULE_FILES: crate::source::files::FileCache<Arc<ModuleFile>> =
    crate::source::files::FileCache::new(256);

/// Drop the module files used longest ago (see `FileCache::trim`).
pub(super) fn trim_module_files(keep: f64) -> usize {
    MODULE_FILES.trim(keep)
}

impl ModuleFile {
    /// `debug`: the file's path and the root to look for its separate debug
    /// file under.
    fn read(data: Data, debug: Option<(&std::path::Path, &std::path::Path)>) -> ModuleFile {
        match guard("indexing CFI", || index_file(Arc::new(data), debug)) {
            Ok(Ok(f)) => ModuleFile::Indexed {
                arch: f.arch,
                info: f.info,
                range: f.range,
                debug_path: f.debug_path,
            },
            Ok(Err(FileError::OtherMachine(machine))) => ModuleFile::OtherMachine(machine),
            Ok(Err(e)) => ModuleFile::Unreadable(e.to_string()),
            Err(e) => ModuleFile::Internal(e.to_string()),
        }
    }
}

impl PyUnwinder {
    /// Place the module read as `file` at `bias`, in `ranges` (runtime
    /// addresses) or its loadable segments' span.
    fn add(
        &mut self,
        name: String,
        file: &ModuleFile,
        bias: i128,
        ranges: Option<Vec<(u64, u64)>>,
    ) -> PyResult<()> {
        let arch = self.inner.arch();
        let (info, range, debug_path) = match file {
            ModuleFile::Indexed { arch: theirs, .. } if *theirs != arch => {
                return Err(ArchError::new_err(format!(
                    "{name}: the file is for {theirs}, the unwinder for {arch}"
                )));
            }
            ModuleFile::Indexed { info, range, debug_path, .. } => (info, range, debug_path),
            ModuleFile::OtherMachine(machine) => {
                return Err(ArchError::new_err(format!(
                    "{name}: the file is for e_machine {machine}, the unwinder for {arch}"
                )));
            }
            ModuleFile::Unreadable(e) => return Err(ElfError::new_err(format!("{name}: {e}"))),
            ModuleFile::Internal(e) => return Err(StackwalkError::new_err(e.clone())),
        };
        // Bias is runtime − ELF address, taken modulo 2^64 (it may be negative).
        let bias = bias as u64;
        // ELF address ranges: the given runtime ranges less the bias, or the
        // loadable segments' span.
        let elf_ranges = match ranges {
            Some(r) => r.iter().map(|&(a, b)| a.wrapping_sub(bias)..b.wrapping_sub(bias)).collect(),
            None => vec![range.clone()],
        };
        let modules = elf_ranges
            .into_iter()
            .map(|r| Module::place(name.clone(), info.clone(), r, bias).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        self.add_placed(modules)?;
        if let Some(d) = debug_path {
            self.debug_files.push((name, d.clone()));
        }
        Ok(())
    }

    /// Add the pieces of one module, all or nothing: a piece over another
    /// module leaves the set as it was.
    fn add_placed(&mut self, modules: Vec<Arc<Module>>) -> PyResult<()> {
        let before = self.inner.module_set().clone();
        for module in modules {
            if let Err(e) = self.inner.add_module(module) {
                self.inner.set_modules(before);
                return Err(StackwalkError::new_err(e.to_string()));
            }
        }
        Ok(())
    }
}

// The default of `scan_words` in `Unwinder.__new__`'s signature (a literal, for its text signature).
const _: () = assert!(unwind::DEFAULT_SCAN_WORDS == 1024);

/// Strategy names, checked: known, at least one, each once.
/// A module's name as given: a path from a core's NT_FILE may hold bytes
/// that are not UTF-8, which Python keeps as lone surrogates (a `String`
/// could not take them); they are shown as U+FFFD.
fn module_name(name: &Bound<'_, PyString>) -> String {
    name.to_string_lossy().into_owned()
}

pub(super) fn parse_strategies(names: &[String]) -> PyResult<Vec<Strategy>> {
    if names.is_empty() {
        return Err(StackwalkError::new_err(
            "strategies is empty: give at least one of cfi, frame_pointer, scan",
        ));
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let s: Strategy = name
            .parse()
            .map_err(|e: unwind::UnknownStrategy| StackwalkError::new_err(e.to_string()))?;
        if out.contains(&s) {
            return Err(StackwalkError::new_err(format!("strategy {name:?} given twice")));
        }
        out.push(s);
    }
    Ok(out)
}

/// A register's name as an interned string, and its DWARF column (None: the pc).
type RegisterKey = (Py<PyString>, Option<u16>);

/// The register names `regs` may use for `arch`, as interned strings with
/// their DWARF column (None: the pc), aliases (aarch64's fp and lr) before
/// the names they stand for, so that a canonical name given too wins.
fn register_keys(py: Python<'_>, arch: Arch) -> &[RegisterKey] {
    static KEYS: [PyOnceLock<Vec<RegisterKey>>; 4] =
        [PyOnceLock::new(), PyOnceLock::new(), PyOnceLock::new(), PyOnceLock::new()];
    let (at, aliases): (usize, &[&str]) = match arch {
        Arch::X86_64 => (0, &[]),
        Arch::Aarch64 => (1, &["fp", "lr"]),
        Arch::I386 => (2, &[]),
        // gdb's and perf's names of r11-r15 (pc: the pc name below).
        Arch::Arm => (3, &["fp", "ip", "r13", "r14", "r15"]),
    };
    KEYS[at].get_or_init(py, || {
        let names = (0..crate::arch::NUM_REGS as u16).filter_map(|col| arch.register_name(col));
        aliases
            .iter()
            .copied()
            .chain(names)
            .chain([arch.pc_name()])
            .filter_map(|name| {
                Some((PyString::intern(py, name).unbind(), arch.register_by_name(name)?))
            })
            .collect()
    })
}

/// The pc and registers of `regs`: a `Registers` of this architecture (no
/// name looked up, and its values shared, not copied: a batch's stacks
/// given one such object each hold a reference, not 272 bytes apiece), or a
/// mapping of names to values. Both must be there.
pub(super) fn shared_registers(
    arch: Arch,
    regs: &Bound<'_, PyAny>,
) -> PyResult<(u64, Arc<Registers>)> {
    let (pc, registers) = match regs.cast::<PyRegisters>() {
        Ok(given) => {
            let given = given.borrow();
            if given.arch != arch {
                return Err(ArchError::new_err(format!(
                    "registers of {}, the unwinder is for {arch}",
                    given.arch
                )));
            }
            (given.pc, given.regs.clone())
        }
        Err(_) => {
            let (pc, registers) = registers_by_name(arch, regs)?;
            (pc, Arc::new(registers))
        }
    };
    let pc_name = arch.pc_name();
    let pc = pc.ok_or_else(|| {
        StackwalkError::new_err(format!("regs lacks the program counter ({pc_name})"))
    })?;
    if registers.get(arch.sp()).is_none() {
        let sp_name = arch.register_name(arch.sp()).unwrap_or("sp");
        return Err(StackwalkError::new_err(format!("regs lacks the stack pointer ({sp_name})")));
    }
    Ok((pc, registers))
}

/// The pc (if given) and registers a mapping of register names names.
pub(super) fn registers_by_name(
    arch: Arch,
    regs: &Bound<'_, PyAny>,
) -> PyResult<(Option<u64>, Registers)> {
    let mut registers = Registers::new();
    let mut pc = None;
    let mut set = |col: Option<u16>, value: &Bound<'_, PyAny>| -> PyResult<()> {
        match col {
            Some(col) => registers.set(col, value.extract::<u64>()?),
            None => pc = Some(value.extract::<u64>()?),
        }
        Ok(())
    };
    if let Ok(dict) = regs.cast::<PyDict>() {
        // The registers unwinding uses, looked up by interned name: a dict of
        // a thread's registers holds many more (flags, segment registers,
        // fs_base...), which are not read at all.
        for (key, col) in register_keys(regs.py(), arch) {
            if let Some(value) = dict.get_item(key.bind(regs.py()))? {
                set(*col, &value)?;
            }
        }
    } else {
        for item in regs.call_method0("items")?.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            if let Some(col) = arch.register_by_name(k.extract::<&str>()?) {
                set(col, &v)?;
            }
        }
    }
    Ok((pc, registers))
}

/// A memory region's bytes, held: a `bytes` object as it is (immutable; no
/// buffer export, the common case at a fraction of its cost), else any
/// C-contiguous buffer (bytearray, memoryview, mmap, numpy), exported.
pub(super) struct HeldBytes {
    ptr: *const u8,
    len: usize,
    _keep: Keep,
}

enum Keep {
    Bytes(#[allow(dead_code)] Py<PyBytes>),
    Buffer(#[allow(dead_code)] PyBuffer<u8>),
}

// SAFETY: the bytes are those of an immutable `bytes` object or of an
// exported buffer (its exporter cannot resize or free it while exported),
// kept alive by `_keep` as long as this value lives; reading them needs no
// GIL.
unsafe impl Send for HeldBytes {}
// SAFETY: as above; the bytes are only read.
unsafe impl Sync for HeldBytes {}

impl HeldBytes {
    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` and `len` describe the held object's bytes (see above).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// `memory`'s segments if it is a core's memory (`MappedMemory`), None if it
/// is anything else (regions to take with [`extract_buffers_into`]). A list
/// of regions, the usual form, is told at once, without the search of the
/// type's bases a failed cast makes.
pub(super) fn mapped_memory(memory: &Bound<'_, PyAny>) -> Option<Arc<SegmentMemory>> {
    if memory.is_exact_instance_of::<pyo3::types::PyList>() {
        return None;
    }
    memory.cast::<PyMappedMemory>().ok().map(|m| m.get().inner.clone())
}

pub(super) fn extract_buffers(memory: &Bound<'_, PyAny>) -> PyResult<Vec<(u64, HeldBytes)>> {
    let mut out = Vec::new();
    extract_buffers_into(memory, &mut out)?;
    Ok(out)
}

/// A memory region's (start, bytes-like), the pair read without the
/// conversions' general paths (a batch reads thousands): a tuple's items
/// borrowed, the address by `PyLong_AsUnsignedLong` (a loop over the int's
/// digits, where `PyLong_AsUnsignedLongLong` goes through a byte array).
fn region_pair<'py>(item: &Bound<'py, PyAny>) -> Option<(u64, Bound<'py, PyAny>)> {
    let Ok(pair) = item.cast::<PyTuple>() else { return item.extract().ok() };
    if pair.len() != 2 {
        return None;
    }
    let (start, data) = (pair.get_borrowed_item(0).ok()?, pair.get_borrowed_item(1).ok()?);
    let start = if std::mem::size_of::<std::ffi::c_ulong>() == 8
        && start.is_exact_instance_of::<pyo3::types::PyInt>()
    {
        // SAFETY: `start` is an int, borrowed from the tuple for this call.
        let value = unsafe { pyo3::ffi::PyLong_AsUnsignedLong(start.as_ptr()) };
        if value == std::ffi::c_ulong::MAX && PyErr::take(item.py()).is_some() {
            return None; // negative, or past 64 bits
        }
        value as u64
    } else {
        start.extract::<u64>().ok()?
    };
    Some((start, data.to_owned()))
}

/// [`extract_buffers`], appended to `out` (a batch's regions, all in one vector).
pub(super) fn extract_buffers_into(
    memory: &Bound<'_, PyAny>,
    out: &mut Vec<(u64, HeldBytes)>,
) -> PyResult<()> {
    let mut take = |i: usize, item: &Bound<'_, PyAny>| -> PyResult<()> {
        let (start, data) = region_pair(item).ok_or_else(|| {
            MemoryReadError::new_err(format!(
                "memory region {i} is not a (start address, bytes-like) pair"
            ))
        })?;
        let data = match data.cast_into::<PyBytes>() {
            Ok(bytes) => {
                let slice = bytes.as_bytes();
                let (ptr, len) = (slice.as_ptr(), slice.len());
                out.push((start, HeldBytes { ptr, len, _keep: Keep::Bytes(bytes.unbind()) }));
                return Ok(());
            }
            Err(e) => e.into_inner(),
        };
        let buf = PyBuffer::<u8>::get(&data).map_err(|e| {
            MemoryReadError::new_err(format!(
                "memory region {i} at {start:#x} is not a byte buffer: {e}"
            ))
        })?;
        if !buf.is_c_contiguous() {
            return Err(MemoryReadError::new_err(format!(
                "memory region {i} at {start:#x} is not contiguous"
            )));
        }
        let (ptr, len) = (buf.buf_ptr() as *const u8, buf.len_bytes());
        out.push((start, HeldBytes { ptr, len, _keep: Keep::Buffer(buf) }));
        Ok(())
    };
    // A list (the usual form) is read without the iterator protocol.
    if let Ok(list) = memory.cast::<pyo3::types::PyList>() {
        for (i, item) in list.iter().enumerate() {
            take(i, &item)?;
        }
    } else {
        for (i, item) in memory.try_iter()?.enumerate() {
            take(i, &item?)?;
        }
    }
    Ok(())
}
