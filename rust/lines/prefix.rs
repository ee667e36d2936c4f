//! A compressed `.debug_info` decompressed only as far as the lookups need.
//!
//! A distribution's debug file compresses its sections with zlib, and a
//! zlib stream is read from its start: the unit at 40% of libc's 5.8 MB of
//! `.debug_info` costs 40% of the 30–40 ms it takes to decompress it all.
//! A crash's stack touches a few units of each library, found by address
//! in `.debug_aranges`; the section is decompressed up to the end of the
//! furthest unit looked up so far (and half as far again when it must grow,
//! so that many lookups rebuild the parse a logarithmic number of times),
//! cut at a unit's end, and addr2line parses that prefix as if it were the
//! whole section. An address that `.debug_aranges` does not place (clang
//! writes none) takes the whole section, as before.

use std::sync::Arc;

use gimli::Endianity;

use super::SectionBytes;
use crate::memory::Data;

/// Below this size a section is decompressed whole: a lazy one would save
/// less than it costs to parse it twice.
pub(super) const MIN_LAZY: u64 = 256 << 10;

/// The decompressed bytes of a compressed `.debug_info`, as far as asked.
pub(super) struct InfoPrefix {
    /// The zlib stream.
    stream: SectionBytes,
    inflater: flate2::Decompress,
    /// Decompressed so far, while growing; empty when `given` holds them.
    out: Vec<u8>,
    /// The buffer given out last (all that was decompressed then, the
    /// prefix given a range of it): copied into `out` if it must grow.
    given: Option<Arc<Data>>,
    /// The section's size once decompressed.
    full: usize,
    /// Where the last whole unit decompressed ends.
    boundary: usize,
    /// The length of the prefix given out last.
    published: usize,
    /// The stream cannot be read further (damaged, or shorter than it
    /// says): what was decompressed is all there is.
    stuck: bool,
    endian: gimli::RunTimeEndian,
    /// `.debug_aranges`: (start, end, offset of the unit), by start.
    aranges: Vec<(u64, u64, usize)>,
}

impl InfoPrefix {
    /// The zlib `stream` of a `.debug_info` of `full` bytes, its units
    /// placed by `aranges` (the decompressed `.debug_aranges`). None
    /// without aranges: every lookup would need the whole section.
    pub(super) fn new(
        stream: SectionBytes,
        full: u64,
        aranges: &[u8],
        endian: gimli::RunTimeEndian,
    ) -> Option<InfoPrefix> {
        let aranges = read_aranges(aranges, endian);
        if aranges.is_empty() {
            return None;
        }
        let full = usize::try_from(full).ok()?;
        Some(InfoPrefix {
            stream,
            inflater: flate2::Decompress::new(true),
            out: Vec::new(),
            given: None,
            full,
            boundary: 0,
            published: 0,
            stuck: false,
            endian,
            aranges,
        })
    }

    /// Whether the whole section has been given out: no lookup can need more.
    pub(super) fn done(&self) -> bool {
        self.published == self.full || (self.stuck && self.published == self.boundary)
    }

    /// A longer prefix of the section when the units of the ELF addresses
    /// are not all in the one given out last; None when they are (or the
    /// section can give no more). The first prefix ends with the furthest
    /// of their units; the next is the whole section (a second growth
    /// means lookups all over the file, as a profile's: growing by steps
    /// would parse the units again at each).
    pub(super) fn cover(
        &mut self,
        addresses: impl IntoIterator<Item = u64>,
    ) -> Option<SectionBytes> {
        let mut end = 0;
        for address in addresses {
            let unit_end = match self.unit_of(address) {
                Some(offset) => self.unit_end(offset),
                None => self.full,
            };
            end = end.max(unit_end);
            if end == self.full {
                break;
            }
        }
        if end <= self.published {
            return None;
        }
        self.inflate_to(if self.published == 0 { end } else { self.full });
        self.advance_boundary();
        if self.boundary <= self.published {
            return None;
        }
        self.published = self.boundary;
        // All that was decompressed, given out without a copy; the prefix is its range.
        if self.out.is_empty() {
            return None;
        }
        let given = Arc::new(Data::Owned(std::mem::take(&mut self.out)));
        self.given = Some(given.clone());
        Some(SectionBytes { data: given, range: 0..self.boundary })
    }

