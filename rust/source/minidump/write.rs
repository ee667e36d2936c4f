//! Writing minidumps: the container (header, stream directory, streams, and
//! the memory last, streamed from where it lies) with the streams Breakpad's
//! and Crashpad's Linux writers put in one — system info, thread list with
//! each thread's CPU context, module list with ELF build ids (`BpEL`
//! CodeView records), memory list, exception, misc info (the pid), and the
//! Linux streams (maps, status, command line, auxv) — from a [`Plan`] of
//! what a core or a live process holds (`crate::source::corefile::dump`).
//!
//! The structures are rust-minidump's (`minidump::format`), written with
//! `scroll` as the crate reads them.

use std::io::{self, Write};
use std::ops::Range;

use minidump::format::{self as md, MINIDUMP_STREAM_TYPE as StreamType};
use scroll::ctx::{SizeWith, TryIntoCtx};
use scroll::{Endian, Pwrite};

use crate::arch::Arch;

const LE: Endian = Endian::Little;
/// Where each piece of the file starts (the memory at 16).
const ALIGN: usize = 8;
const MEMORY_ALIGN: u64 = 16;
const HEADER_SIZE: usize = 32;
const DIRECTORY_ENTRY_SIZE: usize = 12;
/// `MINIDUMP_MISC1_PROCESS_ID`: the misc info's pid is set.
const MISC1_PROCESS_ID: u32 = 1;
/// `CV_INFO_ELF`'s signature, "BpEL".
const CV_ELF: u32 = 0x4270_454c;
/// `context_flags`: the architecture's bit with its control, integer (and,
/// on x86, segment) registers.
const AMD64_FULL: u32 = 0x0010_0007;
const ARM64_FULL: u32 = 0x0040_0003;
const X86_FULL: u32 = 0x0001_0007;
const ARM_FULL: u32 = 0x4000_0003;

