//! Arbitrary bytes as an ELF file with DWARF (seeded by `fuzz/seed.py` with
//! small programs built with `-g`: their debug sections plain, compressed
//! with zlib, and compressed with `.debug_info` claiming more than its stream
//! holds, which sends it through the partial reader of `rust/symbolize/lines/partial.rs`
//! a unit at a time): the file's DWARF read as `stackwalk core` reads it, and
//! the lines and inline chains looked up at its symbols' addresses and a
//! spread of others, first prepared together (as a core's frames are), then
//! one by one. Errors and empty answers are fine; panics, hangs and unbounded
//! allocation are not.

use std::sync::Arc;

use _core::source::memory::Data;
use _core::symbolize::lines::DebugInfo;
use _core::symbolize::symbols::SymbolTable;

/// The most addresses looked up per input.
pub const MAX_LOOKUPS: usize = 96;

/// How many lookups found at least one function (for the harness's own test).
pub fn run(data: &[u8]) -> usize {
    let mut addresses: Vec<u64> = Vec::new();
    if let Ok(symbols) = SymbolTable::from_elf(data) {
        for i in 0..symbols.len().min(MAX_LOOKUPS / 3) {
            if let Some((_, start)) = symbols.demangled(i) {
                // The start, inside, and just before (a return address's lookup).
                addresses.extend([start, start.wrapping_add(5), start.wrapping_sub(1)]);
            }
        }
    }
    // Words of the input itself: addresses the mutated DWARF may name.
    addresses.extend(
        data.chunks_exact(8)
            .step_by(97)
            .take(MAX_LOOKUPS / 4)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default())),
    );
    addresses.truncate(MAX_LOOKUPS);
    let Some(info) = DebugInfo::from_elf(Arc::new(Data::Owned(data.to_vec()))) else { return 0 };
    // The first half prepared together, the rest found one by one.
    info.prepare(addresses[..addresses.len() / 2].iter().copied());
    let mut found = 0;
    for &address in &addresses {
        let frames = info.frames(address);
        assert!(frames.len() < 4096, "an inline chain of {} frames", frames.len());
        found += usize::from(!frames.is_empty());
    }
    found
}
