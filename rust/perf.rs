//! A streaming reader for `perf.data`, the file `perf record` writes.
//!
//! The layout around the records is described in the kernel tree's
//! `tools/perf/Documentation/perf.data-file-format.txt`; the records
//! themselves in `include/uapi/linux/perf_event.h`. A file is a header
//! (sections for the event attributes and the data, and a bitmap of the
//! optional "feature" sections stored after the data), then the data
//! section: a stream of records, each an 8-byte header `{u32 type, u16 misc,
//! u16 size}` and `size - 8` bytes of payload.
//!
//! [`PerfFile`] reads the header and the feature sections it knows at open,
//! then hands out one record at a time, in file order, decoded into an
//! [`Event`] that borrows the reader's own buffers: a record is at most
//! 64 KiB (its size is a `u16`), so one fixed buffer serves the whole file
//! and reading allocates nothing per record. Damage (a truncated file, bytes
//! that are not records) is an error naming the file offset; the events
//! before it have been returned, and the reader then ends.
//!
//! Pipe mode (`perf record -o -`, a 16-byte header with the attributes and
//! features sent as records) is read too. Not supported: big-endian files,
//! the version 1 format (`PERFFILE`), and zstd-compressed records
//! (`perf record -z`), which are reported as errors.

use std::fmt;
use std::io::{self, Cursor, Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::arch::{Arch, PerfReg};
use crate::memory::Data;
use crate::registers::Registers;

// Record types (`enum perf_event_type`, and perf's own from 64 on).
pub const PERF_RECORD_MMAP: u32 = 1;
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_COMM: u32 = 3;
pub const PERF_RECORD_EXIT: u32 = 4;
pub const PERF_RECORD_FORK: u32 = 7;
pub const PERF_RECORD_SAMPLE: u32 = 9;
pub const PERF_RECORD_MMAP2: u32 = 10;
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;
pub const PERF_RECORD_HEADER_ATTR: u32 = 64;
pub const PERF_RECORD_HEADER_TRACING_DATA: u32 = 66;
pub const PERF_RECORD_HEADER_BUILD_ID: u32 = 67;
pub const PERF_RECORD_FINISHED_ROUND: u32 = 68;
pub const PERF_RECORD_AUXTRACE: u32 = 71;
pub const PERF_RECORD_HEADER_FEATURE: u32 = 80;
pub const PERF_RECORD_COMPRESSED: u32 = 81;

// `perf_event_attr.sample_type` bits, in the order the fields appear.
pub const PERF_SAMPLE_IP: u64 = 1 << 0;
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_SAMPLE_ADDR: u64 = 1 << 3;
pub const PERF_SAMPLE_READ: u64 = 1 << 4;
pub const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const PERF_SAMPLE_ID: u64 = 1 << 6;
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
pub const PERF_SAMPLE_PERIOD: u64 = 1 << 8;
pub const PERF_SAMPLE_STREAM_ID: u64 = 1 << 9;
pub const PERF_SAMPLE_RAW: u64 = 1 << 10;
pub const PERF_SAMPLE_BRANCH_STACK: u64 = 1 << 11;
pub const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
pub const PERF_SAMPLE_STACK_USER: u64 = 1 << 13;
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;

// `perf_event_attr.read_format` bits.
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const PERF_FORMAT_ID: u64 = 1 << 2;
const PERF_FORMAT_GROUP: u64 = 1 << 3;
const PERF_FORMAT_LOST: u64 = 1 << 4;

/// `branch_sample_type` bit: each branch stack starts with a `hw_idx` word.
const PERF_SAMPLE_BRANCH_HW_INDEX: u64 = 1 << 17;
/// `perf_event_attr` flag bit `sample_id_all`.
const ATTR_FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;

// `perf_event_header.misc`.
pub const PERF_RECORD_MISC_CPUMODE_MASK: u16 = 7;
pub const PERF_RECORD_MISC_KERNEL: u16 = 1;
pub const PERF_RECORD_MISC_USER: u16 = 2;
/// MMAP/MMAP2: a data (not executable) mapping.
pub const PERF_RECORD_MISC_MMAP_DATA: u16 = 1 << 13;
/// COMM: the name changed because the task called exec.
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
/// MMAP2: the record holds a build id instead of device and inode numbers.
pub const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// A build-id entry of the `HEADER_BUILD_ID` feature carries its own size.
const PERF_RECORD_MISC_BUILD_ID_SIZE: u16 = 1 << 15;

// Callchain context markers (`enum perf_callchain_context`): callchain
// entries at or above `PERF_CONTEXT_MAX` are markers, not addresses.
pub const PERF_CONTEXT_HV: u64 = -32i64 as u64;
pub const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
pub const PERF_CONTEXT_USER: u64 = -512i64 as u64;
pub const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;

/// `regs_abi` of a sample with no user registers (a kernel thread).
pub const PERF_SAMPLE_REGS_ABI_NONE: u64 = 0;

// Feature bits (perf's `HEADER_*`) this reader decodes.
pub const HEADER_BUILD_ID: u32 = 2;
pub const HEADER_HOSTNAME: u32 = 3;
pub const HEADER_OSRELEASE: u32 = 4;
pub const HEADER_VERSION: u32 = 5;
pub const HEADER_ARCH: u32 = 6;
pub const HEADER_CMDLINE: u32 = 11;

const MAGIC: &[u8; 8] = b"PERFILE2";
const FILE_HEADER_SIZE: usize = 104;
const PIPE_HEADER_SIZE: u64 = 16;
/// `perf_event_attr` as first published; smaller attributes are damage.
const ATTR_SIZE_VER0: usize = 64;
/// The largest record: `perf_event_header.size` is a `u16`.
const MAX_RECORD: usize = 1 << 16;
const BUILD_ID_MAX: usize = 20;
/// Bounds on what a damaged header can make the reader allocate.
const MAX_ATTRS: usize = 1 << 16;
const MAX_IDS: usize = 1 << 22;
const MAX_FEATURE_SIZE: u64 = 64 << 20;
const MAX_BUILD_IDS: usize = 1 << 20;

/// What went wrong, and where (a byte offset in the file).
#[derive(Debug)]
#[non_exhaustive]
pub enum PerfError {
    /// The file does not start with `PERFILE2`.
    BadMagic { magic: [u8; 8] },
    /// A perf.data variant this reader does not read.
    Unsupported { offset: u64, what: &'static str },
    /// The file ends inside its header or a section the header points to.
    TruncatedHeader { offset: u64, what: &'static str },
    /// The header (or a header record, in pipe mode) is inconsistent.
    BadHeader { offset: u64, what: &'static str },
    /// A feature section could not be decoded.
    BadFeature { feature: u32, offset: u64, what: &'static str },
    /// The file ends inside the record that starts at `offset`.
    TruncatedRecord { offset: u64 },
    /// A record header whose size cannot even hold the header itself.
    RecordTooSmall { offset: u64, size: u16 },
    /// The record's contents are inconsistent: garbage in the data section.
    BadRecord { offset: u64, type_: u32, what: &'static str },
    /// The operating system failed to read the file.
    Io { offset: u64, source: io::Error },
}

impl PerfError {
    /// Where in the file the error is.
    pub fn offset(&self) -> u64 {
        match self {
            PerfError::BadMagic { .. } => 0,
            PerfError::Unsupported { offset, .. }
            | PerfError::TruncatedHeader { offset, .. }
            | PerfError::BadHeader { offset, .. }
            | PerfError::BadFeature { offset, .. }
            | PerfError::TruncatedRecord { offset }
            | PerfError::RecordTooSmall { offset, .. }
            | PerfError::BadRecord { offset, .. }
            | PerfError::Io { offset, .. } => *offset,
        }
    }
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfError::BadMagic { magic } => write!(
                f,
                "not a perf.data file: bad magic {:?} (expected \"PERFILE2\")",
                String::from_utf8_lossy(magic)
            ),
            PerfError::Unsupported { offset, what } => {
                write!(f, "unsupported perf.data at offset {offset:#x}: {what}")
            }
            PerfError::TruncatedHeader { offset, what } => {
                write!(f, "truncated perf.data: the file ends at offset {offset:#x} inside {what}")
            }
            PerfError::BadHeader { offset, what } => {
                write!(f, "damaged perf.data header at offset {offset:#x}: {what}")
            }
            PerfError::BadFeature { feature, offset, what } => {
                write!(
                    f,
                    "damaged perf.data feature section {feature} at offset {offset:#x}: {what}"
                )
            }
            PerfError::TruncatedRecord { offset } => write!(
                f,
                "truncated perf.data: the file ends inside the record at offset {offset:#x}"
            ),
            PerfError::RecordTooSmall { offset, size } => write!(
                f,
                "garbage in perf.data: record at offset {offset:#x} has size {size} (< 8)"
            ),
            PerfError::BadRecord { offset, type_, what } => write!(
                f,
                "garbage in perf.data: record at offset {offset:#x} (type {type_}): {what}"
            ),
            PerfError::Io { offset, source } => {
                write!(f, "cannot read perf.data at offset {offset:#x}: {source}")
            }
        }
    }
}

impl std::error::Error for PerfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PerfError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// One `perf_event_attr`: what an event sampled, and so how its records read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub type_: u32,
    pub config: u64,
    /// The sample period, or the frequency when `freq` is set in `flags`.
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The attribute's flag bits (`disabled`, `inherit`, ... as one word).
    pub flags: u64,
    pub sample_id_all: bool,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    /// The ids the kernel gave this event's instances (one per cpu or thread).
    pub ids: Vec<u64>,
}

/// An entry of the `HEADER_BUILD_ID` feature: the build id of a file that
/// samples hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdEntry {
    /// -1 for the host (`perf` files all modules under the host machine).
    pub pid: i32,
    /// The cpumode (`PERF_RECORD_MISC_KERNEL` / `_USER`) in the low bits.
    pub misc: u16,
    pub build_id: Vec<u8>,
    pub filename: String,
}

/// What the file's header and feature sections say.
#[derive(Debug, Default)]
pub struct PerfHeader {
    /// Written by `perf record -o -`: no sections, attributes sent as records.
    pub pipe_mode: bool,
    pub attrs: Vec<Attr>,
    /// `HEADER_ARCH`, `uname -m` of the recording machine (e.g. "x86_64").
    pub arch: Option<String>,
    pub hostname: Option<String>,
    pub os_release: Option<String>,
    pub perf_version: Option<String>,
    /// `HEADER_CMDLINE`: perf's argv (the first entry is perf itself).
    pub cmdline: Option<Vec<String>>,
    pub build_ids: Vec<BuildIdEntry>,
    pub data_offset: u64,
    /// As the header gives it: 0 when `perf record` did not finish writing
    /// the file; the data then runs to the end of the file.
    pub data_size: u64,
    /// The feature bitmap (`HEADER_*` bit numbers; 256 bits).
    pub features: [u64; 4],
    /// The first error met reading the feature sections (a file truncated
    /// in its data loses them): the data can still be read.
    pub feature_error: Option<PerfError>,
}

impl PerfHeader {
    /// The recording machine's architecture: `HEADER_ARCH` when the file
    /// has it, otherwise a guess from the user-register mask perf asks for
    /// by default on each architecture (x86_64 `0xff0fff`; aarch64 x0-x30,
    /// sp, pc: 33 bits).
    pub fn arch(&self) -> Option<Arch> {
        if let Some(name) = &self.arch {
            return name.parse().ok();
        }
        let mask = self.attrs.first()?.sample_regs_user;
        match mask {
            0xff_0fff => Some(Arch::X86_64),
            0x1_ffff_ffff => Some(Arch::Aarch64),
            _ => None,
        }
    }

    pub fn has_feature(&self, feature: u32) -> bool {
        feature < 256 && self.features[(feature / 64) as usize] & (1 << (feature % 64)) != 0
    }
}

/// A `PERF_RECORD_SAMPLE`. Fields the attribute did not ask for are 0 /
/// `None` / empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// Index in [`PerfHeader::attrs`] of the event this sample belongs to.
    pub attr_index: usize,
    /// The header's misc bits; `misc & PERF_RECORD_MISC_CPUMODE_MASK` is
    /// where the cpu was (`PERF_RECORD_MISC_KERNEL`, `_USER`, ...).
    pub misc: u16,
    /// `PERF_SAMPLE_IDENTIFIER` or `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    pub ip: u64,
    pub pid: i32,
    pub tid: i32,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    /// The raw callchain, with its `PERF_CONTEXT_*` markers.
    pub callchain: Option<Words<'a>>,
    /// `PERF_SAMPLE_REGS_ABI_*`: 0 (none: no registers), 1 (32-bit), 2 (64-bit).
    pub regs_abi: u64,
    /// Which perf registers `regs` holds (0 when there are none).
    pub regs_mask: u64,
    /// `popcount(regs_mask)` little-endian u64s, in ascending bit order.
    pub regs: &'a [u8],
    /// The copy of the user stack from the sampled stack pointer up,
    /// trimmed to the bytes the kernel actually copied (`dyn_size`).
    pub stack: &'a [u8],
}

impl Sample<'_> {
    /// The user register with perf index `perf_index`, if sampled.
    pub fn user_reg(&self, perf_index: u32) -> Option<u64> {
        if perf_index >= 64 || self.regs_mask & (1 << perf_index) == 0 {
            return None;
        }
        let slot = (self.regs_mask & ((1u64 << perf_index) - 1)).count_ones() as usize;
        read_u64(self.regs, slot * 8)
    }

    pub fn cpumode(&self) -> u16 {
        self.misc & PERF_RECORD_MISC_CPUMODE_MASK
    }
}

