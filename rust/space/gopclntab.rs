//! Function names from a Go program's `.gopclntab`, the table Go's runtime
//! reads its own tracebacks from, which stripping (`-ldflags="-s -w"`, the
//! usual way Go programs are shipped) leaves in place where `.symtab` goes:
//! a stripped Go program's frames are then named as `go tool addr2line` and
//! Go's own tracebacks name them.
//!
//! The layouts read (Go's `runtime/symtab.go`, `debug/gosym`): Go 1.2-1.15
//! (magic `0xfffffffb`), 1.16-1.17 (`0xfffffffa`), 1.18-1.19 (`0xfffffff0`)
//! and 1.20 on (`0xfffffff1`). Every offset is checked against the section:
//! a damaged table gives fewer functions (or none), never a panic.

/// The functions of the `.gopclntab` of ELF file `data`: start, end (ELF
/// addresses) and name, in address order; none where there is no such
/// section or it is not a table of a known layout.
pub fn functions(data: &[u8]) -> Vec<(u64, u64, &str)> {
    let Some(table) = section(data) else { return Vec::new() };
    Table::parse(table).map(|t| t.functions()).unwrap_or_default()
}

/// `.gopclntab`'s bytes.
fn section(data: &[u8]) -> Option<&[u8]> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).ok()?;
    file.section_by_name(".gopclntab")?.data().ok()
}

/// How the table lays out its function table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// 1.2-1.15: (entry, offset) pairs of words after the header; names at
    /// offsets from the table's start.
    Go12,
    /// 1.16-1.17: the same pairs, at an offset the header gives; names in a
    /// table of their own.
    Go116,
    /// 1.18 on: (entry, offset) pairs of u32, entries from the text's start.
    Go118,
}

struct Table<'d> {
    data: &'d [u8],
    layout: Layout,
    word: usize,
    nfunc: usize,
    text_start: u64,
    /// Where the names are (`funcnametab`; the table's start for 1.2).
    names: usize,
    /// Where the function table is, and the `_func` records its offsets
    /// are from.
    functab: usize,
    funcdata: usize,
}

