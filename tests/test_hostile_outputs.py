"""Hostile names and hostile files around the command line's output (issue #44).

Terminal escapes: a crashing program's function names, its source file's name, its executable's
path and the name of its core are the input's, and may hold control characters (an escape
sequence that sets the terminal's title or clears the screen, a carriage return and a newline
that forge report lines). Every text output escapes them (``stackwalk.render.escape``: ``\\x1b``,
``\\n``, as Python writes them), on stdout and stderr alike; ``--json`` keeps them exact. The
program here is a real one: built from a source file whose name holds such characters, into an
executable whose name does, its function renamed in its symbol table and DWARF to one that
does (the same length, in place), then crashed and dumped (tests/minidumps.py: a minidump and
gdb's core of the same stop), run live (``pid``), captured under gdb (``capture``, ``unwind``),
triaged (``triage``, ``report``) and recorded (``perf``).

Files that block: every path a command reads as a file is refused at once unless it is a regular
file (a FIFO would wait for a writer forever, a device may never end), with one error line and
no traceback; a rules file is at most 1 MiB; every output file is written into a new file beside
it that then takes its name, so that a FIFO or a device at that name is refused, never opened.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest
from corefiles import CRASH_ENV, Spec
from minidumps import Dumps, MadeDump
from perfdata import Recordings, perf_record
from realstacks import Builder
from stackwalk._files import open_input, read_input, replacing, write_output
from stackwalk.errors import StackwalkError
from stackwalk.render import escape, escape_lines

# A special file given where a file is read or written is refused at once: the bound only turns
# a hang into a failure.
QUICK = 20
# A run that reads a real core, dump or recording.
SLOW = 120
ROOT = Path(__file__).resolve().parent.parent
MINIDUMP = ROOT / "tests" / "data" / "rust-minidump" / "linux-mini.dmp"

# The hostile names: an OSC that sets the terminal's title (ended by BEL), CSI sequences that
# clear the screen and move the cursor home, a carriage return and a newline followed by a
# forged report line, DEL; in the source file's name, a C1 CSI too (U+009B, which some
# terminals take as ESC [). (gdb's Python, in the C locale, cannot read a function name that
# is not ASCII: the function's name is.)
FUNCTION = "evil\x1b]0;pwned\x07\x1b[2J\x1b[H\r\n#1  0x0000000000000000 in forged\x7f"
SOURCE = "src\x1b]0;title\x07\x1b[31m\u009b2J.c"
# The source's directory. (Not the source's name, which is the executable's too: the kernel
# writes a newline in a mapped file's path as "\\012" in /proc/PID/maps, where gcore and the
# minidump writer find the modules, so such a program would be missing.)
SOURCE_DIR = "sources\x1b[2J\r\nThread 7 (crashed):"
CORE_NAME = "core\x1b[2J\x1b[H\r\nKilled by SIGKILL.core"
DUMP_NAME = "dump\x1b]0;pwned\x07\n.dmp"
# The function's name as the program is built with: an identifier as long as FUNCTION's bytes,
# replaced by them in the built executable (its .strtab, and DWARF's .debug_str).
PLACEHOLDER = "evil_" + "A" * (len(FUNCTION.encode()) - 5)
PROGRAM = """\
#include <unistd.h>

/* 0: crash here (a write through NULL); 1: wait here for a signal (pid, capture -b pause);
   2: spend some CPU time here (perf). */
__attribute__((noinline)) void PLACEHOLDER(volatile long *p, int mode)
{
    if (mode == 1)
        for (;;)
            pause();
    if (mode == 2) {
        for (long i = 0; i < 400000000L; i++)
            ++*p;
        return;
    }
    *p = 1;
}

