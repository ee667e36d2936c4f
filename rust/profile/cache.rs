//! A worker's direct-mapped caches: symbol lookups and formatted frame lines.

use crate::symbols::SymbolTable;

use super::process::{FileInfo, Process};

/// Text lines of user frames a worker formatted, direct-mapped by
/// (process snapshot, pc): a line depends on nothing else, and samples
/// repeat the same return addresses. The strings are reused, so a warm
/// cache allocates nothing.
pub(super) struct LineCache {
    /// (process snapshot id, pc with bit 63 set when interrupted, line).
    pub(super) slots: Box<[(u64, u64, String)]>,
}

impl Default for LineCache {
    fn default() -> Self {
        let slots = (0..CACHE_SLOTS).map(|_| (0, 0, String::new())).collect();
        LineCache { slots }
    }
}

impl LineCache {
    /// The line of the frame at `pc` of `process`, looked up at `lookup`
    /// (`pc` or `pc - 1`), made by `fill` if not cached.
    pub(super) fn line(
        &mut self,
        process: &Process,
        pc: u64,
        lookup: u64,
        fill: impl FnOnce(&mut String),
    ) -> &str {
        let (key, word) = (process.id, pc | u64::from(lookup == pc) << 63);
        let slot = &mut self.slots[cache_slot(key, word)];
        // An empty line is a slot never filled (process snapshot 0 exists).
        if slot.0 != key || slot.1 != word || slot.2.is_empty() {
            slot.2.clear();
            fill(&mut slot.2);
            (slot.0, slot.1) = (key, word);
        }
        &slot.2
    }
}

/// Symbol lookups a worker made, direct-mapped by (file, ELF address):
/// samples hit the same few hundred return addresses over and over.
pub(super) struct SymbolCache {
    /// (file id, ELF address, symbol index or `NO_SYMBOL`); file ids start at 1.
    pub(super) slots: Box<[(u64, u64, u32)]>,
}

pub(super) const NO_SYMBOL: u32 = u32::MAX;

/// Slots of a worker's direct-mapped caches.
pub(super) const CACHE_SLOTS: usize = 1 << 12;

/// The slot of `(id, value)` in a cache of `CACHE_SLOTS`: the top bits of a
/// multiplicative hash.
pub(super) fn cache_slot(id: u64, value: u64) -> usize {
    ((value ^ id.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        >> (64 - CACHE_SLOTS.trailing_zeros())) as usize
}

impl Default for SymbolCache {
    fn default() -> Self {
        SymbolCache { slots: vec![(0, 0, NO_SYMBOL); CACHE_SLOTS].into_boxed_slice() }
    }
}

impl SymbolCache {
    pub(super) fn index(
        &mut self,
        file: &FileInfo,
        table: &SymbolTable,
        address: u64,
    ) -> Option<usize> {
        let key = file.id;
        let slot = &mut self.slots[cache_slot(key, address)];
        if slot.0 != key || slot.1 != address {
            let index = table.index(address).map_or(NO_SYMBOL, |i| i as u32);
            *slot = (key, address, index);
        }
        (slot.2 != NO_SYMBOL).then_some(slot.2 as usize)
    }
}
