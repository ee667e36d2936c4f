"""The ``stackwalk`` command line's arguments: one argparse parser (``build_parser``), each
command's options declared by its ``_add_*`` function, and each option that several commands
take declared once, by the function that every one of them calls (``_add_module_options``,
``_add_walk_options``...). The commands themselves are in ``stackwalk.cli``."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, TypeAlias

from stackwalk._core import MAX_JOBS, __version__
from stackwalk.core import DEBUG_ROOT
from stackwalk.render import escape

# Where a command's options go: its parser, or one of its groups.
_Options: TypeAlias = argparse._ActionsContainer
# Where the commands go: the subparsers of the command line's parser (generic in typeshed only).
_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _date(text: str) -> float:
    """An argparse type: a date (2026-11-24) or time (2026-11-24T10:00) as Unix seconds, UTC
    unless the text names a zone."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (2026-11-24, ...)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def not_a_file(path: str) -> str:
    """Why ``path`` cannot be read as a module, where stat tells (it never opens it: a FIFO
    would block): " (is a FIFO)", " (no such file)"...; "" for a regular file."""
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


class Bounded:
    """An argparse type: a whole number from ``low`` to ``high`` (both taken) in ASCII
    decimal digits, a '-' before them at most; with ``units``, one of their letters (any case)
    may follow, a power of two by its exponent ("512M"). Anything else ('+5', ' 5', '1_000',
    '1.5', '1e3', 'nan', '0x10', a number past a bound however long) is a usage error saying
    the range. Every numeric argument has one, its range in its help (``span``), and each
    range is one that the value's destination takes as it is (the native core's u32, u64 or
    usize, the kernel's pid, SQLite's integer): never an OverflowError past the parsing.
    tests/test_arguments.py checks every numeric argument of every command at its bounds."""

    def __init__(
        self, what: str, low: int, high: int, units: dict[str, int] | None = None, unit: str = ""
    ) -> None:
        self.what, self.low, self.high = what, low, high
        self.units = units or {}
        self.unit = unit  # what the number counts, after it in the range ("bytes")

    @property
    def span(self) -> str:
        """The range, as the help says it: "1 to 4294967295"."""
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.low} to {self.high}{unit}"

    def __call__(self, text: str) -> int:
        digits, shift = text, 0
        if self.units and text[-1:].isascii() and text[-1:].isalpha():
            if text[-1:].upper() not in self.units:
                raise argparse.ArgumentTypeError(
                    f"not {self.what}: {_shown(text)} ({self.span}, or with "
                    f"{', '.join(self.units)}: 512M, 8G, ...)"
                )
            digits, shift = text[:-1], self.units[text[-1:].upper()]
        negative = digits[:1] == "-"
        magnitude = digits[1:] if negative else digits
        if not (magnitude.isascii() and magnitude.isdigit()):
            raise argparse.ArgumentTypeError(f"not {self.what}: {_shown(text)} ({self.span})")
        # A number longer than either bound is past it, unconverted (int() refuses more than
        # 4300 digits, and takes a while over fewer).
        longest = len(str(max(abs(self.low), abs(self.high))))
        if len(magnitude.lstrip("0")) > longest:
            value = None
        else:
            value = int(digits) << shift
        unit = f" {self.unit}" if self.unit else ""
        if value is None and negative or value is not None and value < self.low:
            raise argparse.ArgumentTypeError(
                f"must be at least {self.low}{unit}, not {_shown(text)}"
            )
        if value is None or value > self.high:
            raise argparse.ArgumentTypeError(
                f"must be at most {self.high}{unit}, not {_shown(text)}"
            )
        return value


def _shown(text: str) -> str:
    """``text`` as a message quotes it: a number as it is, anything else quoted, either cut
    short past 40 characters."""
    cut = text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} characters)"
    return cut if text.isascii() and text.lstrip("-").isdigit() else repr(cut)


