//! The warm unwind path allocates nothing (blazesym's `tests/allocs.rs`
//! idea): this test binary stops itself, copies its own stack, and unwinds it
//! with its own `.eh_frame` under a counting global allocator.

#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::arch::asm;
use std::sync::Arc;

use _core::arch::registers::Registers;
use _core::arch::Arch;
use _core::source::memory::Data;
use _core::source::memory::Regions;
use _core::space::sections::{ModuleSections, SectionInfo};
use _core::unwind::cfi::Module;
use _core::unwind::{EndReason, Frame, Unwinder};

mod alloc_counter;
use alloc_counter::{allocations, CountingAllocator};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

struct Stop {
    pc: u64,
    regs: Registers,
    stack_start: u64,
    stack: Vec<u8>,
}

/// Read the registers unwinding needs, then copy the stack above rsp up to
/// the end of its mapping.
#[inline(never)]
fn stop_here() -> Stop {
    let (rip, rsp, rbp, rbx, r12, r13, r14, r15): (u64, u64, u64, u64, u64, u64, u64, u64);
    // SAFETY: only reads registers.
    unsafe {
        asm!(
            "lea {rip}, [rip]",
            "mov {rsp}, rsp",
            "mov {rbp}, rbp",
            "mov {rbx}, rbx",
            "mov {r12}, r12",
            "mov {r13}, r13",
            "mov {r14}, r14",
            "mov {r15}, r15",
            rip = out(reg) rip, rsp = out(reg) rsp, rbp = out(reg) rbp, rbx = out(reg) rbx,
            r12 = out(reg) r12, r13 = out(reg) r13, r14 = out(reg) r14, r15 = out(reg) r15,
        );
    }
    let mut regs = Registers::new();
    for (col, v) in [(7, rsp), (6, rbp), (3, rbx), (12, r12), (13, r13), (14, r14), (15, r15)] {
        regs.set(col, v);
    }
    let (_, end) = mapping_containing(rsp).expect("the stack is mapped");
    let len = (end - rsp).min(1 << 20) as usize;
    // SAFETY: [rsp, rsp + len) lies inside this thread's mapped stack.
    let stack = unsafe { std::slice::from_raw_parts(rsp as *const u8, len) }.to_vec();
    Stop { pc: rip, regs, stack_start: rsp, stack }
}

#[inline(never)]
fn middle(depth: u32) -> Stop {
    let stop = if depth == 0 { stop_here() } else { middle(depth - 1) };
    std::hint::black_box(stop)
}

/// (start, end) of the /proc/self/maps line holding `addr`.
fn mapping_containing(addr: u64) -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let (range, _) = line.split_once(' ')?;
        let (s, e) = range.split_once('-')?;
        let (s, e) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
        (s <= addr && addr < e).then_some((s, e))
    })
}

/// The load address of the first mapping of this executable (file offset 0).
fn exe_load_address(exe: &str) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps
        .lines()
        .find(|l| l.ends_with(exe) && l.split_whitespace().nth(2) == Some("00000000"))
        .expect("the executable is mapped at offset 0");
    u64::from_str_radix(line.split('-').next().unwrap(), 16).unwrap()
}

fn u16_at(d: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(d[o..o + 2].try_into().unwrap())
}
fn u32_at(d: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(d[o..o + 4].try_into().unwrap())
}
fn u64_at(d: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(d[o..o + 8].try_into().unwrap())
}

/// The unwind sections and PT_LOAD range of a little-endian ELF64 file: just
/// enough of an ELF reader for this test (the library leaves ELF to Python).
fn elf_sections(d: &[u8]) -> (ModuleSections, std::ops::Range<u64>) {
    let (phoff, phentsize, phnum) =
        (u64_at(d, 0x20) as usize, u16_at(d, 0x36) as usize, u16_at(d, 0x38) as usize);
    let (mut lo, mut hi) = (u64::MAX, 0);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(d, ph) == 1 {
            let (vaddr, memsz) = (u64_at(d, ph + 0x10), u64_at(d, ph + 0x28));
            lo = lo.min(vaddr);
            hi = hi.max(vaddr + memsz);
        }
    }
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(d, 0x28) as usize,
        u16_at(d, 0x3a) as usize,
        u16_at(d, 0x3c) as usize,
        u16_at(d, 0x3e) as usize,
    );
    let strtab = u64_at(d, shoff + shstrndx * shentsize + 0x18) as usize;
    let mut sections = ModuleSections::default();
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        let name_off = strtab + u32_at(d, sh) as usize;
        let name_len = d[name_off..].iter().position(|&b| b == 0).unwrap();
        let name = std::str::from_utf8(&d[name_off..name_off + name_len]).unwrap();
        let info = SectionInfo {
            address: u64_at(d, sh + 0x10),
            file_offset: u64_at(d, sh + 0x18),
            size: u64_at(d, sh + 0x20),
        };
        match name {
            ".eh_frame" => sections.eh_frame = Some(info),
            ".eh_frame_hdr" => sections.eh_frame_hdr = Some(info),
            ".text" => sections.text = Some(info.address),
            ".got" => sections.got = Some(info.address),
            _ => {}
        }
    }
    (sections, lo..hi)
}

