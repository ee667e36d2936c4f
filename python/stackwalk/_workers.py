"""Worker processes forked after the parent read a file itself (``core --dir``, ``triage
--jobs``): they inherit the caches that reading filled (the symbols and debug info of libc and
of the program every crash shares), which each worker would otherwise read again."""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import pickle
import selectors
import signal
import socket
import stat
import struct
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, NamedTuple, TypeVar

from stackwalk import _core

T = TypeVar("T")
R = TypeVar("R")


@contextlib.contextmanager
def read_before_fork() -> Iterator[bool]:
    """While inside, the native core's thread pool is held back (its loops run on the calling
    thread): a child forked after the pool started has none of its threads and would wait on
    them forever. Gives whether reading here is safe: False when the pool was started before
    (by another use of the library in this process); then nothing should be read before the
    fork."""
    started = _core.hold_thread_pool(True)
    try:
        yield not started
    finally:
        _core.hold_thread_pool(False)


def first_read_here(items: Sequence[T], read: Callable[[T], R]) -> tuple[list[R], Sequence[T]]:
    """``read`` of the first item in this process, before the workers are forked, where that
    is safe (see read_before_fork): the workers inherit what it read (libc's symbols and debug
    info, the program's), where each would read it again. (What it gave, if it ran; the items
    left for the workers.)"""
    with read_before_fork() as safe:
        if not safe or not items:
            return [], items
        return [read(items[0])], items[1:]


class Died(NamedTuple):
    """What a worker gave for the item it was on when it died (killed by a user or the OOM
    killer, or crashed)."""

    reason: str  # "killed by SIGKILL", "exited with status 3"


class WorkersDied(Exception):
    """Worker after worker died before finishing any item: the run cannot go on."""


# A worker that dies is replaced by a new one; this many deaths in a row with no item
# finished between them end the run (every new worker dies at once: something else is wrong).
_DEATHS_IN_A_ROW = 4
# Items sent ahead to each worker, so that it never waits for the next one.
_AHEAD = 2
_HEADER = struct.Struct("<Q")


def forked_map(
    fn: Callable[[T], R], items: Sequence[T], jobs: int, *, window: int = 64
) -> Iterator[R | Died]:
    """``fn`` of each item on ``jobs`` forked processes, in the items' order. The workers
    inherit ``fn`` and ``items`` by the fork (nothing of them is pickled); each result comes
    back pickled. A worker that dies gives ``Died`` for the item it was on and is replaced;
    the items it had not begun go to the others. At most ``window`` results wait for an
    earlier one to be given. An exception in ``fn`` is raised here, in the parent.

    Unlike concurrent.futures' and multiprocessing's pools, nothing here is shared between
    the workers (each has its own socket to the parent): a worker killed at any moment
    leaves no lock held, and its death is seen at once (its socket reads end of file)."""
    pool = _Pool(fn, items)
    finished = False
    try:
        for _ in range(min(jobs, len(items))):
            pool.fork()
        yield from pool.results(window)
        finished = True
    finally:
        pool.close(kill=not finished)


class _Worker(NamedTuple):
    pid: int
    sock: socket.socket
    sent: collections.deque[int]  # the indexes it was given, in order, not yet answered


class _Pool(Generic[T, R]):
    def __init__(self, fn: Callable[[T], R], items: Sequence[T]) -> None:
        self.fn, self.items = fn, items
        self.workers: dict[int, _Worker] = {}  # by socket fd
        self.selector = selectors.DefaultSelector()
        self.waiting: collections.deque[int] = collections.deque(range(len(items)))

    def fork(self) -> None:
        parent, child = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the worker; coverage cannot follow it)
            status = 1
            try:
                # The native core's loops on this thread alone: a pool the parent started
                # has none of its threads here, and would be waited on forever.
                _core.hold_thread_pool(True)
                parent.close()
                for worker in self.workers.values():
                    worker.sock.close()  # the parent's death must end every worker
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends them
                self._serve(child)
                status = 0
            finally:
                os._exit(status)
        child.close()
        worker = _Worker(pid, parent, collections.deque())
        self.workers[parent.fileno()] = worker
        self.selector.register(parent, selectors.EVENT_READ, worker)

    def _serve(self, sock: socket.socket) -> None:
        while len(message := sock.recv(_HEADER.size, socket.MSG_WAITALL)) == _HEADER.size:
            (index,) = _HEADER.unpack(message)
            answer: tuple[int, bool, Any]
            try:
                answer = (index, True, self.fn(self.items[index]))
            except BaseException as e:  # noqa: BLE001 (raised again in the parent)
                answer = (index, False, _description(e))
            data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
            sock.sendall(_HEADER.pack(len(data)) + data)

    def results(self, window: int) -> Iterator[R | Died]:
        done: dict[int, R | Died] = {}
        given = 0  # the items given so far (in order)
        deaths = 0  # workers died since an item was last finished
        while given < len(self.items):
            self._dispatch(given + window)
            while given in done:
                yield done.pop(given)
                given += 1
            if given == len(self.items):
                return
            # Again, as far as the window has moved: where every item sent was answered, a
            # wait for answers before this would wait forever.
            self._dispatch(given + window)
            for key, _ in self.selector.select():
                worker = key.data
                answer = self._receive(worker.sock)
                if answer is None:
                    deaths += 1
                    reason = self._bury(worker)
                    if worker.sent:  # the item it was on, and those it had not begun
                        done[worker.sent.popleft()] = Died(reason)
                        self.waiting.extendleft(reversed(worker.sent))
                    if deaths >= _DEATHS_IN_A_ROW:
                        raise WorkersDied(f"{deaths} worker processes died in a row ({reason})")
                    self.fork()
                    continue
                index, ok, value = answer
                if not ok:
                    raise WorkerError(value)
                worker.sent.remove(index)
                done[index] = value
                deaths = 0

    def _dispatch(self, end: int) -> None:
        """Sends each worker items waiting before index ``end``, up to _AHEAD in hand."""
        for worker in self.workers.values():
            while len(worker.sent) < _AHEAD and self.waiting and self.waiting[0] < end:
                index = self.waiting.popleft()
                worker.sent.append(index)
                with contextlib.suppress(OSError):  # it died: its socket tells below
                    worker.sock.sendall(_HEADER.pack(index))

    @staticmethod
    def _receive(sock: socket.socket) -> tuple[int, bool, Any] | None:
        """The next answer on ``sock``, or None when its worker is gone (its socket ended,
        or was reset: a worker that exits with items unread in it resets it)."""
        try:
            return _Pool._read(sock)
        except ConnectionResetError:
            return None

    @staticmethod
    def _read(sock: socket.socket) -> tuple[int, bool, Any] | None:
        header = sock.recv(_HEADER.size, socket.MSG_WAITALL)
        if len(header) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack(header)
        data = bytearray(size)
        view = memoryview(data)
        while view:
            got = sock.recv_into(view)
            if got == 0:
                return None
            view = view[got:]
        answer: tuple[int, bool, Any] = pickle.loads(data)
        return answer

    def _bury(self, worker: _Worker) -> str:
        """Forgets a worker whose socket ended: how it died."""
        self.selector.unregister(worker.sock)
        del self.workers[worker.sock.fileno()]
        worker.sock.close()
        _, status = os.waitpid(worker.pid, 0)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                return f"killed by {signal.Signals(number).name}"
            except ValueError:
                return f"killed by signal {number}"
        return f"exited with status {os.waitstatus_to_exitcode(status)}"

    def close(self, kill: bool) -> None:
        """Ends every worker left: their sockets closed (a worker between items exits), and
        with ``kill`` SIGKILL for any still at work (the run stopped early: an error, ^C)."""
        for worker in self.workers.values():
            self.selector.unregister(worker.sock)
            worker.sock.close()
        self.selector.close()
        for worker in self.workers.values():
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)
            os.waitpid(worker.pid, 0)
        self.workers.clear()


