//! Walks frame by frame: callee-saved registers, sections, bias, aarch64 and i386, and which FDE a pc is looked up in.

use super::*;

// ---------------------------------------------------------------------------
// Frame by frame
// ---------------------------------------------------------------------------

pub(crate) const FP_A: u64 = 0x1000;
pub(crate) const FP_B: u64 = 0x1100;
pub(crate) const FP_C: u64 = 0x1200;

/// `push rbp; mov rbp, rsp; ...`: from offset 4 on, CFA = rbp + 16, rbp
/// saved at CFA − 16 (the CIE has the return address at CFA − 8).
pub(crate) fn frame_pointer_rows() -> Vec<(u32, Insn)> {
    vec![
        (1, Insn::CfaOffset(16)),
        (1, Insn::Offset(Register(RBP), -16)),
        (4, Insn::CfaRegister(Register(RBP))),
        (8, Insn::ArgsSize(16)), // DW_CFA_GNU_args_size: ignored
    ]
}

/// Three frame-pointer functions A → B → C → START.
pub(crate) fn chain_cfi() -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(FP_A, 0x100, frame_pointer_rows())
        .fde(FP_B, 0x100, frame_pointer_rows())
        .fde(FP_C, 0x100, frame_pointer_rows())
        .outermost(START);
    cfi
}

/// The stack of the chain: each frame's rbp points at the saved rbp of its
/// caller; frame 0 has rsp = SP, rbp = SP + 0x10.
pub(crate) fn chain_stack() -> Stack {
    let mut stack = Stack::new();
    stack
        .set(SP + 0x10, SP + 0x40)
        .set(SP + 0x18, rt(FP_B + 0x20))
        .set(SP + 0x40, SP + 0x80)
        .set(SP + 0x48, rt(FP_C + 0x20))
        .set(SP + 0x80, 0)
        .set(SP + 0x88, rt(START + 5));
    stack
}

pub(crate) const CHAIN_REGS: [(u16, u64); 2] = [(RSP, SP), (RBP, SP + 0x10)];

pub(crate) fn walk_chain(uw: &mut Unwinder) -> Walk {
    walk(uw, rt(FP_A + 0x10), &CHAIN_REGS, &mut chain_stack().memory(), 64)
}

pub(crate) fn assert_chain(w: &Walk) {
    assert_eq!(w.pcs(), [rt(FP_A + 0x10), rt(FP_B + 0x20), rt(FP_C + 0x20), rt(START + 5)]);
    assert_eq!(w.sps(), [SP, SP + 0x20, SP + 0x50, SP + 0x90]);
    assert_eq!(
        w.cfas(),
        [Some(SP + 0x20), Some(SP + 0x50), Some(SP + 0x90), Some(SP + 0x98)],
        "each CFA = rbp + 16 with the rbp recovered from the frame before"
    );
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.end.frame, 3);
}

#[test]
fn callee_saved_registers_are_recovered_frame_by_frame() {
    assert_chain(&walk_chain(&mut eh_unwinder(&chain_cfi())));
}

#[test]
fn debug_frame_only_module() {
    let cfi = chain_cfi();
    let mut uw = unwinder(Arch::X86_64, load(Arch::X86_64, &Sections::debug(cfi.debug_frame())));
    assert_chain(&walk_chain(&mut uw));
}

#[test]
fn eh_frame_falls_back_to_debug_frame() {
    // .eh_frame covers only START; the rest is in .debug_frame.
    let mut eh = CfiBuilder::new(Arch::X86_64);
    eh.outermost(START);
    let sections = Sections {
        eh_frame: Some(eh.eh_frame()),
        debug_frame: Some(chain_cfi().debug_frame()),
        ..Sections::default()
    };
    let mut uw = unwinder(Arch::X86_64, load(Arch::X86_64, &sections));
    assert_chain(&walk_chain(&mut uw));
}

#[test]
fn eh_frame_hdr_table_module() {
    let cfi = chain_cfi();
    let mut uw = unwinder(Arch::X86_64, load(Arch::X86_64, &Sections::eh_with_hdr(cfi.eh_frame())));
    assert_chain(&walk_chain(&mut uw));
}

