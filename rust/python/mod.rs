//! The PyO3 bindings: the only module that knows about Python. Each is a
//! thin wrapper over a plain-Rust type, split by area, one file each
//! (`corefile`: core files); the areas not yet split are here. Files are
//! mapped, never copied.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

mod corefile;
mod progress;

use crate::arch::Arch;
use crate::cfi::{CfaRule, Data, Module, RegRule, UnwindInfo};
use crate::elf::read_elf;
use crate::memory::{Regions, Segment, SegmentMemory};
use crate::registers::Registers;
use crate::unwind::{self, Frame as RsFrame, Strategy, Unwinder as RsUnwinder};

create_exception!(
    stackwalk._core,
    StackwalkError,
    PyException,
    "Base class of every error stackwalk raises."
);
create_exception!(
    stackwalk._core,
    ElfError,
    StackwalkError,
    "An ELF file could not be read or lacks what is needed."
);
create_exception!(
    stackwalk._core,
    CfiError,
    StackwalkError,
    "Call frame information is malformed."
);
create_exception!(
    stackwalk._core,
    MemoryReadError,
    StackwalkError,
    "Captured memory is missing or malformed."
);
create_exception!(
    stackwalk._core,
    CoreError,
    StackwalkError,
    "The file is not an ELF core file that stackwalk can read."
);
create_exception!(
    stackwalk._core,
    ArchError,
    StackwalkError,
    "Unknown or mismatched architecture."
);

/// One frame of a trace.
#[pyclass(module = "stackwalk._core", name = "Frame", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyFrame(RsFrame);

#[pymethods]
impl PyFrame {
    /// Frame 0: the instruction pointer; later frames: the return address.
    #[getter]
    fn pc(&self) -> u64 {
        self.0.pc
    }

    #[getter]
    fn sp(&self) -> u64 {
        self.0.sp
    }

    /// The canonical frame address, or None where it could not be computed.
    #[getter]
    fn cfa(&self) -> Option<u64> {
        self.0.cfa
    }

    /// How the frame was found, best first: "context" (given registers),
    /// "cfi", "frame_pointer", "cfi_scan" (CFI from a scanned frame), "scan".
    #[getter]
    fn trust(&self) -> &'static str {
        self.0.trust.as_str()
    }

    /// The pc is where the thread was stopped (frame 0, or interrupted by a
    /// signal), not a return address.
    #[getter]
    fn interrupted(&self) -> bool {
        self.0.interrupted
    }

    /// The frame is a signal trampoline (its CIE has the `S` augmentation).
    #[getter]
    fn signal_frame(&self) -> bool {
        self.0.signal_frame
    }

    /// The address to look up the frame's function and line at: the pc where
    /// it was not reached by a call, else pc − 1 (inside the call).
    #[getter]
    fn lookup_pc(&self) -> u64 {
        self.0.lookup_pc()
    }

    fn __repr__(&self) -> String {
        let f = &self.0;
        let cfa = f.cfa.map_or("None".to_owned(), |c| format!("{c:#x}"));
        format!("Frame(pc={:#x}, sp={:#x}, cfa={cfa}, trust={:?})", f.pc, f.sp, f.trust.as_str())
    }
}

/// The result of one unwind: the frames, and why the walk stopped.
#[pyclass(module = "stackwalk._core", name = "Trace", frozen)]
pub struct PyTrace {
    frames: Vec<RsFrame>,
    end: unwind::End,
    arch: Arch,
    /// The module the end refers to, for the message (made on demand).
    end_module: Option<Arc<Module>>,
}

#[pymethods]
impl PyTrace {
    #[getter]
    fn frames(&self) -> Vec<PyFrame> {
        self.frames.iter().copied().map(PyFrame).collect()
    }

    /// The frames' pcs (faster than going through `frames`).
    #[getter]
    fn pcs(&self) -> Vec<u64> {
        self.frames.iter().map(|f| f.pc).collect()
    }

    /// Why the walk stopped: end_of_stack, pc_zero, cfa_not_increasing,
    /// memory, no_module, no_unwind_info, missing_register, bad_cfi,
    /// frame_limit, fp_invalid, bad_return_address, scan_failed.
    #[getter]
    fn end(&self) -> &'static str {
        self.end.reason.as_str()
    }

    /// A one-line account of where and why the walk stopped.
    #[getter]
    fn end_detail(&self) -> String {
        self.end.describe(self.arch, self.end_module.as_ref().map(|m| m.name.as_str()))
    }

    /// True when the walk reached the outermost frame.
    #[getter]
    fn complete(&self) -> bool {
        self.end.reason.is_clean()
    }

    fn __len__(&self) -> usize {
        self.frames.len()
    }

    fn __repr__(&self) -> String {
        format!("<Trace {} frames, end={:?}>", self.frames.len(), self.end.reason.as_str())
    }
}

