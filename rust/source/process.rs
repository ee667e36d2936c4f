//! Live processes: every thread stopped for as short a time as can be
//! (ptrace `PTRACE_SEIZE` + `PTRACE_INTERRUPT`), its registers read
//! (`PTRACE_GETREGSET`), the stacks, the vdso and each file mapping's first
//! page copied (`process_vm_readv`), and the process let go; what was copied
//! is a [`CoreFile`] held in memory, as a core dumped at that moment would
//! be, and is unwound like one, after the process runs again.
//!
//! A python process's interpreter state is copied too, while it is stopped:
//! the pages that reading its Python frames touches (see
//! [`crate::symbolize::pyframes`]), so that the frames are read from the snapshot as
//! from a core.
//!
//! Modules come from `/proc/PID/maps`; a file deleted or replaced since it
//! was mapped is read through `/proc/PID/map_files/` (see
//! [`Snapshot::file_paths`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object::elf::{PF_R, PF_W, PF_X};

use crate::arch::Arch;
use crate::source::corefile::{CoreFile, FileMapping, LoadSegment, Notes, ThreadNotes};
use crate::source::memory::{Data, Segment, SegmentMemory};

/// The most of each thread's stack copied, from its stack pointer up.
pub const MAX_STACK: u64 = 8 << 20;
/// Below the stack pointer, the x86_64 red zone (leaf functions' locals).
const BELOW_SP: u64 = 256;
const PAGE: u64 = 4096;
/// Rounds of listing the threads while new ones keep appearing.
const MAX_ROUNDS: usize = 16;

/// Why a process cannot be read.
#[derive(Debug)]
pub enum ProcessError {
    /// No such process (or it is gone).
    NoSuchProcess(i32),
    /// A zombie: it has exited and has no memory left.
    Zombie(i32),
    /// It exited (or was killed) while it was being read.
    Exited(i32),
    /// ptrace refused: permission (Yama, another user, another tracer).
    NotPermitted {
        pid: i32,
        why: String,
    },
    /// The process is of an architecture this build does not read.
    OtherArch(i32, String),
    Io(i32, String),
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessError::NoSuchProcess(pid) => write!(f, "pid {pid}: no such process"),
            ProcessError::Zombie(pid) => {
                write!(f, "pid {pid}: a zombie (it has exited; its parent has not reaped it)")
            }
            ProcessError::Exited(pid) => write!(f, "pid {pid}: it exited while being read"),
            ProcessError::NotPermitted { pid, why } => write!(f, "pid {pid}: {why}"),
            ProcessError::OtherArch(pid, what) => write!(f, "pid {pid}: {what}"),
            ProcessError::Io(pid, what) => write!(f, "pid {pid}: {what}"),
        }
    }
}

impl std::error::Error for ProcessError {}

impl ProcessError {
    /// The same error, naming the process `pid`: errors met reading through
    /// one of its threads name that thread's id otherwise.
    fn naming(self, pid: i32) -> ProcessError {
        match self {
            ProcessError::NoSuchProcess(_) => ProcessError::NoSuchProcess(pid),
            ProcessError::Zombie(_) => ProcessError::Zombie(pid),
            ProcessError::Exited(_) => ProcessError::Exited(pid),
            ProcessError::NotPermitted { why, .. } => ProcessError::NotPermitted { pid, why },
            ProcessError::OtherArch(_, what) => ProcessError::OtherArch(pid, what),
            ProcessError::Io(_, what) => ProcessError::Io(pid, what),
        }
    }
}

/// A process's threads and memory as copied, and how it went.
pub struct Snapshot {
    pub core: CoreFile,
    /// From the first thread stopped to the last let go.
    pub stopped: Duration,
    /// Each file mapping's path as `/proc/PID/maps` gives it, and where its
    /// file can be read now: the path itself, or `/proc/PID/map_files/...`
    /// for one deleted since it was mapped.
    pub file_paths: Vec<(Vec<u8>, String)>,
}

/// One line of `/proc/PID/maps`.
struct Mapping {
    start: u64,
    end: u64,
    flags: u32,
    offset: u64,
    inode: u64,
    path: Vec<u8>,
}

