//! A snapshot's address space (`crate::space::snapshot`) for the Python
//! layer: `CoreFile.address_space` and `MinidumpFile.address_space` build it
//! into an `Unwinder`, and give the modules as plain values.

use std::collections::HashMap;
use std::ffi::OsString;
use std::ops::Range;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::errors::CoreError;
use super::unwinder::PyUnwinder;
use crate::space::debuginfod::{Config, Kind};
use crate::space::finder::{hex, FileFinder};
use crate::space::snapshot::{build, Facts, Host, ImageKind, Options, Rules};
use crate::space::symserver::Stores;

/// How the files are found, from `stackwalk.core`: the keys of this dict.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(super) struct SpaceOptions {
    executable: Option<PathBuf>,
    sysroot: Option<PathBuf>,
    search: Vec<PathBuf>,
    stand_ins: HashMap<PathBuf, PathBuf>,
    debug_root: Option<PathBuf>,
    allow_mismatch: bool,
    /// Missing files fetched from debuginfod (where `DEBUGINFOD_URLS` names
    /// servers: else none are).
    fetch: bool,
    /// Seconds after which a bar of the downloads is drawn (None: never).
    progress: Option<f64>,
    code_mappings_known: bool,
    /// What messages call the file: "core", "minidump", "process".
    kind: String,
    /// Breakpad symbol stores (directories), then symbol servers (URLs).
    #[pyo3(default)]
    symbols_path: Vec<PathBuf>,
    #[pyo3(default)]
    symbols_url: Vec<String>,
}

/// A module as `stackwalk.core` takes it: (path, file, start, end, bias,
/// build id, the file's build id, found, ranges, doubtful, stand-in,
/// Breakpad symbol file).
type ModuleTuple = (
    OsString,
    Option<OsString>,
    u64,
    u64,
    u64,
    Option<String>,
    Option<String>,
    bool,
    Vec<(u64, u64)>,
    bool,
    bool,
    Option<OsString>,
);

