//! The rule evaluator and the unwind loop on call frame information built
//! byte by byte: every register rule, the pc − 1 lookup, signal frames, each
//! way a walk ends, damaged sections, the `.eh_frame_hdr` search table, the
//! rule cache, and random bytes — cases a real binary can't easily show.
//!
//! Sections are written with gimli's writer. What it can't express (an
//! `.eh_frame_hdr`, damaged entries) is written or patched by hand below.

use std::ops::Range;
use std::sync::Arc;

use gimli::constants::{
    DW_EH_PE_datarel, DW_EH_PE_pcrel, DW_EH_PE_sdata4, DW_EH_PE_udata4, DW_EH_PE_udata8, DW_OP_and,
    DW_OP_breg0, DW_OP_breg16, DW_OP_breg4, DW_OP_breg6, DW_OP_breg7, DW_OP_deref,
    DW_OP_deref_size, DW_OP_drop, DW_OP_ge, DW_OP_lit0, DW_OP_lit11, DW_OP_lit15, DW_OP_lit16,
    DW_OP_lit3, DW_OP_minus, DW_OP_plus, DW_OP_shl, DW_OP_skip,
};
use gimli::write::{
    Address, CallFrameInstruction as Insn, CieId, CommonInformationEntry, DebugFrame, EhFrame,
    EndianVec, Expression, FrameDescriptionEntry, FrameTable,
};
use gimli::{Encoding, EndianSlice, Format, LittleEndian, Register, UnwindSection};

use _core::arch::Arch;
use _core::cfi::{CfaRule, Data, Module, ModuleError, ModuleSections, RegRule, Rules, SectionInfo};
use _core::expr::ExprError;
use _core::memory::{Memory, Regions};
use _core::registers::Registers;
use _core::unwind::{
    stack_frame_bound, End, EndDetail, EndReason, Frame, Trust, Unwinder, UNKNOWN_STACK_FRAMES,
};

// DWARF columns, x86_64.
const RAX: u16 = 0;
const RBX: u16 = 3;
const RBP: u16 = 6;
const RSP: u16 = 7;
const R12: u16 = 12;
const RIP: u16 = 16;
// DWARF columns, aarch64.
const X9: u16 = 9;
const X19: u16 = 19;
const X29: u16 = 29;
const X30: u16 = 30;
const A64_SP: u16 = 31;
// DWARF columns, i386.
const EAX: u16 = 0;
const EBX: u16 = 3;
const ESP: u16 = 4;
const EBP: u16 = 5;
const ESI: u16 = 6;
const EIP: u16 = 8;

/// The module's ELF address range; at run time it sits `BIAS` higher.
const TEXT: Range<u64> = 0x1000..0xa000;
const BIAS: u64 = 0x5555_0000_0000;
const EH_FRAME_ADDR: u64 = 0x9000;
const EH_FRAME_HDR_ADDR: u64 = 0x8800;
const NAME: &str = "libsynthetic.so";

/// Frame 0's stack pointer; the captured stack spans `SP - 0x100 .. SP + 0xf00`.
const SP: u64 = 0x7ffd_0000_1000;

// Functions (ELF addresses) the tests lay out.
const F: u64 = 0x1000;
const PROBE: u64 = 0x2000;
const START: u64 = 0x3000;

/// The runtime address of an ELF address of the module.
fn rt(elf: u64) -> u64 {
    elf + BIAS
}

const ENCODING: Encoding = Encoding { format: Format::Dwarf32, version: 1, address_size: 8 };

fn cfa(reg: u16, offset: i32) -> Insn {
    Insn::Cfa(Register(reg), offset)
}

fn expr(bytes: &[u8]) -> Expression {
    Expression::raw(bytes.to_vec())
}

/// `DW_OP_breg<reg> offset`: the address `reg + offset`.
fn breg(reg: u16, offset: i64) -> Expression {
    let mut e = Expression::new();
    e.op_breg(Register(reg), offset);
    e
}

// ---------------------------------------------------------------------------
// Building call frame information and modules
// ---------------------------------------------------------------------------

/// CIEs and FDEs under construction, addresses in the module's ELF space.
struct CfiBuilder {
    arch: Arch,
    table: FrameTable,
    /// The architecture's ordinary CIE.
    cie: CieId,
}

impl CfiBuilder {
    /// The ordinary CIE is the state at a function's first instruction:
    /// x86_64 CFA = rsp + 8 with the return address at CFA − 8; aarch64
    /// CFA = sp with the return address still in x30 (no rule).
    fn new(arch: Arch) -> Self {
        let initial = match arch {
            Arch::X86_64 => vec![cfa(RSP, 8), Insn::Offset(Register(RIP), -8)],
            Arch::I386 => vec![cfa(ESP, 4), Insn::Offset(Register(EIP), -4)],
            _ => vec![cfa(A64_SP, 0)],
        };
        let mut table = FrameTable::default();
        let cie = table.add_cie(make_cie(arch, arch.ra(), false, initial));
        CfiBuilder { arch, table, cie }
    }

    fn add_cie(&mut self, ra: u16, signal: bool, initial: Vec<Insn>) -> CieId {
        self.table.add_cie(make_cie(self.arch, ra, signal, initial))
    }

