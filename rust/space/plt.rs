//! A file's PLT entries, named `name@plt` as objdump, gdb and perf script
//! name them: looked up where a module's symbol table names nothing (see
//! [`crate::symbolize::symbols`]).

/// A file's PLT entries, in address order (see [`plt_entries`]), looked up
/// where its symbol table names nothing.
pub struct PltEntries(Vec<(u64, u64, String)>);

impl PltEntries {
    pub fn of(data: &[u8]) -> PltEntries {
        PltEntries(plt_entries(data).unwrap_or_default())
    }

    pub fn empty() -> PltEntries {
        PltEntries(Vec::new())
    }

    /// Every entry: its start, end and name.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64, &str)> {
        self.0.iter().map(|(start, end, name)| (*start, *end, name.as_str()))
    }

    /// The entry holding `address` (an ELF address), and its start.
    pub fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        let i = self.0.partition_point(|e| e.0 <= address).checked_sub(1)?;
        let (start, end, name) = &self.0[i];
        (address < *end).then_some((name.as_str(), *start))
    }
}

/// The entries of a file's PLT, named as objdump, gdb and perf script name
/// them: `name@plt` after the symbol that the relocation of the entry's GOT
/// slot binds (`.rela.plt`/`.rel.plt`, and for `.plt.got` the GOT's own in
/// `.rela.dyn`/`.rel.dyn`); an IFUNC's (an IRELATIVE relocation, which binds
/// no symbol) `*ABS*+0xADDEND@plt`, or `*ABS*@plt` where the addend is not
/// in the relocation (i386's REL). Each entry is matched to its relocation
/// by the slot it jumps through, as objdump does on x86 ([`x86_slots`],
/// [`aarch64_slots`]): the relocations are not in the entries' order
/// everywhere (x86_64 libc's are not). An entry that jumps through no slot a
/// relocation names (the PLT's header, a lazy-binding stub) is left out, and
/// so is every entry of another architecture than x86_64, i386, aarch64
/// and 32-bit ARM.
fn plt_entries(data: &[u8]) -> Option<Vec<(u64, u64, String)>> {
    if crate::space::elf::is_elf32(data) {
        plt_of::<object::elf::FileHeader32<object::LittleEndian>>(data)
    } else {
        plt_of::<object::elf::FileHeader64<object::LittleEndian>>(data)
    }
}

