"""Rendering traces as text and JSON: the one place that formats output."""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from stackwalk._core import SymbolTable
from stackwalk.errors import ElfError


class FrameLike(Protocol):
    @property
    def pc(self) -> int: ...
    @property
    def sp(self) -> int: ...
    @property
    def cfa(self) -> int | None: ...
    @property
    def trust(self) -> str: ...
    @property
    def lookup_pc(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ModuleInfo:
    path: str
    start: int  # runtime range
    end: int
    bias: int
    # Its file is not surely the one the process ran (another build id, used as asked): the
    # frames in it, and those unwound through its CFI, may be wrong.
    doubtful: bool = False


@dataclass(frozen=True, slots=True)
class Location:
    module: ModuleInfo | None
    module_offset: int | None  # ELF address: pc − bias
    function: str | None
    function_offset: int | None


class Symbolizer:
    """Maps runtime addresses to module, ELF address and function. Symbol
    tables (the native SymbolTable: .symtab, else the build-id debug file's,
    else .dynsym; names demangled) are loaded once per module, on first use."""

    def __init__(
        self,
        modules: Iterable[ModuleInfo],
        images: dict[str, bytes] | None = None,
        *,
        debug_root: str | None = "/usr/lib/debug",
    ):
        self._modules = sorted(modules, key=lambda m: m.start)
        self._starts = [m.start for m in self._modules]
        self._tables: dict[str, SymbolTable | None] = {}
        self._images = images or {}
        self._debug_root = debug_root

    def module_for(self, address: int) -> ModuleInfo | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and address < self._modules[i].end:
            return self._modules[i]
        return None

    def _table(self, module: ModuleInfo) -> SymbolTable | None:
        if module.path not in self._tables:
            self._tables[module.path] = self._load_table(module.path)
        return self._tables[module.path]

    def _load_table(self, path: str) -> SymbolTable | None:
        image = self._images.get(path)
        if image is not None:
            try:
                return SymbolTable(image)
            except ElfError:
                return None
        return _file_table(path, self._debug_root)

    def locate(self, pc: int, lookup: int) -> Location:
        """Where ``pc`` is, its function looked up at ``lookup`` (a frame's
        ``lookup_pc``: pc − 1 for a return address, which may lie just past
        the end of a noreturn call's function, as gdb and eu-stack do)."""
        module = self.module_for(lookup)
        if module is None:
            return Location(None, None, None, None)
        # Modulo 2**64, as the unwinder takes biases: a module placed by a damaged core can
        # hold addresses below its bias.
        elf_address = (pc - module.bias) & _U64
        table = self._table(module)
        found = table.lookup((lookup - module.bias) & _U64) if table is not None else None
        if found is None:
            return Location(module, elf_address, None, None)
        name, offset = found
        return Location(module, elf_address, name, offset + (pc - lookup))


# The symbol tables of files, kept for the life of the process: a directory of cores names the
# same libraries again and again. Keyed by path and debug root, checked against the file's
# identity (a file replaced since is read again); the oldest goes past _TABLES_MAX.
_TABLES: dict[tuple[str, str | None], tuple[tuple[int, int, int, int], SymbolTable | None]] = {}
_TABLES_MAX = 256


def _file_table(path: str, debug_root: str | None) -> SymbolTable | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    key = (path, debug_root)
    cached = _TABLES.get(key)
    if cached is not None and cached[0] == identity:
        return cached[1]
    try:
        if debug_root is None:
            table: SymbolTable | None = SymbolTable(path)
        else:
            table = SymbolTable.for_file(path, debug_root)
    except (ElfError, OSError):
        table = None
    _TABLES.pop(key, None)
    if len(_TABLES) >= _TABLES_MAX:
        del _TABLES[next(iter(_TABLES))]
    _TABLES[key] = (identity, table)
    return table


_U64 = (1 << 64) - 1


def _hex(v: int | None) -> str | None:
    return None if v is None else f"{v:#x}"


def frame_dicts(frames: Sequence[FrameLike], symbolizer: Symbolizer) -> list[dict[str, Any]]:
    """The frames as JSON objects. A frame is ``doubtful`` from the first frame in a doubtful
    module on: its own name, and the registers its callers were unwound from, came from a file
    that may not be the one the process ran."""
    out = []
    doubtful = False
    for i, f in enumerate(frames):
        loc = symbolizer.locate(f.pc, f.lookup_pc)
        doubtful = doubtful or (loc.module is not None and loc.module.doubtful)
        out.append(
            {
                "index": i,
                "pc": _hex(f.pc),
                "sp": _hex(f.sp),
                "cfa": _hex(f.cfa),
                "trust": f.trust,
                "module": loc.module.path if loc.module else None,
                "module_offset": _hex(loc.module_offset),
                "function": loc.function,
                "function_offset": _hex(loc.function_offset),
                "doubtful": doubtful,
            }
        )
    return out


def frame_lines(frames: Sequence[FrameLike], symbolizer: Symbolizer) -> list[str]:
    """Frames as text, with how each was found."""
    return [f"{frame_text(d)}  {how_found(d)}" for d in frame_dicts(frames, symbolizer)]


def how_found(d: dict[str, Any]) -> str:
    """``[cfi]``, ``[cfi, doubtful]``: the trust of a frame, after it in the text."""
    return f"[{d['trust']}, doubtful]" if d.get("doubtful") else f"[{d['trust']}]"


def frame_text(d: dict[str, Any]) -> str:
    """One frame as gdb and eu-stack print it, e.g.
    ``#3  0x00007f1c2a83c24a in __libc_start_call_main+0x7a (/usr/lib/.../libc.so.6)``."""
    where = d["function"] or "??"
    if d["function"] and d["function_offset"] not in (None, "0x0"):
        where += f"+{d['function_offset']}"
    module = f" ({d['module']})" if d["module"] else ""
    return f"#{d['index']:<2} {int(d['pc'], 16):#018x} in {where}{module}"


def core_lines(doc: dict[str, Any]) -> list[str]:
    """The text report of ``stackwalk core``, from the same document ``--json`` prints."""
    sig = doc.get("signal")
    what = f"Core {doc['core']}"
    if doc.get("pid") is not None:
        what += f", pid {doc['pid']}"
    if doc.get("executable"):
        what += f", {doc['executable']}"
    lines = [what]
    if doc.get("crashing_thread") is None:
        # A snapshot (gcore's) of a process that did not crash.
        stopped = f", stopped by {sig['name']} (signal {sig['number']})" if sig else ""
        lines.append(f"Snapshot of a running process{stopped}: no thread crashed")
    elif sig:
        at = f" at address {sig['address']}" if sig.get("address") else ""
        lines.append(f"Killed by {sig['name']} (signal {sig['number']}){at}")
    for thread in doc["threads"]:
        crashed = " (crashed)" if thread["tid"] == doc.get("crashing_thread") else ""
        lines.append("")
        lines.append(f"Thread {thread['tid']}{crashed}:")
        lines.extend(f"{frame_text(f)}  {how_found(f)}" for f in thread["frames"])
        if thread["end"] not in ("end_of_stack", "pc_zero"):
            lines.append(f"   (stopped early: {thread['end']}: {thread.get('end_detail', '')})")
    return lines
