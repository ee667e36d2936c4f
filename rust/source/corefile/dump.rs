//! A core (or a live process's snapshot, held as one) planned as a minidump
//! (`crate::source::minidump::write`): what Crashpad's Linux writer takes
//! from a process, taken from the core instead.
//!
//! - each thread's registers, and its stack: from its sp (less the red
//!   zone) up to the end of the captured memory holding it, at most
//!   [`DumpOptions::stack_bytes`]; so too from the sp of each frame its walk
//!   found on another stack (past a signal handler's alternate stack);
//! - the memory around each thread's pc and around every register value
//!   that points into captured memory ([`DumpOptions::around`] bytes), as
//!   Breakpad keeps the code around the crash and Crashpad the memory its
//!   registers point at;
//! - the vdso's image (its unwind tables and symbols: its file is on no
//!   disk);
//! - the crashing thread's signal (number, `si_code`, address);
//! - the Linux streams: maps (the segments, their permissions and the files
//!   `NT_FILE` names), status (name, pid), command line (the argument
//!   strings on the main thread's initial stack, else `pr_psargs`), auxv;
//! - the kernel's version, from the vdso's `Linux` note.
//!
//! The modules (their ranges, paths and build ids) come from the address
//! space the caller built: the program first.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;

use minidump::format::MINIDUMP_STREAM_TYPE as StreamType;
use object::read::elf::{FileHeader, ProgramHeader};
use object::LittleEndian;

use super::CoreFile;
use crate::arch::Arch;
use crate::source::memory::Memory;
use crate::source::minidump::write::{Exception, Module, Plan, Thread};

/// `AT_SYSINFO_EHDR`: where the vdso's ELF header is.
const AT_SYSINFO_EHDR: u64 = 33;
/// The most argument strings read for the command line stream.
const MAX_ARGS: u64 = 4096;
const MAX_ARG_LEN: usize = 1 << 16;
/// The most of the vdso's mapping kept (it is 8 KiB on x86_64 today).
const MAX_VDSO: u64 = 1 << 16;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;

/// How much memory a dump takes.
#[derive(Clone, Debug)]
pub struct DumpOptions {
    /// The most bytes of each thread's stack, from its sp up.
    pub stack_bytes: u64,
    /// Bytes around each pc and each register that points into captured
    /// memory (half below, half above); 0: none.
    pub around: u64,
    /// When the dump was taken (seconds since 1970; 0: not known).
    pub time: u32,
    /// CPUs online (0: not known).
    pub processors: u8,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions { stack_bytes: 256 << 10, around: 256, time: 0, processors: 0 }
    }
}

/// The permissions (`p_flags`) of a file's mapping at a file offset, where
/// the file is known: (path as the core names it, offset) -> flags.
pub type FileFlags<'f> = &'f dyn Fn(&str, u64) -> Option<u32>;