# Frames of a stack: the native unwinder takes a usize (32 bits at least on any machine); and
# 2**32 frames of a word each would be a 32 GiB stack (Linux's default is 8 MiB).
_frame_count = Bounded("a number of frames", 1, 2**32 - 1)
# Sizes in bytes: a compressed core is decompressed into one buffer (a Rust Vec, which holds at
# most isize::MAX bytes), its limit passed as a u64.
_SIZE_UNITS = {"K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
_size = Bounded("a size", 1, 2**63 - 1, _SIZE_UNITS, "bytes")
# A core's thread, by its id in the file: a minidump's thread id is 32 bits, a core's
# NT_PRSTATUS pr_pid 32 bits too.
_file_tid = Bounded("a thread id", 0, 2**32 - 1)
# A running process or thread: Linux's pids are below PID_MAX_LIMIT, 2**22 (what pid_max can be
# raised to); the native core takes a pid as an i32.
_pid = Bounded("a process id", 1, 2**22 - 1)
_tid = Bounded("a thread id", 1, 2**22 - 1)
# A minidump's stacks: its offsets are 32 bits, so no part of it reaches 4 GiB; the memory
# around a register: at most 64 KiB on each side.
_stack_bytes = Bounded("a size", 1, 2**32 - 1, {"K": 10, "M": 20, "G": 30}, "bytes")
_around_bytes = Bounded("a number of bytes", 0, 2**17)
# The collector's wait on the kernel's pipe: at most a day.
_seconds = Bounded("a number of seconds", 1, 86400)
# Rows of a crash store: SQLite's integers (a LIMIT) are signed 64 bits.
_row_count = Bounded("a number", 1, 2**63 - 1)
# Workers: 0, one per CPU, up to the native core's MAX_JOBS, past which workers only exhaust
# the machine (100,000 of them never start).
_jobs = Bounded("a number of workers", 0, MAX_JOBS)

# --- the options several commands take, each declared here once ----------------------------


def _add_json(parser: _Options, what: str = "one JSON document") -> None:
    """--json; ``what``: the JSON the command then prints."""
    parser.add_argument("--json", action="store_true", help=what)


def _add_module_options(parser: _Options, *, perf_map: bool = True) -> None:
    """Where the files of the modules are found: --sysroot, --lib-search-path, --debug-root,
    --offline (debuginfod); with ``perf_map``, --perf-map (a JIT's names)."""
    parser.add_argument(
        "--sysroot",
        metavar="DIR",
        help="prefix every module path with DIR (the root of another machine's files, or a "
        "container's)",
    )
    parser.add_argument(
        "--lib-search-path",
        metavar="PATHS",
        help="DIR[:DIR...] to find modules by name (a Windows dump's PE files, an Apple dump's "
        "Mach-O files and NAME.dSYM bundles)",
    )
    parser.add_argument(
        "--debug-root",
        metavar="DIR",
        default=DEBUG_ROOT,
        help="where separate debug files are (.build-id/xx/yyyy.debug, .gnu_debuglink); "
        f"default {DEBUG_ROOT}",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="fetch nothing from the debuginfod servers of DEBUGINFOD_URLS (what their cache "
        "holds is still used); also STACKWALK_OFFLINE=1",
    )
    if perf_map:
        parser.add_argument(
            "--perf-map",
            metavar="FILE",
            help="a JIT's perf map (/tmp/perf-PID.map) or jitdump (jit-PID.dump): names for "
            "its code, outside every module, and a dump's unwind tables (by default the jitdump "
            "the process mapped; pid: else its own perf map, if there is one)",
        )


def _add_strategies(parser: _Options, default: str = "cfi,frame_pointer,scan") -> None:
    parser.add_argument(
        "--strategies",
        default=default,
        metavar="LIST",
        help="how each frame's caller is looked for where the one before fails, tried in this "
        f"order: cfi, frame_pointer, scan (default: {default})",
    )
    parser.add_argument("--no-scan", action="store_true", help="never scan the stack")


def _add_max_frames(parser: _Options, stack: str = "the captured stack", what: str = "") -> None:
    parser.add_argument(
        "--max-frames",
        type=_frame_count,
        metavar="N",
        help=f"stop each stack after N frames{what}, N from {_frame_count.span} (default: no "
        f"limit but what {stack} can hold, a frame taking at least one word)",
    )


def _add_inline(parser: _Options) -> None:
    parser.add_argument(
        "--inline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="frames for the functions inlined at each pc, from DWARF, as gdb and perf script "
        "show them (default: on; perf's --json has source lines only with them)",
    )


def _add_registers(parser: _Options) -> None:
    parser.add_argument(
        "--registers",
        action="store_true",
        help="each frame's registers as the walk recovered them, as a debugger shows them in "
        "that frame (pc, sp, the callee-saved registers; every one past a signal frame)",
    )


def _add_walk_options(parser: _Options) -> None:
    """How each thread's stack is walked and shown: --strategies and --no-scan, --max-frames,
    --inline / --no-inline, --registers."""
    _add_strategies(parser)
    _add_max_frames(parser)
    _add_inline(parser)
    _add_registers(parser)


def _add_thread(parser: _Options, tids: Bounded, what: str = "") -> None:
    parser.add_argument(
        "--thread", type=tids, metavar="TID", help=f"only this thread (TID: {tids.span}{what})"
    )


def _add_jobs(parser: _Options, what: str) -> None:
    """--jobs N; ``what``: what the N workers are."""
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help=f"{what}, N from {_jobs.span} (default, 0: one per CPU)",
    )