/// A thread: its id, registers by name (those of `Arch::prstatus`), the
/// range of memory that is its stack (inside one of [`Plan::memory`]'s
/// ranges; empty where its sp is in no captured memory) and its thread
/// pointer (`fs_base`, `tpidr`: the TEB field).
pub struct Thread {
    pub tid: u32,
    pub registers: Vec<(&'static str, u64)>,
    pub stack: Range<u64>,
    pub thread_pointer: u64,
}

/// A module: its runtime range, its path, and its ELF build id (or the
/// hash of its text Breakpad takes for one where it has none).
pub struct Module {
    pub start: u64,
    pub end: u64,
    pub name: String,
    pub build_id: Option<Vec<u8>>,
}

/// The signal that crashed the process: its thread, number, `si_code` and
/// faulting address (the exception stream of a Linux dump).
pub struct Exception {
    pub tid: u32,
    pub signal: u32,
    pub code: u32,
    pub address: u64,
}

/// Everything a dump holds.
pub struct Plan<'a> {
    pub arch: Arch,
    /// The kernel's version (major, minor, patch), where known.
    pub kernel: Option<[u32; 3]>,
    /// The system info's version text (`uname`'s, where known).
    pub os_text: String,
    /// CPUs online (0: not known).
    pub processors: u8,
    /// When the dump was taken (seconds since 1970; 0: not known).
    pub time: u32,
    pub threads: Vec<Thread>,
    /// The memory the dump holds: sorted, disjoint ranges.
    pub memory: Vec<(u64, &'a [u8])>,
    /// The program first (a minidump's main module is its first).
    pub modules: Vec<Module>,
    pub exception: Option<Exception>,
    pub pid: Option<u32>,
    /// The Linux streams as they are in /proc: maps, status, cmdline, auxv.
    pub linux: Vec<(StreamType, Vec<u8>)>,
}

/// Write `plan` as a minidump to `out`: its size in bytes. An error only
/// where `out` fails, or the dump would pass the 4 GiB its 32-bit offsets
/// reach.
pub fn write(plan: &Plan<'_>, out: &mut impl Write) -> io::Result<u64> {
    let first = lay_out(plan, 0)?;
    let base = (first.len() as u64).next_multiple_of(MEMORY_ALIGN);
    let meta = lay_out(plan, base)?;
    let total = memory_offsets(plan, base).1;
    if total > u64::from(u32::MAX) {
        return Err(io::Error::other(format!(
            "the dump would be {total} bytes: a minidump's offsets reach 4 GiB"
        )));
    }
    out.write_all(&meta)?;
    let mut at = meta.len() as u64;
    for (_, bytes) in &plan.memory {
        let pad = at.next_multiple_of(MEMORY_ALIGN) - at;
        out.write_all(&[0u8; MEMORY_ALIGN as usize][..pad as usize])?;
        out.write_all(bytes)?;
        at += pad + bytes.len() as u64;
    }
    out.flush()?;
    Ok(at)
}

/// Each memory range's offset in the file when the memory starts at `base`,
/// and the end of the file.
fn memory_offsets(plan: &Plan<'_>, base: u64) -> (Vec<u64>, u64) {
    let mut at = base;
    let mut offsets = Vec::with_capacity(plan.memory.len());
    for (_, bytes) in &plan.memory {
        at = at.next_multiple_of(MEMORY_ALIGN);
        offsets.push(at);
        at += bytes.len() as u64;
    }
    (offsets, at)
}

/// The file up to its memory: header, directory, streams (the memory's
/// descriptors pointing past the end, from `base`).
fn lay_out(plan: &Plan<'_>, base: u64) -> io::Result<Vec<u8>> {
    let streams = 5 + usize::from(plan.exception.is_some()) + plan.linux.len();
    let mut file = Layout { data: vec![0; HEADER_SIZE + streams * DIRECTORY_ENTRY_SIZE] };
    let mut directory: Vec<(StreamType, md::MINIDUMP_LOCATION_DESCRIPTOR)> = Vec::new();

    let csd = file.string(&plan.os_text)?;
    directory.push((StreamType::SystemInfoStream, file.add(system_info(plan, csd))?));

    let (offsets, _) = memory_offsets(plan, base);
    let location_of = |range: &Range<u64>| -> io::Result<md::MINIDUMP_LOCATION_DESCRIPTOR> {
        if range.is_empty() {
            return Ok(md::MINIDUMP_LOCATION_DESCRIPTOR::default());
        }
        let i = plan.memory.partition_point(|(start, _)| *start <= range.start).wrapping_sub(1);
        let (start, bytes) = plan.memory.get(i).ok_or_else(|| outside(range))?;
        if range.end > start + bytes.len() as u64 {
            return Err(outside(range));
        }
        Ok(md::MINIDUMP_LOCATION_DESCRIPTOR {
            data_size: rva(range.end - range.start)?,
            rva: rva(offsets[i] + (range.start - start))?,
        })
    };

    let mut contexts = Vec::with_capacity(plan.threads.len());
    for thread in &plan.threads {
        contexts.push(file.bytes(&context(plan.arch, &thread.registers)?)?);
    }
    let mut list = Vec::new();
    list.extend_from_slice(&(plan.threads.len() as u32).to_le_bytes());
    for (thread, context) in plan.threads.iter().zip(&contexts) {
        list.extend(bytes_of(md::MINIDUMP_THREAD {
            thread_id: thread.tid,
            suspend_count: 0,
            priority_class: 0,
            priority: 0,
            teb: thread.thread_pointer,
            stack: md::MINIDUMP_MEMORY_DESCRIPTOR {
                start_of_memory_range: thread.stack.start,
                memory: location_of(&thread.stack)?,
            },
            thread_context: *context,
        })?);
    }
    directory.push((StreamType::ThreadListStream, file.bytes(&list)?));

    let mut list = Vec::new();
    list.extend_from_slice(&(plan.modules.len() as u32).to_le_bytes());
    for module in &plan.modules {
        let name = file.string(&module.name)?;
        let cv_record = match &module.build_id {
            Some(id) => file.bytes(&[&CV_ELF.to_le_bytes()[..], id].concat())?,
            None => md::MINIDUMP_LOCATION_DESCRIPTOR::default(),
        };
        list.extend(bytes_of(md::MINIDUMP_MODULE {
            base_of_image: module.start,
            size_of_image: u32::try_from(module.end.saturating_sub(module.start))
                .unwrap_or(u32::MAX),
            module_name_rva: name,
            cv_record,
            ..Default::default()
        })?);
    }
    directory.push((StreamType::ModuleListStream, file.bytes(&list)?));

    let mut list = Vec::new();
    list.extend_from_slice(&(plan.memory.len() as u32).to_le_bytes());
    for (start, bytes) in &plan.memory {
        let range = *start..start + bytes.len() as u64;
        list.extend(bytes_of(md::MINIDUMP_MEMORY_DESCRIPTOR {
            start_of_memory_range: *start,
            memory: location_of(&range)?,
        })?);
    }
    directory.push((StreamType::MemoryListStream, file.bytes(&list)?));

    if let Some(e) = &plan.exception {
        let at = plan.threads.iter().position(|t| t.tid == e.tid);
        let stream = md::MINIDUMP_EXCEPTION_STREAM {
            thread_id: e.tid,
            __align: 0,
            exception_record: md::MINIDUMP_EXCEPTION {
                exception_code: e.signal,
                exception_flags: e.code,
                exception_address: e.address,
                ..Default::default()
            },
            thread_context: at.map(|i| contexts[i]).unwrap_or_default(),
        };
        directory.push((StreamType::ExceptionStream, file.add(stream)?));
    }

    let misc = md::MINIDUMP_MISC_INFO {
        size_of_info: md::MINIDUMP_MISC_INFO::size_with(&LE) as u32,
        flags1: if plan.pid.is_some() { MISC1_PROCESS_ID } else { 0 },
        process_id: plan.pid.unwrap_or(0),
        process_create_time: 0,
        process_user_time: 0,
        process_kernel_time: 0,
    };
    directory.push((StreamType::MiscInfoStream, file.add(misc)?));
    for (kind, bytes) in &plan.linux {
        directory.push((*kind, file.bytes(bytes)?));
    }

    let header = md::MINIDUMP_HEADER {
        signature: md::MINIDUMP_SIGNATURE,
        version: md::MINIDUMP_VERSION,
        stream_count: directory.len() as u32,
        stream_directory_rva: HEADER_SIZE as u32,
        checksum: 0,
        time_date_stamp: plan.time,
        flags: 0,
    };
    file.data.pwrite_with(header, 0, LE).map_err(io::Error::other)?;
    for (i, (kind, location)) in directory.into_iter().enumerate() {
        let entry = md::MINIDUMP_DIRECTORY { stream_type: kind as u32, location };
        let at = HEADER_SIZE + i * DIRECTORY_ENTRY_SIZE;
        file.data.pwrite_with(entry, at, LE).map_err(io::Error::other)?;
    }
    Ok(file.data)
}

fn outside(range: &Range<u64>) -> io::Error {
    io::Error::other(format!(
        "stack {:#x}..{:#x} is outside the dump's memory",
        range.start, range.end
    ))
}

fn rva(offset: u64) -> io::Result<u32> {
    u32::try_from(offset).map_err(|_| {
        io::Error::other("the dump would pass 4 GiB: a minidump's offsets reach 4 GiB")
    })
}

/// The file being laid out: each piece appended at [`ALIGN`], where its
/// RVA is its offset.
struct Layout {
    data: Vec<u8>,
}

impl Layout {
    fn bytes(&mut self, bytes: &[u8]) -> io::Result<md::MINIDUMP_LOCATION_DESCRIPTOR> {
        self.data.resize(self.data.len().next_multiple_of(ALIGN), 0);
        let at = rva(self.data.len() as u64)?;
        self.data.extend_from_slice(bytes);
        Ok(md::MINIDUMP_LOCATION_DESCRIPTOR { data_size: rva(bytes.len() as u64)?, rva: at })
    }

