"""`stackwalk triage` throughput: crashes triaged per second on one CPU, on two (`--jobs 2`),
and on a Dask LocalCluster of two worker processes (started by the command, and up already),
side by side in one run on the same spool;
and `stackwalk report` on a store of 100,000 crashes.

The spool: the small C program of bench_core.py crashed at three depths (a dozen to sixty-odd
frames, three modules), copied over and over, each copy made distinct by 8 bytes appended past
the core's last segment (which readers ignore), so that triage's content hashes see as many
crashes as files."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from bench_core import small_cores  # noqa: F401  (a fixture)
from benchstacks import benchmarks_enabled, stackwalk_command

SPOOL_CORES = 4000  # files when the benchmarks run for real (the fixed costs, Dask's import and
# connection above all, small beside the work)
SPOOL_CORES_SMOKE = 8  # and in the test run's smoke pass
STORE_CRASHES = 100_000
STORE_CRASHES_SMOKE = 500


def _write_crashes(spool: Path, images: list[bytes], numbers: range) -> None:
    """Crash ``i`` of ``numbers`` as ``core.{i:05d}``: image ``i`` modulo their number, made
    distinct by ``i`` in 8 bytes past its last segment."""
    for i in numbers:
        (spool / f"core.{i:05d}").write_bytes(images[i % len(images)] + i.to_bytes(8, "little"))


@pytest.fixture(scope="module")
def spool(
    tmp_path_factory: pytest.TempPathFactory,
    small_cores: dict[int, Path],  # noqa: F811
    request: pytest.FixtureRequest,
) -> Path:
    distinct = list(small_cores.values())
    images = [p.read_bytes() for p in distinct]
    spool = tmp_path_factory.mktemp("triage") / "spool"
    spool.mkdir()
    cores = SPOOL_CORES if benchmarks_enabled(request.config) else SPOOL_CORES_SMOKE
    _write_crashes(spool, images, range(cores))
    # On disk before any run is timed, as a real spool is long before triage reads it: else
    # the kernel writes its 2.4 GB back during the first runs, and the store's fsyncs (at
    # each WAL checkpoint) wait for that writeback.
    os.sync()
    return spool


def _triage(spool: Path, db: Path, *options: str) -> subprocess.CompletedProcess[str]:
    db.unlink(missing_ok=True)
    argv = stackwalk_command("triage", spool, "--db", db, *options)
    return subprocess.run(argv, capture_output=True, text=True, timeout=1800)


class Cluster(NamedTuple):
    """A Dask LocalCluster's scheduler address and its worker processes (with their nannies)."""

    address: str
    processes: list[int]

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The worker processes stopped (SIGSTOP) while other runs are timed. Idle, they take
        some 5% of a CPU (heartbeats, event loops), and the scheduler (in this process) 3.5%:
        a twelfth of a --jobs 2 run's second CPU, which a machine without the cluster does
        not lose. The scheduler forgets a worker only after minutes of silence."""
        for pid in self.processes:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in self.processes:
                os.kill(pid, signal.SIGCONT)
            time.sleep(1)  # their timers (heartbeats) catch up before anything is timed


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A Dask LocalCluster of two worker processes, one thread each, started before the runs
    that use it (as a cluster a service sends its crashes to is)."""
    distributed = pytest.importorskip("distributed")
    import psutil  # distributed's own dependency

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1) as local:
        started = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before]
        assert len(started) >= 2, started
        yield Cluster(local.scheduler_address, started)


@pytest.mark.benchmark(group="triage")
@pytest.mark.parametrize("how", ["--jobs=1", "--jobs=2", "--dask=local", "--dask=running"])
def test_triage(
    benchmark: Any, spool: Path, tmp_path: Path, how: str, request: pytest.FixtureRequest
) -> None:
    """--dask=local starts its cluster (a second or two of the run); --dask=running is sent
    to the cluster of the fixture, up already."""
    if how == "--dask=local":
        pytest.importorskip("distributed")
    if how == "--dask=running":
        how = f"--dask={request.getfixturevalue('cluster').address}"
    files = len(list(spool.iterdir()))
    proc = benchmark.pedantic(
        _triage, args=(spool, tmp_path / "crashes.sqlite", how), rounds=1, warmup_rounds=0
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"{files} crashes stored"), proc.stdout
    benchmark.extra_info["crashes"] = files


INTERLEAVED_ROUNDS = 4


def _timed_triage(spool: Path, db: Path, how: str, cluster: Cluster) -> float:
    """One run's seconds. The cluster's workers are stopped while a --jobs run is timed."""
    with contextlib.nullcontext() if how.startswith("--dask") else cluster.paused():
        start = time.perf_counter()
        proc = _triage(spool, db, how)
        took = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = len(os.listdir(spool))
    assert proc.stdout.startswith(f"{files} crashes stored"), proc.stdout
    return took


