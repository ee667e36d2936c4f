"""The crash store's columnar export (issue #51): ``CrashStore.to_arrow()`` and ``stackwalk
report --parquet DIR``. The store is a real one: test_triage.py's spool of 210 cores of 12 bugs
(gdb's, at test time), with a multi-threaded crash, a Python process's crash, a crash in inlined
functions, one whose executable is gone, a core whose file name is not UTF-8 and a file that is
not a crash beside it, triaged with ``--all-threads`` as a user would. The tables are checked
against the store as SQLite and the store's own methods give it, the Parquet files against the
tables, and the counts a reader of the files computes against ``report``'s and the spool's
ground truth.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from corefiles import Cores
from stackwalk import _arrow
from stackwalk.cli import main
from stackwalk.errors import StackwalkError
from stackwalk.store import ArrowTables, CrashStore
from test_triage import Spool, stackwalk_cli
from test_triage import spool as triage_spool  # noqa: F401 (the fixture, named so here)

NOT_UTF8 = b"core.deep-\xff"
# The crashes added to the spool, each for something of the export it shows.
EXTRA = ("threads", "python", "inline", "deep-moved")


@dataclass
class Store:
    db: Path
    spool: Spool
    extra: dict[str, str]  # EXTRA's name -> the core's path in the store
    not_utf8: str  # the core whose name is not UTF-8, as os.fsdecode names it
    junk: str  # the file that is not a crash


@pytest.fixture(scope="module")
def store(
    request: pytest.FixtureRequest, cores: Cores, tmp_path_factory: pytest.TempPathFactory
) -> Store:
    spool: Spool = request.getfixturevalue("triage_spool")
    work = tmp_path_factory.mktemp("arrow")
    more = work / "more"
    more.mkdir()
    extra = {}
    for name in EXTRA:
        extra[name] = str(more / f"core.{name}")
        shutil.copyfile(cores(name).path, extra[name])
    not_utf8 = os.path.join(os.fsencode(more), NOT_UTF8)
    shutil.copyfile(cores("deep").path, not_utf8)
    junk = more / "notes.txt"
    junk.write_text("not a crash\n")
    db = work / "crashes.sqlite"
    stackwalk_cli("triage", str(spool.directory), str(more), "--db", str(db),
                  "--all-threads")  # fmt: skip
    return Store(db, spool, extra, os.fsdecode(not_utf8), str(junk))


@pytest.fixture(scope="module")
def tables(store: Store) -> ArrowTables:
    with CrashStore(store.db) as s:
        return s.to_arrow()


def sqlite_table(db: Path, table: str) -> tuple[dict[str, bool], list[tuple[Any, ...]]]:
    """A table as SQLite gives it, by a connection of its own: {column: whether it may be
    NULL (neither NOT NULL nor the primary key)}, in order, and the rows."""
    conn = sqlite3.connect(db)
    try:
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()
        nullable = {name: not (notnull or pk) for _, name, _, notnull, _, pk in info}
        return nullable, conn.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        conn.close()


def exported(value: Any, field: Any) -> Any:
    """What the export must make of a value SQLite holds, by its field's type (a time: the
    seconds, compared apart)."""
    if pa.types.is_list(field.type):  # the warnings' JSON; NULL for none
        return json.loads(value) if value is not None else []
    if pa.types.is_boolean(field.type):
        return {0: False, 1: True}[value]
    if isinstance(value, bytes):  # a name that is not UTF-8
        return value.decode("utf-8", "replace")
    return value


def split(row: Sequence[Any], schema: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """A row as (its values but times, hashable; its times)."""
    rest, times = [], []
    for value, field in zip(row, schema, strict=True):
        if pa.types.is_timestamp(field.type):
            times.append(value)
        else:
            rest.append(tuple(value) if isinstance(value, list) else value)
    return tuple(rest), tuple(times)


def near(moment: datetime, seconds: float) -> bool:
    """A timestamp of the export is the store's Unix seconds, to the microsecond, in UTC."""
    return moment.tzinfo is not None and abs(moment.timestamp() - seconds) <= 1e-6


# The export's types, by column (the rest: strings).
TYPES = {
    "int64": "id size pid uid signal_number crashing_tid crash_id tid idx line count example_crash",
    "uint64": "pc module_offset function_offset",
    "timestamp[us, tz=UTC]": "mtime crash_time processed_at first_seen last_seen",
    "bool": "inline found",
    "list<item: string>": "warnings",
}


