//! `CoreFile`: an ELF core file read by `crate::source::corefile`, as the Python
//! layer (`stackwalk.core`) takes it: plain values, the memory as a
//! `MappedMemory` sharing the core's mapping.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::errors::{CoreError, StackwalkError};
use super::memory::PyMappedMemory;
use super::snapshot::{address_space, path_of, SpaceOptions, SpaceTuple};
use super::unwinder::PyUnwinder;
use crate::source::corefile::{
    CoreError as CoreFileError, CoreFile, LinkMapEntry, DEFAULT_MAX_SIZE,
};
use crate::source::memory::SegmentMemory;
use crate::source::signal::{Crash, Signal};
use crate::space::snapshot::{Facts, FileMapping};

/// A path or name read from the core, as Python names files: UTF-8, bytes
/// that are not kept as surrogates (`os.fsdecode`).
fn fs_str(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

/// A process's signal as Python takes it: (number, name, faulting address,
/// `si_code`).
pub(super) type SignalTuple = (i32, String, Option<u64>, Option<i32>);

pub(super) fn signal_tuple(signal: Signal) -> SignalTuple {
    (signal.number, signal.name(), signal.address, signal.code)
}

/// `link_map`'s answer: ([(l_name or None, l_addr, l_ld)], warnings).
pub(super) type LinkMap<'py> = (Vec<(Option<Bound<'py, PyAny>>, u64, u64)>, Vec<String>);

/// A string read from the process's memory (None: not all captured), as
/// Python names files; `CoreFile.string` and `MinidumpFile.string`.
pub(super) fn string_object<'py>(
    py: Python<'py>,
    bytes: Option<Vec<u8>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(bytes) = bytes else { return Ok(None) };
    Ok(Some(fs_str(&bytes).into_pyobject(py)?.into_any()))
}

/// The bytes `memory` holds contiguously from `address` on, at most `limit`
/// (None: none there); `CoreFile.image` and `MinidumpFile.image`.
pub(super) fn image<'py>(
    py: Python<'py>,
    memory: &SegmentMemory,
    address: u64,
    limit: usize,
) -> Option<Bound<'py, PyBytes>> {
    let bytes = memory.tail(address, limit);
    (!bytes.is_empty()).then(|| PyBytes::new(py, bytes))
}

/// A link map read from the process's memory, as `link_map` gives it.
pub(super) fn link_map_objects<'py>(
    py: Python<'py>,
    (entries, warnings): (Vec<LinkMapEntry>, Vec<String>),
) -> PyResult<LinkMap<'py>> {
    let entries = entries
        .into_iter()
        .map(|LinkMapEntry { name, bias, dynamic }| {
            let name = name.map(|n| fs_str(&n).into_pyobject(py)).transpose()?;
            Ok((name.map(|n| n.into_any()), bias, dynamic))
        })
        .collect::<PyResult<_>>()?;
    Ok((entries, warnings))
}

/// An ELF core file: its threads, process facts, mappings and memory.
#[pyclass(module = "stackwalk._core", name = "CoreFile", frozen)]
pub struct PyCoreFile {
    inner: CoreFile,
    path: String,
    /// Which thread crashed, by the threads' signals (decided once).
    crash: Crash,
}

impl PyCoreFile {
    fn of(inner: CoreFile, path: String) -> Self {
        let crash = inner.crash();
        PyCoreFile { inner, path, crash }
    }
}

#[pymethods]
impl PyCoreFile {
    /// Read the core at `path`; CoreError (naming the file) if it is not
    /// a core that can be read. Damage past its headers is in `warnings`.
    /// A compressed core (zstd, xz, lz4, gzip) is decompressed into memory,
    /// to at most `max_size` bytes (None: `DEFAULT_MAX_SIZE`).
    #[new]
    #[pyo3(signature = (path, max_size=None))]
    fn new(path: PathBuf, max_size: Option<u64>) -> PyResult<Self> {
        let name = path.to_string_lossy().into_owned();
        let limit = max_size.unwrap_or(DEFAULT_MAX_SIZE);
        let inner = CoreFile::open_with_limit(&path, limit)
            .map_err(|e| CoreError::new_err(format!("{name}: {e}")))?;
        Ok(PyCoreFile::of(inner, name))
    }

