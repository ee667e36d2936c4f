//! Register rules and CFA rules, each on a frame built for it.

use super::*;

// ---------------------------------------------------------------------------
// Register rules
// ---------------------------------------------------------------------------

#[test]
fn offset_rule_reads_the_saved_value_at_cfa_plus_n() {
    let w = x86_recover(
        vec![Insn::Offset(Register(RBX), -16)],
        RBX,
        &[(RBX, 0x1111)],
        &[(SP - 8, 0xb0b0)],
    );
    assert_eq!(recovered(&w), Ok(0xb0b0), "rbx is read from CFA - 16");
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(PROBE + 5)]);
    assert_eq!(w.sps(), [SP, SP + 8], "the caller's sp is the CFA");
    assert_eq!(w.frames[0].cfa, Some(SP + 8));
    assert_eq!(w.frames[0].trust, Trust::Context);
    assert_eq!(w.frames[1].trust, Trust::Cfi);
    assert_eq!(w.end.frame, 1);
}

#[test]
fn val_offset_rule_is_the_address_itself() {
    let w = x86_recover(
        vec![Insn::ValOffset(Register(RBX), -16)],
        RBX,
        &[(RBX, 0x1111)],
        &[(SP - 8, 0xb0b0)],
    );
    assert_eq!(recovered(&w), Ok(SP - 8), "rbx = CFA - 16, not read");
}

#[test]
fn register_rule_copies_another_register() {
    let w = x86_recover(
        vec![Insn::Register(Register(RBX), Register(RAX))],
        RBX,
        &[(RBX, 0x1111), (RAX, 0xa0a0)],
        &[],
    );
    assert_eq!(recovered(&w), Ok(0xa0a0), "the caller's rbx is the callee's rax");
}

#[test]
fn register_rule_naming_an_unknown_register_leaves_it_unknown() {
    let rule = Insn::Register(Register(RBX), Register(R12));
    let w = x86_recover(vec![rule], RBX, &[(RBX, 0x1111)], &[]);
    assert_eq!(
        recovered(&w),
        Err((EndReason::MissingRegister, EndDetail::Register(RBX))),
        "rbx is unknown in the caller; only the probe, which needs it, stops"
    );
    assert_eq!(w.frames.len(), 2);
    assert_eq!(w.frames[0].cfa, Some(SP + 8));
}

#[test]
fn same_value_rule_keeps_a_caller_saved_register() {
    let w = x86_recover(vec![Insn::SameValue(Register(RAX))], RAX, &[(RAX, 0xa0a0)], &[]);
    assert_eq!(recovered(&w), Ok(0xa0a0));
}

#[test]
fn undefined_rule_loses_a_callee_saved_register() {
    let w = x86_recover(vec![Insn::Undefined(Register(RBX))], RBX, &[(RBX, 0x1111)], &[]);
    assert_eq!(recovered(&w), Err((EndReason::MissingRegister, EndDetail::Register(RBX))));
    assert_eq!(w.frames.len(), 2, "the probe frame is kept");
    assert_eq!(w.end.frame, 1);
    assert_eq!(w.frames[1].cfa, None, "its CFA could not be computed");
}

#[test]
fn expression_rule_reads_memory_at_the_computed_address() {
    // CFA is pushed first: CFA - 16 is the address of the saved value.
    let rule = Insn::Expression(Register(RBX), expr(&[DW_OP_lit16.0, DW_OP_minus.0]));
    let w = x86_recover(vec![rule], RBX, &[(RBX, 0x1111)], &[(SP - 8, 0xb0b0)]);
    assert_eq!(recovered(&w), Ok(0xb0b0));
}

#[test]
fn expression_rule_can_read_the_frame_registers() {
    // Drop the CFA, address [rax + 8].
    let rule = Insn::Expression(Register(RBX), expr(&[DW_OP_drop.0, DW_OP_breg0.0, 8]));
    let w =
        x86_recover(vec![rule], RBX, &[(RBX, 0x1111), (RAX, SP + 0x40)], &[(SP + 0x48, 0xe0e0)]);
    assert_eq!(recovered(&w), Ok(0xe0e0));
}

#[test]
fn val_expression_rule_is_the_computed_value() {
    let rule = Insn::ValExpression(Register(RBX), expr(&[DW_OP_lit16.0, DW_OP_minus.0]));
    let w = x86_recover(vec![rule], RBX, &[(RBX, 0x1111)], &[(SP - 8, 0xb0b0)]);
    assert_eq!(recovered(&w), Ok(SP - 8));
}

