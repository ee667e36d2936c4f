"""The public unwinder: the Rust core, with ELF files read by pyelftools."""

from __future__ import annotations

import os

from stackwalk import _core, _elf

__all__ = ["Unwinder", "Trace", "Frame"]

Trace = _core.Trace
Frame = _core.Frame


class Unwinder(_core.Unwinder):
    """Unwinds native stacks from registers and captured memory using DWARF CFI.

    ``Unwinder(arch="x86_64")`` (or ``"aarch64"``); add the modules that were
    mapped in the process with :meth:`add_module`, then call :meth:`unwind`.
    """

    def add_module(self, path: str | os.PathLike[str], bias: int = 0) -> None:
        """Add the ELF file at ``path``, loaded at ``bias`` (runtime − ELF address)."""
        path = os.fspath(path)
        info = _elf.read_file(path)
        info.check_arch(self.arch, path)
        self._add_elf(path, bias, info.start, info.end, path=path, **info.core_kwargs())

    def add_module_image(self, name: str, image: bytes | bytearray | memoryview, bias: int) -> None:
        """Add an ELF image held in memory (e.g. the vdso read from a process)."""
        info = _elf.read_image(image, name)
        info.check_arch(self.arch, name)
        self._add_elf(name, bias, info.start, info.end, image=image, **info.core_kwargs())
