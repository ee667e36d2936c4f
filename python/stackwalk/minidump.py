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

from stackwalk._core import MinidumpFile, read_sym_file, symbols_fetch
from stackwalk.core import Core, CoreModule, Signal, Thread
from stackwalk.errors import MinidumpError, StackwalkError

__all__ = [
    "Minidump", "MinidumpError", "CoreModule", "Signal", "Thread", "minidump_stackwalk_doc",
]  # fmt: skip


class Minidump(Core):
    """A minidump opened for unwinding: ``Core``'s interface (``threads``, ``crashing_tid``,
    ``signal``, ``modules``, ``to_dict()``), ``Minidump.open(path, ...)`` taking ``Core.open``'s
    options (``max_size`` does not apply: minidumps are read as they are)."""

    _FILE_KIND = "minidump"
    # Symbol stores (``NAME/DEBUGID/NAME.sym``), searched in order; then symbol servers (URLs
    # of stores over HTTP).
    symbols_path: tuple[str, ...] = ()
    symbols_url: tuple[str, ...] = ()

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
        self._offline = bool(options.get("offline", False))
        self._sym_files: dict[tuple[str, str], str | None] = {}
        super().__init__(path, executable, **options)

    def _sym_file(self, module: CoreModule) -> str | None:
        debug_id = breakpad_debug_id(self._build_id_at(module.start) or module.build_id)
        if debug_id is None:
            return None
        key = (os.path.basename(module.path), debug_id)
        # Asked for when the module is placed (its STACK CFI) and when it is symbolized: once.
        if key not in self._sym_files:
            self._sym_files[key] = self._find_sym_file(*key)
        return self._sym_files[key]

    def _find_sym_file(self, name: str, debug_id: str) -> str | None:
        """The module's .sym file: in the local stores, else from the symbol servers (through
        their cache). One that cannot be read is a warning, and none."""
        paths = (os.path.join(store, name, debug_id, name + ".sym") for store in self.symbols_path)
        path = next((p for p in paths if os.path.isfile(p)), None)
        if path is None and self.symbols_url:
            path, warnings = symbols_fetch(self.symbols_url, name, debug_id, offline=self._offline)
            self.warnings.extend(warnings)
        if path is not None:
            try:
                read_sym_file(path)
            except StackwalkError as e:
                self.warnings.append(f"symbol file not used: {e}")
                return None
        return path

    def _open_source(self, max_size: int | None) -> MinidumpFile:
        dump = MinidumpFile(self.path)
        # The module list's build ids, by where each module starts.
        self._build_ids = {base: build_id for base, _, _, build_id in dump.modules if build_id}
        return dump

    @property
    def blamed_tid(self) -> int | None:
        """The thread the exception stream names (the crashing one, or the one a dump written
        on request blames), if it is among the threads."""
        exception = self._core.exception  # type: ignore[union-attr]
        tids = {t.tid for t in self.threads}
        return exception[0] if exception is not None and exception[0] in tids else None

    def _build_id_at(self, start: int | None) -> str | None:
        return self._build_ids.get(start) if start is not None else None


# -- minidump-stackwalk's JSON ---------------------------------------------------------------

# rust-minidump's names of the architectures, and of the signals' codes it words.
_CPU_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "i386": "x86"}
_SI_CODES = {
    "SIGSEGV": {1: "SEGV_MAPERR", 2: "SEGV_ACCERR"},
    "SIGBUS": {1: "BUS_ADRALN", 2: "BUS_ADRERR", 3: "BUS_OBJERR"},
    "SIGFPE": {1: "FPE_INTDIV", 2: "FPE_INTOVF", 3: "FPE_FLTDIV", 4: "FPE_FLTOVF",
               5: "FPE_FLTUND", 6: "FPE_FLTRES", 7: "FPE_FLTINV", 8: "FPE_FLTSUB"},
    "SIGILL": {1: "ILL_ILLOPC", 2: "ILL_ILLOPN", 3: "ILL_ILLADR", 4: "ILL_ILLTRP",
               5: "ILL_PRVOPC", 6: "ILL_PRVREG", 7: "ILL_COPROC", 8: "ILL_BADSTK"},
}  # fmt: skip
# The exception code of a dump written on request, not for a crash.
_DUMP_REQUESTED = 0xFFFFFFFF


