//! Function names for addresses: a module's `.symtab` (else `.dynsym`) read
//! once with the `object` crate into sorted arrays; a lookup is a binary
//! search; names are demangled (C++ and Rust) when looked up.

use std::borrow::Cow;
use std::sync::OnceLock;

use object::read::elf::SectionHeader;
use object::{Object, ObjectSymbol, SymbolKind};

use crate::space::elf::ElfError;
pub use crate::space::plt::PltEntries;

pub struct SymbolTable {
    /// Whether the names come from `.symtab` (all functions) rather than
    /// `.dynsym` (exported ones only).
    pub full: bool,
    starts: Vec<u64>,
    ends: Vec<u64>,
    /// Every name, one after another: name `i` is `text[bounds[i]..bounds[i + 1]]`
    /// (one allocation for the table, rather than one a name).
    text: String,
    bounds: Vec<usize>,
    /// Demangled names, made on first lookup (`None`: same as the name).
    demangled: Vec<OnceLock<Option<Box<str>>>>,
}

/// Among a run of aliases sorted for [`SymbolTable::from_functions`], the
/// name a lookup gives (the last) is made the shortest alias of its end and
/// rank that it starts with: glibc names a function's versions for
/// compatibility and 64-bit offsets by its name with a suffix
/// (`__clock_nanosleep_2`, `fstat64`, `__stack_chk_fail_local`), which sort
/// after the name people call.
fn prefer_base_name<R: PartialEq + Copy>(aliases: &mut [(u64, u64, R, &str)]) {
    let Some(&(_, end, rank, chosen)) = aliases.last() else { return };
    let base = aliases
        .iter()
        .enumerate()
        .filter(|(_, &(_, e, r, name))| {
            e == end
                && r == rank
                && !name.is_empty()
                && name.len() < chosen.len()
                && chosen.starts_with(name)
        })
        .min_by_key(|(_, (_, _, _, name))| name.len())
        .map(|(i, _)| i);
    if let Some(i) = base {
        let last = aliases.len() - 1;
        aliases.swap(i, last);
    }
}

impl SymbolTable {
    /// The function symbols of an ELF file: `.symtab` if it has one, else
    /// `.dynsym`. ARM mapping symbols (`$x`, `$d`) and undefined symbols are
    /// left out; a symbol of size 0 names the addresses up to the next symbol
    /// in its section (see [`ranges`]).
    pub fn from_elf(data: &[u8]) -> Result<SymbolTable, ElfError> {
        SymbolTable::read(data, || None)
    }

    /// `data`'s `.symtab`, else what `debug` finds, else its MiniDebugInfo
    /// with its `.dynsym`, else `data`'s `.dynsym` (read only then), else a
    /// Go program's `.gopclntab` (which stripping leaves: see
    /// [`crate::space::gopclntab`]).
    fn read(
        data: &[u8],
        debug: impl FnOnce() -> Option<SymbolTable>,
    ) -> Result<SymbolTable, ElfError> {
        if let Some((functions, full)) = pe_functions(data).or_else(|| macho_functions(data)) {
            return Ok(SymbolTable::from_functions(functions, full));
        }
        if let Some(table) = SymbolTable::of_table(data, Table::Symtab)? {
            return Ok(table);
        }
        if let Some(table) = debug() {
            return Ok(table);
        }
        if let Some(table) = SymbolTable::of_minidebuginfo(data) {
            return Ok(table);
        }
        if let Some(table) = SymbolTable::of_table(data, Table::Dynsym)? {
            return Ok(table);
        }
        let go: Functions<'_> = crate::space::gopclntab::functions(data)
            .into_iter()
            .map(|(start, end, name)| (start, end, name, false))
            .collect();
        let full = !go.is_empty();
        Ok(SymbolTable::from_functions(go, full))
    }

    /// The functions a stripped file's MiniDebugInfo names (see
    /// [`crate::space::minidebuginfo`]) and those of its `.dynsym`, which
    /// the MiniDebugInfo leaves out: every function, as gdb and elfutils
    /// read them. None where there is none, or it names no function.
    fn of_minidebuginfo(data: &[u8]) -> Option<SymbolTable> {
        let inner = crate::space::minidebuginfo::inner_file(data)?;
        let mut functions = read_functions(&inner, Table::Symtab).ok()?;
        if functions.is_empty() {
            return None;
        }
        functions.extend(read_functions(data, Table::Dynsym).unwrap_or_default());
        // (Each table's come sorted by start: the two merged.)
        functions.sort_by_key(|&(start, ..)| start);
        Some(SymbolTable::from_functions(functions, true))
    }

