//! The rule cache: unwind rules by address, so that the warm path does no
//! CFI parsing and no allocation. Two-way set-associative (framehop's cache
//! has 509 direct-mapped slots; with two ways, two hot addresses that share
//! a set no longer evict each other on every walk) over a power of two of
//! sets, picked by the address's low bits: a mask, not a division, on the
//! path from a frame's pc to its rules. Each way is one cache line holding
//! its tag (key, module set) and, for the commonest rows, the row in the
//! form the walk applies it ([`Saved`]): a warm step of an ordinary frame
//! reads that one line and the stack. Every row is also kept whole (a
//! [`PackedRow`], apart), for the walks that need more than a [`Saved`] row.

use crate::arch::NUM_REGS;
use crate::unwind::cfi::{CfaRule, ExprRef, RegRule, Row, RuleSet, Rules, SectionKind};

/// Sets in the cache: a power of two. Return addresses' low bits spread
/// them as evenly as a prime modulus does.
const SETS: usize = 512;
const _: () = assert!(SETS.is_power_of_two());

/// The set of `key`.
#[inline(always)]
fn set_of(key: u64) -> usize {
    key as usize & (SETS - 1)
}

const EMPTY_KEY: u64 = u64::MAX;

/// The module index cached for an address no FDE covers.
pub const NO_FDE: usize = u32::MAX as usize;

/// One way of a set, in one cache line: what identifies its entry, and the
/// entry's row as a [`Saved`] one where it is.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Way {
    key: u64,
    /// The module set the entry was made for (`ModuleSet::generation`).
    generation: u64,
    saved: Saved,
    /// In a set's first way: the way to replace next, the one not used
    /// most recently.
    victim: u8,
}

const _: () = assert!(std::mem::size_of::<Way>() == 64);

/// What a cached entry holds besides its way.
#[derive(Clone, Copy)]
struct Entry {
    module: u32,
    row: PackedRow,
}

/// Rules per packed row: ordinary functions save a handful of registers
/// (x86_64: six callee-saved ones and the return address).
const PACKED_RULES: usize = 8;

/// A rule in 8 bytes: its column, its kind, and an offset or a column.
#[derive(Clone, Copy)]
pub struct PackedRule {
    reg: u16,
    kind: u8,
    value: i32,
}

/// The commonest row, as the rule cache keeps it beside its tag: the CFA is
/// a tracked register plus an offset, and every rule saves a tracked register
/// at an offset from the CFA (x86_64's `CFA = rsp + 8, rip at CFA − 8`, or
/// `CFA = rbp + 16` with rbp and the callee-saved registers below it). A walk
/// applies it with no decoding per rule, and reads the saved words from one
/// slice of the stack: `span` bytes and a word from the CFA's register plus
/// `window`, each rule's word at its own offset in that slice.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Saved {
    /// The CFA's offset from its register.
    pub cfa_offset: i32,
    /// Where the saved words start, from the CFA's register: the CFA's
    /// offset plus the lowest rule's.
    pub window: i32,
    /// The highest rule's offset less the lowest's.
    pub span: u16,
    /// `SAVED`, `RA_FIRST`, `SP_SAVED`, `SIGNAL_FRAME`, `RA_UNDEFINED`, `FRAME_RECORD`.
    flags: u8,
    /// How many of `regs` and `ats` are rules (at most [`PACKED_RULES`]).
    len: u8,
    pub cfa_reg: u8,
    /// The return address's column.
    pub ra: u8,
    regs: [u8; PACKED_RULES],
    /// Each rule's word, from the window's start.
    ats: [u16; PACKED_RULES],
}

/// `Saved::flags`: the row is a [`Saved`] one, its first rule is the
/// return address's, a rule recovers the stack pointer, it is a signal
/// frame's, its return address is undefined (the outermost frame's: a rule
/// of its own, not among the rules), it is a frame record's (see
/// [`Saved::frame_record`]).
const SAVED: u8 = 1;
const RA_FIRST: u8 = 2;
const SP_SAVED: u8 = 4;
const SIGNAL_FRAME: u8 = 8;
const RA_UNDEFINED: u8 = 16;
const FRAME_RECORD: u8 = 32;

impl Saved {
    /// Not a saved row.
    const NONE: Saved = Saved {
        cfa_offset: 0,
        window: 0,
        span: 0,
        flags: 0,
        len: 0,
        cfa_reg: 0,
        ra: 0,
        regs: [0; PACKED_RULES],
        ats: [0; PACKED_RULES],
    };

