//! Arbitrary bytes as a perf.data file (seeded with real recordings made
//! with `perf record --call-graph dwarf`, see `fuzz/seed.py`): the header,
//! attributes and feature sections, then every record to the end, with each
//! sample's registers decoded. Errors are fine; panics, hangs and unbounded
//! allocation are not.

use _core::arch::Arch;
use _core::source::perf::{sample_registers, Event, PerfFile};

pub fn run(data: &[u8]) {
    let Ok(mut file) = PerfFile::new(std::io::Cursor::new(data)) else { return };
    let arch = file.header().arch().unwrap_or(Arch::X86_64);
    let mut last_offset = 0;
    loop {
        let offset = file.next_offset();
        match file.next_event() {
            Ok(Some(Event::Sample(sample))) => {
                let _ = sample_registers(arch, &sample);
                let _ = sample.user_reg(7);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
        // Every record moves the reader forward: no loop over one record.
        assert!(offset >= last_offset, "went back from {last_offset:#x} to {offset:#x}");
        last_offset = offset;
    }
    assert!(matches!(file.next_event(), Ok(None)), "events after the end or an error");
}
