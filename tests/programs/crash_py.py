"""The interpreter crashing deep inside native code during Python -> C -> Python recursion.

sorted() (C) calls the key lambda (Python), which recurses into sorted() again; at the bottom
ctypes.string_at(0) makes the interpreter read a C string at address 0: SIGSEGV in libc's
strlen, called from _ctypes through libffi. Before that, extension modules that bring their own
shared libraries are imported (so the core maps dozens of modules), and two more threads block:
one in a lock's acquire() under a few Python frames, one in time.sleep().
"""

import ctypes
import importlib
import threading
import time

for name in (
    "decimal",
    "hashlib",
    "ssl",
    "sqlite3",
    "lzma",
    "bz2",
    "json",
    "uuid",
    "zoneinfo",
    "unicodedata",
    "array",
    "select",
    "math",
    "cmath",
    "_struct",
    "_queue",
):
    try:
        importlib.import_module(name)
    except ImportError:
        pass

LOCK = threading.Lock()
LOCK.acquire()
READY = threading.Barrier(3)


def wait_deep(n: int) -> None:
    if n == 0:
        READY.wait()
        LOCK.acquire()
    else:
        wait_deep(n - 1)


def doze() -> None:
    READY.wait()
    time.sleep(1000)


def descend(n: int) -> list[int]:
    if n == 0:
        return [len(ctypes.string_at(0))]
    return sorted([n], key=lambda x: descend(x - 1))


threading.Thread(target=wait_deep, args=(5,), daemon=True).start()
threading.Thread(target=doze, daemon=True).start()
READY.wait()
time.sleep(0.05)  # let both threads reach their blocking calls
descend(30)