/// Memory made of a file's segments, mapped once and read in place: a core
/// file's PT_LOADs. Pass it as the `memory` of `Unwinder.unwind`.
#[pyclass(module = "stackwalk._core", name = "MappedMemory", frozen)]
pub struct PyMappedMemory {
    pub(crate) inner: Arc<SegmentMemory>,
    pub(crate) path: String,
}

#[pymethods]
impl PyMappedMemory {
    /// Map `path`; `segments` are (address, file offset, size) triples.
    #[new]
    fn new(path: PathBuf, segments: Vec<(u64, u64, u64)>) -> PyResult<Self> {
        let name = path.to_string_lossy().into_owned();
        let file =
            File::open(&path).map_err(|e| MemoryReadError::new_err(format!("{name}: {e}")))?;
        // SAFETY: read-only mapping; the file is assumed not to be truncated
        // while in use, as every tool that maps its input assumes.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| MemoryReadError::new_err(format!("{name}: cannot map: {e}")))?;
        let segments: Vec<Segment> = segments
            .into_iter()
            .map(|(address, offset, size)| Segment { address, offset, size })
            .collect();
        Ok(PyMappedMemory {
            inner: Arc::new(SegmentMemory::new(Data::Mapped(map), &segments)),
            path: name,
        })
    }

    /// The `size` bytes at `address`, or None where they are not all captured.
    fn read<'py>(&self, py: Python<'py>, address: u64, size: usize) -> Option<Bound<'py, PyBytes>> {
        self.inner.bytes(address, size).map(|b| PyBytes::new(py, b))
    }

    /// (address, size) of every segment the file holds bytes for.
    #[getter]
    fn ranges(&self) -> Vec<(u64, u64)> {
        self.inner.ranges().collect()
    }

    /// Bytes the segments should have that the file lacks (a truncated file).
    #[getter]
    fn missing_bytes(&self) -> u64 {
        self.inner.missing_bytes
    }

    fn __repr__(&self) -> String {
        format!("<MappedMemory {} ({} segments)>", self.path, self.inner.ranges().count())
    }
}

/// Unwinds native stacks for one architecture.
#[pyclass(module = "stackwalk._core", name = "Unwinder", subclass)]
pub struct PyUnwinder {
    inner: RsUnwinder,
    frames: Vec<RsFrame>,
    /// (module name, separate debug file its `.debug_frame` comes from).
    debug_files: Vec<(String, String)>,
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
        Ok(PyUnwinder { inner, frames: Vec::with_capacity(64), debug_files: Vec::new() })
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
    /// known (see `place_mappings`); by default its loadable segments' span.
    #[pyo3(signature = (path, bias = 0, *, ranges = None, debug_root = Some(PathBuf::from("/usr/lib/debug"))))]
    fn add_module(
        &mut self,
        path: PathBuf,
        bias: i128,
        ranges: Option<Vec<(u64, u64)>>,
        debug_root: Option<PathBuf>,
    ) -> PyResult<()> {
        let name = path.to_string_lossy().into_owned();
        let file = File::open(&path).map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        // SAFETY: the file is mapped read-only; like every tool that maps its
        // input (gdb, eu-stack), we assume it is not truncated while in use.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| ElfError::new_err(format!("{name}: cannot map: {e}")))?;
        let debug = debug_root.map(|root| (path.as_path(), root));
        let debug = debug.as_ref().map(|(p, r)| (*p, r.as_path()));
        self.add(name, Data::Mapped(map), bias, ranges, debug)
    }

    /// The separate debug file whose `.debug_frame` the module added from
    /// `path` uses, if any.
    fn debug_file(&self, path: PathBuf) -> Option<String> {
        let name = path.to_string_lossy();
        self.debug_files.iter().find(|(n, _)| *n == name).map(|(_, d)| d.clone())
    }

    /// Add an ELF image held in memory (e.g. the vdso read from a process),
    /// loaded at `bias`. The bytes are copied.
    fn add_module_image(
        &mut self,
        name: String,
        image: &Bound<'_, PyAny>,
        bias: i128,
    ) -> PyResult<()> {
        let buf = PyBuffer::<u8>::get(image)?;
        let bytes = buf.to_vec(image.py())?;
        self.add(name, Data::Owned(bytes), bias, None, None)
    }

