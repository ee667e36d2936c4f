"""jitdump (``jit-PID.dump``): CPython 3.13 run with ``-X perf_jit`` under ``perf record -k 1
--call-graph dwarf`` writes a jitdump: a code load for each Python function's trampoline (its
name ``py::FUNCTION:FILE``, its bytes) with the ``.eh_frame`` that unwinds it. ``stackwalk perf``
reads the dump itself (where the recording saw it mapped), names the trampolines and unwinds
through them by that CFI.

The reference: ``perf inject --jit`` turns each code load into an ELF file of its own
(``jitted-PID-N.so``, the CFI in it), after which ``perf script`` names and unwinds the same
frames: every sample's user frames must be perf's, name for name (or the same symbol's
aliases) and offset for offset. Without the dump, the walk stops at the first trampoline, as
it did before stackwalk read jitdumps: the dump is what carries the walk.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from perfdata import PERF, RECORD, parse_script, perf_env, perf_script, run
from test_perf import aliases
from test_pyframes import interpreters

# A fixed amount of work (not a time: the samples must not depend on the machine's load):
# outer -> middle x4 -> leaf, each a Python function with a trampoline of its own.
SCRIPT = """
def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def middle(d, n):
    return leaf(n) if d == 0 else middle(d - 1, n) + 1

def outer(rounds):
    t = 0
    for _ in range(rounds):
        t += middle(3, 20000)
    return t

print(outer(150))
"""
JIT_NAME = re.compile(r"py::(?P<function>[^:]+):(?P<file>.+)")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(the recording, perf's home, the dump): CPython 3.13's dump stays in /tmp while the
    module's tests run, and is removed after."""
    python = interpreters()["3.13"]
    assert not python.missing and python.python, python.missing
    tmp = tmp_path_factory.mktemp("perf-jit")
    home = tmp / "home"
    home.mkdir()
    script = tmp / "busy.py"
    script.write_text(SCRIPT)
    data = tmp / "perf.data"
    # -k 1: CLOCK_MONOTONIC timestamps, as perf inject --jit needs them to order the dump's
    # records with the samples.
    cmd = [PERF, *RECORD[:2], "-k", "1", *RECORD[2:], "-o", data, "--",
           python.python, "-X", "perf_jit", script]  # fmt: skip
    proc = run(cmd, env=perf_env(home), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    pids = {int(p) for p in run([PERF, "script", "-F", "pid", "-i", data],
                                env=perf_env(home)).stdout.split()}  # fmt: skip
    dumps = [Path(f"/tmp/jit-{pid}.dump") for pid in pids]
    try:
        (dump,) = [d for d in dumps if d.exists()]
        yield data, home, dump
    finally:
        for d in dumps:
            d.unlink(missing_ok=True)


def ours(data: Path, home: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "perf", data, "--no-inline"],
        capture_output=True, text=True, env=perf_env(home), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def user(frames: object) -> list[object]:
    return [f for f in frames if not f.kernel]  # type: ignore[attr-defined]


def test_every_sample_is_perfs_after_inject(recording: tuple[Path, Path, Path]) -> None:
    data, home, dump = recording
    injected = data.with_name("perf.jit.data")
    proc = run([PERF, "inject", "--jit", "-i", data, "-o", injected], env=perf_env(home))
    assert proc.returncode == 0, proc.stderr
    # (perf script prints times to the µs by default, as ours does.)
    theirs = {(s.tid, s.time // 1000): s for s in perf_script(injected, home)}
    mine = {(s.tid, s.time // 1000): s for s in parse_script(ours(data, home))}
    assert set(mine) == set(theirs)
    through_jit = 0
    for key, sample in mine.items():
        reference = user(theirs[key].frames)
        frames = user(sample.frames)
        assert len(frames) == len(reference), key
        for frame, their in zip(frames, reference, strict=True):
            if their.dso.startswith("/tmp/jitted-") or "/jitted-" in their.dso:
                # Perf's ELF file of the load; ours, the dump: the same name and offset.
                assert frame.dso == str(dump), (key, frame)
                assert (frame.symbol, frame.offset) == (their.symbol, their.offset), key
            else:
                assert (frame.dso, frame.address, frame.offset) == (
                    their.dso, their.address, their.offset), key  # fmt: skip
                assert aliases(their.dso, frame.symbol, their.symbol), (key, frame, their)
        through_jit += any(str(dump) == f.dso for f in frames[1:])
    # Most samples are in the script's functions, under several trampolines each.
    assert through_jit >= len(mine) // 2 > 10


def test_the_python_call_path(recording: tuple[Path, Path, Path]) -> None:
    """The trampolines' names give the script's call path, innermost first: leaf, then middle
    four times, then outer, then the module; each trampoline frame's caller found by its CFI."""
    data, home, dump = recording
    cmd = [sys.executable, "-m", "stackwalk", "perf", data, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=perf_env(home), timeout=600)
    assert proc.returncode == 0, proc.stderr
    paths = 0
    for line in proc.stdout.splitlines():
        frames = json.loads(line)["frames"]
        names = [
            JIT_NAME.fullmatch(f["function"] or "") for f in frames if f["module"] == str(dump)
        ]
        calls = [m["function"] for m in names if m and m["file"].endswith("busy.py")]
        if calls and calls[0] == "leaf":
            assert calls == ["leaf", "middle", "middle", "middle", "middle", "outer", "<module>"]
            paths += 1
        # A frame below a trampoline was found by the trampoline's CFI.
        jit = [i for i, f in enumerate(frames) if f["module"] == str(dump)]
        assert all(frames[i + 1]["trust"] == "cfi" for i in jit if i + 1 < len(frames))
    assert paths > 10


def test_without_the_dump_the_walk_stops_at_the_first_trampoline(
    recording: tuple[Path, Path, Path],
) -> None:
    data, home, dump = recording
    hidden = dump.with_name(dump.name + ".hidden")
    dump.rename(hidden)
    try:
        text = ours(data, home)
    finally:
        hidden.rename(dump)
    samples = parse_script(text)
    assert not any(f.symbol and f.symbol.startswith("py::") for s in samples for f in s.frames)
    below = [user(s.frames)[-1] for s in samples if any(f.dso == "//anon" for f in s.frames)]
    assert below and all(f.dso == "//anon" for f in below)
