//! `Document`: the snapshot document (`crate::render::snapshot`) for the
//! Python layer. `stackwalk.core` fills it in (the modules it placed, each
//! thread's frames as the symbolizer named them) and its writers give the
//! JSON and the text every snapshot command prints.

use std::ffi::OsString;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::symbolize::PySymbolizedFrame;
use super::unwinder::PyTrace;
use crate::render::snapshot::{
    Crash, Document, Frame, Ids, Kind, Module, NativeFrame, Python as Interpreter, PythonFrame,
    Signal, System, Thread, SCHEMA,
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

    /// The last thread added, taken out of the document, as Python values
    /// (what `to_dict()` gives of it): a caller that makes the threads' values
    /// one at a time never holds a thread both ways.
    fn take_thread<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let kinds = self.inner.python.is_some();
        let thread = self.inner.threads.pop();
        let thread = thread.ok_or_else(|| PyValueError::new_err("the document has no thread"))?;
        thread_dict(py, &thread, kinds)
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

    /// The document as Python values (what `json.loads(json())` gives), made
    /// from the model without the text between.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        document_dict(py, &self.inner)
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

fn hex(value: u64) -> String {
    format!("{value:#x}")
}

/// `doc` as Python values, keys in the JSON's order (docs/json.md).
fn document_dict<'py>(py: Python<'py>, doc: &Document) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("schema", SCHEMA)?;
    d.set_item("kind", doc.kind.as_str())?;
    d.set_item("path", doc.path.as_deref())?;
    d.set_item("arch", &doc.arch)?;
    d.set_item("executable", doc.executable.as_deref())?;
    d.set_item("pid", doc.pid)?;
    let signal = doc.signal.as_ref().map(|s| -> PyResult<_> {
        let out = PyDict::new(py);
        out.set_item("number", s.number)?;
        out.set_item("name", &s.name)?;
        out.set_item("address", s.address.map(hex))?;
        Ok(out)
    });
    d.set_item("signal", signal.transpose()?)?;
    d.set_item("crashing_thread", doc.crashing_thread)?;
    let modules = PyList::empty(py);
    for m in &doc.modules {
        let out = PyDict::new(py);
        out.set_item("path", &m.path)?;
        out.set_item("start", hex(m.start))?;
        out.set_item("end", hex(m.end))?;
        let ranges: Vec<[String; 2]> = m.ranges.iter().map(|&(a, b)| [hex(a), hex(b)]).collect();
        out.set_item("ranges", ranges)?;
        out.set_item("bias", hex(m.bias))?;
        out.set_item("build_id", &m.build_id)?;
        out.set_item("found", m.found)?;
        out.set_item("build_id_matches", m.build_id_matches)?;
        if doc.kind == Kind::Minidump {
            for (key, value) in m.id_fields() {
                out.set_item(key, value)?;
            }
        }
        modules.append(out)?;
    }
    d.set_item("modules", modules)?;
    let threads = PyList::empty(py);
    let kinds = doc.python.is_some();
    for t in &doc.threads {
        threads.append(thread_dict(py, t, kinds)?)?;
    }
    d.set_item("threads", threads)?;
    if let Some(p) = &doc.python {
        let out = PyDict::new(py);
        out.set_item("module", &p.module)?;
        out.set_item("version", &p.version)?;
        out.set_item("warnings", &p.warnings)?;
        out.set_item("error", &p.error)?;
        d.set_item("python", out)?;
    }
    if let Some(s) = &doc.system {
        let out = PyDict::new(py);
        out.set_item("os", &s.os)?;
        out.set_item("os_version", &s.os_version)?;
        out.set_item("cpu", &s.cpu)?;
        d.set_item("system", out)?;
    }
    if doc.kind == Kind::Minidump {
        let crash = doc.crash.as_ref().map(|c| -> PyResult<_> {
            let out = PyDict::new(py);
            out.set_item("reason", &c.reason)?;
            out.set_item("address", hex(c.address))?;
            out.set_item("thread", c.thread)?;
            Ok(out)
        });
        d.set_item("crash", crash.transpose()?)?;
    }
    if let Some(ms) = doc.stopped_ms {
        d.set_item("stopped_ms", ms)?;
    }
    Ok(d)
}

/// A thread's JSON object as Python values.
fn thread_dict<'py>(py: Python<'py>, t: &Thread, kinds: bool) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item(intern!(py, "tid"), t.tid)?;
    out.set_item(intern!(py, "end"), &t.end)?;
    let frames = PyList::empty(py);
    for f in &t.frames {
        frames.append(match f {
            Frame::Native(n) => native_dict(py, n, kinds)?,
            Frame::Python(p) => {
                let out = PyDict::new(py);
                out.set_item(intern!(py, "kind"), intern!(py, "python"))?;
                out.set_item(intern!(py, "function"), &p.function)?;
                out.set_item(intern!(py, "qualname"), &p.qualname)?;
                out.set_item(intern!(py, "file"), &p.file)?;
                out.set_item(intern!(py, "line"), p.line)?;
                out
            }
        })?;
    }
    out.set_item(intern!(py, "frames"), frames)?;
    if let Some(gil) = t.gil {
        out.set_item(intern!(py, "gil"), gil)?;
    }
    if let Some(stop) = &t.python_stop {
        out.set_item(intern!(py, "python_stop"), stop)?;
    }
    if let Some(detail) = &t.end_detail {
        out.set_item(intern!(py, "end_detail"), detail)?;
    }
    Ok(out)
}

/// A native frame's JSON object as Python values (`SymbolizedFrame.to_dict`'s
/// too); with `kinds`, its `kind`.
pub(super) fn native_dict<'py>(
    py: Python<'py>,
    n: &NativeFrame,
    kinds: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    if kinds {
        d.set_item(intern!(py, "kind"), intern!(py, "native"))?;
    }
    d.set_item(intern!(py, "index"), n.index)?;
    d.set_item(intern!(py, "pc"), hex(n.pc))?;
    d.set_item(intern!(py, "sp"), hex(n.sp))?;
    d.set_item(intern!(py, "cfa"), n.cfa.map(hex))?;
    d.set_item(intern!(py, "trust"), PyString::intern(py, &n.trust))?;
    d.set_item(intern!(py, "module"), &n.module)?;
    d.set_item(intern!(py, "module_offset"), n.module_offset.map(hex))?;
    d.set_item(intern!(py, "function"), &n.function)?;
    d.set_item(intern!(py, "function_offset"), n.function_offset.map(hex))?;
    d.set_item(intern!(py, "file"), &n.file)?;
    d.set_item(intern!(py, "line"), n.line)?;
    d.set_item(intern!(py, "column"), n.column)?;
    d.set_item(intern!(py, "inline"), n.inline)?;
    d.set_item(intern!(py, "doubtful"), n.doubtful)?;
    if let Some(registers) = &n.registers {
        let out = PyDict::new(py);
        for (name, value) in registers {
            out.set_item(PyString::intern(py, name), hex(*value))?;
        }
        d.set_item(intern!(py, "registers"), out)?;
    }
    Ok(d)
}