    /// An FDE of the ordinary CIE; `rows` are (offset into the function, instruction).
    fn fde(&mut self, start: u64, len: u32, rows: Vec<(u32, Insn)>) -> &mut Self {
        let cie = self.cie;
        self.fde_of(cie, start, len, rows)
    }

    fn fde_of(&mut self, cie: CieId, start: u64, len: u32, rows: Vec<(u32, Insn)>) -> &mut Self {
        let mut fde = FrameDescriptionEntry::new(Address::Constant(start), len);
        for (offset, insn) in rows {
            fde.add_instruction(offset, insn);
        }
        self.table.add_fde(cie, fde);
        self
    }

    /// A function whose CFA is `reg` and whose return address is undefined:
    /// unwinding it shows, as its CFA, the value `reg` was recovered with.
    fn probe(&mut self, start: u64, reg: u16) -> &mut Self {
        let ra = Register(self.arch.ra());
        self.fde(start, 0x100, vec![(0, Insn::Cfa(Register(reg), 0)), (0, Insn::Undefined(ra))])
    }

    /// The outermost function (`_start`): its return address is undefined.
    fn outermost(&mut self, start: u64) -> &mut Self {
        let ra = Register(self.arch.ra());
        self.fde(start, 0x100, vec![(0, Insn::Undefined(ra))])
    }

    fn eh_frame(&self) -> Vec<u8> {
        let mut w = EhFrame(EndianVec::new(LittleEndian));
        self.table.write_eh_frame(&mut w).expect("gimli writes .eh_frame");
        w.0.into_vec()
    }

    fn debug_frame(&self) -> Vec<u8> {
        let mut w = DebugFrame(EndianVec::new(LittleEndian));
        self.table.write_debug_frame(&mut w).expect("gimli writes .debug_frame");
        w.0.into_vec()
    }
}

fn make_cie(arch: Arch, ra: u16, signal: bool, initial: Vec<Insn>) -> CommonInformationEntry {
    let code_alignment = match arch {
        Arch::X86_64 | Arch::I386 => 1,
        _ => 4,
    };
    // As gcc writes them: addresses and the data alignment are a word.
    let word = arch.word_size() as u8;
    let encoding = Encoding { address_size: word, ..ENCODING };
    let mut cie =
        CommonInformationEntry::new(encoding, code_alignment, -(word as i8), Register(ra));
    // gimli writes the 'S' augmentation for this flag.
    cie.signal_trampoline = signal;
    for insn in initial {
        cie.add_instruction(insn);
    }
    cie
}

/// The unwind sections of a test module.
#[derive(Default, Clone)]
struct Sections {
    eh_frame: Option<Vec<u8>>,
    eh_frame_hdr: Option<Vec<u8>>,
    debug_frame: Option<Vec<u8>>,
}

impl Sections {
    fn eh(eh_frame: Vec<u8>) -> Self {
        Sections { eh_frame: Some(eh_frame), ..Sections::default() }
    }

    /// `.eh_frame` with an `.eh_frame_hdr` search table over it.
    fn eh_with_hdr(eh_frame: Vec<u8>) -> Self {
        Sections {
            eh_frame_hdr: Some(eh_frame_hdr(&eh_frame)),
            eh_frame: Some(eh_frame),
            ..Sections::default()
        }
    }

    fn debug(debug_frame: Vec<u8>) -> Self {
        Sections { debug_frame: Some(debug_frame), ..Sections::default() }
    }
}

/// Lay the sections out in one "file" (after a stand-in header, so no
/// section starts at offset 0) and build a module over it.
fn build_module(
    arch: Arch,
    sections: &Sections,
    range: Range<u64>,
    bias: u64,
) -> Result<Module, ModuleError> {
    let mut data = vec![0x7f; 64];
    let mut place = |bytes: &Option<Vec<u8>>, address: u64| {
        bytes.as_ref().map(|b| {
            let info =
                SectionInfo { file_offset: data.len() as u64, size: b.len() as u64, address };
            data.extend_from_slice(b);
            info
        })
    };
    let module_sections = ModuleSections {
        eh_frame: place(&sections.eh_frame, EH_FRAME_ADDR),
        eh_frame_hdr: place(&sections.eh_frame_hdr, EH_FRAME_HDR_ADDR),
        debug_frame: place(&sections.debug_frame, 0),
        ..ModuleSections::default()
    };
    Module::new(NAME.to_owned(), arch, Data::Owned(data), module_sections, range, bias)
}

fn load(arch: Arch, sections: &Sections) -> Arc<Module> {
    Arc::new(build_module(arch, sections, TEXT, BIAS).expect("a valid module"))
}

fn unwinder(arch: Arch, module: Arc<Module>) -> Unwinder {
    let mut uw = Unwinder::new(arch);
    uw.add_module(module).expect("the first module overlaps nothing");
    uw
}

/// An unwinder over the builder's CFI as `.eh_frame` (no header: the
/// sorted-index path).
fn eh_unwinder(cfi: &CfiBuilder) -> Unwinder {
    unwinder(cfi.arch, load(cfi.arch, &Sections::eh(cfi.eh_frame())))
}

/// Each FDE of a section: (initial address, offset of the FDE in the section).
fn fdes(section: &[u8], eh: bool) -> Vec<(u64, usize)> {
    let bases = gimli::BaseAddresses::default().set_eh_frame(EH_FRAME_ADDR);
    if eh {
        let mut s = gimli::EhFrame::new(section, LittleEndian);
        s.set_address_size(8);
        collect_fdes(&s, &bases)
    } else {
        let mut s = gimli::DebugFrame::new(section, LittleEndian);
        s.set_address_size(8);
        collect_fdes(&s, &bases)
    }
}

