//! x86_64 frame-pointer chains, sound and damaged, and stack scanning.

use super::*;

// Frame records of a sound x86_64 chain: frame 0's fp, then its callers'.
pub(crate) const FP0: u64 = SP + 0x20;
pub(crate) const FP1: u64 = SP + 0x60;
pub(crate) const FP2: u64 = SP + 0xa0;
pub(crate) const FP3: u64 = SP + 0xe0;

/// frame 0 (PC0) -> R1 -> R2 -> R3, whose frame pointer is 0: the outermost
/// frame, as x86 stacks end (`_start` clears rbp before its call, and
/// `clone`'s child before it calls the thread's function).
pub(crate) fn x86_chain() -> Stack {
    let mut s = Stack::new();
    s.record(FP0, FP1, rt(R1)).record(FP1, FP2, rt(R2)).record(FP2, 0, rt(R3));
    s
}

pub(crate) fn x86_walk(stack: &Stack, strategies: &[Strategy]) -> Walk {
    let module = Image::new(Arch::X86_64).module(None);
    walk(Arch::X86_64, module, strategies, rt(PC0), &[(RSP, SP), (RBP, FP0)], stack)
}

#[test]
fn a_sound_chain_is_followed_to_the_outermost_frame() {
    let w = x86_walk(&x86_chain(), &FP_ONLY);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2), rt(R3)], "{}", w.message);
    assert_eq!(w.sps(), [SP, FP0 + 16, FP1 + 16, FP2 + 16]);
    use Trust::*;
    assert_eq!(w.trusts(), [Context, FramePointer, FramePointer, FramePointer]);
    // The CFA of a frame found this way is its caller's sp.
    assert_eq!(w.frames[0].cfa, Some(FP0 + 16));
    assert_eq!(w.end.reason, EndReason::EndOfStack, "{}", w.message);
    assert_eq!(w.end.detail, EndDetail::ZeroFramePointer);
    assert_eq!(w.end.frame, 3);
}

#[test]
fn an_x86_64_record_of_two_zeros_is_no_end() {
    // Where a call pushes the return address, no frame record holds 0: two
    // zeros at rbp are data (a zeroed buffer in a function that uses rbp as
    // an ordinary register, as musl's `raise` does), not the stack's end,
    // and the walk goes on by scanning where it may.
    let mut s = x86_chain();
    s.record(FP1, 0, 0).set(FP1 + 16, rt(R2));
    let w = x86_walk(&s, &FP_ONLY);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1)], "{}", w.message);
    assert_eq!(w.end.reason, EndReason::BadReturnAddress, "{}", w.message);
    assert!(!w.end.reason.is_clean());
    let w = x86_walk(&s, &ALL);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2), rt(R3)], "{}", w.message);
    // On aarch64, whose `_start` (musl's) clears x29 and x30 and branches,
    // the record of two zeros its callee stores is the end.
    let mut s = Stack::new();
    s.record(FP0, FP1, rt(R1)).record(FP1, 0, 0).set(FP1 + 16, rt(R2));
    let module = Image::new(Arch::Aarch64).module(None);
    let regs = [(A64_SP, SP), (X29, FP0), (X30, rt(R1))];
    let w = walk(Arch::Aarch64, module, &ALL, rt(PC0), &regs, &s);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1)], "{}", w.message);
    assert_eq!(w.end.reason, EndReason::PcZero, "{}", w.message);
}

#[test]
fn cfi_alone_stops_where_there_is_no_cfi() {
    let w = x86_walk(&x86_chain(), &[Strategy::Cfi]);
    assert_eq!(w.pcs(), [rt(PC0)]);
    assert_eq!(w.end.reason, EndReason::NoUnwindInfo);
    // Frame pointers alone (no CFI tried) walk the same chain.
    let w = x86_walk(&x86_chain(), &[Strategy::FramePointer]);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2), rt(R3)]);
}

/// Walk the chain with the record at FP1 changed; the frames before it must be kept.
pub(crate) fn broken_at_fp1(caller_fp: u64, ra: u64) -> Walk {
    let mut s = x86_chain();
    s.record(FP1, caller_fp, ra);
    x86_walk(&s, &FP_ONLY)
}