#[test]
fn unwinding_uses_the_module_bias() {
    let cfi = chain_cfi();
    let other_bias = 0x7000_0000_0000;
    let module = build_module(Arch::X86_64, &Sections::eh(cfi.eh_frame()), TEXT, other_bias)
        .expect("a valid module");
    let mut uw = unwinder(Arch::X86_64, Arc::new(module));
    let moved = |runtime: u64| runtime - BIAS + other_bias;
    let mut stack = chain_stack();
    stack
        .set(SP + 0x18, moved(rt(FP_B + 0x20)))
        .set(SP + 0x48, moved(rt(FP_C + 0x20)))
        .set(SP + 0x88, moved(rt(START + 5)));
    let w = walk(&mut uw, moved(rt(FP_A + 0x10)), &CHAIN_REGS, &mut stack.memory(), 64);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.frames.len(), 4);
    assert_eq!(w.pcs()[3], moved(rt(START + 5)));
}

// ---------------------------------------------------------------------------
// aarch64
// ---------------------------------------------------------------------------

/// Pointer-authentication bits in a signed return address.
pub(crate) const PAC: u64 = 0x003f_0000_0000_0000;

#[test]
fn aarch64_leaf_returns_through_lr_and_pac_bits_are_stripped() {
    const LEAF: u64 = 0x1000;
    const FUNC: u64 = 0x1100;
    let mut cfi = CfiBuilder::new(Arch::Aarch64);
    cfi.fde(LEAF, 0x40, vec![])
        // paciasp; stp x29, x30, [sp, #-32]!
        .fde(
            FUNC,
            0x100,
            vec![
                (0, Insn::NegateRaState),
                (4, Insn::CfaOffset(32)),
                (4, Insn::Offset(Register(X29), -32)),
                (4, Insn::Offset(Register(X30), -24)),
            ],
        )
        .outermost(START);
    let mut stack = Stack::new();
    stack.set(SP, 0).set(SP + 8, PAC | rt(START + 8));
    let regs = [(A64_SP, SP), (X29, SP), (X30, PAC | rt(FUNC + 0x24))];
    let w = walk(&mut eh_unwinder(&cfi), rt(LEAF + 4), &regs, &mut stack.memory(), 16);
    assert_eq!(
        w.pcs(),
        [rt(LEAF + 4), rt(FUNC + 0x24), rt(START + 8)],
        "lr keeps its value without a rule; PAC bits are stripped"
    );
    assert_eq!(w.sps(), [SP, SP, SP + 32], "a leaf's caller may share its sp");
    assert_eq!(w.cfas(), [Some(SP), Some(SP + 32), Some(SP + 32)]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.end.frame, 2);
}

#[test]
fn aarch64_abi_keeps_x19_to_x29_and_loses_x0_to_x18() {
    let run = |probe: u16| {
        let mut cfi = CfiBuilder::new(Arch::Aarch64);
        cfi.fde(F, 0x100, vec![(0, Insn::CfaOffset(16)), (0, Insn::Offset(Register(X30), -8))])
            .probe(PROBE, probe);
        let mut stack = Stack::new();
        stack.set(SP + 8, rt(PROBE + 4));
        let regs = [(A64_SP, SP), (X9, 0x0909), (X19, 0x1919), (X29, 0x2929), (X30, 0x3030)];
        let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &regs, &mut stack.memory(), 16);
        recovered(&w)
    };
    assert_eq!(run(X19), Ok(0x1919));
    assert_eq!(run(X29), Ok(0x2929));
    assert_eq!(run(A64_SP), Ok(SP + 16));
    assert_eq!(run(X9), Err((EndReason::MissingRegister, EndDetail::Register(X9))));
}

// ---------------------------------------------------------------------------
// i386: 4-byte words, 32-bit addresses
// ---------------------------------------------------------------------------

