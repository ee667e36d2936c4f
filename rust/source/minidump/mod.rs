//! Minidumps (Breakpad's, Crashpad's, `minidump-writer`'s): the threads,
//! exception, modules, mappings and memory of a process, read with
//! rust-minidump's `minidump` crate from the mapped file, and handed on as
//! a core's are: registers by name, memory read in place
//! ([`SegmentMemory`] over the file), file mappings.
//!
//! Only a file whose header and stream directory cannot be read, or that
//! names no architecture stackwalk unwinds, is an error. A stream that is
//! damaged (cut short, pointing past the end of the file, a count larger
//! than the stream, a thread context of the wrong size) is a warning that
//! names it and where it is, and everything else is still read: the
//! threads whose context and stack are there are unwound.

mod context;
mod streams;
pub mod write;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use minidump::format::MINIDUMP_STREAM_TYPE as StreamType;
use minidump::system_info::Os;
use minidump::{
    CodeView, Minidump, MinidumpException, MinidumpMiscInfo, MinidumpModule, MinidumpModuleList,
    MinidumpSystemInfo, MinidumpThreadList, Module,
};

use crate::arch::Arch;
use crate::source::corefile::linkmap::{self, LinkMapEntry};
use crate::source::memory::{Data, Segment, SegmentMemory};

pub use streams::MapEntry;

/// The `exception_code` of a dump a process asked for without crashing
/// (Breakpad's `MD_EXCEPTION_CODE_LIN_DUMP_REQUESTED`), as `minidump-writer`
/// writes for a process it dumps without a crash context.
pub const DUMP_REQUESTED: u32 = 0xffff_ffff;

/// Why a file is not a minidump that can be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum MinidumpError {
    /// The file cannot be opened or read.
    Io(std::io::Error),
    /// The file cannot be mapped.
    Map(std::io::Error),
    NotMinidump,
    /// The header or the stream directory cannot be read.
    Header(minidump::Error),
    /// No system info stream, nor a thread context that says the
    /// architecture; what else is damaged.
    NoSystemInfo(Vec<String>),
    UnsupportedCpu(String),
}

impl fmt::Display for MinidumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MinidumpError::Io(e) => write!(f, "{}", crate::source::corefile::os_message(e)),
            MinidumpError::Map(e) => {
                write!(f, "cannot map: {}", crate::source::corefile::os_message(e))
            }
            MinidumpError::NotMinidump => f.write_str("not a minidump (no MDMP header)"),
            MinidumpError::Header(minidump::Error::MissingDirectory) => {
                f.write_str("the stream directory lies past the end of the file")
            }
            MinidumpError::Header(e) => write!(f, "cannot read the minidump header: {e}"),
            MinidumpError::NoSystemInfo(damaged) => {
                f.write_str(
                    "the system info stream (7) is missing or damaged, and no thread context \
                     says the architecture",
                )?;
                damaged.iter().try_for_each(|w| write!(f, "; {w}"))
            }
            MinidumpError::UnsupportedCpu(cpu) => {
                write!(
                    f,
                    "unsupported architecture {cpu} (x86_64, aarch64, x86 and arm are unwound)"
                )
            }
        }
    }
}

impl std::error::Error for MinidumpError {}

/// A thread of the dump: its id and registers by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpThread {
    pub tid: u32,
    pub registers: Vec<(&'static str, u64)>,
}

