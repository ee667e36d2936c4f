//! `Unwinder.unwind_many`: many stacks unwound in one call, without the GIL
//! and over every CPU, into a `TraceBatch` that keeps the frames in flat
//! arrays (no Python object per frame unless one is asked for).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyMemoryView};

use super::errors::guard;
use super::unwinder::{extract_buffers_into, mapped_memory, shared_registers, HeldBytes, PyTrace};
use crate::arch::registers::Registers;
use crate::arch::Arch;
use crate::source::memory::{Regions, SegmentMemory};
use crate::unwind::modules::ModuleSet;
use crate::unwind::{End, Frame, Unwinder};

/// What a thread found walking a chunk.
struct ChunkWalks {
    /// The chunk's frames, one walk's after another.
    frames: Vec<Frame>,
    /// Each stack's frames and how its walk ended.
    walks: Vec<(usize, End)>,
}

/// Stacks a thread walks at a time: the unit of the pipeline below
/// (a job of the pool costs about a microsecond to hand over).
const CHUNK: usize = 64;

thread_local! {
    /// Each thread's unwinder (the pool's, and a caller's that walks too),
    /// kept from batch to batch so that its rule cache stays warm.
    static WORKER: std::cell::RefCell<Option<Unwinder>> = const { std::cell::RefCell::new(None) };
}

/// One stack to unwind: its registers and the memory that holds it, taken
/// from Python (buffers held, not copied) while the GIL is held.
struct Stack {
    /// Its pc and registers' index in [`Chunk::regs`].
    regs: usize,
    memory: StackMemory,
}

enum StackMemory {
    Mapped(Arc<SegmentMemory>),
    /// Its regions' indexes in [`Chunk::held`].
    Buffers(Range<usize>),
}

/// CHUNK stacks (fewer at the end), with the memory regions of them all in
/// one vector (no allocation per stack).
struct Chunk {
    stacks: Vec<Stack>,
    held: Vec<(u64, HeldBytes)>,
    /// The memory (a list or tuple of regions) of the last stack taken, and
    /// the regions of `held` read from it: the next stack given the same
    /// object shares them (see [`Chunk::take`]). The object is kept, so that
    /// no other can take its address.
    last: Option<(Py<PyAny>, Range<usize>)>,
    /// The stacks' pcs and registers, each once for a run of stacks given
    /// the same `Registers` object (see [`Chunk::take`]): no reference is
    /// counted per stack, on the line the walking threads read the values
    /// from.
    regs: Vec<(u64, Arc<Registers>)>,
    /// The `Registers` object of the last stack taken, kept as `last` is.
    last_regs: Option<Py<PyAny>>,
}

impl Chunk {
    fn new() -> Self {
        Chunk {
            stacks: Vec::with_capacity(CHUNK),
            held: Vec::with_capacity(CHUNK),
            last: None,
            regs: Vec::with_capacity(CHUNK),
            last_regs: None,
        }
    }

    /// Empty, for reuse (with the GIL: its Python objects are let go of).
    fn clear(&mut self) {
        self.stacks.clear();
        self.held.clear();
        self.last = None;
        self.regs.clear();
        self.last_regs = None;
    }

    /// Stack `i` of the batch (`item`, a (regs, memory) pair), checked as
    /// `unwind` checks its arguments; an error names the stack. `reuse`:
    /// see [`Chunk::take`].
    fn extract(
        &mut self,
        arch: Arch,
        i: usize,
        item: &Bound<'_, PyAny>,
        reuse: bool,
    ) -> PyResult<()> {
        let py = item.py();
        let at = |e: PyErr| PyErr::from_type(e.get_type(py), format!("stack {i}: {}", e.value(py)));
        let not_a_pair = || {
            super::errors::StackwalkError::new_err(format!(
                "stack {i} is not a (regs, memory) pair"
            ))
        };
        // A tuple's items borrowed (the usual form: no reference taken and let go
        // of), else any pair.
        match item.cast::<pyo3::types::PyTuple>() {
            Ok(t) if t.len() == 2 => {
                let (regs, memory) = (t.get_borrowed_item(0)?, t.get_borrowed_item(1)?);
                self.take(arch, &regs, &memory, reuse).map_err(at)
            }
            _ => {
                let (regs, memory): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                    item.extract().map_err(|_| not_a_pair())?;
                self.take(arch, &regs, &memory, reuse).map_err(at)
            }
        }
    }

