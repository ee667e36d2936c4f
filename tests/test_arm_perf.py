"""perf.data recorded on a 32-bit ARM machine: ``perf record --call-graph dwarf``'s samples, ARM's
user registers (r0-r15 in perf's order, the 32-bit register ABI) and stack copies, the
architecture named in the header. This machine's kernel cannot record an ARM program, so the
recordings are written from qemu-arm's cores of the ARM test programs (tests/perf_from_core.py:
one sample per thread, its registers and stack as the core holds them).

Reference: gdb-multiarch's live backtrace of each thread at the crash (tests/corefiles.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corefiles import Cores
from perf_from_core import write_arm_perf_data
from perfdata import stackwalk_perf
from stackwalk.core import Core


@pytest.mark.parametrize("case", ["arm-deep", "arm-thumb-deep", "arm-threads"])
def test_arm_samples_unwind_as_gdb_does(case: str, cores: Cores, tmp_path: Path) -> None:
    """Every sample (a thread of the core): gdb's pcs exactly, by the EHABI tables of the
    files the MMAP2 records name (their build ids checked), the program's functions named:
    the crashing thread's crash_here, and down to main and _start in a one-thread program."""
    made = cores(case)
    core = Core.open(str(made.path), str(made.executable), **made.open_options)
    recording = write_arm_perf_data(core, tmp_path / f"{case}.perf.data")
    proc = stackwalk_perf("--json", "--no-inline", recording)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    samples = [json.loads(line) for line in proc.stdout.splitlines()]
    reference = made.reference_pcs()
    assert sorted(s["tid"] for s in samples) == sorted(reference)
    for sample in samples:
        user = [f for f in sample["frames"] if not f["kernel"]]
        assert [int(f["pc"], 16) for f in user] == reference[sample["tid"]], sample["tid"]
    crashed = next(s for s in samples if s["tid"] == core.crashing_tid)
    assert "crash_here" in [f["function"] for f in crashed["frames"]]
    if len(samples) == 1:
        names = [f["function"] for f in crashed["frames"]]
        assert "main" in names and names[-1] == "_start", names
