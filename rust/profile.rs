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
//! Folded stacks are counted twice, the way a stack-trace database is used:
//! by address (process, comm and pcs) as samples come, then each distinct
//! address trace is symbolized once and counted by name.

use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::{Read, Seek, Write};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::arch::Arch;
use crate::cfi::{Data, Module, UnwindInfo};
use crate::memory::Buffer;
use crate::modules::ModuleSet;
use crate::perf::{
    sample_registers, Decoder, Event, PerfFile, Sample, Words, PERF_CONTEXT_HV,
    PERF_CONTEXT_KERNEL, PERF_CONTEXT_USER, PERF_RECORD_SAMPLE, PERF_SAMPLE_CALLCHAIN,
    PERF_SAMPLE_REGS_ABI_NONE,
};
use crate::space::Segment;
use crate::stackdb::StackDb;
use crate::symbols::SymbolTable;
use crate::unwind::{Frame, Unwinder};

/// How the samples are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `perf script`'s shape.
    Text,
    /// One JSON object per sample.
    JsonLines,
    /// Folded stacks, `comm;outer;...;inner count`, counted in a StackDb.
    Collapsed,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub format: Format,
    /// The most frames of a sample's user stack; None: as many as its stack
    /// copy can hold.
    pub max_frames: Option<usize>,
    /// Samples unwound together; bounds memory (a stream's samples are
    /// copies; a mapped file's are read in place).
    pub batch: usize,
    /// Where separate debug files are (`/usr/lib/debug`).
    pub debug_root: std::path::PathBuf,
    /// Draw a progress bar on stderr once a run has lasted this long.
    pub progress: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            format: Format::Text,
            max_frames: None,
            batch: 1024,
            debug_root: "/usr/lib/debug".into(),
            progress: None,
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
    /// The first damage in the file (by offset): a record the reading
    /// stopped at, after the samples before it, or a damaged sample, left
    /// out.
    pub error: Option<String>,
}

/// A file mapped by the profiled processes, with what symbolizing needs.
struct FileInfo {
    /// Never reused in this process (caches key on it).
    id: u64,
    path: Arc<str>,
    /// None when the file could not be read (missing, not ELF).
    unwind: Option<Arc<UnwindInfo>>,
    /// PT_LOADs, to place mappings.
    loads: Vec<Segment>,
    data: Option<Arc<Data>>,
    symbols: OnceLock<Option<SymbolTable>>,
}

/// A module as mapped in one process: which file, at which bias.
#[derive(Clone)]
struct Placed {
    range: Range<u64>,
    bias: u64,
    /// File offset the mapping starts at.
    pgoff: u64,
    file: Arc<FileInfo>,
}

/// A process's address space at one moment; replaced, never changed.
#[derive(Clone, Default)]
struct Process {
    /// Tells snapshots apart in the folded stacks' address keys (0: none).
    id: u64,
    modules: Arc<ModuleSet>,
    /// The same modules, for symbolizing (sorted by start).
    placed: Arc<Vec<Placed>>,
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

/// What a worker made of a chunk of samples.
#[derive(Default)]
struct ChunkOut {
    text: String,
    /// Collapsed: per sample, its index in the chunk, the key's length,
    /// then the key (process id, comm, user frame count, user pcs with
    /// bit 63 set when interrupted, kernel ips).
    keys: Vec<u64>,
    samples: u64,
    complete: u64,
    frames: u64,
    /// The first sample found damaged: its offset and what is wrong.
    damage: Option<(u64, String)>,
}

/// Chunk outputs written out, handed back for workers to fill again. With a
/// new 128 KiB text buffer per chunk, malloc kept growing and trimming its
/// heaps: a third of the run's page faults (5,000 per 40,000 samples).
#[derive(Default)]
struct Spare(Mutex<Vec<ChunkOut>>);

impl Spare {
    fn take(&self) -> ChunkOut {
        self.0.lock().ok().and_then(|mut spare| spare.pop()).unwrap_or_default()
    }

