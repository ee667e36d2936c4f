//! Arbitrary bytes as CFI: a whole ELF image, or raw `.eh_frame_hdr` /
//! `.eh_frame` / `.debug_frame` contents. Builds the unwind info (header
//! checks, FDE indexes), looks rules up at many addresses (the start, middle
//! and end of every FDE gimli can see, plus addresses taken from the input)
//! and evaluates every expression rule found over made-up registers and
//! memory. Nothing may panic, hang or allocate without bound.
//!
//! Input layout (see `fuzz/seed.py`, which writes real seeds in it):
//! byte 0 = flags (bit 0: aarch64, bit 2: i386, bit 1: raw sections, else
//! ELF image);
//! raw sections: u32 hdr_len, u32 eh_len, u32 hdr_addr, u32 eh_addr, then
//! the `.eh_frame_hdr` bytes, the `.eh_frame` bytes, and `.debug_frame` as
//! the rest (lengths are clamped to what is there).

use std::sync::Arc;

use _core::arch::registers::Registers;
use _core::arch::Arch;
use _core::source::memory::Data;
use _core::space::sections::{ModuleSections, SectionInfo};
use _core::unwind::cfi::{CfaRule, RegRule, UnwindInfo};
use _core::unwind::expr;
use gimli::{
    CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian, UnwindContext, UnwindSection,
};

/// Lookups per input, so one input cannot take seconds.
pub const MAX_LOOKUPS: usize = 2048;

fn u32_at(data: &[u8], at: usize) -> u32 {
    data.get(at..at + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The ELF addresses of the FDEs of a section as gimli sees them.
fn fde_addresses<'d, S: UnwindSection<EndianSlice<'d, LittleEndian>>>(
    section: S,
    address: u64,
    out: &mut Vec<u64>,
) {
    let bases = gimli::BaseAddresses::default().set_eh_frame(address);
    let mut entries = section.entries(&bases);
    while out.len() < MAX_LOOKUPS {
        match entries.next() {
            Ok(Some(CieOrFde::Fde(partial))) => {
                if let Ok(fde) = partial.parse(S::cie_from_offset) {
                    let (start, len) = (fde.initial_address(), fde.len());
                    out.extend([
                        start,
                        start.wrapping_add(len / 2),
                        start.wrapping_add(len).wrapping_sub(1),
                    ]);
                }
            }
            Ok(Some(CieOrFde::Cie(_))) => {}
            _ => break,
        }
    }
}

/// The architecture flag bits ask for: bit 2 i386, else bit 0 aarch64.
pub fn harness_arch(flags: u8) -> Arch {
    match (flags & 4, flags & 1) {
        (0, 0) => Arch::X86_64,
        (0, _) => Arch::Aarch64,
        (_, 0) => Arch::I386,
        _ => Arch::Arm,
    }
}

fn eh_frame(bytes: &[u8]) -> EhFrame<EndianSlice<'_, LittleEndian>> {
    let mut eh = EhFrame::new(bytes, LittleEndian);
    eh.set_address_size(8);
    eh
}

fn debug_frame(bytes: &[u8]) -> DebugFrame<EndianSlice<'_, LittleEndian>> {
    let mut df = DebugFrame::new(bytes, LittleEndian);
    df.set_address_size(8);
    df
}

/// Look rules up at `pcs`; returns how many were found.
fn exercise(info: &UnwindInfo, word: u8, pcs: &[u64]) -> usize {
    let mut found = 0;
    let mut ctx = UnwindContext::new();
    let mut regs = Registers::new();
    for r in 0..33 {
        regs.set(r, 0x7ff0_0000_1000 + u64::from(r) * 8);
    }
    // Memory: every read succeeds below 2^47 with a value derived from the
    // address, fails above.
    let mut mem = |a: u64| (a < 1 << 47).then_some(a.rotate_left(13) ^ 0x5555);
    for &pc in pcs.iter().take(MAX_LOOKUPS) {
        let _ = info.entry_function().is_some_and(|f| f.range.contains(&pc));
        let _ = info.find_full_row(pc, true, &mut ctx);
        let Ok((row, range)) = info.find_row(pc, true, &mut ctx) else { continue };
        found += 1;
        assert!(range.start <= pc && pc < range.end, "FDE {range:x?} does not hold {pc:#x}");
        let cfa = match row.cfa {
            CfaRule::RegOffset { reg, offset } => {
                regs.get(reg).map_or(0, |v| v.wrapping_add(offset as u64))
            }
            CfaRule::Expr(e) => {
                expr::evaluate(info.expr_bytes(e), None, &regs, &mut mem, word).unwrap_or(0)
            }
            CfaRule::DerefRegister { reg, offset } => {
                regs.get(reg).and_then(|v| mem(v.wrapping_add(offset as u64))).unwrap_or(0)
            }
        };
        for &(_, rule) in row.rules() {
            if let RegRule::Expr(e) | RegRule::ValExpr(e) = rule {
                let _ = expr::evaluate(info.expr_bytes(e), Some(cfa), &regs, &mut mem, word);
            }
        }
    }
    found
}

