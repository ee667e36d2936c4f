//! Profiles: every sample of a `perf record --call-graph dwarf` file
//! unwound against the address space of its process at that moment.
//!
//! The events are read in order on one thread, which keeps each process's
//! modules (an `Arc<ModuleSet>` snapshot per pid, replaced as mmaps, forks
//! and execs arrive) and gathers samples into batches. A batch is unwound in
//! parallel (rayon), one `Unwinder` per worker thread switching between the
//! processes' module sets, then symbolized and formatted in parallel and
//! written in order.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Seek, Write};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use rayon::prelude::*;

use crate::arch::Arch;
use crate::cfi::{Data, Module, UnwindInfo};
use crate::memory::Regions;
use crate::modules::ModuleSet;
use crate::perf::{
    sample_registers, Event, PerfFile, Sample, PERF_CONTEXT_HV, PERF_CONTEXT_KERNEL,
    PERF_CONTEXT_USER, PERF_SAMPLE_REGS_ABI_NONE,
};
use crate::registers::Registers;
use crate::stackdb::StackDb;
use crate::symbols::SymbolTable;
use crate::unwind::{EndReason, Frame, Unwinder};

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
    pub max_frames: usize,
    /// Samples unwound together; bounds memory (each holds its stack copy).
    pub batch: usize,
    /// Where separate debug files are (`/usr/lib/debug`).
    pub debug_root: std::path::PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            format: Format::Text,
            max_frames: 512,
            batch: 2048,
            debug_root: "/usr/lib/debug".into(),
        }
    }
}

/// What a run did, for the caller's summary and exit status.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub samples: u64,
    /// Samples whose user stack was unwound to its outermost frame.
    pub complete: u64,
    pub frames: u64,
    pub processes: usize,
    pub modules_missing: Vec<String>,
    /// The error that stopped the reading, after the samples before it.
    pub error: Option<String>,
}

/// A file mapped by the profiled processes, with what symbolizing needs.
struct FileInfo {
    path: Arc<str>,
    /// None when the file could not be read (missing, not ELF).
    unwind: Option<Arc<UnwindInfo>>,
    /// PT_LOADs: (p_vaddr, p_offset, p_filesz), to place mappings.
    loads: Vec<(u64, u64, u64)>,
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

#[derive(Clone, Default)]
struct Process {
    modules: Arc<ModuleSet>,
    /// The same modules, for symbolizing (sorted by start).
    placed: Arc<Vec<Placed>>,
}

/// An event taken out of the reader's buffer, to be applied in time order.
enum Owned {
    Sample { pid: i32, tid: i32, time: u64, kernel: Vec<u64>, user: Option<Box<UserState>> },
    Mmap { pid: i32, start: u64, len: u64, pgoff: u64, filename: Vec<u8> },
    Comm { tid: i32, comm: Vec<u8> },
    Fork { pid: i32, ppid: i32, tid: i32, ptid: i32 },
}

impl Owned {
    fn from_event(arch: Arch, event: &Event<'_>) -> Option<Owned> {
        Some(match event {
            Event::Sample(s) => Owned::Sample {
                pid: s.pid,
                tid: s.tid,
                time: s.time.unwrap_or(0),
                kernel: kernel_callchain(s.callchain.unwrap_or(&[])),
                user: user_state(arch, s).map(Box::new),
            },
            Event::Mmap(m) if m.executable() => Owned::Mmap {
                pid: m.pid,
                start: m.start,
                len: m.len,
                pgoff: m.pgoff,
                filename: m.filename.to_vec(),
            },
            Event::Comm { tid, comm, .. } => Owned::Comm { tid: *tid, comm: comm.to_vec() },
            Event::Fork { pid, ppid, tid, ptid, .. } => {
                Owned::Fork { pid: *pid, ppid: *ppid, tid: *tid, ptid: *ptid }
            }
            _ => return None,
        })
    }
}

struct Queued {
    time: u64,
    /// File order, to keep events of equal time in it.
    seq: u64,
    event: Owned,
}

/// A sample's user pc, registers, sp and stack copy.
type UserState = (u64, Registers, u64, Vec<u8>);

/// A sample waiting in a batch.
struct Pending {
    pid: i32,
    tid: i32,
    time: u64,
    comm: Arc<str>,
    process: Process,
    kernel: Vec<u64>,
    user: Option<Box<UserState>>,
}

/// An unwound sample.
struct Done {
    frames: Vec<Frame>,
    end: Option<EndReason>,
}

thread_local! {
    static UNWINDER: RefCell<Option<Unwinder>> = const { RefCell::new(None) };
}

pub struct Profiler {
    arch: Arch,
    options: Options,
    files: HashMap<Vec<u8>, Arc<FileInfo>>,
    processes: HashMap<i32, Process>,
    comms: HashMap<i32, Arc<str>>,
    kernel_symbols: OnceLock<Option<KernelSymbols>>,
    folded: StackDb,
    names: Vec<String>,
    name_ids: HashMap<String, u64>,
    /// The vdso image the recording's processes had, when known.
    vdso: Option<Arc<Data>>,
    pub summary: Summary,
}

impl Profiler {
    /// `vdso_build_id`: the build id perf.data records for `[vdso]`; if this
    /// process's own vdso has the same (a recording made on this kernel),
    /// its image serves for the recording's.
    pub fn new(arch: Arch, options: Options, vdso_build_id: Option<&[u8]>) -> Self {
        let vdso = vdso_build_id.and_then(own_vdso).map(Arc::new);
        Profiler {
            vdso,
            arch,
            options,
            files: HashMap::new(),
            processes: HashMap::new(),
            comms: HashMap::new(),
            kernel_symbols: OnceLock::new(),
            folded: StackDb::new(),
            names: Vec::new(),
            name_ids: HashMap::new(),
            summary: Summary::default(),
        }
    }