@pytest.mark.benchmark(group="triage-interleaved")
def test_triage_interleaved(
    benchmark: Any, spool: Path, tmp_path: Path, cluster: Cluster, request: pytest.FixtureRequest
) -> None:
    """--jobs 1, --jobs 2 and the running cluster in turn, INTERLEAVED_ROUNDS rounds: each
    round's ratios to --jobs 1 (this VM's speed drifts over minutes, so runs far apart in time
    compare badly). The cluster's workers are stopped while the --jobs runs are timed."""
    hows = ["--jobs=1", "--jobs=2", f"--dask={cluster.address}"]
    rounds = INTERLEAVED_ROUNDS if benchmarks_enabled(request.config) else 1

    def interleaved() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {how: [] for how in hows}
        for _ in range(rounds):
            for how in hows:
                times[how].append(_timed_triage(spool, tmp_path / "crashes.sqlite", how, cluster))
        return times

    times = benchmark.pedantic(interleaved, rounds=1, warmup_rounds=0)
    one = times["--jobs=1"]
    for name, how in (("jobs2", "--jobs=2"), ("dask", hows[2])):
        ratios = [a / b for a, b in zip(one, times[how], strict=True)]
        benchmark.extra_info[f"{name}_ratios"] = [round(r, 2) for r in ratios]
    benchmark.extra_info["jobs1_s"] = [round(t, 2) for t in one]
    print(f"\ninterleaved: {benchmark.extra_info}")


@pytest.fixture(scope="module")
def spool_triple(spool: Path, small_cores: dict[int, Path]) -> Path:  # noqa: F811
    """The spool's crashes and twice as many others (distinct again: triage reads each content
    once), beside the spool."""
    triple = spool.with_name("spool-triple")
    triple.mkdir()
    images = [p.read_bytes() for p in small_cores.values()]
    files = sorted(spool.iterdir())
    for path in files:
        os.link(path, triple / path.name)
    _write_crashes(triple, images, range(len(files), 3 * len(files)))
    os.sync()
    return triple


MARGINAL_ROUNDS = 3


@pytest.mark.benchmark(group="triage-interleaved")
def test_triage_marginal(
    benchmark: Any,
    spool: Path,
    spool_triple: Path,
    tmp_path: Path,
    cluster: Cluster,
    request: pytest.FixtureRequest,
) -> None:
    """As test_triage_interleaved, on the spool and on the spool three times over: the ratios
    of the time each crash beyond the spool's costs (the triple's time less the spool's), where
    the fixed costs cancel out (the interpreter's start, and for Dask the driver's import of
    `distributed` and its connection: some 0.3 s here, which no worker shares)."""
    hows = ["--jobs=1", "--jobs=2", f"--dask={cluster.address}"]
    rounds = MARGINAL_ROUNDS if benchmarks_enabled(request.config) else 1

    def interleaved() -> dict[tuple[str, str], list[float]]:
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):
            for name, where in (("one", spool), ("triple", spool_triple)):
                for how in hows:
                    took = _timed_triage(where, tmp_path / "crashes.sqlite", how, cluster)
                    times.setdefault((name, how), []).append(took)
        return times

    times = benchmark.pedantic(interleaved, rounds=1, warmup_rounds=0)
    extra = len(os.listdir(spool_triple)) - len(os.listdir(spool))

    def beyond(how: str) -> list[float]:
        return [t - o for t, o in zip(times["triple", how], times["one", how], strict=True)]

    one = beyond("--jobs=1")
    for name, how in (("jobs2", "--jobs=2"), ("dask", hows[2])):
        whole = [a / b for a, b in zip(times["one", "--jobs=1"], times["one", how], strict=True)]
        benchmark.extra_info[f"{name}_whole_ratios"] = [round(r, 2) for r in whole]
        ratios = [a / b for a, b in zip(one, beyond(how), strict=True)]
        benchmark.extra_info[f"{name}_beyond_ratios"] = [round(r, 2) for r in ratios]
    for how in hows:
        per = [round(t / extra * 1e6) for t in beyond(how)]
        benchmark.extra_info[f"{how.split(':')[0]}_beyond_us_per_crash"] = per
    print(f"\nmarginal: {benchmark.extra_info}")


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A store of STORE_CRASHES crashes in 2,000 buckets (sizes drawn from a long tail, as
    crash reports are), each with 12 frames, written through CrashStore.add."""
    from stackwalk.signature import bucket_id
    from stackwalk.store import CrashStore

    path = tmp_path_factory.mktemp("store") / "big.sqlite"
    crashes = STORE_CRASHES if benchmarks_enabled(request.config) else STORE_CRASHES_SMOKE
    rng = random.Random(1)
    signatures = [f"function_{i} | caller_{i % 7}" for i in range(2000)]
    weights = [1 / (i + 1) for i in range(len(signatures))]
    with CrashStore(path) as store:
        batch = []
        for i in range(crashes):
            sig = rng.choices(signatures, weights)[0]
            frames = [(1, f, 0x401000 + f, "/usr/bin/app", 0x1000 + f, sig.split()[0], f, None,
                       None, 0, "cfi") for f in range(12)]  # fmt: skip
            batch.append({
                "path": f"/var/crash/core.{i}", "content_hash": f"{i:040x}", "size": 1,
                "mtime": 0.0, "crash_time": 1_763_942_400 + i * 30, "executable": "/usr/bin/app",
                "build_id": "ab" * 20, "signature": sig, "bucket": bucket_id(sig),
                "fingerprint": "0" * 16, "crashing_tid": 1, "frames": frames,
            })  # fmt: skip
            if len(batch) == 5000:
                store.add(batch)
                batch.clear()
        store.add(batch)
    return path


@pytest.mark.benchmark(group="report")
@pytest.mark.parametrize("how", ["text", "--json", "--html"])
def test_report(benchmark: Any, big_store: Path, tmp_path: Path, how: str) -> None:
    argv = stackwalk_command("report", "--db", big_store)
    if how == "--html":
        argv += ["--html", str(tmp_path / "report.html")]
    elif how == "--json":
        argv.append("--json")

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=600)

    proc = benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    assert proc.returncode == 0, proc.stderr[-2000:]