    /// The offset of the unit `.debug_aranges` places `address` in.
    fn unit_of(&self, address: u64) -> Option<usize> {
        let after = self.aranges.partition_point(|&(start, _, _)| start <= address);
        let &(_, end, offset) = self.aranges.get(after.checked_sub(1)?)?;
        (address < end).then_some(offset)
    }

    /// Where the unit at `offset` ends (its header read from the stream);
    /// the whole section where the header is not a unit's.
    fn unit_end(&mut self, offset: usize) -> usize {
        self.inflate_to(offset.saturating_add(12).min(self.full));
        match unit_length(self.bytes().get(offset..).unwrap_or_default(), self.endian) {
            Some(len) => offset.saturating_add(len).min(self.full),
            None => self.full,
        }
    }

    /// Decompresses until `out` holds `target` bytes (at most the whole
    /// section), or the stream stops.
    fn inflate_to(&mut self, target: usize) {
        let target = target.min(self.full);
        let have = self.given.as_ref().map_or(0, |g| g.len());
        if self.out.is_empty() && (target <= have || self.stuck) {
            return;
        }
        if self.out.capacity() == 0 {
            // Capacity only: pages are touched as they are written.
            self.out = Vec::with_capacity(self.full);
            self.out.extend_from_slice(self.given.as_deref().map_or(&[], |g| &g[..]));
        }
        let mut buf = vec![0u8; 256 << 10];
        while self.out.len() < target && !self.stuck {
            let want = (target - self.out.len()).min(buf.len());
            let (read, written) = (self.inflater.total_in(), self.inflater.total_out());
            let input = self.stream.get(read as usize..).unwrap_or_default();
            let status =
                self.inflater.decompress(input, &mut buf[..want], flate2::FlushDecompress::None);
            let produced = (self.inflater.total_out() - written) as usize;
            self.out.extend_from_slice(&buf[..produced]);
            match status {
                Ok(flate2::Status::Ok) if produced > 0 => {}
                // The end of the stream (the section ends here, whatever its header said), no
                // progress, or a damaged stream.
                _ => self.stuck = self.out.len() < self.full,
            }
        }
    }

    /// All that was decompressed.
    fn bytes(&self) -> &[u8] {
        match &self.given {
            Some(given) if self.out.is_empty() => given,
            _ => &self.out,
        }
    }

    /// Moves `boundary` to the end of the last whole unit decompressed.
    fn advance_boundary(&mut self) {
        let bytes = self.bytes();
        let mut boundary = self.boundary;
        while let Some(len) = unit_length(bytes.get(boundary..).unwrap_or_default(), self.endian) {
            match boundary.checked_add(len) {
                Some(next) if next <= bytes.len() => boundary = next,
                _ => break,
            }
        }
        self.boundary = boundary;
    }
}

/// The length, header included, of the unit at the start of `bytes`; None
/// where its initial length cannot be read or is not one.
fn unit_length(bytes: &[u8], endian: gimli::RunTimeEndian) -> Option<usize> {
    let len32 = endian.read_u32(bytes.get(..4)?);
    let (header, len) = match len32 {
        0xffff_ffff => (12, endian.read_u64(bytes.get(4..12)?)),
        0xffff_fff0.. => return None,
        _ => (4, u64::from(len32)),
    };
    let len = usize::try_from(len).ok()?.checked_add(header)?;
    // A unit has at least a version and more.
    (len > header).then_some(len)
}