    /// Read every event of `perf`, writing the samples to `out` as they are
    /// unwound (and, for collapsed output, the folded stacks at the end).
    /// A damaged file stops the reading with `summary.error` set; the
    /// samples before the damage have been written.
    pub fn run<R: Read + Seek, W: Write>(
        &mut self,
        perf: &mut PerfFile<R>,
        out: &mut W,
    ) -> std::io::Result<()> {
        let mut batch: Vec<Pending> = Vec::with_capacity(self.options.batch);
        // Events are written per CPU buffer, so a thread's samples can come
        // before its FORK in the file. As perf does, events are queued and,
        // at each FINISHED_ROUND, those up to the highest time seen before
        // the previous round marker are processed in time order.
        let mut queue: Vec<Queued> = Vec::new();
        let (mut seq, mut last_time, mut round_max, mut flush_limit) = (0u64, 0u64, 0u64, None);
        loop {
            let event = match perf.next_event() {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(e) => {
                    self.summary.error = Some(e.to_string());
                    break;
                }
            };
            if let Event::FinishedRound = event {
                if let Some(limit) = flush_limit {
                    queue.sort_by_key(|q| (q.time, q.seq));
                    let ready = queue.partition_point(|q| q.time <= limit);
                    for q in queue.drain(..ready) {
                        self.process(q.event, &mut batch, out)?;
                    }
                }
                flush_limit = Some(round_max);
                continue;
            }
            last_time = event.time().unwrap_or(last_time);
            let Some(owned) = Owned::from_event(self.arch, &event) else { continue };
            round_max = round_max.max(last_time);
            queue.push(Queued { time: last_time, seq, event: owned });
            seq += 1;
        }
        queue.sort_by_key(|q| (q.time, q.seq));
        for q in queue {
            self.process(q.event, &mut batch, out)?;
        }
        self.flush(&mut batch, out)?;
        self.summary.processes = self.processes.len();
        if self.options.format == Format::Collapsed {
            self.write_folded(out)?;
        }
        out.flush()
    }