    /// The symbols of `table` in the ELF file `data` (None where it has
    /// none). A large file's (a library's, a debug file's) are kept in
    /// stackwalk's cache by its build id and size, as the table is made
    /// here, and read from there by later processes: libc6-dbg's `.symtab`
    /// (10,000 functions) takes some 0.9 ms to read and order, and a command
    /// reads several (libc's, ld.so's, a program's): `stackwalk perf` on
    /// 3,000 samples 21.9 -> 20.1 ms, `stackwalk core` on a small core 18.3
    /// -> 17.0 ms (medians of 25 interleaved runs).
    fn of_table(data: &[u8], table: Table) -> Result<Option<SymbolTable>, ElfError> {
        let full = matches!(table, Table::Symtab);
        let from_file = || -> Result<Option<SymbolTable>, ElfError> {
            let functions = read_functions(data, table)?;
            Ok((!functions.is_empty()).then(|| SymbolTable::from_functions(functions, full)))
        };
        let cache =
            crate::symbolize::lines::SectionCache::from_env().filter(|_| data.len() >= CACHED_FROM);
        let id = cache.and_then(|_| crate::space::elf::summarize(data).ok()?.build_id);
        let (Some(cache), Some(id)) = (cache, id) else { return from_file() };
        let kind = if full { "symtab" } else { "dynsym" };
        // (symbols4: ARM Thumb functions' starts no longer odd.)
        let name = format!("symbols4-{kind}-{}", data.len());
        let mut made = None;
        let stored = cache.derived(&id, &name, || {
            let table = made.insert(from_file()).as_ref().ok()?.as_ref()?;
            Some(table.encode())
        });
        match (made, stored) {
            (Some(made), _) => made,
            // Not this build's format: made from the file.
            (None, Some(stored)) => {
                SymbolTable::decode(&stored, full).map_or_else(from_file, |t| Ok(Some(t)))
            }
            (None, None) => from_file(),
        }
    }

