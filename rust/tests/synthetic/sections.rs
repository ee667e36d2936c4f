//! Damaged sections, the search table against the sorted index, the rule cache, modules, and random bytes.

use super::*;

// ---------------------------------------------------------------------------
// Damaged sections
// ---------------------------------------------------------------------------

/// F and START (valid), then LAST, the FDE the tests damage.
pub(crate) const LAST: u64 = 0x6000;

pub(crate) fn damaged_cfi() -> CfiBuilder {
    let mut cfi = CfiBuilder::new(Arch::X86_64);
    cfi.fde(F, 0x100, vec![]).outermost(START).fde(LAST, 0x100, vec![]);
    cfi
}

/// Walk from F (which must still work) and from LAST (which may not).
pub(crate) fn walk_damaged(sections: &Sections) -> (Walk, Walk) {
    let module = load(Arch::X86_64, sections);
    let mut uw = unwinder(Arch::X86_64, module);
    let mut stack = Stack::new();
    stack.set(SP, rt(START + 5));
    let from_f = walk(&mut uw, rt(F + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    let from_last = walk(&mut uw, rt(LAST + 0x10), &[(RSP, SP)], &mut stack.memory(), 16);
    (from_f, from_last)
}

pub(crate) fn assert_intact(w: &Walk) {
    assert_eq!(w.pcs(), [rt(F + 0x10), rt(START + 5)]);
    assert_eq!(w.end.reason, EndReason::EndOfStack);
}

pub(crate) fn assert_refused(w: &Walk) {
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
pub(crate) fn set_table_fde_pointer(hdr: &mut [u8], index: usize, value: i32) {
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
pub(crate) fn many_functions() -> (CfiBuilder, Range<u64>) {
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
pub(crate) fn cfa_reg_offset(rule: CfaRule) -> Option<(u16, i64)> {
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
pub(crate) struct Rng(u64);

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

pub(crate) fn random_expr(rng: &mut Rng) -> Expression {
    let len = rng.below(24) as usize;
    expr(&rng.bytes(len))
}

pub(crate) const FUZZ_MAX_FRAMES: usize = 32;

/// Unwind from random registers over random memory (captured regions, or
/// a closure answering every address), checking what always holds.
pub(crate) fn fuzz_walks(rng: &mut Rng, uw: &mut Unwinder) {
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

pub(crate) fn check_walk(uw: &Unwinder, w: &Walk) {
    assert!(!w.frames.is_empty() && w.frames.len() <= FUZZ_MAX_FRAMES);
    assert_eq!(w.end.frame + 1, w.frames.len(), "{:?}", w.end);
    if w.end.reason == EndReason::FrameLimit {
        assert_eq!(w.frames.len(), FUZZ_MAX_FRAMES);
    }
    assert_eq!(w.frames[0].trust, Trust::Context);
    for (i, pair) in w.frames.windows(2).enumerate() {
        // Past a signal frame, to another stack below every frame so far.
        let switched = pair[0].signal_frame && w.frames[..=i].iter().all(|f| pair[1].sp < f.sp);
        assert!(pair[1].sp >= pair[0].sp || switched, "sp never decreases: {:?}", w.frames);
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
