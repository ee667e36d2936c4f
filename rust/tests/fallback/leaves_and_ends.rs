//! Frame 0 without CFI taken for a leaf (`unwind_sample`), aarch64, and the outermost frame.

use super::*;

// --- unwind_sample: frame 0 without CFI taken for a leaf (the profiler's walk) -----------

/// The module of the leaf tests: R3 (in WITH_CFI, whose CFI says CFA = rsp
/// + 8 and the return address at CFA − 8) returns from a call to LEAF.
pub(crate) fn x86_leaf_module() -> Arc<Module> {
    let mut image = Image::new(Arch::X86_64);
    image.call_before(R3, LEAF);
    image.module(Some(x86_eh_frame(&[])))
}

#[test]
fn a_sample_takes_frame_zero_without_cfi_for_a_leaf() {
    // LEAF has no FDE; [sp] returns into WITH_CFI after a call to LEAF,
    // whose CFI finds R1 above it; R1 has no CFI.
    let mut s = Stack::new();
    s.set(SP, rt(R3)).set(SP + 8, rt(R1));
    let regs = [(RSP, SP), (RBP, 0x1234)];
    let w = cfi_walk(Arch::X86_64, x86_leaf_module(), true, rt(LEAF + 7), &regs, &s);
    use Trust::*;
    assert_eq!(w.pcs(), [rt(LEAF + 7), rt(R3), rt(R1)], "{}", w.message);
    assert_eq!(w.trusts(), [Context, FramePointer, Cfi]);
    assert_eq!(w.sps(), [SP, SP + 8, SP + 16]);
    assert_eq!(w.frames[0].cfa, Some(SP + 8), "the leaf's CFA is its caller's sp");
    assert_eq!((w.end.reason, w.end.frame), (EndReason::NoUnwindInfo, 2), "{}", w.message);
    // `unwind` with CFI alone stops at frame 0.
    let w = cfi_walk(Arch::X86_64, x86_leaf_module(), false, rt(LEAF + 7), &regs, &s);
    assert_eq!(w.pcs(), [rt(LEAF + 7)], "{}", w.message);
    assert_eq!(w.end.reason, EndReason::NoUnwindInfo);
}

#[test]
fn a_leaf_frame_zero_needs_a_plausible_return_address() {
    let regs = [(RSP, SP), (RBP, 0x1234)];
    let walk = |s: &Stack, pc: u64, sample: bool| {
        cfi_walk(Arch::X86_64, x86_leaf_module(), sample, pc, &regs, s)
    };
    let leaf = |s: &Stack, pc: u64| walk(s, pc, true);
    // [sp] follows no call, or a call to another function than LEAF (R1's
    // targets 0x1000): no frame is guessed, the end is `unwind`'s.
    for word in [rt(NO_CALL), rt(R1), 0] {
        let mut s = Stack::new();
        s.set(SP, word);
        let w = leaf(&s, rt(LEAF + 7));
        assert_eq!(w.pcs(), [rt(LEAF + 7)], "{word:#x}: {}", w.message);
        assert_eq!(w.end.reason, EndReason::NoUnwindInfo, "{}", w.message);
        assert_eq!(w.end, walk(&s, rt(LEAF + 7), false).end);
    }
    // A pc in no module is not a leaf's (JIT code, a bad pc): never guessed.
    let w = leaf(Stack::new().set(SP, rt(R3)), 0x1000);
    assert_eq!(w.pcs(), [0x1000], "{}", w.message);
    assert_eq!(w.end.reason, EndReason::NoModule);
    // CFI applied to the leaf's caller must give a return address that is
    // one (after a call), as after any frame a fallback step found.
    let w = leaf(Stack::new().set(SP, rt(R3)).set(SP + 8, rt(NO_CALL)), rt(LEAF + 7));
    assert_eq!(w.pcs(), [rt(LEAF + 7), rt(R3)], "{}", w.message);
    assert_eq!((w.end.reason, w.end.frame), (EndReason::BadReturnAddress, 1), "{}", w.message);
    // One frame asked for: the walk could go on.
    let mut uw = Unwinder::new(Arch::X86_64);
    uw.add_module(x86_leaf_module()).expect("one module");
    let mut r = Registers::new();
    r.set(RSP, SP);
    let mut s = Stack::new();
    s.set(SP, rt(R3)).set(SP + 8, rt(R1));
    let mut frames = Vec::new();
    let end = uw.unwind_sample(rt(LEAF + 7), &r, &mut s.memory(), Some(1), &mut frames);
    assert_eq!((frames.len(), end.reason), (1, EndReason::FrameLimit));
}

