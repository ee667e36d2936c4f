//! ELF core files: the threads, signal, process facts, file mappings and
//! memory of a crashed process, read in place from the mapped file.
//!
//! [`CoreFile::open`] checks the ELF header (little-endian; ELFCLASS64
//! x86_64 or aarch64, ELFCLASS32 i386; `ET_CORE`), reads the program headers
//! (with `e_phnum`'s `PN_XNUM` overflow), takes the `PT_LOAD` segments as
//! the process's memory ([`SegmentMemory`], read in place) and the
//! `PT_NOTE` segments' notes ([`notes`]). Only a header that cannot be read
//! is an error; damage past it (a truncated file, a damaged note) is a
//! warning, and what can still be read is kept. Every field read from the
//! file goes through checked arithmetic and `get`: no input panics.
//!
//! A compressed core (zstd, xz, lz4, gzip: [`compressed`]) is recognised by
//! its magic bytes and read decompressed, held in memory, up to a limit.
//!
//! A core without `NT_FILE` (qemu-user's) names its modules only through
//! the dynamic linker's link map in its memory: [`CoreFile::link_map`].

mod compressed;
pub mod dump;
pub(crate) mod linkmap;
mod notes;
pub mod stream;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::arch::Arch;
use crate::source::memory::{Buffer, Data, Memory, Segment, SegmentMemory};

pub use compressed::{decompress, xz_bytes, Compression, DecompressError};
pub use linkmap::{LinkMapEntry, MAX_ENTRIES};
pub use notes::{FileMapping, Notes, SigInfo, ThreadNotes};

/// The most a compressed core is decompressed to, unless the caller says
/// otherwise: more is taken for a decompression bomb.
pub const DEFAULT_MAX_SIZE: u64 = 8 << 30;
/// A `PT_NOTE` segment larger than this is damaged.
const MAX_NOTES: u64 = 1 << 26;
const ELF_MAGIC: &[u8] = b"\x7fELF";
const ELFCLASS32: u8 = 1;
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const ET_CORE: u64 = 4;
const PT_LOAD: u64 = 1;
const PT_NOTE: u64 = 4;
/// `e_phnum`'s overflow: the real count is section header 0's `sh_info`.
const PN_XNUM: u64 = 0xffff;
/// Auxiliary vector types: the entry point, the 16 random bytes and the
/// program's file name (both in the stack's top), and a bound on the types
/// (51, `AT_MINSIGSTKSZ`, the highest today).
const AT_ENTRY: u64 = 9;
const AT_RANDOM: u64 = 25;
const AT_EXECFN: u64 = 31;
const AT_TYPES: u64 = 64;

/// Why a file is not a core file that can be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum CoreError {
    /// The file cannot be opened or read.
    Io(std::io::Error),
    /// The file cannot be mapped.
    Map(std::io::Error),
    NotElf,
    NotLittleEndian,
    TruncatedHeader,
    /// Another type of ELF file (`e_type`).
    NotCore(u16),
    UnsupportedMachine {
        machine: u16,
        bits: u32,
    },
    ProgramHeaderSize(u16),
    TruncatedSectionHeader(u64),
    TruncatedProgramHeaders(u64),
    /// A compressed file that cannot be decompressed.
    Decompress(Compression, DecompressError),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::Io(e) => f.write_str(&os_message(e)),
            CoreError::Map(e) => write!(f, "cannot map: {}", os_message(e)),
            CoreError::NotElf => f.write_str("not an ELF file"),
            CoreError::NotLittleEndian => {
                f.write_str("not a little-endian 32-bit or 64-bit ELF file")
            }
            CoreError::TruncatedHeader => f.write_str("truncated ELF header"),
            CoreError::NotCore(e_type) => match e_type {
                1 => f.write_str("not a core file: it is a relocatable object"),
                2 => f.write_str("not a core file: it is an executable"),
                3 => f.write_str("not a core file: it is a shared object or PIE executable"),
                other => write!(f, "not a core file: it is an ELF file of type {other}"),
            },
            CoreError::UnsupportedMachine { machine, bits } => {
                write!(f, "unsupported architecture (ELF machine {machine}, {bits}-bit)")
            }
            CoreError::ProgramHeaderSize(size) => write!(f, "bad program header size {size}"),
            CoreError::TruncatedSectionHeader(at) => {
                write!(f, "truncated section header at {at:#x}")
            }
            CoreError::TruncatedProgramHeaders(at) => {
                write!(f, "truncated program headers at {at:#x}")
            }
            CoreError::Decompress(kind, e) => write!(f, "{}-compressed file {e}", kind.name()),
        }
    }
}

