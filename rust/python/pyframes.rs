//! `python_threads`: `crate::symbolize::pyframes` over a core's or snapshot's memory.

use std::path::PathBuf;

use pyo3::prelude::*;

use super::memory::PyMappedMemory;
use crate::symbolize::pyframes::{locate, read_state, PyFrame};

/// A frame: (function, qualname, file, line, is_entry, incomplete).
type Frame = (String, String, String, Option<i64>, bool, bool);
/// A thread: (native tid, thread id, holds the GIL, frames innermost first,
/// why they end early).
type Thread = (u64, u64, bool, Vec<Frame>, Option<String>);
/// (version, threads, warnings, why no thread could be read).
type State = (String, Vec<Thread>, Vec<String>, Option<String>);

fn frame(f: PyFrame) -> Frame {
    (f.function, f.qualname, f.file, f.line, f.entry, f.incomplete)
}

/// The Python threads of the interpreter in the module file at `path`
/// (named `name` in the process), placed with `bias`, read from `memory`
/// of the process whose OS threads are `tids`:
/// None if the file is no CPython interpreter; else (version "3.13", threads,
/// warnings, error: why none could be read, or None).
#[pyfunction]
pub(super) fn python_threads(
    py: Python<'_>,
    memory: PyRef<'_, PyMappedMemory>,
    path: PathBuf,
    name: &str,
    bias: u64,
    tids: Vec<u64>,
) -> Option<State> {
    let mem = memory.inner.clone();
    py.detach(|| {
        let data = crate::source::files::map(&path).ok()?;
        let symbols = locate::find(&data, name)?.placed(bias);
        let version = format!("{}.{}", symbols.version.0, symbols.version.1);
        Some(match read_state(&*mem, &symbols, &tids) {
            Ok(state) => {
                let threads = state
                    .threads
                    .into_iter()
                    .map(|t| {
                        let frames = t.frames.into_iter().map(frame).collect();
                        (t.native_tid, t.thread_id, t.holds_gil, frames, t.stop)
                    })
                    .collect();
                (version, threads, state.warnings, None)
            }
            Err(e) => (version, Vec::new(), Vec::new(), Some(e.to_string())),
        })
    })
}
