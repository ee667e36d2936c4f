//! 32-bit ARM prologue analysis, as gdb's `arm_analyze_prologue` and
//! `thumb_analyze_prologue` do it, for functions with no unwind table
//! (armhf glibc's C functions built without one: `abort`): from the
//! function's first instruction up to the pc, the pushes (`push`, `str rN,
//! [sp, #-4]!`, `vpush`) and `sub sp` of its entry give where lr and the
//! callee-saved registers are and how far below the caller's sp the frame
//! reaches. Other instructions, which compilers schedule among them (loads
//! of the stack guard, of the GOT), are passed over; the analysis stops at
//! the first branch, return or conditional ARM instruction, past which the
//! code seen need not have run.

/// What a prologue has done by the pc: the CFA (the caller's sp) is the
/// frame's sp plus `size`; each saved register (by DWARF column, r0-r15)
/// is at its offset from the CFA. No allocation: the fallback walk makes
/// none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prologue {
    pub size: u64,
    pub saved: [Option<i64>; 16],
}

impl Prologue {
    /// Push the registers of `list` (bit n: rn), the lowest at the lowest
    /// address, as `push`/`stmdb sp!` does.
    fn push(&mut self, list: u16) {
        self.size += 4 * u64::from(list.count_ones());
        let mut at = -(self.size as i64);
        for (reg, slot) in self.saved.iter_mut().enumerate() {
            if list & (1 << reg) != 0 {
                *slot = Some(at);
                at += 4;
            }
        }
    }

    /// Where lr was saved, if it was.
    pub fn lr(&self) -> Option<i64> {
        self.saved[14]
    }

    /// The saved registers and their offsets, lowest register first.
    pub fn saved(&self) -> impl Iterator<Item = (u16, i64)> + '_ {
        (0u16..).zip(self.saved).filter_map(|(reg, at)| Some((reg, at?)))
    }
}

/// How many bytes from a function's start are looked at.
pub const REACH: usize = 96;

/// The prologue of a function whose code, from its first instruction to
/// the pc (exclusive), is `code`, in Thumb or ARM code.
pub fn analyze(code: &[u8], thumb: bool) -> Prologue {
    let mut out = Prologue::default();
    if thumb {
        thumb_prologue(code, &mut out);
    } else {
        arm_prologue(code, &mut out);
    }
    out
}

fn thumb_prologue(code: &[u8], out: &mut Prologue) {
    let half = |at: usize| -> Option<u16> {
        Some(u16::from_le_bytes(code.get(at..at + 2)?.try_into().ok()?))
    };
    let mut at = 0;
    while let Some(first) = half(at) {
        let wide = first >> 11 >= 0b11101;
        if !wide {
            at += 2;
            match first {
                // push {r0-r7, lr}
                _ if first & 0xfe00 == 0xb400 => {
                    out.push((first & 0xff) | if first & 0x100 != 0 { 1 << 14 } else { 0 })
                }
                // sub sp, #imm7 * 4
                _ if first & 0xff80 == 0xb080 => out.size += u64::from(first & 0x7f) * 4,
                // b, b<cond> (and svc, udf), cbz/cbnz, bx rm, pop, add sp
                _ if first & 0xf800 == 0xe000
                    || first & 0xf000 == 0xd000
                    || first & 0xf500 == 0xb100
                    || first & 0xff87 == 0x4700
                    || first & 0xfe00 == 0xbc00
                    || first & 0xff80 == 0xb000 =>
                {
                    return
                }
                _ => {}
            }
            continue;
        }
        let Some(second) = half(at + 2) else { return };
        at += 4;
        match (first, second) {
            // push.w {list} (stmdb sp!): never sp or pc
            (0xe92d, list) if list & 0xa000 == 0 => out.push(list),
            // str.w rt, [sp, #-4]!
            (0xf84d, s) if s & 0x0fff == 0x0d04 => out.push(1 << (s >> 12)),
            // vpush {dN-dM}: imm8 words
            (f, s) if f & 0xffbf == 0xed2d && s & 0x0f00 == 0x0b00 => {
                out.size += u64::from(s & 0xff) * 4
            }
            // sub.w sp, sp, #const
            (f, s) if f & 0xfbff == 0xf1ad && s & 0x8f00 == 0x0d00 => {
                out.size += u64::from(thumb_expand_imm(f, s))
            }
            // subw sp, sp, #imm12
            (f, s) if f & 0xfbff == 0xf2ad && s & 0x8f00 == 0x0d00 => {
                out.size += u64::from((f & 0x400) << 1 | (s & 0x7000) >> 4 | (s & 0xff))
            }
            // b.w, b<cond>.w and the other control instructions (bit 15, not
            // 14: bl and blx, calls, return here) end the analysis
            (f, s) if f & 0xf800 == 0xf000 && s & 0xc000 == 0x8000 => return,
            // ldm / pop.w, ldr pc, tbb/tbh: anything that may write pc
            (f, s) if (f & 0xffd0 == 0xe890 || f & 0xffd0 == 0xe910) && s & 0x8000 != 0 => return,
            (f, s) if f & 0xfff0 == 0xf8d0 && s & 0xf000 == 0xf000 => return,
            (f, _) if f & 0xfff0 == 0xe8d0 => return,
            _ => {}
        }
    }
}

