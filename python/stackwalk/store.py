"""The crash store: ``CrashStore``, one SQLite file in WAL mode. Each batch of crashes is written in
one transaction with its buckets' counts, so a run killed at any point leaves whole crashes
only, and a rerun picks up where it stopped: a file already stored (same path, size and
modification time, or the same contents under another name) is not read again.

A store has its own ``PRAGMA application_id`` (APPLICATION_ID; one made before it had, told by
its tables, is given it). A file that is not a store (no SQLite database, another program's,
a store of a newer schema) is refused before anything is written to it, and a store damaged
since (overwritten, cut short) when SQLite meets a page that is not what it must be: one
StackwalkError naming the file and why.

Schema (``PRAGMA user_version`` 2; a store of schema 1 is brought to 2 when opened). A text
that is not UTF-8 (a file's name as ``os.fsdecode`` gives it, its bytes that are not UTF-8
lone surrogates; a module's path from a core) is stored as its bytes, a BLOB, and read back as
the same str:

- ``crashes``: one row per file read, a crash or not: ``path``, ``content_hash`` (BLAKE2b of
  the file), ``size``, ``mtime``, ``executable``, ``pid``, ``uid``, ``boot_id``, ``signal``
  (its name), ``signal_number``, ``crash_time`` (Unix seconds: systemd-coredump's file name,
  else the file's modification time), ``crashing_tid``, ``signature``, ``bucket``,
  ``fingerprint``, ``error`` (why the file is not a crash: not a core or minidump, damaged,
  unreadable; its signature and bucket are then NULL, and it counts as no crash),
  ``warnings`` (a JSON list: modules not found, build ids that differ, ...), ``host`` (the
  machine that read it: a Dask worker's, or this one), ``processed_at``.
- ``frames``: the crashing thread's frames (every thread's with ``--all-threads``), per
  ``crash_id``, ``tid``, ``idx`` (the frame's place in its thread's stack, innermost first):
  ``pc``, ``module``, ``module_offset``, ``function``, ``function_offset``, ``file``, ``line``,
  ``inline``, ``trust``, ``kind`` (``native``; ``python``: a Python frame, after the native
  eval call that runs it, with ``function`` its code's ``co_name``, ``qualname`` its
  ``co_qualname``, ``file`` and ``line``, and no ``pc``, module or ``trust``), ``qualname``.
- ``modules``: per ``crash_id``: ``path``, ``build_id``, ``found``.
- ``buckets``: per ``bucket``: ``signature``, ``count``, ``first_seen``, ``last_seen``,
  ``example_crash`` (the first crash stored in it).
- ``bucket_builds``: per ``bucket``: each (``executable``, ``build_id``) seen in it, with its
  count.

``CrashStore.to_arrow`` gives these tables as pyarrow Tables, ``write_parquet`` as Parquet files
(``stackwalk report --parquet DIR``), typed: see ``stackwalk._arrow``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

from stackwalk.errors import StackwalkError
from stackwalk.render import escape

P = ParamSpec("P")
R = TypeVar("R")

SCHEMA_VERSION = 2
# A crash store's application id (``PRAGMA application_id``, at offset 68 of an SQLite file's
# header): "SWtr". A store made before it was set has 0 there, and is told by its tables.
APPLICATION_ID = 0x53577472

_SCHEMA = """
CREATE TABLE IF NOT EXISTS crashes (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    content_hash TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    mtime REAL NOT NULL,
    executable TEXT,
    pid INTEGER,
    uid INTEGER,
    boot_id TEXT,
    signal TEXT,
    signal_number INTEGER,
    crash_time REAL NOT NULL,
    crashing_tid INTEGER,
    signature TEXT,
    bucket TEXT,
    fingerprint TEXT,
    error TEXT,
    warnings TEXT,
    host TEXT,
    processed_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS crashes_bucket ON crashes (bucket, crash_time);
CREATE INDEX IF NOT EXISTS crashes_time ON crashes (crash_time);
CREATE INDEX IF NOT EXISTS crashes_file ON crashes (path, size, mtime);
CREATE TABLE IF NOT EXISTS frames (
    crash_id INTEGER NOT NULL REFERENCES crashes (id),
    tid INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    pc INTEGER,
    module TEXT,
    module_offset INTEGER,
    function TEXT,
    function_offset INTEGER,
    file TEXT,
    line INTEGER,
    inline INTEGER NOT NULL,
    trust TEXT,
    kind TEXT NOT NULL DEFAULT 'native' CHECK (kind IN ('native', 'python')),
    qualname TEXT,
    PRIMARY KEY (crash_id, tid, idx),
    CHECK (kind = 'python' OR (pc IS NOT NULL AND trust IS NOT NULL))
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS modules (
    crash_id INTEGER NOT NULL REFERENCES crashes (id),
    path TEXT NOT NULL,
    build_id TEXT,
    found INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS modules_crash ON modules (crash_id);
CREATE INDEX IF NOT EXISTS modules_build_id ON modules (build_id);
CREATE TABLE IF NOT EXISTS buckets (
    bucket TEXT PRIMARY KEY,
    signature TEXT NOT NULL,
    count INTEGER NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    example_crash INTEGER NOT NULL REFERENCES crashes (id)
);
CREATE INDEX IF NOT EXISTS buckets_count ON buckets (count DESC);
CREATE TABLE IF NOT EXISTS bucket_builds (
    bucket TEXT NOT NULL REFERENCES buckets (bucket),
    executable TEXT NOT NULL,
    build_id TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (bucket, executable, build_id)
) WITHOUT ROWID;
"""

# Schema 1 -> 2: the frames table made again with Python frames' columns (a kind, a qualname; no
# pc or trust), its rows native frames.
_FRAMES_V1_TO_V2 = (
    "ALTER TABLE frames RENAME TO frames_v1",
    _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS frames") :].split(";", 1)[0],
    "INSERT INTO frames SELECT crash_id, tid, idx, pc, module, module_offset, function,"
    " function_offset, file, line, inline, trust, 'native', NULL FROM frames_v1",
    "DROP TABLE frames_v1",
    "PRAGMA user_version = 2",
)


def _guarded(
    method: Callable[Concatenate[CrashStore, P], R],
) -> Callable[Concatenate[CrashStore, P], R]:
    """A CrashStore method whose SQLite errors (the store damaged since it was opened, the
    disk full, the database locked too long) are the store's StackwalkError."""

    @functools.wraps(method)
    def guarded(self: CrashStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.ProgrammingError:
            raise  # (a mistake of this module's)
        except sqlite3.DatabaseError as e:
            raise self._failure(e) from None

    return guarded


def _sql(value: Any) -> Any:
    """``value`` as SQLite takes it: a str that is not UTF-8 (a file's name as ``os.fsdecode``
    gives it, each byte that was not UTF-8 a lone surrogate) as its bytes, a BLOB."""
    if type(value) is str and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            try:
                return value.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a surrogate no decoding made: kept as CESU-8 bytes
                return value.encode("utf-8", "surrogatepass")
    return value


def _values(row: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(map(_sql, row))


def _text(value: Any) -> Any:
    """A value read back: a BLOB (a name ``_sql`` stored as its bytes) as the str it was."""
    if type(value) is bytes:
        return value.decode("utf-8", "surrogateescape")
    return value


class CrashStore:
    """The triage database at ``path`` (made if missing). A file there that is not a crash
    store (another program's SQLite database, or no SQLite database at all) is never written
    to; it, or a store damaged since, is one StackwalkError naming the file and why, from
    opening and from every method."""

    def __init__(self, path: str | os.PathLike[str], *, checkpoints: bool = True) -> None:
        """``checkpoints``: this connection copies the write-ahead log into the database
        (SQLite's automatic checkpoints, with their fsyncs) as it grows; without, another
        connection does (``checkpoint``)."""
        self.path = os.fspath(path)
        db = None
        try:
            found = self._inspect()
            # Several processes may write at once (triage's workers): a writer waits its turn.
            db = sqlite3.connect(os.fsencode(self.path), isolation_level=None, timeout=600)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            if found is None and not _create(db):
                found = self._inspect()  # made by another process meanwhile
            if found is not None:
                version, application_id = found
                if version == 1 or application_id == 0:
                    _upgrade(db)
            if not checkpoints:
                db.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException as e:
            if db is not None:
                with contextlib.suppress(sqlite3.Error):
                    db.close()
            if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.ProgrammingError):
                raise self._failure(e) from None
            raise
        self._db = db

    def _fail(self, reason: str) -> Exception:
        """The error of this store: its path (escaped, as messages show names) and why."""
        return StackwalkError(f"{escape(self.path)}: {reason}")

    def _failure(self, e: sqlite3.Error) -> Exception:
        """The error of this store for SQLite's ``e``: a file that is not a database, a store
        damaged (a page that is not what it must be: the file cut short, overwritten), or
        what SQLite says (locked, a disk full, unreadable)."""
        name = getattr(e, "sqlite_errorname", "") or ""
        if name.startswith("SQLITE_NOTADB"):
            return self._fail(f"not a crash store: {e}")
        if name.startswith("SQLITE_CORRUPT"):
            return self._fail(f"a damaged crash store: {e}")
        return self._fail(f"the crash store failed: {e}")

    def _inspect(self) -> tuple[int, int] | None:
        """(schema version, application id) of the store at ``path``, read without writing
        to it (nor to its write-ahead log); None where there is nothing yet (no file, an empty
        one, an SQLite database without a table): a store to make. A StackwalkError for a file
        that is not a crash store: no SQLite database, another program's (its application id,
        or tables that are not a store's), or a store of another schema."""
        raw = os.fsencode(self.path)
        try:
            # Not a blocking open(): a FIFO would wait for a writer for ever.
            fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._fail(e.strerror or str(e)) from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise self._fail("is a directory, not a crash store")
            if not stat.S_ISREG(st.st_mode):
                raise self._fail("is not a regular file, not a crash store")
            header = os.pread(fd, 100, 0)
        finally:
            os.close(fd)
        if header:
            if len(header) < 100 or not header.startswith(b"SQLite format 3\0"):
                raise self._fail("not a crash store: not an SQLite database")
            application_id = int.from_bytes(header[68:72], "big")
            if application_id not in (0, APPLICATION_ID):
                raise self._fail(
                    f"not a crash store: another program's SQLite database (application id "
                    f"{application_id:#010x})"
                )
        elif not os.path.exists(raw + b"-wal"):
            return None  # an empty file (what is written yet may be in the log alone)
        # SQLite's own reading, of the write-ahead log too, without writing: a connection
        # that may write checkpoints the log into the file as it closes. A database in WAL
        # mode without its log is all in the file, and read as it is (``immutable``): a
        # connection would make the log (and its index) next to it.
        uri = f"file:{urllib.parse.quote(raw)}?mode=ro"
        if header[18:20] == b"\2\2" and not os.path.exists(raw + b"-wal"):
            uri += "&immutable=1"
        ro = sqlite3.connect(uri, uri=True, isolation_level=None)
        try:
            application_id = ro.execute("PRAGMA application_id").fetchone()[0]
            version = ro.execute("PRAGMA user_version").fetchone()[0]
            tables = {
                _text(name): tuple(_text(c) for (c,) in ro.execute(
                    "SELECT name FROM pragma_table_info(?) ORDER BY cid", (name,)
                ))
                for (name,) in ro.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
                ).fetchall()
            }  # fmt: skip
        finally:
            ro.close()
        return self._judge(application_id, version, tables)

    def _judge(
        self, application_id: int, version: int, tables: dict[str, tuple[str, ...]]
    ) -> tuple[int, int] | None:
        """``_inspect``'s verdict on what the file holds: its application id, its schema
        version (``PRAGMA user_version``), and its tables with their columns."""
        if application_id not in (0, APPLICATION_ID):
            raise self._fail(
                f"not a crash store: another program's SQLite database (application id "
                f"{application_id:#010x})"
            )
        if not tables and application_id == 0 and version == 0:
            return None  # an empty database: made a store
        ours = _store_tables(SCHEMA_VERSION)
        assert ours is not None
        if application_id == 0:
            # A store made before its application id was set: told by its tables alone.
            other = sorted(set(tables) - set(ours))
            if other:
                raise self._fail(
                    "not a crash store: an SQLite database with tables a crash store has not ("
                    + escape(", ".join(other[:5]) + (", ..." if len(other) > 5 else ""))
                    + ")"
                )
        expected = _store_tables(version)
        if expected is None:
            if application_id == APPLICATION_ID or set(tables) >= set(ours):
                raise self._fail(
                    f"a crash store of schema {version}, this stackwalk's is {SCHEMA_VERSION}"
                )
            raise self._fail(f"not a crash store: an SQLite database of user_version {version}")
        for table, columns in expected.items():
            if table not in tables:
                raise self._fail(f"not a crash store: it has no {table} table")
            if tables[table] != columns:
                raise self._fail(
                    f"not a crash store: its {table} table is not a crash store's (columns "
                    + escape(", ".join(tables[table]))
                    + ")"
                )
        return version or SCHEMA_VERSION, application_id

    @_guarded
    def close(self) -> None:
        self._db.close()

    @_guarded
    def checkpoint(self) -> None:
        """Copy what the write-ahead log holds into the database, as far as no reader keeps
        it from it, waiting for no writer (a passive checkpoint)."""
        self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def __enter__(self) -> CrashStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- what is there already ------------------------------------------------------------

    @_guarded
    def stored_files(self) -> set[tuple[str, int, float]]:
        """(path, size, mtime) of every file stored."""
        rows = self._db.execute("SELECT path, size, mtime FROM crashes")
        return {(_text(path), size, mtime) for path, size, mtime in rows}

    @_guarded
    def content_hashes(self) -> set[str]:
        return {_text(h) for (h,) in self._db.execute("SELECT content_hash FROM crashes")}

    # -- writing ---------------------------------------------------------------------------

    @_guarded
    def add(self, records: Iterable[dict[str, Any]]) -> int:
        """Store crashes (``process_file``'s records) in one transaction, with their buckets;
        a record whose contents are stored already is left out. Each record gets ``stored``
        (whether it was). How many were stored. (A frame's row without its ``kind`` and
        ``qualname``, as records were made before Python frames were stored, is a native
        frame's.) A name that is not UTF-8 (a file's, as ``os.fsdecode`` gives it, with lone
        surrogates for its bytes that were not) is stored as its bytes, a BLOB, and read back
        as the same str. Nothing is stored if anything fails."""
        db = self._db
        stored = 0
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            for r in records:
                cur = db.execute(
                    "INSERT OR IGNORE INTO crashes (path, content_hash, size, mtime, executable,"
                    " pid, uid, boot_id, signal, signal_number, crash_time, crashing_tid,"
                    " signature, bucket, fingerprint, error, warnings, host, processed_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    _values((
                        r["path"], r["content_hash"], r["size"], r["mtime"], r.get("executable"),
                        r.get("pid"), r.get("uid"), r.get("boot_id"), r.get("signal"),
                        r.get("signal_number"), r["crash_time"], r.get("crashing_tid"),
                        r.get("signature"), r.get("bucket"), r.get("fingerprint"),
                        r.get("error"), _warnings(r), r.get("host"), now,
                    )),
                )  # fmt: skip
                r["stored"] = cur.rowcount == 1
                if cur.rowcount == 0:
                    continue  # the same contents under another name, stored already
                crash_id = cur.lastrowid
                stored += 1
                db.executemany(
                    "INSERT INTO frames VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        (crash_id, *_values(f), *_NATIVE[len(f) - _V1_ROW :])
                        for f in r.get("frames", ())
                    ),
                )
                db.executemany(
                    "INSERT INTO modules VALUES (?, ?, ?, ?)",
                    ((crash_id, *_values(m)) for m in r.get("modules", ())),
                )
                if r.get("bucket") is None:
                    continue
                bucket, signature = _sql(r["bucket"]), _sql(r["signature"])
                db.execute(
                    "INSERT INTO buckets VALUES (?, ?, 1, ?, ?, ?) ON CONFLICT (bucket) DO UPDATE"
                    " SET count = count + 1, first_seen = min(first_seen, excluded.first_seen),"
                    " last_seen = max(last_seen, excluded.last_seen)",
                    (bucket, signature, r["crash_time"], r["crash_time"], crash_id),
                )
                db.execute(
                    "INSERT INTO bucket_builds VALUES (?, ?, ?, 1) ON CONFLICT DO UPDATE"
                    " SET count = count + 1",
                    (bucket, _sql(r.get("executable") or ""), _sql(r.get("build_id") or "")),
                )
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise
        return stored

    # -- queries ---------------------------------------------------------------------------

    @_guarded
    def buckets(self, top: int | None = None, since: float | None = None) -> list[dict[str, Any]]:
        """Buckets by count, most first: ``bucket``, ``signature``, ``count``, ``first_seen``,
        ``last_seen``, ``builds`` [(executable, build id, count)], ``example_crash``. With
        ``since`` (Unix seconds), counts and sightings are of the crashes since then only."""
        if since is None:
            rows = self._db.execute(
                "SELECT bucket, signature, count, first_seen, last_seen, example_crash"
                " FROM buckets ORDER BY count DESC, bucket LIMIT ?",
                (top if top is not None else -1,),
            ).fetchall()
        else:
            rows = self._db.execute(
                "SELECT bucket, signature, count(*) AS n, min(crash_time), max(crash_time),"
                " min(id) FROM crashes WHERE bucket IS NOT NULL AND crash_time >= ?"
                " GROUP BY bucket ORDER BY n DESC, bucket LIMIT ?",
                (since, top if top is not None else -1),
            ).fetchall()
        out = []
        for bucket, signature, count, first, last, example in rows:
            builds = self._db.execute(
                "SELECT executable, build_id, count FROM bucket_builds WHERE bucket = ?"
                " ORDER BY count DESC, executable, build_id",
                (bucket,),
            ).fetchall()
            out.append(
                {
                    "bucket": _text(bucket),
                    "signature": _text(signature),
                    "count": count,
                    "first_seen": first,
                    "last_seen": last,
                    "builds": [[_text(exe), _text(build_id), n] for exe, build_id, n in builds],
                    "example_crash": example,
                }
            )
        return out

    @_guarded
    def per_day(
        self, buckets: Sequence[str], since: float | None = None
    ) -> dict[str, dict[str, int]]:
        """{day (UTC, 2026-11-24): {bucket: crashes that day}} of these buckets."""
        out: dict[str, dict[str, int]] = {}
        marks = ", ".join("?" * len(buckets))
        rows = self._db.execute(
            "SELECT date(crash_time, 'unixepoch'), bucket, count(*) FROM crashes"
            f" WHERE bucket IN ({marks}) AND crash_time >= ? GROUP BY 1, 2",
            (*map(_sql, buckets), since if since is not None else float("-inf")),
        )
        for day, bucket, count in rows:
            out.setdefault(day, {})[_text(bucket)] = count
        return out

    @_guarded
    def crash(self, crash_id: int) -> dict[str, Any] | None:
        """One crash's row, with its crashing thread's frames (each with its ``kind``: a
        Python process's Python frames among the native ones), then the other threads'."""
        self._db.row_factory = sqlite3.Row
        try:
            row = self._db.execute("SELECT * FROM crashes WHERE id = ?", (crash_id,)).fetchone()
            if row is None:
                return None
            crash = {k: _text(v) for k, v in zip(row.keys(), row, strict=True)}
            frames = self._db.execute(
                "SELECT tid, idx, pc, module, module_offset, function, function_offset, file,"
                " line, inline, trust, kind, qualname FROM frames WHERE crash_id = ?"
                " ORDER BY tid = ? DESC, tid, idx",
                (crash_id, crash["crashing_tid"]),
            ).fetchall()
            crash["frames"] = [
                {k: _text(v) for k, v in zip(f.keys(), f, strict=True)} for f in frames
            ]
            return crash
        finally:
            self._db.row_factory = None

    @_guarded
    def crash_buckets(self) -> dict[str, str | None]:
        """Every crash's bucket, by path."""
        rows = self._db.execute("SELECT path, bucket FROM crashes")
        return {_text(path): _text(bucket) for path, bucket in rows}

    @_guarded
    def errors(self, since: float | None = None) -> list[tuple[str, str]]:
        """(path, why) of every file stored that is not a crash (``why`` without the path the
        messages of the readers start with), in path order; with ``since`` (Unix seconds),
        of the files whose time (``crash_time``: their modification time) is since then."""
        rows = self._db.execute(
            "SELECT path, error FROM crashes WHERE error IS NOT NULL AND crash_time >= ?"
            " ORDER BY path",
            (since if since is not None else float("-inf"),),
        ).fetchall()
        return [
            (_text(path), not_a_crash_reason(_text(path), _text(error))) for path, error in rows
        ]

    @_guarded
    def missing_modules(self) -> int:
        """How many crashes were read without some of their modules' files."""
        (n,) = self._db.execute(
            "SELECT count(*) FROM crashes WHERE warnings LIKE '%module not found%'"
        ).fetchone()
        return int(n)

    # -- columnar export (pyarrow: the ``arrow`` extra) -------------------------------------

    @_guarded
    def to_arrow(self) -> ArrowTables:
        """Every table of the store as a pyarrow Table, read in one read transaction:
        ``crashes``, ``frames``, ``modules``, ``buckets``, ``bucket_builds``, with the store's
        columns, typed (times as timestamps, addresses as uint64, flags as bool, ``warnings`` a
        list of strings): see ``stackwalk._arrow``. A StackwalkError without pyarrow."""
        from stackwalk import _arrow

        return _arrow.tables(self._db)

    @_guarded
    def write_parquet(self, directory: str | os.PathLike[str]) -> dict[str, int]:
        """``to_arrow``'s tables written as Parquet files, ``directory``/TABLE.parquet (the
        directory made if missing; each file replaced whole), a batch of rows at a time;
        {table: rows written}. A StackwalkError without pyarrow, before anything is written."""
        from stackwalk import _arrow

        return _arrow.write_parquet(self._db, os.fspath(directory))

    @_guarded
    def counts(self, since: float | None = None) -> Counts:
        """The store's totals: its crashes, their buckets, and the files stored that are not
        crashes (``errors``); with ``since`` (Unix seconds), of the files whose time is since
        then (``buckets``' counts add up to the crashes)."""
        after = since if since is not None else float("-inf")
        files, not_crashes = self._db.execute(
            "SELECT count(*), count(error) FROM crashes WHERE crash_time >= ?", (after,)
        ).fetchone()
        if since is None:
            (buckets,) = self._db.execute("SELECT count(*) FROM buckets").fetchone()
        else:
            (buckets,) = self._db.execute(
                "SELECT count(DISTINCT bucket) FROM crashes WHERE crash_time >= ?", (after,)
            ).fetchone()
        return Counts(files - not_crashes, buckets, not_crashes)


