"""Crash triage: every crash file of a spool (ELF cores, plain or compressed, and minidumps)
unwound, given a signature (stackwalk.signature) and stored in a SQLite database, where crashes
of the same signature share a bucket with a count, first and last sightings, and the builds
they came from. A CPython process's crash is signed and stored with its Python frames among the
native ones (``Core.to_dict(python="mixed")``; the signature: see stackwalk.signature).

The store itself, its schema and its guarantees: ``stackwalk.store``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import socket
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, ParamSpec, TypeVar

from stackwalk import _core
from stackwalk._core import SymbolizedFrame
from stackwalk._workers import Died, TurnLock, WorkersDied, first_read_here, forked_map
from stackwalk.core import Core
from stackwalk.errors import StackwalkError
from stackwalk.minidump import Minidump
from stackwalk.pyframes import PythonFrame
from stackwalk.render import escape
from stackwalk.signature import Rules
from stackwalk.signature import signature as crash_signature
from stackwalk.store import CrashStore, not_a_crash_reason

P = ParamSpec("P")
R = TypeVar("R")
# systemd-coredump's file names: core.COMM.UID.BOOT_ID.PID.USEC[.zst|.xz|.lz4]
_COREDUMP_NAME = re.compile(
    r"core\.(?P<comm>.+)\.(?P<uid>\d+)\.(?P<boot_id>[0-9a-f]{32})\.(?P<pid>\d+)"
    r"\.(?P<usec>\d+)(?:\.(?:zst|xz|lz4|gz))?\Z"
)

# -- one file ---------------------------------------------------------------------------------


class Options:
    """What ``process_file`` needs besides the path (picklable, for workers and Dask)."""

    def __init__(
        self,
        *,
        sysroot: str | None = None,
        lib_search_path: Sequence[str] | None = None,
        debug_root: str | None = None,
        offline: bool = False,
        rules: str | None = None,
        all_threads: bool = False,
        max_core_size: int | None = None,
        known_hashes: frozenset[str] = frozenset(),
    ) -> None:
        self.sysroot = sysroot
        self.lib_search_path = lib_search_path
        self.debug_root = debug_root
        self.offline = offline
        self.rules = rules
        self.all_threads = all_threads
        self.max_core_size = max_core_size
        self.known_hashes = known_hashes


_RULES: dict[str | None, Rules] = {}


def _rules(path: str | None) -> Rules:
    if path not in _RULES:
        _RULES[path] = Rules.load(path)
    return _RULES[path]


def content_hash(path: str) -> str:
    """The file's BLAKE3 hash (hex), by the native core (mapped, several GB/s)."""
    return _core.content_hash(path)


def process_file(path: str, options: Options) -> dict[str, Any] | None:
    """One crash file read, unwound and given its signature: the record ``CrashStore.add``
    stores, with ``error`` set (and no signature) when it cannot be read. None when its
    contents are among ``options.known_hashes``."""
    record: dict[str, Any] = {"path": path, "content_hash": None, "error": None}
    record["host"] = socket.gethostname()
    try:
        st = os.stat(path)
        record["size"], record["mtime"] = st.st_size, st.st_mtime
        record["crash_time"] = st.st_mtime
        digest = content_hash(path)
    except OSError as e:
        record.update(size=0, mtime=0.0, crash_time=0.0, error=e.strerror or str(e))
        # An unreadable file has no contents to tell it by: its path stands in.
        record["content_hash"] = f"unreadable:{path}"
        return record
    if digest in options.known_hashes:
        return None
    record["content_hash"] = digest
    if st.st_size == 0 and stat.S_ISREG(st.st_mode):
        record["error"] = "an empty file, not a crash"
        return record
    m = _COREDUMP_NAME.match(os.path.basename(path))
    if m:
        record.update(
            uid=int(m["uid"]), boot_id=m["boot_id"], pid=int(m["pid"]),
            crash_time=int(m["usec"]) / 1e6,
        )  # fmt: skip
    try:
        _unwind_into(record, path, options)
    except StackwalkError as e:
        record["error"] = str(e)
    return record


