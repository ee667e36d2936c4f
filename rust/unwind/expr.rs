//! DWARF expression evaluation for CFI rules (`DW_CFA_def_cfa_expression`,
//! `DW_CFA_expression`, `DW_CFA_val_expression`).
//!
//! gimli decodes the operations; evaluation happens here on a fixed-size
//! stack, with a step limit, reading registers from the frame and memory
//! through [`Memory`], so that it never allocates, never loops forever and
//! can follow `DW_OP_deref` into the captured stack.

use std::fmt;

use gimli::{Encoding, EndianSlice, Format, LittleEndian, Operation};

use crate::arch::registers::Registers;
use crate::source::memory::Memory;

/// Operations executed at most per expression (branches can loop).
pub const STEP_LIMIT: u32 = 1000;
/// Depth of the evaluation stack.
pub const STACK_LIMIT: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExprError {
    /// A `DW_OP_deref` read an address outside the captured memory.
    Memory(u64),
    /// A register the expression reads is not known in this frame.
    MissingRegister(u16),
    /// The bytes do not decode as DWARF operations.
    Malformed(gimli::Error),
    /// An operation CFI expressions cannot use (pieces, TLS, calls, ...).
    Unsupported(&'static str),
    StackUnderflow,
    StackOverflow,
    StepLimit,
    DivisionByZero,
    BranchOutOfRange,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExprError::Memory(a) => write!(f, "expression reads {a:#x}, outside captured memory"),
            ExprError::MissingRegister(r) => write!(f, "expression reads register {r}, unknown"),
            ExprError::Malformed(e) => write!(f, "malformed expression: {e}"),
            ExprError::Unsupported(op) => write!(f, "operation {op} is not valid in CFI"),
            ExprError::StackUnderflow => f.write_str("expression stack underflow"),
            ExprError::StackOverflow => write!(f, "expression stack deeper than {STACK_LIMIT}"),
            ExprError::StepLimit => write!(f, "expression ran more than {STEP_LIMIT} steps"),
            ExprError::DivisionByZero => f.write_str("expression divides by zero"),
            ExprError::BranchOutOfRange => f.write_str("expression branches out of its bytes"),
        }
    }
}

impl std::error::Error for ExprError {}

/// The evaluation stack. Its items are of the generic type, as wide as an
/// address: every value pushed is reduced to that width, so 32-bit
/// arithmetic wraps at 32 bits.
struct Stack {
    items: [u64; STACK_LIMIT],
    len: usize,
    mask: u64,
}

impl Stack {
    #[inline]
    fn push(&mut self, v: u64) -> Result<(), ExprError> {
        if self.len == STACK_LIMIT {
            return Err(ExprError::StackOverflow);
        }
        self.items[self.len] = v & self.mask;
        self.len += 1;
        Ok(())
    }

    /// A stack value read as a signed number of the generic type's width.
    #[inline]
    fn signed(&self, v: u64) -> i64 {
        if self.mask == u64::MAX {
            v as i64
        } else {
            i64::from(v as u32 as i32)
        }
    }

    #[inline]
    fn pop(&mut self) -> Result<u64, ExprError> {
        if self.len == 0 {
            return Err(ExprError::StackUnderflow);
        }
        self.len -= 1;
        Ok(self.items[self.len])
    }

    /// The item `depth` places below the top (0 = top).
    #[inline]
    fn peek(&self, depth: usize) -> Result<u64, ExprError> {
        if depth >= self.len {
            return Err(ExprError::StackUnderflow);
        }
        Ok(self.items[self.len - 1 - depth])
    }
}

const ENCODING_64: Encoding = Encoding { format: Format::Dwarf32, version: 4, address_size: 8 };
const ENCODING_32: Encoding = Encoding { format: Format::Dwarf32, version: 4, address_size: 4 };

