"""A python3 program for the Python frames' tests: threads blocked at known points, each having
printed its own stack there (``traceback.extract_stack``, as JSON on one line: the reference the
tests hold stackwalk to), and one thread busy in a loop, holding the GIL.

- the main thread: a deep recursion through distinct functions (``ping``/``pong`` alternating,
  and a C call that runs Python again, ``map`` calling ``through_c``), then blocked reading
  stdin (a pipe the test keeps open);
- ``sleeper``: in ``time.sleep``; ``locker``: in ``Lock.acquire``; ``selector``: in
  ``select.select`` on a pipe nothing writes to;
- ``spinner``: a Python loop, alone in wanting the GIL, so it holds it.

Each blocked thread reports on the line of its blocking call (``report(...) or call()``), so its
innermost frame's line is the one the blocked call is on. "ready" is printed when every thread
has reported (after the main thread's report)."""

import json
import os
import select
import sys
import threading
import time
import traceback

DEPTH = int(sys.argv[1]) if len(sys.argv) > 1 else 40
lock = threading.Lock()
lock.acquire()
reported = threading.Semaphore(0)
out_lock = threading.Lock()


def report(what: str) -> None:
    """Print the caller's stack, outermost first: (function, file, line) per frame."""
    frames = traceback.extract_stack(sys._getframe(1))
    stack = [[f.name, f.filename, f.lineno] for f in frames]
    with out_lock:
        print(json.dumps({"what": what, "tid": threading.get_native_id(), "stack": stack}))
        if what == "main":
            print("ready")
        sys.stdout.flush()
    reported.release()


def sleeper() -> None:
    report("sleep") or time.sleep(3600)


def locker() -> None:
    report("lock") or lock.acquire()


def selector() -> None:
    r, w = os.pipe()
    report("select") or select.select([r], [], [])


def spin_forever() -> None:
    n = 0
    report("spin")
    # One line: the frame is on it whatever instruction the loop is at.
    while True: n = n + 1  # noqa: E701  # fmt: skip


def spinner() -> None:
    spin_forever()


def through_c(n: int) -> int:
    return ping(n - 1)


def ping(n: int) -> int:
    if n == DEPTH // 2:
        return list(map(through_c, [n]))[0]
    return pong(n - 1) if n > 0 else bottom()


def pong(n: int) -> int:
    return ping(n - 1) if n > 0 else bottom()


def bottom() -> int:
    for target in (sleeper, locker, selector):
        threading.Thread(target=target, name=target.__name__, daemon=True).start()
    for _ in range(3):
        reported.acquire()
    threading.Thread(target=spinner, name="spinner", daemon=True).start()
    reported.acquire()
    return len(report("main") or sys.stdin.readline())


if __name__ == "__main__":
    ping(DEPTH)