fn collect_fdes<'a, S: UnwindSection<EndianSlice<'a, LittleEndian>>>(
    section: &S,
    bases: &gimli::BaseAddresses,
) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    let mut entries = section.entries(bases);
    while let Some(entry) = entries.next().expect("well-formed CFI") {
        if let gimli::CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(S::cie_from_offset).expect("a valid FDE");
            out.push((fde.initial_address(), fde.offset()));
        }
    }
    out
}

/// `.eh_frame_hdr` as linkers write it (gimli's writer has no support for
/// this section): version 1, `eh_frame_ptr` pcrel|sdata4, `fde_count`
/// udata4, then the binary-search table of (initial location, FDE address)
/// pairs, datarel|sdata4 (relative to the header), sorted by location.
fn eh_frame_hdr(eh_frame: &[u8]) -> Vec<u8> {
    let mut rows: Vec<(u64, u64)> = fdes(eh_frame, true)
        .into_iter()
        .map(|(start, offset)| (start, EH_FRAME_ADDR + offset as u64))
        .collect();
    rows.sort_unstable();
    let datarel = |addr: u64| (addr as i64 - EH_FRAME_HDR_ADDR as i64) as i32;
    let mut out = vec![
        1,
        (DW_EH_PE_pcrel.0 | DW_EH_PE_sdata4.0),
        DW_EH_PE_udata4.0,
        (DW_EH_PE_datarel.0 | DW_EH_PE_sdata4.0),
    ];
    // pcrel: relative to the field itself, 4 bytes into the header.
    let eh_frame_ptr = EH_FRAME_ADDR as i64 - (EH_FRAME_HDR_ADDR + 4) as i64;
    out.extend_from_slice(&(eh_frame_ptr as i32).to_le_bytes());
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for (start, fde) in rows {
        out.extend_from_slice(&datarel(start).to_le_bytes());
        out.extend_from_slice(&datarel(fde).to_le_bytes());
    }
    out
}

/// Make the CIE pointer of the FDE at `fde_offset` point at that FDE itself,
/// which is not a CIE. (`.eh_frame` stores the distance back from the
/// pointer field, `.debug_frame` a section offset.)
fn break_cie_pointer(section: &mut [u8], fde_offset: usize, eh: bool) {
    let value = if eh { 4 } else { fde_offset as u32 };
    section[fde_offset + 4..fde_offset + 8].copy_from_slice(&value.to_le_bytes());
}

// ---------------------------------------------------------------------------
// Stacks and walks
// ---------------------------------------------------------------------------

/// A captured stack, zero-filled unless set.
struct Stack {
    base: u64,
    bytes: Vec<u8>,
}

impl Stack {
    fn new() -> Self {
        Stack { base: SP - 0x100, bytes: vec![0; 0x1000] }
    }

    fn set(&mut self, addr: u64, value: u64) -> &mut Self {
        let at = (addr - self.base) as usize;
        self.bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        self
    }

    fn memory(&self) -> Regions<'_> {
        let mut m = Regions::new();
        m.add(self.base, &self.bytes);
        m
    }
}

fn registers(values: &[(u16, u64)]) -> Registers {
    let mut regs = Registers::new();
    for &(reg, value) in values {
        regs.set(reg, value);
    }
    regs
}

#[derive(Debug, Clone, PartialEq)]
struct Walk {
    frames: Vec<Frame>,
    end: End,
}

impl Walk {
    fn pcs(&self) -> Vec<u64> {
        self.frames.iter().map(|f| f.pc).collect()
    }

    fn sps(&self) -> Vec<u64> {
        self.frames.iter().map(|f| f.sp).collect()
    }

    fn cfas(&self) -> Vec<Option<u64>> {
        self.frames.iter().map(|f| f.cfa).collect()
    }
}

fn walk<M: Memory + ?Sized>(
    uw: &mut Unwinder,
    pc: u64,
    values: &[(u16, u64)],
    mem: &mut M,
    max_frames: usize,
) -> Walk {
    let mut frames = Vec::new();
    let end = uw.unwind(pc, &registers(values), mem, Some(max_frames), &mut frames);
    Walk { frames, end }
}

/// x86_64: frame 0 at F + 0x10, where the CIE's rules (CFA = rsp + 8,
/// return address at [rsp]) and `rules` are in force, returns into PROBE,
/// which shows the caller's value of register `probe` as its CFA.
fn x86_recover(rules: Vec<Insn>, probe: u16, values: &[(u16, u64)], saved: &[(u64, u64)]) -> Walk {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, rules.into_iter().map(|r| (0, r)).collect()).probe(PROBE, probe);
    let mut stack = Stack::new();
    stack.set(SP, rt(PROBE + 5));
    for &(addr, value) in saved {
        stack.set(addr, value);
    }
    let mut all = vec![(RSP, SP)];
    all.extend_from_slice(values);
    walk(&mut eh_unwinder(&cfi), rt(F + 0x10), &all, &mut stack.memory(), 16)
}

