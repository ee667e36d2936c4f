//! JIT code's own unwind tables, from a jitdump's `JIT_CODE_UNWINDING_INFO`
//! records (see [`crate::space::jitdump`]): each code load with them is
//! unwound by its `.eh_frame`, as `perf inject --jit` makes an ELF file of
//! each load with them for perf. CPython 3.13+'s `-X perf_jit` trampolines
//! (one per Python function: `sub rsp, 8; call; add rsp, 8; ret`) come with
//! theirs, and frames below them are found by them exactly.

use std::ops::Range;
use std::sync::Arc;

use gimli::{BaseAddresses, EhFrame, LittleEndian, UnwindContext, UnwindSection};

use crate::arch::Arch;
use crate::space::jitdump::JitDump;
use crate::space::sections::{CodeSegment, ModuleSections, SectionInfo};
use crate::unwind::cfi::{ForeignCfi, LookupError, Row, UnwindInfo};

/// A jitdump's code loads with unwind tables, as rules: sorted by start,
/// later loads winning where they overlap.
pub struct JitCfi {
    /// (start, end, the load's place in the dump, its tables placed at its
    /// code), sorted by start.
    loads: Vec<(u64, u64, usize, Arc<UnwindInfo>)>,
    /// Every load's range, with tables or not (the functions the JIT made),
    /// sorted by start.
    functions: Vec<Range<u64>>,
}

/// How many loads starting at or below an address are looked at for the
/// latest that holds it (overlaps are rare: code freed and made again).
const OVERLAPS: usize = 8;

impl JitCfi {
    /// The tables of `dump`'s loads for `arch` (None where no load has any).
    pub fn new(dump: &JitDump, arch: Arch) -> Option<JitCfi> {
        let mut loads = Vec::new();
        for (order, load) in dump.loads.iter().enumerate() {
            let end = load.start + load.size;
            let Some(unwinding) = &load.unwinding else { continue };
            let Some(base) = placed_at(&dump.data[unwinding.eh_frame.clone()], load.start) else {
                continue;
            };
            let sections = ModuleSections {
                eh_frame: Some(SectionInfo {
                    file_offset: unwinding.eh_frame.start as u64,
                    size: unwinding.eh_frame.len() as u64,
                    address: base,
                }),
                code: vec![CodeSegment {
                    address: load.start,
                    size: load.size,
                    file_offset: load.code.start as u64,
                    file_size: load.code.len() as u64,
                }],
                ..ModuleSections::default()
            };
            if let Ok(info) = UnwindInfo::new(arch, dump.data.clone(), sections) {
                loads.push((load.start, end, order, Arc::new(info)));
            }
        }
        if loads.is_empty() {
            return None;
        }
        loads.sort_unstable_by_key(|&(s, _, order, _)| (s, order));
        let mut functions: Vec<_> = dump.loads.iter().map(|l| l.start..l.start + l.size).collect();
        functions.sort_unstable_by_key(|f| (f.start, f.end));
        Some(JitCfi { loads, functions })
    }

    /// The tables of the latest load holding `address`.
    fn load_at(&self, address: u64) -> Option<&UnwindInfo> {
        let below = self.loads.partition_point(|(s, ..)| *s <= address);
        let candidates = self.loads[..below].iter().rev().take(OVERLAPS);
        let holding = candidates.filter(|(_, end, ..)| address < *end);
        holding.max_by_key(|(_, _, order, _)| *order).map(|(.., info)| &**info)
    }
}

/// Where `.eh_frame` bytes whose first FDE starts at `code` lie: their
/// addresses are relative to their place, so the FDE's start read at place
/// 0 says how far before or after the code they are.
fn placed_at(eh_frame: &[u8], code: u64) -> Option<u64> {
    let section = EhFrame::new(eh_frame, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(0);
    let mut entries = section.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(EhFrame::cie_from_offset).ok()?;
            return Some(code.wrapping_sub(fde.initial_address()));
        }
    }
    None
}

impl ForeignCfi for JitCfi {
    fn row(&self, _arch: Arch, offset: u64, exact: bool) -> Result<(Row, Range<u64>), LookupError> {
        let info = self.load_at(offset).ok_or(LookupError::NoFde)?;
        info.find_row(offset, exact, &mut UnwindContext::new())
    }

    fn function_start(&self, offset: u64) -> bool {
        self.functions.binary_search_by_key(&offset, |f| f.start).is_ok()
    }

    fn functions(&self) -> Vec<Range<u64>> {
        self.functions.clone()
    }
}
