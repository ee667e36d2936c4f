//! The `jitdump` target: an input is a jitdump file (`jit-PID.dump`), read
//! as `stackwalk perf` reads one: its code loads and moves, their names as a
//! perf map, and their unwind tables placed at their code, asked for the
//! rules at each load's start, middle and end, for x86_64 and aarch64.
//! Nothing may panic, hang or allocate without bound, whatever the header's
//! and the records' sizes say.

use std::sync::Arc;

use _core::arch::Arch;
use _core::source::memory::Data;
use _core::space::jitdump::JitDump;
use _core::unwind::cfi::ForeignCfi;
use _core::unwind::jit::JitCfi;

pub fn run(data: &[u8]) {
    let Ok(dump) = JitDump::parse(Arc::new(Data::Owned(data.to_vec()))) else { return };
    let map = dump.perf_map();
    let mut pcs = Vec::new();
    for load in dump.loads.iter().take(256) {
        let end = load.start.saturating_add(load.size);
        pcs.extend([load.start, load.start + load.size / 2, end.wrapping_sub(1), end]);
    }
    for &pc in &pcs {
        let _ = map.lookup(pc);
    }
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let Some(cfi) = JitCfi::new(&dump, arch) else { continue };
        let _ = cfi.functions();
        for &pc in &pcs {
            let _ = cfi.row(arch, pc, pc & 1 == 0);
            let _ = cfi.function_start(pc);
        }
    }
}
