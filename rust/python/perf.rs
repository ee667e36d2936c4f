//! perf.data files: `perf_report` (`crate::profile`), `perf_samples`
//! (`crate::source::perf`), and `flamegraph` (inferno) for the folded stacks.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::errors::{ArchError, StackwalkError};
use crate::source::memory::Data;
use crate::unwind::fallback::Strategies;

/// Unwind and symbolize every sample of a perf.data file recorded with
/// `--call-graph dwarf`, writing them to `output` (a path) or stdout as
/// "text" (perf script's shape), "json" (JSON Lines), "collapsed" (folded
/// stacks) or "records" (`SampleRecords` reads them). Runs without the GIL on `jobs` threads (0: one per core).
/// `progress`: draw a progress bar on stderr once the run has lasted that
/// many seconds (None: never). `max_frames`: the most frames of a sample's
/// user stack (None: as many as its stack copy can hold). `inline`: the
/// functions inlined at each user frame's pc come before it as frames of
/// their own (perf script's default), and JSON frames carry `file`, `line`,
/// `column` and `inline`, from the modules' DWARF. `perf_map_dir`: where
/// the perf maps of JIT code are (`perf-PID.map`; None: JIT code is not
/// named nor walked through). `sysroot`: prefixed to the recorded paths,
/// whose files are looked for there first; `lib_search_path`: directories
/// where they are looked for by name after their paths. `offline`: nothing fetched from the
/// debuginfod servers of `DEBUGINFOD_URLS` (else the recording's files not
/// here, and with `inline` their DWARF, are). `strategies`: how a sample's
/// frames are walked where CFI fails (None: cfi, frame_pointer). Returns a summary dict; a damaged file stops
/// the reading with summary["error"] set, after the samples before the
/// damage were written.
#[pyfunction]
#[pyo3(signature = (path, format = "text", *, output = None, jobs = 0, max_frames = None,
                    debug_root = PathBuf::from("/usr/lib/debug"), progress = None, inline = true,
                    perf_map_dir = Some(PathBuf::from("/tmp")), offline = false,
                    strategies = None, sysroot = None, lib_search_path = Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub(super) fn perf_report<'py>(
    py: Python<'py>,
    path: PathBuf,
    format: &str,
    output: Option<PathBuf>,
    jobs: usize,
    max_frames: Option<usize>,
    debug_root: PathBuf,
    progress: Option<f64>,
    inline: bool,
    perf_map_dir: Option<PathBuf>,
    offline: bool,
    strategies: Option<Vec<String>>,
    sysroot: Option<PathBuf>,
    lib_search_path: Vec<PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    use crate::profile::{Format, Options};
    if jobs > MAX_JOBS {
        return Err(StackwalkError::new_err(format!("{jobs} worker threads: at most {MAX_JOBS}")));
    }
    let after = progress.map(super::progress::seconds).transpose()?;
    let downloads = after.map(|s| {
        let bar = super::progress::DownloadBar::new(s);
        Box::new(move |d| bar.report(d)) as crate::profile::DownloadsFn
    });
    let progress = after.map(super::progress::bar);
    let format = match format {
        "text" => Format::Text,
        "json" => Format::JsonLines,
        "collapsed" => Format::Collapsed,
        "records" => Format::Records,
        other => return Err(StackwalkError::new_err(format!("unknown format {other:?}"))),
    };
    let name = path.to_string_lossy().into_owned();
    let file = File::open(&path).map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
    let debuginfod = (!offline).then(crate::space::debuginfod::Config::from_env);
    let defaults = Options::default();
    let strategies = match strategies {
        Some(names) => Strategies::new(&super::unwinder::parse_strategies(&names)?),
        None => defaults.strategies,
    };
    let files =
        crate::space::finder::FileFinder { sysroot, search: lib_search_path, ..Default::default() };
    let options = Options {
        format,
        max_frames,
        files,
        debug_root,
        progress,
        inline,
        perf_map_dir,
        debuginfod,
        downloads,
        strategies,
        ..defaults
    };
    let run = Run { name: &name, output, jobs, options };
    let open_error =
        |e: crate::source::perf::PerfError| StackwalkError::new_err(format!("{name}: {e}"));
    // A regular file is mapped and its records read in place; anything else
    // (a FIFO) is streamed.
    let is_file = file.metadata().is_ok_and(|m| m.is_file());
    // A file cut short while read (or still being written) reads as zeros
    // past its new end, and the reader reports it cut (see crate::source::files).
    match is_file.then(|| crate::source::files::map_file(&file).ok()).flatten() {
        Some(map) => {
            let data = Arc::new(Data::Mapped(map));
            run.profile(py, crate::source::perf::PerfFile::from_data(data).map_err(open_error)?)
        }
        None => {
            let reader = std::io::BufReader::with_capacity(1 << 20, file);
            run.profile(py, crate::source::perf::PerfFile::new(reader).map_err(open_error)?)
        }
    }
}

