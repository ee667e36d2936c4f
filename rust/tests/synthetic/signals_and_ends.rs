//! Signal frames, and each way a walk ends.

use super::*;

// ---------------------------------------------------------------------------
// Signal frames
// ---------------------------------------------------------------------------

pub(crate) const TRAMP: u64 = 0x3800;
pub(crate) const BEFORE_G: u64 = 0x3ff0; // ends where G starts; outermost
pub(crate) const G: u64 = 0x4000; // an ordinary leaf: CFA = rsp + 8
pub(crate) const G_LEAF: u64 = 0x5000; // CFA = rsp, return address in rax

/// A `__restore_rt`-like trampoline (CFA = rsp + 0x100; rip, rsp, rax as
/// expressions into the context at rsp) with or without the 'S'
/// augmentation, over G and G_LEAF.
pub(crate) fn signal_cfi(signal: bool) -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let at = |offset| breg(RSP, offset);
    let tramp_cie = cfi.add_cie(
        RIP,
        signal,
        vec![
            cfa(RSP, 0x100),
            Insn::Expression(Register(RIP), at(0)),
            Insn::Expression(Register(RSP), at(8)),
            Insn::Expression(Register(RAX), at(0x10)),
        ],
    );
    cfi.fde_of(tramp_cie, TRAMP, 0x10, vec![])
        .fde(BEFORE_G, 0x10, vec![(0, Insn::Undefined(Register(RIP)))])
        .fde(G, 0x40, vec![])
        .fde(
            G_LEAF,
            0x40,
            vec![(0, cfa(RSP, 0)), (0, Insn::Register(Register(RIP), Register(RAX)))],
        )
        .outermost(START);
    cfi
}

/// The kernel's signal context at SP: interrupted rip, rsp and rax.
pub(crate) fn signal_stack(rip: u64, rax: u64) -> Stack {
    let mut stack = Stack::new();
    stack.set(SP, rip).set(SP + 8, SP + 0x200).set(SP + 0x10, rax).set(SP + 0x200, rt(START + 5));
    stack
}

pub(crate) fn walk_signal(signal: bool, interrupted_pc: u64) -> Walk {
    let stack = signal_stack(interrupted_pc, rt(START + 5));
    walk(
        &mut eh_unwinder(&signal_cfi(signal)),
        rt(TRAMP + 2),
        &[(RSP, SP)],
        &mut stack.memory(),
        16,
    )
}

/// A trampoline whose CFA is the word at rsp + 0x18 and whose rip, rsp and
/// rax are saved at rsp-relative addresses, each by `expression(base
/// register, offset, deref)` (`deref`: the CFA's, a word read there).
pub(crate) fn deref_cfa_signal_cfi(
    expression: impl Fn(u16, i64, bool) -> Expression,
) -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let tramp_cie = cfi.add_cie(
        RIP,
        true,
        vec![
            Insn::CfaExpression(expression(RSP, 0x18, true)),
            Insn::Expression(Register(RIP), expression(RSP, 0, false)),
            Insn::Expression(Register(RSP), expression(RSP, 8, false)),
            Insn::Expression(Register(RAX), expression(RSP, 0x10, false)),
        ],
    );
    cfi.fde_of(tramp_cie, TRAMP, 0x10, vec![]).fde(G, 0x40, vec![]).outermost(START);
    cfi
}