/// Little-endian u64s read in place from a record (which need not be
/// 8-byte aligned in memory): no copy, no allocation.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Words<'a>(&'a [u8]);

impl<'a> Words<'a> {
    pub fn is_empty(&self) -> bool {
        self.0.len() < 8
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + Clone + 'a {
        self.0.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
    }

    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }
}

impl fmt::Debug for Words<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A `PERF_RECORD_MMAP` or `PERF_RECORD_MMAP2`: a file (or anonymous memory,
/// `[vdso]`, ...) mapped at `start..start + len` from file offset `pgoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapEvent<'a> {
    pub misc: u16,
    /// -1 for the kernel's own mappings.
    pub pid: i32,
    pub tid: i32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    /// Up to the first NUL.
    pub filename: &'a [u8],
    /// MMAP2 only.
    pub prot: Option<u32>,
    /// MMAP2 only (`MAP_*`).
    pub flags: Option<u32>,
    /// MMAP2 with `PERF_RECORD_MISC_MMAP_BUILD_ID`.
    pub build_id: Option<&'a [u8]>,
    /// MMAP2 without a build id.
    pub inode: Option<Inode>,
    /// From the `sample_id_all` trailer.
    pub time: Option<u64>,
}

impl MmapEvent<'_> {
    /// Whether the mapping holds code: MMAP2 says so by its protection,
    /// MMAP records are executable unless flagged as data.
    pub fn executable(&self) -> bool {
        match self.prot {
            Some(prot) => prot & 4 != 0, // PROT_EXEC
            None => self.misc & PERF_RECORD_MISC_MMAP_DATA == 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inode {
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub generation: u64,
}

/// One record of the data section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    Sample(Sample<'a>),
    Mmap(MmapEvent<'a>),
    /// A task's name; `exec` when it changed because of an exec.
    Comm {
        pid: i32,
        tid: i32,
        comm: &'a [u8],
        exec: bool,
        time: Option<u64>,
    },
    /// A new task. `time` is the `sample_id_all` trailer's when there is
    /// one (perf orders and prints by it), else the record's own.
    Fork {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
        time: u64,
    },
    /// A task ended; `time` as for `Fork`.
    Exit {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
        time: u64,
    },
    /// perf wrote everything up to here before anything after: no record
    /// after it is older than one before the previous round.
    FinishedRound,
    /// Any other record, including samples whose id no attribute declares
    /// (perf skips those too) and pipe mode's header records (their
    /// contents go into [`PerfHeader`]).
    Other {
        type_: u32,
    },
}

impl Event<'_> {
    pub fn time(&self) -> Option<u64> {
        match self {
            Event::Sample(s) => s.time,
            Event::Mmap(m) => m.time,
            Event::Comm { time, .. } => *time,
            Event::Fork { time, .. } | Event::Exit { time, .. } => Some(*time),
            Event::FinishedRound | Event::Other { .. } => None,
        }
    }
}

/// A sample's user registers as the unwinder takes them: the program
/// counter, and the other registers by DWARF column. Registers perf sampled
/// that have no column (flags, segments) are left out. No registers (a
/// kernel thread's sample, `regs_abi` 0) gives `(None, empty)`.
pub fn sample_registers(arch: Arch, sample: &Sample<'_>) -> (Option<u64>, Registers) {
    let mut regs = Registers::new();
    let mut pc = None;
    let mut mask = sample.regs_mask;
    let mut slot = 0;
    while mask != 0 {
        let index = mask.trailing_zeros();
        mask &= mask - 1;
        let Some(value) = read_u64(sample.regs, slot * 8) else { break };
        slot += 1;
        match arch.perf_reg(index) {
            PerfReg::Column(col) => regs.set(col, value),
            PerfReg::Pc => pc = Some(value),
            PerfReg::Ignored => {}
        }
    }
    (pc, regs)
}

/// Decodes records: the attributes and the index of their ids. Shared
/// read-only (it is `Sync`), so worker threads can decode samples in place.
#[derive(Debug, Default)]
pub struct Decoder {
    attrs: Vec<Attr>,
    index: AttrIndex,
}

impl Decoder {
    fn new(attrs: &[Attr]) -> Decoder {
        Decoder { attrs: attrs.to_vec(), index: AttrIndex::build(attrs) }
    }

    /// The event in `rec` (a whole record, header included) found at file
    /// offset `offset`.
    pub fn decode<'r>(&self, rec: &'r [u8], offset: u64) -> Result<Event<'r>, PerfError> {
        decode(rec, offset, &self.attrs, &self.index)
    }

    /// The leading fields of the sample in `rec` (a whole `PERF_RECORD_SAMPLE`
    /// record), read without the rest: its callchain, registers and stack
    /// are not looked at, nor checked (`decode` checks them). `Ok(None)` when
    /// its event id is unknown, as `decode` gives `Event::Other`.
    pub fn sample_ids(&self, rec: &[u8], offset: u64) -> Result<Option<SampleIds>, PerfError> {
        let Some(i) = self.index.for_sample(&self.attrs, rec, offset)? else { return Ok(None) };
        let ids = leading_fields(&mut Fields::new(rec, 8), self.attrs[i].sample_type);
        let cut = "fields run past the end of the record";
        ids.map(Some).ok_or_else(|| bad(offset, PERF_RECORD_SAMPLE, cut))
    }
}

/// Where the event id sits in records, per the first attribute (perf
/// requires every attribute of a file to agree on it).
#[derive(Debug, Default)]
struct AttrIndex {
    /// (id, attr index), sorted by id.
    by_id: Vec<(u64, usize)>,
    /// In a sample: the byte offset of the id.
    sample_id_at: Option<usize>,
    /// In other records' trailer: the id's distance from the end, in words.
    trailer_id_from_end: Option<usize>,
}

impl AttrIndex {
    fn build(attrs: &[Attr]) -> AttrIndex {
        let mut by_id: Vec<(u64, usize)> = attrs
            .iter()
            .enumerate()
            .flat_map(|(i, a)| a.ids.iter().map(move |&id| (id, i)))
            .collect();
        by_id.sort_unstable();
        let st = attrs.first().map_or(0, |a| a.sample_type);
        let (sample_id_at, trailer_id_from_end) = if st & PERF_SAMPLE_IDENTIFIER != 0 {
            (Some(8), Some(1))
        } else if st & PERF_SAMPLE_ID != 0 {
            let before = [PERF_SAMPLE_IP, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_ADDR];
            let words = before.iter().filter(|&&b| st & b != 0).count();
            let after = [PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU];
            (Some(8 + 8 * words), Some(1 + after.iter().filter(|&&b| st & b != 0).count()))
        } else {
            (None, None)
        };
        AttrIndex { by_id, sample_id_at, trailer_id_from_end }
    }

    fn lookup(&self, id: u64) -> Option<usize> {
        self.by_id.binary_search_by_key(&id, |&(i, _)| i).ok().map(|k| self.by_id[k].1)
    }

    /// The attribute of a sample record; `Ok(None)` when its id is unknown.
    fn for_sample(
        &self,
        attrs: &[Attr],
        rec: &[u8],
        offset: u64,
    ) -> Result<Option<usize>, PerfError> {
        match (attrs.len(), self.sample_id_at) {
            (0, _) => Err(bad(offset, PERF_RECORD_SAMPLE, "a sample before any event attribute")),
            (1, _) | (_, None) => Ok(Some(0)),
            (_, Some(at)) => {
                let id = read_u64(rec, at)
                    .ok_or_else(|| bad(offset, PERF_RECORD_SAMPLE, "too short for its event id"))?;
                Ok(self.lookup(id))
            }
        }
    }

    /// The attribute that shapes the `sample_id_all` trailer of a record
    /// other than a sample (the first one when the id says nothing).
    fn for_trailer<'a>(&self, attrs: &'a [Attr], rec: &[u8]) -> Option<&'a Attr> {
        let first = attrs.first()?;
        if attrs.len() > 1 && first.sample_id_all {
            if let Some(words) = self.trailer_id_from_end {
                let at = rec.len().checked_sub(8 * words)?;
                if at >= 8 {
                    if let Some(i) = read_u64(rec, at).and_then(|id| self.lookup(id)) {
                        return attrs.get(i);
                    }
                }
            }
        }
        Some(first)
    }
}

/// A streaming perf.data reader over `R` (the whole file, positioned at
/// its start; wrap a `File` in a `BufReader`).
pub struct PerfFile<R> {
    reader: R,
    header: PerfHeader,
    decoder: Arc<Decoder>,
    /// The whole file, when it is mapped: records are then read in place
    /// rather than copied into `buf`.
    map: Option<Arc<Data>>,
    /// The current record, header included (stream mode).
    buf: Box<[u8]>,
    /// File offset of the next record to read.
    pos: u64,
    /// End of the data section; `None`: read to the end of the file.
    data_end: Option<u64>,
    /// A record already in `buf` (read ahead in pipe mode): offset, size.
    pending: Option<(u64, usize)>,
    /// Maps a mapped file's pages ahead of the reading and drops them
    /// behind it, on a thread of its own.
    pager: Option<Pager>,
    /// An error met reading ahead, for the next call to report.
    deferred_error: Option<PerfError>,
    done: bool,
}

impl<R: Read + Seek> PerfFile<R> {
    /// Read the header, the attributes and the feature sections.
    pub fn new(mut reader: R) -> Result<Self, PerfError> {
        let mut head = [0u8; FILE_HEADER_SIZE];
        let got = read_full(&mut reader, &mut head[..16]).map_err(|e| io_error(0, e))?;
        if got >= 8 {
            let magic: [u8; 8] = head[..8].try_into().unwrap_or_default();
            check_magic(&magic)?;
        }
        if got < 16 {
            return Err(PerfError::TruncatedHeader { offset: got as u64, what: "the file header" });
        }
        let size = read_u64(&head, 8).unwrap_or(0);
        let mut file = PerfFile {
            reader,
            header: PerfHeader::default(),
            decoder: Arc::default(),
            map: None,
            pager: None,
            buf: vec![0u8; MAX_RECORD].into_boxed_slice(),
            pos: 0,
            data_end: None,
            pending: None,
            deferred_error: None,
            done: false,
        };
        if size == PIPE_HEADER_SIZE {
            file.open_pipe()?;
        } else if size >= FILE_HEADER_SIZE as u64 {
            let got = read_full(&mut file.reader, &mut head[16..]).map_err(|e| io_error(16, e))?;
            if got < FILE_HEADER_SIZE - 16 {
                return Err(PerfError::TruncatedHeader {
                    offset: 16 + got as u64,
                    what: "the file header",
                });
            }
            file.open_file(&head)?;
        } else {
            return Err(PerfError::BadHeader { offset: 8, what: "impossible header size" });
        }
        Ok(file)
    }

