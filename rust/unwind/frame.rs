//! What a walk gives: its frames, how each was found, and how the walk ended.

use crate::arch::Arch;
use crate::unwind::cfi::LookupError;
use crate::unwind::expr::ExprError;
use crate::unwind::fallback::{FpProblem, RaProblem};

/// How a frame was found, best first (rust-minidump's trust levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trust {
    /// Frame 0: the registers were given.
    Context,
    /// Recovered with call frame information.
    Cfi,
    /// Recovered from what the function's prologue did by the pc (32-bit
    /// ARM code without unwind tables: its pushes and `sub sp`), the
    /// function's start known by its symbol.
    Prologue,
    /// Recovered from the frame-pointer chain (or, for a leaf frame 0
    /// without CFI, from lr on aarch64 or the word at sp on x86_64).
    FramePointer,
    /// Recovered with call frame information applied to a frame found by
    /// scanning: the CFI is right, but the registers it started from were
    /// guessed (the registers a scan cannot recover are the callee's).
    CfiScan,
    /// A plausible return address found by scanning the stack.
    Scan,
}

impl Trust {
    /// Every trust level, most trusted first.
    pub const ALL: [Trust; 6] = [
        Trust::Context,
        Trust::Cfi,
        Trust::Prologue,
        Trust::FramePointer,
        Trust::CfiScan,
        Trust::Scan,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Context => "context",
            Trust::Cfi => "cfi",
            Trust::Prologue => "prologue",
            Trust::FramePointer => "frame_pointer",
            Trust::CfiScan => "cfi_scan",
            Trust::Scan => "scan",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Frame 0: the instruction pointer; later frames: the return address.
    pub pc: u64,
    pub sp: u64,
    /// The canonical frame address, once it was computed.
    pub cfa: Option<u64>,
    pub trust: Trust,
    /// The pc is not a return address but where the thread was stopped:
    /// frame 0, and the frame a signal interrupted.
    pub interrupted: bool,
    /// This frame's own CIE has the `S` augmentation: a signal trampoline
    /// (glibc's `__restore_rt`), whose pc the kernel set, not a call; or it
    /// is Go's `runtime.sigpanic`, which the runtime makes a faulting
    /// goroutine call as if from the faulting instruction.
    pub signal_frame: bool,
}

impl Frame {
    /// The address to look up this frame's function and line at: the pc
    /// itself where it was not reached by a call, else pc − 1, inside the
    /// call instruction (a call can be the last instruction of a function).
    pub fn lookup_pc(&self) -> u64 {
        if self.interrupted || self.signal_frame {
            self.pc
        } else {
            self.pc.wrapping_sub(1)
        }
    }
}

/// Why a walk stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndReason {
    /// The outermost frame (`_start`, `clone`): its return-address rule is
    /// undefined, or, where CFI cannot unwind it and the fallback strategies
    /// would be tried, it is in the function at its module's entry point or
    /// has the ABI's zero frame pointer (the detail says which).
    EndOfStack,
    /// The recovered return address is 0.
    PcZero,
    /// The caller's stack pointer is not above the frame's.
    CfaNotIncreasing,
    /// A read fell outside the captured memory.
    Memory,
    /// The pc is in no module that was added.
    NoModule,
    /// The pc's module has no FDE covering it.
    NoUnwindInfo,
    /// A rule needs a register whose value is not known.
    MissingRegister,
    /// The CFI or an expression in it is malformed.
    BadCfi,
    /// `max_frames` frames were found and the walk could go on.
    FrameLimit,
    /// The frame-pointer step was refused: fp zero, misaligned, outside the
    /// stack, below sp, or not above the previous one (a loop).
    FpInvalid,
    /// The return address a fallback step found is not plausible.
    BadReturnAddress,
    /// Stack scanning found no plausible return address in its window.
    ScanFailed,
    /// The caller's sp is in the live part of another thread's stack (from
    /// that thread's sp up), where none of this thread's frames can be.
    OtherThreadStack,
}

impl EndReason {
    /// Every reason, the clean ends first.
    pub const ALL: [EndReason; 13] = [
        EndReason::EndOfStack,
        EndReason::PcZero,
        EndReason::CfaNotIncreasing,
        EndReason::Memory,
        EndReason::NoModule,
        EndReason::NoUnwindInfo,
        EndReason::MissingRegister,
        EndReason::BadCfi,
        EndReason::FrameLimit,
        EndReason::FpInvalid,
        EndReason::BadReturnAddress,
        EndReason::ScanFailed,
        EndReason::OtherThreadStack,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::EndOfStack => "end_of_stack",
            EndReason::PcZero => "pc_zero",
            EndReason::CfaNotIncreasing => "cfa_not_increasing",
            EndReason::Memory => "memory",
            EndReason::NoModule => "no_module",
            EndReason::NoUnwindInfo => "no_unwind_info",
            EndReason::MissingRegister => "missing_register",
            EndReason::BadCfi => "bad_cfi",
            EndReason::FrameLimit => "frame_limit",
            EndReason::FpInvalid => "fp_invalid",
            EndReason::BadReturnAddress => "bad_return_address",
            EndReason::ScanFailed => "scan_failed",
            EndReason::OtherThreadStack => "other_thread_stack",
        }
    }

    /// Whether this is how a complete stack ends.
    pub fn is_clean(self) -> bool {
        matches!(self, EndReason::EndOfStack | EndReason::PcZero)
    }
}

