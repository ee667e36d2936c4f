//! Profiles: every sample of a `perf record --call-graph dwarf` file
//! unwound against the address space of its process at that moment.
//!
//! One thread reads the records in order: in place when the file is mapped
//! (a sample's 8 KiB stack copy is never copied again), and applies them
//! in time order: each process's modules (an `Arc<ModuleSet>` snapshot per
//! pid, replaced as mmaps, forks and execs arrive) and gathers samples into
//! batches. A batch is split into chunks that worker threads (rayon) decode,
//! unwind (one `Unwinder` per thread, switching between the processes'
//! module sets) and symbolize and format or key in one pass, with no
//! allocation per sample; the chunks are written in order.
//!
//! Folded stacks are counted by the workers, by name, in stack-trace
//! databases of name ids (see `folded`).

mod cache;
mod folded;
mod format;
mod kallsyms;
mod process;
mod work;

use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::io::{Read, Seek, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::arch::Arch;
use crate::source::memory::Data;
use crate::source::perf::{
    Decoder, Event, PerfFile, PERF_RECORD_SAMPLE, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_REGS_USER,
    PERF_SAMPLE_STACK_USER,
};
use crate::unwind::fallback::{Strategies, Strategy};

use kallsyms::KernelSymbolsLoader;
use process::{own_vdso, FileInfo, JitMap, Process};
use work::{ChunkOut, Context, Spare};

/// How the samples are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `perf script`'s shape.
    Text,
    /// One JSON object per sample.
    JsonLines,
    /// Folded stacks, `comm;outer;...;inner count`, counted in a StackDb.
    Collapsed,
    /// The samples as records (`crate::render::records`): what the Python
    /// layer's `Recording.samples()` reads, numbers as numbers.
    Records,
}

pub struct Options {
    pub format: Format,
    /// The most frames of a sample's user stack, and of its kernel
    /// callchain (as perf script's `--max-stack`); None: as many as its
    /// stack copy can hold, and the whole callchain.
    pub max_frames: Option<usize>,
    /// Samples unwound together; bounds memory (a stream's samples are
    /// copies; a mapped file's are read in place).
    pub batch: usize,
    /// Where the recording's files are looked for (`--sysroot`,
    /// `--lib-search-path`; by default at their paths).
    pub files: crate::space::finder::FileFinder,
    /// Where separate debug files are (`/usr/lib/debug`).
    pub debug_root: std::path::PathBuf,
    /// The functions inlined at each frame's pc come before it as frames of
    /// their own, and JSON frames carry their file and line (from DWARF), as
    /// perf script does by default.
    pub inline: bool,
    /// Told how far the reading is, at most every `PROGRESS_EVERY`, and
    /// once at the end; a progress bar, say, is the caller's to draw.
    pub progress: Option<ProgressFn>,
    /// Where the perf maps of JIT code are (`perf-PID.map`, as node
    /// `--perf-basic-prof`, the JVM's agents and CPython's `-X perf` write
    /// them; perf reads them from /tmp): names for the code of a process's
    /// anonymous executable mappings, which are then walked through by
    /// their frame-pointer chain. None: JIT code is not named.
    pub perf_map_dir: Option<std::path::PathBuf>,
    /// How each sample's frames are walked where CFI fails (see
    /// [`crate::unwind::Unwinder::unwind_sample`]): CFI then frame pointers by
    /// default, as perf script's libdw does; JIT code has no CFI.
    pub strategies: Strategies,
    /// Where the files of the recording that are not here (nor in perf's
    /// build-id cache) are fetched from by build id, before the samples
    /// are read, with their DWARF when `inline` (see
    /// [`crate::space::debuginfod`]); None: nothing is fetched (debuginfod's
    /// cache is still read).
    pub debuginfod: Option<crate::space::debuginfod::Config>,
    /// Told how far those downloads are; dropped once they are over (a
    /// progress bar ends its line then).
    pub downloads: Option<DownloadsFn>,
}

/// A caller's report of debuginfod's downloads.
pub type DownloadsFn = Box<dyn Fn(crate::space::debuginfod::Downloads) + Send + Sync>;

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("format", &self.format)
            .field("max_frames", &self.max_frames)
            .field("batch", &self.batch)
            .field("files", &self.files)
            .field("debug_root", &self.debug_root)
            .field("inline", &self.inline)
            .field("progress", &self.progress.is_some())
            .field("perf_map_dir", &self.perf_map_dir)
            .field("debuginfod", &self.debuginfod.as_ref().map(|c| &c.urls))
            .field("downloads", &self.downloads.is_some())
            .finish()
    }
}

