"""`stackwalk perf` on perf.data files recorded at bench time (two threads of a C program under
libc's qsort, `--call-graph dwarf` at 4999 Hz) of about 3,000, 10,000 and 100,000 samples on
this project's VM ("3k", "10k", "100k": the sizes issues #14 and #15 set their goals on; a
faster machine records fewer samples in the same rounds, and each test reports the count).
In one run:

- perf-command: the whole command, symbolized, `--no-inline`, against `perf script
  --no-inline`, on the three recordings, and the interpreter's start alone (`python -c
  pass`): stackwalk's fixed cost is mostly that, perf script's cost mostly per sample, so the
  ratio grows with the recording;
- perf-script: the same two commands in interleaved rounds, each round's ratio (perf script's
  time over ours), with inline frames (`--inline`, libc's from libc6-dbg's DWARF, against
  perf script's own, its default) and without, on the three recordings;
- perf-stackcollapse: folded stacks for a flame graph, `--collapsed` (inline frames on, as
  perf's), against perf's own `perf script report stackcollapse`, in interleaved rounds on
  the three recordings; both must count the same samples;
- perf-cache: the whole command with inline frames on the 3k recording, libc6-dbg's
  decompressed sections mapped from the cache (as in every timed command: the fixture's first
  command stores them) against no cache, in interleaved rounds;
- perf-samply: the whole command, `--no-inline`, against `samply import --save-only` (its
  stacks unwound with framehop, unsymbolized), in interleaved rounds on the three recordings;
- perf-reading: the unwinding alone (in process, folded stacks counted, little output) on 1
  and 2 CPUs, against reading the file (`cat FILE > /dev/null`), on the 100k recording;
- perf-second-cpu: the speed-up from a second CPU, from runs on 1 and 2 CPUs in turn: of the
  unwinding, and, as its yardstick, of this machine's own work (the recorded qsort program
  and a memory copy, their fixed work split between two threads);
- perf-baseline: the same 200 samples unwound one by one through the Python API, by the Rust
  core and by the pure-Python baseline;
- perf-api: `Recording.samples()` (the pipeline's records, numbers as numbers) against the same
  run's JSON lines read into the same objects (hex strings parsed back, as it read them
  before), in interleaved rounds on the 3k recording;
- peak memory of the command on each recording: it must not grow with the number of samples
  (asserted, so the test run checks it too)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile
from stackwalk._core import perf_report, perf_samples
from stackwalk.perf import Recording, Sample

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from benchstacks import PERF_SIZES, on_cores, skip_unless_cores, stackwalk_command  # noqa: E402
from corefiles import cargo_tool  # noqa: E402

# The main() of both programs below: two threads of their `work`, with `count` = argv[1].
TWO_THREADS = r"""
int main(int argc, char **argv)
{
    pthread_t threads[2];
    count = atoi(argv[1]);
    for (long t = 0; t < 2; t++)
        pthread_create(&threads[t], NULL, work, (void *)t);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
    return 0;
}
"""
WORKLOAD = (
    r"""
#include <pthread.h>
#include <stdlib.h>
static int count;
static int cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
static void *work(void *arg)
{
    int *v = malloc(200000 * sizeof *v);
    for (int r = 0; r < count; r++) {
        for (int i = 0; i < 200000; i++)
            v[i] = (i * 7919 + r + (int)(long)arg) % 100003;
        qsort(v, 200000, sizeof v[0], cmp);
    }
    return v;
}
"""
    + TWO_THREADS
)
# Two threads, each copying its own 64 MiB buffer: the total copies (argv[1]) split between
# them, on as many CPUs as they are given.
COPY = (
    r"""
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#define SIZE (64 << 20)
static int count;
static void *work(void *arg)
{
    char *from = malloc(SIZE), *to = malloc(SIZE);
    memset(from, (int)(long)arg, SIZE);
    for (int i = 0; i < count / 2; i++) {
        memcpy(to, from, SIZE);
        from[i] = to[i + 1];
    }
    return (void *)(long)to[SIZE - 1];
}
"""
    + TWO_THREADS
)
# The recording the in-process tests read.
LONG = "100k"
BASELINE_SAMPLES = 200


def _record(tmp: Path, exe: Path, rounds: int, name: str) -> Path:
    data = tmp / name
    perf = shutil.which("perf")
    assert perf, "linux-perf is installed by .ci/setup"
    subprocess.run(
        [perf, "record", "-q", "-F", "4999", "-e", "cpu-clock", "--call-graph", "dwarf",
         "-o", str(data), "--", str(exe), str(rounds)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return data


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The recorded workload, and a program streaming through memory (the machine's own
    speed-up from a second CPU, on the same work split between threads)."""
    tmp = tmp_path_factory.mktemp("programs")
    made = {}
    for name, source in (("sort", WORKLOAD), ("copy", COPY)):
        src = tmp / f"{name}.c"
        src.write_text(source)
        made[name] = tmp / name
        subprocess.run(
            ["gcc", "-O2", "-fomit-frame-pointer", "-pthread", "-o", str(made[name]), str(src)],
            check=True,
        )
    return made


