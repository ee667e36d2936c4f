//! The captured address space: everything the unwinder reads goes through
//! the one narrow [`Memory`] interface, so cores, perf samples and plain
//! buffers plug in the same way.

/// A file's bytes: mapped from disk (zero-copy, guarded against the file
/// shrinking: see [`crate::source::files`]) or owned (e.g. a vdso image copied out of
/// a core).
pub enum Data {
    Mapped(crate::source::files::Mapped),
    Owned(Vec<u8>),
    /// Anonymous memory: its pages cost nothing until written, and read as
    /// zeros where they never were (see `crate::symbolize::lines`' partial sections).
    Anonymous(memmap2::Mmap),
}

impl Data {
    /// A mapped file's pages out of the resident memory ([`Mapped::release_resident`]);
    /// bytes held in memory stay.
    pub fn release_resident(&self) {
        if let Data::Mapped(map) = self {
            map.release_resident();
        }
    }

    /// Where a mapped file turned out to end, if it shrank while mapped
    /// and was read past its new end (the bytes from there on read as zeros).
    pub fn cut_at(&self) -> Option<usize> {
        match self {
            Data::Mapped(m) => m.cut_at(),
            Data::Owned(_) | Data::Anonymous(_) => None,
        }
    }

    /// Where a mapped file ends now, if it shrank while mapped (see
    /// [`crate::source::files::Mapped::shrunk`]: a system call, for error paths).
    pub fn shrunk(&self) -> Option<usize> {
        match self {
            Data::Mapped(m) => m.shrunk(),
            Data::Owned(_) | Data::Anonymous(_) => None,
        }
    }
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
            Data::Anonymous(m) => m,
        }
    }
}

/// Reads of the target's memory. `None` means the address is not captured.
pub trait Memory {
    fn read_u64(&mut self, addr: u64) -> Option<u64>;

    /// A little-endian read of `size` (1, 2, 4 or 8) bytes, zero-extended.
    fn read_sized(&mut self, addr: u64, size: u8) -> Option<u64> {
        if size == 0 || size > 8 {
            return None;
        }
        let v = self.read_u64(addr)?;
        Some(if size >= 8 { v } else { v & ((1u64 << (u32::from(size) * 8)) - 1) })
    }

    /// The bounds `(start, end)` of the captured region holding `addr`, if
    /// this memory knows its regions: the stack the frame-pointer walk and
    /// stack scanning stay inside. None: unknown (reads alone decide).
    fn region_of(&mut self, addr: u64) -> Option<(u64, u64)> {
        let _ = addr;
        None
    }

    /// The captured bytes from `addr` on, at least `len` of them (the rest
    /// of the region: no second bounds check to cut it), if one region holds
    /// them all and this memory can lend them: a frame's saved registers,
    /// read from one slice with one bounds check instead of one lookup per
    /// word. None: read word by word (the default).
    #[inline(always)]
    fn window(&mut self, addr: u64, len: u64) -> Option<&[u8]> {
        let _ = (addr, len);
        None
    }

    /// [`Memory::window`] at `base + offset` (wrapping). A walk knows the
    /// CFA's register (`base`) a step before the row that gives `offset`:
    /// memory that can use it alone first, does.
    #[inline(always)]
    fn window_from(&mut self, base: u64, offset: u64, len: u64) -> Option<&[u8]> {
        self.window(base.wrapping_add(offset), len)
    }
}

impl<F: FnMut(u64) -> Option<u64>> Memory for F {
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        self(addr)
    }
}

/// Memory made of captured regions (start address, bytes), e.g. the stack
/// copied at the time of a sample. Regions may come in any order; a read
/// must lie inside one region.
#[derive(Debug, Default, Clone)]
pub struct Regions<'a> {
    regions: Vec<(u64, &'a [u8])>,
    /// The start and bytes of the region the last read was served from:
    /// unwinding reads neighbouring stack words, so it is tried first, with
    /// no search and no index into `regions`. Set only while the regions are
    /// disjoint, where any region holding a read is the answer; else empty.
    last_start: u64,
    last: &'a [u8],
    disjoint: bool,
}