impl std::error::Error for CoreError {}

/// An OS error as the C library words it ("No such file or directory"),
/// without Rust's " (os error 2)".
pub(crate) fn os_message(e: &std::io::Error) -> String {
    let text = e.to_string();
    match (e.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(cut)) => text[..cut].to_owned(),
        _ => text,
    }
}

/// A `PT_LOAD` segment of a core: process memory at `vaddr`, `filesz` bytes
/// of it in the file at `offset` (fewer than `memsz` where the dumper left
/// pages out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub flags: u32,
}

impl LoadSegment {
    /// The end of the segment's memory (saturating: a damaged size).
    pub fn end(&self) -> u64 {
        self.vaddr.saturating_add(self.memsz)
    }
}

/// Where the fields of an ELF class's file and program headers are.
struct Layout {
    header: usize,
    phdr: usize,
    word: usize,
    e_phoff: usize,
    e_shoff: usize,
    e_phentsize: usize,
    e_phnum: usize,
    /// Of a section header.
    sh_info: u64,
    // Of a program header:
    p_flags: usize,
    p_offset: usize,
    p_vaddr: usize,
    p_filesz: usize,
    p_memsz: usize,
}

const ELF64: Layout = Layout {
    header: 64,
    phdr: 56,
    word: 8,
    e_phoff: 32,
    e_shoff: 40,
    e_phentsize: 54,
    e_phnum: 56,
    sh_info: 44,
    p_flags: 4,
    p_offset: 8,
    p_vaddr: 16,
    p_filesz: 32,
    p_memsz: 40,
};

const ELF32: Layout = Layout {
    header: 52,
    phdr: 32,
    word: 4,
    e_phoff: 28,
    e_shoff: 32,
    e_phentsize: 42,
    e_phnum: 44,
    sh_info: 28,
    p_flags: 24,
    p_offset: 4,
    p_vaddr: 8,
    p_filesz: 16,
    p_memsz: 20,
};

/// The little-endian unsigned value of `size` (1 to 8) bytes at `at`, if
/// `data` holds them.
pub(crate) fn le(data: &[u8], at: usize, size: usize) -> Option<u64> {
    let bytes = data.get(at..at.checked_add(size)?)?;
    let mut buf = [0u8; 8];
    buf.get_mut(..size)?.copy_from_slice(bytes);
    Some(u64::from_le_bytes(buf))
}

/// `data[start..start + len]`, cut to what `data` holds.
fn slice_at(data: &[u8], start: u64, len: u64) -> &[u8] {
    let start = usize::try_from(start).unwrap_or(usize::MAX).min(data.len());
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    &data[start..start.saturating_add(len).min(data.len())]
}

/// An ELF core file, read: see the module's documentation.
pub struct CoreFile {
    pub arch: Arch,
    /// The `PT_LOAD` segments, in the order of the program headers.
    pub segments: Vec<LoadSegment>,
    /// The segments' bytes the file holds, as the process's memory.
    pub memory: Arc<SegmentMemory>,
    pub notes: Notes,
    /// What is damaged, in the order found.
    pub warnings: Vec<String>,
}

impl CoreFile {
    /// Map the file at `path` and read it; a compressed file is
    /// decompressed, to at most [`DEFAULT_MAX_SIZE`] bytes.
    pub fn open(path: &Path) -> Result<CoreFile, CoreError> {
        CoreFile::open_with_limit(path, DEFAULT_MAX_SIZE)
    }