    /// A stack's registers and memory, taken from Python.
    ///
    /// Where `reuse` (the stacks are a list or a tuple: no Python code runs
    /// between two stacks, so a list given again is as it was) and `memory`
    /// is the list or tuple of regions the stack before had (the threads of
    /// one snapshot, say), its regions are those read for that stack, not
    /// read again; so are its registers where it is given the same
    /// `Registers` object as the stack before.
    fn take(
        &mut self,
        arch: Arch,
        regs: &Bound<'_, PyAny>,
        memory: &Bound<'_, PyAny>,
        reuse: bool,
    ) -> PyResult<()> {
        let same_regs = self.last_regs.as_ref().is_some_and(|last| last.is(regs));
        if !same_regs || self.regs.is_empty() {
            self.regs.push(shared_registers(arch, regs)?);
            let object = reuse && regs.is_exact_instance_of::<super::registers::PyRegisters>();
            self.last_regs = object.then(|| regs.clone().unbind());
        }
        let memory = match (&self.last, mapped_memory(memory)) {
            (_, Some(m)) => StackMemory::Mapped(m),
            (Some((last, regions)), None) if last.is(memory) => {
                StackMemory::Buffers(regions.clone())
            }
            (_, None) => {
                let first = self.held.len();
                extract_buffers_into(memory, &mut self.held)?;
                let regions = first..self.held.len();
                let sequence = memory.is_exact_instance_of::<pyo3::types::PyList>()
                    || memory.is_exact_instance_of::<pyo3::types::PyTuple>();
                self.last = (reuse && sequence).then(|| (memory.clone().unbind(), regions.clone()));
                StackMemory::Buffers(regions)
            }
        };
        self.stacks.push(Stack { regs: self.regs.len() - 1, memory });
        Ok(())
    }

    /// `stack`'s memory as `regions` (cleared first: one vector reused from
    /// stack to stack).
    fn regions_of<'a>(&'a self, stack: &'a Stack, regions: &mut Regions<'a>) {
        match &stack.memory {
            StackMemory::Mapped(m) => *regions = m.regions(),
            StackMemory::Buffers(range) => {
                regions.clear();
                for (start, held) in &self.held[range.clone()] {
                    regions.add(*start, held.as_slice());
                }
            }
        }
    }

    /// Every stack of the chunk, on this thread's unwinder.
    fn walk(&self, base: &Unwinder, max_frames: Option<usize>) -> ChunkWalks {
        WORKER.with(|cell| {
            let mut worker = cell.borrow_mut();
            let unwinder = match &mut *worker {
                Some(u) if u.arch() == base.arch() => {
                    u.follow(base);
                    u
                }
                other => other.insert(base.worker()),
            };
            let (mut all, mut walks) = (spare_frames(), Vec::with_capacity(self.stacks.len()));
            let mut frames = Vec::with_capacity(64);
            let mut regions = Regions::new();
            // The regions in `regions`: a stack sharing the one before's keeps them.
            let mut current = None;
            for stack in &self.stacks {
                match &stack.memory {
                    StackMemory::Buffers(range) if current.as_ref() == Some(range) => {}
                    StackMemory::Buffers(range) => {
                        current = Some(range.clone());
                        self.regions_of(stack, &mut regions);
                    }
                    StackMemory::Mapped(_) => {
                        current = None;
                        self.regions_of(stack, &mut regions);
                    }
                }
                let (pc, regs) = &self.regs[stack.regs];
                let end = unwinder.unwind(*pc, regs, &mut regions, max_frames, &mut frames);
                if all.is_empty() {
                    // Room for the chunk's walks if they are as long as its first: a
                    // chunk of deep stacks holds megabytes, which growing by doubling
                    // would copy again and again.
                    all.reserve(frames.len() * self.stacks.len());
                }
                all.extend_from_slice(&frames);
                walks.push((frames.len(), end));
            }
            ChunkWalks { frames: all, walks }
        })
    }
}

/// The frame vectors of batches let go of, kept for the next batches, up to
/// [`SPARE_BYTES`] of them: a batch of deep stacks holds megabytes of
/// frames, which, fresh from the kernel, cost a page fault for every 4 KiB
/// (a quarter of the time of a batch of 1,000 python3 stacks of 307 frames).
static SPARE: Mutex<(Vec<Vec<Frame>>, usize)> = Mutex::new((Vec::new(), 0));
const SPARE_BYTES: usize = 16 << 20;

