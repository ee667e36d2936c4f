"""Worker processes forked after the parent read a file itself (``core --dir``, ``triage
--jobs``): they inherit the caches that reading filled (the symbols and debug info of libc and
of the program every crash shares), which each worker would otherwise read again."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from stackwalk import _core


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
