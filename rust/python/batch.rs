//! `Unwinder.unwind_many`: many stacks unwound in one call, without the GIL
//! and over every CPU, into a `TraceBatch` that keeps the frames in flat
//! arrays (no Python object per frame unless one is asked for).

use std::sync::Arc;

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};
use rayon::prelude::*;

use super::errors::guard;
use super::memory::PyMappedMemory;
use super::unwinder::{extract_buffers, extract_registers, PyTrace};
use crate::arch::Arch;
use crate::cfi::Module;
use crate::memory::{Regions, SegmentMemory};
use crate::registers::Registers;
use crate::unwind::{End, Frame, Unwinder};

/// A chunk's frames, one walk's after another, and each walk's length and end.
type ChunkWalks = (Vec<Frame>, Vec<(usize, End)>);

/// Stacks a worker thread takes at a time.
const CHUNK: usize = 16;

thread_local! {
    /// Each worker thread's unwinder, kept from batch to batch so that its
    /// rule cache stays warm.
    static WORKER: std::cell::RefCell<Option<Unwinder>> = const { std::cell::RefCell::new(None) };
}

/// One stack to unwind: its registers and the memory that holds it, taken
/// from Python (buffers held, not copied) while the GIL is held.
pub(super) struct Stack {
    pc: u64,
    regs: Registers,
    memory: StackMemory,
}

enum StackMemory {
    Mapped(Arc<SegmentMemory>),
    Buffers(Vec<(u64, super::unwinder::HeldBytes)>),
}

impl Stack {
    fn regions(&self) -> Regions<'_> {
        match &self.memory {
            StackMemory::Mapped(m) => m.regions(),
            StackMemory::Buffers(buffers) => {
                let mut regions = Regions::new();
                for (start, held) in buffers {
                    regions.add(*start, held.as_slice());
                }
                regions
            }
        }
    }
}

/// The (regs, memory) pairs of `stacks`, each checked as `unwind` checks its
/// arguments; an error names the stack it is about.
pub(super) fn extract_stacks(arch: Arch, stacks: &Bound<'_, PyAny>) -> PyResult<Vec<Stack>> {
    let py = stacks.py();
    let mut out = Vec::with_capacity(stacks.len().unwrap_or(0));
    for (i, item) in stacks.try_iter()?.enumerate() {
        let at = |e: PyErr| PyErr::from_type(e.get_type(py), format!("stack {i}: {}", e.value(py)));
        let item = item?;
        let (regs, memory): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
            item.extract().map_err(|_| {
                super::errors::StackwalkError::new_err(format!(
                    "stack {i} is not a (regs, memory) pair"
                ))
            })?;
        let (pc, regs) = extract_registers(arch, &regs).map_err(at)?;
        let memory = match memory.cast::<PyMappedMemory>() {
            Ok(m) => StackMemory::Mapped(m.get().inner.clone()),
            Err(_) => StackMemory::Buffers(extract_buffers(&memory).map_err(at)?),
        };
        out.push(Stack { pc, regs, memory });
    }
    Ok(out)
}