/// A module of the module list, and its identity as its CodeView record
/// gives it: an ELF build id (`BpEL`, Breakpad's and Crashpad's Linux
/// clients), a PDB 7.0 GUID and age (`RSDS`: Windows and Apple modules, and
/// the Linux modules of Breakpad's clients before they recorded build ids),
/// or a PDB 2.0 signature (`NB10`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpModule {
    pub base: u64,
    pub size: u64,
    /// The code file's path as the dump gives it (a Windows path on Windows).
    pub name: String,
    /// The build id of the module's CodeView record (`BpEL`).
    pub build_id: Option<Vec<u8>>,
    /// The GUID of an `RSDS` record, its 16 bytes as the record holds them
    /// (for an ELF module, the first 16 bytes of its `FileID`), and its age.
    pub guid: Option<([u8; 16], u32)>,
    /// Breakpad's debug id (GUID and age, 33 hex digits), as
    /// `minidump-stackwalk` prints it and symbol stores file `.sym` files by.
    pub debug_id: Option<String>,
    /// Breakpad's code id: the build id (ELF), the UUID (Apple), the PE
    /// header's time stamp and image size (Windows).
    pub code_id: Option<String>,
    /// The debug file's name: the PDB's (Windows), else the code file's.
    pub debug_file: Option<String>,
}

/// The exception stream: which thread, what signal, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpException {
    pub tid: u32,
    /// The signal number on Linux; [`DUMP_REQUESTED`] for a dump without a crash.
    pub code: u32,
    /// `si_code` on Linux.
    pub flags: u32,
    pub address: u64,
    /// The crash reason as `minidump-stackwalk` names it for the dump's
    /// system: a signal and its `si_code` (Linux, Android), an NTSTATUS and,
    /// for an access violation, its kind (Windows), a Mach exception and its
    /// code (macOS, iOS).
    pub reason: String,
    /// The address the crash concerns, as `minidump-stackwalk` gives it:
    /// the faulting data address of a Windows access violation or in-page
    /// error (from the exception information), else the exception address.
    pub crash_address: u64,
}

/// The system info stream: what the dump says of the machine, with
/// `minidump-stackwalk`'s names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpSystem {
    /// "Linux", "Android", "Windows NT", "Mac OS X", "iOS", ...
    pub os: String,
    /// The version, and the build where the dump gives one.
    pub os_version: Option<String>,
    /// "amd64", "x86", "arm64", ...
    pub cpu: String,
    /// Whether the dump's paths are Windows paths (`C:\dir\name.dll`).
    pub windows: bool,
}

/// A minidump, read: see the module's documentation.
pub struct MinidumpFile {
    pub arch: Arch,
    pub system: DumpSystem,
    /// In the thread list's order.
    pub threads: Vec<DumpThread>,
    pub memory: Arc<SegmentMemory>,
    pub modules: Vec<DumpModule>,
    pub exception: Option<DumpException>,
    /// The Linux maps stream (`/proc/PID/maps`), where there is one.
    pub maps: Option<Vec<MapEntry>>,
    /// From the misc info stream, else the Linux status stream's `Pid:`.
    pub pid: Option<u32>,
    /// The Linux status stream's `Name:` (the command, cut to 15 bytes).
    pub name: Option<String>,
    /// The Linux command line stream, its arguments joined by spaces.
    pub command_line: Option<String>,
    /// The Linux auxv stream: type -> value (the first of a type).
    pub auxv: BTreeMap<u64, u64>,
    /// What is damaged, in the order found.
    pub warnings: Vec<String>,
}

impl MinidumpFile {
    /// Map the file at `path` and read it.
    pub fn open(path: &Path) -> Result<MinidumpFile, MinidumpError> {
        let file = crate::source::files::open_regular(path).map_err(MinidumpError::Io)?;
        if file.metadata().map_err(MinidumpError::Io)?.len() == 0 {
            return Err(MinidumpError::NotMinidump);
        }
        let map = crate::source::files::map_file(&file).map_err(MinidumpError::Map)?;
        MinidumpFile::from_data(Data::Mapped(map))
    }

    /// Read a minidump held in `data`.
    pub fn from_data(data: Data) -> Result<MinidumpFile, MinidumpError> {
        let read = read(&data)?;
        let memory = SegmentMemory::new(data, &read.segments);
        let mut warnings = read.warnings;
        if memory.missing_bytes > 0 {
            warnings.push(format!(
                "minidump is truncated: {} bytes of memory missing",
                memory.missing_bytes
            ));
        }
        Ok(MinidumpFile {
            arch: read.arch,
            system: read.system,
            threads: read.threads,
            memory: Arc::new(memory),
            modules: read.modules,
            exception: read.exception,
            maps: read.maps,
            pid: read.pid,
            name: read.name,
            command_line: read.command_line,
            auxv: read.auxv,
            warnings,
        })
    }

