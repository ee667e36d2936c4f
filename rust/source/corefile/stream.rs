//! A core read as the kernel pipes it to a `core_pattern` program: once, in
//! order, never held whole. The headers and notes come first (the threads'
//! registers, the auxiliary vector, the files mapped); of the memory after
//! them only what a minidump takes is kept (`dump.rs`: each stack from its
//! sp, the memory around each register, the vdso), with the first page of
//! each file mapping (its ELF headers and build id) and the top of the main
//! thread's stack (the arguments and the auxiliary vector). The rest is read
//! and dropped a chunk at a time.
//!
//! What is kept is given back as a small ELF core of its own (the segments
//! not kept hold no bytes, as in a core gdb writes), which is then read as
//! any core. Reading stops early, keeping what was read, at a size or a
//! time limit: the kernel waits on the pipe, and the crashed process with
//! it.

use std::io::{self, Read};
use std::ops::Range;
use std::time::Instant;

use super::dump::{merge_ranges, thread_memory, vdso_image, DumpOptions};
use super::{le, notes, read_headers, slice_at, CoreError, Layout, LoadSegment, ELF32, ELF64};
use super::{AT_EXECFN, AT_RANDOM, ELFCLASS64, MAX_NOTES, PT_LOAD, PT_NOTE};

/// The most bytes of headers and notes read before the memory (the program
/// headers of 65,535 segments and their notes, and then some).
const MAX_HEAD: usize = 80 << 20;
const CHUNK: usize = 1 << 20;
/// What is kept of the main thread's stack below the arguments' strings.
const INITIAL_STACK: u64 = 128 << 10;
const PAGE: u64 = 4096;

/// How much is read, and for how long.
#[derive(Clone, Debug)]
pub struct StreamLimits {
    /// The most bytes read from the input; the rest is left unread.
    pub max_bytes: u64,
    /// When reading stops, whatever is left.
    pub deadline: Option<Instant>,
    /// What the dump will keep (stack bytes, memory around registers).
    pub dump: DumpOptions,
}

/// The core kept, and how the reading went.
pub struct Streamed {
    /// A small ELF core of the parts kept.
    pub core: Vec<u8>,
    /// Bytes read from the input.
    pub read: u64,
    /// Why reading stopped before the end (a limit), if it did.
    pub stopped: Option<String>,
}

