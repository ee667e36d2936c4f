//! `StackDB`: `crate::stackdb`'s trace database, fed Traces or pcs.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::errors::StackwalkError;
use super::unwinder::PyTrace;

/// A stack-trace database: traces (sequences of pcs) stored once each, by
/// hash, with a count and a stable index.
#[pyclass(module = "stackwalk._core", name = "StackDB")]
#[derive(Default)]
pub struct PyStackDb {
    inner: crate::stackdb::StackDb,
    /// The pcs of the trace being added (kept, not allocated per add).
    pcs: Vec<u64>,
}

/// The most pcs a trace may have: more frames than a stack of 8 MiB (Linux's
/// default limit) could hold at one word each. The length a sequence claims
/// is never trusted for an allocation (`range(10**12)` is a sequence).
pub(super) const MAX_TRACE_PCS: usize = 1 << 20;

/// The pcs of a trace given as a Trace or as a sequence of ints, into
/// `pcs`. Tuples and lists are read in place: the generic sequence protocol
/// cost more than the database's own work.
fn trace_pcs(trace: &Bound<'_, PyAny>, pcs: &mut Vec<u64>) -> PyResult<()> {
    pcs.clear();
    let too_long = || {
        StackwalkError::new_err(format!("a trace of more than {MAX_TRACE_PCS} pcs: not a stack"))
    };
    if let Ok(t) = trace.cast::<PyTrace>() {
        pcs.extend(t.get().frames.iter().map(|f| f.pc));
    } else if let Ok(t) = trace.cast::<PyTuple>() {
        if t.len() > MAX_TRACE_PCS {
            return Err(too_long());
        }
        for pc in t.iter_borrowed() {
            pcs.push(pc_from(&pc)?);
        }
    } else if let Ok(l) = trace.cast::<PyList>() {
        if l.len() > MAX_TRACE_PCS {
            return Err(too_long());
        }
        for pc in l.iter() {
            pcs.push(pc_from(&pc)?);
        }
    } else {
        if trace.is_instance_of::<pyo3::types::PyString>() {
            return Err(pyo3::exceptions::PyTypeError::new_err("a trace is not a str"));
        }
        for pc in trace.try_iter()? {
            if pcs.len() == MAX_TRACE_PCS {
                return Err(too_long());
            }
            pcs.push(pc_from(&pc?)?);
        }
    }
    Ok(())
}

/// A pc from a Python int. CPython 3.11's `PyLong_AsUnsignedLongLong`
/// (pyo3's way to a u64) goes through a byte array, and was most of
/// `StackDB.add`'s time; where a C long is 64 bits, `PyLong_AsUnsignedLong`
/// is the same conversion (the same errors: negative, too large) as a loop
/// over the int's digits.
fn pc_from(pc: &Bound<'_, PyAny>) -> PyResult<u64> {
    #[cfg(all(target_pointer_width = "64", not(windows)))]
    if pc.is_exact_instance_of::<pyo3::types::PyInt>() {
        // SAFETY: `pc` is a live int; an error is looked for right after.
        let value = unsafe { pyo3::ffi::PyLong_AsUnsignedLong(pc.as_ptr()) };
        if value == std::os::raw::c_ulong::MAX {
            if let Some(e) = PyErr::take(pc.py()) {
                return Err(e);
            }
        }
        return Ok(value);
    }
    pc.extract()
}

#[pymethods]
impl PyStackDb {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Add a trace (a Trace, or a sequence of pcs) `count` times; its index,
    /// the same for the same trace every time.
    #[pyo3(signature = (trace, count = 1))]
    fn add(&mut self, trace: &Bound<'_, PyAny>, count: u64) -> PyResult<u32> {
        trace_pcs(trace, &mut self.pcs)?;
        Ok(self.inner.add_n(&self.pcs, count))
    }

    /// How many times the trace at `index` was added.
    fn count(&self, index: u32) -> PyResult<u64> {
        self.inner.count(index).ok_or_else(|| StackwalkError::new_err(format!("no trace {index}")))
    }

    /// The pcs of the trace at `index`.
    fn trace(&self, index: u32) -> PyResult<Vec<u64>> {
        self.inner
            .trace(index)
            .map(<[u64]>::to_vec)
            .ok_or_else(|| StackwalkError::new_err(format!("no trace {index}")))
    }

    /// The `n` most frequent traces: (index, pcs tuple, count), most frequent first.
    fn top<'py>(
        &self,
        py: Python<'py>,
        n: usize,
    ) -> PyResult<Vec<(u32, Bound<'py, PyTuple>, u64)>> {
        let mut out = Vec::with_capacity(n.min(self.inner.len()));
        for i in self.inner.top(n) {
            if let (Some(trace), Some(count)) = (self.inner.trace(i), self.inner.count(i)) {
                out.push((i, PyTuple::new(py, trace)?, count));
            }
        }
        Ok(out)
    }

    /// Traces added, duplicates included.
    #[getter]
    fn total(&self) -> u64 {
        self.inner.total()
    }

    /// Bytes the database holds.
    #[getter]
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// (index, pcs tuple, count) for every distinct trace, in index order.
    fn __iter__(slf: PyRef<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let mut items = Vec::with_capacity(slf.inner.len());
        for (i, trace, count) in slf.inner.iter() {
            items.push((i, PyTuple::new(py, trace)?, count));
        }
        Ok(items.into_pyobject(py)?.call_method0("__iter__")?.unbind())
    }

    fn __repr__(&self) -> String {
        format!("<StackDB {} traces, {} added>", self.inner.len(), self.inner.total())
    }
}