    /// The table as a cache entry holds it: the count of symbols and the
    /// names' bytes, then the starts, the ends and the names' bounds, each
    /// a little-endian u64, then the names.
    fn encode(&self) -> Vec<u8> {
        let words = 2 + 3 * self.starts.len() + 1;
        let mut out = Vec::with_capacity(words * 8 + self.text.len());
        let count = self.starts.len() as u64;
        let bounds = self.bounds.iter().map(|&b| b as u64);
        let all = [count, self.text.len() as u64].into_iter();
        for word in all.chain(self.starts.iter().copied()).chain(self.ends.iter().copied()) {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for word in bounds {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(self.text.as_bytes());
        out
    }

    /// A table from [`SymbolTable::encode`]'s bytes; None where they are not
    /// one (a name's bounds out of order, or not on a character's).
    fn decode(bytes: &[u8], full: bool) -> Option<SymbolTable> {
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?))
        };
        let count = usize::try_from(word(0)?).ok()?;
        let text_len = usize::try_from(word(1)?).ok()?;
        let words = count.checked_mul(3)?.checked_add(3)?;
        let text_at = words.checked_mul(8)?;
        if bytes.len().checked_sub(text_at)? != text_len {
            return None;
        }
        let run = |from: usize, n: usize| -> Vec<u64> {
            bytes[from * 8..(from + n) * 8]
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
                .collect()
        };
        let (starts, ends) = (run(2, count), run(2 + count, count));
        let bounds: Vec<usize> =
            run(2 + 2 * count, count + 1).into_iter().map(|b| b as usize).collect();
        let text = String::from_utf8(bytes[text_at..].to_vec()).ok()?;
        let ordered = bounds.first() == Some(&0)
            && bounds.last() == Some(&text.len())
            && bounds.windows(2).all(|w| w[0] <= w[1])
            && bounds.iter().all(|&b| text.is_char_boundary(b));
        if !ordered {
            return None;
        }
        let mut demangled = Vec::new();
        demangled.resize_with(count, OnceLock::new);
        Some(SymbolTable { full, starts, ends, text, bounds, demangled })
    }

    fn from_functions(symbols: Functions<'_>, full: bool) -> SymbolTable {
        // Aliases (same range) are ordered so that the name a lookup returns
        // (the last) is the one people use: unversioned, else the default
        // version (`name@@VERSION`), else an old version (`name@VERSION`);
        // never the local alias GCC makes of a function for calls from its
        // own file (`name.localalias`) when the function's name is there;
        // of each of those, a global or weak name rather than a local one,
        // as gdb and eu-stack choose (musl's `__syscall_cp_c`, not its
        // static `sccp`); and of those, the name itself rather than a
        // suffixed version of it ([`prefer_base_name`]).
        let rank = |name: &str, local: bool| {
            let version = match name.find('@') {
                _ if name.ends_with(".localalias") => 0,
                None => 3,
                Some(i) if name[i..].starts_with("@@") => 2,
                Some(_) => 1,
            };
            2 * version + u8::from(!local)
        };
        // They come sorted by start ([`ranges`]): each run of one start is sorted by end, rank
        // and name, in place (sorting them all again took a third of libc's reading).
        debug_assert!(symbols.is_sorted_by_key(|&(start, _, _, _)| start));
        // The rank's place holds whether the name is global or weak until
        // the rank is worked out (for runs of aliases only).
        let mut symbols: Vec<_> =
            symbols.into_iter().map(|(s, e, n, local)| (s, e, u8::from(!local), n)).collect();
        let mut first = 0;
        while first < symbols.len() {
            let start = symbols[first].0;
            let run = symbols[first..].iter().take_while(|s| s.0 == start).count();
            if run > 1 {
                let aliases = &mut symbols[first..first + run];
                aliases.iter_mut().for_each(|(_, _, r, n)| *r = rank(n, *r == 0));
                aliases.sort_unstable();
                prefer_base_name(aliases);
            }
            first += run;
        }
        let mut table = SymbolTable {
            full,
            starts: Vec::with_capacity(symbols.len()),
            ends: Vec::with_capacity(symbols.len()),
            text: String::with_capacity(symbols.iter().map(|(_, _, _, n)| n.len()).sum()),
            bounds: Vec::with_capacity(symbols.len() + 1),
            demangled: Vec::new(),
        };
        table.bounds.push(0);
        for (start, end, _, name) in symbols {
            table.starts.push(start);
            table.ends.push(end);
            table.text.push_str(name);
            table.bounds.push(table.text.len());
        }
        table.demangled.resize_with(table.starts.len(), OnceLock::new);
        table
    }

    /// Name `i`.
    fn name(&self, i: usize) -> Option<&str> {
        Some(&self.text[*self.bounds.get(i)?..*self.bounds.get(i + 1)?])
    }

    /// The symbols for the ELF file at `path`: its own `.symtab`, else, when
    /// it has only `.dynsym` (exported names), the `.symtab` of its separate
    /// debug file under `debug_root` (`.build-id/xx/yyyy.debug`, found by
    /// build id as gdb and eu-stack find it) or in debuginfod's cache, else
    /// its `.dynsym`.
    pub fn for_file(data: &[u8], debug_root: &std::path::Path) -> Result<SymbolTable, ElfError> {
        SymbolTable::read(data, || {
            let id = crate::space::elf::summarize(data).ok()?.build_id?;
            let candidates = [
                crate::space::debugfile::build_id_path(&id, debug_root),
                crate::space::debuginfod::cached(&id, crate::space::debuginfod::Kind::Debuginfo),
            ];
            let mut files =
                candidates.into_iter().flatten().filter_map(|p| crate::space::debugfile::map(&p));
            files.find_map(|bytes| SymbolTable::of_table(&bytes, Table::Symtab).ok().flatten())
        })
    }

    /// The function containing `address` (an ELF address) and the offset
    /// into it, or None: a distant symbol is never borrowed.
    pub fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        let i = self.index(address)?;
        Some((self.name(i)?, address - self.starts[i]))
    }

    /// As [`lookup`](SymbolTable::lookup), with the name demangled; each
    /// name is demangled once, however often it is looked up.
    pub fn lookup_demangled(&self, address: u64) -> Option<(&str, u64)> {
        let (name, start) = self.demangled(self.index(address)?)?;
        Some((name, address - start))
    }

    /// The demangled name and start of symbol `i` (an index [`index`] gave).
    ///
    /// [`index`]: SymbolTable::index
    pub fn demangled(&self, i: usize) -> Option<(&str, u64)> {
        let name = self.name(i)?;
        let demangled = self.demangled[i].get_or_init(|| match demangle(name) {
            Cow::Owned(d) => Some(d.into_boxed_str()),
            Cow::Borrowed(_) => None,
        });
        Some((demangled.as_deref().unwrap_or(name), self.starts[i]))
    }

    /// The index of the symbol containing `address`, as [`lookup`] finds it.
    ///
    /// [`lookup`]: SymbolTable::lookup
    pub fn index(&self, address: u64) -> Option<usize> {
        let mut i = self.starts.partition_point(|&s| s <= address).checked_sub(1)?;
        // Aliases share a start: look at each of them.
        loop {
            if address < self.ends[i] {
                return Some(i);
            }
            if i == 0 || self.starts[i - 1] != self.starts[i] {
                return None;
            }
            i -= 1;
        }
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
}

/// (start, end, name, whether the name is local) of the defined code
/// symbols, bar ARM mapping symbols (`$x`, `$d`).
type Functions<'d> = Vec<(u64, u64, &'d str, bool)>;