    /// Keep `out`'s buffers, emptied; nothing else of it.
    fn give(&self, out: ChunkOut) {
        let ChunkOut { mut text, mut keys, .. } = out;
        text.clear();
        keys.clear();
        if let Ok(mut spare) = self.0.lock() {
            spare.push(ChunkOut { text, keys, ..ChunkOut::default() });
        }
    }
}

/// A worker thread's reusable state.
#[derive(Default)]
struct Worker {
    unwinder: Option<Unwinder>,
    frames: Vec<Frame>,
    symbols: SymbolCache,
    lines: LineCache,
}

/// A new id for a file or a process snapshot, unique in this process.
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Text lines of user frames a worker formatted, direct-mapped by
/// (process snapshot, pc): a line depends on nothing else, and samples
/// repeat the same return addresses. The strings are reused, so a warm
/// cache allocates nothing.
struct LineCache {
    /// (process snapshot id, pc with bit 63 set when interrupted, line).
    slots: Box<[(u64, u64, String)]>,
}

impl Default for LineCache {
    fn default() -> Self {
        let slots = (0..CACHE_SLOTS).map(|_| (0, 0, String::new())).collect();
        LineCache { slots }
    }
}

impl LineCache {
    /// The line of frame `f` of `process`, made by `fill` if not cached.
    fn line(&mut self, process: &Process, f: &Frame, fill: impl FnOnce(&mut String)) -> &str {
        let (key, word) = (process.id, f.pc | u64::from(f.lookup_pc() == f.pc) << 63);
        let slot = &mut self.slots[cache_slot(key, word)];
        // An empty line is a slot never filled (process snapshot 0 exists).
        if slot.0 != key || slot.1 != word || slot.2.is_empty() {
            slot.2.clear();
            fill(&mut slot.2);
            (slot.0, slot.1) = (key, word);
        }
        &slot.2
    }
}

/// Symbol lookups a worker made, direct-mapped by (file, ELF address):
/// samples hit the same few hundred return addresses over and over.
struct SymbolCache {
    /// (file id, ELF address, symbol index or `NO_SYMBOL`); file ids start at 1.
    slots: Box<[(u64, u64, u32)]>,
}

const NO_SYMBOL: u32 = u32::MAX;

/// Slots of a worker's direct-mapped caches.
const CACHE_SLOTS: usize = 1 << 12;

/// The slot of `(id, value)` in a cache of `CACHE_SLOTS`: the top bits of a
/// multiplicative hash.
fn cache_slot(id: u64, value: u64) -> usize {
    ((value ^ id.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        >> (64 - CACHE_SLOTS.trailing_zeros())) as usize
}

impl Default for SymbolCache {
    fn default() -> Self {
        SymbolCache { slots: vec![(0, 0, NO_SYMBOL); CACHE_SLOTS].into_boxed_slice() }
    }
}

impl SymbolCache {
    fn index(&mut self, file: &FileInfo, table: &SymbolTable, address: u64) -> Option<usize> {
        let key = file.id;
        let slot = &mut self.slots[cache_slot(key, address)];
        if slot.0 != key || slot.1 != address {
            let index = table.index(address).map_or(NO_SYMBOL, |i| i as u32);
            *slot = (key, address, index);
        }
        (slot.2 != NO_SYMBOL).then_some(slot.2 as usize)
    }
}

thread_local! {
    static WORKER: RefCell<Worker> = RefCell::new(Worker::default());
}

/// What workers read: a snapshot, shared, taken when a batch is sent off.
struct Context {
    arch: Arch,
    format: Format,
    max_frames: Option<usize>,
    decoder: Arc<Decoder>,
    debug_root: Arc<std::path::Path>,
    kernel: Arc<KernelSymbolsLoader>,
    comms: Arc<Vec<Arc<str>>>,
    spare: Arc<Spare>,
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
    /// Collapsed: distinct address traces, and the process each was in.
    by_address: StackDb,
    address_process: Vec<Process>,
    /// The vdso image the recording's processes had, when known.
    vdso: Option<Arc<Data>>,
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
            arch,
            options,
            files: FxHashMap::default(),
            processes: FxHashMap::default(),
            comms: FxHashMap::default(),
            comm_names: Arc::default(),
            comm_ids: FxHashMap::default(),
            kernel: Arc::default(),
            by_address: StackDb::new(),
            address_process: Vec::new(),
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
        // Kernel frames need /proc/kallsyms: read it beside the unwinding.
        if header.attrs.iter().any(|a| a.sample_type & PERF_SAMPLE_CALLCHAIN != 0) {
            let kernel_id = header.build_ids.iter().find(|b| b.filename == "[kernel.kallsyms]");
            let cached = kernel_id.zip(std::env::var_os("HOME")).map(|(id, home)| {
                let hex: String = id.build_id.iter().map(|b| format!("{b:02x}")).collect();
                std::path::Path::new(&home)
                    .join(".debug/[kernel.kallsyms]")
                    .join(hex)
                    .join("kallsyms")
            });
            self.kernel.start(cached);
        }
        let data_end = header.data_offset.saturating_add(header.data_size);
        let mut progress =
            self.options.progress.map(|after| Progress::new(header.data_offset, data_end, after));
        let map = perf.mapped().cloned();
        let map: Option<&[u8]> = map.as_deref().map(|d| &**d);
        rayon::in_place_scope(|scope| self.read(scope, perf, map, progress.as_mut(), out))?;
        if let Some(p) = &mut progress {
            p.finish(self.summary.samples);
        }
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
        mut progress: Option<&mut Progress>,
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
                        if let Some(p) = progress.as_deref_mut() {
                            p.show(offset, samples_read);
                        }
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

    /// A new executable mapping in process `pid`.
    fn map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, filename: &[u8]) {
        let file = self.file(filename);
        let range = start..start.saturating_add(len);
        let id = next_id();
        let process = self.processes.entry(pid).or_default();
        let mut modules = process.modules.without_range(range.clone());
        let mut placed: Vec<Placed> = process
            .placed
            .iter()
            .filter(|p| p.range.end <= range.start || range.end <= p.range.start)
            .cloned()
            .collect();
        let bias = crate::space::bias(&file.loads, start, pgoff, 0x1000);
        if let Some(info) = &file.unwind {
            let elf_range = range.start.wrapping_sub(bias)..range.end.wrapping_sub(bias);
            if let Ok(module) = Module::place(file.path.to_string(), info.clone(), elf_range, bias)
            {
                if let Ok(set) = modules.with_module(Arc::new(module)) {
                    modules = set;
                }
            }
        }
        let at = placed.partition_point(|p| p.range.start < range.start);
        placed.insert(at, Placed { range, bias, pgoff, file });
        *process = Process { id, modules: Arc::new(modules), placed: Arc::new(placed) };
    }

    fn file(&mut self, filename: &[u8]) -> Arc<FileInfo> {
        if let Some(f) = self.files.get(filename) {
            return f.clone();
        }
        let path: Arc<str> = String::from_utf8_lossy(filename).into();
        let data = if filename == b"[vdso]" {
            self.vdso.clone()
        } else {
            std::fs::File::open(&*path)
                .ok()
                // SAFETY: read-only mapping of a file assumed not to shrink while in use.
                .and_then(|f| unsafe { memmap2::Mmap::map(&f) }.ok())
                .map(|m| Arc::new(Data::Mapped(m)))
        };
        let mut unwind = None;
        let mut loads = Vec::new();
        if let Some(data) = &data {
            if let Ok(elf) = crate::elf::read_elf(data) {
                if elf.machine == self.arch.elf_machine() {
                    // No .debug_frame of its own: its separate debug file's,
                    // if there is one (.eh_frame may lack functions).
                    let debug = match elf.sections.debug_frame {
                        None if filename.starts_with(b"/") => {
                            crate::debugfile::separate_debug_frame(
                                data,
                                Some(std::path::Path::new(&*path)),
                                &self.options.debug_root,
                            )
                            .map(|(bytes, section, _)| (bytes, section))
                        }
                        _ => None,
                    };
                    unwind =
                        UnwindInfo::with_debug_file(self.arch, data.clone(), elf.sections, debug)
                            .ok()
                            .map(Arc::new);
                }
            }
            if let Ok(summary) = crate::elf::summarize(data) {
                loads = summary.segments().collect();
            }
        }
        if unwind.is_none() && path.starts_with('/') {
            self.summary.modules_missing.push(path.to_string());
        }
        let id = next_id();
        let info = Arc::new(FileInfo { id, path, unwind, loads, data, symbols: OnceLock::new() });
        self.files.insert(filename.to_vec(), info.clone());
        info
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
            max_frames: self.options.max_frames,
            decoder: self.decoder.clone(),
            debug_root: self.options.debug_root.as_path().into(),
            kernel: self.kernel.clone(),
            comms: self.comm_names.clone(),
            spare: self.spare.clone(),
        };
        let work = std::mem::replace(batch, Vec::with_capacity(self.options.batch));
        let oldest = work.first().map_or(0, |p| p.offset);
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
        let (batch, chunks) = loop {
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
        for (chunk, mut done) in batch.chunks(CHUNK).zip(chunks) {
            self.summary.samples += done.samples;
            self.summary.complete += done.complete;
            self.summary.frames += done.frames;
            if let Some((offset, error)) = done.damage.take() {
                self.damage(offset, error);
            }
            out.write_all(done.text.as_bytes())?;
            let mut keys = &done.keys[..];
            while let [at, len, rest @ ..] = keys {
                let (key, next) = rest.split_at((*len as usize).min(rest.len()));
                let index = self.by_address.add(key) as usize;
                if index == self.address_process.len() {
                    self.address_process.push(chunk[*at as usize].process.clone());
                }
                keys = next;
            }
            self.spare.give(done);
        }
        Ok(())
    }

    /// Each distinct address trace symbolized once, counted by name. A
    /// folded stack's names go outermost first, as stackcollapse-perf gives
    /// them: comm, user functions, kernel functions (`_[k]`).
    fn write_folded<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        let mut folded = StackDb::new();
        let mut names = Names::default();
        let mut symbols = SymbolCache::default();
        let mut line = String::new();
        let mut ids = Vec::new();
        for (index, key, count) in self.by_address.iter() {
            let process = &self.address_process[index as usize];
            let [_, comm, n_user, rest @ ..] = key else { continue };
            let comm_name = self.comm_names.get(*comm as usize).map_or(":-1", |c| c);
            ids.clear();
            ids.push(names.id(Some(NameKey::Comm(*comm)), comm_name));
            let (user, kernel) = rest.split_at((*n_user as usize).min(rest.len()));
            for &word in user.iter().rev() {
                ids.push(names.frame_id((process.id, word), &mut line, |line| {
                    user_frame_name(self, process, word, line, &mut symbols)
                }));
            }
            for &ip in kernel.iter().rev() {
                ids.push(
                    names.frame_id((u64::MAX, ip), &mut line, |line| {
                        kernel_frame_name(self, ip, line)
                    }),
                );
            }
            folded.add_n(&ids, count);
        }
        for (_, ids, count) in folded.iter() {
            for (i, &id) in ids.iter().enumerate() {
                if i > 0 {
                    out.write_all(b";")?;
                }
                out.write_all(names.names[id as usize].as_bytes())?;
            }
            writeln!(out, " {count}")?;
        }
        Ok(())
    }
}

