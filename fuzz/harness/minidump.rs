//! Arbitrary bytes as a minidump (seeded with a real one `minidump-writer`
//! wrote, made by `fuzz/seed.py`): the header and directory, every stream
//! stackwalk reads, the memory, and string and link-map reads from every
//! address the streams give. Errors are fine; panics, hangs and unbounded
//! allocation are not.

use _core::source::memory::Data;
use _core::source::minidump::MinidumpFile;

pub fn run(data: &[u8]) {
    let Ok(dump) = MinidumpFile::from_data(Data::Owned(data.to_vec())) else { return };
    let mut addresses: Vec<u64> = dump.auxv.values().copied().collect();
    addresses.extend(dump.modules.iter().map(|m| m.base));
    addresses.extend(dump.maps.iter().flatten().map(|m| m.start));
    addresses.extend(dump.exception.as_ref().map(|e| e.address));
    for thread in &dump.threads {
        addresses.extend(thread.registers.iter().map(|&(_, value)| value));
    }
    // Bounded: a walk costs at most a few thousand reads.
    for &address in addresses.iter().take(64) {
        let _ = dump.string(address, 4096);
        let (entries, _) = dump.link_map(address);
        assert!(entries.len() <= 2 * _core::source::corefile::MAX_ENTRIES);
    }
}
