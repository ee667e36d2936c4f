//! Little-endian fields read from a record's or a section's bytes, every
//! read bounds-checked: past the end is `None`, never a panic.

/// A bounds-checked reader of little-endian fields.
pub(super) struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    pub(super) fn new(bytes: &'a [u8], pos: usize) -> Self {
        Fields { bytes, pos }
    }

    pub(super) fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(usize::try_from(n).ok()?)?;
        let taken = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(taken)
    }

    pub(super) fn take_words(&mut self, words: Option<u64>) -> Option<&'a [u8]> {
        self.take(words?.checked_mul(8)?)
    }

    pub(super) fn u64(&mut self) -> Option<u64> {
        self.take(8).and_then(|b| read_u64(b, 0))
    }

    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take(4).and_then(|b| read_u32(b, 0))
    }

    pub(super) fn rest(&mut self) -> &'a [u8] {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        self.pos = self.bytes.len();
        rest
    }
}

pub(super) fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

pub(super) fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

pub(super) fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(b.try_into().ok()?))
}

pub(super) fn until_nul(bytes: &[u8]) -> &[u8] {
    bytes.iter().position(|&b| b == 0).map_or(bytes, |n| &bytes[..n])
}