/// Evaluate `bytes`; `initial` is pushed first (the CFA, for register rules).
/// The result is the top of the stack. `address_size` (8, or 4 on i386) is
/// the width of `DW_OP_addr`, of `DW_OP_deref` and of the stack's values.
pub fn evaluate<M: Memory + ?Sized>(
    bytes: &[u8],
    initial: Option<u64>,
    regs: &Registers,
    mem: &mut M,
    address_size: u8,
) -> Result<u64, ExprError> {
    let (encoding, mask) =
        if address_size == 4 { (ENCODING_32, 0xffff_ffff) } else { (ENCODING_64, u64::MAX) };
    let mut stack = Stack { items: [0; STACK_LIMIT], len: 0, mask };
    if let Some(v) = initial {
        stack.push(v)?;
    }
    let mut pc = 0usize;
    let mut steps = 0u32;
    while pc < bytes.len() {
        steps += 1;
        if steps > STEP_LIMIT {
            return Err(ExprError::StepLimit);
        }
        let mut reader = EndianSlice::new(&bytes[pc..], LittleEndian);
        let op = Operation::parse(&mut reader, encoding).map_err(ExprError::Malformed)?;
        let next = bytes.len() - reader.len();
        pc = next;
        let binary = |stack: &mut Stack, f: fn(u64, u64) -> u64| -> Result<(), ExprError> {
            let b = stack.pop()?;
            let a = stack.pop()?;
            stack.push(f(a, b))
        };
        match op {
            Operation::Address { address } => stack.push(address)?,
            Operation::UnsignedConstant { value } => stack.push(value)?,
            Operation::SignedConstant { value } => stack.push(value as u64)?,
            Operation::Register { register } => {
                let v = regs.get(register.0).ok_or(ExprError::MissingRegister(register.0))?;
                stack.push(v)?
            }
            Operation::RegisterOffset { register, offset, .. } => {
                let v = regs.get(register.0).ok_or(ExprError::MissingRegister(register.0))?;
                stack.push(v.wrapping_add(offset as u64))?
            }
            Operation::Deref { size, space: false, .. } => {
                if size == 0 || size > 8 {
                    return Err(ExprError::Unsupported("deref_size wider than 8 bytes"));
                }
                let addr = stack.pop()?;
                let v = mem.read_sized(addr, size).ok_or(ExprError::Memory(addr))?;
                stack.push(v)?
            }
            Operation::Pick { index } => stack.push(stack.peek(usize::from(index))?)?,
            Operation::Drop => {
                stack.pop()?;
            }
            Operation::Swap => {
                let b = stack.pop()?;
                let a = stack.pop()?;
                stack.push(b)?;
                stack.push(a)?;
            }
            Operation::Rot => {
                let c = stack.pop()?;
                let b = stack.pop()?;
                let a = stack.pop()?;
                stack.push(c)?;
                stack.push(a)?;
                stack.push(b)?;
            }
            Operation::Abs => {
                let a = stack.pop()?;
                stack.push(stack.signed(a).unsigned_abs())?
            }
            Operation::Neg => {
                let a = stack.pop()?;
                stack.push(a.wrapping_neg())?
            }
            Operation::Not => {
                let a = stack.pop()?;
                stack.push(!a)?
            }
            Operation::PlusConstant { value } => {
                let a = stack.pop()?;
                stack.push(a.wrapping_add(value))?
            }
            Operation::And => binary(&mut stack, |a, b| a & b)?,
            Operation::Or => binary(&mut stack, |a, b| a | b)?,
            Operation::Xor => binary(&mut stack, |a, b| a ^ b)?,
            Operation::Plus => binary(&mut stack, u64::wrapping_add)?,
            Operation::Minus => binary(&mut stack, u64::wrapping_sub)?,
            Operation::Mul => binary(&mut stack, u64::wrapping_mul)?,
            Operation::Shl => binary(&mut stack, |a, b| if b >= 64 { 0 } else { a << b })?,
            Operation::Shr => binary(&mut stack, |a, b| if b >= 64 { 0 } else { a >> b })?,
            Operation::Shra => {
                let b = stack.pop()?;
                let a = stack.pop()?;
                stack.push((stack.signed(a) >> b.min(63)) as u64)?
            }
            Operation::Div | Operation::Mod => {
                let b = stack.pop()?;
                let a = stack.pop()?;
                if b == 0 {
                    return Err(ExprError::DivisionByZero);
                }
                let v = if matches!(op, Operation::Div) {
                    stack.signed(a).wrapping_div(stack.signed(b)) as u64
                } else {
                    a % b
                };
                stack.push(v)?
            }
            Operation::Eq => binary(&mut stack, |a, b| u64::from(a == b))?,
            Operation::Ne => binary(&mut stack, |a, b| u64::from(a != b))?,
            Operation::Ge | Operation::Gt | Operation::Le | Operation::Lt => {
                let (b, a) = (stack.pop()?, stack.pop()?);
                let (a, b) = (stack.signed(a), stack.signed(b));
                let holds = match op {
                    Operation::Ge => a >= b,
                    Operation::Gt => a > b,
                    Operation::Le => a <= b,
                    _ => a < b,
                };
                stack.push(u64::from(holds))?
            }
            Operation::Skip { target } => pc = branch(next, target, bytes.len())?,
            Operation::Bra { target } => {
                if stack.pop()? != 0 {
                    pc = branch(next, target, bytes.len())?;
                }
            }
            Operation::Nop => {}
            Operation::Deref { space: true, .. } => return Err(ExprError::Unsupported("xderef")),
            Operation::TLS => return Err(ExprError::Unsupported("form_tls_address")),
            Operation::CallFrameCFA => return Err(ExprError::Unsupported("call_frame_cfa")),
            Operation::Piece { .. } => return Err(ExprError::Unsupported("piece")),
            Operation::StackValue => return Err(ExprError::Unsupported("stack_value")),
            Operation::FrameOffset { .. } => return Err(ExprError::Unsupported("fbreg")),
            _ => return Err(ExprError::Unsupported("non-CFI operation")),
        }
    }
    stack.pop()
}