#[test]
fn a_sample_walks_on_by_frame_pointers_where_cfi_stops() {
    // LEAF (no CFI) returns to R3 (WITH_CFI), whose CFI finds R1; R1 has no
    // CFI, and the frame record at rbp gives its caller R2, the outermost
    // frame (frame pointer 0).
    let first = SP + 0x40;
    let mut s = Stack::new();
    s.set(SP, rt(R3)).set(SP + 8, rt(R1));
    s.set(first, 0).set(first + 8, rt(R2));
    let regs = [(RSP, SP), (RBP, first)];
    let sample = |strategies: &'static [Strategy], sample: bool| {
        let setup = |uw: &mut Unwinder| uw.set_strategies(strategies);
        walk_with(Arch::X86_64, x86_leaf_module(), rt(LEAF + 7), &regs, &s, sample, setup)
    };
    use Trust::*;
    let w = sample(&FP_ONLY, true);
    assert_eq!(w.pcs(), [rt(LEAF + 7), rt(R3), rt(R1), rt(R2)], "{}", w.message);
    assert_eq!(w.trusts(), [Context, FramePointer, Cfi, FramePointer]);
    assert_eq!(w.sps(), [SP, SP + 8, SP + 16, first + 16]);
    assert_eq!((w.end.reason, w.end.frame), (EndReason::EndOfStack, 3), "{}", w.message);
    // As `unwind` walks it with the same strategies.
    let unwound = sample(&FP_ONLY, false);
    assert_eq!((unwound.pcs(), unwound.trusts(), unwound.end), (w.pcs(), w.trusts(), w.end));
    // With CFI alone the sample stops where CFI does, past the leaf.
    let w = sample(&[Strategy::Cfi], true);
    assert_eq!(w.pcs(), [rt(LEAF + 7), rt(R3), rt(R1)], "{}", w.message);
    assert_eq!((w.end.reason, w.end.frame), (EndReason::NoUnwindInfo, 2), "{}", w.message);
    // A pc outside every module (JIT code no perf map names) is not walked
    // on by the fallbacks either: [sp] may be a stale return address.
    let setup = |uw: &mut Unwinder| uw.set_strategies(&FP_ONLY);
    let w = walk_with(Arch::X86_64, x86_leaf_module(), 0x1000, &regs, &s, true, setup);
    assert_eq!(w.pcs(), [0x1000], "{}", w.message);
    assert_eq!(w.end.reason, EndReason::NoModule);
}

/// JIT code as a perf map names it: a module of code alone, without a file
/// (no CFI, no code bytes), at runtime addresses `JIT`, whose functions
/// start at `JIT_FUNCTIONS`.
fn jit_module(arch: Arch) -> Arc<Module> {
    let size = JIT.end - JIT.start;
    let code = vec![CodeSegment { address: JIT.start, size, file_offset: 0, file_size: 0 }];
    let map: String =
        JIT_FUNCTIONS.iter().map(|(f, name)| format!("{f:x} 100 JS:~{name}\n")).collect();
    let map = Arc::new(PerfMap::parse(map.as_bytes()));
    let info = Arc::new(UnwindInfo::without_file(arch, code).with_functions(map));
    Arc::new(Module::place("/tmp/perf-1.map".into(), info, JIT, 0).expect("a range"))
}

const JIT: Range<u64> = 0x4000_0000..0x4010_0000;
const INNER: u64 = JIT.start + 0x500;
const MIDDLE: u64 = JIT.start + 0x300;
const OUTER: u64 = JIT.start + 0x100;
const JIT_FUNCTIONS: [(u64, &str); 3] = [(OUTER, "outer"), (MIDDLE, "middle"), (INNER, "inner")];