/// The dump of `core`, with `modules` (the program first); `file_flags`:
/// the permissions of the file mappings the core has no segment for (gdb
/// leaves out those it need not dump); `frame_sps`: the stack pointers of
/// the frames the threads' walks found, whose stacks are kept too where
/// they are not a thread's own (a signal handler's alternate stack: the
/// frames it interrupted are on the thread's stack).
pub fn plan<'a>(
    core: &'a CoreFile,
    modules: Vec<Module>,
    options: &DumpOptions,
    file_flags: FileFlags<'_>,
    frame_sps: &[u64],
) -> Plan<'a> {
    let arch = core.arch;
    let threads = &core.notes.threads;
    let crash = core.crash();
    let extent = |address: u64| {
        let (start, bytes) = core.memory.segment_of(address)?;
        Some(start..start + bytes.len() as u64)
    };
    let mut wanted: Vec<Range<u64>> = Vec::new();
    let mut planned = Vec::with_capacity(threads.len());
    for thread in threads {
        let registers: Vec<(&'static str, u64)> = thread.named_registers(arch).collect();
        let (stack, near) = thread_memory(arch, &registers, options, &extent);
        wanted.push(stack.clone());
        wanted.extend(near);
        let fs_base = registers.iter().find(|(n, _)| *n == "fs_base");
        let thread_pointer = fs_base.map_or(0, |&(_, v)| v);
        planned.push(Thread { tid: thread.tid as u32, registers, stack, thread_pointer });
    }
    // A frame on a stack no thread's sp is on: from its sp up too (each
    // thread's own stack stays cut at stack_bytes).
    let segment = |address: u64| core.memory.segment_of(address).map(|(start, _)| start);
    let own: Vec<u64> = planned.iter().filter_map(|t| segment(t.stack.start)).collect();
    let mut others: Vec<u64> = Vec::new();
    for &sp in frame_sps {
        let Some(at) = segment(sp) else { continue };
        if !own.contains(&at) && !others.contains(&at) {
            others.push(at);
            wanted.push(stack_of(extent(sp), arch, sp, options.stack_bytes));
        }
    }
    wanted.extend(vdso_image(&core.notes.auxv, &extent));
    let exception = crash.crashing.zip(crash.signal.as_ref()).map(|(i, signal)| Exception {
        tid: threads[i].tid as u32,
        signal: signal.number as u32,
        code: signal.code.unwrap_or(0) as u32,
        address: signal.address.unwrap_or(0),
    });
    let auxv = &core.notes.auxv;
    // Without NT_FILE (qemu's cores) the maps would name no file: the module
    // list places the modules then, as in a dump without a maps stream.
    let mut linux = Vec::new();
    if core.notes.files.is_some() {
        linux.push((StreamType::LinuxMaps, maps(core, file_flags).into_bytes()));
    }
    let mut status = String::new();
    if let Some(name) = &core.notes.fname {
        let _ = writeln!(status, "Name:\t{name}");
    }
    if let Some(pid) = core.notes.pid {
        let _ = write!(status, "Tgid:\t{pid}\nPid:\t{pid}\n");
    }
    linux.push((StreamType::LinuxProcStatus, status.into_bytes()));
    if let Some(cmdline) = command_line(core) {
        linux.push((StreamType::LinuxCmdLine, cmdline));
    }
    linux.push((StreamType::LinuxAuxv, auxv_bytes(arch, auxv)));
    Plan {
        arch,
        kernel: auxv.get(&AT_SYSINFO_EHDR).and_then(|&at| kernel_version(core, at)),
        os_text: String::new(),
        processors: options.processors,
        time: options.time,
        threads: planned,
        memory: merged(core, wanted),
        modules,
        exception,
        pid: core.notes.pid,
        linux,
    }
}

/// The captured memory holding an address: (address) -> its range.
pub(super) type Extent<'e> = &'e dyn Fn(u64) -> Option<Range<u64>>;

