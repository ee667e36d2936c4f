//! `ElfFile`: an ELF file's identity and layout as the address space reads
//! it (`crate::space::elf`), for callers that must know a file before a
//! snapshot exists — `capture` choosing gdb or qemu by the program's machine
//! and placing a module by where gdb saw its `.text` — and for users filing
//! symbols by a file's ids.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use pyo3::types::{PyDict, PyList};

use super::errors::{guard, ElfError};
use crate::arch::Arch;
use crate::source::memory::Data;
use crate::space::elf::ElfSummary;
use crate::space::finder::hex;
use crate::unwind::cfi::sframe::PcType;
use crate::unwind::cfi::sframe_check::{self, describe_cfa, describe_place};
use crate::unwind::cfi::UnwindInfo;
use crate::unwind::file::index_file;

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

    /// The file's `.sframe` table: its version, flags, and every function
    /// with its rows (CFA, return address and frame pointer in the
    /// notation of `objdump --sframe`: `sp+16`, `c-8`, `u`; `U` for an
    /// undefined return address). None where the file has no `.sframe`
    /// section; an error where its header cannot be read.
    fn sframe<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let info = self.unwind_info(py)?;
        if info.sframe().is_none() {
            return match info.sframe_error() {
                Some(why) => Err(ElfError::new_err(format!("{}: .sframe: {why}", self.name))),
                None => Ok(None),
            };
        }
        let table = info.sframe().expect("checked");
        let out = PyDict::new(py);
        out.set_item("version", table.version)?;
        out.set_item("flags", table.flags)?;
        let functions = PyList::empty(py);
        for index in 0..table.function_count() {
            let f = PyDict::new(py);
            match table.function(index) {
                Ok(function) => {
                    f.set_item("start", function.start)?;
                    f.set_item("end", function.end)?;
                    let repeat = match function.pc_type {
                        PcType::Increasing => None,
                        PcType::Mask(size) => Some(size),
                    };
                    f.set_item("repeat", repeat)?;
                    f.set_item("flexible", function.flexible)?;
                    f.set_item("signal", function.signal)?;
                    f.set_item("pauth_key", if function.pauth_key_b { "B" } else { "A" })?;
                    let rows = PyList::empty(py);
                    for entry in table.entries(&function) {
                        let entry = match entry {
                            Ok(e) => e,
                            Err(why) => {
                                f.set_item("error", why)?;
                                break;
                            }
                        };
                        let row = PyDict::new(py);
                        row.set_item("start", entry.start)?;
                        row.set_item("cfa", describe_cfa(table.arch, &entry))?;
                        let ra = entry.ra.map_or("U".to_owned(), |p| describe_place(table.arch, p));
                        row.set_item("ra", ra)?;
                        row.set_item("fp", describe_place(table.arch, entry.fp))?;
                        row.set_item("mangled_ra", entry.mangled_ra)?;
                        rows.append(row)?;
                    }
                    f.set_item("rows", rows)?;
                }
                Err(why) => f.set_item("error", why)?,
            }
            functions.append(f)?;
        }
        out.set_item("functions", functions)?;
        Ok(Some(out))
    }

    /// The file's `.sframe` table checked against its DWARF CFI (see
    /// `stackwalk sframe --verify`): where they disagree, row by row.
    fn verify_sframe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = self.unwind_info(py)?;
        let report = py
            .detach(|| guard("checking .sframe", || sframe_check::verify(&info)))?
            .map_err(|e| ElfError::new_err(format!("{}: {e}", self.name)))?;
        let out = PyDict::new(py);
        out.set_item("version", report.version)?;
        out.set_item("functions", report.functions)?;
        out.set_item("rows", report.rows)?;
        out.set_item("bytes", report.bytes)?;
        let disagreements = PyList::empty(py);
        for d in &report.disagreements {
            let item = PyDict::new(py);
            item.set_item("start", d.range.start)?;
            item.set_item("end", d.range.end)?;
            item.set_item("function", d.function)?;
            item.set_item("field", d.field)?;
            item.set_item("sframe", &d.sframe)?;
            item.set_item("dwarf", &d.dwarf)?;
            disagreements.append(item)?;
        }
        out.set_item("disagreements", disagreements)?;
        let without: Vec<(u64, u64)> =
            report.without_sframe.iter().map(|r| (r.start, r.end)).collect();
        out.set_item("without_sframe", without)?;
        out.set_item("errors", report.errors)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("ElfFile({:?}, machine={:?})", self.name, self.machine())
    }
}

impl PyElfFile {
    /// The file's unwind tables, read and indexed.
    fn unwind_info(&self, py: Python<'_>) -> PyResult<Arc<UnwindInfo>> {
        let data = match &self.source {
            Source::Path(path) => crate::source::files::map(path)
                .map_err(|e| ElfError::new_err(format!("{}: {e}", self.name)))?,
            Source::Image(bytes) => Data::Owned(bytes.clone()),
        };
        let indexed = py
            .detach(|| guard("indexing CFI", || index_file(Arc::new(data), None)))?
            .map_err(|e| ElfError::new_err(format!("{}: {e}", self.name)))?;
        Ok(indexed.info)
    }
}