#[test]
fn register_offset_expressions_are_decoded_and_walk_as_evaluated() {
    // `DW_OP_breg7 n` (and `; DW_OP_deref` for the CFA), as glibc's
    // __restore_rt has them: decoded once into rules of their own. The same
    // values by expressions the decoding leaves alone (`+ 0`) are evaluated
    // at every step: the two walks are the same, through the cache as well.
    let decoded = deref_cfa_signal_cfi(|reg, offset, deref| {
        let mut e = breg(reg, offset);
        if deref {
            e.op_deref();
        }
        e
    });
    let evaluated = deref_cfa_signal_cfi(|reg, offset, deref| {
        let mut e = breg(reg, offset);
        e.op(DW_OP_lit0);
        e.op(DW_OP_plus);
        if deref {
            e.op_deref();
        }
        e
    });
    let row = |cfi: &CfiBuilder| {
        let module = load(Arch::X86_64, &Sections::eh(cfi.eh_frame()));
        let (row, _) =
            module.find_row(TRAMP + 2, true, &mut gimli::UnwindContext::new()).expect("a row");
        (row.cfa, row.rule_for(RIP))
    };
    assert_eq!(
        row(&decoded),
        (
            CfaRule::DerefRegister { reg: RSP, offset: 0x18 },
            Some(RegRule::AtRegister { reg: RSP, offset: 0 })
        )
    );
    assert!(matches!(row(&evaluated), (CfaRule::Expr(_), Some(RegRule::Expr(_)))));
    let mut stack = signal_stack(rt(G + 4), rt(START + 5));
    stack.set(SP + 0x18, SP + 0x100);
    let mut walks = Vec::new();
    for cfi in [&decoded, &evaluated] {
        let mut uw = eh_unwinder(cfi);
        for _ in 0..2 {
            walks.push(walk(&mut uw, rt(TRAMP + 2), &[(RSP, SP)], &mut stack.memory(), 16));
        }
    }
    let w = &walks[0];
    assert_eq!(w.pcs(), [rt(TRAMP + 2), rt(G + 4), rt(START + 5)]);
    assert_eq!(w.cfas()[0], Some(SP + 0x100), "the word at rsp + 0x18");
    assert_eq!(w.sps(), [SP, SP + 0x200, SP + 0x208]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert!(walks.iter().all(|other| other == w), "{walks:#?}");
}

/// glibc's x86_64 `__restore_rt` as its CFI has it: the CFA the word at
/// rsp + 0xa0 (the interrupted rsp in the kernel's context), and r8-r15,
/// rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp and rip saved from rsp + 0x28 on.
const GLIBC_CONTEXT: [(u16, i64); 17] = [
    (8, 0x28),
    (9, 0x30),
    (10, 0x38),
    (11, 0x40),
    (12, 0x48),
    (13, 0x50),
    (14, 0x58),
    (15, 0x60),
    (5, 0x68),
    (4, 0x70),
    (6, 0x78),
    (3, 0x80),
    (1, 0x88),
    (0, 0x90),
    (2, 0x98),
    (RSP, 0xa0),
    (RIP, 0xa8),
];

/// A walk from a glibc-like trampoline into PROBE (which shows register
/// `probe` as its CFA), each register's saved word its own value; the same
/// unwinder walks three times, the rule cache warm after the first.
fn glibc_context_walks(probe: u16, captured: usize) -> Vec<Walk> {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let mut cie = vec![Insn::CfaExpression({
        let mut e = breg(RSP, 0xa0);
        e.op_deref();
        e
    })];
    cie.extend(
        GLIBC_CONTEXT.iter().map(|&(reg, at)| Insn::Expression(Register(reg), breg(RSP, at))),
    );
    let tramp_cie = cfi.add_cie(RIP, true, cie);
    cfi.fde_of(tramp_cie, TRAMP, 0x10, vec![]).probe(PROBE, probe);
    let mut stack = Stack::new();
    for &(reg, at) in &GLIBC_CONTEXT {
        stack.set(SP + at as u64, SP + 0x400 + 8 * u64::from(reg));
    }
    stack.set(SP + 0xa8, rt(PROBE + 4));
    let mut memory = Regions::new();
    memory.add(stack.base, &stack.bytes[..captured]);
    let mut uw = eh_unwinder(&cfi);
    (0..3).map(|_| walk(&mut uw, rt(TRAMP + 2), &[(RSP, SP)], &mut memory, 16)).collect()
}

#[test]
fn a_signal_trampolines_context_walks_the_same_from_the_rule_cache() {
    // Its row is too wide for the compact cache: the first walk applies it
    // rule by rule, the later ones as a context row (every word read from
    // one window, in place). Every register it restores, seen through the
    // probe, is the same both ways.
    for &(reg, _) in &GLIBC_CONTEXT[..15] {
        let walks = glibc_context_walks(reg, 0x1000);
        let w = &walks[0];
        assert_eq!(w.pcs(), [rt(TRAMP + 2), rt(PROBE + 4)], "r{reg}");
        let rsp = SP + 0x400 + 8 * u64::from(RSP);
        assert_eq!(w.sps(), [SP, rsp], "the interrupted rsp");
        assert_eq!(w.cfas(), [Some(rsp), Some(SP + 0x400 + 8 * u64::from(reg))], "r{reg}");
        assert!(w.frames[0].signal_frame && w.frames[1].interrupted);
        assert_eq!(w.end.reason, EndReason::EndOfStack);
        assert!(walks.iter().all(|other| other == w), "r{reg}: {walks:#?}");
    }
}

#[test]
fn a_signal_context_partly_captured_ends_as_the_general_step_ends() {
    // The capture ends inside the context: the window a cached context row
    // reads is not there, and the walk ends where the rule-by-rule step
    // ends it, at the CFA's word (rsp + 0xa0) or, with it, the return
    // address's.
    for (captured, at) in [(0x100 + 0x98, 0xa0), (0x100 + 0xa8, 0xa8)] {
        let walks = glibc_context_walks(RBX, captured);
        let w = &walks[0];
        assert_eq!(w.pcs(), [rt(TRAMP + 2)]);
        assert_eq!(w.end.reason, EndReason::Memory);
        assert_eq!(w.end.detail, EndDetail::Address(SP + at));
        assert!(walks.iter().all(|other| other == w), "{walks:#?}");
    }
}

#[test]
fn the_frame_a_signal_interrupted_is_looked_up_at_its_pc() {
    // Interrupted at G's first instruction: pc − 1 would be in BEFORE_G.
    let w = walk_signal(true, rt(G));
    assert_eq!(w.pcs(), [rt(TRAMP + 2), rt(G), rt(START + 5)]);
    assert_eq!(w.sps(), [SP, SP + 0x200, SP + 0x208], "the rsp rule overrides the CFA");
    assert_eq!(w.cfas(), [Some(SP + 0x100), Some(SP + 0x208), Some(SP + 0x210)]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.end.frame, 2);
}

#[test]
fn without_the_s_augmentation_the_next_frame_is_looked_up_at_pc_minus_1() {
    let w = walk_signal(false, rt(G));
    assert_eq!(w.pcs(), [rt(TRAMP + 2), rt(G)]);
    assert_eq!(w.end.reason, EndReason::EndOfStack, "BEFORE_G's rule");
    assert_eq!(w.end.lookup_pc, rt(G - 1));
    assert_eq!(w.end.frame, 1);
}

#[test]
fn the_frame_a_signal_interrupted_may_share_its_callers_sp() {
    // G_LEAF's CFA is its own sp: allowed only because it was interrupted.
    let w = walk_signal(true, rt(G_LEAF + 0x10));
    assert_eq!(w.pcs(), [rt(TRAMP + 2), rt(G_LEAF + 0x10), rt(START + 5)]);
    assert_eq!(w.sps(), [SP, SP + 0x200, SP + 0x200]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);

    let w = walk_signal(false, rt(G_LEAF + 0x10));
    assert_eq!(w.end.reason, EndReason::CfaNotIncreasing);
    assert_eq!(w.end.detail, EndDetail::Sp { caller: SP + 0x200, frame: SP + 0x200 });
    assert_eq!(w.end.frame, 1);
    assert_eq!(w.frames.len(), 2);
    assert_eq!(w.frames[1].cfa, Some(SP + 0x200));
}

/// A handler's stack (`SP`, holding only the trampoline's context: room for
/// four words, so five frames by its bound) and the stack it interrupted, at
/// `other` (below SP or above it), as with `sigaltstack`: the kernel's context
/// at SP gives rip G and rsp `other`; from there, `calls` frames of G, each's
/// return address into G, and then START's: the walk with CFI alone, the
/// same (for a signal frame) with the fallback strategies after it, whose
/// walk is another loop. (Without a signal frame, where CFI ends the walk,
/// the fallbacks find frames of their own.)
fn alternate_stack_walk(signal: bool, other: u64, calls: usize, max_frames: Option<usize>) -> Walk {
    let walks = [&[Strategy::Cfi][..], &[Strategy::Cfi, Strategy::FramePointer, Strategy::Scan]]
        .map(|strategies| alternate_stack_walk_with(strategies, signal, other, calls, max_frames));
    if signal {
        assert_eq!(walks[0], walks[1], "CFI alone and with the fallbacks");
    }
    walks[0].clone()
}

fn alternate_stack_walk_with(
    strategies: &[Strategy],
    signal: bool,
    other: u64,
    calls: usize,
    max_frames: Option<usize>,
) -> Walk {
    let mut alt = Stack { base: SP, bytes: vec![0; 0x20] };
    alt.set(SP, rt(G)).set(SP + 8, other).set(SP + 0x10, 0);
    let mut interrupted = Stack { base: other, bytes: vec![0; 0x1000] };
    for i in 0..calls {
        interrupted.set(other + 8 * i as u64, rt(G + 5));
    }
    interrupted.set(other + 8 * calls as u64, rt(START + 5));
    let mut memory = Regions::new();
    memory.add(alt.base, &alt.bytes);
    memory.add(interrupted.base, &interrupted.bytes);
    let mut frames = Vec::new();
    let mut uw = eh_unwinder(&signal_cfi(signal));
    uw.set_strategies(strategies);
    let regs = registers(&[(RSP, SP)]);
    let end = uw.unwind(rt(TRAMP + 2), &regs, &mut memory, max_frames, &mut frames);
    Walk { frames, end }
}

/// The stack a handler on an alternate stack at SP interrupted: below it, above it.
const LOW: u64 = SP - 0x10_0000;
const HIGH: u64 = SP + 0x10_0000;

#[test]
fn past_a_signal_frame_the_walk_may_go_down_to_the_stack_it_interrupted() {
    // The handler ran on an alternate stack above the interrupted one (gdb
    // and eu-stack go on there too): only a signal frame's caller may be
    // below it, and only below every frame of the walk so far.
    let w = alternate_stack_walk(true, LOW, 0, Some(16));
    assert_eq!(w.pcs(), [rt(TRAMP + 2), rt(G), rt(START + 5)]);
    assert_eq!(w.sps(), [SP, LOW, LOW + 8]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);

    // Without the 'S' augmentation the trampoline is an ordinary frame.
    let w = alternate_stack_walk(false, LOW, 0, Some(16));
    assert_eq!(w.pcs(), [rt(TRAMP + 2)]);
    assert_eq!(w.end.reason, EndReason::CfaNotIncreasing);
    assert_eq!(w.end.detail, EndDetail::Sp { caller: LOW, frame: SP });

    // Frame 0 below the trampoline, and an interrupted sp between the two:
    // a stack the walk has been on.
    let mut stack = Stack::new();
    stack.set(SP - 8, rt(TRAMP + 1)).set(SP, rt(G)).set(SP + 8, SP - 4);
    let mut uw = eh_unwinder(&signal_cfi(true));
    let w = walk(&mut uw, rt(G + 0x10), &[(RSP, SP - 8)], &mut stack.memory(), 16);
    assert_eq!(w.pcs(), [rt(G + 0x10), rt(TRAMP + 1)]);
    assert_eq!(w.end.reason, EndReason::CfaNotIncreasing);
    assert_eq!(w.end.detail, EndDetail::Sp { caller: SP - 4, frame: SP });
}

#[test]
fn a_walk_onto_another_stack_may_hold_that_stacks_frames_too() {
    // The walk's frame limit, where none is given, is what frame 0's stack
    // can hold (five frames here); the interrupted stack's own frames come
    // on top of it, whether that stack is below the handler's or above it
    // (a small alternate stack where a main thread's overflow is handled).
    let mut memory = Regions::new();
    let alt = [0u8; 0x20];
    memory.add(SP, &alt);
    assert_eq!(stack_frame_bound(Arch::X86_64, SP, &mut memory), 5);
    for other in [LOW, HIGH] {
        let w = alternate_stack_walk(true, other, 10, None);
        assert_eq!(w.frames.len(), 13, "{:?}", w.end);
        assert_eq!(w.pcs()[2..12], [rt(G + 5); 10]);
        assert_eq!(w.sps()[1..], (0..12).map(|i| other + 8 * i).collect::<Vec<_>>());
        assert_eq!(w.end.reason, EndReason::EndOfStack);
        // A limit given is the limit.
        let w = alternate_stack_walk(true, other, 10, Some(5));
        assert_eq!(w.frames.len(), 5);
        assert_eq!(w.end.reason, EndReason::FrameLimit);
    }
    // The interrupted stack full of frames, a word each.
    let w = alternate_stack_walk(true, HIGH, 511, None);
    assert_eq!(w.frames.len(), 514);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
}

/// aarch64: the trampoline's CIE uses column 32 for the interrupted pc so
/// that it can restore lr too; the interrupted leaf returns through lr.
#[test]
fn aarch64_signal_frame_restores_pc_and_lr() {
    const LEAF: u64 = 0x5000;
    const PC_COLUMN: u16 = 32;
    let mut cfi = CfiBuilder::new(Arch::Aarch64);
    let at = |offset| breg(A64_SP, offset);
    let tramp_cie = cfi.add_cie(
        PC_COLUMN,
        true,
        vec![
            cfa(A64_SP, 0x200),
            Insn::Expression(Register(PC_COLUMN), at(0)),
            Insn::Expression(Register(A64_SP), at(8)),
            Insn::Expression(Register(X30), at(0x10)),
        ],
    );
    cfi.fde_of(tramp_cie, TRAMP, 0x10, vec![]).fde(LEAF, 0x40, vec![]).outermost(START);
    let mut stack = Stack::new();
    stack.set(SP, rt(LEAF)).set(SP + 8, SP + 0x300).set(SP + 0x10, PAC | rt(START + 4));
    let w = walk(&mut eh_unwinder(&cfi), rt(TRAMP + 4), &[(A64_SP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.pcs(), [rt(TRAMP + 4), rt(LEAF), rt(START + 4)]);
    assert_eq!(w.sps(), [SP, SP + 0x300, SP + 0x300]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.end.frame, 2);
}

// ---------------------------------------------------------------------------
// How walks end
// ---------------------------------------------------------------------------

#[test]
fn undefined_return_address_is_the_end_of_the_stack() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.outermost(START);
    let w =
        walk(&mut eh_unwinder(&cfi), rt(START + 5), &[(RSP, SP)], &mut Stack::new().memory(), 16);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.end.frame, 0);
    assert_eq!(w.cfas(), [Some(SP + 8)]);
    assert!(w.end.reason.is_clean());
}

/// The outermost frame's row, once in the rule cache, ends a walk as it did
/// the first time: on aarch64, where lr is callee-saved by default, the
/// cached row still makes it unknown, rather than leaving the callee's lr
/// to be taken for a return address.
#[test]
fn the_outermost_frame_ends_a_walk_from_the_rule_cache_too() {
    // The CIEs' CFA: rsp + 8 (past the return address) on x86_64, sp on aarch64.
    let cases = [(Arch::X86_64, RSP, None, SP + 8), (Arch::Aarch64, A64_SP, Some(X30), SP)];
    for (arch, sp, lr, cfa) in cases {
        let mut cfi = CfiBuilder::new(arch);
        cfi.outermost(START).fde(F, 0x100, vec![]);
        let mut uw = eh_unwinder(&cfi);
        let mut regs = vec![(sp, SP)];
        regs.extend(lr.map(|lr| (lr, rt(F + 0x20))));
        let mut walks = Vec::new();
        for _ in 0..2 {
            walks.push(walk(&mut uw, rt(START + 4), &regs, &mut Stack::new().memory(), 16));
        }
        assert_eq!(uw.cache_stats().hits, 1, "{arch}: the second walk's row was cached");
        assert_eq!(walks[0], walks[1], "{arch}");
        let w = &walks[1];
        assert_eq!(w.pcs(), [rt(START + 4)], "{arch}");
        assert_eq!((w.end.reason, w.end.frame), (EndReason::EndOfStack, 0), "{arch}");
        assert_eq!(w.cfas(), [Some(cfa)], "{arch}");
    }
}

#[test]
fn x86_64_without_a_return_address_rule_is_the_end_of_the_stack() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let bare = cfi.add_cie(RIP, false, vec![cfa(RSP, 8)]);
    cfi.fde_of(bare, F, 0x100, vec![]);
    let mut stack = Stack::new();
    stack.set(SP, rt(F + 0x20));
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.frames.len(), 1);
}