pub(crate) fn fp_problem(w: &Walk) -> (u64, FpProblem) {
    assert_eq!(w.end.reason, EndReason::FpInvalid, "{}", w.message);
    match w.end.detail {
        EndDetail::FramePointer { fp, problem } => (fp, problem),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_chain_that_loops_stops_with_the_frames_before_the_loop() {
    // FP1's record points back at FP0: frame 2's fp is below its own sp.
    let w = broken_at_fp1(FP0, rt(R2));
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2)]);
    assert_eq!(fp_problem(&w), (FP0, FpProblem::BelowSp(FP1 + 16)));
    assert_eq!(w.end.frame, 2);
    assert!(w.message.contains("frame pointer"), "{}", w.message);
    // A record pointing at itself.
    let w = broken_at_fp1(FP1, rt(R2));
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2)]);
    assert_eq!(fp_problem(&w), (FP1, FpProblem::BelowSp(FP1 + 16)));
}

#[test]
fn a_misaligned_or_escaping_frame_pointer_stops_the_walk() {
    let w = broken_at_fp1(FP2 + 4, rt(R2));
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2)]);
    assert_eq!(fp_problem(&w), (FP2 + 4, FpProblem::Misaligned));
    let w = broken_at_fp1(STACK_END - 8, rt(R2));
    assert_eq!(fp_problem(&w), (STACK_END - 8, FpProblem::OutsideStack));
    let w = broken_at_fp1(SP + 0x10_0000, rt(R2));
    assert_eq!(fp_problem(&w), (SP + 0x10_0000, FpProblem::OutsideStack));
    // A record saving fp 0 (with a return address) is not damage: the
    // caller is the outermost frame (see `the_abis_zero_frame_pointer_...`).
    let w = broken_at_fp1(0, rt(R2));
    assert_eq!((w.end.reason, w.end.detail), (EndReason::EndOfStack, EndDetail::ZeroFramePointer));
    // A zero return address beside a non-zero fp is damage, not the end.
    let w = broken_at_fp1(FP2, 0);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1)]);
    assert_eq!(ra_problem(&w), (0, RaProblem::Zero));
}

pub(crate) fn ra_problem(w: &Walk) -> (u64, RaProblem) {
    assert_eq!(w.end.reason, EndReason::BadReturnAddress, "{}", w.message);
    match w.end.detail {
        EndDetail::ReturnAddress { address, problem } => (address, problem),
        other => panic!("{other:?}"),
    }
}

#[test]
fn implausible_return_addresses_stop_the_walk() {
    for (ra, problem) in [
        (SP + 0x200, RaProblem::InStack),
        (0x1234_5678, RaProblem::NotInCode),
        (rt(0x9100), RaProblem::NotInCode), // in the module, not in its code
        (rt(NO_CALL), RaProblem::NoCall),
        (0xffff_8000_0000_1000, RaProblem::NotUserAddress),
    ] {
        let w = broken_at_fp1(FP2, ra);
        assert_eq!(w.pcs(), [rt(PC0), rt(R1)], "{ra:#x}");
        assert_eq!(ra_problem(&w), (ra, problem));
        assert_eq!(w.end.frame, 1);
    }
}

#[test]
fn scanning_recovers_past_garbage_and_stops_where_nothing_is_plausible() {
    // FP1's record is overwritten with garbage: the frame pointer walk
    // stops at frame 1; scanning from frame 1's sp finds R2 and R3 (the
    // records above are intact) and then nothing but the zero words.
    let mut s = x86_chain();
    s.record(FP2, FP3, rt(R3)).record(FP3, 0, rt(R2));
    s.record(FP1, 0x4141_4141_4141_4141, 0x4242_4242_4242_4242);
    // More garbage between the records: values no scan may take.
    s.set(FP1 + 16, 0x4343_4343).set(FP1 + 24, rt(NO_CALL)).set(FP1 + 32, SP + 0x40);
    s.set(FP2 - 8, 0x1234_5678);
    let w = x86_walk(&s, &FP_ONLY);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1)]);
    assert_eq!(w.end.reason, EndReason::BadReturnAddress);

    let w = x86_walk(&s, &ALL);
    assert_eq!(w.pcs()[..3], [rt(PC0), rt(R1), rt(R3)], "{}", w.message);
    use Trust::*;
    assert_eq!(w.trusts(), [Context, FramePointer, Scan, FramePointer]);
    // R3 was found in FP2's record: the caller's sp is just above it, and
    // its fp is the record's (R2's slot was garbage, so R2 is lost).
    assert_eq!(w.sps()[2], FP2 + 16);
    // FP3's record gives R2 and frame pointer 0: the outermost frame.
    assert_eq!(w.pcs()[3], rt(R2), "{}", w.message);
    assert_eq!(w.end.reason, EndReason::EndOfStack, "{}", w.message);
}

