"""docs/json.md is the contract of ``--json``: its field tables, read here, are held to real
documents made at test time -- a core crashed under gdb (with ``--registers``), minidumps of
Windows and Linux processes (rust-minidump's test files), a live python process (Python frames
among the native ones), a capture unwound from a file, from standard input and by the demo,
and a perf recording's samples (with and without inline frames). Every key a document has is
in the table of its object, for its kind; every key the page says is always there is; each
value has a type the page gives; and every key the page lists is seen in some document. So
the page cannot drift from the output, nor the output from the page."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores, stackwalk_core, stackwalk_minidump
from perfdata import Recordings, perf_script
from processes import running
from realstacks import SYSTEM_PYTHON, Builder, Captures
from stackwalk import Core, Minidump
from stackwalk._core import END_REASONS, TRUST_LEVELS
from stackwalk._core import SNAPSHOT_KINDS as KINDS
from stackwalk._core import SNAPSHOT_SCHEMA as SCHEMA

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "json.md"
MINIDUMPS = ROOT / "tests" / "data" / "rust-minidump"
TIMEOUT = 300

# The page's headings of field tables, and the object each describes.
TABLES = {
    "The document": "document",
    "signal": "signal",
    "modules[]": "module",
    "threads[]": "thread",
    "threads[].frames[]: a native frame": "native frame",
    "threads[].frames[]: a Python frame": "python frame",
    "python": "python",
    "system": "system",
    "crash": "crash",
    "A sample": "sample",
    "A sample's frames[]": "sample frame",
}
# Keys the page lists that no document made here has: a thread's Python frames cut short
# (a damaged interpreter state).
NOT_SEEN = {("thread", "python_stop")}
_JSON_TYPES = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


@dataclass(frozen=True)
class Field:
    types: frozenset[str]  # JSON types, "null" among them where it may be null
    kinds: frozenset[str]  # the kinds of document that have it ("perf" for perf's samples)
    always: bool  # in every document of those kinds (else under a condition the page gives)


def page_tables() -> dict[str, dict[str, Field]]:
    """Each field table of docs/json.md, by the object it describes: field -> Field."""
    tables: dict[str, dict[str, Field]] = {}
    heading = None
    for line in PAGE.read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().replace("`", "")
            continue
        if not line.startswith("| `"):
            continue
        assert heading in TABLES, f"docs/json.md: a field table under {heading!r}"
        name, types, kinds, present, _meaning = (c.strip() for c in line.strip("|").split(" | "))
        kind_set = frozenset(KINDS) if kinds == "all" else frozenset(kinds.split(", "))
        assert kind_set <= {*KINDS, "perf"}, (heading, name, kinds)
        field = Field(frozenset(types.split(" or ")), kind_set, present.startswith("always"))
        assert field.types <= set(_JSON_TYPES.values()), (heading, name, types)
        tables.setdefault(TABLES[heading], {})[name.strip("`")] = field
    assert set(tables) == set(TABLES.values()), set(TABLES.values()) - set(tables)
    return tables


TABLE = page_tables()


def json_type(value: object) -> str:
    return _JSON_TYPES[type(value)]


class Checker:
    """Checks objects against the page's tables, and counts the keys seen."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    def object(self, obj: dict[str, Any], table: str, kind: str, where: str) -> list[str]:
        """What is wrong with ``obj`` (an object of ``table`` in a document of ``kind``)."""
        fields = TABLE[table]
        problems = []
        for key, value in obj.items():
            self.seen.add((table, key))
            field = fields.get(key)
            if field is None:
                problems.append(f"{where}.{key}: not in docs/json.md's {table} table")
            elif kind not in field.kinds:
                problems.append(f"{where}.{key}: docs/json.md gives it to {sorted(field.kinds)}")
            elif not (
                json_type(value) in field.types
                or (json_type(value) == "integer" and "number" in field.types)
            ):
                problems.append(f"{where}.{key}: {json_type(value)}, not {sorted(field.types)}")
        for key, field in fields.items():
            if field.always and kind in field.kinds and key not in obj:
                problems.append(f"{where}: no {key!r}, which docs/json.md says is always there")
        return problems

    def snapshot(self, doc: dict[str, Any], name: str) -> None:
        """A snapshot document: each of its objects against its table, and the values of
        its closed sets."""
        kind = doc.get("kind")
        assert kind in KINDS, (name, kind)
        assert doc["schema"] == SCHEMA
        problems = self.object(doc, "document", kind, name)
        if doc["signal"] is not None:
            problems += self.object(doc["signal"], "signal", kind, f"{name}.signal")
        for i, module in enumerate(doc["modules"]):
            problems += self.object(module, "module", kind, f"{name}.modules[{i}]")
        for i, thread in enumerate(doc["threads"]):
            where = f"{name}.threads[{i}]"
            problems += self.object(thread, "thread", kind, where)
            assert thread["end"] in END_REASONS, (where, thread["end"])
            for j, frame in enumerate(thread["frames"]):
                table = "python frame" if frame.get("kind") == "python" else "native frame"
                problems += self.object(frame, table, kind, f"{where}.frames[{j}]")
                if table == "native frame":
                    assert frame["trust"] in TRUST_LEVELS, (where, j, frame["trust"])
        for key in ("python", "system", "crash"):
            if doc.get(key) is not None:
                problems += self.object(doc[key], key, kind, f"{name}.{key}")
        assert not problems, "\n".join(problems[:20])

    def sample(self, sample: dict[str, Any], name: str) -> None:
        problems = self.object(sample, "sample", "perf", name)
        for j, frame in enumerate(sample["frames"]):
            problems += self.object(frame, "sample frame", "perf", f"{name}.frames[{j}]")
            assert frame["trust"] in (None, *TRUST_LEVELS), (name, j, frame["trust"])
            assert (frame["trust"] is None) == frame["kernel"], (name, j, frame)
        assert not problems, "\n".join(problems[:20])


