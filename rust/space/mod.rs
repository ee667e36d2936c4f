//! Placing files in an address space: from the mappings of a file (start,
//! end, file offset) to where its ELF addresses are at run time.
//!
//! One rule for every source (core files, perf recordings, captures): a
//! mapping's bias (runtime − ELF address) comes from the PT_LOAD segment
//! that holds the mapping's file offset, so a file mapped in pieces, or
//! mapped a second time somewhere else, is placed by each piece on its own.
//! A module's ranges are the union of its own mappings, never the span from
//! its lowest to its highest address: memory between two mappings of a
//! file (a JIT's code page, another library) is not the file's.

pub mod codemap;
pub mod debugfile;
pub mod debuginfod;
pub mod elf;
pub mod finder;
pub mod gopclntab;
pub mod jitdump;
pub mod macho;
pub mod minidebuginfo;
pub mod pe;
pub mod perfmap;
pub mod plt;
pub mod sections;
pub mod snapshot;
pub mod symserver;
pub mod symtab;

use std::ops::Range;

pub use object::elf::PF_X;

/// A PT_LOAD segment of an ELF file: what placing a mapping of it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub flags: u32,
}

impl Segment {
    /// From a PT_LOAD as `crate::space::elf::ElfSummary` lists it: (p_vaddr,
    /// p_memsz, p_offset, p_filesz, p_flags).
    pub fn from_load(&(vaddr, _, offset, filesz, flags): &(u64, u64, u64, u64, u32)) -> Segment {
        Segment { vaddr, offset, filesz, flags }
    }
}

/// A mapping of a file: runtime addresses `start..end` showing the file
/// from byte `offset` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
}

/// The bias (runtime − ELF address, modulo 2^64) of a mapping of a file
/// with `segments` at `start` from file `offset`: from the segment the
/// offset is in. A segment's mapping starts at the page its offset is in
/// (`page`, a power of two), which may hold the end of the segment before
/// it too (segments packed in the file, as lld and rustc's cdylibs lay them
/// out): the executable segment wins, since it is the one code runs from.
/// An offset in no segment (not an ELF file, or a mapping of its sections)
/// gives `start − offset`.
pub fn bias(segments: &[Segment], start: u64, offset: u64, page: u64) -> u64 {
    let mask = !(page.max(1) - 1);
    let holds =
        |s: &&Segment| s.offset & mask <= offset && offset < s.offset.saturating_add(s.filesz);
    let segment = segments.iter().filter(holds).min_by_key(|s| s.flags & PF_X == 0);
    let file_start = start.wrapping_sub(offset);
    match segment {
        Some(s) => file_start.wrapping_sub(s.vaddr.wrapping_sub(s.offset)),
        None => file_start,
    }
}

/// One placement of a file: its bias and the runtime ranges of the mappings
/// that agree with it, sorted, adjacent ones merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub bias: u64,
    pub ranges: Vec<Range<u64>>,
}

impl Placement {
    pub fn start(&self) -> u64 {
        self.ranges.first().map_or(0, |r| r.start)
    }

    pub fn end(&self) -> u64 {
        self.ranges.last().map_or(0, |r| r.end)
    }

    pub fn contains(&self, address: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.start <= address);
        i.checked_sub(1).is_some_and(|i| address < self.ranges[i].end)
    }
}

/// Where the `mappings` of one file place it. Mappings that give the same
/// bias are one placement of the file; a placement is kept when one of its
/// mappings holds code (`is_code`), so that a second, read-only mapping of
/// a library (a crash reporter or symbolizer reading the file through
/// `mmap`) neither moves the library nor becomes a module. When no mapping
/// holds code (a data file, or a source that cannot tell), the placement
/// with the most mappings is kept (the lowest, between equals). Placements
/// are sorted by address; empty and inverted mappings are ignored.
pub fn place(
    segments: &[Segment],
    mappings: &[Mapping],
    page: u64,
    is_code: impl Fn(&Range<u64>) -> bool,
) -> Vec<Placement> {
    // (bias, mappings' ranges, whether one holds code)
    let mut groups: Vec<(u64, Vec<Range<u64>>, bool)> = Vec::new();
    for m in mappings.iter().filter(|m| m.start < m.end) {
        let b = bias(segments, m.start, m.offset, page);
        let range = m.start..m.end;
        let code = is_code(&range);
        match groups.iter_mut().find(|g| g.0 == b) {
            Some(g) => {
                g.1.push(range);
                g.2 |= code;
            }
            None => groups.push((b, vec![range], code)),
        }
    }
    if !groups.iter().any(|g| g.2) {
        let best = groups
            .iter()
            .enumerate()
            .max_by_key(|(_, g)| (g.1.len(), std::cmp::Reverse(g.1.iter().map(|r| r.start).min())))
            .map(|(i, _)| i);
        groups = best.map(|i| groups.swap_remove(i)).into_iter().collect();
    } else {
        groups.retain(|g| g.2);
    }
    let mut out: Vec<Placement> = groups
        .into_iter()
        .map(|(bias, ranges, _)| Placement { bias, ranges: merged(ranges) })
        .collect();
    out.sort_by_key(Placement::start);
    out
}