    #[getter]
    fn arch(&self) -> &'static str {
        self.inner.arch.name()
    }

    /// Bytes in a word, a pointer, an address of the process: 8 or 4.
    #[getter]
    fn word_size(&self) -> u64 {
        self.inner.arch.word_size()
    }

    /// The PT_LOAD segments: (start, end, p_flags); the end saturates at
    /// 2^64 - 1 (a damaged p_memsz).
    #[getter]
    fn segments(&self) -> Vec<(u64, u64, u32)> {
        self.inner.segments.iter().map(|s| (s.vaddr, s.end(), s.flags)).collect()
    }

    /// The process's memory: the segments' bytes the file holds.
    #[getter]
    fn memory(&self) -> PyMappedMemory {
        PyMappedMemory { inner: self.inner.memory.clone(), path: self.path.clone() }
    }

    /// One (tid, pr_cursig, index) per NT_PRSTATUS, the crashing thread's
    /// first, the others in the core's order; `registers(index)` gives its
    /// registers. (Not a dict per thread here: a core of 100,000 threads
    /// made 2.3 KB of Python objects of each 360-byte note.)
    #[getter]
    fn threads(&self) -> Vec<(i32, i16, usize)> {
        let threads = &self.inner.notes.threads;
        self.crash.order.iter().map(|&i| (threads[i].tid, threads[i].cursig, i)).collect()
    }

    /// The thread that crashed (`crate::source::signal`), None in a snapshot
    /// of a process that did not.
    #[getter]
    fn crashing_tid(&self) -> Option<i32> {
        self.crash.crashing.map(|i| self.inner.notes.threads[i].tid)
    }

    /// The signal that stopped the process: (number, name, faulting address,
    /// si_code), or None.
    #[getter]
    fn signal(&self) -> Option<SignalTuple> {
        self.crash.signal.clone().map(signal_tuple)
    }

    /// Each thread's stack: (tid, start, end, sp), the captured segment
    /// holding its sp (`Unwinder.set_process`).
    #[getter]
    fn thread_stacks(&self) -> Vec<(u32, u64, u64, u64)> {
        let sp = self.inner.arch.sp();
        let names = self.inner.arch.prstatus().names;
        let Some(at) = names.iter().position(|&n| Some(n) == self.inner.arch.register_name(sp))
        else {
            return Vec::new();
        };
        let threads = self.inner.notes.threads.iter();
        let sps = threads.filter_map(|t| Some((t.tid as u32, *t.registers.get(at)?)));
        let stacks = self.inner.memory.thread_stacks(sps);
        stacks.into_iter().map(|t| (t.tid, t.start, t.end, t.sp)).collect()
    }

    /// The registers by name of the thread at `index` of `threads`.
    fn registers<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyDict>> {
        let thread = self
            .inner
            .notes
            .threads
            .get(index)
            .ok_or_else(|| CoreError::new_err(format!("no thread at index {index}")))?;
        let regs = PyDict::new(py);
        for (name, value) in thread.named_registers(self.inner.arch) {
            regs.set_item(name, value)?;
        }
        Ok(regs)
    }

    /// NT_PRPSINFO's pr_pid.
    #[getter]
    fn pid(&self) -> Option<u32> {
        self.inner.notes.pid
    }

    /// NT_PRPSINFO's pr_fname: the command, cut to 15 bytes.
    #[getter]
    fn fname(&self) -> Option<&str> {
        self.inner.notes.fname.as_deref()
    }

    /// NT_PRPSINFO's pr_psargs: the command line, cut to 80 bytes.
    #[getter]
    fn psargs(&self) -> Option<&str> {
        self.inner.notes.psargs.as_deref()
    }

    /// NT_AUXV: type -> value (the first of a type).
    #[getter]
    fn auxv(&self) -> std::collections::BTreeMap<u64, u64> {
        self.inner.notes.auxv.clone()
    }

    /// Where the main thread's stack began (the address of its argc), found
    /// from the auxiliary vector's copy in memory; None where it is not.
    #[getter]
    fn initial_stack(&self) -> Option<u64> {
        self.inner.initial_stack()
    }

    /// NT_FILE's mappings: (start, end, file offset in bytes, path); None
    /// without a readable NT_FILE.
    #[getter]
    fn files(&self) -> Option<Vec<(u64, u64, u64, &OsStr)>> {
        let files = self.inner.notes.files.as_ref()?;
        Some(files.iter().map(|f| (f.start, f.end, f.offset, fs_str(&f.path))).collect())
    }

    /// NT_FILE's page size, else 4096.
    #[getter]
    fn page_size(&self) -> u64 {
        self.inner.notes.page_size
    }

    /// What is damaged, one line each, in the order found.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings.clone()
    }

    /// The NUL-terminated string at `address` (None: not all in the core).
    #[pyo3(signature = (address, limit = 4096))]
    fn string<'py>(
        &self,
        py: Python<'py>,
        address: u64,
        limit: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        string_object(py, self.inner.string(address, limit))
    }

    /// The bytes the core holds contiguously from `address` on, at most
    /// `limit` (None: none there).
    fn image<'py>(
        &self,
        py: Python<'py>,
        address: u64,
        limit: usize,
    ) -> Option<Bound<'py, PyBytes>> {
        image(py, &self.inner.memory, address, limit)
    }

    /// The dynamic linker's link map, for an executable whose PT_DYNAMIC is
    /// at runtime address `dynamic`: ([(l_name or None, l_addr, l_ld)], warnings).
    fn link_map<'py>(&self, py: Python<'py>, dynamic: u64) -> PyResult<LinkMap<'py>> {
        link_map_objects(py, self.inner.link_map(dynamic))
    }

    /// Its modules found on this machine, checked and placed into
    /// `unwinder` (`crate::space::snapshot`; `options`: see
    /// `snapshot::SpaceOptions`): (modules, the executable's index, the vdso
    /// image, warnings). CoreError: the executable given cannot be the
    /// program's file.
    fn address_space<'py>(
        &self,
        py: Python<'py>,
        unwinder: &Bound<'py, PyUnwinder>,
        options: SpaceOptions,
    ) -> PyResult<SpaceTuple<'py>> {
        let core = &self.inner;
        let segments = self.segments();
        let files: Option<Vec<FileMapping>> = core.notes.files.as_ref().map(|files| {
            files
                .iter()
                .map(|f| FileMapping {
                    start: f.start,
                    end: f.end,
                    offset: f.offset,
                    path: path_of(&f.path),
                })
                .collect()
        });
        let link_map = |dynamic| core.link_map(dynamic);
        let facts = Facts {
            files: files.as_deref(),
            fname: core.notes.fname.as_deref(),
            link_map: &link_map,
            ..Facts::of(core.arch, core.notes.page_size, &segments, &core.notes.auxv, &core.memory)
        };
        address_space(py, &facts, Some(unwinder), options)
    }

    /// Write the core as a minidump at `path` (`crate::source::corefile::dump`):
    /// `modules` are (path, start, end, build id or None, the file used or
    /// None), the program first; `stack_bytes` of each thread's stack at
    /// most, `around` bytes around each pc and each register that points
    /// into captured memory; `frame_sps`: the sps of the frames the walks
    /// found (their stacks kept too). Its size in bytes. StackwalkError
    /// naming the path where it cannot be written.
    #[pyo3(signature = (path, modules, stack_bytes, around, time = 0, processors = 0,
                        frame_sps = Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn write_minidump(
        &self,
        py: Python<'_>,
        path: PathBuf,
        modules: Vec<DumpModule>,
        stack_bytes: u64,
        around: u64,
        time: u32,
        processors: u8,
        frame_sps: Vec<u64>,
    ) -> PyResult<u64> {
        use crate::source::corefile::dump::{plan, DumpOptions};
        use crate::source::minidump::write::{write, Module};
        let options = DumpOptions { stack_bytes, around, time, processors };
        py.detach(|| {
            let (loads, names) = file_facts(&modules);
            let flags = |path: &str, offset: u64| mapping_flags(loads.get(path)?, offset);
            let modules = modules
                .into_iter()
                .zip(names)
                .map(|((_, start, end, build_id, _), name)| Module { start, end, name, build_id })
                .collect();
            let plan = plan(&self.inner, modules, &options, &flags, &frame_sps);
            let file = std::fs::File::create(&path)?;
            write(&plan, &mut std::io::BufWriter::new(file))
        })
        .map_err(|e| {
            let message = crate::source::corefile::os_message(&e);
            StackwalkError::new_err(format!("{}: {message}", path.display()))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<CoreFile {} ({}, {} threads)>",
            self.path,
            self.inner.arch,
            self.inner.notes.threads.len()
        )
    }
}

