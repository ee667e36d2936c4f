"""Hostile spools and stores around ``stackwalk triage`` and ``report`` (issue #44): file names
that are not UTF-8, a spool thousands of directories deep, a database that is not a crash store
or is damaged, a lock file another local user could point elsewhere, and a capture that names
one library a thousand times for the pure-Python baseline. The rule, as in test_hostile_edges.py:
one line of error or a right result, exit 0, 1 or 2, never a traceback; a file that is not ours
is never written to, and nothing of a good store is lost.

The cores are real (tests/corefiles.py: a program crashed under gdb at test time), and so is the
capture (realstacks.Captures).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from corefiles import Cores
from realstacks import Builder, Captures
from stackwalk.capture import Capture
from stackwalk.errors import StackwalkError
from stackwalk.store import APPLICATION_ID, CrashStore
from stackwalk.triage import StoreHere, _turn_of

# Nothing here takes more than some seconds; the bound only turns a hang into a failure.
HANG = 300


def stackwalk(*args: str | os.PathLike[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stackwalk", *map(os.fspath, args)],
        capture_output=True, text=True, timeout=HANG, **kwargs,  # type: ignore[call-overload]
    )  # fmt: skip


def assert_no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode in (0, 1, 2), (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Error:" not in proc.stderr, proc.stderr


def one_error(proc: subprocess.CompletedProcess[str], db: Path) -> str:
    """The one line of error of a run refused: exit 2, nothing on stdout; why, after the
    store's path."""
    assert_no_traceback(proc)
    assert (proc.returncode, proc.stdout) == (2, ""), (proc.returncode, proc.stdout, proc.stderr)
    (line,) = proc.stderr.splitlines()
    prefix = f"stackwalk: error: {db}: "
    assert line.startswith(prefix), line
    return line[len(prefix) :]


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# -- names that are not UTF-8 ------------------------------------------------------------------

NOT_UTF8 = b"core.\xff\xfe"  # a real core under a name that no UTF-8 decoding gives
JUNK = b"junk-\xfd\nnot a crash: forged line"  # not a crash, with a newline in its name too


def test_a_spool_file_name_that_is_not_utf8(cores: Cores, tmp_path: Path) -> None:
    """A core whose file name is not UTF-8 is read and stored; the name is kept as its bytes
    (the store gives back the same str ``os.fsdecode`` gives, whose ``os.fsencode`` opens the
    file again), a rerun knows the file, and the lines for people show the name escaped, one
    line each. With one process and with workers."""
    made = cores("deep")
    for jobs in ("1", "2"):
        spool = tmp_path / f"spool-{jobs}"
        spool.mkdir()
        core = os.path.join(os.fsencode(spool), NOT_UTF8)
        shutil.copyfile(made.path, core)
        junk = os.path.join(os.fsencode(spool), JUNK)
        Path(os.fsdecode(junk)).write_bytes(b"not a core\n")
        db = tmp_path / f"crashes-{jobs}.sqlite"
        proc = stackwalk("triage", spool, "--db", db, "--jobs", jobs)
        assert_no_traceback(proc)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].startswith("1 crashes stored, 0 already there, 1 files that are not"), lines
        assert lines[1:] == [f"not a crash: {spool}/junk-\\xfd\\nnot a crash: forged line: "
                             "not an ELF file"], lines  # fmt: skip
        with CrashStore(db) as store:
            buckets = store.crash_buckets()
            assert {os.fsencode(p) for p in buckets} == {core, junk}
            assert buckets[os.fsdecode(core)] is not None
            assert [os.fsencode(p) for p, _ in store.errors()] == [junk]
        with sqlite3.connect(db) as conn:
            stored = conn.execute("SELECT path FROM crashes WHERE error IS NULL").fetchall()
        conn.close()
        assert stored == [(core,)]  # the name's own bytes
        again = stackwalk("triage", spool, "--db", db, "--jobs", jobs, "--json")
        assert again.returncode == 0, again.stderr
        assert again.stdout == "" and again.stderr.startswith("0 crashes stored, 2 already there")

    report = stackwalk("report", "--db", db)
    assert_no_traceback(report)
    assert report.returncode == 0, report.stderr
    assert f"e.g. {spool}/core.\\xff\\xfe:" in report.stdout
    doc = json.loads(stackwalk("report", "--db", db, "--json").stdout)
    (bucket,) = doc["buckets"]
    assert os.fsencode(bucket["example"]["path"]) == core  # exact, as JSON keeps it