impl<'a> Regions<'a> {
    pub fn new() -> Self {
        Regions { regions: Vec::new(), last_start: 0, last: &[], disjoint: true }
    }

    /// No regions, in the allocation of `storage` (emptied first): a vector
    /// that [`Regions::into_storage`] gave back, kept between walks.
    pub fn in_storage(mut storage: Vec<(u64, &'a [u8])>) -> Self {
        storage.clear();
        Regions { regions: storage, last_start: 0, last: &[], disjoint: true }
    }

    /// The vector the regions were held in, emptied, for regions of any
    /// lifetime (the allocation kept: an empty vector's elements borrow
    /// nothing, and collecting in place reuses it).
    pub fn into_storage<'b>(self) -> Vec<(u64, &'b [u8])> {
        let mut v = self.regions;
        v.clear();
        v.into_iter().map(|(start, _)| (start, &[][..])).collect()
    }

    /// Remove all regions, keeping the allocation for reuse.
    pub fn clear(&mut self) {
        self.regions.clear();
        self.last = &[];
        self.disjoint = true;
    }

    /// Regions already sorted by start address, e.g. a core's segments.
    pub fn from_sorted(regions: impl IntoIterator<Item = (u64, &'a [u8])>) -> Self {
        let regions: Vec<_> = regions.into_iter().collect();
        let disjoint = regions
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].0.saturating_add(w[0].1.len() as u64) <= w[1].0);
        if regions.windows(2).any(|w| w[0].0 > w[1].0) {
            let mut out = Regions::new();
            for (start, bytes) in regions {
                out.add(start, bytes);
            }
            return out;
        }
        Regions { regions, last_start: 0, last: &[], disjoint }
    }

    pub fn add(&mut self, start: u64, bytes: &'a [u8]) {
        let pos = self.regions.partition_point(|(s, _)| *s < start);
        let end = start.saturating_add(bytes.len() as u64);
        let overlaps_prev = pos > 0 && {
            let (s, b) = self.regions[pos - 1];
            s.saturating_add(b.len() as u64) > start
        };
        let overlaps_next = self.regions.get(pos).is_some_and(|(s, _)| *s < end);
        if overlaps_prev || overlaps_next {
            self.disjoint = false;
        }
        self.regions.insert(pos, (start, bytes));
        self.last = &[];
    }

    pub fn len(&self) -> usize {
        self.regions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The `size` bytes at `addr`, if one region holds them all.
    #[inline(always)]
    fn find(&mut self, addr: u64, size: u64) -> Option<&'a [u8]> {
        // Unwinding reads neighbouring stack words: the region of the last
        // read usually holds this one too (`last` is empty where that cannot
        // be trusted: overlapping regions).
        let bytes = self.last;
        let off = addr.wrapping_sub(self.last_start);
        if off < bytes.len() as u64 && bytes.len() as u64 - off >= size {
            return bytes.get(off as usize..(off + size) as usize);
        }
        self.find_slow(addr, size)
    }

    #[cold]
    #[inline(never)]
    fn find_slow(&mut self, addr: u64, size: u64) -> Option<&'a [u8]> {
        let fits = |&(start, bytes): &(u64, &'a [u8])| {
            let off = addr.checked_sub(start)?;
            let end = off.checked_add(size)?;
            if end <= bytes.len() as u64 {
                Some(&bytes[off as usize..end as usize])
            } else {
                None
            }
        };
        let idx = self.regions.partition_point(|(s, _)| *s <= addr).checked_sub(1)?;
        if self.disjoint {
            (self.last_start, self.last) = self.regions[idx];
            return fits(&self.regions[idx]);
        }
        // Where regions overlap, the one starting highest wins; the nearest
        // start below addr may be a short region that ends before it.
        self.regions[..=idx].iter().rev().find_map(fits)
    }
}