/// What a dump keeps of a thread with `registers`: its stack (see
/// [`stack_of`]), and the memory around its pc and around each register
/// that points into captured memory.
pub(super) fn thread_memory(
    arch: Arch,
    registers: &[(&'static str, u64)],
    options: &DumpOptions,
    extent: Extent<'_>,
) -> (Range<u64>, Vec<Range<u64>>) {
    let value = |name: Option<&str>| registers.iter().find(|(n, _)| Some(*n) == name).map(|r| r.1);
    let sp = value(arch.register_name(arch.sp()));
    let stack = sp.map_or(0..0, |sp| stack_of(extent(sp), arch, sp, options.stack_bytes));
    let mut near = Vec::new();
    if options.around > 0 {
        // (The pc is one of the registers.)
        for &(_, v) in registers {
            near.extend(around(extent(v), v, options.around));
        }
    }
    (stack, near)
}

/// The vdso's image: its unwind tables and symbols (its file is on no
/// disk), at most [`MAX_VDSO`] bytes.
pub(super) fn vdso_image(auxv: &BTreeMap<u64, u64>, extent: Extent<'_>) -> Option<Range<u64>> {
    let range = extent(*auxv.get(&AT_SYSINFO_EHDR)?)?;
    Some(range.start..range.end.min(range.start + MAX_VDSO))
}

/// A thread's stack: from its sp (less the red zone) to the end of the
/// captured memory holding it (`extent`), at most `most` bytes; empty where
/// its sp is in no captured memory.
fn stack_of(extent: Option<Range<u64>>, arch: Arch, sp: u64, most: u64) -> Range<u64> {
    let Some(extent) = extent else { return sp..sp };
    let low = sp.saturating_sub(arch.red_zone()).max(extent.start) & !15;
    low.max(extent.start)..extent.end.min(sp.saturating_add(most))
}

/// `size` bytes around `value` (half on each side), cut to the captured
/// memory holding it (`extent`); None where it points into none.
fn around(extent: Option<Range<u64>>, value: u64, size: u64) -> Option<Range<u64>> {
    let extent = extent?;
    let low = value.saturating_sub(size / 2).max(extent.start);
    Some(low..value.saturating_add(size - size / 2).min(extent.end))
}

/// The ranges wanted, sorted and merged where they overlap or touch in one
/// captured segment, as (start, bytes).
fn merged(core: &CoreFile, wanted: Vec<Range<u64>>) -> Vec<(u64, &[u8])> {
    let segment = |address: u64| core.memory.segment_of(address).map(|(start, _)| start);
    let slice = |(segment, range): (u64, Range<u64>)| {
        let (_, bytes) = core.memory.segment_of(segment)?;
        let from = usize::try_from(range.start - segment).ok()?;
        let to = usize::try_from(range.end - segment).ok()?;
        Some((range.start, bytes.get(from..to)?))
    };
    merge_ranges(wanted, segment).into_iter().filter_map(slice).collect()
}

/// `ranges` without the empty ones, sorted and merged where they overlap or
/// touch and `segment` (what holds an address; None: nothing) gives both
/// the same: (segment, range), in address order.
pub(super) fn merge_ranges(
    mut ranges: Vec<Range<u64>>,
    segment: impl Fn(u64) -> Option<u64>,
) -> Vec<(u64, Range<u64>)> {
    ranges.retain(|r| !r.is_empty());
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<(u64, Range<u64>)> = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Some(at) = segment(range.start) else { continue };
        match out.last_mut() {
            Some((s, r)) if *s == at && range.start <= r.end => r.end = r.end.max(range.end),
            _ => out.push((at, range)),
        }
    }
    out
}

/// `/proc/PID/maps` as the core gives it: its segments (their permissions)
/// and the files `NT_FILE` says are mapped there, and the file mappings it
/// has no segment for, their permissions the file's (a mapping whose file
/// is not known is left out). Devices and inodes are not recorded: `00:00 0`.
fn maps(core: &CoreFile, file_flags: FileFlags<'_>) -> String {
    let files = core.notes.files.as_deref().unwrap_or_default();
    let vdso = core.notes.auxv.get(&AT_SYSINFO_EHDR).copied();
    let stack = core.initial_stack();
    // (start, end, flags, offset, path)
    let mut lines: Vec<(u64, u64, u32, u64, String)> = Vec::new();
    for s in &core.segments {
        let end = s.end();
        let file = files.iter().find(|f| f.start <= s.vaddr && s.vaddr < f.end);
        let (offset, path) = match file {
            Some(f) => (f.offset + (s.vaddr - f.start), String::from_utf8_lossy(&f.path).into()),
            None if vdso.is_some_and(|v| (s.vaddr..end).contains(&v)) => (0, "[vdso]".into()),
            None if stack.is_some_and(|v| (s.vaddr..end).contains(&v)) => (0, "[stack]".into()),
            None => (0, String::new()),
        };
        lines.push((s.vaddr, end, s.flags, offset, path));
    }
    for f in files {
        let covered = core.segments.iter().any(|s| s.vaddr < f.end && f.start < s.end());
        let path = String::from_utf8_lossy(&f.path);
        if let Some(flags) = (!covered).then(|| file_flags(&path, f.offset)).flatten() {
            lines.push((f.start, f.end, flags, f.offset, path.into()));
        }
    }
    lines.sort_by_key(|l| (l.0, l.1));
    // One line per mapping: the pieces of a segment a streamed core split
    // (`stream.rs`) joined again.
    let mut joined: Vec<(u64, u64, u32, u64, String)> = Vec::with_capacity(lines.len());
    for line in lines {
        match joined.last_mut() {
            Some(last)
                if last.1 == line.0
                    && (last.2, &last.4) == (line.2, &line.4)
                    && (line.4.is_empty() || last.3 + (last.1 - last.0) == line.3) =>
            {
                last.1 = line.1
            }
            _ => joined.push(line),
        }
    }
    let mut text = String::new();
    for (start, end, flags, offset, path) in joined {
        let flag = |bit: u32, c: char| if flags & bit != 0 { c } else { '-' };
        let (r, w, x) = (flag(PF_R, 'r'), flag(PF_W, 'w'), flag(PF_X, 'x'));
        let _ = writeln!(text, "{start:08x}-{end:08x} {r}{w}{x}p {offset:08x} 00:00 0 {path}");
    }
    text
}

/// `/proc/PID/cmdline`: the argument strings `argv` points at on the main
/// thread's initial stack (each ending in a NUL), else `pr_psargs` (the
/// first 80 bytes, joined by spaces).
fn command_line(core: &CoreFile) -> Option<Vec<u8>> {
    let from_stack = || {
        let w = core.arch.word_size();
        let argc_at = core.initial_stack()?;
        let mut memory = core.memory.regions();
        let argc = memory.read_sized(argc_at, w as u8)?;
        if argc == 0 || argc > MAX_ARGS {
            return None;
        }
        let mut out = Vec::new();
        for i in 1..=argc {
            let arg = memory.read_sized(argc_at + i * w, w as u8)?;
            out.extend(core.memory.string(arg, MAX_ARG_LEN)?);
            out.push(0);
        }
        Some(out)
    };
    from_stack().or_else(|| {
        let args = core.notes.psargs.as_deref()?;
        Some([args.trim_end().as_bytes(), b"\0"].concat())
    })
}

/// The auxiliary vector as the kernel lays it out: (type, value) words,
/// ending with `AT_NULL`.
fn auxv_bytes(arch: Arch, auxv: &BTreeMap<u64, u64>) -> Vec<u8> {
    let w = arch.word_size() as usize;
    let mut out = Vec::with_capacity((auxv.len() + 1) * 2 * w);
    for (&kind, &value) in auxv.iter().chain([(&0, &0)]) {
        out.extend_from_slice(&kind.to_le_bytes()[..w]);
        out.extend_from_slice(&value.to_le_bytes()[..w]);
    }
    out
}

/// The kernel's version (major, minor, patch): the vdso's `Linux` note
/// (`LINUX_VERSION_CODE`), where the core holds the vdso.
fn kernel_version(core: &CoreFile, at: u64) -> Option<[u32; 3]> {
    let (start, bytes) = core.memory.segment_of(at)?;
    let image = bytes.get(usize::try_from(at - start).ok()?..)?;
    let code = match core.arch.word_size() {
        8 => linux_note::<object::elf::FileHeader64<LittleEndian>>(image),
        _ => linux_note::<object::elf::FileHeader32<LittleEndian>>(image),
    }?;
    Some([code >> 16, (code >> 8) & 0xff, code & 0xff])
}

fn linux_note<Elf: FileHeader<Endian = LittleEndian>>(image: &[u8]) -> Option<u32> {
    let header = Elf::parse(image).ok()?;
    let endian = header.endian().ok()?;
    for ph in header.program_headers(endian, image).ok()? {
        let Ok(Some(mut notes)) = ph.notes(endian, image) else { continue };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"Linux" && note.n_type(endian) == 0 {
                let desc: [u8; 4] = note.desc().get(..4)?.try_into().ok()?;
                return Some(u32::from_le_bytes(desc));
            }
        }
    }
    None
}