    /// [`CoreFile::open`], a compressed file decompressed to at most
    /// `max_size` bytes (more is an error).
    pub fn open_with_limit(path: &Path, max_size: u64) -> Result<CoreFile, CoreError> {
        let file = crate::source::files::open_regular(path).map_err(CoreError::Io)?;
        let meta = file.metadata().map_err(CoreError::Io)?;
        if meta.len() == 0 {
            return Err(CoreError::NotElf);
        }
        let map = crate::source::files::map_file(&file).map_err(CoreError::Map)?;
        match Compression::detect(&map) {
            None => CoreFile::from_data(Data::Mapped(map)),
            Some(kind) => {
                let data = compressed::decompress(kind, &map, max_size)
                    .map_err(|e| CoreError::Decompress(kind, e))?;
                drop(map);
                if data.is_empty() {
                    return Err(CoreError::NotElf);
                }
                CoreFile::from_data(data)
            }
        }
    }

    /// Read a core file held in `data`.
    pub fn from_data(data: Data) -> Result<CoreFile, CoreError> {
        let mut warnings = Vec::new();
        let (arch, segments, note_ranges) = read_headers(&data, &mut warnings)?;
        let mut note_warnings = Vec::new();
        let note_data: Vec<&[u8]> =
            note_ranges.iter().map(|&(offset, size)| slice_at(&data, offset, size)).collect();
        let notes = notes::parse(&note_data, arch, &mut note_warnings);
        let captured: Vec<Segment> = segments
            .iter()
            .filter(|s| s.filesz > 0)
            .map(|s| Segment { address: s.vaddr, offset: s.offset, size: s.filesz })
            .collect();
        let memory = SegmentMemory::new(data, &captured);
        if memory.missing_bytes > 0 {
            warnings.push(format!(
                "core is truncated: {} bytes of segments missing",
                memory.missing_bytes
            ));
        }
        warnings.append(&mut note_warnings);
        Ok(CoreFile { arch, segments, memory: Arc::new(memory), notes, warnings })
    }

    /// Which thread crashed, by the threads' signals (`crate::source::signal`).
    pub fn crash(&self) -> crate::source::signal::Crash {
        use crate::source::signal::{Crash, Signal};
        Crash::by_signal(
            self.notes.threads.iter().map(|t| {
                Signal::of(t.cursig.into(), t.siginfo.map(|s| (s.signo, s.code, s.address)))
            }),
        )
    }

    /// The NUL-terminated string at `address` in the process's memory, at
    /// most `limit` bytes before the NUL; None where it is not all captured.
    pub fn string(&self, address: u64, limit: usize) -> Option<Vec<u8>> {
        self.memory.string(address, limit)
    }

    /// Where the main thread's stack began: the address of `argc`, which the
    /// kernel put below the program's arguments, environment and auxiliary
    /// vector. Nothing above it is a frame (the auxiliary vector holds the
    /// entry point's address, which a scan would take for a return address).
    /// Found from the auxiliary vector's copy in memory (its `AT_ENTRY`
    /// pair, in the segment `AT_RANDOM` or `AT_EXECFN` points into), walked
    /// back over the environment's and the arguments' pointers to a count of
    /// the arguments that matches them; None where any of it is missing.
    pub fn initial_stack(&self) -> Option<u64> {
        initial_stack(self.arch, &self.notes.auxv, &self.memory)
    }

    /// The dynamic linker's link map, for a process whose executable has its
    /// `PT_DYNAMIC` at runtime address `dynamic`: see [`linkmap`].
    pub fn link_map(&self, dynamic: u64) -> (Vec<LinkMapEntry>, Vec<String>) {
        linkmap::read_link_map(&self.memory, self.arch.word_size(), dynamic)
    }
}

