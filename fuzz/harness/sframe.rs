//! The `sframe` target: an input is a `.sframe` section (its first byte
//! choosing x86_64 or aarch64 code, its next eight the section's address),
//! read as a module's only unwind table: every function's rows, the rules at
//! addresses in and around each function, and the check against DWARF CFI
//! (there is none: every row is a coverage gap). Nothing may panic, hang or
//! allocate without bound, whatever the header's counts and offsets say.

use std::sync::Arc;

use _core::arch::Arch;
use _core::source::memory::Data;
use _core::space::sections::{ModuleSections, SectionInfo};
use _core::unwind::cfi::sframe::SFrame;
use _core::unwind::cfi::sframe_check;
use _core::unwind::cfi::UnwindInfo;

pub fn run(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    let arch = if selector & 1 == 0 { Arch::X86_64 } else { Arch::Aarch64 };
    let Some((address, bytes)) = rest.split_first_chunk::<8>() else { return };
    let address = u64::from_le_bytes(*address) & 0xffff_ffff_ffff;
    let Ok(table) = SFrame::parse(bytes, address, arch) else { return };
    let mut pcs = Vec::new();
    for index in 0..table.function_count().min(256) {
        let Ok(function) = table.function(index) else { continue };
        for entry in table.entries(&function).take(256) {
            let Ok(entry) = entry else { break };
            let _ = table.rules(&function, &entry);
            pcs.push(function.start.wrapping_add(entry.start));
        }
        let middle = function.start + (function.end - function.start) / 2;
        pcs.extend([function.start, middle, function.end.wrapping_sub(1), function.end]);
    }
    for &pc in pcs.iter().take(1024) {
        let _ = table.row(pc);
    }
    let sections = ModuleSections {
        sframe: Some(SectionInfo { file_offset: 0, size: bytes.len() as u64, address }),
        ..ModuleSections::default()
    };
    let Ok(info) = UnwindInfo::new(arch, Arc::new(Data::Owned(bytes.to_vec())), sections) else {
        return;
    };
    // The check walks every byte of every function: only for small tables'
    // functions, or an input of a few bytes would ask for gigabytes of
    // addresses (the tool's users check their own files).
    let small = (0..table.function_count().min(64))
        .filter_map(|i| table.function(i).ok())
        .all(|f| f.end - f.start <= 1 << 16);
    if small && table.function_count() <= 64 {
        let _ = sframe_check::verify(&info);
    }
}
