//! `Symbolizer`: `crate::symbolize::Symbolizer`, the modules of an address
//! space for naming a trace's frames as the JSON documents give them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use pyo3::{intern, IntoPyObjectExt};

use super::document::native_dict;
use super::errors::{guard, StackwalkError};
use super::unwinder::{PyFrame, PyTrace};
use crate::render::frame::named;
use crate::render::snapshot::NativeFrame;
use crate::source::memory::Data;
use crate::symbolize::lines::SourceFrame;
use crate::symbolize::{Placed, Source, SymbolFile, Symbolizer};

/// Names the frames of traces: the module each pc is in, its ELF address,
/// and its function (from the module's symbol table, read on first use and
/// kept by the process for the next symbolizer while the file is
/// unchanged).
#[pyclass(module = "stackwalk._core", name = "Symbolizer", frozen)]
pub struct PySymbolizer {
    inner: Symbolizer,
}

/// A frame as a report shows it (`crate::render::frame::named`): where it
/// is and how it was found, its module and the offset into its file, its
/// function and source line, numbers as numbers; `to_dict` gives its JSON
/// object (docs/json.md), addresses in hex.
#[pyclass(module = "stackwalk._core", name = "SymbolizedFrame", frozen, get_all)]
pub struct PySymbolizedFrame {
    /// Its place in the list, inline frames counted.
    index: usize,
    /// Its unwound frame's place in the walk (`Trace.frames`).
    trace_index: usize,
    pc: u64,
    sp: u64,
    cfa: Option<u64>,
    /// Where it was named: a caller at its return address less one.
    lookup_pc: u64,
    trust: Py<PyAny>,
    module: Option<String>,
    /// Its ELF address: the pc less the module's bias.
    module_offset: Option<u64>,
    function: Option<String>,
    function_offset: Option<u64>,
    file: Option<String>,
    line: Option<u32>,
    column: Option<u32>,
    /// A function inlined at the next frame's pc.
    inline: bool,
    /// It, or a frame before it, is in a module whose file is doubtful.
    doubtful: bool,
}

impl PySymbolizedFrame {
    /// The frame as the snapshot document holds it, and its unwound frame's
    /// place in the walk (where its registers are).
    pub(super) fn native(&self, py: Python<'_>) -> PyResult<(NativeFrame, usize)> {
        let frame = NativeFrame {
            index: self.index,
            pc: self.pc,
            sp: self.sp,
            cfa: self.cfa,
            trust: self.trust.bind(py).extract()?,
            module: self.module.clone(),
            module_offset: self.module_offset,
            function: self.function.clone(),
            function_offset: self.function_offset,
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            inline: self.inline,
            doubtful: self.doubtful,
            registers: None,
        };
        Ok((frame, self.trace_index))
    }

    /// Where it was named: a caller at its return address less one.
    pub(super) fn lookup_pc(&self) -> u64 {
        self.lookup_pc
    }
}

#[pymethods]
impl PySymbolizedFrame {
    /// The frame's JSON object, as the snapshot document gives it.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        native_dict(py, &self.native(py)?.0, false)
    }

    fn __repr__(&self) -> String {
        let function = self.function.as_deref().unwrap_or("??");
        format!("<SymbolizedFrame #{} {:#x} in {function}>", self.index, self.pc)
    }
}

/// A frame as `frame_dicts` reads it.
#[derive(Clone, Copy)]
struct FrameIn {
    pc: u64,
    sp: u64,
    cfa: Option<u64>,
    lookup: u64,
}

