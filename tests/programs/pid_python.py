"""For stackwalk pid: python3 with a thread blocked in each of a lock, a sleep and select, and
the main thread in read(2) 40 levels deep in a recursion that goes through C (map) at every
level, so that each level has native frames of its own. Says "ready" once all are on their
way to block."""

import os
import select
import sys
import threading
import time

lock = threading.Lock()
lock.acquire()
started = threading.Barrier(4)


def in_lock():
    started.wait()
    lock.acquire()


def in_sleep():
    started.wait()
    time.sleep(3600)


def in_select():
    r, w = os.pipe()
    started.wait()
    select.select([r], [], [])


def descend(n):
    if n == 0:
        started.wait()
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        return os.read(0, 1)  # blocked in read(2)
    return list(map(descend, [n - 1]))[0]  # through C: a native frame per level


for f in (in_lock, in_sleep, in_select):
    threading.Thread(target=f, daemon=True).start()
descend(40)