/// Returns the number of rules found (for the tests of the harness itself).
pub fn run(data: &[u8]) -> usize {
    let Some((&flags, rest)) = data.split_first() else { return 0 };
    let arch = harness_arch(flags);
    let mut pcs = Vec::new();
    if flags & 2 == 0 {
        // A whole ELF image, copied: the `object` crate reads ELF headers in
        // place and wants them aligned, as a mapped file or a Vec is (the
        // input slice, one byte in, is not).
        let data = Arc::new(Data::Owned(rest.to_vec()));
        let rest: &[u8] = &data;
        let _ = _core::space::elf::summarize(rest);
        if let Ok(t) = _core::symbolize::symbols::SymbolTable::from_elf(rest) {
            let _ = t.lookup(0x1000);
        }
        let Ok(elf) = _core::space::elf::read_elf(rest) else { return 0 };
        if let Some(df) = elf.sections.debug_frame {
            let start = df.file_offset as usize;
            if let Some(bytes) = rest.get(start..start.saturating_add(df.size as usize)) {
                fde_addresses(debug_frame(bytes), 0, &mut pcs);
            }
        }
        if let Some(eh) = elf.sections.eh_frame {
            let start = eh.file_offset as usize;
            if let Some(bytes) = rest.get(start..start.saturating_add(eh.size as usize)) {
                fde_addresses(eh_frame(bytes), eh.address, &mut pcs);
            }
        }
        let (s, e) = (elf.range.start, elf.range.end);
        pcs.extend([s, e.wrapping_sub(1), s.wrapping_add((e - s) / 2), e, 0, u64::MAX]);
        pcs.extend(elf.sections.entry);
        let Ok(info) = UnwindInfo::new(arch, data.clone(), elf.sections) else { return 0 };
        exercise(&info, arch.word_size() as u8, &pcs)
    } else {
        let body = rest.get(16..).unwrap_or(&[]);
        let hdr_len = (u32_at(rest, 0) as usize).min(body.len());
        let eh_len = (u32_at(rest, 4) as usize).min(body.len() - hdr_len);
        let (hdr_addr, eh_addr) = (u64::from(u32_at(rest, 8)), u64::from(u32_at(rest, 12)));
        let df_len = body.len() - hdr_len - eh_len;
        let section = |offset: usize, size: usize, address: u64| {
            (size > 0).then_some(SectionInfo {
                file_offset: offset as u64,
                size: size as u64,
                address,
            })
        };
        // For ARM code the same two slices are also its EHABI index and table.
        let arm = arch == Arch::Arm;
        let sections = ModuleSections {
            arm_exidx: section(0, hdr_len, hdr_addr).filter(|_| arm),
            arm_extab: section(hdr_len, eh_len, eh_addr).filter(|_| arm),
            eh_frame_hdr: section(0, hdr_len, hdr_addr),
            eh_frame: section(hdr_len, eh_len, eh_addr),
            debug_frame: section(hdr_len + eh_len, df_len, 0),
            debug_frame_compression: None,
            // The same bytes as a `.sframe` table, where no FDE covers a pc.
            sframe: section(hdr_len + eh_len, df_len, 0).filter(|_| !arm),
            text: Some(eh_addr & !0xfff),
            got: Some(eh_addr.wrapping_add(0x10000)),
            code: Vec::new(),
            // The function at the entry point is bounded by the next FDE
            // (the search table's or the index's) where there are no symbols.
            entry: Some(eh_addr & !0xfff),
            // Looked for on every row: the bytes are no ELF file with a
            // `.symtab`, so no Go sigpanic is found, and nothing fails.
            go: true,
        };
        fde_addresses(eh_frame(&body[hdr_len..hdr_len + eh_len]), eh_addr, &mut pcs);
        fde_addresses(debug_frame(&body[hdr_len + eh_len..]), 0, &mut pcs);
        // Addresses spread over the debug_frame's words, and near the sections.
        pcs.extend(
            body[hdr_len + eh_len..]
                .chunks_exact(8)
                .take(64)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())),
        );
        pcs.extend([hdr_addr, eh_addr, eh_addr.wrapping_sub(1), 0, u64::MAX]);
        if arm {
            // Where the index's entries say their functions start (prel31 offsets).
            let index = &body[..hdr_len];
            for (i, entry) in index.chunks_exact(8).take(64).enumerate() {
                let value = u32::from_le_bytes(entry[..4].try_into().unwrap_or_default());
                let place = hdr_addr.wrapping_add(8 * i as u64);
                let start = place.wrapping_add((((value << 1) as i32) >> 1) as i64 as u64);
                pcs.extend([start, start.wrapping_add(2)]);
            }
        }
        let Ok(info) = UnwindInfo::new(arch, Arc::new(Data::Owned(body.to_vec())), sections) else {
            return 0;
        };
        exercise(&info, arch.word_size() as u8, &pcs)
    }
}