def stackwalk(*args: str | Path, stdin: Any = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "stackwalk", *map(str, args)]
    return subprocess.run(command, stdin=stdin, capture_output=True, text=True, timeout=TIMEOUT)


def one_document(proc: subprocess.CompletedProcess[str], statuses: tuple[int, ...] = (0,)) -> Any:
    assert proc.returncode in statuses, proc.stderr[-3000:]
    return json.loads(proc.stdout)


# --- the page -----------------------------------------------------------------------------------


def test_the_page_names_the_schema_and_is_linked() -> None:
    """docs/json.md names the version the documents carry, and the pages that send readers
    to it (the docs index, the command line's page) link it."""
    assert f'"schema": "{SCHEMA}"' in PAGE.read_text()
    for page in ("docs/README.md", "docs/cli.md"):
        assert re.search(r"\]\((docs/)?json\.md[)#]", (ROOT / page).read_text()), page


# --- the documents ------------------------------------------------------------------------------

Documents = list[tuple[str, dict[str, Any]]]  # (a name for messages, the document)


@pytest.fixture(scope="module")
def core_documents(cores: Cores) -> Documents:
    """A core crashed under gdb: its signal, crashing thread, modules and frames, each frame's
    registers (``--registers``)."""
    made = cores("deep")
    options = ["--json", "--registers", *made.cli_options]
    doc = one_document(stackwalk_core(made.path, made.executable, *options))
    assert (doc["kind"], doc["path"], doc["arch"]) == ("core", str(made.path), "x86_64")
    assert doc["signal"] is not None and doc["crashing_thread"] is not None
    return [("core", doc)]


@pytest.fixture(scope="module")
def minidump_documents() -> Documents:
    """A Windows dump (its exception, no signal) and a Linux one (its signal), two documents
    on two lines."""
    paths = [MINIDUMPS / "test.dmp", MINIDUMPS / "linux-mini.dmp"]
    proc = stackwalk_minidump(*paths, "--json")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # their stacks stop early
    docs = [json.loads(line) for line in proc.stdout.splitlines()]
    for path, doc in zip(paths, docs, strict=True):
        assert (doc["kind"], doc["path"]) == ("minidump", str(path))
    windows, linux = docs
    assert windows["signal"] is None and windows["crash"]["reason"].startswith("EXCEPTION_")
    assert windows["arch"] == "i386" and windows["system"]["os"] == "Windows NT"
    assert linux["signal"]["name"] == "SIGSEGV" and linux["arch"] == "x86_64"
    return [(path.name, doc) for path, doc in zip(paths, docs, strict=True)]


PYTHON_SLEEPS = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


@pytest.fixture(scope="module")
def process_documents(tmp_path_factory: pytest.TempPathFactory) -> Documents:
    """``stackwalk pid`` on a python process asleep: Python frames among the native ones
    (the default), ``gil``, ``python``, ``stopped_ms``; no path, the pid in ``pid``."""
    script = tmp_path_factory.mktemp("json-schema") / "sleeps.py"
    script.write_text(PYTHON_SLEEPS)
    with running([SYSTEM_PYTHON, "-I", "-S", str(script)]) as proc:
        doc = one_document(stackwalk("pid", proc.pid, "--json"))
    assert (doc["kind"], doc["path"], doc["pid"]) == ("process", None, proc.pid)
    kinds = {f["kind"] for t in doc["threads"] for f in t["frames"]}
    assert kinds == {"native", "python"} and doc["python"]["error"] is None
    return [("process", doc)]