#[test]
fn warm_unwind_allocates_nothing() {
    let stop = middle(5);

    let exe = std::fs::read_link("/proc/self/exe").unwrap().to_string_lossy().into_owned();
    let data = std::fs::read(&exe).unwrap();
    let (sections, range) = elf_sections(&data);
    assert!(sections.eh_frame_hdr.is_some(), "rustc links with --eh-frame-hdr");
    let bias = exe_load_address(&exe) - (range.start & !0xfff);
    let module =
        Module::new(exe.clone(), Arch::X86_64, Data::Owned(data), sections, range, bias).unwrap();
    let mut unwinder = Unwinder::new(Arch::X86_64);
    unwinder.add_module(Arc::new(module)).unwrap();

    let mut memory = Regions::new();
    memory.add(stop.stack_start, &stop.stack);
    let mut frames: Vec<Frame> = Vec::with_capacity(256);

    let (cold, cold_allocs) =
        allocations(|| unwinder.unwind(stop.pc, &stop.regs, &mut memory, None, &mut frames));
    let cold_frames = frames.clone();
    // stop_here, middle x6, the test function, then the harness: all in this executable.
    assert!(
        cold_frames.len() >= 8,
        "only {} frames: {}",
        cold_frames.len(),
        unwinder.describe(&cold)
    );
    let exe_range = unwinder.modules()[0].range.clone();
    // The walk leaves the executable into libc's thread start, which was not
    // added: every frame but that last one is in the executable.
    let (last, inner) = cold_frames.split_last().unwrap();
    assert!(inner.iter().all(|f| exe_range.contains(&f.pc)), "{cold_frames:#x?}");
    assert!(!exe_range.contains(&last.pc));
    assert_eq!(cold.reason, EndReason::NoModule, "{}", unwinder.describe(&cold));
    // The six `middle` frames return to the same call site.
    let middle_returns = cold_frames.windows(2).filter(|w| w[0].pc == w[1].pc).count();
    assert!(middle_returns >= 4, "{cold_frames:#x?}");

    let misses = unwinder.cache_stats().misses;
    let (warm, warm_allocs) =
        allocations(|| unwinder.unwind(stop.pc, &stop.regs, &mut memory, None, &mut frames));
    assert_eq!(warm, cold);
    assert_eq!(frames, cold_frames);
    assert_eq!(
        unwinder.cache_stats().misses,
        misses,
        "the second walk is served from the rule cache"
    );
    assert_eq!(warm_allocs, 0, "the warm path allocated");
    // Parsing CFI on a cache miss reuses the UnwindContext: no allocation either.
    assert_eq!(cold_allocs, 0, "the cold path allocated");
}

