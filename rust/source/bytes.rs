//! Little-endian fields read from a byte slice at an offset, checked: None
//! where the field runs past the slice (or its end past `usize`). What the
//! readers of tables inside files (`.sframe`, `.ARM.exidx`, jitdumps) read
//! their fields with.

fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

pub fn le_u16(bytes: &[u8], at: usize) -> Option<u16> {
    field(bytes, at).map(u16::from_le_bytes)
}

pub fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    field(bytes, at).map(u32::from_le_bytes)
}

pub fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    field(bytes, at).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_inside_the_slice_only() {
        let bytes = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(le_u16(&bytes, 7), Some(0x0908));
        assert_eq!(le_u32(&bytes, 0), Some(0x0403_0201));
        assert_eq!(le_u64(&bytes, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(le_u32(&bytes, 6), None);
        assert_eq!(le_u64(&bytes, usize::MAX), None);
    }
}