/// A PE file's functions (a Windows module's), at its addresses (image base
/// plus RVA): its COFF symbol table's functions (a mingw-w64 program's), or
/// where it has none, its exported names (a DLL's, as debuggers name a
/// module's code without its PDB); and whether they are all of them. Each
/// runs to the end of the function-table (`.pdata`) entry that starts
/// there, else to the next name or the end of its section. None: not a PE
/// file.
fn pe_functions(data: &[u8]) -> Option<(Functions<'_>, bool)> {
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
    let headers = crate::space::pe::headers(data).ok()?;
    let file = object::File::parse(data).ok()?;
    let base = headers.image_base;
    let mut named: Vec<(u64, &str, bool)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter_map(|s| Some((s.address(), s.name().ok()?, s.is_local())))
        .collect();
    let full = !named.is_empty();
    if !full {
        let exports = file.exports().unwrap_or_default();
        named = exports
            .iter()
            .filter_map(|e| Some((e.address(), std::str::from_utf8(e.name()).ok()?, false)))
            .collect();
    }
    named.retain(|(address, name, _)| !name.is_empty() && *address > base);
    named.sort_unstable_by_key(|&(address, ..)| address);
    let ends: std::collections::HashMap<u64, u64> = headers
        .function_ranges(data)
        .filter_map(|(start, end)| {
            Some((base.checked_add(u64::from(start))?, base.checked_add(u64::from(end))?))
        })
        .collect();
    let section_end = |address: u64| {
        file.sections()
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .find(|&(start, end)| start <= address && address < end)
            .map_or(address.saturating_add(1), |(_, end)| end)
    };
    // The next name's address after each (names at one address share it).
    let mut next = vec![None; named.len()];
    for i in (0..named.len().saturating_sub(1)).rev() {
        next[i] = if named[i + 1].0 > named[i].0 { Some(named[i + 1].0) } else { next[i + 1] };
    }
    let mut out = Vec::with_capacity(named.len());
    for (&(start, name, local), next) in named.iter().zip(next) {
        let end = match ends.get(&start) {
            Some(&end) if end > start => end,
            _ => next.unwrap_or_else(|| section_end(start)).min(section_end(start)),
        };
        out.push((start, end, name, local));
    }
    Some((out, full))
}

/// A Mach-O file's functions (an Apple module's or its dSYM's), at its
/// addresses: the defined symbols of its `__TEXT` sections (`nlist`
/// entries, which have no sizes: each runs to the next one's address or
/// its section's end), with the underscore Apple's C compilers put before
/// every name taken off, as dump_syms and atos name them (`_main` is
/// `main`, C++'s `__Z3fooi` `_Z3fooi`). Debugger stabs (`N_STAB`) are
/// left out. None: not a Mach-O file.
fn macho_functions(data: &[u8]) -> Option<(Functions<'_>, bool)> {
    use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolSection};
    let range = crate::space::macho::slice(data, None).ok()?;
    let file = object::File::parse(&data[range]).ok()?;
    if !matches!(file, object::File::MachO32(_) | object::File::MachO64(_)) {
        return None;
    }
    let text: Vec<(object::SectionIndex, u64, u64)> = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| (s.index(), s.address(), s.address().saturating_add(s.size())))
        .collect();
    let mut named: Vec<(u64, &str, bool, u64)> = file
        .symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| {
            let SymbolSection::Section(index) = s.section() else { return None };
            let &(_, _, end) = text.iter().find(|t| t.0 == index)?;
            let name = s.name().ok()?;
            let name = name.strip_prefix('_').unwrap_or(name);
            (!name.is_empty()).then_some((s.address(), name, s.is_local(), end))
        })
        .collect();
    named.sort_unstable_by_key(|&(address, ..)| address);
    let mut out = Vec::with_capacity(named.len());
    for (i, &(start, name, local, section_end)) in named.iter().enumerate() {
        let next = named[i + 1..].iter().map(|n| n.0).find(|&a| a > start);
        let end = next.unwrap_or(section_end).min(section_end);
        if end > start {
            out.push((start, end, name, local));
        }
    }
    Some((out, true))
}

/// The smallest file whose symbol tables are cached ([`SymbolTable::of_table`]):
/// a small one's cost less to read than to look up.
const CACHED_FROM: usize = 256 << 10;

/// Which of an ELF file's symbol tables to read.
#[derive(Clone, Copy)]
enum Table {
    Symtab,
    Dynsym,
}

/// The function symbols of `table` in the ELF file `data` (none if it has no such table).
fn read_functions(data: &[u8], table: Table) -> Result<Functions<'_>, ElfError> {
    if crate::space::elf::is_elf32(data) {
        read_class::<object::elf::FileHeader32<object::LittleEndian>>(data, table)
    } else {
        read_class::<object::elf::FileHeader64<object::LittleEndian>>(data, table)
    }
}

