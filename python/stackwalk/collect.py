"""``stackwalk collect``: the program the kernel pipes a crashing process's core to
(``/proc/sys/kernel/core_pattern`` starting with ``|``), writing a minidump and a one-line JSON
record of the crash into a spool directory::

    |/usr/local/bin/stackwalk collect --spool /var/spool/stackwalk %P %i %s %t %E

The core is read once, in order, never held whole (rust/source/corefile/stream.rs keeps what
the minidump takes: each thread's stack from its sp, the memory around its registers, the
vdso, each file mapping's first page), within a size and a time limit (the kernel, and the
crashed process with it, waits on the pipe). Each crash gets ``TIME-PID-SIGNAL.dmp`` and
``TIME-PID-SIGNAL.json`` (pid, thread, executable, signal, signature, the crashing thread's
frames), each made under a temporary name in ``SPOOL/.collect/`` and linked into place, never
over a file already there. The spool is kept under ``--max-spool`` bytes, its oldest crashes
removed first; ``stackwalk triage SPOOL`` reads its minidumps (the records beside them and the
``.collect`` work area are passed over).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from stackwalk._core import stream_core
from stackwalk.core import Core
from stackwalk.errors import StackwalkError
from stackwalk.processor import report_of
from stackwalk.triage import COLLECT_WORK

# The collector's work area inside the spool: temporary files and the lock (triage passes it
# over, and the records beside the minidumps).
WORK = COLLECT_WORK


@dataclass(frozen=True)
class Limits:
    """How much a crash may take: the most bytes of core read and seconds spent reading it (the
    rest is left unread), the most the spool holds, and what the minidump keeps of each stack
    and around each register."""

    max_core_size: int = 16 << 30
    timeout: float = 60.0
    max_spool: int = 1 << 30
    stack_bytes: int = 256 << 10
    around: int = 256


@dataclass(frozen=True)
class Crash:
    """What the kernel says of the crash (core_pattern's %P, %i, %s, %t, %E)."""

    pid: int | None = None
    tid: int | None = None
    signal: int | None = None
    time: int | None = None
    executable: str | None = None  # %E: the path with '!' for '/'


def collect(
    spool: str | os.PathLike[str],
    crash: Crash,
    limits: Limits = Limits(),
    *,
    fd: int = 0,
    module_options: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Read the core on ``fd`` into ``spool``: the path of its JSON record (written whatever
    happened: with ``error`` set where no minidump could be made; gone already where the crash
    alone is more than the spool may hold), and the record."""
    spool = os.fspath(spool)
    work = os.path.join(spool, WORK)
    os.makedirs(work, mode=0o700, exist_ok=True)
    base = _base_name(crash)
    record: dict[str, Any] = {
        "pid": crash.pid,
        "tid": crash.tid,
        "executable": crash.executable.replace("!", "/") if crash.executable else None,
        "signal": crash.signal,
        "time": crash.time,
    }
    temporary = os.path.join(work, f"{base}.{secrets.token_hex(6)}")
    core_path, dump_path = f"{temporary}.core", f"{temporary}.dmp"
    try:
        try:
            read, stopped = stream_core(
                fd, core_path, limits.max_core_size, limits.timeout, limits.stack_bytes,
                limits.around,
            )  # fmt: skip
            record["core_bytes_read"] = read
            if stopped is not None:
                record["core_stopped"] = stopped
            core = Core.open(core_path, **(module_options or {}), offline=True)
            core.to_minidump(
                dump_path, stack_bytes=limits.stack_bytes, around=limits.around,
                time=crash.time if crash.time is not None and crash.time < 2**32 else 0,
            )  # fmt: skip
            record.update(_describe(core))
        except StackwalkError as e:
            record["error"] = str(e)
        # The collector's own peak memory (the core is never held whole).
        record["collect_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        with _locked(work):
            if "error" not in record:
                record["minidump"] = os.path.basename(_link_new(dump_path, spool, base, ".dmp"))
            line = json.dumps(record, sort_keys=True) + "\n"
            with open(temporary + ".json", "w", encoding="utf-8") as f:
                f.write(line)
            written = _link_new(temporary + ".json", spool, base, ".json")
            _cap(spool, limits.max_spool)
        return written, record
    finally:
        for path in (core_path, dump_path, temporary + ".json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _base_name(crash: Crash) -> str:
    """``TIME-PID-SIGNAL`` (the parts the kernel gave)."""
    parts = [crash.time, crash.pid, crash.signal]
    return "-".join(str(p) if p is not None else "x" for p in parts)


def _describe(core: Core) -> dict[str, Any]:
    """The record's fields from the core: its program, signal, signature, the crashing
    thread's frames (the crashing thread alone walked and named: ``report_of``)."""
    out: dict[str, Any] = {"executable": core.executable, "pid": core.pid}
    if core.signal is not None:
        out["signal"] = core.signal.number
        out["signal_name"] = core.signal.name
    report = report_of(core, crashing_only=True)
    out.update(crashing_tid=report.crashing_tid, signature=report.signature, frames=report.frames)
    return out


def _link_new(source: str, spool: str, base: str, suffix: str) -> str:
    """``source`` linked into ``spool`` as ``BASE[-N]SUFFIX``, the first such name that is
    free: a file already there is never replaced."""
    for n in range(10_000):
        name = os.path.join(spool, f"{base}{f'-{n}' if n else ''}{suffix}")
        try:
            os.link(source, name)
        except FileExistsError:
            continue
        return name
    raise StackwalkError(f"{spool}: no free name for {base}{suffix}")


@contextlib.contextmanager
def _locked(work: str) -> Iterator[None]:
    """The spool to one collector at a time (many crash at once in a storm)."""
    fd = os.open(os.path.join(work, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _cap(spool: str, most: int) -> None:
    """Remove the oldest crashes (a minidump and its record together) until the spool holds
    at most ``most`` bytes."""
    crashes: dict[str, list[os.DirEntry[str]]] = {}
    with os.scandir(spool) as entries:
        for entry in entries:
            stem, dot, suffix = entry.name.rpartition(".")
            if dot and suffix in ("dmp", "json") and entry.is_file(follow_symlinks=False):
                crashes.setdefault(stem, []).append(entry)
    sizes = {stem: sum(e.stat().st_size for e in files) for stem, files in crashes.items()}
    total = sum(sizes.values())
    for stem in sorted(crashes, key=lambda s: (max(e.stat().st_mtime for e in crashes[s]), s)):
        if total <= most:
            break
        for entry in crashes[stem]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
        total -= sizes[stem]


def parse_crash(values: Sequence[str]) -> Crash:
    """core_pattern's %P %i %s %t %E, in that order, as given (any may be missing)."""
    given = [*values[:5], *[""] * (5 - len(values[:5]))]
    pid, tid, signal, time = (int(v) if v.isascii() and v.isdigit() else None for v in given[:4])
    return Crash(pid, tid, signal, time, given[4] or None)