    /// Apply one event, in time order.
    fn process<W: Write>(
        &mut self,
        event: Owned,
        batch: &mut Vec<Pending>,
        out: &mut W,
    ) -> std::io::Result<()> {
        match event {
            Owned::Sample { pid, tid, time, kernel, user } => {
                batch.push(Pending {
                    pid,
                    tid,
                    time,
                    comm: self.comms.get(&tid).cloned().unwrap_or_else(|| Arc::from(":-1")),
                    process: self.processes.get(&pid).cloned().unwrap_or_default(),
                    kernel,
                    user,
                });
                if batch.len() >= self.options.batch {
                    self.flush(batch, out)?;
                }
            }
            Owned::Mmap { pid, start, len, pgoff, filename } => {
                self.map(pid, start, len, pgoff, &filename);
            }
            // An exec's new mappings replace the old ones they overlap (as
            // perf keeps them): the process's modules are not cleared here,
            // since mmaps of the new program may sort before the COMM.
            Owned::Comm { tid, comm, .. } => {
                self.comms.insert(tid, String::from_utf8_lossy(&comm).into());
            }
            Owned::Fork { pid, ppid, tid, ptid } => {
                if let Some(comm) = self.comms.get(&ptid).cloned() {
                    self.comms.insert(tid, comm);
                }
                if pid != ppid {
                    let parent = self.processes.get(&ppid).cloned().unwrap_or_default();
                    self.processes.insert(pid, parent);
                }
            }
        }
        Ok(())
    }

    /// A new executable mapping in process `pid`.
    fn map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, filename: &[u8]) {
        let file = self.file(filename);
        let range = start..start.saturating_add(len);
        let process = self.processes.entry(pid).or_default();
        let mut modules = process.modules.without_range(range.clone());
        let mut placed: Vec<Placed> = process
            .placed
            .iter()
            .filter(|p| p.range.end <= range.start || range.end <= p.range.start)
            .cloned()
            .collect();
        // bias = runtime - ELF address, from the segment the mapping starts in.
        let segment = file.loads.iter().find(|(_, off, size)| *off <= pgoff && pgoff < off + size);
        let bias = match segment {
            Some((vaddr, off, _)) => {
                (start.wrapping_sub(pgoff)).wrapping_sub(vaddr.wrapping_sub(*off))
            }
            None => start.wrapping_sub(pgoff),
        };
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
        *process = Process { modules: Arc::new(modules), placed: Arc::new(placed) };
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
                    unwind =
                        UnwindInfo::new(self.arch, data.clone(), elf.sections).ok().map(Arc::new);
                }
            }
            if let Ok(summary) = crate::elf::summarize(data) {
                loads = summary.loads.iter().map(|l| (l.0, l.2, l.3)).collect();
            }
        }
        if unwind.is_none() && path.starts_with('/') {
            self.summary.modules_missing.push(path.to_string());
        }
        let info = Arc::new(FileInfo { path, unwind, loads, data, symbols: OnceLock::new() });
        self.files.insert(filename.to_vec(), info.clone());
        info
    }

    /// Unwind a batch in parallel, then write it in order.
    fn flush<W: Write>(&mut self, batch: &mut Vec<Pending>, out: &mut W) -> std::io::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let arch = self.arch;
        let max_frames = self.options.max_frames;
        let done: Vec<Done> = batch.par_iter().map(|p| unwind_one(arch, max_frames, p)).collect();
        for d in &done {
            self.summary.samples += 1;
            self.summary.frames += d.frames.len() as u64;
            if d.end.is_some_and(|e| e.is_clean()) {
                self.summary.complete += 1;
            }
        }
        match self.options.format {
            Format::Collapsed => {
                for (p, d) in batch.iter().zip(&done) {
                    let names = self.frame_names(p, d);
                    let ids: Vec<u64> = names.into_iter().map(|n| self.name_id(n)).collect();
                    self.folded.add(&ids);
                }
            }
            format => {
                let debug_root = &self.options.debug_root;
                let kernel = &self.kernel_symbols;
                let texts: Vec<String> = batch
                    .par_iter()
                    .zip(&done)
                    .map(|(p, d)| render(format, p, d, debug_root, kernel))
                    .collect();
                for t in texts {
                    out.write_all(t.as_bytes())?;
                }
            }
        }
        batch.clear();
        Ok(())
    }

    fn name_id(&mut self, name: String) -> u64 {
        if let Some(&id) = self.name_ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u64;
        self.names.push(name.clone());
        self.name_ids.insert(name, id);
        id
    }

    /// comm, then frames outermost first, as stackcollapse-perf names them.
    fn frame_names(&self, p: &Pending, d: &Done) -> Vec<String> {
        let mut names = vec![p.comm.to_string()];
        for f in d.frames.iter().rev() {
            let loc = locate(&p.process, f.pc, f.lookup_pc(), &self.options.debug_root);
            names.push(match (loc.function, loc.file) {
                (Some((name, _)), _) => name,
                (None, Some(file)) => format!("[{}+{:#x}]", file.path, loc.offset),
                (None, None) => "[unknown]".to_owned(),
            });
        }
        for &ip in p.kernel.iter().rev() {
            let name = kernel_symbol(&self.kernel_symbols, ip)
                .map_or_else(|| format!("[kernel+{ip:#x}]"), |(n, _)| n.to_owned());
            names.push(format!("{name}_[k]"));
        }
        names
    }

    fn write_folded<W: Write>(&self, out: &mut W) -> std::io::Result<()> {
        for (_, ids, count) in self.folded.iter() {
            let line: Vec<&str> = ids.iter().map(|&i| self.names[i as usize].as_str()).collect();
            writeln!(out, "{} {count}", line.join(";"))?;
        }
        Ok(())
    }
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

