//! Text as the reports print it: names with their control characters
//! escaped, and numbers written without the formatting machinery (which
//! took a tenth of a perf worker's time).

use std::fmt::Write as _;

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
pub fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
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
pub fn push_escaped(out: &mut String, text: &str) {
    out.push_str(&escaped(text));
}

/// `value` in lowercase hex, right-aligned in `width` (at most 16) columns.
pub fn push_hex(out: &mut String, value: u64, width: usize) {
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
pub fn push_header(out: &mut String, comm: &str, tid: i32, secs: u64, micros: u64) {
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
pub fn push_decimal(out: &mut String, value: i64, width: usize, fill: u8) {
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
pub fn push_0x(out: &mut String, value: u64) {
    out.push_str("0x");
    push_hex(out, value, 0);
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
}