#[test]
fn a_scan_over_garbage_alone_ends_with_scan_failed() {
    let mut s = Stack::new();
    for (i, v) in [0x4141u64, rt(NO_CALL), SP + 8, 0x7fff_ffff_ffff, rt(0x9100)].iter().enumerate()
    {
        s.set(SP + 8 * i as u64, *v);
    }
    let module = Image::new(Arch::X86_64).module(None);
    let w = walk(Arch::X86_64, module.clone(), &ALL, rt(PC0), &[(RSP, SP)], &s);
    assert_eq!(w.pcs(), [rt(PC0)]);
    assert_eq!(w.end.reason, EndReason::ScanFailed, "{}", w.message);
    assert_eq!(w.end.detail, EndDetail::Scan { from: SP, to: STACK_END });
    // With an fp, its step applied and failed first: that is the reason given.
    let w = walk(Arch::X86_64, module, &ALL, rt(PC0), &[(RSP, SP), (RBP, 3)], &s);
    assert_eq!(fp_problem(&w), (3, FpProblem::Misaligned));
    // A bounded window: with 4 words, the scan stops at SP + 32.
    let module = Image::new(Arch::X86_64).module(None);
    let mut uw = Unwinder::new(Arch::X86_64);
    uw.add_module(module).unwrap();
    uw.set_strategies(&ALL);
    uw.set_scan_words(4);
    let mut r = Registers::new();
    r.set(RSP, SP);
    let mut frames = Vec::new();
    let end = uw.unwind(rt(PC0), &r, &mut s.memory(), Some(16), &mut frames);
    assert_eq!(end.detail, EndDetail::Scan { from: SP, to: SP + 32 });
}

#[test]
fn cfi_is_tried_first_again_after_a_fallback_step() {
    // R3 lies in WITH_CFI: its frame is unwound by CFI (the return address
    // at its sp), not by the frame record at FP2.
    let mut s = x86_chain();
    s.set(FP2 + 16, rt(R1)); // frame 3's sp: CFI reads its return address here
    s.record(FP2, FP3, rt(R3));
    s.set(FP3 + 8, rt(R2)); // what the frame pointer walk would have taken
    let module = Image::new(Arch::X86_64).module(Some(x86_eh_frame(&[])));
    let w = walk(Arch::X86_64, module, &ALL, rt(PC0), &[(RSP, SP), (RBP, FP0)], &s);
    use Trust::*;
    assert_eq!(w.pcs()[..5], [rt(PC0), rt(R1), rt(R2), rt(R3), rt(R1)], "{}", w.message);
    assert_eq!(w.trusts()[..5], [Context, FramePointer, FramePointer, FramePointer, Cfi]);
}

#[test]
fn a_frame_found_by_scanning_then_unwound_by_cfi_is_cfi_scan() {
    // Frame 0 has no usable fp; the scan finds R3 (in WITH_CFI) at SP + 0x18,
    // and CFI unwinds R3's frame: its return address is just above.
    let mut s = Stack::new();
    s.set(SP + 0x18, rt(R3)).set(SP + 0x20, rt(R1));
    let module = Image::new(Arch::X86_64).module(Some(x86_eh_frame(&[])));
    let w = walk(Arch::X86_64, module, &ALL, rt(PC0), &[(RSP, SP), (RBP, 3)], &s);
    use Trust::*;
    assert_eq!(w.pcs()[..3], [rt(PC0), rt(R3), rt(R1)], "{}", w.message);
    assert_eq!(w.trusts()[..3], [Context, Scan, CfiScan]);
    assert_eq!(w.sps()[..3], [SP, SP + 0x20, SP + 0x28]);
}