#[test]
fn zero_return_address_is_pc_zero() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![]);
    let w = walk(
        &mut eh_unwinder(&cfi),
        rt(F + 0x10),
        &[(RSP, SP)],
        &mut Stack::new().memory(), // [SP] = 0
        16,
    );
    assert_eq!(w.end.reason, EndReason::PcZero);
    assert_eq!(w.end.frame, 0);
    assert_eq!(w.cfas(), [Some(SP + 8)]);
    assert!(w.end.reason.is_clean());
}

#[test]
fn cfa_below_sp_stops_the_walk() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![(0, cfa(RSP, -8))]);
    let mut stack = Stack::new();
    stack.set(SP - 16, rt(F + 0x20));
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::CfaNotIncreasing);
    assert_eq!(w.end.detail, EndDetail::Sp { caller: SP - 8, frame: SP });
    assert_eq!(w.frames.len(), 1);
    assert_eq!(w.cfas(), [Some(SP - 8)]);
    assert!(!w.end.reason.is_clean());
}

#[test]
fn a_frame_that_repeats_itself_stops_the_walk() {
    // CFA = rsp and the return address is the pc itself: frame 0 may keep
    // its sp, frame 1 (the same frame again) may not.
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![(0, cfa(RSP, 0))]);
    let mut stack = Stack::new();
    stack.set(SP - 8, rt(F + 0x10));
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 256);
    assert_eq!(w.end.reason, EndReason::CfaNotIncreasing);
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(F + 0x10)]);
    assert_eq!(w.sps(), [SP, SP]);
    assert_eq!(w.end.frame, 1);
    assert_eq!(w.cfas(), [Some(SP), Some(SP)]);
}

