//! Samples as text (perf script's shape) and JSON lines, written without
//! the formatting machinery.

use std::fmt::Write as _;

use crate::source::perf::Sample;
use crate::symbolize::lines::SourceFrame;
use crate::unwind::Frame;

use crate::symbolize::{Location, SymbolCache};

use super::cache::{LineCache, SourceCache};
use super::process::Process;
use super::work::Context;
use super::Pending;

/// A sample and its user frames, to print.
pub(super) struct Unwound<'r> {
    pub(super) ctx: &'r Context,
    pub(super) p: &'r Pending<'r>,
    pub(super) s: &'r Sample<'r>,
    pub(super) frames: &'r [Frame],
    /// The frames are perf's callchain (no user stack to unwind): the text
    /// shows each at its address, as perf script shows a callchain.
    pub(super) recorded: bool,
}

impl Unwound<'_> {
    pub(super) fn text(
        &self,
        kernel: impl Iterator<Item = u64>,
        (symbols, sources): (&mut SymbolCache, &mut SourceCache),
        lines: &mut LineCache,
        out: &mut String,
    ) {
        let Unwound { ctx, p, s, frames, recorded } = *self;
        let time = s.time.unwrap_or(0);
        let (secs, nanos) = (time / 1_000_000_000, time % 1_000_000_000);
        let comm = ctx.comms.get(p.comm as usize).map_or(":-1", |c| c);
        push_header(out, comm, s.tid, secs, nanos / 1000);
        for ip in kernel {
            out.push('\t');
            push_hex(out, ip, 16);
            out.push(' ');
            match ctx.kernel.lookup(ip) {
                Some((name, off)) => {
                    push_escaped(out, name);
                    out.push('+');
                    push_0x(out, off);
                }
                None => out.push_str("[unknown]"),
            }
            out.push_str(" ([kernel.kallsyms])\n");
        }
        for f in frames {
            let lookup = if recorded { f.pc } else { f.lookup_pc() };
            out.push_str(lines.line(&p.process, f.pc, lookup, |line| {
                if ctx.inline {
                    inline_lines(&p.process, f.pc, lookup, (symbols, sources), line);
                }
                frame_line(&p.process, f.pc, lookup, symbols, line);
            }));
        }
        out.push('\n');
    }

    pub(super) fn json(
        &self,
        kernel: impl Iterator<Item = u64>,
        (symbols, sources): (&mut SymbolCache, &mut SourceCache),
        out: &mut String,
    ) {
        let Unwound { ctx, p, s, frames, .. } = *self;
        let comm = ctx.comms.get(p.comm as usize).map_or(":-1", |c| c);
        let _ = write!(
            out,
            "{{\"pid\": {}, \"tid\": {}, \"time\": {}, \"comm\": ",
            s.pid,
            s.tid,
            s.time.unwrap_or(0)
        );
        json_str(out, comm);
        out.push_str(", \"frames\": [");
        let mut first = true;
        for ip in kernel {
            if !std::mem::take(&mut first) {
                out.push_str(", ");
            }
            out.push_str("{\"pc\": \"");
            push_0x(out, ip);
            out.push_str("\", \"module\": \"[kernel.kallsyms]\", \"module_offset\": \"");
            push_0x(out, ip);
            out.push_str("\", \"function\": ");
            json_function(out, ctx.kernel.lookup(ip));
            // The kernel's own unwinder found these, not stackwalk's.
            out.push_str(", \"kernel\": true, \"trust\": null");
            if ctx.inline {
                json_source(out, None, false);
            }
            out.push('}');
        }
        for f in frames {
            let lookup = f.lookup_pc();
            let loc = p.process.symbolizer.locate_cached(f.pc, lookup, symbols);
            let found = if ctx.inline { sources.frames(&p.process, lookup) } else { &[] };
            let (inlined, own) = match found.split_last() {
                Some((own, inlined)) => (inlined, Some(own)),
                None => (&[][..], None),
            };
            for source in inlined {
                if !std::mem::take(&mut first) {
                    out.push_str(", ");
                }
                let function = source.function.as_deref().map(|name| (name, None));
                json_user_frame(out, f, &loc, function, Some((Some(source), true)));
            }
            if !std::mem::take(&mut first) {
                out.push_str(", ");
            }
            // The symbol table's name, else (with DWARF read) the one DWARF gives.
            let function = match loc.function {
                Some((name, offset)) => Some((name, Some(offset))),
                None => own.and_then(|s| s.function.as_deref()).map(|name| (name, None)),
            };
            json_user_frame(out, f, &loc, function, ctx.inline.then_some((own, false)));
        }
        out.push_str("]}\n");
    }
}