def _create(db: sqlite3.Connection) -> bool:
    """A store's tables made in the empty database, with its application id and schema
    version, in one transaction (a run killed meanwhile leaves the file empty). False if
    another process made something there first."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (objects,) = db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if objects == 0:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise
    return bool(objects == 0)


def _upgrade(db: sqlite3.Connection) -> None:
    """A store of schema 1 brought to 2 (its frames native frames), and a store made before
    stores had their application id given it, in one transaction; by another process already,
    if it got there first."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] == 1:
            for statement in _FRAMES_V1_TO_V2:
                db.execute(statement)
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise


def _rollback(db: sqlite3.Connection) -> None:
    """The transaction under way given up, if SQLite has not ended it itself (as it does on
    some errors: a full disk, a damaged page), and without hiding the error that got here."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


_TABLES: dict[int, dict[str, tuple[str, ...]]] = {}


def _store_tables(version: int) -> dict[str, tuple[str, ...]] | None:
    """{table: its columns} of a store of schema ``version`` (0: one made before its version
    was set, as 2), None for a schema this stackwalk does not know."""
    if not _TABLES:
        db = sqlite3.connect(":memory:")
        try:
            db.executescript(_SCHEMA)
            tables = {
                name: tuple(c for (c,) in db.execute(
                    "SELECT name FROM pragma_table_info(?) ORDER BY cid", (name,)
                ))
                for (name,) in db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).fetchall()
            }  # fmt: skip
        finally:
            db.close()
        _TABLES[0] = _TABLES[2] = tables
        frames = tuple(c for c in tables["frames"] if c not in ("kind", "qualname"))
        _TABLES[1] = {**tables, "frames": frames}
    return _TABLES.get(version)


class ArrowTables(NamedTuple):
    """The crash store as pyarrow Tables (``CrashStore.to_arrow``), one per table of the
    store, joined by ``crashes.id`` = ``frames.crash_id`` = ``modules.crash_id`` and by
    ``bucket``."""

    crashes: Any  # pyarrow.Table: one row per file read, a crash or not
    frames: Any  # each crash's stored frames, by crash_id, tid, idx
    modules: Any  # each crash's modules: path, build_id, found
    buckets: Any  # one row per signature's bucket: count, first_seen, last_seen
    bucket_builds: Any  # each (executable, build_id) of a bucket, with its count


class Counts(NamedTuple):
    """A crash store's totals (``CrashStore.counts``)."""

    crashes: int  # files read as crashes, each in a bucket
    buckets: int
    not_crashes: int  # files stored that are not crashes (``CrashStore.errors``)


def not_a_crash_reason(path: str, error: str) -> str:
    """Why the file at ``path`` is not a crash, from its ``error``, without the path that the
    readers' messages start with (a name that is not UTF-8 as the native core writes it: each
    byte that is not, U+FFFD)."""
    for name in (path, os.fsencode(path).decode("utf-8", "replace")):
        if error.startswith(f"{name}: "):
            return error[len(name) + 2 :]
    return error


def _warnings(record: dict[str, Any]) -> str | None:
    warnings = record.get("warnings")
    return json.dumps(warnings) if warnings else None


# A frame's row is the frames table's columns but crash_id; one of schema 1 (11 values) lacks
# the last two, a native frame's these.
_V1_ROW = 11
_NATIVE = ("native", None)