/// How far a run has read, as `Options::progress` is told it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the data section read, of `total` (at least 1).
    pub done: u64,
    pub total: u64,
    /// Samples read so far; at the end, the samples unwound.
    pub samples: u64,
    /// The last report: the run is over (`done == total`).
    pub finished: bool,
}

/// A caller's progress report, called on the reading thread.
pub type ProgressFn = Box<dyn FnMut(Progress) + Send>;

/// The least time between two progress reports.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);

impl Default for Options {
    fn default() -> Self {
        Options {
            format: Format::Text,
            max_frames: None,
            // 512 samples of 8 KiB stacks: about 4.5 MiB a batch, two held at the peak (one
            // unwound while the next is read); 1024 cost 8.5 MiB more for no speed.
            batch: 512,
            files: Default::default(),
            debug_root: "/usr/lib/debug".into(),
            inline: true,
            progress: None,
            perf_map_dir: Some("/tmp".into()),
            strategies: Strategies::new(&[Strategy::Cfi, Strategy::FramePointer]),
            debuginfod: None,
            downloads: None,
        }
    }
}

/// Samples a worker takes at a time.
const CHUNK: usize = 64;

/// What a run did, for the caller's summary and exit status.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub samples: u64,
    /// Samples whose user stack was unwound to its outermost frame.
    pub complete: u64,
    pub frames: u64,
    pub processes: usize,
    pub modules_missing: Vec<String>,
    /// What was found wrong with the files the recording names, or taken
    /// from elsewhere (another build at the path, perf's copy used), one
    /// line each.
    pub warnings: Vec<String>,
    /// What the recording holds to find the user frames with: "dwarf" (user
    /// registers and stack, unwound here), "callchain" (perf's own, by
    /// frame pointers: `-g`), or "none" (the sampled ip alone).
    pub call_graph: &'static str,
    /// The first damage in the file (by offset): a record the reading
    /// stopped at, after the samples before it, or a damaged sample, left
    /// out.
    pub error: Option<String>,
}

/// A record kept until its time comes: in the mapping, or a copy.
struct Queued<'a> {
    time: u64,
    /// File order, to keep records of equal time in it.
    seq: u64,
    offset: u64,
    /// A sample's (pid, tid), so it is not decoded again until unwound.
    sample: Option<(i32, i32)>,
    rec: Cow<'a, [u8]>,
}

/// A sample waiting in a batch, with its process and comm at its time.
struct Pending<'a> {
    offset: u64,
    rec: Cow<'a, [u8]>,
    comm: u32,
    process: Process,
}

/// A new id for a file or a process snapshot, unique in this process.
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A batch being unwound while the next one is read: its samples and
/// chunks' outputs come back on `done`.
struct InFlight<'a> {
    done: std::sync::mpsc::Receiver<(Vec<Pending<'a>>, Vec<ChunkOut>)>,
    /// The file offset of its first sample.
    oldest: u64,
}

pub struct Profiler {
    arch: Arch,
    options: Options,
    files: FxHashMap<Vec<u8>, Arc<FileInfo>>,
    processes: FxHashMap<i32, Process>,
    /// Each thread's comm, as an index into `comm_names`.
    comms: FxHashMap<i32, u32>,
    comm_names: Arc<Vec<Arc<str>>>,
    comm_ids: FxHashMap<Arc<str>, u32>,
    kernel: Arc<KernelSymbolsLoader>,
    /// Collapsed: the stacks counted by name.
    folding: Arc<folded::Folding>,
    /// The vdso image the recording's processes had, when known.
    vdso: Option<Arc<Data>>,
    /// The build id `HEADER_BUILD_ID` records for each file name.
    recorded: FxHashMap<Vec<u8>, Vec<u8>>,
    /// Each process's perf map, read at its first anonymous executable
    /// mapping (None inside: it has none).
    perf_maps: FxHashMap<i32, Option<Arc<JitMap>>>,
    /// Where each process's jitdump was mapped (`jit-PID.dump`).
    jit_dumps: FxHashMap<i32, std::path::PathBuf>,
    decoder: Arc<Decoder>,
    spare: Arc<Spare>,
    /// Where the damage `summary.error` tells of is.
    damage_at: u64,
    pub summary: Summary,
}