def test_triage_json_lines_keep_a_name_that_is_not_utf8(cores: Cores, tmp_path: Path) -> None:
    """``triage --json``: each file's line names it exactly (JSON's escapes of the lone
    surrogates ``os.fsdecode`` gives), so that the bytes come back."""
    spool = tmp_path / "spool"
    spool.mkdir()
    core = os.path.join(os.fsencode(spool), NOT_UTF8)
    shutil.copyfile(cores("deep").path, core)
    proc = stackwalk("triage", spool, "--db", tmp_path / "crashes.sqlite", "--json")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    record = json.loads(line)
    assert os.fsencode(record["path"]) == core and record["error"] is None


# -- deep spools --------------------------------------------------------------------------------

DEPTH = 1100


def test_a_spool_1100_directories_deep(cores: Cores, tmp_path: Path) -> None:
    """A core at the bottom of 1,100 directories, one at the top: both stored (the walk keeps
    its own stack, not Python's); links to directories on the way (one to the spool's top,
    one to the directory it is in) are not followed, and the walk ends."""
    made = cores("deep")
    spool = tmp_path / "spool"
    with deep_directory(spool, DEPTH) as bottom:
        _triage_deep_spool(made.path, spool, bottom, tmp_path / "crashes.sqlite")


@contextlib.contextmanager
def deep_directory(top: Path, depth: int) -> Iterator[Path]:
    """``top/d/d/.../d``, ``depth`` directories below ``top``: made, given, and removed after
    with what is in them, from the bottom up. (os.makedirs, Path.mkdir(parents=True) and
    shutil.rmtree, which pytest's cleanup of its temporary directories uses, recurse, a call
    a level.)"""
    levels = [top]
    for _ in range(depth):
        levels.append(levels[-1] / "d")
    try:
        for level in levels:
            level.mkdir()
        yield levels[-1]
    finally:
        for level in reversed(levels):
            if level.is_dir():
                for entry in level.iterdir():
                    if entry.is_dir() and not entry.is_symlink():
                        continue  # (the level below: removed already, if it could be)
                    entry.unlink()
                with contextlib.suppress(OSError):
                    level.rmdir()


def _triage_deep_spool(core: Path, spool: Path, bottom: Path, db: Path) -> None:
    shutil.copyfile(core, spool / "core.top")
    # Another crash (other contents: one byte more at the end, which no reader looks at).
    (bottom / "core.bottom").write_bytes(core.read_bytes() + b"\0")
    (bottom / "to-top").symlink_to(spool, target_is_directory=True)
    (bottom / "to-here").symlink_to(".", target_is_directory=True)
    proc = stackwalk("triage", spool, "--db", db)
    assert_no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("2 crashes stored, 0 already there;"), proc.stdout
    with CrashStore(db) as store:
        assert set(store.crash_buckets()) == {str(spool / "core.top"), str(bottom / "core.bottom")}
    report = stackwalk("report", "--db", db)
    assert report.returncode == 0, report.stderr


# -- stores that are not ours ------------------------------------------------------------------


def _foreign(path: Path) -> None:
    """Another program's database: a table of its own, with a row."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE people (name TEXT, email TEXT)")
        db.execute("INSERT INTO people VALUES ('ada', 'ada@example.org')")
    db.close()


def _foreign_crashes(path: Path) -> None:
    """Another program's table of crashes, by the name a store's has."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE crashes (id INTEGER PRIMARY KEY, reporter TEXT, text TEXT)")
        db.execute("INSERT INTO crashes VALUES (1, 'ada', 'it crashed')")
    db.close()