impl Memory for Regions<'_> {
    fn region_of(&mut self, addr: u64) -> Option<(u64, u64)> {
        let idx = self.regions.partition_point(|(s, _)| *s <= addr).checked_sub(1)?;
        self.regions[..=idx].iter().rev().find_map(|&(start, bytes)| {
            let end = start.saturating_add(bytes.len() as u64);
            (addr < end).then_some((start, end))
        })
    }

    #[inline]
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        // The usual read, from the last region, as one bounds test and a
        // fixed-size chunk (no slice of a variable length to convert).
        let off = addr.wrapping_sub(self.last_start);
        if off < self.last.len() as u64 {
            if let Some(word) = self.last[off as usize..].first_chunk::<8>() {
                return Some(u64::from_le_bytes(*word));
            }
        }
        let bytes = self.find_slow(addr, 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    fn read_sized(&mut self, addr: u64, size: u8) -> Option<u64> {
        read_le(size, |n| self.find(addr, n))
    }

    #[inline(always)]
    fn window(&mut self, addr: u64, len: u64) -> Option<&[u8]> {
        self.window_from(addr, 0, len)
    }

    #[inline(always)]
    fn window_from(&mut self, base: u64, offset: u64, len: u64) -> Option<&[u8]> {
        // The last region's tail, as `find` tries it first: `base`'s offset
        // in it is known before `offset` is.
        let off = base.wrapping_sub(self.last_start).wrapping_add(offset);
        if let Ok(off) = usize::try_from(off) {
            if let Some(rest) = self.last.get(off..) {
                if rest.len() as u64 >= len {
                    return Some(rest);
                }
            }
        }
        self.find_slow(base.wrapping_add(offset), len)
    }
}

/// A little-endian value of `size` (1 to 8) bytes, zero-extended, from the
/// bytes `find(size)` gives.
#[inline(always)]
fn read_le<'b>(size: u8, find: impl FnOnce(u64) -> Option<&'b [u8]>) -> Option<u64> {
    if size == 0 || size > 8 {
        return None;
    }
    let bytes = find(u64::from(size))?;
    let mut buf = [0u8; 8];
    buf[..bytes.len()].copy_from_slice(bytes);
    Some(u64::from_le_bytes(buf))
}

/// One captured buffer at `start`, e.g. the stack copy of a perf sample:
/// [`Regions`] without its vector, so a walk over it allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct Buffer<'a> {
    pub start: u64,
    pub bytes: &'a [u8],
}

impl<'a> Buffer<'a> {
    #[inline(always)]
    fn find(&self, addr: u64, size: u64) -> Option<&'a [u8]> {
        let off = addr.checked_sub(self.start)?;
        let end = off.checked_add(size)?;
        self.bytes.get(usize::try_from(off).ok()?..usize::try_from(end).ok()?)
    }
}

impl Memory for Buffer<'_> {
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        Some(u64::from_le_bytes(self.find(addr, 8)?.try_into().ok()?))
    }

    fn region_of(&mut self, addr: u64) -> Option<(u64, u64)> {
        let end = self.start.saturating_add(self.bytes.len() as u64);
        (self.start..end).contains(&addr).then_some((self.start, end))
    }

    fn read_sized(&mut self, addr: u64, size: u8) -> Option<u64> {
        let this = *self;
        read_le(size, |n| this.find(addr, n))
    }

    #[inline(always)]
    fn window(&mut self, addr: u64, len: u64) -> Option<&[u8]> {
        self.find(addr, len)
    }

    #[inline(always)]
    fn window_from(&mut self, base: u64, offset: u64, len: u64) -> Option<&[u8]> {
        let off = base.wrapping_sub(self.start).wrapping_add(offset);
        let end = off.checked_add(len)?;
        self.bytes.get(usize::try_from(off).ok()?..usize::try_from(end).ok()?)
    }
}

/// A part of a file that is memory of the target: `size` bytes at `offset`
/// in the file hold the memory at `address` (a core file's PT_LOAD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub address: u64,
    pub offset: u64,
    pub size: u64,
}

