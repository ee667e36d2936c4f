//! Arbitrary bytes as a PDB file (seeded by `fuzz/seed.py` with the PDBs
//! clang and lld write for tests/programs/windows/crash_win.c, 32- and
//! 64-bit, -O0 and -O2): read as `stackwalk minidump` reads a module's PDB
//! from a symbol store (its identity, its functions, its frame data), then
//! looked up (names, lines and inline chains, frame data, whose programs run
//! over a stack of made-up words) at every function's start, a few bytes
//! into it, and its end. Errors are fine; panics, hangs and unbounded
//! allocation are not.

use _core::arch::registers::Registers;
use _core::source::memory::Data;
use _core::symbolize::pdb::PdbSymbols;
use _core::unwind::cfi::ForeignCfi;
use _core::unwind::frame_data::{self, Below};

/// The most functions looked up per input.
pub const MAX_FUNCTIONS: usize = 256;

/// How many lookups found a function (for the harness's own test).
pub fn run(data: &[u8]) -> usize {
    let Ok(pdb) = PdbSymbols::parse(Data::Owned(data.to_vec())) else { return 0 };
    let _ = pdb.debug_id();
    let mut found = 0;
    for function in pdb.functions().into_iter().take(MAX_FUNCTIONS) {
        for address in [function.start, function.start.wrapping_add(3), function.end] {
            found += usize::from(pdb.lookup(address).is_some());
            let _ = pdb.frames(address);
            let _ = pdb.function_start(address);
            if let Some(data) = ForeignCfi::frame_data(&pdb, address) {
                let mut regs = Registers::new();
                for (column, value) in [(4, 0x1000), (5, 0x1010)] {
                    regs.set(column, value);
                }
                let mut mem = |a: u64| (a < 0x2000).then(|| (a + 4) & 0xffff_ffff);
                let params = pdb.parameter_size(address).unwrap_or(0);
                let below = Below { grand_callee_params: params, context_frame: false };
                let mut caller = Registers::new();
                let _ = frame_data::unwind(&data, below, address, &regs, &mut caller, &mut mem);
            }
        }
    }
    found
}