fn plt_of<Elf: object::read::elf::FileHeader<Endian = object::LittleEndian>>(
    data: &[u8],
) -> Option<Vec<(u64, u64, String)>> {
    use object::elf;
    use object::read::elf::{Rel, Rela, SectionHeader, Sym};
    let file = object::read::elf::ElfFile::<Elf, &[u8]>::parse(data).ok()?;
    let endian = file.endian();
    let machine = file.elf_header().e_machine(endian);
    let (jump_slot, irelative, glob_dat) = match machine {
        elf::EM_X86_64 => {
            (elf::R_X86_64_JUMP_SLOT, elf::R_X86_64_IRELATIVE, elf::R_X86_64_GLOB_DAT)
        }
        elf::EM_386 => (elf::R_386_JMP_SLOT, elf::R_386_IRELATIVE, elf::R_386_GLOB_DAT),
        elf::EM_AARCH64 => {
            (elf::R_AARCH64_JUMP_SLOT, elf::R_AARCH64_IRELATIVE, elf::R_AARCH64_GLOB_DAT)
        }
        elf::EM_ARM => (elf::R_ARM_JUMP_SLOT, elf::R_ARM_IRELATIVE, elf::R_ARM_GLOB_DAT),
        _ => return None,
    };
    let sections = file.elf_section_table();
    let section = |name: &str| sections.section_by_name(endian, name.as_bytes()).map(|(_, s)| s);
    // GOT slot -> the name of the entry that jumps through it.
    let mut names = rustc_hash::FxHashMap::default();
    let mut name_slots = |relocations: &str, types: &[u32]| -> Option<()> {
        let header = section(&format!(".rela{relocations}"))
            .or_else(|| section(&format!(".rel{relocations}")))?;
        // (slot, type, symbol, addend) of each relocation, RELA's or REL's.
        let (relocations, link): (Vec<_>, _) = match header.rela(endian, data).ok()? {
            Some((r, link)) => (
                r.iter()
                    .map(|r| {
                        let (t, sym) = (r.r_type(endian, false), r.r_sym(endian, false));
                        (r.r_offset(endian).into(), t, sym, Some(r.r_addend(endian).into()))
                    })
                    .collect(),
                link,
            ),
            None => {
                let (r, link) = header.rel(endian, data).ok()??;
                let read = |r: &Elf::Rel| {
                    (r.r_offset(endian).into(), r.r_type(endian), r.r_sym(endian), None)
                };
                (r.iter().map(read).collect(), link)
            }
        };
        let symbols = sections.symbol_table_by_index(endian, data, link).ok()?;
        for (slot, kind, sym, addend) in relocations {
            if !types.contains(&kind) {
                continue;
            }
            let name = if kind == irelative {
                match addend {
                    Some(addend) if addend != 0 => format!("*ABS*+{addend:#x}@plt"),
                    _ => "*ABS*@plt".to_owned(),
                }
            } else {
                let index = object::SymbolIndex(sym as usize);
                let Ok(symbol) = symbols.symbol(index) else { continue };
                match std::str::from_utf8(symbol.name(endian, symbols.strings()).ok()?) {
                    Ok(name) if !name.is_empty() => format!("{name}@plt"),
                    _ => continue,
                }
            };
            names.insert(slot, name);
        }
        Some(())
    };
    name_slots(".plt", &[jump_slot, irelative]);
    if section(".plt.got").is_some() {
        name_slots(".dyn", &[glob_dat]);
    }
    // i386's entries in a shared object or PIE jump through a slot at an
    // offset from %ebx, which holds the GOT's address.
    let got = section(".got.plt").or_else(|| section(".got")).map(|s| s.sh_addr(endian).into());
    let mut out = Vec::new();
    for name in [".plt", ".plt.sec", ".plt.got"] {
        let Some(plt) = section(name) else { continue };
        let Ok(code) = plt.data(endian, data) else { continue };
        let start: u64 = plt.sh_addr(endian).into();
        let entries = match machine {
            elf::EM_AARCH64 => aarch64_slots(code, start),
            elf::EM_ARM => arm_slots(code, start),
            _ => {
                // 16 bytes an entry, but `.plt.got`'s 8 without IBT (its
                // entry size is not always set).
                let size = match plt.sh_entsize(endian).into() {
                    _ if name != ".plt.got" => 16,
                    size @ (8 | 16) => size as usize,
                    _ if code.starts_with(&[0xf3, 0x0f, 0x1e]) => 16,
                    _ => 8,
                };
                x86_slots(code, start, size, machine == elf::EM_X86_64, got)
            }
        };
        out.extend(
            entries
                .into_iter()
                .filter_map(|(address, end, slot)| Some((address, end, names.get(&slot)?.clone()))),
        );
    }
    out.sort_unstable_by_key(|e| e.0);
    Some(out)
}

/// The entries of an x86 PLT section at `start` (each `size` bytes): the
/// start, end and GOT slot of each that jumps through one (`jmp *slot`,
/// maybe after `endbr64`/`endbr32` and a `bnd` prefix): x86_64's
/// `jmp *disp32(%rip)`; i386's `jmp *addr` in an executable, and
/// `jmp *disp32(%ebx)` in a PIE or shared object (%ebx the GOT, `got`).
fn x86_slots(
    code: &[u8],
    start: u64,
    size: usize,
    x86_64: bool,
    got: Option<u64>,
) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for (i, entry) in code.chunks_exact(size).enumerate() {
        let address = start + (i * size) as u64;
        let found = entry.windows(2).enumerate().find_map(|(at, w)| {
            let disp = entry.get(at + 2..at + 6)?;
            let disp = i32::from_le_bytes(disp.try_into().ok()?);
            match (w, x86_64) {
                ([0xff, 0x25], true) => {
                    Some(address.wrapping_add((at + 6) as u64).wrapping_add(disp as i64 as u64))
                }
                ([0xff, 0x25], false) => Some(u64::from(disp as u32)),
                ([0xff, 0xa3], false) => Some(u64::from((got? as u32).wrapping_add(disp as u32))),
                _ => None,
            }
        });
        if let Some(slot) = found {
            out.push((address, address + size as u64, slot));
        }
    }
    out
}

