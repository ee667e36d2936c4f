"""`stackwalk core` against `eu-stack --core` on the same core file: the
python3 interpreter crashed deep in Python -> C -> Python recursion (hundreds
of frames, dozens of modules), and a small C program's crash (a dozen frames,
three modules). stackwalk prints source lines and inline frames by default,
from the distribution's debug files: eu-stack does with `-s -i` ("lines"),
and is also timed giving names only ("names"). Each command is timed whole,
process start included, as a user runs it (stackwalk's console script), side
by side in one run. And `Core.open(...).to_dict()` alone, in process:
reading the core, unwinding and symbolizing every thread, without the
interpreter's start."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from benchstacks import benchmarks_enabled, on_cores, skip_unless_cores, stackwalk_command

CRASH_SCRIPT = """
import ctypes

def descend(n):
    if n == 0:
        return [ctypes.string_at(0)]
    return sorted([n], key=lambda x: descend(x - 1))

descend(60)
"""

PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def python_core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("core")
    script = tmp / "crash.py"
    script.write_text(CRASH_SCRIPT)
    core = tmp / "python3.core"
    subprocess.run(
        [
            "gdb",
            "-batch",
            "-nx",
            "-ex",
            "run",
            "-ex",
            f"generate-core-file {core}",
            "--args",
            PYTHON,
            "-I",
            "-S",
            str(script),
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert core.exists(), "gdb wrote no core"
    return core


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.fixture(params=["python3", "small"])
def one_core(
    request: pytest.FixtureRequest, python_core: Path, small_cores: dict[int, Path]
) -> tuple[Path, str, str]:
    """(core, its program, a function its stack shows): the python3 core (hundreds of frames,
    dozens of modules), or the small C program's at depth 5 (a dozen frames, three modules)."""
    if request.param == "python3":
        return python_core, PYTHON, "_PyEval_EvalFrameDefault"
    return small_cores[5], str(small_cores[5].parent / "crash"), "descend"


@pytest.mark.benchmark(group="core-command")
def test_stackwalk_core(benchmark: Any, one_core: tuple[Path, str, str]) -> None:
    core, program, function = one_core
    argv = stackwalk_command("core", core, program)
    proc = benchmark.pedantic(_run, args=(argv,), rounds=5, warmup_rounds=1)
    assert proc.returncode == 0, proc.stderr
    assert function in proc.stdout
    benchmark.extra_info["core_frames"] = sum(
        line.startswith("#") for line in proc.stdout.splitlines()
    )


@pytest.mark.benchmark(group="core-command")
@pytest.mark.parametrize("detail", ["lines", "names"])
def test_eu_stack_core(benchmark: Any, one_core: tuple[Path, str, str], detail: str) -> None:
    core, program, function = one_core
    eu_stack = shutil.which("eu-stack")
    assert eu_stack, "elfutils' eu-stack is installed by .ci/setup"
    argv = [eu_stack, f"--core={core}", "-e", program, "-n", "0"]
    if detail == "lines":
        argv += ["-s", "-i"]
    proc = benchmark.pedantic(_run, args=(argv,), rounds=5, warmup_rounds=1)
    assert "#0" in proc.stdout


@pytest.mark.benchmark(group="core-api")
def test_core_to_dict(benchmark: Any, python_core: Path) -> None:
    from stackwalk.core import Core

    def once() -> dict[str, Any]:
        return Core.open(python_core, PYTHON).to_dict()

    doc = benchmark.pedantic(once, rounds=20, warmup_rounds=1)
    frames = [f for thread in doc["threads"] for f in thread["frames"]]
    assert any(f["function"] == "_PyEval_EvalFrameDefault" for f in frames)
    benchmark.extra_info["core_frames"] = len(frames)


# --- a directory of cores -------------------------------------------------------------------

# A small -O2 crash: main -> descend(depth) recursion -> a store to 0; the depth from argv gives
# cores with different stacks.
CRASH_C = r"""
#include <stdlib.h>
__attribute__((noinline)) int descend(int depth, int *volatile *slot) {
    volatile int keep = depth;
    if (depth == 0) { **slot = 1; return 0; }
    return descend(depth - 1, slot) + keep;
}
int main(int argc, char **argv) {
    int *volatile target = 0;
    return descend(argc > 1 ? atoi(argv[1]) : 3, &target);
}
"""
DIR_CORES = 1000  # files in the directory when the benchmarks run for real
DIR_CORES_SMOKE = 12  # and in the test run's smoke pass


def _gdb_core(argv: list[str], core: Path) -> None:
    cmd = ["gdb", "-batch", "-nx", "-iex", "set debuginfod enabled off", "-ex", "run",
           "-ex", f"generate-core-file {core}", "--args", *argv]  # fmt: skip
    subprocess.run(cmd, capture_output=True, check=True, timeout=120)
    assert core.exists(), f"gdb wrote no core of {argv}"