fn branch(next: usize, target: i16, len: usize) -> Result<usize, ExprError> {
    let dest = next as i64 + i64::from(target);
    if dest < 0 || dest as usize > len {
        return Err(ExprError::BranchOutOfRange);
    }
    Ok(dest as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::constants::*;

    fn no_memory(_: u64) -> Option<u64> {
        None
    }

    fn eval(bytes: &[u8], initial: Option<u64>, regs: &Registers) -> Result<u64, ExprError> {
        evaluate(bytes, initial, regs, &mut no_memory, 8)
    }

    #[test]
    fn arithmetic_and_stack_ops() {
        let r = Registers::new();
        let lit = |n: u8| DW_OP_lit0.0 + n;
        assert_eq!(eval(&[lit(7), lit(5), DW_OP_minus.0], None, &r), Ok(2));
        assert_eq!(eval(&[lit(2), lit(5), DW_OP_shl.0], None, &r), Ok(64));
        assert_eq!(eval(&[lit(3), DW_OP_neg.0, DW_OP_abs.0], None, &r), Ok(3));
        assert_eq!(eval(&[lit(1), lit(2), DW_OP_swap.0, DW_OP_minus.0], None, &r), Ok(1));
        assert_eq!(
            eval(&[lit(1), lit(2), lit(3), DW_OP_rot.0, DW_OP_drop.0, DW_OP_drop.0], None, &r),
            Ok(3)
        );
        assert_eq!(
            eval(&[lit(4), lit(9), DW_OP_over.0, DW_OP_div.0, DW_OP_plus.0], None, &r),
            Ok(6)
        );
        assert_eq!(
            eval(&[DW_OP_const1s.0, 0xfe, lit(1), DW_OP_lt.0], None, &r),
            Ok(1),
            "signed compare"
        );
        assert_eq!(eval(&[DW_OP_plus_uconst.0, 0x10], Some(0x1000), &r), Ok(0x1010));
        assert_eq!(eval(&[DW_OP_const2u.0, 0x34, 0x12, DW_OP_dup.0, DW_OP_xor.0], None, &r), Ok(0));
    }

    #[test]
    fn registers_are_read_from_the_frame() {
        let mut r = Registers::new();
        r.set(7, 0x7000);
        assert_eq!(eval(&[DW_OP_breg7.0, 0x10], None, &r), Ok(0x7010));
        assert_eq!(eval(&[DW_OP_breg7.0, 0x70], None, &r), Ok(0x7000 - 0x10), "sleb -16");
        assert_eq!(eval(&[DW_OP_bregx.0, 7, 0x08], None, &r), Ok(0x7008));
        assert_eq!(eval(&[DW_OP_breg6.0, 0], None, &r), Err(ExprError::MissingRegister(6)));
    }

    /// binutils' lazy PLT CFA: rsp + 8 + ((rip & 15) >= 11 ? 8 : 0).
    #[test]
    fn x86_64_plt_cfa_expression() {
        let expr = [
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
        ];
        for off in 0..16u64 {
            let mut r = Registers::new();
            r.set(7, 0x7ff0_0000);
            r.set(16, 0x40_1020 + off);
            let want = 0x7ff0_0000 + 8 + if off >= 11 { 8 } else { 0 };
            assert_eq!(eval(&expr, None, &r), Ok(want), "offset {off}");
        }
    }

    #[test]
    fn deref_reads_captured_memory() {
        let mut r = Registers::new();
        r.set(6, 0x1028);
        let mut mem = |a: u64| (a == 0x1000).then_some(0xdead_beef_u64);
        // glibc getaddrinfo's CFA: breg6 -40; deref
        let bytes = [DW_OP_breg6.0, 0x58, DW_OP_deref.0];
        assert_eq!(evaluate(&bytes, None, &r, &mut mem, 8), Ok(0xdead_beef));
        let bytes = [DW_OP_breg6.0, 0x58, DW_OP_deref_size.0, 2];
        assert_eq!(evaluate(&bytes, None, &r, &mut mem, 8), Ok(0xbeef));
        let bytes = [DW_OP_breg6.0, 0, DW_OP_deref.0];
        assert_eq!(evaluate(&bytes, None, &r, &mut mem, 8), Err(ExprError::Memory(0x1028)));
    }

    /// i386: values are 32 bits wide, arithmetic wraps there, comparisons
    /// are signed at that width, and `DW_OP_deref` reads 4 bytes.
    #[test]
    fn i386_values_are_32_bits() {
        let eval32 = |bytes: &[u8], initial: Option<u64>, regs: &Registers| {
            evaluate(bytes, initial, regs, &mut no_memory, 4)
        };
        let mut r = Registers::new();
        r.set(4, 0xffff_fff0); // esp near the top of the 32-bit space
        assert_eq!(eval32(&[DW_OP_breg4.0, 0x20], None, &r), Ok(0x10), "wraps past 2^32");
        r.set(4, 0x10);
        assert_eq!(eval32(&[DW_OP_breg4.0, 0x60], None, &r), Ok(0xffff_fff0), "wraps below 0");
        assert_eq!(eval32(&[DW_OP_lit0.0, DW_OP_lit1.0, DW_OP_minus.0], None, &r), Ok(0xffff_ffff));
        assert_eq!(eval32(&[DW_OP_lit1.0, DW_OP_neg.0, DW_OP_lit0.0, DW_OP_lt.0], None, &r), Ok(1));
        assert_eq!(
            eval32(&[DW_OP_const4u.0, 0, 0, 0, 0x80, DW_OP_lit0.0, DW_OP_lt.0], None, &r),
            Ok(1)
        );
        assert_eq!(
            eval32(&[DW_OP_const4u.0, 0, 0, 0, 0x80, DW_OP_lit4.0, DW_OP_shra.0], None, &r),
            Ok(0xf800_0000)
        );
        assert_eq!(
            eval32(&[DW_OP_lit8.0, DW_OP_neg.0, DW_OP_lit2.0, DW_OP_div.0], None, &r),
            Ok(0xffff_fffc)
        );
        // DW_OP_addr takes 4 bytes, not 8.
        assert_eq!(eval32(&[DW_OP_addr.0, 0x78, 0x56, 0x34, 0x12], None, &r), Ok(0x1234_5678));
        // the same bytes at 64 bits do not wrap
        assert_eq!(
            evaluate(&[DW_OP_lit0.0, DW_OP_lit1.0, DW_OP_minus.0], None, &r, &mut no_memory, 8),
            Ok(u64::MAX)
        );
        let mut mem = |a: u64| (a == 0x2000).then_some(0x1122_3344_5566_7788_u64);
        r.set(5, 0x2008);
        let bytes = [DW_OP_breg5.0, 0x78, DW_OP_deref.0];
        assert_eq!(evaluate(&bytes, None, &r, &mut mem, 4), Ok(0x5566_7788), "a 4-byte deref");
    }

    #[test]
    fn branches_and_limits() {
        let r = Registers::new();
        // lit1; bra +1 (skip the lit5); lit5; lit9  -> 9 on top, 1 popped by bra
        let bytes = [DW_OP_lit1.0, DW_OP_bra.0, 1, 0, DW_OP_lit5.0, DW_OP_lit9.0];
        assert_eq!(eval(&bytes, None, &r), Ok(9));
        // skip -3: jumps back onto itself forever
        assert_eq!(eval(&[DW_OP_skip.0, 0xfd, 0xff], None, &r), Err(ExprError::StepLimit));
        assert_eq!(eval(&[DW_OP_skip.0, 0x10, 0], None, &r), Err(ExprError::BranchOutOfRange));
        assert_eq!(eval(&[DW_OP_plus.0], Some(1), &r), Err(ExprError::StackUnderflow));
        assert_eq!(eval(&[], None, &r), Err(ExprError::StackUnderflow));
        assert_eq!(
            eval(&[DW_OP_lit1.0, DW_OP_lit0.0, DW_OP_div.0], None, &r),
            Err(ExprError::DivisionByZero)
        );
        assert_eq!(eval(&[DW_OP_dup.0; 100], Some(1), &r), Err(ExprError::StackOverflow));
        assert!(matches!(eval(&[DW_OP_const8u.0, 1, 2], None, &r), Err(ExprError::Malformed(_))));
        assert!(matches!(eval(&[0xff], None, &r), Err(ExprError::Malformed(_))));
        assert_eq!(
            eval(&[DW_OP_lit1.0, DW_OP_piece.0, 8], None, &r),
            Err(ExprError::Unsupported("piece"))
        );
    }
}