/// Where an i386 test module sits (a 32-bit PIE's usual place), and frame
/// 0's stack pointer, near the top of the 32-bit address space.
pub(crate) const BIAS32: u64 = 0x5655_0000;
pub(crate) const SP32: u64 = 0xffff_c000;

pub(crate) fn rt32(elf: u64) -> u64 {
    elf + BIAS32
}

/// An i386 stack: `len` zero bytes from `base`, written 4 bytes at a time.
pub(crate) fn stack32(base: u64, len: usize) -> Stack {
    Stack { base, bytes: vec![0; len] }
}

impl Stack {
    pub(crate) fn set32(&mut self, addr: u64, value: u64) -> &mut Self {
        let at = (addr - self.base) as usize;
        let value = u32::try_from(value).expect("a 32-bit word");
        self.bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
        self
    }
}

pub(crate) fn unwinder32(cfi: &CfiBuilder, sections: Sections) -> Unwinder {
    let module = build_module(cfi.arch, &sections, TEXT, BIAS32).expect("a valid module");
    unwinder(Arch::I386, Arc::new(module))
}

/// gcc's i386 frames: F (`push ebp; mov ebp, esp; push ebx; push esi`: CFA
/// = ebp + 8, ebp at CFA − 8, ebx at CFA − 12, esi at CFA − 16) called by
/// PROBE (`push ebx`: CFA = esp + 8, ebx at CFA − 8), called by `_start`.
pub(crate) fn i386_chain() -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::I386);
    cfi.fde(
        F,
        0x100,
        vec![
            (1, Insn::CfaOffset(8)),
            (1, Insn::Offset(Register(EBP), -8)),
            (3, Insn::CfaRegister(Register(EBP))),
            (4, Insn::Offset(Register(EBX), -12)),
            (5, Insn::Offset(Register(ESI), -16)),
        ],
    )
    .fde(PROBE, 0x100, vec![(1, Insn::CfaOffset(8)), (1, Insn::Offset(Register(EBX), -8))])
    .outermost(START);
    cfi
}

/// The stack of `i386_chain` stopped at F + 0x10: every saved value a
/// 4-byte word right next to others, so that an 8-byte read would mix two.
pub(crate) fn i386_chain_stack() -> Stack {
    let mut stack = stack32(SP32 - 0x100, 0x1000);
    // F's frame: esi, ebx, ebp, return address; CFA = SP32 + 0x10.
    stack
        .set32(SP32, 0x5151_5151)
        .set32(SP32 + 4, 0xb0b0_b0b0)
        .set32(SP32 + 8, 0xdead_0008)
        .set32(SP32 + 0xc, rt32(PROBE + 0x20));
    // PROBE's frame: the caller's ebx, return address; CFA = SP32 + 0x18.
    stack.set32(SP32 + 0x10, 0xcafe_0bb0).set32(SP32 + 0x14, rt32(START + 5));
    stack
}

pub(crate) const I386_CHAIN_REGS: [(u16, u64); 4] =
    [(ESP, SP32), (EBP, SP32 + 8), (EBX, 0x3333), (ESI, 0x6666)];

pub(crate) fn assert_i386_chain(w: &Walk) {
    assert_eq!(w.end.reason, EndReason::EndOfStack, "{:?}", w.end);
    assert_eq!(w.pcs(), [rt32(F + 0x10), rt32(PROBE + 0x20), rt32(START + 5)]);
    assert_eq!(w.sps(), [SP32, SP32 + 0x10, SP32 + 0x18], "esp = CFA: 4-byte return addresses");
    assert_eq!(w.cfas(), [Some(SP32 + 0x10), Some(SP32 + 0x18), Some(SP32 + 0x1c)]);
}

#[test]
fn i386_frames_are_read_in_4_byte_words() {
    for sections in
        [Sections::eh(i386_chain().eh_frame()), Sections::debug(i386_chain().debug_frame())]
    {
        let mut uw = unwinder32(&i386_chain(), sections);
        let stack = i386_chain_stack();
        let w = walk(&mut uw, rt32(F + 0x10), &I386_CHAIN_REGS, &mut stack.memory(), 16);
        assert_i386_chain(&w);
    }
}