/// The entries of an aarch64 PLT at `start`: each is `adrp x16, page` and
/// `ldr x17, [x16, #offset]` (its GOT slot), then `add` and `br x17`, maybe
/// after `bti c` and with `autia1716` before the branch, and ends after the
/// branch and the `nop`s that pad it (not over the TLS descriptors'
/// trampoline some PLTs end with). The header's `adrp`/`ldr` read the
/// resolver's slot, which no relocation names.
fn aarch64_slots(code: &[u8], start: u64) -> Vec<(u64, u64, u64)> {
    const BTI_C: u32 = 0xd503_245f;
    const BR_X17: u32 = 0xd61f_0220;
    const NOP: u32 = 0xd503_201f;
    let words: Vec<u32> = code
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap_or_default()))
        .collect();
    let mut out = Vec::new();
    for (i, pair) in words.windows(2).enumerate() {
        let (adrp, ldr) = (pair[0], pair[1]);
        // adrp x16: op 1, immlo, 10000, immhi, Rd 16; ldr x17, [x16, #imm12 * 8].
        if adrp & 0x9f00_001f != 0x9000_0010 || ldr & 0xffc0_03ff != 0xf940_0211 {
            continue;
        }
        let pc = start + 4 * i as u64;
        let imm = (u64::from(adrp >> 5) & 0x7ffff) << 2 | u64::from(adrp >> 29) & 3;
        let page = ((imm << 43) as i64 >> 31) as u64; // sign-extend 21 bits, << 12
        let slot = (pc & !0xfff).wrapping_add(page).wrapping_add(u64::from(ldr >> 10 & 0xfff) * 8);
        let first = if i > 0 && words[i - 1] == BTI_C { pc - 4 } else { pc };
        let Some(br) = (i + 2..words.len().min(i + 6)).find(|&j| words[j] == BR_X17) else {
            continue;
        };
        let last = words[br + 1..].iter().take_while(|&&w| w == NOP).count() + br;
        out.push((first, start + 4 * (last as u64 + 1), slot));
    }
    out
}

