"""Minidumps per second: `stackwalk minidump --dir` (one process for the whole spool) against
rust-minidump's `minidump-stackwalk` run once per dump (as crash services run it), on the same
dumps and the same Breakpad symbol store, interleaved in one run; and the dumps read in process
(`Minidump.open(...).to_dict()`), where a store of symbol files used by every dump (libc,
libstdc++, libpython) is parsed once, not once per dump.

The dumps are minidump-writer's (tests/minidumps.py) of two programs that ran on private copies
of their libraries, then hidden: a C++ program that aborts from a thrown exception (libstdc++),
and the Python interpreter embedded in a C program (libpython3.11.so), deep in Python -> C ->
Python recursion. Both tools unwind them with the symbol files alone (STACK CFI) and name their
frames from them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from benchstacks import benchmarks_enabled, stackwalk_command  # noqa: E402
from corefiles import Spec  # noqa: E402
from minidumps import MINIDUMP_STACKWALK, Dumps, symbol_store  # noqa: E402
from realstacks import Builder  # noqa: E402
from stackwalk._core import sym_file_parses  # noqa: E402
from stackwalk.minidump import Minidump  # noqa: E402

DUMPS = 1000  # files in the spool when the benchmarks run for real
DUMPS_SMOKE = 12  # and in the test run's smoke pass
# minidump-stackwalk runs on this many of them per round (its rate per dump is what is compared).
THEIRS_PER_ROUND, THEIRS_SMOKE = 40, 2
ROUNDS, ROUNDS_SMOKE = 3, 1


def _system_python_flags() -> tuple[str, ...]:
    """The compiler flags that embed the system's libpython (python3's own, not this venv's)."""
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", "import sysconfig as s; "
         "print(s.get_paths()['include']); print(s.get_config_var('LIBDIR')); "
         "print(s.get_config_var('LDVERSION'))"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    include, libdir, version = proc.stdout.split()
    return (f"-I{include}", "-Wl,--no-as-needed", f"-L{libdir}", f"-lpython{version}")


@dataclass
class Spool:
    directory: Path  # DUMPS hard links, cycling through the distinct dumps
    store: Path  # the symbol store: every module's .sym file
    syms: int  # .sym files in the store
    enabled: bool  # the benchmarks run for real


@pytest.fixture(scope="module")
def spool(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Spool:
    tmp = tmp_path_factory.mktemp("minidump-bench")
    (tmp / "programs").mkdir()
    dumps = Dumps(tmp / "dumps", Builder(tmp / "programs"))
    specs = [
        Spec("bench-cxx", "crash_cxx.cpp", ("-O2",), compiler="g++", signal="SIGABRT"),
        Spec("bench-embed", "crash_embed.c", ("-O2", *_system_python_flags())),
    ]
    store = tmp / "store"
    made = []
    gone = tmp / "gone"
    gone.mkdir()
    for spec in specs:
        dump, files = dumps.with_own_libraries(spec)
        made.append(dump.path)
        for file in files:
            symbol_store(file, store)
        # Gone, as on a crash service: the symbol files alone unwind and name the frames.
        for i, file in enumerate(files):
            os.rename(file, gone / f"{spec.id}-{i}-{file.name}")
    enabled = benchmarks_enabled(request.config)
    directory = tmp / "spool"
    directory.mkdir()
    for i in range(DUMPS if enabled else DUMPS_SMOKE):
        os.link(made[i % len(made)], directory / f"dump.{i:05d}.dmp")
    syms = sum(1 for _ in store.glob("*/*/*.sym"))
    return Spool(directory, store, syms, enabled)


def _run(argv: Sequence[str | Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([os.fspath(a) for a in argv], capture_output=True, text=True,
                          timeout=3600)  # fmt: skip


def _check(thread: dict[str, Any], past_the_end: bool = False) -> None:
    """A crashing thread unwound by the symbol files' CFI to its outermost frame (and, for
    minidump-stackwalk, ``past_the_end``, the frame it makes up by scanning past _start, whose
    .ra rule dump_syms leaves out: see tests/test_minidump.py)."""
    trust = [f["trust"] for f in thread["frames"] if not f.get("inline")]
    if past_the_end and trust[-1] == "scan":
        trust.pop()
    assert len(trust) > 5 and set(trust[1:]) == {"cfi"}, trust


@pytest.mark.benchmark(group="minidump")
def test_minidump_dumps_per_second(benchmark: Any, spool: Spool) -> None:
    """Rounds of: the whole spool through one `stackwalk minidump --dir --jobs 1`, then
    minidump-stackwalk once per dump on a part of it; the median time per dump of each."""
    assert os.path.exists(MINIDUMP_STACKWALK), ".ci/setup installs minidump-stackwalk"
    paths = sorted(spool.directory.iterdir())
    theirs_each = THEIRS_PER_ROUND if spool.enabled else THEIRS_SMOKE
    ours_cmd = stackwalk_command(
        "minidump", "--dir", spool.directory, "--json", "--jobs", "1", "--offline",
        "--symbols-path", spool.store,
    )  # fmt: skip

    def interleaved() -> tuple[list[float], list[float]]:
        ours, theirs = [], []
        for r in range(ROUNDS if spool.enabled else ROUNDS_SMOKE):
            start = time.perf_counter()
            proc = _run(ours_cmd)
            ours.append((time.perf_counter() - start) / len(paths))
            assert proc.returncode == 0, proc.stderr[-3000:]
            docs = proc.stdout.splitlines()
            assert len(docs) == len(paths)
            for line in (docs[0], docs[1]):
                _check(json.loads(line)["threads"][0])
            sample = [paths[(r * theirs_each + i) % len(paths)] for i in range(theirs_each)]
            start = time.perf_counter()
            for path in sample:
                proc = _run([MINIDUMP_STACKWALK, "--json", "--symbols-path", spool.store, path])
                assert proc.returncode == 0, proc.stderr[-3000:]
            theirs.append((time.perf_counter() - start) / len(sample))
            _check(json.loads(proc.stdout)["crashing_thread"], past_the_end=True)
        return ours, theirs

    ours, theirs = benchmark.pedantic(interleaved, rounds=1, warmup_rounds=0)
    benchmark.extra_info.update(
        dumps=len(paths),
        stackwalk_s_per_dump=statistics.median(ours),
        minidump_stackwalk_s_per_dump=statistics.median(theirs),
    )


@pytest.mark.benchmark(group="minidump")
def test_minidump_in_process(benchmark: Any, spool: Spool) -> None:
    """Every dump of the spool read, unwound and symbolized in this process: the symbol store's
    files (libc, libstdc++, libpython and the others) are each parsed once (the native core's
    count of parses), not once per dump."""
    paths = sorted(spool.directory.iterdir())
    before = sym_file_parses()

    def each() -> list[dict[str, Any]]:
        return [
            Minidump.open(path, symbols_path=[spool.store], offline=True).to_dict()
            for path in paths
        ]

    docs = benchmark.pedantic(each, rounds=1, warmup_rounds=0)
    parsed = sym_file_parses() - before
    assert len(paths) > spool.syms and parsed == spool.syms, (parsed, spool.syms, len(paths))
    for doc in docs[:2]:
        _check(doc["threads"][0])
    benchmark.extra_info.update(dumps=len(paths), sym_files=spool.syms, sym_parses=parsed)