#[test]
fn i386_callee_saved_registers_are_recovered() {
    // The probe after F shows the caller's ebx / esi / ebp / eax as its CFA.
    let run = |probe: u16| {
        let mut cfi = CfiBuilder::new(Arch::I386);
        cfi.fde(
            F,
            0x100,
            vec![
                (1, Insn::CfaOffset(8)),
                (1, Insn::Offset(Register(EBP), -8)),
                (2, Insn::CfaOffset(12)),
                (2, Insn::Offset(Register(EBX), -12)),
            ],
        )
        .probe(PROBE, probe);
        // push ebp; push ebx: CFA = esp + 12.
        let mut stack = stack32(SP32 - 0x100, 0x1000);
        stack.set32(SP32, 0xb0b0_b0b0).set32(SP32 + 4, 0xeb0e_b0eb);
        stack.set32(SP32 + 8, rt32(PROBE + 0x20));
        let regs = [(ESP, SP32), (EBP, 0x5555), (EBX, 0x3333), (ESI, 0x6666), (EAX, 0xa)];
        let mut uw = unwinder32(&cfi, Sections::eh(cfi.eh_frame()));
        recovered(&walk(&mut uw, rt32(F + 0x10), &regs, &mut stack.memory(), 16))
    };
    assert_eq!(run(EBX), Ok(0xb0b0_b0b0), "saved at CFA - 12");
    assert_eq!(run(EBP), Ok(0xeb0e_b0eb), "saved at CFA - 8");
    assert_eq!(run(ESI), Ok(0x6666), "callee-saved, no rule: same value");
    assert_eq!(run(ESP), Ok(SP32 + 0xc), "the caller's esp is the CFA");
    assert_eq!(run(EAX), Err((EndReason::MissingRegister, EndDetail::Register(EAX))));
}

/// The seed's `_Unwind_Backtrace` case: gcc's i386 CIEs never give esp a
/// rule; the caller's esp is the CFA. A rule for esp, where there is one,
/// wins.
#[test]
fn i386_esp_without_a_rule_is_the_cfa() {
    let run = |rules: Vec<Insn>| {
        let mut cfi = CfiBuilder::new(Arch::I386);
        cfi.fde(F, 0x100, rules.into_iter().map(|r| (0, r)).collect()).probe(PROBE, ESP);
        let mut stack = stack32(SP32 - 0x100, 0x1000);
        stack.set32(SP32 + 0x1c, rt32(PROBE + 0x20));
        let mut uw = unwinder32(&cfi, Sections::eh(cfi.eh_frame()));
        walk(&mut uw, rt32(F + 0x10), &[(ESP, SP32)], &mut stack.memory(), 16)
    };
    let w = run(vec![Insn::CfaOffset(0x20)]);
    assert_eq!(recovered(&w), Ok(SP32 + 0x20));
    assert_eq!(w.frames[1].sp, SP32 + 0x20);
    let w = run(vec![Insn::CfaOffset(0x20), Insn::ValOffset(Register(ESP), 8)]);
    assert_eq!(recovered(&w), Ok(SP32 + 0x28), "val_offset(esp, 8) = CFA + 8");
}

