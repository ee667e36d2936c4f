"""stackwalk: native stack unwinding from DWARF call frame information."""

from stackwalk.errors import ArchError, CfiError, ElfError, MemoryReadError, StackwalkError

__all__ = ["StackwalkError", "ElfError", "CfiError", "MemoryReadError", "ArchError"]
