//! A trace, and its frames, as Python sees them: `Unwinder.unwind`'s result.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString};

use super::errors::StackwalkError;
use crate::arch::registers::Registers;
use crate::arch::Arch;
use crate::unwind::cfi::Module;
use crate::unwind::{self, Frame as RsFrame};

/// One frame of a trace.
#[pyclass(module = "stackwalk._core", name = "Frame", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyFrame(pub(super) RsFrame);

#[pymethods]
impl PyFrame {
    /// Frame 0: the instruction pointer; later frames: the return address.
    #[getter]
    fn pc(&self) -> u64 {
        self.0.pc
    }

    #[getter]
    fn sp(&self) -> u64 {
        self.0.sp
    }

    /// The canonical frame address, or None where it could not be computed.
    #[getter]
    fn cfa(&self) -> Option<u64> {
        self.0.cfa
    }

    /// How the frame was found, best first: "context" (given registers),
    /// "cfi", "prologue" (32-bit ARM: the function's prologue read),
    /// "frame_pointer", "cfi_scan" (CFI from a scanned frame), "scan".
    #[getter]
    fn trust(&self) -> &'static str {
        self.0.trust.as_str()
    }

    /// The pc is where the thread was stopped (frame 0, or interrupted by a
    /// signal), not a return address.
    #[getter]
    fn interrupted(&self) -> bool {
        self.0.interrupted
    }

    /// The frame is a signal trampoline (its CIE has the `S` augmentation),
    /// or Go's `runtime.sigpanic`, which a faulting goroutine is made to call.
    #[getter]
    fn signal_frame(&self) -> bool {
        self.0.signal_frame
    }

    /// The address to look up the frame's function and line at: the pc where
    /// it was not reached by a call, else pc − 1 (inside the call).
    #[getter]
    fn lookup_pc(&self) -> u64 {
        self.0.lookup_pc()
    }

    fn __repr__(&self) -> String {
        let f = &self.0;
        let cfa = f.cfa.map_or("None".to_owned(), |c| format!("{c:#x}"));
        format!("Frame(pc={:#x}, sp={:#x}, cfa={cfa}, trust={:?})", f.pc, f.sp, f.trust.as_str())
    }
}

/// The result of one unwind: the frames, and why the walk stopped.
#[pyclass(module = "stackwalk._core", name = "Trace", frozen)]
pub struct PyTrace {
    pub(super) frames: Vec<RsFrame>,
    pub(super) end: unwind::End,
    pub(super) arch: Arch,
    /// The module the end refers to, for the message (made on demand).
    pub(super) end_module: Option<Arc<Module>>,
    /// Each frame's registers, where the walk kept them (`registers=True`).
    pub(super) registers: Option<Vec<Registers>>,
}

thread_local! {
    /// The frame vectors of traces let go of on this thread, for the next
    /// `unwind` calls (an allocation and a free less each).
    static FREED: std::cell::RefCell<Vec<Vec<RsFrame>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}
/// The most vectors kept, and the largest (in frames).
const FREED_VECTORS: usize = 16;
const FREED_FRAMES: usize = 4096;

impl Drop for PyTrace {
    fn drop(&mut self) {
        let mut frames = std::mem::take(&mut self.frames);
        if frames.capacity() == 0 || frames.capacity() > FREED_FRAMES {
            return;
        }
        frames.clear();
        let _ = FREED.try_with(|freed| {
            if let Ok(mut freed) = freed.try_borrow_mut() {
                if freed.len() < FREED_VECTORS {
                    freed.push(frames);
                }
            }
        });
    }
}

/// An empty frame vector for a walk, of `capacity` frames at least: one a
/// trace let go of, or a new one.
pub(super) fn frame_vector(capacity: usize) -> Vec<RsFrame> {
    let reused = FREED.try_with(|f| f.try_borrow_mut().ok()?.pop()).ok().flatten();
    let mut frames = reused.unwrap_or_default();
    frames.reserve(capacity);
    frames
}

impl PyTrace {
    pub(super) fn new(
        frames: Vec<RsFrame>,
        end: unwind::End,
        arch: Arch,
        end_module: Option<Arc<Module>>,
    ) -> Self {
        PyTrace { frames, end, arch, end_module, registers: None }
    }