/// Unwind every stack on the rayon pool (one unwinder with its own caches
/// per worker thread), the GIL released.
pub(super) fn unwind_all(
    py: Python<'_>,
    base: &Unwinder,
    stacks: Vec<Stack>,
    max_frames: Option<usize>,
) -> PyResult<PyTraceBatch> {
    crate::threads::start();
    let walked: Vec<ChunkWalks> = py.detach(|| {
        guard("unwinding a batch", || {
            stacks
                .par_chunks(CHUNK)
                .map(|chunk| {
                    WORKER.with(|cell| {
                        let mut worker = cell.borrow_mut();
                        let unwinder = match &mut *worker {
                            Some(u) if u.arch() == base.arch() => {
                                u.follow(base);
                                u
                            }
                            other => other.insert(base.worker()),
                        };
                        let (mut all, mut walks) = (Vec::new(), Vec::with_capacity(chunk.len()));
                        let mut frames = Vec::with_capacity(64);
                        for stack in chunk {
                            let mut regions = stack.regions();
                            let end = unwinder.unwind(
                                stack.pc,
                                &stack.regs,
                                &mut regions,
                                max_frames,
                                &mut frames,
                            );
                            all.extend_from_slice(&frames);
                            walks.push((frames.len(), end));
                        }
                        (all, walks)
                    })
                })
                .collect()
        })
    })?;
    drop(stacks);
    let total: usize = walked.iter().map(|(f, _)| f.len()).sum();
    let mut frames = Vec::with_capacity(total);
    let mut offsets = vec![0u64];
    let mut ends = Vec::new();
    for (chunk_frames, walks) in walked {
        frames.extend_from_slice(&chunk_frames);
        for (len, end) in walks {
            offsets.push(offsets[offsets.len() - 1] + len as u64);
            ends.push((end, base.end_module(&end)));
        }
    }
    let pcs: Vec<u64> = frames.iter().map(|f| f.pc).collect();
    Ok(PyTraceBatch {
        arch: base.arch(),
        pcs: u64_bytes(py, &pcs)?,
        offsets: u64_bytes(py, &offsets)?,
        frames,
        bounds: offsets,
        ends,
    })
}

/// `values` as the bytes of native-endian uint64s (a memoryview casts them).
fn u64_bytes(py: Python<'_>, values: &[u64]) -> PyResult<Py<PyBytes>> {
    let bytes = PyBytes::new_with(py, values.len() * 8, |buf| {
        for (word, v) in buf.chunks_exact_mut(8).zip(values) {
            word.copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    })?;
    Ok(bytes.unbind())
}

/// The traces of `Unwinder.unwind_many`, in the order of its stacks. Trace
/// `i`'s pcs are `pcs[offsets[i]:offsets[i + 1]]`; `batch[i]` makes a
/// `Trace` (with its frames) on demand.
#[pyclass(module = "stackwalk._core", name = "TraceBatch", frozen, sequence)]
pub struct PyTraceBatch {
    arch: Arch,
    frames: Vec<Frame>,
    /// len + 1 frame indexes: trace i is frames[bounds[i]..bounds[i + 1]].
    bounds: Vec<u64>,
    ends: Vec<(End, Option<Arc<Module>>)>,
    pcs: Py<PyBytes>,
    offsets: Py<PyBytes>,
}

#[pymethods]
impl PyTraceBatch {
    fn __len__(&self) -> usize {
        self.ends.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<PyTrace> {
        let len = self.ends.len() as isize;
        let i = if index < 0 { index + len } else { index };
        if !(0..len).contains(&i) {
            return Err(PyIndexError::new_err(format!("trace {index} of a batch of {len}")));
        }
        let i = i as usize;
        let (start, end) = (self.bounds[i] as usize, self.bounds[i + 1] as usize);
        let (walk_end, module) = &self.ends[i];
        Ok(PyTrace::new(self.frames[start..end].to_vec(), *walk_end, self.arch, module.clone()))
    }

    /// Every trace's pcs, one after another: a memoryview of uint64.
    #[getter]
    fn pcs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PyMemoryView::from(self.pcs.bind(py).as_any())?.call_method1("cast", ("Q",))
    }

    /// len + 1 indexes into `pcs`: trace i's are pcs[offsets[i]:offsets[i + 1]].
    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PyMemoryView::from(self.offsets.bind(py).as_any())?.call_method1("cast", ("Q",))
    }

    /// Why each walk stopped (the values of `Trace.end`).
    #[getter]
    fn ends(&self) -> Vec<&'static str> {
        self.ends.iter().map(|(e, _)| e.reason.as_str()).collect()
    }

    fn __repr__(&self) -> String {
        format!("<TraceBatch {} traces, {} frames>", self.ends.len(), self.frames.len())
    }
}
