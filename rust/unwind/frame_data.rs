//! Windows x86 frame data: how the 32-bit code of a Windows module is
//! unwound where its PDB says so, as a Breakpad symbol file's `STACK WIN`
//! records carry it (`dump_syms` copies them from the PDB's FPO and frame
//! data streams; `crate::symbolize::breakpad` reads them and answers
//! [`crate::unwind::cfi::ForeignCfi::frame_data`]). Two kinds:
//!
//! * **FPO** (type 0): only sizes. The return address lies above the
//!   frame's locals and saved registers; where the function uses ebp as a
//!   general register (`allocates_base_pointer`), the caller's ebp is among
//!   the saved ones.
//! * **Frame data programs** (type 4): a postfix program over 32-bit
//!   variables that computes the caller's registers, such as
//!   `$T0 $ebp = $eip $T0 4 + ^ = $ebp $T0 ^ = $esp $T0 8 + =` (an ebp
//!   frame) or `$T0 .raSearch = $eip $T0 ^ = $esp $T0 4 + =` (the return
//!   address found from the frame's sizes). Operators: the arithmetic ones,
//!   `@` (align down), `^` (read the word at), `=` (assign; `.undef`
//!   forgets).
//!
//! The rules are rust-minidump's `minidump-stackwalk` (the reference the
//! tests hold the walk to), which follow Breakpad's `StackwalkerX86`:
//!
//! * `.raSearch` (`.raSearchStart`) is the callee's esp plus the frame's
//!   locals and saved registers, plus the parameters its own callee (the
//!   frame below, the "grand callee") left on the stack for it to pop
//!   (`__cdecl`): the parameter size of the record, else of the `FUNC` or
//!   `PUBLIC` record, at that frame's pc. A program that aligns (`@`) has
//!   realigned its stack, so the search starts from ebp instead (`ebp + 4`).
//! * The caller's registers are exactly those the program assigns (`$eip`,
//!   `$esp`, `$ebp`, `$ebx`, `$esi`, `$edi`); no other is carried over. FPO
//!   carries ebp and ebx over where ebp is not saved.
//! * FPO in frame 0: a return address equal to the pc itself is one a
//!   system call left (`ret` has not run yet: the FPO-optimised syscall
//!   stubs), and the next word is taken.
//!
//! A program that cannot run (an unknown token, a read outside memory, an
//! operand missing, a division by zero) gives an error, and the walk goes
//! on as where there is no record. Programs are bounded: at most
//! [`MAX_STACK`] values on the stack and [`MAX_VARIABLES`] variables.

use crate::arch::registers::Registers;
use crate::source::memory::Memory;

/// One `STACK WIN` record's facts for the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameData<'a> {
    /// Bytes of parameters the function takes (`.cbParams`).
    pub parameter_size: u32,
    /// Bytes of registers it saves (`.cbSavedRegs`).
    pub saved_register_size: u32,
    /// Bytes of its locals (`.cbLocals`).
    pub local_size: u32,
    pub rule: FrameRule<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameRule<'a> {
    /// FPO data (type 0, or type 4 without a program).
    Fpo { allocates_base_pointer: bool },
    /// A frame data program (type 4).
    Program(&'a str),
}

/// What the step knows of the frames below the callee.
#[derive(Clone, Copy, Debug)]
pub struct Below {
    /// The parameter size of the callee's own callee (0 for frame 0).
    pub grand_callee_params: u32,
    /// The callee is frame 0 (its registers are the dump's context).
    pub context_frame: bool,
}

/// Why a record could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameDataError {
    /// A word at this address is not in the captured memory.
    Memory(u64),
    /// The callee's esp or ebp, which every record starts from, is unknown.
    MissingRegister(u16),
    /// The program is not one that can run: why.
    Program(&'static str),
    /// The program did not give the caller's eip.
    NoCaller,
}

/// At most this many values on a program's stack.
pub const MAX_STACK: usize = 32;
/// At most this many variables (the registers, temporaries and constants).
pub const MAX_VARIABLES: usize = 32;

const EIP: u16 = 8;
const ESP: u16 = 4;
const EBP: u16 = 5;
const EBX: u16 = 3;
/// The variables that become the caller's registers, and their columns.
const OUTPUT: [(&str, u16); 6] =
    [("$eip", EIP), ("$esp", ESP), ("$ebp", EBP), ("$ebx", EBX), ("$esi", 6), ("$edi", 7)];