/// Addresses wrap at 32 bits: a saved register below a CFA near 0 lies at
/// the top of the address space, and a CFA past 2^32 wraps to a low one
/// (which is not above the frame's sp: the walk stops there).
#[test]
fn i386_addresses_wrap_at_32_bits() {
    // F: CFA = ebp + 8, ebx saved at CFA - 0x20; frame 0's ebp = 0x10.
    let mut cfi = CfiBuilder::new(Arch::I386);
    cfi.fde(
        F,
        0x100,
        vec![
            (0, cfa(EBP, 8)),
            (0, Insn::Offset(Register(EBP), -8)),
            (0, Insn::Offset(Register(EBX), -0x20)),
        ],
    )
    .probe(PROBE, EBX);
    let mut low = stack32(0, 0x100);
    low.set32(0x14, rt32(PROBE + 0x20)); // return address at CFA - 4
    let mut top = stack32(0xffff_ff00, 0x100);
    top.set32(0xffff_fff8, 0xb0b0_b0b0); // 0x18 - 0x20, wrapped
    let mut mem = Regions::new();
    mem.add(low.base, &low.bytes);
    mem.add(top.base, &top.bytes);
    let mut uw = unwinder32(&cfi, Sections::eh(cfi.eh_frame()));
    let regs = [(ESP, 0x8), (EBP, 0x10), (EBX, 0x3333)];
    let w = walk(&mut uw, rt32(F + 0x10), &regs, &mut mem, 16);
    assert_eq!(w.cfas()[0], Some(0x18));
    assert_eq!(recovered(&w), Ok(0xb0b0_b0b0), "ebx read at 0xfffffff8: {:?}", w.end);

    // A CFA past the top: esp + 0x10 from 0xfffffff8 is 0x8, not 0x1_0000_0008.
    let mut cfi = CfiBuilder::new(Arch::I386);
    cfi.fde(F, 0x100, vec![(0, Insn::CfaOffset(0x10))]).outermost(START);
    let mut low = stack32(0, 0x100);
    low.set32(0x4, rt32(START + 5));
    let mut uw = unwinder32(&cfi, Sections::eh(cfi.eh_frame()));
    let w = walk(&mut uw, rt32(F + 0x10), &[(ESP, 0xffff_fff8)], &mut low.memory(), 16);
    assert_eq!(w.cfas()[0], Some(0x8));
    assert_eq!(w.end.reason, EndReason::CfaNotIncreasing, "the return address was read at 0x4");
    assert_eq!(w.end.detail, EndDetail::Sp { caller: 0x8, frame: 0xffff_fff8 });
}

/// The i386 vDSO's `__kernel_rt_sigreturn` in small: the CFA the word at
/// esp + 0x30 (the interrupted esp in the kernel's sigcontext), and eax,
/// ebx, esi, ebp, esp and eip at esp plus offsets, 4-byte words side by side.
/// Cached, it is a context row read in 4-byte words: the walks from the
/// cache give every register the rule-by-rule first walk gives.
#[test]
fn i386_signal_context_walks_the_same_from_the_rule_cache() {
    const CONTEXT: [(u16, i64); 6] =
        [(EAX, 0x1c), (EBX, 0x20), (ESI, 0x24), (EBP, 0x28), (ESP, 0x30), (EIP, 0x34)];
    let value = |reg: u16| SP32 + 0x400 + 4 * u64::from(reg);
    for &(probe, _) in &CONTEXT[..4] {
        let mut cfi = CfiBuilder::new(Arch::I386);
        let mut cie = vec![Insn::CfaExpression({
            let mut e = breg(ESP, 0x30);
            e.op_deref();
            e
        })];
        cie.extend(CONTEXT.iter().map(|&(reg, at)| Insn::Expression(Register(reg), breg(ESP, at))));
        let tramp = cfi.add_cie(EIP, true, cie);
        cfi.fde_of(tramp, signals_and_ends::TRAMP, 0x10, vec![]).probe(PROBE, probe);
        let mut stack = stack32(SP32 - 0x100, 0x1000);
        for &(reg, at) in &CONTEXT {
            stack.set32(SP32 + at as u64, value(reg));
        }
        stack.set32(SP32 + 0x34, rt32(PROBE + 4));
        let mut uw = unwinder32(&cfi, Sections::eh(cfi.eh_frame()));
        let pc = rt32(signals_and_ends::TRAMP + 2);
        let walks: Vec<_> =
            (0..3).map(|_| walk(&mut uw, pc, &[(ESP, SP32)], &mut stack.memory(), 16)).collect();
        let w = &walks[0];
        assert_eq!(w.pcs(), [pc, rt32(PROBE + 4)], "{w:?}");
        assert_eq!(w.sps(), [SP32, value(ESP)]);
        assert_eq!(w.cfas(), [Some(value(ESP)), Some(value(probe))], "r{probe}");
        assert!(walks.iter().all(|other| other == w), "r{probe}: {walks:#?}");
    }
}