    /// `row` as a [`Saved`] one, with its return address's rule first (the
    /// order of a row's rules, one per column, says nothing); [`Saved::NONE`]
    /// where it is not one. `sp`: the stack pointer's column.
    fn of(row: &PackedRow, sp: u16) -> Saved {
        let tracked = |reg: u16| usize::from(reg) < NUM_REGS;
        let all = &row.rules[..row.count()];
        // The outermost frame's row says so with an undefined return address.
        let ra_undefined = |r: &PackedRule| r.reg == row.ra && r.kind == UNDEFINED;
        let mut rules = [PackedRule { reg: 0, kind: UNDEFINED, value: 0 }; PACKED_RULES];
        let mut len = 0;
        for rule in all.iter().filter(|r| !ra_undefined(r)) {
            rules[len] = *rule;
            len += 1;
        }
        let rules = &rules[..len];
        // A signal frame's row (Go's sigpanic: the others' need more than
        // offsets) is applied the general way, which knows sigpanic's ways.
        if row.cfa_kind != CFA_REG
            || row.signal_frame
            || !tracked(row.cfa_reg)
            || !tracked(row.ra)
            || !rules.iter().all(|r| r.kind == OFFSET && tracked(r.reg))
        {
            return Saved::NONE;
        }
        let lo = rules.iter().map(|r| r.value).min().unwrap_or(0);
        let hi = rules.iter().map(|r| r.value).max().unwrap_or(0);
        let (Some(window), Ok(span)) =
            (row.cfa_offset.checked_add(lo), u16::try_from(i64::from(hi) - i64::from(lo)))
        else {
            return Saved::NONE;
        };
        let ra = rules.iter().position(|r| r.reg == row.ra);
        let mut flags = SAVED;
        if ra.is_some() {
            flags |= RA_FIRST;
        }
        if rules.iter().any(|r| r.reg == sp) {
            flags |= SP_SAVED;
        }
        if row.signal_frame {
            flags |= SIGNAL_FRAME;
        }
        if all.iter().any(ra_undefined) {
            flags |= RA_UNDEFINED;
        }
        let mut out = Saved {
            cfa_offset: row.cfa_offset,
            window,
            span,
            flags,
            len: len as u8,
            // Tracked: below NUM_REGS.
            cfa_reg: row.cfa_reg as u8,
            ra: row.ra as u8,
            ..Saved::NONE
        };
        // The return address's rule first, the others in their order.
        let first = ra.into_iter();
        let rest = (0..rules.len()).filter(|&i| Some(i) != ra);
        for (slot, i) in first.chain(rest).enumerate() {
            out.regs[slot] = rules[i].reg as u8;
            // At most `span`.
            out.ats[slot] = (i64::from(rules[i].value) - i64::from(lo)) as u16;
        }
        // A frame record: the CFA's register r (not sp) plus two words, r's
        // word at r and the return address just above it, nothing else.
        // Not a saved row for the walk's fast step: a run of them is walked
        // apart (`unwind::records`).
        if out.flags == SAVED | RA_FIRST
            && len == 2
            && u16::from(out.regs[1]) == row.cfa_reg
            && row.cfa_reg != sp
            && (out.window, out.ats[0], out.ats[1]) == (0, span, 0)
            && out.cfa_offset == 2 * i32::from(span)
        {
            out.flags = FRAME_RECORD | RA_FIRST;
        }
        out
    }

    /// The row is a frame record's, a word `w` wide (its `span`): the CFA is
    /// the CFA's register r plus `2w`, r's caller value the word at r, the
    /// return address the word at `r + w`; no other rule (x86_64's and
    /// i386's code built with frame pointers at `-O0`, where rbp/ebp heads
    /// the frame; aarch64's x29/x30 record).
    #[inline(always)]
    pub fn frame_record(&self) -> bool {
        self.flags & FRAME_RECORD != 0
    }

    #[inline(always)]
    fn is_saved(&self) -> bool {
        self.flags & SAVED != 0
    }

    /// The rules: each register's column and where its word is in the window.
    #[inline(always)]
    pub fn rules(&self) -> impl Iterator<Item = (u16, usize)> + '_ {
        window_rules(&self.regs, &self.ats, self.len)
    }

    /// Whether there are no rules.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first rule is the return address's.
    #[inline(always)]
    pub fn ra_first(&self) -> bool {
        self.flags & RA_FIRST != 0
    }

    /// A rule recovers the stack pointer (else the caller's is the CFA).
    #[inline(always)]
    pub fn sp_saved(&self) -> bool {
        self.flags & SP_SAVED != 0
    }

    #[inline(always)]
    pub fn signal_frame(&self) -> bool {
        self.flags & SIGNAL_FRAME != 0
    }

    /// The return address's rule where it is not among the rules: undefined
    /// (the outermost frame), else none.
    #[inline(always)]
    pub fn ra_rule(&self) -> Option<RegRule> {
        (self.flags & RA_UNDEFINED != 0).then_some(RegRule::Undefined)
    }
}

