"""macOS dumps per second, stackwalk against minidump-stackwalk, side by side in one run: the
Apple test programs (tests/apple.py: x86_64 and arm64, every compact unwind mode) crashed in
the emulator in each mode, their Crashpad dumps spooled (hard links, cycling through them).
stackwalk reads the spool in one ``stackwalk minidump --dir --jobs 1``, the programs' own
tables from one universal file in ``--lib-search-path``; minidump-stackwalk reads each dump
with the symbol files dump_syms writes of them (the same tables as STACK CFI), once per dump,
as a service runs it. Rounds alternate the two; the medians per dump go into the benchmark's
extra info. In ``make test`` (``--benchmark-disable``) the spool is the distinct dumps alone
and one round runs, still checking both tools' answers."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import apple  # noqa: E402
from benchstacks import benchmarks_enabled, stackwalk_command  # noqa: E402
from minidumps import MINIDUMP_STACKWALK  # noqa: E402

DUMPS = 200
ROUNDS, ROUNDS_SMOKE = 5, 1
THEIRS_PER_ROUND = 20


def _run(cmd: list[Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def apple_spool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, Path, int]:
    """(spool directory, library directory, symbol store, distinct dumps)."""
    tmp = tmp_path_factory.mktemp("apple-bench")
    lib, store, made = tmp / "lib", tmp / "symbols", []
    lib.mkdir()
    slices = []
    for arch in apple.ARCHES:
        program = apple.build(arch=arch, out_dir=tmp / arch)
        slices.append(str(program.executable))
        apple.symbols_dir(program, store, outermost=(apple.LIBDYLD[arch],))
        for mode, value in apple.MODES.items():
            emulation = apple.emulate(program, value)
            made.append(apple.write_mac_minidump(emulation, tmp / f"{arch}-{mode}.dmp"))
    lipo = shutil.which("llvm-lipo") or "llvm-lipo-14"
    subprocess.run([lipo, "-create", *slices, "-output", str(lib / "apple_crash")], check=True)
    spool = tmp / "spool"
    spool.mkdir()
    count = DUMPS if benchmarks_enabled(request.config) else len(made)
    for i in range(count):
        os.link(made[i % len(made)], spool / f"{i:05d}.dmp")
    return spool, lib, store, len(made)


def _crashing(doc: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])


@pytest.mark.benchmark(group="minidump")
def test_macos_dumps_per_second(
    benchmark: Any, request: pytest.FixtureRequest, apple_spool: tuple[Path, Path, Path, int]
) -> None:
    assert os.path.exists(MINIDUMP_STACKWALK), ".ci/setup installs minidump-stackwalk"
    spool, lib, store, distinct = apple_spool
    enabled = benchmarks_enabled(request.config)
    paths = sorted(spool.iterdir())
    theirs_each = THEIRS_PER_ROUND if enabled else len(paths)
    ours_cmd = stackwalk_command(
        "minidump", "--dir", spool, "--json", "--jobs", "1", "--offline",
        "--lib-search-path", lib,
    )  # fmt: skip

    def interleaved() -> tuple[list[float], list[float]]:
        ours, theirs = [], []
        for r in range(ROUNDS if enabled else ROUNDS_SMOKE):
            start = time.perf_counter()
            proc = _run(ours_cmd)
            ours.append((time.perf_counter() - start) / len(paths))
            assert proc.returncode == 0, proc.stderr[-3000:]
            docs = [json.loads(line) for line in proc.stdout.splitlines()]
            assert len(docs) == len(paths)
            for doc in docs[:distinct]:
                thread = _crashing(doc)
                assert thread["end"] == "end_of_stack", thread
                frames = [f for f in thread["frames"] if not f.get("inline")]
                assert frames[-1]["module"].endswith("libdyld.dylib"), frames
            sample = [paths[(r * theirs_each + i) % len(paths)] for i in range(theirs_each)]
            start = time.perf_counter()
            for path in sample:
                proc = _run([MINIDUMP_STACKWALK, "--json", "--symbols-path", store, path])
                assert proc.returncode == 0, proc.stderr[-3000:]
            theirs.append((time.perf_counter() - start) / len(sample))
            assert json.loads(proc.stdout)["crashing_thread"]["frames"]
        return ours, theirs

    ours, theirs = benchmark.pedantic(interleaved, rounds=1, warmup_rounds=0)
    benchmark.extra_info.update(
        dumps=len(paths),
        stackwalk_s_per_dump=statistics.median(ours),
        minidump_stackwalk_s_per_dump=statistics.median(theirs),
        ratio=statistics.median(theirs) / statistics.median(ours),
    )