fn read_class<Elf: object::read::elf::FileHeader<Endian = object::LittleEndian>>(
    data: &[u8],
    table: Table,
) -> Result<Functions<'_>, ElfError> {
    let file = object::read::elf::ElfFile::<Elf, &[u8]>::parse(data)
        .map_err(|e| ElfError::Parse(e.to_string()))?;
    let endian = file.endian();
    // Each section's address range, and whether it holds code.
    let sections: Vec<(u64, u64, bool)> = file
        .elf_section_table()
        .iter()
        .map(|h| {
            let start: u64 = h.sh_addr(endian).into();
            let flags: u64 = h.sh_flags(endian).into();
            let end = start.saturating_add(h.sh_size(endian).into());
            (start, end, flags & u64::from(object::elf::SHF_EXECINSTR) != 0)
        })
        .collect();
    let arm = file.elf_header().e_machine(endian) == object::elf::EM_ARM;
    Ok(match table {
        Table::Symtab => functions(file.symbols(), &sections, arm),
        Table::Dynsym => functions(file.dynamic_symbols(), &sections, arm),
    })
}

/// A defined symbol as read: its start and size, the range of its section
/// (None: absolute or special), and its name if it names code.
struct Read<'d> {
    start: u64,
    size: u64,
    section: Option<(u64, u64)>,
    name: Option<&'d str>,
    /// `STB_LOCAL`: a name of its file's own (a static function, a hidden
    /// alias), which a global or weak alias of the same function outranks.
    local: bool,
}

/// The code symbols among `symbols` (`STT_FUNC`/`STT_GNU_IFUNC`, and
/// `STT_NOTYPE` in an executable section), each with the range it names (see
/// [`ranges`]). Section, file and TLS symbols and ARM mapping symbols (`$a`,
/// `$t`, `$d`, `$x`) are left out. `arm`: a 32-bit ARM file, whose Thumb
/// functions' values have bit 0 set (the function starts at the even address).
fn functions<'d, S: ObjectSymbol<'d>>(
    symbols: impl Iterator<Item = S>,
    sections: &[(u64, u64, bool)],
    arm: bool,
) -> Functions<'d> {
    let read = symbols
        .filter(|s| {
            !s.is_undefined()
                && !matches!(s.kind(), SymbolKind::Section | SymbolKind::File | SymbolKind::Tls)
        })
        .filter_map(|s| {
            let name = s.name().ok().filter(|n| !n.is_empty() && !n.starts_with('$'))?;
            let section = s.section_index().and_then(|i| sections.get(i.0)).copied();
            let code = match s.kind() {
                SymbolKind::Text => true,
                // object reads STT_NOTYPE as Unknown.
                SymbolKind::Unknown => section.is_some_and(|(_, _, exec)| exec),
                _ => false,
            };
            let thumb = arm && s.kind() == SymbolKind::Text;
            Some(Read {
                start: if thumb { s.address() & !1 } else { s.address() },
                size: s.size(),
                section: section.map(|(start, end, _)| (start, end)),
                name: code.then_some(name),
                local: s.is_local(),
            })
        })
        .collect();
    ranges(read)
}

/// The range each code symbol names, as elfutils' `dwfl_module_addrsym`
/// (eu-addr2line, eu-stack) finds them. A sized symbol names its bytes. A
/// symbol of size 0 (an assembly label: glibc's `__restore_rt`, ld.so's
/// `_start`) names the addresses from its own up to the next symbol's of any
/// kind, within its section, and none at all if a sized symbol holds its
/// address (an address past that symbol's end is no one's; gdb gives it to
/// the label, but it is padding, never a return address). An absolute one
/// names only its own address.
fn ranges(mut read: Vec<Read<'_>>) -> Functions<'_> {
    read.sort_unstable_by_key(|r| r.start);
    let mut out = Vec::new();
    // The highest end of the sized symbols starting at or below the one at hand.
    let mut sized_end = 0u64;
    // Where the symbols sharing the start of the one at hand end.
    let mut next = 0;
    for i in 0..read.len() {
        let start = read[i].start;
        if i == next {
            next = i + read[i..].iter().take_while(|o| o.start == start).count();
            for o in &read[i..next] {
                if o.size != 0 {
                    sized_end = sized_end.max(o.start.saturating_add(o.size));
                }
            }
        }
        let end = match read[i] {
            Read { name: None, .. } => continue,
            Read { size: 1.., .. } => start.saturating_add(read[i].size),
            _ if sized_end > start => continue,
            Read { section: Some((section_start, section_end)), .. } => {
                if !(section_start..section_end).contains(&start) {
                    continue;
                }
                read.get(next).map_or(section_end, |o| o.start.min(section_end))
            }
            Read { section: None, .. } => start.saturating_add(1),
        };
        if let Some(name) = read[i].name.take() {
            out.push((start, end, name, read[i].local));
        }
    }
    out
}

/// A symbol name as people read it: Rust (legacy and v0) and C++ (Itanium)
/// names demangled, anything else unchanged.
pub fn demangle(name: &str) -> Cow<'_, str> {
    // A PLT entry's name: its symbol's, demangled (rustc-demangle reads
    // `RC4@plt` as a v0 symbol that demangles to nothing).
    if let Some(base) = name.strip_suffix("@plt") {
        return match demangle(base) {
            Cow::Owned(d) => Cow::Owned(d + "@plt"),
            Cow::Borrowed(_) => Cow::Borrowed(name),
        };
    }
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return Cow::Owned(format!("{d:#}"));
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle() {
                return Cow::Owned(without_empty_packs(d));
            }
        }
    }
    Cow::Borrowed(name)
}