/// Thumb-2's modified immediate (ThumbExpandImm) of a data-processing
/// instruction's halfwords.
fn thumb_expand_imm(first: u16, second: u16) -> u32 {
    let imm12 = u32::from((first & 0x400) << 1 | (second & 0x7000) >> 4 | (second & 0xff));
    let imm8 = imm12 & 0xff;
    match imm12 >> 8 {
        0 => imm8,
        1 => imm8 << 16 | imm8,
        2 => imm8 << 24 | imm8 << 8,
        3 => imm8 << 24 | imm8 << 16 | imm8 << 8 | imm8,
        _ => (0x80 | imm12 & 0x7f).rotate_right(imm12 >> 7),
    }
}

fn arm_prologue(code: &[u8], out: &mut Prologue) {
    for word in code.chunks_exact(4) {
        let insn = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        if insn >> 28 != 0xe {
            return; // conditional (or unconditional-space) code: not straight-line
        }
        match insn {
            // push {list} (stmdb sp!, never sp or pc)
            _ if insn & 0xffff_0000 == 0xe92d_0000 && insn & 0xa000 == 0 => out.push(insn as u16),
            // str rt, [sp, #-4]!
            _ if insn & 0xffff_0fff == 0xe52d_0004 => out.push(1 << (insn >> 12 & 0xf)),
            // sub sp, sp, #imm (8 bits rotated right by twice 4)
            _ if insn & 0xffff_f000 == 0xe24d_d000 => {
                out.size += u64::from((insn & 0xff).rotate_right(2 * (insn >> 8 & 0xf)))
            }
            // vpush {dN-dM}
            _ if insn & 0xffbf_0f00 == 0xed2d_0b00 => out.size += u64::from(insn & 0xff) * 4,
            // bl: returns here
            _ if insn & 0x0f00_0000 == 0x0b00_0000 => {}
            // b, bx/blx rm, ldm with pc, any write of pc (rd 15)
            _ if insn & 0x0f00_0000 == 0x0a00_0000
                || insn & 0x0fff_ffd0 == 0x012f_ff10
                || (insn & 0x0e10_0000 == 0x0810_0000 && insn & 0x8000 != 0)
                || (insn & 0x0c00_0000 == 0x0400_0000 && insn >> 12 & 0xf == 15)
                || (insn & 0x0c00_0000 == 0 && insn >> 12 & 0xf == 15) =>
            {
                return
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn halves(h: &[u16]) -> Vec<u8> {
        h.iter().flat_map(|h| h.to_le_bytes()).collect()
    }

    #[test]
    fn glibc_armhf_abort() {
        // abort's entry in Debian's armhf libc (objdump -M force-thumb): loads scheduled among
        // `push {r7, lr}` and `sub sp, #144`.
        let code = halves(&[
            0x4a4e, 0xee1d, 0x4f70, 0x4b4e, 0xf5a4, 0x64a0, 0x447a, 0x484d, 0xb580, 0x4478, 0x58d3,
            0xb0a4, 0x681b, 0x9323, 0xf04f, 0x0300,
        ]);
        let p = analyze(&code, true);
        assert_eq!(p.size, 152);
        assert_eq!(p.saved().collect::<Vec<_>>(), [(7, -8), (14, -4)]);
        assert_eq!(p.lr(), Some(-4));
        // Before the push has run: nothing saved.
        assert_eq!(analyze(&code[..16], true), Prologue::default());
    }

    #[test]
    fn thumb2_and_arm_pushes() {
        // push.w {r4-r11, lr}; vpush {d8-d9}; sub.w sp, sp, #256; then a conditional branch
        // and a push the analysis must not see.
        let code = halves(&[0xe92d, 0x4ff0, 0xed2d, 0x8b04, 0xf5ad, 0x7d80, 0xd001, 0xb500]);
        let p = analyze(&code, true);
        assert_eq!(p.size, 36 + 16 + 256);
        assert_eq!(p.lr(), Some(-4));
        assert_eq!(p.saved().next(), Some((4, -36)));
        // ARM: push {r4, fp, lr}; sub sp, sp, #20; bl ...; then b.
        let words: [u32; 5] = [0xe92d_4810, 0xe24d_d014, 0xebff_fff0, 0xeaff_fffe, 0xe52d_e004];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let p = analyze(&code, false);
        assert_eq!((p.size, p.lr()), (32, Some(-4)));
        assert_eq!(p.saved().collect::<Vec<_>>(), [(4, -12), (11, -8), (14, -4)]);
        // gcc's leaf frame in ARM code: str fp, [sp, #-4]!; no lr.
        let p = analyze(&0xe52d_b004u32.to_le_bytes(), false);
        assert_eq!((p.size, p.lr(), p.saved().collect::<Vec<_>>()), (4, None, vec![(11, -4)]));
    }
}