    /// Add a module whose file is missing: only where it is (`ranges`) and
    /// which of it is code (`code`), as runtime (start, end) pairs. Return
    /// addresses into its code are accepted (checked against `code` only);
    /// a frame in it has no CFI, and is walked on by the other strategies.
    fn add_missing_module(
        &mut self,
        name: String,
        ranges: Vec<(u64, u64)>,
        code: Vec<(u64, u64)>,
    ) -> PyResult<()> {
        let code = code
            .iter()
            .filter(|(a, b)| a < b)
            .map(|&(address, end)| crate::cfi::CodeSegment {
                address,
                size: end - address,
                file_offset: 0,
                file_size: 0,
            })
            .collect();
        let info = Arc::new(UnwindInfo::without_file(self.inner.arch(), code));
        let modules = ranges
            .iter()
            .map(|&(a, b)| Module::place(name.clone(), info.clone(), a..b, 0).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
        self.add_placed(modules)
    }

    /// Unwind from `regs` (register name -> value) over `memory` (an
    /// iterable of (start address, bytes-like) regions).
    /// At most `max_frames` frames; None: as many as the captured stack (the
    /// region holding the stack pointer) can hold, a frame taking at least a
    /// word.
    #[pyo3(signature = (regs, memory, max_frames = None))]
    fn unwind(
        &mut self,
        regs: &Bound<'_, PyAny>,
        memory: &Bound<'_, PyAny>,
        max_frames: Option<usize>,
    ) -> PyResult<PyTrace> {
        let arch = self.inner.arch();
        let (pc, registers) = extract_registers(arch, regs)?;
        let mapped = memory.cast::<PyMappedMemory>().ok().map(|m| m.get().inner.clone());
        let buffers = if mapped.is_some() { Vec::new() } else { extract_buffers(memory)? };
        let mut regions = match &mapped {
            Some(m) => m.regions(),
            None => Regions::new(),
        };
        for (start, buf) in &buffers {
            // SAFETY: each PyBuffer is C-contiguous (checked) and is held,
            // keeping the exporter's memory alive and in place, until the
            // end of this call; the GIL is held, so no Python code runs.
            let bytes =
                unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) };
            regions.add(*start, bytes);
        }
        let (inner, frames) = (&mut self.inner, &mut self.frames);
        let end =
            guard("unwinding", || inner.unwind(pc, &registers, &mut regions, max_frames, frames))?;
        Ok(PyTrace {
            // Hand the buffer over rather than copying it; the next walk gets
            // a fresh one of the same capacity (one allocation either way).
            frames: {
                let capacity = self.frames.len().max(64);
                std::mem::replace(&mut self.frames, Vec::with_capacity(capacity))
            },
            end,
            arch,
            end_module: self.inner.end_module(&end),
        })
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
        let (pc, registers) = extract_registers(self.inner.arch(), regs)?;
        let owned: Vec<(u64, Vec<u8>)> = extract_buffers(memory)?
            .into_iter()
            .map(|(start, buf)| Ok((start, buf.to_vec(py)?)))
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
            Err(crate::cfi::LookupError::NoFde) => return Ok(None),
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

impl PyUnwinder {
    /// `debug`: the file's path and the root to look for its separate debug
    /// file under.
    fn add(
        &mut self,
        name: String,
        data: Data,
        bias: i128,
        ranges: Option<Vec<(u64, u64)>>,
        debug: Option<(&std::path::Path, &std::path::Path)>,
    ) -> PyResult<()> {
        let arch = self.inner.arch();
        let info = read_elf(&data).map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        if info.machine != arch.elf_machine() {
            let theirs = Arch::from_elf_machine(info.machine)
                .map_or_else(|| format!("e_machine {}", info.machine), |a| a.to_string());
            return Err(ArchError::new_err(format!(
                "{name}: the file is for {theirs}, the unwinder for {arch}"
            )));
        }
        // Bias is runtime − ELF address, taken modulo 2^64 (it may be negative).
        let bias = bias as u64;
        let separate = match (debug, info.sections.debug_frame) {
            (Some((path, root)), None) => guard("finding the debug file", || {
                crate::debugfile::separate_debug_frame(&data, Some(path), root)
            })?,
            _ => None,
        };
        let debug_path = separate.as_ref().map(|(_, _, p)| p.to_string_lossy().into_owned());
        let (sections, range) = (info.sections, info.range);
        // ELF address ranges: the given runtime ranges less the bias, or the
        // loadable segments' span.
        let elf_ranges = match ranges {
            Some(r) => r.iter().map(|&(a, b)| a.wrapping_sub(bias)..b.wrapping_sub(bias)).collect(),
            None => vec![range],
        };
        let modules = guard("indexing CFI", || {
            let debug = separate.map(|(bytes, section, _)| (bytes, section));
            let unwind_info = UnwindInfo::with_debug_file(arch, Arc::new(data), sections, debug)?;
            let info = Arc::new(unwind_info);
            elf_ranges
                .into_iter()
                .map(|r| Module::place(name.clone(), info.clone(), r, bias).map(Arc::new))
                .collect::<Result<Vec<_>, _>>()
        })?
        .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        self.add_placed(modules)?;
        if let Some(d) = debug_path {
            self.debug_files.push((name, d));
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

/// Run `f`, turning a panic (a bug: the core is written not to panic on any
/// input) into a StackwalkError instead of letting it cross into Python.
fn guard<T>(what: &str, f: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        StackwalkError::new_err(format!("internal error while {what}: {msg} (please report)"))
    })
}

// The default of `scan_words` in `Unwinder.__new__`'s signature (a literal, for its text signature).
const _: () = assert!(unwind::DEFAULT_SCAN_WORDS == 1024);

/// Strategy names, checked: known, at least one, each once.
fn parse_strategies(names: &[String]) -> PyResult<Vec<Strategy>> {
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

fn extract_registers(arch: Arch, regs: &Bound<'_, PyAny>) -> PyResult<(u64, Registers)> {
    let mut registers = Registers::new();
    let mut pc = None;
    let mut set = |name: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>| -> PyResult<()> {
        let name = name.extract::<&str>()?;
        match arch.register_by_name(name) {
            Some(Some(col)) => registers.set(col, value.extract::<u64>()?),
            Some(None) => pc = Some(value.extract::<u64>()?),
            None => {} // flags, segment registers, fs_base...: not used by unwinding
        }
        Ok(())
    };
    if let Ok(dict) = regs.cast::<PyDict>() {
        for (k, v) in dict.iter() {
            set(&k, &v)?;
        }
    } else {
        for item in regs.call_method0("items")?.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            set(&k, &v)?;
        }
    }
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

fn extract_buffers(memory: &Bound<'_, PyAny>) -> PyResult<Vec<(u64, PyBuffer<u8>)>> {
    let mut out = Vec::new();
    for (i, item) in memory.try_iter()?.enumerate() {
        let item = item?;
        let (start, data): (u64, Bound<'_, PyAny>) = item.extract().map_err(|_| {
            MemoryReadError::new_err(format!(
                "memory region {i} is not a (start address, bytes-like) pair"
            ))
        })?;
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
        out.push((start, buf));
    }
    Ok(out)
}

/// An ELF file's bytes: a path (mapped) or a bytes-like image (copied).
fn elf_bytes(source: &Bound<'_, PyAny>) -> PyResult<(String, Data)> {
    if let Ok(buf) = PyBuffer::<u8>::get(source) {
        return Ok(("<image>".to_owned(), Data::Owned(buf.to_vec(source.py())?)));
    }
    let path: PathBuf = source.extract()?;
    let name = path.to_string_lossy().into_owned();
    let file = File::open(&path).map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
    // SAFETY: read-only mapping of a file assumed not to shrink while in use.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| ElfError::new_err(format!("{name}: cannot map: {e}")))?;
    Ok((name, Data::Mapped(map)))
}

fn machine_name(machine: u16) -> String {
    Arch::from_elf_machine(machine).map_or_else(|| machine.to_string(), |a| a.name().to_owned())
}

/// The program headers of an ELF file (a path) or image (bytes-like, which
/// may be just its first page): machine, type, entry, GNU build id, PT_LOAD
/// segments, PT_DYNAMIC. Reads no section headers.
#[pyfunction]
fn elf_summary<'py>(py: Python<'py>, source: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let (name, data) = elf_bytes(source)?;
    let summary =
        crate::elf::summarize(&data).map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
    let out = PyDict::new(py);
    out.set_item("machine", machine_name(summary.machine))?;
    let e_type = match summary.e_type {
        object::elf::ET_REL => "REL".to_owned(),
        object::elf::ET_EXEC => "EXEC".to_owned(),
        object::elf::ET_DYN => "DYN".to_owned(),
        object::elf::ET_CORE => "CORE".to_owned(),
        other => other.to_string(),
    };
    out.set_item("type", e_type)?;
    out.set_item("entry", summary.entry)?;
    let build_id: Option<String> =
        summary.build_id.map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
    out.set_item("build_id", build_id)?;
    out.set_item("loads", summary.loads)?;
    out.set_item("dynamic", summary.dynamic)?;
    out.set_item("phdr", summary.phdr)?;
    let interpreter = summary.interpreter.map(|p| String::from_utf8_lossy(&p).into_owned());
    out.set_item("interpreter", interpreter)?;
    Ok(out)
}

/// The ELF address (sh_addr) of the section `name` of an ELF file (a path)
/// or image (bytes-like); None if it has no such section.
#[pyfunction]
fn elf_section_address(source: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<u64>> {
    let (file, data) = elf_bytes(source)?;
    crate::elf::section_address(&data, name).map_err(|e| ElfError::new_err(format!("{file}: {e}")))
}

/// Where the mappings of one ELF file place it (see `crate::space::place`):
/// `loads` are its PT_LOADs as `elf_summary` gives them, `mappings` (start,
/// end, file offset in bytes), `code` the runtime ranges known to be
/// executable. Returns (bias, [(start, end), ...]) per placement.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn place_mappings(
    loads: Vec<(u64, u64, u64, u64, u32)>,
    mappings: Vec<(u64, u64, u64)>,
    page: u64,
    code: Vec<(u64, u64)>,
) -> Vec<(u64, Vec<(u64, u64)>)> {
    let segments: Vec<_> = loads.iter().map(crate::space::Segment::from_load).collect();
    let mappings: Vec<crate::space::Mapping> = mappings
        .iter()
        .map(|&(start, end, offset)| crate::space::Mapping { start, end, offset })
        .collect();
    let is_code = |r: &std::ops::Range<u64>| code.iter().any(|&(a, b)| a < r.end && r.start < b);
    crate::space::place(&segments, &mappings, page, is_code)
        .into_iter()
        .map(|p| (p.bias, p.ranges.iter().map(|r| (r.start, r.end)).collect()))
        .collect()
}

/// Demangle a C++ or Rust symbol name; other names are returned unchanged.
#[pyfunction]
fn demangle(name: &str) -> String {
    crate::symbols::demangle(name).into_owned()
}

/// The function symbols of one ELF file (`.symtab`, else `.dynsym`), read
/// once into sorted arrays.
#[pyclass(module = "stackwalk._core", name = "SymbolTable", frozen)]
pub struct PySymbolTable {
    inner: crate::symbols::SymbolTable,
}

#[pymethods]
impl PySymbolTable {
    /// `source` is a path or a bytes-like ELF image.
    #[new]
    fn new(source: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (name, data) = elf_bytes(source)?;
        let inner = crate::symbols::SymbolTable::from_elf(&data)
            .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        Ok(PySymbolTable { inner })
    }

