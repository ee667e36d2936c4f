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
from typing import TYPE_CHECKING, Any

from stackwalk._core import MinidumpFile, SymbolizedFrame
from stackwalk.core import Core, CoreModule, Signal, Stack, Thread
from stackwalk.errors import MinidumpError

if TYPE_CHECKING:
    from stackwalk._core import _DumpModule  # the stub's alone

__all__ = [
    "Minidump", "MinidumpError", "CoreModule", "Signal", "Thread", "minidump_stackwalk_doc",
]  # fmt: skip


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
        A server that does not answer is one warning, and the frames without its symbols."""
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
        # Before the modules are placed: their symbol files' STACK CFI unwinds them.
        self.symbols_path = tuple(os.fspath(d) for d in symbols_path)
        self.symbols_url = tuple(symbols_url)
        super().__init__(path, executable, **options)

    def _open_source(self, max_size: int | None) -> MinidumpFile:
        dump = MinidumpFile(self.path)
        # The module list's modules (their ids), by where each starts.
        self._listed = {m["base"]: m for m in dump.modules}
        self.system = dump.system
        self.crash = dump.crash
        return dump

    _SNAPSHOT_KIND = "minidump"

    def to_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``Core.to_dict``'s document (``"kind": "minidump"``, ``path`` the dump's), and
        what a minidump says besides: ``system`` (os,
        os_version, cpu, as minidump-stackwalk names them), ``crash`` (reason, address, and the
        thread the exception stream names, as minidump-stackwalk words them for the dump's
        system: a Windows exception, a Mach exception, a signal), and each module's Breakpad
        ``debug_file``, ``debug_id`` and ``code_id``."""
        doc = super().to_dict(*args, **kwargs)
        system = self.system
        doc["system"] = {k: system[k] for k in ("os", "os_version", "cpu")}
        crash = self.crash
        doc["crash"] = None
        if crash is not None:
            doc["crash"] = {
                "reason": crash["reason"],
                "address": f"{crash['address']:#x}",
                "thread": crash["tid"],
            }
        for module, placed in zip(doc["modules"], self.modules, strict=True):
            listed = self._listed.get(placed.start)
            module["debug_file"] = listed["debug_file"] if listed else None
            module["debug_id"] = listed["debug_id"] if listed else None
            module["code_id"] = listed["code_id"] if listed else None
        return doc

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


# -- minidump-stackwalk's JSON ---------------------------------------------------------------


def minidump_stackwalk_doc(dump: Minidump) -> dict[str, object]:
    """The document ``minidump-stackwalk --json`` prints for this dump (its fields that say
    what crashed, where, and the modules; per frame: frame, trust, module, module_offset and
    offset -- a caller's at its return address less one, as Breakpad gives them -- function,
    function_offset, file, line, missing_symbols and inlines), from stackwalk's unwinding, so
    that pipelines built on minidump-stackwalk can take it."""
    source = dump._core
    assert isinstance(source, MinidumpFile)
    listed = source.modules  # in the module list's order, as minidump-stackwalk gives them
    stacks = {stack.thread.tid: stack for stack in dump._stacks()[0]}
    width = 10 if source.word_size == 4 else 18  # 0x00000045, 0x0000000000000045

    def hex_(value: int | None) -> str | None:
        return None if value is None else f"{value:#0{width}x}"

    def module_of(pc: int) -> _DumpModule | None:
        return next((m for m in listed if m["base"] <= pc < m["end"]), None)

    def frames(stack: Stack) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        inlines: list[dict[str, object]] = []
        for f in stack.frames:
            assert isinstance(f, SymbolizedFrame)  # (no Python frames asked for)
            if f.inline:
                inlines.append({"function": f.function, "file": f.file, "line": f.line})
                continue
            # Where the frame was looked up: a caller at its return address less one (inside
            # the call), as Breakpad gives callers; frame 0 and a frame a signal interrupted at
            # their pc.
            pc, offset, at = f.pc, f.function_offset, f.lookup_pc
            if offset is not None and offset < pc - at:
                # A signal trampoline's first instruction, where a handler returns: the
                # function named is the one at the pc, not before it.
                at = pc
            found = module_of(at)
            out.append({
                "frame": len(out),
                "trust": f.trust,
                "module": module_basename(found["name"]) if found else None,
                "module_offset": hex_(at - found["base"]) if found else None,
                "offset": hex_(at),
                "function": f.function,
                "function_offset": hex_(offset - (pc - at)) if offset is not None else None,
                "file": f.file,
                "line": f.line,
                "missing_symbols": f.function is None and found is not None,
                "inlines": inlines or None,
            })  # fmt: skip
            inlines = []
        return out

    # The dump's thread list's order (the source gives the crashing thread first), which
    # minidump-stackwalk keeps and its crashing thread's threads_index counts in.
    tids = [tid for tid, _, _ in sorted(source.threads, key=lambda t: t[2])]
    crash = source.crash
    crashing_index = tids.index(crash["tid"]) if crash and crash["tid"] in tids else None
    threads = []
    for tid in tids:
        walked = frames(stacks[tid]) if tid in stacks else []
        threads.append({"frame_count": len(walked), "frames": walked, "thread_id": tid,
                        "thread_name": None, "last_error_value": None})  # fmt: skip
    crash_info: dict[str, object] = {"type": None, "address": None, "crashing_thread": None}
    if crash is not None:
        crash_info = {"type": crash["reason"], "address": hex_(crash["address"]),
                      "crashing_thread": crashing_index}  # fmt: skip
    executable = dump.executable
    # The executable where it is known, else the module list's first (Breakpad and Crashpad write
    # the executable first; minidump-stackwalk takes the first as the main module).
    main = next((i for i, m in enumerate(listed) if executable and m["name"] == executable), None)
    if main is None and listed:
        main = 0
    system = source.system
    return {
        "status": "OK",
        "pid": source.pid,
        "system_info": {
            "os": system["os"],
            "os_ver": system["os_version"],
            "cpu_arch": system["cpu"],
        },  # fmt: skip
        "crash_info": crash_info,
        "crashing_thread": (
            {**threads[crashing_index], "threads_index": crashing_index}
            if crashing_index is not None
            else None
        ),
        "main_module": main,
        "modules": [
            {
                "base_addr": hex_(m["base"]),
                "end_addr": hex_(m["end"]),
                "filename": module_basename(m["name"]),
                "debug_file": m["debug_file"] or "",
                "code_id": m["code_id"] or "",
                "debug_id": m["debug_id"] or "",
                "missing_symbols": False,
                "loaded_symbols": False,
                "corrupt_symbols": False,
                "symbol_url": None,
                "version": None,
            }  # fmt: skip
            for m in listed
        ],
        "thread_count": len(threads),
        "threads": threads,
    }
