//! `Registers`: a thread's registers held in Rust, in the unwinder's own
//! form, reusable from call to call: what `Unwinder.unwind` and
//! `unwind_many` take instead of a dict, with no name looked up per call.

use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping};

use super::errors::ArchError;
use crate::arch::registers::Registers;
use crate::arch::{Arch, NUM_REGS};

/// A thread's registers for one architecture: set by name, or all at once
/// from a sequence or buffer of values in [`PyRegisters::names`]' order.
#[pyclass(module = "stackwalk._core", name = "Registers")]
pub struct PyRegisters {
    pub(super) arch: Arch,
    pub(super) pc: Option<u64>,
    /// Shared with the stacks of a batch that were given this object (no
    /// copy per stack; a change after is made on a copy of its own).
    pub(super) regs: Arc<Registers>,
}

/// The architecture named `arch`, as `Unwinder` takes it.
fn parse_arch(arch: &str) -> PyResult<Arch> {
    arch.parse().map_err(|e: crate::arch::UnknownArch| ArchError::new_err(e.to_string()))
}

/// The registers of `arch` in the order `load` takes them: the DWARF
/// columns the unwinder tracks, then the program counter where it has none.
fn order(arch: Arch) -> Vec<&'static str> {
    let mut names: Vec<_> = (0..NUM_REGS as u16).map_while(|col| arch.register_name(col)).collect();
    if !names.contains(&arch.pc_name()) {
        names.push(arch.pc_name());
    }
    names
}

impl PyRegisters {
    fn set(&mut self, name: &str, value: u64) -> PyResult<()> {
        match self.arch.register_by_name(name) {
            Some(Some(col)) => Arc::make_mut(&mut self.regs).set(col, value),
            Some(None) => self.pc = Some(value),
            None => {
                return Err(PyKeyError::new_err(format!(
                    "{name:?}: no {} register of that name",
                    self.arch
                )))
            }
        }
        Ok(())
    }

    /// Set every register from `values`, in [`order`].
    fn load_values(&mut self, values: &[u64]) -> PyResult<()> {
        let names = order(self.arch);
        if values.len() != names.len() {
            return Err(PyValueError::new_err(format!(
                "{} values for the {} registers of {} ({})",
                values.len(),
                names.len(),
                self.arch,
                names.join(", ")
            )));
        }
        let mask = self.arch.address_mask();
        for (name, &value) in names.iter().zip(values) {
            // i386's 32-bit registers: a wider value is not one of them.
            if value & !mask != 0 {
                return Err(PyValueError::new_err(format!(
                    "{name} = {value:#x}: wider than a {} register",
                    self.arch
                )));
            }
            self.set(name, value)?;
        }
        Ok(())
    }
}

#[pymethods]
impl PyRegisters {
    /// `values`: a mapping of register names to values (as `Unwinder.unwind`
    /// takes one), or every register's value in `Registers.names(arch)`'s
    /// order (a sequence of ints, or a buffer of uint64 such as an
    /// `array("Q")` or a numpy array); None: no register set yet.
    #[new]
    #[pyo3(signature = (arch = "x86_64", values = None))]
    fn new(arch: &str, values: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let regs = Arc::new(Registers::new());
        let mut out = PyRegisters { arch: parse_arch(arch)?, pc: None, regs };
        match values {
            Some(v) if v.cast::<PyMapping>().is_ok() => out.update(v)?,
            Some(v) => out.load(v)?,
            None => {}
        }
        Ok(out)
    }

    /// The order `load` takes the registers of `arch` in (DWARF's).
    #[staticmethod]
    #[pyo3(signature = (arch = "x86_64"))]
    fn names(arch: &str) -> PyResult<Vec<&'static str>> {
        Ok(order(parse_arch(arch)?))
    }

    #[getter]
    fn arch(&self) -> &'static str {
        self.arch.name()
    }

    /// Set every register: `values` in `names(arch)`'s order, a buffer of
    /// uint64 (read in place) or a sequence of ints.
    fn load(&mut self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(buf) = PyBuffer::<u64>::get(values) {
            if let Some(cells) = buf.as_slice(values.py()) {
                let words: Vec<u64> = cells.iter().map(|c| c.get()).collect();
                return self.load_values(&words);
            }
        }
        // Not extracted whole: a sequence may claim any length (2**62), which
        // a Vec's capacity would be made of. One word more than the registers
        // is enough to say it is too long.
        let want = order(self.arch).len();
        let mut words = Vec::with_capacity(want + 1);
        for value in values.try_iter()? {
            words.push(value?.extract::<u64>()?);
            if words.len() > want {
                return Err(PyValueError::new_err(format!(
                    "more than {want} values for the {want} registers of {} ({})",
                    self.arch,
                    order(self.arch).join(", ")
                )));
            }
        }
        self.load_values(&words)
    }

    /// Set the registers a mapping names (names this architecture does not
    /// know, such as flags, are left out, as `Unwinder.unwind` leaves them).
    fn update(&mut self, mapping: &Bound<'_, PyAny>) -> PyResult<()> {
        let (pc, regs) = super::unwinder::registers_by_name(self.arch, mapping)?;
        let own = Arc::make_mut(&mut self.regs);
        for (col, value) in regs.iter() {
            own.set(col, value);
        }
        if pc.is_some() {
            self.pc = pc;
        }
        Ok(())
    }

    fn __setitem__(&mut self, name: &str, value: u64) -> PyResult<()> {
        self.set(name, value)
    }

    fn __getitem__(&self, name: &str) -> PyResult<u64> {
        let value = match self.arch.register_by_name(name) {
            Some(Some(col)) => self.regs.get(col),
            Some(None) => self.pc,
            None => None,
        };
        value.ok_or_else(|| PyKeyError::new_err(name.to_owned()))
    }

    /// The registers set, by name (in `names(arch)`'s order).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for name in order(self.arch) {
            if let Ok(value) = self.__getitem__(name) {
                out.set_item(name, value)?;
            }
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        let set: Vec<String> = order(self.arch)
            .into_iter()
            .filter_map(|n| self.__getitem__(n).ok().map(|v| format!("{n}={v:#x}")))
            .collect();
        format!("Registers({:?}, {})", self.arch.name(), set.join(", "))
    }
}
