//! Breakpad symbol files (`.sym`, as `dump_syms` writes them): function
//! names, source lines and inline frames of a module whose ELF file is not
//! at hand. A file is mapped and parsed once per process
//! (`crate::symbolize::symbols_file`) into compact sorted tables whose
//! names point into the mapping.
//!
//! Records read: `MODULE`, `FILE n path`, `INLINE_ORIGIN n name`,
//! `FUNC [m] addr size param_size name` with its line records
//! (`addr size line file`) and `INLINE depth call_line call_file origin
//! addr size...` records, `PUBLIC [m] addr param_size name`, the unwind
//! rules of `STACK CFI INIT addr size rules` and `STACK CFI addr rules`
//! (see [`BreakpadSymbols::cfi_row`]), and Windows x86 frame data, `STACK
//! WIN type addr size prolog epilog params saved locals max_stack
//! has_program program|allocates_ebp` (types 0, FPO, and 4, frame data
//! programs: see [`crate::unwind::frame_data`]). Others (`INFO`, the other
//! `STACK WIN` types) are skipped. A line that cannot be read is an error
//! naming its number: a damaged file gives no names rather than wrong ones.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::arch::{Arch, NUM_REGS};
use crate::source::memory::Data;
use crate::symbolize::lines::SourceFrame;
use crate::symbolize::stack_win::{find_win_frame, push_win_frame, WinFrame};
use crate::unwind::cfi::{CfaRule, LookupError, RegRule, Row};
use crate::unwind::frame_data::FrameData;

/// Where a name is in the file: (start, length).
#[derive(Clone, Copy, Debug)]
struct Span(u32, u32);

#[derive(Clone, Copy, Debug)]
struct Func {
    address: u64,
    size: u64,
    /// Bytes of parameters (Windows x86: what a `__stdcall` function pops).
    params: u32,
    name: Span,
    /// Its line records: `lines[first..end]`.
    lines: (u32, u32),
    /// Its inline records: `inlines[first..end]`.
    inlines: (u32, u32),
}

/// A `STACK CFI INIT` record: the rules at `address`, and the `STACK CFI`
/// records after it that change them further on.
#[derive(Clone, Copy, Debug)]
struct CfiInit {
    address: u64,
    size: u64,
    rules: Span,
    /// Its `STACK CFI` records: `cfi_deltas[first..end]`.
    deltas: (u32, u32),
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
    /// The `MODULE` record's debug id (its fourth word).
    debug_id: Span,
    /// (number, path), sorted by number.
    files: Vec<(u32, Span)>,
    /// (number, name), sorted by number.
    origins: Vec<(u32, Span)>,
    /// Sorted by address.
    funcs: Vec<Func>,
    lines: Vec<Line>,
    inlines: Vec<Inline>,
    /// (address, parameter size, name), sorted by address.
    publics: Vec<(u64, u32, Span)>,
    /// Sorted by address.
    cfi: Vec<CfiInit>,
    /// (address, rules) of the `STACK CFI` records, each INIT's in address order.
    cfi_deltas: Vec<(u64, Span)>,
    /// `STACK WIN` records: [frame data (type 4), FPO (type 0)], each
    /// sorted by address, none overlapping (see [`push_win_frame`]).
    win: [Vec<WinFrame<Span>>; 2],
}

fn hex(word: &str) -> Option<u64> {
    u64::from_str_radix(word, 16).ok()
}

fn hex32(word: &str) -> Option<u32> {
    u32::from_str_radix(word, 16).ok()
}

