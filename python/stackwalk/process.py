"""Live processes: ``stackwalk pid PID`` and ``Process.attach(pid)``.

Every thread is stopped for as short a time as can be (ptrace ``PTRACE_SEIZE`` and
``PTRACE_INTERRUPT``), its registers read, its stack, the vdso and each module's first page
copied (``process_vm_readv``), and the process let go; the copy is then unwound and symbolized
as a core dumped at that moment would be (``Process`` is a ``Core``: the same threads, modules,
``to_dict``). No gdb, no debug info needed. A library deleted since it was loaded is read
through ``/proc/PID/map_files/``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from stackwalk._core import CoreFile, snapshot_process
from stackwalk.core import DEBUG_ROOT, Core
from stackwalk.unwinder import CRASH_STRATEGIES

__all__ = ["Process"]


class Process(Core):
    """A live process, copied at one moment; see the module docstring."""

    # How long the process was stopped, in seconds.
    stopped_for: float

    # /proc/PID/maps says which mappings are executable (snapshot_process lists them all).
    _code_mappings_known = True
    _ran_here = True

    @classmethod
    def attach(
        cls,
        pid: int,
        *,
        sysroot: str | os.PathLike[str] | None = None,
        lib_search_path: Sequence[str | os.PathLike[str]] | None = None,
        debug_root: str | os.PathLike[str] | None = DEBUG_ROOT,
        strategies: Sequence[str] = CRASH_STRATEGIES,
        perf_map: str | os.PathLike[str] | None = None,
        offline: bool = False,
    ) -> Process:
        """Stop ``pid``, copy what unwinding its threads needs, let it go. StackwalkError with
        one line saying why if it cannot be read (no such process, a zombie, not permitted).
        ``perf_map``: a JIT's names for its code, a perf map or a jitdump (default:
        /tmp/jit-PID.dump, else /tmp/perf-PID.map, if there is one).
        The other options are ``Core.open``'s: a module whose file or DWARF is not here is
        fetched from the debuginfod servers of ``DEBUGINFOD_URLS`` unless ``offline`` (or
        ``STACKWALK_OFFLINE`` is set)."""
        options: dict[str, Any] = {}
        if perf_map is not None:
            options["perf_map"] = perf_map
        return cls(
            pid,
            sysroot=sysroot,
            lib_search_path=lib_search_path,
            debug_root=debug_root,
            strategies=strategies,
            offline=offline,
            **options,
        )

    def __init__(self, pid: int, **options: Any) -> None:
        self._pid = pid
        # A JIT's names for its code, where it writes them for perf: its jitdump (CPython
        # 3.13's -X perf_jit, V8's --perf-prof: names and unwind tables), else its perf map
        # (node --perf-basic-prof, the JVM's agents, LuaJIT, CPython 3.12's -X perf).
        for written in (f"/tmp/jit-{pid}.dump", f"/tmp/perf-{pid}.map"):
            if "perf_map" not in options and os.path.isfile(written):
                options["perf_map"] = written
        super().__init__(f"pid {pid}", **options)

    def _open_source(self, max_size: int | None) -> CoreFile:
        source, stopped_ns, deleted = snapshot_process(self._pid)
        self.stopped_for = stopped_ns / 1e9
        self._readable_at = {os.fsdecode(path): via for path, via in deleted}
        return source

    _SNAPSHOT_KIND = "process"

    def _snapshot_path(self) -> str | None:
        return None  # no file: the process is in "pid"

    def _particular(self) -> dict[str, Any]:
        """A process's document says how long it was stopped (``"stopped_ms"``). A python
        process's interpreter state was copied while it was stopped, so its Python frames are
        those of that moment."""
        return {"stopped_ms": round(self.stopped_for * 1e3, 3)}
