//! JSON values as the reports write them: strings, a frame's function and
//! source fields.

use std::fmt::Write as _;

use super::text::{push_0x, push_decimal};
use crate::symbolize::lines::SourceFrame;

/// A frame's `function` and `function_offset` values.
pub fn json_function(out: &mut String, function: Option<(&str, u64)>) {
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
pub fn json_str(out: &mut String, value: &str) {
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

/// A frame's `file`, `line`, `column` and `inline` values, after a comma.
pub fn json_source(out: &mut String, source: Option<&SourceFrame>, inline: bool) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_as_serde_writes_them() {
        for value in ["main", "a\"b", "back\\slash", "tab\there\nnl", "\u{1}ctl", "naïve ✓"] {
            let mut ours = String::new();
            json_str(&mut ours, value);
            assert_eq!(ours, serde_json::to_string(value).unwrap());
        }
    }
}
