//! Function names for addresses: a module's `.symtab` (else `.dynsym`) read
//! once with the `object` crate into sorted arrays; a lookup is a binary
//! search; names are demangled (C++ and Rust) when looked up.

use std::borrow::Cow;

use object::{Object, ObjectSymbol, SymbolKind};

use crate::elf::ElfError;

pub struct SymbolTable {
    /// Whether the names come from `.symtab` (all functions) rather than
    /// `.dynsym` (exported ones only).
    pub full: bool,
    starts: Vec<u64>,
    ends: Vec<u64>,
    names: Vec<Box<str>>,
}

impl SymbolTable {
    /// The function symbols of an ELF file: `.symtab` if it has one, else
    /// `.dynsym`. ARM mapping symbols (`$x`, `$d`) and undefined symbols are
    /// left out.
    pub fn from_elf(data: &[u8]) -> Result<SymbolTable, ElfError> {
        let file = object::read::elf::ElfFile64::<object::LittleEndian, &[u8]>::parse(data)
            .map_err(|e| ElfError::Parse(e.to_string()))?;
        let mut symbols = functions(file.symbols());
        let full = !symbols.is_empty();
        if !full {
            symbols = functions(file.dynamic_symbols());
        }
        // Aliases (same range) are ordered so that the name a lookup returns
        // (the last) is the one people use: unversioned, else the default
        // version (`name@@VERSION`), else an old version (`name@VERSION`).
        let rank = |name: &str| match name.find('@') {
            None => 2,
            Some(i) if name[i..].starts_with("@@") => 1,
            Some(_) => 0,
        };
        symbols.sort_unstable_by(|a, b| {
            (a.0, a.1, rank(&a.2), &a.2).cmp(&(b.0, b.1, rank(&b.2), &b.2))
        });
        let mut table = SymbolTable {
            full,
            starts: Vec::with_capacity(symbols.len()),
            ends: Vec::with_capacity(symbols.len()),
            names: Vec::with_capacity(symbols.len()),
        };
        for (start, end, name) in symbols {
            table.starts.push(start);
            table.ends.push(end);
            table.names.push(name);
        }
        Ok(table)
    }

    /// The symbols for the ELF file at `path`: its own `.symtab`, else, when
    /// it has only `.dynsym` (exported names), the `.symtab` of its separate
    /// debug file under `debug_root` (`.build-id/xx/yyyy.debug`, found by
    /// build id as gdb and eu-stack find it), else its `.dynsym`.
    pub fn for_file(data: &[u8], debug_root: &std::path::Path) -> Result<SymbolTable, ElfError> {
        let table = SymbolTable::from_elf(data)?;
        if table.full {
            return Ok(table);
        }
        let debug = crate::elf::summarize(data)
            .ok()
            .and_then(|s| s.build_id)
            .and_then(|id| crate::debugfile::build_id_path(&id, debug_root));
        if let Some(bytes) = debug.and_then(|p| std::fs::read(p).ok()) {
            if let Ok(full) = SymbolTable::from_elf(&bytes) {
                if full.full {
                    return Ok(full);
                }
            }
        }
        Ok(table)
    }

    /// The function containing `address` (an ELF address) and the offset
    /// into it, or None: a distant symbol is never borrowed.
    pub fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        let mut i = self.starts.partition_point(|&s| s <= address).checked_sub(1)?;
        // Aliases share a start: look at each of them.
        loop {
            if address < self.ends[i] {
                return Some((&self.names[i], address - self.starts[i]));
            }
            if i == 0 || self.starts[i - 1] != self.starts[i] {
                return None;
            }
            i -= 1;
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// (start, end, name) of the defined function symbols, bar ARM mapping
/// symbols (`$x`, `$d`).
fn functions<'d, S: ObjectSymbol<'d>>(
    symbols: impl Iterator<Item = S>,
) -> Vec<(u64, u64, Box<str>)> {
    symbols
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined())
        .filter_map(|s| {
            let name = s.name().ok()?;
            if name.is_empty() || name.starts_with('$') {
                return None;
            }
            let start = s.address();
            Some((start, start.saturating_add(s.size().max(1)), name.into()))
        })
        .collect()
}

/// A symbol name as people read it: Rust (legacy and v0) and C++ (Itanium)
/// names demangled, anything else unchanged.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return Cow::Owned(format!("{d:#}"));
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle() {
                return Cow::Owned(d);
            }
        }
    }
    Cow::Borrowed(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Znot valid"), "_Znot valid");
    }

    #[test]
    fn looks_up_its_own_functions() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let table = SymbolTable::from_elf(&exe).unwrap();
        assert!(!table.is_empty());
        // Every symbol is found at its own start.
        for i in (0..table.len()).step_by(97) {
            let (name, off) = table.lookup(table.starts[i]).unwrap();
            assert_eq!(off, 0);
            assert!(table
                .names
                .iter()
                .zip(&table.starts)
                .any(|(n, s)| **n == *name && *s == table.starts[i]));
        }
        assert!(table.lookup(0).is_none());
    }
}