const UNDEFINED: u8 = 0;
const SAME_VALUE: u8 = 1;
const OFFSET: u8 = 2;
const VAL_OFFSET: u8 = 3;
const REGISTER: u8 = 4;

/// A row as the cache keeps it: a CFA of a register plus a 32-bit offset
/// (or an expression, as PLT entries have) and at most [`PACKED_RULES`]
/// rules with 32-bit offsets, in 76 bytes (a `RuleSet<8>` takes 216), so
/// that the rows of a walk's hot frames stay in the nearest cache. Rows
/// that do not fit (rules by DWARF expression, more rules, wider offsets)
/// are kept whole with the wide rows.
#[derive(Clone, Copy)]
pub struct PackedRow {
    /// The CFA's register, or the length of its expression.
    cfa_reg: u16,
    ra: u16,
    signal_frame: bool,
    len: u8,
    cfa_kind: u8,
    /// The CFA's offset, or the offset of its expression (as u32).
    cfa_offset: i32,
    rules: [PackedRule; PACKED_RULES],
}

const _: () = assert!(std::mem::size_of::<PackedRow>() == 76);

/// `PackedRow::cfa_kind`: register + offset, or an expression in a section.
const CFA_REG: u8 = 0;
const CFA_EH_FRAME: u8 = 1;
const CFA_DEBUG_FRAME: u8 = 2;

impl PackedRow {
    /// A row with no rules and the CFA at register 0.
    pub const EMPTY: PackedRow = PackedRow {
        cfa_reg: 0,
        ra: 0,
        signal_frame: false,
        len: 0,
        cfa_kind: CFA_REG,
        cfa_offset: 0,
        rules: [PackedRule { reg: 0, kind: UNDEFINED, value: 0 }; PACKED_RULES],
    };

    /// `row` packed, if it fits.
    pub fn pack<const N: usize>(row: &RuleSet<N>) -> Option<PackedRow> {
        let (cfa_kind, cfa_reg, cfa_offset) = match row.cfa {
            CfaRule::RegOffset { reg, offset } => (CFA_REG, reg, i32::try_from(offset).ok()?),
            CfaRule::Expr(e) => {
                let kind = match e.section {
                    SectionKind::EhFrame => CFA_EH_FRAME,
                    SectionKind::DebugFrame => CFA_DEBUG_FRAME,
                };
                (kind, u16::try_from(e.len).ok()?, e.offset as i32)
            }
            // A signal trampoline's: its row is a wide one anyway.
            CfaRule::DerefRegister { .. } => return None,
        };
        let mut out = PackedRow {
            cfa_reg,
            ra: row.ra,
            signal_frame: row.signal_frame,
            cfa_kind,
            cfa_offset,
            ..PackedRow::EMPTY
        };
        let rules = row.rules();
        if rules.len() > PACKED_RULES {
            return None;
        }
        for (slot, &(reg, rule)) in out.rules.iter_mut().zip(rules) {
            let (kind, value) = match rule {
                RegRule::Undefined => (UNDEFINED, 0),
                RegRule::SameValue => (SAME_VALUE, 0),
                RegRule::Offset(n) => (OFFSET, i32::try_from(n).ok()?),
                RegRule::ValOffset(n) => (VAL_OFFSET, i32::try_from(n).ok()?),
                RegRule::Register(r) => (REGISTER, i32::from(r)),
                RegRule::Expr(_) | RegRule::ValExpr(_) | RegRule::AtRegister { .. } => return None,
            };
            *slot = PackedRule { reg, kind, value };
        }
        out.len = rules.len() as u8;
        Some(out)
    }
}

impl Rules for PackedRow {
    #[inline(always)]
    fn cfa(&self) -> CfaRule {
        let section = match self.cfa_kind {
            CFA_REG => {
                return CfaRule::RegOffset { reg: self.cfa_reg, offset: i64::from(self.cfa_offset) }
            }
            CFA_EH_FRAME => SectionKind::EhFrame,
            _ => SectionKind::DebugFrame,
        };
        let (offset, len) = (self.cfa_offset as u32, u32::from(self.cfa_reg));
        CfaRule::Expr(ExprRef { section, offset, len })
    }

    #[inline(always)]
    fn ra(&self) -> u16 {
        self.ra
    }

    #[inline(always)]
    fn signal_frame(&self) -> bool {
        self.signal_frame
    }

    #[inline(always)]
    fn count(&self) -> usize {
        usize::from(self.len).min(PACKED_RULES)
    }