def _add_max_core_size(parser: _Options) -> None:
    parser.add_argument(
        "--max-core-size",
        type=_size,
        metavar="SIZE",
        help="the most a compressed core (zstd, xz, lz4, gzip) may decompress to, more being "
        f"an error: SIZE from {_size.span} (8E less one), a binary K, M, G, T, P or E after "
        "the number (512M, 8G; default 8G)",
    )


def _add_python_mode(parser: _Options) -> None:
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


def _add_dump_options(k: _Options, what: str) -> None:
    """The options `core` and `minidump` share; ``what``: the kind of file, for their help."""
    _add_json(k)
    _add_module_options(k)
    k.add_argument(
        "--dir",
        metavar="DIR",
        help="every file in DIR, in name order; a file that cannot be read gets a one-line "
        "error and the others go on",
    )
    _add_thread(k, _file_tid, f", a thread id as the {what} has it")
    _add_walk_options(k)
    _add_jobs(k, f"with --dir: {what}s read on N processes at once")
    k.add_argument(
        "--allow-mismatch",
        action="store_true",
        help=f"use a module file whose build id differs from the {what}'s (its frames are "
        "marked doubtful); by default such a file is treated as missing",
    )
    _add_python_mode(k)


# --- the commands ---------------------------------------------------------------------------


def _add_demo(sub: _Commands) -> None:
    d = sub.add_parser("demo", help="build a sample program, stop it under gdb, unwind its stack")
    _add_json(d, "print the trace as JSON")
    _add_walk_options(d)


def _add_capture(sub: _Commands) -> None:
    c = sub.add_parser("capture", help="run a program under gdb to a breakpoint, save its stack")
    c.add_argument("-b", "--breakpoint", required=True, help="function or file:line")
    c.add_argument("-o", "--output", required=True, help="capture file to write (JSON)")
    c.add_argument("--arch", choices=["x86_64", "aarch64", "i386"], help="default: the program's")
    # Not a reader's --sysroot: where qemu-user (-L) and gdb find a foreign program's libraries.
    c.add_argument("--sysroot", help="for aarch64 programs run under qemu")
    c.add_argument("program", nargs="+", help="the program and its arguments")


def _add_core(sub: _Commands) -> None:
    k = sub.add_parser("core", help="backtraces of every thread of an ELF core file")
    k.add_argument(
        "core",
        nargs="?",
        help="the core file (the kernel's, systemd-coredump's, gdb's gcore; compressed or not); "
        "- reads standard input",
    )
    k.add_argument("executable", nargs="?", help="the program (default: found from the core)")
    _add_dump_options(k, "core")
    _add_max_core_size(k)


def _add_minidump(sub: _Commands) -> None:
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
        "lines of modules whose file is missing here or has no symbols; an Apple dump's "
        "Mach-O files and dSYMs by UUID (UUID.dSYM, xx/yyyy.../executable|debuginfo) "
        "(repeatable)",
    )
    m.add_argument(
        "--symbols-url",
        action="append",
        default=[],
        metavar="URL",
        help="a Breakpad symbol server (URL/NAME/DEBUGID/NAME.sym over HTTP; an Apple dump's "
        "Mach-O files and dSYMs as URL/xx/yyyy.../executable|debuginfo), asked for what the "
        "--symbols-path stores lack; downloads are cached (repeatable)",
    )
    m.add_argument(
        "--format",
        choices=["stackwalk", "minidump-stackwalk"],
        default="stackwalk",
        help="the JSON's shape: stackwalk's (as core's), or what minidump-stackwalk --json prints",
    )


