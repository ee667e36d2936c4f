//! The PyO3 bindings: the only module that knows about Python. Each is a
//! thin wrapper over a plain-Rust type, split by area, one file each:
//! `errors` (the exceptions), `unwinder`, `registers`, `memory`, `symbols`,
//! `symbolize`, `elf`, `snapshot`, `stackdb`, `perf`, `corefile`,
//! `minidump`, `capture`, `document`, `pyframes`. This file registers them all. Files are mapped, never copied.

use std::path::PathBuf;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

mod batch;
mod capture;
mod corefile;
mod document;
mod elf;
mod errors;
mod memory;
mod minidump;
mod perf;
mod progress;
mod pyframes;
mod registers;
mod snapshot;
mod stackdb;
mod symbolize;
mod symbols;
mod trace;
mod unwinder;

use crate::source::memory::Data;
use errors::{
    ArchError, CfiError, CoreError, ElfError, MemoryReadError, MinidumpError, StackwalkError,
};

/// An ELF file's bytes: a path (mapped) or a bytes-like image (copied).
fn elf_bytes(source: &Bound<'_, PyAny>) -> PyResult<(String, Data)> {
    if let Ok(buf) = PyBuffer::<u8>::get(source) {
        return Ok(("<image>".to_owned(), Data::Owned(buf.to_vec(source.py())?)));
    }
    let path: PathBuf = source.extract()?;
    let name = path.to_string_lossy().into_owned();
    let data =
        crate::source::files::map(&path).map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
    Ok((name, data))
}

/// The BLAKE3 hash (hex) of the regular file at `path`, read through a
/// mapping without the GIL: what tells one crash file from another, under
/// any name.
#[pyfunction]
fn content_hash(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let hashed = py.detach(|| -> std::io::Result<blake3::Hash> {
        let file = crate::source::files::open_regular(&path)?;
        let data = crate::source::files::map_file(&file)?;
        Ok(blake3::hash(&data))
    });
    hashed
        .map(|h| h.to_hex().to_string())
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display())))
}

/// Drop what the process keeps of the files it read (module files and their
/// CFI, symbol tables, DWARF, symbol files, ELF summaries), the entries used
/// longest ago first, keeping `keep` (0 to 1) of each cache, and give the
/// freed heap back to the system: how many entries were dropped. What a
/// live Core, Unwinder or Symbolizer holds stays until it is let go.
#[pyfunction]
fn trim_caches(py: Python<'_>, keep: f64) -> usize {
    py.detach(|| {
        let dropped = unwinder::trim_module_files(keep)
            + crate::symbolize::trim_caches(keep)
            + crate::space::finder::trim_caches(keep);
        // SAFETY: glibc's malloc_trim only returns free memory to the system.
        unsafe { libc::malloc_trim(0) };
        dropped
    })
}

/// Let the pages of the files kept (their DWARF) leave the resident memory,
/// keeping what was parsed of them: they are read back from the page cache
/// when needed again, far cheaper than parsing them again.
#[pyfunction]
fn release_file_pages(py: Python<'_>) {
    py.detach(crate::symbolize::release_resident)
}

/// Hold rayon's global thread pool back (`held`), or let it start again;
/// returns whether it has started already. A process that reads a file
/// before forking workers holds it back meanwhile (see `crate::threads`).
#[pyfunction]
fn hold_thread_pool(held: bool) -> bool {
    crate::threads::hold(held)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // Cargo.toml's version, which maturin also gives the package's metadata:
    // `--version` reads it here, without importlib.metadata (38 ms of imports).
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("StackwalkError", py.get_type::<StackwalkError>())?;
    m.add("ElfError", py.get_type::<ElfError>())?;
    m.add("CfiError", py.get_type::<CfiError>())?;
    m.add("MemoryReadError", py.get_type::<MemoryReadError>())?;
    m.add("ArchError", py.get_type::<ArchError>())?;
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add("MinidumpError", py.get_type::<MinidumpError>())?;
    // The values `Frame.trust` and `Trace.end` take (the stubs' `Literal`s are checked against
    // them by the tests).
    let names = |all: &[&'static str]| pyo3::types::PyTuple::new(py, all.iter().copied());
    m.add("TRUST_LEVELS", names(&crate::unwind::Trust::ALL.map(|t| t.as_str()))?)?;
    m.add("END_REASONS", names(&crate::unwind::EndReason::ALL.map(|e| e.as_str()))?)?;
    m.add("MAX_JOBS", perf::MAX_JOBS)?;
    // The snapshot document's shape and the inputs it is made of (docs/json.md).
    m.add("SNAPSHOT_SCHEMA", crate::render::snapshot::SCHEMA)?;
    m.add("SNAPSHOT_KINDS", names(&crate::render::snapshot::Kind::ALL.map(|k| k.as_str()))?)?;
    m.add_class::<unwinder::PyUnwinder>()?;
    m.add_class::<registers::PyRegisters>()?;
    m.add_class::<unwinder::PyTrace>()?;
    m.add_class::<batch::PyTraceBatch>()?;
    m.add_class::<unwinder::PyFrame>()?;
    m.add_class::<memory::PyMappedMemory>()?;
    m.add_class::<symbols::PySymbolTable>()?;
    m.add_class::<elf::PyElfFile>()?;
    m.add_class::<symbolize::PySymbolizer>()?;
    m.add_class::<symbolize::PySymbolizedFrame>()?;
    m.add_class::<symbolize::PyPerfMap>()?;
    m.add_class::<perf::PySampleRecords>()?;
    m.add_class::<stackdb::PyStackDb>()?;
    m.add_class::<corefile::PyCoreFile>()?;
    m.add_class::<minidump::PyMinidumpFile>()?;
    m.add_class::<capture::PyCaptureFile>()?;
    m.add_class::<document::PyDocument>()?;
    m.add_function(wrap_pyfunction!(content_hash, m)?)?;
    m.add_function(wrap_pyfunction!(hold_thread_pool, m)?)?;
    m.add_function(wrap_pyfunction!(trim_caches, m)?)?;
    m.add_function(wrap_pyfunction!(release_file_pages, m)?)?;
    m.add_function(wrap_pyfunction!(corefile::snapshot_process, m)?)?;
    m.add_function(wrap_pyfunction!(corefile::stream_core, m)?)?;
    m.add_function(wrap_pyfunction!(pyframes::python_threads, m)?)?;
    m.add_function(wrap_pyfunction!(symbols::demangle, m)?)?;
    m.add_function(wrap_pyfunction!(symbolize::sym_file_parses, m)?)?;
    m.add_function(wrap_pyfunction!(perf::perf_report, m)?)?;
    m.add_function(wrap_pyfunction!(perf::perf_samples, m)?)?;
    m.add_function(wrap_pyfunction!(perf::flamegraph, m)?)?;
    Ok(())
}
