//! aarch64 (AAPCS64): DWARF columns 0-30 for x0-x30, 31 for sp; x30 (lr) is
//! the return-address column. The pc has no column of its own.

pub const SP: u16 = 31;
pub const FP: u16 = 29;
pub const RA: u16 = 30;

// x19-x29 are callee-saved, and x30 keeps its value when the CIE says
// nothing (a leaf function's return address is still in lr): see
// `Arch::same_value_mask`.

/// User-space addresses fit in 48 bits; bits above hold PAC signatures.
pub const USER_ADDRESS_MASK: u64 = (1 << 48) - 1;

pub const NAMES: [&str; 32] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "x29", "x30", "sp",
];

pub fn register_by_name(name: &str) -> Option<Option<u16>> {
    match name {
        "pc" => Some(None),
        "fp" => Some(Some(FP)),
        "lr" => Some(Some(RA)),
        _ => NAMES.iter().position(|n| *n == name).map(|i| Some(i as u16)),
    }
}