def _unwind_into(record: dict[str, Any], path: str, options: Options) -> None:
    opener: type[Core] = Core
    with open(path, "rb") as f:
        if f.read(4) == b"MDMP":  # a minidump (Breakpad's, Crashpad's, minidump-writer's)
            opener = Minidump
    core = opener.open(
        path,
        sysroot=options.sysroot,
        lib_search_path=options.lib_search_path,
        debug_root=options.debug_root,
        offline=options.offline,
        max_size=options.max_core_size,
    )
    if not core.threads:
        reasons = "; ".join(core.warnings) or "it has no NT_PRSTATUS note"
        raise _error(f"no thread could be read ({reasons})")
    crashing = core.crashing_tid
    if crashing is None:
        # A minidump written on request (by a crash handler that passes no crash context, or a
        # hang detector) still blames a thread, in its exception stream: Socorro signs that one.
        crashing = getattr(core, "blamed_tid", None)
    # Without such a thread (a snapshot), every thread's frames are kept: they are all there is
    # to look at.
    tids = None if options.all_threads or crashing is None else {crashing}
    # A python process's Python frames among its native ones (another's are as without)
    taken, pystate = core._stacks(tids=tids, python="mixed")
    stacks = list(taken)
    exe = next((m for m in core.modules if m.file and m.file == core.executable), None)
    record.update(
        executable=core.executable,
        build_id=exe.build_id if exe is not None else None,
        crashing_tid=crashing,
    )
    if record.get("pid") is None:
        record["pid"] = core.pid
    if core.signal is not None:
        record.update(signal=core.signal.name, signal_number=core.signal.number)
    crashed = next((s for s in stacks if s.thread.tid == crashing), None)
    # The crashing thread's frames as its JSON document gives them, to be signed.
    signed = None
    if crashed is not None:
        signed = [_frame_json(f) for f in crashed.frames]
    sig = crash_signature(signed, _rules(options.rules))
    record.update(signature=sig.text, bucket=sig.bucket, fingerprint=sig.fingerprint)
    record["frames"] = [
        _frame_row(s.thread.tid, idx, f) for s in stacks for idx, f in enumerate(s.frames)
    ]
    record["modules"] = [(m.path, m.build_id, int(m.found)) for m in core.modules]
    record["warnings"] = list(core.warnings)
    if pystate is not None:
        # (as `stackwalk core` says them): a python process signed without its Python frames
        if pystate.error:
            record["warnings"].append(
                f"Python {pystate.version}: no Python frames: {pystate.error}"
            )
        record["warnings"].extend(f"Python: warning: {w}" for w in pystate.warnings)


def _frame_json(f: SymbolizedFrame | PythonFrame) -> dict[str, Any]:
    """A frame's JSON object, as the snapshot document of a python process has it."""
    if isinstance(f, PythonFrame):
        python = {"function": f.function, "qualname": f.qualname, "file": f.file, "line": f.line}
        return {"kind": "python", **python}
    return {"kind": "native", **f.to_dict()}


def _frame_row(tid: int, idx: int, f: SymbolizedFrame | PythonFrame) -> tuple[Any, ...]:
    """A frame's row of the frames table (but its crash's id), at ``idx`` in its thread."""
    if isinstance(f, PythonFrame):
        return (tid, idx, None, None, None, f.function, None, f.file, f.line, 0, None,
                "python", f.qualname)  # fmt: skip
    return (
        tid, idx, f.pc, f.module, f.module_offset, f.function, f.function_offset, f.file,
        f.line, int(f.inline), f.trust, "native", None,
    )  # fmt: skip


def _error(message: str) -> Exception:
    return StackwalkError(message)


# -- many files ---------------------------------------------------------------------------


# The work area of a spool that `stackwalk collect` writes (stackwalk.collect.WORK).
COLLECT_WORK = ".collect"