/// What a folded name is the name of.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum NameKey {
    Comm(u64),
    /// A file's (its `FileInfo`'s address) symbol, by index.
    Symbol(usize, usize),
    /// A kernel symbol, by index.
    Kernel(usize),
}

/// Whether a record matters once its time comes.
fn keeps(event: &Event<'_>) -> bool {
    match event {
        Event::Sample(_) | Event::Comm { .. } | Event::Fork { .. } => true,
        Event::Mmap(m) => m.executable(),
        _ => false,
    }
}

/// The names of a folded stack's frames, interned: each string is made,
/// hashed and stored once, found again by what it names.
#[derive(Default)]
struct Names {
    names: Vec<String>,
    ids: FxHashMap<String, u64>,
    /// A symbol, comm or kernel function's name id, by what it is.
    known: FxHashMap<NameKey, u64>,
    /// A frame's name id, by (process snapshot, pc word), or by
    /// (`u64::MAX`, ip) for a kernel frame: address traces share most of
    /// their frames.
    frames: FxHashMap<(u64, u64), u64>,
}

impl Names {
    /// The name id of the frame at `at`, its name made by `make` (in `buf`,
    /// or borrowed from elsewhere) the first time.
    fn frame_id<'s>(
        &mut self,
        at: (u64, u64),
        buf: &'s mut String,
        make: impl FnOnce(&'s mut String) -> (Option<NameKey>, &'s str),
    ) -> u64 {
        if let Some(&id) = self.frames.get(&at) {
            return id;
        }
        let (key, name) = make(buf);
        let id = self.id(key, name);
        self.frames.insert(at, id);
        id
    }

    fn id(&mut self, key: Option<NameKey>, name: &str) -> u64 {
        if let Some(&id) = key.as_ref().and_then(|k| self.known.get(k)) {
            return id;
        }
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u64;
                self.names.push(name.to_owned());
                self.ids.insert(name.to_owned(), id);
                id
            }
        };
        if let Some(key) = key {
            self.known.insert(key, id);
        }
        id
    }
}

