"""The crash store as Arrow tables (``CrashStore.to_arrow``) and as Parquet files
(``CrashStore.write_parquet``, ``stackwalk report --parquet DIR``), for the analytics side:
DuckDB, Dask, Polars and Spark read them without a parser of ours. pyarrow is an optional
dependency (the ``arrow`` extra), imported when an export is asked for; without it, the export
is one StackwalkError saying what to install.

One table per table of the store (``ArrowTables``: ``crashes``, ``frames``, ``modules``,
``buckets``, ``bucket_builds``), with its name and its columns in its order, so that a query of
the SQLite store runs on the Parquet files as it is (joined by ``crashes.id`` =
``frames.crash_id`` = ``modules.crash_id``, and by ``bucket``), with typed columns:

- integers: int64; addresses and offsets in an address space (frames' ``pc``,
  ``module_offset``, ``function_offset``): uint64;
- times (``mtime``, ``crash_time``, ``processed_at``, buckets' ``first_seen``,
  ``last_seen``; Unix seconds in the store): timestamp[us, tz=UTC];
- frames' ``inline``, modules' ``found`` (0 or 1 in the store): bool;
- crashes' ``warnings`` (a JSON list in the store, NULL for none): list<string>, empty for none;
- text: string (UTF-8). A name that is not UTF-8 (kept in the store as its bytes) has each byte
  that is not UTF-8 as U+FFFD, as the native core writes such names.

A column that is NOT NULL in the store is a non-nullable field. Rows are in the order of the
store's keys: crashes by ``id``, frames by ``crash_id``, ``tid``, ``idx``, modules by
``crash_id`` (as stored), buckets by ``count`` (most first) then ``bucket``, bucket_builds by
``bucket``, ``executable``, ``build_id``. Every table is read in one SQLite read transaction, so
that they agree with each other while ``triage`` adds to the store; rows are converted
``BATCH_ROWS`` at a time (a Parquet file gets a row group per batch), so that writing the files
holds one batch of Python values at a time, however big the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from stackwalk._files import check_output, kind, replacing
from stackwalk.errors import StackwalkError
from stackwalk.store import ArrowTables, _rollback, _sql

BATCH_ROWS = 65536
INSTALL = "pip install 'stackwalk[arrow]'"

# Each table's columns as "name kind" (a "!": NOT NULL in the store), and its rows' order.
_TABLES = {
    "crashes": (
        "id int!, path text!, content_hash text!, size int!, mtime time!, executable text,"
        " pid int, uid int, boot_id text, signal text, signal_number int, crash_time time!,"
        " crashing_tid int, signature text, bucket text, fingerprint text, error text,"
        " warnings texts!, host text, processed_at time!",
        "id",
    ),
    "frames": (
        "crash_id int!, tid int!, idx int!, pc address, module text, module_offset address,"
        " function text, function_offset address, file text, line int, inline flag!,"
        " trust text, kind text!, qualname text",
        "crash_id, tid, idx",
    ),
    "modules": ("crash_id int!, path text!, build_id text, found flag!", "crash_id, rowid"),
    "buckets": (
        "bucket text!, signature text!, count int!, first_seen time!, last_seen time!,"
        " example_crash int!",
        "count DESC, bucket",
    ),
    "bucket_builds": (
        "bucket text!, executable text!, build_id text!, count int!",
        "bucket, executable, build_id",
    ),
}
assert tuple(_TABLES) == ArrowTables._fields


class _Column(NamedTuple):
    name: str
    kind: str  # int, address, time, flag, text, texts
    nullable: bool

    @property
    def sql(self) -> str:
        """The expression that reads it: a time as whole microseconds."""
        if self.kind == "time":
            return f'CAST(round("{self.name}" * 1e6) AS INTEGER)'
        return f'"{self.name}"'


def columns(table: str) -> list[_Column]:
    """The columns of the store's ``table`` as the export writes them."""
    out = []
    for spec in _TABLES[table][0].split(","):
        name, what = spec.split()
        out.append(_Column(name, what.rstrip("!"), not what.endswith("!")))
    return out