/// What `frame_dicts` finds of a frame: its module, ELF address, function
/// with the pc's offset in it, and the functions at its lookup pc as DWARF
/// gives them, innermost first.
type Found<'s> = (Option<&'s Placed>, u64, Option<(&'s str, u64)>, Vec<SourceFrame>);

#[pymethods]
impl PySymbolizer {
    /// `modules`: (path, start, end, bias), (path, start, end, bias,
    /// doubtful), (path, start, end, bias, doubtful, file: the file to read
    /// symbols from, None for none) or those and `sym`, a Breakpad symbol
    /// file for the names and lines the file lacks (None: none), for each runtime range `start..end` of a
    /// module, bias the
    /// runtime − ELF address (as `Unwinder.modules` lists them). A path in
    /// `images` (e.g. "[vdso]") is symbolized from those ELF bytes; any
    /// other from the file at the path, its symbols completed from its
    /// separate debug file under `debug_root` when it has only exported
    /// ones (None: not looked for).
    #[new]
    #[pyo3(signature = (modules, images = None, *, debug_root = Some(PathBuf::from("/usr/lib/debug")), perf_map = None))]
    fn new(
        modules: &Bound<'_, PyAny>,
        images: Option<HashMap<String, Bound<'_, PyAny>>>,
        debug_root: Option<PathBuf>,
        perf_map: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut files: HashMap<String, Arc<SymbolFile>> = HashMap::new();
        let mut placed = Vec::new();
        for item in modules.try_iter()? {
            let item = item?;
            // The file symbols are read from: the path itself, unless a sixth
            // item names another or None (a module whose file was rejected:
            // known by name and place only, never named from whatever file
            // sits at its path now).
            let (path, start, end, bias, doubtful, file, sym) = match item.len()? {
                4 => {
                    let (path, start, end, bias): (PathBuf, i128, i128, i128) = item.extract()?;
                    (path.clone(), start, end, bias, false, Some(path), None)
                }
                5 => {
                    let (path, start, end, bias, doubtful): (PathBuf, i128, i128, i128, bool) =
                        item.extract()?;
                    (path.clone(), start, end, bias, doubtful, Some(path), None)
                }
                6 => {
                    let (path, start, end, bias, doubtful, file) = item.extract()?;
                    (path, start, end, bias, doubtful, file, None)
                }
                7 => item.extract()?,
                n => {
                    return Err(PyValueError::new_err(format!(
                        "a module is (path, start, end, bias[, doubtful[, file[, sym]]]), not {n} \
                         items"
                    )))
                }
            };
            let sym: Option<PathBuf> = sym;
            // Python ints: a damaged core can place a module past either end
            // of the address space, where no pc is.
            let clamp = |v: i128| v.clamp(0, i128::from(u64::MAX)) as u64;
            // A path need not be UTF-8 (a core's NT_FILE names bytes): the
            // file is opened by its bytes, and named lossily.
            let name: Arc<str> = path.to_string_lossy().into_owned().into();
            let file: Option<PathBuf> = file;
            let file = match files.get(&*name) {
                Some(file) => file.clone(),
                None => {
                    let file = Arc::new(match images.as_ref().and_then(|i| i.get(&*name)) {
                        Some(image) => {
                            let bytes = PyBuffer::<u8>::get(image)?.to_vec(image.py())?;
                            let source = Source::Image(Arc::new(Data::Owned(bytes)));
                            SymbolFile::new(name.clone(), source, None)
                        }
                        None => {
                            let source = file.map_or(Source::None, Source::Path);
                            let file = SymbolFile::new(name.clone(), source, debug_root.clone());
                            match sym {
                                Some(sym) => file.with_breakpad(sym),
                                None => file,
                            }
                        }
                    });
                    files.insert(name.to_string(), file.clone());
                    file
                }
            };
            placed.push(Placed {
                range: clamp(start)..clamp(end),
                // Modulo 2^64, as the unwinder takes biases.
                bias: bias as u64,
                pgoff: 0,
                file,
                doubtful,
            });
        }
        let mut inner = Symbolizer::new(placed);
        if let Some(given) = perf_map {
            inner = inner.with_perf_map(perf_map_of(&given)?);
        }
        Ok(PySymbolizer { inner })
    }

    /// The frames (a `Trace`, or a sequence of frames: objects with `pc`,
    /// `sp`, `cfa`, `trust` and `lookup_pc`) as the JSON documents give
    /// them: index, pc, sp, cfa, trust, module, module_offset (the ELF
    /// address), function, function_offset, file, line, column (from the
    /// module's DWARF, at the frame's lookup pc), inline, doubtful,
    /// addresses as hex strings. A frame is doubtful from the first frame in
    /// a doubtful module on: its own name, and the registers its callers were
    /// unwound from, came from a file that may not be the one the process
    /// ran. `inline`: each function inlined at a frame's pc comes before it
    /// as a frame of its own (same pc, `inline` true, its file and line
    /// where it is, the next one's the call site), numbered as gdb numbers
    /// frames; without, a frame's line is where its pc is.
    #[pyo3(signature = (frames, *, inline = false))]
    fn frame_dicts<'py>(
        &self,
        py: Python<'py>,
        frames: &Bound<'py, PyAny>,
        inline: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for frame in self.frames(py, frames, inline)? {
            out.append(frame.to_dict(py)?)?;
        }
        Ok(out)
    }

    /// `frame_dicts`' frames as `SymbolizedFrame`s: numbers as numbers, and
    /// each frame's `lookup_pc` (where it was named).
    #[pyo3(signature = (frames, *, inline = false))]
    fn frames(
        &self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        inline: bool,
    ) -> PyResult<Vec<PySymbolizedFrame>> {
        let (frames, trusts) = read_frames(frames)?;
        let inner = &self.inner;
        let found: Vec<Found<'_>> = py.detach(|| {
            guard("symbolizing", || {
                inner.load_lines(frames.iter().map(|f| f.lookup));
                frames
                    .iter()
                    .map(|f| {
                        let loc = inner.locate(f.pc, f.lookup);
                        (loc.module, loc.offset, loc.function, inner.source_frames(f.lookup))
                    })
                    .collect()
            })
        })?;
        let mut out = Vec::with_capacity(frames.len());
        let mut doubtful = false;
        for (trace_index, ((f, trust), (module, offset, function, sources))) in
            frames.iter().zip(trusts).zip(found).enumerate()
        {
            doubtful |= module.is_some_and(|m| m.doubtful);
            let trust = trust.unbind();
            for shown in named(function, &sources, inline) {
                let source = shown.source;
                out.push(PySymbolizedFrame {
                    index: out.len(),
                    trace_index,
                    pc: f.pc,
                    sp: f.sp,
                    cfa: f.cfa,
                    lookup_pc: f.lookup,
                    trust: trust.clone_ref(py),
                    module: module.map(|m| m.file.path.to_string()),
                    module_offset: module.map(|_| offset),
                    function: shown.function.map(str::to_owned),
                    function_offset: shown.function_offset,
                    file: source.and_then(|s| s.file.clone()),
                    line: source.and_then(|s| s.line),
                    column: source.and_then(|s| s.column),
                    inline: shown.inline,
                    doubtful,
                });
            }
        }
        Ok(out)
    }

    fn __len__(&self) -> usize {
        self.inner.modules().len()
    }

    fn __repr__(&self) -> String {
        format!("<Symbolizer {} modules>", self.inner.modules().len())
    }
}