/// A file's segments as the target's memory, e.g. a core file mapped once
/// and read in place. Segments that run past the end of the file (a
/// truncated core) are cut to what the file holds.
pub struct SegmentMemory {
    data: Data,
    /// Sorted by address: (address, byte range in `data`).
    segments: Vec<(u64, std::ops::Range<usize>)>,
    /// Bytes of the segments the file lacks.
    pub missing_bytes: u64,
}

impl SegmentMemory {
    pub fn new(data: Data, segments: &[Segment]) -> Self {
        let len = data.len() as u64;
        let mut missing_bytes = 0;
        let mut out: Vec<(u64, std::ops::Range<usize>)> = segments
            .iter()
            .filter_map(|s| {
                let start = s.offset.min(len);
                let end = s.offset.saturating_add(s.size).min(len);
                missing_bytes = u64::saturating_add(missing_bytes, s.size - (end - start));
                (end > start).then_some((s.address, start as usize..end as usize))
            })
            .collect();
        sort_runs(&mut out, |(a, _)| *a);
        SegmentMemory { data, segments: out, missing_bytes }
    }

    /// The segments as regions, for one walk.
    pub fn regions(&self) -> Regions<'_> {
        Regions::from_sorted(self.segments.iter().map(|(a, r)| (*a, &self.data[r.clone()])))
    }

    /// The `size` bytes at `address`, if one segment holds them all.
    pub fn bytes(&self, address: u64, size: usize) -> Option<&[u8]> {
        let i = self.segments.partition_point(|(a, _)| *a <= address).checked_sub(1)?;
        let (start, range) = &self.segments[i];
        let off = usize::try_from(address - start).ok()?;
        let bytes = &self.data[range.clone()];
        bytes.get(off..off.checked_add(size)?)
    }

    /// The segment holding `address`: its start and bytes.
    /// Each thread's stack (see `ThreadStack`): the captured
    /// segment holding each (tid, sp) of `threads`; a thread whose sp is in
    /// none is left out.
    pub fn thread_stacks(&self, threads: impl Iterator<Item = (u32, u64)>) -> Vec<ThreadStack> {
        threads
            .filter_map(|(tid, sp)| {
                let (start, bytes) = self.segment_of(sp)?;
                let end = start.saturating_add(bytes.len() as u64);
                Some(ThreadStack { tid, start, end, sp, live_end: None })
            })
            .collect()
    }

    pub fn segment_of(&self, address: u64) -> Option<(u64, &[u8])> {
        let i = self.segments.partition_point(|(a, _)| *a <= address).checked_sub(1)?;
        let (start, range) = &self.segments[i];
        let bytes = &self.data[range.clone()];
        (address - start < bytes.len() as u64).then_some((*start, bytes))
    }

    /// The NUL-terminated string at `address`, at most `limit` bytes before
    /// the NUL; it may run on through adjacent segments. None where it is not
    /// all captured.
    pub fn string(&self, address: u64, limit: usize) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        while out.len() < limit {
            let at = address.checked_add(out.len() as u64)?;
            let chunk = self.tail(at, limit - out.len());
            if chunk.is_empty() {
                return None;
            }
            if let Some(end) = memchr::memchr(0, chunk) {
                out.extend_from_slice(&chunk[..end]);
                return Some(out);
            }
            out.extend_from_slice(chunk);
        }
        None
    }

    /// The bytes the segment holding `address` has from there on, at most
    /// `limit` (empty: none captured there).
    pub fn tail(&self, address: u64, limit: usize) -> &[u8] {
        let Some(i) = self.segments.partition_point(|(a, _)| *a <= address).checked_sub(1) else {
            return &[];
        };
        let (start, range) = &self.segments[i];
        let bytes = &self.data[range.clone()];
        let off = usize::try_from(address - start).unwrap_or(usize::MAX);
        let rest = bytes.get(off..).unwrap_or(&[]);
        &rest[..rest.len().min(limit)]
    }

    /// (address, size) of every segment the file holds bytes for.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments.iter().map(|(a, r)| (*a, r.len() as u64))
    }
}

