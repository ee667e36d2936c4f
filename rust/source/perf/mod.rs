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
//!
//! The parts: `abi` (the format's numbers and this reader's bounds),
//! `bytes` (bounds-checked little-endian reads), `header` (attributes and
//! feature sections), `event` (what a record holds), `record` (bytes into
//! events: no I/O, no thread), `reader` ([`PerfFile`], over `Read + Seek`,
//! both layouts), `pager` (a mapped file read in place, and the thread
//! that pages it).

use std::fmt;
use std::io;

mod abi;
mod bytes;
mod event;
mod header;
mod pager;
mod reader;
mod record;
#[cfg(test)]
mod tests;

// The format's public numbers stay `crate::source::perf::PERF_*`, `HEADER_*`.
pub use abi::*;
pub use event::{sample_registers, Event, Inode, MmapEvent, Sample, SampleIds, Words};
pub use header::{Attr, BuildIdEntry, PerfHeader};
pub use pager::SharedBytes;
pub use reader::PerfFile;
pub use record::Decoder;

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

fn bad(offset: u64, type_: u32, what: &'static str) -> PerfError {
    PerfError::BadRecord { offset, type_, what }
}
