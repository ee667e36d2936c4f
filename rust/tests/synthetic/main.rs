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

use _core::arch::registers::Registers;
use _core::arch::Arch;
use _core::source::memory::Data;
use _core::source::memory::{Memory, Regions};
use _core::space::sections::{ModuleSections, SectionInfo};
use _core::unwind::cfi::{CfaRule, Module, ModuleError, RegRule, Rules};
use _core::unwind::expr::ExprError;
use _core::unwind::{
    stack_frame_bound, End, EndDetail, EndReason, Frame, Strategy, Trust, Unwinder,
    UNKNOWN_STACK_FRAMES,
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

// The tests, by section. Each imports `super::*`: the helpers above, and
// through the line below the ones the sections define for one another.
mod frames;
mod records;
mod rules;
mod sections;
mod signals_and_ends;
#[allow(unused_imports)]
use {frames::*, rules::*, sections::*, signals_and_ends::*};