def test_each_table_holds_the_stores_rows(store: Store, tables: ArrowTables) -> None:
    """Every table of the store, with every column in its order and every row as SQLite holds
    it: integers as integers (addresses unsigned), times as UTC timestamps, 0/1 as booleans,
    the warnings' JSON as a list (empty for none), a name that is not UTF-8 with U+FFFD for
    its bytes; a column SQLite keeps from being NULL is not nullable."""
    conn = sqlite3.connect(store.db)
    names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    conn.close()
    assert sorted(ArrowTables._fields) == sorted(names)
    for name in ArrowTables._fields:
        table = getattr(tables, name)
        nullable, rows = sqlite_table(store.db, name)
        assert table.column_names == list(nullable), name
        for field in table.schema:
            kind = next((t for t, cols in TYPES.items() if field.name in cols.split()), "string")
            assert str(field.type) == kind, (name, field.name)
            assert field.nullable == (nullable[field.name] and field.name != "warnings"), field
        theirs = [split(r, table.schema) for r in zip(*table.to_pydict().values(), strict=True)]
        ours = [split([exported(v, f) for v, f in zip(r, table.schema, strict=True)],
                      table.schema)
                for r in rows]  # fmt: skip
        assert Counter(rest for rest, _ in theirs) == Counter(rest for rest, _ in ours), name
        times = dict(theirs)  # (a table with times has a key among the rest)
        for rest, seconds in ours:
            assert all(map(near, times[rest], seconds)), (name, rest, times[rest], seconds)