    #[inline(always)]
    fn at(&self, i: usize) -> (u16, RegRule) {
        let PackedRule { reg, kind, value } = self.rules[i];
        let rule = match kind {
            OFFSET => RegRule::Offset(i64::from(value)),
            SAME_VALUE => RegRule::SameValue,
            VAL_OFFSET => RegRule::ValOffset(i64::from(value)),
            // Packed from a u16 column: the value fits.
            REGISTER => RegRule::Register(value as u16),
            _ => RegRule::Undefined,
        };
        (reg, rule)
    }
}

/// Hit and miss counts, for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
}

pub struct RuleCache {
    ways: Box<[[Way; 2]; SETS]>,
    entries: Box<[[Entry; 2]; SETS]>,
    /// Rows with more rules than a compact row holds: a signal trampoline's
    /// (glibc's `__restore_rt` restores every register), which a walk through
    /// a signal handler meets once. Few, so a handful of slots, replaced in
    /// turn.
    wide: Box<[WideEntry; WIDE_SLOTS]>,
    next_wide: usize,
    pub stats: Stats,
}

const WIDE_SLOTS: usize = 4;

#[derive(Clone, Copy)]
struct WideEntry {
    key: u64,
    generation: u64,
    module: u32,
    row: Row,
    /// The row as a [`Context`] one, where it is.
    context: Option<Context>,
}

/// A signal trampoline's row in the form a walk applies it: the kernel's
/// saved context, at a register's value plus offsets. Every rule saves a
/// tracked register at an offset from one register, and the CFA is a word
/// read at an offset from it too, or that register plus an offset (x86_64
/// glibc's `__restore_rt`: `CFA = *(rsp + 160)`, rip at rsp + 168, and 16
/// more). A walk reads every word from one window of the stack, with no
/// rule decoded, no second register file, and no copy of one.
#[derive(Clone, Copy)]
pub struct Context {
    /// The register the CFA and every rule are read from.
    pub base: u16,
    /// Where the words start, from the base register's value.
    pub window: i64,
    /// The highest word's offset in the window (the window holds it and a
    /// word more).
    pub span: u16,
    /// The CFA: the word at `cfa_at` in the window (`cfa_deref`), else the
    /// base register plus `cfa_offset`.
    pub cfa_deref: bool,
    pub cfa_at: u16,
    pub cfa_offset: i32,
    pub ra: u16,
    pub signal_frame: bool,
    len: u8,
    regs: [u8; NUM_REGS],
    /// Each rule's word in the window.
    ats: [u16; NUM_REGS],
}

impl Context {
    /// `row` as a [`Context`] one; None where it is not one.
    pub fn of(row: &Row) -> Option<Context> {
        let (base, cfa_word, cfa_offset) = match row.cfa {
            CfaRule::DerefRegister { reg, offset } => (reg, Some(offset), 0),
            CfaRule::RegOffset { reg, offset } => (reg, None, i32::try_from(offset).ok()?),
            CfaRule::Expr(_) => return None,
        };
        let rules = row.rules();
        let mut offsets = Vec::with_capacity(rules.len() + 1);
        offsets.extend(cfa_word);
        for &(reg, rule) in rules {
            match rule {
                RegRule::AtRegister { reg: r, offset }
                    if r == base && usize::from(reg) < NUM_REGS =>
                {
                    offsets.push(offset)
                }
                _ => return None,
            }
        }
        let lo = *offsets.iter().min()?;
        let hi = *offsets.iter().max()?;
        let span = u16::try_from(i64::from(hi) - i64::from(lo)).ok()?;
        // At most `span`.
        let at = |offset: i32| (i64::from(offset) - i64::from(lo)) as u16;
        let mut out = Context {
            base,
            window: i64::from(lo),
            span,
            cfa_deref: cfa_word.is_some(),
            cfa_at: cfa_word.map_or(0, at),
            cfa_offset,
            ra: row.ra,
            signal_frame: row.signal_frame,
            len: rules.len() as u8,
            regs: [0; NUM_REGS],
            ats: [0; NUM_REGS],
        };
        for (slot, &(reg, rule)) in rules.iter().enumerate() {
            if let RegRule::AtRegister { offset, .. } = rule {
                // Tracked (checked above): below NUM_REGS, as the rules are.
                out.regs[slot] = reg as u8;
                out.ats[slot] = at(offset);
            }
        }
        Some(out)
    }

    /// The rules: each register's column and where its word is in the window.
    #[inline(always)]
    pub fn rules(&self) -> impl Iterator<Item = (u16, usize)> + '_ {
        window_rules(&self.regs, &self.ats, self.len)
    }
}

/// The entry of `wide` for `key` in the module set of `generation`.
#[inline(always)]
fn wide_entry(wide: &[WideEntry], key: u64, generation: u64) -> Option<&WideEntry> {
    wide.iter().find(|e| e.key == key && e.generation == generation)
}