def breakpad_debug_id(build_id: str | None) -> str | None:
    """The debug id Breakpad and dump_syms give an ELF file: the first 16 bytes of its build id
    (zero-padded) as a GUID, its first three fields byte-swapped, and an age of 0."""
    if not build_id:
        return None
    raw = bytes.fromhex(build_id)[:16].ljust(16, b"\0")
    guid = raw[3::-1] + raw[5:3:-1] + raw[7:5:-1] + raw[8:]
    return guid.hex().upper() + "0"


def _hex16(value: int | None) -> str | None:
    return None if value is None else f"{value:#018x}"


def _crash_type(signo: int, code: int) -> str:
    import signal as _signal

    if signo == _DUMP_REQUESTED:
        return "DUMP_REQUESTED"
    try:
        name = _signal.Signals(signo).name
    except ValueError:
        return f"{signo:#x}"
    words = _SI_CODES.get(name, {}).get(code)
    return f"{name} / {words}" if words else name


def minidump_stackwalk_doc(dump: Minidump) -> dict[str, object]:
    """The document ``minidump-stackwalk --json`` prints for this dump (its fields that say
    what crashed, where, and the modules; per frame: frame, trust, module, module_offset and
    offset -- a caller's at its return address less one, as Breakpad gives them -- function,
    function_offset, file, line, missing_symbols and inlines), from stackwalk's unwinding, so
    that pipelines built on minidump-stackwalk can take it."""
    source = dump._core
    assert isinstance(source, MinidumpFile)
    listed = sorted(source.modules)  # (base, end, name, build id)
    doc = dump.to_dict()
    threads_by_tid = {t["tid"]: t for t in doc["threads"]}

    def module_of(pc: int) -> tuple[int, tuple[int, int, str, str | None]] | None:
        return next(((i, m) for i, m in enumerate(listed) if m[0] <= pc < m[1]), None)

    def frames(thread: dict[str, object]) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        inlines: list[dict[str, object]] = []
        for f in thread["frames"]:  # type: ignore[attr-defined]
            if f["inline"]:
                inlines.append({"function": f["function"], "file": f["file"], "line": f["line"]})
                continue
            pc = int(f["pc"], 16)
            at = pc if f["trust"] == "context" else pc - 1
            found = module_of(at)
            offset = f["function_offset"]
            out.append({
                "frame": len(out),
                "trust": f["trust"],
                "module": os.path.basename(found[1][2]) if found else None,
                "module_offset": _hex16(at - found[1][0]) if found else None,
                "offset": _hex16(at),
                "function": f["function"],
                "function_offset": _hex16(int(offset, 16) - (pc - at)) if offset else None,
                "file": f["file"],
                "line": f["line"],
                "missing_symbols": f["function"] is None and found is not None,
                "inlines": inlines or None,
            })  # fmt: skip
            inlines = []
        return out

    tids = [tid for tid, *_ in source.threads]
    exception = source.exception
    crashing_index = tids.index(exception[0]) if exception and exception[0] in tids else None
    threads = []
    for tid in tids:
        walked = frames(threads_by_tid[tid]) if tid in threads_by_tid else []
        threads.append({"frame_count": len(walked), "frames": walked, "thread_id": tid,
                        "thread_name": None, "last_error_value": None})  # fmt: skip
    crash_info: dict[str, object] = {"type": None, "address": None, "crashing_thread": None}
    if exception is not None:
        _, signo, code, address = exception
        crash_info = {"type": _crash_type(signo, code), "address": _hex16(address),
                      "crashing_thread": crashing_index}  # fmt: skip
    executable = dump.executable
    main = next((i for i, m in enumerate(listed) if executable and m[2] == executable), None)
    if main is None and listed:
        # Unknown: the module list's first (Breakpad writes the executable first; rust-minidump
        # takes the first as the main module).
        main = 0
    return {
        "status": "OK",
        "pid": source.pid,
        "system_info": {"os": "Linux", "cpu_arch": _CPU_ARCH.get(dump.arch, dump.arch)},
        "crash_info": crash_info,
        "crashing_thread": (
            {**threads[crashing_index], "threads_index": crashing_index}
            if crashing_index is not None
            else None
        ),
        "main_module": main,
        "modules": [
            {
                "base_addr": _hex16(base),
                "end_addr": _hex16(end),
                "filename": os.path.basename(name),
                "debug_file": os.path.basename(name),
                "code_id": build_id,
                "debug_id": breakpad_debug_id(build_id),
                "missing_symbols": False,
                "loaded_symbols": False,
                "corrupt_symbols": False,
                "symbol_url": None,
                "version": None,
            }  # fmt: skip
            for base, end, name, build_id in listed
        ],
        "thread_count": len(threads),
        "threads": threads,
    }