    fn open_file(&mut self, head: &[u8; FILE_HEADER_SIZE]) -> Result<(), PerfError> {
        let word = |at: usize| read_u64(head, at).unwrap_or(0);
        let attr_size = word(16);
        let (attrs_offset, attrs_size) = (word(24), word(32));
        let (data_offset, data_size) = (word(40), word(48));
        // 56..72: the event_types section, unused since perf 2.6.3x.
        let features = [word(72), word(80), word(88), word(96)];
        let file_len = self.reader.seek(SeekFrom::End(0)).map_err(|e| {
            if e.raw_os_error() == Some(29) {
                // ESPIPE: the file format has its sections at offsets.
                return PerfError::Unsupported {
                    offset: 0,
                    what: "the file format read from a pipe (it is read by seeking); \
                           record with `perf record -o -` to stream a recording",
                };
            }
            io_error(0, e)
        })?;
        self.header.data_offset = data_offset;
        self.header.data_size = data_size;
        self.header.features = features;

        if attr_size < (ATTR_SIZE_VER0 + 16) as u64 || attr_size > MAX_RECORD as u64 {
            return Err(PerfError::BadHeader { offset: 16, what: "impossible attribute size" });
        }
        let attrs_end = attrs_offset
            .checked_add(attrs_size)
            .ok_or(PerfError::BadHeader { offset: 24, what: "attribute section out of range" })?;
        if attrs_end > file_len {
            return Err(PerfError::TruncatedHeader {
                offset: file_len,
                what: "the attribute section",
            });
        }
        let count = attrs_size / attr_size;
        if count as usize > MAX_ATTRS {
            return Err(PerfError::BadHeader { offset: 32, what: "too many attributes" });
        }
        let mut entry = vec![0u8; attr_size as usize];
        let mut total_ids = 0usize;
        for i in 0..count {
            let at = attrs_offset + i * attr_size;
            self.read_at(at, &mut entry, "an attribute")?;
            let (mut attr, attr_len) = parse_attr(&entry)
                .ok_or(PerfError::BadHeader { offset: at, what: "impossible attribute size" })?;
            // Each attribute is followed by the section of its ids.
            let ids_section = entry.get(attr_len..attr_len + 16).ok_or(PerfError::BadHeader {
                offset: at,
                what: "attribute larger than the header's attribute size",
            })?;
            let ids_offset = read_u64(ids_section, 0).unwrap_or(0);
            let ids_size = read_u64(ids_section, 8).unwrap_or(0);
            let ids_end = ids_offset.checked_add(ids_size).filter(|&e| e <= file_len).ok_or(
                PerfError::TruncatedHeader { offset: file_len, what: "an attribute's id section" },
            )?;
            let n = ((ids_end - ids_offset) / 8) as usize;
            total_ids += n;
            if total_ids > MAX_IDS {
                return Err(PerfError::BadHeader { offset: at, what: "too many event ids" });
            }
            let mut raw = vec![0u8; n * 8];
            self.read_at(ids_offset, &mut raw, "an attribute's id section")?;
            attr.ids = raw.chunks_exact(8).filter_map(|c| read_u64(c, 0)).collect();
            self.header.attrs.push(attr);
        }
        self.decoder = Arc::new(Decoder::new(&self.header.attrs));

        let data_end = data_offset
            .checked_add(data_size)
            .ok_or(PerfError::BadHeader { offset: 40, what: "data section out of range" })?;
        if data_size == 0 {
            // perf record never finished the file: no features, data to EOF.
            self.data_end = None;
        } else {
            self.data_end = Some(data_end);
            if let Err(e) = self.read_features(data_end, file_len) {
                self.header.feature_error = Some(e);
            }
        }
        self.reader.seek(SeekFrom::Start(data_offset)).map_err(|e| io_error(data_offset, e))?;
        self.pos = data_offset;
        Ok(())
    }

    /// The feature sections: a table of (offset, size) after the data, one
    /// per bit set in the bitmap, in bit order.
    fn read_features(&mut self, table: u64, file_len: u64) -> Result<(), PerfError> {
        let mut slot = 0u64;
        for feature in 1..256u32 {
            if !self.header.has_feature(feature) {
                continue;
            }
            let entry_at = table.saturating_add(16 * slot);
            slot += 1;
            if !matches!(
                feature,
                HEADER_BUILD_ID
                    | HEADER_HOSTNAME
                    | HEADER_OSRELEASE
                    | HEADER_VERSION
                    | HEADER_ARCH
                    | HEADER_CMDLINE
            ) {
                continue;
            }
            let mut entry = [0u8; 16];
            self.read_at(entry_at, &mut entry, "the feature section table")?;
            let offset = read_u64(&entry, 0).unwrap_or(0);
            let size = read_u64(&entry, 8).unwrap_or(0);
            if size > MAX_FEATURE_SIZE {
                return Err(PerfError::BadFeature { feature, offset, what: "impossible size" });
            }
            if offset.checked_add(size).is_none_or(|end| end > file_len) {
                return Err(PerfError::TruncatedHeader {
                    offset: file_len,
                    what: "a feature section",
                });
            }
            let mut data = vec![0u8; size as usize];
            self.read_at(offset, &mut data, "a feature section")?;
            decode_feature(&mut self.header, feature, &data)
                .map_err(|what| PerfError::BadFeature { feature, offset, what })?;
        }
        Ok(())
    }

    fn read_at(
        &mut self,
        offset: u64,
        buf: &mut [u8],
        what: &'static str,
    ) -> Result<(), PerfError> {
        self.reader.seek(SeekFrom::Start(offset)).map_err(|e| io_error(offset, e))?;
        let got = read_full(&mut self.reader, buf).map_err(|e| io_error(offset, e))?;
        if got < buf.len() {
            return Err(PerfError::TruncatedHeader {
                offset: offset.saturating_add(got as u64),
                what,
            });
        }
        Ok(())
    }

    /// Pipe mode: read the header records (features, attributes) that open
    /// the stream, up to the first other record, which stays in the buffer.
    fn open_pipe(&mut self) -> Result<(), PerfError> {
        self.header.pipe_mode = true;
        self.header.data_offset = PIPE_HEADER_SIZE;
        self.pos = PIPE_HEADER_SIZE;
        loop {
            match self.read_record() {
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Ok(Some((offset, size))) => {
                    let type_ = read_u32(self.bytes(offset, size), 0).unwrap_or(0);
                    if type_ == PERF_RECORD_HEADER_ATTR || type_ == PERF_RECORD_HEADER_FEATURE {
                        self.absorb_header_record(type_, offset, size)?;
                    } else {
                        self.pending = Some((offset, size));
                        break;
                    }
                }
                Err(e) if self.header.attrs.is_empty() => return Err(e),
                Err(e) => {
                    self.deferred_error = Some(e);
                    break;
                }
            }
        }
        Ok(())
    }

    pub fn header(&self) -> &PerfHeader {
        &self.header
    }

    /// The file offset of the record the next call to [`next_event`]
    /// returns (or of the end of the data).
    ///
    /// [`next_event`]: PerfFile::next_event
    pub fn next_offset(&self) -> u64 {
        self.pending.map_or(self.pos, |(offset, _)| offset)
    }

    /// The next record, in file order; `Ok(None)` at the end of the data.
    /// After an error every later call returns `Ok(None)`.
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>, PerfError> {
        let Some((offset, size)) = self.next_record()? else { return Ok(None) };
        let rec = record_bytes(&self.map, &self.buf, offset, size);
        match decode(rec, offset, &self.decoder.attrs, &self.decoder.index) {
            Ok(event) => Ok(Some(event)),
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// The decoder of this file's records (it changes only when pipe mode
    /// sends an attribute record).
    pub fn decoder(&self) -> &Arc<Decoder> {
        &self.decoder
    }

    /// The next record, in file order, as `(offset, size)`: its bytes are
    /// [`bytes`](PerfFile::bytes)`(offset, size)`, to decode with
    /// [`decoder`](PerfFile::decoder). Header records (attributes, features,
    /// build ids) have been folded into the header. `Ok(None)` at the end of
    /// the data; after an error every later call returns `Ok(None)`.
    pub fn next_record(&mut self) -> Result<Option<(u64, usize)>, PerfError> {
        if self.done {
            return Ok(None);
        }
        if let Some(e) = self.deferred_error.take() {
            self.done = true;
            return Err(e);
        }
        let (offset, size) = match self.pending.take() {
            Some(record) => record,
            None => match self.read_record() {
                Ok(Some(record)) => record,
                Ok(None) => {
                    self.done = true;
                    return Ok(None);
                }
                Err(e) => {
                    self.done = true;
                    return Err(e);
                }
            },
        };
        let type_ = read_u32(self.bytes(offset, size), 0).unwrap_or(0);
        if let Err(e) = self.absorb_header_record(type_, offset, size) {
            self.done = true;
            return Err(e);
        }
        Ok(Some((offset, size)))
    }

    /// Read the record at `self.pos` (into the buffer, unless the file is
    /// mapped): `(offset, size)`, or `None` at the end of the data.
    fn read_record(&mut self) -> Result<Option<(u64, usize)>, PerfError> {
        let offset = self.pos;
        if let Some(end) = self.data_end {
            if offset >= end {
                return Ok(None);
            }
            if end - offset < 8 {
                return Err(PerfError::BadRecord {
                    offset,
                    type_: 0,
                    what: "the data section ends inside a record header",
                });
            }
        }
        let mut head = [0u8; 8];
        let got = match &self.map {
            Some(map) => {
                let rest = usize::try_from(offset).ok().and_then(|o| map.get(o..)).unwrap_or(&[]);
                let n = rest.len().min(8);
                head[..n].copy_from_slice(&rest[..n]);
                n
            }
            None => read_full(&mut self.reader, &mut head).map_err(|e| io_error(offset, e))?,
        };
        if got == 0 && self.data_end.is_none() {
            return Ok(None);
        }
        if got < 8 {
            return Err(PerfError::TruncatedRecord { offset });
        }
        let type_ = read_u32(&head, 0).unwrap_or(0);
        let size = read_u16(&head, 6).unwrap_or(0);
        if size < 8 {
            return Err(PerfError::RecordTooSmall { offset, size });
        }
        let end = offset.saturating_add(u64::from(size));
        if self.data_end.is_some_and(|data_end| end > data_end) {
            return Err(bad(offset, type_, "runs past the end of the data section"));
        }
        let size = usize::from(size);
        match &self.map {
            Some(map) => {
                if end > map.len() as u64 {
                    return Err(PerfError::TruncatedRecord { offset });
                }
                if let Some(pager) = &mut self.pager {
                    pager.reached(end);
                }
            }
            None => {
                self.buf[..8].copy_from_slice(&head);
                let got = read_full(&mut self.reader, &mut self.buf[8..size])
                    .map_err(|e| io_error(offset.saturating_add(8), e))?;
                if got < size - 8 {
                    return Err(PerfError::TruncatedRecord { offset });
                }
            }
        }
        self.pos = end;
        // Two record types carry a payload their size does not count.
        let payload = match type_ {
            PERF_RECORD_AUXTRACE => read_u64(self.bytes(offset, size), 8),
            PERF_RECORD_HEADER_TRACING_DATA => self
                .bytes(offset, size)
                .get(8..)
                .and_then(|b| read_u32(b, 0))
                .map(|n| u64::from(n).next_multiple_of(8)),
            _ => None,
        };
        if let Some(n) = payload.filter(|&n| n > 0) {
            let payload_end = end
                .checked_add(n)
                .filter(|&e| self.data_end.is_none_or(|data_end| e <= data_end))
                .ok_or_else(|| {
                    bad(offset, type_, "payload runs past the end of the data section")
                })?;
            match &self.map {
                Some(map) if payload_end > map.len() as u64 => {
                    return Err(PerfError::TruncatedRecord { offset });
                }
                Some(_) => {}
                None => {
                    let skipped = io::copy(&mut (&mut self.reader).take(n), &mut io::sink())
                        .map_err(|e| io_error(end, e))?;
                    if skipped < n {
                        return Err(PerfError::TruncatedRecord { offset });
                    }
                }
            }
            self.pos = payload_end;
        }
        Ok(Some((offset, size)))
    }

    /// The bytes of a record [`next_record`] returned, while it is the
    /// current one (or, for a mapped file, at any time).
    ///
    /// [`next_record`]: PerfFile::next_record
    pub fn bytes(&self, offset: u64, size: usize) -> &[u8] {
        record_bytes(&self.map, &self.buf, offset, size)
    }

    /// Fold a header record (attribute, feature, build id: pipe mode sends
    /// them as records, `perf inject` may add build ids) into the header.
    fn absorb_header_record(
        &mut self,
        type_: u32,
        offset: u64,
        size: usize,
    ) -> Result<(), PerfError> {
        if !matches!(
            type_,
            PERF_RECORD_HEADER_ATTR | PERF_RECORD_HEADER_FEATURE | PERF_RECORD_HEADER_BUILD_ID
        ) {
            return Ok(());
        }
        let rec = record_bytes(&self.map, &self.buf, offset, size);
        match type_ {
            PERF_RECORD_HEADER_ATTR => {
                let body = &rec[8..];
                let (mut attr, attr_len) = parse_attr(body)
                    .ok_or(PerfError::BadHeader { offset, what: "impossible attribute size" })?;
                let ids = body.get(attr_len..).unwrap_or_default();
                let total: usize = self.header.attrs.iter().map(|a| a.ids.len()).sum();
                if self.header.attrs.len() >= MAX_ATTRS || total + ids.len() / 8 > MAX_IDS {
                    return Err(PerfError::BadHeader { offset, what: "too many attributes" });
                }
                attr.ids = ids.chunks_exact(8).filter_map(|c| read_u64(c, 0)).collect();
                self.header.attrs.push(attr);
                self.decoder = Arc::new(Decoder::new(&self.header.attrs));
            }
            PERF_RECORD_HEADER_FEATURE => {
                let feature = read_u64(rec, 8).unwrap_or(u64::MAX);
                if let Ok(feature) = u32::try_from(feature) {
                    if feature < 256 {
                        self.header.features[(feature / 64) as usize] |= 1 << (feature % 64);
                    }
                    let data = rec.get(16..).unwrap_or_default();
                    decode_feature(&mut self.header, feature, data)
                        .map_err(|what| PerfError::BadFeature { feature, offset, what })?;
                }
            }
            PERF_RECORD_HEADER_BUILD_ID => {
                if self.header.build_ids.len() >= MAX_BUILD_IDS {
                    return Err(bad(offset, type_, "too many build ids"));
                }
                let entry = parse_build_id(rec).ok_or_else(|| bad(offset, type_, "malformed"))?;
                self.header.build_ids.push(entry);
            }
            _ => {}
        }
        Ok(())
    }
}

/// A multiple of any page size, the unit of mapping advice.
const GRAIN: usize = 1 << 20;

/// A record's bytes: in the mapping, else the stream's buffer.
fn record_bytes<'s>(
    map: &'s Option<Arc<Data>>,
    buf: &'s [u8],
    offset: u64,
    size: usize,
) -> &'s [u8] {
    match map {
        Some(map) => usize::try_from(offset)
            .ok()
            .and_then(|o| map.get(o..o.checked_add(size)?))
            .unwrap_or(&[]),
        None => buf.get(..size).unwrap_or(&[]),
    }
}

