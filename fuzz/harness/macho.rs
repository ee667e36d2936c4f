//! Arbitrary bytes as a Mach-O file, thin or universal (seeded by
//! `fuzz/seed.py` with tests/programs/apple_crash.c built for x86_64 and
//! arm64 macOS by clang and ld64.lld, their dSYMs' DWARF files, and a
//! universal file of both): its headers read as the address space reads an
//! Apple module's file, for each architecture; its compact unwind info
//! (`__unwind_info`: pages, encodings, frameless-indirect sizes read from
//! the code) and `__eh_frame` looked up (exact and not) at every function's
//! start, end and every byte of its first 64, and past the table; and its
//! functions read as the symbolizer reads them (`nlist` entries, to the next
//! one), looked up at the same addresses. Errors are fine; panics, hangs and
//! unbounded allocation are not.

use _core::arch::Arch;
use _core::source::memory::Data;
use _core::space::macho::MachoImage;
use _core::unwind::cfi::ForeignCfi;
use _core::unwind::compact::CompactUnwind;

/// The most functions looked up at, per architecture.
pub const MAX_FUNCTIONS: usize = 32;

/// How many lookups gave a row (for the harness's own test).
pub fn run(data: &[u8]) -> usize {
    let table = _core::symbolize::symbols::SymbolTable::from_elf(data).ok();
    let mut found = 0;
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let Ok(image) = MachoImage::from_data(Data::Owned(data.to_vec()), Some(arch)) else {
            continue;
        };
        let text = image.headers.text_address;
        let Ok(compact) = CompactUnwind::new(image) else { continue };
        let functions = compact.functions();
        for function in functions.iter().take(MAX_FUNCTIONS) {
            if let Some(table) = &table {
                let _ = table.lookup(text.wrapping_add(function.start));
            }
            let end = function.end.saturating_sub(1);
            let offsets = (0..64).map(|o| function.start.wrapping_add(o));
            for offset in offsets.chain([end, function.end, 0x10_0000, u64::from(u32::MAX)]) {
                for exact in [true, false] {
                    found += usize::from(compact.row(arch, offset, exact).is_ok());
                }
                let _ = compact.function_start(offset);
            }
        }
    }
    found
}