impl Profiler {
    /// `vdso_build_id`: the build id perf.data records for `[vdso]`; if this
    /// process's own vdso has the same (a recording made on this kernel),
    /// its image serves for the recording's.
    pub fn new(arch: Arch, options: Options, vdso_build_id: Option<&[u8]>) -> Self {
        let vdso = vdso_build_id.and_then(own_vdso).map(Arc::new);
        let mut profiler = Profiler {
            vdso,
            recorded: FxHashMap::default(),
            perf_maps: FxHashMap::default(),
            jit_dumps: FxHashMap::default(),
            arch,
            options,
            files: FxHashMap::default(),
            processes: FxHashMap::default(),
            comms: FxHashMap::default(),
            comm_names: Arc::default(),
            comm_ids: FxHashMap::default(),
            kernel: Arc::default(),
            folding: Arc::default(),
            decoder: Arc::default(),
            spare: Arc::default(),
            damage_at: u64::MAX,
            summary: Summary::default(),
        };
        profiler.comm_id(":-1");
        profiler
    }

    /// Read every event of `perf`, writing the samples to `out` as they are
    /// unwound (and, for collapsed output, the folded stacks at the end).
    /// A damaged file stops the reading with `summary.error` set; the
    /// samples before the damage have been written. A sample damaged inside
    /// (found when it is decoded in full) is left out, and reported the same
    /// way unless there is damage earlier in the file.
    pub fn run<R: Read + Seek, W: Write>(
        &mut self,
        perf: &mut PerfFile<R>,
        out: &mut W,
    ) -> std::io::Result<()> {
        let header = perf.header();
        for entry in &header.build_ids {
            self.recorded.insert(entry.filename.as_bytes().to_vec(), entry.build_id.clone());
        }
        if let Some(config) = self.options.debuginfod.take() {
            self.fetch_missing(&config);
        }
        let has = |bits: u64| header.attrs.iter().any(|a| a.sample_type & bits == bits);
        self.summary.call_graph = if has(PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER) {
            "dwarf"
        } else if has(PERF_SAMPLE_CALLCHAIN) {
            "callchain"
        } else {
            "none"
        };
        // Kernel frames need /proc/kallsyms: read it beside the unwinding.
        if header.attrs.iter().any(|a| a.sample_type & PERF_SAMPLE_CALLCHAIN != 0) {
            let kernel_id = header.build_ids.iter().find(|b| b.filename == "[kernel.kallsyms]");
            let cached = kernel_id.zip(process::perf_buildid_dir()).map(|(id, dir)| {
                let hex = crate::space::finder::hex(&id.build_id);
                (dir.join("[kernel.kallsyms]").join(hex).join("kallsyms"), id.build_id.clone())
            });
            self.kernel.start(cached);
        }
        let data_end = header.data_offset.saturating_add(header.data_size);
        let mut progress = Reporter::new(header.data_offset, data_end);
        let map = perf.mapped().cloned();
        let map: Option<&[u8]> = map.as_deref().map(|d| &**d);
        rayon::in_place_scope(|scope| self.read(scope, perf, map, &mut progress, out))?;
        progress.finish(&mut self.options.progress, self.summary.samples);
        self.summary.processes = self.processes.len();
        if self.options.format == Format::Collapsed {
            self.write_folded(out)?;
        }
        out.flush()
    }