fn read_maps(pid: i32) -> Result<Vec<Mapping>, ProcessError> {
    let text = std::fs::read(format!("/proc/{pid}/maps")).map_err(|e| io_error(pid, "maps", &e))?;
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        // start-end perms offset dev inode [path]
        let mut fields = line.splitn(6, |&b| b == b' ');
        let (Some(range), Some(perms), Some(offset), Some(_dev), Some(inode)) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = fields.next().map(|p| p.trim_ascii_start().to_vec()).unwrap_or_default();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let range = text(range);
        let Some((start, end)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset), Ok(inode)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(&text(offset), 16),
            text(inode).parse::<u64>(),
        ) else {
            continue;
        };
        let mut flags = 0;
        for (c, f) in perms.iter().zip([PF_R, PF_W, PF_X]) {
            if *c != b'-' {
                flags |= f;
            }
        }
        out.push(Mapping { start, end, flags, offset, inode, path });
    }
    Ok(out)
}

fn io_error(pid: i32, what: &str, e: &std::io::Error) -> ProcessError {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => ProcessError::NoSuchProcess(pid),
        _ => ProcessError::Io(pid, format!("cannot read /proc/{pid}/{what}: {e}")),
    }
}

/// The process's state letter in `/proc/PID/stat` (R, S, D, T, t, Z, X...).
fn state(pid: i32) -> Result<u8, ProcessError> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).map_err(|e| io_error(pid, "stat", &e))?;
    // pid (comm) S ...: comm may hold spaces and parentheses; the state
    // follows the last ')'.
    let close = stat.iter().rposition(|&b| b == b')').unwrap_or(0);
    Ok(stat.get(close + 2).copied().unwrap_or(b'?'))
}

/// A thread of `pid` whose /proc files show the process's memory: `pid`
/// itself, or, where that main thread has exited and waits as a zombie for
/// the others (pthread_exit), another that has not. A process whose threads
/// have all exited is a zombie.
fn live_thread(pid: i32) -> Result<i32, ProcessError> {
    let exited = |tid: i32| matches!(state(tid), Ok(b'Z' | b'X') | Err(_));
    if !matches!(state(pid)?, b'Z' | b'X') {
        return Ok(pid);
    }
    tids(pid)?.into_iter().find(|&t| t != pid && !exited(t)).ok_or(ProcessError::Zombie(pid))
}

fn tids(pid: i32) -> Result<Vec<i32>, ProcessError> {
    let dir =
        std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| io_error(pid, "task", &e))?;
    let mut out: Vec<i32> =
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    out.sort_unstable();
    Ok(out)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Why ptrace said EPERM, and what to do about it.
fn not_permitted(pid: i32) -> ProcessError {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let tracer = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim().to_owned()))
        })
        .filter(|t| t != "0");
    let why = match (tracer, scope) {
        (Some(t), _) => format!("already traced by pid {t} (a debugger?): detach it first"),
        (None, Some(s)) if s >= 1 => format!(
            "not permitted to trace it: Yama's ptrace_scope is {s}; run as root, give the \
             command CAP_SYS_PTRACE, or set /proc/sys/kernel/yama/ptrace_scope to 0"
        ),
        _ => "not permitted to trace it: it belongs to another user, or a container forbids \
              ptrace; run as its user or as root (CAP_SYS_PTRACE)"
            .to_owned(),
    };
    ProcessError::NotPermitted { pid, why }
}

/// Threads stopped, let go when dropped (also on an error's way out).
struct Stopped {
    tids: Vec<i32>,
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &tid in &self.tids {
            // SAFETY: plain ptrace call on a thread this process seized.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, 0usize) };
        }
    }
}

/// Whether thread `tid` is exiting: it is gone, or a zombie, within a
/// tenth of a second (ptrace refuses a thread on its way out with EPERM,
/// as it refuses one it may not trace).
fn exiting(tid: i32) -> bool {
    for _ in 0..20 {
        match state(tid) {
            Ok(b'Z' | b'X') | Err(_) => return true,
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    false
}

/// Seize and stop `tid`; false if it is gone meanwhile.
fn stop(pid: i32, tid: i32) -> Result<bool, ProcessError> {
    // SAFETY: ptrace with integer arguments only.
    let seized = unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) };
    if seized != 0 {
        return match errno() {
            libc::ESRCH => Ok(false),
            // A thread that is exiting cannot be attached either.
            libc::EPERM if exiting(tid) => Ok(false),
            libc::EPERM => Err(not_permitted(pid)),
            e => Err(ProcessError::Io(
                pid,
                format!("ptrace(SEIZE) of thread {tid}: {}", std::io::Error::from_raw_os_error(e)),
            )),
        };
    }
    // SAFETY: as above.
    if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) } != 0 {
        return Ok(false);
    }
    loop {
        let mut status = 0;
        // SAFETY: waits for a tracee of this process; status is a valid out pointer.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        if r == -1 {
            return match errno() {
                libc::EINTR => continue,
                _ => Ok(false),
            };
        }
        if libc::WIFSTOPPED(status) {
            return Ok(true);
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Ok(false);
        }
    }
}

