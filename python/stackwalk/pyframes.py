"""Python frames among the native ones: the threads of a CPython interpreter read from a core's
or a live process's memory (``_core.python_threads``, ``rust/symbolize/pyframes/``), and put
in each thread's native stack after the ``_PyEval_EvalFrameDefault`` call that runs them, as
``pystack`` shows them. CPython 3.10, 3.11 and 3.12 (their structure offsets built in), 3.13
and 3.14 (their offsets read from the ``_Py_DebugOffsets`` table at the start of the target's
``_PyRuntime``, checked: a damaged or missing table is a reason) are read, each tested on a real
interpreter (3.10 and 3.12: pyenv's; 3.14: Debian sid's build), and 3.13's free-threaded build
(3.13t, ``--disable-gil``: no GIL, so no thread holds it). Another version (3.9, 3.14t) is a
reason given in place of the Python frames, never a guess."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from stackwalk._core import SymbolizedFrame, python_threads

if TYPE_CHECKING:
    from stackwalk.core import Core  # which imports this module

# Where a report puts a python process's Python frames (``Core.to_dict(python=...)``).
Mode = Literal["mixed", "python", "native"]

__all__ = [
    "Mode",
    "PythonFrame",
    "PythonState",
    "PythonThread",
    "python_file_name",
    "read_python",
    "with_python_frames",
]

# The native function that runs Python frames (and its cold part, GCC's
# ``_PyEval_EvalFrameDefault.cold``).
EVAL_FUNCTION = "_PyEval_EvalFrameDefault"


@dataclass(frozen=True)
class PythonFrame:
    """A Python function running: ``function`` is the code's ``co_name`` (what tracebacks
    print), ``qualname`` its ``co_qualname``; ``line`` None where the code has none.
    ``entry``: the first frame its native eval call ran. ``incomplete``: still being set up
    (its instruction is before its code's first ``RESUME``), a frame CPython shows nowhere;
    kept only for the native eval call it is the first frame of (see ``groups``)."""

    function: str
    qualname: str
    file: str
    line: int | None
    entry: bool
    incomplete: bool = False


@dataclass(frozen=True)
class PythonThread:
    """A thread state: ``tid`` the OS thread it runs on, ``thread_id`` ``threading.get_ident()``'s,
    frames innermost first, ``stop`` why they end before the thread's first frame (None:
    they do not)."""

    tid: int
    thread_id: int
    holds_gil: bool
    frames: tuple[PythonFrame, ...]
    stop: str | None

    def groups(self) -> list[tuple[PythonFrame, ...]]:
        """The frames split by native eval call, innermost first, each ending with its entry
        frame (frames past the last entry frame, a chain cut short, are a last group);
        incomplete frames left out (a call whose only frame is one has an empty group)."""
        out: list[tuple[PythonFrame, ...]] = []
        start = 0
        for i, f in enumerate(self.frames):
            if f.entry:
                out.append(self.frames[start : i + 1])
                start = i + 1
        if start < len(self.frames):
            out.append(self.frames[start:])
        return [tuple(f for f in group if not f.incomplete) for group in out]


@dataclass(frozen=True)
class PythonState:
    """The interpreter of a process: its version ("3.10" to "3.14"), threads, what could
    not be read (``warnings``), and ``error``: why no thread could be (None if some could)."""

    module: str
    version: str
    threads: tuple[PythonThread, ...]
    warnings: tuple[str, ...]
    error: str | None


def python_file_name(path: str) -> str | None:
    """A module's file name if it is named like a CPython interpreter's (``python3.11``,
    ``libpython3.13.so.1.0``), else None: where Python frames are looked for."""
    name = os.path.basename(path).removesuffix(" (deleted)")
    return name if name.startswith("python") or name.startswith("libpython") else None


def read_python(core: Core) -> PythonState | None:
    """The Python threads of ``core`` (a ``Core``, ``Process`` or ``Minidump``), None when no
    module of it is a CPython interpreter whose file is here."""
    for m in core.modules:
        name = python_file_name(m.path)
        if name is None or not m.found:
            continue
        file = m.file or m.path
        tids = [t.tid for t in core.threads]
        got = python_threads(core.memory, file, name, m.bias, tids)
        if got is None:
            continue
        version, threads, warnings, error = got
        return PythonState(
            module=m.path,
            version=version,
            threads=tuple(
                PythonThread(
                    tid=tid,
                    thread_id=ident,
                    holds_gil=gil,
                    frames=tuple(PythonFrame(*f) for f in frames),
                    stop=stop,
                )
                for tid, ident, gil, frames, stop in threads
            ),
            warnings=tuple(warnings),
            error=error,
        )
    return None


def _is_eval(f: SymbolizedFrame) -> bool:
    name = f.function or ""
    return not f.inline and (name == EVAL_FUNCTION or name.startswith(EVAL_FUNCTION + "."))


def with_python_frames(
    native: Iterable[SymbolizedFrame], thread: PythonThread | None, mode: Mode
) -> list[SymbolizedFrame | PythonFrame]:
    """A thread's native frames with its Python frames: after each native eval call, the
    frames it runs (``mode`` "mixed"), or the Python frames alone ("python"). Python frames
    left when the native eval calls run out (a native stack cut short) come last."""
    groups = thread.groups() if thread is not None else []
    if mode == "python":
        return [f for group in groups for f in group]
    out: list[SymbolizedFrame | PythonFrame] = []
    for f in native:
        out.append(f)
        if groups and _is_eval(f):
            out.extend(groups.pop(0))
    out.extend(f for group in groups for f in group)
    return out