/// The probe frame's CFA (the recovered value), or how the walk ended instead.
fn recovered(w: &Walk) -> Result<u64, (EndReason, EndDetail)> {
    match (w.end.reason, w.frames.as_slice()) {
        (EndReason::EndOfStack, [_, probe]) => Ok(probe.cfa.expect("the probe's CFA")),
        _ => Err((w.end.reason, w.end.detail)),
    }
}

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
fn plt_cfa_expr() -> Expression {
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

// ---------------------------------------------------------------------------
// Frame by frame
// ---------------------------------------------------------------------------

const FP_A: u64 = 0x1000;
const FP_B: u64 = 0x1100;
const FP_C: u64 = 0x1200;

/// `push rbp; mov rbp, rsp; ...`: from offset 4 on, CFA = rbp + 16, rbp
/// saved at CFA − 16 (the CIE has the return address at CFA − 8).
fn frame_pointer_rows() -> Vec<(u32, Insn)> {
    vec![
        (1, Insn::CfaOffset(16)),
        (1, Insn::Offset(Register(RBP), -16)),
        (4, Insn::CfaRegister(Register(RBP))),
        (8, Insn::ArgsSize(16)), // DW_CFA_GNU_args_size: ignored
    ]
}

/// Three frame-pointer functions A → B → C → START.
fn chain_cfi() -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(FP_A, 0x100, frame_pointer_rows())
        .fde(FP_B, 0x100, frame_pointer_rows())
        .fde(FP_C, 0x100, frame_pointer_rows())
        .outermost(START);
    cfi
}