/// The fields after `STACK WIN`: the list the record goes to (0: frame
/// data, type 4; 1: FPO, type 0; None: another type, skipped) and the
/// record. `span` places the program in the file.
fn win_frame<'t>(
    rest: &'t str,
    span: impl Fn(&'t str) -> Span,
) -> Option<(Option<usize>, WinFrame<Span>)> {
    let mut rest = rest;
    let mut next = || {
        let (word, after) = split(rest)?;
        rest = after;
        Some(word)
    };
    let kind = match next()? {
        "4" => Some(0),
        "0" => Some(1),
        _ => None,
    };
    let address = hex(next()?)?;
    let size = hex(next()?)?;
    let (_prolog, _epilog) = (hex32(next()?)?, hex32(next()?)?);
    let (params, saved, locals) = (hex32(next()?)?, hex32(next()?)?, hex32(next()?)?);
    let _max_stack = hex32(next()?)?;
    let (program, allocates_base_pointer) = match next()? {
        "1" => (Some(span(rest.trim_end())), false),
        "0" => (None, next()? == "1"),
        _ => return None,
    };
    if program.is_some_and(|p| p.1 == 0) {
        return None;
    }
    Some((kind, WinFrame { address, size, params, saved, locals, program, allocates_base_pointer }))
}

fn dec(word: &str) -> Option<u32> {
    word.parse().ok()
}

/// The `n`th space-separated field of `rest` and what follows it.
fn split(rest: &str) -> Option<(&str, &str)> {
    let rest = rest.trim_start_matches(' ');
    // A byte loop: fields are short, where a search's set-up costs more.
    let end = rest.bytes().position(|b| b == b' ').unwrap_or(rest.len());
    // What follows is a slice of `rest` even when empty: its place in the file is a name's.
    (end > 0).then(|| (&rest[..end], rest[end..].strip_prefix(' ').unwrap_or(&rest[end..])))
}

/// The space-separated fields of a record, as [`split`] cuts them.
struct Fields<'a>(&'a str);

impl<'a> Iterator for Fields<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        let (field, rest) = split(self.0)?;
        self.0 = rest;
        Some(field)
    }
}

