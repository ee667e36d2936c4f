"""The values a ``stackwalk.core.Core`` gives (and a ``Minidump``'s and a ``Process``'s):
its signal, its modules and its threads, frozen dataclasses; and how the signal is read from the
threads' notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stackwalk._core import CoreFile, MinidumpFile
    from stackwalk.unwinder import MappedMemory, Trace, Unwinder

# Signals whose siginfo carries the faulting address (when si_code > 0: sent by the kernel).
_FAULT_SIGNALS = frozenset({4, 5, 7, 8, 11})  # SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV
# si_code of a signal the kernel sends with no fault behind it (a SIGSEGV forced where a handler
# could not be called, e.g. a stack overflow with no alternate stack): si_addr is 0, not an address.
_SI_KERNEL = 0x80
# Signals that stop a process and never dump it: a core whose threads show one of these (or
# none) is a snapshot of a live process (gdb's gcore attaches with SIGSTOP), not a crash.
_STOP_SIGNALS = frozenset({19, 20, 21, 22})  # SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU

# An NT_PRSTATUS: (tid, pr_cursig, its index for CoreFile.registers, the NT_SIGINFO after it:
# (signo, code, address)).
_ThreadNotes = tuple[int, int, int, tuple[int, int, int] | None]


@dataclass(frozen=True, slots=True)
class Signal:
    """The signal that stopped the process."""

    number: int
    name: str  # "SIGSEGV"; "SIG<n>" for a number Python does not name
    address: int | None  # the faulting address of SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP
    code: int | None  # si_code (None when the core has no NT_SIGINFO)


@dataclass(frozen=True, slots=True)
class CoreModule:
    """A file the process mapped, and where."""

    path: str  # as the core names it, or "[vdso]"
    file: str | None  # the file on disk used for it
    start: int  # runtime address range
    end: int
    bias: int  # runtime address − ELF address
    build_id: str | None  # read from the core's memory
    file_build_id: str | None  # read from the file used
    found: bool  # a file (or, for the vdso, the image in the core) provides its CFI and symbols
    # The runtime ranges it occupies: its own mappings, which need not be contiguous (memory
    # between two of them is not the module's). Empty: the whole of start..end.
    ranges: tuple[tuple[int, int], ...] = ()
    # The Breakpad symbol file found for it in the symbol stores (minidumps): the names and
    # lines its file lacks, and, its file missing, its STACK CFI.
    sym_file: str | None = None

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        """``ranges``, or (start, end) where there are none."""
        return self.ranges or ((self.start, self.end),)

    @property
    def build_id_matches(self) -> bool | None:
        if self.build_id is None or self.file_build_id is None:
            return None
        return self.build_id == self.file_build_id


@dataclass(frozen=True, slots=True)
class Thread:
    """A thread of the core: its registers, and its frames on demand."""

    tid: int
    signal: int  # pr_cursig: the signal the thread was stopped by (0: none)
    _unwinder: Unwinder = field(repr=False, compare=False)
    _memory: MappedMemory = field(repr=False, compare=False)
    # Its registers are read from the core when asked for (a dict per thread of a core of
    # 100,000 threads was most of the memory Core.open took).
    _core: CoreFile | MinidumpFile = field(repr=False, compare=False)
    _index: int = field(repr=False, compare=False)

    @property
    def regs(self) -> dict[str, int]:
        return self._core.registers(self._index)

    def unwind(self, max_frames: int | None = None, *, registers: bool = False) -> Trace:
        """This thread's frames: at most ``max_frames``, or, when None, as many as its
        captured stack can hold (a frame takes at least one word). ``registers``: keep each
        frame's registers (``Trace.registers``)."""
        return self._unwinder.unwind(
            self.regs, self._memory, max_frames=max_frames, registers=registers
        )


# Linux's signal names by number (asm-generic/signal.h: x86_64, aarch64 and i386 alike): the
# crashed system's numbering, not this machine's (Python's signal.Signals is the host's; a
# macOS host numbers SIGBUS 10), 1-31 and glibc's SIGRTMIN and SIGRTMAX.
_SIGNAL_NAMES = {
    **dict(enumerate(("HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM "
                      "STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO "
                      "PWR SYS").split(), start=1)),
    34: "RTMIN",
    64: "RTMAX",
}  # fmt: skip


def _signal_name(number: int) -> str:
    """The Linux signal's name ("SIGSEGV"), "SIG<n>" for a number Linux does not name."""
    return f"SIG{_SIGNAL_NAMES.get(number, number)}"


def _signal_of(thread: _ThreadNotes) -> Signal | None:
    _, cursig, _, siginfo = thread
    if siginfo is not None:
        signo, code, addr = siginfo
        if signo:
            address = addr if signo in _FAULT_SIGNALS and 0 < code < _SI_KERNEL else None
            return Signal(signo, _signal_name(signo), address, code)
    if cursig:
        return Signal(cursig, _signal_name(cursig), None, None)
    return None


def _is_crash(sig: Signal | None) -> bool:
    return sig is not None and sig.number not in _STOP_SIGNALS
