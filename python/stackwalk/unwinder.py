"""The public unwinder: the Rust core itself. ``Unwinder.add_module`` maps the
ELF file and reads its headers in Rust (the ``object`` crate), so adding a
module costs microseconds; CFI is parsed on demand."""

from stackwalk._core import Frame, MappedMemory, Registers, StackDB, Trace, Unwinder

# What a crash processor tries for every frame: CFI wherever it covers the pc,
# else the frame-pointer chain, else a scan of the stack for a return address.
# ``Unwinder`` alone uses CFI only (it stops where CFI stops, like gdb's and
# eu-stack's CFI unwinders and the pure-Python baseline); ``Core`` and
# ``stackwalk core`` use these.
CRASH_STRATEGIES = ("cfi", "frame_pointer", "scan")

__all__ = [
    "CRASH_STRATEGIES",
    "Frame",
    "MappedMemory",
    "Registers",
    "StackDB",
    "Trace",
    "Unwinder",
]