    fn add<T>(&mut self, value: T) -> io::Result<md::MINIDUMP_LOCATION_DESCRIPTOR>
    where
        T: SizeWith<Endian> + TryIntoCtx<Endian, Error = scroll::Error>,
    {
        self.bytes(&bytes_of(value)?)
    }

    /// A `MINIDUMP_STRING` (its length in bytes, UTF-16 text, a NUL): its RVA.
    fn string(&mut self, text: &str) -> io::Result<u32> {
        let utf16: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let mut bytes = (utf16.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&utf16);
        bytes.extend_from_slice(&[0, 0]);
        Ok(self.bytes(&bytes)?.rva)
    }
}

fn bytes_of<T>(value: T) -> io::Result<Vec<u8>>
where
    T: SizeWith<Endian> + TryIntoCtx<Endian, Error = scroll::Error>,
{
    let mut bytes = vec![0; T::size_with(&LE)];
    bytes.pwrite_with(value, 0, LE).map_err(io::Error::other)?;
    Ok(bytes)
}

fn system_info(plan: &Plan<'_>, csd_version_rva: u32) -> md::MINIDUMP_SYSTEM_INFO {
    use md::ProcessorArchitecture as P;
    let architecture = match plan.arch {
        Arch::X86_64 => P::PROCESSOR_ARCHITECTURE_AMD64,
        Arch::Aarch64 => P::PROCESSOR_ARCHITECTURE_ARM64,
        Arch::I386 => P::PROCESSOR_ARCHITECTURE_INTEL,
        Arch::Arm => P::PROCESSOR_ARCHITECTURE_ARM,
    };
    let [major_version, minor_version, build_number] = plan.kernel.unwrap_or_default();
    md::MINIDUMP_SYSTEM_INFO {
        processor_architecture: architecture as u16,
        processor_level: 0,
        processor_revision: 0,
        number_of_processors: plan.processors,
        product_type: 0,
        major_version,
        minor_version,
        build_number,
        platform_id: md::PlatformId::Linux as u32,
        csd_version_rva,
        suite_mask: 0,
        reserved2: 0,
        cpu: md::CPU_INFORMATION { data: [0; 24] },
    }
}

/// A thread's CPU context in its architecture's `CONTEXT_` layout.
fn context(arch: Arch, registers: &[(&'static str, u64)]) -> io::Result<Vec<u8>> {
    let r = |name: &str| registers.iter().find(|(n, _)| *n == name).map_or(0, |&(_, v)| v);
    let r32 = |name: &str| r(name) as u32;
    let r16 = |name: &str| r(name) as u16;
    match arch {
        Arch::X86_64 => bytes_of(md::CONTEXT_AMD64 {
            context_flags: AMD64_FULL,
            cs: r16("cs"),
            ds: r16("ds"),
            es: r16("es"),
            fs: r16("fs"),
            gs: r16("gs"),
            ss: r16("ss"),
            eflags: r32("eflags"),
            rax: r("rax"),
            rcx: r("rcx"),
            rdx: r("rdx"),
            rbx: r("rbx"),
            rsp: r("rsp"),
            rbp: r("rbp"),
            rsi: r("rsi"),
            rdi: r("rdi"),
            r8: r("r8"),
            r9: r("r9"),
            r10: r("r10"),
            r11: r("r11"),
            r12: r("r12"),
            r13: r("r13"),
            r14: r("r14"),
            r15: r("r15"),
            rip: r("rip"),
            ..Default::default()
        }),
        Arch::Aarch64 => bytes_of(md::CONTEXT_ARM64 {
            context_flags: ARM64_FULL,
            cpsr: r32("pstate"),
            iregs: std::array::from_fn(|i| r(Arch::Aarch64.prstatus().names[i])),
            sp: r("sp"),
            pc: r("pc"),
            ..Default::default()
        }),
        Arch::I386 => bytes_of(md::CONTEXT_X86 {
            context_flags: X86_FULL,
            gs: r32("gs"),
            fs: r32("fs"),
            es: r32("es"),
            ds: r32("ds"),
            edi: r32("edi"),
            esi: r32("esi"),
            ebx: r32("ebx"),
            edx: r32("edx"),
            ecx: r32("ecx"),
            eax: r32("eax"),
            ebp: r32("ebp"),
            eip: r32("eip"),
            cs: r32("cs"),
            eflags: r32("eflags"),
            esp: r32("esp"),
            ss: r32("ss"),
            ..Default::default()
        }),
        Arch::Arm => bytes_of(md::CONTEXT_ARM {
            context_flags: ARM_FULL,
            // r0..r12, sp, lr, pc: the first 16 names of NT_PRSTATUS.
            iregs: std::array::from_fn(|i| r32(Arch::Arm.prstatus().names[i])),
            cpsr: r32("cpsr"),
            ..Default::default()
        }),
    }
}
