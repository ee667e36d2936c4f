"""``stackwalk collect`` installed as the kernel's ``core_pattern`` (the tests run as root, and
put the pattern back after each test): real crashes, their cores piped by the kernel.

References: gdb's backtrace of the same program's crash (the core tests' ``threads`` core, made
under gdb) for the record's frames, function by function; ``stackwalk minidump`` and
``minidump-stackwalk`` on the minidump left in the spool; ``stackwalk triage`` on the spool. A
2 GiB core is collected by a process whose peak memory stays under 100 MiB, and a crash storm
fills the spool to its cap and no further.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores
from minidumps import MINIDUMP_STACKWALK
from realstacks import Builder
from stackwalk.core import Core

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


@pytest.fixture
def spool() -> Iterator[Path]:
    """A spool with a short path: core_pattern holds at most 127 characters."""
    path = Path(tempfile.mkdtemp(prefix="sw-", dir="/tmp"))
    try:
        yield path / "s"
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def core_pattern(pattern: str) -> Iterator[None]:
    """``pattern`` as the kernel's core_pattern until the block ends (the one in place before
    put back)."""
    assert len(pattern) < 128, pattern  # the kernel would cut it short
    before = CORE_PATTERN.read_text()
    CORE_PATTERN.write_text(pattern + "\n")
    try:
        yield
    finally:
        CORE_PATTERN.write_text(before)


def kernel_core(program: Path, directory: Path, *args: str) -> Path:
    """The core the kernel itself writes of ``program`` (core_pattern a file in ``directory``,
    the core size limit lifted for it): notes first, then every mapping, as it pipes one."""
    directory.mkdir(parents=True, exist_ok=True)

    def unlimited() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    with core_pattern(f"{directory}/core.%p"):
        proc = subprocess.Popen([str(program), *args], preexec_fn=unlimited)
        assert proc.wait(timeout=120) == -11
    core = directory / f"core.{proc.pid}"
    assert core.stat().st_size > 0
    return core


@contextmanager
def collecting(spool: Path, *options: str) -> Iterator[None]:
    """The kernel pipes every core to ``stackwalk collect --spool SPOOL OPTIONS`` until the
    block ends (the pattern in place before is put back)."""
    assert " " not in sys.executable + str(spool)  # core_pattern's words are split at spaces
    words = [sys.executable, "-m", "stackwalk", "collect", "--spool", str(spool), *options]
    with core_pattern("|" + " ".join([*words, "%P", "%i", "%s", "%t", "%E"])):
        yield


def collectors(spool: Path) -> list[int]:
    """The pids of collectors of ``spool`` still running."""
    running = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"collect\0--spool\0" + str(spool).encode() in cmdline:
            running.append(int(pid))
    return running


def records(spool: Path, count: int, timeout: float = 300) -> list[dict[str, Any]]:
    """The spool's JSON records once ``count`` are there and no collector runs."""
    deadline = time.monotonic() + timeout
    while len(list(spool.glob("*.json"))) < count or collectors(spool):
        assert time.monotonic() < deadline, (sorted(os.listdir(spool)), collectors(spool))
        time.sleep(0.1)
    return [json.loads(p.read_text()) for p in sorted(spool.glob("*.json"))]


