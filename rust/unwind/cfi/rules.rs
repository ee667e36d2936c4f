//! The rules of an unwind row as the unwinder keeps them (small `Copy`
//! values: a CFA rule and a rule per register column), and their making from
//! gimli's rows.

use gimli::UnwindTableRow;

use super::{Cie, LookupError};
use crate::arch::NUM_REGS;

/// Which section an expression's bytes live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionKind {
    EhFrame,
    DebugFrame,
}

/// Where a DWARF expression's bytes are: resolved against the module's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExprRef {
    pub section: SectionKind,
    pub offset: u32,
    pub len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CfaRule {
    RegOffset {
        reg: u16,
        offset: i64,
    },
    Expr(ExprRef),
    /// The word at register `reg` plus `offset`: the expression
    /// `DW_OP_bregN offset; DW_OP_deref`, decoded once (a signal
    /// trampoline's CFA: glibc's `__restore_rt` takes the interrupted sp
    /// from the kernel's signal frame this way).
    DerefRegister {
        reg: u16,
        offset: i32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegRule {
    Undefined,
    SameValue,
    Offset(i64),
    ValOffset(i64),
    Register(u16),
    Expr(ExprRef),
    ValExpr(ExprRef),
    /// Saved at the address register `reg` plus `offset` (of the callee's
    /// registers): the expression `DW_OP_bregN offset`, decoded once (a
    /// signal trampoline restores every register from the kernel's signal
    /// frame so).
    AtRegister {
        reg: u16,
        offset: i32,
    },
}

/// The unwind rules in force at one address: the CFA rule and a rule for
/// every register column the CIE and FDE instructions mention (columns not
/// listed take the architecture's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleSet<const N: usize> {
    pub cfa: CfaRule,
    /// The return-address column of the CIE.
    pub ra: u16,
    /// The CIE has the `S` augmentation: the frame is a signal trampoline.
    pub signal_frame: bool,
    len: u8,
    rules: [(u16, RegRule); N],
}

/// A full row: room for a rule for every tracked column.
pub type Row = RuleSet<NUM_REGS>;
/// What the rule cache keeps: ordinary functions save a handful of registers.
pub type CompactRow = RuleSet<8>;

impl<const N: usize> RuleSet<N> {
    pub const fn new(cfa: CfaRule, ra: u16, signal_frame: bool) -> Self {
        RuleSet { cfa, ra, signal_frame, len: 0, rules: [(0, RegRule::Undefined); N] }
    }

    #[inline]
    pub fn rules(&self) -> &[(u16, RegRule)] {
        &self.rules[..self.len as usize]
    }

    /// Add a rule; false when there is no room.
    pub fn push(&mut self, reg: u16, rule: RegRule) -> bool {
        if (self.len as usize) < N {
            self.rules[self.len as usize] = (reg, rule);
            self.len += 1;
            true
        } else {
            false
        }
    }

    pub fn rule(&self, reg: u16) -> Option<RegRule> {
        self.rules().iter().find(|(r, _)| *r == reg).map(|(_, rule)| *rule)
    }

    /// The same rules in a set of another capacity, if they fit.
    pub fn resize<const M: usize>(&self) -> Option<RuleSet<M>> {
        let mut out = RuleSet::<M>::new(self.cfa, self.ra, self.signal_frame);
        for &(reg, rule) in self.rules() {
            if !out.push(reg, rule) {
                return None;
            }
        }
        Some(out)
    }
}

/// A row's rules, however they are stored: a [`RuleSet`], or the rule
/// cache's packed rows (`crate::unwind::rule_cache::PackedRow`). What the unwind
/// step reads.
pub trait Rules {
    fn cfa(&self) -> CfaRule;
    /// The return-address column.
    fn ra(&self) -> u16;
    fn signal_frame(&self) -> bool;
    /// How many rules there are.
    fn count(&self) -> usize;
    /// Rule `i` (below [`Rules::count`]): its column and the rule.
    fn at(&self, i: usize) -> (u16, RegRule);

    /// The rule for column `reg`, if the row has one.
    fn rule_for(&self, reg: u16) -> Option<RegRule> {
        (0..self.count()).map(|i| self.at(i)).find(|(r, _)| *r == reg).map(|(_, rule)| rule)
    }
}

impl<const N: usize> Rules for RuleSet<N> {
    #[inline(always)]
    fn cfa(&self) -> CfaRule {
        self.cfa
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
        self.len as usize
    }

    #[inline(always)]
    fn at(&self, i: usize) -> (u16, RegRule) {
        self.rules[i]
    }
}

/// Every rule of a row, tracked column or not (see [`super::Module::find_full_row`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FullRow {
    pub cfa: CfaRule,
    pub ra: u16,
    pub signal_frame: bool,
    pub rules: Vec<(u16, RegRule)>,
}

impl From<Row> for FullRow {
    /// A row of tracked columns only (foreign rules', EHABI's: they have no others).
    fn from(row: Row) -> FullRow {
        let (cfa, ra, signal_frame) = (row.cfa, row.ra, row.signal_frame);
        FullRow { cfa, ra, signal_frame, rules: row.rules().to_vec() }
    }
}