    /// The symbols of the ELF file at `path`, completed from its separate
    /// debug file (`DEBUG_ROOT/.build-id/xx/yyyy.debug`) when the file itself
    /// has only exported names, as gdb and eu-stack do.
    #[staticmethod]
    #[pyo3(signature = (path, debug_root = PathBuf::from("/usr/lib/debug")))]
    fn for_file(path: &Bound<'_, PyAny>, debug_root: PathBuf) -> PyResult<Self> {
        let (name, data) = elf_bytes(path)?;
        let inner = crate::symbols::SymbolTable::for_file(&data, &debug_root)
            .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        Ok(PySymbolTable { inner })
    }

    /// (demangled name, offset) of the function holding ELF address
    /// `address`, or None: a distant symbol is never borrowed.
    fn lookup(&self, address: u64) -> Option<(String, u64)> {
        self.inner
            .lookup(address)
            .map(|(name, off)| (crate::symbols::demangle(name).into_owned(), off))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// True when the names come from `.symtab` (every function), False for
    /// `.dynsym` (exported functions only).
    #[getter]
    fn full(&self) -> bool {
        self.inner.full
    }
}

/// A stack-trace database: traces (sequences of pcs) stored once each, by
/// hash, with a count and a stable index.
#[pyclass(module = "stackwalk._core", name = "StackDB")]
#[derive(Default)]
pub struct PyStackDb {
    inner: crate::stackdb::StackDb,
    /// The pcs of the trace being added (kept, not allocated per add).
    pcs: Vec<u64>,
}

/// The pcs of a trace given as a Trace or as a sequence of ints, into
/// `pcs`. Tuples and lists are read in place: the generic sequence protocol
/// cost more than the database's own work.
fn trace_pcs(trace: &Bound<'_, PyAny>, pcs: &mut Vec<u64>) -> PyResult<()> {
    pcs.clear();
    if let Ok(t) = trace.cast::<PyTrace>() {
        pcs.extend(t.get().frames.iter().map(|f| f.pc));
    } else if let Ok(t) = trace.cast::<PyTuple>() {
        for pc in t.iter_borrowed() {
            pcs.push(pc_from(&pc)?);
        }
    } else if let Ok(l) = trace.cast::<PyList>() {
        for pc in l.iter() {
            pcs.push(pc_from(&pc)?);
        }
    } else {
        *pcs = trace.extract()?;
    }
    Ok(())
}

/// A pc from a Python int. CPython 3.11's `PyLong_AsUnsignedLongLong`
/// (pyo3's way to a u64) goes through a byte array, and was most of
/// `StackDB.add`'s time; where a C long is 64 bits, `PyLong_AsUnsignedLong`
/// is the same conversion (the same errors: negative, too large) as a loop
/// over the int's digits.
fn pc_from(pc: &Bound<'_, PyAny>) -> PyResult<u64> {
    #[cfg(all(target_pointer_width = "64", not(windows)))]
    if pc.is_exact_instance_of::<pyo3::types::PyInt>() {
        // SAFETY: `pc` is a live int; an error is looked for right after.
        let value = unsafe { pyo3::ffi::PyLong_AsUnsignedLong(pc.as_ptr()) };
        if value == std::os::raw::c_ulong::MAX {
            if let Some(e) = PyErr::take(pc.py()) {
                return Err(e);
            }
        }
        return Ok(value);
    }
    pc.extract()
}

#[pymethods]
impl PyStackDb {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Add a trace (a Trace, or a sequence of pcs) `count` times; its index,
    /// the same for the same trace every time.
    #[pyo3(signature = (trace, count = 1))]
    fn add(&mut self, trace: &Bound<'_, PyAny>, count: u64) -> PyResult<u32> {
        trace_pcs(trace, &mut self.pcs)?;
        Ok(self.inner.add_n(&self.pcs, count))
    }