def test_a_crash_leaves_a_minidump_and_its_record(
    cores: Cores, spool: Path, tmp_path: Path
) -> None:
    """A crash of the threads program: one minidump and one JSON line; the record's pid, signal,
    program and crashing thread are the process's, its frames gdb's (function for function, on
    the same program's crash), its signature what ``stackwalk triage`` gives the minidump; the
    minidump unwinds to the record's frames, and minidump-stackwalk reads the same crash."""
    made = cores("threads")
    with collecting(spool):
        proc = subprocess.Popen([str(made.executable), *made.argv[1:]])
        assert proc.wait(timeout=120) == -11
        (record,) = records(spool, 1)
    line = (spool / f"{record['time']}-{proc.pid}-11.json").read_text()
    assert line.count("\n") == 1 and line.endswith("\n")
    assert (record["pid"], record["signal"], record["signal_name"]) == (proc.pid, 11, "SIGSEGV")
    assert record["executable"] == str(made.executable)
    assert "error" not in record and "core_stopped" not in record
    gdb_core = Core.open(str(made.path), str(made.executable))
    gdb = made.gdb.thread(gdb_core.crashing_tid)  # type: ignore[arg-type]
    assert [f["function"] for f in record["frames"]] == [f.function for f in gdb.frames]
    dump = spool / record["minidump"]
    assert dump.name == f"{record['time']}-{proc.pid}-11.dmp"
    ours = json.loads(run("minidump", dump, "--json").stdout)
    crashed = next(t for t in ours["threads"] if t["tid"] == record["crashing_tid"])
    assert [(f["pc"], f["function"]) for f in crashed["frames"]] == [
        (f["pc"], f["function"]) for f in record["frames"]
    ]
    theirs = json.loads(
        subprocess.run(
            [MINIDUMP_STACKWALK, "--json", dump],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout  # fmt: skip
    )
    assert theirs["crash_info"]["type"] == ours["crash"]["reason"]
    assert (
        theirs["threads"][theirs["crash_info"]["crashing_thread"]]["thread_id"]
        == (record["crashing_tid"])
    )
    # triage reads the spool's minidump (not its record, nor the work area) and signs it alike.
    store = tmp_path / "crashes.db"
    triaged = run("triage", spool, "--db", store, "--json")
    rows = [json.loads(x) for x in triaged.stdout.splitlines()]
    assert [(Path(r["path"]).name, r["signature"]) for r in rows] == [
        (dump.name, record["signature"])
    ]


def run(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "stackwalk", *map(str, args)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_2_gib_core_is_collected_in_little_memory(build: Builder, spool: Path) -> None:
    """A process with 2 GiB of heap written crashes: its whole core is read (it is never held:
    the collector's peak memory stays under 100 MiB) and the minidump is a few dozen KiB,
    naming the crash's frames."""
    program = build("crash_big.c", "-O2")
    with collecting(spool):
        proc = subprocess.Popen([str(program), "2048"])
        assert proc.wait(timeout=300) == -11
        (record,) = records(spool, 1)
    assert "error" not in record and "core_stopped" not in record, record
    assert record["core_bytes_read"] > 2 << 30
    assert record["collect_peak_rss"] < 100 << 20, record["collect_peak_rss"]
    assert (spool / record["minidump"]).stat().st_size < 256 << 10
    functions = [f["function"] for f in record["frames"]]
    assert functions[:3] == ["crash_here", "fill_and_crash", "main"], functions


def test_the_limits_stop_the_reading_and_keep_what_was_read(build: Builder, spool: Path) -> None:
    """--max-read smaller than the core: the reading stops there (the record says so), and what
    was read is kept: the registers (the notes come first) give frame 0; the stack, at the top
    of the address space and so at the end of the core, was not read, and the walk stops
    there."""
    program = build("crash_big.c", "-O2")
    with collecting(spool, "--max-read", "64M"):
        proc = subprocess.Popen([str(program), "256"])
        assert proc.wait(timeout=300) == -11
        (record,) = records(spool, 1)
    assert record["core_stopped"].startswith("stopped at the size limit"), record
    assert record["core_bytes_read"] == 64 << 20
    assert [f["function"] for f in record["frames"]] == ["crash_here"]


def test_a_crash_storm_fills_the_spool_to_its_cap(build: Builder, spool: Path) -> None:
    """200 crashes, 50 at a time, with room for about a dozen: the spool ends at most at its
    cap and no more than one crash below it, each minidump with its record, the newest kept."""
    program = build("crash_big.c", "-O2")
    cap = 400 << 10
    with collecting(spool, "--max-spool", str(cap)):
        pids = []
        for _ in range(4):
            wave = [subprocess.Popen([str(program)]) for _ in range(50)]
            assert all(p.wait(timeout=300) == -11 for p in wave)
            pids.extend(p.pid for p in wave)
        deadline = time.monotonic() + 600
        while collectors(spool):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    files = [p for p in spool.iterdir() if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    dumps = {p.stem for p in files if p.suffix == ".dmp"}
    kept = {p.stem for p in files if p.suffix == ".json"}
    assert dumps == kept and len(dumps) >= 5, sorted(p.name for p in files)
    largest = max(p.stat().st_size for p in files if p.suffix == ".dmp") + 4096
    assert cap - 2 * largest < total <= cap, (total, cap, len(dumps))
    # Crashes came from the storm's processes.
    assert {int(stem.split("-")[1]) for stem in dumps} <= set(pids)


@pytest.mark.parametrize("garbage", [b"", b"\x7fELF not a core", b"MDMP" + b"\0" * 100])
def test_what_is_no_core_is_a_record_of_the_error(garbage: bytes, tmp_path: Path) -> None:
    """Standard input with no core on it (nothing, a damaged header, another format): a record
    with the error (exit 2, one line), no minidump, and nothing left in the work area."""
    spool = tmp_path / "spool"
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "collect", "--spool", spool, "1", "1", "11", "5",
         "!bin!x"],
        input=garbage, capture_output=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr, proc.stderr
    (record,) = [json.loads(p.read_text()) for p in spool.glob("*.json")]
    assert record["error"] and (record["pid"], record["executable"]) == (1, "/bin/x")
    assert not list(spool.glob("*.dmp"))
    assert sorted(os.listdir(spool / ".collect")) == ["lock"]


def test_the_streamed_core_gives_the_whole_cores_frames(build: Builder, spool: Path) -> None:
    """A core the kernel wrote to a file, piped to ``collect``: the record's frames are those
    ``stackwalk core`` gives the whole core, and its minidump's threads walk as the core's."""
    program = build("crash_threads.c", "-O2", "-pthread")
    core = kernel_core(program, spool.parent / "cores")
    with open(core, "rb") as f:
        proc = subprocess.run([sys.executable, "-m", "stackwalk", "collect", "--spool", spool,
                               "7", "7", "11", "9", "!x"], stdin=f, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (record,) = [json.loads(p.read_text()) for p in spool.glob("*.json")]
    # Read up to the last part kept (what follows it is of no use), no limit reached.
    assert "core_stopped" not in record and record["core_bytes_read"] <= core.stat().st_size
    whole = json.loads(run("core", core, "--json").stdout)
    crashed = next(t for t in whole["threads"] if t["tid"] == whole["crashing_thread"])
    assert record["frames"] == crashed["frames"]
    dump = json.loads(run("minidump", spool / record["minidump"], "--json").stdout)
    assert [[f["pc"] for f in t["frames"]] for t in dump["threads"]] == [
        [f["pc"] for f in t["frames"]] for t in whole["threads"]
    ]