/// A walk by frame pointers from `pc` in JIT code: x86_64's if `sp_word`
/// (the word at sp) is given, else aarch64's with `lr`. The frame records
/// at fp: outer's, returning into middle, and middle's caller's, into outer.
fn jit_walk(pc: u64, sp_words: &[u64], lr: u64, module: Arc<Module>) -> Walk {
    let fp = SP + 0x40;
    let mut s = Stack::new();
    for (i, &word) in sp_words.iter().enumerate() {
        s.set(SP + 8 * i as u64, word);
    }
    s.record(fp, fp + 0x30, OUTER + 0x20).record(fp + 0x30, 0, OUTER + 0x10);
    if sp_words.is_empty() {
        let regs = [(A64_SP, SP), (X29, fp), (X30, lr)];
        walk(Arch::Aarch64, module, &FP_ONLY, pc, &regs, &s)
    } else {
        walk(Arch::X86_64, module, &FP_ONLY, pc, &[(RSP, SP), (RBP, fp)], &s)
    }
}

#[test]
fn in_jit_code_a_function_at_its_entry_or_in_its_prologue_returns_to_its_caller() {
    // inner (frame 0) is called by middle, called by outer: the record at
    // fp is middle's caller's, and taken it would skip middle. At inner's
    // first instruction middle's return address is at sp; after `push rbp`,
    // fp itself is at sp and the return address above.
    let fp = SP + 0x40;
    let ra = MIDDLE + 0x44;
    let x86 = || jit_module(Arch::X86_64);
    for (pc, words) in [(INNER, vec![ra]), (INNER + 1, vec![fp, ra])] {
        let w = jit_walk(pc, &words, 0, x86());
        assert_eq!(w.pcs(), [pc, ra, OUTER + 0x20, OUTER + 0x10], "{pc:#x}: {}", w.message);
        assert_eq!(
            w.sps()[1],
            SP + 8 * words.len() as u64,
            "the caller's sp is above its return address"
        );
        assert_eq!(w.trusts()[1..], [Trust::FramePointer; 3]);
        assert_eq!(w.end.frame, 3, "the walk ends at the top: {}", w.message);
    }
    // Recursion: middle at its entry, called by itself.
    let w = jit_walk(MIDDLE, &[ra], 0, x86());
    assert_eq!(w.pcs(), [MIDDLE, ra, OUTER + 0x20, OUTER + 0x10], "{}", w.message);
    // Past its prologue a frame may hold any word at sp, return addresses
    // of its own calls among them, into JIT code or a module with code: the
    // record at fp gives the caller, wherever the word points.
    let stale = [ra, INNER + 0x20, rt(R3)];
    for word in stale {
        let mut uw = Unwinder::new(Arch::X86_64);
        uw.add_module(x86()).expect("JIT code");
        uw.add_module(x86_leaf_module()).expect("a module with code");
        uw.set_strategies(&FP_ONLY);
        let mut s = Stack::new();
        s.set(SP, word).record(fp, fp + 0x30, OUTER + 0x20).record(fp + 0x30, 0, OUTER + 0x10);
        let mut r = Registers::new();
        r.set(RSP, SP);
        r.set(RBP, fp);
        let mut frames = Vec::new();
        uw.unwind(INNER + 0x40, &r, &mut s.memory(), Some(64), &mut frames);
        let pcs: Vec<u64> = frames.iter().map(|f| f.pc).collect();
        assert_eq!(pcs, [INNER + 0x40, OUTER + 0x20, OUTER + 0x10], "{word:#x} at sp");
    }
    // A pushed fp past the prologue is no prologue's.
    let w = jit_walk(INNER + 0x40, &[fp, ra], 0, x86());
    assert_eq!(w.pcs(), [INNER + 0x40, OUTER + 0x20, OUTER + 0x10], "{}", w.message);
    // aarch64: lr is the return address at the function's first
    // instruction; past it, lr may be one of the frame's own calls.
    let a64 = || jit_module(Arch::Aarch64);
    let w = jit_walk(INNER, &[], ra, a64());
    assert_eq!(w.pcs(), [INNER, ra, OUTER + 0x20, OUTER + 0x10], "{}", w.message);
    let w = jit_walk(INNER + 0x40, &[], INNER + 0x24, a64());
    assert_eq!(w.pcs(), [INNER + 0x40, OUTER + 0x20, OUTER + 0x10], "{}", w.message);
}

