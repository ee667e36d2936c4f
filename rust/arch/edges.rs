//! A frame's state at an instruction of its function's prologue or
//! epilogue, read from the instructions themselves: where unwind tables
//! that describe a function's body alone (Apple's compact unwind info, and
//! the `__eh_frame` of Apple's compilers, which say nothing until the
//! prologue has run) do not hold. Only for a pc that is not a return
//! address (frame 0's, an interrupted frame's): a caller is always in its
//! body, at a call.
//!
//! - Epilogue: the instructions from the pc on are the rest of one (x86_64:
//!   `add rsp, N`, pops, `ret`; arm64: `ldp` from sp, post-indexed or not,
//!   `add sp, sp, #N`, `autibsp`, then `ret`): the caller's sp is sp plus
//!   what they add, the registers not yet reloaded are in their slots, the
//!   others (and on arm64 the return address, once lr is reloaded) are in
//!   their registers.
//! - Prologue: the instructions from the function's start to the pc are
//!   the first of one (x86_64: pushes, `sub rsp, N`, up to `mov rbp, rsp`;
//!   arm64: `pacibsp`, `stp` to sp, pre-indexed or not, `str` pre-indexed,
//!   `sub sp, sp, #N`, up to `mov x29, sp` or `add x29, sp, #N`): the
//!   caller's sp is sp plus what they took, the registers stored so far in
//!   their slots. Once the frame pointer is set, the table's rule holds.
//!
//! What is not one of those is left to the tables (None).

/// The state of a frame whose pc is in its prologue or epilogue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The caller's sp (the CFA) is the frame's sp plus this.
    pub cfa: i64,
    /// The return address's slot, from the CFA; None: in the link register.
    pub ra: Option<i64>,
    /// Registers (DWARF numbers) saved at offsets from the CFA.
    pub saved: Vec<(u16, i64)>,
}

/// The most instructions read of a prologue or an epilogue.
const MAX_INSTRUCTIONS: usize = 24;

/// x86_64's DWARF numbers of the registers an instruction's 3-bit field
/// (plus 8 with REX.B) names.
const X86_64_DWARF: [u16; 16] = [0, 2, 1, 3, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15];
const RSP: u16 = 7;

/// The state at `into` bytes into the x86_64 function whose code (from its
/// start, running past the pc) is `code`.
pub fn x86_64(code: &[u8], into: usize) -> Option<Edge> {
    x86_64_epilogue(code.get(into..)?).or_else(|| x86_64_prologue(code, into))
}

fn x86_64_epilogue(code: &[u8]) -> Option<Edge> {
    let (mut at, mut added) = (0, 0i64);
    match code {
        [0x48, 0x83, 0xC4, imm, ..] => (at, added) = (4, i64::from(*imm as i8)),
        [0x48, 0x81, 0xC4, a, b, c, d, ..] => {
            (at, added) = (7, i64::from(i32::from_le_bytes([*a, *b, *c, *d])))
        }
        _ => {}
    }
    let mut popped = Vec::new();
    for _ in 0..MAX_INSTRUCTIONS {
        let (reg, len) = match code.get(at..)? {
            [0xC3, ..] => {
                let cfa = added + 8;
                let saved = popped.into_iter().map(|(r, at)| (r, at - cfa)).collect();
                return (added >= 0).then_some(Edge { cfa, ra: Some(-8), saved });
            }
            [b @ 0x58..=0x5F, ..] => (X86_64_DWARF[usize::from(b - 0x58)], 1),
            [0x41, b @ 0x58..=0x5F, ..] => (X86_64_DWARF[usize::from(b - 0x58) + 8], 2),
            _ => return None,
        };
        if reg == RSP {
            return None;
        }
        popped.push((reg, added));
        (added, at) = (added + 8, at + len);
    }
    None
}

