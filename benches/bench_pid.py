"""`stackwalk pid`: how long the process is stopped while its threads are copied (the program of
tests/programs/pid_threads.c: nine threads blocked in different calls), and the whole
`Process.attach` (stop, copy, let go, then read the modules) against `eu-stack -p` on the same
process, side by side in one run."""

from __future__ import annotations

import shutil
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stackwalk

PROGRAMS = Path(__file__).resolve().parent.parent / "tests" / "programs"


@pytest.fixture(scope="module")
def threads_pid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    program = tmp_path_factory.mktemp("pid") / "pid_threads"
    subprocess.run(["gcc", "-g", "-O2", "-pthread", str(PROGRAMS / "pid_threads.c"), "-o",
                    str(program)], check=True, timeout=120)  # fmt: skip
    proc = subprocess.Popen([str(program)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.mark.benchmark(group="pid")
def test_process_attach(benchmark: Any, threads_pid: int) -> None:
    stops: list[float] = []

    def attach() -> stackwalk.Process:
        p = stackwalk.Process.attach(threads_pid)
        stops.append(p.stopped_for)
        return p

    p = benchmark.pedantic(attach, rounds=20, warmup_rounds=1)
    assert len(p.threads) == 9
    benchmark.extra_info["stopped_ms_median"] = round(statistics.median(stops) * 1e3, 3)
    benchmark.extra_info["stopped_ms_max"] = round(max(stops) * 1e3, 3)


@pytest.mark.benchmark(group="pid")
def test_process_to_dict(benchmark: Any, threads_pid: int) -> None:
    def walk() -> dict[str, Any]:
        return stackwalk.Process.attach(threads_pid).to_dict()

    doc = benchmark.pedantic(walk, rounds=10, warmup_rounds=1)
    assert len(doc["threads"]) == 9


@pytest.mark.benchmark(group="pid")
def test_eu_stack_pid(benchmark: Any, threads_pid: int) -> None:
    eu_stack = shutil.which("eu-stack")
    assert eu_stack, "elfutils' eu-stack is installed by .ci/setup"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([eu_stack, "-p", str(threads_pid)], capture_output=True, text=True,
                              timeout=120)  # fmt: skip

    proc = benchmark.pedantic(run, rounds=10, warmup_rounds=1)
    assert proc.stdout.count("TID ") == 9
