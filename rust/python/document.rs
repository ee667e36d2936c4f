//! `Document`: the snapshot document (`crate::render::snapshot`) for the
//! Python layer. `stackwalk.core` fills it in (the modules it placed, each
//! thread's frames as the symbolizer named them) and its writers give the
//! JSON and the text every snapshot command prints.

use std::ffi::OsString;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::symbolize::PySymbolizedFrame;
use super::unwinder::PyTrace;
use crate::render::snapshot::{
    Crash, Document, Frame, Ids, Kind, Module, Python as Interpreter, PythonFrame, Signal, System,
    Thread,
};

/// A module as `stackwalk.core` gives it: (path, start, end, ranges, bias,
/// build id, found, build id matches, a minidump's (debug file, debug id,
/// code id) or None).
type ModuleIn = (
    OsString,
    u64,
    u64,
    Vec<(u64, u64)>,
    u64,
    Option<String>,
    bool,
    Option<bool>,
    Option<(Option<String>, Option<String>, Option<String>)>,
);

/// The snapshot document of docs/json.md: what was read, its modules and
/// its threads' frames; `json()` and `text()` write it.
#[pyclass(module = "stackwalk._core", name = "Document")]
pub struct PyDocument {
    inner: Document,
}

#[pymethods]
impl PyDocument {
    #[new]
    #[pyo3(signature = (
        kind, arch, *, path = None, executable = None, pid = None, signal = None,
        crashing_thread = None, modules = Vec::new(), system = None, crash = None,
        stopped_ms = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        kind: &str,
        arch: &str,
        path: Option<OsString>,
        executable: Option<OsString>,
        pid: Option<i64>,
        signal: Option<(i64, String, Option<u64>)>,
        crashing_thread: Option<i64>,
        modules: Vec<ModuleIn>,
        system: Option<(String, Option<String>, String)>,
        crash: Option<(String, u64, i64)>,
        stopped_ms: Option<f64>,
    ) -> PyResult<Self> {
        let kind = Kind::parse(kind)
            .ok_or_else(|| PyValueError::new_err(format!("no document kind {kind:?}")))?;
        let mut doc = Document::new(kind, arch);
        doc.path = path;
        doc.executable = executable;
        doc.pid = pid;
        doc.signal = signal.map(|(number, name, address)| Signal { number, name, address });
        doc.crashing_thread = crashing_thread;
        doc.modules = modules
            .into_iter()
            .map(|(path, start, end, ranges, bias, build_id, found, build_id_matches, ids)| {
                Module {
                    path,
                    start,
                    end,
                    ranges,
                    bias,
                    build_id,
                    found,
                    build_id_matches,
                    ids: ids.map(|(debug_file, debug_id, code_id)| Ids {
                        debug_file,
                        debug_id,
                        code_id,
                    }),
                }
            })
            .collect();
        doc.system = system.map(|(os, os_version, cpu)| System { os, os_version, cpu });
        doc.crash = crash.map(|(reason, address, thread)| Crash { reason, address, thread });
        doc.stopped_ms = stopped_ms;
        Ok(PyDocument { inner: doc })
    }

    /// The interpreter whose Python frames the threads hold: its module,
    /// version, what could not be read, why none could.
    fn set_python(
        &mut self,
        module: OsString,
        version: String,
        warnings: Vec<String>,
        error: Option<String>,
    ) {
        self.inner.python = Some(Interpreter { module, version, warnings, error });
    }

    /// A thread: its walk's `end` (and `end_detail`), its frames --
    /// `SymbolizedFrame`s and a python process's `PythonFrame`s among them --
    /// each native frame (not an inlined function's) with its registers from
    /// `trace` where given (unwound with them), `gil` and `python_stop` for
    /// a python process's threads.
    #[pyo3(signature = (tid, end, frames, *, end_detail = None, trace = None, gil = None,
                        python_stop = None))]
    #[allow(clippy::too_many_arguments)]
    fn add_thread(
        &mut self,
        py: Python<'_>,
        tid: i64,
        end: String,
        frames: &Bound<'_, PyAny>,
        end_detail: Option<String>,
        trace: Option<PyRef<'_, PyTrace>>,
        gil: Option<bool>,
        python_stop: Option<String>,
    ) -> PyResult<()> {
        let mut out = Vec::new();
        for item in frames.try_iter()? {
            let item = item?;
            if let Ok(native) = item.cast::<PySymbolizedFrame>() {
                let (mut frame, trace_index) = native.get().native(py)?;
                if !frame.inline {
                    frame.registers = trace.as_ref().and_then(|t| t.register_values(trace_index));
                }
                out.push(Frame::Native(frame));
                continue;
            }
            out.push(Frame::Python(PythonFrame {
                function: item.getattr("function")?.extract()?,
                qualname: item.getattr("qualname")?.extract()?,
                file: item.getattr("file")?.extract()?,
                line: item.getattr("line")?.extract()?,
            }));
        }
        self.inner.threads.push(Thread { tid, end, end_detail, frames: out, gil, python_stop });
        Ok(())
    }

    /// The document's "kind".
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind.as_str()
    }

    /// Each thread's tid, why its walk stopped, and how many frames it has.
    #[getter]
    fn threads(&self) -> Vec<(i64, String, usize)> {
        self.inner.threads.iter().map(|t| (t.tid, t.end.clone(), t.frames.len())).collect()
    }

    /// The JSON document, indented by `indent` spaces (None: on one line).
    #[pyo3(signature = (indent = Some(2)))]
    fn json(&self, py: Python<'_>, indent: Option<usize>) -> String {
        py.detach(|| {
            let mut out = String::new();
            self.inner.write_json(&mut out, indent);
            out
        })
    }

    /// `json()` written to `file` (a text file) as it is made, a piece of
    /// some megabytes at a time: the document of a core of 100,000 threads
    /// is never held whole as text.
    #[pyo3(signature = (file, indent = Some(2)))]
    fn write_json(&self, file: &Bound<'_, PyAny>, indent: Option<usize>) -> PyResult<()> {
        write_out(file, |out, flush| self.inner.write_json_flushing(out, indent, flush), "\n")
    }

    /// `text()` written to `file` as it is made, as `write_json`.
    fn write_text(&self, file: &Bound<'_, PyAny>) -> PyResult<()> {
        write_out(file, |out, flush| self.inner.write_text_flushing(out, flush), "")
    }

    /// The text report (`stackwalk core`'s), ending with a newline.
    fn text(&self) -> String {
        let mut out = String::new();
        self.inner.write_text(&mut out);
        out
    }

    /// The document as Python values (what `json.loads(json())` gives).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = self.json(py, None);
        py.import("json")?.call_method1("loads", (text,))
    }

    fn __repr__(&self) -> String {
        format!("<Document {} of {} threads>", self.inner.kind.as_str(), self.inner.threads.len())
    }
}

/// What `write` makes, written to `file` a piece of at least 4 MiB at a
/// time (the last piece followed by `end`).
fn write_out(
    file: &Bound<'_, PyAny>,
    write: impl FnOnce(&mut String, &mut dyn FnMut(&mut String)),
    end: &str,
) -> PyResult<()> {
    let mut failed = None;
    let mut out = String::new();
    let mut flush = |text: &mut String| {
        if text.len() >= 1 << 22 && failed.is_none() {
            failed = file.call_method1("write", (PyString::new(file.py(), text),)).err();
            text.clear();
        }
    };
    write(&mut out, &mut flush);
    if let Some(e) = failed {
        return Err(e);
    }
    out.push_str(end);
    file.call_method1("write", (out,))?;
    Ok(())
}
