//! Runs of frame records: a CFI-only walk takes the steps of frames whose
//! rows are all a frame record's (CFA = fp + two words, fp and the return
//! address saved there) apart, with the frame pointer held from one frame
//! to the next. Each walk here must give the frames and the end the
//! general loop (the recording walk, `unwind_with_registers`) gives, cold
//! and with the rule cache warm, and the frames the stack was laid out with.

use super::*;

/// Functions: A and B call each other; C has a row of another kind (its
/// CFA from sp) around the same frame layout.
const A: u64 = 0x1000;
const B: u64 = 0x1100;
const C: u64 = 0x1200;

/// A recursion of frames below `_start`, each 4 words: frame i's fp is
/// its sp + 2 words, where its record holds its caller's fp and return
/// address; its CFA is its caller's sp.
struct Recursion {
    arch: Arch,
    cfi: CfiBuilder,
    stack: Stack,
    regs: Vec<(u16, u64)>,
    pcs: Vec<u64>,
    sps: Vec<u64>,
}

/// `depth` frames and `_start`; the frames in `plain` (callers, so 1 and
/// on) are C's. Frame 0 is A's, stopped past its prologue.
fn recursion(arch: Arch, depth: usize, plain: &[usize]) -> Recursion {
    let (word, fp, sp) = (arch.word_size(), arch.fp(), arch.sp());
    let w = word as i32;
    let record = match arch {
        // push rbp; mov rbp, rsp (ebp on i386).
        Arch::X86_64 | Arch::I386 => vec![
            (1, Insn::CfaOffset(2 * w)),
            (1, Insn::Offset(Register(fp), -2 * w)),
            (4, Insn::CfaRegister(Register(fp))),
        ],
        // clang: sub sp, sp, #32; stp x29, x30, [sp, #16]; add x29, sp, #16.
        _ => vec![
            (8, Insn::Cfa(Register(fp), 16)),
            (8, Insn::Offset(Register(X30), -8)),
            (8, Insn::Offset(Register(fp), -16)),
        ],
    };
    // The same frame, its CFA from sp: fp saved, but not the CFA's register.
    let mut other = vec![(4, Insn::CfaOffset(4 * w)), (4, Insn::Offset(Register(fp), -2 * w))];
    if arch == Arch::Aarch64 {
        other.push((4, Insn::Offset(Register(X30), -w)));
    }
    let mut cfi = CfiBuilder::new(arch);
    cfi.fde(A, 0x100, record.clone()).fde(B, 0x100, record).fde(C, 0x100, other).outermost(START);
    let (runtime, sp0, mut stack): (fn(u64) -> u64, u64, Stack) = match arch {
        Arch::I386 => (rt32, SP32, stack32(SP32 - 0x100, 0x1000)),
        _ => (rt, SP, Stack::new()),
    };
    let mut pcs = vec![runtime(A + 0x10)];
    for i in 1..depth {
        let function = if plain.contains(&i) {
            C
        } else if i % 2 == 0 {
            A
        } else {
            B
        };
        pcs.push(runtime(function + 0x20));
    }
    pcs.push(runtime(START + 8));
    let sps: Vec<u64> = (0..=depth as u64).map(|i| sp0 + 4 * word * i).collect();
    for i in 0..depth {
        let at = sps[i] + 2 * word;
        let caller_fp = if i + 1 < depth { sps[i + 1] + 2 * word } else { 0 };
        // aarch64: every other return address signed (PAC bits, stripped).
        let signed = if arch == Arch::Aarch64 && i % 2 == 1 { frames::PAC } else { 0 };
        stack.put(word, at, caller_fp).put(word, at + word, pcs[i + 1] | signed);
    }
    let regs = vec![(sp, sps[0]), (fp, sps[0] + 2 * word)];
    Recursion { arch, cfi, stack, regs, pcs, sps }
}

impl Stack {
    /// A word of `word` bytes.
    fn put(&mut self, word: u64, addr: u64, value: u64) -> &mut Self {
        if word == 4 {
            self.set32(addr, value)
        } else {
            self.set(addr, value)
        }
    }
}