/// The caller's registers by `data`, from the callee's `regs` (its pc in
/// column 8 or `callee_pc`), into `caller` (cleared first).
pub fn unwind<M: Memory + ?Sized>(
    data: &FrameData<'_>,
    below: Below,
    callee_pc: u64,
    regs: &Registers,
    caller: &mut Registers,
    mem: &mut M,
) -> Result<(), FrameDataError> {
    *caller = Registers::new();
    let esp = reg32(regs, ESP)?;
    let frame_size = data
        .local_size
        .wrapping_add(data.saved_register_size)
        .wrapping_add(below.grand_callee_params);
    match data.rule {
        FrameRule::Fpo { allocates_base_pointer } => {
            let mut ra_at = esp.wrapping_add(frame_size);
            let mut ra = word(mem, ra_at)?;
            if below.context_frame && u64::from(ra) == callee_pc {
                ra_at = ra_at.wrapping_add(4);
                ra = word(mem, ra_at)?;
            }
            let ebp = if allocates_base_pointer {
                let at = esp
                    .wrapping_add(below.grand_callee_params)
                    .wrapping_add(data.saved_register_size)
                    .wrapping_sub(8);
                word(mem, at)?
            } else {
                if let Some(ebx) = regs.get(EBX) {
                    caller.set(EBX, ebx);
                }
                reg32(regs, EBP)?
            };
            caller.set(EIP, u64::from(ra));
            caller.set(ESP, u64::from(ra_at.wrapping_add(4)));
            caller.set(EBP, u64::from(ebp));
            Ok(())
        }
        FrameRule::Program(program) => {
            let ebp = reg32(regs, EBP)?;
            let search = if program.contains('@') {
                ebp.checked_add(4).ok_or(FrameDataError::Program("ebp at the top of memory"))?
            } else {
                esp.checked_add(frame_size).ok_or(FrameDataError::Program("a frame past 4 GiB"))?
            };
            let mut vars = Variables::default();
            vars.set("$esp", esp)?;
            vars.set("$ebp", ebp)?;
            if let Some(ebx) = regs.get(EBX) {
                vars.set("$ebx", ebx as u32)?;
            }
            vars.set(".cbParams", data.parameter_size)?;
            vars.set(".cbCalleeParams", below.grand_callee_params)?;
            vars.set(".cbSavedRegs", data.saved_register_size)?;
            vars.set(".cbLocals", data.local_size)?;
            vars.set(".raSearch", search)?;
            vars.set(".raSearchStart", search)?;
            run(program, &mut vars, mem)?;
            for (name, column) in OUTPUT {
                if let Some(v) = vars.get(name) {
                    caller.set(column, u64::from(v));
                }
            }
            if caller.get(EIP).is_none() || caller.get(ESP).is_none() {
                return Err(FrameDataError::NoCaller);
            }
            Ok(())
        }
    }
}

fn reg32(regs: &Registers, column: u16) -> Result<u32, FrameDataError> {
    regs.get(column).map(|v| v as u32).ok_or(FrameDataError::MissingRegister(column))
}

fn word<M: Memory + ?Sized>(mem: &mut M, addr: u32) -> Result<u32, FrameDataError> {
    let addr = u64::from(addr);
    mem.read_sized(addr, 4).map(|v| v as u32).ok_or(FrameDataError::Memory(addr))
}

/// A program's variables, by name (a handful: a list beats a map).
#[derive(Default)]
struct Variables<'a> {
    list: Vec<(&'a str, u32)>,
}

impl<'a> Variables<'a> {
    fn get(&self, name: &str) -> Option<u32> {
        self.list.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }

    fn set(&mut self, name: &'a str, value: u32) -> Result<(), FrameDataError> {
        if let Some(slot) = self.list.iter_mut().find(|(n, _)| *n == name) {
            slot.1 = value;
        } else if self.list.len() < MAX_VARIABLES {
            self.list.push((name, value));
        } else {
            return Err(FrameDataError::Program("too many variables"));
        }
        Ok(())
    }

    fn forget(&mut self, name: &str) {
        self.list.retain(|(n, _)| *n != name);
    }
}

#[derive(Clone, Copy)]
enum Value<'a> {
    Number(u32),
    Variable(&'a str),
    Undefined,
}

/// The tokens of a program. Some toolchains wrote `=` joined to the token
/// after it (`$T0 $ebp =$eip ...`): split there.
fn tokens(program: &str) -> impl Iterator<Item = &str> {
    program
        .split_ascii_whitespace()
        .flat_map(|word| match word.strip_prefix('=') {
            Some(rest) if !rest.is_empty() => [Some("="), Some(rest)],
            _ => [Some(word), None],
        })
        .flatten()
}