/// A file's bytes behind an `Arc`, readable through a `Cursor`.
#[derive(Clone)]
pub struct SharedBytes(pub Arc<Data>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl<R> PerfFile<R> {
    /// The file's bytes, when it was opened with [`PerfFile::from_data`].
    pub fn mapped(&self) -> Option<&Arc<Data>> {
        self.map.as_ref()
    }
}

impl<R> PerfFile<R> {
    /// Records before `offset` will not be read again (through
    /// [`PerfFile::bytes`] or the caller's own reference to the mapping):
    /// their pages can leave this process, so that memory stays flat however
    /// long the file. They stay in the page cache and would be read back in
    /// if touched again.
    pub fn release_before(&mut self, offset: u64) {
        if let Some(pager) = &mut self.pager {
            pager.release = usize::try_from(offset).unwrap_or(usize::MAX);
        }
    }
}

/// The pager of a mapped perf.data file: told where the reading is, it
/// maps the next few MiB (rather than leaving the faults to the reading
/// and unwinding threads), and drops the pages released.
struct Pager {
    to_thread: std::sync::mpsc::Sender<(usize, usize)>,
    /// The reading position at which to tell the thread again.
    next: usize,
    release: usize,
    /// Where the pages have been dropped up to, by either thread.
    released: Arc<AtomicUsize>,
    data: Arc<Data>,
}

impl Pager {
    const AHEAD: usize = 8 << 20;
    /// One read per this many bytes maps them all: a fault on a file
    /// mapping maps the pages around it that are in the page cache (64 KiB
    /// by default). `MADV_POPULATE_READ` costs more: it walks every page.
    const TOUCH: usize = 64 << 10;
    /// How far the pager thread's dropping may fall behind (it may wait for
    /// a CPU while the reading goes on) before the reading thread drops the
    /// pages itself: memory stays bounded however the threads are scheduled.
    const LAG: usize = 8 << 20;

    fn start(data: Arc<Data>) -> Option<Pager> {
        if !matches!(*data, Data::Mapped(_)) {
            return None;
        }
        let (to_thread, from_reader) = std::sync::mpsc::channel::<(usize, usize)>();
        let released = Arc::new(AtomicUsize::new(0));
        let (thread_data, thread_released) = (data.clone(), released.clone());
        std::thread::Builder::new()
            .name("perf.data pager".into())
            .spawn(move || {
                let Data::Mapped(map) = &*thread_data else { return };
                let mut populated = 0usize;
                while let Ok((reached, release)) = from_reader.recv() {
                    drop_before(map, &thread_released, release);
                    let end = reached.saturating_add(Pager::AHEAD).min(map.len());
                    let mut at = populated.max(reached / GRAIN * GRAIN);
                    while at < end {
                        // SAFETY: `at` is inside the mapping.
                        unsafe { std::ptr::read_volatile(map.as_ptr().add(at)) };
                        at += Pager::TOUCH;
                    }
                    populated = populated.max(end.next_multiple_of(GRAIN));
                }
            })
            .ok()?;
        let mut pager = Pager { to_thread, next: 0, release: 0, released, data };
        pager.reached(0);
        Some(pager)
    }

    fn reached(&mut self, pos: u64) {
        let pos = usize::try_from(pos).unwrap_or(usize::MAX);
        if pos >= self.next {
            let _ = self.to_thread.send((pos, self.release));
            self.next = pos.saturating_add(Pager::AHEAD / 2);
            let behind = self.release.saturating_sub(self.released.load(Ordering::Relaxed));
            if behind > Pager::LAG {
                if let Data::Mapped(map) = &*self.data {
                    drop_before(map, &self.released, self.release);
                }
            }
        }
    }
}

/// Drop the pages of `map` before `to` (rounded down to a grain) that are
/// not dropped yet, from whichever thread gets there first.
fn drop_before(map: &memmap2::Mmap, released: &AtomicUsize, to: usize) {
    let to = to.min(map.len()) / GRAIN * GRAIN;
    let from = released.fetch_max(to, Ordering::Relaxed);
    if to > from {
        // SAFETY: a read-only file mapping: dropped pages are read back from
        // the file if touched again, so every slice of the mapping stays
        // valid.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from)
        };
    }
}

impl PerfFile<Cursor<SharedBytes>> {
    /// A perf.data file already in memory (mapped): records are read in
    /// place, never copied, and stay readable through [`PerfFile::bytes`]
    /// (or the caller's own reference to `data`) after later reads.
    pub fn from_data(data: Arc<Data>) -> Result<Self, PerfError> {
        let mut file = PerfFile::new(Cursor::new(SharedBytes(data.clone())))?;
        file.pager = Pager::start(data.clone());
        file.map = Some(data);
        Ok(file)
    }
}

fn check_magic(magic: &[u8; 8]) -> Result<(), PerfError> {
    if magic == MAGIC {
        return Ok(());
    }
    let mut swapped = *MAGIC;
    swapped.reverse();
    if *magic == swapped {
        return Err(PerfError::Unsupported { offset: 0, what: "big-endian perf.data" });
    }
    if magic == b"PERFFILE" {
        return Err(PerfError::Unsupported { offset: 0, what: "version 1 perf.data (PERFFILE)" });
    }
    Err(PerfError::BadMagic { magic: *magic })
}

/// A `perf_event_attr` at the start of `bytes`, and its size.
fn parse_attr(bytes: &[u8]) -> Option<(Attr, usize)> {
    let size = match read_u32(bytes, 4)? as usize {
        0 => ATTR_SIZE_VER0,
        n if n < ATTR_SIZE_VER0 => return None,
        n => n,
    };
    let attr = bytes.get(..size)?;
    let word = |at: usize| read_u64(attr, at).unwrap_or(0);
    let flags = word(40);
    let stack_user = read_u32(attr, 88).unwrap_or(0);
    Some((
        Attr {
            type_: read_u32(attr, 0)?,
            config: word(8),
            sample_period: word(16),
            sample_type: word(24),
            read_format: word(32),
            flags,
            sample_id_all: flags & ATTR_FLAG_SAMPLE_ID_ALL != 0,
            branch_sample_type: word(72),
            sample_regs_user: word(80),
            sample_stack_user: stack_user,
            ids: Vec::new(),
        },
        size,
    ))
}

/// Decode one feature section's contents into the header (features this
/// reader has no use for are ignored).
fn decode_feature(header: &mut PerfHeader, feature: u32, data: &[u8]) -> Result<(), &'static str> {
    let mut fields = Fields::new(data, 0);
    match feature {
        HEADER_BUILD_ID => {
            let mut at = 0;
            while at < data.len() {
                let size = read_u16(data, at + 6).ok_or("truncated build-id entry")?;
                let entry =
                    data.get(at..at + usize::from(size)).ok_or("truncated build-id entry")?;
                let parsed = parse_build_id(entry).ok_or("malformed build-id entry")?;
                if header.build_ids.len() >= MAX_BUILD_IDS {
                    return Err("too many build ids");
                }
                header.build_ids.push(parsed);
                at += usize::from(size);
            }
        }
        HEADER_HOSTNAME => header.hostname = Some(perf_string(&mut fields)?),
        HEADER_OSRELEASE => header.os_release = Some(perf_string(&mut fields)?),
        HEADER_VERSION => header.perf_version = Some(perf_string(&mut fields)?),
        HEADER_ARCH => header.arch = Some(perf_string(&mut fields)?),
        HEADER_CMDLINE => {
            let n = fields.u32().ok_or("truncated string list")?;
            // Every string takes at least its 4-byte length.
            if n as usize > data.len() / 4 {
                return Err("impossible string count");
            }
            let list = (0..n).map(|_| perf_string(&mut fields)).collect::<Result<_, _>>()?;
            header.cmdline = Some(list);
        }
        _ => {}
    }
    Ok(())
}

/// A `perf_header_string`: u32 length, then that many bytes, NUL-padded.
fn perf_string(fields: &mut Fields<'_>) -> Result<String, &'static str> {
    let len = fields.u32().ok_or("truncated string")?;
    let bytes = fields.take(u64::from(len)).ok_or("truncated string")?;
    Ok(String::from_utf8_lossy(until_nul(bytes)).into_owned())
}

/// A `build_id_event`: header, pid, 24 bytes of build id (20 used; the
/// 21st is its size when `PERF_RECORD_MISC_BUILD_ID_SIZE` is set), filename.
fn parse_build_id(entry: &[u8]) -> Option<BuildIdEntry> {
    let misc = read_u16(entry, 4)?;
    let pid = read_u32(entry, 8)? as i32;
    let id = entry.get(12..12 + BUILD_ID_MAX)?;
    let len = if misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 {
        usize::from(*entry.get(12 + BUILD_ID_MAX)?).min(BUILD_ID_MAX)
    } else {
        BUILD_ID_MAX
    };
    let filename = entry.get(36..)?;
    Some(BuildIdEntry {
        pid,
        misc,
        build_id: id[..len].to_vec(),
        filename: String::from_utf8_lossy(until_nul(filename)).into_owned(),
    })
}

fn bad(offset: u64, type_: u32, what: &'static str) -> PerfError {
    PerfError::BadRecord { offset, type_, what }
}

fn io_error(offset: u64, source: io::Error) -> PerfError {
    PerfError::Io { offset, source }
}

/// Decode the record in `rec` (header included) at file offset `offset`.
fn decode<'a>(
    rec: &'a [u8],
    offset: u64,
    attrs: &[Attr],
    index: &AttrIndex,
) -> Result<Event<'a>, PerfError> {
    let type_ = read_u32(rec, 0).unwrap_or(0);
    let misc = read_u16(rec, 4).unwrap_or(0);
    let short = || bad(offset, type_, "too short for its fields");
    match type_ {
        PERF_RECORD_SAMPLE => match index.for_sample(attrs, rec, offset)? {
            Some(i) => decode_sample(rec, offset, i, &attrs[i]).map(Event::Sample),
            None => Ok(Event::Other { type_ }),
        },
        PERF_RECORD_MMAP | PERF_RECORD_MMAP2 | PERF_RECORD_COMM | PERF_RECORD_FORK
        | PERF_RECORD_EXIT => {
            let (body_end, time) = trailer(rec, index.for_trailer(attrs, rec)).ok_or_else(short)?;
            let body = &rec[..body_end];
            let mut f = Fields::new(body, 8);
            match type_ {
                PERF_RECORD_COMM => {
                    let (pid, tid) = (f.u32().ok_or_else(short)?, f.u32().ok_or_else(short)?);
                    Ok(Event::Comm {
                        pid: pid as i32,
                        tid: tid as i32,
                        comm: until_nul(f.rest()),
                        exec: misc & PERF_RECORD_MISC_COMM_EXEC != 0,
                        time,
                    })
                }
                PERF_RECORD_FORK | PERF_RECORD_EXIT => {
                    let mut ids = [0i32; 4];
                    for id in &mut ids {
                        *id = f.u32().ok_or_else(short)? as i32;
                    }
                    let [pid, ppid, tid, ptid] = ids;
                    // The body has a time too, taken a little earlier than
                    // the trailer's, which perf orders and prints by.
                    let time = time.unwrap_or(f.u64().ok_or_else(short)?);
                    Ok(if type_ == PERF_RECORD_FORK {
                        Event::Fork { pid, ppid, tid, ptid, time }
                    } else {
                        Event::Exit { pid, ppid, tid, ptid, time }
                    })
                }
                _ => decode_mmap(&mut f, type_, misc, time).ok_or_else(short).map(Event::Mmap),
            }
        }
        PERF_RECORD_FINISHED_ROUND => Ok(Event::FinishedRound),
        PERF_RECORD_COMPRESSED => Err(PerfError::Unsupported {
            offset,
            what: "zstd-compressed records (perf record -z); record without -z",
        }),
        _ => Ok(Event::Other { type_ }),
    }
}

