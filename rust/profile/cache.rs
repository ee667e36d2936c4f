//! A worker's direct-mapped caches of formatted frame lines and of inline
//! chains (its symbol lookups' is `crate::symbolize::SymbolCache`).

use crate::symbolize::lines::SourceFrame;
use crate::symbolize::{cache_slot, CACHE_SLOTS};

use super::process::Process;

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

/// The functions at lookup addresses, as their modules' DWARF gives them
/// (innermost first, see `DebugInfo::frames`), direct-mapped by (file,
/// ELF address): each distinct pc is looked up once, its module's DWARF
/// parsed on first need and kept for the process (`symbolize::file_lines`).
pub(super) struct SourceCache {
    /// (file id, ELF address, frames); file ids are never 0.
    slots: Box<[(u64, u64, Vec<SourceFrame>)]>,
}

impl Default for SourceCache {
    fn default() -> Self {
        let slots = (0..CACHE_SLOTS).map(|_| (0, 0, Vec::new())).collect();
        SourceCache { slots }
    }
}

impl SourceCache {
    /// The functions at `lookup` (a frame's lookup pc) in `process`; none
    /// outside every module or without DWARF.
    pub(super) fn frames(&mut self, process: &Process, lookup: u64) -> &[SourceFrame] {
        let Some(placed) = process.symbolizer.module_at(lookup) else { return &[] };
        let (key, address) = (placed.file.id(), lookup.wrapping_sub(placed.bias));
        let slot = &mut self.slots[cache_slot(key, address)];
        if slot.0 != key || slot.1 != address {
            slot.2 = placed.file.lines().map(|l| l.frames(address)).unwrap_or_default();
            (slot.0, slot.1) = (key, address);
        }
        &slot.2
    }
}