    /// The NUL-terminated string at `address` in the process's memory, at
    /// most `limit` bytes before the NUL; None where it is not all captured.
    pub fn string(&self, address: u64, limit: usize) -> Option<Vec<u8>> {
        self.memory.string(address, limit)
    }

    /// The dynamic linker's link map, for a process whose executable has its
    /// `PT_DYNAMIC` at runtime address `dynamic`, where the dump holds it.
    pub fn link_map(&self, dynamic: u64) -> (Vec<LinkMapEntry>, Vec<String>) {
        linkmap::read_link_map(&self.memory, self.arch.word_size(), dynamic)
    }
}

/// What [`read`] finds: everything but the memory, which keeps the data.
struct Read {
    arch: Arch,
    system: DumpSystem,
    threads: Vec<DumpThread>,
    segments: Vec<Segment>,
    modules: Vec<DumpModule>,
    exception: Option<DumpException>,
    maps: Option<Vec<MapEntry>>,
    pid: Option<u32>,
    name: Option<String>,
    command_line: Option<String>,
    auxv: BTreeMap<u64, u64>,
    warnings: Vec<String>,
}

fn read(data: &[u8]) -> Result<Read, MinidumpError> {
    if data.len() >= 4 && &data[..4] != b"MDMP" {
        return Err(MinidumpError::NotMinidump);
    }
    let dump = Minidump::read(data).map_err(|e| match e {
        minidump::Error::HeaderMismatch => MinidumpError::NotMinidump,
        e => MinidumpError::Header(e),
    })?;
    let streams = streams::Streams::new(&dump, data);
    let mut warnings = Vec::new();
    let system_info = match streams.get::<MinidumpSystemInfo>(&mut warnings) {
        Some(info) => info,
        // Cut off by a truncation (writers put it after the thread list and
        // the stacks): the architecture the thread contexts say.
        None => {
            let Some(info) = context::system_info_from_contexts(&dump, data) else {
                streams.get::<MinidumpThreadList>(&mut warnings);
                return Err(MinidumpError::NoSystemInfo(warnings));
            };
            warnings.push(format!(
                "no readable system info stream: the architecture, {}, is the thread contexts'",
                info.cpu
            ));
            info
        }
    };
    let arch = context::arch_of(system_info.cpu)
        .ok_or_else(|| MinidumpError::UnsupportedCpu(system_info.cpu.to_string()))?;
    let misc = streams.get::<MinidumpMiscInfo>(&mut Vec::new());

    // The memory lists first (their regions mostly in address order), then the stacks.
    let mut segments = streams.memory_list(&mut warnings);
    segments.extend(streams.memory64_list(&mut warnings));
    let exception = streams.get::<MinidumpException>(&mut warnings);
    let mut threads = Vec::new();
    if let Some(list) = streams.get::<MinidumpThreadList>(&mut warnings) {
        for thread in &list.threads {
            let tid = thread.raw.thread_id;
            let stack = thread.raw.stack;
            if stack.memory.data_size > 0 {
                segments.push(Segment {
                    address: stack.start_of_memory_range,
                    offset: u64::from(stack.memory.rva),
                    size: u64::from(stack.memory.data_size),
                });
            }
            // The crashing thread's context at the fault is the exception
            // stream's (the thread list has the crash handler's).
            let crashed = exception.as_ref().filter(|e| e.thread_id == tid);
            let from_exception = crashed.and_then(|e| e.context(&system_info, misc.as_ref()));
            let context = from_exception.or_else(|| thread.context(&system_info, misc.as_ref()));
            match context.and_then(|c| context::registers(arch, &c)) {
                Some(registers) => threads.push(DumpThread { tid, registers }),
                None => {
                    let at = thread.raw.thread_context;
                    warnings.push(format!(
                        "thread list stream (3): thread {tid}'s context at {:#x} ({} bytes) is \
                         not a readable {arch} context: thread skipped",
                        at.rva, at.data_size
                    ));
                }
            }
        }
    }
    // A stack is usually in the memory list too: one region per address,
    // the largest the dump has there.
    crate::source::memory::sort_runs(&mut segments, |s| (s.address, std::cmp::Reverse(s.size)));
    segments.dedup_by_key(|s| s.address);

    let modules = streams
        .get::<MinidumpModuleList>(&mut warnings)
        .map(|list| list.iter().map(dump_module).collect())
        .unwrap_or_default();

    let (os, cpu) = (system_info.os, system_info.cpu);
    let exception = exception.map(|e| DumpException {
        tid: e.thread_id,
        code: e.raw.exception_record.exception_code,
        flags: e.raw.exception_record.exception_flags,
        address: e.raw.exception_record.exception_address,
        reason: e.get_crash_reason(os, cpu).to_string(),
        crash_address: e.get_crash_address(os, cpu),
    });
    let (version, build) = system_info.os_parts();
    let system = DumpSystem {
        os: os.long_name().into_owned(),
        os_version: Some(match build {
            Some(build) => format!("{version} {build}"),
            None => version,
        }),
        cpu: cpu.to_string(),
        windows: os == Os::Windows,
    };
    let maps = streams.text(StreamType::LinuxMaps, &mut warnings).map(streams::parse_maps);
    let status = streams.text(StreamType::LinuxProcStatus, &mut warnings);
    let field = |name: &str| status.as_deref().and_then(|s| streams::status_field(s, name));
    let pid = misc
        .as_ref()
        .and_then(|m| m.raw.process_id().copied())
        .or_else(|| field("Pid").and_then(|p| p.parse().ok()));
    let name = field("Name").map(str::to_owned);
    let command_line = streams.text(StreamType::LinuxCmdLine, &mut warnings).map(|text| {
        let args: Vec<&str> = text.split('\0').filter(|a| !a.is_empty()).collect();
        args.join(" ")
    });
    let auxv = streams.auxv(arch.word_size(), &mut warnings);
    Ok(Read {
        arch,
        system,
        threads,
        segments,
        modules,
        exception,
        maps,
        pid,
        name,
        command_line,
        auxv,
        warnings,
    })
}