fn expr_ref(
    e: &gimli::UnwindExpression<usize>,
    section: SectionKind,
) -> Result<ExprRef, LookupError> {
    let too_big = || LookupError::Cfi(gimli::Error::UnsupportedOffset);
    Ok(ExprRef {
        section,
        offset: u32::try_from(e.offset).map_err(|_| too_big())?,
        len: u32::try_from(e.length).map_err(|_| too_big())?,
    })
}

/// The register and offset of an expression that is `DW_OP_bregN offset`
/// (or `DW_OP_bregx N offset`) and nothing else, followed by `DW_OP_deref`
/// when `deref`: a tracked register and an offset of 32 bits, else None
/// (the expression is then evaluated as it is).
pub(super) fn register_offset(bytes: &[u8], deref: bool) -> Option<(u16, i32)> {
    use gimli::constants::{DW_OP_breg0, DW_OP_breg31, DW_OP_bregx, DW_OP_deref};
    let (&op, rest) = bytes.split_first()?;
    let mut r = gimli::EndianSlice::new(rest, gimli::LittleEndian);
    let reg = if (DW_OP_breg0.0..=DW_OP_breg31.0).contains(&op) {
        u64::from(op - DW_OP_breg0.0)
    } else if op == DW_OP_bregx.0 {
        gimli::leb128::read::unsigned(&mut r).ok()?
    } else {
        return None;
    };
    let offset = i32::try_from(gimli::leb128::read::signed(&mut r).ok()?).ok()?;
    let tail: &[u8] = if deref { &[DW_OP_deref.0] } else { &[] };
    if r.slice() != tail {
        return None;
    }
    let reg = u16::try_from(reg).ok().filter(|&r| usize::from(r) < NUM_REGS)?;
    Some((reg, offset))
}

pub(super) fn return_column(cie: &Cie<'_>) -> Result<u16, LookupError> {
    let ra = cie.return_address_register().0;
    if ra as usize >= NUM_REGS {
        return Err(LookupError::BadReturnColumn(ra));
    }
    Ok(ra)
}

pub(super) fn convert_cfa(
    row: &UnwindTableRow<usize>,
    section: SectionKind,
) -> Result<CfaRule, LookupError> {
    Ok(match row.cfa() {
        gimli::CfaRule::RegisterAndOffset { register, offset } => {
            CfaRule::RegOffset { reg: register.0, offset: *offset }
        }
        gimli::CfaRule::Expression(e) => CfaRule::Expr(expr_ref(e, section)?),
    })
}

pub(super) fn convert_rules(
    row: &UnwindTableRow<usize>,
    section: SectionKind,
    mut sink: impl FnMut(u16, RegRule),
) -> Result<(), LookupError> {
    for (register, rule) in row.registers() {
        let rule = match rule {
            gimli::RegisterRule::Undefined => RegRule::Undefined,
            gimli::RegisterRule::SameValue => RegRule::SameValue,
            gimli::RegisterRule::Offset(n) => RegRule::Offset(*n),
            gimli::RegisterRule::ValOffset(n) => RegRule::ValOffset(*n),
            gimli::RegisterRule::Register(r) => RegRule::Register(r.0),
            gimli::RegisterRule::Expression(e) => RegRule::Expr(expr_ref(e, section)?),
            gimli::RegisterRule::ValExpression(e) => RegRule::ValExpr(expr_ref(e, section)?),
            // Pseudo-registers (aarch64's pointer-authentication state) and
            // augmenter-defined rules: nothing to recover.
            gimli::RegisterRule::Constant(_) | gimli::RegisterRule::Architectural => continue,
        };
        sink(register.0, rule);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::register_offset;

    #[test]
    fn register_offsets_are_decoded_from_their_one_form() {
        // glibc's __restore_rt (x86_64): r8 at `DW_OP_breg7 (rsp) 40`, the CFA
        // `DW_OP_breg7 160; DW_OP_deref`.
        assert_eq!(register_offset(&[0x77, 40], false), Some((7, 40)));
        assert_eq!(register_offset(&[0x77, 0xa0, 0x01, 0x06], true), Some((7, 160)));
        // DW_OP_bregx 31 (aarch64's sp) -16, and DW_OP_breg5 (i386's ebp) -4.
        assert_eq!(register_offset(&[0x92, 31, 0x70], false), Some((31, -16)));
        assert_eq!(register_offset(&[0x75, 0x7c], false), Some((5, -4)));
        // Anything more, less or else is evaluated as an expression.
        assert_eq!(register_offset(&[0x77, 40], true), None);
        assert_eq!(register_offset(&[0x77, 40, 0x06], false), None);
        assert_eq!(register_offset(&[0x77, 40, 0x23, 8], false), None);
        assert_eq!(register_offset(&[0x77], false), None);
        assert_eq!(register_offset(&[0x31], false), None); // DW_OP_lit1
        assert_eq!(register_offset(&[], true), None);
        // A register no row tracks, or an offset past 32 bits.
        assert_eq!(register_offset(&[0x92, 0x80, 0x01, 0], false), None);
        assert_eq!(register_offset(&[0x77, 0x80, 0x80, 0x80, 0x80, 0x10], false), None);
    }
}