/// A user frame of a JSON sample: `frame` (its pc and trust; an inline
/// frame's, those of the frame it is inlined in), where `loc` is, named
/// `function` (with its offset, if from the symbol table), and with its
/// `source` (its file and line, and whether it is an inline frame) when
/// inline frames are shown.
fn json_user_frame(
    out: &mut String,
    frame: &Frame,
    loc: &Location<'_>,
    function: Option<(&str, Option<u64>)>,
    source: Option<(Option<&SourceFrame>, bool)>,
) {
    out.push_str("{\"pc\": \"");
    push_0x(out, frame.pc);
    out.push_str("\", \"module\": ");
    match loc.file() {
        Some(file) => json_str(out, &file.path),
        None => out.push_str("null"),
    }
    out.push_str(", \"module_offset\": \"");
    push_0x(out, loc.offset);
    out.push_str("\", \"function\": ");
    match function {
        Some((name, None)) => {
            json_str(out, name);
            out.push_str(", \"function_offset\": null");
        }
        Some((name, Some(offset))) => json_function(out, Some((name, offset))),
        None => json_function(out, None),
    }
    out.push_str(", \"kernel\": false, \"trust\": \"");
    out.push_str(frame.trust.as_str());
    out.push('"');
    if let Some((source, inline)) = source {
        json_source(out, source, inline);
    }
    out.push('}');
}

/// A frame's `file`, `line`, `column` and `inline` values, after a comma.
fn json_source(out: &mut String, source: Option<&SourceFrame>, inline: bool) {
    out.push_str(", \"file\": ");
    match source.and_then(|s| s.file.as_deref()) {
        Some(file) => json_str(out, file),
        None => out.push_str("null"),
    }
    for (key, value) in
        [("line", source.and_then(|s| s.line)), ("column", source.and_then(|s| s.column))]
    {
        let _ = write!(out, ", \"{key}\": ");
        match value {
            Some(v) => push_decimal(out, i64::from(v), 0, b' '),
            None => out.push_str("null"),
        }
    }
    out.push_str(if inline { ", \"inline\": true" } else { ", \"inline\": false" });
}

/// The functions inlined at a user frame's pc, innermost first, as perf
/// script prints them before the frame's own line: at the frame's address,
/// with its symbol's offset, `(inlined)` for the module. None outside every
/// module or without DWARF.
fn inline_lines(
    process: &Process,
    pc: u64,
    lookup: u64,
    (symbols, sources): (&mut SymbolCache, &mut SourceCache),
    out: &mut String,
) {
    let inlined = match sources.frames(process, lookup).split_last() {
        Some((_, inlined)) if !inlined.is_empty() => inlined,
        _ => return,
    };
    let loc = process.symbolizer.locate_cached(pc, lookup, symbols);
    for source in inlined {
        out.push('\t');
        push_hex(out, loc.file_offset, 16);
        out.push(' ');
        push_escaped(out, source.function.as_deref().unwrap_or("??"));
        if let Some((_, off)) = loc.function {
            out.push('+');
            push_0x(out, off - (pc - lookup));
        }
        out.push_str(" (inlined)\n");
    }
}

/// A user frame's line, as perf script prints it: looked up and shown at
/// `lookup` (an unwound caller at its return address minus one, inside the
/// call; a callchain's entry at itself), addresses as offsets in the file.
pub(super) fn frame_line(
    process: &Process,
    pc: u64,
    lookup: u64,
    symbols: &mut SymbolCache,
    out: &mut String,
) {
    let loc = process.symbolizer.locate_cached(pc, lookup, symbols);
    out.push('\t');
    push_hex(out, loc.file_offset, 16);
    out.push(' ');
    match loc.function {
        Some((name, off)) => {
            push_escaped(out, name);
            out.push('+');
            push_0x(out, off - (pc - lookup));
        }
        None => out.push_str("[unknown]"),
    }
    out.push_str(" (");
    push_escaped(out, loc.file().map_or("[unknown]", |f| &f.path));
    out.push_str(")\n");
}

/// Whether `text` holds a control character: C0, DEL or C1 (whose UTF-8
/// encodings start with 0xc2 0x80..0x9f). A byte scan: names are short, and
/// all but hostile ones have none.
fn has_control(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b < 0x20 || b == 0x7f || (b == 0xc2 && bytes.get(i + 1).is_some_and(|&n| n < 0xa0))
    })
}

