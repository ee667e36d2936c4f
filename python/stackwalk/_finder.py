"""Finding a module's file on this machine for a core, a minidump or a live process: where to
look (the explicit file, under the sysroot, at its path, on the search path), which candidate is
the file the process mapped (``Identity``: the build id, Breakpad's file id or GUID the crash
recorded), and the words messages use. (Perf recordings find theirs in the native core's
``space::finder``, which these are to join: issue #46.)"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from stackwalk._core import elf_summary
from stackwalk.errors import CoreError, ElfError

if TYPE_CHECKING:
    from stackwalk._core import _ElfSummary as ElfSummary  # the stub's alone

_FNAME_MAX = 15  # pr_fname's length without its NUL


class Identity:
    """What a core or dump records of a module's file, to check a file found for it by: its
    GNU build id (``kind`` "build_id": an ELF header in a core's memory); Breakpad's ``FileID``
    of it ("file_id": a minidump's ``BpEL`` record, which holds the hash of the first page of
    ``.text`` where the file has no build id); or the first 16 bytes of that, as a GUID
    ("guid": the ``RSDS`` record Breakpad's Linux client wrote before it recorded build ids).
    ``hex`` is the bytes as the record holds them."""

    __slots__ = ("hex", "kind")

    def __init__(self, hex: str, kind: str) -> None:
        self.hex = hex
        self.kind = kind

    def matches(self, summary: ElfSummary) -> bool:
        """Whether the file ``summary`` is of is the one recorded, computed the same way."""
        if self.kind == "build_id":
            return summary["build_id"] == self.hex
        # A file without a build id: the writer hashed its code, .text or (minidump-writer)
        # its first executable section.
        ids = [i for i in (summary["file_id"], summary["other_file_id"]) if i is not None]
        if self.kind == "file_id":
            return self.hex in ids
        return any(i.ljust(32, "0")[:32] == self.hex for i in ids)

    def __str__(self) -> str:
        return self.hex if self.kind != "guid" else f"GUID {self.hex} (age 0)"

    @property
    def build_id(self) -> str | None:
        """The build id recorded, where the record holds one (a GUID is only a part of it)."""
        return self.hex if self.kind != "guid" else None


def _file_id_text(summary: ElfSummary, want: Identity) -> str:
    """A file's identity in the form ``want`` has, for a message."""
    theirs = summary["build_id"] if want.kind == "build_id" else summary["file_id"]
    if theirs is None:
        return "no build id"
    return theirs if want.kind != "guid" else f"GUID {theirs.ljust(32, '0')[:32]}"


def _named_as(path: str, executable: str | None, fname: str | None) -> bool:
    """Whether ``path`` has the file name of ``executable`` or the process name ``fname``
    (NT_PRPSINFO's pr_fname, cut to 15 characters)."""
    base = os.path.basename(path)
    if executable is not None and base == os.path.basename(executable):
        return True
    if fname is None:
        return False
    return base == fname or (len(fname) == _FNAME_MAX and base.startswith(fname))


class _FileFinder:
    """Finds module files: the explicit file, else SYSROOT + path, the path itself, then each
    search directory by file name. A candidate must be an ELF file of the core's architecture;
    among those, one whose build id matches the core's is preferred."""

    def __init__(
        self,
        arch: str,
        sysroot: str | os.PathLike[str] | None,
        search: Sequence[str | os.PathLike[str]] | None,
        readable_at: dict[str, str] | None = None,
    ) -> None:
        self._arch = arch
        self._readable_at = readable_at or {}
        self._sysroot = os.fspath(sysroot) if sysroot is not None else None
        self._search = [os.fspath(d) for d in search or ()]
        self._summaries: dict[str, ElfSummary | str | None] = {}

    def summary(self, file: str) -> ElfSummary | None:
        s = self._check(file)
        return s if isinstance(s, dict) else None

    def _check(self, file: str) -> ElfSummary | str | None:
        """The file's elf_summary; why this file cannot be used (another machine's ELF file, or
        not a regular file: a FIFO, a device, never opened); None: not an ELF file."""
        if file not in self._summaries:
            try:
                s = elf_summary(file)
            except ElfError as e:
                # The native reader says what a file that is not a regular file is.
                why = str(e).removeprefix(f"{file}: ")
                self._summaries[file] = None if os.path.isfile(file) else f"{file} {why}"
            else:
                ok = s["machine"] == self._arch
                self._summaries[file] = s if ok else f"{file} is {s['machine']}, not {self._arch}"
        return self._summaries[file]

    def _candidates(self, path: str) -> list[str]:
        if path in self._readable_at:
            return [self._readable_at[path]]
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        out = []
        if self._sysroot is not None:
            out.append(os.path.join(self._sysroot, path.lstrip("/")))
        out.append(path)
        name = os.path.basename(path)
        out.extend(os.path.join(d, name) for d in self._search)
        return list(dict.fromkeys(out))

    def find(
        self, path: str, identity: Identity | None, explicit: str | None
    ) -> tuple[str | None, ElfSummary | None, list[str]]:
        """(file, its summary, why ELF files found were rejected)."""
        if explicit is not None:
            s = self._check(explicit)
            if not isinstance(s, dict):
                exists = os.path.exists(explicit)
                why = s or ("not an ELF file" if exists else "no such file")
                raise CoreError(f"executable {explicit}: {why}")
            return explicit, s, []
        fallback: tuple[str, ElfSummary] | None = None
        rejected: list[str] = []
        for candidate in self._candidates(path):
            if not os.path.exists(candidate):  # a FIFO or a device is a reason, given below
                continue
            s = self._check(candidate)
            if s is None:
                continue
            if isinstance(s, str):
                rejected.append(s)
            elif identity is None or identity.matches(s):
                return candidate, s, []
            elif fallback is None:
                fallback = candidate, s
        if fallback is not None:
            return fallback[0], fallback[1], []
        return None, None, rejected
