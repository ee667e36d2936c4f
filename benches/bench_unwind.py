"""Unwinding speed: the Rust core against the pure-Python baseline on the same
captured stacks, through the public Python API, and the core alone.

Run for real with ``make bench``; in ``make test`` they run once as smoke
tests (``--benchmark-disable``), still checking the answers against gdb."""

from __future__ import annotations

from typing import Any

import pytest
import stackwalk
import stackwalk.baseline
from benchstacks import Stack, library_path

STACKS = ["c-O2", "python3"]
FORMS = ["dict", "registers"]  # how the registers are given
MAX_FRAMES = 4096
# Rounds of half a millisecond at least: pytest-benchmark's default (5 us) makes a round of ten
# sub-microsecond calls, each round starting with the caches and branch predictors disturbed by
# the harness's own bookkeeping between rounds, which adds some 0.1 us a call (0.50 against
# 0.38 us for one unwind() of the C stack, measured side by side). Calls in a loop, as a caller
# with many stacks makes them, cost the latter. The baseline's rounds are as long. (Not for
# unwind_many: a call of it is a round of its own; back to back, a batch's calls run slower.)
UNWIND = {"group": "unwind", "min_time": 0.0005}


def _unwinder(cls: Any, stack: Stack) -> Any:
    uw = cls(stack.cap.arch)
    stack.cap.add_modules_to(uw)
    return uw


def _check(trace: Any, stack: Stack) -> None:
    assert trace.pcs == stack.cap.gdb_pcs, "the benchmark's answer differs from gdb's"


def _regs(cap: Any, form: str) -> Any:
    """The registers as a dict, or as a reusable Registers object (no name looked up per call)."""
    return cap.regs if form == "dict" else stackwalk.Registers(cap.arch, cap.regs)


@pytest.mark.benchmark(**UNWIND)
@pytest.mark.parametrize("name", STACKS)
@pytest.mark.parametrize("form", FORMS)
def test_unwind_rust(benchmark: Any, stacks: dict[str, Stack], name: str, form: str) -> None:
    stack = stacks[name]
    uw = _unwinder(stackwalk.Unwinder, stack)
    cap = stack.cap
    trace = benchmark(uw.unwind, _regs(cap, form), cap.memory, MAX_FRAMES)
    _check(trace, stack)
    benchmark.extra_info["frames"] = len(trace.pcs)


@pytest.mark.benchmark(**UNWIND)
@pytest.mark.parametrize("name", STACKS)
def test_unwind_baseline(benchmark: Any, stacks: dict[str, Stack], name: str) -> None:
    stack = stacks[name]
    uw = _unwinder(stackwalk.baseline.Unwinder, stack)
    cap = stack.cap
    uw.unwind(
        cap.regs, cap.memory, MAX_FRAMES
    )  # decoded tables cached, as the Rust core's rule cache is
    trace = benchmark(uw.unwind, cap.regs, cap.memory, MAX_FRAMES)
    _check(trace, stack)
    benchmark.extra_info["frames"] = len(trace.pcs)


BATCH = 1000  # stacks per unwind_many call


@pytest.mark.benchmark(group="unwind")  # a call is 0.2-4 ms: a round of its own
@pytest.mark.parametrize("name", STACKS)
@pytest.mark.parametrize("form", FORMS)
def test_unwind_many_rust(benchmark: Any, stacks: dict[str, Stack], name: str, form: str) -> None:
    """BATCH copies of the stack in one unwind_many call (every CPU, no GIL, flat buffers)."""
    stack = stacks[name]
    uw = _unwinder(stackwalk.Unwinder, stack)
    cap = stack.cap
    given = [(_regs(cap, form), cap.memory)] * BATCH
    batch = benchmark(uw.unwind_many, given, MAX_FRAMES)
    assert len(batch) == BATCH
    _check(batch[BATCH - 1], stack)
    benchmark.extra_info["batch"] = BATCH
    benchmark.extra_info["batch_frames"] = len(batch.pcs)


@pytest.mark.benchmark(group="unwind")
@pytest.mark.parametrize("name", STACKS)
def test_unwind_many_flat(benchmark: Any, stacks: dict[str, Stack], name: str) -> None:
    """As test_unwind_many_rust with `Registers`, the flat buffers (`pcs`, `offsets`) taken
    too: they are made at their first use, so that a caller taking traces by index pays no
    copy of every pc; one that takes them pays it here."""
    stack = stacks[name]
    uw = _unwinder(stackwalk.Unwinder, stack)
    cap = stack.cap
    given = [(_regs(cap, "registers"), cap.memory)] * BATCH

    def flat() -> tuple[Any, Any]:
        batch = uw.unwind_many(given, MAX_FRAMES)
        return batch.pcs, batch.offsets

    pcs, offsets = benchmark(flat)
    assert list(pcs[offsets[BATCH - 1] : offsets[BATCH]]) == cap.gdb_pcs
    benchmark.extra_info["batch"] = BATCH
    benchmark.extra_info["batch_frames"] = len(pcs)


ITERATIONS = 500


@pytest.mark.benchmark(group="core")
@pytest.mark.parametrize("name", STACKS)
def test_core_per_frame(benchmark: Any, stacks: dict[str, Stack], name: str) -> None:
    """The Rust loop alone: the same stack unwound ITERATIONS times inside Rust."""
    stack = stacks[name]
    uw = _unwinder(stackwalk.Unwinder, stack)
    cap = stack.cap
    frames, _ = benchmark(uw._bench_unwind, cap.regs, cap.memory, ITERATIONS, MAX_FRAMES)
    assert frames == ITERATIONS * len(cap.gdb_pcs)
    benchmark.extra_info["iterations"] = ITERATIONS
    if benchmark.stats:
        benchmark.extra_info["ns_per_frame"] = benchmark.stats.stats.median * 1e9 / frames


def _libraries() -> dict[str, str]:
    # Debian's python3.11 has libpython linked in: 400 KB of .eh_frame, against libc's 150 KB.
    return {"libc": str(library_path("libc.so.6")), "python3.11": "/usr/bin/python3.11"}


@pytest.mark.benchmark(group="add_module")
@pytest.mark.parametrize("what", ["libc", "python3.11"])
def test_add_module_rust(benchmark: Any, what: str) -> None:
    """With .eh_frame_hdr, adding a module reads headers only, whatever .eh_frame's size."""
    path = _libraries()[what]

    def add() -> Any:
        uw = stackwalk.Unwinder("x86_64")
        uw.add_module(path, 0)
        return uw

    uw = benchmark(add)
    assert uw.modules[0][0] == path


@pytest.mark.benchmark(group="add_module")
@pytest.mark.parametrize("what", ["libc", "python3.11"])
def test_add_module_baseline(benchmark: Any, what: str) -> None:
    path = _libraries()[what]

    def add() -> Any:
        uw = stackwalk.baseline.Unwinder("x86_64")
        uw.add_module(path, 0)
        return uw

    benchmark.pedantic(add, rounds=3, iterations=1)
