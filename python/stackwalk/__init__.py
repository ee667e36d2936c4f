"""stackwalk: native stack unwinding from DWARF call frame information.

    uw = stackwalk.Unwinder(arch="x86_64")
    uw.add_module("/usr/lib/x86_64-linux-gnu/libc.so.6", bias=0x7f0000000000)
    trace = uw.unwind(regs, [(rsp, stack_bytes)])

``stackwalk.Symbolizer(uw.modules).frames(trace)`` names the frames (function, module,
file, line; ``frame_dicts`` gives their JSON objects). ``stackwalk.baseline`` has the same API
in pure Python; ``stackwalk.Core`` reads ELF core files, ``stackwalk.Minidump`` minidumps,
``stackwalk.Process`` live processes, ``stackwalk.Recording`` perf.data recordings;
``stackwalk.Processor`` is a crash service's worker (a report per crash, a memory budget).
"""

from stackwalk._core import ElfFile, Symbolizer, __version__
from stackwalk.core import Core, CoreError
from stackwalk.errors import ArchError, CfiError, ElfError, MemoryReadError, StackwalkError
from stackwalk.minidump import Minidump, MinidumpError
from stackwalk.perf import Recording
from stackwalk.process import Process
from stackwalk.processor import Processor, Report
from stackwalk.store import CrashStore
from stackwalk.unwinder import (
    CRASH_STRATEGIES,
    Frame,
    MappedMemory,
    Registers,
    StackDB,
    Trace,
    Unwinder,
)

__all__ = [
    "__version__",
    "CRASH_STRATEGIES",
    "Core",
    "CoreError",
    "CrashStore",
    "Process",
    "Processor",
    "Report",
    "Minidump",
    "MinidumpError",
    "Recording",
    "Unwinder",
    "Symbolizer",
    "ElfFile",
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