@pytest.fixture(scope="module")
def recordings(
    tmp_path_factory: pytest.TempPathFactory, programs: dict[str, Path]
) -> Iterator[dict[str, Path]]:
    """The three recordings, deleted after the module's tests (1.4 GB in all; pytest would
    keep them with its last temporary directories)."""
    tmp = tmp_path_factory.mktemp("perf")
    made: dict[str, Path] = {}
    try:
        for size, rounds in PERF_SIZES.items():
            made[size] = _record(tmp, programs["sort"], rounds, f"{size}.perf.data")
        # libc6-dbg's decompressed sections into the run's cache (conftest), as a machine's
        # first command with inline frames leaves them: the timed commands map them.
        warm = _run(_stackwalk(str(made["3k"]), "--inline"))
        assert warm.returncode == 0, warm.stderr
        yield made
    finally:
        for path in made.values():
            path.unlink(missing_ok=True)


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run a command (in `env`, else this one's) with its output thrown away (not read through
    a pipe, which would time the reader too)."""
    return subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=600
    )


def _stackwalk(*args: str) -> list[str]:
    return stackwalk_command("perf", *args)


def _samples(path: Path) -> int:
    summary = perf_report(path, "collapsed", output=os.devnull)
    assert summary["error"] is None
    return int(summary["samples"])


@pytest.mark.benchmark(group="perf-command")
@pytest.mark.parametrize("size", PERF_SIZES)
def test_stackwalk_perf(benchmark: Any, recordings: dict[str, Path], size: str) -> None:
    argv = _stackwalk(str(recordings[size]), "--no-inline")
    proc = benchmark.pedantic(_run, args=(argv,), rounds=3)
    assert proc.returncode == 0, proc.stderr
    benchmark.extra_info["samples"] = _samples(recordings[size])


@pytest.mark.benchmark(group="perf-command")
@pytest.mark.parametrize("size", PERF_SIZES)
def test_perf_script(benchmark: Any, recordings: dict[str, Path], size: str) -> None:
    argv = ["perf", "script", "--no-inline", "-i", str(recordings[size])]
    proc = benchmark.pedantic(_run, args=(argv,), rounds=3)
    assert proc.returncode == 0, proc.stderr


def _side_by_side(
    ours: list[str], theirs: list[str], theirs_env: dict[str, str] | None = None
) -> list[float]:
    """Our command and the reference's (in `theirs_env`, else this environment), once each,
    one after the other: their times (s)."""
    took = []
    for argv, env in ((ours, None), (theirs, theirs_env)):
        start = time.perf_counter()
        proc = _run(argv, env)
        took.append(time.perf_counter() - start)
        assert proc.returncode == 0, proc.stderr
    return took


COMPARE_ROUNDS = 3


def _compare(
    benchmark: Any,
    ours: list[str],
    theirs: list[str],
    reference: str,
    rounds: int = COMPARE_ROUNDS,
    theirs_env: dict[str, str] | None = None,
) -> None:
    """Our command and a reference's (see `_side_by_side`), one after the other, `rounds`
    rounds: each round's ratio (the reference's time over ours) and both times, into
    `extra_info` (the reference's as `{reference}_s`)."""

    def timed() -> list[list[float]]:
        return [_side_by_side(ours, theirs, theirs_env) for _ in range(rounds)]

    took = benchmark.pedantic(timed, rounds=1)
    benchmark.extra_info["ratios"] = [round(t[1] / t[0], 2) for t in took]
    benchmark.extra_info["stackwalk_s"] = [round(t[0], 3) for t in took]
    benchmark.extra_info[f"{reference}_s"] = [round(t[1], 3) for t in took]


@pytest.mark.benchmark(group="perf-script")
@pytest.mark.parametrize("inline", ["--no-inline", "--inline"])
@pytest.mark.parametrize("size", PERF_SIZES)
def test_against_perf_script(
    benchmark: Any, recordings: dict[str, Path], size: str, inline: str
) -> None:
    """`stackwalk perf` against `perf script` on the same recording, both with inline frames
    or both without (perf script's default is with), in interleaved rounds: each round's
    ratio, perf script's time over ours."""
    path = str(recordings[size])
    ours, theirs = _stackwalk(path, inline), ["perf", "script", inline, "-i", path]
    _compare(benchmark, ours, theirs, "perf_script")
    benchmark.extra_info["samples"] = _samples(recordings[size])
    print(f"\n{size} {inline}: {benchmark.extra_info}")


def _folded_total(lines: bytes) -> int:
    """The samples folded stacks count (each line's last field)."""
    return sum(int(line.rsplit(None, 1)[1]) for line in lines.splitlines() if line.strip())


CACHE_ROUNDS = 5


@pytest.mark.benchmark(group="perf-cache")
def test_section_cache(benchmark: Any, recordings: dict[str, Path]) -> None:
    """`stackwalk perf --inline` on the 3k recording with libc6-dbg's decompressed debug
    sections mapped from the cache (rust/symbolize/lines/cache.rs, as every timed command here finds
    them) against the same command with no cache (`STACKWALK_CACHE_DIR=`: each decompressed
    as far as the units looked up need), in interleaved rounds: each round's ratio, the
    uncached time over the cached."""
    argv = _stackwalk(str(recordings["3k"]), "--inline")
    off = {**os.environ, "STACKWALK_CACHE_DIR": ""}
    _compare(benchmark, argv, argv, "no_cache", rounds=CACHE_ROUNDS, theirs_env=off)
    benchmark.extra_info["samples"] = _samples(recordings["3k"])
    print(f"\ncache: {benchmark.extra_info}")


@pytest.mark.benchmark(group="perf-stackcollapse")
@pytest.mark.parametrize("size", PERF_SIZES)
def test_against_stackcollapse(benchmark: Any, recordings: dict[str, Path], size: str) -> None:
    """`stackwalk perf --collapsed` against `perf script report stackcollapse` (perf's own
    folded stacks, for flame graphs), both with inline frames, in interleaved rounds: each
    round's ratio, perf's time over ours. Both must count the recording's samples."""
    path = str(recordings[size])
    ours = _stackwalk(path, "--collapsed")
    theirs = ["perf", "script", "report", "stackcollapse", "-i", path]
    _compare(benchmark, ours, theirs, "stackcollapse")
    samples = _samples(recordings[size])
    for argv in (ours, theirs):
        folded = subprocess.run(argv, capture_output=True, check=True, timeout=600).stdout
        assert _folded_total(folded) == samples, argv
    benchmark.extra_info["samples"] = samples
    print(f"\n{size}: {benchmark.extra_info}")


SAMPLY = cargo_tool("samply")


def _samply_samples(profile: Path) -> int:
    """The samples of a profile `samply import` saved (Firefox Profiler's format, gzipped or
    not): every thread's, across its processes."""
    raw = profile.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)

    def count(p: dict[str, Any]) -> int:
        own = sum(int(t["samples"]["length"]) for t in p.get("threads", []))
        return own + sum(count(sub) for sub in p.get("processes", []))

    return count(doc)