fn x86_64_prologue(code: &[u8], into: usize) -> Option<Edge> {
    let (mut at, mut taken) = (0usize, 0i64);
    let mut saved = Vec::new();
    for _ in 0..MAX_INSTRUCTIONS {
        if at == into {
            return Some(Edge { cfa: taken + 8, ra: Some(-8), saved });
        }
        if at > into {
            return None;
        }
        match code.get(at..)? {
            [b @ 0x50..=0x57, ..] => {
                taken += 8;
                saved.push((X86_64_DWARF[usize::from(b - 0x50)], -8 - taken));
                at += 1;
            }
            [0x41, b @ 0x50..=0x57, ..] => {
                taken += 8;
                saved.push((X86_64_DWARF[usize::from(b - 0x50) + 8], -8 - taken));
                at += 2;
            }
            [0x48, 0x83, 0xEC, imm, ..] => (taken, at) = (taken + i64::from(*imm as i8), at + 4),
            [0x48, 0x81, 0xEC, a, b, c, d, ..] => {
                taken += i64::from(i32::from_le_bytes([*a, *b, *c, *d]));
                at += 7;
            }
            // `mov rbp, rsp`: from here on the frame pointer's rule holds.
            [0x48, 0x89, 0xE5, ..] => return None,
            _ => return None,
        }
    }
    None
}

const X30: u16 = 30;
const RET: u32 = 0xD65F_03C0;
const RETAA: u32 = 0xD65F_0BFF;
const RETAB: u32 = 0xD65F_0FFF;
/// `paciasp`, `pacibsp`, `autiasp`, `autibsp`, `bti c`/`j`/`jc`: no effect on
/// the frame.
const HINTS: [u32; 7] =
    [0xD503_233F, 0xD503_237F, 0xD503_23BF, 0xD503_23FF, 0xD503_245F, 0xD503_249F, 0xD503_24DF];

/// The instruction at byte `at` of `code`.
fn word(code: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(code.get(at..at + 4)?.try_into().ok()?))
}

/// The 7-bit signed field of a pair instruction, scaled by 8.
fn imm7(w: u32) -> i64 {
    let raw = ((w >> 15) & 0x7F) as i64;
    (if raw & 0x40 != 0 { raw - 0x80 } else { raw }) * 8
}

/// The 9-bit signed field of a pre- or post-indexed load or store.
fn imm9(w: u32) -> i64 {
    let raw = ((w >> 12) & 0x1FF) as i64;
    if raw & 0x100 != 0 {
        raw - 0x200
    } else {
        raw
    }
}

/// An `add`/`sub` immediate's value (12 bits, shifted by 12 where bit 22
/// says so).
fn add_imm(w: u32) -> i64 {
    let imm = i64::from((w >> 10) & 0xFFF);
    if w & (1 << 22) != 0 {
        imm << 12
    } else {
        imm
    }
}

/// The state at `into` bytes into the arm64 function whose code (from its
/// start, running past the pc) is `code`.
pub fn aarch64(code: &[u8], into: usize) -> Option<Edge> {
    if into % 4 != 0 {
        return None;
    }
    aarch64_epilogue(code.get(into..)?).or_else(|| aarch64_prologue(code, into))
}