/// A 32-bit expression: the CFA of `breg4 (esp) -8; deref` near 0 reads the
/// 4-byte word at the top of the address space.
#[test]
fn i386_cfa_expression_wraps_and_reads_a_word() {
    let mut cfi = CfiBuilder::new(Arch::I386);
    let cfa_expr = expr(&[DW_OP_breg4.0, 0x78 /* sleb -8 */, DW_OP_deref.0]);
    cfi.fde(F, 0x100, vec![(0, Insn::CfaExpression(cfa_expr))]).outermost(START);
    let mut top = stack32(0xffff_ff00, 0x100);
    top.set32(0xffff_fffc, 0x1000).set32(0xffff_fff8, 0x1111_1111);
    let mut low = stack32(0x800, 0x1000);
    low.set32(0xffc, rt32(START + 5));
    let mut mem = Regions::new();
    mem.add(top.base, &top.bytes);
    mem.add(low.base, &low.bytes);
    let mut uw = unwinder32(&cfi, Sections::eh(cfi.eh_frame()));
    let w = walk(&mut uw, rt32(F + 0x10), &[(ESP, 0x4)], &mut mem, 16);
    assert_eq!(w.cfas()[0], Some(0x1000), "[esp - 8] = [0xfffffffc], 4 bytes");
    assert_eq!(w.pcs(), [rt32(F + 0x10), rt32(START + 5)]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
}

// ---------------------------------------------------------------------------
// Which FDE a pc is looked up in
// ---------------------------------------------------------------------------

pub(crate) const A: u64 = 0x1000; // CFA = rsp + 0x20
pub(crate) const B: u64 = 0x1010; // right after A: the return address is undefined
pub(crate) const CALLEE: u64 = 0x1100;

pub(crate) fn adjacent_cfi() -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(A, 0x10, vec![(0, Insn::CfaOffset(0x20))])
        .fde(B, 0x10, vec![(0, Insn::Undefined(Register(RIP)))])
        .fde(CALLEE, 0x10, vec![])
        .outermost(START);
    cfi
}

#[test]
fn return_address_at_the_end_of_an_fde_is_looked_up_in_it() {
    // A's last instruction is a call: the return address is B's first byte.
    let mut uw = eh_unwinder(&adjacent_cfi());
    let mut stack = Stack::new();
    stack.set(SP, rt(B)).set(SP + 0x20, rt(START + 5));
    let w = walk(&mut uw, rt(CALLEE + 1), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.pcs(), [rt(CALLEE + 1), rt(B), rt(START + 5)]);
    assert_eq!(w.cfas()[1], Some(SP + 8 + 0x20), "A's rule, not B's");
    assert_eq!(w.end.reason, EndReason::EndOfStack);
    assert_eq!(w.end.frame, 2);
    assert_eq!(w.end.lookup_pc, rt(START + 4));
    // rule_at itself does not adjust: B's first byte is in B.
    let (_, _, range) = uw.row_at(rt(B)).expect("B covers its first byte");
    assert_eq!(range, rt(B)..rt(B + 0x10));
}

#[test]
fn frame_zero_is_looked_up_at_its_pc() {
    let mut uw = eh_unwinder(&adjacent_cfi());
    let mut stack = Stack::new();
    stack.set(SP, rt(START + 5));
    let w = walk(&mut uw, rt(B), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.end.reason, EndReason::EndOfStack, "B's rule, not A's");
    assert_eq!(w.end.lookup_pc, rt(B));
    assert_eq!(w.frames.len(), 1);
    assert_eq!(w.cfas(), [Some(SP + 8)]);
}

#[test]
fn return_address_at_the_end_of_a_module_is_in_it() {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![])
        .fde(TEXT.end - 0x10, 0x10, vec![(0, Insn::CfaOffset(0x20))])
        .outermost(START);
    let mut stack = Stack::new();
    stack.set(SP, rt(TEXT.end)).set(SP + 0x20, rt(START + 5));
    let w = walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(TEXT.end), rt(START + 5)]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
}

