"""perf.data recordings from Python: ``Recording(path).samples()`` gives every sample's stack,
unwound and symbolized by the native pipeline that ``stackwalk perf`` runs (the same options,
the same frames as its ``--json``); ``folded()`` counts them as folded stacks (its
``--collapsed``); ``stackdb()`` counts their return-address traces in a ``StackDB``::

    recording = stackwalk.Recording("perf.data")
    for sample in recording.samples():
        print(sample.tid, [f.function for f in sample.frames])
    print(recording.warnings, recording.error)

The native pipeline writes each run to a temporary file (the samples as records, numbers as
numbers: ``rust/render/records.rs``) that is read back as it is iterated, so a recording of any
length takes the memory of one sample at a time in Python."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stackwalk._core import SampleRecords, StackDB, perf_report
from stackwalk.core import DEBUG_ROOT

if TYPE_CHECKING:
    from stackwalk._core import _PerfSummary

__all__ = ["ProfileFrame", "Recording", "Sample"]


@dataclass(frozen=True, slots=True)
class ProfileFrame:
    """One frame of a sample: the kernel's (``kernel``: found by the kernel's unwinder, its
    trust None) or the user stack's, innermost first, as ``stackwalk perf --json`` gives it,
    with addresses as numbers. An inlined function is a frame of its own (``inline``) before
    the one it is inlined in, at the same ``pc``."""

    pc: int
    module: str | None
    module_offset: int
    function: str | None
    function_offset: int | None
    kernel: bool
    trust: str | None  # context, cfi, frame_pointer, scan; None for the kernel's frames
    file: str | None = None  # source file, line and column, with inline frames on
    line: int | None = None
    column: int | None = None
    inline: bool = False


@dataclass(frozen=True, slots=True)
class Sample:
    """A sample: its process, thread, time (ns) and command name, and its frames."""

    pid: int
    tid: int
    time: int
    comm: str
    frames: tuple[ProfileFrame, ...]

    @classmethod
    def from_json(cls, sample: dict[str, Any]) -> Sample:
        """A sample from its object in ``stackwalk perf --json``'s lines (docs/json.md):
        hex strings read as numbers."""

        def frame(f: dict[str, Any]) -> ProfileFrame:
            offset = f["function_offset"]
            return ProfileFrame(
                int(f["pc"], 16), f["module"], int(f["module_offset"], 16), f["function"],
                None if offset is None else int(offset, 16), f["kernel"], f["trust"],
                f.get("file"), f.get("line"), f.get("column"), f.get("inline", False),
            )  # fmt: skip

        frames = tuple(frame(f) for f in sample["frames"])
        return cls(sample["pid"], sample["tid"], sample["time"], sample["comm"], frames)


class Recording:
    """A ``perf record --call-graph dwarf`` file, read with ``stackwalk perf``'s options:
    ``jobs`` worker threads (0: one per CPU), ``max_frames`` (each sample's first N kernel and
    N user frames), ``inline`` frames and source lines, ``perf_map_dir`` (JIT code's perf
    maps; None: none), ``strategies`` where CFI fails, and where files are found: ``sysroot``,
    ``lib_search_path``, ``debug_root``, ``offline`` (nothing fetched from debuginfod).

    After each run, ``warnings`` (files missing, other builds...), ``modules_missing``, and
    ``error``: why the reading stopped early (a damaged or cut file), after the samples before
    the damage were given; None when the whole file was read."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        jobs: int = 0,
        max_frames: int | None = None,
        inline: bool = True,
        perf_map_dir: str | os.PathLike[str] | None = "/tmp",
        strategies: Sequence[str] = ("cfi", "frame_pointer"),
        sysroot: str | os.PathLike[str] | None = None,
        lib_search_path: Sequence[str | os.PathLike[str]] = (),
        debug_root: str | os.PathLike[str] = DEBUG_ROOT,
        offline: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self._options: dict[str, Any] = {
            "jobs": jobs,
            "max_frames": max_frames,
            "inline": inline,
            "perf_map_dir": perf_map_dir,
            "strategies": list(strategies),
            "sysroot": sysroot,
            "lib_search_path": list(lib_search_path),
            "debug_root": debug_root,
            "offline": offline,
        }
        self.summary: _PerfSummary | None = None

    @property
    def warnings(self) -> list[str]:
        return self.summary["warnings"] if self.summary else []

    @property
    def modules_missing(self) -> list[str]:
        return self.summary["modules_missing"] if self.summary else []

    @property
    def error(self) -> str | None:
        return self.summary["error"] if self.summary else None

    @contextlib.contextmanager
    def _output(self, format: str) -> Iterator[str]:
        """The path of one run's output in ``format`` ("records", "collapsed"), a temporary
        file, there while the context is."""
        with tempfile.TemporaryDirectory(prefix="stackwalk-perf-") as directory:
            output = os.path.join(directory, "out")
            self.summary = perf_report(self.path, format, output=output, **self._options)
            yield output

    def samples(self) -> Iterator[Sample]:
        """Every sample, in the order ``stackwalk perf`` writes them (by time): read from the
        run's records (``SampleRecords``), numbers as numbers."""
        with self._output("records") as output:
            for pid, tid, time, comm, frames in SampleRecords(output):
                yield Sample(pid, tid, time, comm, tuple(ProfileFrame(*f) for f in frames))

    def folded(self) -> dict[str, int]:
        """The folded stacks (``comm;outermost;...;innermost``, as stackcollapse-perf writes
        them) and how many samples each has."""
        out: dict[str, int] = {}
        with (
            self._output("collapsed") as output,
            open(output, encoding="utf-8", errors="surrogateescape") as lines,
        ):
            for line in lines:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                out[stack] = int(count)
        return out

    def stackdb(self, *, kernel: bool = False) -> StackDB:
        """Each sample's user frames' pcs (with ``kernel``, its kernel frames' first), counted
        in a stack-trace database: the same trace, the same entry. Inline frames are left out
        (they share their frame's pc)."""
        db = StackDB()
        for sample in self.samples():
            pcs = [f.pc for f in sample.frames if not f.inline and (kernel or not f.kernel)]
            if pcs:
                db.add(pcs)
        return db
