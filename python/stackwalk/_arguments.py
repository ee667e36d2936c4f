"""The ``stackwalk`` command line's arguments: a parser per command, built only for the
command run (see ``build_parser``). The commands themselves are in ``stackwalk.cli``."""

from __future__ import annotations

import argparse
import os
import sys

# Annotations only (see cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

DESCRIPTION = "The ``stackwalk`` command line."


def _date(text: str) -> float:
    """An argparse type: a date (2026-11-24) or time (2026-11-24T10:00) as Unix seconds, UTC
    unless the text names a zone."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (2026-11-24, ...)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def not_a_file(path: str) -> str:
    """Why ``path`` cannot be read as a module, where stat tells (it never opens it: a FIFO
    would block): " (is a FIFO)", " (no such file)"...; "" for a regular file."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f" ({e.strerror.lower()})" if e.strerror else ""
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return f" (is {what})"
    return ""


def _at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer ``what`` of ``minimum`` or more."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def _size(text: str) -> int:
    """An argparse type: a size in bytes, or with a binary K, M, G or T suffix ("512M")."""
    units = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
    number, unit = text[:-1] if text[-1:].isalpha() else text, text[-1:].upper()
    shift = units.get(unit if text[-1:].isalpha() else "")
    try:
        value = int(number)
    except ValueError:
        value = -1
    if shift is None or value < 1:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or 512M, 8G, ...)")
    return value << shift


_frame_count = _at_least(1, "a number of frames")
_count = _at_least(0, "a number")


def _jobs(text: str) -> int:
    """A worker count: 0 (one per CPU) up to the native core's MAX_JOBS, past which workers
    only exhaust the machine (100,000 of them never start)."""
    from stackwalk._core import MAX_JOBS

    value = _count(text)
    if value > MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_JOBS}, not {value}")
    return value


def _add_max_frames(parser: argparse.ArgumentParser, stack: str = "the captured stack") -> None:
    parser.add_argument(
        "--max-frames",
        type=_frame_count,
        metavar="N",
        help=f"stop each stack after N frames (default: no limit but what {stack} can hold, "
        "a frame taking at least one word)",
    )


def _add_python_mode(parser: argparse.ArgumentParser) -> None:
    """--native-only / --python: a python process's Python frames hidden, or shown alone."""
    group = parser.add_mutually_exclusive_group()
    group.set_defaults(python="mixed")
    group.add_argument(
        "--native-only",
        dest="python",
        action="store_const",
        const="native",
        help="no Python frames (by default, a python process's Python frames follow the "
        "native _PyEval_EvalFrameDefault call that runs them)",
    )
    group.add_argument(
        "--python",
        dest="python",
        action="store_const",
        const="python",
        help="only the Python frames of a python process",
    )


def _add_demo(sub: Any) -> None:
    d = sub.add_parser("demo", help="build a sample program, stop it under gdb, unwind its stack")
    d.add_argument("--json", action="store_true", help="print the trace as JSON")
    _add_max_frames(d)


def _add_capture(sub: Any) -> None:
    c = sub.add_parser("capture", help="run a program under gdb to a breakpoint, save its stack")
    c.add_argument("-b", "--breakpoint", required=True, help="function or file:line")
    c.add_argument("-o", "--output", required=True, help="capture file to write (JSON)")
    c.add_argument("--arch", choices=["x86_64", "aarch64", "i386"], help="default: the program's")
    c.add_argument("--sysroot", help="for aarch64 programs run under qemu")
    c.add_argument("program", nargs="+", help="the program and its arguments")


def _add_core(sub: Any) -> None:
    k = sub.add_parser("core", help="backtraces of every thread of an ELF core file")
    k.add_argument(
        "core",
        nargs="?",
        help="the core file (the kernel's, systemd-coredump's, gdb's gcore; compressed or not); "
        "- reads standard input",
    )
    k.add_argument("executable", nargs="?", help="the program (default: found from the core)")
    _add_dump_options(k, "core")
    _add_python_mode(k)
    k.add_argument(
        "--max-core-size",
        type=_size,
        metavar="SIZE",
        help="the most a compressed core (zstd, xz, lz4, gzip) may decompress to, in bytes "
        "or with K, M, G (default 8G); more is an error",
    )