/// Where a record's body ends (its `sample_id_all` trailer starts) and the
/// trailer's time.
fn trailer(rec: &[u8], attr: Option<&Attr>) -> Option<(usize, Option<u64>)> {
    let Some(attr) = attr.filter(|a| a.sample_id_all) else {
        return Some((rec.len(), None));
    };
    let st = attr.sample_type;
    let fields = [
        PERF_SAMPLE_TID,
        PERF_SAMPLE_TIME,
        PERF_SAMPLE_ID,
        PERF_SAMPLE_STREAM_ID,
        PERF_SAMPLE_CPU,
        PERF_SAMPLE_IDENTIFIER,
    ];
    let words = fields.iter().filter(|&&b| st & b != 0).count();
    let start = rec.len().checked_sub(8 * words).filter(|&s| s >= 8)?;
    let time = if st & PERF_SAMPLE_TIME != 0 {
        let at = start + if st & PERF_SAMPLE_TID != 0 { 8 } else { 0 };
        Some(read_u64(rec, at)?)
    } else {
        None
    };
    Some((start, time))
}

fn decode_mmap<'a>(
    f: &mut Fields<'a>,
    type_: u32,
    misc: u16,
    time: Option<u64>,
) -> Option<MmapEvent<'a>> {
    let pid = f.u32()? as i32;
    let tid = f.u32()? as i32;
    let (start, len, pgoff) = (f.u64()?, f.u64()?, f.u64()?);
    let (mut prot, mut flags, mut build_id, mut inode) = (None, None, None, None);
    if type_ == PERF_RECORD_MMAP2 {
        let id_or_inode = f.take(24)?;
        if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
            let len = usize::from(id_or_inode[0]).min(BUILD_ID_MAX);
            build_id = id_or_inode.get(4..4 + len);
        } else {
            inode = Some(Inode {
                maj: read_u32(id_or_inode, 0)?,
                min: read_u32(id_or_inode, 4)?,
                ino: read_u64(id_or_inode, 8)?,
                generation: read_u64(id_or_inode, 16)?,
            });
        }
        prot = Some(f.u32()?);
        flags = Some(f.u32()?);
    }
    Some(MmapEvent {
        misc,
        pid,
        tid,
        start,
        len,
        pgoff,
        filename: until_nul(f.rest()),
        prot,
        flags,
        build_id,
        inode,
        time,
    })
}

/// A sample's fields, in `sample_type` bit order, up to the user stack;
/// later fields (weight, data source, ...) are left unread.
fn decode_sample<'a>(
    rec: &'a [u8],
    offset: u64,
    attr_index: usize,
    attr: &Attr,
) -> Result<Sample<'a>, PerfError> {
    let short = |what| bad(offset, PERF_RECORD_SAMPLE, what);
    let st = attr.sample_type;
    let has = |bit: u64| st & bit != 0;
    let mut f = Fields::new(rec, 8);
    let mut s = Sample {
        attr_index,
        misc: read_u16(rec, 4).unwrap_or(0),
        id: None,
        ip: 0,
        pid: 0,
        tid: 0,
        time: None,
        addr: None,
        cpu: None,
        period: None,
        callchain: None,
        regs_abi: PERF_SAMPLE_REGS_ABI_NONE,
        regs_mask: 0,
        regs: &[],
        stack: &[],
    };
    let cut = "fields run past the end of the record";
    let ids = leading_fields(&mut f, st).ok_or_else(|| short(cut))?;
    (s.id, s.ip, s.pid, s.tid, s.time) = (ids.id, ids.ip, ids.pid, ids.tid, ids.time);
    if has(PERF_SAMPLE_ADDR) {
        s.addr = Some(f.u64().ok_or_else(|| short(cut))?);
    }
    if has(PERF_SAMPLE_ID) {
        s.id = Some(f.u64().ok_or_else(|| short(cut))?);
    }
    if has(PERF_SAMPLE_STREAM_ID) {
        f.u64().ok_or_else(|| short(cut))?;
    }
    if has(PERF_SAMPLE_CPU) {
        s.cpu = Some(f.u32().ok_or_else(|| short(cut))?);
        f.u32().ok_or_else(|| short(cut))?;
    }
    if has(PERF_SAMPLE_PERIOD) {
        s.period = Some(f.u64().ok_or_else(|| short(cut))?);
    }
    if has(PERF_SAMPLE_READ) {
        let rf = attr.read_format;
        let flag = |bit: u64| u64::from(rf & bit != 0);
        let times = flag(PERF_FORMAT_TOTAL_TIME_ENABLED) + flag(PERF_FORMAT_TOTAL_TIME_RUNNING);
        let per_value = 1 + flag(PERF_FORMAT_ID) + flag(PERF_FORMAT_LOST);
        let words = if rf & PERF_FORMAT_GROUP != 0 {
            let nr = f.u64().ok_or_else(|| short(cut))?;
            nr.checked_mul(per_value).and_then(|w| w.checked_add(times))
        } else {
            Some(per_value + times)
        };
        f.take_words(words).ok_or_else(|| short("read values run past the end of the record"))?;
    }
    if has(PERF_SAMPLE_CALLCHAIN) {
        let nr = f.u64().ok_or_else(|| short(cut))?;
        let ips = f.take_words(Some(nr)).ok_or_else(|| short("callchain runs past the end"))?;
        s.callchain = Some(Words(ips));
    }
    if has(PERF_SAMPLE_RAW) {
        let size = f.u32().ok_or_else(|| short(cut))?;
        f.take(u64::from(size)).ok_or_else(|| short("raw data runs past the end"))?;
    }
    if has(PERF_SAMPLE_BRANCH_STACK) {
        let nr = f.u64().ok_or_else(|| short(cut))?;
        if attr.branch_sample_type & PERF_SAMPLE_BRANCH_HW_INDEX != 0 {
            f.u64().ok_or_else(|| short(cut))?;
        }
        f.take_words(nr.checked_mul(3)).ok_or_else(|| short("branch stack runs past the end"))?;
    }
    if has(PERF_SAMPLE_REGS_USER) {
        s.regs_abi = f.u64().ok_or_else(|| short(cut))?;
        if s.regs_abi != PERF_SAMPLE_REGS_ABI_NONE {
            let mask = attr.sample_regs_user;
            s.regs = f
                .take_words(Some(u64::from(mask.count_ones())))
                .ok_or_else(|| short("user registers run past the end"))?;
            s.regs_mask = mask;
        }
    }
    if has(PERF_SAMPLE_STACK_USER) {
        let size = f.u64().ok_or_else(|| short(cut))?;
        if size != 0 {
            let data = f.take(size).ok_or_else(|| short("user stack runs past the end"))?;
            let dyn_size = f.u64().ok_or_else(|| short(cut))?;
            s.stack = usize::try_from(dyn_size)
                .ok()
                .and_then(|n| data.get(..n))
                .ok_or_else(|| short("user stack dyn_size larger than its size"))?;
        }
    }
    Ok(s)
}

/// The fields a sample starts with: what orders it and tells whose it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleIds {
    /// `PERF_SAMPLE_IDENTIFIER` (`PERF_SAMPLE_ID` comes later).
    pub id: Option<u64>,
    pub ip: u64,
    pub pid: i32,
    pub tid: i32,
    pub time: Option<u64>,
}

fn leading_fields(f: &mut Fields<'_>, sample_type: u64) -> Option<SampleIds> {
    let has = |bit: u64| sample_type & bit != 0;
    let mut ids = SampleIds::default();
    if has(PERF_SAMPLE_IDENTIFIER) {
        ids.id = Some(f.u64()?);
    }
    if has(PERF_SAMPLE_IP) {
        ids.ip = f.u64()?;
    }
    if has(PERF_SAMPLE_TID) {
        ids.pid = f.u32()? as i32;
        ids.tid = f.u32()? as i32;
    }
    if has(PERF_SAMPLE_TIME) {
        ids.time = Some(f.u64()?);
    }
    Some(ids)
}

/// A bounds-checked reader of little-endian fields.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8], pos: usize) -> Self {
        Fields { bytes, pos }
    }

    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(usize::try_from(n).ok()?)?;
        let taken = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(taken)
    }

    fn take_words(&mut self, words: Option<u64>) -> Option<&'a [u8]> {
        self.take(words?.checked_mul(8)?)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8).and_then(|b| read_u64(b, 0))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).and_then(|b| read_u32(b, 0))
    }

    fn rest(&mut self) -> &'a [u8] {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        self.pos = self.bytes.len();
        rest
    }
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(b.try_into().ok()?))
}

fn until_nul(bytes: &[u8]) -> &[u8] {
    bytes.iter().position(|&b| b == 0).map_or(bytes, |n| &bytes[..n])
}