class WorkerError(Exception):
    """An exception raised by the function of ``forked_map`` in a worker (its description:
    the exception is not sent across, since it may not pickle)."""


def _description(e: BaseException) -> str:
    return "".join(traceback.format_exception(e)).rstrip()


class TurnLock:
    """A lock between a parent and the workers it forks, which a worker killed while holding
    it lets go of: a POSIX record lock on a file of its own (the kernel drops a process's
    record locks when it dies, and wakes the next waiter at once). A multiprocessing.Lock
    held by a killed worker would stay held, and every other worker wait on it forever.
    ``path``: a file that processes not forked from one another agree on (``private``: in a
    directory of this user's alone), where the lock's own is a temporary one inherited by the
    fork; relative to the directory open at ``dir_fd``, if given. The file is made by this
    process (``O_EXCL``) or must be a regular file of this user's already, and a symbolic link
    at ``path`` is never followed (``O_NOFOLLOW``): OSError if it is not so."""

    def __init__(self, path: str | None = None, *, dir_fd: int | None = None) -> None:
        if path is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 (held as long as the lock)
        else:
            self._file = os.fdopen(_lock_file(path, dir_fd), "r+b")

    @classmethod
    def private(cls, name: str) -> TurnLock | None:
        """The lock of the file ``name`` in this user's private directory
        (``private_directory``), which only this user's processes can open, hold or replace;
        None where there is no such directory, or the file there cannot be opened (a link,
        another user's)."""
        directory = private_directory()
        if directory is None:
            return None
        try:
            return cls(name, dir_fd=directory)
        except OSError:
            return None
        finally:
            os.close(directory)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> None:
        fcntl.lockf(self._file, fcntl.LOCK_EX)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        fcntl.lockf(self._file, fcntl.LOCK_UN)


def _lock_file(path: str, dir_fd: int | None) -> int:
    """A descriptor of the lock file at ``path``: made by this call (``O_EXCL``), or one there
    already that is a regular file of this user's; never through a symbolic link."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        pass
    # Not a blocking open(): a FIFO would wait for a writer for ever.
    fd = os.open(path, flags | os.O_NONBLOCK, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise PermissionError(errno.EPERM, "not a lock file of this user's", path)
    os.set_blocking(fd, True)
    return fd


def private_directory() -> int | None:
    """A descriptor of a directory of this user's alone (owned by this user, not a symbolic
    link, no permission for anyone else), made if missing: ``stackwalk`` in
    ``$XDG_RUNTIME_DIR``, else ``locks`` in stackwalk's cache directory
    (``$STACKWALK_CACHE_DIR``, else ``~/.cache/stackwalk``; empty: none). None where neither
    is such a directory. (Files are opened relative to the descriptor: the directory checked
    is the one they are in, whatever is renamed meanwhile.)"""
    places = []
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        places.append((runtime, "stackwalk", False))
    cache = os.environ.get("STACKWALK_CACHE_DIR")
    if cache is None:
        cache = os.path.join(os.path.expanduser("~"), ".cache", "stackwalk")
    if os.path.isabs(cache):
        places.append((cache, "locks", True))
    for parent, name, make in places:
        fd = _private_subdirectory(parent, name, make)
        if fd is not None:
            return fd
    return None


def _private_subdirectory(parent: str, name: str, make_parent: bool) -> int | None:
    try:
        if make_parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent_fd)
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=parent_fd)
        finally:
            os.close(parent_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        return None
    return fd