/// `ranges` sorted, with overlapping and adjacent ones joined.
pub fn merged(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 0x1000;

    /// A typical shared library (ld's -z separate-code): headers, code,
    /// read-only data, data.
    fn libc() -> Vec<Segment> {
        vec![
            Segment { vaddr: 0, offset: 0, filesz: 0x26000, flags: 4 },
            Segment { vaddr: 0x26000, offset: 0x26000, filesz: 0x155000, flags: 5 },
            Segment { vaddr: 0x17b000, offset: 0x17b000, filesz: 0x55000, flags: 4 },
            Segment { vaddr: 0x1d1ef0, offset: 0x1d0ef0, filesz: 0x6710, flags: 6 },
        ]
    }

    fn maps(base: u64) -> Vec<Mapping> {
        vec![
            Mapping { start: base, end: base + 0x26000, offset: 0 },
            Mapping { start: base + 0x26000, end: base + 0x17b000, offset: 0x26000 },
            Mapping { start: base + 0x17b000, end: base + 0x1d1000, offset: 0x17b000 },
            Mapping { start: base + 0x1d1000, end: base + 0x1d5000, offset: 0x1d0000 },
            Mapping { start: base + 0x1d5000, end: base + 0x1d7000, offset: 0x1d4000 },
        ]
    }

    #[test]
    fn every_mapping_of_a_library_gives_its_bias() {
        let base = 0x7f00_0000_0000;
        for m in maps(base) {
            assert_eq!(bias(&libc(), m.start, m.offset, PAGE), base, "{m:?}");
        }
    }

    #[test]
    fn a_second_read_only_mapping_does_not_move_the_library() {
        let base = 0x7f00_0000_0000;
        let dup = Mapping { start: 0x7e00_0000_0000, end: 0x7e00_0020_0000, offset: 0 };
        let mut all = vec![dup];
        all.extend(maps(base));
        let code = |r: &Range<u64>| r.start == base + 0x26000;
        let placed = place(&libc(), &all, PAGE, code);
        assert_eq!(placed.len(), 1);
        assert_eq!(placed[0].bias, base);
        assert_eq!(placed[0].ranges, vec![base..base + 0x1d7000]);
        assert!(!placed[0].contains(dup.start));
    }

    #[test]
    fn ranges_are_the_mappings_not_their_span() {
        let base = 0x40_0000;
        let mut all = maps(base);
        all.remove(2); // a page between the code and the data is another's
        let placed = place(&libc(), &all, PAGE, |_| true);
        assert_eq!(placed.len(), 1);
        assert_eq!(placed[0].ranges, vec![base..base + 0x17b000, base + 0x1d1000..base + 0x1d7000]);
        assert!(!placed[0].contains(base + 0x17b000));
        assert!(placed[0].contains(base + 0x1d1000));
        assert_eq!((placed[0].start(), placed[0].end()), (base, base + 0x1d7000));
    }

    #[test]
    fn two_executable_placements_are_two_modules() {
        let (a, b) = (0x7f00_0000_0000, 0x7f10_0000_0000);
        let all: Vec<Mapping> = maps(a).into_iter().chain(maps(b)).collect();
        let code = |r: &Range<u64>| r.start == a + 0x26000 || r.start == b + 0x26000;
        let placed = place(&libc(), &all, PAGE, code);
        assert_eq!(placed.iter().map(|p| p.bias).collect::<Vec<_>>(), vec![a, b]);
    }

    #[test]
    fn without_code_the_placement_of_most_mappings_wins() {
        let base = 0x7f00_0000_0000;
        let dup = Mapping { start: 0x1000, end: 0x3000, offset: 0 };
        let mut all = maps(base);
        all.push(dup);
        let placed = place(&libc(), &all, PAGE, |_| false);
        assert_eq!(placed.len(), 1);
        assert_eq!(placed[0].bias, base);
    }

    #[test]
    fn packed_segments_take_the_code_segment() {
        // lld: code starts mid-page, in the page that ends the read-only data.
        let segs = [
            Segment { vaddr: 0, offset: 0, filesz: 0x1234, flags: 4 },
            Segment { vaddr: 0x2234, offset: 0x1234, filesz: 0x500, flags: 5 },
        ];
        let base = 0x5555_0000_0000;
        assert_eq!(bias(&segs, base + 0x2000, 0x1000, PAGE), base);
        assert_eq!(bias(&segs, base, 0, PAGE), base);
    }

    #[test]
    fn not_elf_and_bad_input() {
        assert_eq!(bias(&[], 0x5000, 0x2000, PAGE), 0x3000);
        assert_eq!(bias(&[], 0, 0x2000, 0), 0u64.wrapping_sub(0x2000));
        let bad =
            [Mapping { start: 5, end: 5, offset: 0 }, Mapping { start: 9, end: 2, offset: 0 }];
        assert!(place(&libc(), &bad, PAGE, |_| true).is_empty());
        let seg = [Segment { vaddr: u64::MAX, offset: u64::MAX, filesz: u64::MAX, flags: 5 }];
        let _ = bias(&seg, u64::MAX, u64::MAX, PAGE);
    }
}