impl Recursion {
    fn unwinder(&self) -> Unwinder {
        match self.arch {
            Arch::I386 => unwinder32(&self.cfi, Sections::eh(self.cfi.eh_frame())),
            _ => eh_unwinder(&self.cfi),
        }
    }

    /// The walk by the general loop, and by the CFI-only one twice (cold,
    /// then warm), with `uw`, each checked against the general loop's.
    /// The warm walk's, which must be all hits.
    fn walk(&self, uw: &mut Unwinder, max_frames: usize) -> Walk {
        let mut mem = self.stack.memory();
        let (mut frames, mut files) = (Vec::new(), Vec::new());
        let regs = registers(&self.regs);
        let pc = self.pcs[0];
        let end = uw.unwind_with_registers(
            pc,
            &regs,
            &mut mem,
            Some(max_frames),
            &mut frames,
            &mut files,
        );
        let general = Walk { frames, end };
        let cold = walk(uw, pc, &self.regs, &mut mem, max_frames);
        assert_eq!(cold, general, "{:?}: the cold walk", self.arch);
        let before = uw.cache_stats();
        let warm = walk(uw, pc, &self.regs, &mut mem, max_frames);
        assert_eq!(warm, general, "{:?}: the warm walk", self.arch);
        let after = uw.cache_stats();
        assert_eq!(after.misses, before.misses, "{:?}: every row cached", self.arch);
        // One step a frame, the last one's too (it found no caller to keep).
        let steps = warm.frames.len() as u64;
        assert_eq!(after.hits - before.hits, steps, "{:?}: one hit a step", self.arch);
        warm
    }
}

const ARCHES: [Arch; 3] = [Arch::X86_64, Arch::I386, Arch::Aarch64];

#[test]
fn a_run_of_frame_records_walks_as_the_general_loop_does() {
    for arch in ARCHES {
        for plain in [&[][..], &[1], &[5, 6, 20], &[39]] {
            let r = recursion(arch, 40, plain);
            let w = r.walk(&mut r.unwinder(), 64);
            assert_eq!(w.pcs(), r.pcs, "{arch:?}, C at {plain:?}");
            assert_eq!(w.sps(), r.sps, "{arch:?}, C at {plain:?}");
            let cfas: Vec<_> = r.sps[1..].iter().map(|&s| Some(s)).collect();
            assert_eq!(w.cfas()[..40], cfas, "{arch:?}: each CFA its caller's sp");
            assert_eq!(w.end.reason, EndReason::EndOfStack, "{arch:?}");
            assert_eq!(w.end.frame, 40, "{arch:?}");
        }
    }
}

#[test]
fn a_walk_ends_inside_a_run_where_the_general_loop_ends() {
    for arch in ARCHES {
        let word = arch.word_size();
        // Frame 20's record (its caller's fp, then the return address)
        // holds a return address of 0, an fp below its own, an fp outside
        // the captured stack.
        let at = recursion(arch, 40, &[]).sps[20] + 2 * word;
        let cases = [
            ("pc 0", at + word, 0, EndReason::PcZero, 20),
            ("fp below", at, at - 0x40, EndReason::CfaNotIncreasing, 21),
            ("fp outside", at, 0x10, EndReason::Memory, 21),
        ];
        for (what, addr, value, reason, frame) in cases {
            let mut r = recursion(arch, 40, &[]);
            r.stack.put(word, addr, value);
            let w = r.walk(&mut r.unwinder(), 64);
            assert_eq!((w.end.reason, w.end.frame), (reason, frame), "{arch:?}: {what}");
            assert_eq!(w.pcs(), r.pcs[..=frame], "{arch:?}: {what}");
        }
        // The frame limit, inside the run.
        let r = recursion(arch, 40, &[]);
        let w = r.walk(&mut r.unwinder(), 25);
        assert_eq!((w.end.reason, w.frames.len()), (EndReason::FrameLimit, 25), "{arch:?}");
        assert_eq!(w.pcs(), r.pcs[..25], "{arch:?}");
    }
}