def _text(value: Any) -> Any:
    """A text read from the store (a BLOB where it is not UTF-8), or from a warning (a str with
    lone surrogates where it was not), as UTF-8 text: each byte that is not, U+FFFD."""
    value = _sql(value)
    return value.decode("utf-8", "replace") if type(value) is bytes else value


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "text": _text,
    "texts": lambda v: [_text(w) for w in json.loads(v)] if v else [],
    "flag": bool,
}


def pyarrow() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, or a StackwalkError saying how to install them."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped, import-not-found, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError as e:
        # Not there, or there but broken (a pyarrow older than 16 beside NumPy 2).
        if e.name in ("pyarrow", "pyarrow.parquet"):
            why = "which is not installed"
        else:
            why = f"which failed to import ({e})"
        raise StackwalkError(f"the columnar export needs pyarrow, {why}: {INSTALL}") from None
    return pa, pq


def _schema(pa: Any, table: str) -> Any:
    types = {
        "int": pa.int64(),
        "address": pa.uint64(),
        "time": pa.timestamp("us", tz="UTC"),
        "flag": pa.bool_(),
        "text": pa.string(),
        "texts": pa.list_(pa.string()),
    }
    return pa.schema([pa.field(c.name, types[c.kind], c.nullable) for c in columns(table)])


def _batches(db: sqlite3.Connection, pa: Any, table: str, schema: Any) -> Iterator[Any]:
    """The store's ``table`` as record batches of ``schema``, BATCH_ROWS rows at most each."""
    cols = columns(table)
    cursor = db.execute(
        f"SELECT {', '.join(c.sql for c in cols)} FROM {table} ORDER BY {_TABLES[table][1]}"
    )
    while rows := cursor.fetchmany(BATCH_ROWS):
        arrays = []
        for c, field, values in zip(cols, schema, zip(*rows, strict=True), strict=True):
            convert = _CONVERT.get(c.kind)
            arrays.append(pa.array(values if convert is None else map(convert, values),
                                   type=field.type, size=len(rows)))  # fmt: skip
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


@contextlib.contextmanager
def _snapshot(db: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: the tables as they are at its first read, whatever is written to
    the store meanwhile."""
    db.execute("BEGIN")
    try:
        yield
    finally:
        _rollback(db)


def tables(db: sqlite3.Connection) -> ArrowTables:
    """The store's tables as Arrow tables (see the module's docstring)."""
    pa, _ = pyarrow()
    out = {}
    with _snapshot(db):
        for table in _TABLES:
            schema = _schema(pa, table)
            out[table] = pa.Table.from_batches(list(_batches(db, pa, table, schema)), schema)
    return ArrowTables(**out)


def write_parquet(db: sqlite3.Connection, directory: str) -> dict[str, int]:
    """The store's tables written as ``directory``/TABLE.parquet (the directory made if
    missing, with its parents), each file written whole under another name, the five renamed
    into place once all are written; {table: its rows}."""
    pa, pq = pyarrow()
    _directory(directory)
    paths = {table: os.path.join(directory, f"{table}.parquet") for table in _TABLES}
    for path in paths.values():
        check_output(path, "a Parquet file")  # every one, before the store is read
    rows = dict.fromkeys(_TABLES, 0)
    with contextlib.ExitStack() as files, _snapshot(db):
        for table, path in paths.items():
            temporary = files.enter_context(replacing(path, "a Parquet file"))
            schema = _schema(pa, table)
            with pq.ParquetWriter(temporary, schema) as writer:
                for batch in _batches(db, pa, table, schema):
                    writer.write_batch(batch)
                    rows[table] += batch.num_rows
    return rows


def _directory(directory: str) -> None:
    """``directory`` made if missing, with its parents; a StackwalkError if something else is
    at its name."""
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:
        pass  # not a directory: said below
    except OSError as e:
        raise StackwalkError(f"{directory}: {e.strerror or e}") from None
    try:
        mode = os.stat(directory).st_mode
    except OSError as e:  # a symbolic link to nothing
        raise StackwalkError(f"{directory}: {e.strerror or e}") from None
    if not stat.S_ISDIR(mode):
        what = "a regular file" if stat.S_ISREG(mode) else kind(mode)
        raise StackwalkError(f"{directory}: is {what}, not a directory to write Parquet files in")
