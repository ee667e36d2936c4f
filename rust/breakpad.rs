//! Breakpad symbol files (`.sym`, as `dump_syms` writes them): function
//! names, source lines and inline frames of a module whose ELF file is not
//! at hand. A file is mapped and parsed once per process ([`sym_file`]) into
//! compact sorted tables whose names point into the mapping.
//!
//! Records read: `MODULE`, `FILE n path`, `INLINE_ORIGIN n name`,
//! `FUNC [m] addr size param_size name` with its line records
//! (`addr size line file`) and `INLINE depth call_line call_file origin
//! addr size...` records, and `PUBLIC [m] addr param_size name`. Others
//! (`INFO`, `STACK ...`) are skipped. A line that cannot be read is an
//! error naming its number: a damaged file gives no names rather than
//! wrong ones.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::files::FileCache;
use crate::lines::SourceFrame;
use crate::memory::Data;

/// Where a name is in the file: (start, length).
#[derive(Clone, Copy, Debug)]
struct Span(u32, u32);

#[derive(Clone, Copy, Debug)]
struct Func {
    address: u64,
    size: u64,
    name: Span,
    /// Its line records: `lines[first..end]`.
    lines: (u32, u32),
    /// Its inline records: `inlines[first..end]`.
    inlines: (u32, u32),
}

#[derive(Clone, Copy, Debug)]
struct Line {
    address: u64,
    size: u64,
    line: u32,
    file: u32,
}

#[derive(Clone, Copy, Debug)]
struct Inline {
    depth: u32,
    call_line: u32,
    call_file: u32,
    origin: u32,
    address: u64,
    size: u64,
}

/// Why a `.sym` file cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum SymError {
    /// Line `line` (from 1) is not a record that can be read.
    Line { line: usize, reason: &'static str },
    /// No `MODULE` record first.
    NotSymbolFile,
    /// Larger than the tables address (4 GiB).
    TooLarge,
}

impl fmt::Display for SymError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymError::Line { line, reason } => write!(f, "line {line}: {reason}"),
            SymError::NotSymbolFile => f.write_str("not a Breakpad symbol file (no MODULE record)"),
            SymError::TooLarge => f.write_str("larger than 4 GiB"),
        }
    }
}

impl std::error::Error for SymError {}

/// The tables of one `.sym` file.
pub struct BreakpadSymbols {
    data: Data,
    /// (number, path), sorted by number.
    files: Vec<(u32, Span)>,
    /// (number, name), sorted by number.
    origins: Vec<(u32, Span)>,
    /// Sorted by address.
    funcs: Vec<Func>,
    lines: Vec<Line>,
    inlines: Vec<Inline>,
    /// (address, name), sorted by address.
    publics: Vec<(u64, Span)>,
}

fn hex(word: &str) -> Option<u64> {
    u64::from_str_radix(word, 16).ok()
}

fn dec(word: &str) -> Option<u32> {
    word.parse().ok()
}

/// The `n`th space-separated field of `rest` and what follows it.
fn split(rest: &str) -> Option<(&str, &str)> {
    let rest = rest.trim_start_matches(' ');
    let end = rest.find(' ').unwrap_or(rest.len());
    (end > 0).then(|| (&rest[..end], rest[end..].strip_prefix(' ').unwrap_or("")))
}