fn unwind_one(arch: Arch, max_frames: usize, p: &Pending) -> Done {
    let Some((pc, regs, sp, stack)) = p.user.as_deref() else {
        return Done { frames: Vec::new(), end: None };
    };
    UNWINDER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let unwinder = match slot.as_mut() {
            Some(u) if u.arch() == arch => u,
            _ => slot.insert(Unwinder::new(arch)),
        };
        unwinder.set_modules(p.process.modules.clone());
        let mut regions = Regions::new();
        regions.add(*sp, stack);
        let mut frames = Vec::with_capacity(32);
        let end = unwinder.unwind(*pc, regs, &mut regions, max_frames, &mut frames);
        Done { frames, end: Some(end.reason) }
    })
}

/// The kernel part of a raw callchain (after PERF_CONTEXT_KERNEL). Only the
/// context markers switch context; any other value, even one in the marker
/// range, is an entry of the current context, as perf script shows it.
fn kernel_callchain(chain: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut in_kernel = false;
    for &ip in chain {
        match ip {
            PERF_CONTEXT_KERNEL => in_kernel = true,
            PERF_CONTEXT_HV | PERF_CONTEXT_USER => in_kernel = false,
            _ if in_kernel => out.push(ip),
            _ => {}
        }
    }
    out
}

/// The user registers and stack of a sample (None for a kernel thread).
fn user_state(arch: Arch, s: &Sample<'_>) -> Option<UserState> {
    if s.regs_abi == PERF_SAMPLE_REGS_ABI_NONE {
        return None;
    }
    let (pc, regs) = sample_registers(arch, s);
    let sp = regs.get(arch.sp())?;
    Some((pc?, regs, sp, s.stack.to_vec()))
}

struct Location {
    file: Option<Arc<FileInfo>>,
    /// ELF address (pc − bias).
    offset: u64,
    /// Where the lookup address is in the file, as perf script prints it.
    file_offset: u64,
    function: Option<(String, u64)>,
}

fn locate(process: &Process, pc: u64, lookup: u64, debug_root: &std::path::Path) -> Location {
    let placed = &process.placed;
    let i = placed.partition_point(|p| p.range.start <= lookup);
    let Some(p) = i.checked_sub(1).map(|i| &placed[i]).filter(|p| lookup < p.range.end) else {
        return Location { file: None, offset: pc, file_offset: lookup, function: None };
    };
    let table = p.file.symbols.get_or_init(|| {
        let data = p.file.data.as_ref()?;
        SymbolTable::for_file(data, debug_root).ok()
    });
    let function = table.as_ref().and_then(|t| {
        let (name, off) = t.lookup(lookup.wrapping_sub(p.bias))?;
        Some((crate::symbols::demangle(name).into_owned(), off + (pc - lookup)))
    });
    let file_offset = lookup.wrapping_sub(p.range.start).wrapping_add(p.pgoff);
    Location { file: Some(p.file.clone()), offset: pc.wrapping_sub(p.bias), file_offset, function }
}

/// `/proc/kallsyms`, read once if a sample has kernel frames.
struct KernelSymbols {
    starts: Vec<u64>,
    names: Vec<String>,
}