#[test]
fn read_outside_captured_memory_ends_with_memory() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![]);
    let far = [0u8; 64];
    let mut mem = Regions::new();
    mem.add(SP + 0x1000, &far);
    let mut uw = eh_unwinder(&cfi);
    let w = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut mem, 16);
    assert_eq!(w.end.reason, EndReason::Memory);
    assert_eq!(w.end.detail, EndDetail::Address(SP));
    assert_eq!(w.cfas(), [Some(SP + 8)]);
    let message = uw.describe(&w.end);
    assert!(message.contains(&format!("{SP:#x}")), "the message names the address: {message}");
}

#[test]
fn a_word_straddling_the_end_of_a_region_is_not_read() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![]);
    let bytes = [0x11u8; 12];
    let mut mem = Regions::new();
    mem.add(SP - 8, &bytes); // [SP, SP + 8) is only half captured
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut mem, 16);
    assert_eq!(w.end.reason, EndReason::Memory);
}

#[test]
fn closure_memory_is_read_through_the_same_interface() {
    let cfi = chain_cfi();
    let stack = chain_stack();
    let mut reads = Vec::new();
    let mut mem = |addr: u64| {
        reads.push(addr);
        stack.memory().read_u64(addr)
    };
    let w = walk(&mut eh_unwinder(&cfi), rt(FP_A + 0x10), &CHAIN_REGS, &mut mem, 64);
    assert_chain(&w);
    reads.sort_unstable();
    assert_eq!(
        reads,
        [SP + 0x10, SP + 0x18, SP + 0x40, SP + 0x48, SP + 0x80, SP + 0x88],
        "the saved rbp and return address of each frame, nothing else"
    );
}