#[test]
fn a_frame_pointer_step_after_cfi_uses_the_fp_the_cfi_recovered() {
    // Frame 0 is in a function with CFI that pushed rbp (CFA = rsp + 16,
    // rbp at CFA − 16) and uses rbp for data; its caller (R1) has no CFI
    // and a frame record at the rbp the CFI restores.
    let f = 0x1600..0x1700;
    let eh =
        x86_eh_frame(&[(f.clone(), vec![Insn::CfaOffset(16), Insn::Offset(Register(RBP), -16)])]);
    let mut s = Stack::new();
    s.set(SP, FP1).set(SP + 8, rt(R1)).record(FP1, 0, rt(R2));
    let module = Image::new(Arch::X86_64).module(Some(eh));
    let w = walk(Arch::X86_64, module, &FP_ONLY, rt(f.start + 8), &[(RSP, SP), (RBP, 0x1234)], &s);
    use Trust::*;
    assert_eq!(w.pcs(), [rt(f.start + 8), rt(R1), rt(R2)], "{}", w.message);
    assert_eq!(w.trusts(), [Context, Cfi, FramePointer]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
}

#[test]
fn x86_64_leaf_frame_zero_returns_through_the_word_at_sp() {
    // Frame 0 in LEAF, which pushed nothing: [sp] is R1, after a call to
    // LEAF; rbp is still the caller's, whose record leads on.
    let mut image = Image::new(Arch::X86_64);
    image.call_before(R1, LEAF);
    let mut s = Stack::new();
    s.set(SP, rt(R1)).record(FP1, FP2, rt(R2)).record(FP2, 0, rt(R3));
    let regs = [(RSP, SP), (RBP, FP1)];
    let w = walk(Arch::X86_64, image.module(None), &FP_ONLY, rt(LEAF + 7), &regs, &s);
    assert_eq!(w.pcs(), [rt(LEAF + 7), rt(R1), rt(R2), rt(R3)], "{}", w.message);
    assert_eq!(w.sps(), [SP, SP + 8, FP1 + 16, FP2 + 16]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    // The same word after a call to another function: not a leaf of LEAF's,
    // so the record at rbp is followed (and R1 is not a frame).
    let w = walk(
        Arch::X86_64,
        Image::new(Arch::X86_64).module(None),
        &FP_ONLY,
        rt(LEAF + 7),
        &regs,
        &s,
    );
    assert_eq!(w.pcs(), [rt(LEAF + 7), rt(R2), rt(R3)], "{}", w.message);
}

/// An aarch64 signal handler (frame 0, no CFI) whose return address is a
/// trampoline on a page in no module (qemu-user's), above whose frame record
/// the kernel's signal frame lies at `frame` (16-byte aligned), holding the
/// interrupted pc and sp, x29 = 0 and x30 = 0 (an outermost frame). With
/// `fpsimd` false its FP/SIMD record is missing: no kernel frame.
fn a64_handler_walk(frame: u64, fpsimd: bool) -> Walk {
    const TRAMPOLINE: u64 = 0x55_0080_1000;
    let mut s = Stack::new();
    s.record(FP0, FP1, TRAMPOLINE);
    // struct rt_sigframe: siginfo (128), ucontext: uc_flags, uc_link, ...,
    // uc_mcontext at 128 + 176: fault_address, regs[31], sp, pc, pstate,
    // then the records, FP/SIMD's first (magic, size).
    let mcontext = frame + 128 + 176;
    for i in 0..31 {
        s.set(mcontext + 8 + 8 * i, 0x1000 + i);
    }
    s.set(mcontext + 8 + 8 * 29, 0).set(mcontext + 8 + 8 * 30, 0);
    s.set(mcontext + 256, SP + 0x800).set(mcontext + 264, rt(R2)).set(mcontext + 272, 0);
    s.set(mcontext + 288, if fpsimd { 0x210 << 32 | 0x4650_8001 } else { 0 });
    let module = Image::new(Arch::Aarch64).module(None);
    let regs = [(A64_SP, SP), (X29, FP0), (X30, TRAMPOLINE)];
    walk(Arch::Aarch64, module, &FP_ONLY, rt(PC0), &regs, &s)
}

#[test]
fn an_aarch64_trampoline_in_no_module_is_crossed_by_the_signal_frame_above_it() {
    let frame = FP0 + 0x40;
    let w = a64_handler_walk(frame, true);
    assert_eq!(w.pcs(), [rt(PC0), 0x55_0080_1000, rt(R2)], "{}", w.message);
    // The trampoline frame's sp is the signal frame's address, exactly.
    assert_eq!(w.sps(), [SP, frame, SP + 0x800]);
    assert_eq!(w.frames[0].cfa, Some(frame));
    use Trust::*;
    assert_eq!(w.trusts(), [Context, FramePointer, Context]);
    assert!(w.frames[1].signal_frame && w.frames[2].interrupted);
    // The interrupted frame's registers are the kernel frame's: its fp 0
    // (which a frame that was interrupted anywhere does not make an end).
    assert_eq!(fp_problem(&w), (0, FpProblem::Zero));
    assert_eq!(w.end.frame, 2);
    // Without a kernel frame there, the return address is refused as before.
    let w = a64_handler_walk(frame, false);
    assert_eq!(w.pcs(), [rt(PC0)], "{}", w.message);
    assert_eq!(ra_problem(&w), (0x55_0080_1000, RaProblem::NotInCode));
}
