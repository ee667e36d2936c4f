//! `MinidumpFile`: a minidump read by `crate::source::minidump`, with the interface
//! of `CoreFile` (`stackwalk.core` takes either as its source): threads and
//! their registers, file mappings, process facts, the memory as a
//! `MappedMemory` sharing the dump's mapping. A minidump has no `PT_LOAD`s:
//! its `segments` are the maps stream's mappings (else the module list's
//! modules, taken as code), what a core's segments tell the placement.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::corefile::{image, link_map_objects, signal_tuple, string_object, LinkMap, SignalTuple};
use super::errors::MinidumpError;
use super::memory::PyMappedMemory;
use super::snapshot::{address_space, SpaceOptions, SpaceTuple};
use super::symbolize::PySymbolizedFrame;
use super::unwinder::PyUnwinder;
use crate::render::minidump_stackwalk::{self, Shown};
use crate::source::minidump::{basename, MinidumpFile, DUMP_REQUESTED};
use crate::source::signal::{Crash, Signal};
use crate::space::finder::Identity;
use crate::space::snapshot::{Facts, FileMapping};

/// `p_flags` of a module of the module list, without a maps stream: code.
const READ_EXECUTE: u32 = 5;
const AT_PAGESZ: u64 = 6;

/// A minidump: its threads, process facts, modules and memory.
#[pyclass(module = "stackwalk._core", name = "MinidumpFile", frozen)]
pub struct PyMinidumpFile {
    inner: MinidumpFile,
    path: String,
    /// Which thread crashed, and by which signal (decided once).
    crash: Crash,
}

/// The signal the exception stream records (None: none, or a dump
/// requested without a crash).
fn exception_signal(dump: &MinidumpFile) -> Option<(u32, i32, i32, u64)> {
    if dump.system.os != "Linux" && dump.system.os != "Android" {
        return None; // an exception code, not a signal
    }
    let e = dump.exception.as_ref()?;
    let signo = i32::try_from(e.code).ok().filter(|_| e.code != DUMP_REQUESTED)?;
    Some((e.tid, signo, e.flags as i32, e.address))
}

/// Which thread crashed: a Linux dump's, the one whose signal is a
/// crash's, as a core's; a Windows or Apple dump's, the one its exception
/// stream names, unless the dump was written on request.
fn crashed(dump: &MinidumpFile) -> Crash {
    let threads = &dump.threads;
    let linux = matches!(dump.system.os.as_str(), "Linux" | "Android");
    match &dump.exception {
        Some(e) if !linux && e.code != DUMP_REQUESTED => {
            let tids: Vec<u32> = threads.iter().map(|t| t.tid).collect();
            Crash::named(&tids, &e.tid)
        }
        _ => {
            let signal = exception_signal(dump);
            Crash::by_signal(threads.iter().map(|t| match signal {
                Some((tid, signo, code, address)) if tid == t.tid => {
                    Signal::of(signo, Some((signo, code, address)))
                }
                _ => None,
            }))
        }
    }
}