def crash_files(paths: Sequence[str]) -> list[str]:
    """Every regular file under ``paths`` (files, and directories walked), in name order: a
    directory's files, then its subdirectories' one after the other. A link to a directory is
    not followed (a loop of them would never end), nor a directory seen already (a bind mount
    of one of its parents); one that cannot be read is passed over. Names are kept as
    ``os.fsdecode`` gives them (a byte that is not UTF-8 a lone surrogate): the same bytes
    open the file again. The walk keeps its own stack of directories, not Python's: a spool
    thousands of directories deep is walked as any other. In a spool ``stackwalk collect``
    writes (a directory with its ``.collect`` work area), only the minidumps are crashes."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            _walk(path, out)
        else:
            out.append(path)
    return out


def _walk(top: str, out: list[str]) -> None:
    seen: set[tuple[int, int]] = set()
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            st = os.stat(directory)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(directory) as entries:
                files, subdirectories = [], []
                for entry in entries:
                    try:
                        is_directory = entry.is_dir() and not entry.is_symlink()
                        linked = not is_directory and entry.is_symlink() and entry.is_dir()
                    except OSError:
                        is_directory = linked = False
                    if is_directory:
                        subdirectories.append(entry.name)
                    elif not linked:
                        files.append(entry.name)
        except OSError:
            continue  # (as os.walk: a directory that cannot be read is passed over)
        if COLLECT_WORK in subdirectories:
            # A spool `stackwalk collect` writes: its minidumps are the crashes; their JSON
            # records and its work area are not.
            subdirectories.remove(COLLECT_WORK)
            files = [name for name in files if not name.endswith(".json")]
        out.extend(os.path.join(directory, name) for name in sorted(files))
        stack.extend(os.path.join(directory, name) for name in sorted(subdirectories, reverse=True))


def triage(
    paths: Sequence[str],
    store: CrashStore,
    options: Options,
    *,
    jobs: int = 1,
    dask: str | None = None,
    each: Callable[[dict[str, Any]], None] | None = None,
    batch: int = 64,
) -> Run:
    """Read every crash file under ``paths`` not stored yet into ``store``, on ``jobs``
    processes (or the Dask cluster at ``dask``, ``"local"`` for one on this machine).
    ``each`` is called with each file read (a dict with SUMMARY_KEYS at least, and
    ``stored``). What became of the files: the ``Run``."""
    files = crash_files(paths)
    run = Run(len(files))

    def counted(record: dict[str, Any]) -> None:
        run.count(record)
        if each is not None:
            each(record)

    stored_files = store.stored_files()
    todo = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            todo.append(f)
            continue
        if (f, st.st_size, st.st_mtime) not in stored_files:
            todo.append(f)
    options.known_hashes = frozenset(store.content_hashes())
    results: Iterator[Stored | dict[str, Any] | None]
    if dask is None and min(jobs or len(os.sched_getaffinity(0)), len(todo)) > 1:
        # Worker processes store what they read themselves: nothing crosses back but a line
        # per crash, and the writing is spread over the workers with the reading.
        read, rest = first_read_here(todo, lambda path: process_file(path, options))
        first = [record for record in read if record is not None]
        store.add(first)
        for record in first:
            counted(record)
        results = _stored_by_workers(rest, store.path, options, jobs)
    elif dask is not None:
        results = _dask_results(todo, store, options, dask)
    else:
        results = (process_file(f, options) for f in todo)
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        store.add(pending)  # (marks each record stored, or not)
        for r in pending:
            counted(r)
        pending.clear()

    tasks = 0  # tasks whose worker stored what it read
    unchecked = 0  # crashes they stored since the last checkpoint
    for result in results:
        if isinstance(result, Stored):
            for summary in result.summaries:
                counted(summary)
            tasks += 1
            unchecked += len(result.summaries)
            if unchecked >= _CHECKPOINT_CRASHES:
                store.checkpoint()
                unchecked = 0
        elif result is not None:  # (None: its contents are stored under another name)
            pending.append(result)
            if len(pending) >= batch:
                flush()
    flush()
    if tasks:
        store.checkpoint()  # what the workers wrote, into the database itself
    return run


class Run:
    """What one ``triage`` run did with the files it found: each is a crash it stored, a file
    it stored that is not a crash (named, with why), one stored already (by its path, size
    and time, or its contents under another name), or one not read (its worker died)."""

    def __init__(self, files: int) -> None:
        self.files = files
        self.crashes = 0
        self.not_crashes: list[tuple[str, str]] = []  # (path, why)
        self.unread: list[str] = []

    def count(self, record: dict[str, Any]) -> None:
        """One file's record (or its summary), as ``triage`` gives it to ``each``."""
        if record.get("unread"):
            self.unread.append(record["path"])
        elif not record.get("stored"):
            pass  # its contents were stored already, under another name
        elif record.get("error") is None:
            self.crashes += 1
        else:
            path = record["path"]
            self.not_crashes.append((path, not_a_crash_reason(path, record["error"])))

    @property
    def already(self) -> int:
        """Files that were stored already, under their name or another."""
        return self.files - self.crashes - len(self.not_crashes) - len(self.unread)