fn aarch64_epilogue(code: &[u8]) -> Option<Edge> {
    let mut added = 0i64;
    // (register, where it is reloaded from, as an offset from the pc's sp)
    let mut loads: Vec<(u16, i64)> = Vec::new();
    for i in 0..MAX_INSTRUCTIONS {
        let w = word(code, 4 * i)?;
        let (rt, rt2) = ((w & 31) as u16, ((w >> 10) & 31) as u16);
        match w {
            RET | RETAA | RETAB => {
                let cfa = added;
                let slot = |reg| loads.iter().find(|l| l.0 == reg).map(|l| l.1 - cfa);
                let saved = loads.iter().filter(|l| l.0 != X30).map(|&(r, at)| (r, at - cfa));
                return Some(Edge { cfa, ra: slot(X30), saved: saved.collect() });
            }
            w if HINTS.contains(&w) => {}
            // ldp xA, xB, [sp, #imm]
            w if w & 0xFFC0_03E0 == 0xA940_03E0 => {
                loads.push((rt, added + imm7(w)));
                loads.push((rt2, added + imm7(w) + 8));
            }
            // ldp xA, xB, [sp], #imm
            w if w & 0xFFC0_03E0 == 0xA8C0_03E0 => {
                loads.push((rt, added));
                loads.push((rt2, added + 8));
                added += imm7(w);
            }
            // ldp dA, dB, [sp, #imm] (no tracked register)
            w if w & 0xFFC0_03E0 == 0x6D40_03E0 => {}
            // ldp dA, dB, [sp], #imm
            w if w & 0xFFC0_03E0 == 0x6CC0_03E0 => added += imm7(w),
            // ldr xT, [sp], #imm
            w if w & 0xFFE0_0FE0 == 0xF840_07E0 => {
                loads.push((rt, added));
                added += imm9(w);
            }
            // add sp, sp, #imm
            w if w & 0xFF80_03FF == 0x9100_03FF => added += add_imm(w),
            _ => return None,
        }
    }
    None
}