def _application_id(path: Path) -> None:
    """Another program's database, by its application id, without a table yet."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id = 1234")
        db.execute("PRAGMA user_version = 7")
    db.close()


def _store_and_foreign(path: Path) -> None:
    """A store's tables among another program's, without the store's application id."""
    CrashStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA application_id = 0")
        db.execute("CREATE TABLE invoices (number INTEGER, total REAL)")
    db.close()


def _newer_schema(path: Path) -> None:
    """A crash store of a schema to come."""
    CrashStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA user_version = 3")
    db.close()


NOT_OURS = {
    "foreign-table": (_foreign, "not a crash store: an SQLite database with tables a crash "
                                "store has not (people)"),
    "foreign-crashes-table": (_foreign_crashes, "not a crash store: its crashes table is not a "
                                                "crash store's (columns id, reporter, text)"),
    "application-id": (_application_id, "not a crash store: another program's SQLite database "
                                        "(application id 0x000004d2)"),
    "store-and-foreign": (_store_and_foreign, "not a crash store: an SQLite database with "
                                              "tables a crash store has not (invoices)"),
    "newer-schema": (_newer_schema, "a crash store of schema 3, this stackwalk's is 2"),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(NOT_OURS))
def test_a_database_that_is_not_a_crash_store(cores: Cores, tmp_path: Path, kind: str) -> None:
    """``triage`` and ``report`` with another program's database (or a store of a schema to
    come): one line saying so, exit 2, and the file (and its directory) just as it was: no
    table added, no write-ahead log switched on."""
    made, why = NOT_OURS[kind]
    home = tmp_path / "home"
    home.mkdir()
    db = home / "their.sqlite"
    made(db)
    before = files_of(home)
    spool = tmp_path / "spool"
    spool.mkdir()
    shutil.copyfile(cores("deep").path, spool / "core")
    for argv in (("triage", spool), ("report",), ("report", "--json")):
        assert one_error(stackwalk(*argv, "--db", db), db) == why
        assert files_of(home) == before
    with pytest.raises(StackwalkError, match="not a crash store|schema 3"):
        CrashStore(db)
    assert files_of(home) == before


def test_a_store_made_before_application_ids_is_ours(tmp_path: Path) -> None:
    """A store whose application id is 0 (made before stores had one) with the tables of a
    store and no other is opened as a store, and given the application id."""
    db = tmp_path / "old.sqlite"
    CrashStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA application_id = 0")
    conn.close()
    with CrashStore(db) as store:
        assert store.counts().crashes == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    conn.close()


