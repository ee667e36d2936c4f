//! The frames one unwound frame is shown as: with inline frames, each
//! function inlined at its pc (innermost first, at the line where it is),
//! then the function the pc is in (at the line of the call it makes to the
//! first of them); its name the symbol table's, with the offset into it,
//! else the one DWARF gives. Every report that names frames (the snapshot
//! document, perf's samples) shows them by this one rule.

use crate::symbolize::lines::SourceFrame;

/// One frame as a report shows it.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    pub function: Option<&'a str>,
    /// Bytes from the function's start (the symbol table's functions only).
    pub function_offset: Option<u64>,
    /// Its file and line.
    pub source: Option<&'a SourceFrame>,
    /// A function inlined at the pc (not the function the pc is in).
    pub inline: bool,
}

/// The frames of a pc: `function` is the symbol table's (name, offset),
/// `sources` the DWARF frames at the pc, innermost first (the last is the
/// function the pc is in). With `inline`, one frame per source; without,
/// one frame, at the innermost source's line.
pub fn named<'a>(
    function: Option<(&'a str, u64)>,
    sources: &'a [SourceFrame],
    inline: bool,
) -> impl Iterator<Item = Named<'a>> {
    let (inlined, own) = match sources.split_last() {
        Some((own, inlined)) if inline => (inlined, Some(own)),
        _ => (&[][..], sources.first()),
    };
    let (name, function_offset) = match function {
        Some((name, offset)) => (Some(name), Some(offset)),
        None => (sources.last().and_then(|s| s.function.as_deref()), None),
    };
    let inlined = inlined.iter().map(|source| Named {
        function: source.function.as_deref(),
        function_offset: None,
        source: Some(source),
        inline: true,
    });
    inlined.chain(std::iter::once(Named {
        function: name,
        function_offset,
        source: own,
        inline: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(function: &str, line: u32) -> SourceFrame {
        SourceFrame {
            function: Some(function.to_owned()),
            file: Some("a.c".to_owned()),
            line: Some(line),
            column: None,
        }
    }

    #[test]
    fn inlined_functions_come_first_and_the_symbol_table_names_the_own() {
        let sources = [source("leaf", 3), source("middle", 7), source("outer", 11)];
        let shown: Vec<_> = named(Some(("outer_sym", 0x20)), &sources, true)
            .map(|n| (n.function, n.function_offset, n.source.and_then(|s| s.line), n.inline))
            .collect();
        assert_eq!(
            shown,
            [
                (Some("leaf"), None, Some(3), true),
                (Some("middle"), None, Some(7), true),
                (Some("outer_sym"), Some(0x20), Some(11), false),
            ]
        );
        // Without inline frames: one frame, at the innermost line, named by the symbol table,
        // else by DWARF's outermost function.
        let one: Vec<_> = named(None, &sources, false)
            .map(|n| (n.function, n.source.and_then(|s| s.line), n.inline))
            .collect();
        assert_eq!(one, [(Some("outer"), Some(3), false)]);
        let bare: Vec<_> =
            named(None, &[], true).map(|n| (n.function, n.source.is_none())).collect();
        assert_eq!(bare, [(None, true)]);
    }
}