#[test]
fn a_sample_with_no_strategy_has_frame_zero_alone() {
    // An empty list of strategies leaves only frame 0, sample or not.
    let mut s = Stack::new();
    s.set(SP, rt(R3)).set(SP + 8, rt(R1));
    let regs = [(RSP, SP)];
    let none = |uw: &mut Unwinder| uw.set_strategies(&[]);
    let w = walk_with(Arch::X86_64, x86_leaf_module(), rt(LEAF + 7), &regs, &s, true, none);
    assert_eq!(w.pcs(), [rt(LEAF + 7)], "{}", w.message);
}

#[test]
fn aarch64_a_sample_takes_a_leaf_frame_zero_through_lr() {
    // Frame 0 in LEAF (no FDE), lr = R1 after a bl to LEAF, PAC bits set;
    // R1 has no CFI either: the walk stops there.
    let regs = [(A64_SP, SP), (X29, FP1), (X30, rt(R1) | 0x0021_0000_0000_0000)];
    let w = cfi_walk(Arch::Aarch64, a64_module(), true, rt(LEAF + 0x10), &regs, &a64_chain());
    assert_eq!(w.pcs(), [rt(LEAF + 0x10), rt(R1)], "{}", w.message);
    assert_eq!(w.trusts(), [Trust::Context, Trust::FramePointer]);
    assert_eq!(w.sps(), [SP, SP], "a leaf's caller may share its sp");
    assert_eq!((w.end.reason, w.end.frame), (EndReason::NoUnwindInfo, 1), "{}", w.message);
}

// --- aarch64 -----------------------------------------------------------------------------

/// The leaf function frame 0 is in (no CFI, no frame record of its own).
pub(crate) const LEAF: u64 = 0x1800;

pub(crate) fn a64_module() -> Arc<Module> {
    let mut image = Image::new(Arch::Aarch64);
    // R1 returns from a call to LEAF; R2 and R3 from calls elsewhere.
    image.call_before(R1, LEAF);
    image.module(None)
}

pub(crate) fn a64_chain() -> Stack {
    // Records as aarch64 builds them: [x29] = caller's x29, [x29 + 8] = lr.
    let mut s = Stack::new();
    s.record(FP1, FP2, rt(R2)).record(FP2, FP3, rt(R3)).record(FP3, 0, 0);
    s
}

#[test]
fn aarch64_leaf_frame_zero_returns_through_lr() {
    // Frame 0 in LEAF: lr = R1 (after a bl to LEAF), x29 = its caller's record.
    let w = walk(
        Arch::Aarch64,
        a64_module(),
        &FP_ONLY,
        rt(LEAF + 0x10),
        &[(A64_SP, SP), (X29, FP1), (X30, rt(R1) | 0x0021_0000_0000_0000)],
        &a64_chain(),
    );
    assert_eq!(w.pcs(), [rt(LEAF + 0x10), rt(R1), rt(R2), rt(R3)], "{}", w.message);
    use Trust::*;
    assert_eq!(w.trusts(), [Context, FramePointer, FramePointer, FramePointer]);
    assert_eq!(w.end.reason, EndReason::PcZero);
}