/// A user frame's name in a folded stack (`word`: its pc, bit 63 set when
/// interrupted), and what the name is of, when it is a symbol.
fn user_frame_name<'a>(
    profiler: &'a Profiler,
    process: &'a Process,
    word: u64,
    buf: &'a mut String,
    symbols: &mut SymbolCache,
) -> (Option<NameKey>, &'a str) {
    let pc = word & !(1 << 63);
    let lookup = if word >> 63 != 0 { pc } else { pc.wrapping_sub(1) };
    let loc = locate(process, pc, lookup, &profiler.options.debug_root, Some(symbols));
    match (loc.function, loc.file) {
        (Some((name, _)), Some(file)) => {
            (loc.symbol.map(|i| NameKey::Symbol(file.id as usize, i)), name)
        }
        (_, Some(file)) => {
            buf.clear();
            let _ = write!(buf, "[{}+{:#x}]", file.path, loc.offset);
            (None, buf)
        }
        (_, None) => (None, "[unknown]"),
    }
}

/// A kernel frame's name in a folded stack.
fn kernel_frame_name<'a>(
    profiler: &'a Profiler,
    ip: u64,
    buf: &'a mut String,
) -> (Option<NameKey>, &'a str) {
    buf.clear();
    let found = profiler.kernel.lookup_index(ip);
    match found {
        Some((name, _, _)) => buf.push_str(name),
        None => {
            let _ = write!(buf, "[kernel+{ip:#x}]");
        }
    }
    buf.push_str("_[k]");
    (found.map(|(_, _, i)| NameKey::Kernel(i)), buf)
}

/// This process's vdso image, if its build id is `build_id`.
fn own_vdso(build_id: &[u8]) -> Option<Data> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (range, _) = line.split_once(' ')?;
    let (start, end) = range.split_once('-')?;
    let (start, end) =
        (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
    // SAFETY: the kernel maps the vdso readable for the life of the process.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, end.checked_sub(start)?) };
    let ours = crate::elf::summarize(image).ok()?.build_id?;
    // perf pads build ids to 20 bytes.
    (build_id.starts_with(&ours) && build_id[ours.len()..].iter().all(|&b| b == 0))
        .then(|| Data::Owned(image.to_vec()))
}

