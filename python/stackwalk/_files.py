"""The files a command line names, read and written so that no path can stall the command or
be written half: an input (a perf.data, a rules file) is read only if it is a regular file,
found so before it is read and never opened in a way that can block (a FIFO would wait for a
writer, forever; a device may never end); an output (``report --html``, ``perf
--flamegraph``, ``capture -o``) is written whole into a new file beside it, which then takes
its name (a rename: a reader never sees half a file, a FIFO or a device at the name is never
opened, and a failed run leaves what was there). The native core opens its inputs the same
way (``rust/source/files.rs``, ``open_regular``)."""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import AbstractContextManager

from stackwalk.errors import StackwalkError

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))  # fmt: skip


def kind(mode: int) -> str:
    """What a file that is not a regular file is: "a FIFO", "a directory"..."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _failed(what: str, path: str, e: OSError) -> StackwalkError:
    return StackwalkError(f"{what}{path}: {e.strerror or e}")


def open_input(path: str, what: str = "") -> int:
    """A descriptor of the regular file at ``path`` (symbolic links followed), open for
    reading; anything else a StackwalkError saying what it is ("rules x: is a FIFO",
    ``what`` leading the message). The file is looked at before it is opened, and opened
    non-blocking (a FIFO put in its place between the two is refused, never waited on)."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise StackwalkError(f"{what}{path}: is {kind(mode)}")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise _failed(what, path, e) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StackwalkError(f"{what}{path}: is {kind(mode)}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def held_pipe(path: str) -> bool:
    """Whether ``path`` names a pipe (or FIFO) that this process holds open already: its
    standard input as /dev/stdin, a shell's process substitution as /dev/fd/63. Such a pipe is
    read as a stream, as ``-`` is (opening a pipe again never waits; the process holding it
    open is the one that made its writer); any other FIFO is refused (``open_input``)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISFIFO(info.st_mode):
        return False
    for name in os.listdir("/proc/self/fd"):
        try:
            held = os.fstat(int(name))
        except (OSError, ValueError):
            continue
        if (held.st_dev, held.st_ino) == (info.st_dev, info.st_ino):
            return True
    return False


def read_input(path: str, limit: int, what: str = "") -> bytes:
    """The bytes of the regular file at ``path`` (see ``open_input``), at most ``limit`` of
    them: a longer file is a StackwalkError, found by its size before it is read (and by
    reading no more than one byte past the limit, should it grow meanwhile)."""
    fd = open_input(path, what)
    with os.fdopen(fd, "rb") as f:
        try:
            size = os.fstat(fd).st_size
            data = b"" if size > limit else f.read(limit + 1)
        except OSError as e:
            raise _failed(what, path, e) from None
    if size > limit or len(data) > limit:
        raise StackwalkError(f"{what}{path}: {max(size, len(data))} bytes, more than {limit} "
                             "(the most it may have)")  # fmt: skip
    return data


def check_output(path: str, what: str) -> None:
    """A StackwalkError at once (before the work whose result is written there) if ``path``
    cannot take an output file: something there that is not a regular file (a FIFO, a
    device, a directory: never written into), or no directory to make it in. ``what``: the
    output, for the message ("the flame graph")."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        directory = os.path.dirname(os.path.realpath(path))
        if not os.path.isdir(directory):
            raise StackwalkError(f"{path}: no such directory to write {what} in") from None
        return
    except OSError as e:
        raise _failed("", path, e) from None
    if not stat.S_ISREG(mode):
        raise StackwalkError(f"{path}: is {kind(mode)}, not a file to write {what} to")


def replacing(path: str, what: str) -> AbstractContextManager[str]:
    """A context giving the path of a new, empty file to write the output at ``path`` into
    (the native core's writers take a path); once the context ends without an exception, the
    file takes ``path``'s name, else it is removed. See ``_Replacement``."""
    return _Replacement(path, what)


def write_output(path: str, what: str, data: str | bytes) -> None:
    """``data`` (str: as UTF-8) written to the file ``path`` as a whole, in its place (see
    ``replacing``)."""
    raw = data.encode() if isinstance(data, str) else data
    with replacing(path, what) as temporary, open(temporary, "wb") as f:
        f.write(raw)


class _Replacement:
    """The output file at ``path``, written into a new file in the same directory (``.NAME.``
    and a random part: ``tempfile.mkstemp``, which makes it anew, with O_EXCL) and renamed over
    ``path`` once written and synced: a reader of ``path`` sees the old file or the new one,
    whole. A symbolic link at ``path`` is followed (the file it names is replaced, as a
    plain write would write it). The new file gets the permissions of the one it replaces, or
    those a new file gets (0666 less the umask). What is at ``path`` is checked again (see
    ``check_output``): a FIFO or a device there is neither opened nor replaced. The file is
    given to the writer as /proc/self/fd/N, the descriptor this process made it with, so that
    nothing put at its name meanwhile is written instead."""

    def __init__(self, path: str, what: str) -> None:
        self.path, self.what = path, what
        self.fd = -1
        self.temporary = ""

    def __enter__(self) -> str:
        check_output(self.path, self.what)
        target = os.path.realpath(self.path)
        directory, name = os.path.split(target)
        try:
            self.fd, self.temporary = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
        except OSError as e:
            raise _failed("", self.path, e) from None
        return f"/proc/self/fd/{self.fd}"

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            if kind is None:
                self._finish()
        finally:
            os.close(self.fd)
            if os.path.lexists(self.temporary):
                os.unlink(self.temporary)

    def _finish(self) -> None:
        target = os.path.realpath(self.path)
        try:
            try:
                mode = os.stat(target).st_mode
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
            else:
                if not stat.S_ISREG(mode):  # put there while the output was made
                    raise StackwalkError(f"{self.path}: is {kind(mode)}, not a file to write "
                                         f"{self.what} to")  # fmt: skip
            os.fchmod(self.fd, stat.S_IMODE(mode))
            os.fsync(self.fd)
            os.replace(self.temporary, target)
        except OSError as e:
            raise _failed("", self.path, e) from None


def _umask() -> int:
    """The process's umask, read without changing it (os.umask sets it to read it, which a
    thread making a file meanwhile would see)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
