"""elfutils' ``debuginfod`` started on 127.0.0.1 for a test, indexing (``-F``) a directory of
ELF files, and the files split as a distribution ships them (stripped, their DWARF apart)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from corefiles import TIMEOUT, _free_port, run

# Attempts at a free port (another process may take the one picked before debuginfod binds it).
PORT_ATTEMPTS = 5


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=TIMEOUT)


# No proxy from the environment between the tests and their server.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metrics(url: str) -> dict[str, float]:
    with _OPENER.open(f"{url}/metrics", timeout=TIMEOUT) as response:
        text = response.read().decode()
    return {name: float(value) for name, value in re.findall(r"^(\S+) (\S+)$", text, re.MULTILINE)}


def start_debuginfod(index: Path, directory: Path) -> Server:
    """debuginfod indexing the ELF files under ``index``, once its first scan is over: its
    traversal of the directory done and no file waiting for, or in, a scanning thread (what
    elfutils' own tests wait for). Nothing here depends on how long that takes."""
    for _ in range(PORT_ATTEMPTS):
        port = _free_port()
        database = directory / f"debuginfod-{port}.sqlite"
        log = (directory / f"debuginfod-{port}.log").open("wb")
        cmd = ["debuginfod", "-F", str(index), "-p", str(port), "-d", str(database)]
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        # A bound far beyond any scan of a few files, only so that a broken server cannot hang
        # the test run.
        deadline = time.monotonic() + TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            try:
                m = metrics(url)
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)  # not listening yet
                continue
            # A metric not shown yet is 0 (no file was ever queued in an empty directory).
            done = m.get('thread_work_total{role="traverse"}', 0) >= 1
            idle = ('thread_work_pending{role="scan"}', 'thread_busy{role="scan"}')
            if done and not any(m.get(name, 0) for name in idle):
                return Server(url, process)
            time.sleep(0.05)
        if process.poll() is None:
            Server(url, process).stop()
            break
        # It ended: most likely its port was taken meanwhile.
    pytest.fail(f"debuginfod did not start:\n{(directory / f'debuginfod-{port}.log').read_text()}")


def split(program: Path, index: Path) -> None:
    """``program`` as a distribution ships it: stripped (its symbol table kept) into ``index``,
    its DWARF in a separate debug file there; the file is gone from its own place."""
    index.mkdir(parents=True, exist_ok=True)
    stripped, debug = index / program.name, index / f"{program.name}.debug"
    shutil.copy(program, stripped)
    for cmd in (["objcopy", "--only-keep-debug", stripped, debug], ["strip", "-g", stripped]):
        assert run(cmd).returncode == 0
    program.unlink()