#[test]
fn deref_size_reads_part_of_a_word() {
    let rule = Insn::ValExpression(
        Register(RBX),
        expr(&[DW_OP_lit16.0, DW_OP_minus.0, DW_OP_deref_size.0, 2]),
    );
    let w = x86_recover(vec![rule], RBX, &[], &[(SP - 8, 0x1234_5678_9abc_def0)]);
    assert_eq!(recovered(&w), Ok(0xdef0));
}

/// DWARF allows `DW_OP_deref_size` at most the address size; a CFI with a
/// larger size is malformed, not a reason to crash.
#[test]
fn deref_size_larger_than_a_word_is_bad_cfi() {
    let rule = Insn::ValExpression(
        Register(RBX),
        expr(&[DW_OP_lit16.0, DW_OP_minus.0, DW_OP_deref_size.0, 16]),
    );
    let w = x86_recover(vec![rule], RBX, &[], &[]);
    assert_eq!(w.end.reason, EndReason::BadCfi);
    assert_eq!(w.frames[0].cfa, Some(SP + 8));
}

#[test]
fn a_saved_register_outside_memory_is_unknown_in_the_caller() {
    // Epilogue CFI can point at slots already popped: not a reason to stop.
    for rule in [
        Insn::Offset(Register(RBX), -0x200),
        Insn::Expression(Register(RBX), expr(&[DW_OP_breg0.0, 0])),
        Insn::ValExpression(Register(RBX), expr(&[DW_OP_breg0.0, 0, DW_OP_deref.0])),
    ] {
        let w = x86_recover(vec![rule.clone()], RBX, &[(RBX, 0x1111), (RAX, 0x10)], &[]);
        assert_eq!(
            recovered(&w),
            Err((EndReason::MissingRegister, EndDetail::Register(RBX))),
            "{rule:?}"
        );
        assert_eq!(w.pcs(), [rt(F + 0x10), rt(PROBE + 5)], "{rule:?}");
    }
}

#[test]
fn the_return_address_and_sp_outside_memory_end_with_memory() {
    for (rule, addr) in [
        (Insn::Expression(Register(RIP), expr(&[DW_OP_breg0.0, 0])), 0x10),
        (Insn::Offset(Register(RSP), -0x200), SP + 8 - 0x200),
        (Insn::Expression(Register(RSP), expr(&[DW_OP_breg0.0, 0])), 0x10),
    ] {
        let w = x86_recover(vec![rule.clone()], RBX, &[(RAX, 0x10)], &[]);
        assert_eq!(w.end.reason, EndReason::Memory, "{rule:?}");
        assert_eq!(w.end.detail, EndDetail::Address(addr), "{rule:?}");
        assert_eq!(w.cfas(), [Some(SP + 8)], "{rule:?}");
    }
}

/// Only an `undefined` rule (or, on x86_64, no rule) marks the outermost
/// frame; a return address that is merely unknown is a failed walk.
#[test]
fn an_unknown_return_address_is_missing_register_not_the_end() {
    let rule = Insn::Register(Register(RIP), Register(RAX));
    let w = x86_recover(vec![rule], RBX, &[], &[]);
    assert_eq!(w.end.reason, EndReason::MissingRegister);
    assert!(!w.end.reason.is_clean());
    assert_eq!(w.frames.len(), 1);
}

#[test]
fn aarch64_leaf_without_lr_is_missing_register_not_the_end() {
    let mut cfi = CfiBuilder::new(Arch::Aarch64);
    cfi.fde(F, 0x100, vec![]);
    let w =
        walk(&mut eh_unwinder(&cfi), rt(F + 4), &[(A64_SP, SP)], &mut Stack::new().memory(), 16);
    assert_eq!(w.end.reason, EndReason::MissingRegister, "x30 was never given");
    assert_eq!(w.end.detail, EndDetail::Register(X30));
}

/// "SP = CFA unless the SP column has a rule": a rule that leaves it
/// unknown does not fall back to the CFA.
#[test]
fn an_sp_rule_leaving_sp_unknown_is_missing_register() {
    for rule in [Insn::Undefined(Register(RSP)), Insn::Register(Register(RSP), Register(RAX))] {
        let w = x86_recover(vec![rule.clone()], RBX, &[(RBX, 0x1111)], &[]);
        assert_eq!(w.end.reason, EndReason::MissingRegister, "{rule:?}");
        assert_eq!(w.frames.len(), 1, "{rule:?}");
    }
}

#[test]
fn x86_64_abi_keeps_rbx_and_loses_rax() {
    let values = [(RBX, 0x1111), (RAX, 0xa0a0)];
    let w = x86_recover(vec![], RBX, &values, &[]);
    assert_eq!(recovered(&w), Ok(0x1111), "rbx is callee-saved");
    let w = x86_recover(vec![], RAX, &values, &[]);
    assert_eq!(
        recovered(&w),
        Err((EndReason::MissingRegister, EndDetail::Register(RAX))),
        "rax is caller-saved: unknown in the caller"
    );
}