#[test]
fn aarch64_non_leaf_frame_zero_uses_its_frame_record() {
    // lr points after a call made inside frame 0's own function (R2's call
    // targets 0x1000, and R2 − 4 lies between it and the pc): not a leaf.
    let mut s = a64_chain();
    s.record(FP0, FP1, rt(R1));
    let w = walk(
        Arch::Aarch64,
        a64_module(),
        &FP_ONLY,
        rt(R2 + 0x40),
        &[(A64_SP, SP), (X29, FP0), (X30, rt(R2))],
        &s,
    );
    assert_eq!(w.pcs(), [rt(R2 + 0x40), rt(R1), rt(R2), rt(R3)], "{}", w.message);
    // lr repeated in the record at x29: frame 0 made its record, not a leaf.
    let w = walk(
        Arch::Aarch64,
        a64_module(),
        &FP_ONLY,
        rt(LEAF + 0x10),
        &[(A64_SP, SP), (X29, FP1), (X30, rt(R2))],
        &s,
    );
    assert_eq!(w.pcs(), [rt(LEAF + 0x10), rt(R2), rt(R3)], "{}", w.message);
}

#[test]
fn aarch64_scan_takes_the_callers_fp_from_the_record() {
    // No fp in frame 0; the scan finds R2 in FP1's record and takes the
    // caller's x29 from the word below it, so the walk goes on by records.
    let w =
        walk(Arch::Aarch64, a64_module(), &ALL, rt(PC0), &[(A64_SP, SP), (X30, 0)], &a64_chain());
    use Trust::*;
    assert_eq!(w.pcs(), [rt(PC0), rt(R2), rt(R3)], "{}", w.message);
    assert_eq!(w.trusts(), [Context, Scan, FramePointer]);
    assert_eq!(w.end.reason, EndReason::PcZero);
}

#[test]
fn addresses_without_cfi_are_looked_up_once() {
    // The frame-pointer walk asks CFI first at every frame: the rule cache
    // remembers that no FDE covers those addresses.
    let mut uw = Unwinder::new(Arch::X86_64);
    uw.add_module(Image::new(Arch::X86_64).module(Some(x86_eh_frame(&[])))).unwrap();
    uw.set_strategies(&FP_ONLY);
    let stack = x86_chain();
    let mut regs = Registers::new();
    regs.set(RSP, SP);
    regs.set(RBP, FP0);
    let mut frames = Vec::new();
    let first = uw.unwind(rt(PC0), &regs, &mut stack.memory(), Some(64), &mut frames);
    let cold = uw.cache_stats();
    let second = uw.unwind(rt(PC0), &regs, &mut stack.memory(), Some(64), &mut frames);
    assert_eq!(first, second);
    assert_eq!(frames.len(), 4);
    assert_eq!(uw.cache_stats().misses, cold.misses, "no lookup parsed CFI again");
    assert!(uw.cache_stats().hits >= cold.hits + 3);
}

#[test]
fn aarch64_cfi_after_a_frame_record_takes_its_cfa_from_x29() {
    // Frame 0 has no CFI; its record gives R3, in a function with CFI that
    // saved x29 and x30 at CFA − 32 and CFA − 24 (`stp x29, x30, [sp, #-32]!;
    // mov x29, sp`). The record only bounds R3's sp (FP0 + 16); its CFA is
    // x29 + 32, x29 being the address of its own record, FP1.
    let rows = vec![
        Insn::CfaOffset(32),
        Insn::Offset(Register(X29), -32),
        Insn::Offset(Register(X30), -24),
    ];
    let module =
        Image::new(Arch::Aarch64).module(Some(eh_frame(Arch::Aarch64, &[(WITH_CFI, rows)])));
    let mut s = Stack::new();
    s.record(FP0, FP1, rt(R3)).record(FP1, FP2, rt(R2)).record(FP2, 0, 0);
    let regs = [(A64_SP, SP), (X29, FP0)];
    let w = walk(Arch::Aarch64, module, &FP_ONLY, rt(PC0), &regs, &s);
    use Trust::*;
    assert_eq!(w.pcs(), [rt(PC0), rt(R3), rt(R2)], "{}", w.message);
    assert_eq!(w.trusts(), [Context, FramePointer, Cfi]);
    assert_eq!(w.sps(), [SP, FP0 + 16, FP1 + 32]);
    assert_eq!(w.frames[1].cfa, Some(FP1 + 32));
    assert_eq!(w.end.reason, EndReason::PcZero, "{}", w.message);
}