/// The entries of a 32-bit ARM PLT at `start`, as GNU ld lays them out in
/// ARM code: `add ip, pc, #imm` and one or two `add ip, ip, #imm` (two in
/// `--long-plt`'s entries), then `ldr pc, [ip, #offset]!` through the GOT
/// slot they add up to (the pc reads 8 bytes past the first `add`). An entry
/// that Thumb code may call starts with a Thumb stub, `bx pc` and a branch
/// or `nop`, 4 bytes before it. The header's `ldr pc, [lr, #8]!` reads the
/// resolver's slot, which no relocation names.
fn arm_slots(code: &[u8], start: u64) -> Vec<(u64, u64, u64)> {
    const ADD_IP_PC: u32 = 0xe28f_c000;
    const ADD_IP_IP: u32 = 0xe28c_c000;
    const LDR_PC_IP: u32 = 0xe53c_f000; // pre-indexed, writeback; U (bit 23) apart
    const BX_PC: u16 = 0x4778;
    let words: Vec<u32> = code
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap_or_default()))
        .collect();
    // An ARM data-processing immediate: 8 bits rotated right by twice 4 bits.
    let immediate = |insn: u32| (insn & 0xff).rotate_right(2 * (insn >> 8 & 0xf));
    let mut out = Vec::new();
    for (i, &first) in words.iter().enumerate() {
        if first & 0xffff_f000 != ADD_IP_PC {
            continue;
        }
        let pc = start + 4 * i as u64;
        let mut slot = (pc as u32).wrapping_add(8).wrapping_add(immediate(first));
        let mut j = i + 1;
        while j < words.len() && j <= i + 2 && words[j] & 0xffff_f000 == ADD_IP_IP {
            slot = slot.wrapping_add(immediate(words[j]));
            j += 1;
        }
        let Some(&ldr) = words.get(j).filter(|&&w| w & 0xff7f_f000 == LDR_PC_IP) else {
            continue;
        };
        slot = match ldr & 0x0080_0000 != 0 {
            true => slot.wrapping_add(ldr & 0xfff),
            false => slot.wrapping_sub(ldr & 0xfff),
        };
        let thumb_stub = i > 0 && words[i - 1] as u16 == BX_PC;
        let entry = if thumb_stub { pc - 4 } else { pc };
        out.push((entry, start + 4 * (j as u64 + 1), u64::from(slot)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// aarch64 PLT entries as GNU ld lays them out (the words of
    /// aarch64-linux-gnu-objdump's listings): the header, a plain entry, a
    /// BTI and PAC one, one whose page is below its own, and the TLS
    /// descriptors' trampoline, which reads no slot through x16/x17.
    #[test]
    fn aarch64_plt_entries_and_their_got_slots() {
        let words: &[u32] = &[
            // 0x10610, the header: adrp x16, +0x1f000; ldr x17, [x16, #0xff8]; ...; 3 nops.
            0xa9bf_7bf0,
            0xf000_00f0,
            0xf947_fe11,
            0x913f_e210,
            0xd61f_0220,
            0xd503_201f,
            0xd503_201f,
            0xd503_201f,
            // 0x10630: adrp x16, +0x20000; ldr x17, [x16]; add; br x17.
            0x9000_0110,
            0xf940_0211,
            0x9100_0210,
            0xd61f_0220,
            // 0x10640: bti c; adrp x16, +0x20000; ldr x17, [x16, #8]; add; autia1716; br x17.
            0xd503_245f,
            0x9000_0110,
            0xf940_0611,
            0x9100_2210,
            0xd503_219f,
            0xd61f_0220,
            // 0x10658: adrp x16, -0x1000; ldr x17, [x16, #8]; add; br x17.
            0xf0ff_fff0,
            0xf940_0611,
            0x9100_2210,
            0xd61f_0220,
            // 0x10668: the trampoline: stp x2, x3; adrp x2; adrp x3; ldr x2, [x2]; add; br x2.
            0xa9bf_0fe2,
            0xd000_0b82,
            0xd000_0b83,
            0xf947_f042,
            0x913f_a063,
            0xd61f_0040,
            0xd503_201f,
            0xd503_201f,
            0xd503_201f,
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let entries = aarch64_slots(&code, 0x10610);
        assert_eq!(
            entries,
            [
                (0x10614, 0x10630, 0x2fff8), // the header from its adrp: no relocation names its slot
                (0x10630, 0x10640, 0x30000),
                (0x10640, 0x10658, 0x30008),
                (0x10658, 0x10668, 0xf008),
            ]
        );
    }

    #[test]
    fn arm_plt_entries_and_their_got_slots() {
        // Debian armhf libc's PLT (arm-linux-gnueabihf-objdump): the header, `raise@plt` at
        // 0x1ded8 (slot 0x1ded8 + 8 + 0xee000 + 0x12c), `realloc@plt` at 0x1dee4 with a Thumb
        // stub (e7fd4778: `bx pc`, `b.n`) before its ARM code.
        let words: [u32; 12] = [
            0xe52d_e004,
            0xe59f_e004,
            0xe08f_e00e,
            0xe5be_f008,
            0x000e_e12c, // header
            0xe28f_c600,
            0xe28c_caee,
            0xe5bc_f12c, // raise@plt
            0xe7fd_4778,
            0xe28f_c600,
            0xe28c_caee,
            0xe5bc_f120, // realloc@plt
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let entries = arm_slots(&code, 0x1dec4);
        assert_eq!(
            entries,
            [
                (0x1ded8, 0x1dee4, 0x1ded8 + 8 + 0xee000 + 0x12c),
                (0x1dee4, 0x1def4, 0x1dee8 + 8 + 0xee000 + 0x120)
            ]
        );
        // A cut entry (no `ldr pc`) is none.
        assert!(arm_slots(&code[..28], 0x1dec4).is_empty());
    }
}
