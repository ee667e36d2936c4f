"""``stackwalk.Processor``: what a long-running crash service keeps, and calls once per crash::

    processor = Processor(symbols=["/srv/symbols"], memory_budget="512MiB")
    report = processor.process("crash.dmp")     # a minidump or a core: a path, or its bytes
    print(report.signature, report.frames[0]["function"])

Each call opens the crash as ``stackwalk minidump`` or ``stackwalk core`` would (told by its
first bytes), unwinds and symbolizes every thread, and signs the crashing thread's stack as
``stackwalk triage`` does. The files read on the way (modules, their CFI, symbol tables, DWARF,
Breakpad symbol files) are kept by the process for the next crash; with ``memory_budget``, the
process's resident memory is checked before and after each crash, and above four fifths of the
budget first their pages leave memory (what was parsed of them stays), then those kept longest
unused are dropped (half of each cache, then all of it) and the freed heap given back, so that
a worker fed any sequence of crashes stays under its budget while no single crash needs more.
``process`` may be called from several threads at once: the caches are shared under locks, and
the native work runs without the GIL.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stackwalk._core import release_file_pages, trim_caches
from stackwalk.core import DEBUG_ROOT, Core
from stackwalk.errors import StackwalkError
from stackwalk.minidump import Minidump
from stackwalk.signature import Rules, signature

__all__ = ["Processor", "Report", "parse_size", "report_of"]

_SIZE = re.compile(r"(?P<number>[0-9]+)\s*(?P<unit>[KMGT]?)(?:i?B)?", re.IGNORECASE)
_UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
# Where trimming starts: this share of the budget.
_HIGH_WATER = 0.8


def parse_size(size: int | str) -> int:
    """A size in bytes: a number, or text with a binary unit ("512MiB", "512M", "1G")."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size <= 0:
            raise StackwalkError(f"a memory budget of {size} bytes: it must be more than 0")
        return size
    m = _SIZE.fullmatch(str(size).strip())
    if m is None or int(m["number"]) == 0:
        raise StackwalkError(f"not a memory budget: {size!r} (bytes, or 512MiB, 2G...)")
    return int(m["number"]) << _UNITS[m["unit"].upper()]


def resident_bytes() -> int:
    """This process's resident memory (its RSS), in bytes."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Report:
    """One crash processed: what crashed, its signature, the crashing thread's frames (as
    ``--json`` gives them), and the whole snapshot document (docs/json.md)."""

    kind: str  # "core" or "minidump"
    signal: str | None
    crashing_tid: int | None
    signature: str
    bucket: str
    frames: list[dict[str, Any]]
    document: dict[str, Any] = field(repr=False)
    warnings: list[str] = field(default_factory=list)


def report_of(core: Core, rules: Rules | None = None, *, crashing_only: bool = False) -> Report:
    """The report of a crash opened already: every thread walked (with ``crashing_only``, the
    crashing thread's alone), the crashing one (or, in a dump written on request, the one its
    exception stream blames) signed with ``rules`` (Socorro's by default)."""
    crashing = core.crashing_tid
    if crashing is None:
        crashing = getattr(core, "blamed_tid", None)
    tids = {crashing} if crashing_only and crashing is not None else None
    doc = core.to_dict(tids=tids, python="mixed")
    thread = next((t for t in doc["threads"] if t["tid"] == crashing), None)
    frames = thread["frames"] if thread is not None else None
    sig = signature(frames, rules)
    return Report(
        kind="minidump" if isinstance(core, Minidump) else "core",
        signal=core.signal.name if core.signal is not None else None,
        crashing_tid=crashing,
        signature=sig.text,
        bucket=sig.bucket,
        frames=frames or [],
        document=doc,
        warnings=list(core.warnings),
    )


class Processor:
    """See the module's docstring. ``symbols``: Breakpad symbol stores (directories) and
    symbol servers (``http://``, ``https://`` URLs), searched in order, as ``stackwalk minidump
    --symbols-path``/``--symbols-url`` take them; the other options are ``Core.open``'s;
    ``rules``: the signature rules (``Rules.load``'s file; Socorro's by default)."""

    def __init__(
        self,
        *,
        symbols: Sequence[str | os.PathLike[str]] = (),
        sysroot: str | os.PathLike[str] | None = None,
        lib_search_path: Sequence[str | os.PathLike[str]] | None = None,
        debug_root: str | os.PathLike[str] | None = DEBUG_ROOT,
        offline: bool = False,
        memory_budget: int | str | None = None,
        rules: str | os.PathLike[str] | None = None,
    ) -> None:
        self.memory_budget = parse_size(memory_budget) if memory_budget is not None else None
        self._options: dict[str, Any] = {
            "sysroot": sysroot,
            "lib_search_path": lib_search_path,
            "debug_root": debug_root,
            "offline": offline,
        }
        where = [os.fspath(p) for p in symbols]
        servers = [w for w in where if w.startswith(("http://", "https://"))]
        self._dump_options: dict[str, Any] = {
            "symbols_path": [w for w in where if w not in servers],
            "symbols_url": servers,
        }
        self._rules = Rules.load(rules)
        self._trimming = threading.Lock()
        self.trims = 0  # how many times the caches were trimmed to keep to the budget

    def process(self, source: str | os.PathLike[str] | bytes) -> Report:
        """The report of one crash: a minidump or a core (compressed too), at a path or in
        ``bytes``. StackwalkError (a MinidumpError, a CoreError) where it cannot be read."""
        self._keep_to_budget()
        try:
            if isinstance(source, bytes | bytearray | memoryview):
                return self._process_bytes(bytes(source))
            return self._process_path(os.fspath(source))
        finally:
            self._keep_to_budget()

    def _process_bytes(self, data: bytes) -> Report:
        fd = os.memfd_create("stackwalk-crash", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            return self._process_path(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)

    def _process_path(self, path: str) -> Report:
        try:
            # (Never opened unless a regular file: a FIFO would block the read.)
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise StackwalkError(f"{path}: not a regular file")
            with open(path, "rb") as f:
                minidump = f.read(4) == b"MDMP"
        except OSError as e:
            raise StackwalkError(f"{path}: {e.strerror or e}") from None
        core = (
            Minidump.open(path, **self._options, **self._dump_options)
            if minidump
            else Core.open(path, **self._options)
        )
        if not core.threads:
            reasons = "; ".join(core.warnings) or "no thread in it"
            raise StackwalkError(f"{path}: no thread could be read ({reasons})")
        return report_of(core, self._rules)

    def _keep_to_budget(self) -> None:
        """Above four fifths of the budget, first let the kept files' pages leave memory (what
        was parsed of them stays: they are read back from the page cache, far cheaper than
        parsing again); then, if that was not enough, drop the files kept longest unused: half
        of each cache, then all of it."""
        if self.memory_budget is None:
            return
        high = self.memory_budget * _HIGH_WATER
        if resident_bytes() <= high:
            return
        with self._trimming:
            for step in (release_file_pages, lambda: trim_caches(0.5), lambda: trim_caches(0.0)):
                if resident_bytes() <= high:
                    break
                step()
                self.trims += 1