@pytest.fixture(scope="module")
def small_cores(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The small C program (``crash`` beside the cores) crashed at three depths: depth -> core."""
    tmp = tmp_path_factory.mktemp("small-cores")
    source = tmp / "crash.c"
    source.write_text(CRASH_C)
    program = tmp / "crash"
    subprocess.run(["gcc", "-O2", "-o", program, source], check=True, timeout=120)
    cores = {}
    for depth in (5, 20, 60):
        cores[depth] = tmp / f"crash-{depth}.core"
        _gdb_core([str(program), str(depth)], cores[depth])
    return cores


@pytest.fixture(scope="module")
def core_dir(
    tmp_path_factory: pytest.TempPathFactory,
    python_core: Path,
    small_cores: dict[int, Path],
    request: pytest.FixtureRequest,
) -> Path:
    """A crash spool: DIR_CORES files (hard links), cycling through four distinct cores -- the
    small C program crashed at three depths, and the python3 core."""
    distinct = [python_core, *small_cores.values()]
    spool = tmp_path_factory.mktemp("core-dir") / "spool"
    spool.mkdir()
    for i in range(DIR_CORES if benchmarks_enabled(request.config) else DIR_CORES_SMOKE):
        os.link(distinct[i % len(distinct)], spool / f"core.{i:05d}")
    return spool


def _spool_size(spool: Path) -> int:
    return len(os.listdir(spool))


@pytest.mark.benchmark(group="core-dir")
@pytest.mark.parametrize("cpus", [1, 2])
def test_stackwalk_core_dir(benchmark: Any, core_dir: Path, cpus: int) -> None:
    argv = stackwalk_command("core", "--dir", core_dir, "--jobs", str(cpus))
    # On `cpus` CPUs only (the command and its workers inherit the affinity): one CPU is one
    # CPU, not one worker whose thread pool takes the second.
    skip_unless_cores(cpus)
    proc = benchmark.pedantic(on_cores, args=(cpus, lambda: _run(argv)), rounds=1, warmup_rounds=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cores = _spool_size(core_dir)
    assert proc.stdout.count("\nCore ") == cores
    benchmark.extra_info["cores"] = cores


@pytest.mark.benchmark(group="core-dir")
def test_eu_stack_core_dir(benchmark: Any, core_dir: Path) -> None:
    eu_stack = shutil.which("eu-stack")
    assert eu_stack, "elfutils' eu-stack is installed by .ci/setup"
    paths = sorted(core_dir.iterdir())

    def each() -> list[subprocess.CompletedProcess[str]]:
        return [_run([eu_stack, f"--core={path}", "-n", "0"]) for path in paths]

    procs = benchmark.pedantic(each, rounds=1, warmup_rounds=0)
    assert all("#0" in proc.stdout for proc in procs)
    benchmark.extra_info["cores"] = len(paths)


@pytest.fixture(scope="module")
def core_dir_triple(core_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spool of ``core_dir`` three times over (hard links: its cores and as many again
    twice), for the cost of each core beyond the first spool's."""
    spool = tmp_path_factory.mktemp("core-dir-triple") / "spool"
    spool.mkdir()
    for copy in range(3):
        for path in sorted(core_dir.iterdir()):
            os.link(path, spool / f"{copy}.{path.name}")
    return spool


DIR_ROUNDS = 3


@pytest.mark.benchmark(group="core-dir-interleaved")
def test_core_dir_interleaved(
    benchmark: Any, core_dir: Path, core_dir_triple: Path, request: pytest.FixtureRequest
) -> None:
    """`core --dir` on one CPU and on two, on the spool and on the spool three times over, in
    interleaved rounds: each round's ratio of the whole commands (the spool's), and of the
    time each core beyond the spool's costs (the triple's time less the spool's: the fixed
    costs cancel out, those of the parent's start and of its first core above all, which it
    reads before the workers are forked and no second CPU can share)."""
    skip_unless_cores(2)
    rounds = DIR_ROUNDS if benchmarks_enabled(request.config) else 1

    def timed(spool: Path, cpus: int) -> float:
        argv = stackwalk_command("core", "--dir", spool, "--jobs", str(cpus))
        start = time.perf_counter()
        proc = on_cores(cpus, lambda: _run(argv))
        took = time.perf_counter() - start
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.count("\nCore ") == _spool_size(spool)
        return took

    def interleaved() -> dict[tuple[str, int], list[float]]:
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(rounds):
            for name, spool in (("one", core_dir), ("triple", core_dir_triple)):
                for cpus in (1, 2):
                    times.setdefault((name, cpus), []).append(timed(spool, cpus))
        return times

    times = benchmark.pedantic(interleaved, rounds=1, warmup_rounds=0)
    whole = [a / b for a, b in zip(times["one", 1], times["one", 2], strict=True)]
    beyond = [
        (t1 - o1) / (t2 - o2)
        for t1, o1, t2, o2 in zip(
            times["triple", 1], times["one", 1], times["triple", 2], times["one", 2], strict=True
        )
    ]
    extra = _spool_size(core_dir_triple) - _spool_size(core_dir)
    benchmark.extra_info["cores"] = _spool_size(core_dir)
    benchmark.extra_info["whole_ratios"] = [round(r, 2) for r in whole]
    benchmark.extra_info["beyond_ratios"] = [round(r, 2) for r in beyond]
    benchmark.extra_info["one_cpu_s"] = [round(t, 3) for t in times["one", 1]]
    benchmark.extra_info["beyond_us_per_core"] = {
        cpus: [
            round((t - o) / extra * 1e6)
            for t, o in zip(times["triple", cpus], times["one", cpus], strict=True)
        ]
        for cpus in (1, 2)
    }
    print(f"\ncore --dir interleaved: {benchmark.extra_info}")
