//! Line numbers from a code object's `co_linetable` in CPython 3.11's
//! location table format (`Objects/locations.md` in CPython's tree): a
//! sequence of entries, each covering `length` code units, whose first byte
//! is `1 CCCC LLL` (bit 7 set, C the kind of entry, L the length − 1):
//!
//! | C | entry | line |
//! |---|---|---|
//! | 0–9 | short form (one byte of columns follows) | the previous line |
//! | 10–12 | one-line form (two bytes of columns) | previous + (C − 10) |
//! | 13 | no columns | previous + a signed varint |
//! | 14 | long form | previous + a signed varint (end line, columns follow as varints) |
//! | 15 | no location | none |
//!
//! Varints are little-endian groups of 6 bits, bit 6 set on every group but
//! the last; a signed varint holds the sign in its lowest bit. Lines start
//! at `co_firstlineno`. The same format serves 3.12 and 3.13.

/// The line of the instruction at byte offset `addrq` of the code (the
/// code unit's index × 2), as `PyCode_Addr2Line` gives it: `first_line`
/// for a negative offset (a frame that has not started), None where the
/// table says the instruction has no location or does not cover it.
pub fn line_of(table: &[u8], first_line: i64, addrq: i64) -> Option<i64> {
    if addrq < 0 {
        return Some(first_line);
    }
    let mut reader = Reader { bytes: table, at: 0 };
    let mut line = first_line;
    let mut start: i64 = 0;
    while let Some(first) = reader.byte() {
        if first & 0x80 == 0 {
            return None; // not the first byte of an entry: a damaged table
        }
        let code = (first >> 3) & 15;
        let end = start + 2 * (i64::from(first & 7) + 1);
        let this = match code {
            0..=9 => {
                reader.byte()?;
                Some(line)
            }
            10..=12 => {
                reader.byte()?;
                reader.byte()?;
                line += i64::from(code) - 10;
                Some(line)
            }
            13 => {
                line += reader.svarint()?;
                Some(line)
            }
            14 => {
                line += reader.svarint()?;
                reader.varint()?;
                reader.varint()?;
                reader.varint()?;
                Some(line)
            }
            _ => None,
        };
        if start <= addrq && addrq < end {
            return this;
        }
        start = end;
    }
    None
}

/// The line of the instruction at byte offset `addrq` in CPython 3.10's
/// line table (`Objects/lnotab_notes.txt`), as 3.10's `PyCode_Addr2Line`
/// gives it: pairs of an unsigned byte (the length of a range of bytecode,
/// in bytes) and a signed one (the change of line from the previous range's;
/// -128: the range has no line), ranges one after the other from offset 0,
/// lines from `co_firstlineno`; an empty range changes the line only.
/// `first_line` for a negative offset (a frame that has not started), None
/// where the range has no line or no range holds the offset.
pub fn line_of_310(table: &[u8], first_line: i64, addrq: i64) -> Option<i64> {
    if addrq < 0 {
        return Some(first_line);
    }
    let mut line = first_line;
    let mut end: i64 = 0;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += i64::from(pair[0]);
        let this = match pair[1] as i8 {
            -128 => None,
            delta => {
                line += i64::from(delta);
                Some(line)
            }
        };
        if start <= addrq && addrq < end {
            return this;
        }
    }
    None
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut b = self.byte()?;
        let mut value = u64::from(b & 63);
        let mut shift = 0;
        while b & 64 != 0 {
            b = self.byte()?;
            shift += 6;
            if shift > 60 {
                return None;
            }
            value |= u64::from(b & 63) << shift;
        }
        Some(value)
    }

    fn svarint(&mut self) -> Option<i64> {
        let u = self.varint()?;
        let magnitude = (u >> 1) as i64;
        Some(if u & 1 != 0 { -magnitude } else { magnitude })
    }
}

#[cfg(test)]
mod tests {
    use super::{line_of, line_of_310};

    #[test]
    fn the_310_table() {
        // bytes 0-5 line 11; an empty range (line 13); 6-9 no line (the
        // line stays 13); 10-15 line 12; 16-19 line 12 (+0); 20-21 line 9
        let table = [6, 1, 0, 2, 4, 0x80, 6, 0xff, 4, 0, 2, 0xfd];
        let first = 10;
        let lines: Vec<_> = (0..12).map(|u| line_of_310(&table, first, u * 2)).collect();
        assert_eq!(
            lines,
            [
                Some(11),
                Some(11),
                Some(11),
                None,
                None,
                Some(12),
                Some(12),
                Some(12),
                Some(12),
                Some(12),
                Some(9),
                None
            ]
        );
        assert_eq!(line_of_310(&table, first, -2), Some(10));
        assert_eq!(line_of_310(&[7], first, 0), None); // half a pair
    }

    /// An entry's first byte: kind `code`, covering `units` code units.
    fn head(code: u8, units: u8) -> u8 {
        0x80 | (code << 3) | (units - 1)
    }

    #[test]
    fn short_one_line_no_column_long_and_none() {
        let table = [
            head(13, 1), // line + 1 (svarint 2): units 0
            2,
            head(0, 2), // same line, units 1-2
            0x11,
            head(11, 3), // line + 1, units 3-5
            4,
            9,
            head(14, 1), // line - 3 (svarint 7), units 6
            7,
            0,
            1,
            5,
            head(15, 1), // no location, unit 7
            head(13, 2), // line + 100 (svarint 200 = 8 + 64*3 → 0x48, 0x03), units 8-9
            0x48,
            0x03,
        ];
        let first = 10;
        let lines: Vec<_> = (0..11).map(|u| line_of(&table, first, u * 2)).collect();
        assert_eq!(
            lines,
            [
                Some(11),
                Some(11),
                Some(11),
                Some(12),
                Some(12),
                Some(12),
                Some(9),
                None,
                Some(109),
                Some(109),
                None
            ]
        );
        assert_eq!(line_of(&table, first, -2), Some(10));
    }

    #[test]
    fn damaged_tables_give_none() {
        assert_eq!(line_of(&[], 5, 0), None);
        assert_eq!(line_of(&[0x13, 0x80], 5, 0), None);
        // a varint that never ends
        let endless = [0x80 | (13 << 3), 0x40, 0x40, 0x40];
        assert_eq!(line_of(&endless, 5, 0), None);
        let mut long = vec![0x80 | (13 << 3)];
        long.extend([0x7f; 20]);
        assert_eq!(line_of(&long, 5, 0), None);
    }
}