#[test]
fn pc_outside_every_module_is_no_module() {
    let mut uw = eh_unwinder(&chain_cfi());
    let w = walk(&mut uw, 0x1234, &[(RSP, SP)], &mut Stack::new().memory(), 16);
    assert_eq!(w.end.reason, EndReason::NoModule);
    assert_eq!(w.end.module, None);
    assert_eq!(w.frames.len(), 1);
    assert_eq!(w.cfas(), [None]);

    // A return address outside: the frame is kept, its CFA unknown.
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![]);
    let mut stack = Stack::new();
    stack.set(SP, 0x1234);
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::NoModule);
    assert_eq!(w.pcs(), [rt(F + 0x10), 0x1234]);
    assert_eq!(w.cfas(), [Some(SP + 8), None]);
    assert_eq!(w.end.frame, 1);
    assert_eq!(w.end.lookup_pc, 0x1233);
    assert_eq!(w.end.detail, EndDetail::Address(0x1233));
}

#[test]
fn pc_in_a_module_without_an_fde_is_no_unwind_info() {
    let mut uw = eh_unwinder(&chain_cfi());
    let gap = rt(0x8000);
    let w = walk(&mut uw, gap, &[(RSP, SP)], &mut Stack::new().memory(), 16);
    assert_eq!(w.end.reason, EndReason::NoUnwindInfo);
    assert_eq!(w.end.module, Some(0));
    assert_eq!(w.end.lookup_pc, gap);
    assert_eq!(w.frames.len(), 1);
    let message = uw.describe(&w.end);
    assert!(message.contains(NAME), "names the module: {message}");
    assert!(message.contains(&format!("{gap:#x}")), "names the address in hex: {message}");

    // A module with no unwind sections at all.
    let mut uw = unwinder(Arch::X86_64, load(Arch::X86_64, &Sections::default()));
    let w = walk(&mut uw, gap, &[(RSP, SP)], &mut Stack::new().memory(), 16);
    assert_eq!(w.end.reason, EndReason::NoUnwindInfo);
}

