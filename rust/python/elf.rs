//! ELF facts for the Python layer: `elf_summary` and `elf_section_address`
//! (`crate::space::elf`).

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::elf_bytes;
use super::errors::ElfError;
use crate::arch::Arch;
use crate::space::elf::ElfSummary;
use crate::space::finder::hex;

pub(super) fn machine_name(machine: u16) -> String {
    Arch::from_elf_machine(machine).map_or_else(|| machine.to_string(), |a| a.name().to_owned())
}

/// The program headers of an ELF file (a path) or image (bytes-like, which
/// may be just its first page): machine, type, entry, GNU build id, PT_LOAD
/// segments, PT_DYNAMIC. Reads no section headers.
#[pyfunction]
pub(super) fn elf_summary<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let summary = match PyBuffer::<u8>::get(source) {
        Ok(buf) => {
            let data = buf.to_vec(py)?;
            crate::space::elf::summarize(&data)
                .map(Arc::new)
                .map_err(|e| ElfError::new_err(format!("<image>: {e}")))?
        }
        Err(_) => {
            let path: PathBuf = source.extract()?;
            let name = path.to_string_lossy();
            crate::space::finder::file_summary(&path)
                .map_err(|e| e.to_string())
                .and_then(|s| s)
                .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?
        }
    };
    summary_dict(py, &summary)
}

/// An ELF summary as the Python layer reads it (see `_ElfSummary` in the stub).
pub(super) fn summary_dict<'py>(
    py: Python<'py>,
    summary: &ElfSummary,
) -> PyResult<Bound<'py, PyDict>> {
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
    out.set_item("build_id", summary.build_id.as_deref().map(hex))?;
    out.set_item("file_id", summary.file_id.as_deref().map(hex))?;
    out.set_item("other_file_id", summary.other_file_id.as_deref().map(hex))?;
    out.set_item("loads", &summary.loads)?;
    out.set_item("dynamic", summary.dynamic)?;
    out.set_item("phdr", summary.phdr)?;
    let interpreter = summary.interpreter.as_ref().map(|p| String::from_utf8_lossy(p).into_owned());
    out.set_item("interpreter", interpreter)?;
    Ok(out)
}

/// The ELF address (sh_addr) of the section `name` of an ELF file (a path)
/// or image (bytes-like); None if it has no such section.
#[pyfunction]
pub(super) fn elf_section_address(source: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<u64>> {
    let (file, data) = elf_bytes(source)?;
    crate::space::elf::section_address(&data, name)
        .map_err(|e| ElfError::new_err(format!("{file}: {e}")))
}