@pytest.mark.benchmark(group="perf-samply")
@pytest.mark.parametrize("size", PERF_SIZES)
def test_against_samply(
    benchmark: Any, recordings: dict[str, Path], size: str, tmp_path: Path
) -> None:
    """`stackwalk perf --no-inline` (symbolized text) against `samply import --save-only`
    (Firefox Profiler's profile, its stacks unwound with framehop and left unsymbolized) on the
    same recording, in interleaved rounds: each round's ratio, samply's time over ours. samply
    must find the samples we find (it counts those of the recorded program's threads)."""
    assert os.access(SAMPLY, os.X_OK), "samply is installed by .ci/setup"
    path = str(recordings[size])
    profile = tmp_path / "profile.json.gz"
    ours = _stackwalk(path, "--no-inline")
    theirs = [SAMPLY, "import", "--save-only", "--output", str(profile), path]
    _compare(benchmark, ours, theirs, "samply")
    ours_samples = _samples(recordings[size])
    assert _samply_samples(profile) >= ours_samples * 0.99
    benchmark.extra_info["samples"] = ours_samples
    print(f"\n{size}: {benchmark.extra_info}")


@pytest.mark.benchmark(group="perf-command")
def test_interpreter_start(benchmark: Any) -> None:
    """The interpreter starting and stopping with nothing to do: the floor of any command of
    a Python package (here with this machine's site-packages)."""
    proc = benchmark.pedantic(_run, args=([sys.executable, "-c", "pass"],), rounds=5)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.benchmark(group="perf-reading")