impl BreakpadSymbols {
    /// The tables of the `.sym` file in `data`.
    pub fn parse(data: Data) -> Result<BreakpadSymbols, SymError> {
        if u32::try_from(data.len()).is_err() {
            return Err(SymError::TooLarge);
        }
        let mut out = BreakpadSymbols {
            data: Data::Owned(Vec::new()),
            debug_id: Span(0, 0),
            files: Vec::new(),
            origins: Vec::new(),
            funcs: Vec::new(),
            lines: Vec::new(),
            inlines: Vec::new(),
            publics: Vec::new(),
            cfi: Vec::new(),
            cfi_deltas: Vec::new(),
            win: [Vec::new(), Vec::new()],
        };
        let bytes: &[u8] = &data;
        // Checked whole (the check is fast on long runs), lines then cut from it.
        let all = std::str::from_utf8(bytes).map_err(|e| SymError::Line {
            line: 1 + memchr::memchr_iter(b'\n', &bytes[..e.valid_up_to()]).count(),
            reason: "not UTF-8",
        })?;
        let mut at = 0usize;
        let mut number = 0usize;
        while at < bytes.len() {
            number += 1;
            let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
            let start = at;
            at = end + 1;
            let bad = |reason| SymError::Line { line: number, reason };
            let text = &all[start..end];
            let text = text.strip_suffix('\r').unwrap_or(text);
            // The name at the end of a record: from its place in `text` on.
            let span = |rest: &str| {
                // Always a slice of the file; an empty name anywhere else reads as one.
                match (rest.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize) {
                    Some(offset) if offset + rest.len() <= bytes.len() => {
                        Span(offset as u32, rest.len() as u32)
                    }
                    _ => Span(0, 0),
                }
            };
            if number == 1 {
                if !text.starts_with("MODULE ") {
                    return Err(SymError::NotSymbolFile);
                }
                if let Some(id) = text.split_ascii_whitespace().nth(3) {
                    out.debug_id = span(id);
                }
                continue;
            }
            let Some((kind, rest)) = split(text) else { continue };
            // Line records first: most of a file's records are lines.
            if kind.bytes().all(|b| b.is_ascii_hexdigit()) {
                let func = out.funcs.last_mut().ok_or(bad("a line record before any FUNC"))?;
                let mut fields = Fields(text);
                let mut next = |what| fields.next().ok_or(bad(what));
                let address = hex(next("line address")?).ok_or(bad("line address"))?;
                let size = hex(next("line size")?).ok_or(bad("line size not hex"))?;
                let line = dec(next("line number")?).ok_or(bad("line number"))?;
                let file = dec(next("line file")?).ok_or(bad("line file number"))?;
                out.lines.push(Line { address, size, line, file });
                func.lines.1 = out.lines.len() as u32;
                continue;
            }
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
                    let params = |p| hex32(p).ok_or(bad("parameter size not hex"));
                    if kind == "PUBLIC" {
                        let (p, name) = split(rest).ok_or(bad("PUBLIC cut short"))?;
                        out.publics.push((address, params(p)?, span(name)));
                        continue;
                    }
                    let (size, rest) = split(rest).ok_or(bad("FUNC cut short"))?;
                    let size = hex(size).ok_or(bad("FUNC size not hex"))?;
                    let (p, name) = split(rest).ok_or(bad("FUNC cut short"))?;
                    let (l, i) = (out.lines.len() as u32, out.inlines.len() as u32);
                    out.funcs.push(Func {
                        address,
                        size,
                        params: params(p)?,
                        name: span(name),
                        lines: (l, l),
                        inlines: (i, i),
                    });
                }
                "INLINE" => {
                    let func = out.funcs.last_mut().ok_or(bad("INLINE before any FUNC"))?;
                    let mut fields = Fields(rest);
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
                "STACK" => {
                    if let Some(("WIN", rest)) = split(rest) {
                        let (kind, frame) = win_frame(rest, span).ok_or(bad("STACK WIN"))?;
                        if let Some(list) = kind.and_then(|k| out.win.get_mut(k)) {
                            push_win_frame(list, frame);
                        }
                        continue;
                    }
                    let Some(("CFI", rest)) = split(rest) else { continue };
                    let (address, rest) = split(rest).ok_or(bad("STACK CFI cut short"))?;
                    if address == "INIT" {
                        let (address, rest) = split(rest).ok_or(bad("STACK CFI cut short"))?;
                        let address = hex(address).ok_or(bad("STACK CFI address not hex"))?;
                        let (size, rules) = split(rest).ok_or(bad("STACK CFI cut short"))?;
                        let size = hex(size).ok_or(bad("STACK CFI size not hex"))?;
                        let d = out.cfi_deltas.len() as u32;
                        let rules = span(rules);
                        out.cfi.push(CfiInit { address, size, rules, deltas: (d, d) });
                    } else {
                        let init = out.cfi.last_mut().ok_or(bad("STACK CFI before any INIT"))?;
                        let address = hex(address).ok_or(bad("STACK CFI address not hex"))?;
                        out.cfi_deltas.push((address, span(rest)));
                        init.deltas.1 = out.cfi_deltas.len() as u32;
                    }
                }
                "MODULE" | "INFO" => {}
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
        for c in &out.cfi {
            out.cfi_deltas[c.deltas.0 as usize..c.deltas.1 as usize].sort_by_key(|d| d.0);
        }
        out.funcs.sort_by_key(|f| f.address);
        out.cfi.sort_by_key(|c| c.address);
        for list in &mut out.win {
            list.sort_by_key(|w| w.address);
        }
        out.publics.sort_by_key(|p| p.0);
        out.files.sort_by_key(|f| f.0);
        out.origins.sort_by_key(|o| o.0);
        out.data = data;
        Ok(out)
    }

    /// The debug id the `MODULE` record names: the module this file is the
    /// symbols of, and of no other.
    pub fn debug_id(&self) -> &str {
        self.text(self.debug_id)
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
        let (start, _, name) = self.public(address)?;
        Some((self.text(name), start))
    }

    /// The `PUBLIC` record at or before `address`, where no `FUNC` record
    /// starts between them.
    fn public(&self, address: u64) -> Option<(u64, u32, Span)> {
        let i = self.publics.partition_point(|p| p.0 <= address).checked_sub(1)?;
        let public = self.publics[i];
        // Not past a FUNC that starts after the PUBLIC.
        let next = self.funcs.partition_point(|f| f.address <= address);
        if self.funcs.get(next.wrapping_sub(1)).is_some_and(|f| f.address > public.0) {
            return None;
        }
        Some(public)
    }

    /// The functions at `address`, innermost first, as [`DebugInfo::frames`]
    /// gives them: the innermost at its line record's file and line, each
    /// next one (the function it was inlined into) at the call site.
    ///
    /// [`DebugInfo::frames`]: crate::symbolize::lines::DebugInfo::frames
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

impl BreakpadSymbols {
    /// Whether the file has `STACK CFI` records.
    pub fn has_cfi(&self) -> bool {
        !self.cfi.is_empty()
    }

    /// The rules in force at `address` (a module offset), as the DWARF CFI
    /// path gives them ([`crate::unwind::cfi::Module::find_row`]), with the
    /// `STACK CFI INIT` record's range; `LookupError::NoFde` where no record
    /// covers it.
    ///
    /// The rules are postfix expressions per register, as `dump_syms`
    /// writes them from the DWARF CFI: `.cfa: $rsp 16 + .ra: .cfa -8 + ^
    /// $rbx: .cfa -16 + ^` (aarch64's names without `$`: `.cfa: sp 16 +
    /// x29: .cfa -16 + ^`). Those of the forms DWARF rows have are taken:
    /// the CFA a register plus or minus a constant, a register saved at
    /// `.cfa N + ^` (or its value `.cfa N +`, or in another register). A
    /// row without a `.ra` rule is the outermost frame's (`dump_syms`
    /// leaves out the undefined return address of `_start` and `clone`).
    /// Anything else (other arithmetic, `^` elsewhere, an unknown register)
    /// is `LookupError::Breakpad`, and the walk falls back as it does where
    /// DWARF CFI fails.
    pub fn cfi_row(&self, arch: Arch, address: u64) -> Result<(Row, Range<u64>), LookupError> {
        let i = self.cfi.partition_point(|c| c.address <= address).checked_sub(1);
        let init = i.map(|i| self.cfi[i]).ok_or(LookupError::NoFde)?;
        if address - init.address >= init.size {
            return Err(LookupError::NoFde);
        }
        // The INIT's rules, then each later record's up to the address: the
        // last expression given for a register is in force.
        let deltas = &self.cfi_deltas[init.deltas.0 as usize..init.deltas.1 as usize];
        let texts = std::iter::once(init.rules)
            .chain(deltas.iter().take_while(|d| d.0 <= address).map(|d| d.1))
            .map(|span| self.text(span));
        let mut rules: Vec<(&str, Vec<&str>)> = Vec::new();
        for text in texts {
            for word in text.split_ascii_whitespace() {
                if let Some(name) = word.strip_suffix(':') {
                    // Last, as the words of its expression follow.
                    rules.retain(|(n, _)| *n != name);
                    rules.push((name, Vec::new()));
                } else {
                    let (_, expr) = rules.last_mut().ok_or(unsupported("a rule without a name"))?;
                    expr.push(word);
                }
            }
        }
        let cfa = rules.iter().find(|(n, _)| *n == ".cfa").ok_or(unsupported("no .cfa rule"))?;
        let cfa = match cfi_value(arch, &cfa.1)? {
            Value::Register(reg, offset) => CfaRule::RegOffset { reg, offset },
            _ => return Err(unsupported("a CFA that is not a register plus a constant")),
        };
        let ra = arch.ra();
        let mut row = Row::new(cfa, ra, false);
        let mut has_ra = false;
        for (name, expr) in &rules {
            let reg = match *name {
                ".cfa" => continue,
                ".ra" => {
                    has_ra = true;
                    ra
                }
                name => match cfi_register(arch, name)? {
                    // `.ra` says what the return-address column holds.
                    r if r == ra && rules.iter().any(|(n, _)| *n == ".ra") => continue,
                    r => r,
                },
            };
            let rule = match cfi_value(arch, expr)? {
                Value::Cfa(offset, true) => RegRule::Offset(offset),
                Value::Cfa(offset, false) => RegRule::ValOffset(offset),
                Value::Register(r, 0) if r == reg => RegRule::SameValue,
                Value::Register(r, 0) => RegRule::Register(r),
                Value::Register(..) => return Err(unsupported("a register plus a constant")),
            };
            if !row.push(reg, rule) {
                return Err(unsupported("more rules than registers"));
            }
        }
        if !has_ra {
            row.push(ra, RegRule::Undefined);
        }
        Ok((row, init.address..init.address.saturating_add(init.size)))
    }
}

impl BreakpadSymbols {
    /// Whether the file has Windows x86 frame data (`STACK WIN` records).
    pub fn has_frame_data(&self) -> bool {
        self.win.iter().any(|list| !list.is_empty())
    }

    /// The `STACK WIN` record at `address` (a module offset): a frame data
    /// program's before FPO data's, as Breakpad and rust-minidump prefer.
    pub fn frame_data(&self, address: u64) -> Option<FrameData<'_>> {
        Some(find_win_frame(&self.win, address)?.data(|span| self.text(span)))
    }

    /// The extents of the functions the file knows: each `FUNC` record's,
    /// and each `PUBLIC` record's outside them, up to the next record's
    /// start.
    pub fn function_ranges(&self) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> =
            self.funcs.iter().map(|f| f.address..f.address.saturating_add(f.size)).collect();
        let mut starts: Vec<u64> = self.funcs.iter().map(|f| f.address).collect();
        starts.extend(self.publics.iter().map(|p| p.0));
        starts.sort_unstable();
        for &(address, ..) in &self.publics {
            if self.func(address).is_some() {
                continue;
            }
            let next = starts.partition_point(|&s| s <= address);
            if let Some(&end) = starts.get(next) {
                out.push(address..end);
            }
        }
        out
    }

