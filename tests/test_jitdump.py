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
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfdata import PERF, RECORD, parse_script, perf_env, perf_record, perf_script, run
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


# perf script shows at most this many frames of a sample (kernel.perf_event_max_stack): past
# it, its frames are a prefix of ours.
MAX_STACK = int(Path("/proc/sys/kernel/perf_event_max_stack").read_text())


@pytest.fixture(scope="module")
def injected(recording: tuple[Path, Path, Path]) -> Iterator[Path]:
    """The recording after ``perf inject --jit``: each code load an ELF file
    (/tmp/jitted-PID-N.so, removed after the module's tests)."""
    data, home, dump = recording
    out = data.with_name("perf.jit.data")
    proc = run([PERF, "inject", "--jit", "-i", data, "-o", out], env=perf_env(home))
    assert proc.returncode == 0, proc.stderr
    made = sorted(Path("/tmp").glob(f"{dump.stem.replace('jit-', 'jitted-')}-*.so"))
    try:
        assert made
        yield out
    finally:
        for path in made:
            path.unlink(missing_ok=True)


def same_frames(
    mine: dict[tuple[int, int], Any], theirs: dict[tuple[int, int], Any], jit: Any
) -> int:
    """Every sample's user frames are perf's (JIT frames compared by ``jit(ours, theirs)``),
    perf's a prefix of ours where it stopped short: at its limit, or where libdw gave up at the
    end of the stack copy (its last frame ``ffffffffffffffff [unknown]``, which ours, by the
    trampoline's CFI, reads on past with a named frame of the script's); how many went through
    JIT code."""
    assert set(mine) == set(theirs)
    through_jit = 0
    for key, sample in mine.items():
        reference = user(theirs[key].frames)
        frames = user(sample.frames)
        if not reference and any("execve" in (f.symbol or "") for f in theirs[key].frames):
            # Taken inside execve() (perf's kernel frames): the comm is already the new
            # program's, the user registers still those of perf record's child, a pc in no
            # mapping of the new program. perf shows no user frame; ours, that bare pc.
            assert [(f.dso, f.symbol) for f in frames] in ([], [("[unknown]", None)]), key
            continue
        gave_up = theirs[key].frames[-1].address == 2**64 - 1
        if len(theirs[key].frames) >= MAX_STACK or gave_up:
            assert len(frames) >= len(reference), key
            assert all(f.symbol for f in frames[len(reference) :]), key
            frames = frames[: len(reference)]
        assert len(frames) == len(reference), key
        for frame, their in zip(frames, reference, strict=True):
            if "/jitted-" in their.dso:
                jit(frame, their)
                through_jit += frame is not frames[0]
            else:
                assert (frame.dso, frame.address, frame.offset) == (
                    their.dso, their.address, their.offset), key  # fmt: skip
                assert aliases(their.dso, frame.symbol, their.symbol), (key, frame, their)
    return through_jit