/// Run `program` over `vars`.
fn run<'a, M: Memory + ?Sized>(
    program: &'a str,
    vars: &mut Variables<'a>,
    mem: &mut M,
) -> Result<(), FrameDataError> {
    use FrameDataError::Program;
    let mut stack: Vec<Value<'a>> = Vec::new();
    let number = |v: Value<'_>, vars: &Variables<'_>| match v {
        Value::Number(n) => Ok(n),
        Value::Variable(name) => vars.get(name).ok_or(Program("a variable never assigned")),
        Value::Undefined => Err(Program(".undef as an operand")),
    };
    for token in tokens(program) {
        let op = match token {
            "+" | "-" | "*" | "/" | "%" | "@" | "=" => token,
            "^" => {
                let v = stack.pop().ok_or(Program("^ without an operand"))?;
                let addr = number(v, vars)?;
                stack.push(Value::Number(word(mem, addr)?));
                continue;
            }
            ".undef" => {
                stack.push(Value::Undefined);
                if stack.len() > MAX_STACK {
                    return Err(Program("too deep"));
                }
                continue;
            }
            _ => {
                let value = if token.starts_with('$') || token.starts_with('.') {
                    Value::Variable(token)
                } else {
                    let n: i64 = token.parse().map_err(|_| Program("an unknown token"))?;
                    Value::Number(n as u32)
                };
                stack.push(value);
                if stack.len() > MAX_STACK {
                    return Err(Program("too deep"));
                }
                continue;
            }
        };
        let rhs = stack.pop().ok_or(Program("an operator without operands"))?;
        let lhs = stack.pop().ok_or(Program("an operator without operands"))?;
        if op == "=" {
            let Value::Variable(name) = lhs else {
                return Err(Program("an assignment to a number"));
            };
            match rhs {
                Value::Undefined => vars.forget(name),
                v => {
                    let v = number(v, vars)?;
                    vars.set(name, v)?;
                }
            }
            continue;
        }
        let (a, b) = (number(lhs, vars)?, number(rhs, vars)?);
        let v = match op {
            "+" => a.wrapping_add(b),
            "-" => a.wrapping_sub(b),
            "*" => a.wrapping_mul(b),
            "/" => a.checked_div(b).ok_or(Program("a division by zero"))?,
            "%" => a.checked_rem(b).ok_or(Program("a division by zero"))?,
            // "@": align down to a power of two.
            _ if b.is_power_of_two() => a & !(b - 1),
            _ => return Err(Program("an alignment that is not a power of two")),
        };
        stack.push(Value::Number(v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::memory::Buffer;

    /// A stack of words from `base` (its bytes leaked: a test's few).
    fn stack(base: u64, words: &[u32]) -> Buffer<'static> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        Buffer { start: base, bytes: bytes.leak() }
    }

    fn regs(esp: u32, ebp: u32) -> Registers {
        let mut r = Registers::new();
        r.set(ESP, u64::from(esp));
        r.set(EBP, u64::from(ebp));
        r
    }

    fn data(rule: FrameRule<'_>, locals: u32, saved: u32) -> FrameData<'_> {
        FrameData { parameter_size: 8, saved_register_size: saved, local_size: locals, rule }
    }

    const FRAME0: Below = Below { grand_callee_params: 0, context_frame: true };

    #[test]
    fn an_ebp_frame_program() {
        // ebp -> [saved ebp][return address]
        let mut mem = stack(0x1000, &[0, 0, 0x2000, 0x401234]);
        let program = "$T0 $ebp = $eip $T0 4 + ^ = $ebp $T0 ^ = $esp $T0 8 + =";
        let mut caller = Registers::new();
        let d = data(FrameRule::Program(program), 0, 0);
        unwind(&d, FRAME0, 0x401000, &regs(0x1000, 0x1008), &mut caller, &mut mem).unwrap();
        assert_eq!(caller.get(EIP), Some(0x401234));
        assert_eq!(caller.get(EBP), Some(0x2000));
        assert_eq!(caller.get(ESP), Some(0x1010));
        assert_eq!(caller.get(EBX), None, "no register is carried over");
    }

    #[test]
    fn ra_search_counts_locals_saved_registers_and_the_grand_callees_parameters() {
        // esp -> [grand callee's 8 bytes of parameters][4 of locals][4 saved][return address]
        let mut mem = stack(0x1000, &[1, 2, 3, 4, 0x405678]);
        let program = "$T0 .raSearch = $eip $T0 ^ = $esp $T0 4 + =";
        let below = Below { grand_callee_params: 8, context_frame: false };
        let mut caller = Registers::new();
        let d = data(FrameRule::Program(program), 4, 4);
        unwind(&d, below, 0x401000, &regs(0x1000, 0), &mut caller, &mut mem).unwrap();
        assert_eq!(caller.get(EIP), Some(0x405678));
        assert_eq!(caller.get(ESP), Some(0x1014));
    }

    #[test]
    fn fpo_frames() {
        // esp -> [4 of locals][saved ebp][return address]
        let mut mem = stack(0x1000, &[7, 0x3000, 0x401234, 0x409999]);
        let fpo = |bp| data(FrameRule::Fpo { allocates_base_pointer: bp }, 4, 4);
        let below = Below { grand_callee_params: 0, context_frame: false };
        let (mut caller, mut r) = (Registers::new(), regs(0x1000, 0x5555));
        r.set(EBX, 0x77);
        unwind(&fpo(false), below, 0x401000, &r, &mut caller, &mut mem).unwrap();
        assert_eq!(caller.get(EIP), Some(0x401234));
        assert_eq!(caller.get(ESP), Some(0x100c));
        assert_eq!((caller.get(EBP), caller.get(EBX)), (Some(0x5555), Some(0x77)));
        // ebp saved: at esp + saved - 8 (Breakpad's and rust-minidump's place).
        let mut mem = stack(0xffc, &[0x3000, 7, 0x3000, 0x401234]);
        unwind(&fpo(true), below, 0x401000, &r, &mut caller, &mut mem).unwrap();
        assert_eq!((caller.get(EBP), caller.get(EBX)), (Some(0x3000), None));
        // Frame 0 of a system call stub: the return address left is the pc.
        let mut mem = stack(0x1000, &[7, 0x3000, 0x401000, 0x409999]);
        unwind(&fpo(false), FRAME0, 0x401000, &r, &mut caller, &mut mem).unwrap();
        assert_eq!((caller.get(EIP), caller.get(ESP)), (Some(0x409999), Some(0x1010)));
    }

    #[test]
    fn alignment_searches_from_ebp() {
        let mut mem = stack(0x1000, &[0, 0, 0x2000, 0x401234]);
        let program = "$T0 $ebp 8 @ = $eip .raSearch ^ = $esp .raSearch 4 + = $ebp $T0 ^ =";
        let mut caller = Registers::new();
        let d = data(FrameRule::Program(program), 0x100, 0);
        unwind(&d, FRAME0, 0x401000, &regs(0xf00, 0x1008), &mut caller, &mut mem).unwrap();
        assert_eq!(caller.get(EIP), Some(0x401234));
        assert_eq!(caller.get(ESP), Some(0x1010));
        assert_eq!(caller.get(EBP), Some(0x2000));
    }

    #[test]
    fn joined_assignments_and_undef() {
        let mut mem = stack(0x1000, &[0x2000, 0x401234]);
        let program = "$T0 $ebp =$eip $T0 4 + ^ = $ebp .undef = $esp $T0 8 + =";
        let mut caller = Registers::new();
        let d = data(FrameRule::Program(program), 0, 0);
        unwind(&d, FRAME0, 0, &regs(0xf00, 0x1000), &mut caller, &mut mem).unwrap();
        assert_eq!((caller.get(EIP), caller.get(EBP)), (Some(0x401234), None));
    }

    #[test]
    fn programs_that_cannot_run() {
        let mut mem = stack(0x1000, &[0x2000, 0x401234]);
        let mut caller = Registers::new();
        let r = regs(0x1000, 0x1000);
        let deep = "1 ".repeat(MAX_STACK + 1);
        let cases: [(&str, FrameDataError); 8] = [
            ("$eip 4 0 / =", FrameDataError::Program("a division by zero")),
            ("$eip 4 3 @ =", FrameDataError::Program("an alignment that is not a power of two")),
            ("4 +", FrameDataError::Program("an operator without operands")),
            ("$eip $T9 =", FrameDataError::Program("a variable never assigned")),
            ("4 $eip =", FrameDataError::Program("an assignment to a number")),
            ("$eip 0x10 =", FrameDataError::Program("an unknown token")),
            ("$eip 64 ^ = $esp 8 =", FrameDataError::Memory(64)),
            ("$esp 4 =", FrameDataError::NoCaller),
        ];
        for (program, want) in cases {
            let d = data(FrameRule::Program(program), 0, 0);
            let got = unwind(&d, FRAME0, 0, &r, &mut caller, &mut mem);
            assert_eq!(got, Err(want), "{program}");
        }
        let d = data(FrameRule::Program(&deep), 0, 0);
        let got = unwind(&d, FRAME0, 0, &r, &mut caller, &mut mem);
        assert_eq!(got, Err(FrameDataError::Program("too deep")));
        let many: String = (0..=MAX_VARIABLES).map(|i| format!("$T{i} 1 = ")).collect();
        let d = data(FrameRule::Program(&many), 0, 0);
        let got = unwind(&d, FRAME0, 0, &r, &mut caller, &mut mem);
        assert_eq!(got, Err(FrameDataError::Program("too many variables")));
    }
}
