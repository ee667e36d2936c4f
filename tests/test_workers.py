"""The worker processes of ``core --dir`` and ``triage --jobs`` (stackwalk._workers): results
in order, a worker's death costing the one item it was on, and no lock left held by the dead."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from stackwalk._workers import Died, TurnLock, WorkerError, WorkersDied, forked_map

ITEMS = list(range(600))
KILLED = {7, 300, 599}  # the items whose worker kills itself


def _square_or_die(x: int) -> int:
    if x in KILLED:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def test_results_come_in_order_and_a_dead_worker_costs_its_item() -> None:
    before = _children()
    results = list(forked_map(_square_or_die, ITEMS, 3, window=8))
    assert len(results) == len(ITEMS)
    for x, result in zip(ITEMS, results, strict=True):
        assert result == (Died("killed by SIGKILL") if x in KILLED else x * x), x
    assert _children() <= before  # the replaced workers and the last ones, all waited for


def test_a_window_every_answer_came_back_in_moves_on() -> None:
    """Every item sent answered, the window moved by the results given: the next items are
    sent before waiting for answers (a window of one item, which hung before, waiting for an
    answer to nothing sent; a slow file followed by a window's worth of quick ones in
    ``core --dir`` could do the same)."""
    for jobs in (1, 3):
        results = list(forked_map(abs, [-x for x in range(40)], jobs, window=1))
        assert results == list(range(40))


def _exit(x: int) -> int:
    os._exit(3)


def test_workers_that_all_die_end_the_run() -> None:
    before = _children()
    with pytest.raises(WorkersDied, match=r"died in a row \(exited with status 3\)"):
        list(forked_map(_exit, ITEMS, 2))
    assert _children() <= before


def _fail(x: int) -> int:
    if x == 5:
        raise ValueError("no five")
    return x


def test_an_exception_in_a_worker_is_raised_with_its_traceback() -> None:
    before = _children()
    with pytest.raises(WorkerError, match=r"(?s)in _fail.*ValueError: no five"):
        list(forked_map(_fail, ITEMS, 2))
    assert _children() <= before  # the workers at work when it was raised: killed, waited for


def test_a_turn_lock_held_by_a_killed_process_is_free() -> None:
    lock = TurnLock()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        with lock:
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    taken = threading.Event()

    def take() -> None:
        with lock:
            taken.set()

    threading.Thread(target=take, daemon=True).start()
    assert taken.wait(10), "the lock of a killed process is still held"


def _children() -> set[str]:
    """This process's children (the test session may have others of its own: a cluster's,
    a traced program's)."""
    pid = os.getpid()
    return set(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())


def test_a_turn_lock_at_a_path_is_one_lock_for_unrelated_processes(tmp_path: Path) -> None:
    """``TurnLock(path)`` (triage's Dask workers on the store's machine): opened by processes
    that share nothing but the path, it lets one of them in at a time, and a killed holder
    lets go of it."""
    path = str(tmp_path / "store.lock")
    ready, release = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        held = TurnLock(path)
        with held:
            os.write(release, b"x")
            time.sleep(60)  # killed holding it
        os._exit(0)
    assert os.read(ready, 1) == b"x"
    mine = TurnLock(path)
    taken = threading.Event()

    def take() -> None:
        with mine:
            taken.set()

    threading.Thread(target=take, daemon=True).start()
    assert not taken.wait(0.3), "two holders at once"
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert taken.wait(10), "the lock of a killed process is still held"
    mine.close()