#[pymethods]
impl PyMinidumpFile {
    /// Read the minidump at `path`; MinidumpError (naming the file) if its
    /// header or stream directory cannot be read, or its architecture is
    /// not one stackwalk unwinds. Damaged streams are in `warnings`.
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let name = path.to_string_lossy().into_owned();
        let inner = MinidumpFile::open(&path)
            .map_err(|e| MinidumpError::new_err(format!("{name}: {e}")))?;
        let crash = crashed(&inner);
        Ok(PyMinidumpFile { inner, path: name, crash })
    }

    #[getter]
    fn arch(&self) -> &'static str {
        self.inner.arch.name()
    }

    #[getter]
    fn word_size(&self) -> u64 {
        self.inner.arch.word_size()
    }

    /// The mappings as a core's PT_LOADs: (start, end, p_flags).
    #[getter]
    fn segments(&self) -> Vec<(u64, u64, u32)> {
        match &self.inner.maps {
            Some(maps) => maps.iter().map(|m| (m.start, m.end, m.flags)).collect(),
            None => self
                .inner
                .modules
                .iter()
                .map(|m| (m.base, m.base.saturating_add(m.size), READ_EXECUTE))
                .collect(),
        }
    }

    /// The process's memory: the stacks and memory list regions the dump holds.
    #[getter]
    fn memory(&self) -> PyMappedMemory {
        PyMappedMemory { inner: self.inner.memory.clone(), path: self.path.clone() }
    }

    /// One (tid, signal, index) per thread whose context could be read, as
    /// `CoreFile.threads`: the crashing thread's first.
    #[getter]
    fn threads(&self) -> Vec<(u32, i32, usize)> {
        let threads = &self.inner.threads;
        // The signal a thread was stopped by: the exception stream's thread's (read once).
        let signal = exception_signal(&self.inner);
        let cursig = |tid| match signal {
            Some((crashed, signo, ..)) if crashed == tid => signo,
            _ => 0,
        };
        let order = self.crash.order.iter();
        order.map(|&i| (threads[i].tid, cursig(threads[i].tid), i)).collect()
    }

    /// The thread that crashed, as `CoreFile.crashing_tid`.
    #[getter]
    fn crashing_tid(&self) -> Option<u32> {
        self.crash.crashing.map(|i| self.inner.threads[i].tid)
    }

    /// The signal that stopped the process (a Linux dump's), as
    /// `CoreFile.signal`.
    #[getter]
    fn signal(&self) -> Option<SignalTuple> {
        self.crash.signal.clone().map(signal_tuple)
    }

    /// Each thread's stack: (tid, start, end, sp), the captured region
    /// holding its sp (`Unwinder.set_process`).
    #[getter]
    fn thread_stacks(&self) -> Vec<(u32, u64, u64, u64)> {
        let sp = self.inner.arch.register_name(self.inner.arch.sp()).unwrap_or("sp");
        let sps = self.inner.threads.iter().filter_map(|t| {
            let (_, value) = t.registers.iter().find(|(name, _)| *name == sp)?;
            Some((t.tid, *value))
        });
        let stacks = self.inner.memory.thread_stacks(sps);
        stacks.into_iter().map(|t| (t.tid, t.start, t.end, t.sp)).collect()
    }

    /// The registers by name of the thread at `index` of `threads`.
    fn registers<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyDict>> {
        let thread = self
            .inner
            .threads
            .get(index)
            .ok_or_else(|| MinidumpError::new_err(format!("no thread at index {index}")))?;
        let regs = PyDict::new(py);
        for &(name, value) in &thread.registers {
            regs.set_item(name, value)?;
        }
        Ok(regs)
    }

    /// The exception stream: (tid, exception code -- the signal on Linux --,
    /// flags -- si_code --, address), or None.
    #[getter]
    fn exception(&self) -> Option<(u32, u32, u32, u64)> {
        self.inner.exception.as_ref().map(|e| (e.tid, e.code, e.flags, e.address))
    }

    /// What crashed, as `minidump-stackwalk` says it for the dump's system:
    /// {"tid", "reason", "address"}, or None without an exception stream.
    #[getter]
    fn crash<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(e) = &self.inner.exception else { return Ok(None) };
        let d = PyDict::new(py);
        d.set_item("tid", e.tid)?;
        d.set_item("reason", &e.reason)?;
        d.set_item("address", e.crash_address)?;
        d.set_item("requested", e.code == DUMP_REQUESTED)?;
        Ok(Some(d))
    }

    /// The system info stream: {"os", "os_version", "cpu", "windows"}, with
    /// `minidump-stackwalk`'s names.
    #[getter]
    fn system<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner.system;
        let d = PyDict::new(py);
        d.set_item("os", &s.os)?;
        d.set_item("os_version", &s.os_version)?;
        d.set_item("cpu", &s.cpu)?;
        d.set_item("windows", s.windows)?;
        Ok(d)
    }

    /// The module list, each module a dict: base, end, name (the code file's
    /// path as the dump gives it), build_id (hex: a `BpEL` record's), guid
    /// (hex of an `RSDS` record's 16 bytes as stored, and age: ((hex, age)),
    /// debug_id, code_id, debug_file (Breakpad's, as `minidump-stackwalk`
    /// prints them).
    #[getter]
    fn modules<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let hex = crate::space::finder::hex;
        let modules = self.inner.modules.iter();
        modules
            .map(|m| {
                let d = PyDict::new(py);
                d.set_item("base", m.base)?;
                d.set_item("end", m.base.saturating_add(m.size))?;
                d.set_item("name", &m.name)?;
                d.set_item("build_id", m.build_id.as_deref().map(hex))?;
                d.set_item("guid", m.guid.as_ref().map(|(g, age)| (hex(g), *age)))?;
                d.set_item("debug_id", &m.debug_id)?;
                d.set_item("code_id", &m.code_id)?;
                d.set_item("debug_file", &m.debug_file)?;
                Ok(d)
            })
            .collect()
    }

    /// The document `minidump-stackwalk --json` prints for this dump
    /// (`crate::render::minidump_stackwalk`): `stacks` each thread's
    /// frames by tid (`SymbolizedFrame`s, inline frames among them),
    /// `executable` the program's file (the main module's name).
    #[pyo3(signature = (stacks, executable, indent = Some(2)))]
    fn stackwalk_json(
        &self,
        py: Python<'_>,
        stacks: HashMap<u32, Vec<PyRef<'_, PySymbolizedFrame>>>,
        executable: Option<String>,
        indent: Option<usize>,
    ) -> PyResult<String> {
        let mut shown = HashMap::with_capacity(stacks.len());
        for (tid, frames) in stacks {
            let frames = frames.iter().map(|f| {
                let (frame, _) = f.native(py)?;
                Ok(Shown { frame, lookup_pc: f.lookup_pc() })
            });
            shown.insert(tid, frames.collect::<PyResult<Vec<_>>>()?);
        }
        let mut out = String::new();
        minidump_stackwalk::write(&mut out, &self.inner, &shown, executable.as_deref(), indent);
        Ok(out)
    }

    /// The misc info stream's process id, else the Linux status stream's.
    #[getter]
    fn pid(&self) -> Option<u32> {
        self.inner.pid
    }

    /// The Linux status stream's Name: the command, cut to 15 bytes.
    #[getter]
    fn fname(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The Linux command line stream, its arguments joined by spaces.
    #[getter]
    fn psargs(&self) -> Option<&str> {
        self.inner.command_line.as_deref()
    }

    /// The Linux auxv stream: type -> value (the first of a type).
    #[getter]
    fn auxv(&self) -> BTreeMap<u64, u64> {
        self.inner.auxv.clone()
    }

    /// As `CoreFile.initial_stack`, where the main thread's stack copy
    /// reaches that far (a shallow stack) and the auxv stream is there.
    #[getter]
    fn initial_stack(&self) -> Option<u64> {
        let dump = &self.inner;
        crate::source::corefile::initial_stack(dump.arch, &dump.auxv, &dump.memory)
    }

    /// File mappings as NT_FILE's: (start, end, file offset, path), from the
    /// maps stream (its lines with a path), else one per module of the
    /// module list (the whole module from offset 0).
    #[getter]
    fn files(&self) -> Vec<(u64, u64, u64, &str)> {
        match &self.inner.maps {
            Some(maps) => maps
                .iter()
                .filter_map(|m| {
                    let path = m.path.as_deref().filter(|p| p.starts_with('/'))?;
                    Some((m.start, m.end, m.offset, path))
                })
                .collect(),
            None => self
                .inner
                .modules
                .iter()
                .map(|m| (m.base, m.base.saturating_add(m.size), 0, m.name.as_str()))
                .collect(),
        }
    }

    /// The auxv's AT_PAGESZ, else 4096.
    #[getter]
    fn page_size(&self) -> u64 {
        self.inner.auxv.get(&AT_PAGESZ).copied().filter(|p| p.is_power_of_two()).unwrap_or(4096)
    }

    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings.clone()
    }

    /// The NUL-terminated string at `address` (None: not all in the dump).
    #[pyo3(signature = (address, limit = 4096))]
    fn string<'py>(
        &self,
        py: Python<'py>,
        address: u64,
        limit: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        string_object(py, self.inner.string(address, limit))
    }

    /// The bytes the dump holds contiguously from `address` on, at most
    /// `limit` (None: none there).
    fn image<'py>(
        &self,
        py: Python<'py>,
        address: u64,
        limit: usize,
    ) -> Option<Bound<'py, PyBytes>> {
        image(py, &self.inner.memory, address, limit)
    }

    /// The dynamic linker's link map, where the dump holds it: as
    /// `CoreFile.link_map`.
    fn link_map<'py>(&self, py: Python<'py>, dynamic: u64) -> PyResult<LinkMap<'py>> {
        link_map_objects(py, self.inner.link_map(dynamic))
    }

    /// As `CoreFile.address_space`: the modules of the dump's maps stream
    /// (else its module list), each checked against the module list's
    /// record; a Windows or Apple dump's are not looked for here.
    fn address_space<'py>(
        &self,
        py: Python<'py>,
        unwinder: &Bound<'py, PyUnwinder>,
        options: SpaceOptions,
    ) -> PyResult<SpaceTuple<'py>> {
        let dump = &self.inner;
        let segments = self.segments();
        let files: Vec<FileMapping> = self
            .files()
            .into_iter()
            .map(|(start, end, offset, path)| FileMapping {
                start,
                end,
                offset,
                path: PathBuf::from(path),
            })
            .collect();
        let link_map = |dynamic| dump.link_map(dynamic);
        let recorded = |start: u64| {
            let listed = dump.modules.iter().find(|m| m.base == start)?;
            match (&listed.build_id, &listed.guid) {
                (Some(id), _) => Some(Identity::FileId(id.clone())),
                (None, Some((guid, age))) => Some(Identity::Guid(guid.to_vec(), *age)),
                (None, None) => None,
            }
        };
        // The module list's Breakpad ids: the symbol stores' keys.
        let symbol_ids: Vec<(u64, String, String)> = dump
            .modules
            .iter()
            .filter_map(|m| {
                let file = m.debug_file.clone().unwrap_or_else(|| basename(&m.name).to_owned());
                Some((m.base, file, m.debug_id.clone()?))
            })
            .collect();
        // The code files and ids: a Windows module's PE file is looked for by them.
        let code_ids: Vec<(u64, String, String)> = dump
            .modules
            .iter()
            .filter_map(|m| Some((m.base, basename(&m.name).to_owned(), m.code_id.clone()?)))
            .collect();
        let os = dump.system.os.as_str();
        // (Apple's frame-record chains end with a saved frame pointer of 0.)
        unwinder.borrow_mut().set_apple(matches!(os, "Mac OS X" | "iOS"));
        let facts = Facts {
            symbol_ids: &symbol_ids,
            code_ids: if matches!(os, "Windows NT" | "Mac OS X" | "iOS") { &code_ids } else { &[] },
            files: Some(&files),
            fname: dump.name.as_deref(),
            link_map: &link_map,
            recorded: &recorded,
            kind: "minidump",
            foreign: (!matches!(os, "Linux" | "Android")).then_some(os),
            ..Facts::of(dump.arch, self.page_size(), &segments, &dump.auxv, &dump.memory)
        };
        address_space(py, &facts, Some(unwinder), options)
    }

    fn __repr__(&self) -> String {
        format!(
            "<MinidumpFile {} ({}, {} threads)>",
            self.path,
            self.inner.arch,
            self.inner.threads.len()
        )
    }
}
