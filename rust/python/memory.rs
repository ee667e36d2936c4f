//! `MappedMemory`: `crate::source::memory`'s segment memory over a mapped file.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::errors::MemoryReadError;
use crate::source::memory::Data;
use crate::source::memory::{Segment, SegmentMemory};

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
        let file = crate::source::files::open_regular(&path)
            .map_err(|e| MemoryReadError::new_err(format!("{name}: {e}")))?;
        let map = crate::source::files::map_file(&file)
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