/// The first `len` rules of a row read from a window ([`Saved`],
/// [`Context`]): each register's column and where its word is in the window.
#[inline(always)]
fn window_rules<'a>(
    regs: &'a [u8],
    ats: &'a [u16],
    len: u8,
) -> impl Iterator<Item = (u16, usize)> + 'a {
    let n = usize::from(len).min(regs.len()).min(ats.len());
    regs[..n].iter().zip(&ats[..n]).map(|(&r, &at)| (u16::from(r), usize::from(at)))
}

impl Default for RuleCache {
    fn default() -> Self {
        Self::new()
    }
}

/// A cached entry: its module's index, its row, and the row as a [`Saved`]
/// one where it is.
pub struct Hit<'a> {
    pub module: usize,
    pub row: &'a PackedRow,
    pub saved: Option<&'a Saved>,
}

impl RuleCache {
    pub fn new() -> Self {
        let way = Way { key: EMPTY_KEY, generation: 0, saved: Saved::NONE, victim: 0 };
        let empty = Entry { module: 0, row: PackedRow::EMPTY };
        let wide = WideEntry {
            key: EMPTY_KEY,
            generation: 0,
            module: 0,
            row: Row::new(CfaRule::RegOffset { reg: 0, offset: 0 }, 0, false),
            context: None,
        };
        RuleCache {
            ways: boxed_array([way; 2]),
            entries: boxed_array([empty; 2]),
            wide: Box::new([wide; WIDE_SLOTS]),
            next_wide: 0,
            stats: Stats::default(),
        }
    }

    /// Forget every entry (the modules changed).
    pub fn clear(&mut self) {
        for ways in self.ways.iter_mut() {
            for way in ways {
                way.key = EMPTY_KEY;
            }
        }
        for entry in self.wide.iter_mut() {
            entry.key = EMPTY_KEY;
        }
    }

