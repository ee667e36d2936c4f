//! [`PerfFile`]: the streaming reader over `Read + Seek`, for both layouts
//! (the file format's sections at offsets; pipe mode's header records).

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use crate::source::memory::Data;

use super::abi::{
    ATTR_SIZE_VER0, FILE_HEADER_SIZE, HEADER_ARCH, HEADER_BUILD_ID, HEADER_CMDLINE,
    HEADER_HOSTNAME, HEADER_OSRELEASE, HEADER_VERSION, MAX_ATTRS, MAX_BUILD_IDS, MAX_FEATURE_SIZE,
    MAX_IDS, MAX_RECORD, PERF_RECORD_AUXTRACE, PERF_RECORD_HEADER_ATTR,
    PERF_RECORD_HEADER_BUILD_ID, PERF_RECORD_HEADER_FEATURE, PERF_RECORD_HEADER_TRACING_DATA,
    PIPE_HEADER_SIZE,
};
use super::bytes::{read_u16, read_u32, read_u64};
use super::event::Event;
use super::header::{check_magic, decode_feature, parse_attr, parse_build_id, PerfHeader};
use super::pager::Pager;
use super::record::{decode, Decoder};
use super::{bad, PerfError};

/// A streaming perf.data reader over `R` (the whole file, positioned at
/// its start; wrap a `File` in a `BufReader`).
pub struct PerfFile<R> {
    reader: R,
    pub(super) header: PerfHeader,
    decoder: Arc<Decoder>,
    /// The whole file, when it is mapped: records are then read in place
    /// rather than copied into `buf`.
    pub(super) map: Option<Arc<Data>>,
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
    pub(super) pager: Option<Pager>,
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
                    // Bytes that look damaged past the end of a file that
                    // shrank while read are the file's cut, not damage.
                    let offset = self.pos;
                    return Err(match self.map.as_ref().and_then(|m| m.shrunk()) {
                        Some(end) if end as u64 <= offset.saturating_add(8) => io_error(
                            offset,
                            io::Error::other("the file was cut short while it was read"),
                        ),
                        _ => e,
                    });
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
        self.check_cut(offset, 8)?;
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
                self.check_cut(offset, size)?;
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

    /// An error if the mapped file shrank while read and the record of
    /// `size` bytes at `offset` reaches past its new end (it reads as zeros
    /// there: see `crate::source::files`).
    fn check_cut(&self, offset: u64, size: usize) -> Result<(), PerfError> {
        let cut = self.map.as_ref().and_then(|map| map.cut_at());
        match cut {
            Some(cut) if (cut as u64) < offset.saturating_add(size as u64) => {
                Err(io_error(offset, io::Error::other("the file was cut short while it was read")))
            }
            _ => Ok(()),
        }
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

fn io_error(offset: u64, source: io::Error) -> PerfError {
    PerfError::Io { offset, source }
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
