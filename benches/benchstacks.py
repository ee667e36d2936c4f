"""What the benchmarks share: a captured stack, finding system libraries, and running on
some of the CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from stackwalk.capture import Capture


@dataclass(frozen=True)
class Stack:
    name: str
    cap: Capture


def library_path(name: str) -> Path:
    """The file the dynamic linker would load for ``name`` (e.g. libc.so.6)."""
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.strip().startswith(name + " ") and "x86-64" in line:
            return Path(line.rsplit("=>", 1)[1].strip()).resolve()
    raise LookupError(name)


def stackwalk_command(*args: str | Path) -> list[str]:
    """The installed `stackwalk` command with `args`, as a user types it: the environment's
    script, not `python -m stackwalk`, which imports runpy first (some 5 ms of a 25 ms run)."""
    return [str(Path(sys.executable).with_name("stackwalk")), *map(str, args)]


# bench_perf's recordings, smallest first: two threads of qsort, about 113 samples a round at
# 4999 Hz on this project's VM, rounds for about 3,000, 10,000 and 100,000 samples (the
# summary in conftest names them too).
PERF_SIZES = {"3k": 27, "10k": 89, "100k": 885}


def benchmarks_enabled(config: pytest.Config) -> bool:
    """Whether the benchmarks run for real (`--benchmark-enable`), not as the test run's smoke
    pass: inputs are made at full size only then."""
    session = getattr(config, "_benchmarksession", None)
    return session is not None and not session.disabled


def on_cores(cores: int, run: Callable[[], Any]) -> Any:
    """`run()` on the first `cores` CPUs: the threads and processes it starts inherit this
    thread's affinity."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:cores])
    try:
        return run()
    finally:
        os.sched_setaffinity(0, before)


def skip_unless_cores(cores: int) -> None:
    if len(os.sched_getaffinity(0)) < cores:
        pytest.skip(f"this machine lets this process run on fewer than {cores} CPUs")