impl BreakpadSymbols {
    /// The tables of the `.sym` file in `data`.
    pub fn parse(data: Data) -> Result<BreakpadSymbols, SymError> {
        if u32::try_from(data.len()).is_err() {
            return Err(SymError::TooLarge);
        }
        let mut out = BreakpadSymbols {
            data: Data::Owned(Vec::new()),
            files: Vec::new(),
            origins: Vec::new(),
            funcs: Vec::new(),
            lines: Vec::new(),
            inlines: Vec::new(),
            publics: Vec::new(),
        };
        let bytes: &[u8] = &data;
        let mut at = 0usize;
        let mut number = 0usize;
        while at < bytes.len() {
            number += 1;
            let end = bytes[at..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| at + i);
            let start = at;
            at = end + 1;
            let bad = |reason| SymError::Line { line: number, reason };
            let text = std::str::from_utf8(&bytes[start..end]).map_err(|_| bad("not UTF-8"))?;
            let text = text.strip_suffix('\r').unwrap_or(text);
            // The name at the end of a record: from its place in `text` on.
            let span = |rest: &str| {
                let offset = rest.as_ptr() as usize - bytes.as_ptr() as usize;
                Span(offset as u32, rest.len() as u32)
            };
            if number == 1 {
                if !text.starts_with("MODULE ") {
                    return Err(SymError::NotSymbolFile);
                }
                continue;
            }
            let Some((kind, rest)) = split(text) else { continue };
            match kind {
                "FILE" => {
                    let (n, path) = split(rest).ok_or(bad("FILE without a number"))?;
                    out.files.push((dec(n).ok_or(bad("FILE number"))?, span(path)));
                }
                "INLINE_ORIGIN" => {
                    let (n, name) = split(rest).ok_or(bad("INLINE_ORIGIN without a number"))?;
                    out.origins.push((dec(n).ok_or(bad("INLINE_ORIGIN number"))?, span(name)));
                }
                "FUNC" | "PUBLIC" => {
                    let rest = match split(rest) {
                        Some(("m", rest)) => rest,
                        _ => rest,
                    };
                    let (address, rest) = split(rest).ok_or(bad("record cut short"))?;
                    let address = hex(address).ok_or(bad("address not hex"))?;
                    if kind == "PUBLIC" {
                        let (_param, name) = split(rest).ok_or(bad("PUBLIC cut short"))?;
                        out.publics.push((address, span(name)));
                        continue;
                    }
                    let (size, rest) = split(rest).ok_or(bad("FUNC cut short"))?;
                    let size = hex(size).ok_or(bad("FUNC size not hex"))?;
                    let (_param, name) = split(rest).ok_or(bad("FUNC cut short"))?;
                    let (l, i) = (out.lines.len() as u32, out.inlines.len() as u32);
                    out.funcs.push(Func {
                        address,
                        size,
                        name: span(name),
                        lines: (l, l),
                        inlines: (i, i),
                    });
                }
                "INLINE" => {
                    let func = out.funcs.last_mut().ok_or(bad("INLINE before any FUNC"))?;
                    let mut fields = rest.split(' ').filter(|w| !w.is_empty());
                    let mut next = |what| fields.next().ok_or(bad(what));
                    let depth = dec(next("INLINE depth")?).ok_or(bad("INLINE depth"))?;
                    let call_line = dec(next("INLINE line")?).ok_or(bad("INLINE line"))?;
                    let call_file = dec(next("INLINE file")?).ok_or(bad("INLINE file"))?;
                    let origin = dec(next("INLINE origin")?).ok_or(bad("INLINE origin"))?;
                    let mut ranges = 0;
                    while let Some(address) = fields.next() {
                        let size = fields.next().ok_or(bad("INLINE range without a size"))?;
                        let address = hex(address).ok_or(bad("INLINE address not hex"))?;
                        let size = hex(size).ok_or(bad("INLINE size not hex"))?;
                        let range = Inline { depth, call_line, call_file, origin, address, size };
                        out.inlines.push(range);
                        ranges += 1;
                    }
                    if ranges == 0 {
                        return Err(bad("INLINE without a range"));
                    }
                    func.inlines.1 = out.inlines.len() as u32;
                }
                "MODULE" | "INFO" | "STACK" => {}
                _ if kind.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    let func = out.funcs.last_mut().ok_or(bad("a line record before any FUNC"))?;
                    let mut fields = text.split(' ').filter(|w| !w.is_empty());
                    let mut next = |what| fields.next().ok_or(bad(what));
                    let address = hex(next("line address")?).ok_or(bad("line address"))?;
                    let size = hex(next("line size")?).ok_or(bad("line size not hex"))?;
                    let line = dec(next("line number")?).ok_or(bad("line number"))?;
                    let file = dec(next("line file")?).ok_or(bad("line file number"))?;
                    out.lines.push(Line { address, size, line, file });
                    func.lines.1 = out.lines.len() as u32;
                }
                _ => return Err(bad("unknown record")),
            }
        }
        if number == 0 {
            return Err(SymError::NotSymbolFile);
        }
        // Each function's own records sorted; then the functions.
        for f in &out.funcs {
            out.lines[f.lines.0 as usize..f.lines.1 as usize].sort_by_key(|l| l.address);
            out.inlines[f.inlines.0 as usize..f.inlines.1 as usize]
                .sort_by_key(|i| (i.depth, i.address));
        }
        out.funcs.sort_by_key(|f| f.address);
        out.publics.sort_by_key(|p| p.0);
        out.files.sort_by_key(|f| f.0);
        out.origins.sort_by_key(|o| o.0);
        out.data = data;
        Ok(out)
    }

    fn text(&self, span: Span) -> &str {
        let bytes = self.data.get(span.0 as usize..(span.0 as usize + span.1 as usize));
        // Checked as UTF-8 when parsed; a mapped file changed since reads as nothing.
        bytes.and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("")
    }

    fn numbered(&self, table: &[(u32, Span)], n: u32) -> Option<&str> {
        let i = table.binary_search_by_key(&n, |e| e.0).ok()?;
        Some(self.text(table[i].1))
    }

    fn func(&self, address: u64) -> Option<&Func> {
        let i = self.funcs.partition_point(|f| f.address <= address).checked_sub(1)?;
        let f = &self.funcs[i];
        (address - f.address < f.size).then_some(f)
    }

    /// The function at `address` (a module offset) and its start: a `FUNC`
    /// record's, else the nearest `PUBLIC` at or before it (as Breakpad
    /// does, up to the next function).
    pub fn lookup(&self, address: u64) -> Option<(&str, u64)> {
        if let Some(f) = self.func(address) {
            return Some((self.text(f.name), f.address));
        }
        let i = self.publics.partition_point(|p| p.0 <= address).checked_sub(1)?;
        let (start, name) = self.publics[i];
        // Not past a FUNC that starts after the PUBLIC.
        let next = self.funcs.partition_point(|f| f.address <= address);
        if self.funcs.get(next.wrapping_sub(1)).is_some_and(|f| f.address > start) {
            return None;
        }
        Some((self.text(name), start))
    }

    /// The functions at `address`, innermost first, as [`DebugInfo::frames`]
    /// gives them: the innermost at its line record's file and line, each
    /// next one (the function it was inlined into) at the call site.
    ///
    /// [`DebugInfo::frames`]: crate::lines::DebugInfo::frames
    pub fn frames(&self, address: u64) -> Vec<SourceFrame> {
        let Some(f) = self.func(address) else { return Vec::new() };
        let lines = &self.lines[f.lines.0 as usize..f.lines.1 as usize];
        let line = lines
            .get(lines.partition_point(|l| l.address <= address).wrapping_sub(1))
            .filter(|l| address - l.address < l.size);
        // The inline records covering it, outermost (depth 0) first.
        let inlines = &self.inlines[f.inlines.0 as usize..f.inlines.1 as usize];
        let mut chain: Vec<&Inline> = Vec::new();
        for i in inlines.iter().filter(|i| i.address <= address && address - i.address < i.size) {
            if i.depth as usize == chain.len() {
                chain.push(i);
            }
        }
        let mut out = Vec::with_capacity(chain.len() + 1);
        let (mut file, mut line) = (line.map(|l| l.file), line.map(|l| l.line));
        for i in chain.iter().rev() {
            out.push(SourceFrame {
                function: self.numbered(&self.origins, i.origin).map(str::to_owned),
                file: file.and_then(|n| self.numbered(&self.files, n)).map(str::to_owned),
                line,
                column: None,
            });
            (file, line) = (Some(i.call_file), Some(i.call_line));
        }
        out.push(SourceFrame {
            function: Some(self.text(f.name).to_owned()),
            file: file.and_then(|n| self.numbered(&self.files, n)).map(str::to_owned),
            line,
            column: None,
        });
        out
    }
}