#[test]
fn the_callers_sp_is_the_cfa_unless_a_rule_says_otherwise() {
    let w = x86_recover(vec![], RSP, &[], &[]);
    assert_eq!(recovered(&w), Ok(SP + 8));
    let w = x86_recover(vec![Insn::ValOffset(Register(RSP), 0x20)], RSP, &[], &[]);
    assert_eq!(recovered(&w), Ok(SP + 8 + 0x20));
    assert_eq!(w.frames[1].sp, SP + 0x28, "the frame's sp follows the rule");
}

// ---------------------------------------------------------------------------
// CFA rules
// ---------------------------------------------------------------------------

#[test]
fn cfa_as_an_expression() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![(0, Insn::CfaExpression(expr(&[DW_OP_breg7.0, 0x20])))])
        .outermost(START);
    let mut stack = Stack::new();
    stack.set(SP + 0x18, rt(START + 5));
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.cfas()[0], Some(SP + 0x20));
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(START + 5)], "RA read at CFA - 8");
    assert_eq!(w.sps(), [SP, SP + 0x20]);
}

/// glibc's getaddrinfo: `DW_CFA_def_cfa_expression: breg6 (rbp) -16; deref`.
#[test]
fn cfa_expression_deref_reads_captured_memory() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let cfa_expr = expr(&[DW_OP_breg6.0, 0x70 /* sleb -16 */, DW_OP_deref.0]);
    cfi.fde(F, 0x100, vec![(0, Insn::CfaExpression(cfa_expr))]).outermost(START);
    let mut stack = Stack::new();
    stack.set(SP + 0x30, SP + 0x80).set(SP + 0x78, rt(START + 5));
    let regs = [(RSP, SP), (RBP, SP + 0x40)];
    let mut uw = eh_unwinder(&cfi);
    let w = walk(&mut uw, rt(F + 0x10), &regs, &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.cfas()[0], Some(SP + 0x80), "CFA = [rbp - 16]");
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(START + 5)]);

    // The pointer the expression dereferences was not captured.
    let regs = [(RSP, SP), (RBP, 0x1000)];
    let w = walk(&mut uw, rt(F + 0x10), &regs, &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::Memory);
    assert_eq!(w.end.detail, EndDetail::Address(0x1000 - 16));
    assert_eq!(w.cfas(), [None], "the CFA was never computed");
}

/// binutils' lazy PLT: CFA = rsp + 8 + ((rip & 15) >= 11 ? 8 : 0). The
/// expression reads the pc through column 16, in frame 0 and later frames.
#[test]
fn plt_cfa_expression_uses_the_frames_pc() {
    const PLT: u64 = 0x4000;
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(PLT, 0x20, vec![(0, Insn::CfaExpression(plt_cfa_expr()))]).outermost(START);
    let mut uw = eh_unwinder(&cfi);
    for (offset, cfa) in [(0x6, SP + 8), (0xb, SP + 16), (0x16, SP + 8), (0x1f, SP + 16)] {
        let mut stack = Stack::new();
        stack.set(cfa - 8, rt(START + 5));
        let pc = rt(PLT + offset);
        let w = walk(&mut uw, pc, &[(RSP, SP)], &mut stack.memory(), 16);
        assert_eq!(w.cfas()[0], Some(cfa), "PLT offset {offset:#x}");
        assert_eq!(w.pcs(), [pc, rt(START + 5)], "PLT offset {offset:#x}");
    }

    // A later frame whose pc (a return address) is in the PLT: column 16
    // holds that frame's pc, not frame 0's.
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(PLT, 0x20, vec![(0, Insn::CfaExpression(plt_cfa_expr()))])
        .fde(F, 0x100, vec![])
        .outermost(START);
    let mut stack = Stack::new();
    stack
        .set(SP, rt(PLT + 0xc)) // looked up at 0xb: 16 bytes above sp
        .set(SP + 8 + 8, rt(START + 5));
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.cfas()[1], Some(SP + 8 + 16));
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(PLT + 0xc), rt(START + 5)]);
}

/// `breg7 (rsp) 8; breg16 (rip) 0; lit15; and; lit11; ge; lit3; shl; plus`
pub(crate) fn plt_cfa_expr() -> Expression {
    expr(&[
        DW_OP_breg7.0,
        8,
        DW_OP_breg16.0,
        0,
        DW_OP_lit15.0,
        DW_OP_and.0,
        DW_OP_lit11.0,
        DW_OP_ge.0,
        DW_OP_lit3.0,
        DW_OP_shl.0,
        DW_OP_plus.0,
    ])
}