/// The address space as `address_space` gives it: the modules sorted by
/// address, the executable's index, the vdso image, the warnings.
pub(super) type SpaceTuple<'py> =
    (Vec<ModuleTuple>, Option<usize>, Option<Bound<'py, PyBytes>>, Vec<String>);

/// The unwinder the modules go into, the symbolizer's check of Breakpad
/// symbol files, the downloads.
struct UnwinderHost<'a, 'py> {
    py: Python<'py>,
    /// None: the modules are only decided (a Python unwinder takes them).
    unwinder: Option<&'a mut PyUnwinder>,
    debug_root: Option<PathBuf>,
    progress: Option<std::time::Duration>,
}

impl UnwinderHost<'_, '_> {
    fn refused(&self, e: PyErr) -> String {
        e.value(self.py).to_string()
    }
}

fn pairs(ranges: &[Range<u64>]) -> Vec<(u64, u64)> {
    ranges.iter().map(|r| (r.start, r.end)).collect()
}

impl Host for UnwinderHost<'_, '_> {
    fn add_file(
        &mut self,
        file: &Path,
        bias: u64,
        ranges: Option<&[Range<u64>]>,
    ) -> Result<(), String> {
        let Some(unwinder) = self.unwinder.as_deref_mut() else { return Ok(()) };
        let added = unwinder.add_module(
            file.to_path_buf(),
            i128::from(bias),
            ranges.map(pairs),
            self.debug_root.clone(),
        );
        added.map_err(|e| self.refused(e))
    }

    fn add_image(&mut self, name: &str, image: &[u8], bias: u64) -> Result<(), String> {
        let Some(unwinder) = self.unwinder.as_deref_mut() else { return Ok(()) };
        let name = PyString::new(self.py, name);
        let image = PyBytes::new(self.py, image).into_any();
        let added = unwinder.add_module_image(&name, &image, i128::from(bias));
        added.map_err(|e| self.refused(e))
    }

    fn add_missing(
        &mut self,
        name: &Path,
        spans: &[Range<u64>],
        code: &[Range<u64>],
        rules: Rules<'_>,
        jit: bool,
    ) -> Result<(), String> {
        let Ok(name) = name.as_os_str().into_pyobject(self.py);
        let name = name.cast_into::<PyString>().map_err(|e| e.to_string())?;
        let sym_file = rules.sym.map(Path::to_path_buf);
        let image = |kind| rules.image.filter(|i| i.1 == kind).map(|i| i.0.to_path_buf());
        let (pe_file, macho_file) = (image(ImageKind::Pe), image(ImageKind::MachO));
        let py = self.py;
        let Some(unwinder) = self.unwinder.as_deref_mut() else { return Ok(()) };
        let (spans, code) = (pairs(spans), pairs(code));
        let added = unwinder.add_missing_module(
            py, &name, spans, code, sym_file, rules.base, jit, pe_file, macho_file,
        );
        added.map_err(|e| self.refused(e))
    }

    fn sym_file_usable(&mut self, path: &Path, debug_id: &str) -> Result<(), String> {
        self.py.detach(|| {
            let symbols = crate::symbolize::symbols_file(path)?;
            if symbols.debug_id().eq_ignore_ascii_case(debug_id) {
                return Ok(());
            }
            let named = symbols.debug_id();
            let whose = match crate::symbolize::pdb::is_pdb(path) {
                true => "the PDB is the one of",
                false => "its MODULE record names",
            };
            Err(format!("{}: {whose} debug id {named}, not {debug_id}", path.display()))
        })
    }

    fn fetch(&mut self, requests: &[(String, Kind)]) -> Vec<Result<PathBuf, String>> {
        let config = Config::from_env();
        let answers = self.py.detach(|| match self.progress {
            Some(after) => {
                let bar = super::progress::DownloadBar::new(after);
                crate::space::debuginfod::fetch_all_reporting(&config, requests, &|d| bar.report(d))
            }
            None => crate::space::debuginfod::fetch_all(&config, requests),
        });
        answers.into_iter().map(|a| a.map_err(|e| e.to_string())).collect()
    }
}

/// Build the address space of the snapshot `facts` describe into
/// `unwinder` (see `crate::space::snapshot`).
pub(super) fn address_space<'py>(
    py: Python<'py>,
    facts: &Facts<'_>,
    unwinder: Option<&Bound<'py, PyUnwinder>>,
    options: SpaceOptions,
) -> PyResult<SpaceTuple<'py>> {
    let progress = options.progress.map(super::progress::seconds).transpose()?;
    let space_options = Options {
        finder: FileFinder {
            sysroot: options.sysroot,
            search: options.search,
            stand_ins: options.stand_ins,
        },
        executable: options.executable,
        allow_mismatch: options.allow_mismatch,
        debug_root: options.debug_root.clone(),
        fetch: options.fetch && !Config::from_env().urls.is_empty(),
        symbol_stores: Stores::new(options.symbols_path, options.symbols_url, !options.fetch),
    };
    let mut unwinder = unwinder.map(|u| u.borrow_mut());
    let mut host = UnwinderHost {
        py,
        unwinder: unwinder.as_deref_mut(),
        debug_root: options.debug_root,
        progress,
    };
    let facts =
        Facts { code_mappings_known: options.code_mappings_known, kind: &options.kind, ..*facts };
    let space = build(&facts, &space_options, &mut host).map_err(CoreError::new_err)?;
    let modules = space
        .modules
        .into_iter()
        .map(|m| {
            (
                m.path.into_os_string(),
                m.file.map(PathBuf::into_os_string),
                m.start,
                m.end,
                m.bias,
                m.build_id.as_deref().map(hex),
                m.file_build_id.as_deref().map(hex),
                m.found,
                pairs(&m.ranges),
                m.doubtful,
                m.stand_in,
                m.sym_file.map(PathBuf::into_os_string),
            )
        })
        .collect();
    let vdso = space.vdso_image.map(|image| PyBytes::new(py, &image));
    Ok((modules, space.executable, vdso, space.warnings))
}

/// Bytes of a path read from a snapshot, as a path.
pub(super) fn path_of(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsString::from_vec(bytes.to_vec()))
}
