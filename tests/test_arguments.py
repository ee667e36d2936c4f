"""The command line read without argparse (``stackwalk._arguments.read_plainly``) against argparse
itself (``stackwalk._parser``), from the same declarations: on every command line the plain
reading accepts, the two give the same values; what it declines (help, errors, abbreviations...)
argparse reads. And the installed ``stackwalk`` command imports neither argparse nor ``re`` for
a plain command line (they are a third of a short run)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores
from hypothesis import given, settings
from hypothesis import strategies as st
from stackwalk._arguments import COMMANDS, Namespace, _Spec, read_plainly


@cache
def _argparse_parser(command: str) -> Any:
    from stackwalk._parser import build_parser

    return build_parser(command)


def argparse_reading(argv: list[str]) -> Namespace | None:
    """What argparse makes of ``argv``, None where it exits (help, an error)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            args: Namespace = _argparse_parser(argv[0]).parse_args(argv, namespace=Namespace())
        except SystemExit:
            return None
    return args


def _options(command: str) -> list[tuple[str, list[str]]]:
    """Each option's spellings, with the values of VALUES its type takes (none for a flag)."""
    spec = _Spec()
    COMMANDS[command](spec)
    assert not spec.unread, f"{command}: a declaration the plain reading does not read"
    options = []
    for o in spec.options:
        if o.positional:
            continue
        taken = []
        if o.action in ("store", "append"):
            for value in VALUES:
                with contextlib.suppress(Exception):
                    o.value(value)
                    taken.append(value)
        options += [(name, taken) for name in (*o.flags, *o.names)]
    return options


# What a command line is made of: each command's options alone or with a value (as the next
# word or after '='), some of them cut short (argparse takes an unambiguous prefix); values of
# every kind the types take or refuse; files, and words that are neither.
VALUES = ["0", "1", "5", "-1", "-5", "x", "", "-", "a=b", "a b", "8G", "512M", "0M", "2026-11-24",
          "not-a-date", "x86_64", "mips", "stackwalk", "minidump-stackwalk", "cfi,scan",
          "100000"]  # fmt: skip
FILES = ["perf.data", "a.core", "123", "-", "b c"]
WORDS = ["--", "-h", "--help", "--version", "-x", "--nope"]


def _units(command: str) -> list[list[str]]:
    """The pieces, weighted: mostly options spelled out, with values their types take, and
    files, so that a good part of the command lines are ones both read."""
    options = _options(command)
    flags = [name for name, _ in options]
    cut = [f[:-2] for f in flags if f.startswith("--") and len(f) > 5]
    plain = [[f] if not taken else [f, v] for f, taken in options for v in taken or [""]]
    units = [[f] for f in flags] + [[f, v] for f in flags for v in VALUES]
    units += [[f"{f}={v}"] for f in flags for v in VALUES[:8]]
    odd = [[f] for f in cut] + [[f, v] for f in cut for v in VALUES[:3]] + [[w] for w in WORDS]
    files = [[w] for w in FILES] * (len(plain) // len(FILES))
    return plain * 4 + files + units + odd


@st.composite
def command_lines(draw: Any) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    units = draw(st.lists(st.sampled_from(_units(command)), max_size=5))
    return [command, *(word for unit in units for word in unit)]


@settings(max_examples=3000)
@given(command_lines())
def test_plain_reading_is_argparses(argv: list[str]) -> None:
    plain = read_plainly(argv)
    if plain is not None:
        assert plain == argparse_reading(argv), argv


# The command lines of the README and the usual ones: all of them read plainly.
USUAL = [
    "perf perf.data",
    "perf perf.data --no-inline",
    "perf --no-inline perf.data",
    "perf perf.data --json",
    "perf perf.data --collapsed",
    "perf perf.data --flamegraph out.svg",
    "perf a.data b.data --jobs 2 --max-frames 64 --perf-map-dir= --offline",
    "perf -",
    "core a.core",
    "core a.core ./program --json --sysroot /sys/root --lib-search-path /a:/b",
    "core a.core --debug-root /d --thread 12 --max-frames 40 --native-only",
    "core --dir spool --jobs 2 --strategies cfi --no-scan --no-inline --allow-mismatch",
    "core - --python --max-core-size 8G",
    "minidump a.dmp b.dmp --symbols-path s1 --symbols-path s2 --symbols-url http://x/",
    "minidump a.dmp --format minidump-stackwalk --json",
    "pid 123 --json --thread 124 --native-only",
    "pid 123 --perf-map /tmp/perf-123.map --no-inline",
    "triage /spool --db crashes.sqlite --jobs 2 --dask local",
    "triage a.core b.dmp --db crashes.sqlite --rules r.toml --all-threads --json",
    "report --db crashes.sqlite --top 10 --since 2026-11-01 --json",
    "report --db crashes.sqlite --html out.html",
    "unwind cap.json --json --baseline",
    "demo --json",
    "capture -b main -o cap.json ./program",
]


@pytest.mark.parametrize("line", USUAL)
def test_usual_command_lines_are_read_plainly(line: str) -> None:
    argv = line.split()
    plain = read_plainly(argv)
    assert plain is not None, "left to argparse"
    assert plain == argparse_reading(argv)


@pytest.mark.parametrize(
    "line",
    ["perf --no-inl perf.data", "perf perf.data --json --collapsed", "perf -h", "perf",
     "core a.core --thread x", "perf a.data --jobs -1", "report --db x --since 2026-13-01",
     "core a.core b c", "perf a.data --json b.data", "--version perf x"],
)  # fmt: skip
def test_others_are_left_to_argparse(line: str) -> None:
    """Abbreviations, conflicts, help, errors, a positional argument after an option after
    one: argparse reads them (its help and messages)."""
    assert read_plainly(line.split()) is None


def _imports(*args: str) -> tuple[int, set[str]]:
    """The installed ``stackwalk`` command run with ARGS: its exit status and every module it
    imported (Python's -X importtime, by its environment variable)."""
    script = Path(sys.executable).with_name("stackwalk")
    env = {"PYTHONPROFILEIMPORTTIME": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([str(script), *args], capture_output=True, text=True, env=env,
                          timeout=60)  # fmt: skip
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return proc.returncode, {line.rsplit("|", 1)[1].strip() for line in lines[1:]}


def test_a_plain_command_line_imports_no_argparse(tmp_path: Path) -> None:
    """The installed command (the wheel's own script: pip's generated ones import ``re``), on
    a plain command line, imports neither argparse nor ``re`` (``enum``, with ``re``, is a few ms
    of its own); an abbreviation is left to argparse, which reads it the same."""
    missing = str(tmp_path / "missing.data")
    status, imported = _imports("perf", "--no-inline", missing)
    assert status == 2 and "stackwalk.cli" in imported
    assert not {"argparse", "re", "enum"} & imported, sorted(imported)
    status, imported = _imports("perf", "--no-inl", missing)
    assert status == 2 and {"argparse", "stackwalk._parser"} <= imported


def test_a_core_imports_no_enum(cores: Cores) -> None:
    """``stackwalk core`` on a crash's core, signal named and all, imports none of argparse,
    ``re``, ``enum`` and ``signal`` (the signal's name is from stackwalk's own table)."""
    made = cores("deep")
    status, imported = _imports("core", str(made.path), str(made.executable), *made.cli_options)
    assert status == 0 and "stackwalk.core" in imported
    assert not {"argparse", "re", "enum", "signal"} & imported, sorted(imported)
