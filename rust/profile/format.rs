//! Samples as text (perf script's shape), JSON lines and records (for the
//! Python layer), written with the render stage's writers
//! (`crate::render`).

use std::fmt::Write as _;

use crate::render::frame::{named, Named};
use crate::render::json::{json_function, json_source, json_str};
use crate::render::records::RecordWriter;
use crate::render::text::{push_0x, push_escaped, push_header, push_hex};
use crate::source::perf::Sample;
use crate::symbolize::{Location, SymbolCache};
use crate::unwind::Frame;

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
            for shown in named(loc.function, found, ctx.inline) {
                if !std::mem::take(&mut first) {
                    out.push_str(", ");
                }
                json_user_frame(out, f, &loc, &shown, ctx.inline);
            }
        }
        out.push_str("]}\n");
    }
}

impl Unwound<'_> {
    /// The sample as a record (`crate::render::records`): the frames its
    /// JSON line has, with the same values.
    pub(super) fn records(
        &self,
        kernel: impl Iterator<Item = u64>,
        (symbols, sources): (&mut SymbolCache, &mut SourceCache),
        out: &mut Vec<u8>,
    ) {
        let Unwound { ctx, p, s, frames, .. } = *self;
        let comm = ctx.comms.get(p.comm as usize).map_or(":-1", |c| c);
        let mut record = RecordWriter::start(out, s.pid, s.tid, s.time.unwrap_or(0), comm);
        for ip in kernel {
            let (function, offset) = ctx.kernel.lookup(ip).unzip();
            let none = (None, None, None);
            let module = Some("[kernel.kallsyms]");
            record.frame(ip, module, ip, function, offset, true, None, none, false);
        }
        for f in frames {
            let lookup = f.lookup_pc();
            let loc = p.process.symbolizer.locate_cached(f.pc, lookup, symbols);
            let found = if ctx.inline { sources.frames(&p.process, lookup) } else { &[] };
            let module = loc.file().map(|file| &*file.path);
            for shown in named(loc.function, found, ctx.inline) {
                let source = shown.source.filter(|_| ctx.inline);
                let source = (
                    source.and_then(|s| s.file.as_deref()),
                    source.and_then(|s| s.line).map(u64::from),
                    source.and_then(|s| s.column).map(u64::from),
                );
                let trust = Some(f.trust.as_str());
                let (function, offset) =
                    (shown.function, shown.function.and(shown.function_offset));
                record.frame(
                    f.pc,
                    module,
                    loc.offset,
                    function,
                    offset,
                    false,
                    trust,
                    source,
                    shown.inline,
                ); // fmt: skip
            }
        }
        record.finish();
    }
}

/// A user frame of a JSON sample: `frame` (its pc and trust; an inline
/// frame's, those of the frame it is inlined in), where `loc` is, `shown` as
/// the report names it, with its source fields when inline frames are
/// `shown_sources`.
fn json_user_frame(
    out: &mut String,
    frame: &Frame,
    loc: &Location<'_>,
    shown: &Named<'_>,
    shown_sources: bool,
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
    match (shown.function, shown.function_offset) {
        (Some(name), None) => {
            json_str(out, name);
            out.push_str(", \"function_offset\": null");
        }
        (Some(name), Some(offset)) => json_function(out, Some((name, offset))),
        (None, _) => json_function(out, None),
    }
    out.push_str(", \"kernel\": false, \"trust\": \"");
    out.push_str(frame.trust.as_str());
    out.push('"');
    if shown_sources {
        json_source(out, shown.source, shown.inline);
    }
    out.push('}');
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