    /// Frame `index`'s registers as `registers` gives them (name, value), in
    /// the architecture's column order with the pc's last; None where the
    /// walk kept none.
    pub(super) fn register_values(&self, index: usize) -> Option<Vec<(&'static str, u64)>> {
        let (file, frame) = (self.registers.as_ref()?.get(index)?, self.frames.get(index)?);
        let mut out: Vec<(&'static str, u64)> = (0..crate::arch::NUM_REGS as u16)
            .filter_map(|col| Some((self.arch.register_name(col)?, file.get(col)?)))
            .collect();
        let pc = self.arch.pc_name();
        match out.iter_mut().find(|(name, _)| *name == pc) {
            Some(slot) => slot.1 = frame.pc,
            None => out.push((pc, frame.pc)),
        }
        Some(out)
    }
}

#[pymethods]
impl PyTrace {
    #[getter]
    fn frames(&self) -> Vec<PyFrame> {
        self.frames.iter().copied().map(PyFrame).collect()
    }

    /// The frames' pcs (faster than going through `frames`).
    #[getter]
    fn pcs(&self) -> Vec<u64> {
        self.frames.iter().map(|f| f.pc).collect()
    }

    /// The frames' stack pointers.
    #[getter]
    fn sps(&self) -> Vec<u64> {
        self.frames.iter().map(|f| f.sp).collect()
    }

    /// Why the walk stopped: end_of_stack, pc_zero, cfa_not_increasing,
    /// memory, no_module, no_unwind_info, missing_register, bad_cfi,
    /// frame_limit, fp_invalid, bad_return_address, scan_failed,
    /// other_thread_stack.
    #[getter]
    fn end(&self) -> &'static str {
        self.end.reason.as_str()
    }

    /// A one-line account of where and why the walk stopped.
    #[getter]
    fn end_detail(&self) -> String {
        self.end.describe(self.arch, self.end_module.as_ref().map(|m| m.name.as_str()))
    }

    /// True when the walk reached the outermost frame.
    #[getter]
    fn complete(&self) -> bool {
        self.end.reason.is_clean()
    }

    /// The registers of frame `index` as the walk recovered them (register
    /// name -> value), where `unwind` was asked for them (`registers=True`):
    /// what a debugger shows in that frame. Frame 0's are those given; a
    /// caller's, its pc and sp and the callee-saved registers CFI restored
    /// or left as they were (every register, past a signal frame); past the
    /// first frame a fallback strategy found, only pc, sp and the frame
    /// pointer a frame record held.
    fn registers<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyDict>> {
        let Some(files) = &self.registers else {
            return Err(StackwalkError::new_err(
                "this trace has no registers: unwind it with registers=True",
            ));
        };
        let (Some(file), Some(frame)) = (files.get(index), self.frames.get(index)) else {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "frame {index} of a trace of {} frames",
                self.frames.len()
            )));
        };
        let (columns, pc) = register_names(py, self.arch);
        let out = PyDict::new(py);
        for (col, name) in columns {
            if let Some(value) = file.get(*col) {
                out.set_item(name.bind(py), value)?;
            }
        }
        out.set_item(pc.bind(py), frame.pc)?;
        Ok(out)
    }

    fn __len__(&self) -> usize {
        self.frames.len()
    }

    fn __repr__(&self) -> String {
        format!("<Trace {} frames, end={:?}>", self.frames.len(), self.end.reason.as_str())
    }
}

/// An architecture's register names, interned once: each named DWARF column's
/// (in column order), and the pc's (x86's is also a column, the last).
type RegisterNames = (Vec<(u16, Py<PyString>)>, Py<PyString>);

fn register_names(py: Python<'_>, arch: Arch) -> &RegisterNames {
    static NAMES: [PyOnceLock<RegisterNames>; 4] =
        [PyOnceLock::new(), PyOnceLock::new(), PyOnceLock::new(), PyOnceLock::new()];
    let at = match arch {
        Arch::X86_64 => 0,
        Arch::Aarch64 => 1,
        Arch::I386 => 2,
        Arch::Arm => 3,
    };
    NAMES[at].get_or_init(py, || {
        let columns = (0..crate::arch::NUM_REGS as u16)
            .filter_map(|col| Some((col, PyString::intern(py, arch.register_name(col)?).unbind())))
            .collect();
        (columns, PyString::intern(py, arch.pc_name()).unbind())
    })
}