/// A sample's frame as Python takes it: (pc, module, module offset,
/// function, function offset, kernel, trust, file, line, column, inline).
type FrameTuple = (
    u64,
    Option<String>,
    u64,
    Option<String>,
    Option<u64>,
    bool,
    Option<String>,
    Option<String>,
    Option<u64>,
    Option<u64>,
    bool,
);

/// The samples `perf_report(path, "records", output=...)` wrote to the file
/// at `path`, read one at a time (`crate::render::records`): each (pid,
/// tid, time, comm, [frame]), a frame as `FrameTuple`, numbers as numbers.
#[pyclass(module = "stackwalk._core", name = "SampleRecords")]
pub struct PySampleRecords {
    input: std::io::BufReader<File>,
    path: String,
}

#[pymethods]
impl PySampleRecords {
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let name = path.to_string_lossy().into_owned();
        let file =
            File::open(&path).map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
        Ok(PySampleRecords { input: std::io::BufReader::with_capacity(1 << 16, file), path: name })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[allow(clippy::type_complexity)]
    fn __next__(&mut self) -> PyResult<Option<(i32, i32, u64, String, Vec<FrameTuple>)>> {
        let record = crate::render::records::read_record(&mut self.input).map_err(|e| {
            StackwalkError::new_err(format!("{}: a sample record is damaged: {e}", self.path))
        })?;
        Ok(record.map(|s| {
            let frames = s.frames.into_iter().map(|f| {
                (
                    f.pc,
                    f.module,
                    f.module_offset,
                    f.function,
                    f.function_offset,
                    f.kernel,
                    f.trust,
                    f.file,
                    f.line,
                    f.column,
                    f.inline,
                )
            });
            (s.pid, s.tid, s.time, s.comm, frames.collect())
        }))
    }
}

/// The executable mappings and the first `max_samples` user samples of a
/// perf.data file, as Python values, for unwinding samples one at a time
/// (the pure-Python baseline, tests): `{"arch", "mmaps": [(pid, start,
/// len, pgoff, filename)], "samples": [(pid, tid, time, regs, sp,
/// stack)]}`, `regs` as `Unwinder.unwind` takes them, `stack` the bytes
/// captured from `sp` up. Reading stops at damage, as `perf_report` does.
#[pyfunction]
#[pyo3(signature = (path, max_samples = 1000))]
pub(super) fn perf_samples<'py>(
    py: Python<'py>,
    path: PathBuf,
    max_samples: usize,
) -> PyResult<Bound<'py, PyDict>> {
    use crate::source::perf::{sample_registers, Event, PerfFile, PERF_SAMPLE_REGS_ABI_NONE};
    let name = path.to_string_lossy().into_owned();
    let file = File::open(&path).map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
    let mut perf = PerfFile::new(std::io::BufReader::new(file))
        .map_err(|e| StackwalkError::new_err(format!("{name}: {e}")))?;
    let arch = perf.header().arch().ok_or_else(|| {
        ArchError::new_err(format!("{name}: samples of an architecture stackwalk does not know"))
    })?;
    let pc_name = arch.pc_name();
    let (mmaps, samples) = (pyo3::types::PyList::empty(py), pyo3::types::PyList::empty(py));
    while samples.len() < max_samples {
        let Ok(Some(event)) = perf.next_event() else { break };
        match event {
            Event::Mmap(m) if m.executable() => {
                let filename = String::from_utf8_lossy(m.filename);
                mmaps.append((m.pid, m.start, m.len, m.pgoff, filename))?;
            }
            Event::Sample(s) if s.regs_abi != PERF_SAMPLE_REGS_ABI_NONE => {
                let (pc, registers) = sample_registers(arch, &s);
                let (Some(pc), Some(sp)) = (pc, registers.get(arch.sp())) else { continue };
                let regs = PyDict::new(py);
                for (col, value) in registers.iter() {
                    if let Some(reg) = arch.register_name(col) {
                        regs.set_item(reg, value)?;
                    }
                }
                regs.set_item(pc_name, pc)?;
                let stack = PyBytes::new(py, s.stack);
                samples.append((s.pid, s.tid, s.time.unwrap_or(0), regs, sp, stack))?;
            }
            _ => {}
        }
    }
    let out = PyDict::new(py);
    out.set_item("arch", arch.name())?;
    out.set_item("mmaps", mmaps)?;
    out.set_item("samples", samples)?;
    Ok(out)
}