/// The address ranges of `.debug_aranges`, with their unit's offset, by
/// start; a damaged set is skipped.
fn read_aranges(bytes: &[u8], endian: gimli::RunTimeEndian) -> Vec<(u64, u64, usize)> {
    let aranges = gimli::DebugAranges::new(bytes, endian);
    let mut out = Vec::new();
    let mut headers = aranges.headers();
    while let Ok(Some(header)) = headers.next() {
        let offset = header.debug_info_offset().0;
        let mut entries = header.entries();
        while let Ok(Some(entry)) = entries.next() {
            let range = entry.range();
            if range.begin < range.end {
                out.push((range.begin, range.end, offset));
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn unit(len: u32, fill: u8) -> Vec<u8> {
        let mut unit = len.to_le_bytes().to_vec();
        unit.resize(4 + len as usize, fill);
        unit
    }

    fn zlib(bytes: &[u8]) -> SectionBytes {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        let stream = enc.finish().unwrap();
        let range = 0..stream.len();
        SectionBytes { data: Arc::new(Data::Owned(stream)), range }
    }

    /// One arange set: version 2, 8-byte addresses, pointing at `offset`.
    fn aranges(sets: &[(u32, u64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(offset, start, len) in sets {
            let mut set = Vec::new();
            set.extend(2u16.to_le_bytes());
            set.extend(offset.to_le_bytes());
            set.extend([8u8, 0]);
            set.extend([0u8; 4]); // padding to twice the address size
            set.extend(start.to_le_bytes());
            set.extend(len.to_le_bytes());
            set.extend([0u8; 16]);
            out.extend((set.len() as u32).to_le_bytes());
            out.extend(set);
        }
        out
    }

    /// Three units of 100, 200 and 300 000 bytes: a lookup in the first
    /// decompresses the first, one in the third everything; an address no
    /// arange places, everything; the prefixes end at units' ends.
    #[test]
    fn decompresses_as_far_as_the_unit_looked_up() {
        let units = [unit(96, 1), unit(196, 2), unit(299_996, 3)];
        let section = units.concat();
        let sets = aranges(&[(0, 0x1000, 0x100), (100, 0x2000, 0x100), (300, 0x3000, 0x100)]);
        let endian = gimli::RunTimeEndian::Little;
        let mut prefix =
            InfoPrefix::new(zlib(&section), section.len() as u64, &sets, endian).expect("aranges");
        let first = prefix.cover([0x1010]).expect("the first unit");
        assert_eq!(&first[..], &section[..100]);
        assert!(prefix.cover([0x1020, 0x1000]).is_none(), "already in");
        assert!(!prefix.done());
        // Growing a second time: the whole section.
        let whole = prefix.cover([0x2000]).expect("the second unit");
        assert_eq!(&whole[..], &section[..]);
        assert!(prefix.done());

        // Several addresses at once: up to the furthest of their units.
        let new = || InfoPrefix::new(zlib(&section), section.len() as u64, &sets, endian);
        let mut batch = new().expect("aranges");
        let both = batch.cover([0x2010, 0x1000]).map(|b| b.to_vec());
        assert_eq!(both, Some(section[..300].to_vec()));
        let mut unplaced = new().expect("aranges");
        assert_eq!(unplaced.cover([0x1000, 0x5000]).map(|b| b.len()), Some(section.len()));
        assert!(unplaced.done());
    }

    /// A stream cut short or damaged gives the whole units it holds, then
    /// nothing more; no aranges, no prefix.
    #[test]
    fn a_damaged_stream_gives_what_it_holds() {
        let units = [unit(96, 1), unit(299_996, 3)];
        let section = units.concat();
        let sets = aranges(&[(0, 0x1000, 0x100), (100, 0x3000, 0x100)]);
        let endian = gimli::RunTimeEndian::Little;
        let stream = zlib(&section);
        let cut = SectionBytes { data: stream.data.clone(), range: 0..stream.len() / 2 };
        let mut prefix =
            InfoPrefix::new(cut, section.len() as u64, &sets, endian).expect("aranges");
        assert_eq!(prefix.cover([0x3000]).map(|b| b.len()), Some(100));
        assert!(prefix.cover([0x3000]).is_none());
        assert!(prefix.done());
        assert!(InfoPrefix::new(stream, section.len() as u64, &[], endian).is_none());
        assert_eq!(unit_length(&0xffff_fff5u32.to_le_bytes(), endian), None);
        assert_eq!(unit_length(&[1, 0], endian), None);
    }
}