fn aarch64_prologue(code: &[u8], into: usize) -> Option<Edge> {
    let mut taken = 0i64;
    // (register, where it is stored, as an offset from the entry's sp: the CFA)
    let mut stores: Vec<(u16, i64)> = Vec::new();
    for i in 0..MAX_INSTRUCTIONS {
        if 4 * i == into {
            let saved = stores.iter().filter(|s| s.0 != X30 && s.0 < 31).copied();
            let ra = stores.iter().find(|s| s.0 == X30).map(|s| s.1);
            return Some(Edge { cfa: taken, ra, saved: saved.collect() });
        }
        let w = word(code, 4 * i)?;
        let (rt, rt2) = ((w & 31) as u16, ((w >> 10) & 31) as u16);
        match w {
            w if HINTS.contains(&w) => {}
            // stp xA, xB, [sp, #-imm]!
            w if w & 0xFFC0_03E0 == 0xA980_03E0 => {
                taken -= imm7(w);
                stores.push((rt, -taken));
                stores.push((rt2, -taken + 8));
            }
            // stp xA, xB, [sp, #imm]
            w if w & 0xFFC0_03E0 == 0xA900_03E0 => {
                stores.push((rt, -taken + imm7(w)));
                stores.push((rt2, -taken + imm7(w) + 8));
            }
            // stp dA, dB, [sp, #-imm]! (no tracked register)
            w if w & 0xFFC0_03E0 == 0x6D80_03E0 => taken -= imm7(w),
            // stp dA, dB, [sp, #imm]
            w if w & 0xFFC0_03E0 == 0x6D00_03E0 => {}
            // str xT, [sp, #-imm]!
            w if w & 0xFFE0_0FE0 == 0xF800_0FE0 => {
                taken -= imm9(w);
                stores.push((rt, -taken));
            }
            // sub sp, sp, #imm
            w if w & 0xFF80_03FF == 0xD100_03FF => taken += add_imm(w),
            // mov x29, sp / add x29, sp, #imm: from here on the frame record's rule holds.
            w if w & 0xFF80_03FF == 0x9100_03FD => return None,
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(code: &[u32]) -> Vec<u8> {
        code.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn an_x86_64_prologue_is_read_up_to_the_pc() {
        // push r14; push rbx; sub rsp, 0x18; mov rax, [rip]...
        let code = [0x41, 0x56, 0x53, 0x48, 0x83, 0xEC, 0x18, 0x48, 0x8B, 0x05, 0, 0, 0, 0];
        assert_eq!(x86_64(&code, 0), Some(Edge { cfa: 8, ra: Some(-8), saved: vec![] }));
        assert_eq!(x86_64(&code, 2), Some(Edge { cfa: 16, ra: Some(-8), saved: vec![(14, -16)] }));
        let pushed = Edge { cfa: 24, ra: Some(-8), saved: vec![(14, -16), (3, -24)] };
        assert_eq!(x86_64(&code, 3), Some(pushed));
        assert_eq!(x86_64(&code, 7).map(|e| e.cfa), Some(48));
        // Past the prologue, or inside an instruction: the table's.
        assert_eq!(x86_64(&code, 14), None);
        assert_eq!(x86_64(&code, 1), None);
        // push rbp; mov rbp, rsp: the frame pointer's rule once it is set.
        let framed = [0x55, 0x48, 0x89, 0xE5, 0x53];
        assert_eq!(x86_64(&framed, 1), Some(Edge { cfa: 16, ra: Some(-8), saved: vec![(6, -16)] }));
        assert_eq!(x86_64(&framed, 4), None);
    }

    #[test]
    fn an_x86_64_epilogue_is_read_from_the_pc() {
        // add rsp, 0x18; pop rbx; pop r14; ret
        let code = [0x48, 0x83, 0xC4, 0x18, 0x5B, 0x41, 0x5E, 0xC3];
        let at_add = Edge { cfa: 48, ra: Some(-8), saved: vec![(3, -24), (14, -16)] };
        assert_eq!(x86_64(&code, 0), Some(at_add));
        assert_eq!(x86_64(&code, 5), Some(Edge { cfa: 16, ra: Some(-8), saved: vec![(14, -16)] }));
        assert_eq!(x86_64(&code, 7), Some(Edge { cfa: 8, ra: Some(-8), saved: vec![] }));
        // pop rsp is no epilogue.
        assert_eq!(x86_64(&[0x90, 0x5C, 0xC3], 1), None);
    }

    #[test]
    fn an_arm64_prologue_is_read_up_to_the_pc() {
        let code = words(&[
            0xD503_237F, // pacibsp
            0xA9BE_4FF4, // stp x20, x19, [sp, #-32]!
            0xA901_7BFD, // stp x29, x30, [sp, #16]
            0x9100_43FD, // add x29, sp, #16
            0xF940_0000, // ldr x0, [x0]
        ]);
        assert_eq!(aarch64(&code, 0), Some(Edge { cfa: 0, ra: None, saved: vec![] }));
        assert_eq!(aarch64(&code, 4), Some(Edge { cfa: 0, ra: None, saved: vec![] }));
        let pushed = Edge { cfa: 32, ra: None, saved: vec![(20, -32), (19, -24)] };
        assert_eq!(aarch64(&code, 8), Some(pushed));
        let recorded = Edge { cfa: 32, ra: Some(-8), saved: vec![(20, -32), (19, -24), (29, -16)] };
        assert_eq!(aarch64(&code, 12), Some(recorded));
        assert_eq!(aarch64(&code, 16), None);
        assert_eq!(aarch64(&code, 2), None);
    }

    #[test]
    fn an_arm64_epilogue_is_read_from_the_pc() {
        let code = words(&[
            0xA941_7BFD, // ldp x29, x30, [sp, #16]
            0xA8C2_4FF4, // ldp x20, x19, [sp], #32
            0xD503_23FF, // autibsp
            RET,
        ]);
        let whole = Edge { cfa: 32, ra: Some(-8), saved: vec![(29, -16), (20, -32), (19, -24)] };
        assert_eq!(aarch64(&code, 0), Some(whole));
        assert_eq!(
            aarch64(&code, 4),
            Some(Edge { cfa: 32, ra: None, saved: vec![(20, -32), (19, -24)] })
        );
        assert_eq!(aarch64(&code, 8), Some(Edge { cfa: 0, ra: None, saved: vec![] }));
        assert_eq!(aarch64(&code, 12), Some(Edge { cfa: 0, ra: None, saved: vec![] }));
    }
}
