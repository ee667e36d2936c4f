"""The exceptions stackwalk raises. They are defined once, in the native core,
so that errors raised from Rust and from Python have the same types."""

from stackwalk._core import (
    ArchError,
    CfiError,
    CoreError,
    ElfError,
    MemoryReadError,
    MinidumpError,
    StackwalkError,
)

__all__ = [
    "StackwalkError",
    "ElfError",
    "CfiError",
    "MemoryReadError",
    "ArchError",
    "CoreError",
    "MinidumpError",
]
