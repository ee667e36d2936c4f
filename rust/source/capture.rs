//! A capture (`stackwalk capture`: what gdb recorded of a thread stopped at
//! a breakpoint on this machine, `python/stackwalk/capture.py`): the
//! thread's registers, its stack from the stack pointer up, the mappings of
//! its modules' files (or, where gdb could not read them, each module's load
//! bias alone) and the vdso's image. One thread, no signal, no process
//! facts; its files are this machine's, read at the stop.

use std::path::PathBuf;
use std::sync::Arc;

use object::elf::PF_X;

use crate::arch::Arch;
use crate::source::memory::{Data, Segment, SegmentMemory};

/// `AT_SYSINFO_EHDR`: where the vdso's image starts.
const AT_SYSINFO_EHDR: u64 = 33;

/// A mapping of a module's file in the stopped process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Where in the file it starts.
    pub offset: u64,
    pub path: PathBuf,
    /// Whether it was mapped executable.
    pub executable: bool,
}

/// A capture, read.
pub struct Capture {
    pub arch: Arch,
    pub tid: u32,
    /// The stopped thread's registers, by the unwinders' names.
    pub registers: Vec<(String, u64)>,
    /// The stack captured and the vdso's image.
    pub memory: Arc<SegmentMemory>,
    /// The modules' files' mappings, where recorded.
    pub mappings: Vec<Mapping>,
    /// The modules known by path and load bias alone.
    pub at_bias: Vec<(PathBuf, u64)>,
    /// Where the vdso's image starts, if the process has one.
    pub vdso: Option<u64>,
}

impl Capture {
    /// A capture of `arch`'s thread `tid`: `regions` the memory captured
    /// (the stack: (address, bytes)), `vdso` the vdso's address and image.
    pub fn new(
        arch: Arch,
        tid: u32,
        registers: Vec<(String, u64)>,
        regions: Vec<(u64, Vec<u8>)>,
        mappings: Vec<Mapping>,
        at_bias: Vec<(PathBuf, u64)>,
        vdso: Option<(u64, Vec<u8>)>,
    ) -> Capture {
        let vdso_at = vdso.as_ref().map(|(address, _)| *address);
        let mut data = Vec::new();
        let mut segments = Vec::new();
        for (address, bytes) in regions.into_iter().chain(vdso) {
            let (offset, size) = (data.len() as u64, bytes.len() as u64);
            segments.push(Segment { address, offset, size });
            data.extend_from_slice(&bytes);
        }
        segments.sort_by_key(|s| s.address);
        let memory = Arc::new(SegmentMemory::new(Data::Owned(data), &segments));
        Capture { arch, tid, registers, memory, mappings, at_bias, vdso: vdso_at }
    }

    /// The value of the register named `name`.
    pub fn register(&self, name: &str) -> Option<u64> {
        self.registers.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }

    /// The memory a core of the process would say it held, as (start, end,
    /// `p_flags`): each mapping of a module's file (executable or not) and
    /// the vdso.
    pub fn segments(&self) -> Vec<(u64, u64, u32)> {
        let mapped =
            self.mappings.iter().map(|m| (m.start, m.end, if m.executable { PF_X } else { 0 }));
        let vdso = self.vdso.and_then(|at| {
            let (start, image) = self.memory.segment_of(at)?;
            Some((start, start.saturating_add(image.len() as u64), PF_X))
        });
        mapped.chain(vdso).collect()
    }

    /// The auxiliary vector a core would hold: the vdso's address alone.
    pub fn auxv(&self) -> std::collections::BTreeMap<u64, u64> {
        self.vdso.map(|at| (AT_SYSINFO_EHDR, at)).into_iter().collect()
    }
}