def test_every_sample_is_perfs_after_inject(
    recording: tuple[Path, Path, Path], injected: Path
) -> None:
    data, home, dump = recording
    # (perf script prints times to the µs by default, as ours does.)
    theirs = {(s.tid, s.time // 1000): s for s in perf_script(injected, home)}
    mine = {(s.tid, s.time // 1000): s for s in parse_script(ours(data, home))}

    def jit(frame: Any, their: Any) -> None:
        # Perf's ELF file of the load; ours, the dump: the same name and offset.
        assert frame.dso == str(dump), frame
        assert (frame.symbol, frame.offset) == (their.symbol, their.offset), (frame, their)

    # Most samples are in the script's functions, under several trampolines each.
    assert same_frames(mine, theirs, jit) >= len(mine) // 2 > 10


def test_perf_injects_output_is_read_as_perf_reads_it(
    recording: tuple[Path, Path, Path], injected: Path
) -> None:
    """The injected recording (no jitdump read: the loads are ELF files, their build ids in
    note sections no PT_NOTE covers) gives perf script's frames, dso for dso."""
    _, home, _ = recording
    theirs = {(s.tid, s.time // 1000): s for s in perf_script(injected, home)}
    mine = {(s.tid, s.time // 1000): s for s in parse_script(ours(injected, home))}

    def jit(frame: Any, their: Any) -> None:
        assert (frame.dso, frame.address, frame.symbol, frame.offset) == (
            their.dso, their.address, their.symbol, their.offset)  # fmt: skip

    assert same_frames(mine, theirs, jit) > 10


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


# A live process (and its core): the script's trampolines made first, then many more functions,
# each a trampoline, so that the dump's buffered writes reach the file past the first ones (the
# JIT writes the dump through stdio: its last records are on disk only once its buffer fills
# or it exits), then the script spins under them.
LIVE_SCRIPT = """
import sys, time

def leaf(seconds):
    t = time.time() + seconds
    while time.time() < t:
        pass

def middle(d, seconds):
    return leaf(seconds) if d == 0 else middle(d - 1, seconds)

middle(3, 0)
for i in range(3000):
    exec(f"def filler{i}(): return {i}\\nfiller{i}()")
print("spinning", flush=True)
middle(3, 300)
"""


@pytest.fixture(scope="module")
def spinning(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    python = interpreters()["3.13"]
    assert not python.missing and python.python, python.missing
    script = tmp_path_factory.mktemp("perf-jit-live") / "spin.py"
    script.write_text(LIVE_SCRIPT)
    proc = subprocess.Popen([python.python, "-X", "perf_jit", str(script)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    dump = Path(f"/tmp/jit-{proc.pid}.dump")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "spinning\n"
        yield proc, dump
    finally:
        proc.kill()
        proc.wait()
        dump.unlink(missing_ok=True)


def dump_loads(dump: Path) -> list[tuple[int, int, str]]:
    """(start, size, name) of every code load the dump holds on disk, read here: the 40-byte
    header, then records of (id, size, timestamp) and, for a load (id 0), pid, tid, vma, code
    address and size, index and the name."""
    data = dump.read_bytes()
    at, loads = struct.unpack_from("<I", data, 8)[0], []
    while at + 16 <= len(data):
        kind, size = struct.unpack_from("<II", data, at)
        if size < 16 or at + size > len(data):
            break
        if kind == 0:
            start, length = struct.unpack_from("<QQ", data, at + 16 + 16)
            name = data[at + 56 : data.index(b"\0", at + 56)].decode()
            loads.append((start, length, name))
        at += size
    return loads


def check_python_chain(frames: list[dict[str, Any]], dump: Path) -> None:
    """The main thread's trampolines, innermost first: leaf, middle four times, the module;
    each named as the dump's load holding its pc, and its caller found by its CFI."""
    loads = dump_loads(dump)
    jit = [
        (i, f) for i, f in enumerate(frames) if f["function"] and f["function"].startswith("py::")
    ]
    names = [JIT_NAME.fullmatch(f["function"])["function"] for _, f in jit]  # type: ignore[index]
    assert names == ["leaf", "middle", "middle", "middle", "middle", "<module>"], names
    for i, frame in jit:
        pc = int(frame["pc"], 16)
        holding = [name for start, size, name in loads if start <= pc - 1 < start + size]
        assert holding[-1:] == [frame["function"]]
        assert frames[i + 1]["trust"] == "cfi", frames[i + 1]


def test_a_live_process_unwinds_through_its_trampolines(
    spinning: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, dump = spinning
    out = subprocess.run([sys.executable, "-m", "stackwalk", "pid", str(proc.pid), "--json"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    assert "jit-" not in out.stderr  # the dump is no module
    (main,) = [t for t in json.loads(out.stdout)["threads"] if t["tid"] == proc.pid]
    check_python_chain(main["frames"], dump)


def test_a_core_unwinds_through_its_trampolines(
    spinning: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """gdb's gcore of the process: the jitdump it mapped is found by the core's file list."""
    proc, dump = spinning
    core = tmp_path / "core"
    made = run(["gdb", "-batch", "-nx", "-ex", "set debuginfod enabled off",
                "-ex", f"attach {proc.pid}", "-ex", f"generate-core-file {core}",
                "-ex", "detach"])  # fmt: skip
    assert core.exists(), made.stdout + made.stderr
    out = subprocess.run([sys.executable, "-m", "stackwalk", "core", str(core), "--json"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    (main,) = [t for t in json.loads(out.stdout)["threads"] if t["tid"] == proc.pid]
    check_python_chain(main["frames"], dump)


def test_v8s_jitdump_names_and_walks_as_its_perf_map(tmp_path: Path) -> None:
    """node run with both --perf-prof (a jitdump, in its working directory) and
    --perf-basic-prof (/tmp/perf-PID.map, which test_perf_jit.py checks against perf script and
    the program's own call path): every sample's frames by the dump equal those by the map, pc
    for pc and name for name, shown in the dump and in the map respectively."""
    from test_perf_jit import BUSY_JS

    node = shutil.which("node")
    assert node, "node is on this kind of machine (see /work/.library/env)"
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "busy.js"
    script.write_text(BUSY_JS)
    data = tmp_path / "node.perf.data"
    argv = [node, "--perf-basic-prof", "--perf-prof", "--interpreted-frames-native-stack", script]
    perf_record(data, argv, home, cwd=tmp_path)
    (dump,) = tmp_path.glob("jit-*.dump")
    perf_map = Path(f"/tmp/perf-{dump.stem.removeprefix('jit-')}.map")

    def frames() -> dict[tuple[int, int, int], list[tuple[str, str | None, str | None]]]:
        cmd = [sys.executable, "-m", "stackwalk", "perf", data, "--json", "--no-inline"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=perf_env(home), timeout=600)
        assert proc.returncode == 0, proc.stderr
        return {
            (s["pid"], s["tid"], s["time"]): [
                (f["pc"], f["function"], f["module"]) for f in s["frames"] if not f["kernel"]
            ]
            for s in map(json.loads, proc.stdout.splitlines())
        }

    try:
        by_dump = frames()
        hidden = dump.with_name(dump.name + ".hidden")
        dump.rename(hidden)
        by_map = frames()
        hidden.rename(dump)
    finally:
        perf_map.unlink(missing_ok=True)
    assert by_dump.keys() == by_map.keys()
    jit_frames = 0
    for key, mine in by_dump.items():
        theirs = by_map[key]
        assert [(pc, name) for pc, name, _ in mine] == [(pc, name) for pc, name, _ in theirs], key
        for (_, _, module), (_, _, map_module) in zip(mine, theirs, strict=True):
            if map_module == str(perf_map):
                assert module == str(dump)
                jit_frames += 1
    assert jit_frames > 500