    /// The entry cached for `key` in the module set of `generation`
    /// (counted as a hit).
    #[inline]
    pub fn get(&mut self, key: u64, generation: u64) -> Option<Hit<'_>> {
        let (set, way) = self.locate(key, generation)?;
        self.stats.hits += 1;
        let entry = &self.entries[set][way];
        let saved = &self.ways[set][way].saved;
        // A frame record's row is applied in place too, outside a run.
        let saved = (saved.is_saved() || saved.frame_record()).then_some(saved);
        Some(Hit { module: entry.module as usize, row: &entry.row, saved })
    }

    /// The row cached for `key` in the module set of `generation` if it is
    /// a [`Saved`] one, without counting the hit: the walk's hot loop counts
    /// its hits in a register and adds them once ([`RuleCache::add_hits`]).
    #[inline(always)]
    pub fn find_saved(&mut self, key: u64, generation: u64) -> Option<&Saved> {
        let saved = self.find(key, generation)?;
        saved.is_saved().then_some(saved)
    }

    /// [`RuleCache::find_saved`] for a frame record's row (see
    /// [`Saved::frame_record`]), which is not a saved one.
    #[inline(always)]
    pub fn find_record(&mut self, key: u64, generation: u64) -> Option<&Saved> {
        let saved = self.find(key, generation)?;
        saved.frame_record().then_some(saved)
    }

    /// The [`Saved`] form of the row cached for `key` in the module set of
    /// `generation` (which may be none: [`Saved::NONE`]).
    #[inline(always)]
    fn find(&mut self, key: u64, generation: u64) -> Option<&Saved> {
        // As `locate` finds it, but giving the way itself from each branch
        // rather than its index, from which the hit way's address would be
        // computed again after the branches join, on the walk's critical
        // path from one frame's return address to the next one's.
        let [first, second] = &mut self.ways[set_of(key)];
        let way = if first.key == key && first.generation == generation {
            if first.victim != 1 {
                first.victim = 1;
            }
            &*first
        } else if second.key == key && second.generation == generation {
            if first.victim != 0 {
                first.victim = 0;
            }
            &*second
        } else {
            return None;
        };
        Some(&way.saved)
    }

    /// The set and way holding `key` for `generation`, made the most
    /// recently used of its set.
    #[inline(always)]
    fn locate(&mut self, key: u64, generation: u64) -> Option<(usize, usize)> {
        let set = set_of(key);
        let ways = &mut self.ways[set];
        let hit = |way: &Way| way.key == key && way.generation == generation;
        let way = if hit(&ways[0]) {
            0
        } else if hit(&ways[1]) {
            1
        } else {
            return None;
        };
        // Written only when it changes: a walk's hot rows are found again
        // and again in the same way.
        let victim = 1 - way as u8;
        if ways[0].victim != victim {
            ways[0].victim = victim;
        }
        Some((set, way))
    }

    /// Count `n` hits of [`RuleCache::find_saved`].
    #[inline(always)]
    pub fn add_hits(&mut self, n: u64) {
        self.stats.hits += n;
    }

    /// The module index cached for `key` in the module set of
    /// `generation`, if any (not counted, nothing changed).
    #[inline]
    pub fn peek(&self, key: u64, generation: u64) -> Option<usize> {
        let set = set_of(key);
        (0..2)
            .find(|&w| self.ways[set][w].key == key && self.ways[set][w].generation == generation)
            .map(|w| self.entries[set][w].module as usize)
    }

    /// Like [`RuleCache::get`], for a row too wide for the compact cache.
    #[inline]
    pub fn get_wide(
        &mut self,
        key: u64,
        generation: u64,
    ) -> Option<(usize, &Row, Option<&Context>)> {
        let entry = wide_entry(&self.wide[..], key, generation)?;
        self.stats.hits += 1;
        Some((entry.module as usize, &entry.row, entry.context.as_ref()))
    }

    /// The [`Context`] row cached for `key` in the module set of
    /// `generation`, where there is one, without counting the hit.
    #[inline(always)]
    pub fn find_context(&self, key: u64, generation: u64) -> Option<&Context> {
        wide_entry(&self.wide[..], key, generation)?.context.as_ref()
    }

    /// Cache a row too wide for the compact cache, in place of the oldest.
    pub fn insert_wide(&mut self, key: u64, generation: u64, module: usize, row: Row) {
        let context = Context::of(&row);
        self.wide[self.next_wide] =
            WideEntry { key, generation, module: module as u32, row, context };
        self.next_wide = (self.next_wide + 1) % WIDE_SLOTS;
    }

    /// Count a lookup that had to parse CFI (an address in no module, or
    /// one without unwind info, is no miss: there was nothing to cache).
    pub fn record_miss(&mut self) {
        self.stats.misses += 1;
    }

    /// Cache `row` for `key` in the module set of `generation`. `sp`: the
    /// stack pointer's column.
    pub fn insert(&mut self, key: u64, generation: u64, module: usize, row: PackedRow, sp: u16) {
        self.put(key, generation, Entry { module: module as u32, row }, Saved::of(&row, sp));
    }

    /// Remember that no FDE covers `key` in the module set of `generation`
    /// (its module is [`NO_FDE`]).
    pub fn insert_no_fde(&mut self, key: u64, generation: u64) {
        let entry = Entry { module: NO_FDE as u32, row: PackedRow::EMPTY };
        self.put(key, generation, entry, Saved::NONE);
    }

    fn put(&mut self, key: u64, generation: u64, entry: Entry, saved: Saved) {
        let set = set_of(key);
        let way = usize::from(self.ways[set][0].victim & 1);
        let slot = &mut self.ways[set][way];
        (slot.key, slot.generation, slot.saved) = (key, generation, saved);
        self.ways[set][0].victim = 1 - way as u8;
        self.entries[set][way] = entry;
    }
}