fn kernel_symbol(cell: &OnceLock<Option<KernelSymbols>>, ip: u64) -> Option<(&str, u64)> {
    let table = cell
        .get_or_init(|| {
            let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
            let mut syms: Vec<(u64, String)> = text
                .lines()
                .filter_map(|l| {
                    let mut parts = l.split_whitespace();
                    let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                    let kind = parts.next()?;
                    let name = parts.next()?;
                    (addr != 0 && matches!(kind, "t" | "T" | "w" | "W"))
                        .then(|| (addr, name.to_owned()))
                })
                .collect();
            if syms.is_empty() {
                return None; // kptr_restrict hides the addresses
            }
            syms.sort_unstable();
            let (starts, names) = syms.into_iter().unzip();
            Some(KernelSymbols { starts, names })
        })
        .as_ref()?;
    let i = table.starts.partition_point(|&s| s <= ip).checked_sub(1)?;
    Some((&table.names[i], ip - table.starts[i]))
}

fn render(
    format: Format,
    p: &Pending,
    d: &Done,
    debug_root: &std::path::Path,
    kernel: &OnceLock<Option<KernelSymbols>>,
) -> String {
    let mut s = String::with_capacity(64 + 96 * (d.frames.len() + p.kernel.len()));
    let (secs, nanos) = (p.time / 1_000_000_000, p.time % 1_000_000_000);
    match format {
        Format::Text => {
            let _ = writeln!(s, "{:>16} {:>6} {secs:5}.{:06}:", p.comm, p.tid, nanos / 1000);
            for &ip in &p.kernel {
                match kernel_symbol(kernel, ip) {
                    Some((name, off)) => {
                        let _ = writeln!(s, "\t{ip:>16x} {name}+{off:#x} ([kernel.kallsyms])");
                    }
                    None => {
                        let _ = writeln!(s, "\t{ip:>16x} [unknown] ([kernel.kallsyms])");
                    }
                }
            }
            // As perf script prints them: a caller at its return address
            // minus one (inside the call), addresses as offsets in the file.
            for f in &d.frames {
                let lookup = f.lookup_pc();
                let loc = locate(&p.process, f.pc, lookup, debug_root);
                let func = match &loc.function {
                    Some((name, off)) => format!("{name}+{:#x}", off - (f.pc - lookup)),
                    None => "[unknown]".to_owned(),
                };
                let module = loc.file.as_ref().map_or("[unknown]", |f| &f.path);
                let _ = writeln!(s, "\t{:>16x} {func} ({module})", loc.file_offset);
            }
            s.push('\n');
        }
        Format::JsonLines => {
            let comm = serde_json::to_string(&*p.comm).unwrap_or_default();
            let _ = write!(
                s,
                "{{\"pid\": {}, \"tid\": {}, \"time\": {}, \"comm\": {comm}, \"frames\": [",
                p.pid, p.tid, p.time
            );
            let mut first = true;
            let mut sep = |s: &mut String| {
                if !first {
                    s.push_str(", ");
                }
                first = false;
            };
            for &ip in &p.kernel {
                sep(&mut s);
                let (func, off) = match kernel_symbol(kernel, ip) {
                    Some((n, o)) => {
                        (serde_json::to_string(n).unwrap_or_default(), format!("\"{o:#x}\""))
                    }
                    None => ("null".to_owned(), "null".to_owned()),
                };
                let _ = write!(
                    s,
                    "{{\"pc\": \"{ip:#x}\", \"module\": \"[kernel.kallsyms]\", \"module_offset\": \"{ip:#x}\", \"function\": {func}, \"function_offset\": {off}, \"kernel\": true}}"
                );
            }
            for f in &d.frames {
                sep(&mut s);
                let loc = locate(&p.process, f.pc, f.lookup_pc(), debug_root);
                let module = loc.file.as_ref().map_or_else(
                    || "null".to_owned(),
                    |f| serde_json::to_string(&*f.path).unwrap_or_default(),
                );
                let (func, off) = match &loc.function {
                    Some((n, o)) => {
                        (serde_json::to_string(n).unwrap_or_default(), format!("\"{o:#x}\""))
                    }
                    None => ("null".to_owned(), "null".to_owned()),
                };
                let _ = write!(
                    s,
                    "{{\"pc\": \"{:#x}\", \"module\": {module}, \"module_offset\": \"{:#x}\", \"function\": {func}, \"function_offset\": {off}, \"kernel\": false}}",
                    f.pc, loc.offset
                );
            }
            s.push_str("]}\n");
        }
        Format::Collapsed => {}
    }
    s
}