/// Read the core `input` gives (see the module's documentation).
/// CoreError where its headers or notes cannot be read; damage past them
/// (a short input) is a core with less in it.
pub fn stream(input: &mut dyn Read, limits: &StreamLimits) -> Result<Streamed, CoreError> {
    let mut reader = Reader { input, read: 0, limits, stopped: None };
    // The headers, then the notes (the kernel writes them before the memory).
    let mut head = Vec::new();
    let (arch, segments) = loop {
        match read_headers(&head, &mut Vec::new()) {
            Ok((arch, segments, _)) => break (arch, segments),
            Err(CoreError::NotElf) if head.len() < 16 => {}
            Err(CoreError::TruncatedHeader | CoreError::TruncatedProgramHeaders(_)) => {}
            Err(CoreError::TruncatedSectionHeader(_)) => {
                return Err(CoreError::Io(io::Error::other(
                    "more than 65,534 mappings (PN_XNUM): their count is after the memory",
                )))
            }
            Err(e) => return Err(e),
        }
        if head.len() >= MAX_HEAD || reader.more(&mut head, CHUNK)? == 0 {
            return Err(read_headers(&head, &mut Vec::new()).err().unwrap_or(CoreError::NotElf));
        }
    };
    let layout = if head[4] == ELFCLASS64 { &ELF64 } else { &ELF32 };
    // Every PT_NOTE, where or however large (read_headers keeps those in
    // the bytes it was given).
    let note_ranges = note_segments(&head, layout);
    if note_ranges.iter().any(|&(_, size)| size > MAX_NOTES) {
        return Err(CoreError::Io(io::Error::other("a note segment larger than 64 MiB")));
    }
    let notes_end = note_ranges.iter().map(|&(o, s)| o.saturating_add(s)).max().unwrap_or(0);
    let first_load = segments.iter().filter(|s| s.filesz > 0).map(|s| s.offset).min();
    if first_load.is_some_and(|at| at < notes_end) {
        return Err(CoreError::Io(io::Error::other(
            "the notes lie after the memory: not a core as the kernel writes one",
        )));
    }
    while (head.len() as u64) < notes_end && head.len() < MAX_HEAD {
        let want = (notes_end - head.len() as u64).min(CHUNK as u64) as usize;
        if reader.more(&mut head, want)? == 0 {
            break;
        }
    }
    let note_data: Vec<&[u8]> =
        note_ranges.iter().map(|&(offset, size)| slice_at(&head, offset, size)).collect();
    let notes = notes::parse(&note_data, arch, &mut Vec::new());

    // What is kept of the memory, by address.
    let extent = |address: u64| {
        let inside = |s: &&LoadSegment| s.vaddr <= address && address - s.vaddr < s.filesz;
        let s = segments.iter().find(inside)?;
        Some(s.vaddr..s.vaddr + s.filesz)
    };
    let mut wanted = Vec::new();
    for thread in &notes.threads {
        let registers: Vec<(&'static str, u64)> = thread.named_registers(arch).collect();
        let (stack, near) = thread_memory(arch, &registers, &limits.dump, &extent);
        wanted.push(stack);
        wanted.extend(near);
    }
    wanted.extend(vdso_image(&notes.auxv, &extent));
    for file in notes.files.iter().flatten().filter(|f| f.offset == 0) {
        wanted.extend(extent(file.start).map(|r| file.start..r.end.min(file.start + PAGE)));
    }
    let top = [AT_RANDOM, AT_EXECFN].iter().filter_map(|t| notes.auxv.get(t)).min();
    if let Some(r) = top.and_then(|&at| extent(at).map(|r| (at, r))) {
        wanted.push(r.0.saturating_sub(INITIAL_STACK).max(r.1.start)..r.1.end);
    }

    // The memory, in the input's order: each segment's kept parts read,
    // the rest dropped.
    let mut order: Vec<&LoadSegment> = segments.iter().filter(|s| s.filesz > 0).collect();
    order.sort_by_key(|s| s.offset);
    let mut kept: Vec<(u64, Vec<u8>)> = Vec::new();
    'segments: for s in order {
        for range in parts(s, &wanted) {
            let offset = s.offset + (range.start - s.vaddr);
            let len = range.end - range.start;
            let mut bytes = Vec::with_capacity(len as usize);
            // Bytes the headers' reading took already.
            let held = head.get(offset as usize..).unwrap_or_default();
            bytes.extend_from_slice(&held[..held.len().min(len as usize)]);
            let at = offset + bytes.len() as u64;
            if bytes.len() as u64 != len {
                if !reader.skip_to(at)? {
                    break 'segments;
                }
                let rest = (len - bytes.len() as u64) as usize;
                let got = reader.exactly(&mut bytes, rest)?;
                if !got {
                    if !bytes.is_empty() {
                        kept.push((range.start, bytes));
                    }
                    break 'segments;
                }
            }
            kept.push((range.start, bytes));
        }
    }
    let core = compact(&head, layout, &segments, &note_ranges, &kept);
    Ok(Streamed { core, read: reader.read, stopped: reader.stopped })
}

/// (offset, size) of each `PT_NOTE` of the headers at the start of `head`
/// (which holds the whole table: read_headers said so).
fn note_segments(head: &[u8], layout: &Layout) -> Vec<(u64, u64)> {
    let field = |at: usize, n: usize| le(head, at, n).unwrap_or(0);
    let phoff = field(layout.e_phoff, layout.word) as usize;
    let phnum = field(layout.e_phnum, 2) as usize;
    let table = head.get(phoff..).unwrap_or_default();
    table
        .chunks_exact(layout.phdr)
        .take(phnum)
        .filter(|phdr| le(phdr, 0, 4) == Some(PT_NOTE))
        .map(|phdr| {
            let get = |at: usize| le(phdr, at, layout.word).unwrap_or(0);
            (get(layout.p_offset), get(layout.p_filesz))
        })
        .collect()
}

/// The parts of segment `s` that `wanted` asks for, sorted and merged.
fn parts(s: &LoadSegment, wanted: &[Range<u64>]) -> Vec<Range<u64>> {
    let end = s.vaddr.saturating_add(s.filesz);
    let inside = wanted.iter().map(|r| r.start.max(s.vaddr)..r.end.min(end)).collect();
    merge_ranges(inside, |_| Some(s.vaddr)).into_iter().map(|(_, r)| r).collect()
}

/// The input, read in order, with its limits.
struct Reader<'r> {
    input: &'r mut dyn Read,
    read: u64,
    limits: &'r StreamLimits,
    stopped: Option<String>,
}

