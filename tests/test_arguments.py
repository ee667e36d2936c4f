"""The command line's arguments (``stackwalk._arguments``): every number a range that its help
gives, a usage error outside it (argparse's, one line naming the argument), and each command
run with each of its numeric arguments at its bounds."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores
from minidumps import Dumps
from perfdata import Recordings
from processes import running
from realstacks import Builder, Captures
from stackwalk._arguments import Bounded, _date, build_parser, parse_args

# The command lines of docs/ and the usual ones, which scripts depend on: each is read.
USUAL = [
    "perf perf.data",
    "perf perf.data --no-inline",
    "perf --no-inline perf.data",
    "perf perf.data --inline --json",
    "perf perf.data --collapsed",
    "perf perf.data --flamegraph out.svg",
    "perf a.data b.data --jobs 2 --max-frames 64 --perf-map-dir= --offline",
    "perf -",
    "core a.core",
    "core a.core ./program --json --sysroot /sys/root --lib-search-path /a:/b",
    "core a.core --debug-root /d --thread 12 --max-frames 40 --native-only",
    "core --dir spool --jobs 2 --strategies cfi --no-scan --no-inline --allow-mismatch",
    "core - --python --max-core-size 8G --perf-map /tmp/perf-1.map --registers",
    "minidump a.dmp b.dmp --symbols-path s1 --symbols-path s2 --symbols-url http://x/",
    "minidump a.dmp --format minidump-stackwalk --json --no-inline --offline",
    "pid 123 --json --thread 124 --native-only",
    "pid 123 --perf-map /tmp/perf-123.map --no-inline --debug-root /d --registers",
    "pid 123 --offline --sysroot /sys/root --lib-search-path /a:/b --strategies cfi --no-scan",
    "triage /spool --db crashes.sqlite --jobs 2 --dask local",
    "triage a.core b.dmp --db crashes.sqlite --rules r.toml --all-threads --json",
    "triage /spool --db c.sqlite --sysroot /r --debug-root /d --offline --max-core-size 1G",
    "report --db crashes.sqlite --top 10 --since 2026-11-01 --json",
    "report --db crashes.sqlite --html out.html",
    "unwind cap.json --json --baseline",
    "demo --json",
    "capture -b main -o cap.json ./program",
    "capture -b main -o cap.json --arch aarch64 --sysroot /usr/aarch64-linux-gnu ./program",
]


@pytest.mark.parametrize("line", USUAL)
def test_usual_command_lines_are_read(line: str) -> None:
    argv = line.split()
    args = parse_args(argv)
    assert args.command == argv[0]


@pytest.mark.parametrize("command", ["core", "minidump", "pid", "perf"])
def test_inline_frames_on_unless_no_inline(command: str) -> None:
    """Every command that shows inline frames takes --inline (the default) and --no-inline, as
    perf always did and core, minidump and pid took --no-inline."""
    file = "123" if command == "pid" else "x"
    assert parse_args([command, file]).inline is True
    assert parse_args([command, file, "--inline"]).inline is True
    assert parse_args([command, file, "--no-inline"]).inline is False


# Options that several commands take, each declared once (``_arguments._add_module_options``,
# ``_add_walk_options``...): the commands that take each one.
SHARED = {
    "--sysroot": {"core", "minidump", "pid", "triage", "perf", "unwind", "minidump-write"},
    "--lib-search-path": {"core", "minidump", "pid", "triage", "perf", "unwind", "minidump-write"},
    "--debug-root": {"core", "minidump", "pid", "triage", "perf", "unwind", "minidump-write"},
    "--offline": {"core", "minidump", "pid", "triage", "perf", "unwind", "minidump-write"},
    "--perf-map": {"core", "minidump", "pid"},
    "--inline": {"core", "minidump", "pid", "perf", "unwind", "demo"},
    "--registers": {"core", "minidump", "pid", "unwind", "demo"},
    "--no-scan": {"core", "minidump", "pid", "perf", "unwind", "demo"},
    "--strategies": {"core", "minidump", "pid", "perf", "unwind", "demo"},
    "--max-frames": {"core", "minidump", "pid", "perf", "unwind", "demo"},
    "--json": {"core", "minidump", "pid", "perf", "unwind", "demo", "triage", "report", "sframe"},
}


@pytest.mark.parametrize("option", sorted(SHARED))
def test_a_shared_option_is_the_same_in_every_command(option: str) -> None:
    """An option of several commands is in each of them that it names, with the same
    spellings, default and type everywhere, and but where its text names what differs (the
    JSON printed, the stack, perf's default strategies), the same help."""
    actions = {
        command: action
        for command, parser in _subparsers().items()
        for action in parser._actions
        if option in action.option_strings and command != "capture"  # capture's: for qemu
    }
    assert set(actions) == SHARED[option]
    first = next(iter(actions.values()))
    for command, action in actions.items():
        same = ("option_strings", "dest", "nargs", "type", "metavar")
        assert [getattr(action, a) for a in same] == [getattr(first, a) for a in same], command
        if option not in ("--json", "--strategies", "--max-frames"):
            assert (action.help, action.default) == (first.help, first.default), command
    if option == "--strategies":
        assert {a.default for a in actions.values()} == {"cfi,frame_pointer,scan",
                                                         "cfi,frame_pointer"}  # fmt: skip


# --- numeric options: each one a range, a usage error outside it --------------------------------
#
# Every option or positional argument that takes a number has a ``Bounded`` type, whose range its
# help says, and outside which the command line is argparse's usage error (exit 2): nothing past
# a bound reaches the commands (2**70 as --max-frames was an OverflowError from the native core),
# and the bounds themselves are values the commands take (the tests after these run each command
# with each of its numeric options at its bound, on real files).


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _name(action: argparse.Action) -> str:
    """An argument as argparse's messages name it: its long option, or its metavar."""
    if action.option_strings:
        return next((f for f in action.option_strings if f.startswith("--")),
                    action.option_strings[0])  # fmt: skip
    return str(action.metavar or action.dest)


def _action(command: str, name: str) -> argparse.Action:
    return next(a for a in _subparsers()[command]._actions if _name(a) == name)


def _bounds(command: str, name: str) -> Bounded:
    bounded = _action(command, name).type
    assert isinstance(bounded, Bounded)
    return bounded


# Metavars that say a number: an argument named so without a Bounded type fails the test below.
NUMBER_METAVARS = {"N", "SIZE", "TID", "PID", "COUNT", "SECONDS", "DURATION", "TIMEOUT", "BYTES"}


def numeric_arguments() -> list[tuple[str, str]]:
    """(command, argument) of every argument of every command that takes a number, from the
    parser itself."""
    return [
        (command, _name(action))
        for command, parser in _subparsers().items()
        for action in parser._actions
        if action.nargs != 0 and isinstance(action.type, Bounded)
    ]


NUMERIC = numeric_arguments()


def test_every_number_has_a_range_its_help_says() -> None:
    """Every argument that takes a value is a string (a path, a name, a list: no type), a date
    (its own range, the years ISO 8601 dates have here), or a number of a Bounded type, whose
    range its help gives and whose default lies in it: never argparse's bare int or float,
    which take any size."""
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if action.nargs == 0:
                continue  # a flag, --help
            name = f"{command} {_name(action)}"
            if isinstance(action.type, Bounded):
                assert action.help and action.type.span in action.help, (name, action.help)
                default = action.default
                assert default is None or action.type.low <= default <= action.type.high, name
            elif action.type is _date:
                assert action.help and "years 1 to 9999" in action.help, name
            else:
                assert action.type is None, f"{name}: of type {action.type!r}, not a Bounded"
                assert action.metavar not in NUMBER_METAVARS, f"{name}: a number with no range"
    # The list the tests below go through is the parser's (and it is not empty).
    assert {("core", "--max-frames"), ("perf", "--jobs"), ("pid", "PID"),
            ("triage", "--max-core-size"), ("report", "--top")} <= set(NUMERIC)  # fmt: skip


def command_line(command: str, name: str, value: str) -> list[str]:
    """A command line of ``command`` with ``value`` as its argument ``name`` (after '=' for an
    option, after '--' for a positional one), and what else it requires (a word for a
    positional argument, a Bounded one's lowest value)."""
    options, positionals = [], []
    for action in _subparsers()[command]._actions:
        if _name(action) == name:
            if action.option_strings:
                options.append(f"{name}={value}")
            else:
                positionals.append(value)
        elif not action.option_strings and action.nargs in (None, "+"):
            low = action.type.low if isinstance(action.type, Bounded) else None
            positionals.append("x" if low is None else str(low))
        elif action.required:
            options += [_name(action), "x"]
    return [command, *options, *(["--", *positionals] if positionals else [])]


def refused(bounded: Bounded) -> list[str]:
    """Values outside ``bounded``'s range, or no number at all."""
    values = [
        str(bounded.low - 1), str(bounded.high + 1), str(bounded.high * 10), str(2**70),
        str(-(2**70)), "-1", "9" * 5000, "-" + "9" * 5000, "nan", "inf", "-inf", "1e400",
        "1e3", "1.5", "0x10", "1_0", f"+{bounded.low}", f" {bounded.low}", f"{bounded.low} ",
        "", " ", "-", "2**70", "two", "\u0661",  # ARABIC-INDIC DIGIT ONE: int() takes it
    ]  # fmt: skip
    if bounded.units:
        top = max(bounded.units, key=bounded.units.__getitem__)
        values += [f"{(bounded.high >> bounded.units[top]) + 1}{top}", "0K", "-1K", "1Z",
                   "1.5G", "G", "1KB", "1 G", "1e3K"]  # fmt: skip
    else:
        values += ["1K", "8G"]
    return list(dict.fromkeys(values))


@pytest.mark.parametrize(
    ("command", "name", "value"),
    [
        pytest.param(command, name, value, id=f"{command} {name}={value[:24]!r}")
        for command, name in NUMERIC
        for value in refused(_bounds(command, name))
    ],
)
def test_a_value_out_of_range_is_a_usage_error(
    command: str, name: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = command_line(command, name, value)
    with pytest.raises(SystemExit) as exit:
        parse_args(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: stackwalk {command} "), err
    message = err.splitlines()[-1]
    assert message.startswith(f"stackwalk {command}: error: argument {name}: "), err
    assert len(message) < 300, message  # a long value cut short


@pytest.mark.parametrize(("command", "name"), NUMERIC)
def test_the_bounds_are_taken(command: str, name: str) -> None:
    """Each bound, and (a size) the largest multiple of each unit in range, is the value the
    command line gives."""
    bounded = _bounds(command, name)
    values = {str(bounded.low): bounded.low, str(bounded.high): bounded.high}
    for unit, shift in bounded.units.items():
        most = bounded.high >> shift
        values |= {f"{most}{unit}": most << shift, f"1{unit.lower()}": 1 << shift}
    dest = _action(command, name).dest
    for text, value in values.items():
        argv = command_line(command, name, text)
        assert getattr(parse_args(argv), dest) == value, text
        if "--" in argv:
            argv.remove("--")
            assert getattr(parse_args(argv), dest) == value, text


@pytest.mark.parametrize(("command", "name"), NUMERIC)
def test_the_command_says_so_in_one_line(command: str, name: str) -> None:
    """The installed command, given 2**70: its usage and one line naming the argument and its
    bound, exit status 2, nothing on stdout, no traceback."""
    bounded = _bounds(command, name)
    argv = command_line(command, name, str(2**70))
    proc = subprocess.run([sys.executable, "-m", "stackwalk", *argv], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"usage: stackwalk {command} ")
    unit = f" {bounded.unit}" if bounded.unit else ""
    assert proc.stderr.endswith(
        f"stackwalk {command}: error: argument {name}: must be at most {bounded.high}{unit}, "
        f"not {2**70}\n"
    ), proc.stderr


# --- each command run with its numeric arguments at their bounds, on real files ------------------

# The arguments each test below gives their highest value (the coverage test after them checks
# that this is every numeric argument of every command).
AT_THE_BOUNDS = {
    "core": {"--max-frames", "--max-core-size", "--thread", "--jobs"},
    "minidump": {"--max-frames", "--thread", "--jobs"},
    "perf": {"--max-frames", "--jobs"},
    "unwind": {"--max-frames"},
    "demo": {"--max-frames"},
    "pid": {"PID", "--thread", "--max-frames"},
    "triage": {"--jobs", "--max-core-size"},
    "report": {"--top"},
    "minidump-write": {"--stack-bytes", "--memory-around", "--max-core-size", "--pid"},
    "collect": {"--max-spool", "--max-read", "--timeout", "--stack-bytes", "--memory-around"},
}


def test_every_numeric_argument_is_run_at_its_bound() -> None:
    ran = {(command, name) for command, names in AT_THE_BOUNDS.items() for name in names}
    assert ran == set(NUMERIC)


def highest(command: str, name: str) -> str:
    assert name in AT_THE_BOUNDS[command]
    return str(_bounds(command, name).high)


def stackwalk(*args: str | Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "stackwalk", *map(str, args)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def no_thread(path: str | Path, tid: str, doc: dict[str, Any]) -> str:
    """The one line of ``core`` and ``minidump`` for a --thread the file does not have."""
    tids = ", ".join(str(t["tid"]) for t in doc["threads"])
    return f"stackwalk: error: {path}: no thread {tid} (threads: {tids})\n"


def test_core_at_the_bounds(cores: Cores, tmp_path: Path) -> None:
    """An xz-compressed core: --max-frames and --max-core-size at their highest give what no
    option gives; --max-frames 1 one frame per thread; a --max-core-size of its size reads it,
    1 does not; --thread at either bound is no thread of it; --jobs 256 reads a directory."""
    import lzma

    made = cores("deep")
    whole = made.path.read_bytes()
    packed = tmp_path / "deep.core.xz"
    packed.write_bytes(lzma.compress(whole, preset=0))
    base = [packed, made.executable, *made.cli_options, "--json"]
    plain = stackwalk("core", *base)
    assert plain.returncode in (0, 1), plain.stderr
    doc = json.loads(plain.stdout)
    most = stackwalk("core", *base, "--max-frames", highest("core", "--max-frames"),
                     "--max-core-size", highest("core", "--max-core-size"))  # fmt: skip
    assert (most.returncode, json.loads(most.stdout)) == (plain.returncode, doc)
    one = stackwalk("core", *base, "--max-frames", "1", "--max-core-size", str(len(whole)))
    threads = json.loads(one.stdout)["threads"]
    assert [sum(not f.get("inline") for f in t["frames"]) for t in threads] == [1] * len(threads)
    assert all(t["end"] == "frame_limit" for t in threads)
    small = stackwalk("core", *base, "--max-core-size", "1")
    assert small.returncode == 2 and small.stderr.count("\n") == 1, small.stderr
    assert "decompresses to more than 1 bytes" in small.stderr
    for tid in ("0", highest("core", "--thread")):
        proc = stackwalk("core", *base, "--thread", tid)
        assert (proc.returncode, proc.stderr) == (2, no_thread(packed, tid, doc))
    spool = tmp_path / "spool"
    spool.mkdir()
    for name in ("a.core", "b.core.xz"):
        (spool / name).symlink_to(made.path if name == "a.core" else packed)
    every = stackwalk("core", "--dir", spool, "--jobs", highest("core", "--jobs"), "--json")
    assert every.returncode == plain.returncode, every.stderr
    assert [json.loads(line)["threads"] for line in every.stdout.splitlines()] == [
        doc["threads"]
    ] * 2


def test_minidump_at_the_bounds(dumps: Dumps, tmp_path: Path) -> None:
    made = dumps("deep")
    plain = stackwalk("minidump", made.path, "--json")
    assert plain.returncode in (0, 1), plain.stderr
    doc = json.loads(plain.stdout)
    most = stackwalk("minidump", made.path, "--json", "--max-frames",
                     highest("minidump", "--max-frames"))  # fmt: skip
    assert (most.returncode, json.loads(most.stdout)) == (plain.returncode, doc)
    tid = highest("minidump", "--thread")
    proc = stackwalk("minidump", made.path, "--thread", tid)
    assert (proc.returncode, proc.stderr) == (2, no_thread(made.path, tid, doc))
    spool = tmp_path / "spool"
    spool.mkdir()
    for name in ("a.dmp", "b.dmp"):
        (spool / name).symlink_to(made.path)
    every = stackwalk("minidump", "--dir", spool, "--jobs", highest("minidump", "--jobs"),
                      "--json")  # fmt: skip
    assert every.returncode == plain.returncode, every.stderr
    assert [json.loads(line)["threads"] for line in every.stdout.splitlines()] == [
        doc["threads"]
    ] * 2


def test_perf_at_the_bounds(recordings: Recordings) -> None:
    recording = recordings("qsort")
    plain = stackwalk("perf", "--collapsed", recording.path)
    assert plain.returncode == 0 and plain.stdout, plain.stderr
    most = stackwalk("perf", "--collapsed", recording.path, "--jobs", highest("perf", "--jobs"),
                     "--max-frames", highest("perf", "--max-frames"))  # fmt: skip
    assert most.returncode == 0, most.stderr
    assert sorted(most.stdout.splitlines()) == sorted(plain.stdout.splitlines())


def test_unwind_and_demo_at_the_bound(build: Builder, captures: Captures, tmp_path: Path) -> None:
    """A capture unwound by either unwinder, and the demo, with --max-frames at its highest:
    the frames of no limit."""
    cap = captures([build("qsort.c", "-O2")], "compare_ints", core=True)
    cap.save(tmp_path / "stop.json")
    for unwinder in ([], ["--baseline"]):
        plain = stackwalk("unwind", *unwinder, "--json", tmp_path / "stop.json")
        assert plain.returncode == 0, plain.stderr
        most = stackwalk("unwind", *unwinder, "--json", tmp_path / "stop.json", "--max-frames",
                         highest("unwind", "--max-frames"))  # fmt: skip
        assert (most.returncode, json.loads(most.stdout)) == (0, json.loads(plain.stdout))
    demo = stackwalk("demo", "--max-frames", highest("demo", "--max-frames"))
    assert demo.returncode == 0, demo.stderr
    assert "frames: the same." in demo.stderr


def test_pid_at_the_bounds(build: Builder) -> None:
    """A running program with --max-frames at its highest and --thread its main thread; the
    highest pid and thread id, which no process or thread here has, are each one line."""
    program = build("pid_threads.c", "-O2", "-pthread")
    with running([str(program)]) as proc:
        most = stackwalk("pid", str(proc.pid), "--json", "--thread", str(proc.pid),
                         "--max-frames", highest("pid", "--max-frames"))  # fmt: skip
        assert most.returncode == 0, most.stderr
        [thread] = json.loads(most.stdout)["threads"]
        assert thread["tid"] == proc.pid and thread["end"] in ("end_of_stack", "pc_zero")
        tid = highest("pid", "--thread")
        other = stackwalk("pid", str(proc.pid), "--thread", tid)
        assert other.returncode == 2 and other.stderr.startswith(
            f"stackwalk: error: pid {proc.pid}: no thread {tid} (threads: "
        ), other.stderr
    pid = highest("pid", "PID")
    assert not Path(f"/proc/{pid}").exists()
    gone = stackwalk("pid", pid)
    assert (gone.returncode, gone.stderr) == (2, f"stackwalk: error: pid {pid}: no such process\n")


def test_minidump_write_at_the_bounds(cores: Cores, tmp_path: Path) -> None:
    """The highest --stack-bytes, --memory-around and --max-core-size write the dump the
    defaults write where the stacks and the memory around the registers are smaller than
    them; the lowest keep less; the highest pid is no process."""
    made = cores("deep")
    dumps = {}
    for name, options in (
        ("default", []),
        ("most", ["--stack-bytes", highest("minidump-write", "--stack-bytes"),
                  "--memory-around", highest("minidump-write", "--memory-around"),
                  "--max-core-size", highest("minidump-write", "--max-core-size")]),
        ("least", ["--stack-bytes", "1", "--memory-around", "0"]),
    ):  # fmt: skip
        out = tmp_path / f"{name}.dmp"
        proc = stackwalk("minidump-write", made.path, made.executable, "-o", out, *options)
        assert proc.returncode == 0, proc.stderr
        dumps[name] = out.stat().st_size
    assert dumps["least"] < dumps["default"] <= dumps["most"]
    pid = highest("minidump-write", "--pid")
    gone = stackwalk("minidump-write", "--pid", pid, "-o", tmp_path / "gone.dmp")
    assert (gone.returncode, gone.stderr) == (2, f"stackwalk: error: pid {pid}: no such process\n")


def test_collect_at_the_bounds(build: Builder, tmp_path: Path) -> None:
    """A core the kernel wrote, on collect's standard input: every limit at its highest collects
    it; at their lowest, the spool (--max-spool 1) keeps nothing of it; one byte read
    (--max-read 1) is a record of the error."""
    from test_collect import kernel_core

    core = kernel_core(build("crash_big.c", "-O2"), tmp_path / "cores")

    def collect(spool: Path, *options: str) -> subprocess.CompletedProcess[str]:
        with open(core, "rb") as f:
            return subprocess.run(
                [sys.executable, "-m", "stackwalk", "collect", "--spool", spool, *options,
                 "1", "2", "11", "3", "!x"],
                stdin=f, capture_output=True, text=True, timeout=300,
            )  # fmt: skip

    names = ("--max-spool", "--max-read", "--timeout", "--stack-bytes", "--memory-around")
    most = collect(tmp_path / "most", *(w for n in names for w in (n, highest("collect", n))))
    assert most.returncode == 0, most.stderr
    assert sorted(p.suffix for p in (tmp_path / "most").glob("3-1-11.*")) == [".dmp", ".json"]
    least = collect(tmp_path / "least", "--max-spool", "1", "--timeout", "1",
                    "--stack-bytes", "1", "--memory-around", "0")  # fmt: skip
    assert least.returncode == 0, least.stderr
    assert not list((tmp_path / "least").glob("3-1-11.*"))
    one = collect(tmp_path / "one", "--max-read", "1")
    assert one.returncode == 2 and one.stderr.count("\n") == 1, one.stderr
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "one").glob("*.json")]
    assert "ELF" in record["error"] or "header" in record["error"], record


def test_triage_and_report_at_the_bounds(cores: Cores, tmp_path: Path) -> None:
    import lzma

    made = cores("deep")
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.core").symlink_to(made.path)
    (spool / "b.core.xz").write_bytes(lzma.compress(made.path.read_bytes(), preset=0))
    db = tmp_path / "crashes.sqlite"
    proc = stackwalk("triage", spool, "--db", db, "--jobs", highest("triage", "--jobs"),
                     "--max-core-size", highest("triage", "--max-core-size"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("2 crashes stored, 0 already there; "), proc.stdout
    for top, shown in ((highest("report", "--top"), 1), ("1", 1)):
        report = stackwalk("report", "--db", db, "--json", "--top", top)
        assert report.returncode == 0, report.stderr
        buckets = json.loads(report.stdout)["buckets"]
        assert [b["count"] for b in buckets] == [2] * shown
