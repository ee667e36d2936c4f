//! The minidump's streams, each read on its own: a damaged stream is a
//! warning that names it and where it is, never the end of the others.
//! The `minidump` crate reads most of them; the memory list's descriptors
//! are read here, so that a region cut short by a truncated file keeps the
//! bytes the file holds (the crate drops the whole list), and the Linux
//! text streams (maps, status, command line, auxv) are plain text or words.

use std::collections::BTreeMap;

use minidump::format::MINIDUMP_STREAM_TYPE as StreamType;
use minidump::{Minidump, MinidumpMemory64List, MinidumpStream};
// Mapping permissions as ELF `p_flags`, which the modules' placement reads.
use object::elf::{PF_R, PF_W, PF_X};

use crate::source::memory::Segment;

/// The most lines of a maps stream read: a process has at most
/// `vm.max_map_count` mappings (65530 by default).
const MAX_MAPS: usize = 1 << 20;
/// A memory list descriptor: start (8), size (4), rva (4).
const MEMORY_DESCRIPTOR: usize = 16;

/// A line of the Linux maps stream: `start..end` maps `path` (None: an
/// anonymous mapping or a pseudo-path such as `[stack]`) from `offset` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// `r`, `w`, `x` as ELF `p_flags` (`PF_R`, `PF_W`, `PF_X`).
    pub flags: u32,
    pub offset: u64,
    /// The path or pseudo-path (`[vdso]`, `[stack]`); None when anonymous.
    pub path: Option<String>,
}

/// A stream's name as warnings give it, e.g. "thread list stream (3)".
fn stream_name(kind: u32) -> String {
    const NAMES: [(StreamType, &str); 11] = [
        (StreamType::ThreadListStream, "thread list"),
        (StreamType::ModuleListStream, "module list"),
        (StreamType::MemoryListStream, "memory list"),
        (StreamType::ExceptionStream, "exception"),
        (StreamType::SystemInfoStream, "system info"),
        (StreamType::Memory64ListStream, "memory64 list"),
        (StreamType::MiscInfoStream, "misc info"),
        (StreamType::LinuxMaps, "Linux maps"),
        (StreamType::LinuxProcStatus, "Linux status"),
        (StreamType::LinuxCmdLine, "Linux command line"),
        (StreamType::LinuxAuxv, "Linux auxv"),
    ];
    match NAMES.iter().find(|(t, _)| *t as u32 == kind) {
        Some((_, name)) if kind > 0xffff => format!("{name} stream ({kind:#x})"),
        Some((_, name)) => format!("{name} stream ({kind})"),
        None => format!("stream {kind:#x}"),
    }
}

/// The streams of a minidump whose header and directory were read.
pub struct Streams<'a> {
    dump: &'a Minidump<'a, &'a [u8]>,
    file_size: u64,
    /// The address of the file's first byte: where the slices the crate
    /// gives lie in the file.
    file_start: usize,
}

impl<'a> Streams<'a> {
    pub fn new(dump: &'a Minidump<'a, &'a [u8]>, data: &[u8]) -> Self {
        Streams { dump, file_size: data.len() as u64, file_start: data.as_ptr() as usize }
    }

    /// Why the stream of type `kind` cannot be read, naming it and where it is.
    fn damaged(&self, kind: u32, error: &minidump::Error) -> String {
        let name = stream_name(kind);
        let Some(dir) = self.dump.all_streams().find(|d| d.stream_type == kind) else {
            return format!("{name}: {error}");
        };
        let (rva, size) = (u64::from(dir.location.rva), u64::from(dir.location.data_size));
        let at = format!("{name} at {rva:#x} ({size} bytes)");
        if rva + size > self.file_size {
            format!("{at} runs past the end of the file ({} bytes): not read", self.file_size)
        } else {
            format!("{at} cannot be read: {error}")
        }
    }