/// The stack of the chain: each frame's rbp points at the saved rbp of its
/// caller; frame 0 has rsp = SP, rbp = SP + 0x10.
fn chain_stack() -> Stack {
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

const CHAIN_REGS: [(u16, u64); 2] = [(RSP, SP), (RBP, SP + 0x10)];

fn walk_chain(uw: &mut Unwinder) -> Walk {
    walk(uw, rt(FP_A + 0x10), &CHAIN_REGS, &mut chain_stack().memory(), 64)
}

fn assert_chain(w: &Walk) {
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
const PAC: u64 = 0x003f_0000_0000_0000;

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
const BIAS32: u64 = 0x5655_0000;
const SP32: u64 = 0xffff_c000;

fn rt32(elf: u64) -> u64 {
    elf + BIAS32
}

/// An i386 stack: `len` zero bytes from `base`, written 4 bytes at a time.
fn stack32(base: u64, len: usize) -> Stack {
    Stack { base, bytes: vec![0; len] }
}

impl Stack {
    fn set32(&mut self, addr: u64, value: u64) -> &mut Self {
        let at = (addr - self.base) as usize;
        let value = u32::try_from(value).expect("a 32-bit word");
        self.bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
        self
    }
}

fn unwinder32(cfi: &CfiBuilder, sections: Sections) -> Unwinder {
    let module = build_module(cfi.arch, &sections, TEXT, BIAS32).expect("a valid module");
    unwinder(Arch::I386, Arc::new(module))
}

/// gcc's i386 frames: F (`push ebp; mov ebp, esp; push ebx; push esi`: CFA
/// = ebp + 8, ebp at CFA − 8, ebx at CFA − 12, esi at CFA − 16) called by
/// PROBE (`push ebx`: CFA = esp + 8, ebx at CFA − 8), called by `_start`.
fn i386_chain() -> CfiBuilder {
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
fn i386_chain_stack() -> Stack {
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

const I386_CHAIN_REGS: [(u16, u64); 4] =
    [(ESP, SP32), (EBP, SP32 + 8), (EBX, 0x3333), (ESI, 0x6666)];

fn assert_i386_chain(w: &Walk) {
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

const A: u64 = 0x1000; // CFA = rsp + 0x20
const B: u64 = 0x1010; // right after A: the return address is undefined
const CALLEE: u64 = 0x1100;

fn adjacent_cfi() -> CfiBuilder {
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

// ---------------------------------------------------------------------------
// Signal frames
// ---------------------------------------------------------------------------

const TRAMP: u64 = 0x3800;
const BEFORE_G: u64 = 0x3ff0; // ends where G starts; outermost
const G: u64 = 0x4000; // an ordinary leaf: CFA = rsp + 8
const G_LEAF: u64 = 0x5000; // CFA = rsp, return address in rax

/// A `__restore_rt`-like trampoline (CFA = rsp + 0x100; rip, rsp, rax as
/// expressions into the context at rsp) with or without the 'S'
/// augmentation, over G and G_LEAF.
fn signal_cfi(signal: bool) -> CfiBuilder {
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
fn signal_stack(rip: u64, rax: u64) -> Stack {
    let mut stack = Stack::new();
    stack.set(SP, rip).set(SP + 8, SP + 0x200).set(SP + 0x10, rax).set(SP + 0x200, rt(START + 5));
    stack
}

fn walk_signal(signal: bool, interrupted_pc: u64) -> Walk {
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
fn deref_cfa_signal_cfi(expression: impl Fn(u16, i64, bool) -> Expression) -> CfiBuilder {
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
        let (row, _) = module.find_row(TRAMP + 2, &mut gimli::UnwindContext::new()).expect("a row");
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
fn recursion(depth: u64) -> (Unwinder, Stack) {
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

// ---------------------------------------------------------------------------
// Damaged sections
// ---------------------------------------------------------------------------

/// F and START (valid), then LAST, the FDE the tests damage.
const LAST: u64 = 0x6000;

fn damaged_cfi() -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![]).outermost(START).fde(LAST, 0x100, vec![]);
    cfi
}

/// Walk from F (which must still work) and from LAST (which may not).
fn walk_damaged(sections: &Sections) -> (Walk, Walk) {
    let module = load(Arch::X86_64, sections);
    let mut uw = unwinder(Arch::X86_64, module);
    let mut stack = Stack::new();
    stack.set(SP, rt(START + 5));
    let from_f = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    let from_last = walk(&mut uw, rt(LAST + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    (from_f, from_last)
}

fn assert_intact(w: &Walk) {
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(START + 5)]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
}

fn assert_refused(w: &Walk) {
    assert!(
        matches!(w.end.reason, EndReason::NoUnwindInfo | EndReason::BadCfi),
        "a damaged FDE gives no_unwind_info or bad_cfi, not {:?}",
        w.end
    );
    assert_eq!(w.frames.len(), 1);
}

#[test]
fn truncated_sections_keep_the_entries_before_the_cut() {
    for eh in [true, false] {
        let cfi = damaged_cfi();
        let mut bytes = if eh { cfi.eh_frame() } else { cfi.debug_frame() };
        bytes.truncate(bytes.len() - 6);
        let sections = if eh { Sections::eh(bytes) } else { Sections::debug(bytes) };
        let module = build_module(Arch::X86_64, &sections, TEXT, BIAS).expect("a module");
        assert!(!module.index_errors.is_empty(), "the damage is recorded");
        let (from_f, from_last) = walk_damaged(&sections);
        assert_intact(&from_f);
        assert_refused(&from_last);
    }
}

#[test]
fn a_section_cut_inside_its_cie_finds_nothing() {
    let bytes = damaged_cfi().eh_frame()[..10].to_vec();
    let (from_f, _) = walk_damaged(&Sections::eh(bytes));
    assert_refused(&from_f);
}

#[test]
fn garbage_after_valid_entries_is_ignored() {
    for eh in [true, false] {
        let cfi = damaged_cfi();
        let mut bytes = if eh { cfi.eh_frame() } else { cfi.debug_frame() };
        // A length that runs past the end, then noise.
        bytes.extend_from_slice(&[0x40, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0xff, 0x01]);
        let sections = if eh { Sections::eh(bytes) } else { Sections::debug(bytes) };
        let (from_f, from_last) = walk_damaged(&sections);
        assert_intact(&from_f);
        assert_eq!(from_last.pcs(), [rt(LAST + 0x10), rt(START + 5)], "LAST is before the garbage");
    }
}

#[test]
fn an_fde_whose_cie_pointer_is_wrong_is_refused() {
    for eh in [true, false] {
        let cfi = damaged_cfi();
        let mut bytes = if eh { cfi.eh_frame() } else { cfi.debug_frame() };
        let (_, last) = *fdes(&bytes, eh).last().expect("three FDEs");
        break_cie_pointer(&mut bytes, last, eh);
        let sections = if eh { Sections::eh(bytes) } else { Sections::debug(bytes) };
        let (from_f, from_last) = walk_damaged(&sections);
        assert_intact(&from_f);
        assert_refused(&from_last);
    }
}

/// Without a search table the FDEs are indexed once: an FDE that does not
/// parse is skipped there too, so it hides none of those after it.
#[test]
fn in_the_sorted_index_a_bad_fde_hides_no_other() {
    for eh in [true, false] {
        let cfi = damaged_cfi();
        let mut bytes = if eh { cfi.eh_frame() } else { cfi.debug_frame() };
        let (_, first) = fdes(&bytes, eh)[0]; // F's FDE
        break_cie_pointer(&mut bytes, first, eh);
        let sections = if eh { Sections::eh(bytes) } else { Sections::debug(bytes) };
        let (from_f, from_last) = walk_damaged(&sections);
        assert_refused(&from_f);
        assert_eq!(from_last.pcs(), [rt(LAST + 0x10), rt(START + 5)], "eh_frame: {eh}");
    }
}

#[test]
fn with_a_search_table_a_bad_fde_hides_no_other() {
    let cfi = damaged_cfi();
    let mut bytes = cfi.eh_frame();
    let hdr = eh_frame_hdr(&bytes);
    let (_, first) = fdes(&bytes, true)[0]; // F's FDE
    break_cie_pointer(&mut bytes, first, true);
    let sections =
        Sections { eh_frame: Some(bytes), eh_frame_hdr: Some(hdr), ..Sections::default() };
    let (from_f, from_last) = walk_damaged(&sections);
    assert_refused(&from_f);
    assert_eq!(from_last.pcs(), [rt(LAST + 0x10), rt(START + 5)]);
}

/// Overwrite table entry `index`'s FDE pointer (datarel) in a header made
/// by [`eh_frame_hdr`].
fn set_table_fde_pointer(hdr: &mut [u8], index: usize, value: i32) {
    let at = 12 + index * 8 + 4;
    hdr[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

#[test]
fn a_search_table_pointing_before_eh_frame_is_refused() {
    let bytes = damaged_cfi().eh_frame();
    let mut hdr = eh_frame_hdr(&bytes);
    // F's entry points 0x1000 bytes below the header, far before .eh_frame.
    set_table_fde_pointer(&mut hdr, 0, -0x1000);
    let sections =
        Sections { eh_frame: Some(bytes), eh_frame_hdr: Some(hdr), ..Sections::default() };
    let (from_f, _) = walk_damaged(&sections);
    assert_refused(&from_f);
}

#[test]
fn a_search_table_pointing_past_eh_frame_is_refused() {
    let bytes = damaged_cfi().eh_frame();
    let mut hdr = eh_frame_hdr(&bytes);
    set_table_fde_pointer(&mut hdr, 0, 0x7fff_0000);
    let sections =
        Sections { eh_frame: Some(bytes), eh_frame_hdr: Some(hdr), ..Sections::default() };
    let (from_f, _) = walk_damaged(&sections);
    assert_refused(&from_f);
}

#[test]
fn a_search_table_claiming_too_many_entries_is_refused() {
    let bytes = damaged_cfi().eh_frame();
    // fde_count as udata8: u64::MAX entries in a table of three.
    let mut hdr = vec![
        1,
        (DW_EH_PE_pcrel.0 | DW_EH_PE_sdata4.0),
        DW_EH_PE_udata8.0,
        (DW_EH_PE_datarel.0 | DW_EH_PE_sdata4.0),
    ];
    let eh_frame_ptr = EH_FRAME_ADDR as i64 - (EH_FRAME_HDR_ADDR + 4) as i64;
    hdr.extend_from_slice(&(eh_frame_ptr as i32).to_le_bytes());
    hdr.extend_from_slice(&u64::MAX.to_le_bytes());
    hdr.extend_from_slice(&eh_frame_hdr(&bytes)[12..]);
    let sections =
        Sections { eh_frame: Some(bytes), eh_frame_hdr: Some(hdr), ..Sections::default() };
    let (from_f, from_last) = walk_damaged(&sections);
    for w in [from_f, from_last] {
        assert!(
            w.frames.len() == 2
                || matches!(w.end.reason, EndReason::NoUnwindInfo | EndReason::BadCfi),
            "{:?}",
            w.end
        );
    }
}

// ---------------------------------------------------------------------------
// The search table and the sorted index agree
// ---------------------------------------------------------------------------

/// Forty functions with gaps between them, rules of every kind, some under
/// a signal CIE, written out of address order.
fn many_functions() -> (CfiBuilder, Range<u64>) {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let signal = cfi.add_cie(RIP, true, vec![cfa(RSP, 0x40)]);
    for i in (0..40u64).rev() {
        let start = 0x1000 + i * 0x80;
        let len = 0x40 + (i % 3) as u32 * 0x10;
        let rows = match i % 5 {
            0 => frame_pointer_rows(),
            1 => vec![(0, Insn::CfaOffset(16 + 8 * i as i32))],
            2 => {
                vec![(2, Insn::Offset(Register(RBX), -16)), (5, Insn::ValOffset(Register(R12), 8))]
            }
            3 => vec![(4, Insn::CfaExpression(plt_cfa_expr()))],
            _ => vec![(1, Insn::SameValue(Register(RAX)))],
        };
        if i % 7 == 6 {
            cfi.fde_of(signal, start, len, rows);
        } else {
            cfi.fde(start, len, rows);
        }
    }
    (cfi, 0x0ff0..0x1000 + 40 * 0x80 + 0x10)
}

#[test]
fn search_table_and_sorted_index_find_the_same_rows() {
    let (cfi, span) = many_functions();
    let eh = cfi.eh_frame();
    let mut by_index = unwinder(Arch::X86_64, load(Arch::X86_64, &Sections::eh(eh.clone())));
    let mut by_table = unwinder(Arch::X86_64, load(Arch::X86_64, &Sections::eh_with_hdr(eh)));
    let mut by_debug =
        unwinder(Arch::X86_64, load(Arch::X86_64, &Sections::debug(cfi.debug_frame())));
    let mut found = 0;
    for elf in span {
        let pc = rt(elf);
        let want = by_index.row_at(pc);
        assert_eq!(by_table.row_at(pc), want, "pc {pc:#x}");
        let debug = by_debug.row_at(pc);
        assert_eq!(debug.is_ok(), want.is_ok(), "pc {pc:#x}");
        if let (Ok((_, a, ra)), Ok((_, b, rb))) = (&want, &debug) {
            assert_eq!(ra, rb);
            assert_eq!(cfa_reg_offset(a.cfa), cfa_reg_offset(b.cfa), "pc {pc:#x}");
            assert_eq!((a.ra, a.signal_frame), (b.ra, b.signal_frame), "pc {pc:#x}");
        }
        found += usize::from(want.is_ok());
    }
    assert!(found > 40 * 0x40, "most pcs are covered ({found})");
}

/// A register-and-offset CFA rule; expressions differ by section.
fn cfa_reg_offset(rule: CfaRule) -> Option<(u16, i64)> {
    match rule {
        CfaRule::RegOffset { reg, offset } => Some((reg, offset)),
        CfaRule::Expr(_) | CfaRule::DerefRegister { .. } => None,
    }
}

// ---------------------------------------------------------------------------
// The rule cache
// ---------------------------------------------------------------------------

#[test]
fn the_rule_cache_gives_identical_walks() {
    let mut uw = eh_unwinder(&chain_cfi());
    let first = walk_chain(&mut uw);
    let after_first = uw.cache_stats();
    let second = walk_chain(&mut uw);
    assert_eq!(first, second);
    assert_chain(&second);
    assert!(
        uw.cache_stats().hits >= after_first.hits + 4,
        "every frame of the second walk hits: {:?} then {:?}",
        after_first,
        uw.cache_stats()
    );
    assert_eq!(uw.cache_stats().misses, after_first.misses);
}

#[test]
fn rows_too_big_for_the_cache_still_unwind_the_same() {
    // A trampoline restoring every register: more rules than a cache slot holds.
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    let mut initial = vec![cfa(RSP, 0x100)];
    for reg in 0..=16u16 {
        initial.push(Insn::Expression(Register(reg), breg(RSP, 8 * i64::from(reg))));
    }
    let tramp = cfi.add_cie(RIP, true, initial);
    cfi.fde_of(tramp, TRAMP, 0x10, vec![]).fde(G, 0x40, vec![]).outermost(START);
    let mut stack = Stack::new();
    for reg in 0..16u64 {
        stack.set(SP + reg * 8, 0x1000 + reg);
    }
    stack.set(SP + 7 * 8, SP + 0x200).set(SP + 16 * 8, rt(G)).set(SP + 0x200, rt(START + 5));
    let mut uw = eh_unwinder(&cfi);
    let mut run = || walk(&mut uw, rt(TRAMP + 1), &[(RSP, SP)], &mut stack.memory(), 16);
    let first = run();
    assert_eq!(first.pcs(), [rt(TRAMP + 1), rt(G), rt(START + 5)]);
    assert_eq!(run(), first);
}

#[test]
fn adding_a_module_clears_the_cache() {
    let mut uw = eh_unwinder(&chain_cfi());
    walk_chain(&mut uw);
    walk_chain(&mut uw);
    let warm = uw.cache_stats();

    // Another module below the first: the first one's index changes.
    let mut other = CfiBuilder::new(Arch::X86_64);
    other.outermost(0x100);
    let module = build_module(Arch::X86_64, &Sections::eh(other.eh_frame()), 0x100..0x1000, BIAS)
        .expect("a module");
    uw.add_module(Arc::new(module)).expect("no overlap");
    let w = walk_chain(&mut uw);
    assert_chain(&w);
    assert_eq!(uw.cache_stats().misses, warm.misses + 4, "every row is looked up again");
    assert_eq!(w.end.module, Some(1));
}

// ---------------------------------------------------------------------------
// Modules
// ---------------------------------------------------------------------------

#[test]
fn module_rejects_a_section_outside_its_data() {
    let eh = chain_cfi().eh_frame();
    let len = eh.len() as u64;
    for (file_offset, size) in [(0, len + 1), (len, 1), (u64::MAX - 4, 16)] {
        let sections = ModuleSections {
            eh_frame: Some(SectionInfo { file_offset, size, address: EH_FRAME_ADDR }),
            ..ModuleSections::default()
        };
        let result = Module::new(
            NAME.to_owned(),
            Arch::X86_64,
            Data::Owned(eh.clone()),
            sections,
            TEXT,
            BIAS,
        );
        assert!(
            matches!(result.err(), Some(ModuleError::SectionOutOfFile { .. })),
            "offset {file_offset:#x} size {size:#x}"
        );
    }
}

#[test]
fn module_rejects_an_empty_range() {
    let sections = Sections::eh(chain_cfi().eh_frame());
    let inverted = Range { start: 0x2000, end: 0x1000 };
    for range in [0x1000..0x1000, inverted] {
        let result = build_module(Arch::X86_64, &sections, range.clone(), BIAS);
        assert!(matches!(result.err(), Some(ModuleError::BadRange { .. })), "{range:?}");
    }
}

#[test]
fn add_module_rejects_overlapping_modules() {
    let sections = Sections::eh(chain_cfi().eh_frame());
    let at = |range: Range<u64>| {
        Arc::new(build_module(Arch::X86_64, &sections, range, 0).expect("a module"))
    };
    let mut uw = Unwinder::new(Arch::X86_64);
    uw.add_module(at(0x1000..0x2000)).expect("first");
    uw.add_module(at(0x5000..0x6000)).expect("disjoint");
    uw.add_module(at(0x2000..0x3000)).expect("adjacent");
    for range in
        [0x1fff..0x2001, 0x0..0x1001, 0x0..0x10000, 0x2800..0x5800, 0x5fff..0x7000, 0x1400..0x1800]
    {
        let err = uw.add_module(at(range.clone())).err();
        let err = err.unwrap_or_else(|| panic!("{range:x?} overlaps"));
        assert!(err.to_string().contains(NAME), "{err}");
    }
    assert_eq!(uw.modules().len(), 3);
}

// ---------------------------------------------------------------------------
// Random bytes: never a panic, always an end
// ---------------------------------------------------------------------------

/// xorshift64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    fn arch(&mut self) -> Arch {
        Arch::ALL[self.below(Arch::ALL.len() as u64) as usize]
    }

    /// A plausible word: a code address, a stack address, 0, or noise.
    fn word(&mut self) -> u64 {
        match self.below(4) {
            0 => rt(TEXT.start + self.below(TEXT.end - TEXT.start)),
            1 => SP - 0x100 + self.below(0x1000),
            2 => 0,
            _ => self.next(),
        }
    }
}

fn random_expr(rng: &mut Rng) -> Expression {
    let len = rng.below(24) as usize;
    expr(&rng.bytes(len))
}

const FUZZ_MAX_FRAMES: usize = 32;

/// Unwind from random registers over random memory (captured regions, or
/// a closure answering every address), checking what always holds.
fn fuzz_walks(rng: &mut Rng, uw: &mut Unwinder) {
    for _ in 0..4 {
        let mut regs = vec![(uw.arch().sp(), SP + 8 * rng.below(0x40))];
        for reg in 0..33u16 {
            if rng.below(4) != 0 && reg != uw.arch().sp() {
                regs.push((reg, rng.word()));
            }
        }
        let pc = if rng.below(8) == 0 { rng.word() } else { rt(TEXT.start + rng.below(0x3000)) };
        let w = if rng.below(2) == 0 {
            let mut stack = Stack::new();
            for k in 0..0x200 {
                stack.set(SP - 0x100 + 8 * k, rng.word());
            }
            walk(uw, pc, &regs, &mut stack.memory(), FUZZ_MAX_FRAMES)
        } else {
            let seed = rng.next();
            let mut everywhere = move |addr: u64| {
                let mut r = Rng((addr ^ seed) | 1);
                r.next();
                Some(r.word())
            };
            walk(uw, pc, &regs, &mut everywhere, FUZZ_MAX_FRAMES)
        };
        check_walk(uw, &w);
        let _ = uw.row_at(pc);
    }
}

fn check_walk(uw: &Unwinder, w: &Walk) {
    assert!(!w.frames.is_empty() && w.frames.len() <= FUZZ_MAX_FRAMES);
    assert_eq!(w.end.frame + 1, w.frames.len(), "{:?}", w.end);
    if w.end.reason == EndReason::FrameLimit {
        assert_eq!(w.frames.len(), FUZZ_MAX_FRAMES);
    }
    assert_eq!(w.frames[0].trust, Trust::Context);
    for pair in w.frames.windows(2) {
        assert!(pair[1].sp >= pair[0].sp, "sp never decreases: {:?}", w.frames);
        assert_eq!(pair[1].trust, Trust::Cfi);
    }
    assert!(!uw.describe(&w.end).is_empty());
}

#[test]
fn random_sections_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let valid = chain_cfi().eh_frame();
    for _ in 0..1500 {
        let arch = rng.arch();
        let len = rng.below(160) as usize;
        let noise = rng.bytes(len);
        let sections = match rng.below(4) {
            0 => Sections::eh(noise),
            1 => Sections::debug(noise),
            2 => Sections {
                eh_frame: Some(valid.clone()),
                eh_frame_hdr: Some(noise),
                ..Sections::default()
            },
            _ => Sections {
                eh_frame: Some(rng.bytes(len)),
                eh_frame_hdr: Some(noise),
                debug_frame: Some(rng.bytes(len)),
            },
        };
        let mut uw = unwinder(arch, load(arch, &sections));
        fuzz_walks(&mut rng, &mut uw);
    }
}

#[test]
fn damaged_cfi_never_panics() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (many, _) = many_functions();
    let chain = chain_cfi();
    let signal = signal_cfi(true);
    let bases = [
        Sections::eh(chain.eh_frame()),
        Sections::eh_with_hdr(many.eh_frame()),
        Sections::debug(many.debug_frame()),
        Sections::eh_with_hdr(signal.eh_frame()),
        Sections::debug(signal.debug_frame()),
    ];
    for _ in 0..1500 {
        let mut sections = bases[rng.below(bases.len() as u64) as usize].clone();
        let target =
            [&mut sections.eh_frame, &mut sections.eh_frame_hdr, &mut sections.debug_frame]
                .into_iter()
                .flatten()
                .nth(rng.below(2) as usize);
        if let Some(bytes) = target {
            if rng.below(8) == 0 {
                let keep = rng.below(bytes.len() as u64) as usize;
                bytes.truncate(keep);
            } else {
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(bytes.len() as u64) as usize;
                    bytes[at] = rng.next() as u8;
                }
            }
        }
        let mut uw = unwinder(Arch::X86_64, load(Arch::X86_64, &sections));
        fuzz_walks(&mut rng, &mut uw);
    }
}

#[test]
fn random_expressions_never_panic() {
    let mut rng = Rng(0x853c_49e6_748f_ea9b);
    for _ in 0..1500 {
        let arch = rng.arch();
        let ra = arch.ra();
        let mut cfi = CfiBuilder::new(arch);
        let cfa_rule = Insn::CfaExpression(random_expr(&mut rng));
        let saved = Insn::Expression(Register(arch.fp()), random_expr(&mut rng));
        let ret = Insn::ValExpression(Register(ra), random_expr(&mut rng));
        let rows = match rng.below(3) {
            0 => vec![(0, cfa_rule)],
            1 => vec![(0, saved), (0, ret)],
            _ => vec![(0, cfa_rule), (0, saved), (0, ret)],
        };
        cfi.fde(TEXT.start, 0x3000, rows);
        let sections = if rng.below(2) == 0 {
            Sections::eh(cfi.eh_frame())
        } else {
            Sections::debug(cfi.debug_frame())
        };
        let mut uw = unwinder(arch, load(arch, &sections));
        fuzz_walks(&mut rng, &mut uw);
    }
}
