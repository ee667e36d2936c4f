//! The fallback strategies on stacks built word by word: frame-pointer
//! chains that are sound, that loop, point backwards, are misaligned, leave
//! the stack or hold a return address that is no return address; stack
//! scanning over garbage; the mix of CFI, frame pointers and scanning; and
//! the trust each frame gets. Each walk must keep the frames found before
//! the damage and end with the reason the damage deserves.
//!
//! The module is a file image whose code segment is filled with no-ops, with
//! a call instruction written right before every return address a test uses
//! (x86_64 `call rel32`, aarch64 `bl`), so the "follows a call" check is real.

use std::ops::Range;
use std::sync::Arc;

use gimli::write::{
    Address, CallFrameInstruction as Insn, CommonInformationEntry, EhFrame, EndianVec,
    FrameDescriptionEntry, FrameTable,
};
use gimli::{Encoding, Format, LittleEndian, Register};

use _core::arch::registers::Registers;
use _core::arch::Arch;
use _core::source::memory::Data;
use _core::source::memory::Regions;
use _core::space::perfmap::PerfMap;
use _core::space::sections::{CodeSegment, ModuleSections, SectionInfo};
use _core::unwind::cfi::{Module, UnwindInfo};
use _core::unwind::{
    End, EndDetail, EndReason, FpProblem, Frame, RaProblem, Strategy, Trust, Unwinder,
};

const BIAS: u64 = 0x5555_0000_0000;
/// ELF addresses: the module, and its code segment (file offset = address).
const RANGE: Range<u64> = 0x1000..0xa000;
const CODE: Range<u64> = 0x1000..0x8000;
const EH_FRAME_ADDR: u64 = 0x9000;
/// Frame 0's sp; the captured stack is `SP - 0x100 .. SP + 0xf00`.
const SP: u64 = 0x7ffd_0000_1000;
const STACK_END: u64 = SP + 0xf00;

// x86_64 DWARF columns.
const RBP: u16 = 6;
const RSP: u16 = 7;
const RIP: u16 = 16;
// aarch64.
const X29: u16 = 29;
const X30: u16 = 30;
const A64_SP: u16 = 31;

/// Return addresses (ELF) the tests use, each right after a call.
const R1: u64 = 0x1220;
const R2: u64 = 0x1320;
const R3: u64 = 0x1420;
/// Frame 0's pc.
const PC0: u64 = 0x1110;
/// Code after no call at all.
const NO_CALL: u64 = 0x1520;
/// A function with CFI (CFA = rsp + 8, return address at CFA − 8), holding R3.
const WITH_CFI: Range<u64> = 0x1400..0x1500;

fn rt(elf: u64) -> u64 {
    elf + BIAS
}

const NOP_A64: u32 = 0xd503_201f;

/// The module's file: code filled with no-ops, a call before each of R1..R3.
struct Image {
    arch: Arch,
    bytes: Vec<u8>,
}

impl Image {
    fn new(arch: Arch) -> Self {
        let bytes = match arch {
            Arch::X86_64 | Arch::I386 => vec![0x90; CODE.end as usize],
            _ => NOP_A64.to_le_bytes().repeat(CODE.end as usize / 4),
        };
        let mut image = Image { arch, bytes };
        for ra in [R1, R2, R3] {
            image.call_before(ra, 0x1000);
        }
        image
    }

    /// Write a direct call to `target` that returns to `ra`.
    fn call_before(&mut self, ra: u64, target: u64) -> &mut Self {
        match self.arch {
            Arch::X86_64 | Arch::I386 => {
                let rel = (target as i64 - ra as i64) as i32;
                let at = ra as usize - 5;
                self.bytes[at] = 0xe8;
                self.bytes[at + 1..ra as usize].copy_from_slice(&rel.to_le_bytes());
            }
            _ => {
                let words = ((target as i64 - (ra as i64 - 4)) / 4) as u32 & 0x03ff_ffff;
                let at = ra as usize - 4;
                self.bytes[at..ra as usize].copy_from_slice(&(0x9400_0000 | words).to_le_bytes());
            }
        }
        self
    }

    /// The module, with `eh_frame` if given.
    fn module(&self, eh_frame: Option<Vec<u8>>) -> Arc<Module> {
        self.module_with(eh_frame, None, BIAS)
    }

    /// The module, with `eh_frame` and an entry point (`e_entry`) if given,
    /// at `bias`. It has no symbol table: the entry point's function is
    /// bounded as in a stripped file.
    fn module_with(&self, eh_frame: Option<Vec<u8>>, entry: Option<u64>, bias: u64) -> Arc<Module> {
        let mut data = self.bytes.clone();
        let eh_frame = eh_frame.map(|b| {
            let info = SectionInfo {
                file_offset: data.len() as u64,
                size: b.len() as u64,
                address: EH_FRAME_ADDR,
            };
            data.extend_from_slice(&b);
            info
        });
        let size = CODE.end - CODE.start;
        let sections = ModuleSections {
            eh_frame,
            code: vec![CodeSegment {
                address: CODE.start,
                size,
                file_offset: CODE.start,
                file_size: size,
            }],
            entry,
            ..ModuleSections::default()
        };
        let module = Module::new(
            "libfallback.so".into(),
            self.arch,
            Data::Owned(data),
            sections,
            RANGE,
            bias,
        );
        Arc::new(module.expect("a valid module"))
    }
}