    /// How many times the trace at `index` was added.
    fn count(&self, index: u32) -> PyResult<u64> {
        self.inner.count(index).ok_or_else(|| StackwalkError::new_err(format!("no trace {index}")))
    }

    /// The pcs of the trace at `index`.
    fn trace(&self, index: u32) -> PyResult<Vec<u64>> {
        self.inner
            .trace(index)
            .map(<[u64]>::to_vec)
            .ok_or_else(|| StackwalkError::new_err(format!("no trace {index}")))
    }

    /// The `n` most frequent traces: (index, pcs tuple, count), most frequent first.
    fn top<'py>(
        &self,
        py: Python<'py>,
        n: usize,
    ) -> PyResult<Vec<(u32, Bound<'py, PyTuple>, u64)>> {
        let mut out = Vec::with_capacity(n.min(self.inner.len()));
        for i in self.inner.top(n) {
            if let (Some(trace), Some(count)) = (self.inner.trace(i), self.inner.count(i)) {
                out.push((i, PyTuple::new(py, trace)?, count));
            }
        }
        Ok(out)
    }

    /// Traces added, duplicates included.
    #[getter]
    fn total(&self) -> u64 {
        self.inner.total()
    }

    /// Bytes the database holds.
    #[getter]
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// (index, pcs tuple, count) for every distinct trace, in index order.
    fn __iter__(slf: PyRef<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let mut items = Vec::with_capacity(slf.inner.len());
        for (i, trace, count) in slf.inner.iter() {
            items.push((i, PyTuple::new(py, trace)?, count));
        }
        Ok(items.into_pyobject(py)?.call_method0("__iter__")?.unbind())
    }