fn spare_frames() -> Vec<Frame> {
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
    match spare.0.pop() {
        Some(frames) => {
            spare.1 -= frames.capacity() * std::mem::size_of::<Frame>();
            frames
        }
        None => Vec::new(),
    }
}

impl Drop for PyTraceBatch {
    fn drop(&mut self) {
        let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
        for mut frames in self.chunks.drain(..) {
            let bytes = frames.capacity() * std::mem::size_of::<Frame>();
            if spare.1 + bytes > SPARE_BYTES {
                break;
            }
            frames.clear();
            spare.1 += bytes;
            spare.0.push(frames);
        }
    }
}

/// Unwind every (regs, memory) pair of `stacks` on the rayon pool (one
/// unwinder with its own caches per thread), as a pipeline: this thread
/// takes the stacks from Python (which needs the GIL) a chunk at a time and
/// queues each; jobs on the pool (one fewer than its threads, this thread
/// being busy too) walk the queued chunks without the GIL; once every stack
/// is taken, this thread walks what is still queued, beside them.
pub(super) fn unwind_many(
    py: Python<'_>,
    base: &Unwinder,
    stacks: &Bound<'_, PyAny>,
    max_frames: Option<usize>,
) -> PyResult<PyTraceBatch> {
    // Held back (a forked worker, whose parent's pool has no threads here):
    // no job is spawned, and this thread walks every chunk.
    let held = crate::threads::held();
    if !held {
        crate::threads::start();
    }
    let arch = base.arch();
    let given = stacks.clone().unbind();
    let (to_batch, walked) = std::sync::mpsc::channel::<(usize, Chunk, ChunkWalks)>();
    let queue: Mutex<VecDeque<(usize, Chunk)>> = Mutex::new(VecDeque::new());
    // Jobs at work (only this thread adds to them), and how many there may be.
    let most_jobs = if held { 0 } else { rayon::current_num_threads().max(2) - 1 };
    let jobs = AtomicUsize::new(0);
    // The next queued chunk (the lock let go of before it is walked).
    let take = || queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
    // Walk queued chunks until none is left (this thread's or a job's).
    let walk_queued = |to_batch: &Sender<(usize, Chunk, ChunkWalks)>| {
        while let Some((index, chunk)) = take() {
            let walks = chunk.walk(base, max_frames);
            // The chunk goes back too: its Python objects are let go of with the
            // GIL, and its vectors reused.
            let _ = to_batch.send((index, chunk, walks));
        }
    };
    let (taken, left) = py.detach(|| {
        // The walks of the chunks taken back for reuse while the rest were read.
        let mut done: Vec<(usize, ChunkWalks)> = Vec::new();
        let taken = guard("unwinding a batch", || {
            rayon::in_place_scope(|scope| {
                let taken = Python::attach(|py| -> PyResult<usize> {
                    let mut chunks = 0;
                    let send = |chunk: Chunk, index: usize| {
                        queue.lock().unwrap_or_else(|e| e.into_inner()).push_back((index, chunk));
                        // A job that found the queue empty as this chunk came may have
                        // gone without it: the chunk is then walked below.
                        if jobs.load(Relaxed) < most_jobs {
                            jobs.fetch_add(1, Relaxed);
                            let to_batch = to_batch.clone();
                            let (jobs, walk_queued) = (&jobs, &walk_queued);
                            scope.spawn(move |_| {
                                walk_queued(&to_batch);
                                jobs.fetch_sub(1, Relaxed);
                            });
                        }
                    };
                    // A chunk already walked, emptied (with the GIL), or a new one.
                    let mut next = || match walked.try_recv() {
                        Ok((index, mut chunk, walks)) => {
                            chunk.clear();
                            done.push((index, walks));
                            chunk
                        }
                        Err(_) => Chunk::new(),
                    };
                    let mut chunk = next();
                    let given = given.bind(py);
                    let reuse = given.is_exact_instance_of::<pyo3::types::PyList>()
                        || given.is_exact_instance_of::<pyo3::types::PyTuple>();
                    for (i, item) in given.try_iter()?.enumerate() {
                        chunk.extract(arch, i, &item?, reuse)?;
                        if chunk.stacks.len() == CHUNK {
                            send(std::mem::replace(&mut chunk, next()), chunks);
                            chunks += 1;
                        }
                    }
                    if !chunk.stacks.is_empty() {
                        send(chunk, chunks);
                        chunks += 1;
                    }
                    Ok(chunks)
                });
                // Every stack taken (or an error): what is queued still is walked here too.
                walk_queued(&to_batch);
                taken
            })
        });
        drop(to_batch);
        // The chunks walked since, handed back to be let go of with the GIL.
        let left: Vec<(usize, Chunk, ChunkWalks)> = walked.into_iter().collect();
        (taken, (left, done))
    });
    let (left, mut done) = left;
    taken??;
    for (index, chunk, walks) in left {
        drop(chunk);
        done.push((index, walks));
    }
    done.sort_unstable_by_key(|(index, _)| *index);
    let stacks: usize = done.iter().map(|(_, chunk)| chunk.walks.len()).sum();
    let mut offsets = Vec::with_capacity(stacks + 1);
    offsets.push(0u64);
    let mut ends = Vec::with_capacity(stacks);
    let mut chunks = Vec::with_capacity(done.len());
    for (_, chunk) in done {
        for (len, end) in chunk.walks {
            offsets.push(offsets[offsets.len() - 1] + len as u64);
            ends.push(end);
        }
        chunks.push(chunk.frames);
    }
    Ok(PyTraceBatch {
        arch,
        pcs: PyOnceLock::new(),
        offsets: PyOnceLock::new(),
        chunks,
        bounds: offsets,
        ends,
        modules: base.module_set().clone(),
    })
}

