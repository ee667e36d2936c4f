//! Arbitrary bytes as a Breakpad `.sym` file (seeded by `fuzz/seed.py` with
//! `dump_syms`' output for test programs: `FILE`, `FUNC`, line, `INLINE`,
//! `PUBLIC`, `STACK CFI` and Windows x86 `STACK WIN` records): parsed as
//! `stackwalk minidump` parses the files of a symbol store, then looked up
//! (names, lines and inline chains, the `STACK CFI` rules for each
//! architecture, and the `STACK WIN` records, whose frame data programs are
//! run over a stack of made-up words) at every hex word of the input and
//! next to it. Errors are fine; panics, hangs and unbounded allocation are
//! not.

use _core::arch::registers::Registers;
use _core::arch::Arch;
use _core::source::memory::Data;
use _core::symbolize::breakpad::BreakpadSymbols;
use _core::unwind::frame_data::{self, Below};

/// The most addresses looked up per input.
pub const MAX_LOOKUPS: usize = 256;

/// How many lookups found a function (for the harness's own test).
pub fn run(data: &[u8]) -> usize {
    let Ok(symbols) = BreakpadSymbols::parse(Data::Owned(data.to_vec())) else { return 0 };
    let addresses = super::hex_words(data, MAX_LOOKUPS / 2);
    let mut found = 0;
    for word in addresses {
        for address in [word, word.wrapping_add(1)] {
            found += usize::from(symbols.lookup(address).is_some());
            let _ = symbols.frames(address);
            for arch in [Arch::X86_64, Arch::Aarch64, Arch::I386] {
                let _ = symbols.cfi_row(arch, address);
            }
            if let Some(data) = symbols.frame_data(address) {
                let params = symbols.parameter_size(address).unwrap_or(0);
                let mut regs = Registers::new();
                for (column, value) in [(4, 0x1000), (5, 0x1010), (3, address)] {
                    regs.set(column, value);
                }
                // Every word of the stack below 0x2000 reads as its address
                // plus 4; none above.
                let mut mem = |a: u64| (a < 0x2000).then(|| (a + 4) & 0xffff_ffff);
                let below = Below { grand_callee_params: params, context_frame: word & 1 == 0 };
                let mut caller = Registers::new();
                let _ = frame_data::unwind(&data, below, address, &regs, &mut caller, &mut mem);
            }
        }
    }
    found
}