impl Context {
    /// Decode, unwind and format (or key) a chunk of samples.
    fn work(&self, chunk: &[Pending<'_>]) -> ChunkOut {
        let ctx = self;
        let mut out = ctx.spare.take();
        if ctx.format != Format::Collapsed {
            out.text.reserve(chunk.len() * 2048);
        }
        WORKER.with(|cell| {
            let worker = &mut *cell.borrow_mut();
            let Worker { unwinder, frames, symbols, lines } = worker;
            let unwinder = match unwinder {
                Some(u) if u.arch() == ctx.arch => u,
                _ => unwinder.insert(Unwinder::new(ctx.arch)),
            };
            for (at, p) in chunk.iter().enumerate() {
                if let Some(next) = chunk.get(at + 1) {
                    prefetch_sample(&next.rec);
                }
                let s = match ctx.decoder.decode(&p.rec, p.offset) {
                    Ok(Event::Sample(s)) => s,
                    Ok(_) => continue,
                    Err(e) => {
                        out.damage.get_or_insert((e.offset(), e.to_string()));
                        continue;
                    }
                };
                frames.clear();
                out.samples += 1;
                if let Some((pc, sp)) = user_registers(ctx.arch, &s) {
                    if !Arc::ptr_eq(unwinder.module_set(), &p.process.modules) {
                        unwinder.set_modules(p.process.modules.clone());
                    }
                    let mut stack = Buffer { start: sp.1, bytes: s.stack };
                    let end = unwinder.unwind_sample(pc, &sp.0, &mut stack, ctx.max_frames, frames);
                    out.complete += u64::from(end.reason.is_clean());
                    out.frames += frames.len() as u64;
                }
                let kernel = kernel_ips(s.callchain.unwrap_or_default());
                match ctx.format {
                    Format::Text => Unwound { ctx, p, s: &s, frames }.text(
                        kernel,
                        symbols,
                        lines,
                        &mut out.text,
                    ),
                    Format::JsonLines => {
                        Unwound { ctx, p, s: &s, frames }.json(kernel, symbols, &mut out.text)
                    }
                    Format::Collapsed => {
                        let len_at = out.keys.len() + 1;
                        out.keys.extend([at as u64, 0, p.process.id, u64::from(p.comm)]);
                        out.keys.push(frames.len() as u64);
                        out.keys
                            .extend(frames.iter().map(|f| f.pc | u64::from(f.interrupted) << 63));
                        out.keys.extend(kernel);
                        out.keys[len_at] = (out.keys.len() - len_at - 1) as u64;
                    }
                }
            }
        });
        out
    }
}

/// Ask for the parts of a sample record the unwinding reads first, to be
/// in the cache when its turn comes (it was read from the page cache, far
/// away): its fields, registers and the top of its stack copy, and the
/// stack's `dyn_size` at the end. Some 10% of a run on a 2-core VM.
fn prefetch_sample(rec: &[u8]) {
    const HEAD: usize = 1024;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let lines = rec.chunks(64).take(HEAD / 64).chain(rec.rchunks(64).take(1));
        for line in lines {
            // SAFETY: a prefetch is a hint: it reads nothing and cannot
            // fault, and the pointer is inside `rec` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (rec, HEAD);
}

/// The user pc, and the registers with sp, of a sample (None for a kernel
/// thread's sample, which has no user registers).
fn user_registers(arch: Arch, s: &Sample<'_>) -> Option<(u64, (crate::registers::Registers, u64))> {
    if s.regs_abi == PERF_SAMPLE_REGS_ABI_NONE {
        return None;
    }
    let (pc, regs) = sample_registers(arch, s);
    let sp = regs.get(arch.sp())?;
    Some((pc?, (regs, sp)))
}

/// The kernel part of a raw callchain (after PERF_CONTEXT_KERNEL). Only the
/// context markers switch context; any other value, even one in the marker
/// range, is an entry of the current context, as perf script shows it.
fn kernel_ips(chain: Words<'_>) -> impl Iterator<Item = u64> + '_ {
    let mut in_kernel = false;
    chain.iter().filter(move |&ip| match ip {
        PERF_CONTEXT_KERNEL => {
            in_kernel = true;
            false
        }
        PERF_CONTEXT_HV | PERF_CONTEXT_USER => {
            in_kernel = false;
            false
        }
        _ => in_kernel,
    })
}

/// A sample and its user frames, to print.
struct Unwound<'r> {
    ctx: &'r Context,
    p: &'r Pending<'r>,
    s: &'r Sample<'r>,
    frames: &'r [Frame],
}

impl Unwound<'_> {
    fn text(
        &self,
        kernel: impl Iterator<Item = u64>,
        symbols: &mut SymbolCache,
        lines: &mut LineCache,
        out: &mut String,
    ) {
        let Unwound { ctx, p, s, frames } = *self;
        let time = s.time.unwrap_or(0);
        let (secs, nanos) = (time / 1_000_000_000, time % 1_000_000_000);
        let comm = ctx.comms.get(p.comm as usize).map_or(":-1", |c| c);
        push_header(out, comm, s.tid, secs, nanos / 1000);
        for ip in kernel {
            out.push('\t');
            push_hex(out, ip, 16);
            out.push(' ');
            match ctx.kernel.lookup(ip) {
                Some((name, off)) => {
                    out.push_str(name);
                    out.push('+');
                    push_0x(out, off);
                }
                None => out.push_str("[unknown]"),
            }
            out.push_str(" ([kernel.kallsyms])\n");
        }
        for f in frames {
            out.push_str(lines.line(&p.process, f, |line| {
                frame_line(ctx, &p.process, f, symbols, line);
            }));
        }
        out.push('\n');
    }

    fn json(&self, kernel: impl Iterator<Item = u64>, symbols: &mut SymbolCache, out: &mut String) {
        let Unwound { ctx, p, s, frames } = *self;
        let comm = ctx.comms.get(p.comm as usize).map_or(":-1", |c| c);
        let _ = write!(
            out,
            "{{\"pid\": {}, \"tid\": {}, \"time\": {}, \"comm\": ",
            s.pid,
            s.tid,
            s.time.unwrap_or(0)
        );
        json_str(out, comm);
        out.push_str(", \"frames\": [");
        let mut first = true;
        for ip in kernel {
            if !std::mem::take(&mut first) {
                out.push_str(", ");
            }
            out.push_str("{\"pc\": \"");
            push_0x(out, ip);
            out.push_str("\", \"module\": \"[kernel.kallsyms]\", \"module_offset\": \"");
            push_0x(out, ip);
            out.push_str("\", \"function\": ");
            json_function(out, ctx.kernel.lookup(ip));
            out.push_str(", \"kernel\": true}");
        }
        for f in frames {
            if !std::mem::take(&mut first) {
                out.push_str(", ");
            }
            let loc = locate(&p.process, f.pc, f.lookup_pc(), &ctx.debug_root, Some(symbols));
            out.push_str("{\"pc\": \"");
            push_0x(out, f.pc);
            out.push_str("\", \"module\": ");
            match &loc.file {
                Some(file) => json_str(out, &file.path),
                None => out.push_str("null"),
            }
            out.push_str(", \"module_offset\": \"");
            push_0x(out, loc.offset);
            out.push_str("\", \"function\": ");
            json_function(out, loc.function);
            out.push_str(", \"kernel\": false}");
        }
        out.push_str("]}\n");
    }
}

/// A user frame's line, as perf script prints it: a caller at its return
/// address minus one (inside the call), addresses as offsets in the file.
fn frame_line(
    ctx: &Context,
    process: &Process,
    f: &Frame,
    symbols: &mut SymbolCache,
    out: &mut String,
) {
    let lookup = f.lookup_pc();
    let loc = locate(process, f.pc, lookup, &ctx.debug_root, Some(symbols));
    out.push('\t');
    push_hex(out, loc.file_offset, 16);
    out.push(' ');
    match loc.function {
        Some((name, off)) => {
            out.push_str(name);
            out.push('+');
            push_0x(out, off - (f.pc - lookup));
        }
        None => out.push_str("[unknown]"),
    }
    out.push_str(" (");
    out.push_str(loc.file.map_or("[unknown]", |f| &f.path));
    out.push_str(")\n");
}

/// `value` in lowercase hex, right-aligned in `width` (at most 16) columns.
fn push_hex(out: &mut String, value: u64, width: usize) {
    let digits = (64 - (value | 1).leading_zeros()).div_ceil(4) as usize;
    let len = digits.max(width.min(16));
    let mut buf = [b' '; 16];
    let mut v = value;
    for slot in buf[len - digits..len].iter_mut().rev() {
        *slot = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
    }
    out.push_str(std::str::from_utf8(&buf[..len]).unwrap_or_default());
}

/// A sample's first line, as `"{comm:>16} {tid:>6} {secs:5}.{micros:06}:\n"`
/// writes it (the formatting machinery took a tenth of the worker's time).
fn push_header(out: &mut String, comm: &str, tid: i32, secs: u64, micros: u64) {
    let chars = comm.chars().count();
    out.extend(std::iter::repeat_n(' ', 16usize.saturating_sub(chars)));
    out.push_str(comm);
    out.push(' ');
    push_decimal(out, i64::from(tid), 6, b' ');
    out.push(' ');
    push_decimal(out, secs as i64, 5, b' ');
    out.push('.');
    push_decimal(out, micros as i64, 6, b'0');
    out.push_str(":\n");
}

/// `value` in decimal, right-aligned in `width` columns, padded with `fill`
/// (`b'0'`: after the sign, as `{:0width$}` does).
fn push_decimal(out: &mut String, value: i64, width: usize, fill: u8) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut v = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let sign = usize::from(value < 0);
    let pad = width.saturating_sub(digits.len() - at + sign);
    if fill == b' ' {
        out.extend(std::iter::repeat_n(' ', pad));
    }
    if value < 0 {
        out.push('-');
    }
    if fill != b' ' {
        out.extend(std::iter::repeat_n(fill as char, pad));
    }
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

/// `value` as `0x...`, as `{:#x}` writes it.
fn push_0x(out: &mut String, value: u64) {
    out.push_str("0x");
    push_hex(out, value, 0);
}

/// A frame's `function` and `function_offset` values.
fn json_function(out: &mut String, function: Option<(&str, u64)>) {
    match function {
        Some((name, off)) => {
            json_str(out, name);
            out.push_str(", \"function_offset\": \"");
            push_0x(out, off);
            out.push('"');
        }
        None => out.push_str("null, \"function_offset\": null"),
    }
}

/// `value` as a JSON string.
fn json_str(out: &mut String, value: &str) {
    out.push('"');
    if !value.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(value);
        out.push('"');
        return;
    }
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Location<'p> {
    file: Option<&'p Arc<FileInfo>>,
    /// ELF address (pc − bias).
    offset: u64,
    /// Where the lookup address is in the file, as perf script prints it.
    file_offset: u64,
    /// The function's (demangled) name and the pc's offset in it.
    function: Option<(&'p str, u64)>,
    /// The function's index in its file's symbol table.
    symbol: Option<usize>,
}

fn locate<'p>(
    process: &'p Process,
    pc: u64,
    lookup: u64,
    debug_root: &std::path::Path,
    cache: Option<&mut SymbolCache>,
) -> Location<'p> {
    let placed = &process.placed;
    let i = placed.partition_point(|p| p.range.start <= lookup);
    let Some(p) = i.checked_sub(1).map(|i| &placed[i]).filter(|p| lookup < p.range.end) else {
        return Location {
            file: None,
            offset: pc,
            file_offset: lookup,
            function: None,
            symbol: None,
        };
    };
    let table = p.file.symbols.get_or_init(|| {
        let data = p.file.data.as_ref()?;
        SymbolTable::for_file(data, debug_root).ok()
    });
    let address = lookup.wrapping_sub(p.bias);
    let symbol = table.as_ref().and_then(|t| match cache {
        Some(cache) => cache.index(&p.file, t, address),
        None => t.index(address),
    });
    let function = table.as_ref().zip(symbol).and_then(|(t, i)| {
        let (name, start) = t.demangled(i)?;
        Some((name, address - start + (pc - lookup)))
    });
    let file_offset = lookup.wrapping_sub(p.range.start).wrapping_add(p.pgoff);
    Location { file: Some(&p.file), offset: pc.wrapping_sub(p.bias), file_offset, function, symbol }
}

