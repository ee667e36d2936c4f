//! The rule cache: unwind rules by address, so that the warm path does no
//! CFI parsing and no allocation. Two-way set-associative (framehop's cache
//! has 509 direct-mapped slots; with two ways, two hot addresses that share
//! a set no longer evict each other on every walk) over a power of two of
//! sets, picked by the address's low bits: a mask, not a division, on the
//! path from a frame's pc to its rules. The tags (key, module set) of a
//! set's two ways share one small record, apart from the rows: a lookup
//! reads one cache line of tags and then only the row it hits.

use crate::arch::NUM_REGS;
use crate::cfi::{CfaRule, ExprRef, RegRule, Row, RuleSet, Rules, SectionKind};

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

/// What identifies the entries of one set.
#[derive(Clone, Copy)]
struct Tags {
    keys: [u64; 2],
    /// The module set each entry was made for (`ModuleSet::generation`).
    generations: [u64; 2],
    /// The way to replace next: the one not used most recently.
    victim: u8,
}

/// What a cached entry holds.
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

impl PackedRule {
    /// The register's column.
    #[inline(always)]
    pub fn reg(&self) -> u16 {
        self.reg
    }

    /// The offset from the CFA (a rule of a [`Saved`] row).
    #[inline(always)]
    pub fn offset(&self) -> i64 {
        i64::from(self.value)
    }
}

/// The commonest row, as [`PackedRow::saved`] gives it: the CFA is a tracked
/// register plus an offset, and every rule saves a tracked register at an
/// offset from the CFA (x86_64's `CFA = rsp + 8, rip at CFA − 8`, or `CFA =
/// rbp + 16` with rbp and the callee-saved registers below it). A walk
/// applies it with no decoding per rule, and reads the saved words from one
/// slice of the stack: `span` bytes (plus a word) from `CFA + lo`.
pub struct Saved<'a> {
    pub cfa_reg: u16,
    pub cfa_offset: i64,
    /// The lowest offset of a rule (0 when there is none).
    pub lo: i64,
    /// The highest offset of a rule less `lo`.
    pub span: u64,
    /// The rules; the return address's first, if there is one.
    pub rules: &'a [PackedRule],
    /// The first rule is the return address's.
    pub ra_first: bool,
    /// A rule recovers the stack pointer (else the caller's is the CFA).
    pub sp_saved: bool,
}

/// `PackedRow::saved`: the row is a [`Saved`] one, its first rule is the
/// return address's, a rule recovers the stack pointer.
const SAVED: u8 = 1;
const RA_FIRST: u8 = 2;
const SP_SAVED: u8 = 4;

const UNDEFINED: u8 = 0;
const SAME_VALUE: u8 = 1;
const OFFSET: u8 = 2;
const VAL_OFFSET: u8 = 3;
const REGISTER: u8 = 4;

/// A row as the cache keeps it: a CFA of a register plus a 32-bit offset
/// (or an expression, as PLT entries have) and at most [`PACKED_RULES`]
/// rules with 32-bit offsets, in 80 bytes (a `RuleSet<8>` takes 216), so
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
    /// Whether the row is a [`Saved`] one, and what else it is: `SAVED`,
    /// `RA_FIRST`, `SP_SAVED`.
    saved: u8,
    /// The CFA's offset, or the offset of its expression (as u32).
    cfa_offset: i32,
    /// A [`Saved`] row's lowest rule offset and the span of its offsets.
    lo: i16,
    span: u16,
    rules: [PackedRule; PACKED_RULES],
}

const _: () = assert!(std::mem::size_of::<PackedRow>() == 80);

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
        saved: 0,
        cfa_offset: 0,
        lo: 0,
        span: 0,
        rules: [PackedRule { reg: 0, kind: UNDEFINED, value: 0 }; PACKED_RULES],
    };

    /// `row` packed, if it fits.
    /// `sp`: the stack pointer's column.
    pub fn pack<const N: usize>(row: &RuleSet<N>, sp: u16) -> Option<PackedRow> {
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
        out.mark_saved(sp);
        Some(out)
    }

    /// Mark the row a [`Saved`] one if it is, with its return address's
    /// rule first (the order of a row's rules, one per column, says nothing).
    fn mark_saved(&mut self, sp: u16) {
        let tracked = |reg: u16| usize::from(reg) < NUM_REGS;
        let rules = &self.rules[..usize::from(self.len)];
        if self.cfa_kind != CFA_REG
            || !tracked(self.cfa_reg)
            || !rules.iter().all(|r| r.kind == OFFSET && tracked(r.reg))
        {
            return;
        }
        let lo = rules.iter().map(|r| r.value).min().unwrap_or(0);
        let hi = rules.iter().map(|r| r.value).max().unwrap_or(0);
        let (Ok(lo), Ok(span)) = (i16::try_from(lo), u16::try_from(i64::from(hi) - i64::from(lo)))
        else {
            return;
        };
        let mut flags = SAVED;
        let len = usize::from(self.len);
        if let Some(i) = self.rules[..len].iter().position(|r| r.reg == self.ra) {
            self.rules[..len].swap(0, i);
            flags |= RA_FIRST;
        }
        if self.rules[..len].iter().any(|r| r.reg == sp) {
            flags |= SP_SAVED;
        }
        (self.saved, self.lo, self.span) = (flags, lo, span);
    }

    /// The row as a [`Saved`] one, if it is.
    #[inline(always)]
    pub fn saved(&self) -> Option<Saved<'_>> {
        if self.saved & SAVED == 0 {
            return None;
        }
        Some(Saved {
            cfa_reg: self.cfa_reg,
            cfa_offset: i64::from(self.cfa_offset),
            lo: i64::from(self.lo),
            span: u64::from(self.span),
            rules: &self.rules[..usize::from(self.len).min(PACKED_RULES)],
            ra_first: self.saved & RA_FIRST != 0,
            sp_saved: self.saved & SP_SAVED != 0,
        })
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
    tags: Box<[Tags; SETS]>,
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
}