def summary_lines(run: Run, store: CrashStore) -> list[str]:
    """What ``stackwalk triage`` says at its end: what the run stored, the store's totals
    (as ``report --html``'s page gives them), and each file of the run that is not a crash,
    with why; names escaped (``stackwalk.render.escape``: a byte that is not UTF-8 as
    ``\\xNN``, a control character as its escape), one line each."""
    counts = store.counts()
    line = f"{run.crashes} crashes stored, {run.already} already there"
    if run.not_crashes:
        line += f", {len(run.not_crashes)} files that are not crashes (below)"
    line += (
        f"; {escape(store.path)}: {counts.crashes} crashes in {counts.buckets} buckets, "
        f"{counts.not_crashes} files that are not crashes"
    )
    missing = store.missing_modules()
    if missing:
        # On a cluster, most often a worker without the modules' files (or their debug files)
        # at the paths the cores name: the crashes' warnings say which.
        line += f", {missing} read with modules missing (see crashes.warnings, host)"
    if run.unread:
        unread = len(run.unread)
        line += f"; {unread} files not read (a worker process died): run again to read them"
    return [line, *(escape(f"not a crash: {path}: {why}") for path, why in run.not_crashes)]


class Stored(NamedTuple):
    """What a worker stored itself (one task): how many files, and each one's SUMMARY_KEYS,
    with ``stored`` (whether it was: one of the same contents may have been already)."""

    added: int
    summaries: list[dict[str, Any]]


SUMMARY_KEYS = ("path", "signature", "bucket", "error")
# The most files in a task of --jobs' workers: one transaction each (some 10 ms of writing on
# small cores), short enough that the other writers seldom wait long for it, few enough that
# their commits and turns cost little: 4,000 small cores on two workers took 1.88 s in tasks
# of 16 files, 1.83 s of 32, 1.78 s of 64 (medians of four interleaved runs).
_WORKER_TASK = 64
# The most files in a task of a Dask run (some 0.2 s of a worker's time on small cores): 4,000
# small cores on two workers on one machine took 2.57 s in tasks of 64 files, 2.48 s of 128,
# 2.39 s of 256 (medians of four interleaved runs). A task costs the scheduler and the driver
# some milliseconds of CPU of their own.
_DASK_TASK = 256


