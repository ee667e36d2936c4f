"""The hostile-input campaign's rule, checked on one input of each class of issue #44: every
run ends within 20 s with exit 0, 1 or 2, at most one line of error, a peak RSS under 2 GB under
``prlimit --as=4G``, and no control character of its input on the terminal (stdout, stderr).

Not a test (tests/test_hostile_*.py are, class by class): a measurement to run by hand and
quote, as the benches are. Each input is made here: a real core of tests/programs/deep.c,
decompression bombs made by the real compressors, a debuginfod server that trickles, FIFOs in
the place of inputs and outputs, file names with escape sequences and bytes that are not UTF-8,
a spool 1,100 directories deep.

Usage: python benches/hostile_campaign.py   (prints one line per run, then the worst figures)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests")]
from corefiles import bomb  # noqa: E402
from stackwalk.capture import capture  # noqa: E402

LIMIT_SECONDS, LIMIT_RSS_KB = 20, 2 << 20
ESCAPE = "\x1b]0;pwned\x07\x1b[2J"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class Trickle(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 30))
        self.end_headers()
        try:
            for _ in range(600):
                self.wfile.write(b"\x7f")
                self.wfile.flush()
                time.sleep(2)
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Run:
    name: str
    exit: int
    seconds: float
    rss_kb: int
    error_lines: int
    control: bool  # a control character in stdout or stderr
    traceback: bool  # a Python traceback or a Rust panic

    @property
    def ok(self) -> bool:
        return (self.exit in (0, 1, 2) and self.seconds <= LIMIT_SECONDS
                and self.rss_kb < LIMIT_RSS_KB and self.error_lines <= 1 and not self.control
                and not self.traceback)  # fmt: skip


def run(name: str, argv: list[str], env: dict[str, str] | None = None) -> Run:
    timing = Path(tempfile.mkstemp()[1])
    cmd = ["prlimit", "--as=4294967296", "/usr/bin/time", "-o", str(timing), "-f", "%e %M",
           sys.executable, "-m", "stackwalk", *argv]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, timeout=120, env={**os.environ, **(env or {})})
    wall = time.monotonic() - start
    seconds, rss = timing.read_text().split()[-2:]
    timing.unlink()
    out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    errors = [line for line in err.splitlines() if "error" in line]
    result = Run(
        name, proc.returncode, max(float(seconds), wall), int(rss), len(errors),
        bool(CONTROL.search(out) or CONTROL.search(err)),
        "Traceback" in err or "panicked" in err,
    )  # fmt: skip
    last = (errors or err.splitlines() or [""])[-1][:110]
    print(f"{'ok ' if result.ok else 'BAD'} {name:38} exit {proc.returncode} "
          f"{result.seconds:5.1f} s {result.rss_kb >> 10:5} MB  {last}", flush=True)  # fmt: skip
    return result


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="stackwalk-campaign-"))
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    program = work / "deep"
    subprocess.run(["gcc", "-O2", "-g", str(ROOT / "tests/programs/deep.c"), "-o", str(program)],
                   check=True)  # fmt: skip
    core = work / "deep.core"
    capture([str(program)], "stop_here", env=env, core_path=core, timeout=60)
    results = []
    for tool in ("zstd", "xz", "lz4", "gzip"):
        results.append(run(f"{tool} bomb, 8 GiB", ["core", str(bomb(tool, work, gib=8))]))
        path = bomb(tool, work, head=core.read_bytes(), gib=2)
        results.append(run(f"{tool} bomb behind a core's headers", ["core", str(path)]))
    spool = work / "spool"
    spool.mkdir()
    shutil.copy(core, spool / "core.1")
    shutil.copy(bomb("zstd", work, gib=8), spool / "core.2.zst")
    store = str(work / "crashes.sqlite")
    results.append(run("triage: a bomb in a spool", ["triage", str(spool), "--db", store]))
    # Names: escapes in a core's name, bytes that are not UTF-8, a spool 1,100 deep.
    named = work / f"core{ESCAPE}"
    shutil.copy(core, named)
    results.append(run("core named with escapes", ["core", str(named), str(program)]))
    odd = work / "odd"
    odd.mkdir()
    shutil.copy(os.fsencode(core), os.fsencode(odd) + b"/core.\xff\xfe")
    results.append(run("triage: a name not UTF-8", ["triage", str(odd), "--db", store]))
    deep = work / "deep-spool"
    subprocess.run(["mkdir", "-p", os.path.join(deep, *(["d"] * 1100))], check=True)
    shutil.copy(core, os.path.join(deep, *(["d"] * 1100), "core.1"))
    results.append(run("triage: 1,100 directories deep", ["triage", str(deep), "--db", store]))
    # FIFOs as inputs and outputs, a config file without end.
    fifo = work / "fifo"
    os.mkfifo(fifo)
    results.append(run("perf FIFO", ["perf", str(fifo)]))
    results.append(run("report --html FIFO", ["report", "--db", store, "--html", str(fifo)]))
    results.append(run("--rules /dev/zero", ["triage", str(spool), "--db", store,
                                             "--rules", "/dev/zero"]))  # fmt: skip
    results.append(run("--rules FIFO", ["triage", str(spool), "--db", store,
                                        "--rules", str(fifo)]))  # fmt: skip
    # A store that is another program's.
    foreign = work / "foreign.sqlite"
    subprocess.run([sys.executable, "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
                    "c.execute('create table invoices(n)'); c.commit()", str(foreign)],
                   check=True)  # fmt: skip
    results.append(run("triage into a foreign store", ["triage", str(spool), "--db",
                                                       str(foreign)]))  # fmt: skip
    # Numbers past any range.
    results.append(run("pid 2147483648", ["pid", "2147483648"]))
    results.append(run("--max-frames 2**70", ["core", str(core), "--max-frames", str(2**70)]))
    # A debuginfod server sending a byte every 2 s, the program gone: its file asked for.
    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hidden = work / "hidden"
    hidden.mkdir()
    shutil.move(program, hidden / "deep")
    url = f"http://127.0.0.1:{server.server_address[1]}"
    for timeout, maxtime in (("5", None), ("18446744073709551615", "10")):
        dbg = {"DEBUGINFOD_URLS": url, "DEBUGINFOD_CACHE_PATH": str(work / "dbgcache"),
               "DEBUGINFOD_TIMEOUT": timeout, **({"DEBUGINFOD_MAXTIME": maxtime} if maxtime
                                                 else {})}  # fmt: skip
        results.append(run(f"trickling debuginfod, timeout {timeout[:6]}", ["core", str(core)],
                           env=dbg))  # fmt: skip
    server.shutdown()
    subprocess.run(["rm", "-rf", str(work)], check=False)
    bad = [r.name for r in results if not r.ok]
    worst = max(r.seconds for r in results)
    verdict = "all within the rule" if not bad else "outside the rule: " + ", ".join(bad)
    print(
        f"{len(results)} runs: worst {worst:.1f} s, "
        f"{max(r.rss_kb for r in results) >> 10} MB peak RSS; {verdict}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