    /// The parameter size of the function at `address`, as rust-minidump
    /// takes it: its `STACK WIN` record's, else its `FUNC` record's, else
    /// its `PUBLIC` record's.
    pub fn parameter_size(&self, address: u64) -> Option<u32> {
        if let Some(f) = self.func(address) {
            let win = self.frame_data(address).map(|d| d.parameter_size);
            return Some(win.unwrap_or(f.params));
        }
        self.public(address).map(|p| p.1)
    }
}

impl crate::unwind::cfi::ForeignCfi for BreakpadSymbols {
    fn row(&self, arch: Arch, offset: u64, _exact: bool) -> Result<(Row, Range<u64>), LookupError> {
        self.cfi_row(arch, offset)
    }

    fn frame_data(&self, offset: u64) -> Option<FrameData<'_>> {
        BreakpadSymbols::frame_data(self, offset)
    }

    fn parameter_size(&self, offset: u64) -> Option<u32> {
        BreakpadSymbols::parameter_size(self, offset)
    }

    fn functions(&self) -> Vec<Range<u64>> {
        self.function_ranges()
    }

    fn function_start(&self, offset: u64) -> bool {
        self.lookup(offset).is_some_and(|(_, start)| start == offset)
    }
}

fn unsupported(why: &'static str) -> LookupError {
    LookupError::Breakpad(why)
}