/// The kernel's function symbols (a kallsyms file), sorted by address;
/// names are spans of the file's text, kept whole.
struct KernelSymbols {
    /// (address, start and length of the name in `text`), by address.
    symbols: Vec<(u64, u32, u32)>,
    /// The file (mapped when it can be): names are checked as UTF-8 when
    /// looked up.
    text: Data,
}

impl KernelSymbols {
    /// perf's copy of the recording machine's kallsyms, taken at record time
    /// (its build-id cache), else this machine's `/proc/kallsyms`.
    fn read(cached: Option<std::path::PathBuf>) -> Option<KernelSymbols> {
        let from_cache = cached.and_then(|path| crate::debugfile::map(&path));
        from_cache.and_then(KernelSymbols::parse).or_else(|| {
            // A /proc file cannot be mapped.
            KernelSymbols::parse(Data::Owned(std::fs::read("/proc/kallsyms").ok()?))
        })
    }

    fn parse(text: Data) -> Option<KernelSymbols> {
        let bytes = &text[..];
        let mut symbols: Vec<(u64, u32, u32)> = Vec::with_capacity(bytes.len() / 40);
        let mut at = 0;
        let mut sorted = true;
        // "ffffffff81000000 T _stext\t[module]\n": the address, a space, the
        // type, a space, the name, and for a module a tab and its name.
        while at < bytes.len() {
            let (addr, digits) = hex_prefix(&bytes[at..]);
            at += digits;
            // The name ends at a tab (a module's) or at the end of the line.
            let stop = memchr::memchr2(b'\t', b'\n', &bytes[at..]).map_or(bytes.len(), |n| at + n);
            let (kind_at, name_at) = (at, at + 3);
            at = match bytes.get(stop) {
                Some(b'\n') => stop + 1,
                _ => memchr::memchr(b'\n', &bytes[stop.min(bytes.len())..])
                    .map_or(bytes.len(), |n| stop + n + 1),
            };
            if name_at >= stop
                || !matches!(&bytes[kind_at..name_at], b" t " | b" T " | b" w " | b" W ")
            {
                continue;
            }
            if addr != 0 {
                sorted &= symbols.last().is_none_or(|last| last.0 <= addr);
                symbols.push((addr, name_at as u32, (stop - name_at) as u32));
            }
        }
        if symbols.is_empty() {
            return None; // kptr_restrict hides the addresses
        }
        if !sorted {
            // kallsyms is nearly sorted: a stable sort keeps aliases in order.
            symbols.sort_by_key(|s| s.0);
        }
        Some(KernelSymbols { symbols, text })
    }

