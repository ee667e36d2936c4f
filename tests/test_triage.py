"""`stackwalk triage` and `stackwalk report`: a spool of real cores, made at test time from
programs that crash in known ways (tests/programs/triage_bugs.c and .cpp), with the ground
truth of which crash is which bug; signatures checked against Socorro's own rules (siggen)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import stackwalk
from corefiles import build_id_of
from hostile_http import Hostile, hostile_server
from minidumps import Dumps
from realstacks import Builder
from stackwalk.signature import SEPARATOR, Rules, normalize_function, signature
from stackwalk.store import CrashStore
from stackwalk.triage import StoreHere, task_size

STACK_PROTECTOR = ("-O2", "-fstack-protector-all")
RUNS = 15  # cores per kind of crash: 14 kinds, 210 cores

# Each kind of crash: (program, argv[1]) -> the bug it is (the ground truth) and the function
# of the program where the bug is, which its signature must name.
C_BUGS = {
    "null-a": ("null dereference in parse_header", "parse_header"),
    "null-b": ("null dereference in parse_header", "parse_header"),  # another path to it
    "assert": ("assertion in check_config", "check_config"),
    "smash": ("buffer overflow in smash_stack", "smash_stack"),
    "double-free": ("double free in free_twice", "free_twice"),
    "memcpy-a": ("memcpy to NULL in copy_record", "copy_record"),
    "memcpy-b": ("memcpy to NULL in copy_other", "copy_other"),
    "strlen": ("strlen of NULL in name_length", "name_length"),
    "abort": ("abort in fatal_error", "fatal_error"),
    "fpe": ("division by zero in compute_ratio", "compute_ratio"),
    "null-call": ("call of a NULL callback in run_callback", "run_callback"),
}
CXX_BUGS = {
    "template": ("null dereference in store::Table<int>::lookup", "store::Table<T>::lookup"),
    "noexcept": ("exception escaping process_order", "process_order"),
}

GDB_RUNS = """
import gdb
for setting in ("pagination off", "confirm off", "debuginfod enabled off"):
    gdb.execute("set " + setting)
for line in open({runs!r}).read().splitlines():
    args, core = line.split("|")
    gdb.execute("run " + args + " > /dev/null 2> /dev/null")
    if gdb.selected_inferior().pid:
        gdb.execute("generate-core-file " + core, to_string=True)
        gdb.execute("kill", to_string=True)