@pytest.mark.parametrize("cores", [1, 2])
def test_stackwalk_unwinding(benchmark: Any, recordings: dict[str, Path], cores: int) -> None:
    """Reading, unwinding and counting the stacks (folded), in process: no interpreter start,
    little output. On one CPU with one worker, and on two with two (the reading thread and the
    pager keep a second CPU partly busy even with one worker, so CPUs, not workers, are
    compared)."""
    skip_unless_cores(cores)
    path = recordings[LONG]

    def report() -> Any:
        return perf_report(path, "collapsed", output=os.devnull, jobs=cores)

    summary = benchmark.pedantic(on_cores, args=(cores, report), rounds=5)
    assert summary["error"] is None and summary["samples"] > 1000
    benchmark.extra_info["samples"] = summary["samples"]


def _second_cpu(run: Callable[[], Any], pairs: int) -> list[float]:
    """`run()` on 1 CPU, then on 2, `pairs` times over: each pair's ratio of times. A shared
    machine's speed drifts between tests, and much less within a pair of neighbouring runs."""
    ratios = []
    for _ in range(pairs):
        took = []
        for cores in (1, 2):
            start = time.perf_counter()
            on_cores(cores, run)
            took.append(time.perf_counter() - start)
        ratios.append(took[0] / took[1])
    return ratios


@pytest.mark.benchmark(group="perf-second-cpu")
@pytest.mark.parametrize("work", ["unwinding", "sort", "copy"])
def test_second_cpu(
    benchmark: Any, recordings: dict[str, Path], programs: dict[str, Path], work: str
) -> None:
    """What a second CPU gives: the unwinding alone (as in test_stackwalk_unwinding, one worker
    per CPU) and, as its yardstick, this machine's own work of two threads sharing a fixed
    amount of it: the recorded program (qsort, computing in the cache) and a copy through
    memory. A shared VM's second CPU need not double anything."""
    skip_unless_cores(2)
    if work == "unwinding":
        path = recordings[LONG]

        def run() -> None:
            jobs = len(os.sched_getaffinity(0))
            summary = perf_report(path, "collapsed", output=os.devnull, jobs=jobs)
            assert summary["error"] is None and summary["samples"] > 1000, summary
    else:
        argv = [str(programs[work]), "8" if work == "sort" else "16"]

        def run() -> None:
            proc = _run(argv)
            assert proc.returncode == 0, proc.stderr

    ratios = benchmark.pedantic(_second_cpu, args=(run, 7), rounds=1)
    benchmark.extra_info["speedup"] = statistics.median(ratios)


@pytest.mark.benchmark(group="perf-reading")
def test_cat(benchmark: Any, recordings: dict[str, Path]) -> None:
    """Reading the file, the floor."""
    proc = benchmark.pedantic(_run, args=(["cat", str(recordings[LONG])],), rounds=5)
    assert proc.returncode == 0


def _bias(path: str, start: int, pgoff: int) -> int | None:
    """Runtime − ELF address of an executable mapping of `path` at `start` from file offset
    `pgoff` (its code segment: the executable PT_LOAD whose pages hold `pgoff`)."""
    try:
        with open(path, "rb") as f:
            for seg in ELFFile(f).iter_segments():
                h = seg.header
                if h.p_type == "PT_LOAD" and h.p_flags & 1:
                    if h.p_offset & ~0xFFF <= pgoff < h.p_offset + h.p_filesz:
                        return int(start - pgoff - (h.p_vaddr - h.p_offset))
    except OSError:
        return None
    return None


def _unwind_each(unwinder_class: type) -> Callable[[dict[str, Any]], int]:
    def unwind(data: dict[str, Any]) -> int:
        pid = data["samples"][0][0]
        uw = unwinder_class(data["arch"])
        for mpid, start, _len, pgoff, filename in data["mmaps"]:
            bias = _bias(filename, start, pgoff) if mpid == pid else None
            if bias is not None:
                try:
                    uw.add_module(filename, bias)
                except Exception:  # overlapping re-mappings: the first one serves
                    pass
        frames = 0
        for spid, _tid, _time, regs, sp, stack in data["samples"]:
            if spid == pid:
                frames += len(uw.unwind(regs, [(sp, stack)]).frames)
        return frames

    return unwind