#[test]
fn missing_stack_pointer_is_missing_register() {
    let w = walk(
        &mut eh_unwinder(&chain_cfi()),
        rt(FP_A + 0x10),
        &[(RBP, SP)],
        &mut Stack::new().memory(),
        16,
    );
    assert_eq!(w.end.reason, EndReason::MissingRegister);
    assert_eq!(w.end.detail, EndDetail::Register(RSP));
    assert!(w.frames.is_empty());
}

/// A function calling itself `depth` times: every word from SP up is a
/// return address into it.
pub(crate) fn recursion(depth: u64) -> (Unwinder, Stack) {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x40, vec![]);
    let mut stack = Stack::new();
    for k in 0..depth {
        stack.set(SP + 8 * k, rt(F + 0x20));
    }
    (eh_unwinder(&cfi), stack)
}

#[test]
fn the_frame_limit_stops_a_deep_stack() {
    let (mut uw, stack) = recursion(100);
    let w = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 10);
    assert_eq!(w.end.reason, EndReason::FrameLimit);
    assert_eq!(w.frames.len(), 10);
    assert_eq!(w.end.frame, 9);
    let want: Vec<Option<u64>> = (1..=10).map(|k| Some(SP + 8 * k)).collect();
    assert_eq!(w.cfas(), want, "the last frame's CFA was computed too");

    let w = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 1000);
    assert_eq!(w.end.reason, EndReason::PcZero, "the word after the 100th");
    assert_eq!(w.frames.len(), 101);
}

