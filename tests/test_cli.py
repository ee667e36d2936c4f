"""The command line's conventions, every command alike, through the real ``stackwalk`` command
on cores, captures and recordings made at test time: ``--version``, ``-`` for standard input,
a reader that goes away early (``| head -1``), ``unwind --baseline``."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import IO, Any

import pytest
from corefiles import Cores, eu_stack
from perfdata import PERF, RECORD, Recordings, perf_env
from realstacks import Builder, Captures

ROOT = Path(__file__).parent.parent
TIMEOUT = 120


def stackwalk(*args: str, stdin: Any = None, text: bool = True) -> subprocess.CompletedProcess[Any]:
    """``python -m stackwalk ARGS`` in a process of its own, its output captured."""
    command = [sys.executable, "-m", "stackwalk", *args]
    return subprocess.run(command, stdin=stdin, capture_output=True, text=text, timeout=TIMEOUT)


def head_1(*args: str, stdin: IO[bytes] | None = None) -> tuple[bytes, str, int]:
    """``stackwalk ARGS | head -1``: the first line, what the command said on stderr, and its
    exit status once the reader has gone."""
    command = [sys.executable, "-m", "stackwalk", *args]
    with subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        stderr = proc.stderr.read().decode(errors="replace")
        status = proc.wait(timeout=TIMEOUT)
    return first, stderr, status


def qsort_capture(build: Builder, captures: Captures) -> Any:
    """test_unwind_real.py's qsort case: a program stopped in qsort's comparison function."""
    return captures([build("qsort.c", "-O2")], "compare_ints", core=True)


# --- --version ----------------------------------------------------------------------------------


def test_version_is_the_packages() -> None:
    """The version is Cargo.toml's, which the package's metadata carries (pyproject.toml
    takes it from there: one place to change it), and the extension too: `--version` and
    `stackwalk.__version__` read it there, the installed metadata agreeing."""
    from importlib.metadata import version

    from stackwalk import __version__

    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert __version__ == version("stackwalk") == cargo
    proc = stackwalk("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"stackwalk {cargo}\n", "")


# --- - for standard input -----------------------------------------------------------------------


def test_unwind_capture_from_stdin(build: Builder, captures: Captures, tmp_path: Path) -> None:
    cap = qsort_capture(build, captures)
    cap.save(tmp_path / "stop.json")
    from_file = stackwalk("unwind", "--json", str(tmp_path / "stop.json"))
    assert from_file.returncode == 0, from_file.stderr
    with open(tmp_path / "stop.json", "rb") as f:
        piped = subprocess.run(["cat"], stdin=f, capture_output=True, check=True).stdout
    proc = subprocess.run([sys.executable, "-m", "stackwalk", "unwind", "--json", "-"],
                          input=piped, capture_output=True, timeout=TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ours, theirs = json.loads(proc.stdout), json.loads(from_file.stdout)
    assert (ours["path"], theirs["path"]) == ("<stdin>", str(tmp_path / "stop.json"))
    assert {**ours, "path": None} == {**theirs, "path": None}
    [thread] = ours["threads"]
    assert [int(f["pc"], 16) for f in thread["frames"] if not f["inline"]] == cap.gdb_pcs


@pytest.mark.parametrize("how", ["pipe", "redirect"])
def test_core_from_stdin(how: str, cores: Cores) -> None:
    """`stackwalk core - EXE`: the core on standard input, piped or redirected, gives the
    same report as the file (the frames eu-stack finds), named <stdin>."""
    made = cores("deep")
    options = ["--json", *made.cli_options]
    from_file = stackwalk("core", str(made.path), str(made.executable), *options)
    assert from_file.returncode == 0, from_file.stderr
    with open(made.path, "rb") as f:
        if how == "redirect":
            proc = stackwalk("core", "-", str(made.executable), *options, stdin=f, text=False)
        else:
            cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
            proc = stackwalk("core", "-", str(made.executable), *options, stdin=cat.stdout,
                             text=False)  # fmt: skip
            assert cat.stdout is not None
            cat.stdout.close()
            cat.wait(timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    ours, theirs = json.loads(proc.stdout), json.loads(from_file.stdout)
    assert ours["path"] == "<stdin>"
    assert {**ours, "path": theirs["path"]} == theirs
    reference = eu_stack(str(made.path), str(made.executable))
    for thread in ours["threads"]:
        assert [int(f["pc"], 16) for f in thread["frames"]] == reference.pcs(thread["tid"])


def test_core_from_stdin_that_is_no_core() -> None:
    """Bytes on standard input that are not a core: the one error line names <stdin>."""
    command = [sys.executable, "-m", "stackwalk", "core", "-"]
    proc = subprocess.run(command, input=b"not a core\n" * 10, capture_output=True, timeout=TIMEOUT)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2 and stderr.startswith("stackwalk: error: <stdin>: "), stderr
    assert len(stderr.splitlines()) == 1 and "stackwalk-stdin" not in stderr


def test_perf_from_stdin(recordings: Recordings, tmp_path: Path) -> None:
    """`stackwalk perf - < perf.data` reads the file in place; a recording piped in is
    perf record's pipe format (`perf record -o - | stackwalk perf -`), streamed: both give the
    file's samples. The file format through a pipe is one clear error naming <stdin>."""
    recording = recordings("qsort")
    from_file = stackwalk("perf", "--collapsed", str(recording.path))
    assert from_file.returncode == 0 and from_file.stdout, from_file.stderr
    with open(recording.path, "rb") as f:
        redirected = stackwalk("perf", "--collapsed", "-", stdin=f)
    assert (redirected.returncode, redirected.stdout) == (0, from_file.stdout), redirected.stderr
    streamed = tmp_path / "pipe.perf.data"
    with open(streamed, "wb") as out:
        cmd = [PERF, *RECORD, "-o", "-", "--", *recording.argv]
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, env=perf_env(recording.home))
    assert proc.returncode == 0, proc.stderr
    for path, status in ((streamed, 0), (recording.path, 2)):
        with open(path, "rb") as f:
            cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
            piped = stackwalk("perf", "--collapsed", "-", stdin=cat.stdout)
            assert cat.stdout is not None
            cat.stdout.close()
            cat.wait(timeout=TIMEOUT)
        if status == 0:
            assert piped.returncode == 0 and piped.stderr == "", piped.stderr
            assert piped.stdout == stackwalk("perf", "--collapsed", str(streamed)).stdout
            assert piped.stdout.count("\n") > 20
        else:
            assert (piped.returncode, piped.stdout) == (2, "")
            assert piped.stderr.startswith("stackwalk: error: <stdin>: "), piped.stderr
            assert piped.stderr.count("\n") == 1 and "perf record -o -" in piped.stderr
    twice = stackwalk("perf", "-", "-", stdin=subprocess.DEVNULL)
    assert twice.returncode == 2 and "standard input" in twice.stderr


