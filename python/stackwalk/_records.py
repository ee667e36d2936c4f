"""The values a ``stackwalk.core.Core`` gives (and a ``Minidump``'s and a ``Process``'s):
its signal, its modules and its threads, frozen records with ``__slots__`` (a dataclass's
import alone is a tenth of a small core's command); and how the signal is read from the
threads' notes."""

from __future__ import annotations

TYPE_CHECKING = False
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
# Linux's signal names by number (asm-generic/signal.h: x86_64, aarch64 and i386 alike), as
# Python's signal.Signals names them on Linux (whose import, enum with it, is a fifth of a small
# core's command): 1-31, and glibc's SIGRTMIN and SIGRTMAX.
_SIGNAL_NAMES = {
    **dict(enumerate(("HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM "
                      "STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO "
                      "PWR SYS").split(), start=1)),
    34: "RTMIN",
    64: "RTMAX",
}  # fmt: skip

# An NT_PRSTATUS: (tid, pr_cursig, its index for CoreFile.registers, the NT_SIGINFO after it:
# (signo, code, address)).
_ThreadNotes = tuple[int, int, int, tuple[int, int, int] | None]


class _Record:
    """A frozen value: the fields are the ``__slots__`` of its class (``_hidden`` ones left out
    of its text and of comparisons), as a frozen dataclass would have them."""

    __slots__: tuple[str, ...] = ()

    def _shown(self) -> tuple[tuple[str, object], ...]:
        return tuple((n, getattr(self, n)) for n in self.__slots__ if not n.startswith("_"))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only: cannot set {name!r}")

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={v!r}' for n, v in self._shown())})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Record)
        return self._shown() == other._shown()

    def __hash__(self) -> int:
        return hash(self._shown())


class Signal(_Record):
    """The signal that stopped the process."""

    __slots__ = ("number", "name", "address", "code")
    number: int
    name: str  # "SIGSEGV"; "SIG<n>" for a number Python does not name
    address: int | None  # the faulting address of SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP
    code: int | None  # si_code (None when the core has no NT_SIGINFO)

    def __init__(self, number: int, name: str, address: int | None, code: int | None) -> None:
        self._set(number=number, name=name, address=address, code=code)


class CoreModule(_Record):
    """A file the process mapped, and where."""

    __slots__ = (
        "path",
        "file",
        "start",
        "end",
        "bias",
        "build_id",
        "file_build_id",
        "found",
        "ranges",
    )
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
    ranges: tuple[tuple[int, int], ...]

    def __init__(
        self,
        path: str,
        file: str | None,
        start: int,
        end: int,
        bias: int,
        build_id: str | None,
        file_build_id: str | None,
        found: bool,
        ranges: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self._set(path=path, file=file, start=start, end=end, bias=bias, build_id=build_id)
        self._set(file_build_id=file_build_id, found=found, ranges=ranges)

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        """``ranges``, or (start, end) where there are none."""
        return self.ranges or ((self.start, self.end),)

    @property
    def build_id_matches(self) -> bool | None:
        if self.build_id is None or self.file_build_id is None:
            return None
        return self.build_id == self.file_build_id


class Thread(_Record):
    """A thread of the core: its registers, and its frames on demand."""

    __slots__ = ("tid", "signal", "_unwinder", "_memory", "_core", "_index")
    tid: int
    signal: int  # pr_cursig: the signal the thread was stopped by (0: none)
    _unwinder: Unwinder
    _memory: MappedMemory
    # Its registers are read from the core when asked for (a dict per thread of a core of
    # 100,000 threads was most of the memory Core.open took).
    _core: CoreFile | MinidumpFile
    _index: int

    def __init__(
        self,
        tid: int,
        signal: int,
        unwinder: Unwinder,
        memory: MappedMemory,
        core: CoreFile | MinidumpFile,
        index: int,
    ) -> None:
        self._set(tid=tid, signal=signal, _unwinder=unwinder, _memory=memory)
        self._set(_core=core, _index=index)

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


def _signal_name(number: int) -> str:
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