impl Reader<'_> {
    /// Whether a limit stops the reading here (and why, the first time).
    fn limited(&mut self) -> bool {
        if self.stopped.is_none() {
            if self.read >= self.limits.max_bytes {
                self.stopped = Some(format!("stopped at the size limit, {} bytes", self.read));
            } else if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
                self.stopped = Some(format!("stopped at the time limit, {} bytes read", self.read));
            }
        }
        self.stopped.is_some()
    }

    /// Up to `most` more bytes onto `buf` (fewer only at the end, or at a
    /// limit): how many.
    fn more(&mut self, buf: &mut Vec<u8>, most: usize) -> Result<usize, CoreError> {
        if self.limited() {
            return Ok(0);
        }
        let most = most.min((self.limits.max_bytes - self.read) as usize);
        let start = buf.len();
        buf.resize(start + most, 0);
        let n = loop {
            match self.input.read(&mut buf[start..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(CoreError::Io(e)),
            }
        };
        buf.truncate(start + n);
        self.read += n as u64;
        Ok(n)
    }

    /// Read and drop the bytes up to input offset `at`: false where the
    /// input or a limit ends first.
    fn skip_to(&mut self, at: u64) -> Result<bool, CoreError> {
        let mut sink = Vec::with_capacity(CHUNK);
        while self.read < at {
            sink.clear();
            let want = (at - self.read).min(CHUNK as u64) as usize;
            if self.more(&mut sink, want)? == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `len` more bytes onto `buf`: false where the input or a limit ends
    /// first (what was read is on `buf`).
    fn exactly(&mut self, buf: &mut Vec<u8>, len: usize) -> Result<bool, CoreError> {
        let target = buf.len() + len;
        while buf.len() < target {
            let want = (target - buf.len()).min(CHUNK);
            if self.more(buf, want)? == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A segment of the small core: bytes in the file, or a size with none.
enum Piece<'a> {
    Bytes(&'a [u8]),
    Empty(u64),
}

/// A core of the ELF header of `head`, its notes and the parts `kept`:
/// each segment split where its kept parts start and end, the others with
/// no bytes in the file.
fn compact(
    head: &[u8],
    layout: &Layout,
    segments: &[LoadSegment],
    note_ranges: &[(u64, u64)],
    kept: &[(u64, Vec<u8>)],
) -> Vec<u8> {
    let mut entries: Vec<(u64, u32, u64, Piece<'_>)> = Vec::new();
    for &(offset, size) in note_ranges {
        entries.push((PT_NOTE, 0, 0, Piece::Bytes(slice_at(head, offset, size))));
    }
    for s in segments {
        let end = s.vaddr.saturating_add(s.memsz);
        let mut at = s.vaddr;
        for (start, bytes) in kept.iter().filter(|(a, _)| s.vaddr <= *a && *a < end) {
            if at < *start {
                entries.push((PT_LOAD, s.flags, at, Piece::Empty(start - at)));
            }
            entries.push((PT_LOAD, s.flags, *start, Piece::Bytes(bytes)));
            at = start + bytes.len() as u64;
        }
        if at < end {
            entries.push((PT_LOAD, s.flags, at, Piece::Empty(end - at)));
        }
    }
    // At most 65,534 headers (beyond needs PN_XNUM): the last empty pieces go.
    while entries.len() > 0xfffe {
        let Some(i) = entries.iter().rposition(|e| matches!(e.3, Piece::Empty(_))) else { break };
        entries.remove(i);
    }
    let w = layout.word;
    let mut out = head[..layout.header].to_vec();
    let put = |out: &mut Vec<u8>, at: usize, size: usize, value: u64| {
        out[at..at + size].copy_from_slice(&value.to_le_bytes()[..size]);
    };
    put(&mut out, layout.e_phoff, w, layout.header as u64);
    put(&mut out, layout.e_shoff, w, 0);
    put(&mut out, layout.e_phnum, 2, entries.len() as u64);
    // e_shentsize, e_shnum, e_shstrndx: no section headers.
    for i in 1..=3 {
        put(&mut out, layout.e_phnum + 2 * i, 2, 0);
    }
    let mut data_at = (layout.header + entries.len() * layout.phdr) as u64;
    let mut table = Vec::with_capacity(entries.len() * layout.phdr);
    for (kind, flags, vaddr, bytes) in &entries {
        let mut phdr = vec![0u8; layout.phdr];
        let (filesz, memsz) = match bytes {
            Piece::Bytes(b) => (b.len() as u64, b.len() as u64),
            Piece::Empty(size) => (0, *size),
        };
        put(&mut phdr, 0, 4, *kind);
        put(&mut phdr, layout.p_flags, 4, u64::from(*flags));
        put(&mut phdr, layout.p_offset, w, if filesz > 0 { data_at } else { 0 });
        put(&mut phdr, layout.p_vaddr, w, *vaddr);
        put(&mut phdr, layout.p_filesz, w, filesz);
        put(&mut phdr, layout.p_memsz, w, memsz);
        data_at += filesz;
        table.extend_from_slice(&phdr);
    }
    out.extend_from_slice(&table);
    for (_, _, _, bytes) in &entries {
        if let Piece::Bytes(b) = bytes {
            out.extend_from_slice(b);
        }
    }
    out
}
