"""Files by build id from a debuginfod server: elfutils' own ``debuginfod`` started on 127.0.0.1,
indexing (``-F``) the stripped programs and their separate debug files, which are then gone from
where the cores name them. ``stackwalk core`` must give the frames, lines and inline frames it
gives with the files in place, and eu-stack's (``-s -i``, through the same server: libdebuginfod,
the reference client); fill and read the cache in elfutils' layout, which eu-stack reads and
fills too; and take a dead server, a 404 or ``--offline`` as a warning and frames without lines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from corefiles import CRASH_ENV, _free_port, build_id_of, gdb_crash_core, on_terminal, run
from debuginfod_server import Server, split, start_debuginfod
from realstacks import Builder


@dataclass
class Case:
    core: Path
    files: list[Path]  # the program's files, as the core names them (gone)
    build_ids: list[str]
    index: Path  # their stripped copies and debug files
    present: dict[str, Any]  # stackwalk core --json with the files in place


def stackwalk_json(core: Path, *options: str, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    cmd = [sys.executable, "-m", "stackwalk", "core", "--json", str(core), *options]
    proc = run(cmd, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout), proc.stderr


def no_debuginfod() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DEBUGINFOD_")}


def with_server(url: str, cache: Path) -> dict[str, str]:
    return {**no_debuginfod(), "DEBUGINFOD_URLS": url, "DEBUGINFOD_CACHE_PATH": str(cache)}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory, build: Builder) -> dict[str, Case]:
    """Two cores: crash_inline (functions inlined into each other, at -O2 -g), its program
    gone; crash_callback, its program and its library libcallback.so gone (the walk goes
    through the library's frames)."""
    root = tmp_path_factory.mktemp("debuginfod")
    out: dict[str, Case] = {}
    lib_flags = ("-O2", "-shared", "-fPIC", "-Wl,-soname,libcallback.so")
    for name in ("inline", "callback"):
        run_dir = root / name / "run"
        run_dir.mkdir(parents=True)
        if name == "inline":
            files = [run_dir / "crash_inline"]
            shutil.copy(build("crash_inline.c", "-O2"), files[0])
        else:
            files = [run_dir / "libcallback.so", run_dir / "crash_callback"]
            shutil.copy(build("crash_callback_so.c", *lib_flags), files[0])
            link = ("-Wl,--no-as-needed", f"-L{run_dir}", "-lcallback")
            shutil.copy(build("crash_callback.c", "-O2", *link), files[1])
        core = root / name / f"{name}.core"
        env = {**CRASH_ENV, "LD_LIBRARY_PATH": str(run_dir)}
        gdb_crash_core([str(files[-1])], core, env)
        present, _ = stackwalk_json(core, env=no_debuginfod())
        build_ids = [build_id_of(str(f)) for f in files]
        index = root / name / "index"
        for file in files:
            split(file, index)
        out[name] = Case(core, files, build_ids, index, present)
    return out


@pytest.fixture
def server(cases: dict[str, Case], tmp_path: Path) -> Iterator[Server]:
    """debuginfod serving both cases' files."""
    index = tmp_path / "index"
    for case in cases.values():
        shutil.copytree(case.index, index, dirs_exist_ok=True)
    served = start_debuginfod(index, tmp_path)
    yield served
    served.stop()


def frames(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Every frame as the output shows it, but for which file provided it."""
    keys = ("pc", "trust", "module", "module_offset", "function", "function_offset", "file",
            "line", "column", "inline")  # fmt: skip
    return [tuple(f[k] for k in keys) for t in doc["threads"] for f in t["frames"]]


def eu_stack_lines(core: Path, env: dict[str, str]) -> list[tuple[int, str, str | None]]:
    """``eu-stack -s -i -n 0`` of the crashing thread: (pc, function, file:line:column)."""
    proc = run(["eu-stack", "-s", "-i", "-n", "0", f"--core={core}"], env=env)
    out: list[tuple[int, str, str | None]] = []
    for line in proc.stdout.splitlines():
        if line.startswith("TID") and out:
            break
        if match := re.match(r"#\d+\s+0x([0-9a-f]+)\s+(\S+)", line):
            out.append((int(match.group(1), 16), match.group(2), None))
        elif out and line.startswith("    "):
            out[-1] = (*out[-1][:2], line.strip())
    assert out, proc.stdout + proc.stderr
    return out


def program_frames(case: Case, doc: dict[str, Any]) -> list[tuple[int, str, str | None]]:
    """The crashing thread's frames in the program's files, as eu-stack -s -i shows them."""
    names = {str(f) for f in case.files}
    out = []
    for f in doc["threads"][0]["frames"]:
        if f["module"] in names:
            where = None if f["file"] is None else f"{f['file']}:{f['line']}"
            if where and f["column"] is not None:
                where += f":{f['column']}"
            # eu-stack names a function as DWARF does (lib_call); the symbol table may give an
            # alias with GCC's suffix (lib_call.localalias).
            out.append((int(f["pc"], 16), f["function"].split(".")[0], where))
    return out


def test_missing_files_are_fetched_by_build_id(
    cases: dict[str, Case], server: Server, tmp_path: Path
) -> None:
    for name, case in cases.items():
        cache = tmp_path / f"cache-{name}"
        doc, stderr = stackwalk_json(case.core, env=with_server(server.url, cache))
        # With the files in place: lines for the program's frames (but _start's, from crt1.o).
        named = {str(f) for f in case.files}
        assert sum(f[6] is not None for f in frames(case.present) if f[2] in named) >= 2
        assert frames(doc) == frames(case.present), stderr
        for build_id in case.build_ids:
            assert (cache / build_id / "executable").is_file()
            assert (cache / build_id / "debuginfo").is_file()
            assert build_id not in stderr
        # eu-stack, through the same server (and a cache of its own), agrees frame by frame.
        theirs = eu_stack_lines(case.core, with_server(server.url, tmp_path / f"eu-{name}"))
        ours = program_frames(case, doc)
        assert ours and all(frame in theirs for frame in ours), (ours, theirs)
    assert sum(f[9] for f in frames(cases["inline"].present)) >= 3


def test_a_second_run_is_served_from_the_cache(
    cases: dict[str, Case], server: Server, tmp_path: Path
) -> None:
    case = cases["callback"]
    cache, eu_cache = tmp_path / "cache", tmp_path / "eu-cache"
    first, _ = stackwalk_json(case.core, env=with_server(server.url, cache))
    eu_first = eu_stack_lines(case.core, with_server(server.url, eu_cache))
    server.stop()  # no request can reach it now: the port is closed
    again, stderr = stackwalk_json(case.core, env=with_server(server.url, cache))
    assert frames(again) == frames(first) == frames(case.present), stderr
    assert not any(build_id in stderr for build_id in case.build_ids), stderr
    # The cache is elfutils': eu-stack reads what stackwalk fetched, stackwalk what eu-stack did.
    assert eu_stack_lines(case.core, with_server(server.url, cache)) == eu_first
    from_eu, stderr = stackwalk_json(case.core, env=with_server(server.url, eu_cache))
    assert frames(from_eu) == frames(case.present), stderr


def test_a_dead_server_or_a_404_is_a_warning_and_frames_without_lines(
    cases: dict[str, Case], tmp_path: Path
) -> None:
    case = cases["inline"]
    # The stripped program is back in its place: symbols, but no DWARF here.
    (program,) = case.files
    shutil.copy(case.index / program.name, program)
    try:
        dead = f"http://127.0.0.1:{_free_port()}"
        empty = tmp_path / "empty"
        empty.mkdir()
        other = start_debuginfod(empty, tmp_path)  # up, but without these files: 404
        try:
            for url, why in ((dead, "Connection refused"), (other.url, "404 Not Found")):
                doc, stderr = stackwalk_json(case.core, env=with_server(url, tmp_path / "c"))
                warning = f"debuginfod: no debuginfo for {program}: {url}/buildid/"
                assert warning in stderr and why in stderr, stderr
                ours = [f for f in doc["threads"][0]["frames"] if f["module"] == str(program)]
                assert ours and not any(f["inline"] or f["line"] for f in ours)
                assert [f["function"] for f in ours] == [
                    f["function"]
                    for f in case.present["threads"][0]["frames"]
                    if f["module"] == str(program) and not f["inline"]
                ]
                assert not (tmp_path / "c" / case.build_ids[0] / "debuginfo").exists()
        finally:
            other.stop()
    finally:
        program.unlink()


def test_offline_fetches_nothing(cases: dict[str, Case], server: Server, tmp_path: Path) -> None:
    case = cases["inline"]
    cache = tmp_path / "cache"
    runs = [
        stackwalk_json(case.core, "--offline", env=with_server(server.url, cache)),
        stackwalk_json(case.core, env={**with_server(server.url, cache), "STACKWALK_OFFLINE": "1"}),
    ]
    for doc, stderr in runs:
        assert f"module not found: {case.files[0]}" in stderr
        assert "debuginfod:" not in stderr
        assert not any(f["line"] for f in doc["threads"][0]["frames"][:2])
        assert not cache.exists()


def test_download_progress_bar_on_a_terminal(
    cases: dict[str, Case], server: Server, tmp_path: Path
) -> None:
    """With stderr a terminal, the downloads of ``Core.open(..., progress=0.0)`` draw a bar
    there (redrawn in place with \\r) that ends full, with the bytes the server sent and every
    file answered; piped, nothing."""
    case = cases["callback"]
    code = ("import sys; from stackwalk import Core; "
            "core = Core.open(sys.argv[1], progress=0.0); "
            "print(*sorted(m.file for m in core.modules if m.file))")  # fmt: skip
    cache = tmp_path / "cache"
    env = with_server(server.url, cache)
    proc, drawn = on_terminal([sys.executable, "-c", code, str(case.core)], env=env)
    assert proc.returncode == 0, drawn
    for build_id in case.build_ids:  # the program's files, fetched
        assert str(cache / build_id / "executable") in proc.stdout.split(), proc.stdout
    # Two rounds, a bar each: the programs' files, then the DWARF their stripped files lack.
    bars = drawn.split("\n")
    assert bars[-1] == "" and len(bars) == 3, drawn
    for kind, bar in zip(("executable", "debuginfo"), bars, strict=False):
        files = [cache / build_id / kind for build_id in case.build_ids]
        mib = sum(p.stat().st_size for p in files) / (1 << 20)
        full = f"debuginfod [{'#' * 30}] {mib:.1f} of {mib:.1f} MiB, 2/2 files"
        assert bar.split("\r")[-1] == full, drawn
        assert bar.count("\r") >= 2, "drawn as the downloads went"
    again, drawn = on_terminal([sys.executable, "-c", code, str(case.core)], env=env)
    assert again.stdout == proc.stdout and drawn == "", "from the cache: nothing to show"
    # The command draws it only when stderr is a terminal.
    env = with_server(server.url, tmp_path / "another-cache")
    piped = run([sys.executable, "-m", "stackwalk", "core", str(cases["callback"].core)], env=env)
    assert piped.returncode in (0, 1) and "debuginfod [" not in piped.stderr, piped.stderr
