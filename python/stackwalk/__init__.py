"""stackwalk: native stack unwinding from DWARF call frame information.

    uw = stackwalk.Unwinder(arch="x86_64")
    uw.add_module("/usr/lib/x86_64-linux-gnu/libc.so.6", bias=0x7f0000000000)
    trace = uw.unwind(regs, [(rsp, stack_bytes)])

``stackwalk.Symbolizer(uw.modules).frame_dicts(trace)`` names the frames (function, module,
file, line). ``stackwalk.baseline`` has the same API in pure Python; ``stackwalk.Core``
reads ELF core files, ``stackwalk.Minidump`` minidumps.
"""

from stackwalk._core import Symbolizer, __version__
from stackwalk.errors import ArchError, CfiError, ElfError, MemoryReadError, StackwalkError
from stackwalk.unwinder import (
    CRASH_STRATEGIES,
    Frame,
    MappedMemory,
    Registers,
    StackDB,
    Trace,
    Unwinder,
)


def __getattr__(name: str) -> object:
    # The core-file reader is imported on first use, so that commands and
    # programs that only unwind start fast.
    if name in ("Core", "CoreError"):
        from stackwalk import core

        return getattr(core, name)
    if name == "Process":
        from stackwalk.process import Process

        return Process
    if name == "CrashStore":
        from stackwalk.triage import CrashStore

        return CrashStore
    if name in ("Minidump", "MinidumpError"):
        from stackwalk import minidump

        return getattr(minidump, name)
    raise AttributeError(f"module 'stackwalk' has no attribute {name!r}")


__all__ = [
    "__version__",
    "CRASH_STRATEGIES",
    "Core",
    "CoreError",
    "CrashStore",
    "Process",
    "Minidump",
    "MinidumpError",
    "Unwinder",
    "Symbolizer",
    "Registers",
    "Trace",
    "Frame",
    "MappedMemory",
    "StackDB",
    "StackwalkError",
    "ElfError",
    "CfiError",
    "MemoryReadError",
    "ArchError",
]
