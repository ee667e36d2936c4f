"""``stackwalk.Recording``: perf.data recordings from Python. Its samples are the ones
``stackwalk perf --json`` prints (which tests/test_perf.py holds to perf script), its folded
stacks those of ``--collapsed``, run by the same native pipeline with the same options; a cut
recording gives the samples before the cut and says why it stopped."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from perfdata import Recordings, stackwalk_perf
from stackwalk import Recording, StackDB
from stackwalk.perf import Sample


def command_samples(path: Path, *options: str) -> list[Sample]:
    """``stackwalk perf --json``'s samples, its hex strings read as numbers."""
    proc = stackwalk_perf("--json", *options, path)
    assert proc.returncode in (0, 1), proc.stderr
    return [Sample.from_json(json.loads(line)) for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("workload", ["qsort", "threads"])
def test_samples_are_the_commands(recordings: Recordings, workload: str) -> None:
    path = recordings(workload).path
    recording = Recording(path)
    ours = list(recording.samples())
    assert ours == command_samples(path)
    assert len(ours) > 100 and recording.error is None and recording.summary is not None
    assert recording.summary["samples"] == len(ours)
    # Named to the program's main, with source lines and inline frames.
    assert any(f.function == "main" and f.line for s in ours for f in s.frames)
    assert all(isinstance(f.pc, int) for s in ours for f in s.frames)


def test_options_as_the_commands(recordings: Recordings) -> None:
    path = recordings("qsort").path
    plain = list(Recording(path, inline=False, max_frames=3).samples())
    assert plain == command_samples(path, "--no-inline", "--max-frames", "3")
    assert not any(f.inline or f.file for s in plain for f in s.frames)
    for s in plain:
        assert sum(f.kernel for f in s.frames) <= 3 and sum(not f.kernel for f in s.frames) <= 3


def test_folded_is_the_commands_collapsed(recordings: Recordings) -> None:
    path = recordings("cxx").path
    folded = Recording(path).folded()
    proc = stackwalk_perf("--collapsed", path)
    expected = {}
    for line in proc.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        expected[stack] = int(count)
    assert folded == expected and len(folded) > 1
    assert sum(folded.values()) == len(list(Recording(path).samples()))


def test_stackdb_counts_each_samples_trace(recordings: Recordings) -> None:
    recording = Recording(recordings("threads").path)
    samples = list(recording.samples())
    traces = Counter(
        tuple(f.pc for f in s.frames if not f.inline and not f.kernel) for s in samples
    )
    traces.pop((), None)
    db = recording.stackdb()
    assert isinstance(db, StackDB)
    assert len(db) == len(traces) and db.total == sum(traces.values())
    for _, trace, count in db.top(20):
        assert traces[tuple(trace)] == count


def test_a_cut_recording(recordings: Recordings, tmp_path: Path) -> None:
    """Cut at 60%: the samples before the cut, as the command gives them, and why it stopped."""
    data = recordings("qsort").path.read_bytes()
    cut = tmp_path / "cut.perf.data"
    cut.write_bytes(data[: len(data) * 6 // 10])
    recording = Recording(cut)
    ours = list(recording.samples())
    assert recording.error is not None
    assert ours == command_samples(cut) and ours
    whole = list(Recording(recordings("qsort").path).samples())
    assert ours == whole[: len(ours)]