/// Read the core file descriptor `fd` gives, as the kernel pipes it to a
/// `core_pattern` program (`crate::source::corefile::stream`): at most
/// `max_bytes`, for at most `timeout` seconds (None: no limit), keeping what
/// a minidump of `stack_bytes` and `around` takes, written as a small core
/// at `out` (made anew: an existing file is an error). (Bytes read, why
/// reading stopped before the end or None.) CoreError where the headers or
/// notes cannot be read.
#[pyfunction]
#[pyo3(signature = (fd, out, max_bytes, timeout, stack_bytes, around))]
pub(super) fn stream_core(
    py: Python<'_>,
    fd: i32,
    out: PathBuf,
    max_bytes: u64,
    timeout: Option<f64>,
    stack_bytes: u64,
    around: u64,
) -> PyResult<(u64, Option<String>)> {
    use crate::source::corefile::dump::DumpOptions;
    use crate::source::corefile::stream::{stream, StreamLimits};
    use std::io::Write;
    use std::os::fd::BorrowedFd;
    let deadline = timeout
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map(|t| std::time::Instant::now() + std::time::Duration::from_secs_f64(t.min(1e9)));
    let dump = DumpOptions { stack_bytes, around, ..DumpOptions::default() };
    let limits = StreamLimits { max_bytes, deadline, dump };
    py.detach(|| {
        // SAFETY: the caller's descriptor, open while it waits for this call;
        // a copy of it is read (and closed) here.
        let owned = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned();
        let mut input = std::fs::File::from(owned.map_err(CoreFileError::Io)?);
        let streamed = stream(&mut input, &limits)?;
        std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(&out)
            .and_then(|mut file| file.write_all(&streamed.core))
            .map_err(|e| CoreFileError::Io(io_at(&out, e)))?;
        Ok((streamed.read, streamed.stopped))
    })
    .map_err(|e: CoreFileError| CoreError::new_err(e.to_string()))
}