# -- damaged stores ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_store(cores: Cores, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a store that holds two crashes and a file that is not one (its
    write-ahead log copied into it as the last connection closed)."""
    made = cores("deep")
    work = tmp_path_factory.mktemp("good-store")
    spool = work / "spool"
    spool.mkdir()
    shutil.copyfile(made.path, spool / "core.a")
    (spool / "core.b").write_bytes(made.path.read_bytes() + b"\0")
    (spool / "junk").write_bytes(b"junk\n")
    db = work / "crashes.sqlite"
    proc = stackwalk("triage", spool, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert not Path(f"{db}-wal").exists()
    return db.read_bytes()


def _random_bytes(good: bytes) -> bytes:
    return os.urandom(len(good))


def _random_after_first_page(good: bytes) -> bytes:
    return good[:4096] + os.urandom(len(good) - 4096)


def _truncated_to_one_page(good: bytes) -> bytes:
    return good[:4096]


def _truncated_by_half(good: bytes) -> bytes:
    return good[: len(good) // 2]


def _pages_overwritten(good: bytes) -> bytes:
    data = bytearray(good)
    for page in range(4096, len(data), 4096):
        data[page + 8 : page + 40] = b"\xde\xad\xbe\xef" * 8
    return bytes(data)


DAMAGE = {f.__name__.lstrip("_"): f for f in (_random_bytes, _random_after_first_page,
          _truncated_to_one_page, _truncated_by_half, _pages_overwritten)}  # fmt: skip


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_store(good_store: bytes, cores: Cores, tmp_path: Path, damage: str) -> None:
    """A store damaged (bytes overwritten, the file cut short): ``triage`` and ``report``
    each give one line naming the store and what is wrong with it, or, where what they read
    of it is whole, their result; never a traceback, and the file is not written to."""
    home = tmp_path / "home"
    home.mkdir()
    db = home / "crashes.sqlite"
    db.write_bytes(DAMAGE[damage](good_store))
    before = files_of(home)
    spool = tmp_path / "spool"
    spool.mkdir()
    shutil.copyfile(cores("deep").path, spool / "core.a")
    refused = 0
    for argv in (("triage", spool), ("report",), ("report", "--json")):
        proc = stackwalk(*argv, "--db", db)
        assert_no_traceback(proc)
        if proc.returncode != 0:
            why = one_error(proc, db)
            assert why.startswith(("a damaged crash store: ", "not a crash store: ")), why
            refused += 1
        else:  # what it read was whole: nothing new in the spool, nothing written
            assert argv[0] == "report" or "0 crashes stored, 1 already there" in proc.stdout
        assert files_of(home) == before
    assert refused >= 1  # (every damage here is seen by one command at least)


def test_an_error_mid_batch_loses_nothing_stored(good_store: bytes, tmp_path: Path) -> None:
    """A batch of records that fails at its second (a frame the frames table refuses) is
    one StackwalkError, stores nothing of the batch, and leaves what was stored before; the
    store goes on taking batches."""
    db = tmp_path / "crashes.sqlite"
    db.write_bytes(good_store)
    with CrashStore(db) as store:
        before = (store.crash_buckets(), store.buckets(), store.counts())
        good = {"path": "/spool/new", "content_hash": "new", "size": 1, "mtime": 0.0,
                "crash_time": 0.0, "crashing_tid": 7, "signature": "f", "bucket": "b",
                "frames": []}  # fmt: skip
        frame = (7, 0, None, None, None, "f", None, None, None, 0, None, "native", None)
        bad = {**good, "path": "/spool/bad", "content_hash": "bad", "frames": [frame]}
        with pytest.raises(StackwalkError, match=r"crashes\.sqlite: .*CHECK constraint"):
            store.add([dict(good), bad])
        assert (store.crash_buckets(), store.buckets(), store.counts()) == before
        assert store.add([dict(good)]) == 1
        assert store.crash_buckets()["/spool/new"] == "b"


def test_a_store_error_in_a_worker_is_one_error(
    cores: Cores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--jobs``' workers write the store themselves: one whose writing fails (the store
    damaged under it, the disk full) ends the run with the store's StackwalkError, as the
    parent's own writing would (not a worker's traceback); what was stored stays."""
    from stackwalk.triage import Options, triage

    made = cores("deep")
    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(4):  # four crashes (each one byte longer: other contents)
        (spool / f"core.{i}").write_bytes(made.path.read_bytes() + b"\0" * i)
    db = tmp_path / "crashes.sqlite"
    parent, add = os.getpid(), CrashStore.add

    def add_failing_in_workers(self: CrashStore, records: list[dict[str, object]]) -> int:
        if os.getpid() != parent:
            raise StackwalkError(f"{self.path}: a damaged crash store: (as if)")
        return add(self, records)

    monkeypatch.setattr(CrashStore, "add", add_failing_in_workers)
    with CrashStore(db) as store:
        with pytest.raises(StackwalkError, match=r"crashes\.sqlite: a damaged crash store"):
            triage([str(spool)], store, Options(), jobs=2)
    with CrashStore(db) as store:
        # (the first file is read and stored before the fork, where that is safe)
        assert set(store.crash_buckets()) <= {str(spool / "core.0")}


# -- the Dask workers' lock ------------------------------------------------------------------


def old_lock_path(store: StoreHere) -> str:
    """Where the lock of the Dask workers writing ``store`` was: a name anyone can predict,
    in the temporary directory everyone can write to."""
    name = f"stackwalk-store-{store.device:x}-{store.inode:x}.lock"
    return os.path.join(tempfile.gettempdir(), name)