impl Default for RuleCache {
    fn default() -> Self {
        Self::new()
    }
}

impl RuleCache {
    pub fn new() -> Self {
        let tags = Tags { keys: [EMPTY_KEY; 2], generations: [0; 2], victim: 0 };
        let empty = Entry { module: 0, row: PackedRow::EMPTY };
        let wide = WideEntry {
            key: EMPTY_KEY,
            generation: 0,
            module: 0,
            row: Row::new(CfaRule::RegOffset { reg: 0, offset: 0 }, 0, false),
        };
        RuleCache {
            tags: boxed_array(tags),
            entries: boxed_array([empty; 2]),
            wide: Box::new([wide; WIDE_SLOTS]),
            next_wide: 0,
            stats: Stats::default(),
        }
    }

    /// Forget every entry (the modules changed).
    pub fn clear(&mut self) {
        for tags in self.tags.iter_mut() {
            tags.keys = [EMPTY_KEY; 2];
        }
        for entry in self.wide.iter_mut() {
            entry.key = EMPTY_KEY;
        }
    }

    /// The module index and rules cached for `key` in the module set of
    /// `generation` (counted as a hit).
    #[inline]
    pub fn get(&mut self, key: u64, generation: u64) -> Option<(usize, &PackedRow)> {
        let (set, way) = self.locate(key, generation)?;
        self.stats.hits += 1;
        let entry = &self.entries[set][way];
        Some((entry.module as usize, &entry.row))
    }

    /// [`RuleCache::get`] without counting the hit: the walk's hot loop
    /// counts its hits in a register and adds them once ([`RuleCache::add_hits`]).
    #[inline(always)]
    pub fn find(&mut self, key: u64, generation: u64) -> Option<(u32, &PackedRow)> {
        let (set, way) = self.locate(key, generation)?;
        let entry = &self.entries[set][way];
        Some((entry.module, &entry.row))
    }

    /// The set and way holding `key` for `generation`, made the most
    /// recently used of its set.
    #[inline(always)]
    fn locate(&mut self, key: u64, generation: u64) -> Option<(usize, usize)> {
        let set = set_of(key);
        let tags = &mut self.tags[set];
        let hit = |way: usize| tags.keys[way] == key && tags.generations[way] == generation;
        let way = if hit(0) {
            0
        } else if hit(1) {
            1
        } else {
            return None;
        };
        // Written only when it changes: a walk's hot rows are found again
        // and again in the same way.
        let victim = 1 - way as u8;
        if tags.victim != victim {
            tags.victim = victim;
        }
        Some((set, way))
    }

    /// Count `n` hits of [`RuleCache::find`].
    #[inline(always)]
    pub fn add_hits(&mut self, n: u64) {
        self.stats.hits += n;
    }

    /// The module index cached for `key` in the module set of
    /// `generation`, if any (not counted, nothing changed).
    #[inline]
    pub fn peek(&self, key: u64, generation: u64) -> Option<usize> {
        let set = set_of(key);
        let tags = &self.tags[set];
        (0..2)
            .find(|&way| tags.keys[way] == key && tags.generations[way] == generation)
            .map(|way| self.entries[set][way].module as usize)
    }

    /// Like [`RuleCache::get`], for a row too wide for the compact cache.
    #[inline]
    pub fn get_wide(&mut self, key: u64, generation: u64) -> Option<(usize, &Row)> {
        let entry = self.wide.iter().find(|e| e.key == key && e.generation == generation)?;
        self.stats.hits += 1;
        Some((entry.module as usize, &entry.row))
    }