#[test]
fn a_scan_skips_return_addresses_of_calls_the_frame_made_itself() {
    // Frame 0 at 0x1530 made a call at 0x151b (to 0x1000) that returned:
    // its return address is still on the stack, stale. The scan takes the
    // next one, whose call (at 0x161b) lies above the pc.
    let mut image = Image::new(Arch::X86_64);
    image.call_before(0x1520, 0x1000).call_before(0x1620, 0x1500);
    let mut s = Stack::new();
    s.set(SP, rt(0x1520)).set(SP + 8, rt(0x1620));
    let w = walk(Arch::X86_64, image.module(None), &ALL, rt(0x1530), &[(RSP, SP)], &s);
    assert_eq!(w.pcs()[..2], [rt(0x1530), rt(0x1620)], "{}", w.message);
    assert_eq!(w.sps()[1], SP + 16);
}

// --- the outermost frame ------------------------------------------------------------------

/// The entry point of the module (`_start`, without CFI): R2 returns into it.
/// The module has no symbol table, so the entry function's extent is a guess.
pub(crate) const ENTRY: u64 = R2 - 0x20;

/// x86_64 frame 0 at PC0 -> R1 -> R2 (in the entry function) by frame
/// records, FP1's saving `r2_fp` as R2's frame pointer; above, words that
/// look like more of the chain (R3, then the end), as a startup's leftovers
/// on the stack (argv, `AT_ENTRY`) may.
pub(crate) fn past_the_entry(r2_fp: u64) -> Stack {
    let mut s = x86_chain();
    s.record(FP1, r2_fp, rt(R2)).record(FP2, FP3, rt(R3)).record(FP3, 0, 0);
    s
}

pub(crate) fn entry_walk(entry: Option<u64>, eh_frame: Option<Vec<u8>>, r2_fp: u64) -> Walk {
    let module = Image::new(Arch::X86_64).module_with(eh_frame, entry, BIAS);
    let regs = [(RSP, SP), (RBP, FP0)];
    walk(Arch::X86_64, module, &ALL, rt(PC0), &regs, &past_the_entry(r2_fp))
}

#[test]
fn without_symbols_a_frame_at_the_entry_point_with_fp_0_is_the_outermost() {
    let w = entry_walk(Some(ENTRY), None, 0);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2)], "{}", w.message);
    assert_eq!(w.end.reason, EndReason::EndOfStack, "{}", w.message);
    assert!(w.end.reason.is_clean());
    assert_eq!(w.end.detail, EndDetail::EntryPoint { entry: rt(ENTRY) });
    assert_eq!(w.end.frame, 2);
    assert!(w.message.contains("entry point 0x"), "{}", w.message);
    // The extent of a function without symbols is a guess, which may take in
    // the functions after `_start` that have no CFI either: without the zero
    // fp that `_start` sets, the frame is not taken for it.
    let w = entry_walk(Some(ENTRY), None, FP2);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2), rt(R3)], "{}", w.message);
    // (Then the record of two zeros, no x86_64 record.)
    assert_eq!(w.end.reason, EndReason::BadReturnAddress);
}

#[test]
fn without_symbols_the_entry_function_ends_at_the_next_fde_or_after_0x80_bytes() {
    // R2's call lies at R2 - 5 .. R2: its frame is looked up at R2 - 1.
    let lookup = R2 - 1;
    let in_entry = |entry: u64, eh_frame: Option<Vec<u8>>| {
        let w = entry_walk(Some(entry), eh_frame, 0);
        assert_eq!(w.end.reason, EndReason::EndOfStack, "{}", w.message);
        // Else the ABI's zero fp ends it.
        w.end.detail == EndDetail::EntryPoint { entry: rt(entry) }
    };
    assert!(in_entry(lookup - 0x7f, None));
    assert!(!in_entry(lookup - 0x80, None));
    // An FDE for a function between the entry point and the pc: the entry
    // function ends where that one starts.
    let between = |at: u64| x86_eh_frame(&[(at..at + 4, vec![])]);
    assert!(in_entry(ENTRY, Some(between(R2 + 0x10))));
    assert!(!in_entry(ENTRY, Some(between(ENTRY + 0x10))));
}