def _add_perf(sub: _Commands) -> None:
    pf = sub.add_parser("perf", help="unwind every sample of a perf record --call-graph dwarf file")
    pf.add_argument(
        "perf_data",
        metavar="PERF.DATA",
        nargs="+",
        help="one or more files, one after another; - reads standard input",
    )
    out = pf.add_mutually_exclusive_group()
    _add_json(out, "JSON Lines, one object per sample")
    out.add_argument("--collapsed", action="store_true", help="folded stacks with counts")
    out.add_argument("--flamegraph", metavar="OUT.svg", help="write an interactive SVG flame graph")
    _add_jobs(pf, "N worker threads")
    _add_inline(pf)
    pf.add_argument(
        "--perf-map-dir",
        metavar="DIR",
        default="/tmp",
        help="where the JIT's perf maps are (perf-PID.map, written by node --perf-basic-prof, "
        "the JVM's agents, python -X perf): names for JIT code, walked through by its frame "
        "pointers (default: /tmp, as perf; empty: none)",
    )
    _add_strategies(pf, "cfi,frame_pointer")
    _add_module_options(pf, perf_map=False)
    _add_max_frames(
        pf, "each sample's stack copy", ": N kernel and N user frames, as perf script --max-stack"
    )


def _add_unwind(sub: _Commands) -> None:
    u = sub.add_parser("unwind", help="unwind a saved capture")
    u.add_argument("capture", help="a file written by 'stackwalk capture'; - reads standard input")
    _add_json(u, "print the trace as JSON")
    u.add_argument(
        "--baseline", action="store_true", help="use the pure-Python unwinder (CFI alone)"
    )
    _add_module_options(u, perf_map=False)  # (a capture read on another machine)
    _add_walk_options(u)


def _add_pid(sub: _Commands) -> None:
    p = sub.add_parser("pid", help="backtraces of every thread of a running process")
    p.add_argument(
        "pid", type=_pid, metavar="PID", help=f"the process ({_pid.span}; stopped for milliseconds)"
    )
    _add_json(p)
    _add_module_options(p)
    _add_thread(p, _tid)
    _add_walk_options(p)
    _add_python_mode(p)


def _add_triage(sub: _Commands) -> None:
    t = sub.add_parser(
        "triage", help="read a spool of crashes into a database: signatures, buckets, counts"
    )
    t.add_argument("paths", nargs="+", metavar="PATH", help="crash files and directories of them")
    t.add_argument("--db", required=True, help="the SQLite crash store (made if missing)")
    _add_jobs(t, "N processes")
    t.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run on this dask.distributed scheduler ('local': a LocalCluster on this machine)",
    )
    t.add_argument(
        "--rules",
        metavar="FILE",
        help="signature rules (TOML: a regular file of at most 1 MiB) added to the defaults",
    )
    t.add_argument("--all-threads", action="store_true", help="store every thread's frames")
    _add_json(t, "one JSON line per file read, crash or not")
    _add_module_options(t, perf_map=False)
    _add_max_core_size(t)


def _add_report(sub: _Commands) -> None:
    r = sub.add_parser("report", help="the buckets of a crash store, most crashes first")
    r.add_argument("--db", required=True, help="the SQLite crash store")
    r.add_argument(
        "--top", type=_row_count, metavar="N", help=f"the N biggest buckets, {_row_count.span}"
    )
    r.add_argument(
        "--since",
        type=_date,
        metavar="DATE",
        help="crashes since DATE only (2026-11-24, or 2026-11-24T10:00, UTC unless a zone is "
        "given; years 1 to 9999)",
    )
    out = r.add_mutually_exclusive_group()
    _add_json(out)
    out.add_argument(
        "--html",
        metavar="OUT.html",
        help="write one static page: sortable table, stacks, chart",
    )
    out.add_argument(
        "--parquet",
        metavar="DIR",
        help="write the whole store as Parquet files, DIR/TABLE.parquet (crashes, frames, "
        "modules, buckets, bucket_builds), for DuckDB, Dask, Spark; needs stackwalk[arrow]",
    )


