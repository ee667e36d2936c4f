//! A stack-trace database, after Windows' user-mode stack trace database:
//! each trace (a sequence of pcs) is hashed and looked up in a table; a new
//! trace is stored once and given the next index, a known one has its count
//! raised. Indexes are stable; memory is the pcs of the distinct traces plus
//! about 40 bytes each, whatever the number of traces added.

/// Where one distinct trace lives in the shared pc array.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: usize,
    len: u32,
    hash: u64,
    count: u64,
}

const EMPTY: u32 = u32::MAX;

#[derive(Debug)]
pub struct StackDb {
    /// Every distinct trace's pcs, one after the other.
    pcs: Vec<u64>,
    entries: Vec<Entry>,
    /// Open addressing over entry indexes; a power of two, at most half full.
    slots: Vec<u32>,
    total: u64,
}

impl Default for StackDb {
    fn default() -> Self {
        Self::new()
    }
}

fn hash(trace: &[u64]) -> u64 {
    // A multiply-rotate mix per word (as in FxHash), finished with a
    // SplitMix64 avalanche so that the low bits index the table well.
    let mut h = (trace.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &pc in trace {
        h = (h.rotate_left(5) ^ pc).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl StackDb {
    pub fn new() -> Self {
        StackDb { pcs: Vec::new(), entries: Vec::new(), slots: vec![EMPTY; 64], total: 0 }
    }

    /// Add `count` occurrences of `trace`; its stable index.
    pub fn add_n(&mut self, trace: &[u64], count: u64) -> u32 {
        self.total += count;
        let h = hash(trace);
        let mask = self.slots.len() - 1;
        let mut slot = h as usize & mask;
        loop {
            let index = self.slots[slot];
            if index == EMPTY {
                break;
            }
            let e = &mut self.entries[index as usize];
            if e.hash == h && self.pcs[e.start..e.start + e.len as usize] == *trace {
                e.count += count;
                return index;
            }
            slot = (slot + 1) & mask;
        }
        let index = self.entries.len() as u32;
        self.entries.push(Entry { start: self.pcs.len(), len: trace.len() as u32, hash: h, count });
        self.pcs.extend_from_slice(trace);
        self.slots[slot] = index;
        if self.entries.len() * 2 > self.slots.len() {
            self.grow();
        }
        index
    }

    pub fn add(&mut self, trace: &[u64]) -> u32 {
        self.add_n(trace, 1)
    }

    fn grow(&mut self) {
        let size = self.slots.len() * 2;
        let mask = size - 1;
        let mut slots = vec![EMPTY; size];
        for (i, e) in self.entries.iter().enumerate() {
            let mut slot = e.hash as usize & mask;
            while slots[slot] != EMPTY {
                slot = (slot + 1) & mask;
            }
            slots[slot] = i as u32;
        }
        self.slots = slots;
    }

    /// Number of distinct traces.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of traces added, duplicates included.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn count(&self, index: u32) -> Option<u64> {
        self.entries.get(index as usize).map(|e| e.count)
    }

    pub fn trace(&self, index: u32) -> Option<&[u64]> {
        let e = self.entries.get(index as usize)?;
        Some(&self.pcs[e.start..e.start + e.len as usize])
    }

    /// (index, trace, count) in index order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u64], u64)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i as u32, &self.pcs[e.start..e.start + e.len as usize], e.count))
    }

    /// The indexes of the `n` most frequent traces, most frequent first
    /// (ties in index order).
    pub fn top(&self, n: usize) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.entries.len() as u32).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(self.entries[i as usize].count), i));
        order.truncate(n);
        order
    }

    /// Bytes held, for the memory budget (pcs, entries, table).
    pub fn memory_bytes(&self) -> usize {
        self.pcs.capacity() * 8
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.slots.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_stored_once_with_counts_and_stable_indexes() {
        let mut db = StackDb::new();
        let a = [0x1000, 0x2000, 0x3000];
        let b = [0x1000, 0x2000];
        assert_eq!(db.add(&a), 0);
        assert_eq!(db.add(&b), 1);
        assert_eq!(db.add(&a), 0);
        assert_eq!(db.add(&[]), 2, "the empty trace is a trace");
        assert_eq!(db.add_n(&b, 5), 1);
        assert_eq!((db.len(), db.total()), (3, 9));
        assert_eq!(db.count(0), Some(2));
        assert_eq!(db.count(1), Some(6));
        assert_eq!(db.trace(1), Some(&b[..]));
        assert_eq!(db.count(3), None);
        assert_eq!(db.top(2), [1, 0]);
        let all: Vec<_> = db.iter().map(|(i, t, c)| (i, t.len(), c)).collect();
        assert_eq!(all, [(0, 3, 2), (1, 2, 6), (2, 0, 1)]);
    }

    #[test]
    fn many_traces_through_growth() {
        let mut db = StackDb::new();
        let trace = |i: u64| [i, i * 3, 0x7f00_0000 + i % 7];
        for round in 0..3 {
            for i in 0..10_000u64 {
                assert_eq!(db.add(&trace(i)), i as u32, "round {round}");
            }
        }
        assert_eq!(db.len(), 10_000);
        assert!((0..10_000).all(|i| db.count(i) == Some(3)));
        assert_eq!(db.trace(4321), Some(&trace(4321)[..]));
        // The budget: the pcs themselves plus well under 100 bytes a trace.
        assert!(db.memory_bytes() < 10_000 * (3 * 8 + 100));
    }
}
