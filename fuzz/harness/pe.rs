//! Arbitrary bytes as a Windows x64 PE file (seeded by `fuzz/seed.py` with
//! programs built by mingw-w64 at -O0 and -O2, and Wine's ntdll): its
//! headers read as the address space reads a Windows module's file, then
//! the rows of its `.pdata` and `UNWIND_INFO` looked up (exact and not) at
//! every function's start, end and every byte of its first 64, and past the
//! table; and its functions read as the symbolizer reads them (COFF symbols
//! or exports, to their `.pdata` ends), looked up at the same addresses.
//! Errors are fine; panics, hangs and unbounded allocation are not.

use _core::source::memory::Data;
use _core::space::pe::PeImage;
use _core::unwind::cfi::ForeignCfi;
use _core::unwind::pe::PeUnwind;

/// The most addresses looked up per input.
pub const MAX_LOOKUPS: usize = 4096;

/// How many lookups gave a row (for the harness's own test).
pub fn run(data: &[u8]) -> usize {
    let Ok(image) = PeImage::from_data(Data::Owned(data.to_vec())) else { return 0 };
    let starts: Vec<u64> = image.functions().take(MAX_LOOKUPS / 128).collect();
    let base = image.headers.image_base;
    let table = _core::symbolize::symbols::SymbolTable::from_elf(data).ok();
    for &start in &starts {
        if let Some(table) = &table {
            let _ = table.lookup(base.wrapping_add(start));
        }
    }
    let Ok(pe) = PeUnwind::new(image) else { return 0 };
    let mut found = 0;
    for start in starts {
        for offset in (0..64).chain([0x1000, u64::from(u32::MAX)]) {
            let rva = start.wrapping_add(offset);
            for exact in [true, false] {
                found += usize::from(pe.row(_core::arch::Arch::X86_64, rva, exact).is_ok());
            }
            let _ = pe.function_start(rva);
        }
    }
    found
}
