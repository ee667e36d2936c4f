"""`stackwalk core` against `eu-stack --core` on the same core file: the
python3 interpreter crashed deep in Python -> C -> Python recursion (hundreds
of frames, dozens of modules). Both commands symbolize; both are timed whole,
process start included, side by side in one run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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


@pytest.mark.benchmark(group="core-command")
def test_stackwalk_core(benchmark: Any, python_core: Path) -> None:
    argv = [sys.executable, "-m", "stackwalk", "core", str(python_core), PYTHON]
    argv += ["--max-frames", "100000"]  # every frame, as eu-stack -n 0
    proc = benchmark.pedantic(_run, args=(argv,), rounds=5, warmup_rounds=1)
    assert proc.returncode == 0, proc.stderr
    assert "_PyEval_EvalFrameDefault" in proc.stdout
    frames = sum(line.startswith("#") for line in proc.stdout.splitlines())
    benchmark.extra_info["frames"] = frames


@pytest.mark.benchmark(group="core-command")
def test_eu_stack_core(benchmark: Any, python_core: Path) -> None:
    eu_stack = shutil.which("eu-stack")
    assert eu_stack, "elfutils' eu-stack is installed by .ci/setup"
    argv = [eu_stack, f"--core={python_core}", "-e", PYTHON, "-n", "0"]
    proc = benchmark.pedantic(_run, args=(argv,), rounds=5, warmup_rounds=1)
    assert "_PyEval_EvalFrameDefault" in proc.stdout
