//! What a record holds: an [`Event`] per record of the data section, its
//! parts borrowed from the record's bytes; and a sample's registers as the
//! unwinder takes them.

use std::fmt;

use crate::arch::registers::Registers;
use crate::arch::{Arch, PerfReg};

use super::abi::{PERF_RECORD_MISC_CPUMODE_MASK, PERF_RECORD_MISC_MMAP_DATA};
use super::bytes::read_u64;

/// A `PERF_RECORD_SAMPLE`. Fields the attribute did not ask for are 0 /
/// `None` / empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// Index in [`PerfHeader::attrs`](super::PerfHeader::attrs) of the event
    /// this sample belongs to.
    pub attr_index: usize,
    /// The header's misc bits; `misc & PERF_RECORD_MISC_CPUMODE_MASK` is
    /// where the cpu was (`PERF_RECORD_MISC_KERNEL`, `_USER`, ...).
    pub misc: u16,
    /// `PERF_SAMPLE_IDENTIFIER` or `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    pub ip: u64,
    pub pid: i32,
    pub tid: i32,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    /// The raw callchain, with its `PERF_CONTEXT_*` markers.
    pub callchain: Option<Words<'a>>,
    /// `PERF_SAMPLE_REGS_ABI_*`: 0 (none: no registers), 1 (32-bit), 2 (64-bit).
    pub regs_abi: u64,
    /// Which perf registers `regs` holds (0 when there are none).
    pub regs_mask: u64,
    /// `popcount(regs_mask)` little-endian u64s, in ascending bit order.
    pub regs: &'a [u8],
    /// The copy of the user stack from the sampled stack pointer up,
    /// trimmed to the bytes the kernel actually copied (`dyn_size`).
    pub stack: &'a [u8],
}

impl Sample<'_> {
    /// The user register with perf index `perf_index`, if sampled.
    pub fn user_reg(&self, perf_index: u32) -> Option<u64> {
        if perf_index >= 64 || self.regs_mask & (1 << perf_index) == 0 {
            return None;
        }
        let slot = (self.regs_mask & ((1u64 << perf_index) - 1)).count_ones() as usize;
        read_u64(self.regs, slot * 8)
    }

    /// Whether the sample has the user registers (and so the stack copy) to
    /// unwind: not a kernel thread's, nor a recording's without
    /// `--call-graph dwarf`.
    pub fn has_user_registers(&self) -> bool {
        self.regs_abi != super::abi::PERF_SAMPLE_REGS_ABI_NONE
    }

    pub fn cpumode(&self) -> u16 {
        self.misc & PERF_RECORD_MISC_CPUMODE_MASK
    }
}

/// Little-endian u64s read in place from a record (which need not be
/// 8-byte aligned in memory): no copy, no allocation.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Words<'a>(pub(super) &'a [u8]);

impl<'a> Words<'a> {
    pub fn is_empty(&self) -> bool {
        self.0.len() < 8
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = u64> + ExactSizeIterator + Clone + 'a {
        self.0.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
    }

    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }
}

impl fmt::Debug for Words<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A `PERF_RECORD_MMAP` or `PERF_RECORD_MMAP2`: a file (or anonymous memory,
/// `[vdso]`, ...) mapped at `start..start + len` from file offset `pgoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapEvent<'a> {
    pub misc: u16,
    /// -1 for the kernel's own mappings.
    pub pid: i32,
    pub tid: i32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    /// Up to the first NUL.
    pub filename: &'a [u8],
    /// MMAP2 only.
    pub prot: Option<u32>,
    /// MMAP2 only (`MAP_*`).
    pub flags: Option<u32>,
    /// MMAP2 with `PERF_RECORD_MISC_MMAP_BUILD_ID`.
    pub build_id: Option<&'a [u8]>,
    /// MMAP2 without a build id.
    pub inode: Option<Inode>,
    /// From the `sample_id_all` trailer.
    pub time: Option<u64>,
}

impl MmapEvent<'_> {
    /// Whether the mapping holds code: MMAP2 says so by its protection,
    /// MMAP records are executable unless flagged as data.
    pub fn executable(&self) -> bool {
        match self.prot {
            Some(prot) => prot & 4 != 0, // PROT_EXEC
            None => self.misc & PERF_RECORD_MISC_MMAP_DATA == 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inode {
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub generation: u64,
}

/// One record of the data section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    Sample(Sample<'a>),
    Mmap(MmapEvent<'a>),
    /// A task's name; `exec` when it changed because of an exec.
    Comm {
        pid: i32,
        tid: i32,
        comm: &'a [u8],
        exec: bool,
        time: Option<u64>,
    },
    /// A new task. `time` is the `sample_id_all` trailer's when there is
    /// one (perf orders and prints by it), else the record's own.
    Fork {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
        time: u64,
    },
    /// A task ended; `time` as for `Fork`.
    Exit {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
        time: u64,
    },
    /// perf wrote everything up to here before anything after: no record
    /// after it is older than one before the previous round.
    FinishedRound,
    /// Any other record, including samples whose id no attribute declares
    /// (perf skips those too) and pipe mode's header records (their
    /// contents go into [`PerfHeader`](super::PerfHeader)).
    Other {
        type_: u32,
    },
}

impl Event<'_> {
    pub fn time(&self) -> Option<u64> {
        match self {
            Event::Sample(s) => s.time,
            Event::Mmap(m) => m.time,
            Event::Comm { time, .. } => *time,
            Event::Fork { time, .. } | Event::Exit { time, .. } => Some(*time),
            Event::FinishedRound | Event::Other { .. } => None,
        }
    }
}

/// A sample's user registers as the unwinder takes them: the program
/// counter, and the other registers by DWARF column. Registers perf sampled
/// that have no column (flags, segments) are left out. No registers (a
/// kernel thread's sample, `regs_abi` 0) gives `(None, empty)`.
pub fn sample_registers(arch: Arch, sample: &Sample<'_>) -> (Option<u64>, Registers) {
    let mut regs = Registers::new();
    let mut pc = None;
    let mut mask = sample.regs_mask;
    let mut slot = 0;
    while mask != 0 {
        let index = mask.trailing_zeros();
        mask &= mask - 1;
        let Some(value) = read_u64(sample.regs, slot * 8) else { break };
        slot += 1;
        match arch.perf_reg(index) {
            PerfReg::Column(col) => regs.set(col, value),
            PerfReg::Pc => pc = Some(value),
            PerfReg::Ignored => {}
        }
    }
    (pc, regs)
}

/// The fields a sample starts with: what orders it and tells whose it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleIds {
    /// `PERF_SAMPLE_IDENTIFIER` (`PERF_SAMPLE_ID` comes later).
    pub id: Option<u64>,
    pub ip: u64,
    pub pid: i32,
    pub tid: i32,
    pub time: Option<u64>,
}