def _add_minidump_write(sub: _Commands) -> None:
    w = sub.add_parser(
        "minidump-write",
        help="write a core, or a running process, as a minidump (Crashpad's Linux streams)",
    )
    w.add_argument("core", nargs="?", help="the core file (or --pid PID)")
    w.add_argument("executable", nargs="?", help="the program (default: found from the core)")
    w.add_argument("--pid", type=_pid, metavar="PID", help=f"a running process ({_pid.span})")
    w.add_argument("-o", "--output", required=True, metavar="FILE", help="the minidump to write")
    _add_dump_sizes(w)
    _add_module_options(w, perf_map=False)
    _add_max_core_size(w)


def _add_collect(sub: _Commands) -> None:
    c = sub.add_parser(
        "collect",
        help="the core_pattern program: a crash's core, from standard input, into a spool as "
        "a minidump and a JSON record",
    )
    c.add_argument("--spool", required=True, metavar="DIR", help="where the crashes go (made)")
    c.add_argument(
        "--max-spool",
        type=_size,
        default=1 << 30,
        metavar="SIZE",
        help=f"the most the spool holds, its oldest crashes removed first: SIZE from {_size.span},"
        " a binary K, M, G, T, P or E after the number (default 1G)",
    )
    c.add_argument(
        "--max-read",
        type=_size,
        default=16 << 30,
        metavar="SIZE",
        help=f"the most bytes of the core read (the rest is left unread): SIZE from {_size.span}"
        " (default 16G)",
    )
    c.add_argument(
        "--timeout",
        type=_seconds,
        default=60,
        metavar="SECONDS",
        help=f"the most time spent reading the core, SECONDS from {_seconds.span} (default 60)",
    )
    _add_dump_sizes(c)
    c.add_argument(
        "crash",
        nargs="*",
        metavar="CRASH",
        help="what core_pattern gives: %%P %%i %%s %%t %%E (pid, thread id, signal, time, the "
        "executable's path with ! for /)",
    )


def _add_dump_sizes(parser: _Options) -> None:
    """How much of the process a minidump keeps: --stack-bytes, --memory-around."""
    parser.add_argument(
        "--stack-bytes",
        type=_stack_bytes,
        default=256 << 10,
        metavar="SIZE",
        help="the most of each thread's stack kept, from its sp up: SIZE from "
        f"{_stack_bytes.span}, a binary K, M or G after the number (default 256K)",
    )
    parser.add_argument(
        "--memory-around",
        type=_around_bytes,
        default=256,
        metavar="N",
        help="bytes kept around each thread's pc and each register pointing into the process's"
        f" memory, N from {_around_bytes.span} (default 256; 0: none)",
    )


def _add_sframe(sub: _Commands) -> None:
    s = sub.add_parser(
        "sframe", help="an ELF file's .sframe table: its rows, or checked against its .eh_frame"
    )
    s.add_argument("files", nargs="+", metavar="FILE", help="ELF files with a .sframe section")
    s.add_argument(
        "--verify",
        action="store_true",
        help="compare every row with the DWARF CFI at every address it covers; exit 1 where "
        "they disagree",
    )
    _add_json(s, "one JSON document per file, a line each")


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``stackwalk`` command line, every command's."""
    p = argparse.ArgumentParser(prog="stackwalk", description="The ``stackwalk`` command line.")
    p.add_argument(
        "--version",
        action="version",
        version=f"stackwalk {__version__}",  # Cargo.toml's, as the package's metadata
        help="print the version and exit",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_demo, _add_capture, _add_core, _add_minidump, _add_perf, _add_unwind,
                _add_pid, _add_triage, _add_report, _add_sframe,
                _add_minidump_write, _add_collect):  # fmt: skip
        add(sub)
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line's values; argparse prints help and errors (and exits)."""
    # argparse's messages quote the command line, whose words may be any file's name
    # (`stackwalk core /var/crash/*`): written with their control characters escaped.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Escaped(sys.stdout), _Escaped(sys.stderr)
    try:
        return build_parser().parse_args(argv)
    finally:
        sys.stdout, sys.stderr = streams


class _Escaped:
    """A text stream whose writes go to ``stream`` with their control characters escaped
    (``stackwalk.render.escape``): argparse's usage and help (its own text, written whole) with
    their line ends kept, a message (an error, which quotes the command line) as one line; the
    rest is the stream's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if text.startswith("usage:"):
            shown = "\n".join(map(escape, text.split("\n")))
        else:
            body, end = (text[:-1], "\n") if text.endswith("\n") else (text, "")
            shown = escape(body) + end
        return int(self.stream.write(shown))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