/// The thread's general registers in `NT_PRSTATUS`'s order.
fn registers(tid: i32, count: usize) -> Option<Vec<u64>> {
    let mut regs = vec![0u64; count];
    let mut iov = libc::iovec { iov_base: regs.as_mut_ptr().cast(), iov_len: count * 8 };
    // SAFETY: the iovec describes `regs`, which the kernel fills up to iov_len.
    let r = unsafe {
        libc::ptrace(libc::PTRACE_GETREGSET, tid, libc::NT_PRSTATUS as usize, &mut iov as *mut _)
    };
    (r == 0 && iov.iov_len == count * 8).then_some(regs)
}

/// Copy `[start, end)` of the process's memory into `out`; how many bytes
/// were read (fewer where pages cannot be read).
fn read_memory(pid: i32, start: u64, end: u64, out: &mut Vec<u8>) -> usize {
    let len = usize::try_from(end.saturating_sub(start)).unwrap_or(0);
    let at = out.len();
    out.resize(at + len, 0);
    let mut done = 0;
    while done < len {
        let local =
            libc::iovec { iov_base: out[at + done..].as_mut_ptr().cast(), iov_len: len - done };
        let remote = libc::iovec {
            iov_base: (start + done as u64) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` lies in `out`, which holds len - done bytes from there.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            break;
        }
        done += n as usize;
    }
    out.truncate(at + done);
    done
}

/// The architecture of the process's executable, from its ELF header.
fn process_arch(pid: i32) -> Result<Arch, ProcessError> {
    use std::io::Read;
    let mut header = [0u8; 20];
    let read =
        std::fs::File::open(format!("/proc/{pid}/exe")).and_then(|mut f| f.read_exact(&mut header));
    if let Err(e) = read {
        return Err(match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => not_permitted(pid),
            _ => io_error(pid, "exe", &e),
        });
    }
    let machine = u16::from_le_bytes([header[18], header[19]]);
    let arch = Arch::from_elf_machine(machine)
        .ok_or_else(|| ProcessError::OtherArch(pid, format!("ELF machine {machine}")))?;
    let host = if cfg!(target_arch = "aarch64") { Arch::Aarch64 } else { Arch::X86_64 };
    if arch != host || header[4] != 2 {
        return Err(ProcessError::OtherArch(
            pid,
            format!("a {} process: only {host} processes are read (use a core: gcore)", arch),
        ));
    }
    Ok(arch)
}

/// What else a snapshot reads while the process is stopped, beyond its
/// threads' registers and stacks (the Python interpreter's state:
/// `crate::symbolize::pyframes::LiveState`), given by the caller, so that
/// this source knows no reader above it. Every page it reads is copied into
/// the snapshot.
pub trait WhileStopped {
    /// Before the stop: the process's file mappings (path, the file to read
    /// it from, start, file offset) and the page size; false: nothing to read.
    fn prepare(&mut self, files: &[(&[u8], &str, u64, u64)], page: u64) -> bool;
    /// While stopped: read through `memory`; `tids` are its threads.
    fn read(&mut self, memory: &mut dyn crate::source::memory::ReadMemory, tids: &[u64]);
}

/// Tell `reader` the process's file mappings (a deleted file's through
/// `/proc/PID/map_files/`); whether it has anything to read.
fn prepare(reader: &mut dyn WhileStopped, pid: i32, maps: &[Mapping]) -> bool {
    let readable: Vec<(&Mapping, String)> = maps
        .iter()
        .filter(|m| m.inode != 0 && m.path.starts_with(b"/"))
        .map(|m| match m.path.ends_with(b" (deleted)") {
            true => (m, format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)),
            false => (m, String::from_utf8_lossy(&m.path).into_owned()),
        })
        .collect();
    let files: Vec<_> =
        readable.iter().map(|(m, via)| (&m.path[..], via.as_str(), m.start, m.offset)).collect();
    reader.prepare(&files, PAGE)
}

/// The most unreadable pages in a row skipped in a range to copy.
const MAX_UNREADABLE: u32 = 64;

/// The most pages of a live process that reading its Python frames copies.
const MAX_PYTHON_PAGES: usize = 1 << 16;

/// A stopped process's memory read page by page as the Python frames'
/// reader asks, each page kept (None: unreadable), to be copied into the
/// snapshot after.
struct LiveMemory {
    pid: i32,
    pages: BTreeMap<u64, Option<Vec<u8>>>,
}

impl LiveMemory {
    fn page(&mut self, page: u64) -> Option<&[u8]> {
        if !self.pages.contains_key(&page) {
            if self.pages.len() >= MAX_PYTHON_PAGES {
                return None;
            }
            let mut bytes = Vec::with_capacity(PAGE as usize);
            let n = read_memory(self.pid, page, page + PAGE, &mut bytes);
            self.pages.insert(page, (n as u64 == PAGE).then_some(bytes));
        }
        self.pages.get(&page)?.as_deref()
    }
}

impl crate::source::memory::ReadMemory for LiveMemory {
    fn read(&mut self, address: u64, buf: &mut [u8]) -> bool {
        let mut done = 0;
        while done < buf.len() {
            let at = address.wrapping_add(done as u64);
            let page = at & !(PAGE - 1);
            let Some(bytes) = self.page(page) else { return false };
            let from = (at - page) as usize;
            let n = (bytes.len() - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&bytes[from..from + n]);
            done += n;
        }
        true
    }
}

/// Copy `[a, b)` of the process's memory (mapped with `flags`) to the end of
/// `bytes`, a segment for each piece read. A read stops at a page that
/// cannot be read: the rest is read past it. A guard page may lie inside a
/// mapping, between two threads' stacks (glibc 2.42+ installs them with
/// MADV_GUARD_INSTALL, where it used to mprotect a mapping of their own), so
/// the stacks above one are still there to copy; MAX_UNREADABLE pages in a
/// row end the range.
fn copy_range(
    pid: i32,
    (a, b, flags): (u64, u64, u32),
    bytes: &mut Vec<u8>,
    segments: &mut Vec<LoadSegment>,
) {
    let mut at = a;
    let mut unreadable = 0;
    while at < b && unreadable < MAX_UNREADABLE {
        let offset = bytes.len() as u64;
        let n = read_memory(pid, at, b, bytes) as u64;
        if n > 0 {
            segments.push(LoadSegment { vaddr: at, offset, filesz: n, memsz: n, flags });
            unreadable = 0;
        }
        unreadable += 1;
        at = ((at + n) & !(PAGE - 1)) + PAGE;
    }
}

/// How far above a thread's sp a kernel signal frame is looked for: the
/// frames of a signal handler, on an alternate stack, and the kernel's frame.
const SIGNAL_FRAME_REACH: u64 = 64 << 10;

/// The stacks that threads in a signal handler on an alternate stack
/// (`sigaltstack`: crash reporters', Rust's stack-overflow handler) were
/// interrupted on, which copying each thread's stack from its sp up leaves
/// out (x86_64): for each thread, the first kernel signal frame found in the
/// copied words above its sp ([`crate::source::sigframe::restore`], each field
/// checked) whose interrupted sp lies outside everything copied, that sp's
/// mapping from the sp up, as a thread's stack is copied.
fn interrupted_stacks(
    threads: &[ThreadNotes],
    sp_index: Option<usize>,
    (bytes, segments): (&[u8], &[LoadSegment]),
    maps: &[Mapping],
) -> Vec<(u64, u64, u32)> {
    let mut copied = crate::source::memory::Regions::new();
    for s in segments {
        copied.add(s.vaddr, &bytes[s.offset as usize..(s.offset + s.filesz) as usize]);
    }
    let copied_at = |a: u64| segments.iter().find(|s| s.vaddr <= a && a < s.vaddr + s.filesz);
    let mut out = Vec::new();
    let mut scratch = crate::arch::registers::Registers::new();
    for t in threads {
        let Some(sp) = sp_index.and_then(|i| t.registers.get(i)).copied() else { continue };
        let Some(stack) = copied_at(sp) else { continue };
        let end = (stack.vaddr + stack.filesz).min(sp.saturating_add(SIGNAL_FRAME_REACH));
        let words = &bytes[stack.offset as usize..(stack.offset + stack.filesz) as usize];
        let found = ((sp & !7)..end).step_by(8).find_map(|a| {
            let at = a.checked_sub(stack.vaddr)?;
            let word = |offset: u64| {
                let i = usize::try_from(at.checked_add(offset)?).ok()?;
                Some(u64::from_le_bytes(words.get(i..i.checked_add(8)?)?.try_into().ok()?))
            };
            if !crate::source::sigframe::frame_begins(word) {
                return None;
            }
            let (_, interrupted) =
                crate::source::sigframe::restore(Arch::X86_64, a, &mut scratch, &mut copied)?;
            copied_at(interrupted).is_none().then_some(interrupted)
        });
        if let Some(isp) = found {
            if let Some(m) = maps.iter().find(|m| m.start <= isp && isp < m.end) {
                let from = isp.saturating_sub(BELOW_SP).max(m.start);
                // Up to what is copied already (an alternate stack in the same mapping).
                let above = segments.iter().map(|s| s.vaddr).filter(|&v| v > isp).min();
                let end = m.end.min(isp.saturating_add(MAX_STACK)).min(above.unwrap_or(u64::MAX));
                out.push((from, end, m.flags));
            }
        }
    }
    out
}

/// Stop every thread of `pid`, copy its registers and memory (and what
/// `also` reads while it is stopped), let it go.
pub fn snapshot(pid: i32, also: &mut dyn WhileStopped) -> Result<Snapshot, ProcessError> {
    if pid <= 0 {
        return Err(ProcessError::NoSuchProcess(pid));
    }
    // The address space is read through a thread of the process: `pid`'s
    // own, or, where the main thread has exited (pthread_exit) and the
    // others run on, one of theirs, as the leader's /proc files then show
    // no memory.
    let mem_pid = live_thread(pid)?;
    let named = |e: ProcessError| e.naming(pid);
    let arch = process_arch(mem_pid).map_err(named)?;
    let count = arch.prstatus().names.len();
    // Found before the process is stopped: files and where they are mapped
    // do not move while it runs.
    let maps = read_maps(mem_pid).map_err(named)?;
    let reads = prepare(also, mem_pid, &maps);
    let began = Instant::now();
    let mut stopped = Stopped { tids: Vec::new() };
    // Threads may start while others are being stopped: list them again
    // until a round finds none new (a stopped thread starts no other).
    for _ in 0..MAX_ROUNDS {
        let new: Vec<i32> = tids(pid)?.into_iter().filter(|t| !stopped.tids.contains(t)).collect();
        if new.is_empty() {
            break;
        }
        for tid in new {
            if stop(pid, tid)? {
                stopped.tids.push(tid);
            }
        }
    }
    if stopped.tids.is_empty() {
        return Err(ProcessError::Exited(pid));
    }
    let mut threads = Vec::new();
    for &tid in &stopped.tids {
        if let Some(registers) = registers(tid, count) {
            threads.push(ThreadNotes { tid, cursig: 0, registers, siginfo: None });
        }
    }
    // A thread stopped is gone only if killed (SIGKILL ends a stop): then
    // the whole process is.
    let gone = |e| match e {
        ProcessError::NoSuchProcess(_) => ProcessError::Exited(pid),
        e => e.naming(pid),
    };
    if threads.is_empty() {
        return Err(ProcessError::Exited(pid));
    }
    let maps = read_maps(mem_pid).map_err(gone)?;
    let mut wanted: Vec<(u64, u64, u32)> = Vec::new();
    if reads {
        let mut live = LiveMemory { pid: mem_pid, pages: BTreeMap::new() };
        let tids: Vec<u64> = threads.iter().map(|t| t.tid as u64).collect();
        also.read(&mut live, &tids);
        for (page, bytes) in &live.pages {
            if bytes.is_some() {
                let flags = maps.iter().find(|m| m.start <= *page && *page < m.end);
                wanted.push((*page, page + PAGE, flags.map_or(PF_R | PF_W, |m| m.flags)));
            }
        }
    }
    let sp_name = if arch == Arch::Aarch64 { "sp" } else { "rsp" };
    let sp_index = arch.prstatus().names.iter().position(|n| *n == sp_name);
    // What to copy: each thread's stack from below its sp to the end of
    // its mapping (at most MAX_STACK), the vdso whole, each file mapping's
    // first page (the ELF headers that say its build id).
    for t in &threads {
        let Some(sp) = sp_index.and_then(|i| t.registers.get(i)).copied() else { continue };
        if let Some(m) = maps.iter().find(|m| m.start <= sp && sp < m.end) {
            let from = sp.saturating_sub(BELOW_SP).max(m.start);
            wanted.push((from, m.end.min(sp.saturating_add(MAX_STACK)), m.flags));
        }
    }
    for m in &maps {
        if m.path == b"[vdso]" {
            wanted.push((m.start, m.end, m.flags));
        } else if m.inode != 0 && m.offset == 0 && m.flags & PF_R != 0 {
            wanted.push((m.start, m.end.min(m.start + PAGE), m.flags));
        }
    }
    wanted.sort_unstable();
    let mut merged: Vec<(u64, u64, u32)> = Vec::new();
    for (a, b, f) in wanted {
        match merged.last_mut() {
            // Ranges that meet are one segment only where they are mapped alike:
            // the vdso and the module mapped right after it stay two, so that
            // the segment holding the vdso ends where the vdso does.
            Some(last) if a < last.1 || (a == last.1 && f == last.2) => last.1 = last.1.max(b),
            _ => merged.push((a, b, f)),
        }
    }
    let mut bytes = Vec::new();
    let mut segments = Vec::new();
    for range in merged {
        copy_range(mem_pid, range, &mut bytes, &mut segments);
    }
    if arch == Arch::X86_64 {
        let stacks = interrupted_stacks(&threads, sp_index, (&bytes, &segments), &maps);
        for range in stacks {
            copy_range(mem_pid, range, &mut bytes, &mut segments);
        }
    }
    // Code outside every file (a JIT's), and the files' code, as a kernel's
    // core lists it: where it is, not what it holds, so that return
    // addresses into it are taken for what they are, and a file mapped with
    // no code (read as data) is told from a loaded one.
    for m in &maps {
        let special = m.path.starts_with(b"[v");
        if m.flags & PF_X != 0 && !special {
            let offset = bytes.len() as u64;
            let size = m.end - m.start;
            segments.push(LoadSegment {
                vaddr: m.start,
                offset,
                filesz: 0,
                memsz: size,
                flags: m.flags,
            });
        }
    }
    // A thread in its ptrace stop leaves it only when killed (SIGKILL), and
    // then the whole process is on its way out: what was copied may have
    // been cut short (each read of it failing), so the copy is no answer.
    if stopped.tids.iter().any(|&tid| !matches!(state(tid), Ok(b't'))) {
        return Err(ProcessError::Exited(pid));
    }
    drop(stopped); // the process runs again
    let stopped_for = began.elapsed();

    let mut warnings = Vec::new();
    let auxv = std::fs::read(format!("/proc/{mem_pid}/auxv")).unwrap_or_default();
    let mut aux = BTreeMap::new();
    for pair in auxv.chunks_exact(16) {
        let key = u64::from_le_bytes(pair[..8].try_into().unwrap_or_default());
        let value = u64::from_le_bytes(pair[8..].try_into().unwrap_or_default());
        if key == 0 {
            break;
        }
        aux.entry(key).or_insert(value);
    }
    if aux.is_empty() {
        warnings.push(format!("/proc/{mem_pid}/auxv could not be read"));
    }
    let cmdline = std::fs::read(format!("/proc/{mem_pid}/cmdline")).unwrap_or_default();
    let mut psargs: String = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    psargs.truncate(psargs.trim_end().len());
    let fname =
        std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_owned());
    let mut file_paths = Vec::new();
    let files: Vec<FileMapping> = maps
        .iter()
        .filter(|m| m.inode != 0 && m.path.starts_with(b"/"))
        .map(|m| {
            let deleted = m.path.ends_with(b" (deleted)");
            if deleted {
                let via = format!("/proc/{mem_pid}/map_files/{:x}-{:x}", m.start, m.end);
                file_paths.push((m.path.clone(), via));
            }
            FileMapping { start: m.start, end: m.end, offset: m.offset, path: m.path.clone() }
        })
        .collect();
    let notes = Notes {
        threads,
        pid: Some(pid as u32),
        fname,
        psargs: Some(psargs),
        auxv: aux,
        files: Some(files),
        page_size: PAGE,
    };
    let captured: Vec<Segment> = segments
        .iter()
        .filter(|s| s.filesz > 0)
        .map(|s| Segment { address: s.vaddr, offset: s.offset, size: s.filesz })
        .collect();
    let memory = SegmentMemory::new(Data::Owned(bytes), &captured);
    let core = CoreFile { arch, segments, memory: Arc::new(memory), notes, warnings };
    Ok(Snapshot { core, stopped: stopped_for, file_paths })
}
