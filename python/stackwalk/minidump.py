"""Minidumps (Breakpad's, Crashpad's, ``minidump-writer``'s): the threads, exception, modules and
memory of a crashed process, unwound as a core is.

``Minidump.open(path)`` has the native core read the file with rust-minidump's ``minidump`` crate
(``stackwalk._core.MinidumpFile``: the thread list with each thread's CPU context, the memory
list and the stacks read in place, the module list with each module's build id from its
CodeView record, the exception stream, and the Linux maps, status, command line and auxv
streams). A minidump is one more source for the pipeline of ``stackwalk.core``: its mappings
(the maps stream, else the module list) place the modules by the same rule as a core's, each
module's file is found at its path (or under ``sysroot``) and used only if its build id is the
one the dump recorded, and the threads are unwound and symbolized as a core's are::

    dump = Minidump.open("crash.dmp")
    print(dump.crashing_tid, [hex(f.pc) for f in dump.threads[0].unwind().frames])

Damaged streams are lines in ``dump.warnings``; only a file whose header or stream directory
cannot be read is a MinidumpError.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from stackwalk._core import MinidumpFile, SymbolizedFrame
from stackwalk.core import Core, CoreModule, Signal, Thread
from stackwalk.errors import MinidumpError

__all__ = ["Minidump", "MinidumpError", "CoreModule", "Signal", "Thread"]


def nt_symbol_path(value: str | None) -> tuple[list[str], list[str]]:
    """The local stores and the symbol servers of Windows' ``_NT_SYMBOL_PATH`` as WinDbg reads
    it: elements separated by ``;``, each ``srv*[STORE*...]URL`` or
    ``symsrv*DLL*[STORE*...]URL`` (each STORE a downstream store, read before the server;
    stackwalk keeps what it downloads in its own cache), ``cache*DIR`` (a store), or a
    directory (a store). ``srv*`` with no URL names nothing here."""
    paths: list[str] = []
    urls: list[str] = []
    for element in filter(None, (e.strip() for e in (value or "").split(";"))):
        kind, *rest = element.split("*")
        match kind.lower():
            case "srv" | "symsrv":
                for part in rest[kind.lower() == "symsrv" :]:
                    if part.lower().startswith(("http://", "https://")):
                        urls.append(part)
                    elif part:
                        paths.append(part)
            case "cache":
                paths.extend(part for part in rest if part)
            case _:
                paths.append(element)
    return paths, urls


class Minidump(Core):
    """A minidump opened for unwinding: ``Core``'s interface (``threads``, ``crashing_tid``,
    ``signal``, ``modules``, ``to_dict()``), ``Minidump.open(path, ...)`` taking ``Core.open``'s
    options (``max_size`` does not apply: minidumps are read as they are)."""

    _FILE_KIND = "minidump"

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        executable: str | os.PathLike[str] | None = None,
        *,
        symbols_path: Sequence[str | os.PathLike[str]] = (),
        symbols_url: Sequence[str] = (),
        **options: Any,
    ) -> Minidump:
        """``Core.open``'s options, and ``symbols_path``: directories laid out as a Breakpad symbol
        store (``NAME/DEBUGID/NAME.sym``, as ``dump_syms`` output is kept), whose ``.sym`` files
        name the functions and lines of modules whose file is missing here or has no symbols,
        and unwind (their ``STACK CFI`` records) those whose file is missing; ``symbols_url``:
        symbol servers (HTTP, the same layout: Mozilla's, Sentry's) asked in order for the
        modules the stores lack, their files kept in a cache (debuginfod's cache directory,
        ``breakpad/``), read first; ``offline`` (or ``STACKWALK_OFFLINE``): the cache alone.
        A server that does not answer is one warning, and the frames without its symbols.
        ``_NT_SYMBOL_PATH``'s stores and servers come after these (see ``nt_symbol_path``)."""
        return cls(path, executable, symbols_path=symbols_path, symbols_url=symbols_url, **options)

    def __init__(
        self,
        path: str | os.PathLike[str],
        executable: str | os.PathLike[str] | None = None,
        *,
        symbols_path: Sequence[str | os.PathLike[str]] = (),
        symbols_url: Sequence[str] = (),
        **options: Any,
    ) -> None:
        # Before the modules are placed: their symbol files' STACK CFI unwinds them. Windows'
        # _NT_SYMBOL_PATH adds its stores and servers after the ones given.
        nt_paths, nt_urls = nt_symbol_path(os.environ.get("_NT_SYMBOL_PATH"))
        self.symbols_path = (*(os.fspath(d) for d in symbols_path), *nt_paths)
        self.symbols_url = (*symbols_url, *nt_urls)
        super().__init__(path, executable, **options)

    def _open_source(self, max_size: int | None) -> MinidumpFile:
        dump = MinidumpFile(self.path)
        # The module list's modules (their ids), by where each starts.
        self._listed = {m["base"]: m for m in dump.modules}
        self.system = dump.system
        self.crash = dump.crash
        return dump

    _SNAPSHOT_KIND = "minidump"

    def _particular(self) -> dict[str, Any]:
        """What a minidump's document says besides: ``system`` (os, os_version, cpu, as
        minidump-stackwalk names them) and ``crash`` (reason, address, and the thread the
        exception stream names, as minidump-stackwalk words them for the dump's system: a
        Windows exception, a Mach exception, a signal)."""
        system, crash = self.system, self.crash
        return {
            "system": (system["os"], system["os_version"], system["cpu"]),
            "crash": (crash["reason"], crash["address"], crash["tid"]) if crash else None,
        }

    def _module_ids(self, m: CoreModule) -> tuple[str | None, str | None, str | None] | None:
        """A module's Breakpad ``debug_file``, ``debug_id`` and ``code_id``, from the module
        list (None for a module the maps stream places where the list has none)."""
        listed = self._listed.get(m.start)
        return (listed["debug_file"], listed["debug_id"], listed["code_id"]) if listed else None

    def minidump_stackwalk_json(self, indent: int | None = 2) -> str:
        """The document ``minidump-stackwalk --json`` prints for this dump (what crashed,
        where, the modules; per frame: frame, trust, module, module_offset and offset -- a
        caller's at its return address less one, as Breakpad gives them -- function,
        function_offset, file, line, missing_symbols and inlines), from stackwalk's walks, so
        that pipelines built on minidump-stackwalk can take it
        (``rust/render/minidump_stackwalk.rs``)."""
        source = self._core
        assert isinstance(source, MinidumpFile)
        stacks = {
            stack.thread.tid: [f for f in stack.frames if isinstance(f, SymbolizedFrame)]
            for stack in self._stacks()[0]
        }
        return source.stackwalk_json(stacks, self.executable, indent)

    def module_name(self, path: str) -> str:
        """A module's file name, by the path rules of the system the dump comes from (a Windows
        dump names ``C:\\Windows\\System32\\ntdll.dll``), as minidump-stackwalk names it."""
        return module_basename(path)

    @property
    def blamed_tid(self) -> int | None:
        """The thread the exception stream names (the crashing one, or the one a dump written
        on request blames), if it is among the threads."""
        crash = self.crash
        tids = {t.tid for t in self.threads}
        return crash["tid"] if crash is not None and crash["tid"] in tids else None


def module_basename(path: str) -> str:
    """The last component of a module's path, by Windows' rules as well as POSIX's, as
    minidump-stackwalk takes it (``C:\\dir\\name.dll``: ``name.dll``)."""
    return path.rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