/// The frames to symbolize, and each one's trust as the output gives it.
fn read_frames<'py>(
    frames: &Bound<'py, PyAny>,
) -> PyResult<(Vec<FrameIn>, Vec<Bound<'py, PyAny>>)> {
    let py = frames.py();
    let from_rust = |f: &crate::unwind::Frame| -> PyResult<(FrameIn, Bound<'py, PyAny>)> {
        let frame = FrameIn { pc: f.pc, sp: f.sp, cfa: f.cfa, lookup: f.lookup_pc() };
        Ok((frame, PyString::intern(py, f.trust.as_str()).into_any()))
    };
    let pairs: Vec<(FrameIn, Bound<'py, PyAny>)> = if let Ok(trace) = frames.cast::<PyTrace>() {
        trace.get().frames.iter().map(from_rust).collect::<PyResult<_>>()?
    } else {
        let mut out = Vec::new();
        for item in frames.try_iter()? {
            let item = item?;
            if let Ok(frame) = item.cast::<PyFrame>() {
                out.push(from_rust(&frame.get().0)?);
                continue;
            }
            // A frame of another unwinder (the pure-Python baseline's).
            let get = |name: &Bound<'py, PyString>| item.getattr(name);
            // A return address 0 looks up at -1: nowhere, as 2^64 − 1 is.
            let lookup: i128 = get(intern!(py, "lookup_pc"))?.extract()?;
            let frame = FrameIn {
                pc: get(intern!(py, "pc"))?.extract()?,
                sp: get(intern!(py, "sp"))?.extract()?,
                cfa: get(intern!(py, "cfa"))?.extract()?,
                lookup: lookup as u64,
            };
            out.push((frame, get(intern!(py, "trust"))?.into_bound_py_any(py)?));
        }
        out
    };
    Ok(pairs.into_iter().unzip())
}