/// This test program's own `_start` (glibc's, x86_64): its ELF range by
/// the symbol table, and the return address of its call of
/// `__libc_start_main` (`call *rel32(%rip)`, then `hlt`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn own_start(exe: &[u8]) -> (Range<u64>, u64) {
    let elf = _core::space::elf::read_elf(exe).unwrap();
    let entry = elf.sections.entry.expect("an executable has an entry point");
    let start = _core::space::symtab::function_bounds(exe, entry).unwrap().covering.unwrap();
    let segment = elf.sections.code.iter().find(|s| start.start >= s.address).unwrap();
    let at = (start.start - segment.address + segment.file_offset) as usize;
    let code = &exe[at..at + (start.end - start.start) as usize];
    let call = code
        .windows(7)
        .position(|w| w[..2] == [0xff, 0x15] && w[6] == 0xf4)
        .expect("_start calls __libc_start_main, then hlt");
    (start.clone(), start.start + call as u64 + 6)
}

#[test]
#[cfg(target_arch = "x86_64")]
fn with_symbols_the_function_at_the_entry_point_is_the_outermost_whatever_its_fp() {
    // Frame 0's record (at FP0) holds a return address into this program's
    // own `_start` and a non-zero fp; the record there leads on (to return
    // address 0). Frame pointers alone: CFI (which `_start` has) is not
    // asked, so the symbol's extent is what ends the walk.
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let (start, ra) = own_start(&exe);
    let elf = _core::space::elf::read_elf(&exe).unwrap();
    let module =
        Module::new("self".into(), Arch::X86_64, Data::Owned(exe), elf.sections, elf.range, BIAS);
    let mut s = Stack::new();
    s.record(FP0, FP1, rt(ra)).record(FP1, 0, 0);
    let strategies = [Strategy::FramePointer];
    let pc = rt(start.end + 0x10); // in a function after it
    let w = walk(
        Arch::X86_64,
        Arc::new(module.unwrap()),
        &strategies,
        pc,
        &[(RSP, SP), (RBP, FP0)],
        &s,
    );
    assert_eq!(w.pcs(), [pc, rt(ra)], "{}", w.message);
    assert_eq!(w.end.detail, EndDetail::EntryPoint { entry: rt(start.start) }, "{}", w.message);
}

#[test]
fn i386_without_symbols_a_frame_at_the_entry_point_with_ebp_0_is_the_outermost() {
    // i386 has no zero-fp rule (see `i386_ebp_zero_is_no_end`), but every
    // `_start` clears ebp too: in the entry function, ebp 0 ends the stack.
    let (pcs, end, _) = i386_walk(Some(R1 - 0x10));
    assert_eq!(pcs, [PC0, R1]);
    assert_eq!(
        (end.reason, end.detail),
        (EndReason::EndOfStack, EndDetail::EntryPoint { entry: R1 - 0x10 })
    );
}

#[test]
fn the_abis_zero_frame_pointer_ends_a_frame_without_cfi() {
    // Frame 2 (R2, no CFI) was reached by FP1's record, which saved fp 0:
    // the caller cleared it (x86_64 `_start` and `clone`'s child do).
    let mut s = x86_chain();
    s.record(FP1, 0, rt(R2));
    // Words above that a scan would take for a caller.
    s.set(FP1 + 16, rt(R3)).set(FP1 + 24, rt(R1));
    let w = x86_walk(&s, &ALL);
    assert_eq!(w.pcs(), [rt(PC0), rt(R1), rt(R2)], "{}", w.message);
    assert_eq!((w.end.reason, w.end.detail), (EndReason::EndOfStack, EndDetail::ZeroFramePointer));
    assert!(w.message.contains("frame pointer 0"), "{}", w.message);
    // Where R2's function has CFI, fp 0 means nothing (rbp is data in code
    // without frame pointers): CFI goes on, to the return address at its sp.
    let module =
        Image::new(Arch::X86_64).module(Some(x86_eh_frame(&[(R2 - 0x10..R2 + 0x10, vec![])])));
    let w = walk(Arch::X86_64, module, &ALL, rt(PC0), &[(RSP, SP), (RBP, FP0)], &s);
    assert_eq!(w.pcs()[..4], [rt(PC0), rt(R1), rt(R2), rt(R3)], "{}", w.message);
    assert_eq!(w.trusts()[3], Trust::Cfi);
}