#[test]
fn frame_pointer_walk_and_scan_allocate_nothing() {
    use _core::unwind::{Strategy, Trust};
    // A module without CFI (its code segments unknown: all of it is code),
    // and a stack of 40 frame records; the record of frame 20 is garbage, so
    // the walk scans past it and resumes by frame pointers.
    let (bias, range) = (0x5555_0000_0000u64, 0x1000..0x9000);
    let module = Module::new(
        "nocfi".into(),
        Arch::X86_64,
        Data::Owned(vec![0; 64]),
        ModuleSections::default(),
        range.clone(),
        bias,
    )
    .unwrap();
    let mut unwinder = Unwinder::new(Arch::X86_64);
    unwinder.add_module(Arc::new(module)).unwrap();
    unwinder.set_strategies(&[Strategy::Cfi, Strategy::FramePointer, Strategy::Scan]);
    let sp = 0x7ffd_0000_0000u64;
    let mut stack = vec![0u8; 0x1000];
    let mut put = |addr: u64, v: u64| {
        let at = (addr - sp) as usize;
        stack[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    let fp = |i: u64| sp + 0x20 + 0x40 * i;
    for i in 0..40 {
        let last = i == 39;
        // The last record's caller is the outermost frame (frame pointer 0).
        put(fp(i), if last { 0 } else { fp(i + 1) });
        put(fp(i) + 8, bias + 0x2000 + i);
    }
    put(fp(20), 0x4141_4141);
    put(fp(20) + 8, 0x4242_4242);
    let mut regs = Registers::new();
    regs.set(7, sp);
    regs.set(6, fp(0));
    let mut memory = Regions::new();
    memory.add(sp, &stack);
    let mut frames: Vec<Frame> = Vec::with_capacity(256);
    let pc = bias + 0x1000;
    let (cold, cold_allocs) =
        allocations(|| unwinder.unwind(pc, &regs, &mut memory, None, &mut frames));
    assert_eq!(cold.reason, EndReason::EndOfStack, "{}", unwinder.describe(&cold));
    let trusts: Vec<Trust> = frames.iter().map(|f| f.trust).collect();
    assert!(trusts.contains(&Trust::Scan), "{trusts:?}");
    assert!(trusts.iter().filter(|t| **t == Trust::FramePointer).count() >= 30, "{trusts:?}");
    let (warm, warm_allocs) =
        allocations(|| unwinder.unwind(pc, &regs, &mut memory, None, &mut frames));
    assert_eq!(warm, cold);
    assert_eq!((cold_allocs, warm_allocs), (0, 0), "the fallback path allocated");
}

/// i386 (4-byte words, 32-bit address arithmetic) on the same terms: a
/// function that calls itself (`push ebp; push ebx`: CFA = esp + 12, ebp at
/// CFA − 8, ebx at CFA − 12), `DEPTH` frames deep on a synthetic stack, under
/// `_start` (eip undefined). CFI written with gimli's writer.
#[test]
fn warm_i386_unwind_allocates_nothing() {
    use gimli::write::{
        Address, CallFrameInstruction as Insn, CommonInformationEntry, EhFrame, EndianVec,
        FrameDescriptionEntry, FrameTable,
    };
    use gimli::{Encoding, Format, LittleEndian, Register};
    const F: u64 = 0x1000;
    const START: u64 = 0x2000;
    const BIAS: u64 = 0x5655_0000;
    const SP: u64 = 0xffd0_0000;
    const DEPTH: usize = 100;
    let (esp, ebp, ebx, eip) = (Register(4), Register(5), Register(3), Register(8));

    let encoding = Encoding { format: Format::Dwarf32, version: 1, address_size: 4 };
    let mut cie = CommonInformationEntry::new(encoding, 1, -4, eip);
    cie.add_instruction(Insn::Cfa(esp, 4));
    cie.add_instruction(Insn::Offset(eip, -4));
    let mut table = FrameTable::default();
    let cie = table.add_cie(cie);
    let mut f = FrameDescriptionEntry::new(Address::Constant(F), 0x100);
    f.add_instruction(1, Insn::CfaOffset(8));
    f.add_instruction(1, Insn::Offset(ebp, -8));
    f.add_instruction(2, Insn::CfaOffset(12));
    f.add_instruction(2, Insn::Offset(ebx, -12));
    table.add_fde(cie, f);
    let mut start = FrameDescriptionEntry::new(Address::Constant(START), 0x100);
    start.add_instruction(0, Insn::Undefined(eip));
    table.add_fde(cie, start);
    let mut eh = EhFrame(EndianVec::new(LittleEndian));
    table.write_eh_frame(&mut eh).unwrap();
    let eh = eh.0.into_vec();
    let mut data = vec![0u8; 64];
    let eh_frame = SectionInfo { file_offset: 64, size: eh.len() as u64, address: 0x3000 };
    data.extend_from_slice(&eh);
    let sections = ModuleSections { eh_frame: Some(eh_frame), ..ModuleSections::default() };
    let module =
        Module::new("i386".into(), Arch::I386, Data::Owned(data), sections, F..0x4000, BIAS)
            .unwrap();
    let mut unwinder = Unwinder::new(Arch::I386);
    unwinder.add_module(Arc::new(module)).unwrap();

    // Frame k: ebx at SP + 12k, ebp above it, then the return address.
    let mut stack = vec![0u8; 12 * DEPTH + 16];
    for k in 0..DEPTH {
        let ra = if k + 1 < DEPTH { BIAS + F + 0x20 } else { BIAS + START + 5 };
        for (i, word) in [0xb000 + k as u32, 0xe000 + k as u32, ra as u32].into_iter().enumerate() {
            stack[12 * k + 4 * i..12 * k + 4 * i + 4].copy_from_slice(&word.to_le_bytes());
        }
    }
    let mut memory = Regions::new();
    memory.add(SP, &stack);
    let mut regs = Registers::new();
    regs.set(4, SP);
    let pc = BIAS + F + 0x10;
    let mut frames: Vec<Frame> = Vec::with_capacity(256);

    let (cold, cold_allocs) =
        allocations(|| unwinder.unwind(pc, &regs, &mut memory, None, &mut frames));
    assert_eq!(cold.reason, EndReason::EndOfStack, "{}", unwinder.describe(&cold));
    assert_eq!(frames.len(), DEPTH + 1);
    assert_eq!(frames[DEPTH].sp, SP + 12 * DEPTH as u64);
    let cold_frames = frames.clone();
    let (warm, warm_allocs) =
        allocations(|| unwinder.unwind(pc, &regs, &mut memory, None, &mut frames));
    assert_eq!((warm, &frames), (cold, &cold_frames));
    assert_eq!(warm_allocs, 0, "the warm path allocated");
    assert_eq!(cold_allocs, 0, "the cold path allocated");
}
