"""The values a ``stackwalk.core.Core`` gives (and a ``Minidump``'s and a ``Process``'s):
its signal, its modules and its threads, frozen dataclasses. Which thread crashed, and by which
signal, the source says (``rust/source/signal.rs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stackwalk._core import CaptureFile, CoreFile, MinidumpFile
    from stackwalk.unwinder import MappedMemory, Trace, Unwinder


@dataclass(frozen=True, slots=True)
class Signal:
    """The signal that stopped the process."""

    number: int
    name: str  # "SIGSEGV"; "SIG<n>" for a number Linux does not name
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
    _core: CoreFile | MinidumpFile | CaptureFile = field(repr=False, compare=False)
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
