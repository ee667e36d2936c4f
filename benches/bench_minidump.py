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

And Windows dumps, 200 of them (as a crash service receives them): tests/windows.py's program,
built for x64 by mingw-w64 and for x86 by clang with its PDB, crashed every way under Wine, with
every module's symbol file (dump_syms' of the PDB and of Wine's DLLs): x64 frames unwound by
STACK CFI, x86 frames by the PDB's frame data (STACK WIN), by both tools.
"""

from __future__ import annotations

import json
import os
import shutil
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
from windows import (  # noqa: E402
    MODES,
    WINE,
    WINE32,
    WINE_DLLS,
    WINE_DLLS32,
    build,
    build_clang,
    crash,
    pdb_symbols,
    pe_codeview,
    with_ids,
)

DUMPS = 1000  # files in the spool when the benchmarks run for real
DUMPS_SMOKE = 12  # and in the test run's smoke pass
WINDOWS_DUMPS = 200  # Windows dumps in their spool (the smoke pass: DUMPS_SMOKE)
# The crash modes made into Windows dumps (each for x64 and x86); the smoke pass makes two.
WINDOWS_SMOKE_MODES = ("deep", "thread")
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
    return _spool(tmp, made, DUMPS if enabled else DUMPS_SMOKE, store, enabled)


def _spool(tmp: Path, made: list[Path], count: int, store: Path, enabled: bool) -> Spool:
    """A spool of ``count`` hard links, cycling through the dumps ``made``."""
    directory = tmp / "spool"
    directory.mkdir()
    for i in range(count):
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


def _interleaved(benchmark: Any, spool: Spool, ours_ok: Any, theirs_ok: Any) -> None:
    """Rounds of: the whole spool through one `stackwalk minidump --dir --jobs 1`, then
    minidump-stackwalk once per dump on a part of it; the median time per dump of each, into the
    benchmark's extra info. ``ours_ok`` checks two of our documents, ``theirs_ok`` the last of
    theirs."""
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
                ours_ok(json.loads(line))
            sample = [paths[(r * theirs_each + i) % len(paths)] for i in range(theirs_each)]
            start = time.perf_counter()
            for path in sample:
                proc = _run([MINIDUMP_STACKWALK, "--json", "--symbols-path", spool.store, path])
                assert proc.returncode == 0, proc.stderr[-3000:]
            theirs.append((time.perf_counter() - start) / len(sample))
            theirs_ok(json.loads(proc.stdout))
        return ours, theirs

    ours, theirs = benchmark.pedantic(interleaved, rounds=1, warmup_rounds=0)
    benchmark.extra_info.update(
        dumps=len(paths),
        stackwalk_s_per_dump=statistics.median(ours),
        minidump_stackwalk_s_per_dump=statistics.median(theirs),
    )


@pytest.mark.benchmark(group="minidump")
def test_minidump_dumps_per_second(benchmark: Any, spool: Spool) -> None:
    """The Linux spool: see `_interleaved`."""
    _interleaved(
        benchmark,
        spool,
        lambda doc: _check(doc["threads"][0]),
        lambda doc: _check(doc["crashing_thread"], past_the_end=True),
    )


@pytest.fixture(scope="module")
def windows_spool(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Spool:
    """The Windows dumps (see the module's docstring), their ids given as tests/windows.py
    gives them, and one store of every module's symbol file."""
    tmp = tmp_path_factory.mktemp("minidump-windows-bench")
    enabled = benchmarks_enabled(request.config)
    modes = MODES if enabled else WINDOWS_SMOKE_MODES
    prefix, store = tmp / "wine" / "prefix", tmp / "store"
    prefix.parent.mkdir()  # (Wine makes the prefix itself, in a directory that exists)
    x64 = build(tmp / "crash_win64.exe", "-O2")
    x86, pdb = build_clang(tmp / "crash_win32.exe", "-O2")
    pdb_symbols(pdb, store)
    record = pe_codeview(x86)
    assert record is not None
    made = []
    for mode in modes:
        for exe, wine, dlls in ((x64, WINE, WINE_DLLS), (x86, WINE32, WINE_DLLS32)):
            raw = crash(exe, mode, tmp / f"{exe.stem}-{mode}.dmp", prefix, wine=wine)
            into = tmp / f"{exe.stem}-{mode}"
            into.mkdir()
            own = {x86.name: record} if exe == x86 else None
            ids = with_ids(raw, [exe.parent, dlls], into, own=own)
            shutil.copytree(ids.store, store, dirs_exist_ok=True)
            made.append(ids.dump)
    return _spool(tmp, made, WINDOWS_DUMPS if enabled else DUMPS_SMOKE, store, enabled)


def _windows_check(frames: list[dict[str, Any]]) -> None:
    """A crashing thread unwound by the symbol files' rules (x64's STACK CFI, x86's STACK WIN)."""
    trust = [f["trust"] for f in frames if not f.get("inline")]
    assert len(trust) > 3 and "cfi" in trust[1:], trust


@pytest.mark.benchmark(group="minidump")
def test_minidump_windows_dumps_per_second(benchmark: Any, windows_spool: Spool) -> None:
    """The Windows spool: see `_interleaved`."""
    _interleaved(
        benchmark,
        windows_spool,
        lambda doc: _windows_check(
            next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])["frames"]
        ),
        lambda doc: _windows_check(doc["crashing_thread"]["frames"]),
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