/// The most worker threads (or `core --dir` processes) a run may ask for:
/// more than any machine runs at once, and few enough to start.
pub(super) const MAX_JOBS: usize = 256;

/// The output buffer: smaller than a chunk of formatted samples, which are
/// then written as they are rather than copied into it.
const OUT_BUFFER: usize = 32 << 10;

/// A `perf_report` call, once its file is open.
struct Run<'n> {
    name: &'n str,
    output: Option<PathBuf>,
    jobs: usize,
    options: crate::profile::Options,
}

impl Run<'_> {
    fn profile<'py, R: std::io::Read + std::io::Seek + Send>(
        self,
        py: Python<'py>,
        mut perf: crate::source::perf::PerfFile<R>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let name = self.name;
        let arch = perf.header().arch().ok_or_else(|| {
            let said = perf.header().arch.clone().unwrap_or_else(|| "nothing".to_owned());
            ArchError::new_err(format!("{name}: cannot unwind its samples: its arch is {said}"))
        })?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.jobs)
            .thread_name(|i| format!("stackwalk {i}"))
            .build()
            .map_err(|e| StackwalkError::new_err(format!("cannot start worker threads: {e}")))?;
        let vdso_id = perf.header().build_ids.iter().find(|b| b.filename == "[vdso]");
        let mut profiler = crate::profile::Profiler::new(
            arch,
            self.options,
            vdso_id.map(|b| b.build_id.as_slice()),
        );
        let output = self.output;
        let written: std::io::Result<()> = py.detach(|| {
            pool.install(|| match &output {
                Some(out) => {
                    let file = File::create(out)?;
                    profiler
                        .run(&mut perf, &mut std::io::BufWriter::with_capacity(OUT_BUFFER, file))
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut out = std::io::BufWriter::with_capacity(OUT_BUFFER, stdout.lock());
                    profiler.run(&mut perf, &mut out)
                }
            })
        });
        if let Err(e) = written {
            return Err(match e.kind() {
                std::io::ErrorKind::BrokenPipe => {
                    pyo3::exceptions::PyBrokenPipeError::new_err(e.to_string())
                }
                _ => StackwalkError::new_err(format!("writing the samples: {e}")),
            });
        }
        let s = &profiler.summary;
        let out = PyDict::new(py);
        out.set_item("arch", arch.name())?;
        out.set_item("samples", s.samples)?;
        out.set_item("complete", s.complete)?;
        out.set_item("frames", s.frames)?;
        out.set_item("processes", s.processes)?;
        out.set_item("modules_missing", s.modules_missing.clone())?;
        out.set_item("warnings", s.warnings.clone())?;
        out.set_item("call_graph", s.call_graph)?;
        out.set_item("error", s.error.as_ref().map(|e| format!("{name}: {e}")))?;
        Ok(out)
    }
}

/// Draw an interactive SVG flame graph (inferno) from a file of folded
/// stacks (`comm;outer;...;inner count` lines).
#[pyfunction]
#[pyo3(signature = (folded, svg, title = "Flame Graph"))]
pub(super) fn flamegraph(
    py: Python<'_>,
    folded: PathBuf,
    svg: PathBuf,
    title: &str,
) -> PyResult<()> {
    let drawn = py.detach(|| crate::render::flamegraph::flamegraph(&folded, &svg, title));
    drawn.map_err(|e| StackwalkError::new_err(format!("{}: {e}", svg.display())))
}