/// Fill `buf` from `r` as far as the data goes: the count read (less than
/// `buf.len()` only at the end of the file).
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k.min(buf.len() - n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    //! perf.data files built byte by byte: every record this reader
    //! decodes, both file layouts, damaged and random input.

    use super::*;
    use std::io::Cursor;

    /// What `perf record --call-graph dwarf` asks for, plus CPU.
    const ST: u64 = PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD
        | PERF_SAMPLE_CALLCHAIN
        | PERF_SAMPLE_REGS_USER
        | PERF_SAMPLE_STACK_USER;
    const X86_MASK: u64 = 0xff_0fff;
    const KERNEL_PID: u32 = u32::MAX; // -1

    fn put16(v: &mut Vec<u8>, x: u16) {
        v.extend_from_slice(&x.to_le_bytes());
    }
    fn put32(v: &mut Vec<u8>, x: u32) {
        v.extend_from_slice(&x.to_le_bytes());
    }
    fn put64(v: &mut Vec<u8>, x: u64) {
        v.extend_from_slice(&x.to_le_bytes());
    }

    /// `s`, NUL-terminated, padded with NULs to a multiple of 8.
    fn cstr(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        v.resize(v.len().next_multiple_of(8), 0);
        v
    }

    fn record(type_: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let size = 8 + body.len();
        assert!(size % 8 == 0 && size < MAX_RECORD, "test record size {size}");
        let mut v = Vec::new();
        put32(&mut v, type_);
        put16(&mut v, misc);
        put16(&mut v, size as u16);
        v.extend_from_slice(body);
        v
    }

    /// A 128-byte `perf_event_attr` (PERF_ATTR_SIZE_VER7).
    struct AttrSpec {
        sample_type: u64,
        read_format: u64,
        branch_sample_type: u64,
        regs: u64,
        stack: u32,
        sample_id_all: bool,
        ids: Vec<u64>,
    }

    impl AttrSpec {
        fn dwarf(ids: Vec<u64>) -> Self {
            AttrSpec {
                sample_type: ST,
                read_format: 0,
                branch_sample_type: 0,
                regs: X86_MASK,
                stack: 8192,
                sample_id_all: true,
                ids,
            }
        }

        fn bytes(&self) -> Vec<u8> {
            let mut v = Vec::new();
            put32(&mut v, 1); // PERF_TYPE_SOFTWARE
            put32(&mut v, 128);
            put64(&mut v, 0); // cpu-clock
            put64(&mut v, 999);
            put64(&mut v, self.sample_type);
            put64(&mut v, self.read_format);
            let flags = (1 << 10) | if self.sample_id_all { ATTR_FLAG_SAMPLE_ID_ALL } else { 0 };
            put64(&mut v, flags);
            v.resize(72, 0);
            put64(&mut v, self.branch_sample_type);
            put64(&mut v, self.regs);
            put32(&mut v, self.stack);
            v.resize(128, 0);
            v
        }
    }

    /// The `sample_id_all` trailer for `ST`: tid, time, cpu.
    fn trailer(pid: u32, tid: u32, time: u64, cpu: u32) -> Vec<u8> {
        let mut v = Vec::new();
        put32(&mut v, pid);
        put32(&mut v, tid);
        put64(&mut v, time);
        put32(&mut v, cpu);
        put32(&mut v, 0);
        v
    }

    fn mmap2(
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        name: &str,
        build_id: Option<&[u8]>,
        time: u64,
    ) -> Vec<u8> {
        let mut v = Vec::new();
        put32(&mut v, pid);
        put32(&mut v, pid);
        put64(&mut v, start);
        put64(&mut v, len);
        put64(&mut v, pgoff);
        let mut misc = PERF_RECORD_MISC_USER;
        match build_id {
            Some(id) => {
                misc |= PERF_RECORD_MISC_MMAP_BUILD_ID;
                v.push(id.len() as u8);
                v.extend_from_slice(&[0, 0, 0]);
                v.extend_from_slice(id);
                v.resize(v.len() + 20 - id.len(), 0);
            }
            None => {
                put32(&mut v, 8); // maj
                put32(&mut v, 1); // min
                put64(&mut v, 1234); // ino
                put64(&mut v, 7); // generation
            }
        }
        put32(&mut v, 5); // PROT_READ | PROT_EXEC
        put32(&mut v, 2); // MAP_PRIVATE
        v.extend(cstr(name));
        v.extend(trailer(pid, pid, time, 0));
        record(PERF_RECORD_MMAP2, misc, &v)
    }

    struct SampleSpec {
        misc: u16,
        ip: u64,
        pid: u32,
        tid: u32,
        time: u64,
        cpu: u32,
        period: u64,
        chain: Vec<u64>,
        regs: Option<Vec<u64>>,
        /// Stack bytes as recorded (`size`) and how many are valid (`dyn_size`).
        stack: Option<(Vec<u8>, u64)>,
    }

    impl SampleSpec {
        fn record(&self) -> Vec<u8> {
            let mut v = Vec::new();
            put64(&mut v, self.ip);
            put32(&mut v, self.pid);
            put32(&mut v, self.tid);
            put64(&mut v, self.time);
            put32(&mut v, self.cpu);
            put32(&mut v, 0);
            put64(&mut v, self.period);
            put64(&mut v, self.chain.len() as u64);
            for &ip in &self.chain {
                put64(&mut v, ip);
            }
            match &self.regs {
                Some(regs) => {
                    put64(&mut v, 2); // PERF_SAMPLE_REGS_ABI_64
                    for &r in regs {
                        put64(&mut v, r);
                    }
                }
                None => put64(&mut v, 0),
            }
            match &self.stack {
                Some((data, dyn_size)) => {
                    put64(&mut v, data.len() as u64);
                    v.extend_from_slice(data);
                    put64(&mut v, *dyn_size);
                }
                None => put64(&mut v, 0),
            }
            record(PERF_RECORD_SAMPLE, self.misc, &v)
        }
    }

    fn x86_regs() -> Vec<u64> {
        (0..64).filter(|i| X86_MASK & (1 << i) != 0).map(|i| 0x1000 + i).collect()
    }

    /// The records of a short recording, one of each kind, and how many.
    fn standard_records() -> (Vec<u8>, usize) {
        let mut d = Vec::new();
        d.extend(mmap2(100, 0x40_0000, 0x1000, 0, "/usr/bin/prog", None, 10));
        let libc_id: Vec<u8> = (1..=20).collect();
        d.extend(mmap2(
            100,
            0x7f00_0000_0000,
            0x20_0000,
            0x1000,
            "/lib/libc.so.6",
            Some(&libc_id),
            11,
        ));
        // A kernel MMAP as perf synthesizes it: pid -1, zeroed trailer.
        let mut v = Vec::new();
        put32(&mut v, KERNEL_PID);
        put32(&mut v, 0);
        put64(&mut v, 0xffff_ffff_8100_0000);
        put64(&mut v, 0x120_0000);
        put64(&mut v, 0xffff_ffff_8100_0000);
        v.extend(cstr("[kernel.kallsyms]_text"));
        v.extend(trailer(0, 0, 0, 0));
        d.extend(record(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL, &v));
        let mut v = Vec::new();
        put32(&mut v, 100);
        put32(&mut v, 100);
        v.extend(cstr("prog"));
        v.extend(trailer(100, 100, 12, 0));
        d.extend(record(PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC, &v));
        let stack: Vec<u8> = (0..64).collect();
        d.extend(
            SampleSpec {
                misc: PERF_RECORD_MISC_USER,
                ip: 0x40_0123,
                pid: 100,
                tid: 101,
                time: 1000,
                cpu: 1,
                period: 1_001_001,
                chain: vec![PERF_CONTEXT_USER, 0x40_0123],
                regs: Some(x86_regs()),
                stack: Some((stack, 40)),
            }
            .record(),
        );
        for (type_, time) in [(PERF_RECORD_FORK, 1500), (PERF_RECORD_EXIT, 2500)] {
            let mut v = Vec::new();
            for id in [102, 100, 103, 101] {
                put32(&mut v, id);
            }
            put64(&mut v, time - 1); // the body's time, a little earlier
            v.extend(trailer(102, 103, time, 0));
            d.extend(record(type_, 0, &v));
        }
        d.extend(
            SampleSpec {
                misc: PERF_RECORD_MISC_KERNEL,
                ip: 0xffff_ffff_8100_0010,
                pid: 0,
                tid: 0,
                time: 2000,
                cpu: 0,
                period: 1_001_001,
                chain: vec![PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020],
                regs: None,
                stack: None,
            }
            .record(),
        );
        d.extend(record(PERF_RECORD_FINISHED_ROUND, 0, &[]));
        let mut v = Vec::new();
        put64(&mut v, 5); // id
        put64(&mut v, 3); // lost
        v.extend(trailer(0, 0, 2600, 0));
        d.extend(record(PERF_RECORD_LOST, 0, &v));
        (d, 10)
    }

    fn build_id_entry(pid: u32, misc: u16, id: &[u8], name: &str) -> Vec<u8> {
        // As perf writes them: the name padded to 64 bytes, so the size
        // (36 + 64n) is not a multiple of 8.
        let mut name = name.as_bytes().to_vec();
        name.resize((name.len() + 1).next_multiple_of(64), 0);
        let mut v = Vec::new();
        put32(&mut v, PERF_RECORD_HEADER_BUILD_ID);
        put16(&mut v, misc);
        put16(&mut v, (36 + name.len()) as u16);
        put32(&mut v, pid);
        v.extend_from_slice(id);
        v.resize(12 + 24, 0);
        if misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 {
            v[12 + 20] = id.len() as u8;
        }
        v.extend(name);
        v
    }

    fn perf_str(s: &str) -> Vec<u8> {
        let body = cstr(s);
        let mut v = Vec::new();
        put32(&mut v, body.len() as u32);
        v.extend(body);
        v
    }

    fn standard_features() -> Vec<(u32, Vec<u8>)> {
        let mut build_ids =
            build_id_entry(KERNEL_PID, PERF_RECORD_MISC_KERNEL, &[0xaa; 20], "[kernel.kallsyms]");
        let misc = PERF_RECORD_MISC_USER | PERF_RECORD_MISC_BUILD_ID_SIZE;
        build_ids.extend(build_id_entry(KERNEL_PID, misc, &[0xbb; 16], "/usr/bin/prog"));
        let mut cmdline = Vec::new();
        put32(&mut cmdline, 2);
        cmdline.extend(perf_str("/usr/bin/perf"));
        cmdline.extend(perf_str("record"));
        vec![
            (HEADER_BUILD_ID, build_ids),
            (HEADER_HOSTNAME, perf_str("testhost")),
            (HEADER_ARCH, perf_str("x86_64")),
            (7, vec![2, 0, 0, 0, 2, 0, 0, 0]), // HEADER_NRCPUS, skipped
            (HEADER_CMDLINE, cmdline),
        ]
    }

    /// Offsets of a built file's parts.
    struct Layout {
        data_offset: usize,
        data_end: usize,
    }

    /// A perf.data file: header, attributes, their ids, the data, the
    /// feature table and sections (in bit order).
    fn file(attrs: &[AttrSpec], data: &[u8], features: &[(u32, Vec<u8>)]) -> (Vec<u8>, Layout) {
        let attr_size = 128 + 16;
        let attrs_offset = FILE_HEADER_SIZE;
        let mut ids_offset = attrs_offset + attrs.len() * attr_size;
        let mut attr_section = Vec::new();
        let mut id_section = Vec::new();
        for a in attrs {
            attr_section.extend(a.bytes());
            put64(&mut attr_section, (ids_offset + id_section.len()) as u64);
            put64(&mut attr_section, 8 * a.ids.len() as u64);
            for &id in &a.ids {
                put64(&mut id_section, id);
            }
        }
        ids_offset = attrs_offset + attr_section.len();
        let data_offset = ids_offset + id_section.len();
        let data_end = data_offset + data.len();
        let mut bits = [0u64; 4];
        for &(f, _) in features {
            bits[f as usize / 64] |= 1 << (f % 64);
        }
        let mut v = Vec::new();
        v.extend_from_slice(MAGIC);
        for x in [
            FILE_HEADER_SIZE,
            attr_size,
            attrs_offset,
            attr_section.len(),
            data_offset,
            data.len(),
            0,
            0,
        ] {
            put64(&mut v, x as u64);
        }
        for b in bits {
            put64(&mut v, b);
        }
        v.extend(attr_section);
        v.extend(id_section);
        v.extend_from_slice(data);
        let mut section_at = data_end + 16 * features.len();
        let mut sections = Vec::new();
        for (_, body) in features {
            put64(&mut v, section_at as u64);
            put64(&mut v, body.len() as u64);
            section_at += body.len();
            sections.extend_from_slice(body);
        }
        v.extend(sections);
        (v, Layout { data_offset, data_end })
    }

    /// The same recording in pipe mode: features and attributes as records.
    fn pipe(attrs: &[AttrSpec], data: &[u8], features: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(MAGIC);
        put64(&mut v, 16);
        for (f, body) in features {
            if *f == HEADER_BUILD_ID {
                continue; // pipe mode sends build ids as records, at the end
            }
            let mut r = Vec::new();
            put64(&mut r, u64::from(*f));
            r.extend_from_slice(body);
            r.resize(r.len().next_multiple_of(8), 0);
            v.extend(record(PERF_RECORD_HEADER_FEATURE, 0, &r));
        }
        for a in attrs {
            let mut r = a.bytes();
            for &id in &a.ids {
                put64(&mut r, id);
            }
            v.extend(record(PERF_RECORD_HEADER_ATTR, 0, &r));
        }
        v.extend_from_slice(data);
        if let Some((_, ids)) = features.iter().find(|(f, _)| *f == HEADER_BUILD_ID) {
            v.extend_from_slice(ids);
        }
        v
    }

    fn standard_file() -> (Vec<u8>, Layout) {
        let (data, _) = standard_records();
        file(&[AttrSpec::dwarf(vec![314, 315])], &data, &standard_features())
    }

    /// Events as (offset, Debug text), the error that ended them, the header.
    type Reading = (Vec<(u64, String)>, Option<PerfError>, PerfHeader);

    /// Every event of `bytes` as (offset, Debug text), and the error that
    /// ended them; panics if reading does not end within a bound.
    fn read_all(bytes: &[u8]) -> Result<Reading, PerfError> {
        let mut f = PerfFile::new(Cursor::new(bytes))?;
        let mut events = Vec::new();
        let limit = bytes.len() / 8 + 2;
        for _ in 0..limit {
            let offset = f.next_offset();
            match f.next_event() {
                Ok(Some(e)) => events.push((offset, format!("{e:?}"))),
                Ok(None) => return Ok((events, None, f.header)),
                Err(e) => {
                    assert!(matches!(f.next_event(), Ok(None)), "an error ends the reading");
                    return Ok((events, Some(e), f.header));
                }
            }
        }
        panic!("more than {limit} events from {} bytes", bytes.len());
    }

    #[test]
    fn reads_every_field_of_a_file() {
        let (bytes, layout) = standard_file();
        let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
        let h = f.header();
        assert!(!h.pipe_mode);
        assert_eq!(h.data_offset, layout.data_offset as u64);
        assert_eq!(h.data_size, (layout.data_end - layout.data_offset) as u64);
        assert_eq!(h.arch.as_deref(), Some("x86_64"));
        assert_eq!(h.arch(), Some(Arch::X86_64));
        assert_eq!(h.hostname.as_deref(), Some("testhost"));
        assert_eq!(h.os_release, None);
        assert_eq!(h.cmdline, Some(vec!["/usr/bin/perf".to_string(), "record".to_string()]));
        assert!(h.feature_error.is_none(), "{:?}", h.feature_error);
        assert!(
            h.has_feature(HEADER_BUILD_ID) && h.has_feature(7) && !h.has_feature(HEADER_VERSION)
        );
        assert_eq!(
            h.build_ids,
            vec![
                BuildIdEntry {
                    pid: -1,
                    misc: PERF_RECORD_MISC_KERNEL,
                    build_id: vec![0xaa; 20],
                    filename: "[kernel.kallsyms]".into()
                },
                BuildIdEntry {
                    pid: -1,
                    misc: PERF_RECORD_MISC_USER | PERF_RECORD_MISC_BUILD_ID_SIZE,
                    build_id: vec![0xbb; 16],
                    filename: "/usr/bin/prog".into()
                },
            ]
        );
        assert_eq!(h.attrs.len(), 1);
        let a = &h.attrs[0];
        assert_eq!((a.type_, a.config, a.sample_period), (1, 0, 999));
        assert_eq!(a.sample_type, ST);
        assert_eq!((a.sample_regs_user, a.sample_stack_user), (X86_MASK, 8192));
        assert!(a.sample_id_all);
        assert_eq!(a.ids, vec![314, 315]);

        let Some(Event::Mmap(m)) = f.next_event().unwrap() else { panic!("mmap2") };
        assert_eq!((m.pid, m.tid, m.start, m.len, m.pgoff), (100, 100, 0x40_0000, 0x1000, 0));
        assert_eq!(m.filename, b"/usr/bin/prog");
        assert_eq!((m.prot, m.flags, m.build_id), (Some(5), Some(2), None));
        assert_eq!(m.inode, Some(Inode { maj: 8, min: 1, ino: 1234, generation: 7 }));
        assert_eq!(m.time, Some(10));
        assert!(m.executable());
        let Some(Event::Mmap(m)) = f.next_event().unwrap() else { panic!("mmap2 with build id") };
        assert_eq!((m.start, m.len, m.pgoff), (0x7f00_0000_0000, 0x20_0000, 0x1000));
        assert_eq!(m.filename, b"/lib/libc.so.6");
        assert_eq!(m.build_id, Some(&(1..=20).collect::<Vec<u8>>()[..]));
        assert_eq!((m.inode, m.time), (None, Some(11)));
        let Some(Event::Mmap(m)) = f.next_event().unwrap() else { panic!("kernel mmap") };
        assert_eq!((m.pid, m.tid), (-1, 0));
        assert_eq!(
            (m.start, m.len, m.pgoff),
            (0xffff_ffff_8100_0000, 0x120_0000, 0xffff_ffff_8100_0000)
        );
        assert_eq!(m.filename, b"[kernel.kallsyms]_text");
        assert_eq!(
            (m.prot, m.flags, m.build_id, m.inode, m.time),
            (None, None, None, None, Some(0))
        );
        assert_eq!(m.misc & PERF_RECORD_MISC_CPUMODE_MASK, PERF_RECORD_MISC_KERNEL);
        assert!(m.executable());
        let comm = f.next_event().unwrap();
        assert_eq!(
            comm,
            Some(Event::Comm { pid: 100, tid: 100, comm: b"prog", exec: true, time: Some(12) })
        );

        let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!("user sample") };
        assert_eq!((s.attr_index, s.cpumode(), s.id), (0, PERF_RECORD_MISC_USER, None));
        assert_eq!((s.ip, s.pid, s.tid, s.time), (0x40_0123, 100, 101, Some(1000)));
        assert_eq!((s.addr, s.cpu, s.period), (None, Some(1), Some(1_001_001)));
        assert_eq!(s.callchain.map(|c| c.to_vec()), Some(vec![PERF_CONTEXT_USER, 0x40_0123]));
        assert_eq!((s.regs_abi, s.regs_mask, s.regs.len()), (2, X86_MASK, 20 * 8));
        assert_eq!(s.stack, &(0..40).collect::<Vec<u8>>()[..]);
        assert_eq!(s.user_reg(0), Some(0x1000));
        assert_eq!(s.user_reg(8), Some(0x1008));
        assert_eq!(s.user_reg(16), Some(0x1010));
        assert_eq!(s.user_reg(23), Some(0x1017));
        assert_eq!((s.user_reg(12), s.user_reg(24), s.user_reg(99)), (None, None, None));
        let (pc, regs) = sample_registers(Arch::X86_64, &s);
        assert_eq!(pc, Some(0x1008));
        let expect = [(0, 0x1000), (1, 0x1003), (2, 0x1002), (3, 0x1001), (4, 0x1004), (5, 0x1005)];
        for (col, value) in
            expect.into_iter().chain([(6, 0x1006), (7, 0x1007), (8, 0x1010), (15, 0x1017)])
        {
            assert_eq!(regs.get(col), Some(value), "column {col}");
        }
        assert_eq!(regs.get(16), None, "the pc is given apart");
        // The same perf registers (ax bx cx dx si di bp sp ip) in i386's DWARF numbering.
        let (pc, regs) = sample_registers(Arch::I386, &s);
        assert_eq!(pc, Some(0x1008));
        let i386 = [(0, 0x1000), (3, 0x1001), (1, 0x1002), (2, 0x1003), (6, 0x1004), (7, 0x1005)];
        for (col, value) in i386.into_iter().chain([(5, 0x1006), (4, 0x1007)]) {
            assert_eq!(regs.get(col), Some(value), "i386 column {col}");
        }
        assert_eq!(regs.iter().count(), 8, "r8-r15 have no i386 column");

        let fork = f.next_event().unwrap();
        assert_eq!(
            fork,
            Some(Event::Fork { pid: 102, ppid: 100, tid: 103, ptid: 101, time: 1500 })
        );
        let exit = f.next_event().unwrap();
        assert_eq!(
            exit,
            Some(Event::Exit { pid: 102, ppid: 100, tid: 103, ptid: 101, time: 2500 })
        );
        let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!("kernel sample") };
        assert_eq!(
            (s.cpumode(), s.ip, s.pid, s.time, s.cpu),
            (PERF_RECORD_MISC_KERNEL, 0xffff_ffff_8100_0010, 0, Some(2000), Some(0))
        );
        assert_eq!(
            s.callchain.map(|c| c.to_vec()),
            Some(vec![PERF_CONTEXT_KERNEL, 0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020])
        );
        assert_eq!((s.regs_abi, s.regs_mask, s.regs, s.stack), (0, 0, &[][..], &[][..]));
        assert_eq!(sample_registers(Arch::X86_64, &s), (None, Registers::new()));
        assert_eq!(f.next_event().unwrap(), Some(Event::FinishedRound));
        assert_eq!(f.next_event().unwrap(), Some(Event::Other { type_: PERF_RECORD_LOST }));
        assert_eq!(f.next_offset(), layout.data_end as u64);
        assert_eq!(f.next_event().unwrap(), None);
        assert_eq!(f.next_event().unwrap(), None);
    }

    #[test]
    fn pipe_mode_gives_the_same_events() {
        let (data, count) = standard_records();
        let attrs = [AttrSpec::dwarf(vec![314, 315])];
        let (file_bytes, _) = file(&attrs, &data, &standard_features());
        let (file_events, err, file_header) = read_all(&file_bytes).unwrap();
        assert!(err.is_none());
        assert_eq!(file_events.len(), count);

        let bytes = pipe(&attrs, &data, &standard_features());
        let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
        assert!(f.header().pipe_mode);
        assert_eq!(f.header().attrs, file_header.attrs, "attributes known at open");
        assert_eq!(f.header().arch.as_deref(), Some("x86_64"));
        assert_eq!(f.header().cmdline, file_header.cmdline);
        let mut events = Vec::new();
        while let Some(e) = f.next_event().unwrap() {
            events.push(format!("{e:?}"));
        }
        let expected: Vec<String> = file_events.into_iter().map(|(_, e)| e).collect();
        assert_eq!(events[..count], expected[..]);
        let build_id = format!("{:?}", Event::Other { type_: PERF_RECORD_HEADER_BUILD_ID });
        assert_eq!(events[count..], [build_id.clone(), build_id]);
        assert_eq!(f.header().build_ids, file_header.build_ids);
    }

    #[test]
    fn truncated_at_every_offset() {
        let (bytes, layout) = standard_file();
        let (full, err, _) = read_all(&bytes).unwrap();
        assert!(err.is_none());
        for cut in 0..bytes.len() {
            let part = &bytes[..cut];
            let (events, err, header) = match read_all(part) {
                Ok(r) => r,
                Err(e) => {
                    assert!(cut < layout.data_offset, "cut {cut}: open failed: {e}");
                    assert!(!e.to_string().is_empty());
                    continue;
                }
            };
            assert!(cut >= layout.data_offset, "cut {cut}: opened a file without its attributes");
            assert!(header.feature_error.is_some(), "cut {cut}: features read from a cut file");
            // The records that end at or before the cut.
            let ends = full.iter().skip(1).map(|(o, _)| *o).chain([layout.data_end as u64]);
            let whole: Vec<_> = full
                .iter()
                .zip(ends)
                .take_while(|&(_, end)| end as usize <= cut)
                .map(|(e, _)| e.clone())
                .collect();
            assert_eq!(events, whole, "cut {cut}: the events before the damage");
            if cut >= layout.data_end {
                assert!(err.is_none(), "cut {cut}: {err:?}");
            } else {
                let err = err.unwrap_or_else(|| panic!("cut {cut}: no error"));
                let first_cut = full.get(whole.len()).map(|(o, _)| *o).unwrap();
                assert!(
                    matches!(err, PerfError::TruncatedRecord { offset } if offset == first_cut),
                    "cut {cut}: {err}"
                );
                assert!(err.to_string().contains(&format!("{first_cut:#x}")), "{err}");
            }
        }
    }

    #[test]
    fn pipe_mode_truncated_at_every_offset() {
        let (data, _) = standard_records();
        let bytes = pipe(&[AttrSpec::dwarf(vec![314, 315])], &data, &standard_features());
        let (full, err, _) = read_all(&bytes).unwrap();
        assert!(err.is_none());
        let mut boundaries = vec![16];
        while let Some(&at) = boundaries.last().filter(|&&at| at < bytes.len()) {
            boundaries.push(at + usize::from(read_u16(&bytes, at + 6).unwrap()));
        }
        for cut in 0..bytes.len() {
            // Without a length in the header, a cut between records is an
            // ordinary end; inside one it is an error. Either way: a prefix.
            if let Ok((events, err, _)) = read_all(&bytes[..cut]) {
                assert_eq!(events[..], full[..events.len()], "cut {cut}");
                let at_boundary = boundaries.contains(&cut);
                assert_eq!(err.is_none(), at_boundary, "cut {cut}: {err:?}");
            }
        }
    }

    /// xorshift64*: deterministic random bytes without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (good, layout) = standard_file();
        for round in 0..20000 {
            let bytes = match round % 5 {
                // Noise, with and without the magic.
                0 => {
                    let n = rng.below(600);
                    rng.bytes(n)
                }
                1 => {
                    let n = rng.below(600) + 16;
                    let mut b = rng.bytes(n);
                    b[..8].copy_from_slice(MAGIC);
                    b
                }
                // A good header, noise for data.
                2 => {
                    let mut b = good.clone();
                    let noise = rng.bytes(layout.data_end - layout.data_offset);
                    b[layout.data_offset..layout.data_end].copy_from_slice(&noise);
                    b
                }
                // Extreme values in a word of the header or the attributes.
                3 => {
                    let mut b = good.clone();
                    let at = 8 * rng.below(layout.data_offset / 8);
                    let extremes = [u64::MAX, u64::MAX - 7, 1 << 63, 1 << 32, 0, rng.next()];
                    let value = extremes[rng.below(extremes.len())];
                    b[at..at + 8].copy_from_slice(&value.to_le_bytes());
                    b
                }
                // A good file with a few bytes changed.
                _ => {
                    let mut b = good.clone();
                    for _ in 0..rng.below(6) + 1 {
                        let at = rng.below(b.len());
                        b[at] = rng.next() as u8;
                    }
                    b
                }
            };
            if let Ok((_, Some(err), _)) = read_all(&bytes) {
                assert!(!err.to_string().is_empty());
            }
            let mut pipe_mode = bytes.clone();
            if pipe_mode.len() >= 16 {
                pipe_mode[..8].copy_from_slice(MAGIC);
                pipe_mode[8..16].copy_from_slice(&16u64.to_le_bytes());
                let _ = read_all(&pipe_mode);
            }
        }
    }

    #[test]
    fn several_attributes_are_told_apart_by_id() {
        // With PERF_SAMPLE_IDENTIFIER (first word of a sample, last of a trailer).
        let base = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
        let spec = |st, ids| AttrSpec { sample_type: st, ids, ..AttrSpec::dwarf(vec![]) };
        let attrs = [spec(base, vec![10, 11]), spec(base | PERF_SAMPLE_CALLCHAIN, vec![20])];
        let sample = |id: u64, chain: &[u64]| {
            let mut v = Vec::new();
            for x in [id, 0x1234, 7 | (8 << 32), 99] {
                put64(&mut v, x);
            }
            if id == 20 {
                put64(&mut v, chain.len() as u64);
                chain.iter().for_each(|&ip| put64(&mut v, ip));
            }
            record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, &v)
        };
        let mut data = sample(11, &[]);
        data.extend(sample(20, &[PERF_CONTEXT_USER, 0x1234]));
        data.extend(sample(99, &[]));
        let mut v = Vec::new();
        put32(&mut v, 5);
        put32(&mut v, 5);
        v.extend(cstr("x"));
        for x in [5 | (5 << 32), 77, 20] {
            put64(&mut v, x); // trailer: tid, time, identifier
        }
        data.extend(record(PERF_RECORD_COMM, 0, &v));
        let (bytes, _) = file(&attrs, &data, &[]);
        let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
        let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
        assert_eq!(
            (s.attr_index, s.id, s.ip, s.pid, s.tid, s.time),
            (0, Some(11), 0x1234, 7, 8, Some(99))
        );
        assert_eq!(s.callchain, None);
        let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
        assert_eq!((s.attr_index, s.id), (1, Some(20)));
        assert_eq!(s.callchain.map(|c| c.to_vec()), Some(vec![PERF_CONTEXT_USER, 0x1234]));
        assert_eq!(f.next_event().unwrap(), Some(Event::Other { type_: PERF_RECORD_SAMPLE }));
        let comm = f.next_event().unwrap();
        assert_eq!(
            comm,
            Some(Event::Comm { pid: 5, tid: 5, comm: b"x", exec: false, time: Some(77) })
        );

        // With PERF_SAMPLE_ID only (older kernels): after ip, tid, time.
        let st =
            PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_CPU;
        let attrs = [spec(st, vec![1]), spec(st, vec![2])];
        let mut v = Vec::new();
        for x in [0x99, 3 | (4 << 32), 55, 2, 1] {
            put64(&mut v, x);
        }
        let mut data = record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, &v);
        let mut v = Vec::new();
        for x in [1 | (1 << 32), 1] {
            put64(&mut v, x); // pid, ppid, tid, ptid
        }
        put64(&mut v, 66);
        for x in [1 | (1 << 32), 66, 2, 1] {
            put64(&mut v, x); // trailer: tid, time, id, cpu
        }
        data.extend(record(PERF_RECORD_EXIT, 0, &v));
        let (bytes, _) = file(&attrs, &data, &[]);
        let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
        let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
        assert_eq!(
            (s.attr_index, s.id, s.ip, s.time, s.cpu),
            (1, Some(2), 0x99, Some(55), Some(1))
        );
        let exit = f.next_event().unwrap();
        assert_eq!(exit, Some(Event::Exit { pid: 1, ppid: 1, tid: 1, ptid: 0, time: 66 }));
    }

    #[test]
    fn fields_before_the_registers_are_skipped() {
        let st = PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_READ
            | PERF_SAMPLE_RAW
            | PERF_SAMPLE_BRANCH_STACK
            | PERF_SAMPLE_REGS_USER
            | PERF_SAMPLE_STACK_USER
            | (1 << 14); // PERF_SAMPLE_WEIGHT, after the stack: left unread
        let mask = (1u64 << 33) - 1; // aarch64: x0..x30, sp, pc
        let attrs = [AttrSpec {
            sample_type: st,
            read_format: PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED,
            branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX,
            regs: mask,
            stack: 16,
            sample_id_all: false,
            ids: vec![1],
        }];
        let mut v = Vec::new();
        put64(&mut v, 0x40_1000);
        put64(&mut v, 9 | (9 << 32));
        for x in [2, 123, 1, 10, 2, 20] {
            put64(&mut v, x); // read: nr, enabled, {value, id} x 2
        }
        put32(&mut v, 12);
        v.extend_from_slice(&[0xee; 12]); // raw
        for x in [1, 0, 0xa, 0xb, 0xc] {
            put64(&mut v, x); // branch stack: nr, hw_idx, {from, to, flags}
        }
        put64(&mut v, 2);
        for i in 0..33 {
            put64(&mut v, 0x100 + i);
        }
        put64(&mut v, 16);
        v.extend_from_slice(&[0x5a; 16]);
        put64(&mut v, 16);
        put64(&mut v, 0xdead); // weight
        let data = record(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, &v);
        let mut v = Vec::new();
        put32(&mut v, 9);
        put32(&mut v, 9);
        v.extend(cstr("no trailer"));
        let mut data = [data, record(PERF_RECORD_COMM, 0, &v)].concat();
        // An AUXTRACE record's payload, which its size does not count.
        let mut v = Vec::new();
        for x in [16, 0, 0, 0, 0] {
            put64(&mut v, x);
        }
        v.extend_from_slice(&[0xff; 16]);
        data.extend(record(PERF_RECORD_AUXTRACE, 0, &v[..40]));
        data.extend_from_slice(&v[40..]);
        data.extend(record(PERF_RECORD_FINISHED_ROUND, 0, &[]));
        let (bytes, _) = file(&attrs, &data, &[]);
        let mut f = PerfFile::new(Cursor::new(&bytes)).unwrap();
        assert_eq!(f.header().arch(), Some(Arch::Aarch64), "guessed from the register mask");
        let Some(Event::Sample(s)) = f.next_event().unwrap() else { panic!() };
        assert_eq!((s.ip, s.pid, s.regs_abi, s.regs_mask), (0x40_1000, 9, 2, mask));
        assert_eq!(s.stack, &[0x5a; 16]);
        assert_eq!(
            (s.user_reg(29), s.user_reg(31), s.user_reg(32)),
            (Some(0x11d), Some(0x11f), Some(0x120))
        );
        let (pc, regs) = sample_registers(Arch::Aarch64, &s);
        assert_eq!(pc, Some(0x120));
        assert_eq!(
            (regs.get(0), regs.get(30), regs.get(31)),
            (Some(0x100), Some(0x11e), Some(0x11f))
        );
        let comm = f.next_event().unwrap();
        assert_eq!(
            comm,
            Some(Event::Comm { pid: 9, tid: 9, comm: b"no trailer", exec: false, time: None })
        );
        assert_eq!(f.next_event().unwrap(), Some(Event::Other { type_: PERF_RECORD_AUXTRACE }));
        assert_eq!(f.next_event().unwrap(), Some(Event::FinishedRound));
        assert_eq!(f.next_event().unwrap(), None);
    }

    #[test]
    fn damage_is_named_with_its_offset() {
        let attrs = [AttrSpec::dwarf(vec![1])];
        let open = |bytes: &[u8]| PerfFile::new(Cursor::new(bytes.to_vec())).err().unwrap();
        let (good, layout) = file(&attrs, &record(PERF_RECORD_FINISHED_ROUND, 0, &[]), &[]);

        let mut b = good.clone();
        b[..8].copy_from_slice(b"ELF\x7f\0\0\0\0");
        assert!(matches!(open(&b), PerfError::BadMagic { .. }));
        b[..8].copy_from_slice(b"2ELIFREP");
        assert!(open(&b).to_string().contains("big-endian"), "{}", open(&b));
        b[..8].copy_from_slice(b"PERFFILE");
        assert!(matches!(open(&b), PerfError::Unsupported { .. }));
        assert!(matches!(open(&good[..50]), PerfError::TruncatedHeader { offset: 50, .. }));
        assert!(matches!(open(&good[..5]), PerfError::TruncatedHeader { offset: 5, .. }));
        assert!(matches!(open(b""), PerfError::TruncatedHeader { offset: 0, .. }));

        let data_at = layout.data_offset;
        let with_data = |data: &[u8]| file(&attrs, data, &[]).0;
        let last_error = |bytes: &[u8]| read_all(bytes).unwrap().1.unwrap();
        let mut small = record(PERF_RECORD_FINISHED_ROUND, 0, &[]);
        small.extend(record(PERF_RECORD_FINISHED_ROUND, 0, &[]));
        small[8 + 6] = 4;
        let err = last_error(&with_data(&small));
        assert!(
            matches!(err, PerfError::RecordTooSmall { offset, size: 4 } if offset == data_at as u64 + 8)
        );
        assert!(err.to_string().contains(&format!("{:#x}", data_at + 8)), "{err}");

        let mut long = record(PERF_RECORD_FINISHED_ROUND, 0, &[]);
        long[6] = 16;
        let err = last_error(&with_data(&long));
        assert!(matches!(err, PerfError::BadRecord { .. }), "{err}");

        let err = last_error(&with_data(&record(PERF_RECORD_COMPRESSED, 0, &[0; 8])));
        assert!(matches!(err, PerfError::Unsupported { .. }) && err.to_string().contains("-z"));

        // A sample whose stack runs past its record.
        let mut s = SampleSpec {
            misc: PERF_RECORD_MISC_USER,
            ip: 1,
            pid: 1,
            tid: 1,
            time: 1,
            cpu: 0,
            period: 1,
            chain: vec![],
            regs: Some(x86_regs()),
            stack: Some((vec![0; 16], 8)),
        }
        .record();
        let at = s.len() - 8 - 16 - 8;
        s[at] = 24;
        let err = last_error(&with_data(&s));
        assert!(matches!(err, PerfError::BadRecord { type_: PERF_RECORD_SAMPLE, .. }), "{err}");
        s[at] = 16;
        let dyn_at = s.len() - 8;
        s[dyn_at] = 17;
        let err = last_error(&with_data(&s));
        assert!(err.to_string().contains("dyn_size"), "{err}");
    }

    #[test]
    fn an_unfinished_recording_is_read_to_the_end_of_the_file() {
        let (data, count) = standard_records();
        let (mut bytes, layout) = file(&[AttrSpec::dwarf(vec![314])], &data, &[]);
        bytes[48..56].copy_from_slice(&0u64.to_le_bytes()); // data size not written
        let (events, err, header) = read_all(&bytes).unwrap();
        assert_eq!((events.len(), header.data_size), (count, 0));
        assert!(err.is_none());
        // Cut inside the last record: the records before, then the damage.
        let (events, err, _) = read_all(&bytes[..layout.data_end - 4]).unwrap();
        assert_eq!(events.len(), count - 1);
        assert!(matches!(err, Some(PerfError::TruncatedRecord { .. })));
    }
}
