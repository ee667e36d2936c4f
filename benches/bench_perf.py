"""`stackwalk perf` against `perf script --no-inline` on the same perf.data,
recorded at bench time (a C program under libc's qsort, `--call-graph
dwarf`): whole commands, symbolized, side by side in one run; the
unwinding alone (collapsed output) against reading the file (`cat`); and 1
against 2 worker threads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKLOAD = r"""
#include <stdlib.h>
static int cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
int main(void)
{
    static int v[200000];
    for (int r = 0; r < 60; r++) {
        for (int i = 0; i < 200000; i++)
            v[i] = (i * 7919 + r) % 100003;
        qsort(v, 200000, sizeof v[0], cmp);
    }
    return v[0];
}
"""


@pytest.fixture(scope="module")
def perf_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("perf")
    src = tmp / "sort.c"
    src.write_text(WORKLOAD)
    exe = tmp / "sort"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(exe), str(src)], check=True)
    data = tmp / "perf.data"
    perf = shutil.which("perf")
    assert perf, "linux-perf is installed by .ci/setup"
    subprocess.run(
        [perf, "record", "-q", "-F", "2999", "-e", "cpu-clock", "--call-graph", "dwarf",
         "-o", str(data), "--", str(exe)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return data


def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=300)


def _stackwalk(*args: str) -> list[str]:
    return [sys.executable, "-m", "stackwalk", "perf", *args]


@pytest.mark.benchmark(group="perf-command")
def test_stackwalk_perf(benchmark: Any, perf_data: Path) -> None:
    proc = benchmark.pedantic(_run, args=(_stackwalk(str(perf_data)),), rounds=3)
    assert proc.returncode == 0, proc.stderr
    benchmark.extra_info["samples"] = proc.stdout.count(b":\n\t")


@pytest.mark.benchmark(group="perf-command")
def test_perf_script(benchmark: Any, perf_data: Path) -> None:
    argv = ["perf", "script", "--no-inline", "-i", str(perf_data)]
    proc = benchmark.pedantic(_run, args=(argv,), rounds=3)
    assert proc.returncode == 0, proc.stderr
    benchmark.extra_info["samples"] = proc.stdout.count(b"cpu-clock")


@pytest.mark.benchmark(group="perf-unwinding")
@pytest.mark.parametrize("jobs", [1, 2])
def test_stackwalk_collapsed(benchmark: Any, perf_data: Path, jobs: int) -> None:
    """Unwinding and counting stacks, with little output."""
    argv = _stackwalk(str(perf_data), "--collapsed", "--jobs", str(jobs))
    proc = benchmark.pedantic(_run, args=(argv,), rounds=3)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.benchmark(group="perf-unwinding")
def test_cat(benchmark: Any, perf_data: Path) -> None:
    """Reading the file, the floor."""
    proc = benchmark.pedantic(_run, args=(["cat", str(perf_data)],), rounds=3)
    assert proc.returncode == 0
