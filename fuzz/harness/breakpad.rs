//! Arbitrary bytes as a Breakpad `.sym` file (seeded by `fuzz/seed.py` with
//! `dump_syms`' output for test programs: `FILE`, `FUNC`, line, `INLINE`,
//! `PUBLIC` and `STACK CFI` records): parsed as `stackwalk minidump` parses
//! the files of a symbol store, then looked up (names, lines and inline
//! chains, and the `STACK CFI` rules for each architecture) at every hex
//! word of the input and next to it. Errors are fine; panics, hangs and
//! unbounded allocation are not.

use _core::arch::Arch;
use _core::source::memory::Data;
use _core::symbolize::breakpad::BreakpadSymbols;

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
        }
    }
    found
}
