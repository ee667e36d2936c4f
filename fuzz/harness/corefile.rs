//! Arbitrary bytes as an ELF core file (seeded with a real `gcore` core
//! made by `fuzz/seed.py`, its segments cut short): the headers, every note,
//! the memory, and the link-map walk and string reads from every address the
//! notes give. Errors are fine; panics, hangs and unbounded allocation are
//! not.

use _core::source::corefile::CoreFile;
use _core::source::memory::Data;

pub fn run(data: &[u8]) {
    let Ok(core) = CoreFile::from_data(Data::Owned(data.to_vec())) else { return };
    let notes = &core.notes;
    let mut addresses: Vec<u64> = notes.auxv.values().copied().collect();
    addresses.extend(core.segments.iter().map(|s| s.vaddr));
    addresses.extend(notes.files.iter().flatten().map(|f| f.start));
    for t in &notes.threads {
        addresses.extend(t.named_registers(core.arch).map(|(_, value)| value));
    }
    // Bounded: a walk costs at most a few thousand reads.
    for &address in addresses.iter().take(64) {
        let _ = core.string(address, 4096);
        let (entries, _) = core.link_map(address);
        assert!(entries.len() <= 2 * _core::source::corefile::MAX_ENTRIES);
    }
    let _ = core.segments.iter().map(|s| s.end()).max();
}
