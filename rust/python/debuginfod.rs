//! The debuginfod client (`crate::space::debuginfod`) for the Python layer:
//! `debuginfod_fetch` (a snapshot's address space fetches its files itself:
//! `crate::space::snapshot`); and the Breakpad symbol server client
//! (`crate::space::symserver`), `symbols_fetch_all`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::space::debuginfod::{Config, Kind};

/// Each (build id in hex, "debuginfo" or "executable") of `requests`, from
/// debuginfod's cache or its servers (the environment's settings; `offline`:
/// the cache alone), several downloads at once, without the GIL. Returns
/// (path, None) or (None, why not) for each, in order. `progress`: draw a
/// progress bar on stderr once the downloads have lasted that many seconds
/// (None: never).
#[pyfunction]
#[pyo3(signature = (requests, *, offline = false, progress = None))]
pub(super) fn debuginfod_fetch(
    py: Python<'_>,
    requests: Vec<(String, String)>,
    offline: bool,
    progress: Option<f64>,
) -> PyResult<Vec<(Option<String>, Option<String>)>> {
    let requests = requests
        .into_iter()
        .map(|(id, kind)| match Kind::from_name(&kind) {
            Some(kind) => Ok((id, kind)),
            None => {
                Err(PyValueError::new_err(format!("{kind:?}: not \"debuginfo\" or \"executable\"")))
            }
        })
        .collect::<PyResult<Vec<_>>>()?;
    let config = if offline { Config::from_env().offline() } else { Config::from_env() };
    let after = progress.map(super::progress::seconds).transpose()?;
    let answers = py.detach(|| match after {
        Some(after) => {
            let bar = super::progress::DownloadBar::new(after);
            crate::space::debuginfod::fetch_all_reporting(&config, &requests, &|d| bar.report(d))
        }
        None => crate::space::debuginfod::fetch_all(&config, &requests),
    });
    Ok(answers
        .into_iter()
        .map(|a| match a {
            Ok(path) => (Some(path.to_string_lossy().into_owned()), None),
            Err(e) => (None, Some(e.to_string())),
        })
        .collect())
}

/// The Breakpad symbol file of each (name, debug id) of `modules` from the
/// symbol servers `urls` (`URL/NAME/DEBUGID/NAME.sym`), through the cache
/// (`crate::space::symserver`), several at once and all within one deadline
/// (`DEBUGINFOD_MAXTIME`), without the GIL: a (path or None, warnings) for
/// each, in order. (A snapshot's symbol stores are asked by its address
/// space: this is for the tests of hostile servers.)
#[pyfunction]
#[pyo3(signature = (urls, modules, *, offline = false))]
pub(super) fn symbols_fetch_all(
    py: Python<'_>,
    urls: Vec<String>,
    modules: Vec<(String, String)>,
    offline: bool,
) -> Vec<(Option<String>, Vec<String>)> {
    let config = Config::from_env();
    let found = py.detach(|| crate::space::symserver::fetch_all(&config, &urls, &modules, offline));
    found
        .into_iter()
        .map(|f| (f.path.map(|p| p.to_string_lossy().into_owned()), f.warnings))
        .collect()
}