/// The `len` values of `parts`, one part after another, as the bytes of
/// native-endian uint64s (a memoryview casts them).
fn u64_bytes(
    py: Python<'_>,
    len: usize,
    parts: impl IntoIterator<Item = impl IntoIterator<Item = u64>>,
) -> PyResult<Py<PyBytes>> {
    let bytes = PyBytes::new_with(py, len * 8, |buf| {
        let mut words = buf.chunks_exact_mut(8);
        for part in parts {
            // The part first: where it ends, no word is taken for nothing.
            for (v, word) in part.into_iter().zip(words.by_ref()) {
                word.copy_from_slice(&v.to_ne_bytes());
            }
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
    /// The frames of each CHUNK stacks in turn, as the workers gave them
    /// (not copied into one vector).
    chunks: Vec<Vec<Frame>>,
    /// len + 1 frame indexes: trace i is frames bounds[i]..bounds[i + 1] of
    /// all the chunks' one after another.
    bounds: Vec<u64>,
    ends: Vec<End>,
    /// The modules the walks' ends name by index: each trace's end module
    /// is found when the trace is made, so that no walk counts a reference
    /// to a module shared by every thread.
    modules: Arc<ModuleSet>,
    /// The flat buffers, made from `chunks` and `bounds` at their first
    /// use: a caller that takes traces by index, or only the ends, pays no
    /// copy of every pc.
    pcs: PyOnceLock<Py<PyBytes>>,
    offsets: PyOnceLock<Py<PyBytes>>,
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
        let chunk = i / CHUNK;
        let first = self.bounds[chunk * CHUNK];
        let (start, end) =
            ((self.bounds[i] - first) as usize, (self.bounds[i + 1] - first) as usize);
        let frames = self.chunks[chunk][start..end].to_vec();
        let walk_end = self.ends[i];
        let module = walk_end.module.and_then(|m| self.modules.modules().get(m)).cloned();
        Ok(PyTrace::new(frames, walk_end, self.arch, module))
    }

    /// Every trace's pcs, one after another: a memoryview of uint64.
    #[getter]
    fn pcs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pcs = self.pcs.get_or_try_init(py, || {
            let total = self.chunks.iter().map(Vec::len).sum();
            u64_bytes(py, total, self.chunks.iter().map(|frames| frames.iter().map(|f| f.pc)))
        })?;
        PyMemoryView::from(pcs.bind(py).as_any())?.call_method1("cast", ("Q",))
    }

    /// len + 1 indexes into `pcs`: trace i's are pcs[offsets[i]:offsets[i + 1]].
    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let offsets = self.offsets.get_or_try_init(py, || {
            u64_bytes(py, self.bounds.len(), [self.bounds.iter().copied()])
        })?;
        PyMemoryView::from(offsets.bind(py).as_any())?.call_method1("cast", ("Q",))
    }

    /// Why each walk stopped (the values of `Trace.end`).
    #[getter]
    fn ends(&self) -> Vec<&'static str> {
        self.ends.iter().map(|e| e.reason.as_str()).collect()
    }

    fn __repr__(&self) -> String {
        let frames = self.bounds.last().copied().unwrap_or(0);
        format!("<TraceBatch {} traces, {frames} frames>", self.ends.len())
    }
}