def utf8(name: str) -> str:
    """A name as the export gives it: its bytes that are not UTF-8 as U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


def test_each_crash_as_the_store_gives_it(store: Store, tables: ArrowTables) -> None:
    """Each crash's row and frames are those ``CrashStore.crash`` gives, its frames in their
    threads' order: every thread's with ``--all-threads``, a Python process's Python frames
    (without pc, module or trust) among its native ones, inlined functions' frames, the
    warnings of a crash whose executable is gone, a file that is not a crash with why, and a
    file name that is not UTF-8."""
    crashes = {r["id"]: r for r in tables.crashes.to_pylist()}
    assert list(crashes) == sorted(crashes)  # in the order of their ids
    keys = [tuple(r.values()) for r in tables.frames.select(["crash_id", "tid", "idx"]).to_pylist()]
    assert keys == sorted(keys)
    frames: dict[int, list[dict[str, Any]]] = {i: [] for i in crashes}
    for f in tables.frames.to_pylist():
        frames[f.pop("crash_id")].append(f)
    with CrashStore(store.db) as s:
        for crash_id, row in crashes.items():
            held = s.crash(crash_id)
            assert held is not None
            for column, value in held.items():
                if column == "frames":
                    continue
                if column in ("mtime", "crash_time", "processed_at"):
                    assert near(row[column], value), (column, row[column], value)
                elif column == "warnings":
                    assert row[column] == (json.loads(value) if value else [])
                else:
                    assert row[column] == (utf8(value) if isinstance(value, str) else value)
            # The store gives the crashing thread first; the export, threads by tid.
            ours = sorted(frames[crash_id], key=lambda f: (f["tid"] != row["crashing_tid"],
                                                           f["tid"], f["idx"]))  # fmt: skip
            assert ours == [
                {k: bool(v) if k == "inline" else utf8(v) if isinstance(v, str) else v
                 for k, v in f.items()}
                for f in held["frames"]
            ], row["path"]  # fmt: skip
    by_path = {r["path"]: r for r in crashes.values()}
    assert sorted(by_path) == sorted(map(utf8, [*store.spool.truth, *store.extra.values(),
                                                store.not_utf8, store.junk]))  # fmt: skip
    # What each of the added files shows.
    threads = by_path[store.extra["threads"]]
    assert len({f["tid"] for f in frames[threads["id"]]}) > 1
    python = frames[by_path[store.extra["python"]]["id"]]
    pythons = [f for f in python if f["kind"] == "python"]
    assert pythons and all(f["pc"] is f["module"] is f["trust"] is None for f in pythons)
    assert any(f["qualname"] and "." in f["qualname"] for f in pythons)
    assert any(f["inline"] for f in frames[by_path[store.extra["inline"]]["id"]])
    moved = by_path[store.extra["deep-moved"]]
    assert any(w.startswith("module not found: ") for w in moved["warnings"])
    not_utf8 = by_path[utf8(store.not_utf8)]
    assert "\ufffd" in not_utf8["path"] and not_utf8["bucket"] is not None
    junk = by_path[store.junk]
    assert junk["error"] and junk["signature"] is junk["bucket"] is None and not frames[junk["id"]]


def read_parquet(directory: Path) -> dict[str, Any]:
    return {name: pq.read_table(directory / f"{name}.parquet") for name in ArrowTables._fields}


def test_report_parquet_writes_the_tables(
    store: Store, tables: ArrowTables, tmp_path: Path
) -> None:
    """``report --parquet DIR`` writes each table as DIR/TABLE.parquet, the same rows and
    types as ``to_arrow`` gives (a non-nullable field REQUIRED in the file), saying how many
    rows each has; written again, the files are replaced, and nothing else is left there."""
    out = tmp_path / "export"
    for _ in range(2):
        proc = stackwalk_cli("report", "--db", str(store.db), "--parquet", str(out))
        files = read_parquet(out)
        assert proc.stdout.splitlines() == [
            f"{out}/{name}.parquet: {files[name].num_rows} rows" for name in ArrowTables._fields
        ]
        for name, read in files.items():
            table = getattr(tables, name)
            assert read.schema.equals(table.schema), name
            assert read.equals(table), name
        assert sorted(p.name for p in out.iterdir()) == sorted(
            f"{name}.parquet" for name in ArrowTables._fields
        )
    metadata = pq.read_metadata(out / "crashes.parquet")
    required = {metadata.schema.column(i).name: metadata.schema.column(i).max_definition_level
                for i in range(metadata.num_columns)}  # fmt: skip
    assert required["id"] == 0 and required["signature"] == 1


def test_a_reader_of_the_files_counts_and_joins_as_report_does(
    store: Store, tmp_path: Path
) -> None:
    """What an analytics reader does with the files alone, pyarrow's compute standing in for
    DuckDB or Dask: the crashes counted per bucket and signature are ``report``'s counts, the
    buckets table's too; the crashes joined to the buckets give each core of the spool the
    signature naming its bug's function; the crashes joined to their crashing thread's frames
    give each bucket's example the top frame ``report`` shows."""
    out = tmp_path / "export"
    stackwalk_cli("report", "--db", str(store.db), "--parquet", str(out))
    files = read_parquet(out)
    crashes, frames, buckets = files["crashes"], files["frames"], files["buckets"]
    report = json.loads(stackwalk_cli("report", "--db", str(store.db), "--json").stdout)
    counted = (
        crashes.filter(pc.is_valid(crashes["bucket"]))
        .group_by(["bucket", "signature"])
        .aggregate([("id", "count")])
    )
    assert {(r["bucket"], r["signature"]): r["id_count"] for r in counted.to_pylist()} == {
        (b["bucket"], b["signature"]): b["count"] for b in report["buckets"]
    }
    assert buckets.select(["bucket", "count"]).to_pylist() == [
        {"bucket": b["bucket"], "count": b["count"]} for b in report["buckets"]
    ]
    # Each bug of the spool in one bucket, whose signature names the bug's function.
    # (pyarrow's joins take no list column: the warnings left out, as a reader would.)
    signed = crashes.select(["path", "bucket"]).join(buckets, "bucket", join_type="inner")
    signature = {r["path"]: r["signature"] for r in signed.to_pylist()}
    for core, bug in store.spool.truth.items():
        assert store.spool.where[bug].split("<")[0] in signature[core], (core, signature[core])
    top = crashes.select(["id", "crashing_tid"]).join(
        frames.filter(pc.equal(frames["idx"], 0)),
        keys=["id", "crashing_tid"],
        right_keys=["crash_id", "tid"],
        join_type="inner",
    )
    top_function = {r["id"]: r["function"] for r in top.to_pylist()}
    for b in report["buckets"]:
        assert top_function[b["example_crash"]] == b["example"]["frames"][0]["function"]