    fn __repr__(&self) -> String {
        format!("<StackDB {} traces, {} added>", self.inner.len(), self.inner.total())
    }
}

/// Unwind and symbolize every sample of a perf.data file recorded with
/// `--call-graph dwarf`, writing them to `output` (a path) or stdout as
/// "text" (perf script's shape), "json" (JSON Lines) or "collapsed" (folded
/// stacks). Runs without the GIL on `jobs` threads (0: one per core).
/// `progress`: draw a progress bar on stderr once the run has lasted that
/// many seconds (None: never). `max_frames`: the most frames of a sample's
/// user stack (None: as many as its stack copy can hold). Returns a summary dict; a damaged file stops
/// the reading with summary["error"] set, after the samples before the
/// damage were written.
#[pyfunction]
#[pyo3(signature = (path, format = "text", *, output = None, jobs = 0, max_frames = None,
                    debug_root = PathBuf::from("/usr/lib/debug"), progress = None))]
#[allow(clippy::too_many_arguments)]
fn perf_report<'py>(
    py: Python<'py>,
    path: PathBuf,
    format: &str,
    output: Option<PathBuf>,
    jobs: usize,
    max_frames: Option<usize>,
    debug_root: PathBuf,
    progress: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    use crate::profile::{Format, Options};
    let progress =
        progress.map(|s| progress::bar(std::time::Duration::from_secs_f64(s.clamp(0.0, 1e6))));
    let format = match format {
        "text" => Format::Text,
        "json" => Format::JsonLines,
        "collapsed" => Format::Collapsed,
        other => return Err(StackwalkError::new_err(format!("unknown format {other:?}"))),
    };
    let name = path.to_string_lossy().into_owned();
    let file = File::open(&path).map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
    let options = Options { format, max_frames, debug_root, progress, ..Options::default() };
    let run = Run { name: &name, output, jobs, options };
    let open_error = |e: crate::perf::PerfError| StackwalkError::new_err(format!("{name}: {e}"));
    // A regular file is mapped and its records read in place; anything else
    // (a FIFO) is streamed.
    let is_file = file.metadata().is_ok_and(|m| m.is_file());
    // SAFETY: read-only mapping; a perf.data file is not changed while read.
    match is_file.then(|| unsafe { memmap2::Mmap::map(&file) }.ok()).flatten() {
        Some(map) => {
            let data = Arc::new(Data::Mapped(map));
            run.profile(py, crate::perf::PerfFile::from_data(data).map_err(open_error)?)
        }
        None => {
            let reader = std::io::BufReader::with_capacity(1 << 20, file);
            run.profile(py, crate::perf::PerfFile::new(reader).map_err(open_error)?)
        }
    }
}