impl<'d> Table<'d> {
    fn parse(data: &'d [u8]) -> Option<Table<'d>> {
        let magic = u32::from_le_bytes(data.get(..4)?.try_into().ok()?);
        let layout = match magic {
            0xffff_fffb => Layout::Go12,
            0xffff_fffa => Layout::Go116,
            0xffff_fff0 | 0xffff_fff1 => Layout::Go118,
            _ => return None,
        };
        let (pad, word) = (data.get(4..6)?, *data.get(7)? as usize);
        if pad != [0, 0] || !matches!(word, 4 | 8) {
            return None;
        }
        let mut t = Table {
            data,
            layout,
            word,
            nfunc: 0,
            text_start: 0,
            names: 0,
            functab: 0,
            funcdata: 0,
        };
        let fields: Vec<u64> = (0..8).map_while(|i| t.word_at(8 + i * word)).collect();
        let field = |i: usize| fields.get(i).copied();
        let offset = |i: usize| field(i).and_then(|v| usize::try_from(v).ok());
        let nfunc = field(0)?;
        match layout {
            Layout::Go12 => t.functab = 8 + word,
            Layout::Go116 => {
                t.names = offset(2)?;
                t.functab = offset(6)?;
                t.funcdata = t.functab;
            }
            Layout::Go118 => {
                t.text_start = field(2)?;
                t.names = offset(3)?;
                t.functab = offset(7)?;
                t.funcdata = t.functab;
            }
        }
        // Each function takes a pair in the table at least: a count the
        // section cannot hold is damage.
        let pair = if layout == Layout::Go118 { 8 } else { 2 * word };
        t.nfunc = usize::try_from(nfunc).ok().filter(|&n| n <= data.len() / pair)?;
        Some(t)
    }

    fn word_at(&self, at: usize) -> Option<u64> {
        let bytes = self.data.get(at..at.checked_add(self.word)?)?;
        Some(match self.word {
            4 => u64::from(u32::from_le_bytes(bytes.try_into().ok()?)),
            _ => u64::from_le_bytes(bytes.try_into().ok()?),
        })
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.data.get(at..at.checked_add(4)?)?.try_into().ok()?))
    }

    /// Function `i`'s entry and the offset of its `_func` record (for
    /// `i == nfunc`: the end of the last function, and no record).
    fn entry(&self, i: usize) -> Option<(u64, usize)> {
        match self.layout {
            Layout::Go118 => {
                let at = self.functab.checked_add(i.checked_mul(8)?)?;
                let entry = self.text_start.checked_add(u64::from(self.u32_at(at)?))?;
                let record = if i < self.nfunc { self.u32_at(at + 4)? as usize } else { 0 };
                Some((entry, record))
            }
            _ => {
                let at = self.functab.checked_add(i.checked_mul(2 * self.word)?)?;
                let entry = self.word_at(at)?;
                let record = match i < self.nfunc {
                    true => usize::try_from(self.word_at(at + self.word)?).ok()?,
                    false => 0,
                };
                Some((entry, record))
            }
        }
    }

    /// The name of the function whose `_func` record is at `record` (from
    /// `funcdata`): its name offset follows its entry.
    fn name(&self, record: usize) -> Option<&'d str> {
        let at = self.funcdata.checked_add(record)?;
        let entry_size = if self.layout == Layout::Go118 { 4 } else { self.word };
        let offset = self.u32_at(at.checked_add(entry_size)?)? as i32;
        let start = self.names.checked_add(usize::try_from(offset).ok()?)?;
        let bytes = self.data.get(start..)?;
        let len = bytes.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&bytes[..len]).ok().filter(|n| !n.is_empty())
    }

    fn functions(&self) -> Vec<(u64, u64, &'d str)> {
        let mut out = Vec::with_capacity(self.nfunc);
        let Some(mut here) = self.entry(0) else { return out };
        for i in 0..self.nfunc {
            let Some(next) = self.entry(i + 1) else { break };
            if let Some(name) = self.name(here.1) {
                if here.0 < next.0 {
                    out.push((here.0, next.0, name));
                }
            }
            here = next;
        }
        out.sort_unstable_by_key(|f| (f.0, f.1));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go 1.18 table of two functions, `main.a` at 0x1000 and `main.b` at
    /// 0x1010, the text ending at 0x1030.
    fn go118() -> Vec<u8> {
        let mut t = vec![0xf0, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        let header_end = 8 + 8 * 8;
        let names = header_end;
        let name_bytes = b"main.a\0main.b\0";
        let functab = names + name_bytes.len();
        // nfunc, nfiles, textStart, funcnametab, cutab, filetab, pctab, pcln.
        for v in [2, 0, 0x1000, names as u64, 0, 0, 0, functab as u64] {
            t.extend_from_slice(&v.to_le_bytes());
        }
        t.extend_from_slice(name_bytes);
        // Pairs (entry offset, _func offset), then the end, then the records.
        let records = 3 * 8;
        for (entry, record) in [(0u32, records), (0x10, records + 8), (0x30, 0)] {
            t.extend_from_slice(&entry.to_le_bytes());
            t.extend_from_slice(&(record as u32).to_le_bytes());
        }
        for (entry, name) in [(0u32, 0u32), (0x10, 7)] {
            t.extend_from_slice(&entry.to_le_bytes());
            t.extend_from_slice(&name.to_le_bytes());
        }
        t
    }

    #[test]
    fn a_go_1_18_table_and_its_damage() {
        let t = go118();
        let functions = Table::parse(&t).expect("a table").functions();
        assert_eq!(functions, [(0x1000, 0x1010, "main.a"), (0x1010, 0x1030, "main.b")]);
        // Cut anywhere, or a count the section cannot hold: fewer, never a panic.
        for len in 0..t.len() {
            let cut = Table::parse(&t[..len]).map(|t| t.functions()).unwrap_or_default();
            assert!(cut.len() <= 2 && cut.iter().all(|f| functions.contains(f)), "{len}");
        }
        let mut huge = t.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Table::parse(&huge).is_none());
        let mut other = t.clone();
        other[0] = 0xf5;
        assert!(Table::parse(&other).is_none());
        // Any byte of the table set to any of a few values, in each layout: names
        // from the table's bytes or none, never a panic.
        for magic in [0xfb, 0xfa, 0xf0, 0xf1] {
            for at in 0..t.len() {
                for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                    let mut bad = t.clone();
                    bad[0] = magic;
                    bad[at] = value;
                    for (start, end, name) in
                        Table::parse(&bad).map(|t| t.functions()).unwrap_or_default()
                    {
                        assert!(start < end && !name.is_empty());
                    }
                }
            }
        }
    }
}