/// `text` with its control characters escaped as the Python layer escapes
/// every name it prints (`stackwalk.render.escape`): `\n`, `\t`, `\r`,
/// else `\xNN` -- so that a program's symbol names, comm or file names can
/// neither drive the terminal nor forge a line (a tab starts a frame's line,
/// a newline a sample, a `;` nothing: folded names keep it).
pub(super) fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !has_control(text) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c < ' ' || ('\u{7f}'..='\u{9f}').contains(&c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// [`escaped`] pushed onto `out`.
pub(super) fn push_escaped(out: &mut String, text: &str) {
    out.push_str(&escaped(text));
}

/// `value` in lowercase hex, right-aligned in `width` (at most 16) columns.
pub(super) fn push_hex(out: &mut String, value: u64, width: usize) {
    let digits = (64 - (value | 1).leading_zeros()).div_ceil(4) as usize;
    let len = digits.max(width.min(16));
    let mut buf = [b' '; 16];
    let mut v = value;
    for slot in buf[len - digits..len].iter_mut().rev() {
        *slot = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
    }
    out.push_str(std::str::from_utf8(&buf[..len]).unwrap_or_default());
}

/// A sample's first line, as `"{comm:>16} {tid:>6} {secs:5}.{micros:06}:\n"`
/// writes it (the formatting machinery took a tenth of the worker's time).
pub(super) fn push_header(out: &mut String, comm: &str, tid: i32, secs: u64, micros: u64) {
    let comm = escaped(comm);
    let chars = comm.chars().count();
    out.extend(std::iter::repeat_n(' ', 16usize.saturating_sub(chars)));
    out.push_str(&comm);
    out.push(' ');
    push_decimal(out, i64::from(tid), 6, b' ');
    out.push(' ');
    push_decimal(out, secs as i64, 5, b' ');
    out.push('.');
    push_decimal(out, micros as i64, 6, b'0');
    out.push_str(":\n");
}

/// `value` in decimal, right-aligned in `width` columns, padded with `fill`
/// (`b'0'`: after the sign, as `{:0width$}` does).
pub(super) fn push_decimal(out: &mut String, value: i64, width: usize, fill: u8) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut v = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let sign = usize::from(value < 0);
    let pad = width.saturating_sub(digits.len() - at + sign);
    if fill == b' ' {
        out.extend(std::iter::repeat_n(' ', pad));
    }
    if value < 0 {
        out.push('-');
    }
    if fill != b' ' {
        out.extend(std::iter::repeat_n(fill as char, pad));
    }
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

/// `value` as `0x...`, as `{:#x}` writes it.
pub(super) fn push_0x(out: &mut String, value: u64) {
    out.push_str("0x");
    push_hex(out, value, 0);
}

/// A frame's `function` and `function_offset` values.
pub(super) fn json_function(out: &mut String, function: Option<(&str, u64)>) {
    match function {
        Some((name, off)) => {
            json_str(out, name);
            out.push_str(", \"function_offset\": \"");
            push_0x(out, off);
            out.push('"');
        }
        None => out.push_str("null, \"function_offset\": null"),
    }
}

/// `value` as a JSON string.
pub(super) fn json_str(out: &mut String, value: &str) {
    out.push('"');
    if !value.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(value);
        out.push('"');
        return;
    }
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_as_format_writes_it() {
        for value in [0u64, 1, 0xf, 0x10, 0x1234_5678, u64::MAX, 1 << 63, 0xffff_ffff_8100_0000] {
            for width in [0, 6, 16] {
                let mut ours = String::new();
                push_hex(&mut ours, value, width);
                assert_eq!(ours, format!("{value:>width$x}"));
            }
            let mut ours = String::new();
            push_0x(&mut ours, value);
            assert_eq!(ours, format!("{value:#x}"));
        }
    }

    #[test]
    fn header_as_format_writes_it() {
        for (comm, tid) in [("bsort", 26915), ("a-very-long-thread-name", -1), ("é", 7), ("", 0)] {
            for time in [0u64, 999, 16_902_669_834_123, u64::MAX / 1000] {
                let (secs, micros) = (time / 1_000_000_000, time % 1_000_000_000 / 1000);
                let mut ours = String::new();
                push_header(&mut ours, comm, tid, secs, micros);
                assert_eq!(ours, format!("{comm:>16} {tid:>6} {secs:5}.{micros:06}:\n"));
            }
        }
        for value in [0i64, 5, -5, 123_456, -123_456, i64::MIN, i64::MAX] {
            for width in [0, 3, 8, 21] {
                let mut ours = String::new();
                push_decimal(&mut ours, value, width, b'0');
                assert_eq!(ours, format!("{value:0width$}"));
            }
        }
    }

    #[test]
    fn json_strings_as_serde_writes_them() {
        for value in ["main", "a\"b", "back\\slash", "tab\there\nnl", "\u{1}ctl", "naïve ✓"] {
            let mut ours = String::new();
            json_str(&mut ours, value);
            assert_eq!(ours, serde_json::to_string(value).unwrap());
        }
    }
}
