"""The stack-trace database: adding traces one by one through the Python API, as a Python
program aggregating samples would, against the same aggregation in pure Python (a dict from
trace to index and a list of counts, which is what `StackDB` gives: a stable index per distinct
trace and its count).

The traces: 300 distinct stacks of 8 to 64 pcs (the depths of real native stacks), added
100,000 times with a skewed frequency, as the samples of a profile are. Each add is of a
tuple of its own, as each sample's trace is: a dict cannot find it by identity."""

from __future__ import annotations

import random
from typing import Any

import pytest
import stackwalk

DISTINCT = 300
ADDS = 100_000


def _traces() -> list[tuple[int, ...]]:
    rng = random.Random(7)
    distinct = [
        tuple(rng.randrange(0x400000, 0x7FFF_FFFF_FFFF) for _ in range(rng.randrange(8, 65)))
        for _ in range(DISTINCT)
    ]
    weights = [1 / (rank + 1) for rank in range(DISTINCT)]
    chosen = distinct + rng.choices(distinct, weights, k=ADDS - DISTINCT)
    return [tuple(list(trace)) for trace in chosen]


TRACES = _traces()


def _stackdb(traces: list[tuple[int, ...]]) -> list[tuple[int, tuple[int, ...], int]]:
    db = stackwalk.StackDB()
    for trace in traces:
        db.add(trace)
    return [(index, tuple(trace), count) for index, trace, count in db]


def _python(traces: list[tuple[int, ...]]) -> list[tuple[int, tuple[int, ...], int]]:
    index: dict[tuple[int, ...], int] = {}
    counts: list[int] = []
    for trace in traces:
        i = index.setdefault(trace, len(counts))
        if i == len(counts):
            counts.append(0)
        counts[i] += 1
    return [(i, trace, counts[i]) for trace, i in index.items()]


@pytest.mark.benchmark(group="stackdb")
@pytest.mark.parametrize("impl", ["stackdb", "python"])
def test_stackdb_add(benchmark: Any, impl: str) -> None:
    run = _stackdb if impl == "stackdb" else _python
    got = benchmark.pedantic(run, args=(TRACES,), rounds=3)
    # Both aggregate the same way: the other's answer is the reference.
    other = _python if impl == "stackdb" else _stackdb
    assert got == other(TRACES)
    assert len(got) == DISTINCT
    benchmark.extra_info["adds"] = len(TRACES)
