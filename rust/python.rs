//! The PyO3 bindings: the only module that knows about Python.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(stackwalk._core, StackwalkError, PyException, "Base class of every error stackwalk raises.");
create_exception!(stackwalk._core, ElfError, StackwalkError, "An ELF file could not be read or lacks what is needed.");
create_exception!(stackwalk._core, CfiError, StackwalkError, "Call frame information is malformed.");
create_exception!(stackwalk._core, MemoryReadError, StackwalkError, "Captured memory is missing or malformed.");
create_exception!(stackwalk._core, ArchError, StackwalkError, "Unknown or mismatched architecture.");

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("StackwalkError", py.get_type::<StackwalkError>())?;
    m.add("ElfError", py.get_type::<ElfError>())?;
    m.add("CfiError", py.get_type::<CfiError>())?;
    m.add("MemoryReadError", py.get_type::<MemoryReadError>())?;
    m.add("ArchError", py.get_type::<ArchError>())?;
    Ok(())
}