/// A module of the module list with its identity, as rust-minidump reads
/// it from the CodeView record (the debug id's GUID byte order and the code
/// id's form per system are its, which `minidump-stackwalk` prints).
fn dump_module(m: &MinidumpModule) -> DumpModule {
    let (build_id, guid) = match &m.codeview_info {
        Some(CodeView::Elf(cv)) => (Some(cv.build_id.clone()), None),
        Some(CodeView::Pdb70(cv)) => {
            let g = &cv.signature;
            let mut raw = [0u8; 16];
            raw[..4].copy_from_slice(&g.data1.to_le_bytes());
            raw[4..6].copy_from_slice(&g.data2.to_le_bytes());
            raw[6..8].copy_from_slice(&g.data3.to_le_bytes());
            raw[8..].copy_from_slice(&g.data4);
            (None, Some((raw, cv.age)))
        }
        _ => (None, None),
    };
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    DumpModule {
        base: m.raw.base_of_image,
        size: u64::from(m.raw.size_of_image),
        name: m.name.clone(),
        build_id,
        guid,
        debug_id: m.debug_identifier().map(|id| id.breakpad().to_string()).and_then(non_empty),
        code_id: m.code_identifier().map(|id| id.as_str().to_owned()).and_then(non_empty),
        debug_file: m.debug_file().map(|f| basename(&f).to_owned()).and_then(non_empty),
    }
}

/// The last component of a path, by Windows' rules as well as POSIX's (a
/// Windows dump names `C:\Windows\System32\ntdll.dll`), as
/// `minidump-stackwalk` names modules.
pub fn basename(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

#[cfg(test)]
mod tests;
