//! x86_64 (System V psABI): DWARF columns 0-16, 16 being the return address.

pub const SP: u16 = 7;
pub const FP: u16 = 6;
pub const RA: u16 = 16;

/// rbx, rbp, r12-r15 survive calls; everything else is caller-saved.
pub const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];

pub const NAMES: [&str; 17] = [
    "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip",
];

pub fn register_by_name(name: &str) -> Option<Option<u16>> {
    if name == "rip" {
        return Some(None);
    }
    NAMES.iter().position(|n| *n == name).map(|i| Some(i as u16))
}