    /// The reading loop of `run`, sending batches off to `scope`.
    fn read<'a, 's, R: Read + Seek, W: Write>(
        &mut self,
        scope: &rayon::Scope<'s>,
        perf: &mut PerfFile<R>,
        map: Option<&'a [u8]>,
        progress: &mut Reporter,
        out: &mut W,
    ) -> std::io::Result<()>
    where
        'a: 's,
    {
        let mut batch: Vec<Pending<'a>> = Vec::with_capacity(self.options.batch);
        let mut inflight: Option<InFlight<'a>> = None;
        // Events are written per CPU buffer, so a thread's samples can come
        // before its FORK in the file. As perf does, events are queued and,
        // at each FINISHED_ROUND, those up to the highest time seen before
        // the previous round marker are processed in time order.
        let mut queue: Vec<Queued<'_>> = Vec::new();
        let (mut seq, mut last_time, mut round_max, mut flush_limit) = (0u64, 0u64, 0u64, None);
        let mut samples_read = 0u64;
        loop {
            let (offset, size) = match perf.next_record() {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(e) => {
                    self.damage(e.offset(), e.to_string());
                    break;
                }
            };
            if !Arc::ptr_eq(&self.decoder, perf.decoder()) {
                self.decoder = perf.decoder().clone();
            }
            let rec = perf.bytes(offset, size);
            // A sample is only peeked at here (time and ids): the worker
            // decodes the rest, and reports it if damaged. `None`: the end
            // of a round.
            let decoded = if rec.get(..4) == Some(&PERF_RECORD_SAMPLE.to_le_bytes()[..]) {
                self.decoder.sample_ids(rec, offset).map(|ids| match ids {
                    Some(ids) => Some((ids.time, true, Some((ids.pid, ids.tid)))),
                    None => Some((None, false, None)),
                })
            } else {
                self.decoder.decode(rec, offset).map(|event| match event {
                    Event::FinishedRound => None,
                    event => Some((event.time(), keeps(&event), None)),
                })
            };
            let (time, keep, sample) = match decoded {
                Ok(None) => {
                    if let Some(limit) = flush_limit {
                        queue.sort_unstable_by_key(|q| (q.time, q.seq));
                        let ready = queue.partition_point(|q| q.time <= limit);
                        for q in queue.drain(..ready) {
                            self.process(q, &mut batch);
                            if batch.len() >= self.options.batch {
                                self.flush(scope, &mut batch, &mut inflight, out)?;
                            }
                        }
                        // Records before the oldest still queued, batched or
                        // being unwound are done with.
                        let queued = queue.iter().map(|q| q.offset);
                        let oldest = queued
                            .chain(batch.iter().map(|p| p.offset))
                            .chain(inflight.as_ref().map(|f| f.oldest))
                            .min();
                        perf.release_before(oldest.unwrap_or(offset));
                        progress.report(&mut self.options.progress, offset, samples_read);
                    }
                    flush_limit = Some(round_max);
                    continue;
                }
                Ok(Some(record)) => record,
                Err(e) => {
                    self.damage(e.offset(), e.to_string());
                    break;
                }
            };
            samples_read += u64::from(sample.is_some());
            last_time = time.unwrap_or(last_time);
            if !keep {
                continue;
            }
            round_max = round_max.max(last_time);
            let rec = match map {
                Some(map) => map.get(offset as usize..offset as usize + size).map(Cow::Borrowed),
                None => Some(Cow::Owned(rec.to_vec())),
            };
            if let Some(rec) = rec {
                queue.push(Queued { time: last_time, seq, offset, sample, rec });
                seq += 1;
            }
        }
        queue.sort_unstable_by_key(|q| (q.time, q.seq));
        for q in queue {
            self.process(q, &mut batch);
            if batch.len() >= self.options.batch {
                self.flush(scope, &mut batch, &mut inflight, out)?;
            }
        }
        self.flush(scope, &mut batch, &mut inflight, out)?;
        match inflight.take() {
            Some(last) => self.absorb(last, out),
            None => Ok(()),
        }
    }