def test_without_pyarrow_one_line_says_what_to_install(
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without pyarrow, ``report --parquet`` is one line of error naming the extra to install
    (status 2, no traceback, nothing written), and ``to_arrow`` a StackwalkError saying it."""
    for module in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, module, None)  # import pyarrow: ImportError
    out = tmp_path / "export"
    assert main(["report", "--db", str(store.db), "--parquet", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "stackwalk: error: the columnar export needs pyarrow, which is not installed: "
        "pip install 'stackwalk[arrow]'\n"
    )
    assert not out.exists()
    with CrashStore(store.db) as s, pytest.raises(StackwalkError, match=r"stackwalk\[arrow\]"):
        s.to_arrow()


def test_parquet_refusals_and_an_empty_store(
    store: Store, tables: ArrowTables, tmp_path: Path
) -> None:
    """``--parquet`` exports the whole store: with ``--top`` or ``--since`` it is one error,
    with ``--json`` or ``--html`` a usage error; a file where the directory or one of its
    parents should be, or a FIFO at a file's name, is one error line, and nothing is
    written. The directory is made with
    its parents; an empty store gives empty tables of the same schema."""
    db = str(store.db)
    out = tmp_path / "export"
    for options in (["--top", "3"], ["--since", "2026-01-01"]):
        proc = stackwalk_cli("report", "--db", db, "--parquet", str(out), *options, check=False)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (
            "stackwalk: error: --parquet writes the whole store, without --top or --since\n"
        )
    for option in (["--json"], ["--html", str(tmp_path / "page.html")]):
        proc = stackwalk_cli("report", "--db", db, "--parquet", str(out), *option, check=False)
        assert proc.returncode == 2 and "not allowed with argument" in proc.stderr
    assert not out.exists()
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    proc = stackwalk_cli("report", "--db", db, "--parquet", str(a_file), check=False)
    assert (proc.returncode, proc.stderr) == (
        2,
        f"stackwalk: error: {a_file}: is a regular "
        "file, not a directory to write Parquet files in\n",
    )
    assert a_file.read_text() == "mine\n"
    under_a_file = a_file / "export"
    proc = stackwalk_cli("report", "--db", db, "--parquet", str(under_a_file), check=False)
    assert (proc.returncode, proc.stderr) == (
        2, f"stackwalk: error: {under_a_file}: Not a directory\n"
    )  # fmt: skip
    # A FIFO at one file's name: refused before any file is written, never opened.
    fifo_at = tmp_path / "fifo"
    fifo_at.mkdir()
    os.mkfifo(fifo_at / "frames.parquet")
    proc = stackwalk_cli("report", "--db", db, "--parquet", str(fifo_at), check=False)
    assert (proc.returncode, proc.stderr) == (
        2, f"stackwalk: error: {fifo_at}/frames.parquet: is a FIFO, not a file to write a "
        "Parquet file to\n"
    )  # fmt: skip
    assert [p.name for p in fifo_at.iterdir()] == ["frames.parquet"]
    empty = tmp_path / "empty.sqlite"
    CrashStore(empty).close()
    deeper = tmp_path / "new" / "export"  # made, with its parent
    stackwalk_cli("report", "--db", str(empty), "--parquet", str(deeper))
    for name, read in read_parquet(deeper).items():
        assert read.num_rows == 0 and read.schema.equals(getattr(tables, name).schema), name


def test_a_batch_of_rows_at_a_time(
    store: Store, tables: ArrowTables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read 100 rows at a time (the frames in many batches), the store gives the same tables,
    and ``write_parquet`` the same files, a row group per batch, saying each file's rows."""
    monkeypatch.setattr(_arrow, "BATCH_ROWS", 100)
    out = tmp_path / "export"
    with CrashStore(store.db) as s:
        again = s.to_arrow()
        rows = s.write_parquet(out)
    assert rows == {name: getattr(tables, name).num_rows for name in ArrowTables._fields}
    files = read_parquet(out)
    for name in ArrowTables._fields:
        assert getattr(again, name).equals(getattr(tables, name)), name
        assert files[name].equals(getattr(tables, name)), name
        groups = pq.read_metadata(out / f"{name}.parquet").num_row_groups
        assert groups == -(-rows[name] // 100), name
    assert rows["frames"] > 1000
