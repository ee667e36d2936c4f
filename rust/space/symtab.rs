//! What a file's symbol table says of where its functions are — their
//! extents, not their names for people (those are `crate::symbolize`'s):
//! read for the unwinder's questions about a function's bounds.

use std::ops::Range;

use object::{Object, ObjectSymbol, SymbolKind};

use crate::space::elf::ElfError;

/// A defined function symbol's start, size and name; None for other
/// symbols and for ARM mapping symbols (`$x`, `$d`).
pub(crate) fn function_symbol<'d, S: ObjectSymbol<'d>>(
    s: &S,
    arm: bool,
) -> Option<(u64, u64, &'d str)> {
    if s.kind() != SymbolKind::Text || s.is_undefined() {
        return None;
    }
    let name = s.name().ok()?;
    if name.is_empty() || name.starts_with('$') {
        return None;
    }
    // A 32-bit ARM file's Thumb functions have bit 0 set in their value.
    let start = if arm { s.address() & !1 } else { s.address() };
    Some((start, s.size(), name))
}

/// Whether an ELF file is 32-bit ARM code (Thumb function symbols odd).
fn is_arm<'a, Elf: object::read::elf::FileHeader<Endian = object::LittleEndian>>(
    file: &object::read::elf::ElfFile<'a, Elf, &'a [u8]>,
) -> bool {
    file.elf_header().e_machine(object::LittleEndian) == object::elf::EM_ARM
}

/// A bare label in a section (`STT_NOTYPE`), not an ARM mapping symbol
/// (`$x`, `$d`) nor one without a name.
fn is_label<'d, S: ObjectSymbol<'d>>(s: &S) -> bool {
    matches!(s.kind(), SymbolKind::Unknown | SymbolKind::Label)
        && matches!(s.section(), object::SymbolSection::Section(_))
        && s.name().is_ok_and(|n| !n.is_empty() && !n.starts_with('$'))
}

/// What the symbol table says of the function at one address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionBounds {
    /// The ELF address range of a function symbol with a size that holds it.
    pub covering: Option<Range<u64>>,
    /// The lowest function symbol starting above it: where the function
    /// holding it ends at the latest.
    pub next_start: Option<u64>,
    /// A code symbol starts exactly there, a function's or a bare assembly
    /// label's (size 0, `STT_NOTYPE`: musl's `_start`).
    pub labelled: bool,
}

/// The bounds of the function holding ELF address `address` by the
/// symbols of an ELF file (`.symtab`, else `.dynsym`), read in one pass
/// without keeping them (for the one address the unwinder asks about; use
/// [`SymbolTable`] for many).
pub fn function_bounds(data: &[u8], address: u64) -> Result<FunctionBounds, ElfError> {
    if crate::space::elf::is_elf32(data) {
        bounds_class::<object::elf::FileHeader32<object::LittleEndian>>(data, address)
    } else {
        bounds_class::<object::elf::FileHeader64<object::LittleEndian>>(data, address)
    }
}

fn bounds_class<Elf: object::read::elf::FileHeader<Endian = object::LittleEndian>>(
    data: &[u8],
    address: u64,
) -> Result<FunctionBounds, ElfError> {
    let file = object::read::elf::ElfFile::<Elf, &[u8]>::parse(data)
        .map_err(|e| ElfError::Parse(e.to_string()))?;
    let arm = is_arm(&file);
    match bounds(file.symbols(), address, arm) {
        Some(found) => Ok(found),
        None => Ok(bounds(file.dynamic_symbols(), address, arm).unwrap_or_default()),
    }
}

/// Visit each defined function symbol with a size (start, size, name, and
/// whether it is 32-bit ARM's Thumb code) of `data`'s `.symtab`, else of
/// its `.dynsym`. Nothing for a file that does not parse.
pub fn function_symbols(data: &[u8], visit: &mut dyn FnMut(u64, u64, &str, bool)) {
    fn read<Elf: object::read::elf::FileHeader<Endian = object::LittleEndian>>(
        data: &[u8],
        visit: &mut dyn FnMut(u64, u64, &str, bool),
    ) {
        let Ok(file) = object::read::elf::ElfFile::<Elf, &[u8]>::parse(data) else { return };
        let arm = is_arm(&file);
        let mut each =
            |symbols: &mut dyn Iterator<Item = object::read::elf::ElfSymbol<'_, '_, Elf>>| {
                let mut any = false;
                for s in symbols {
                    let Some((start, size, name)) = function_symbol(&s, arm) else { continue };
                    if size > 0 && start > 0 {
                        visit(start, size, name, arm && s.address() & 1 != 0);
                        any = true;
                    }
                }
                any
            };
        if !each(&mut file.symbols()) {
            each(&mut file.dynamic_symbols());
        }
    }
    if crate::space::elf::is_elf32(data) {
        read::<object::elf::FileHeader32<object::LittleEndian>>(data, visit)
    } else {
        read::<object::elf::FileHeader64<object::LittleEndian>>(data, visit)
    }
}

/// None when there is no function symbol at all.
fn bounds<'d, S: ObjectSymbol<'d>>(
    symbols: impl Iterator<Item = S>,
    address: u64,
    arm: bool,
) -> Option<FunctionBounds> {
    let mut out = None;
    for s in symbols {
        if s.address() == address && is_label(&s) {
            out.get_or_insert_with(FunctionBounds::default).labelled = true;
        }
        let Some((start, size, _)) = function_symbol(&s, arm) else { continue };
        let found: &mut FunctionBounds = out.get_or_insert_with(FunctionBounds::default);
        found.labelled |= start == address;
        if start <= address && address - start < size {
            found.covering.get_or_insert(start..start.saturating_add(size));
        } else if start > address {
            found.next_start = Some(found.next_start.map_or(start, |n| n.min(start)));
        }
    }
    out
}