#[test]
fn a_zero_frame_pointer_that_is_not_known_exactly_is_no_end() {
    // Frame 0's own rbp may be any data (a leaf built without frame
    // pointers): 0 there is no end, and the scan finds R2.
    let mut s = Stack::new();
    s.set(SP + 0x18, rt(R2)).record(SP + 0x40, 0, 0);
    let module = Image::new(Arch::X86_64).module(None);
    let w = walk(Arch::X86_64, module.clone(), &ALL, rt(PC0), &[(RSP, SP), (RBP, 0)], &s);
    assert_eq!(w.pcs()[..2], [rt(PC0), rt(R2)], "{}", w.message);
    assert_eq!(w.trusts()[1], Trust::Scan);
    // Nor is the fp a scan kept for the frame it found (R2's, still 0): the
    // scan goes on from there, to R3.
    s.set(SP + 0x28, rt(R3));
    let w = walk(Arch::X86_64, module, &ALL, rt(PC0), &[(RSP, SP), (RBP, 0)], &s);
    assert_eq!(w.pcs()[..3], [rt(PC0), rt(R2), rt(R3)], "{}", w.message);
}

#[test]
fn aarch64_a_frame_record_saving_x29_zero_makes_its_caller_the_last_frame() {
    // LEAF (frame 0) returns through lr to R1; R1's record holds x29 = 0 and
    // lr = R2: R2's function cleared x29 (glibc's `_start`, `thread_start`).
    let mut s = Stack::new();
    s.record(FP1, 0, rt(R2)).set(FP1 + 16, rt(R3));
    let regs = [(A64_SP, SP), (X29, FP1), (X30, rt(R1))];
    let w = walk(Arch::Aarch64, a64_module(), &ALL, rt(LEAF + 0x10), &regs, &s);
    assert_eq!(w.pcs(), [rt(LEAF + 0x10), rt(R1), rt(R2)], "{}", w.message);
    assert_eq!((w.end.reason, w.end.detail), (EndReason::EndOfStack, EndDetail::ZeroFramePointer));
}

/// i386: frame 0 at PC0 -> R1 by the record at its ebp, which saved ebp 0;
/// frame pointers only. The module (at bias 0) has `entry` if given.
pub(crate) fn i386_walk(entry: Option<u64>) -> (Vec<u64>, End, String) {
    const ESP: u16 = 4;
    const EBP: u16 = 5;
    const SP32: u64 = 0xffd0_1000;
    const FP: u64 = SP32 + 0x20;
    let mut bytes = vec![0u8; 0x200];
    let mut set = |addr: u64, value: u32| {
        let at = (addr - SP32) as usize;
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    };
    set(FP, 0);
    set(FP + 4, R1 as u32);
    let module = Image::new(Arch::I386).module_with(None, entry, 0);
    let mut uw = Unwinder::new(Arch::I386);
    uw.add_module(module).unwrap();
    uw.set_strategies(&FP_ONLY);
    let mut regs = Registers::new();
    regs.set(ESP, SP32);
    regs.set(EBP, FP);
    let mut memory = Regions::new();
    memory.add(SP32, &bytes);
    let mut frames = Vec::new();
    let end = uw.unwind(PC0, &regs, &mut memory, Some(16), &mut frames);
    (frames.iter().map(|f| f.pc).collect(), end, uw.describe(&end))
}

#[test]
fn i386_ebp_zero_is_no_end() {
    // 32-bit code without frame pointers uses ebp as one of its few
    // registers: the zero-fp rule is x86_64's and aarch64's only.
    let (pcs, end, message) = i386_walk(None);
    assert_eq!(pcs, [PC0, R1], "{message}");
    assert_eq!(end.reason, EndReason::FpInvalid, "{message}");
    assert_eq!(end.detail, EndDetail::FramePointer { fp: 0, problem: FpProblem::Zero });
}