/// How many times a Breakpad `.sym` file was parsed in this process (a file
/// already parsed, and unchanged, is not parsed again).
#[pyfunction]
pub(super) fn sym_file_parses() -> u64 {
    crate::symbolize::breakpad::parse_count()
}

/// A JIT's perf map (`/tmp/perf-PID.map`), or its jitdump (`jit-PID.dump`:
/// the names of its code loads, and their unwind tables), read once, for an
/// unwinder and a symbolizer to share (a live JIT appends to its map: both
/// see the same lines, and a map of megabytes is parsed once).
#[pyclass(module = "stackwalk._core", name = "PerfMap", frozen)]
pub struct PyPerfMap {
    inner: Arc<crate::space::perfmap::PerfMap>,
    cfi: Option<Arc<crate::unwind::jit::JitCfi>>,
}

#[pymethods]
impl PyPerfMap {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let (inner, cfi) = read_jit_names(py, &path)?;
        Ok(PyPerfMap { inner, cfi })
    }

    /// Whether it is a jitdump's whose code loads carry unwind tables.
    #[getter]
    fn has_unwind_tables(&self) -> bool {
        self.cfi.is_some()
    }

    /// The number of pieces of code the map names.
    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// A perf map given as a `PerfMap` (shared) or a path (read now).
pub(super) fn perf_map_of(
    given: &Bound<'_, PyAny>,
) -> PyResult<Arc<crate::space::perfmap::PerfMap>> {
    Ok(jit_of(given)?.0)
}

/// A JIT's names given as a `PerfMap` or a path (a perf map or a jitdump,
/// read now), and a jitdump's unwind tables.
pub(super) fn jit_of(given: &Bound<'_, PyAny>) -> PyResult<JitNames> {
    match given.cast::<PyPerfMap>() {
        Ok(map) => Ok((map.get().inner.clone(), map.get().cfi.clone())),
        Err(_) => read_jit_names(given.py(), &given.extract::<PathBuf>()?),
    }
}

/// A JIT's names, and its code's unwind tables where a jitdump has them.
pub(super) type JitNames =
    (Arc<crate::space::perfmap::PerfMap>, Option<Arc<crate::unwind::jit::JitCfi>>);

/// The file at `path` read as a jitdump (it starts with `JiTD`) or as a
/// perf map: mapped once, a regular file only (a FIFO is refused, never
/// opened for reading).
fn read_jit_names(py: Python<'_>, path: &std::path::Path) -> PyResult<JitNames> {
    let failed = |e: String| StackwalkError::new_err(format!("{}: {e}", path.display()));
    let data = py.detach(|| crate::source::files::map(path)).map_err(|e| failed(e.to_string()))?;
    if !crate::space::jitdump::has_magic(&data) {
        return Ok((Arc::new(crate::space::perfmap::PerfMap::parse(&data)), None));
    }
    let dump =
        py.detach(|| crate::space::jitdump::JitDump::parse(Arc::new(data))).map_err(failed)?;
    let arch = crate::arch::Arch::from_elf_machine(dump.machine as u16);
    let cfi = arch.and_then(|arch| crate::unwind::jit::JitCfi::new(&dump, arch)).map(Arc::new);
    Ok((Arc::new(dump.perf_map()), cfi))
}
