//! The rule cache: unwind rules by address, so that the warm path does no
//! CFI parsing and no allocation. Two-way set-associative over a prime
//! number of sets (framehop's cache has 509 direct-mapped slots; with two
//! ways, two hot addresses that share a set no longer evict each other on
//! every walk). The tags (key, module set) of a set's two ways share one
//! small record, apart from the rows: a lookup reads one cache line of tags
//! and then only the row it hits.

use crate::cfi::{CfaRule, CompactRow, Row};

/// Sets in the cache (a prime, so that addresses spread evenly).
const SETS: usize = 509;

const EMPTY_KEY: u64 = u64::MAX;

/// What identifies the entries of one set.
#[derive(Clone, Copy)]
struct Tags {
    keys: [u64; 2],
    /// The module set each entry was made for (`ModuleSet::generation`).
    generations: [u64; 2],
    /// The way to replace next: the one not used most recently.
    victim: u8,
}

/// What a cached entry holds.
#[derive(Clone, Copy)]
struct Entry {
    module: u32,
    row: CompactRow,
}

/// Hit and miss counts, for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
}

pub struct RuleCache {
    tags: Box<[Tags; SETS]>,
    entries: Box<[[Entry; 2]; SETS]>,
    /// Rows with more rules than a compact row holds: a signal trampoline's
    /// (glibc's `__restore_rt` restores every register), which a walk through
    /// a signal handler meets once. Few, so a handful of slots, replaced in
    /// turn.
    wide: Box<[WideEntry; WIDE_SLOTS]>,
    next_wide: usize,
    pub stats: Stats,
}

const WIDE_SLOTS: usize = 4;

#[derive(Clone, Copy)]
struct WideEntry {
    key: u64,
    generation: u64,
    module: u32,
    row: Row,
}

impl Default for RuleCache {
    fn default() -> Self {
        Self::new()
    }
}

impl RuleCache {
    pub fn new() -> Self {
        let tags = Tags { keys: [EMPTY_KEY; 2], generations: [0; 2], victim: 0 };
        let empty = Entry {
            module: 0,
            row: CompactRow::new(CfaRule::RegOffset { reg: 0, offset: 0 }, 0, false),
        };
        let wide = WideEntry {
            key: EMPTY_KEY,
            generation: 0,
            module: 0,
            row: Row::new(CfaRule::RegOffset { reg: 0, offset: 0 }, 0, false),
        };
        RuleCache {
            tags: boxed_array(tags),
            entries: boxed_array([empty; 2]),
            wide: Box::new([wide; WIDE_SLOTS]),
            next_wide: 0,
            stats: Stats::default(),
        }
    }

    /// Forget every entry (the modules changed).
    pub fn clear(&mut self) {
        for tags in self.tags.iter_mut() {
            tags.keys = [EMPTY_KEY; 2];
        }
        for entry in self.wide.iter_mut() {
            entry.key = EMPTY_KEY;
        }
    }

    /// The module index and rules cached for `key` in the module set of
    /// `generation` (counted as a hit).
    #[inline]
    pub fn get(&mut self, key: u64, generation: u64) -> Option<(usize, &CompactRow)> {
        let set = (key % SETS as u64) as usize;
        let tags = &mut self.tags[set];
        let hit = |way: usize| tags.keys[way] == key && tags.generations[way] == generation;
        let way = if hit(0) {
            0
        } else if hit(1) {
            1
        } else {
            return None;
        };
        self.stats.hits += 1;
        tags.victim = 1 - way as u8;
        let entry = &self.entries[set][way];
        Some((entry.module as usize, &entry.row))
    }

    /// Like [`RuleCache::get`], for a row too wide for the compact cache.
    #[inline]
    pub fn get_wide(&mut self, key: u64, generation: u64) -> Option<(usize, &Row)> {
        let entry = self.wide.iter().find(|e| e.key == key && e.generation == generation)?;
        self.stats.hits += 1;
        Some((entry.module as usize, &entry.row))
    }

    /// Cache a row too wide for the compact cache, in place of the oldest.
    pub fn insert_wide(&mut self, key: u64, generation: u64, module: usize, row: Row) {
        self.wide[self.next_wide] = WideEntry { key, generation, module: module as u32, row };
        self.next_wide = (self.next_wide + 1) % WIDE_SLOTS;
    }

    /// Count a lookup that had to parse CFI (an address in no module, or
    /// one without unwind info, is no miss: there was nothing to cache).
    pub fn record_miss(&mut self) {
        self.stats.misses += 1;
    }

    /// Cache `row` for `key` in the module set of `generation`.
    pub fn insert(&mut self, key: u64, generation: u64, module: usize, row: CompactRow) {
        let set = (key % SETS as u64) as usize;
        let tags = &mut self.tags[set];
        let way = usize::from(tags.victim & 1);
        tags.keys[way] = key;
        tags.generations[way] = generation;
        tags.victim = 1 - way as u8;
        self.entries[set][way] = Entry { module: module as u32, row };
    }
}

/// `[value; SETS]` on the heap, without building it on the stack first.
fn boxed_array<T: Copy>(value: T) -> Box<[T; SETS]> {
    match vec![value; SETS].into_boxed_slice().try_into() {
        Ok(array) => array,
        Err(_) => unreachable!("a vector of SETS items"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(offset: i64) -> CompactRow {
        CompactRow::new(CfaRule::RegOffset { reg: 7, offset }, 16, false)
    }

    #[test]
    fn two_addresses_sharing_a_set_both_stay() {
        let mut cache = RuleCache::new();
        let (a, b, c) = (0x1000, 0x1000 + SETS as u64, 0x1000 + 2 * SETS as u64);
        cache.insert(a, 7, 1, row(8));
        cache.insert(b, 7, 2, row(16));
        for _ in 0..3 {
            assert_eq!(cache.get(a, 7).map(|(m, r)| (m, r.cfa)), Some((1, row(8).cfa)));
            assert_eq!(cache.get(b, 7).map(|(m, r)| (m, r.cfa)), Some((2, row(16).cfa)));
        }
        // A third evicts the least recently used (a), not the one just used.
        cache.insert(c, 7, 3, row(24));
        assert!(cache.get(a, 7).is_none());
        assert!(cache.get(b, 7).is_some());
        assert!(cache.get(c, 7).is_some());
        assert_eq!(cache.stats, Stats { hits: 8, misses: 0 }, "misses are the caller's to count");
        assert!(cache.get(b, 8).is_none(), "another module set");
        cache.clear();
        assert!(cache.get(b, 7).is_none());
    }
}