    /// Cache a row too wide for the compact cache, in place of the oldest.
    pub fn insert_wide(&mut self, key: u64, generation: u64, module: usize, row: Row) {
        self.wide[self.next_wide] = WideEntry { key, generation, module: module as u32, row };
        self.next_wide = (self.next_wide + 1) % WIDE_SLOTS;
    }

    /// Count a lookup that had to parse CFI (an address in no module, or
    /// one without unwind info, is no miss: there was nothing to cache).
    pub fn record_miss(&mut self) {
        self.stats.misses += 1;
    }

    /// Cache `row` for `key` in the module set of `generation`.
    pub fn insert(&mut self, key: u64, generation: u64, module: usize, row: PackedRow) {
        let set = set_of(key);
        let tags = &mut self.tags[set];
        let way = usize::from(tags.victim & 1);
        tags.keys[way] = key;
        tags.generations[way] = generation;
        tags.victim = 1 - way as u8;
        self.entries[set][way] = Entry { module: module as u32, row };
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
        PackedRow::pack(&Row::new(CfaRule::RegOffset { reg: 7, offset }, 16, false), 7).unwrap()
    }

    #[test]
    fn two_addresses_sharing_a_set_both_stay() {
        let mut cache = RuleCache::new();
        let (a, b, c) = (0x1000, 0x1000 + SETS as u64, 0x1000 + 2 * SETS as u64);
        cache.insert(a, 7, 1, row(8));
        cache.insert(b, 7, 2, row(16));
        for _ in 0..3 {
            assert_eq!(cache.get(a, 7).map(|(m, r)| (m, r.cfa())), Some((1, row(8).cfa())));
            assert_eq!(cache.get(b, 7).map(|(m, r)| (m, r.cfa())), Some((2, row(16).cfa())));
        }
        // A third evicts the least recently used (a), not the one just used.
        cache.insert(c, 7, 3, row(24));
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
        let packed = PackedRow::pack(&full, 7).unwrap();
        let saved = packed.saved().unwrap();
        assert!(saved.ra_first && !saved.sp_saved);
        assert_eq!((saved.rules[0].reg(), saved.rules[0].offset()), (16, -8));
        assert_eq!((saved.lo, saved.span), (-24, 16));
        let mut rules: Vec<_> = (0..packed.count()).map(|i| packed.at(i)).collect();
        rules.sort_by_key(|r| r.0);
        assert_eq!(rules, full.rules(), "the same rules, in another order");
        // No rule for the return address; one for the stack pointer.
        let mut odd = Row::new(CfaRule::RegOffset { reg: 6, offset: 16 }, 16, false);
        odd.push(7, RegRule::Offset(-16));
        let saved = PackedRow::pack(&odd, 7).unwrap();
        let saved = saved.saved().unwrap();
        assert!(!saved.ra_first && saved.sp_saved);
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
        let packed = PackedRow::pack(&full, 7).unwrap();
        assert_eq!(packed.cfa(), full.cfa);
        assert_eq!((packed.ra(), packed.signal_frame()), (16, true));
        assert_eq!((0..packed.count()).map(|i| packed.at(i)).collect::<Vec<_>>(), rules);
        assert_eq!(packed.rule_for(14), Some(RegRule::Register(5)));
        // What does not fit stays unpacked (the wide rows).
        let mut wide = full;
        wide.push(0, RegRule::Offset(-32));
        wide.push(1, RegRule::Offset(-40));
        assert!(PackedRow::pack(&wide, 7).is_none(), "nine rules");
        let mut far = full;
        far.push(0, RegRule::Offset(1 << 40));
        assert!(PackedRow::pack(&far, 7).is_none(), "an offset past 32 bits");
        let expr = ExprRef { section: SectionKind::EhFrame, offset: 0, len: 1 };
        let mut by_expr = full;
        by_expr.push(0, RegRule::Expr(expr));
        assert!(PackedRow::pack(&by_expr, 7).is_none(), "an expression");
        // A CFA by expression (a PLT entry's) is packed, in either section.
        for section in [SectionKind::EhFrame, SectionKind::DebugFrame] {
            let expr = ExprRef { section, offset: 0xfedc_ba98, len: 11 };
            let mut plt = Row::new(CfaRule::Expr(expr), 16, false);
            plt.push(16, RegRule::Offset(-8));
            let packed = PackedRow::pack(&plt, 7).unwrap();
            assert_eq!(packed.cfa(), CfaRule::Expr(expr));
            assert_eq!(packed.at(0), (16, RegRule::Offset(-8)));
        }
        let long = ExprRef { section: SectionKind::EhFrame, offset: 0, len: 1 << 16 };
        let cfa_expr = Row::new(CfaRule::Expr(long), 16, false);
        assert!(PackedRow::pack(&cfa_expr, 7).is_none(), "a CFA expression of 64 KiB");
    }
}
