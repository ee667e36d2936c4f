//! Arbitrary bytes as an ELF core file (seeded with a real `gcore` core
//! made by `fuzz/seed.py`, its segments cut short): the headers, every note,
//! the memory, and the link-map walk and string reads from every address the
//! notes give; the minidump written of it (read back), and the same bytes
//! read as the kernel pipes a core (`stream`) into a small core, read too.
//! Errors are fine; panics, hangs and unbounded allocation are not.

use _core::source::corefile::dump::{plan, DumpOptions};
use _core::source::corefile::stream::{stream, StreamLimits};
use _core::source::corefile::CoreFile;
use _core::source::memory::Data;
use _core::source::minidump::write::write;
use _core::source::minidump::MinidumpFile;

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
    let options = DumpOptions { stack_bytes: 4096, around: 64, ..DumpOptions::default() };
    let plan = plan(&core, Vec::new(), &options, &|_, _| None, &[]);
    let mut dump = Vec::new();
    if write(&plan, &mut dump).is_ok() {
        let _ = MinidumpFile::from_data(Data::Owned(dump));
    }
    let limits = StreamLimits { max_bytes: 1 << 24, deadline: None, dump: options };
    if let Ok(streamed) = stream(&mut &data[..], &limits) {
        let _ = CoreFile::from_data(Data::Owned(streamed.core));
    }
}
