//! `ElfFile`: an ELF file's identity and layout as the address space reads
//! it (`crate::space::elf`), for callers that must know a file before a
//! snapshot exists — `capture` choosing gdb or qemu by the program's machine
//! and placing a module by where gdb saw its `.text` — and for users filing
//! symbols by a file's ids.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use super::errors::ElfError;
use crate::arch::Arch;
use crate::space::elf::ElfSummary;
use crate::space::finder::hex;

/// An ELF file (a path) or image (bytes-like, which may be just its first
/// page), read once: its program headers and its identities.
#[pyclass(module = "stackwalk._core", name = "ElfFile", frozen)]
pub(super) struct PyElfFile {
    /// Where the sections are read: the path, or the bytes given.
    source: Source,
    name: String,
    summary: Arc<ElfSummary>,
}

enum Source {
    Path(PathBuf),
    Image(Vec<u8>),
}

#[pymethods]
impl PyElfFile {
    #[new]
    fn new(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(buf) = PyBuffer::<u8>::get(source) {
            let data = buf.to_vec(py)?;
            let summary = crate::space::elf::summarize(&data)
                .map_err(|e| ElfError::new_err(format!("<image>: {e}")))?;
            let name = "<image>".to_owned();
            return Ok(Self { source: Source::Image(data), name, summary: Arc::new(summary) });
        }
        let path: PathBuf = source.extract()?;
        let name = path.to_string_lossy().into_owned();
        // Cached by the finder while the file is the same file.
        let summary = py
            .detach(|| crate::space::finder::file_summary(&path))
            .map_err(|e| e.to_string())
            .and_then(|s| s)
            .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        Ok(Self { source: Source::Path(path), name, summary })
    }

    /// The architecture's name ("x86_64", "aarch64", "i386"), or e_machine's
    /// number for one stackwalk does not unwind.
    #[getter]
    fn machine(&self) -> String {
        let machine = self.summary.machine;
        Arch::from_elf_machine(machine).map_or_else(|| machine.to_string(), |a| a.name().to_owned())
    }

    /// "EXEC", "DYN", "CORE", "REL", or e_type's number.
    #[getter]
    fn r#type(&self) -> String {
        match self.summary.e_type {
            object::elf::ET_REL => "REL".to_owned(),
            object::elf::ET_EXEC => "EXEC".to_owned(),
            object::elf::ET_DYN => "DYN".to_owned(),
            object::elf::ET_CORE => "CORE".to_owned(),
            other => other.to_string(),
        }
    }

    #[getter]
    fn entry(&self) -> u64 {
        self.summary.entry
    }

    /// The GNU build id (hex), if the file has one.
    #[getter]
    fn build_id(&self) -> Option<String> {
        self.summary.build_id.as_deref().map(hex)
    }

    /// Breakpad's identity of the file (its `FileID`, as `dump_syms` and
    /// minidump writers record it), hex: the build id, else the hash of the
    /// first page of `.text`; None when the bytes given hold neither.
    #[getter]
    fn file_id(&self) -> Option<String> {
        self.summary.file_id.as_deref().map(hex)
    }

    /// The debug id Breakpad and `dump_syms` give the file (its `file_id`
    /// as a GUID, with an age of 0), by which symbol stores file it.
    #[getter]
    fn debug_id(&self) -> Option<String> {
        self.summary.file_id.as_deref().map(crate::space::symserver::elf_debug_id)
    }

    /// The program's dynamic linker (PT_INTERP), if it names one.
    #[getter]
    fn interpreter(&self) -> Option<String> {
        self.summary.interpreter.as_ref().map(|p| String::from_utf8_lossy(p).into_owned())
    }

    /// The ELF address (sh_addr) of the section `name`, None if the file has
    /// no such section.
    fn section_address(&self, name: &str) -> PyResult<Option<u64>> {
        let found = match &self.source {
            Source::Path(path) => {
                let data = crate::source::files::map(path)
                    .map_err(|e| ElfError::new_err(format!("{}: {e}", self.name)))?;
                crate::space::elf::section_address(&data, name)
            }
            Source::Image(data) => crate::space::elf::section_address(data, name),
        };
        found.map_err(|e| ElfError::new_err(format!("{}: {e}", self.name)))
    }

    fn __repr__(&self) -> String {
        format!("ElfFile({:?}, machine={:?})", self.name, self.machine())
    }
}