/// Sort `v` by `key`, stably, as `sort_by_key` does, but in time linear in
/// its length where it is a few sorted runs that seldom interleave: a
/// dump's memory list is in address order but for a few places (Wine's
/// lists thousands of small regions in about ten runs), where a general
/// sort costs tens of microseconds per thousand regions. Adjacent runs are
/// merged by galloping: each step copies the longest prefix of one run
/// that goes before the other's head.
pub fn sort_runs<T: Clone, K: Ord>(v: &mut Vec<T>, key: impl Fn(&T) -> K) {
    const MAX_RUNS: usize = 64;
    let mut bounds = vec![0];
    for i in 1..v.len() {
        if key(&v[i]) < key(&v[i - 1]) {
            bounds.push(i);
            if bounds.len() > MAX_RUNS {
                v.sort_by_key(key);
                return;
            }
        }
    }
    if bounds.len() == 1 {
        return;
    }
    bounds.push(v.len());
    let mut merged: Vec<T> = Vec::with_capacity(v.len());
    while bounds.len() > 2 {
        merged.clear();
        let mut next = vec![0];
        for run in bounds.windows(3).step_by(2) {
            let (mut a, mut b) = (&v[run[0]..run[1]], &v[run[1]..run[2]]);
            while let Some(y) = b.first() {
                // a's elements that go before b's head (ties: a's first, as
                // a stable sort has them), then b's that go before a's next.
                let ky = key(y);
                let n = a.partition_point(|t| key(t) <= ky);
                merged.extend_from_slice(&a[..n]);
                a = &a[n..];
                let Some(x) = a.first() else { break };
                let kx = key(x);
                let m = b.partition_point(|t| key(t) < kx);
                merged.extend_from_slice(&b[..m]);
                b = &b[m..];
            }
            merged.extend_from_slice(a);
            merged.extend_from_slice(b);
            next.push(merged.len());
        }
        if bounds.len() % 2 == 0 {
            // An odd number of runs: the last goes on as it is.
            merged.extend_from_slice(&v[bounds[bounds.len() - 2]..]);
            next.push(merged.len());
        }
        std::mem::swap(v, &mut merged);
        bounds = next;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sort_runs_sorts_as_a_stable_sort_does() {
        // Pseudo-random lists of few and of many runs, keys with ties.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        };
        for case in 0..400 {
            let len = (next() % 400) as usize;
            let runs = 1 + (case % 80);
            let mut v: Vec<(u64, usize)> = Vec::with_capacity(len);
            for i in 0..len {
                let base = if i % (len / runs + 1) == 0 { next() % 1000 } else { 0 };
                let last = v.last().map_or(0, |&(k, _)| k);
                v.push((if base > 0 { base } else { last + next() % 3 }, i));
            }
            let mut want = v.clone();
            want.sort_by_key(|&(k, _)| k);
            sort_runs(&mut v, |&(k, _)| k);
            assert_eq!(v, want, "case {case}");
        }
    }

    use super::*;

    #[test]
    fn reads_inside_regions_only() {
        let a: Vec<u8> = (0u8..32).collect();
        let b = [0xffu8; 8];
        let mut m = Regions::new();
        m.add(0x2000, &b);
        m.add(0x1000, &a);
        assert_eq!(m.read_u64(0x1000), Some(u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7])));
        assert_eq!(m.read_u64(0x1018), Some(u64::from_le_bytes([24, 25, 26, 27, 28, 29, 30, 31])));
        assert_eq!(m.read_u64(0x1019), None, "crosses the end of the region");
        assert_eq!(m.read_u64(0x0fff), None);
        assert_eq!(m.read_u64(0x2000), Some(u64::MAX));
        assert_eq!(m.read_u64(u64::MAX - 3), None, "no overflow at the top of memory");
        assert_eq!(m.read_sized(0x1001, 2), Some(0x0201));
        assert_eq!(m.read_sized(0x101f, 1), Some(31));
        assert_eq!(m.read_sized(0x101f, 2), None);
        assert_eq!(m.region_of(0x1010), Some((0x1000, 0x1020)));
        assert_eq!(m.region_of(0x2007), Some((0x2000, 0x2008)));
        assert_eq!(m.region_of(0x2008), None);
        assert_eq!(m.region_of(0x0fff), None);
        // A window: at least the bytes asked for, from the address on.
        let window = m.window(0x1008, 16).map(<[u8]>::to_vec);
        assert!(window.is_some_and(|w| w.len() >= 16 && w[..16] == a[8..24]));
        assert_eq!(m.window(0x1008, 32), None, "crosses the end of the region");
        assert_eq!(m.window(0x0ff8, 16), None);
    }

    #[test]
    fn segments_of_a_truncated_file_are_cut() {
        let file: Vec<u8> = (0u8..64).collect();
        let segments = [
            Segment { address: 0x2000, offset: 32, size: 64 }, // runs 32 bytes past the end
            Segment { address: 0x1000, offset: 0, size: 16 },
            Segment { address: 0x3000, offset: 100, size: 8 }, // wholly past the end
        ];
        let mem = SegmentMemory::new(Data::Owned(file), &segments);
        assert_eq!(mem.missing_bytes, 32 + 8);
        assert_eq!(mem.ranges().collect::<Vec<_>>(), [(0x1000, 16), (0x2000, 32)]);
        assert_eq!(mem.bytes(0x2000, 2), Some(&[32u8, 33][..]));
        assert_eq!(mem.bytes(0x201f, 2), None, "past what the file holds");
        assert_eq!(mem.tail(0x201e, 64), &[62u8, 63][..], "to the end of what the file holds");
        assert_eq!(mem.tail(0x1000, 3), &[0u8, 1, 2][..]);
        assert!(mem.tail(0x1010, 8).is_empty() && mem.tail(0xfff, 8).is_empty());
        assert!(mem.tail(u64::MAX, 8).is_empty());
        let mut regions = mem.regions();
        assert_eq!(
            regions.read_u64(0x1008),
            Some(u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]))
        );
        assert_eq!(regions.read_u64(0x3000), None);
    }

    #[test]
    fn overlapping_regions() {
        let big = [1u8; 64];
        let small = [2u8; 8];
        let mut m = Regions::new();
        m.add(0x1000, &big);
        m.add(0x1008, &small);
        // 0x1010 is past the small region but inside the big one.
        assert_eq!(m.read_u64(0x1010), Some(u64::from_le_bytes([1; 8])));
        assert_eq!(m.read_u64(0x1008), Some(u64::from_le_bytes([2; 8])));
    }
}

/// A thread's stack: the captured region holding its sp, `start..end`, its
/// sp, and, where its own walk has been made, the top of its live part: its
/// frames on that region reach `sp..live_end` (the region's end would take
/// in other stacks where one region holds several, as a Go heap arena
/// holds goroutines').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadStack {
    pub tid: u32,
    pub start: u64,
    pub end: u64,
    pub sp: u64,
    pub live_end: Option<u64>,
}

/// Byte reads of a target's memory, for readers that follow pointers
/// through it (the Python frames'): false where not all of `buf` is there.
pub trait ReadMemory {
    fn read(&mut self, address: u64, buf: &mut [u8]) -> bool;
}

impl ReadMemory for &SegmentMemory {
    fn read(&mut self, address: u64, buf: &mut [u8]) -> bool {
        match self.bytes(address, buf.len()) {
            Some(b) => {
                buf.copy_from_slice(b);
                true
            }
            None => false,
        }
    }
}

impl<M: ReadMemory + ?Sized> ReadMemory for &mut M {
    fn read(&mut self, address: u64, buf: &mut [u8]) -> bool {
        (**self).read(address, buf)
    }
}
