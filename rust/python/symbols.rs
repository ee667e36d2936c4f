//! `SymbolTable` and `demangle`: `crate::symbolize::symbols`.

use std::path::PathBuf;

use pyo3::prelude::*;

use super::elf_bytes;
use super::errors::ElfError;

/// Demangle a C++ or Rust symbol name; other names are returned unchanged.
#[pyfunction]
pub(super) fn demangle(name: &str) -> String {
    crate::symbolize::symbols::demangle(name).into_owned()
}

/// The function symbols of one ELF file (`.symtab`, else `.dynsym`), read
/// once into sorted arrays.
#[pyclass(module = "stackwalk._core", name = "SymbolTable", frozen)]
pub struct PySymbolTable {
    inner: crate::symbolize::symbols::SymbolTable,
    /// Where `inner` names nothing, as the symbolizer looks them up.
    plt: crate::symbolize::symbols::PltEntries,
}

#[pymethods]
impl PySymbolTable {
    /// `source` is a path or a bytes-like ELF image. Its PLT entries are
    /// named too (`name@plt`, as objdump names them).
    #[new]
    fn new(source: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (name, data) = elf_bytes(source)?;
        let inner = crate::symbolize::symbols::SymbolTable::from_elf(&data)
            .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        Ok(PySymbolTable { inner, plt: crate::symbolize::symbols::PltEntries::of(&data) })
    }

    /// The symbols of the ELF file at `path`, completed from its separate
    /// debug file (`DEBUG_ROOT/.build-id/xx/yyyy.debug`) when the file itself
    /// has only exported names, as gdb and eu-stack do.
    #[staticmethod]
    #[pyo3(signature = (path, debug_root = PathBuf::from("/usr/lib/debug")))]
    fn for_file(path: &Bound<'_, PyAny>, debug_root: PathBuf) -> PyResult<Self> {
        let (name, data) = elf_bytes(path)?;
        let inner = crate::symbolize::symbols::SymbolTable::for_file(&data, &debug_root)
            .map_err(|e| ElfError::new_err(format!("{name}: {e}")))?;
        Ok(PySymbolTable { inner, plt: crate::symbolize::symbols::PltEntries::of(&data) })
    }

    /// (demangled name, offset) of the function holding ELF address
    /// `address`, or None: a distant symbol is never borrowed.
    fn lookup(&self, address: u64) -> Option<(String, u64)> {
        let found = self.inner.lookup(address).or_else(|| {
            let (name, start) = self.plt.lookup(address)?;
            Some((name, address - start))
        });
        found.map(|(name, off)| (crate::symbolize::symbols::demangle(name).into_owned(), off))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// True when the names come from `.symtab` (every function), False for
    /// `.dynsym` (exported functions only).
    #[getter]
    fn full(&self) -> bool {
        self.inner.full
    }
}