/// [`CoreFile::initial_stack`] of any process's memory and auxiliary vector
/// (a core's, a minidump's).
pub fn initial_stack(arch: Arch, auxv: &BTreeMap<u64, u64>, memory: &SegmentMemory) -> Option<u64> {
    let w = arch.word_size();
    let entry = *auxv.get(&AT_ENTRY)?;
    let inside = auxv.get(&AT_RANDOM).or_else(|| auxv.get(&AT_EXECFN))?;
    let (start, bytes) = memory.segment_of(*inside)?;
    let word = |address: u64| Buffer { start, bytes }.read_sized(address, w as u8);
    let mut pair = Vec::with_capacity(2 * w as usize);
    for value in [AT_ENTRY, entry] {
        pair.extend_from_slice(&value.to_le_bytes()[..w as usize]);
    }
    // The vector lies just below the random bytes, and below the file
    // name's string by no more than the arguments' and environment's
    // strings: looked for in the 4 MiB below, not in a segment of any size.
    let near = usize::try_from(inside - start).ok()?;
    let from = near.saturating_sub(4 << 20);
    let window = bytes.get(from..near.saturating_add(4096).min(bytes.len()))?;
    // Every pair is word-aligned: a match elsewhere is no pair.
    let mut at = 0;
    let found = loop {
        let i = at + memchr::memmem::find(window.get(at..)?, &pair)?;
        if (start + (from + i) as u64) % w == 0 {
            break start + (from + i) as u64;
        }
        at = i + 1;
    };
    // Back to the vector's first pair: the types are small numbers, the
    // word before the first pair the environment's terminating NULL.
    let mut first = found;
    while let Some(kind) = first.checked_sub(2 * w).and_then(word) {
        if kind == 0 || kind > AT_TYPES {
            break;
        }
        first -= 2 * w;
    }
    let mut at = first.checked_sub(w)?;
    if word(at)? != 0 {
        return None;
    }
    // The environment's pointers, then the arguments' terminating NULL.
    at = at.checked_sub(w)?;
    while word(at)? != 0 {
        at = at.checked_sub(w)?;
    }
    // The arguments' pointers (into the same segment), then their count.
    // ARM's glibc `_start` pops argc and pushes argv's address in its place:
    // a word pointing right above itself is no argument's string, and is
    // taken for the count.
    let mut count = 0u64;
    at = at.checked_sub(w)?;
    loop {
        let value = word(at)?;
        if value == count || (arch == Arch::Arm && value == at.wrapping_add(w)) {
            return Some(at);
        }
        if value < start || value - start >= bytes.len() as u64 {
            return None;
        }
        count += 1;
        at = at.checked_sub(w)?;
    }
}

/// What the first decompressed bytes of a compressed core say of it: an
/// error where they are not an ELF core's, its size where its program
/// headers are among them (the end of its last segment or note), None
/// where they are too few to tell (or the headers lie past them).
pub(crate) fn core_extent(head: &[u8]) -> Option<Result<u64, CoreError>> {
    match read_headers(head, &mut Vec::new()) {
        Ok((_, segments, notes)) => {
            let loads = segments.iter().map(|s| s.offset.saturating_add(s.filesz));
            let notes = notes.iter().map(|&(offset, size)| offset.saturating_add(size));
            // The section headers, where a writer adds them (gdb's gcore, after
            // the segments): e_shoff + e_shnum * e_shentsize.
            let (shoff, shentsize, shnum) = match head[4] {
                ELFCLASS64 => (le(head, 40, 8), le(head, 58, 2), le(head, 60, 2)),
                _ => (le(head, 32, 4), le(head, 46, 2), le(head, 48, 2)),
            };
            let sections = shoff
                .zip(shentsize)
                .zip(shnum)
                .map(|((off, size), n)| off.saturating_add(size.saturating_mul(n.max(1))));
            let ends = loads.chain(notes).chain(sections.filter(|_| shoff != Some(0)));
            Some(Ok(ends.max().unwrap_or(head.len() as u64)))
        }
        Err(CoreError::TruncatedHeader)
        | Err(CoreError::TruncatedProgramHeaders(_))
        | Err(CoreError::TruncatedSectionHeader(_)) => None,
        Err(e) => Some(Err(e)),
    }
}