#[test]
fn without_a_limit_every_frame_the_stack_holds_is_found() {
    // A return address in every word from SP to the end of the capture: one
    // frame per word and frame 0, exactly what the stack can hold.
    let words = 0xf00 / 8;
    let (mut uw, stack) = recursion(words);
    assert_eq!(stack_frame_bound(Arch::X86_64, SP, &mut stack.memory()), words as usize + 1);
    let mut frames = Vec::new();
    let regs = registers(&[(RSP, SP)]);
    let end = uw.unwind(rt(F + 0x10), &regs, &mut stack.memory(), None, &mut frames);
    assert_eq!(frames.len(), words as usize + 1);
    assert_eq!(end.reason, EndReason::Memory, "the read past the capture, not the limit");
}

#[test]
fn without_a_limit_a_loop_at_one_sp_ends_at_the_stack_bound() {
    // A signal trampoline (`S`) whose CFA is its own sp and whose return
    // address is the word at sp, its own pc: each caller is an interrupted
    // frame, which may share its callee's sp, so no other check stops it.
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let looping =
        cfi.add_cie(RIP, true, vec![cfa(RSP, 0), Insn::Expression(Register(RIP), breg(RSP, 0))]);
    cfi.fde_of(looping, TRAMP, 0x10, vec![]);
    let mut uw = eh_unwinder(&cfi);
    let mut stack = Stack::new();
    stack.set(SP, rt(TRAMP + 2));
    let regs = registers(&[(RSP, SP)]);
    let mut frames = Vec::new();
    let end = uw.unwind(rt(TRAMP + 2), &regs, &mut stack.memory(), None, &mut frames);
    assert_eq!(end.reason, EndReason::FrameLimit);
    assert_eq!(frames.len(), 0xf00 / 8 + 1);
    assert!(frames.iter().all(|f| f.pc == rt(TRAMP + 2) && f.sp == SP));
    let end = uw.unwind(rt(TRAMP + 2), &regs, &mut stack.memory(), Some(7), &mut frames);
    assert_eq!((end.reason, frames.len()), (EndReason::FrameLimit, 7));
}