    /// The stream `S`, parsed by the `minidump` crate; None if the dump has
    /// none, or (with a warning) if it is damaged.
    pub fn get<S: MinidumpStream<'a>>(&self, warnings: &mut Vec<String>) -> Option<S> {
        match self.dump.get_stream::<S>() {
            Ok(stream) => Some(stream),
            Err(minidump::Error::StreamNotFound) => None,
            Err(e) => {
                warnings.push(self.damaged(S::STREAM_TYPE, &e));
                None
            }
        }
    }

    /// The raw bytes of the stream of type `kind`.
    fn raw(&self, kind: StreamType, warnings: &mut Vec<String>) -> Option<&'a [u8]> {
        match self.dump.get_raw_stream(kind as u32) {
            Ok(bytes) => Some(bytes),
            Err(minidump::Error::StreamNotFound) => None,
            Err(e) => {
                warnings.push(self.damaged(kind as u32, &e));
                None
            }
        }
    }

    /// A Linux text stream (maps, status, command line), lossily decoded.
    pub fn text(&self, kind: StreamType, warnings: &mut Vec<String>) -> Option<String> {
        self.raw(kind, warnings).map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    }

    /// The memory list's regions: (address, offset in the file, size). A
    /// count larger than the stream holds is cut to what it holds.
    pub fn memory_list(&self, warnings: &mut Vec<String>) -> Vec<Segment> {
        let kind = StreamType::MemoryListStream;
        let Some(bytes) = self.raw(kind, warnings) else { return Vec::new() };
        let Some(count) = crate::source::corefile::le(bytes, 0, 4) else {
            warnings.push(format!("{}: no count", stream_name(kind as u32)));
            return Vec::new();
        };
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let room = |skip: usize| bytes.len().saturating_sub(skip) / MEMORY_DESCRIPTOR;
        // Some writers put 4 bytes of padding after the count.
        let skip = if room(4) < count && room(8) >= count { 8 } else { 4 };
        let held = room(skip);
        if count > held {
            warnings.push(format!(
                "{}: {count} regions counted, the stream holds {held}",
                stream_name(kind as u32)
            ));
        }
        let descriptors = bytes[skip.min(bytes.len())..].chunks_exact(MEMORY_DESCRIPTOR);
        let mut out = Vec::with_capacity(count.min(held));
        out.extend(descriptors.take(count).filter_map(|d| {
            Some(Segment {
                address: crate::source::corefile::le(d, 0, 8)?,
                size: crate::source::corefile::le(d, 8, 4)?,
                offset: crate::source::corefile::le(d, 12, 4)?,
            })
        }));
        out
    }

    /// The memory64 list's regions (full-memory dumps), as the crate reads them.
    pub fn memory64_list(&self, warnings: &mut Vec<String>) -> Vec<Segment> {
        let Some(list) = self.get::<MinidumpMemory64List>(warnings) else { return Vec::new() };
        list.iter()
            .map(|region| Segment {
                address: region.base_address,
                offset: (region.bytes.as_ptr() as usize).wrapping_sub(self.file_start) as u64,
                size: region.bytes.len() as u64,
            })
            .collect()
    }

    /// The Linux auxv stream: (type, value) words, the first of each type kept.
    pub fn auxv(&self, word: u64, warnings: &mut Vec<String>) -> BTreeMap<u64, u64> {
        let mut auxv = BTreeMap::new();
        let Some(bytes) = self.raw(StreamType::LinuxAuxv, warnings) else { return auxv };
        let word = word as usize;
        for pair in bytes.chunks_exact(2 * word) {
            let (Some(kind), Some(value)) = (
                crate::source::corefile::le(pair, 0, word),
                crate::source::corefile::le(pair, word, word),
            ) else {
                continue;
            };
            if kind == 0 {
                break; // AT_NULL
            }
            auxv.entry(kind).or_insert(value);
        }
        auxv
    }
}

/// The lines of a maps stream (`/proc/PID/maps`) that can be read.
pub fn parse_maps(text: String) -> Vec<MapEntry> {
    text.lines().take(MAX_MAPS).filter_map(parse_map_line).collect()
}

/// `START-END PERMS OFFSET DEV INODE [PATH]`, all numbers in hex but the inode.
fn parse_map_line(line: &str) -> Option<MapEntry> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
    let (_dev, _inode) = (fields.next()?, fields.next()?);
    let path = fields.next().map(str::trim_start).filter(|p| !p.is_empty());
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let perms = perms.as_bytes();
    let flag = |i: usize, c: u8, f: u32| if perms.get(i) == Some(&c) { f } else { 0 };
    Some(MapEntry {
        start,
        end,
        flags: flag(0, b'r', PF_R) | flag(1, b'w', PF_W) | flag(2, b'x', PF_X),
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: path.map(str::to_owned),
    })
    .filter(|m| m.start < m.end)
}

/// The value of `NAME:` in a Linux status stream (`/proc/PID/status`).
pub fn status_field<'t>(status: &'t str, name: &str) -> Option<&'t str> {
    status.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}
