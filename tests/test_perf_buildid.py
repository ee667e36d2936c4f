"""perf.data and the build ids it records (``HEADER_BUILD_ID``): a program deleted after
``perf record``, or rebuilt with another build id, is read from perf's build-id cache
(``~/.debug/.build-id/xx/rest/elf``, where perf record copies every file it saw), as perf script
reads it; a rebuilt file is never used for the recording's samples. perf script, with the same
home, is the reference."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from corefiles import _free_port, build_id_of
from debuginfod_server import metrics, split, start_debuginfod
from perfdata import (
    O2,
    ScriptSample,
    parse_script,
    perf_env,
    perf_record,
    perf_script,
    run,
    sized_function,
)
from realstacks import Builder


@dataclass
class Recorded:
    path: Path  # the perf.data file
    program: Path  # the program's path, as recorded
    original: Path  # a copy of it, kept aside
    home: Path  # perf's home: its build-id cache is home/.debug


@pytest.fixture
def recorded(build: Builder, tmp_path: Path) -> Recorded:
    """The qsort workload run from a program of its own, recorded with a home of its own."""
    home = tmp_path / "home"
    home.mkdir()
    program = tmp_path / "bin" / "qsort"
    program.parent.mkdir()
    shutil.copy(build("perf_qsort.c", *O2), program)
    original = tmp_path / "qsort.orig"
    shutil.copy(program, original)
    path = tmp_path / "perf.data"
    perf_record(path, [program], home)
    return Recorded(path, program, original, home)


def ours(recorded: Recorded, home: Path) -> tuple[list[ScriptSample], str]:
    """``stackwalk perf --no-inline`` (its text, perf script's shape), parsed, and its stderr
    (the reference is perf script --no-inline)."""
    cmd = [sys.executable, "-m", "stackwalk", "perf", "--no-inline", str(recorded.path)]
    proc = run(cmd, env=perf_env(home))
    assert proc.returncode in (0, 1), proc.stderr
    return parse_script(proc.stdout), proc.stderr


def frames(sample: ScriptSample, program: Path) -> list[tuple[int, str, str | None]]:
    """A sample's user frames: address, dso, and the function for the program's frames (libc's
    have aliases, which perf and stackwalk may pick differently: test_perf.py checks them)."""
    return [(f.address, f.dso, f.symbol if f.dso == str(program) else None)
            for f in sample.user_frames]  # fmt: skip


def same_frames(mine: ScriptSample, theirs: ScriptSample, program: Path) -> bool:
    """The same frames (``frames``), but where a sample's pc is in the program's PLT: ours
    names the entry (``qsort@plt``, as objdump does), perf script, reading the program from its
    build-id cache, the symbol before the PLT, a label of no size (``_init``), which holds no
    such address."""
    ours, perfs = frames(mine, program), frames(theirs, program)
    if len(ours) != len(perfs):
        return False
    for (address, dso, name), (their_address, their_dso, their_name) in zip(
        ours, perfs, strict=True
    ):
        if (address, dso) != (their_address, their_dso):
            return False
        if name != their_name and not (
            (name or "").endswith("@plt") and not sized_function(str(program), their_name or "")
        ):
            return False
    return True


def by_sample(
    samples: list[ScriptSample] | tuple[ScriptSample, ...],
) -> dict[tuple[int, int], ScriptSample]:
    # perf script's text gives times to the µs: a thread's samples are a millisecond apart.
    return {(s.tid, s.time // 1000): s for s in samples}


def compare(recorded: Recorded, home: Path) -> tuple[list[tuple[ScriptSample, ScriptSample]], str]:
    """(perf script's sample, ours) pairs, every sample of both, and our stderr."""
    theirs = by_sample(perf_script(recorded.path, home))
    mine, stderr = ours(recorded, home)
    mine_by = by_sample(mine)
    assert mine_by.keys() == theirs.keys()
    return [(theirs[k], mine_by[k]) for k in theirs], stderr


def test_a_deleted_program_is_read_from_perfs_cache(recorded: Recorded) -> None:
    recorded.program.unlink()
    pairs, stderr = compare(recorded, recorded.home)
    build_id = build_id_of(str(recorded.original))
    cached = recorded.home / ".debug" / ".build-id" / build_id[:2] / build_id[2:] / "elf"
    assert f"{recorded.program} read from perf's build-id cache: {cached}" in stderr
    for theirs, mine in pairs:
        assert same_frames(mine, theirs, recorded.program), (theirs.key, mine, theirs)
    # The program's own frames are named, and stacks go through it to _start.
    named = {f[2] for _, mine in pairs for f in frames(mine, recorded.program) if f[2]}
    assert {"main", "_start"} <= named


def test_a_rebuilt_program_is_not_used(recorded: Recorded, build: Builder, tmp_path: Path) -> None:
    # Replaced as a linker replaces its output (a new file): perf's cache may hold the old one
    # as a hard link, which a write into the same file would change too.
    recorded.program.unlink()
    shutil.copy(build("perf_qsort.c", "-O1"), recorded.program)
    recorded_id = build_id_of(str(recorded.original))
    rebuilt_id = build_id_of(str(recorded.program))
    assert rebuilt_id != recorded_id
    mismatch = (f"{recorded.program} has build id {rebuilt_id}, the recording's is "
                f"{recorded_id}: not used")  # fmt: skip
    # perf's cache has the program that ran: perf script and stackwalk both read it.
    pairs, stderr = compare(recorded, recorded.home)
    assert mismatch in stderr
    for theirs, mine in pairs:
        assert same_frames(mine, theirs, recorded.program), (theirs.key, mine, theirs)
    # Without the cache (another home): the program is unknown to both, never named from the
    # rebuilt file; where perf script's libdw goes on past such a frame, ours stop there.
    empty = tmp_path / "empty-home"
    empty.mkdir()
    pairs, stderr = compare(recorded, empty)
    assert mismatch in stderr
    in_program = 0
    for theirs, mine in pairs:
        ours_frames = frames(mine, recorded.program)
        assert ours_frames == frames(theirs, recorded.program)[: len(ours_frames)], (
            theirs.user_frames,
            mine.user_frames,
        )
        assert all(f.symbol is None for f in mine.user_frames if f.dso == str(recorded.program))
        in_program += any(f.dso == str(recorded.program) for f in mine.user_frames)
    assert in_program > len(pairs) // 2


def test_a_program_rebuilt_without_a_build_id_is_not_used(
    recorded: Recorded, build: Builder, tmp_path: Path
) -> None:
    """The recording has the program's build id, the file at its path none: another build (a
    file without a build id cannot be told from the one recorded), not used, as a core does
    with such a file; its frames are never named from it."""
    recorded.program.unlink()
    shutil.copy(build("perf_qsort.c", "-O1", "-Wl,--build-id=none"), recorded.program)
    assert "Build ID" not in run(["readelf", "-n", str(recorded.program)]).stdout
    recorded_id = build_id_of(str(recorded.original))
    empty = tmp_path / "empty-home"
    empty.mkdir()
    mine, stderr = ours(recorded, empty)
    assert (f"{recorded.program} has no build id, the recording's is {recorded_id}: not used"
            in stderr), stderr  # fmt: skip
    in_program = [f for s in mine for f in s.user_frames if f.dso == str(recorded.program)]
    assert in_program and all(f.symbol is None for f in in_program)


def with_debuginfod(home: Path, url: str, cache: Path) -> dict[str, str]:
    return {**perf_env(home), "DEBUGINFOD_URLS": url, "DEBUGINFOD_CACHE_PATH": str(cache)}


def ours_json(
    recorded: Recorded, env: dict[str, str], *options: str
) -> tuple[list[dict[str, Any]], str]:
    """``stackwalk perf --json OPTIONS`` (inline frames and lines on, as by default)."""
    cmd = [sys.executable, "-m", "stackwalk", "perf", "--json", *options, str(recorded.path)]
    proc = run(cmd, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def test_a_missing_program_is_fetched_from_debuginfod(recorded: Recorded, tmp_path: Path) -> None:
    """The program gone and perf's cache empty: its build id, as the recording has it, fetches
    it from a debuginfod server (elfutils' own, indexing its stripped copy and its debug
    file), with its DWARF: the same frames, lines and inline frames as with the program in
    place. A second run is served from debuginfod's cache; a dead server is a warning."""
    before, _ = ours_json(recorded, perf_env(recorded.home))
    program = str(recorded.program)
    assert any(f["module"] == program and f["line"] for s in before for f in s["frames"])
    shutil.rmtree(recorded.home / ".debug")
    split(recorded.program, tmp_path / "index")
    server = start_debuginfod(tmp_path / "index", tmp_path)
    cache = tmp_path / "cache"
    try:
        after, stderr = ours_json(recorded, with_debuginfod(recorded.home, server.url, cache))
        build_id = build_id_of(str(recorded.original))
        fetched = cache / build_id / "executable"
        assert f"{program} read from debuginfod's cache: {fetched}" in stderr
        assert (cache / build_id / "debuginfo").is_file()
        # The same frames, every field, but for the file the program was read from.
        assert after == before
        served = metrics(server.url).get('http_responses_total{result="file"}', 0)
        assert served >= 2, "the executable and its debuginfo"
        again, _ = ours_json(recorded, with_debuginfod(recorded.home, server.url, cache))
        assert again == before
        assert metrics(server.url).get('http_responses_total{result="file"}', 0) == served
    finally:
        server.stop()
    # A dead server, an empty cache: a warning, and the frames stop at the program.
    dead = with_debuginfod(recorded.home, f"http://127.0.0.1:{_free_port()}", tmp_path / "c2")
    samples, stderr = ours_json(recorded, dead)
    assert f"debuginfod: no executable for {program}" in stderr
    assert not any(f["function"] for s in samples for f in s["frames"] if f["module"] == program)


def test_the_program_under_a_sysroot_or_on_a_search_path(
    recorded: Recorded, tmp_path: Path
) -> None:
    """The recording read on another machine: the program is not at its recorded path (nor in
    perf's build-id cache, another home) but under ``--sysroot DIR`` (at DIR + its path) or in
    a ``--lib-search-path`` directory (by its name). Either way its frames are the ones it gave
    in place, every field, shown under its recorded path; without them it is missing."""
    home = tmp_path / "other-home"
    home.mkdir()
    before, _ = ours_json(recorded, perf_env(recorded.home))
    program = str(recorded.program)
    assert any(
        f["module"] == program and f["function"] == "main" for s in before for f in s["frames"]
    )
    sysroot = tmp_path / "sysroot"
    moved = sysroot / program.lstrip("/")
    moved.parent.mkdir(parents=True)
    shutil.move(program, moved)
    search = tmp_path / "search"
    search.mkdir()
    shutil.copy(moved, search / recorded.program.name)
    env = perf_env(home)
    for option in ([], ["--sysroot", str(sysroot)], ["--lib-search-path", str(search)]):
        samples, stderr = ours_json(recorded, env, *option)
        if option:
            assert samples == before, option
            assert f"cannot read {program}" not in stderr
        else:
            assert f"cannot read {program}" in stderr
            assert not any(
                f["function"] for s in samples for f in s["frames"] if f["module"] == program
            )


def test_the_programs_debug_file_under_a_debug_root(recorded: Recorded, tmp_path: Path) -> None:
    """The program stripped of its DWARF, its debug file in a debug root of our own
    (``.build-id/xx/rest.debug``, as distributions install them): lines and inline frames only
    with ``--debug-root`` naming it, and then the ones the whole program gave."""
    home = tmp_path / "other-home"  # perf's build-id cache holds the whole program
    home.mkdir()
    env = perf_env(home)
    before, _ = ours_json(recorded, env)
    program = str(recorded.program)
    assert any(f["module"] == program and f["line"] for s in before for f in s["frames"])
    split(recorded.program, tmp_path / "split")
    shutil.move(tmp_path / "split" / recorded.program.name, recorded.program)
    build_id = build_id_of(program)
    root = tmp_path / "debug"
    placed = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    placed.parent.mkdir(parents=True)
    shutil.move(tmp_path / "split" / f"{recorded.program.name}.debug", placed)
    stripped, _ = ours_json(recorded, env)
    assert not any(f["line"] for s in stripped for f in s["frames"] if f["module"] == program)
    found, _ = ours_json(recorded, env, "--debug-root", str(root))
    # (Other modules' debug files are under /usr/lib/debug, which this root replaces.)
    assert own_frames(found, program) == own_frames(before, program)


def own_frames(samples: list[dict[str, Any]], module: str) -> list[list[dict[str, Any]]]:
    """Each sample's frames in ``module``, every field."""
    return [[f for f in s["frames"] if f["module"] == module] for s in samples]