# --- a reader that goes away: stackwalk ... | head -1 --------------------------------------------


def test_head_core(cores: Cores) -> None:
    """`stackwalk core --json CORE | head -1`: the document is more than a pipe holds, so the
    reader leaves before it is written; exit 0, nothing on stderr."""
    made = cores("python")
    first, stderr, status = head_1("core", "--json", str(made.path), str(made.executable))
    assert (first, stderr, status) == (b"{\n", "", 0)


@pytest.mark.parametrize("fmt", ["text", "--json"])
def test_head_perf(fmt: str, recordings: Recordings) -> None:
    """`stackwalk perf ... | head -1`: the Rust core writes the samples, and meets the closed
    pipe itself."""
    recording = recordings("qsort")
    options = [] if fmt == "text" else [fmt]
    whole = stackwalk("perf", *options, str(recording.path))
    assert whole.returncode == 0 and len(whole.stdout) > 1 << 17, "less than two pipes' worth"
    first, stderr, status = head_1("perf", *options, str(recording.path))
    assert (first.decode(), stderr, status) == (whole.stdout.splitlines(True)[0], "", 0)


def test_head_unwind(build: Builder, captures: Captures, tmp_path: Path) -> None:
    cap = qsort_capture(build, captures)
    cap.save(tmp_path / "stop.json")
    first, stderr, status = head_1("unwind", str(tmp_path / "stop.json"))
    assert (first, stderr, status) == (f"Capture {tmp_path / 'stop.json'}\n".encode(), "", 0)


# --- unwind --baseline --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "--json"])
def test_unwind_baseline(fmt: str, build: Builder, captures: Captures, tmp_path: Path) -> None:
    """The pure-Python baseline through the command: gdb's frames, the same frames (symbols,
    inlined functions and all) as the Rust core's; only the words of the end's detail differ."""
    cap = qsort_capture(build, captures)
    cap.save(tmp_path / "stop.json")
    options = [] if fmt == "text" else [fmt]
    rust = stackwalk("unwind", *options, str(tmp_path / "stop.json"))
    baseline = stackwalk("unwind", "--baseline", *options, str(tmp_path / "stop.json"))
    assert (baseline.returncode, baseline.stderr) == (0, ""), baseline.stderr
    assert rust.returncode == 0, rust.stderr
    if fmt == "text":  # written alike: the end's detail is not shown where the stack ended
        assert baseline.stdout == rust.stdout
        frames = [line for line in rust.stdout.splitlines() if line.startswith("#")]
        assert len([f for f in frames if not f.endswith("[inline]")]) == len(cap.gdb_pcs)
        assert "stopped early" not in rust.stdout
        return
    ours, theirs = json.loads(baseline.stdout), json.loads(rust.stdout)
    frames = ours["threads"][0]["frames"]
    assert [int(f["pc"], 16) for f in frames if not f["inline"]] == cap.gdb_pcs
    for doc in (ours, theirs):
        doc["threads"][0]["end_detail"] = None
    assert ours == theirs


def test_unwind_registers(build: Builder, captures: Captures, tmp_path: Path) -> None:
    """`unwind --registers`: frame 0's registers are the capture's, as `core --registers` gives
    a core's; the baseline keeps none, and says so (an error, status 2, not a document without
    them)."""
    cap = qsort_capture(build, captures)
    cap.save(tmp_path / "stop.json")
    proc = stackwalk("unwind", "--json", "--registers", str(tmp_path / "stop.json"))
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)["threads"][0]["frames"][0]
    assert {name: int(value, 16) for name, value in first["registers"].items()} == cap.regs
    proc = stackwalk("unwind", "--baseline", "--registers", str(tmp_path / "stop.json"))
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert "--registers: the baseline keeps no frame's registers" in proc.stderr


# --- the package ------------------------------------------------------------------------------


def test_licenses_are_in_the_package() -> None:
    """The license texts are in the installed package's .dist-info (the wheel maturin built for
    .venv, editable or not: the same metadata), and the metadata names them and the license."""
    from importlib.metadata import distribution

    dist = distribution("stackwalk")
    metadata = dist.metadata
    assert metadata["License-Expression"] == "MIT OR Apache-2.0"
    assert sorted(metadata.get_all("License-File") or []) == ["LICENSE", "LICENSE-APACHE"]
    for name in ("LICENSE", "LICENSE-APACHE"):
        assert dist.read_text(f"licenses/{name}") == (ROOT / name).read_text()