@pytest.mark.benchmark(group="perf-baseline")
@pytest.mark.parametrize("impl", ["rust", "baseline"])
def test_unwinding_alone(benchmark: Any, recordings: dict[str, Path], impl: str) -> None:
    """The same samples (decoded beforehand) unwound one by one, modules added once."""
    if impl == "rust":
        from stackwalk import Unwinder
    else:
        from stackwalk.baseline import Unwinder  # type: ignore[assignment]
    data = perf_samples(recordings[LONG], BASELINE_SAMPLES)
    frames = benchmark.pedantic(_unwind_each(Unwinder), args=(data,), rounds=3)
    assert frames > 2 * len(data["samples"])
    benchmark.extra_info["samples"] = len(data["samples"])
    benchmark.extra_info["frames"] = frames


# Runs the CLI, then reports the process's peak RSS (VmHWM). Not getrusage's ru_maxrss, which
# also counts the memory of the process that forked it (this one) before its exec.
PEAK_OF = """
import sys
from stackwalk.cli import main
status = main(sys.argv[1:])
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")), file=sys.stderr)
sys.exit(status)
"""


def _peak_rss_kib(path: Path) -> int:
    argv = [sys.executable, "-c", PEAK_OF, "perf", str(path)]
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stderr.split()[-1])


@pytest.mark.benchmark(group="perf-memory")
def test_peak_memory_is_flat(benchmark: Any, recordings: dict[str, Path]) -> None:
    """Peak RSS of `stackwalk perf` (text output) on the three recordings, three runs each:
    reading, unwinding and writing hold no more for twelve times the samples."""
    sizes = {name: path.stat().st_size for name, path in recordings.items()}

    def peaks_kib() -> dict[str, list[int]]:
        return {name: [_peak_rss_kib(path) for _ in range(3)] for name, path in recordings.items()}

    peaks = benchmark.pedantic(peaks_kib, rounds=1)
    benchmark.extra_info.update({f"{k}_file_mib": v >> 20 for k, v in sizes.items()})
    benchmark.extra_info.update(
        {f"{k}_peak_rss_mib": f"{min(v) >> 10}-{max(v) >> 10}" for k, v in peaks.items()}
    )
    # 33 times the samples on a quiet machine; fewer where perf record itself was starved:
    # what matters is that it is many times longer.
    assert sizes["100k"] > 10 * sizes["3k"], sizes
    # Whatever the length, up to about 10 MiB of the file is mapped ahead of the reading, two
    # batches of samples (about 4.5 MiB each) and the records of the last two rounds are held,
    # and up to 8 MiB of pages wait to be dropped: on a quiet machine the peaks differ by a few
    # MiB (the figures above; docs/speed.md's table). How much is mapped at the peak varies with
    # the machine's load (a descheduled reader, page cache under pressure), so the test asks
    # only what no load changes: the longer recordings hold no share of their extra length --
    # less than a quarter of it (a reader that kept what it read would hold all of it).
    extra_kib = (sizes["100k"] - sizes["3k"]) >> 10
    assert min(peaks["100k"]) < max(peaks["3k"]) + extra_kib // 4, (sizes, peaks)


def _samples_from_json(path: Path) -> list[Sample]:
    """The samples of `stackwalk perf --json`'s run, read from its JSON lines."""
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "out")
        perf_report(path, "json", output=output)
        with open(output, encoding="utf-8") as lines:
            return [Sample.from_json(json.loads(line)) for line in lines]


@pytest.mark.benchmark(group="perf-api")
def test_recording_samples(benchmark: Any, recordings: dict[str, Path]) -> None:
    """`Recording.samples()` against reading the same samples from JSON lines, one after the
    other, three rounds: each round's ratio (JSON's time over the records') and both times.
    Both read the same samples."""
    path = recordings["3k"]

    def timed() -> list[list[float]]:
        took = []
        for _ in range(COMPARE_ROUNDS):
            start = time.perf_counter()
            ours = list(Recording(path).samples())
            middle = time.perf_counter()
            theirs = _samples_from_json(path)
            took.append([middle - start, time.perf_counter() - middle])
            assert ours == theirs and ours
        return took

    took = benchmark.pedantic(timed, rounds=1)
    benchmark.extra_info["ratios"] = [round(t[1] / t[0], 2) for t in took]
    benchmark.extra_info["records_s"] = [round(t[0], 3) for t in took]
    benchmark.extra_info["json_s"] = [round(t[1], 3) for t in took]