    /// Apply one record, in time order: a sample joins the batch.
    fn process<'a>(&mut self, q: Queued<'a>, batch: &mut Vec<Pending<'a>>) {
        if let Some((pid, tid)) = q.sample {
            let comm = self.comms.get(&tid).copied().unwrap_or(0);
            let process = self.processes.get(&pid).cloned().unwrap_or_default();
            batch.push(Pending { offset: q.offset, rec: q.rec, comm, process });
            return;
        }
        let decoder = self.decoder.clone();
        match decoder.decode(&q.rec, q.offset) {
            Ok(Event::Mmap(m)) => {
                if let Some(symbol) = m.filename.strip_prefix(b"[kernel.kallsyms]") {
                    let symbol = String::from_utf8_lossy(symbol).into_owned();
                    let _ = self.kernel.reference.set((symbol, m.pgoff));
                }
                self.map(m.pid, m.start, m.len, m.pgoff, m.filename);
            }
            // An exec's new mappings replace the old ones they overlap (as
            // perf keeps them): the process's modules are not cleared here,
            // since mmaps of the new program may sort before the COMM.
            Ok(Event::Comm { tid, comm, .. }) => {
                let id = self.comm_id(&String::from_utf8_lossy(comm));
                self.comms.insert(tid, id);
            }
            Ok(Event::Fork { pid, ppid, tid, ptid, .. }) => {
                if let Some(&comm) = self.comms.get(&ptid) {
                    self.comms.insert(tid, comm);
                }
                if pid != ppid {
                    let parent = self.processes.get(&ppid).cloned().unwrap_or_default();
                    self.processes.insert(pid, parent);
                }
            }
            _ => {}
        }
    }

    /// Damage found at file offset `offset`: the first in the file is the
    /// one reported.
    fn damage(&mut self, offset: u64, error: String) {
        if self.summary.error.is_none() || offset < self.damage_at {
            (self.damage_at, self.summary.error) = (offset, Some(error));
        }
    }

    fn comm_id(&mut self, comm: &str) -> u32 {
        if let Some(&id) = self.comm_ids.get(comm) {
            return id;
        }
        let id = self.comm_names.len() as u32;
        let name: Arc<str> = comm.into();
        Arc::make_mut(&mut self.comm_names).push(name.clone());
        self.comm_ids.insert(name, id);
        id
    }

    /// Send a batch off to be unwound and formatted in parallel while the
    /// reading goes on, and write the batch sent before it (in order).
    fn flush<'a, 's, W: Write>(
        &mut self,
        scope: &rayon::Scope<'s>,
        batch: &mut Vec<Pending<'a>>,
        inflight: &mut Option<InFlight<'a>>,
        out: &mut W,
    ) -> std::io::Result<()>
    where
        'a: 's,
    {
        if batch.is_empty() {
            return Ok(());
        }
        let ctx = Context {
            arch: self.arch,
            format: self.options.format,
            inline: self.options.inline,
            max_frames: self.options.max_frames,
            strategies: self.options.strategies,
            decoder: self.decoder.clone(),
            kernel: self.kernel.clone(),
            comms: self.comm_names.clone(),
            spare: self.spare.clone(),
            folding: self.folding.clone(),
        };
        let work = std::mem::replace(batch, Vec::with_capacity(self.options.batch));
        // In time order, not file order: the lowest offset is anywhere.
        let oldest = work.iter().map(|p| p.offset).min().unwrap_or(0);
        let (send, done) = std::sync::mpsc::channel();
        scope.spawn(move |_| {
            let chunks: Vec<ChunkOut> = work.par_chunks(CHUNK).map(|c| ctx.work(c)).collect();
            let _ = send.send((work, chunks));
        });
        match inflight.replace(InFlight { done, oldest }) {
            Some(previous) => self.absorb(previous, out),
            None => Ok(()),
        }
    }

    /// Wait for a batch sent off (helping the workers meanwhile) and write
    /// it, or count its stacks.
    fn absorb<W: Write>(&mut self, batch: InFlight<'_>, out: &mut W) -> std::io::Result<()> {
        let (_, chunks) = loop {
            match batch.done.try_recv() {
                Ok(done) => break done,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return Err(std::io::Error::other("a worker thread failed"));
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        if let Ok(done) = batch.done.recv_timeout(Duration::from_micros(200)) {
                            break done;
                        }
                    }
                }
            }
        };
        for mut done in chunks {
            self.summary.samples += done.samples;
            self.summary.complete += done.complete;
            self.summary.frames += done.frames;
            if let Some((offset, error)) = done.damage.take() {
                self.damage(offset, error);
            }
            out.write_all(done.text.as_bytes())?;
            out.write_all(&done.bytes)?;
            self.spare.give(done.emptied());
        }
        Ok(())
    }
}

/// Whether a record matters once its time comes.
fn keeps(event: &Event<'_>) -> bool {
    match event {
        Event::Sample(_) | Event::Comm { .. } | Event::Fork { .. } => true,
        Event::Mmap(m) => m.executable(),
        _ => false,
    }
}

/// The share of the data section read, reported to `Options::progress` at
/// most every `PROGRESS_EVERY`.
struct Reporter {
    start: u64,
    total: u64,
    next: Instant,
}

impl Reporter {
    fn new(start: u64, end: u64) -> Self {
        Reporter { start, total: end.saturating_sub(start).max(1), next: Instant::now() }
    }

    /// The reading is at file offset `offset`, after `samples` samples.
    fn report(&mut self, to: &mut Option<ProgressFn>, offset: u64, samples: u64) {
        let Some(report) = to else { return };
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + PROGRESS_EVERY;
        let done = offset.saturating_sub(self.start).min(self.total);
        report(Progress { done, total: self.total, samples, finished: false });
    }

    /// The run is over: `samples` were unwound.
    fn finish(&mut self, to: &mut Option<ProgressFn>, samples: u64) {
        if let Some(report) = to {
            report(Progress { done: self.total, total: self.total, samples, finished: true });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn progress_reports_the_share_read_then_the_end() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink = told.clone();
        let mut to: Option<ProgressFn> = Some(Box::new(move |p| sink.lock().unwrap().push(p)));
        let mut reporter = Reporter::new(1000, 5000);
        reporter.report(&mut to, 2000, 7);
        reporter.finish(&mut to, 9);
        // Past the end (a data size the file's records outrun): the whole.
        Reporter::new(1000, 5000).report(&mut to, 9000, 10);
        let told = told.lock().unwrap();
        let at = |done, samples, finished| Progress { done, total: 4000, samples, finished };
        assert_eq!(*told, [at(1000, 7, false), at(4000, 9, true), at(4000, 10, false)]);
        // No data section: a total of one byte, never a division by zero.
        assert_eq!(Reporter::new(1000, 1000).total, 1);
    }
}