/// The ELF header and program headers: the architecture, the `PT_LOAD`s,
/// and (offset, size) of each `PT_NOTE`'s bytes in the file.
#[allow(clippy::type_complexity)]
fn read_headers(
    data: &[u8],
    warnings: &mut Vec<String>,
) -> Result<(Arch, Vec<LoadSegment>, Vec<(u64, u64)>), CoreError> {
    let size = data.len() as u64;
    if data.len() < 16 || &data[..4] != ELF_MAGIC {
        return Err(CoreError::NotElf);
    }
    let layout = match (data[4], data[5]) {
        (ELFCLASS64, ELFDATA2LSB) => &ELF64,
        (ELFCLASS32, ELFDATA2LSB) => &ELF32,
        _ => return Err(CoreError::NotLittleEndian),
    };
    if data.len() < layout.header {
        return Err(CoreError::TruncatedHeader);
    }
    // The header is all there: these reads cannot fail.
    let field = |at, n| le(data, at, n).unwrap_or(0);
    let e_type = field(16, 2);
    let machine = field(18, 2) as u16;
    if e_type != ET_CORE {
        return Err(CoreError::NotCore(e_type as u16));
    }
    let arch = match (data[4], machine) {
        (ELFCLASS64, object::elf::EM_X86_64) => Arch::X86_64,
        (ELFCLASS64, object::elf::EM_AARCH64) => Arch::Aarch64,
        (ELFCLASS32, object::elf::EM_386) => Arch::I386,
        (ELFCLASS32, object::elf::EM_ARM) => Arch::Arm,
        _ => {
            let bits = 8 * layout.word as u32;
            return Err(CoreError::UnsupportedMachine { machine, bits });
        }
    };
    let phentsize = field(layout.e_phentsize, 2);
    if phentsize != layout.phdr as u64 {
        return Err(CoreError::ProgramHeaderSize(phentsize as u16));
    }
    let phoff = field(layout.e_phoff, layout.word);
    let shoff = field(layout.e_shoff, layout.word);
    let mut phnum = field(layout.e_phnum, 2);
    if phnum == PN_XNUM {
        let at = shoff.checked_add(layout.sh_info).filter(|&at| at.saturating_add(4) <= size);
        let at = at.ok_or(CoreError::TruncatedSectionHeader(shoff))?;
        phnum = le(data, at as usize, 4).ok_or(CoreError::TruncatedSectionHeader(shoff))?;
    }
    let table_size = phnum * layout.phdr as u64; // phnum < 2^32: no overflow
    let table = phoff
        .checked_add(table_size)
        .filter(|&end| end <= size)
        .map(|_| slice_at(data, phoff, table_size))
        .ok_or(CoreError::TruncatedProgramHeaders(phoff))?;
    let mut segments = Vec::new();
    let mut notes = Vec::new();
    for phdr in table.chunks_exact(layout.phdr) {
        let get = |at: usize| le(phdr, at, if at == layout.p_flags { 4 } else { layout.word });
        let (Some(p_type), Some(flags), Some(offset), Some(vaddr), Some(filesz), Some(memsz)) = (
            le(phdr, 0, 4),
            get(layout.p_flags),
            get(layout.p_offset),
            get(layout.p_vaddr),
            get(layout.p_filesz),
            get(layout.p_memsz),
        ) else {
            continue; // cannot be: chunks_exact gives whole headers
        };
        match p_type {
            PT_LOAD => {
                segments.push(LoadSegment { vaddr, offset, filesz, memsz, flags: flags as u32 })
            }
            PT_NOTE if filesz > MAX_NOTES => {
                warnings.push(format!("note segment at {offset:#x} too large, skipped"))
            }
            PT_NOTE if offset >= size => {
                warnings.push(format!("note segment at {offset:#x} lies past the end"))
            }
            PT_NOTE => {
                if offset.saturating_add(filesz) > size {
                    warnings.push(format!("note segment at {offset:#x} is truncated"));
                }
                notes.push((offset, filesz));
            }
            _ => {}
        }
    }
    Ok((arch, segments, notes))
}

#[cfg(test)]
mod tests;