/// x86_64 `.eh_frame` covering WITH_CFI with the entry rules (CFA = rsp + 8,
/// return address at CFA − 8), plus `rows` for other functions.
fn x86_eh_frame(rows: &[(Range<u64>, Vec<Insn>)]) -> Vec<u8> {
    let mut all = vec![(WITH_CFI, vec![])];
    all.extend_from_slice(rows);
    eh_frame(Arch::X86_64, &all)
}

/// `.eh_frame` with one FDE per range: the architecture's entry rules
/// (x86_64 CFA = rsp + 8 and the return address at CFA − 8; aarch64 CFA =
/// sp), then the range's instructions.
fn eh_frame(arch: Arch, rows: &[(Range<u64>, Vec<Insn>)]) -> Vec<u8> {
    let encoding = Encoding { format: Format::Dwarf32, version: 1, address_size: 8 };
    let (code_align, sp) = if arch == Arch::X86_64 { (1, RSP) } else { (4, A64_SP) };
    let mut cie = CommonInformationEntry::new(encoding, code_align, -8, Register(arch.ra()));
    cie.add_instruction(Insn::Cfa(Register(sp), if arch == Arch::X86_64 { 8 } else { 0 }));
    if arch == Arch::X86_64 {
        cie.add_instruction(Insn::Offset(Register(RIP), -8));
    }
    let mut table = FrameTable::default();
    let id = table.add_cie(cie);
    for (range, insns) in rows {
        let mut f = FrameDescriptionEntry::new(
            Address::Constant(range.start),
            (range.end - range.start) as u32,
        );
        for insn in insns {
            f.add_instruction(0, insn.clone());
        }
        table.add_fde(id, f);
    }
    let mut w = EhFrame(EndianVec::new(LittleEndian));
    table.write_eh_frame(&mut w).expect("gimli writes .eh_frame");
    w.0.into_vec()
}

/// A captured stack, zero-filled unless set.
struct Stack {
    bytes: Vec<u8>,
}

impl Stack {
    fn new() -> Self {
        Stack { bytes: vec![0; (STACK_END - (SP - 0x100)) as usize] }
    }

    fn set(&mut self, addr: u64, value: u64) -> &mut Self {
        let at = (addr - (SP - 0x100)) as usize;
        self.bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        self
    }

    /// A frame record at `fp`: the caller's fp, then the return address.
    fn record(&mut self, fp: u64, caller_fp: u64, ra: u64) -> &mut Self {
        self.set(fp, caller_fp).set(fp + 8, ra)
    }

    fn memory(&self) -> Regions<'_> {
        let mut m = Regions::new();
        m.add(SP - 0x100, &self.bytes);
        m
    }
}

struct Walk {
    frames: Vec<Frame>,
    end: End,
    message: String,
}

impl Walk {
    fn pcs(&self) -> Vec<u64> {
        self.frames.iter().map(|f| f.pc).collect()
    }
    fn sps(&self) -> Vec<u64> {
        self.frames.iter().map(|f| f.sp).collect()
    }
    fn trusts(&self) -> Vec<Trust> {
        self.frames.iter().map(|f| f.trust).collect()
    }
}

fn walk(
    arch: Arch,
    module: Arc<Module>,
    strategies: &[Strategy],
    pc: u64,
    regs: &[(u16, u64)],
    stack: &Stack,
) -> Walk {
    walk_with(arch, module, pc, regs, stack, false, |uw| uw.set_strategies(strategies))
}

/// A walk with CFI alone, by `unwind_sample` (frame 0 without CFI taken
/// for a leaf) if `sample`, else by `unwind`.
fn cfi_walk(
    arch: Arch,
    module: Arc<Module>,
    sample: bool,
    pc: u64,
    regs: &[(u16, u64)],
    stack: &Stack,
) -> Walk {
    walk_with(arch, module, pc, regs, stack, sample, |_| ())
}

fn walk_with(
    arch: Arch,
    module: Arc<Module>,
    pc: u64,
    regs: &[(u16, u64)],
    stack: &Stack,
    sample: bool,
    setup: impl FnOnce(&mut Unwinder),
) -> Walk {
    let mut uw = Unwinder::new(arch);
    uw.add_module(module).expect("one module");
    setup(&mut uw);
    let mut r = Registers::new();
    for &(reg, v) in regs {
        r.set(reg, v);
    }
    let mut frames = Vec::new();
    let mut memory = stack.memory();
    let end = if sample {
        uw.unwind_sample(pc, &r, &mut memory, Some(64), &mut frames)
    } else {
        uw.unwind(pc, &r, &mut memory, Some(64), &mut frames)
    };
    let message = uw.describe(&end);
    Walk { frames, end, message }
}

const FP_ONLY: [Strategy; 2] = [Strategy::Cfi, Strategy::FramePointer];
const ALL: [Strategy; 3] = [Strategy::Cfi, Strategy::FramePointer, Strategy::Scan];

// The tests, by section. Each imports `super::*`: the helpers above, and
// through the line below the ones the sections define for one another.
mod chains;
mod leaves_and_ends;
#[allow(unused_imports)]
use {chains::*, leaves_and_ends::*};