int main(int argc, char **argv)
{
    volatile long x = 0;
    (void)argv;
    PLACEHOLDER(argc > 1 ? &x : 0, argc - 1);
    return 0;
}
""".replace("PLACEHOLDER", PLACEHOLDER)

# A raw control byte (the line end and the tab are layout), or a C1 control in UTF-8.
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def no_raw_controls(*outputs: bytes) -> None:
    """Each output is UTF-8 without a raw control character but line ends and tabs."""
    for out in outputs:
        out.decode()  # UTF-8 (a name's bytes that are not are escaped)
        found = RAW_CONTROL.search(out)
        assert found is None, (found, out[max(0, found.start() - 200) : found.end() + 200])


def stackwalk(
    *args: str | os.PathLike[str], timeout: float = SLOW
) -> subprocess.CompletedProcess[bytes]:
    """``python -m stackwalk ARGS`` in a process of its own, its output as bytes."""
    argv = [sys.executable, "-m", "stackwalk", *(os.fspath(a) for a in args)]
    return subprocess.run(argv, capture_output=True, timeout=timeout)


# --- the hostile program ------------------------------------------------------------------


@dataclass
class Hostile:
    """The hostile program, a minidump and a core of its crash under hostile names."""

    program: Path
    dump: Path
    core: Path
    made: MadeDump


@pytest.fixture(scope="module")
def hostile(
    build: Builder, dumps: Dumps, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hostile]:
    directory = tmp_path_factory.mktemp("hostile")
    source_dir = directory / SOURCE_DIR
    source_dir.mkdir()
    source = source_dir / SOURCE
    source.write_text(PROGRAM)
    spec = Spec("hostile-names", str(source), ("-O0",))
    # The build the dump's run uses (the builder makes each once): its function renamed first.
    program = build(spec.source, *spec.flags)
    data = program.read_bytes()
    assert data.count(PLACEHOLDER.encode()) >= 2  # .strtab, .debug_str
    program.write_bytes(data.replace(PLACEHOLDER.encode(), FUNCTION.encode()))
    assert "\x1b" in program.name  # the source's name, made the program's
    made = dumps.of(spec)
    dump = directory / DUMP_NAME
    core = directory / CORE_NAME
    dump.write_bytes(made.path.read_bytes())
    core.write_bytes(made.core.read_bytes())
    yield Hostile(program, dump, core, made)


def test_the_program_has_the_hostile_names(hostile: Hostile) -> None:
    """The names are where the test means them: gdb names the crashing frame FUNCTION."""
    (crashed,) = [t for t in hostile.made.gdb.threads if t.frames]
    assert crashed.frames[0].function == FUNCTION


def frames_of(doc: dict[str, object]) -> list[dict[str, object]]:
    threads = doc["threads"]
    assert isinstance(threads, list)
    return [f for t in threads for f in t["frames"]]


@pytest.mark.parametrize("command", ["core", "minidump"])
def test_text_reports_escape_names(hostile: Hostile, command: str) -> None:
    """``core`` and ``minidump``: the report names the function, its source file, the program
    and the file read, each escaped; stderr has no raw control either."""
    path = hostile.core if command == "core" else hostile.dump
    proc = stackwalk(command, path)
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
    no_raw_controls(proc.stdout, proc.stderr)
    text = proc.stdout.decode()
    assert escape(FUNCTION) in text
    assert escape(SOURCE) in text
    assert escape(str(hostile.program)) in text
    assert text.splitlines()[0].startswith(f"{command.title()} {escape(str(path))}")
    # The forged lines are not lines: only the report's own start a line with "#1 " or
    # "Killed by".
    assert not any(line.startswith("#1  0x0000000000000000 in forged") for line in text.split("\n"))
    assert sum(line.startswith("Killed by") for line in text.split("\n")) <= 1


@pytest.mark.parametrize("command", ["core", "minidump"])
def test_json_keeps_names_exact(hostile: Hostile, command: str) -> None:
    """``--json`` (and minidump's ``--format minidump-stackwalk``): the names exactly as the
    program has them (JSON escapes the control characters itself)."""
    path = hostile.core if command == "core" else hostile.dump
    proc = stackwalk(command, path, "--json")
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
    no_raw_controls(proc.stdout)
    doc = json.loads(proc.stdout)
    assert doc["path"] == str(path)
    frames = frames_of(doc)
    assert FUNCTION in [f["function"] for f in frames]
    assert any(str(f.get("file") or "").endswith(SOURCE) for f in frames)
    assert str(hostile.program) in [f["module"] for f in frames]
    if command == "minidump":
        proc = stackwalk(command, path, "--format", "minidump-stackwalk")
        no_raw_controls(proc.stdout)
        assert FUNCTION in [f["function"] for f in frames_of(json.loads(proc.stdout))]


def test_an_output_without_a_names_letters(hostile: Hostile, tmp_path: Path) -> None:
    """Standard output in an encoding that lacks a letter of a name (ASCII: a C locale's
    pipe): the text report writes it as a backslash escape, the JSON is ASCII (JSON's own
    escape, read back exactly); neither stops with a traceback, as the text did."""
    core = tmp_path / "café.core"
    core.write_bytes(hostile.core.read_bytes())
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for options in ((), ("--json",)):
        proc = subprocess.run([sys.executable, "-m", "stackwalk", "core", core, *options],
                              capture_output=True, env=env, timeout=SLOW)  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
        assert proc.stdout.isascii() and b"Traceback" not in proc.stderr
        if options:
            doc = json.loads(proc.stdout)
            assert doc["path"] == str(core) and FUNCTION in [f["function"] for f in frames_of(doc)]
        else:
            assert f"Core {tmp_path}/caf\\xe9.core".encode() in proc.stdout, proc.stdout[:200]


def test_pid_escapes_names(hostile: Hostile) -> None:
    """``pid``: the live program, waiting in FUNCTION: text escaped, JSON exact."""
    process = subprocess.Popen([hostile.program, "wait"], env=CRASH_ENV, stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.3)  # into pause()
        proc = stackwalk("pid", str(process.pid))
        assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
        no_raw_controls(proc.stdout, proc.stderr)
        assert escape(FUNCTION) in proc.stdout.decode()
        assert escape(str(hostile.program)) in proc.stdout.decode()
        proc = stackwalk("pid", str(process.pid), "--json")
        assert FUNCTION in [f["function"] for f in frames_of(json.loads(proc.stdout))]
    finally:
        process.kill()
        process.wait(timeout=SLOW)


def test_triage_and_report_escape_names(hostile: Hostile, tmp_path: Path) -> None:
    """``triage`` stores the crashes; ``report`` shows them escaped in its text and its page
    (which holds no raw control character either), exactly in its JSON."""
    db = tmp_path / "crashes.db"
    proc = stackwalk("triage", "--db", db, hostile.dump, hostile.core)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    no_raw_controls(proc.stdout, proc.stderr)
    proc = stackwalk("report", "--db", db)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    no_raw_controls(proc.stdout, proc.stderr)
    text = proc.stdout.decode()
    assert escape(FUNCTION) in text
    assert escape(str(hostile.dump)) in text or escape(str(hostile.core)) in text
    proc = stackwalk("report", "--db", db, "--json")
    doc = json.loads(proc.stdout)
    # (A signature makes every run of white space one space.)
    exact = FUNCTION.split("\r")[0]
    assert any(exact in b["signature"] for b in doc["buckets"]), doc["buckets"]
    page = tmp_path / "report.html"
    proc = stackwalk("report", "--db", db, "--html", page)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    html = page.read_bytes()
    no_raw_controls(html)
    assert escape(FUNCTION).replace("&", "&amp;") in html.decode()
    # The page's data keeps the signature exact.
    data = html.decode().split("<script type='application/json' id='data'>")[1]
    buckets = json.loads(data.split("</script>")[0].replace("<\\/", "</"))
    assert any(exact in b["signature"] for b in buckets)


def test_capture_and_unwind_escape_names(hostile: Hostile, tmp_path: Path) -> None:
    """``capture`` of the program stopped in pause() (called by FUNCTION), written under a
    hostile name; ``unwind`` of it: text escaped, JSON exact."""
    output = tmp_path / "capture\x1b[2J\n.json"
    proc = stackwalk("capture", "-b", "pause", "-o", output, hostile.program, "wait")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    no_raw_controls(proc.stdout, proc.stderr)
    assert escape(str(output)) in proc.stderr.decode()
    assert output.is_file() and os.listdir(tmp_path) == [output.name]
    proc = stackwalk("unwind", output)
    no_raw_controls(proc.stdout, proc.stderr)
    assert escape(FUNCTION) in proc.stdout.decode()
    proc = stackwalk("unwind", output, "--json")
    [thread] = json.loads(proc.stdout)["threads"]
    assert FUNCTION in [f["function"] for f in thread["frames"]]


@pytest.fixture(scope="module")
def hostile_recording(hostile: Hostile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``perf record --call-graph dwarf`` of the program busy in FUNCTION (its comm and its
    path the hostile ones), under a hostile name."""
    directory = tmp_path_factory.mktemp("hostile-perf")
    home = directory / "home"
    home.mkdir()
    recording = directory / "perf\x1b[2J\n.data"
    perf_record(directory / "perf.data", [hostile.program, "busy", "busy"], home)
    (directory / "perf.data").rename(recording)
    yield recording


def test_perf_messages_escape_names(hostile_recording: Path, tmp_path: Path) -> None:
    """``perf``'s own messages (a note, an error) name the recording escaped; its JSON keeps
    the function's name exact."""
    proc = stackwalk("perf", "--json", hostile_recording)
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
    no_raw_controls(proc.stderr)
    names = {f["function"] for line in proc.stdout.splitlines() for f in json.loads(line)["frames"]}
    assert FUNCTION in names
    # The flame graph's title is the recording's name, escaped: the SVG stays XML.
    svg = tmp_path / "out.svg"
    proc = stackwalk("perf", "--flamegraph", svg, hostile_recording)
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
    title = ElementTree.parse(svg).getroot().find(".//{http://www.w3.org/2000/svg}text")
    assert title is not None and title.text == escape(hostile_recording.name)
    cut = tmp_path / "cut\x1b]0;pwned\x07\n.data"
    cut.write_bytes(hostile_recording.read_bytes()[:5000])
    proc = stackwalk("perf", "--json", cut)
    no_raw_controls(proc.stderr)
    assert proc.stderr.decode().startswith(f"stackwalk: error: {escape(str(cut))}: ")


@pytest.mark.parametrize("form", ["text", "--collapsed"])
def test_perf_output_escapes_names(hostile_recording: Path, form: str) -> None:
    """perf's text and folded stacks (written by the native core) escape the names as the
    Python layer does: the hostile function name shows escaped, no raw control byte."""
    args = [] if form == "text" else [form]
    proc = stackwalk("perf", *args, hostile_recording)
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
    assert escape(FUNCTION) in proc.stdout.decode()
    no_raw_controls(proc.stdout, proc.stderr)


def test_messages_escape_paths(tmp_path: Path) -> None:
    """Errors name the file as given, escaped: from the native core (a FIFO given as a core),
    from Python (a FIFO given as a recording), and argparse's (an argument too many, as a
    glob of a spool's names gives)."""
    fifo = tmp_path / "fifo\x1b]0;pwned\x07\x1b[2J\r\nstackwalk: error: forged"
    os.mkfifo(fifo)
    cases: list[list[str | os.PathLike[str]]] = [
        ["core", fifo], ["minidump", fifo], ["perf", fifo], ["unwind", fifo],
        ["core", MINIDUMP, MINIDUMP, fifo],
    ]  # fmt: skip
    for args in cases:
        proc = stackwalk(*args, timeout=QUICK)
        assert proc.returncode == 2, proc
        no_raw_controls(proc.stdout, proc.stderr)
        lines = proc.stderr.decode().splitlines()
        assert escape(str(fifo)) in lines[-1], lines
        assert sum(line.startswith("stackwalk: error:") for line in lines) == 1, lines


# --- special files given as inputs ----------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def refused(args: Sequence[str | os.PathLike[str]], path: str | os.PathLike[str]) -> str:
    """The command's one error line, naming ``path``: at once, exit status 2, no traceback."""
    start = time.monotonic()
    proc = stackwalk(*args, timeout=QUICK)
    took = time.monotonic() - start
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err and took < QUICK / 2, (took, err)
    (line,) = err.splitlines()
    assert line.startswith(f"stackwalk: error: {escape(os.fspath(path))}") or line.startswith(
        f"stackwalk: error: rules {escape(os.fspath(path))}"
    ), line
    return line


SPECIAL = {
    "fifo": ("is a FIFO", None),
    "/dev/zero": ("is a character device", "/dev/zero"),
    "/dev/null": ("is a character device", "/dev/null"),
    "directory": ("is a directory", None),
}


def special_path(which: str, fifo: Path) -> Path:
    if which == "fifo":
        return fifo
    if which == "directory":
        return fifo.parent
    return Path(which)


@pytest.mark.parametrize("which", sorted(SPECIAL))
def test_perf_refuses_a_special_file(which: str, fifo: Path) -> None:
    """``perf FIFO`` waited for a writer forever; a device or a directory is refused too."""
    path = special_path(which, fifo)
    line = refused(["perf", path], path)
    assert line.startswith(f"stackwalk: error: {path}: {SPECIAL[which][0]}"), line
    if which == "fifo":  # and what to do instead
        assert line.endswith(f"(a recording through a pipe is read from standard input: "
                             f"stackwalk perf - < {path})")  # fmt: skip


@pytest.mark.parametrize("which", sorted(SPECIAL))
def test_rules_refuses_a_special_file(which: str, fifo: Path, tmp_path: Path) -> None:
    """``triage --rules FIFO`` waited forever, ``--rules /dev/zero`` read 7.4 GB before it
    failed: refused at once, before any crash is read."""
    path = special_path(which, fifo)
    db = tmp_path / "crashes.db"
    line = refused(["triage", "--db", db, "--rules", path, MINIDUMP], path)
    assert line == f"stackwalk: error: rules {path}: {SPECIAL[which][0]}"
    assert not db.exists()


def test_rules_are_at_most_a_mebibyte(tmp_path: Path) -> None:
    """A rules file of 1 MiB is read; one byte more is refused, unread."""
    rules = tmp_path / "rules.toml"
    line = 'prefix = ["a_long_enough_function_name_prefix"]\n'
    body = line + "#" * ((1 << 20) - len(line) - 1) + "\n"
    rules.write_text(body)
    db = tmp_path / "crashes.db"
    proc = stackwalk("triage", "--db", db, "--rules", rules, MINIDUMP, timeout=QUICK)
    assert proc.returncode == 0, proc.stderr.decode()
    rules.write_text(body + "#")
    line = refused(["triage", "--db", db, "--rules", rules, MINIDUMP], rules)
    assert line == (f"stackwalk: error: rules {rules}: {(1 << 20) + 1} bytes, more than "
                    f"{1 << 20} (the most it may have)")  # fmt: skip
    rules.write_bytes(b'prefix = ["\xff"]\n')
    line = refused(["triage", "--db", db, "--rules", rules, MINIDUMP], rules)
    assert "not UTF-8" in line


@pytest.mark.parametrize("which", ["fifo", "/dev/null", "directory"])
@pytest.mark.parametrize("command", ["triage", "report"])
def test_crash_store_refuses_a_special_file(command: str, which: str, fifo: Path) -> None:
    """``--db``: a crash store is a regular file (SQLite said "disk I/O error" of a FIFO)."""
    path = special_path(which, fifo)
    args: list[str | os.PathLike[str]] = ["report", "--db", path]
    if command == "triage":
        args = ["triage", "--db", path, MINIDUMP]
    line = refused(args, path)
    assert line == f"stackwalk: error: {path}: {SPECIAL[which][0]}, not a crash store"


@pytest.mark.parametrize("which", sorted(SPECIAL))
@pytest.mark.parametrize(
    "args",
    [
        ("core", "{}"),
        ("minidump", "{}"),
        ("unwind", "{}"),
        ("minidump", "--perf-map", "{}", "DMP"),
        ("core", "CORE", "{}"),
        ("core", "--perf-map", "{}", "CORE"),
    ],  # fmt: skip
    ids=["core", "minidump", "unwind", "minidump-perf-map", "executable", "core-perf-map"],
)
def test_inputs_the_native_core_refuses(
    args: tuple[str, ...], which: str, fifo: Path, hostile: Hostile
) -> None:
    """The inputs refused before this issue (the native core's ``open_regular``, the capture
    reader): still one line, at once."""
    path = special_path(which, fifo)
    files = {"{}": str(path), "DMP": str(MINIDUMP), "CORE": str(hostile.core)}
    argv = [files.get(a, a) for a in args]
    proc = stackwalk(*argv, timeout=QUICK)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    (line,) = err.splitlines()
    assert line.startswith("stackwalk: error:") and escape(str(path)) in line, line


# --- special files given as outputs ---------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A crash store of one minidump."""
    db = tmp_path_factory.mktemp("store") / "crashes.db"
    proc = stackwalk("triage", "--db", db, MINIDUMP, timeout=QUICK)
    assert proc.returncode == 0, proc.stderr.decode()
    return db


@pytest.fixture(scope="module")
def recording(recordings: Recordings) -> Path:
    return recordings("qsort").path


def output_args(option: str, out: Path, store: Path, recording: Path, build: Builder) -> list[str]:
    if option == "report --html":
        return ["report", "--db", str(store), "--html", str(out)]
    if option == "perf --flamegraph":
        return ["perf", "--flamegraph", str(out), str(recording)]
    program = build("qsort.c", "-O2")
    return ["capture", "-b", "compare_ints", "-o", str(out), str(program)]


OUTPUTS = ["report --html", "perf --flamegraph", "capture -o"]


@pytest.mark.parametrize("which", ["fifo", "/dev/null", "/dev/zero", "directory"])
@pytest.mark.parametrize("option", OUTPUTS)
def test_outputs_refuse_a_special_file(
    option: str, which: str, fifo: Path, store: Path, recording: Path, build: Builder
) -> None:
    """``report --html FIFO``, ``perf --flamegraph FIFO``, ``capture -o FIFO`` waited for a
    reader forever: refused at once, before the work, and the FIFO (or device) is left as it
    was, never opened nor replaced."""
    path = special_path(which, fifo)
    before = os.stat(path)
    line = refused(output_args(option, path, store, recording, build), path)
    assert line.endswith(f": {SPECIAL[which][0]}, not a file to write {_what(option)} to"), line
    after = os.stat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    if which in ("fifo", "directory"):
        assert sorted(os.listdir(fifo.parent)) == ["fifo"]


def _what(option: str) -> str:
    return {"report --html": "the page", "perf --flamegraph": "the flame graph",
            "capture -o": "the capture"}[option]  # fmt: skip


@pytest.mark.parametrize("option", OUTPUTS)
def test_outputs_refuse_a_link_to_a_special_file(
    option: str, fifo: Path, tmp_path: Path, store: Path, recording: Path, build: Builder
) -> None:
    """A symbolic link is followed, as a plain write follows it: to a FIFO, refused."""
    link = tmp_path / "out.link"
    link.symlink_to(fifo)
    line = refused(output_args(option, link, store, recording, build), link)
    assert "is a FIFO" in line
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("option", OUTPUTS)
def test_outputs_are_written_whole_in_place(
    option: str, tmp_path: Path, store: Path, recording: Path, build: Builder
) -> None:
    """A normal run writes the file: a new one (0666 less the umask), or in the place of one
    there, whose permissions it keeps; no temporary file is left; through a symbolic link,
    the file it names. A missing directory is an error before the work."""
    out = tmp_path / "out"
    proc = stackwalk(*output_args(option, out, store, recording, build))
    assert proc.returncode == 0, proc.stderr.decode()
    no_raw_controls(proc.stdout, proc.stderr)
    first = out.read_bytes()
    assert first
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()
    assert os.listdir(tmp_path) == ["out"]
    out.write_bytes(b"old")
    out.chmod(0o640)
    inode = out.stat().st_ino
    link = tmp_path / "link"
    link.symlink_to(out.name)
    proc = stackwalk(*output_args(option, link, store, recording, build))
    assert proc.returncode == 0, proc.stderr.decode()
    assert link.is_symlink() and out.read_bytes() not in (b"old", b"")
    assert out.stat().st_ino != inode  # a new file, renamed
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["link", "out"]
    missing = tmp_path / "no such directory" / "out"
    line = refused(output_args(option, missing, store, recording, build), missing)
    assert line.endswith(f": no such directory to write {_what(option)} in"), line


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --- the helpers themselves -----------------------------------------------------------------


def test_escape() -> None:
    """C0, DEL and C1 controls as Python's string escapes; a byte that was not UTF-8 (a lone
    surrogate of os.fsdecode) as the byte; the rest as it is, backslashes and non-ASCII
    letters included; escaping what is escaped changes nothing."""
    assert escape("main") == "main"
    assert escape("ns::f<int>(char const*) const") == "ns::f<int>(char const*) const"
    assert escape("C:\\Windows\\ntdll.dll") == "C:\\Windows\\ntdll.dll"
    assert escape("naïve ✓ café") == "naïve ✓ café"
    assert (
        escape("a\tb\nc\rd\x00e\x1b[2J\x7f\x85\x9b") == "a\\tb\\nc\\rd\\x00e\\x1b[2J\\x7f\\x85\\x9b"
    )
    assert escape(os.fsdecode(b"lib\xffx.so")) == "lib\\xffx.so"
    assert escape("\ud800") == "\\ud800"
    assert escape("\u00a0\u2028") == "\u00a0\u2028"  # not controls: as they are
    for text in (FUNCTION, SOURCE, CORE_NAME, os.fsdecode(b"\x80\xfe")):
        shown = escape(text)
        assert shown.isprintable() and escape(shown) == shown
    assert escape_lines("first\x1b\nsecond\r\n") == "first\\x1b\n  second\\r\n  "


def test_replacing_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    """An output whose writing fails leaves the file there as it was, and no temporary file."""
    out = tmp_path / "out.svg"
    out.write_text("old")
    with pytest.raises(RuntimeError), replacing(str(out), "the test") as temporary:
        Path(temporary).write_text("half")
        raise RuntimeError("the writer failed")
    assert out.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.svg"]
    write_output(str(out), "the test", "new")
    assert out.read_text() == "new" and os.listdir(tmp_path) == ["out.svg"]


def test_a_fifo_put_in_place_while_the_output_is_made(tmp_path: Path) -> None:
    """A FIFO put at the output's name while it was being made is not replaced."""
    out = tmp_path / "out"
    with pytest.raises(StackwalkError, match="is a FIFO"):
        with replacing(str(out), "the test") as temporary:
            Path(temporary).write_text("data")
            os.mkfifo(out)
    assert stat.S_ISFIFO(os.stat(out).st_mode)
    assert os.listdir(tmp_path) == ["out"]


def test_open_input_never_blocks(tmp_path: Path) -> None:
    """A FIFO given to open_input is refused without waiting for a writer (a child process
    makes a hang a failure), a regular file's descriptor reads it; read_input's limit."""
    code = (
        "import os, sys\n"
        "from stackwalk._files import open_input\n"
        "from stackwalk.errors import StackwalkError\n"
        "try:\n    open_input(sys.argv[1])\n"
        "except StackwalkError as e:\n    print(e)\n"
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-c", code, fifo], capture_output=True, text=True,
                          timeout=QUICK)  # fmt: skip
    assert proc.stdout == f"{fifo}: is a FIFO\n", proc.stderr
    regular = tmp_path / "file"
    regular.write_bytes(b"12345")
    fd = open_input(str(regular))
    try:
        assert os.read(fd, 10) == b"12345" and os.get_blocking(fd)
    finally:
        os.close(fd)
    assert read_input(str(regular), 5) == b"12345"
    with pytest.raises(StackwalkError, match="5 bytes, more than 4"):
        read_input(str(regular), 4)