/// What a rule's expression computes, in the forms a DWARF row has.
enum Value {
    /// A register's value plus a constant.
    Register(u16, i64),
    /// The CFA plus a constant, and whether the word there is read (`^`).
    Cfa(i64, bool),
}

/// The DWARF column of a register of a `STACK CFI` rule: `$rsp`, `x29`, `sp`.
fn cfi_register(arch: Arch, name: &str) -> Result<u16, LookupError> {
    let name = name.strip_prefix('$').unwrap_or(name);
    match arch.register_by_name(name) {
        Some(Some(reg)) if (reg as usize) < NUM_REGS => Ok(reg),
        Some(None) => arch.pc_column().ok_or(unsupported("a rule for the pc")),
        _ => Err(unsupported("a register this architecture does not have")),
    }
}

/// A postfix expression of the forms `BASE`, `BASE N +`, `BASE N -`, each
/// optionally followed by `^` (BASE a register or `.cfa`).
fn cfi_value(arch: Arch, words: &[&str]) -> Result<Value, LookupError> {
    let (words, deref) = match words.split_last() {
        Some((&"^", rest)) => (rest, true),
        _ => (words, false),
    };
    let (base, offset) = match *words {
        [base] => (base, 0),
        [base, n, op @ ("+" | "-")] => {
            let n = parse_number(n).ok_or(unsupported("an operand that is not a number"))?;
            (base, if op == "+" { n } else { n.checked_neg().ok_or(unsupported("overflow"))? })
        }
        _ => return Err(unsupported("an expression of another form")),
    };
    match (base, deref) {
        (".cfa", _) => Ok(Value::Cfa(offset, deref)),
        (_, true) => Err(unsupported("a word read other than at the CFA")),
        (reg, false) => Ok(Value::Register(cfi_register(arch, reg)?, offset)),
    }
}