/// The executable mappings and the first `max_samples` user samples of a
/// perf.data file, as Python values, for unwinding samples one at a time
/// (the pure-Python baseline, tests): `{"arch", "mmaps": [(pid, start,
/// len, pgoff, filename)], "samples": [(pid, tid, time, regs, sp,
/// stack)]}`, `regs` as `Unwinder.unwind` takes them, `stack` the bytes
/// captured from `sp` up. Reading stops at damage, as `perf_report` does.
#[pyfunction]
#[pyo3(signature = (path, max_samples = 1000))]
fn perf_samples<'py>(
    py: Python<'py>,
    path: PathBuf,
    max_samples: usize,
) -> PyResult<Bound<'py, PyDict>> {
    use crate::perf::{sample_registers, Event, PerfFile, PERF_SAMPLE_REGS_ABI_NONE};
    let name = path.to_string_lossy().into_owned();
    let file = File::open(&path).map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
    let mut perf = PerfFile::new(std::io::BufReader::new(file))
        .map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
    let arch = perf.header().arch().ok_or_else(|| {
        ArchError::new_err(format!("{name}: samples of an architecture stackwalk does not know"))
    })?;
    let pc_name = arch.pc_name();
    let (mmaps, samples) = (pyo3::types::PyList::empty(py), pyo3::types::PyList::empty(py));
    while samples.len() < max_samples {
        let Ok(Some(event)) = perf.next_event() else { break };
        match event {
            Event::Mmap(m) if m.executable() => {
                let filename = String::from_utf8_lossy(m.filename);
                mmaps.append((m.pid, m.start, m.len, m.pgoff, filename))?;
            }
            Event::Sample(s) if s.regs_abi != PERF_SAMPLE_REGS_ABI_NONE => {
                let (pc, registers) = sample_registers(arch, &s);
                let (Some(pc), Some(sp)) = (pc, registers.get(arch.sp())) else { continue };
                let regs = PyDict::new(py);
                for (col, value) in registers.iter() {
                    if let Some(reg) = arch.register_name(col) {
                        regs.set_item(reg, value)?;
                    }
                }
                regs.set_item(pc_name, pc)?;
                let stack = PyBytes::new(py, s.stack);
                samples.append((s.pid, s.tid, s.time.unwrap_or(0), regs, sp, stack))?;
            }
            _ => {}
        }
    }
    let out = PyDict::new(py);
    out.set_item("arch", arch.name())?;
    out.set_item("mmaps", mmaps)?;
    out.set_item("samples", samples)?;
    Ok(out)
}