@pytest.fixture(scope="module")
def capture_documents(
    build: Builder, captures: Captures, tmp_path_factory: pytest.TempPathFactory
) -> Documents:
    """A capture unwound from its file and from standard input (``<stdin>``), and the demo's
    (never saved: no path): one thread, the capture's modules, and the frames ``unwind`` has
    always given (gdb's)."""
    cap = captures([build("qsort.c", "-O2")], "compare_ints", core=True)
    saved = tmp_path_factory.mktemp("json-schema") / "stop.json"
    cap.save(saved)
    from_file = one_document(stackwalk("unwind", "--json", saved))
    with open(saved, "rb") as f:
        from_stdin = one_document(stackwalk("unwind", "--json", "-", stdin=f))
    demo = one_document(stackwalk("demo", "--json"))
    docs = [("unwind", from_file, str(saved)), ("unwind -", from_stdin, "<stdin>"),
            ("demo", demo, None)]  # fmt: skip
    for _, doc, path in docs:
        assert (doc["kind"], doc["path"], doc["arch"]) == ("capture", path, "x86_64")
        assert [doc["pid"], doc["signal"], doc["crashing_thread"]] == [None, None, None]
    assert {**from_stdin, "path": None} == {**from_file, "path": None}
    [thread] = from_file["threads"]
    assert thread["tid"] == cap.tid
    assert [int(f["pc"], 16) for f in thread["frames"] if not f["inline"]] == cap.gdb_pcs
    # The modules that name the frames are the document's, each frame's pc within its own.
    modules = {m["path"]: m for m in from_file["modules"]}
    assert {m.path for m in cap.modules} <= set(modules) and "[vdso]" in modules
    assert all(m["found"] for m in modules.values())
    for frame in thread["frames"]:
        module = modules[frame["module"]]
        assert any(int(a, 16) <= int(frame["pc"], 16) < int(b, 16) for a, b in module["ranges"])
    return [(name, doc) for name, doc, _ in docs]


@pytest.fixture(scope="module")
def samples(recordings: Recordings) -> dict[str, list[dict[str, Any]]]:
    """``stackwalk perf --json`` of a recording, with inline frames and without."""
    recording = recordings("qsort")
    out = {}
    for options in ((), ("--no-inline",)):
        proc = stackwalk("perf", "--json", *options, recording.path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[" ".join(options)] = [json.loads(line) for line in proc.stdout.splitlines()]
        assert out[" ".join(options)], options
    return out


# --- each kind of document ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "documents", ["core_documents", "minidump_documents", "process_documents", "capture_documents"]
)
def test_snapshot_documents(documents: str, request: pytest.FixtureRequest) -> None:
    """Each kind's documents, object by object, against the page."""
    checker = Checker()
    for name, doc in request.getfixturevalue(documents):
        checker.snapshot(doc, name)


def test_the_api_gives_the_commands_documents(
    cores: Cores, core_documents: Documents, minidump_documents: Documents
) -> None:
    """``to_dict()``, made from the native document without its text, is what its JSON reads
    as, and the command's document: a core's with each frame's registers, two minidumps'."""
    made = cores("deep")
    core = Core.open(made.path, made.executable, **made.open_options)
    doc = core.document(registers=True)
    assert doc.to_dict() == json.loads(doc.json()) == json.loads(doc.json(indent=None))
    assert doc.to_dict() == core_documents[0][1]
    for name, theirs in minidump_documents:
        dump = Minidump.open(MINIDUMPS / name).document()
        assert dump.to_dict() == json.loads(dump.json()) == theirs, name


def test_perf_samples(samples: dict[str, list[dict[str, Any]]], recordings: Recordings) -> None:
    """Every sample of a recording (kernel frames and user frames), with inline frames and
    without: those without have no source keys. Kernel frames are there where perf script
    shows some: a recording of this CPU-bound program may have none (one in about ten here
    does; the others 5 to 40)."""
    checker = Checker()
    for options, lines in samples.items():
        for i, sample in enumerate(lines):
            checker.sample(sample, f"perf {options} sample {i}")
    no_source = {"file", "line", "column", "inline"}
    assert all(not no_source & set(f) for s in samples["--no-inline"] for f in s["frames"])
    frames = [f for s in samples[""] for f in s["frames"]]
    assert any(f["inline"] for f in frames)
    recording = recordings("qsort")
    theirs = any(s.kernel_frames for s in perf_script(recording.path, recording.home))
    assert any(f["kernel"] for f in frames) == theirs


def test_every_documented_key_is_seen(
    core_documents: Documents,
    minidump_documents: Documents,
    process_documents: Documents,
    capture_documents: Documents,
    samples: dict[str, list[dict[str, Any]]],
) -> None:
    """Every key the page lists is in some document above: a key the output no longer has
    cannot stay on the page."""
    checker = Checker()
    for name, doc in core_documents + minidump_documents + process_documents + capture_documents:
        checker.snapshot(doc, name)
    for options, lines in samples.items():
        for i, sample in enumerate(lines):
            checker.sample(sample, f"perf {options} sample {i}")
    listed = {(table, key) for table, fields in TABLE.items() for key in fields}
    assert listed - checker.seen - NOT_SEEN == set()
    assert not NOT_SEEN & checker.seen, "seen now: take it out of NOT_SEEN"