/// What exactly went wrong, for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndDetail {
    None,
    /// The address read or looked up.
    Address(u64),
    Register(u16),
    Expr(ExprError),
    Lookup(LookupError),
    /// Caller sp vs this frame's sp.
    Sp {
        caller: u64,
        frame: u64,
    },
    /// The frame pointer a frame-pointer step refused.
    FramePointer {
        fp: u64,
        problem: FpProblem,
    },
    /// The return address a fallback step refused.
    ReturnAddress {
        address: u64,
        problem: RaProblem,
    },
    /// The stack words scanned, `from..to`.
    Scan {
        from: u64,
        to: u64,
    },
    /// The frame's pc is in the function at its module's entry point (this
    /// runtime address): the outermost frame.
    EntryPoint {
        entry: u64,
    },
    /// The frame has no CFI and its frame pointer is 0: the ABI's mark of
    /// the outermost frame (x86_64, aarch64).
    ZeroFramePointer,
    /// Apple's ABI: every frame keeps a frame record, and the chain ends
    /// with a record whose saved frame pointer is 0 (dyld's `start` and
    /// `thread_start` make it): the frame whose fp points at it is the
    /// outermost (the record's address).
    ChainEnd {
        record: u64,
    },
    /// The frame's pc is in one of the functions Go's runtime starts a
    /// stack in (`runtime.goexit` a goroutine's, `runtime.mstart` a
    /// thread's, `runtime.rt0_go` the program's): the outermost frame.
    GoTopFrame,
    /// The caller's sp, in the live stack of thread `tid`.
    OtherThreadStack {
        sp: u64,
        tid: u32,
    },
}

/// How and where the walk ended. Copy, so ending allocates nothing; the
/// message is made on demand by [`Unwinder::describe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    pub reason: EndReason,
    /// The index of the frame being unwound when the walk stopped.
    pub frame: usize,
    /// The address used to look up that frame's rules.
    pub lookup_pc: u64,
    /// The module that address fell in, if any (index into the unwinder's modules).
    pub module: Option<usize>,
    pub detail: EndDetail,
}

impl End {
    /// A one-line account of how the walk ended; `module` is the name of
    /// the module at `lookup_pc`.
    pub fn describe(&self, arch: Arch, module: Option<&str>) -> String {
        let end = self;
        let place = match module {
            Some(name) => format!("pc {:#x} in {}", end.lookup_pc, name),
            None => format!("pc {:#x}", end.lookup_pc),
        };
        let frame = end.frame;
        let reg =
            |r: u16| arch.register_name(r).map(str::to_owned).unwrap_or_else(|| format!("r{r}"));
        match (end.reason, end.detail) {
            (EndReason::EndOfStack, EndDetail::EntryPoint { entry }) => format!(
                "frame {frame}: {place} is in the function at the entry point {entry:#x} (outermost frame)"
            ),
            (EndReason::EndOfStack, EndDetail::ChainEnd { record }) => format!(
                "frame {frame}: its frame record at {record:#x} holds a saved frame pointer of 0 at {place}, Apple's mark of the outermost frame"
            ),
            (EndReason::EndOfStack, EndDetail::GoTopFrame) => format!(
                "frame {frame}: {place} is in Go's runtime.goexit, mstart or rt0_go, where the runtime starts a stack (outermost frame)"
            ),
            (EndReason::EndOfStack, EndDetail::ZeroFramePointer) => format!(
                "frame {frame}: frame pointer 0 and no CFI at {place}, the ABI's mark of the outermost frame"
            ),
            (EndReason::EndOfStack, _) => format!("frame {frame}: return address undefined at {place} (outermost frame)"),
            (EndReason::PcZero, _) => format!("frame {frame}: return address 0 at {place}"),
            (EndReason::CfaNotIncreasing, EndDetail::Sp { caller, frame: fsp }) => format!(
                "frame {frame}: caller's sp {caller:#x} is not above this frame's sp {fsp:#x} at {place}"
            ),
            (EndReason::Memory, EndDetail::Address(a)) => {
                format!("frame {frame}: read of {a:#x} outside captured memory at {place}")
            }
            (EndReason::NoModule, _) => format!("frame {frame}: {place} is in no known module"),
            (EndReason::NoUnwindInfo, _) => format!("frame {frame}: no unwind info for {place}"),
            (EndReason::MissingRegister, EndDetail::Register(r)) => {
                format!("frame {frame}: register {} unknown at {place}", reg(r))
            }
            (EndReason::BadCfi, EndDetail::Expr(e)) => format!("frame {frame}: {e} at {place}"),
            (EndReason::BadCfi, EndDetail::Lookup(e)) => format!("frame {frame}: {e} at {place}"),
            (EndReason::FrameLimit, _) => format!("stopped after {} frames (frame limit)", frame + 1),
            (EndReason::FpInvalid, EndDetail::FramePointer { fp, problem }) => {
                format!("frame {frame}: frame pointer {fp:#x} {problem} at {place}")
            }
            (EndReason::BadReturnAddress, EndDetail::ReturnAddress { address, problem }) => {
                format!("frame {frame}: return address {address:#x} {problem} at {place}")
            }
            (EndReason::ScanFailed, EndDetail::Scan { from, to }) => format!(
                "frame {frame}: no plausible return address in the stack words {from:#x}..{to:#x} at {place}"
            ),
            (EndReason::OtherThreadStack, EndDetail::OtherThreadStack { sp, tid }) => format!(
                "frame {frame}: the caller's sp {sp:#x} is in the live stack of thread {tid} at {place}: no frame of this thread is there"
            ),
            (reason, _) => format!("frame {frame}: {} at {place}", reason.as_str()),
        }
    }
}