/// `[value; SETS]` on the heap, without building it on the stack first.
fn boxed_array<T: Copy>(value: T) -> Box<[T; SETS]> {
    match vec![value; SETS].into_boxed_slice().try_into() {
        Ok(array) => array,
        Err(_) => unreachable!("a vector of SETS items"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(offset: i64) -> PackedRow {
        PackedRow::pack(&Row::new(CfaRule::RegOffset { reg: 7, offset }, 16, false)).unwrap()
    }

    #[test]
    fn two_addresses_sharing_a_set_both_stay() {
        let mut cache = RuleCache::new();
        let (a, b, c) = (0x1000, 0x1000 + SETS as u64, 0x1000 + 2 * SETS as u64);
        cache.insert(a, 7, 1, row(8), 7);
        cache.insert(b, 7, 2, row(16), 7);
        for _ in 0..3 {
            assert_eq!(cache.get(a, 7).map(|h| (h.module, h.row.cfa())), Some((1, row(8).cfa())));
            assert_eq!(cache.get(b, 7).map(|h| (h.module, h.row.cfa())), Some((2, row(16).cfa())));
        }
        // A third evicts the least recently used (a), not the one just used.
        cache.insert(c, 7, 3, row(24), 7);
        assert!(cache.get(a, 7).is_none());
        assert!(cache.get(b, 7).is_some());
        assert!(cache.get(c, 7).is_some());
        assert_eq!(cache.stats, Stats { hits: 8, misses: 0 }, "misses are the caller's to count");
        assert!(cache.get(b, 8).is_none(), "another module set");
        cache.clear();
        assert!(cache.get(b, 7).is_none());
    }

    #[test]
    fn saved_rows_put_the_return_address_first() {
        // x86_64 as a -O2 function's body has it: rbx, rbp, then rip.
        let mut full = Row::new(CfaRule::RegOffset { reg: 7, offset: 32 }, 16, false);
        for (reg, at) in [(3, -24), (6, -16), (16, -8)] {
            full.push(reg, RegRule::Offset(at));
        }
        let packed = PackedRow::pack(&full).unwrap();
        let saved = Saved::of(&packed, 7);
        assert!(saved.is_saved() && saved.ra_first() && !saved.sp_saved());
        // The window starts at the lowest rule, CFA − 24: rsp + 8.
        assert_eq!((saved.cfa_offset, saved.window, saved.span), (32, 8, 16));
        let rules: Vec<_> = saved.rules().collect();
        assert_eq!(rules, [(16, 16), (3, 0), (6, 8)], "rip first, then in their order");
        // The packed row keeps the rules as they were.
        assert_eq!((0..packed.count()).map(|i| packed.at(i)).collect::<Vec<_>>(), full.rules());
        // No rule for the return address; one for the stack pointer.
        let mut odd = Row::new(CfaRule::RegOffset { reg: 6, offset: 16 }, 16, false);
        odd.push(7, RegRule::Offset(-16));
        let saved = Saved::of(&PackedRow::pack(&odd).unwrap(), 7);
        assert!(saved.is_saved() && !saved.ra_first() && saved.sp_saved() && !saved.signal_frame());
        // A signal frame's row (Go's sigpanic's has only offsets) is left
        // to the general way.
        let mut signal = Row::new(CfaRule::RegOffset { reg: 7, offset: 16 }, 16, true);
        signal.push(16, RegRule::Offset(-8));
        assert!(!Saved::of(&PackedRow::pack(&signal).unwrap(), 7).is_saved());
        // The outermost frame's row (`_start`'s: rip undefined) is a saved
        // one, the return address's rule kept apart.
        let mut outermost = Row::new(CfaRule::RegOffset { reg: 7, offset: 8 }, 16, false);
        outermost.push(16, RegRule::Undefined);
        let saved = Saved::of(&PackedRow::pack(&outermost).unwrap(), 7);
        assert!(saved.is_saved() && !saved.ra_first() && saved.is_empty());
        assert_eq!(saved.ra_rule(), Some(RegRule::Undefined));
        assert_eq!(Saved::of(&packed, 7).ra_rule(), None);
        // A rule of another kind, or a CFA by expression: not a saved row.
        let mut other = full;
        other.push(12, RegRule::SameValue);
        assert!(!Saved::of(&PackedRow::pack(&other).unwrap(), 7).is_saved());
        let expr = ExprRef { section: SectionKind::EhFrame, offset: 0, len: 1 };
        let mut plt = Row::new(CfaRule::Expr(expr), 16, false);
        plt.push(16, RegRule::Offset(-8));
        assert!(!Saved::of(&PackedRow::pack(&plt).unwrap(), 7).is_saved());
    }

    #[test]
    fn frame_record_rows_are_marked_apart_from_saved_ones() {
        // (CFA register, offset, rules; the return address's column, sp's).
        let row = |(reg, offset): (u16, i64), rules: &[(u16, i64)], (ra, sp): (u16, u16)| {
            let mut r = Row::new(CfaRule::RegOffset { reg, offset }, ra, false);
            rules.iter().for_each(|&(reg, at)| _ = r.push(reg, RegRule::Offset(at)));
            Saved::of(&PackedRow::pack(&r).unwrap(), sp)
        };
        // x86_64 at -O0: CFA = rbp + 16, rbp at CFA − 16, rip at CFA − 8.
        let record = row((6, 16), &[(6, -16), (16, -8)], (16, 7));
        assert!(record.frame_record() && !record.is_saved() && record.ra_first());
        assert_eq!(record.rules().collect::<Vec<_>>(), [(16, 8), (6, 0)]);
        // i386's, 4-byte words: CFA = ebp + 8.
        assert!(row((5, 8), &[(5, -8), (8, -4)], (8, 4)).frame_record());
        // Not one: another register saved too, the record below the CFA's
        // top, the CFA from sp, the CFA's register not the one saved.
        for (cfa, rules) in [
            ((6, 16), &[(6, -16), (16, -8), (3, -24)][..]),
            ((6, 32), &[(6, -32), (16, -24)]),
            ((7, 16), &[(6, -16), (16, -8)]),
            ((3, 16), &[(6, -16), (16, -8)]),
        ] {
            let other = row(cfa, rules, (16, 7));
            assert!(!other.frame_record() && other.is_saved());
        }
    }

    #[test]
    fn context_rows_are_a_signal_trampolines_saved_context() {
        // glibc's __restore_rt (part of it): CFA = *(rsp + 160), rbx, rsp
        // and rip at rsp + 128, 160, 168.
        let mut glibc = Row::new(CfaRule::DerefRegister { reg: 7, offset: 160 }, 16, true);
        for (reg, offset) in [(3, 128), (7, 160), (16, 168)] {
            glibc.push(reg, RegRule::AtRegister { reg: 7, offset });
        }
        let c = Context::of(&glibc).expect("a context row");
        assert_eq!((c.base, c.window, c.span, c.cfa_deref, c.cfa_at), (7, 128, 40, true, 32));
        assert_eq!((c.ra, c.signal_frame), (16, true));
        assert_eq!(c.rules().collect::<Vec<_>>(), [(3, 0), (7, 32), (16, 40)]);
        // A CFA of the register plus an offset, the words below it.
        let mut plain = Row::new(CfaRule::RegOffset { reg: 7, offset: 0x100 }, 16, true);
        plain.push(16, RegRule::AtRegister { reg: 7, offset: 8 });
        plain.push(0, RegRule::AtRegister { reg: 7, offset: 0x10 });
        let c = Context::of(&plain).expect("a context row");
        assert_eq!((c.window, c.span, c.cfa_deref, c.cfa_offset), (8, 8, false, 0x100));
        // Not one: a rule from another register, a rule of another kind, a
        // CFA by expression.
        let mut other_base = glibc;
        other_base.push(6, RegRule::AtRegister { reg: 6, offset: 0 });
        assert!(Context::of(&other_base).is_none());
        let mut other_kind = glibc;
        other_kind.push(6, RegRule::Offset(-16));
        assert!(Context::of(&other_kind).is_none());
        let expr = ExprRef { section: SectionKind::EhFrame, offset: 0, len: 1 };
        let mut by_expr = Row::new(CfaRule::Expr(expr), 16, true);
        by_expr.push(16, RegRule::AtRegister { reg: 7, offset: 8 });
        assert!(Context::of(&by_expr).is_none());
    }

    #[test]
    fn packed_rows_keep_every_rule() {
        let mut full = Row::new(CfaRule::RegOffset { reg: 6, offset: 16 }, 16, true);
        let rules = [
            (3, RegRule::Offset(-24)),
            (6, RegRule::Offset(-16)),
            (12, RegRule::SameValue),
            (13, RegRule::Undefined),
            (14, RegRule::Register(5)),
            (15, RegRule::ValOffset(-8)),
            (16, RegRule::Offset(-8)),
        ];
        for (reg, rule) in rules {
            full.push(reg, rule);
        }
        let packed = PackedRow::pack(&full).unwrap();
        assert_eq!(packed.cfa(), full.cfa);
        assert_eq!((packed.ra(), packed.signal_frame()), (16, true));
        assert_eq!((0..packed.count()).map(|i| packed.at(i)).collect::<Vec<_>>(), rules);
        assert_eq!(packed.rule_for(14), Some(RegRule::Register(5)));
        // What does not fit stays unpacked (the wide rows).
        let mut wide = full;
        wide.push(0, RegRule::Offset(-32));
        wide.push(1, RegRule::Offset(-40));
        assert!(PackedRow::pack(&wide).is_none(), "nine rules");
        let mut far = full;
        far.push(0, RegRule::Offset(1 << 40));
        assert!(PackedRow::pack(&far).is_none(), "an offset past 32 bits");
        let expr = ExprRef { section: SectionKind::EhFrame, offset: 0, len: 1 };
        let mut by_expr = full;
        by_expr.push(0, RegRule::Expr(expr));
        assert!(PackedRow::pack(&by_expr).is_none(), "an expression");
        // A CFA by expression (a PLT entry's) is packed, in either section.
        for section in [SectionKind::EhFrame, SectionKind::DebugFrame] {
            let expr = ExprRef { section, offset: 0xfedc_ba98, len: 11 };
            let mut plt = Row::new(CfaRule::Expr(expr), 16, false);
            plt.push(16, RegRule::Offset(-8));
            let packed = PackedRow::pack(&plt).unwrap();
            assert_eq!(packed.cfa(), CfaRule::Expr(expr));
            assert_eq!(packed.at(0), (16, RegRule::Offset(-8)));
        }
        let long = ExprRef { section: SectionKind::EhFrame, offset: 0, len: 1 << 16 };
        let cfa_expr = Row::new(CfaRule::Expr(long), 16, false);
        assert!(PackedRow::pack(&cfa_expr).is_none(), "a CFA expression of 64 KiB");
    }
}