def _add_minidump(sub: Any) -> None:
    m = sub.add_parser("minidump", help="backtraces of every thread of a minidump")
    m.add_argument(
        "minidumps",
        metavar="FILE",
        nargs="*",
        help="minidumps (Breakpad's, Crashpad's, minidump-writer's), one after another",
    )
    _add_dump_options(m, "minidump")
    m.add_argument(
        "--symbols-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a Breakpad symbol store (NAME/DEBUGID/NAME.sym, as dump_syms writes): names and "
        "lines of modules whose file is missing here or has no symbols (repeatable)",
    )
    m.add_argument(
        "--symbols-url",
        action="append",
        default=[],
        metavar="URL",
        help="a Breakpad symbol server (URL/NAME/DEBUGID/NAME.sym over HTTP), asked for what "
        "the --symbols-path stores lack; downloads are cached (repeatable)",
    )
    m.add_argument(
        "--format",
        choices=["stackwalk", "minidump-stackwalk"],
        default="stackwalk",
        help="the JSON's shape: stackwalk's (as core's), or what minidump-stackwalk --json prints",
    )
    _add_python_mode(m)


def _add_dump_options(k: argparse.ArgumentParser, what: str) -> None:
    """The options `core` and `minidump` share; ``what``: the kind of file, for their help."""
    k.add_argument("--json", action="store_true", help="one JSON document")
    k.add_argument("--sysroot", help="prefix every module path with DIR")
    k.add_argument(
        "--lib-search-path", metavar="PATHS", help="DIR[:DIR...] to find modules by name"
    )
    k.add_argument(
        "--dir",
        metavar="DIR",
        help="every file in DIR, in name order; a file that cannot be read gets a one-line "
        "error and the others go on",
    )
    k.add_argument(
        "--debug-root",
        metavar="DIR",
        default="/usr/lib/debug",
        help="where separate debug files are (.build-id/xx/yyyy.debug, .gnu_debuglink); "
        "default /usr/lib/debug",
    )
    _add_offline(k)
    k.add_argument("--thread", type=int, metavar="TID", help="only this thread")
    _add_max_frames(k)
    k.add_argument(
        "--strategies",
        default="cfi,frame_pointer,scan",
        metavar="LIST",
        help="how each frame's caller is looked for, tried in this order "
        "(default: cfi,frame_pointer,scan)",
    )
    k.add_argument("--no-scan", action="store_true", help="never scan the stack")
    k.add_argument(
        "--no-inline",
        action="store_true",
        help="no frames for the functions inlined at a pc (from DWARF, shown by default)",
    )
    k.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help=f"with --dir: {what}s read on N processes at once (default: one per CPU)",
    )
    k.add_argument(
        "--allow-mismatch",
        action="store_true",
        help=f"use a module file whose build id differs from the {what}'s (its frames are "
        "marked doubtful); by default such a file is treated as missing",
    )
    k.add_argument(
        "--perf-map",
        metavar="FILE",
        help="a JIT's perf map (/tmp/perf-PID.map): names for its code, outside every module",
    )


def _add_perf(sub: Any) -> None:
    pf = sub.add_parser("perf", help="unwind every sample of a perf record --call-graph dwarf file")
    pf.add_argument(
        "perf_data",
        metavar="PERF.DATA",
        nargs="+",
        help="one or more files, one after another; - reads standard input",
    )
    out = pf.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON Lines, one object per sample")
    out.add_argument("--collapsed", action="store_true", help="folded stacks with counts")
    out.add_argument("--flamegraph", metavar="OUT.svg", help="write an interactive SVG flame graph")
    pf.add_argument("--jobs", type=_jobs, default=0, help="worker threads (default: one per core)")
    pf.add_argument(
        "--inline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="frames for the functions inlined at each pc, and (--json) source file and line, "
        "from DWARF, as perf script shows them (default: on)",
    )
    pf.add_argument(
        "--perf-map-dir",
        metavar="DIR",
        default="/tmp",
        help="where the JIT's perf maps are (perf-PID.map, written by node --perf-basic-prof, "
        "the JVM's agents, python -X perf): names for JIT code, walked through by its frame "
        "pointers (default: /tmp, as perf; empty: none)",
    )
    _add_offline(pf)
    _add_max_frames(pf, "each sample's stack copy")


def _add_offline(parser: Any) -> None:
    parser.add_argument(
        "--offline",
        action="store_true",
        help="fetch nothing from the debuginfod servers of DEBUGINFOD_URLS (what their cache "
        "holds is still used); also STACKWALK_OFFLINE=1",
    )


