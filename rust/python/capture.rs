//! `CaptureFile`: a capture (`crate::source::capture`) with the interface of
//! `CoreFile` (`stackwalk.core` takes either as its source): one thread and
//! its registers, the memory captured as a `MappedMemory`, the modules'
//! file mappings, and the address space built by the rule of a core's.

use std::ffi::OsString;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::corefile::SignalTuple;
use super::errors::ArchError;
use super::memory::PyMappedMemory;
use super::snapshot::{address_space, SpaceOptions, SpaceTuple};
use super::unwinder::PyUnwinder;
use crate::arch::Arch;
use crate::source::capture::{Capture, Mapping};
use crate::space::snapshot::{Facts, FileMapping};

/// A mapping as Python gives it: (start, end, file offset, path, executable).
type MappingTuple = (u64, u64, u64, PathBuf, bool);

/// A thread stopped at a breakpoint, as `stackwalk.capture` recorded it.
#[pyclass(module = "stackwalk._core", name = "CaptureFile", frozen)]
pub struct PyCaptureFile {
    inner: Capture,
}

#[pymethods]
impl PyCaptureFile {
    /// The capture of `arch`'s thread `tid`: its `registers` by name, the
    /// memory `regions` captured ((address, bytes): its stack), the
    /// `mappings` of its modules' files, the modules known `at_bias` alone
    /// ((path, load bias); a bias below zero, a file loaded below its link
    /// address, taken as the address it wraps to, as `Unwinder.add_module`
    /// takes it), and the vdso's (address, image).
    #[new]
    #[pyo3(signature = (arch, tid, registers, regions, mappings, at_bias, vdso))]
    fn new(
        arch: &str,
        tid: u32,
        registers: Vec<(String, u64)>,
        regions: Vec<(u64, Vec<u8>)>,
        mappings: Vec<MappingTuple>,
        at_bias: Vec<(PathBuf, i128)>,
        vdso: Option<(u64, Vec<u8>)>,
    ) -> PyResult<Self> {
        let arch: Arch = arch
            .parse()
            .map_err(|e: crate::arch::UnknownArch| ArchError::new_err(e.to_string()))?;
        let mappings = mappings
            .into_iter()
            .map(|(start, end, offset, path, executable)| Mapping {
                start,
                end,
                offset,
                path,
                executable,
            })
            .collect();
        let at_bias = at_bias.into_iter().map(|(path, bias)| (path, bias as u64)).collect();
        let inner = Capture::new(arch, tid, registers, regions, mappings, at_bias, vdso);
        Ok(PyCaptureFile { inner })
    }

    #[getter]
    fn arch(&self) -> &'static str {
        self.inner.arch.name()
    }

    /// The memory captured: the stack and the vdso's image.
    #[getter]
    fn memory(&self) -> PyMappedMemory {
        PyMappedMemory { inner: self.inner.memory.clone(), path: "the capture".into() }
    }

    /// Its one thread, as `CoreFile.threads`: (tid, 0, 0).
    #[getter]
    fn threads(&self) -> Vec<(u32, i32, usize)> {
        vec![(self.inner.tid, 0, 0)]
    }

    /// A thread stopped at a breakpoint: none crashed.
    #[getter]
    fn crashing_tid(&self) -> Option<u32> {
        None
    }

    /// No signal stopped it (a breakpoint did).
    #[getter]
    fn signal(&self) -> Option<SignalTuple> {
        None
    }

    /// Its thread's stack: [(tid, start, end, sp)], the region captured
    /// holding its sp.
    #[getter]
    fn thread_stacks(&self) -> Vec<(u32, u64, u64, u64)> {
        let arch = self.inner.arch;
        let sp = arch.register_name(arch.sp()).and_then(|name| self.inner.register(name));
        let stacks = self.inner.memory.thread_stacks(sp.map(|sp| (self.inner.tid, sp)).into_iter());
        stacks.into_iter().map(|t| (t.tid, t.start, t.end, t.sp)).collect()
    }

    /// The registers by name of its thread (`index` 0).
    fn registers<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyDict>> {
        if index != 0 {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "no thread at index {index}"
            )));
        }
        let regs = PyDict::new(py);
        for (name, value) in &self.inner.registers {
            regs.set_item(name, value)?;
        }
        Ok(regs)
    }

    /// A capture records no process id.
    #[getter]
    fn pid(&self) -> Option<u32> {
        None
    }

    /// Nor command line.
    #[getter]
    fn psargs(&self) -> Option<&str> {
        None
    }

    /// The auxiliary vector a core would hold: the vdso's address alone.
    #[getter]
    fn auxv(&self) -> std::collections::BTreeMap<u64, u64> {
        self.inner.auxv()
    }

    /// Where the main thread's stack began: not recorded.
    #[getter]
    fn initial_stack(&self) -> Option<u64> {
        None
    }

    /// The mappings of its modules' files: (start, end, file offset, path).
    #[getter]
    fn files(&self) -> Vec<(u64, u64, u64, OsString)> {
        let mappings = self.inner.mappings.iter();
        mappings.map(|m| (m.start, m.end, m.offset, m.path.clone().into_os_string())).collect()
    }

    /// Nothing read is damaged: a capture was checked when it was read.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Its modules found and placed by the rule that places a core's
    /// (`crate::space::snapshot`), into `unwinder` (None: only decided, for
    /// a Python unwinder to take); as `CoreFile.address_space` answers. Its
    /// files are this machine's, read by gdb at the stop: used as they are,
    /// not doubtful.
    fn address_space<'py>(
        &self,
        py: Python<'py>,
        unwinder: Option<&Bound<'py, PyUnwinder>>,
        options: SpaceOptions,
    ) -> PyResult<SpaceTuple<'py>> {
        let capture = &self.inner;
        let segments = capture.segments();
        let auxv = capture.auxv();
        let files: Vec<FileMapping> = capture
            .mappings
            .iter()
            .map(|m| FileMapping {
                start: m.start,
                end: m.end,
                offset: m.offset,
                path: m.path.clone(),
            })
            .collect();
        let facts = Facts {
            files: Some(&files),
            at_bias: &capture.at_bias,
            files_here: true,
            ..Facts::of(capture.arch, 4096, &segments, &auxv, &capture.memory)
        };
        address_space(py, &facts, unwinder, options)
    }

    fn __repr__(&self) -> String {
        format!(
            "CaptureFile(arch={:?}, tid={}, modules={})",
            self.inner.arch.name(),
            self.inner.tid,
            self.inner.mappings.len() + self.inner.at_bias.len()
        )
    }
}