fn parse_number(word: &str) -> Option<i64> {
    match word.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => word.parse().ok(),
    }
}

/// How many times a `.sym` file was parsed in this process.
static PARSES: AtomicU64 = AtomicU64::new(0);

/// How many times a `.sym` file was parsed in this process (not the times
/// `crate::symbolize::symbols_file` gave one already parsed): for tests
/// and benchmarks.
pub fn parse_count() -> u64 {
    PARSES.load(Ordering::Relaxed)
}

/// [`BreakpadSymbols::parse`], counted ([`parse_count`]).
pub fn parse_counted(data: Data) -> Result<BreakpadSymbols, SymError> {
    PARSES.fetch_add(1, Ordering::Relaxed);
    BreakpadSymbols::parse(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::frame_data::FrameRule;

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

    const CFI: &str = "MODULE Linux x86_64 0123456789ABCDEF0123456789ABCDEF0 prog\n\
        STACK CFI INIT 1000 40 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n\
        STACK CFI 1001 .cfa: $rsp 16 + $rbp: .cfa -16 + ^\n\
        STACK CFI 1004 .cfa: $rbp 16 +\n\
        STACK CFI INIT 2000 10 .cfa: $rsp 8 +\n\
        STACK CFI INIT 3000 10 .cfa: $rdi 0 + .ra: $rdx $rsp: $r8 $rbx: $rbx $r12: .cfa 16 +\n\
        STACK WIN 4 1000 10 0 0 0 0 0 0 1 $eip 4 + ^ =\n\
        STACK CFI INIT 5000 10 .cfa: $rsp 8 + 4 *\n\
        STACK CFI INIT 5010 10 .cfa: $rsp 8 + .ra: $rsp ^\n\
        STACK CFI INIT 5020 10 .cfa: .cfa 8 + .ra: .cfa -8 + ^\n\
        STACK CFI INIT 5030 10 .cfa: $rsp 8 + .ra: .cfa -8 + ^ $xmm0: .cfa -16 + ^\n\
        STACK CFI INIT 5040 10 .ra: .cfa -8 + ^\n";

    /// `STACK WIN` records as dump_syms writes them from a PDB (test_app.sym
    /// of rust-minidump's test data has both kinds, and these overlaps): a
    /// program before FPO data; a record starting inside the one before
    /// ends it; parameter sizes from the record, else `FUNC`, else `PUBLIC`.
    #[test]
    fn windows_frame_data() {
        let text = "MODULE windows x86 5A9832E5287241C1838ED98914E9B7FF1 test_app.pdb\n\
            FUNC 1000 40 c f\n\
            FUNC 2000 20 4 g\n\
            PUBLIC 3000 10 h\n\
            STACK WIN 0 1000 40 3 0 8 4 10 0 0 1\n\
            STACK WIN 4 1000 20 3 0 c 4 10 0 1 $T0 .raSearch = $eip $T0 ^ = $esp $T0 4 + =\n\
            STACK WIN 4 1002 1e 1 0 c 0 10 0 1 $T0 $ebp = $eip $T0 4 + ^ =\n\
            STACK WIN 4 1002 8 1 0 c 0 10 0 1 $T1 1 =\n\
            STACK WIN 4 4000 0 1 0 0 0 0 0 1 $T1 1 =\n\
            STACK WIN 5 5000 10 0 0 0 0 0 0 0 0\n";
        let syms = parsed(text).unwrap();
        assert!(syms.has_frame_data() && !syms.has_cfi());
        let d = syms.frame_data(0x1001).unwrap();
        assert_eq!((d.parameter_size, d.saved_register_size, d.local_size), (0xc, 4, 0x10));
        assert!(matches!(d.rule, FrameRule::Program(p) if p.starts_with("$T0 .raSearch =")));
        assert!(
            matches!(syms.frame_data(0x1002).unwrap().rule, FrameRule::Program(p) if p.starts_with("$T0 $ebp ="))
        );
        assert!(matches!(syms.frame_data(0x101f).unwrap().rule, FrameRule::Program(_)));
        let fpo = syms.frame_data(0x1020).unwrap();
        assert_eq!(fpo.rule, FrameRule::Fpo { allocates_base_pointer: true });
        assert_eq!(syms.frame_data(0x1040), None);
        assert_eq!(syms.frame_data(0x4000), None, "an empty record is dropped");
        assert_eq!(syms.frame_data(0x5000), None, "type 5 is not read");
        assert_eq!(syms.parameter_size(0x1030), Some(8));
        assert_eq!(syms.parameter_size(0x2004), Some(4));
        assert_eq!(syms.parameter_size(0x3004), Some(0x10));
        assert_eq!(syms.parameter_size(0x5000), Some(0x10), "the PUBLIC before it");
        // FUNC records, and a PUBLIC up to the next record (none after h's: no end known).
        assert_eq!(syms.function_ranges(), [0x1000..0x1040, 0x2000..0x2020]);
        for bad in [
            "STACK WIN 4 1000",
            "STACK WIN 4 1000 10 0 0 0 0 0 0 2 x",
            "STACK WIN 4 1000 10 0 0 0 0 0 0 1",
        ] {
            let text =
                format!("MODULE windows x86 5A9832E5287241C1838ED98914E9B7FF1 a.pdb\n{bad}\n");
            assert!(matches!(parsed(&text), Err(SymError::Line { line: 2, .. })), "{bad}");
        }
    }

    fn rules(syms: &BreakpadSymbols, arch: Arch, at: u64) -> (CfaRule, Vec<(u16, RegRule)>) {
        let (row, _) = syms.cfi_row(arch, at).unwrap();
        assert_eq!(row.ra, arch.ra());
        (row.cfa, row.rules().to_vec())
    }

    /// Records whose name (or rules) are missing at the end of a line, the
    /// last of the file with no newline too: an empty name, from the file
    /// (found by the fuzz target `breakpad`: the span of an empty name was
    /// taken from outside the file, an overflow).
    #[test]
    fn nameless_records_have_empty_names() {
        let text = "MODULE Linux x86_64 0123456789ABCDEF0123456789ABCDEF0 prog\n\
            FILE 0 /src/a.c\n\
            FUNC 1000 10 0\n\
            1000 10 3 0\n\
            STACK CFI INIT 1000 10\n\
            PUBLIC 2000 0";
        let syms = parsed(text).unwrap();
        assert_eq!(syms.lookup(0x1004), Some(("", 0x1000)));
        assert_eq!(syms.lookup(0x2004), Some(("", 0x2000)));
        let frames = syms.frames(0x1004);
        assert_eq!(frames.len(), 1);
        assert_eq!((frames[0].file.as_deref(), frames[0].line), (Some("/src/a.c"), Some(3)));
        assert!(syms.cfi_row(Arch::X86_64, 0x1004).is_err());
    }

    #[test]
    fn stack_cfi_records_are_rows() {
        let syms = parsed(CFI).unwrap();
        assert!(syms.has_cfi());
        let x86 = Arch::X86_64;
        let rsp = |offset| CfaRule::RegOffset { reg: 7, offset };
        assert_eq!(rules(&syms, x86, 0x1000), (rsp(8), vec![(16, RegRule::Offset(-8))]));
        // The INIT's rules, then each later record's up to the address.
        let pushed = vec![(16, RegRule::Offset(-8)), (6, RegRule::Offset(-16))];
        assert_eq!(rules(&syms, x86, 0x1003), (rsp(16), pushed.clone()));
        let rbp = CfaRule::RegOffset { reg: 6, offset: 16 };
        assert_eq!(rules(&syms, x86, 0x103f), (rbp, pushed));
        assert_eq!(syms.cfi_row(x86, 0x1003).unwrap().1, 0x1000..0x1040);
        for outside in [0xfff, 0x1040, 0x2010, 0x4000] {
            assert_eq!(syms.cfi_row(x86, outside).err(), Some(LookupError::NoFde), "{outside:#x}");
        }
        // No .ra: the outermost frame (clone's, _start's undefined return address).
        assert_eq!(rules(&syms, x86, 0x2004), (rsp(8), vec![(16, RegRule::Undefined)]));
        // Registers in registers (__longjmp's CFI), the same value, a value at the CFA.
        let (cfa, got) = rules(&syms, x86, 0x3000);
        assert_eq!(cfa, CfaRule::RegOffset { reg: 5, offset: 0 });
        assert_eq!(
            got,
            [
                (16, RegRule::Register(1)),
                (7, RegRule::Register(8)),
                (3, RegRule::SameValue),
                (12, RegRule::ValOffset(16))
            ]
        );
    }

    #[test]
    fn stack_cfi_of_other_forms_is_an_error_not_a_row() {
        let syms = parsed(CFI).unwrap();
        for at in [0x5000, 0x5010, 0x5020, 0x5030, 0x5040] {
            let got = syms.cfi_row(Arch::X86_64, at).err();
            assert!(matches!(got, Some(LookupError::Breakpad(_))), "{at:#x}: {got:?}");
        }
        let damaged = "MODULE a b c d\nSTACK CFI 1000 .cfa: $rsp 8 +\n";
        assert!(matches!(parsed(damaged), Err(SymError::Line { line: 2, .. })));
        let damaged = "MODULE a b c d\nSTACK CFI INIT 1000 zz .cfa: $rsp 8 +\n";
        assert!(matches!(parsed(damaged), Err(SymError::Line { line: 2, .. })));
    }

    /// aarch64's names have no `$`; `.ra` is x30's column.
    #[test]
    fn aarch64_stack_cfi() {
        let text = "MODULE Linux arm64 0123456789ABCDEF0123456789ABCDEF0 prog\n\
            STACK CFI INIT 1000 40 .cfa: sp 0 + .ra: x30\n\
            STACK CFI 1004 .cfa: sp 32 + .ra: .cfa -24 + ^ x29: .cfa -32 + ^\n\
            STACK CFI 1008 .cfa: x29 32 +\n";
        let syms = parsed(text).unwrap();
        let a64 = Arch::Aarch64;
        let sp = CfaRule::RegOffset { reg: 31, offset: 0 };
        assert_eq!(rules(&syms, a64, 0x1000), (sp, vec![(30, RegRule::SameValue)]));
        let saved = vec![(30, RegRule::Offset(-24)), (29, RegRule::Offset(-32))];
        let fp = CfaRule::RegOffset { reg: 29, offset: 32 };
        assert_eq!(rules(&syms, a64, 0x1010), (fp, saved));
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
        // A byte that is not UTF-8, on the line it is on (the file is checked whole).
        let bytes = b"MODULE a b c d\nFUNC 1 2 0 f\n1 1 3 0\nFUNC 3 2 0 \xff\n".to_vec();
        match BreakpadSymbols::parse(Data::Owned(bytes)) {
            Err(SymError::Line { line: 4, reason }) => assert_eq!(reason, "not UTF-8"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        // Huge sizes and addresses at the top do not overflow.
        let syms = parsed("MODULE a b c d\nFUNC ffffffffffffffff ffffffffffffffff 0 f\n").unwrap();
        assert_eq!(syms.lookup(u64::MAX), Some(("f", u64::MAX)));
        assert!(!syms.frames(u64::MAX).is_empty());
    }
}