@pytest.fixture
def private_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache directory the locks go under (no $XDG_RUNTIME_DIR): its ``locks``."""
    cache = tmp_path / "cache"
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("STACKWALK_CACHE_DIR", str(cache))
    return cache / "locks"


def lock_path(turn: object) -> str:
    return os.readlink(f"/proc/self/fd/{turn._file.fileno()}")  # type: ignore[attr-defined]


def test_the_turn_lock_is_in_a_private_directory(tmp_path: Path, private_env: Path) -> None:
    """The Dask workers' lock: in a directory of this user's, mode 0700, made for it; a link
    another user put at the old name in /tmp (to a file of this user's, or to one that does
    not exist yet) is never followed: the files it names are not made, nor written."""
    db = tmp_path / "crashes.sqlite"
    CrashStore(db).close()
    store = StoreHere.of(str(db))
    old = old_lock_path(store)
    victim, kept = tmp_path / "victim", tmp_path / "kept"
    kept.write_bytes(b"precious\n")
    for target in (victim, kept):
        with _planted(old, target):
            turn = _turn_of(store)
            assert turn is not None
            with turn:
                pass
            assert os.path.dirname(lock_path(turn)) == str(private_env)
            turn.close()
    assert not victim.exists()
    assert kept.read_bytes() == b"precious\n"
    st = os.lstat(private_env)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.geteuid()


class _planted:
    """A symbolic link at ``path`` to ``target`` while inside (removed after)."""

    def __init__(self, path: str, target: Path) -> None:
        self.path, self.target = path, target

    def __enter__(self) -> None:
        if os.path.lexists(self.path):
            os.unlink(self.path)
        os.symlink(self.target, self.path)

    def __exit__(self, *_: object) -> None:
        os.unlink(self.path)


def test_a_lock_place_not_ours_alone_is_not_used(tmp_path: Path, private_env: Path) -> None:
    """No lock (SQLite's own wait instead) where the lock's directory is open to others, is
    a link, or is another user's, or the lock's name in it is a link or a FIFO; no link is
    followed, no open waits."""
    db = tmp_path / "crashes.sqlite"
    CrashStore(db).close()
    store = StoreHere.of(str(db))
    name = f"stackwalk-store-{store.device:x}-{store.inode:x}.lock"
    victim = tmp_path / "victim"
    private_env.parent.mkdir()

    def refused() -> None:
        assert _turn_of(store) is None
        assert not victim.exists()

    private_env.mkdir(mode=0o700)
    os.chmod(private_env, 0o777)
    refused()
    os.rmdir(private_env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    private_env.symlink_to(elsewhere, target_is_directory=True)
    refused()
    assert list(elsewhere.iterdir()) == []
    private_env.unlink()
    private_env.mkdir(mode=0o700)
    (private_env / name).symlink_to(victim)
    refused()
    (private_env / name).unlink()
    os.mkfifo(private_env / name)
    refused()
    (private_env / name).unlink()
    turn = _turn_of(store)  # the directory as it should be: the lock
    assert turn is not None and lock_path(turn) == str(private_env / name)
    turn.close()
    if os.geteuid() == 0:  # another user's directory, and lock file (root can make them)
        os.chown(private_env / name, 65534, 65534)
        refused()
        os.unlink(private_env / name)
        os.chown(private_env, 65534, 65534)
        refused()


def test_the_turn_lock_under_xdg_runtime_dir(
    tmp_path: Path, private_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With $XDG_RUNTIME_DIR (the user's own, 0700), the lock is in its ``stackwalk``."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    db = tmp_path / "crashes.sqlite"
    CrashStore(db).close()
    turn = _turn_of(StoreHere.of(str(db)))
    assert turn is not None
    assert os.path.dirname(lock_path(turn)) == str(runtime / "stackwalk")
    turn.close()
    assert not private_env.exists()


def test_dask_triage_follows_no_link_at_the_old_lock_path(cores: Cores, tmp_path: Path) -> None:
    """``triage --dask local`` (its workers on this machine write the store, taking turns by
    the lock) with a link at the old lock's name: the crash stored, the lock in the private
    directory under the cache, the file the link names not made."""
    pytest.importorskip("distributed")
    spool = tmp_path / "spool"
    spool.mkdir()
    shutil.copyfile(cores("deep").path, spool / "core.a")
    (spool / "junk").write_bytes(b"junk\n")
    db = tmp_path / "crashes.sqlite"
    CrashStore(db).close()
    store = StoreHere.of(str(db))
    victim = tmp_path / "victim"
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["STACKWALK_CACHE_DIR"] = str(cache)
    # The installed command, as users type it (the cluster's workers are spawned processes).
    script = Path(sys.executable).with_name("stackwalk")
    with _planted(old_lock_path(store), victim):
        proc = subprocess.run(
            [script, "triage", spool, "--db", db, "--dask", "local"],
            capture_output=True, text=True, timeout=HANG, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("1 crashes stored, 0 already there, 1 files"), proc.stdout
    assert not victim.exists()
    name = f"stackwalk-store-{store.device:x}-{store.inode:x}.lock"
    assert (cache / "locks" / name).is_file()  # the workers' turn was taken there


# -- the baseline and a library named a thousand times ------------------------------------------

COPIES = 1000


@pytest.fixture(scope="module")
def qsort(build: Builder, captures: Captures) -> Capture:
    """Stopped in the program's comparison function, called from libc's qsort."""
    return captures([build("qsort.c", "-O2")], "compare_ints")


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times the baseline parsed each file's ELF headers, and each CFI section, by
    the file's real path (``[image]``: an image in memory, the vdso)."""
    from stackwalk import _baseline_cfi, baseline

    counts: dict[str, int] = {}
    real_elf, real_parse = baseline.ELFFile, _baseline_cfi.CfiSection._parse

    def elf_file(stream):  # type: ignore[no-untyped-def]
        try:
            name = os.readlink(f"/proc/self/fd/{stream.fileno()}")
        except (OSError, ValueError, AttributeError):
            name = "[image]"
        counts[name] = counts.get(name, 0) + 1
        return real_elf(stream)

    def parse(self):  # type: ignore[no-untyped-def]
        key = f"{os.path.realpath(self.origin)} {self.name}"
        counts[key] = counts.get(key, 0) + 1
        return real_parse(self)

    monkeypatch.setattr(baseline, "ELFFile", elf_file)
    monkeypatch.setattr(_baseline_cfi.CfiSection, "_parse", parse)
    return counts


@pytest.mark.parametrize("placed", ["same-place", "thousand-places"])
def test_baseline_reads_a_library_named_1001_times_once(
    qsort: Capture, monkeypatch: pytest.MonkeyPatch, placed: str
) -> None:
    """A capture whose module list names libc 1,001 times (the same mappings again, or a
    thousand more places far from the stack's code): the baseline gives the same walk as with
    libc once, and reads libc's ELF headers once and parses each of its CFI sections once at
    most (counted, not timed). The same mappings again are the same placement: one module."""
    from stackwalk import baseline

    (libc,) = [m for m in qsort.modules if m.path.endswith("/libc.so.6")]
    if placed == "same-place":
        extra = [libc] * COPIES
    else:
        extra = [dataclasses.replace(libc, bias=(1 << 52) + i * (1 << 32), mappings=())
                 for i in range(COPIES)]  # fmt: skip
    many = dataclasses.replace(qsort, modules=[*qsort.modules, *extra])

    once = baseline.Unwinder(qsort.arch)
    assert qsort.add_modules_to(once) == []
    expected = once.unwind(qsort.regs, qsort.memory).pcs
    assert len(expected) >= 3  # through libc's qsort into main

    counts = _counting_reads(monkeypatch)
    uw = baseline.Unwinder(many.arch)
    warnings = many.add_modules_to(uw)
    trace = uw.unwind(many.regs, many.memory)
    assert trace.pcs == expected
    if placed == "same-place":
        # The same mappings again are the same placement (the rule that places a core's
        # modules): one module, nothing to warn of.
        assert warnings == []
        assert len(uw.modules) == len(once.modules)
    else:
        assert warnings == []
        assert len(uw.modules) == len(once.modules) + COPIES
    real = os.path.realpath(libc.path)
    assert counts[real] == 1, counts
    assert all(n == 1 for n in counts.values()), counts
    assert f"{real} .eh_frame" in counts  # (its CFI was used, and parsed once)