/// The registers of each frame of [`chain_stack`], as `unwind_with_registers`
/// keeps them: (column, value) pairs, sorted.
fn chain_registers(uw: &mut Unwinder, given: &[(u16, u64)]) -> (Walk, Vec<Vec<(u16, u64)>>) {
    let (mut frames, mut files) = (Vec::new(), vec![Registers::new(); 3]);
    let stack = chain_stack();
    let mut mem = stack.memory();
    let pc = rt(FP_A + 0x10);
    let end = uw.unwind_with_registers(
        pc,
        &registers(given),
        &mut mem,
        Some(64),
        &mut frames,
        &mut files,
    );
    let known =
        files.iter().map(|f| (0..64).filter_map(|c| f.get(c).map(|v| (c, v))).collect()).collect();
    (Walk { frames, end }, known)
}

#[test]
fn each_frames_registers_are_those_its_cfi_recovered() {
    let mut uw = eh_unwinder(&chain_cfi());
    let given = [(RAX, 0x99), (RBX, 0x1234), (RSP, SP), (RBP, SP + 0x10), (R12, 7)];
    let (w, regs) = chain_registers(&mut uw, &given);
    assert_chain(&w);
    // The same frames as the plain walk's, and one file a frame.
    assert_eq!(w.frames, walk_chain(&mut uw).frames);
    let pcs = w.pcs();
    assert_eq!(
        regs[0],
        [(RAX, 0x99), (RBX, 0x1234), (RBP, SP + 0x10), (RSP, SP), (R12, 7), (RIP, pcs[0])],
        "frame 0: the registers given, and the pc"
    );
    // Each caller: rbp restored from its callee's frame, sp the CFA, rbx and
    // r12 kept (callee-saved, no rule), rax unknown (caller-saved).
    let callers = [(SP + 0x40, SP + 0x20), (SP + 0x80, SP + 0x50), (0, SP + 0x90)];
    for (i, &(rbp, rsp)) in callers.iter().enumerate() {
        let expected = [(RBX, 0x1234), (RBP, rbp), (RSP, rsp), (R12, 7), (RIP, pcs[i + 1])];
        assert_eq!(regs[i + 1], expected, "frame {}", i + 1);
    }
    assert_eq!(regs.len(), w.frames.len());
}

#[test]
fn past_a_fallback_frame_only_pc_sp_and_a_records_fp_are_kept() {
    // B has no CFI: the frame-pointer strategy finds C from B's frame record.
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(FP_A, 0x100, frame_pointer_rows())
        .fde(FP_C, 0x100, frame_pointer_rows())
        .outermost(START);
    let mut uw = eh_unwinder(&cfi);
    uw.set_strategies(&[Strategy::Cfi, Strategy::FramePointer]);
    let given = [(RBX, 0x1234), (RSP, SP), (RBP, SP + 0x10)];
    let (w, regs) = chain_registers(&mut uw, &given);
    let pcs = w.pcs();
    assert_eq!(pcs, [rt(FP_A + 0x10), rt(FP_B + 0x20), rt(FP_C + 0x20), rt(START + 5)]);
    let trusts: Vec<Trust> = w.frames.iter().map(|f| f.trust).collect();
    assert_eq!(trusts, [Trust::Context, Trust::Cfi, Trust::FramePointer, Trust::Cfi]);
    assert_eq!(regs[1], [(RBX, 0x1234), (RBP, SP + 0x40), (RSP, SP + 0x20), (RIP, pcs[1])]);
    // C, found by B's frame record: its fp from the record, no rbx (B may
    // have changed it); D, by CFI from C: pc and sp only.
    assert_eq!(regs[2], [(RBP, SP + 0x80), (RSP, SP + 0x50), (RIP, pcs[2])]);
    assert_eq!(regs[3], [(RSP, SP + 0x90), (RIP, pcs[3])]);
}
