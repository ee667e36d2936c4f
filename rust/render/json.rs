//! JSON values as the reports write them: strings, a frame's function and
//! source fields.

use std::fmt::Write as _;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

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

/// `value` as a JSON string in ASCII, as Python's `json.dumps` writes it:
/// every control character escaped (C0 as JSON requires, DEL and C1 too: a
/// raw `\u009b` is a terminal's CSI), and every letter past ASCII as
/// `\uXXXX` (a pair of surrogates past the BMP), so that the document reads
/// the same through any output encoding.
pub fn json_str(out: &mut String, value: &str) {
    out.push('"');
    let plain = |b: u8| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\';
    if value.bytes().all(plain) {
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
            c if (' '..'\u{7f}').contains(&c) => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
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

/// A JSON writer of objects and arrays, indented as Python's
/// `json.dumps(indent=N)` writes them, or on one line as `json.dumps`
/// (`", "` and `": "` between items).
pub struct JsonWriter<'a> {
    pub out: &'a mut String,
    indent: Option<usize>,
    depth: usize,
    /// Whether the container open at each depth has an item yet.
    filled: Vec<bool>,
}

impl<'a> JsonWriter<'a> {
    pub fn new(out: &'a mut String, indent: Option<usize>) -> Self {
        JsonWriter { out, indent, depth: 0, filled: Vec::new() }
    }

    pub fn open(&mut self, bracket: char) {
        self.out.push(bracket);
        self.depth += 1;
        self.filled.push(false);
    }

    pub fn close(&mut self, bracket: char) {
        let filled = self.filled.pop().unwrap_or(false);
        self.depth -= 1;
        if filled {
            self.newline();
        }
        self.out.push(bracket);
    }

    pub fn newline(&mut self) {
        if let Some(n) = self.indent {
            self.out.push('\n');
            self.out.extend(std::iter::repeat_n(' ', n * self.depth));
        }
    }

    /// Before an item of the open container.
    pub fn item(&mut self) {
        if let Some(filled) = self.filled.last_mut() {
            if std::mem::replace(filled, true) {
                self.out.push(',');
                if self.indent.is_none() {
                    self.out.push(' ');
                }
            }
        }
        self.newline();
    }

    pub fn key(&mut self, key: &str) -> &mut Self {
        self.item();
        json_str(self.out, key);
        self.out.push_str(": ");
        self
    }

    pub fn str(&mut self, value: &str) {
        json_str(self.out, value);
    }

    pub fn opt_str(&mut self, value: Option<&str>) {
        match value {
            Some(v) => json_str(self.out, v),
            None => self.out.push_str("null"),
        }
    }

    pub fn path(&mut self, value: &OsStr) {
        json_path(self.out, value);
    }

    pub fn opt_path(&mut self, value: Option<&OsStr>) {
        match value {
            Some(v) => json_path(self.out, v),
            None => self.out.push_str("null"),
        }
    }

    pub fn hex(&mut self, value: u64) {
        self.out.push('"');
        push_0x(self.out, value);
        self.out.push('"');
    }

    pub fn opt_hex(&mut self, value: Option<u64>) {
        match value {
            Some(v) => self.hex(v),
            None => self.out.push_str("null"),
        }
    }

    pub fn int(&mut self, value: i64) {
        push_decimal(self.out, value, 0, b' ');
    }

    pub fn opt_int(&mut self, value: Option<i64>) {
        match value {
            Some(v) => self.int(v),
            None => self.out.push_str("null"),
        }
    }

    pub fn bool(&mut self, value: bool) {
        self.out.push_str(if value { "true" } else { "false" });
    }

    pub fn opt_bool(&mut self, value: Option<bool>) {
        match value {
            Some(v) => self.bool(v),
            None => self.out.push_str("null"),
        }
    }
}

/// A path as a JSON string: each byte that is not UTF-8 as the lone
/// surrogate `os.fsdecode` makes of it (`\udcXX`).
pub fn json_path(out: &mut String, path: &OsStr) {
    let bytes = path.as_bytes();
    if let Ok(text) = std::str::from_utf8(bytes) {
        return json_str(out, text);
    }
    let mut quoted = String::new();
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        quoted.clear();
        json_str(&mut quoted, chunk.valid());
        out.push_str(&quoted[1..quoted.len() - 1]);
        for b in chunk.invalid() {
            let _ = write!(out, "\\udc{b:02x}");
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_as_python_writes_them() {
        // serde's where it writes ASCII; read back by serde as they were.
        for value in ["main", "a\"b", "back\\slash", "tab\there\nnl", "\u{1}ctl"] {
            let mut ours = String::new();
            json_str(&mut ours, value);
            assert_eq!(ours, serde_json::to_string(value).unwrap());
        }
        // DEL, C1 and every letter past ASCII escaped, as Python's json.dumps writes them
        // (a pair of surrogates past the BMP).
        for (value, python) in [
            ("csi\u{9b}2J\u{7f}\u{85}", r#""csi\u009b2J\u007f\u0085""#),
            ("naïve ✓ ¢", r#""na\u00efve \u2713 \u00a2""#),
            ("\u{1f600}", r#""\ud83d\ude00""#),
        ] {
            let mut ours = String::new();
            json_str(&mut ours, value);
            assert_eq!(ours, python);
            assert_eq!(serde_json::from_str::<String>(&ours).unwrap(), value);
        }
    }
}