def task_size(files: int, workers: int, most: int) -> int:
    """Files per task: four tasks per worker at least, so that the work spreads, and at most
    ``most``."""
    return max(1, min(most, files // (4 * workers)))


def _tasks(files: Sequence[str], workers: int, most: int) -> list[Sequence[str]]:
    """``files`` in tasks of ``task_size`` files (the last one shorter)."""
    size = task_size(len(files), workers, most)
    return [files[i : i + size] for i in range(0, len(files), size)]


# Crashes stored by workers between two checkpoints of the main process (a write-ahead log of
# some 8 MB).
_CHECKPOINT_CRASHES = 1024


def _stored_by_workers(
    files: Sequence[str], db: str, options: Options, jobs: int
) -> Iterator[Stored]:
    """``store_files`` over ``jobs`` processes (one per CPU for 0), in tasks (task_size). A
    worker that dies (killed, out of memory) is replaced; the files of the task it was on are
    given with an error and ``"unread": True``, and not stored: a rerun reads them again."""
    global _FORKED_WITH
    jobs = min(jobs or len(os.sched_getaffinity(0)), len(files))
    if jobs == 0:
        return
    chunks = _tasks(files, jobs, _WORKER_TASK)
    # The store and the options (with every stored content's hash: megabytes for a big store)
    # reach the workers by the fork, not pickled into every task. The workers take turns at
    # writing by a lock that wakes the next one at once: SQLite's own wait for a busy database
    # sleeps (1, 2, 5, 10... ms), longer than a transaction of a few crashes takes; and a
    # worker killed as it writes lets go of it.
    _FORKED_WITH = (db, options, TurnLock())
    done = 0
    try:
        for chunk, result in zip(chunks, forked_map(_store_forked, chunks, jobs), strict=False):
            done += 1
            if isinstance(result, StoreFailed):
                # The store went bad under the worker (damaged, the disk full): what the
                # workers stored before stays, as their transactions were whole.
                raise _error(result.message)
            if isinstance(result, Died):
                error = (
                    f"not read: the worker process reading it or another of its {len(chunk)} "
                    f"files died ({result.reason}); not stored, a rerun reads it"
                )
                yield Stored(0, [_unread(path, error) for path in chunk])
            else:
                yield result
    except WorkersDied as e:
        left = sum(map(len, chunks[done:]))
        raise _error(f"{e}: {left} files unread (run again)") from None
    finally:
        _FORKED_WITH = None


def _unread(path: str, error: str) -> dict[str, Any]:
    return {"path": path, "signature": None, "bucket": None, "error": error, "unread": True,
            "stored": False}  # fmt: skip


_FORKED_WITH: tuple[str, Options, AbstractContextManager[Any]] | None = None
_WORKER_STORES: dict[str, CrashStore] = {}


class StoreFailed(NamedTuple):
    """What a worker gives for a task whose store it could not write (its StackwalkError's
    message), for the parent to raise: one error line, not a worker's traceback."""

    message: str


def _store_forked(paths: Sequence[str]) -> Stored | StoreFailed:
    assert _FORKED_WITH is not None, "a worker forked by _stored_by_workers"
    db, options, lock = _FORKED_WITH
    try:
        return store_files(paths, db, options, lock)
    except StackwalkError as e:
        return StoreFailed(str(e))


def store_files(
    paths: Sequence[str],
    db: str,
    options: Options,
    lock: AbstractContextManager[Any] | None = None,
) -> Stored:
    """``process_file`` of each path, stored into the store at ``db`` (this process's own
    connection to it, kept for the next call) in one transaction, holding ``lock`` (the
    writers' turn) while it writes."""
    store = _WORKER_STORES.get(db)
    if store is None:
        # The workers' turns at writing hold no fsync: the main process checkpoints.
        store = _WORKER_STORES[db] = CrashStore(db, checkpoints=False)
    return _store_into(store, paths, options, lock)


def _store_into(
    store: CrashStore,
    paths: Sequence[str],
    options: Options,
    lock: AbstractContextManager[Any] | None = None,
) -> Stored:
    records = [r for r in (process_file(p, options) for p in paths) if r is not None]
    with lock if lock is not None else contextlib.nullcontext():
        stored = store.add(records)
    return Stored(
        stored, [{**{k: r.get(k) for k in SUMMARY_KEYS}, "stored": r["stored"]} for r in records]
    )


def process_files(paths: Sequence[str], options: Options) -> list[dict[str, Any] | None]:
    """``process_file`` of each path: one task of a cluster's worth several files, so that
    the scheduler's cost per task (milliseconds) is paid once for them all."""
    return [process_file(path, options) for path in paths]


class StoreHere(NamedTuple):
    """The store as the driver of a Dask run has it. A worker on the same machine (the same
    running kernel) that sees the same file there stores what it reads itself, as ``--jobs``'
    workers do, where a worker elsewhere sends its records to the driver."""

    path: str
    boot_id: str
    device: int
    inode: int

    @classmethod
    def of(cls, path: str) -> StoreHere:
        st = os.stat(path)
        return cls(os.path.abspath(path), _boot_id(), st.st_dev, st.st_ino)

    def here(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        same = (st.st_dev, st.st_ino) == (self.device, self.inode)
        return same and self.boot_id != "" and _boot_id() == self.boot_id


def _boot_id() -> str:
    """This running kernel's own id ("" where it cannot be read)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _turn_of(store: StoreHere) -> TurnLock | None:
    """The writers' turn at the store for the Dask workers on its machine, as --jobs' workers
    take theirs: a record lock on a file named by the store's device and inode, in a
    directory of this user's alone (``stackwalk._workers.private_directory``), where no other
    user can put a link to a file of theirs for it to follow, nor hold the lock to stall the
    run. SQLite's own wait for a busy store sleeps (1, 2, 5, 10... ms), and a task's
    transaction of a few hundred crashes keeps the other writer waiting: 4,000 small cores on
    two workers took 2.49 s without the turn, 2.26 s with it (medians of four runs). None
    where there is no such directory: SQLite's wait then."""
    return TurnLock.private(f"stackwalk-store-{store.device:x}-{store.inode:x}.lock")


def cluster_task(paths: Sequence[str], options: Options, store: StoreHere) -> bytes:
    """One task of a Dask run: ``store_files`` where the store is here, else
    ``process_files``; pickled by the worker, for a cluster moves one bytes object per task as
    it is, where a list of records would be walked (sized, pickled) object by object by the
    worker's and the client's event loops, more than the records' own pickling costs."""
    result: Stored | list[dict[str, Any] | None]
    if store.here():
        # A connection of its own for the task, closed after it: a worker outlives the run,
        # and a connection kept open to a store deleted since (its write-ahead log with it)
        # would break the next store made at the same path.
        turn = _turn_of(store)
        try:
            with CrashStore(store.path, checkpoints=False) as here:
                result = _store_into(here, paths, options, turn)
        finally:
            if turn is not None:
                turn.close()
    else:
        result = process_files(paths, options)
    return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)


def _dask_results(
    files: Sequence[str], store: CrashStore, options: Options, address: str
) -> Iterator[Stored | dict[str, Any] | None]:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ModuleNotFoundError:
        raise StackwalkError(
            "--dask needs dask.distributed: pip install 'stackwalk[dask]'"
        ) from None
    local = address == "local"
    cluster = LocalCluster(processes=True, threads_per_worker=1) if local else None  # type: ignore[no-untyped-call]
    try:
        with Client(cluster if cluster is not None else address) as client:  # type: ignore[no-untyped-call]
            workers = max(1, len(client.scheduler_info().get("workers", {})))
            chunks = _tasks(files, workers, _DASK_TASK)
            # The options (with the known contents' hashes) go to each worker once.
            shared = client.scatter(options, broadcast=True)
            here = StoreHere.of(store.path)
            futures = client.map(cluster_task, chunks, options=shared, store=here, pure=False)
            # Each result fetched by the client's own loop as its task ends, not on request.
            done = as_completed(futures, with_results=True)  # type: ignore[no-untyped-call]
            for _, packed in done:
                result = pickle.loads(packed)
                if isinstance(result, Stored):
                    yield result
                else:
                    yield from result
    finally:
        if cluster is not None:
            cluster.close()