/// cpp_demangle (0.5) writes an empty parameter pack next to other
/// arguments as one more, empty, argument: `A<int, >` for `A<int>`
/// (`_ZN1AIiJEE1fEv`; c++filt and gdb write `A<int>::f()`), and an empty
/// function parameter pack as `f<int>(int, )` or `g<>(, int)`. No list of
/// arguments or parameters has an empty one otherwise.
fn without_empty_packs(demangled: String) -> String {
    if [", >", ", )", "(, "].iter().any(|p| demangled.contains(p)) {
        demangled.replace(", >", ">").replace(", )", ")").replace("(, ", "(")
    } else {
        demangled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::symtab::{function_bounds, function_symbol};

    #[test]
    fn an_empty_template_parameter_pack_is_no_argument() {
        // c++filt's: A<int>::f(), void f<>(), and LLVM's PassManager.
        assert_eq!(demangle("_ZN1AIiJEE1fEv"), "A<int>::f()");
        assert_eq!(demangle("_Z1fIJEEvv"), "void f<>()");
        // An empty function parameter pack too: int first_then<int>(int).
        assert_eq!(demangle("_Z10first_thenIiJEEiT_DpT0_"), "int first_then<int>(int)");
        assert_eq!(
            demangle("_ZN4llvm11PassManagerINS_6ModuleENS_15AnalysisManagerIS1_JEEEJEE3runEv"),
            "llvm::PassManager<llvm::Module, llvm::AnalysisManager<llvm::Module>>::run()"
        );
    }

    #[test]
    fn demangles_a_plt_entry_by_its_symbol() {
        assert_eq!(demangle("RC4@plt"), "RC4@plt");
        assert_eq!(demangle("_ZN3foo3barEv@plt"), "foo::bar()@plt");
        assert_eq!(demangle("*ABS*+0x9f550@plt"), "*ABS*+0x9f550@plt");
    }

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

    type Section = Option<(u64, u64)>;

    /// A table of symbols `(start, size, section, name)`; a name of None is a
    /// symbol that names no code (an object).
    fn table(symbols: &[(u64, u64, Section, Option<&str>)]) -> SymbolTable {
        let read = symbols
            .iter()
            .map(|&(start, size, section, name)| Read { start, size, section, name, local: false })
            .collect();
        SymbolTable::from_functions(ranges(read), true)
    }

    #[test]
    fn a_global_or_weak_name_rather_than_a_local_one() {
        const TEXT: Section = Some((0x1000, 0x2000));
        // musl's static sccp, weak_alias'd as __syscall_cp_c; glibc's hidden __GI_ alias.
        let read = |start, name, local| Read { start, size: 0x10, section: TEXT, name, local };
        let t = SymbolTable::from_functions(
            ranges(vec![
                read(0x1000, Some("sccp"), true),
                read(0x1000, Some("__syscall_cp_c"), false),
                read(0x1100, Some("__GI___libc_write"), true),
                read(0x1100, Some("write"), false),
                read(0x1100, Some("__libc_write"), false),
                read(0x1200, Some("alone"), true),
                // An unversioned local name still rather than an old version's.
                read(0x1300, Some("f@V1"), false),
                read(0x1300, Some("f_impl"), true),
            ]),
            true,
        );
        assert_eq!(t.lookup(0x1004), Some(("__syscall_cp_c", 4)));
        assert_eq!(t.lookup(0x1100), Some(("write", 0)));
        assert_eq!(t.lookup(0x1200), Some(("alone", 0)));
        assert_eq!(t.lookup(0x1300), Some(("f_impl", 0)));
    }

    #[test]
    fn a_table_as_the_cache_holds_it() {
        const TEXT: Section = Some((0x1000, 0x2000));
        let t = table(&[
            (0x1000, 0x10, TEXT, Some("_ZN3foo3barEv")),
            (0x1010, 0x30, TEXT, Some("caf\u{e9}")),
            (0x1010, 0x30, TEXT, Some("caf\u{e9}@@V2")),
            (0x1100, 0, TEXT, Some("label")),
            (0x1200, 0x8, TEXT, Some("")),
        ]);
        let bytes = t.encode();
        let back = SymbolTable::decode(&bytes, true).expect("decoded");
        assert_eq!((back.full, back.len()), (true, t.len()));
        for address in 0xff0..0x1220 {
            assert_eq!(back.lookup(address), t.lookup(address), "{address:#x}");
            assert_eq!(back.lookup_demangled(address), t.lookup_demangled(address));
        }
        // Cut anywhere, or a name's bounds inside a character or out of order: not a table.
        for len in [0, 7, 8, 16, bytes.len() - 1] {
            assert!(SymbolTable::decode(&bytes[..len], true).is_none(), "cut at {len}");
        }
        let bounds_at = 8 * (2 + 2 * t.len());
        let mut inside = bytes.clone();
        // Name 2 ("café", after its versioned alias) made to end a byte into its 'é'.
        assert_eq!(t.name(2), Some("caf\u{e9}"));
        let end = u64::from_le_bytes(inside[bounds_at + 24..bounds_at + 32].try_into().unwrap());
        inside[bounds_at + 24..bounds_at + 32].copy_from_slice(&(end - 1).to_le_bytes());
        assert!(SymbolTable::decode(&inside, true).is_none(), "a bound inside a character");
        let mut backwards = bytes.clone();
        backwards[bounds_at + 8..bounds_at + 16].copy_from_slice(&1000u64.to_le_bytes());
        assert!(SymbolTable::decode(&backwards, true).is_none(), "bounds out of order");
    }

    #[test]
    fn zero_size_symbols_reach_the_next_symbol_in_their_section() {
        const TEXT: Section = Some((0x1000, 0x1200));
        let t = table(&[
            (0x1000, 0, TEXT, Some("_start")),
            (0x1010, 0, TEXT, Some("_dl_start_user")),
            (0x1040, 0x20, TEXT, Some("sized")),
            (0x1080, 0, TEXT, Some("after_gap")),
            (0x10a0, 0, TEXT, None), // an object in .text ends the label before it
            (0x10c0, 0x40, TEXT, Some("outer")),
            (0x10d0, 0, TEXT, Some("inside_outer")),
            (0x1180, 0, TEXT, Some("last")),
            (0x1200, 0, TEXT, Some("_etext")), // at the section's end: names nothing
            (0x3000, 0, None, Some("absolute")),
        ]);
        let at = |a| t.lookup(a);
        assert_eq!(at(0x1000), Some(("_start", 0)));
        assert_eq!(at(0x100f), Some(("_start", 0xf)));
        assert_eq!(at(0x1010), Some(("_dl_start_user", 0)));
        assert_eq!(at(0x103f), Some(("_dl_start_user", 0x2f)));
        // A sized symbol names its bytes, and the gap after it is no one's:
        // the label before it does not reach past it.
        assert_eq!(at(0x105f), Some(("sized", 0x1f)));
        assert_eq!(at(0x1060), None);
        assert_eq!(at(0x107f), None);
        assert_eq!(at(0x1080), Some(("after_gap", 0)));
        assert_eq!(at(0x109f), Some(("after_gap", 0x1f)));
        assert_eq!(at(0x10a0), None);
        // A label inside a sized symbol: the sized symbol wins, at the label
        // and past it, and nothing is named past its end.
        assert_eq!(at(0x10d0), Some(("outer", 0x10)));
        assert_eq!(at(0x10ff), Some(("outer", 0x3f)));
        assert_eq!(at(0x1100), None);
        // Up to the end of its section, not past it.
        assert_eq!(at(0x11ff), Some(("last", 0x7f)));
        assert_eq!(at(0x1200), None);
        assert_eq!(at(0x3000), Some(("absolute", 0)));
        assert_eq!(at(0x3001), None);
        assert_eq!(at(0xfff), None);
    }

    #[test]
    fn a_function_is_named_by_its_name_not_its_local_alias() {
        let t = table(&[
            (0x1000, 0x20, Some((0x1000, 0x2000)), Some("wait.localalias")),
            (0x1000, 0x20, Some((0x1000, 0x2000)), Some("wait")),
            (0x1100, 0x20, Some((0x1000, 0x2000)), Some("alone.localalias")),
        ]);
        assert_eq!(t.lookup(0x1010), Some(("wait", 0x10)));
        assert_eq!(t.lookup(0x1100), Some(("alone.localalias", 0)));
    }

    #[test]
    fn a_function_is_named_by_its_name_not_a_suffixed_version_of_it() {
        const TEXT: Section = Some((0x1000, 0x2000));
        // libc6-dbg's aliases of clock_nanosleep, fstat and __stack_chk_fail (in another
        // order than the sort's), and two names where neither is the other's start.
        let t = table(&[
            (0x1000, 0x80, TEXT, Some("clock_nanosleep@GLIBC_2.2.5")),
            (0x1000, 0x80, TEXT, Some("__clock_nanosleep_2")),
            (0x1000, 0x80, TEXT, Some("__GI___clock_nanosleep")),
            (0x1000, 0x80, TEXT, Some("__clock_nanosleep")),
            (0x1000, 0x80, TEXT, Some("clock_nanosleep@@GLIBC_2.17")),
            (0x1100, 0x20, TEXT, Some("fstat64")),
            (0x1100, 0x20, TEXT, Some("__fstat64")),
            (0x1100, 0x20, TEXT, Some("fstat")),
            (0x1200, 0x10, TEXT, Some("__stack_chk_fail_local")),
            (0x1200, 0x10, TEXT, Some("__stack_chk_fail")),
            (0x1300, 0x40, TEXT, Some("__memmove_evex_unaligned")),
            (0x1300, 0x40, TEXT, Some("__memcpy_evex_unaligned")),
            // A shorter name of another size is not an alias of the same function.
            (0x1400, 0x40, TEXT, Some("run_2")),
            (0x1400, 0x8, TEXT, Some("run")),
            // Nor a versioned one of a lower rank.
            (0x1500, 0x10, TEXT, Some("open_2")),
            (0x1500, 0x10, TEXT, Some("open@@V1")),
        ]);
        assert_eq!(t.lookup(0x1010), Some(("__clock_nanosleep", 0x10)));
        assert_eq!(t.lookup(0x1104), Some(("fstat", 4)));
        assert_eq!(t.lookup(0x1200), Some(("__stack_chk_fail", 0)));
        assert_eq!(t.lookup(0x1300), Some(("__memmove_evex_unaligned", 0)));
        assert_eq!(t.lookup(0x1420), Some(("run_2", 0x20)));
        assert_eq!(t.lookup(0x1500), Some(("open_2", 0)));
        // The order is kept through the cache's encoding.
        let back = SymbolTable::decode(&t.encode(), true).expect("decoded");
        for address in [0x1010, 0x1104, 0x1200, 0x1300, 0x1420, 0x1500] {
            assert_eq!(back.lookup(address), t.lookup(address), "{address:#x}");
        }
    }

    #[test]
    fn a_sized_symbol_wins_over_a_label_at_its_start() {
        const TEXT: Section = Some((0, 0x100));
        let t = table(&[(0x10, 0, TEXT, Some("label")), (0x10, 8, TEXT, Some("function"))]);
        assert_eq!(t.lookup(0x10), Some(("function", 0)));
        assert_eq!(t.lookup(0x17), Some(("function", 7)));
        assert_eq!(t.lookup(0x18), None);
    }

    #[test]
    fn its_own_init_reaches_the_end_of_init() {
        // The executable's `_init` (crti.o) has no size: it names all of `.init`.
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let init = object::ObjectSection::address(&file.section_by_name(".init").unwrap());
        let size = object::ObjectSection::size(&file.section_by_name(".init").unwrap());
        let table = SymbolTable::from_elf(&exe).unwrap();
        assert_eq!(table.lookup(init), Some(("_init", 0)));
        assert_eq!(table.lookup(init + size - 1), Some(("_init", size - 1)));
        assert_eq!(table.lookup(init + size), None);
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
            assert!((0..table.len())
                .any(|j| table.name(j) == Some(name) && table.starts[j] == table.starts[i]));
        }
        assert!(table.lookup(0).is_none());
    }

    #[test]
    fn bounds_a_function_as_the_table_does() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let table = SymbolTable::from_elf(&exe).unwrap();
        // Functions of a size the ELF gives (the table also stretches a symbol of size 0,
        // such as _init, to the next one; function_bounds takes only sizes given).
        let file = object::File::parse(&*exe).unwrap();
        let given: std::collections::HashSet<u64> = file
            .symbols()
            .filter_map(|s| function_symbol(&s, false))
            .filter(|&(_, size, _)| size > 0)
            .map(|(start, _, _)| start)
            .collect();
        let sized =
            |i: usize| table.ends[i] - table.starts[i] > 1 && given.contains(&table.starts[i]);
        let mut checked = 0;
        for i in (0..table.len()).step_by(97).filter(|&i| sized(i)) {
            let inside = table.starts[i] + 1;
            let bounds = function_bounds(&exe, inside).unwrap();
            assert_eq!(bounds.covering, Some(table.starts[i]..table.ends[i]));
            let next = table.starts.iter().copied().filter(|&s| s > inside).min();
            assert_eq!(bounds.next_start, next);
            checked += 1;
        }
        assert!(checked > 10);
        // Below every function: nothing covers it, the first function is next.
        let bounds = function_bounds(&exe, 0).unwrap();
        assert_eq!((bounds.covering, bounds.next_start), (None, table.starts.first().copied()));
        assert!(function_bounds(b"not an ELF file", 0).is_err());
    }
}