/// `e`, its message naming `path`.
fn io_at(path: &std::path::Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A module of a dump being written: (path as the core names it, start,
/// end, build id, the file used for it).
type DumpModule = (String, u64, u64, Option<Vec<u8>>, Option<PathBuf>);

/// Each module's file's `PT_LOAD`s (offset, file size, flags), by the
/// module's path, and the module's name in the dump: its path, with its
/// file name its `DT_SONAME` where it has one (as Breakpad's and Crashpad's
/// writers name modules: `dump_syms` names their symbol files so).
#[allow(clippy::type_complexity)]
fn file_facts(modules: &[DumpModule]) -> (HashMap<String, Vec<(u64, u64, u32)>>, Vec<String>) {
    let mut loads = HashMap::new();
    let mut names = Vec::with_capacity(modules.len());
    for (name, _, _, _, file) in modules {
        let data = file.as_ref().and_then(|f| crate::source::files::map(f).ok());
        let soname = data.as_deref().and_then(crate::space::elf::soname);
        names.push(match (soname, name.rsplit_once('/')) {
            (Some(soname), Some((dir, _))) => format!("{dir}/{soname}"),
            _ => name.clone(),
        });
        // (The summary the address space made of the file, kept for it.)
        let summary = file.as_ref().and_then(|f| crate::space::finder::file_summary(f).ok());
        let Some(Ok(summary)) = summary else { continue };
        let each = summary.loads.iter().map(|&(_, _, offset, size, flags)| (offset, size, flags));
        loads.insert(name.clone(), each.collect());
    }
    (loads, names)
}

/// The flags of the `PT_LOAD` a mapping at file `offset` (page-aligned) maps.
fn mapping_flags(loads: &[(u64, u64, u32)], offset: u64) -> Option<u32> {
    let page = |v: u64| v & !0xfff;
    loads.iter().find(|&&(at, size, _)| page(at) <= offset && offset < at + size).map(|l| l.2)
}

/// Stop every thread of the live process `pid` for as short a time as can
/// be, copy its registers and memory, let it go (see `crate::source::process`):
/// (the copy, as a CoreFile held in memory; how long the process was
/// stopped, in ns; [(a mapped path as /proc/PID/maps gives it, where that
/// file can be read now)] for files deleted since they were mapped).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(super) fn snapshot_process(
    py: Python<'_>,
    pid: i32,
) -> PyResult<(PyCoreFile, u64, Vec<(PathBuf, String)>)> {
    let snap = py
        .detach(|| {
            let mut python = crate::symbolize::pyframes::LiveState::default();
            crate::source::process::snapshot(pid, &mut python)
        })
        .map_err(|e| super::errors::StackwalkError::new_err(e.to_string()))?;
    let paths = snap
        .file_paths
        .into_iter()
        .map(|(path, via)| (PathBuf::from(fs_str(&path)), via))
        .collect();
    let stopped = u64::try_from(snap.stopped.as_nanos()).unwrap_or(u64::MAX);
    Ok((PyCoreFile::of(snap.core, format!("pid {pid}")), stopped, paths))
}