/// The output buffer: smaller than a chunk of formatted samples, which are
/// then written as they are rather than copied into it.
const OUT_BUFFER: usize = 32 << 10;

/// A `perf_report` call, once its file is open.
struct Run<'n> {
    name: &'n str,
    output: Option<PathBuf>,
    jobs: usize,
    options: crate::profile::Options,
}

impl Run<'_> {
    fn profile<'py, R: std::io::Read + std::io::Seek + Send>(
        self,
        py: Python<'py>,
        mut perf: crate::perf::PerfFile<R>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let name = self.name;
        let arch = perf.header().arch().ok_or_else(|| {
            let said = perf.header().arch.clone().unwrap_or_else(|| "nothing".to_owned());
            ArchError::new_err(format!("{name}: cannot unwind its samples: its arch is {said}"))
        })?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.jobs)
            .thread_name(|i| format!("stackwalk {i}"))
            .build()
            .map_err(|e| StackwalkError::new_err(format!("cannot start worker threads: {e}")))?;
        let vdso_id = perf.header().build_ids.iter().find(|b| b.filename == "[vdso]");
        let mut profiler = crate::profile::Profiler::new(
            arch,
            self.options,
            vdso_id.map(|b| b.build_id.as_slice()),
        );
        let output = self.output;
        let written: std::io::Result<()> = py.detach(|| {
            pool.install(|| match &output {
                Some(out) => {
                    let file = File::create(out)?;
                    profiler
                        .run(&mut perf, &mut std::io::BufWriter::with_capacity(OUT_BUFFER, file))
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut out = std::io::BufWriter::with_capacity(OUT_BUFFER, stdout.lock());
                    profiler.run(&mut perf, &mut out)
                }
            })
        });
        if let Err(e) = written {
            return Err(match e.kind() {
                std::io::ErrorKind::BrokenPipe => {
                    pyo3::exceptions::PyBrokenPipeError::new_err(e.to_string())
                }
                _ => StackwalkError::new_err(format!("writing the samples: {e}")),
            });
        }
        let s = &profiler.summary;
        let out = PyDict::new(py);
        out.set_item("arch", arch.name())?;
        out.set_item("samples", s.samples)?;
        out.set_item("complete", s.complete)?;
        out.set_item("frames", s.frames)?;
        out.set_item("processes", s.processes)?;
        out.set_item("modules_missing", s.modules_missing.clone())?;
        out.set_item("error", s.error.as_ref().map(|e| format!("{name}: {e}")))?;
        Ok(out)
    }
}

/// Draw an interactive SVG flame graph (inferno) from a file of folded
/// stacks (`comm;outer;...;inner count` lines).
#[pyfunction]
#[pyo3(signature = (folded, svg, title = "Flame Graph"))]
fn flamegraph(py: Python<'_>, folded: PathBuf, svg: PathBuf, title: &str) -> PyResult<()> {
    let drawn: std::io::Result<()> = py.detach(|| {
        let mut options = inferno::flamegraph::Options::default();
        options.title = title.to_owned();
        options.count_name = "samples".to_owned();
        let out = std::io::BufWriter::new(File::create(&svg)?);
        inferno::flamegraph::from_files(&mut options, &[folded], out)
    });
    drawn.map_err(|e| StackwalkError::new_err(format!("{}: {e}", svg.display())))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("StackwalkError", py.get_type::<StackwalkError>())?;
    m.add("ElfError", py.get_type::<ElfError>())?;
    m.add("CfiError", py.get_type::<CfiError>())?;
    m.add("MemoryReadError", py.get_type::<MemoryReadError>())?;
    m.add("ArchError", py.get_type::<ArchError>())?;
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add_class::<PyUnwinder>()?;
    m.add_class::<PyTrace>()?;
    m.add_class::<PyFrame>()?;
    m.add_class::<PyMappedMemory>()?;
    m.add_class::<PySymbolTable>()?;
    m.add_class::<PyStackDb>()?;
    m.add_class::<corefile::PyCoreFile>()?;
    m.add_function(wrap_pyfunction!(elf_summary, m)?)?;
    m.add_function(wrap_pyfunction!(elf_section_address, m)?)?;
    m.add_function(wrap_pyfunction!(demangle, m)?)?;
    m.add_function(wrap_pyfunction!(place_mappings, m)?)?;
    m.add_function(wrap_pyfunction!(perf_report, m)?)?;
    m.add_function(wrap_pyfunction!(perf_samples, m)?)?;
    m.add_function(wrap_pyfunction!(flamegraph, m)?)?;
    Ok(())
}