def _add_unwind(sub: Any) -> None:
    u = sub.add_parser("unwind", help="unwind a saved capture")
    u.add_argument("capture", help="a file written by 'stackwalk capture'; - reads standard input")
    u.add_argument("--json", action="store_true", help="print the trace as JSON")
    u.add_argument("--baseline", action="store_true", help="use the pure-Python unwinder")
    _add_max_frames(u)


def _add_pid(sub: Any) -> None:
    p = sub.add_parser("pid", help="backtraces of every thread of a running process")
    p.add_argument("pid", type=int, metavar="PID", help="the process (stopped for milliseconds)")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--thread", type=int, metavar="TID", help="only this thread")
    _add_max_frames(p)
    p.add_argument("--debug-root", metavar="DIR", default="/usr/lib/debug")
    p.add_argument("--strategies", default="cfi,frame_pointer,scan", metavar="LIST")
    p.add_argument("--no-scan", action="store_true", help="never scan the stack")
    p.add_argument("--no-inline", action="store_true", help="no frames for inlined functions")
    p.add_argument(
        "--perf-map", metavar="FILE", help="a JIT's perf map (default: /tmp/perf-PID.map if any)"
    )
    _add_python_mode(p)


def _add_triage(sub: Any) -> None:
    t = sub.add_parser(
        "triage", help="read a spool of crashes into a database: signatures, buckets, counts"
    )
    t.add_argument("paths", nargs="+", metavar="PATH", help="crash files and directories of them")
    t.add_argument("--db", required=True, help="the SQLite crash store (made if missing)")
    t.add_argument("--jobs", type=_jobs, default=0, metavar="N", help="processes (default: CPUs)")
    t.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run on this dask.distributed scheduler ('local': a LocalCluster on this machine)",
    )
    t.add_argument("--rules", metavar="FILE", help="signature rules (TOML) added to the defaults")
    t.add_argument("--all-threads", action="store_true", help="store every thread's frames")
    t.add_argument("--json", action="store_true", help="one JSON line per crash stored")
    t.add_argument("--sysroot", help="prefix every module path with DIR")
    t.add_argument("--debug-root", metavar="DIR", default="/usr/lib/debug")
    t.add_argument("--max-core-size", type=_size, metavar="SIZE")


def _add_report(sub: Any) -> None:
    r = sub.add_parser("report", help="the buckets of a crash store, most crashes first")
    r.add_argument("--db", required=True, help="the SQLite crash store")
    r.add_argument("--top", type=_frame_count, metavar="N", help="the N biggest buckets")
    r.add_argument("--since", type=_date, metavar="DATE", help="crashes since DATE only")
    out = r.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON document")
    out.add_argument(
        "--html",
        metavar="OUT.html",
        help="write one static page: sortable table, stacks, chart",
    )


COMMANDS: dict[str, Callable[[Any], None]] = {
    "demo": _add_demo,
    "capture": _add_capture,
    "core": _add_core,
    "minidump": _add_minidump,
    "perf": _add_perf,
    "unwind": _add_unwind,
    "pid": _add_pid,
    "triage": _add_triage,
    "report": _add_report,
}


class _Version(argparse.Action):
    """--version: Cargo.toml's version, compiled into the extension (maturin gives the
    package's metadata the same; reading that would import importlib.metadata, 38 ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from stackwalk._core import __version__

        print(f"stackwalk {__version__}")
        parser.exit()


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, the terminal's width found without ``shutil`` (argparse
    makes a formatter for every argument added, and shutil's import alone is a few ms of a
    short command's start)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24) -> None:
        try:
            columns = int(os.environ["COLUMNS"])
        except (KeyError, ValueError):
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):  # no stdout, or not a terminal
                columns = 80
        super().__init__(prog, indent_increment, max_help_position, columns - 2)


class _Parser(argparse.ArgumentParser):
    """The command's parser and its subcommands' (argparse makes those of the parser's own
    class), with the formatter above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command` alone: building the
    others' (argparse looks up a translation of each help string) is a good
    part of a short run's start."""
    p = _Parser(prog="stackwalk", description=DESCRIPTION)
    p.add_argument("--version", action=_Version, help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for name, add in COMMANDS.items():
        if command is None or name == command:
            add(sub)
    return p
