"""The public unwinder: the Rust core itself. ``Unwinder.add_module`` maps the
ELF file and reads its headers in Rust (the ``object`` crate), so adding a
module costs microseconds; CFI is parsed on demand."""

from stackwalk._core import Frame, MappedMemory, StackDB, Trace, Unwinder

__all__ = ["Frame", "MappedMemory", "StackDB", "Trace", "Unwinder"]