#[test]
fn the_stack_bound_counts_words_from_sp() {
    let stack = Stack::new(); // SP - 0x100 .. SP + 0xf00
    let bound = |arch, sp| stack_frame_bound(arch, sp, &mut stack.memory());
    assert_eq!(bound(Arch::X86_64, SP), 0xf00 / 8 + 1);
    assert_eq!(bound(Arch::I386, SP), 0xf00 / 4 + 1);
    // An aarch64 leaf's caller is in lr: one frame more than the words.
    assert_eq!(bound(Arch::Aarch64, SP), 0xf00 / 8 + 2);
    assert_eq!(bound(Arch::X86_64, SP + 0xef8), 2);
    // Outside the capture, or a memory that knows no regions: a fixed bound.
    assert_eq!(bound(Arch::X86_64, SP + 0xf00), UNKNOWN_STACK_FRAMES);
    let mut closure = |_: u64| Some(0u64);
    assert_eq!(stack_frame_bound(Arch::X86_64, SP, &mut closure), UNKNOWN_STACK_FRAMES);
}

#[test]
fn max_frames_zero_and_one() {
    let (mut uw, stack) = recursion(100);
    let w = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 0);
    assert_eq!(w.end.reason, EndReason::FrameLimit);
    assert!(w.frames.is_empty());

    let w = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 1);
    assert_eq!(w.end.reason, EndReason::FrameLimit);
    assert_eq!(w.cfas(), [Some(SP + 8)]);
    assert_eq!(w.end.frame, 0);

    // One frame that cannot be unwound anyway is not cut off by the limit.
    let w = walk(&mut uw, rt(F + 0x10), &[(RSP, SP + 0x400)], &mut stack.memory(), 1);
    assert_eq!(w.end.reason, EndReason::PcZero);
}

#[test]
fn an_endless_expression_is_bad_cfi() {
    // DW_OP_skip -3 jumps back onto itself.
    let endless = || expr(&[DW_OP_skip.0, 0xfd, 0xff]);
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![(0, Insn::CfaExpression(endless()))]).fde(
        F + 0x100,
        0x100,
        vec![(0, Insn::ValExpression(Register(RBX), endless()))],
    );
    let mut uw = eh_unwinder(&cfi);
    let mut stack = Stack::new();
    stack.set(SP, rt(START + 5));

    let w = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::BadCfi);
    assert_eq!(w.end.detail, EndDetail::Expr(ExprError::StepLimit));
    assert_eq!(w.cfas(), [None]);

    let w = walk(&mut uw, rt(F + 0x110), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::BadCfi);
    assert_eq!(w.cfas(), [Some(SP + 8)], "the CFA came before the rbx rule");
    let message = uw.describe(&w.end);
    assert!(message.contains(NAME), "{message}");
}

#[test]
fn a_return_column_beyond_the_tracked_registers_is_bad_cfi() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let odd = cfi.add_cie(100, false, vec![cfa(RSP, 8)]);
    cfi.fde_of(odd, F, 0x100, vec![]);
    let w =
        walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut Stack::new().memory(), 16);
    assert_eq!(w.end.reason, EndReason::BadCfi);
}
