"""stackwalk: native stack unwinding from DWARF call frame information.

    uw = stackwalk.Unwinder(arch="x86_64")
    uw.add_module("/usr/lib/x86_64-linux-gnu/libc.so.6", bias=0x7f0000000000)
    trace = uw.unwind(regs, [(rsp, stack_bytes)])

``stackwalk.baseline`` has the same API in pure Python.
"""

from stackwalk.errors import ArchError, CfiError, ElfError, MemoryReadError, StackwalkError
from stackwalk.unwinder import Frame, MappedMemory, Trace, Unwinder

__all__ = [
    "Unwinder",
    "Trace",
    "Frame",
    "MappedMemory",
    "StackwalkError",
    "ElfError",
    "CfiError",
    "MemoryReadError",
    "ArchError",
]
