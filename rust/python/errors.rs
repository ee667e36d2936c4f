//! The exceptions stackwalk raises, and `guard`, which turns a panic in the
//! core into a StackwalkError instead of letting it cross into Python.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

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
    MinidumpError,
    StackwalkError,
    "The file is not a minidump that stackwalk can read."
);
create_exception!(
    stackwalk._core,
    ArchError,
    StackwalkError,
    "Unknown or mismatched architecture."
);

/// Run `f`, turning a panic (a bug: the core is written not to panic on any
/// input) into a StackwalkError instead of letting it cross into Python.
pub(super) fn guard<T>(what: &str, f: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        StackwalkError::new_err(format!("internal error while {what}: {msg} (please report)"))
    })
}
