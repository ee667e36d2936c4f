"""Running programs the tests look at: started until they say "ready", stopped by the test
(SIGSTOP) so that stackwalk and the reference tools see the same moment, and checked to be left
as the test left them (stopped, untraced)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def state(pid: int) -> tuple[str, int]:
    """(the process's state letter, its tracer's pid: 0 for none)."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    return fields["State"][0], int(fields["TracerPid"])


def thread_states(pid: int) -> dict[int, str]:
    """Each thread of ``pid``'s state letter, by tid."""
    return {
        int(tid): Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        for tid in os.listdir(f"/proc/{pid}/task")
    }


def wait_all_blocked(pid: int, timeout: float = 60) -> None:
    """Until every thread of ``pid`` sleeps (in the call it blocks in, not on its way there:
    a thread past a barrier runs until it gets there)."""
    deadline = time.monotonic() + timeout
    while True:
        states = list(thread_states(pid).values())
        if all(s == "S" for s in states):
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.005)


@contextmanager
def running(
    argv: list[str], cwd: Path | None = None, said: list[str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """The program started, once it has said "ready"; killed at the end. ``said``: where the
    lines it printed before "ready" go (else it must say "ready" first). Its standard input is
    a pipe that stays open (a program may block reading it)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=cwd)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        while said is not None and line not in ("ready\n", ""):
            said.append(line)
            line = proc.stdout.readline()
        assert line == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The process in a group stop (SIGSTOP) until the block ends, then let go; every thread
    checked stopped and untraced after each look at it (see check_stopped)."""
    os.kill(pid, signal.SIGSTOP)
    # Every thread, not only the main one: each sleeping thread is woken to join the stop,
    # and on a loaded machine one may still be on its way ("R") when the main one is "T".
    deadline = time.monotonic() + 60
    while state(pid)[0] != "T" or any(s != "T" for s in thread_states(pid).values()):
        assert time.monotonic() < deadline, (state(pid), thread_states(pid))
        time.sleep(0.005)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def check_stopped(pid: int, timeout: float = 60) -> None:
    """Every thread back in the stop the test put it in, and no tracer left behind. A thread
    the kernel let go of while the process is stopped (PTRACE_DETACH) is woken to rejoin the
    group stop by itself: it may run ("R") for a moment first, the longer the more loaded the
    machine (seen in 4 of 30 runs beside a fuzzer), so it is given until ``timeout``; one that
    runs on would never be back."""
    deadline = time.monotonic() + timeout
    while True:
        stats = {tid: Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                 for tid in os.listdir(f"/proc/{pid}/task")}  # fmt: skip
        running = {tid: s for tid, s in stats.items() if s[s.rindex(")") + 2] != "T"}
        if not running:
            break
        assert time.monotonic() < deadline, running
        time.sleep(0.005)
    assert state(pid)[1] == 0
