"""``stackwalk.Processor``, a crash service's worker: a report per crash, the same as the
commands give (``stackwalk minidump``/``core --json`` for the frames, ``stackwalk triage`` for
the signature), from a path or from bytes, from several threads at once; with a memory budget,
its resident memory after each crash stays under the budget where without one it grows past.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores
from minidumps import symbol_server, symbol_store
from realstacks import Builder
from stackwalk import Processor, StackwalkError
from stackwalk.core import Core
from stackwalk.processor import parse_size

CASES = ["threads", "cxx", "libc", "python", "i386-threads"]


def inputs(cores: Cores, directory: Path) -> list[Path]:
    """Each case's core, and its minidump (``Core.to_minidump``)."""
    out = []
    for case in CASES:
        made = cores(case)
        dump = directory / f"{case}.dmp"
        Core.open(str(made.path)).to_minidump(dump)
        out += [made.path, dump]
    return out


def command(*args: str | Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "stackwalk", *map(str, args)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_each_report_is_the_commands(cores: Cores, tmp_path: Path) -> None:
    """Every input's report: the crashing thread's frames and the document of ``stackwalk
    core``/``minidump --json``, the signature ``stackwalk triage`` stores; from its bytes, the
    same report."""
    processor = Processor()
    paths = inputs(cores, tmp_path)
    store = tmp_path / "store.db"
    triaged = subprocess.run(
        [sys.executable, "-m", "stackwalk", "triage", *map(str, paths), "--db", store, "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert triaged.returncode == 0, triaged.stderr
    signatures = {r["path"]: r["signature"] for r in map(json.loads, triaged.stdout.splitlines())}
    for path in paths:
        report = processor.process(path)
        kind = "minidump" if path.suffix == ".dmp" else "core"
        doc = command(kind, path, "--json")
        assert report.kind == kind
        assert report.crashing_tid == doc["crashing_thread"]
        assert report.signal == doc["signal"]["name"]
        crashed = next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])
        assert report.frames == crashed["frames"], path
        assert [t["frames"] for t in report.document["threads"]] == [
            t["frames"] for t in doc["threads"]
        ]
        assert report.signature == signatures[str(path)], path
        again = processor.process(path.read_bytes())
        assert (again.signature, again.frames) == (report.signature, report.frames)


def test_threads_get_the_reports_one_thread_gets(cores: Cores, tmp_path: Path) -> None:
    """Eight threads processing the inputs ten times over, at once: each report the one a
    single thread gives."""
    paths = inputs(cores, tmp_path) * 10
    alone = Processor()
    expected = {p: (r.signature, r.frames) for p in set(paths) for r in [alone.process(p)]}
    shared = Processor(memory_budget="1G")
    with ThreadPoolExecutor(8) as pool:
        reports = list(pool.map(shared.process, paths))
    assert [(r.signature, r.frames) for r in reports] == [expected[p] for p in paths]


BUDGETED = textwrap.dedent("""
    import json, sys
    from stackwalk import Processor
    from stackwalk.processor import resident_bytes
    budget = json.loads(sys.argv[1])
    processor = Processor(memory_budget=budget)
    start = resident_bytes()
    after = []
    for _ in range(3):
        for path in sys.argv[2:]:
            processor.process(path)
            after.append(resident_bytes())
    print(json.dumps({"start": start, "most": max(after), "trims": processor.trims}))
""")


def budgeted(budget: int | None, paths: list[Path]) -> dict[str, int]:
    """A fresh process's resident memory: at its start, and the most after any crash."""
    proc = subprocess.run([sys.executable, "-c", BUDGETED, json.dumps(budget), *map(str, paths)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out: dict[str, int] = json.loads(proc.stdout)
    return out


def test_a_budget_keeps_the_worker_under_it(cores: Cores, tmp_path: Path) -> None:
    """Without a budget the process keeps every file it read (the python core's libpython DWARF
    among them) and grows; with a budget below that, between its start and its unbounded most,
    its memory after each crash stays under the budget: the caches were trimmed."""
    paths = inputs(cores, tmp_path)
    free = budgeted(None, paths)
    assert free["trims"] == 0
    budget = free["start"] + (free["most"] - free["start"]) * 3 // 4
    assert free["most"] > budget
    kept = budgeted(budget, paths)
    assert kept["trims"] > 0 and kept["most"] <= budget, (free, kept, budget)


@pytest.mark.parametrize(
    ("size", "expected"),
    [("512MiB", 512 << 20), ("512M", 512 << 20), ("2G", 2 << 30), ("4096", 4096), (1000, 1000)],
)
def test_budget_sizes(size: str | int, expected: int) -> None:
    assert parse_size(size) == expected


@pytest.mark.parametrize("size", ["", "0", "-5M", "1.5G", "12 parsecs", 0, -1])
def test_a_bad_budget_is_one_error(size: str | int) -> None:
    with pytest.raises(StackwalkError, match="budget"):
        Processor(memory_budget=size)


def test_what_is_no_crash_is_an_error(tmp_path: Path) -> None:
    """Bytes that are no core nor minidump, and a missing file: StackwalkError naming why."""
    processor = Processor()
    with pytest.raises(StackwalkError):
        processor.process(b"hello, not a crash")
    with pytest.raises(StackwalkError, match="missing.dmp"):
        processor.process(tmp_path / "missing.dmp")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(StackwalkError, match="not a regular file"):
        processor.process(fifo)


def test_symbols_are_stores_and_servers(
    build: Builder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``symbols``: a directory is a Breakpad store, a URL a symbol server, as ``stackwalk
    minidump --symbols-path/--symbols-url`` take them: with the program's file gone, its frames
    are named by its symbol file, from the store, or (an empty store first) from the server;
    the report's frames are the command's."""
    from test_collect import kernel_core

    # Files fetched are kept in debuginfod's cache: this test's own, empty.
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(tmp_path / "cache"))
    program = tmp_path / "crash_big"
    shutil.copy(build("crash_big.c", "-O2"), program)
    core = kernel_core(program, tmp_path / "cores")
    dump = tmp_path / "crash.dmp"
    Core.open(str(core)).to_minidump(dump)
    store, empty = tmp_path / "store", tmp_path / "empty"
    empty.mkdir()
    symbol_store(program, store)
    program.unlink()
    by_store = Processor(symbols=[store], offline=True).process(dump)
    with symbol_server(store, tmp_path / "server.log") as server:
        by_server = Processor(symbols=[empty, server.url]).process(dump)
        doc = command("minidump", dump, "--symbols-path", empty, "--symbols-url", server.url,
                      "--json")  # fmt: skip
        assert any(path.endswith("crash_big.sym") for path, _ in server.requests())
    crashed = next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])
    assert by_server.frames == by_store.frames == crashed["frames"]
    functions = [f["function"] for f in by_store.frames]
    assert functions[:3] == ["crash_here", "fill_and_crash", "main"], functions


RELEASED = textwrap.dedent("""
    import json, re, sys
    from stackwalk import Processor
    from stackwalk._core import release_file_pages
    def file_kib():
        status = open("/proc/self/status").read()
        return int(re.search(r"RssFile:\\s+(\\d+)", status).group(1))
    processor = Processor()
    before = [processor.process(p).frames for p in sys.argv[1:]]
    held = file_kib()
    release_file_pages()
    released = file_kib()
    after = [processor.process(p).frames for p in sys.argv[1:]]
    print(json.dumps({"held": held, "released": released, "same": before == after}))
""")


def test_file_pages_leave_and_come_back(cores: Cores, tmp_path: Path) -> None:
    """The budget's first step: the kept DWARF's pages leave the resident memory (the python
    core's libpython among them: megabytes), and the next reports, read back through them, are
    the same."""
    paths = inputs(cores, tmp_path)
    proc = subprocess.run([sys.executable, "-c", RELEASED, *map(str, paths)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["same"]
    assert out["released"] < out["held"] - 4096, out