    fn name(&self, i: usize) -> &str {
        let (_, at, len) = self.symbols[i];
        let name = self.text.get(at as usize..(at + len) as usize).unwrap_or_default();
        std::str::from_utf8(name).unwrap_or("[invalid name]")
    }

    fn address_of(&self, name: &str) -> Option<u64> {
        (0..self.symbols.len()).find(|&i| self.name(i) == name).map(|i| self.symbols[i].0)
    }

    #[cfg(test)]
    fn lookup(&self, ip: u64) -> Option<(&str, u64)> {
        self.lookup_index(ip).map(|(name, offset, _)| (name, offset))
    }

    fn lookup_index(&self, ip: u64) -> Option<(&str, u64, usize)> {
        let i = self.symbols.partition_point(|s| s.0 <= ip).checked_sub(1)?;
        Some((self.name(i), ip - self.symbols[i].0, i))
    }
}

/// Hex digit values by byte; 0x80 for a byte that is not one.
const HEX_DIGITS: [u8; 256] = {
    let mut table = [0x80u8; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u8;
        table[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// The hex number `bytes` start with, and how many digits it has (more than
/// 16 keep the last 16). A 64-bit kernel's addresses, 16 digits, take no
/// branch per digit.
fn hex_prefix(bytes: &[u8]) -> (u64, usize) {
    let not_digit = |at: usize| bytes.get(at).is_none_or(|&b| HEX_DIGITS[b as usize] & 0x80 != 0);
    if let Some(head) = bytes.get(..16) {
        let (mut value, mut bad) = (0u64, 0u8);
        for &b in head {
            let digit = HEX_DIGITS[b as usize];
            bad |= digit;
            value = value << 4 | u64::from(digit & 15);
        }
        if bad & 0x80 == 0 && not_digit(16) {
            return (value, 16);
        }
    }
    let mut value = 0u64;
    let mut at = 0;
    while !not_digit(at) {
        value = value << 4 | u64::from(HEX_DIGITS[bytes[at] as usize]);
        at += 1;
    }
    (value, at)
}

/// The kernel's symbols, read on a thread of their own as soon as the
/// recording is known to have kernel callchains, else on first use; and
/// moved to where the recording's kernel was (KASLR), by the symbol perf
/// recorded the kernel's mapping at (`[kernel.kallsyms]_text`).
#[derive(Default)]
struct KernelSymbolsLoader {
    table: OnceLock<Option<KernelSymbols>>,
    reading: Mutex<Option<JoinHandle<Option<KernelSymbols>>>>,
    /// (symbol, address) of the kernel's mapping in the recording.
    reference: OnceLock<(String, u64)>,
    /// Recording address − table address.
    shift: OnceLock<u64>,
}

impl KernelSymbolsLoader {
    fn start(&self, cached: Option<std::path::PathBuf>) {
        if let Ok(mut reading) = self.reading.lock() {
            if reading.is_none() && self.table.get().is_none() {
                *reading = std::thread::Builder::new()
                    .name("kallsyms".into())
                    .spawn(move || KernelSymbols::read(cached))
                    .ok();
            }
        }
    }

    fn lookup(&self, ip: u64) -> Option<(&str, u64)> {
        self.lookup_index(ip).map(|(name, offset, _)| (name, offset))
    }

    /// As `lookup`, with the symbol's index.
    fn lookup_index(&self, ip: u64) -> Option<(&str, u64, usize)> {
        let table = self
            .table
            .get_or_init(|| {
                let thread = self.reading.lock().ok().and_then(|mut r| r.take());
                match thread {
                    Some(thread) => thread.join().ok().flatten(),
                    None => KernelSymbols::read(None),
                }
            })
            .as_ref()?;
        let shift = *self.shift.get_or_init(|| {
            let Some((symbol, recorded)) = self.reference.get() else { return 0 };
            table.address_of(symbol).map_or(0, |at| recorded.wrapping_sub(at))
        });
        table.lookup_index(ip.wrapping_sub(shift))
    }
}

/// A progress bar on stderr: the share of the data section read, drawn
/// once a run has lasted a while (short runs show none), then every 100 ms.
struct Progress {
    start: u64,
    end: u64,
    next_draw: Instant,
    drawn: bool,
}

impl Progress {
    fn new(start: u64, end: u64, after: Duration) -> Self {
        Progress { start, end, next_draw: Instant::now() + after, drawn: false }
    }

    fn show(&mut self, offset: u64, samples: u64) {
        let now = Instant::now();
        if now < self.next_draw {
            return;
        }
        self.next_draw = now + Duration::from_millis(100);
        let span = self.end.saturating_sub(self.start).max(1);
        let done = offset.saturating_sub(self.start).min(span);
        self.draw(done as f64 / span as f64, samples);
    }

    fn draw(&mut self, fraction: f64, samples: u64) {
        const WIDTH: usize = 40;
        let filled = ((fraction * WIDTH as f64) as usize).min(WIDTH);
        let bar: String = "#".repeat(filled) + &"-".repeat(WIDTH - filled);
        eprint!("\r[{bar}] {:3.0}% {samples} samples", fraction * 100.0);
        self.drawn = true;
    }

    /// The bar at 100%, and the line ended, if it was drawn at all.
    fn finish(&mut self, samples: u64) {
        if self.drawn {
            self.draw(1.0, samples);
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_as_format_writes_it() {
        for value in [0u64, 1, 0xf, 0x10, 0x1234_5678, u64::MAX, 1 << 63, 0xffff_ffff_8100_0000] {
            for width in [0, 6, 16] {
                let mut ours = String::new();
                push_hex(&mut ours, value, width);
                assert_eq!(ours, format!("{value:>width$x}"));
            }
            let mut ours = String::new();
            push_0x(&mut ours, value);
            assert_eq!(ours, format!("{value:#x}"));
        }
    }

    #[test]
    fn hex_prefixes() {
        assert_eq!(hex_prefix(b"ffffffff81000000 T _stext"), (0xffff_ffff_8100_0000, 16));
        assert_eq!(hex_prefix(b"FFFFFFFF8100000a"), (0xffff_ffff_8100_000a, 16));
        assert_eq!(hex_prefix(b"c1000000 T _stext"), (0xc100_0000, 8));
        assert_eq!(hex_prefix(b"ffffffff8100000g"), (0x0fff_ffff_f810_0000, 15));
        assert_eq!(hex_prefix(b"1ffffffff81000000 T"), (0xffff_ffff_8100_0000, 17));
        assert_eq!(hex_prefix(b" T x"), (0, 0));
        assert_eq!(hex_prefix(b""), (0, 0));
    }

    #[test]
    fn header_as_format_writes_it() {
        for (comm, tid) in [("bsort", 26915), ("a-very-long-thread-name", -1), ("é", 7), ("", 0)] {
            for time in [0u64, 999, 16_902_669_834_123, u64::MAX / 1000] {
                let (secs, micros) = (time / 1_000_000_000, time % 1_000_000_000 / 1000);
                let mut ours = String::new();
                push_header(&mut ours, comm, tid, secs, micros);
                assert_eq!(ours, format!("{comm:>16} {tid:>6} {secs:5}.{micros:06}:\n"));
            }
        }
        for value in [0i64, 5, -5, 123_456, -123_456, i64::MIN, i64::MAX] {
            for width in [0, 3, 8, 21] {
                let mut ours = String::new();
                push_decimal(&mut ours, value, width, b'0');
                assert_eq!(ours, format!("{value:0width$}"));
            }
        }
    }

    #[test]
    fn json_strings_as_serde_writes_them() {
        for value in ["main", "a\"b", "back\\slash", "tab\there\nnl", "\u{1}ctl", "naïve ✓"] {
            let mut ours = String::new();
            json_str(&mut ours, value);
            assert_eq!(ours, serde_json::to_string(value).unwrap());
        }
    }

    #[test]
    fn kallsyms_lines() {
        let text = "ffffffff81000000 T _stext\nffffffff81000000 T _text\n\
                    0000000000000000 A fixed_percpu_data\nffffffff81001000 t helper\t[mod]\n\
                    ffffffff81000800 W weak_one\nffffffff81002000 D data_thing\nab\n\
                    ffffffff81003000 t after_short\nffffffff81004000 T\n";
        let table = KernelSymbols::parse(Data::Owned(text.as_bytes().to_vec())).unwrap();
        assert_eq!(table.lookup(0xffff_ffff_8100_0004), Some(("_text", 4)));
        assert_eq!(table.lookup(0xffff_ffff_8100_0900), Some(("weak_one", 0x100)));
        assert_eq!(table.lookup(0xffff_ffff_8100_1010), Some(("helper", 0x10)));
        assert_eq!(table.lookup(0xffff_ffff_8000_0000), None);
        assert_eq!(table.address_of("helper"), Some(0xffff_ffff_8100_1000));
        assert_eq!(table.lookup(0xffff_ffff_8100_3001), Some(("after_short", 1)));
        assert_eq!(table.lookup(0xffff_ffff_8100_4001), Some(("after_short", 0x1001)));
        assert!(
            KernelSymbols::parse(Data::Owned(b"0000000000000000 T hidden\n".to_vec())).is_none()
        );
    }
}