"""


@dataclass
class Spool:
    directory: Path
    truth: dict[str, str]  # core path -> bug
    where: dict[str, str]  # bug -> the function the signature must name
    programs: dict[str, Path]


def _gdb_cores(program: Path, runs: list[tuple[str, Path]], work: Path) -> subprocess.Popen[str]:
    """Start gdb running ``program`` once per run (its argv[1], the core to write)."""
    listing = work / f"{program.name}.runs"
    listing.write_text("".join(f"{args}|{core}\n" for args, core in runs))
    script = work / f"{program.name}.py"
    script.write_text(GDB_RUNS.format(runs=str(listing)))
    return subprocess.Popen(
        ["gdb", "-q", "-batch", "-nx", "-x", str(script), str(program)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MALLOC_ARENA_MAX": "1"},
    )


@pytest.fixture(scope="module")
def spool(build: Builder, tmp_path_factory: pytest.TempPathFactory) -> Spool:
    """210 cores of 14 kinds of crash, 12 bugs, from three programs: the C program, the same
    program rebuilt (another build id: its crashes are the same bugs), and a C++ program."""
    work = tmp_path_factory.mktemp("triage")
    directory = work / "spool"
    directory.mkdir()
    programs = {
        "c": build("triage_bugs.c", *STACK_PROTECTOR),
        "c-rebuilt": build("triage_bugs.c", *STACK_PROTECTOR, "-DBUILD_NUMBER=2"),
        "cxx": build("triage_bugs.cpp", "-O2", compiler="g++"),
    }
    kinds = [("c", bug) for bug in C_BUGS] + [("cxx", bug) for bug in CXX_BUGS]
    kinds.append(("c-rebuilt", "null-a"))
    truth, jobs = {}, defaultdict(list)
    for program, bug in kinds:
        for i in range(RUNS):
            core = directory / f"core.{program}.{bug}.{i}"
            jobs[program].append((bug, core))
            truth[str(core)] = (C_BUGS | CXX_BUGS)[bug][0]
    # Two gdb sessions at a time, each running its program many times.
    procs = []
    for program, runs in jobs.items():
        half = len(runs) // 2
        for part, chunk in enumerate((runs[:half], runs[half:])):
            sub = work / f"{program}-{part}"
            sub.mkdir()
            procs.append(_gdb_cores(programs[program], chunk, sub))
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    missing = [core for core in truth if not os.path.exists(core)]
    assert not missing, f"gdb wrote no core for {missing[:3]}"
    where = {bug: fn for bug, fn in (C_BUGS | CXX_BUGS).values()}
    return Spool(directory, truth, where, programs)


def stackwalk_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", *args], capture_output=True, text=True, timeout=600
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def grouping(buckets_of: dict[str, str | None], truth: dict[str, str]) -> tuple[float, float]:
    """(purity, completeness) of a grouping of crashes into buckets against the ground truth:
    purity, the share of crashes whose bucket holds their bug alone; completeness, the share
    whose bug lies in one bucket alone."""
    bugs_of_bucket: dict[str | None, set[str]] = defaultdict(set)
    buckets_of_bug: dict[str, set[str | None]] = defaultdict(set)
    for path, bug in truth.items():
        bucket = buckets_of[path]
        bugs_of_bucket[bucket].add(bug)
        buckets_of_bug[bug].add(bucket)
    pure = sum(len(bugs_of_bucket[buckets_of[p]]) == 1 for p in truth)
    whole = sum(len(buckets_of_bug[bug]) == 1 for bug in truth.values())
    return pure / len(truth), whole / len(truth)


def test_every_crash_lands_in_the_bucket_of_its_bug(spool: Spool, tmp_path: Path) -> None:
    db = tmp_path / "crashes.sqlite"
    proc = stackwalk_cli("triage", str(spool.directory), "--db", str(db), "--jobs", "2")
    assert f"{len(spool.truth)} crashes stored" in proc.stdout
    with CrashStore(db) as store:
        buckets_of = store.crash_buckets()
        assert store.errors() == []
        buckets = {b["bucket"]: b for b in store.buckets()}
    purity, completeness = grouping(buckets_of, spool.truth)
    print(f"grouping of {len(spool.truth)} crashes: purity {purity:.3f}, completeness "
          f"{completeness:.3f}")  # fmt: skip
    assert (purity, completeness) == (1.0, 1.0), {
        bucket: sorted({spool.truth[p] for p, b in buckets_of.items() if b == bucket})
        for bucket in set(buckets_of.values())
    }
    # Each bucket's signature names the function of its bug (frame 0 or, past the error
    # machinery and the allocators and string functions, the first of the program's; a clone's
    # note kept, as siggen keeps it: "store::Table<T>::lookup [clone .isra.0]").
    for path, bug in spool.truth.items():
        sig = buckets[buckets_of[path]]["signature"]
        function = spool.where[bug]
        assert re.sub(r" \[clone [^]]*\]", "", sig.split(" | ")[-1]) == function, (bug, sig)
    # The bucket of the bug reached through two programs' builds counts both builds.
    parse = next(b for b in buckets.values() if b["signature"] == "parse_header")
    assert parse["count"] == 3 * RUNS
    builds = {(exe, count) for exe, _, count in parse["builds"]}
    assert builds == {(str(spool.programs["c"]), 2 * RUNS), (str(spool.programs["c-rebuilt"]),
                                                               RUNS)}  # fmt: skip
    build_ids = {build_id for _, build_id, _ in parse["builds"]}
    assert len(build_ids) == 2 and "" not in build_ids


def test_a_worker_killed_costs_its_files_until_a_rerun(spool: Spool, tmp_path: Path) -> None:
    """One of ``--jobs 2``'s workers killed (the OOM killer, a user) as soon as it is forked:
    the files of the task it held are given as not read (their --json lines say why), not
    stored, and counted in the summary; a new worker takes the rest, the exit status is 1, and
    a rerun reads those files only, to the same buckets and counts as one process gives. (The
    workers take turns at writing by a lock that a worker killed while it writes lets go of.)"""
    reference = tmp_path / "reference.sqlite"
    stackwalk_cli("triage", str(spool.directory), "--db", str(reference), "--jobs", "1")
    db = tmp_path / "crashes.sqlite"
    argv = [sys.executable, "-m", "stackwalk", "triage", str(spool.directory), "--db", str(db),
            "--jobs", "2", "--json"]  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        children = Path(f"/proc/{run.pid}/task/{run.pid}/children")
        deadline = time.monotonic() + 60
        while not (workers := children.read_text().split()):
            assert run.poll() is None and time.monotonic() < deadline, "no worker started"
            time.sleep(0.002)
        os.kill(int(workers[0]), signal.SIGKILL)
        out, err = run.communicate(timeout=300)
    assert run.returncode == 1, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert sorted(line["path"] for line in lines) == sorted(map(str, spool.directory.iterdir()))
    unread = [line["path"] for line in lines if line["error"] and "not read" in line["error"]]
    most = task_size(len(spool.truth), 2, 64)
    assert 1 <= len(unread) <= most, (unread, most)
    assert all("died (killed by SIGKILL)" in line["error"] for line in lines if
               line["path"] in unread)  # fmt: skip
    assert f"; {len(unread)} files not read (a worker process died): run again" in err, err
    rerun = stackwalk_cli("triage", str(spool.directory), "--db", str(db), "--jobs", "1")
    read = len(spool.truth) - len(unread)
    assert rerun.stdout.startswith(f"{len(unread)} crashes stored, {read} already there")

    def summary(path: Path) -> list[tuple[str, int]]:
        with CrashStore(path) as store:
            return sorted((b["signature"], b["count"]) for b in store.buckets())

    assert summary(db) == summary(reference)


def test_a_rerun_reads_only_new_files_and_a_killed_run_resumes(
    spool: Spool, tmp_path: Path
) -> None:
    """Half the spool, then all of it: the second run reads the new half only. A run killed
    while it writes leaves whole crashes only, and rerunning gives the same buckets and counts
    as a run never interrupted. The killed run's workers write the store themselves (--jobs
    2), two writers at once; the rerun is one process."""
    files = sorted(spool.directory.iterdir())
    grown = tmp_path / "grown"
    grown.mkdir()
    for f in files[: len(files) // 2]:
        os.link(f, grown / f.name)
    db = tmp_path / "grown.sqlite"
    first = stackwalk_cli("triage", str(grown), "--db", str(db), "--jobs", "1")
    assert first.stdout.startswith(f"{len(files) // 2} crashes stored, 0 already there")
    for f in files[len(files) // 2 :]:
        os.link(f, grown / f.name)
    second = stackwalk_cli("triage", str(grown), "--db", str(db), "--jobs", "1")
    rest = len(files) - len(files) // 2
    assert second.stdout.startswith(f"{rest} crashes stored, {len(files) // 2} already there")

    killed = tmp_path / "killed.sqlite"
    run = subprocess.Popen(
        [sys.executable, "-m", "stackwalk", "triage", str(spool.directory), "--db", str(killed),
         "--jobs", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        if killed.exists():
            with sqlite3.connect(killed) as db_now:
                try:
                    stored = db_now.execute("SELECT count(*) FROM crashes").fetchone()[0]
                except sqlite3.OperationalError:  # no table yet
                    stored = 0
            if stored > 0:
                break
        time.sleep(0.01)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    with CrashStore(killed) as store:
        partial = store.counts()[0]
    assert 0 < partial <= len(files) or run.returncode == 0
    stackwalk_cli("triage", str(spool.directory), "--db", str(killed), "--jobs", "1")

    def summary(path: Path) -> list[tuple[str, int]]:
        with CrashStore(path) as store:
            return sorted((b["signature"], b["count"]) for b in store.buckets())

    assert summary(killed) == summary(db)
    with CrashStore(killed) as store:
        assert store.counts()[0] == len(files)
        # Each crash's frames whole: as many as the rerun's store has for the same file.
        by_path = dict(store._db.execute(
            "SELECT path, count(*) FROM crashes JOIN frames ON crashes.id = crash_id GROUP BY path"
        ).fetchall())  # fmt: skip
    with CrashStore(db) as store:
        reference = dict(store._db.execute(
            "SELECT path, count(*) FROM crashes JOIN frames ON crashes.id = crash_id GROUP BY path"
        ).fetchall())  # fmt: skip
    assert {Path(p).name: n for p, n in by_path.items()} == {
        Path(p).name: n for p, n in reference.items()
    }


def test_files_that_are_not_crashes_are_counted_apart_and_named(
    spool: Spool, tmp_path: Path
) -> None:
    """A spool of cores of two bugs and of files that are not crashes (a text file, an
    executable, an empty file, cores cut short, a dangling link): the run goes on past each, and
    counts them apart from the crashes, each named with why, the same in the text summary, in
    the --json lines (and their summary), in the store, and on report's page and document."""
    import re

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    cores = {bug: sorted(p for p, b in spool.truth.items() if b == bug) for bug in
             ("null dereference in parse_header", "abort in fatal_error")}  # fmt: skip
    crashes = [*cores["null dereference in parse_header"][:2], cores["abort in fatal_error"][0]]
    for i, core in enumerate(crashes):
        shutil.copy(core, mixed / f"crash-{i}.core")
    data = Path(crashes[0]).read_bytes()
    (mixed / "notes.txt").write_text("not a core\n")
    shutil.copy(spool.programs["c"], mixed / "program")
    (mixed / "empty").write_bytes(b"")
    (mixed / "cut-headers.core").write_bytes(data[:100])
    (mixed / "cut-notes.core").write_bytes(data[: len(data) // 40])
    (mixed / "gone").symlink_to(tmp_path / "nowhere")
    not_crashes = sorted(str(mixed / n) for n in ("notes.txt", "program", "empty",
                         "cut-headers.core", "cut-notes.core", "gone"))  # fmt: skip
    files = len(crashes) + len(not_crashes)
    buckets = 2  # the two bugs

    # The text: what the run stored, the store's totals, and each file that is not a crash.
    db = tmp_path / "mixed.sqlite"
    proc = stackwalk_cli("triage", str(mixed), "--db", str(db), "--jobs", "2")
    totals = (f"{db}: {len(crashes)} crashes in {buckets} buckets, {len(not_crashes)} files "
              "that are not crashes")  # fmt: skip
    summary, *named = proc.stdout.splitlines()
    assert summary == (f"{len(crashes)} crashes stored, 0 already there, {len(not_crashes)} "
                       f"files that are not crashes (below); {totals}"), summary  # fmt: skip
    said = [re.fullmatch(r"not a crash: (.*?): (.+)", line) for line in named]
    why = {m[1]: m[2] for m in said if m is not None}
    assert sorted(why) == not_crashes and len(named) == len(not_crashes), named
    assert why[str(mixed / "notes.txt")] == "not an ELF file"
    assert why[str(mixed / "program")].startswith("not a core file: it is")
    assert why[str(mixed / "empty")] == "an empty file, not a crash"
    assert why[str(mixed / "gone")] == "No such file or directory"
    assert "truncated" in why[str(mixed / "cut-headers.core")]
    assert why[str(mixed / "cut-notes.core")].startswith("no thread could be read")
    with CrashStore(db) as store:
        assert store.counts() == (len(crashes), buckets, len(not_crashes))
        assert store.errors() == sorted(why.items())
    # A rerun reads nothing new (the dangling link, read again, is stored already).
    again = stackwalk_cli("triage", str(mixed), "--db", str(db))
    assert again.stdout == f"0 crashes stored, {files} already there; {totals}\n"

    # --json: a line per file, the crashes' without an error, the others' with why; the summary
    # on stderr, the same.
    other = tmp_path / "json.sqlite"
    proc = stackwalk_cli("triage", str(mixed), "--db", str(other), "--json", "--jobs", "1")
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted(r["path"] for r in lines if r["error"] is None) == sorted(
        str(mixed / f"crash-{i}.core") for i in range(len(crashes))
    )
    assert {r["path"]: r["error"].removeprefix(f"{r['path']}: ") for r in lines
            if r["error"] is not None} == why  # fmt: skip
    assert len({r["bucket"] for r in lines if r["bucket"]}) == buckets
    assert proc.stderr.splitlines() == [summary.replace(str(db), str(other)), *named]

    # report: its document's buckets hold the crashes; its page gives the store's totals, as
    # triage does, and names each file that is not a crash.
    doc = json.loads(stackwalk_cli("report", "--db", str(db), "--json").stdout)
    assert sum(b["count"] for b in doc["buckets"]) == len(crashes)
    assert len(doc["buckets"]) == buckets
    page = tmp_path / "report.html"
    for top, shown in ((), ""), (("--top", "1"), " (the 1 biggest below)"):
        stackwalk_cli("report", "--db", str(db), "--html", str(page), *top)
        text = page.read_text()
        assert (
            f'<p id=\'summary\' data-crashes="{len(crashes)}" data-buckets="{buckets}" '
            f'data-not-crashes="{len(not_crashes)}">{len(crashes)} crashes in {buckets} '
            f"buckets{shown}, {len(not_crashes)} files that are not crashes.</p>"
        ) in text
        listed = re.search(r"<ul id='not-crashes'>(.*?)</ul>", text)
        assert listed is not None
        items = re.findall(r"<li><code>(.*?)</code>: (.*?)</li>", listed[1])
        assert [path for path, _ in items] == not_crashes
        assert items[not_crashes.index(str(mixed / "notes.txt"))][1] == "not an ELF file"
    # Since a date after every file: none of them.
    stackwalk_cli("report", "--db", str(db), "--html", str(page), "--since", "2999-01-01")
    text = page.read_text()
    assert "0 crashes in 0 buckets, 0 files that are not crashes." in text
    assert "<ul id='not-crashes'>" not in text


def test_modules_missing_are_said(spool: Spool, tmp_path: Path) -> None:
    """A machine without a module's file (a Dask worker without the shared mount; here, the
    program deleted after its crash) still stores the crash, and says it was read so, and
    where."""
    program = tmp_path / "gone"
    shutil.copy(spool.programs["c"], program)
    core = tmp_path / "core.gone"
    gdb = _gdb_cores(program, [("null-a", core)], tmp_path)
    assert gdb.wait(timeout=300) == 0 and core.exists()
    program.unlink()
    db = tmp_path / "missing.sqlite"
    proc = stackwalk_cli("triage", str(core), "--db", str(db))
    assert "1 read with modules missing" in proc.stdout
    with sqlite3.connect(db) as conn:
        [(warnings, host, sig)] = conn.execute("SELECT warnings, host, signature FROM crashes")
    assert f"module not found: {program}" in json.loads(warnings)
    assert host == os.uname().nodename
    assert sig.startswith("gone@0x")


def test_a_missing_module_by_the_module_options(spool: Spool, tmp_path: Path) -> None:
    """The program deleted after its crash: triage asks the debuginfod server of
    DEBUGINFOD_URLS (the test's, which answers 404) for it by its build id, and not with
    ``--offline``; with ``--lib-search-path`` a directory that holds it, it is found there by
    its name, and the signature names the crashing function."""
    program = tmp_path / "gone"
    shutil.copy(spool.programs["c"], program)
    core = tmp_path / "core.gone"
    gdb = _gdb_cores(program, [("null-a", core)], tmp_path)
    assert gdb.wait(timeout=300) == 0 and core.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    program.rename(kept / program.name)
    build_id = build_id_of(str(kept / program.name))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEBUGINFOD_", "STACKWALK_"))}
    env["DEBUGINFOD_CACHE_PATH"] = str(tmp_path / "cache")

    def answer(handler: BaseHTTPRequestHandler, state: Hostile) -> None:
        handler.send_error(404)

    runs = {"online": [], "offline": ["--offline"],
            "found": ["--offline", "--lib-search-path", f"/nowhere:{kept}"]}  # fmt: skip
    stored = {}
    with hostile_server(answer) as (url, server):
        env["DEBUGINFOD_URLS"] = url
        for name, options in runs.items():
            db = tmp_path / f"{name}.sqlite"
            asked = len(server.paths)
            proc = subprocess.run(
                [sys.executable, "-m", "stackwalk", "triage", str(core), "--db", str(db),
                 *options], capture_output=True, text=True, timeout=600, env=env,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            with sqlite3.connect(db) as conn:
                [(warnings, sig)] = conn.execute("SELECT warnings, signature FROM crashes")
            stored[name] = (json.loads(warnings or "[]"), sig, server.paths[asked:])
    warnings, sig, asked = stored["online"]
    assert f"module not found: {program}" in warnings and sig.startswith("gone@0x")
    assert f"/buildid/{build_id}/executable" in asked, asked
    warnings, sig, asked = stored["offline"]
    assert f"module not found: {program}" in warnings and sig.startswith("gone@0x")
    assert asked == []
    warnings, sig, asked = stored["found"]
    assert not any(str(program) in w for w in warnings), warnings
    assert sig.startswith(spool.where["null dereference in parse_header"]), sig
    assert asked == []


def test_minidumps_among_cores(spool: Spool, dumps: Dumps, tmp_path: Path) -> None:
    """A spool of cores and minidumps: each minidump is read as one (told by its magic, not its
    name) and signed by the thread its exception stream blames (minidump-writer's dumps here,
    written on request at the fault: the faulting thread), as the core of the same stop is."""
    made = dumps("deep")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(made.path, mixed / "crash.0001")
    shutil.copy(made.core, mixed / "crash.0002")
    db = tmp_path / "mixed.sqlite"
    proc = stackwalk_cli("triage", str(mixed), "--db", str(db), "--json")
    records = {Path(r["path"]).name: r for r in map(json.loads, proc.stdout.splitlines())}
    assert records["crash.0001"]["error"] is None and records["crash.0002"]["error"] is None
    # gcore's core of the stopped process names no crashing thread (every thread is stopped
    # alike): its faulting thread's signature is the dump's.
    assert records["crash.0002"]["signature"] == "EMPTY: no crashing thread identified"
    core_doc = stackwalk.Core.open(made.core).to_dict(tids={made.pid})
    expected = signature(core_doc["threads"][0]["frames"]).text
    assert records["crash.0001"]["signature"] == expected
    assert not expected.startswith("EMPTY")
    with sqlite3.connect(db) as conn:
        pcs = [pc for (pc,) in conn.execute(
            "SELECT pc FROM frames JOIN crashes ON crash_id = crashes.id WHERE path LIKE ?"
            " AND inline = 0 ORDER BY tid, idx", ("%crash.0001",)
        )]  # fmt: skip
    # The dump's frames are gdb's on the core of the same stop.
    assert pcs == made.gdb.thread(made.pid).pcs


SIGNALS = {"assert": "SIGABRT", "smash": "SIGABRT", "double-free": "SIGABRT", "abort": "SIGABRT",
           "fpe": "SIGFPE"}  # fmt: skip


def test_minidumps_land_in_the_buckets_of_their_bugs(spool: Spool, tmp_path: Path) -> None:
    """Minidumps of the same crashes as the spool's cores (the C program stopped at each fault
    and dumped by minidump-writer, blaming the faulting thread): each lands in the bucket of
    its bug, with the cores of that bug."""
    import signal as signals

    from minidumps import _stop_at_fault, build_dumper

    dumper = build_dumper()
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    truth: dict[str, str] = {}
    for bug, (what, _) in C_BUGS.items():
        core = next(p for p, b in sorted(spool.truth.items()) if f".c.{bug}." in p)
        os.link(core, mixed / Path(core).name)
        truth[str(mixed / Path(core).name)] = what
        fatal = signals.Signals[SIGNALS.get(bug, "SIGSEGV")]
        process = _stop_at_fault([str(spool.programs["c"]), bug], fatal)
        dump = mixed / f"dump.{bug}.dmp"
        try:
            made = subprocess.run([str(dumper), str(process.pid), str(dump), str(process.pid)],
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
        finally:
            process.kill()
            process.wait()
        assert made.returncode == 0 and dump.exists(), made.stderr
        truth[str(dump)] = what
    db = tmp_path / "dumps.sqlite"
    stackwalk_cli("triage", str(mixed), "--db", str(db))
    with CrashStore(db) as store:
        assert store.errors() == []
        purity, completeness = grouping(store.crash_buckets(), truth)
    assert (purity, completeness) == (1.0, 1.0)


def test_a_rules_file_extends_the_lists(spool: Spool, tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('prefix = ["parse_header$"]\n')
    db = tmp_path / "rules.sqlite"
    paths = [p for p, bug in spool.truth.items() if "parse_header" in bug][: RUNS + 1]
    stackwalk_cli("triage", *paths, "--db", str(db), "--rules", str(rules))
    with CrashStore(db) as store:
        signatures = {b["signature"] for b in store.buckets()}
    # Now a prefix, parse_header is joined with its callers: the two paths to it part.
    assert signatures == {"parse_header | handle_request", "parse_header | handle_batch"}
    rules.write_text('prefix = ["(unclosed"]\n')
    proc = stackwalk_cli("triage", paths[0], "--db", str(db), "--rules", str(rules), check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("stackwalk: error: rules ") and "bad pattern" in proc.stderr
    rules.write_text('prefixes = ["x"]\n')
    proc = stackwalk_cli("triage", paths[0], "--db", str(db), "--rules", str(rules), check=False)
    assert proc.returncode == 2 and "unknown key 'prefixes'" in proc.stderr


def test_report(spool: Spool, tmp_path: Path) -> None:
    db = tmp_path / "report.sqlite"
    stackwalk_cli("triage", str(spool.directory), "--db", str(db))
    doc = json.loads(stackwalk_cli("report", "--db", str(db), "--json", "--top", "3").stdout)
    counts = Counter(spool.truth.values())
    assert [b["count"] for b in doc["buckets"]] == sorted(counts.values(), reverse=True)[:3]
    top = doc["buckets"][0]
    assert top["signature"] == "parse_header"
    assert top["example"]["frames"][0]["function"] == "parse_header"
    text = stackwalk_cli("report", "--db", str(db), "--top", "2").stdout
    assert f"1. {3 * RUNS:>6}  parse_header  [{top['bucket']}]" in text
    assert "in parse_header+0x" in text
    # Since a date after every crash: none.
    future = stackwalk_cli("report", "--db", str(db), "--json", "--since", "2999-01-01").stdout
    assert json.loads(future)["buckets"] == []
    proc = stackwalk_cli("report", "--db", str(tmp_path / "none.sqlite"), check=False)
    assert proc.returncode == 2 and "no such crash store" in proc.stderr


BOOT_ID = "8d5ea8f1c2b14a6e9f0d3c7b2a1e4f60"
DAY = 86400


def coredump_spool(spool: Spool, directory: Path) -> dict[str, tuple[str, int, float]]:
    """Cores of four bugs renamed as systemd-coredump names them (and xz-compressed, as it may
    compress them), over three days: {file name: (bug, pid, time)}."""
    import lzma

    directory.mkdir()
    start = 1_763_942_400  # 2025-11-24 00:00 UTC
    made = {}
    bugs = ["null dereference in parse_header", "assertion in check_config",
            "abort in fatal_error", "memcpy to NULL in copy_record"]  # fmt: skip
    for b, bug in enumerate(bugs):
        cores = [p for p, truth in sorted(spool.truth.items()) if truth == bug][: 8 - 2 * b]
        for i, core in enumerate(cores):
            when = start + (i % 3) * DAY + 3600 * b + i
            pid = 4000 + 100 * b + i
            name = f"core.bugs.1000.{BOOT_ID}.{pid}.{when * 1_000_000}.xz"
            (directory / name).write_bytes(lzma.compress(Path(core).read_bytes(), preset=0))
            made[name] = (bug, pid, float(when))
    return made


def png_colours(path: Path) -> int:
    """How many different byte values the pixel rows of a PNG hold (a blank page: very few)."""
    import zlib

    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    pos, idat = 8, b""
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        if data[pos + 4 : pos + 8] == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def test_html_report_in_chromium(spool: Spool, tmp_path: Path) -> None:
    """systemd-coredump's spool (its names, its compression) triaged, and the report's page
    rendered by headless Chromium: the table holds every bucket, sorted as its address asks;
    the chart has a bar for each bucket and day; the page is no blank screenshot."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is installed by .ci/setup"
    made = coredump_spool(spool, tmp_path / "coredump")
    db, page = tmp_path / "coredump.sqlite", tmp_path / "report.html"
    stackwalk_cli("triage", str(tmp_path / "coredump"), "--db", str(db))
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT path, pid, uid, boot_id, crash_time, error FROM crashes")
        stored = {Path(path).name: tuple(rest) for path, *rest in rows}
    assert stored == {n: (pid, 1000, BOOT_ID, when, None) for n, (_, pid, when) in made.items()}
    stackwalk_cli("report", "--db", str(db), "--html", str(page))
    browse = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1100,900"]
    url = f"{page.as_uri()}#sort=signature"
    dom = subprocess.run([*browse, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120).stdout  # fmt: skip
    assert '<body data-sorted-by="signature">' in dom  # the page's script ran, and sorted
    import re

    signatures = re.findall(r'<tr class="bucket"[^>]* data-signature="([^"]*)"', dom)
    expected = {}
    with CrashStore(db) as store:
        for b in store.buckets():
            expected[b["signature"]] = b["count"]
        per_day = store.per_day([b["bucket"] for b in store.buckets()])
    assert signatures == sorted(expected)
    bars = dom.count('<rect class="bar"')
    assert bars == sum(len(buckets) for buckets in per_day.values()) and len(per_day) == 3
    for sig, count in expected.items():
        assert f'data-count="{count}" data-signature="{sig}"' in dom
    shot = tmp_path / "report.png"
    subprocess.run([*browse, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=120, check=True)  # fmt: skip
    assert png_colours(shot) > 16


@pytest.mark.parametrize("store", ["here", "elsewhere"])
def test_dask_local_cluster_gives_the_same_store(spool: Spool, tmp_path: Path, store: str) -> None:
    """A Dask cluster's workers give the same store as one process, whether they see the
    store's file and write it themselves ("here": ``--dask local``, its workers on this
    machine), or not, and send their records to the driver, which writes them ("elsewhere":
    the driver names its store by ``/proc/self/cwd/``, which in a worker's eyes is another
    directory, its own, where no store is)."""
    distributed = pytest.importorskip("distributed")  # installed by .ci/setup; the test needs it
    files = sorted(str(p) for p in spool.directory.iterdir())[::5]
    one, dask = tmp_path / "one.sqlite", tmp_path / "dask.sqlite"
    stackwalk_cli("triage", *files, "--db", str(one), "--jobs", "1")
    if store == "here":
        # The installed command, as users type it: the cluster's workers are spawned
        # processes, which run the command's script again, as their main module.
        script = Path(sys.executable).with_name("stackwalk")
        argv = [str(script), "triage", *files, "--db", str(dask), "--dask", "local"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
    else:
        assert Path.cwd() != tmp_path  # the workers' directory (the tests'), not the driver's
        with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1) as local:
            argv = [sys.executable, "-m", "stackwalk", "triage", *files, "--db",
                    "/proc/self/cwd/dask.sqlite", "--dask", local.scheduler_address]  # fmt: skip
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr
        assert not Path("dask.sqlite").exists()

    def rows(path: Path) -> list[tuple[object, ...]]:
        with sqlite3.connect(path) as db:
            return sorted(db.execute(
                "SELECT path, signature, bucket, fingerprint, error FROM crashes"
            ).fetchall())  # fmt: skip

    assert rows(dask) == rows(one)
    with CrashStore(one) as a, CrashStore(dask) as b:
        assert [(x["signature"], x["count"]) for x in a.buckets()] == [
            (x["signature"], x["count"]) for x in b.buckets()
        ]


def test_a_store_is_here_only_on_this_machine_at_the_same_file(tmp_path: Path) -> None:
    """Where a Dask worker writes the store itself: the same file (device and inode) on the
    same running kernel (boot id); not a store made anew at the same path, nor the same
    device and inode on another machine, nor a path that does not exist."""
    path = tmp_path / "crashes.sqlite"
    CrashStore(path).close()
    here = StoreHere.of(str(path))
    assert here.here()
    assert not here._replace(boot_id="0" * 32).here()
    assert not here._replace(path=str(tmp_path / "none.sqlite")).here()
    path.rename(tmp_path / "old.sqlite")
    CrashStore(path).close()
    assert not here.here()


# -- signatures against siggen, Socorro's rules ----------------------------------------------


def siggen_crash_data(frames: list[dict[str, object]]) -> dict[str, object]:
    """A crashing thread's frames in the crash data siggen reads (minidump-stackwalk's JSON)."""
    out = []
    for f in frames:
        if f.get("inline"):
            continue  # siggen takes inline frames from each frame's "inlines"
        module = f["module"]
        out.append({
            "frame": len(out), "function": f["function"],
            "module": os.path.basename(str(module)) if module else None,
            "module_offset": f["module_offset"], "offset": f["pc"],
            "file": f.get("file"), "line": f.get("line"),
        })  # fmt: skip
    return {"os": "Linux", "crashing_thread": 0, "threads": [{"frames": out}]}


def test_signatures_against_siggen(spool: Spool) -> None:
    """The same crashes fed to siggen: every signature that differs is listed with its reason,
    and each reason is one of those known (each checked, not assumed):

    - siggen keeps ``raise | abort`` (prefixes in its lists) before the caller of abort, where
      stackwalk skips them as the error machinery that they are;
    - siggen skips glibc's string-function variants (``__memmove_avx_unaligned_erms``,
      ``__strlen_avx2``) as irrelevant, stackwalk names them by their function (``memmove``)
      and joins that to its caller as a prefix (the issue's rule: a crash in memcpy is
      "memcpy | caller");
    - siggen names a frame without a symbol by its module alone; stackwalk takes the unnamed
      frames of libstdc++'s terminate machinery for what they are (see signature.py);
    - siggen misreads a clone note after a const qualifier: ``const [clone .isra.0]`` for
      ``T::f(int) const [clone .isra.0]``, where stackwalk drops the ``const`` alone."""
    from siggen.generator import SignatureGenerator

    generator = SignatureGenerator()
    reasons: dict[str, str] = {}
    for path, bug in sorted(spool.truth.items()):
        if path.endswith(".0") is False:
            continue  # one crash of each kind
        core = stackwalk.Core.open(path)
        doc = core.to_dict(tids={core.crashing_tid} if core.crashing_tid else None)
        frames = doc["threads"][0]["frames"]
        ours = signature(frames).text
        theirs = generator.generate(siggen_crash_data(frames)).signature
        if ours == theirs:
            continue
        if theirs.startswith("raise | abort | ") and not ours.startswith("raise"):
            rest = theirs.removeprefix("raise | abort | ")
            reason = "siggen keeps raise | abort"
            assert rest.startswith(("malloc_printerr", "libstdc++")) or rest == ours, (ours, theirs)
        elif ours.startswith(("memmove | ", "memcpy | ", "strlen | ")):
            reason = "siggen skips glibc's string-function variants"
            names = [f["function"] for f in frames if f["function"]]
            assert any(n.startswith(("__memmove_", "__memcpy_", "__strlen_")) for n in names)
            assert ours.split(" | ")[-1] == theirs
        elif theirs.startswith("const [clone"):
            reason = "siggen misreads a clone note after const"
            names = [f["function"] for f in frames if f["function"]]
            assert any("const [clone" in n for n in names)
            assert ours == spool.where[bug] + theirs.removeprefix("const"), (ours, theirs)
        else:
            reason = "unexplained"
        reasons[f"{Path(path).name}: stackwalk {ours!r}, siggen {theirs!r}"] = reason
    print("\n".join(f"{k}  -- {v}" for k, v in reasons.items()))
    assert "unexplained" not in reasons.values(), reasons


@pytest.mark.parametrize(
    ("function", "normalized"),
    [
        ("int ns::Table<std::vector<int, std::allocator<int> > >::get(char const*) const",
         "ns::Table<T>::get"),
        # A clone's note and suffix are kept, as siggen keeps them, but for .cold's note (and
        # the const before a note goes, where siggen would take the const for the name).
        ("store::Table<int>::lookup(unsigned int) const [clone .isra.0]",
         "store::Table<T>::lookup [clone .isra.0]"),
        ("process_order(int) [clone .cold]", "process_order"),
        # siggen's readings of operators: "<" opens a template's arguments, "operator new" is
        # two words, the last one the name.
        ("bool operator<(Foo const&, Foo const&)", "operator<T>"),
        ("Foo::operator()(int)", "Foo::operator()"),
        ("operator new(unsigned long)", "new"),
        ("(anonymous namespace)::crash(int*)", "(anonymous namespace)::crash"),
        ("core::option::unwrap_failed::h0123456789abcdef", "core::option::unwrap_failed"),
        ("do_thing.isra.0", "do_thing.isra.0"),
    ],
)  # fmt: skip
def test_function_names_are_normalized(function: str, normalized: str) -> None:
    assert normalize_function(function) == normalized


def test_signature_rules_of_unnamed_and_empty_stacks() -> None:
    rules = Rules.load()
    libc, lib = "/lib/libc.so.6", "/usr/lib/libstdc++.so.6"
    frames = [
        {"function": "abort", "module": libc, "module_offset": "0x10"},
        {"function": None, "module": lib, "module_offset": "0x9d919"},
        {"function": "__cxa_throw", "module": lib, "module_offset": "0xa90cb"},
        {"function": None, "module": "/opt/app", "module_offset": "0x1234"},
    ]
    # The unnamed frame of libstdc++ before __cxa_throw is machinery; the app's is not.
    assert signature(frames, rules).text == "app@0x1234"
    assert signature([], rules).text == "EMPTY: no frame data available"
    assert signature(None, rules).text == "EMPTY: no crashing thread identified"
    assert signature(frames[:1], rules).text == "abort"  # all machinery: the first names it


# -- a Python process's crashes ----------------------------------------------------------------

# A program whose crashes are one native crash site reached from two Python call paths:
# ctypes.string_at(0), a strlen of NULL in libc (through _ctypes and libffi), called by parse()
# or by Page.render(). Before it crashes, it writes the Python functions its crash is in, as
# Python itself names them (__module__, __qualname__, __name__, the code's file), innermost
# first: the standard library's function that calls into native code, and its own that calls it.
PAGES_PY = """
import ctypes
import json


def parse(address):
    return ctypes.string_at(address)


class Page:
    def render(self, address):
        return ctypes.string_at(address)


def main(path, out):
    caller = {"parse": parse, "render": Page().render}[path]
    chain = [getattr(f, "__func__", f) for f in (ctypes.string_at, caller)]
    with open(out, "w") as f:
        json.dump([[c.__module__, c.__qualname__, c.__name__, c.__code__.co_filename]
                   for c in chain], f)
    caller(0)
"""
# Its runner: pages imported as a module (so that its __module__ is its file's name).
RUN_PY = """
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pages

pages.main(sys.argv[1], sys.argv[2])
"""
PY_RUNS = 2  # cores per call path


@dataclass
class PythonSpool:
    db: Path  # the spool triaged (--jobs 2)
    call_path: dict[str, str]  # core -> "parse" or "render"
    chain: dict[str, list[list[str]]]  # core -> what the program wrote
    records: dict[str, dict[str, object]]  # core -> triage's --json line


@pytest.fixture(scope="module")
def python_spool(tmp_path_factory: pytest.TempPathFactory) -> PythonSpool:
    """Cores of Debian's python3.11 (the interpreter of tests/programs/crash_py.py's cores)
    crashing through each call path of PAGES_PY twice, made by gdb, and triaged."""
    from corefiles import CRASH_ENV, gdb_crash_core
    from realstacks import SYSTEM_PYTHON

    work = tmp_path_factory.mktemp("python-triage")
    (work / "pages.py").write_text(PAGES_PY)
    (work / "run.py").write_text(RUN_PY)
    spool = work / "spool"
    spool.mkdir()
    call_path, chain = {}, {}
    for path in ("parse", "render"):
        for i in range(PY_RUNS):
            core, said = spool / f"core.{path}.{i}", work / f"{path}.{i}.json"
            argv = [SYSTEM_PYTHON, "-I", "-S", str(work / "run.py"), path, str(said)]
            gdb_crash_core(argv, core, CRASH_ENV)
            call_path[str(core)] = path
            chain[str(core)] = json.loads(said.read_text())
    db = work / "crashes.sqlite"
    proc = stackwalk_cli("triage", str(spool), "--db", str(db), "--json", "--jobs", "2")
    records = {r["path"]: r for r in map(json.loads, proc.stdout.splitlines())}
    return PythonSpool(db, call_path, chain, records)


def pystack_python_frames(core: str) -> tuple[int, list[tuple[str, str, int | None]]]:
    """The crashing (only) thread of a core and its Python frames, innermost first, as
    ``pystack core`` gives them."""
    from corefiles import run
    from test_pyframes import parse_pystack

    (thread,) = parse_pystack(run([sys.executable, "-m", "pystack", "core", core]).stdout).values()
    return thread.tid, thread.python()


def test_a_python_crash_is_bucketed_by_its_python_caller(python_spool: PythonSpool) -> None:
    """A CPython process's crash in native code is signed by its native crash site (the
    signature of its native frames alone, as before) and the Python functions that called into
    it, as Python names them: the standard library's ``ctypes.string_at`` joined to the
    program's own caller. The two call paths land in two buckets, each path's crashes in one
    (where the native frames alone put all four in one bucket). The store keeps each crash's
    Python frames, pystack's, among the native ones."""
    spool = python_spool
    bucket_of = {}
    native_sites = set()
    for core, path in spool.call_path.items():
        record = spool.records[core]
        assert record["error"] is None, record
        tid, python = pystack_python_frames(core)
        chain = spool.chain[core]
        # The program's own account of the functions its crash is in is pystack's innermost.
        assert [(name, file) for _, _, name, file in chain] == [(f, file) for f, file, _ in
                                                                 python[: len(chain)]]  # fmt: skip
        assert chain[-1][2] == path
        opened = stackwalk.Core.open(core)
        assert opened.crashing_tid == tid
        native = opened.to_dict(tids={tid})["threads"][0]["frames"]
        native_site = signature(native).text
        native_sites.add(native_site)
        assert record["signature"] == SEPARATOR.join(
            [native_site, *(f"{module}.{qualname}" for module, qualname, _, _ in chain)]
        )
        bucket_of[core] = record["bucket"]
        # Stored: the crashing thread's native frames, and pystack's Python frames among them.
        with CrashStore(spool.db) as store:
            ((crash_id,),) = store._db.execute("SELECT id FROM crashes WHERE path = ?", (core,))
            crash = store.crash(crash_id)
        assert crash is not None and crash["signature"] == record["signature"]
        frames = crash["frames"]
        assert {f["tid"] for f in frames} == {tid}
        assert [f["idx"] for f in frames] == list(range(len(frames)))
        assert [f["pc"] for f in frames if f["kind"] == "native"] == [
            int(f["pc"], 16) for f in native
        ]
        stored_python = [f for f in frames if f["kind"] == "python"]
        assert [(f["function"], f["file"], f["line"]) for f in stored_python] == python
        caller = next(f for f in stored_python if f["function"] == path)
        assert caller["qualname"] == chain[-1][1]
        assert all(f["pc"] is None and f["trust"] is None for f in stored_python)
    # The signature of the native frames alone (as before) is one for all four crashes.
    assert len(native_sites) == 1
    paths = defaultdict(set)
    for core, bucket in bucket_of.items():
        paths[spool.call_path[core]].add(bucket)
    assert {path: len(buckets) for path, buckets in paths.items()} == {"parse": 1, "render": 1}
    assert paths["parse"] != paths["render"]
    with CrashStore(spool.db) as store:
        assert sorted(b["count"] for b in store.buckets()) == [PY_RUNS, PY_RUNS]


def test_report_shows_a_python_crash_with_its_python_frames(
    python_spool: PythonSpool, tmp_path: Path
) -> None:
    """``report``'s example stack of a Python crash is the crashing thread's stack as ``core``
    prints it: the native frames, numbered as there, each native eval call followed by the
    Python frames it runs; the HTML page's too."""
    import html

    text = stackwalk_cli("report", "--db", str(python_spool.db)).stdout.splitlines()
    examples = [i for i, line in enumerate(text) if line.startswith("     e.g. ")]
    assert len(examples) == 2
    page = tmp_path / "report.html"
    stackwalk_cli("report", "--db", str(python_spool.db), "--html", str(page))
    for i in examples:
        core = text[i].removeprefix("     e.g. ").removesuffix(":")
        shown = []
        for line in text[i + 1 :]:
            if not line:
                break
            shown.append(line.removeprefix("       "))
        printed = stackwalk_cli("core", core).stdout.splitlines()
        start = next(j for j, line in enumerate(printed) if "(crashed)" in line) + 1
        crashed = []
        for line in printed[start:]:
            if not line.startswith(("#", "    (Python)")):
                break
            crashed.append(re.sub(r"  \[[^]]*\]\Z", "", line))  # (the store keeps no trust)
        assert shown == crashed
        _, python = pystack_python_frames(core)
        lines = [f'    (Python) File "{file}", line {line}, in {f}' for f, file, line in python]
        assert [line for line in shown if "(Python)" in line] == lines
        assert html.escape(lines[1]) in page.read_text()


def test_mixed_stack_signatures(tmp_path: Path) -> None:
    """The rules of a stack with Python frames, on frames made up: the interpreter's frames
    that carry calls are skipped (but name a crash in them), the standard library's Python
    frames are joined to their caller, a third party's are not (but by a rules file); the
    names of Python frames; a stack without Python frames is signed as it always was."""
    libc, python311 = "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3.11"
    stdlib = "/usr/lib/python3.11"
    app = "/srv/app-2.3/handlers.py"

    def native(function: str, module: str = python311) -> dict[str, object]:
        return {"kind": "native", "function": function, "module": module,
                "module_offset": "0x10"}  # fmt: skip

    def py(qualname: str, file: str) -> dict[str, object]:
        return {"kind": "python", "function": qualname.rpartition(".")[2], "qualname": qualname,
                "file": file, "line": 7}  # fmt: skip

    evals = [native("_PyEval_EvalFrameDefault"), native("_PyFunction_Vectorcall"),
             native("slot_tp_call.lto_priv.0")]  # fmt: skip
    # memcpy called by the eval loop: joined to the Python function, not to the loop
    frames = [native("__memmove_avx_unaligned_erms", libc), *evals, py("copy", app)]
    assert signature(frames).text == "memmove | handlers.copy"
    assert signature([f for f in frames if f["kind"] == "native"]).text == (
        "memmove | _PyEval_EvalFrameDefault"
    )
    # a crash in the eval loop itself (after abort's machinery): named by it
    frames = [native("abort", libc), *evals, py("Job.run", app), py("<module>", "<string>")]
    assert signature(frames).text == "_PyEval_EvalFrameDefault | handlers.Job.run"
    # the standard library's frames joined to the caller (frozen ones too), a package's
    # __init__ named by its package
    decoder = f"{stdlib}/json/decoder.py"
    frames = [native("scan_once_unicode", f"{stdlib}/lib-dynload/_json.so"), *evals,
              py("JSONDecoder.raw_decode", decoder), py("JSONDecoder.decode", decoder),
              py("loads", f"{stdlib}/json/__init__.py"), py("_call_with_frames_removed",
              "<frozen importlib._bootstrap>"), py("handle", app), py("main", app)]  # fmt: skip
    assert signature(frames).text == (
        "scan_once_unicode | json.decoder.JSONDecoder.raw_decode | "
        "json.decoder.JSONDecoder.decode | json.loads | importlib._bootstrap."
        "_call_with_frames_removed | handlers.handle"
    )
    # a third party's frames are not joined (its module named from site-packages on) but by a
    # rules file; the interpreter's list extended by one (Cython's call helper)
    numpy = "/venv/lib/python3.12/site-packages/numpy/core/_methods.py"
    frames = [native("strlen", libc), native("__Pyx_PyObject_Call", "/venv/ext.so"), *evals,
              py("_sum", numpy), py("total", app)]  # fmt: skip
    assert signature(frames).text == "strlen | __Pyx_PyObject_Call | numpy.core._methods._sum"
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('prefix = ["numpy\\\\."]\ninterpreter = ["__Pyx_PyObject_Call$"]\n')
    rules = Rules.load(rules_file)
    assert signature(frames, rules).text == "strlen | numpy.core._methods._sum | handlers.total"
    # the fingerprint tells the two Python callers apart too
    one = signature([native("strlen", libc), *evals, py("parse", app)])
    other = signature([native("strlen", libc), *evals, py("render", app)])
    assert one.fingerprint != other.fingerprint
    # no Python frames: the native signature, whatever the frames' kind
    frames = [native("__memmove_avx_unaligned_erms", libc), *evals]
    assert signature(frames).text == "memmove | _PyEval_EvalFrameDefault"


# The frames table of schema 1 (before Python frames were stored).
FRAMES_V1 = """CREATE TABLE frames (
    crash_id INTEGER NOT NULL REFERENCES crashes (id), tid INTEGER NOT NULL,
    idx INTEGER NOT NULL, pc INTEGER NOT NULL, module TEXT, module_offset INTEGER,
    function TEXT, function_offset INTEGER, file TEXT, line INTEGER, inline INTEGER NOT NULL,
    trust TEXT NOT NULL, PRIMARY KEY (crash_id, tid, idx)
) WITHOUT ROWID"""


def test_a_store_of_schema_1_is_brought_to_2(tmp_path: Path) -> None:
    """A store made before Python frames were stored is opened as one of schema 2, its
    frames native frames, and takes a Python crash's frames."""
    db = tmp_path / "old.sqlite"
    CrashStore(db).close()
    native = (7, 0, 0x401000, "/app", 0x1000, "main", 0x10, "app.c", 3, 0, "cfi")
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE frames")
        conn.execute(FRAMES_V1)
        conn.execute(
            "INSERT INTO crashes (id, path, content_hash, size, mtime, crash_time, crashing_tid,"
            " processed_at) VALUES (1, 'a', 'h', 1, 0, 0, 7, 0)"
        )
        conn.execute("INSERT INTO frames VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", native)
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    with CrashStore(db) as store:
        crash = store.crash(1)
        assert crash is not None
        assert crash["frames"] == [{
            **dict(zip(("tid", "idx", "pc", "module", "module_offset", "function",
                        "function_offset", "file", "line", "inline", "trust"), native,
                       strict=True)), "kind": "native", "qualname": None,
        }]  # fmt: skip
        python = (7, 0, None, None, None, "f", None, "/app/x.py", 2, 0, None, "python", "C.f")
        record = {"path": "b", "content_hash": "i", "size": 1, "mtime": 0.0, "crash_time": 0.0,
                  "crashing_tid": 7, "frames": [python]}  # fmt: skip
        assert store.add([record]) == 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)
        assert conn.execute("SELECT kind, qualname FROM frames ORDER BY crash_id").fetchall() == [
            ("native", None),
            ("python", "C.f"),
        ]
    conn.close()