/// `.sym` files read, for at most 64 files.
static SYMS: FileCache<Result<Arc<BreakpadSymbols>, Arc<str>>> = FileCache::new(64);

/// The tables of the `.sym` file at `path`, mapped and parsed once per
/// process while the file is unchanged. The error names the file.
pub fn sym_file(path: &Path) -> Result<Arc<BreakpadSymbols>, String> {
    let read = SYMS.get(path, None, |file| {
        let data = crate::files::map_file(file).map_err(|e| Arc::from(e.to_string()))?;
        BreakpadSymbols::parse(Data::Mapped(data)).map(Arc::new).map_err(|e| e.to_string().into())
    });
    let named = |e: &dyn fmt::Display| format!("{}: {e}", path.display());
    match read {
        Ok(Ok(symbols)) => Ok(symbols),
        Ok(Err(e)) => Err(named(&e)),
        Err(e) => Err(named(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYM: &str = "MODULE Linux x86_64 0123456789ABCDEF0123456789ABCDEF0 prog\n\
        INFO CODE_ID 67452301AB89EFCD\n\
        FILE 0 /src/prog.c\n\
        FILE 1 /src/inl.h\n\
        INLINE_ORIGIN 0 helper\n\
        FUNC m 1000 40 0 main\n\
        INLINE 0 12 0 0 1010 10\n\
        1000 10 10 0\n\
        1010 10 3 1\n\
        1020 20 14 0\n\
        PUBLIC 2000 0 exported\n\
        FUNC 3000 8 0 last\n\
        STACK CFI INIT 1000 40 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n";

    fn parsed(text: &str) -> Result<BreakpadSymbols, SymError> {
        BreakpadSymbols::parse(Data::Owned(text.as_bytes().to_vec()))
    }

    #[test]
    fn names_lines_and_inline_frames() {
        let syms = parsed(SYM).unwrap();
        assert_eq!(syms.lookup(0x1024), Some(("main", 0x1000)));
        assert_eq!(syms.lookup(0x2010), Some(("exported", 0x2000)));
        assert_eq!(syms.lookup(0x3004), Some(("last", 0x3000)));
        assert_eq!(syms.lookup(0xfff), None);
        let frames = syms.frames(0x1014);
        let got: Vec<_> =
            frames.iter().map(|f| (f.function.as_deref(), f.file.as_deref(), f.line)).collect();
        assert_eq!(
            got,
            [
                (Some("helper"), Some("/src/inl.h"), Some(3)),
                (Some("main"), Some("/src/prog.c"), Some(12))
            ]
        );
        assert_eq!(syms.frames(0x1004)[0].line, Some(10));
        assert!(syms.frames(0x2004).is_empty());
    }

    #[test]
    fn garbage_is_an_error_naming_the_line() {
        assert!(matches!(parsed("\x7fELF"), Err(SymError::NotSymbolFile)));
        assert!(matches!(parsed(""), Err(SymError::NotSymbolFile)));
        for (text, line) in [
            ("MODULE a b c d\nFUNC zz 1 0 f\n", 2),
            ("MODULE a b c d\n1000 10 3 1\n", 2),
            ("MODULE a b c d\nFUNC 1 2 0 f\nINLINE 0 1 2\n", 3),
            ("MODULE a b c d\nFILE\n", 2),
            ("MODULE a b c d\nFUNC 1 2 0 f\n1 2 99999999999 0\n", 3),
            ("MODULE a b c d\nWHAT 1\n", 2),
        ] {
            match parsed(text) {
                Err(SymError::Line { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: {:?}", other.map(|_| ())),
            }
        }
        // Huge sizes and addresses at the top do not overflow.
        let syms = parsed("MODULE a b c d\nFUNC ffffffffffffffff ffffffffffffffff 0 f\n").unwrap();
        assert_eq!(syms.lookup(u64::MAX), Some(("f", u64::MAX)));
        assert!(!syms.frames(u64::MAX).is_empty());
    }
}
