"""The ``stackwalk`` command line's arguments: each command's options, declared once (the
``_add_*`` functions below), read by argparse (``stackwalk._parser``) or, for the plain command
lines most runs are, by ``parse_args`` here without importing argparse (see ``_Spec``). The
commands themselves are in ``stackwalk.cli``."""

from __future__ import annotations

import os

from stackwalk._core import MAX_JOBS

# Annotations only (see cli.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

DESCRIPTION = "The ``stackwalk`` command line."
# argparse's BooleanOptionalAction (--inline / --no-inline), by the name stackwalk._parser
# registers it under: the declarations below do not import argparse.
BOOLEAN_OPTIONAL = "boolean_optional"


def _type_error(message: str) -> Exception:
    """An argparse type's error (its message is the one shown), argparse imported only then."""
    import argparse

    return argparse.ArgumentTypeError(message)


def _date(text: str) -> float:
    """An argparse type: a date (2026-11-24) or time (2026-11-24T10:00) as Unix seconds, UTC
    unless the text names a zone."""
    from datetime import datetime, timezone

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise _type_error(f"not a date: {text!r} (2026-11-24, ...)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
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
                raise _type_error(f"not {self.what}: {_shown(text)} ({self.span}, or with "
                                  f"{', '.join(self.units)}: 512M, 8G, ...)")  # fmt: skip
            digits, shift = text[:-1], self.units[text[-1:].upper()]
        negative = digits[:1] == "-"
        magnitude = digits[1:] if negative else digits
        if not (magnitude.isascii() and magnitude.isdigit()):
            raise _type_error(f"not {self.what}: {_shown(text)} ({self.span})")
        # A number longer than either bound is past it, unconverted (int() refuses more than
        # 4300 digits, and takes a while over fewer).
        longest = len(str(max(abs(self.low), abs(self.high))))
        if len(magnitude.lstrip("0")) > longest:
            value = None
        else:
            value = int(digits) << shift
        unit = f" {self.unit}" if self.unit else ""
        if value is None and negative or value is not None and value < self.low:
            raise _type_error(f"must be at least {self.low}{unit}, not {_shown(text)}")
        if value is None or value > self.high:
            raise _type_error(f"must be at most {self.high}{unit}, not {_shown(text)}")
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
# Rows of a crash store: SQLite's integers (a LIMIT) are signed 64 bits.
_row_count = Bounded("a number", 1, 2**63 - 1)
# Workers: 0, one per CPU, up to the native core's MAX_JOBS, past which workers only exhaust
# the machine (100,000 of them never start). (stackwalk's __init__ has imported _core already.)
_jobs = Bounded("a number of workers", 0, MAX_JOBS)
_MAX_CORE_SIZE_HELP = (
    "the most a compressed core (zstd, xz, lz4, gzip) may decompress to, more being an "
    f"error: SIZE from {_size.span} (8E less one), a binary K, M, G, T, P or E after the "
    "number (512M, 8G; default 8G)"
)


def _add_max_frames(parser: Any, stack: str = "the captured stack", what: str = "") -> None:
    parser.add_argument(
        "--max-frames",
        type=_frame_count,
        metavar="N",
        help=f"stop each stack after N frames{what}, N from {_frame_count.span} (default: no "
        f"limit but what {stack} can hold, a frame taking at least one word)",
    )


def _add_strategies(parser: Any, default: str = "cfi,frame_pointer,scan") -> None:
    parser.add_argument(
        "--strategies",
        default=default,
        metavar="LIST",
        help="how each frame's caller is looked for where the one before fails, tried in this "
        f"order: cfi, frame_pointer, scan (default: {default})",
    )
    parser.add_argument("--no-scan", action="store_true", help="never scan the stack")


def _add_python_mode(parser: Any) -> None:
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
        help=_MAX_CORE_SIZE_HELP,
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


def _add_dump_options(k: Any, what: str) -> None:
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
    k.add_argument(
        "--thread",
        type=_file_tid,
        metavar="TID",
        help=f"only this thread (TID: {_file_tid.span}, a thread id as the {what} has it)",
    )
    _add_max_frames(k)
    _add_strategies(k)
    k.add_argument(
        "--no-inline",
        action="store_true",
        help="no frames for the functions inlined at a pc (from DWARF, shown by default)",
    )
    _add_registers(k)
    k.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help=f"with --dir: {what}s read on N processes at once, N from {_jobs.span} "
        "(default, 0: one per CPU)",
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
    pf.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help=f"N worker threads, {_jobs.span} (default, 0: one per CPU)",
    )
    pf.add_argument(
        "--inline",
        action=BOOLEAN_OPTIONAL,
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
    _add_strategies(pf, "cfi,frame_pointer")
    _add_offline(pf)
    _add_max_frames(
        pf, "each sample's stack copy", ": N kernel and N user frames, as perf script --max-stack"
    )


def _add_registers(parser: Any) -> None:
    parser.add_argument(
        "--registers",
        action="store_true",
        help="each frame's registers as the walk recovered them, as a debugger shows them in "
        "that frame (pc, sp, the callee-saved registers; every one past a signal frame)",
    )


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
    p.add_argument(
        "pid", type=_pid, metavar="PID", help=f"the process ({_pid.span}; stopped for milliseconds)"
    )
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument(
        "--thread", type=_tid, metavar="TID", help=f"only this thread (TID: {_tid.span})"
    )
    _add_max_frames(p)
    p.add_argument("--debug-root", metavar="DIR", default="/usr/lib/debug")
    _add_strategies(p)
    p.add_argument("--no-inline", action="store_true", help="no frames for inlined functions")
    _add_registers(p)
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
    t.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help=f"N processes, {_jobs.span} (default, 0: one per CPU)",
    )
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
    t.add_argument("--json", action="store_true", help="one JSON line per file read, crash or not")
    t.add_argument("--sysroot", help="prefix every module path with DIR")
    t.add_argument("--debug-root", metavar="DIR", default="/usr/lib/debug")
    t.add_argument("--max-core-size", type=_size, metavar="SIZE", help=_MAX_CORE_SIZE_HELP)


def _add_report(sub: Any) -> None:
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


class Namespace:
    """A command line's values, as attributes (argparse's Namespace, which both readers fill:
    ``parse_args`` below, and argparse given one to fill)."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)  # for the type checker: any attribute, of any type

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Namespace) and vars(self) == vars(other)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"Namespace({values})"


class _Declined(Exception):
    """A command line ``_Spec.parse`` leaves to argparse (see there)."""


class _Option:
    """One add_argument's declaration, as ``_Spec.parse`` reads it."""

    def __init__(self, flags: tuple[str, ...], group: int | None, declared: dict[str, Any]):
        known = {"action", "type", "metavar", "help", "default", "dest", "const", "choices",
                 "required", "nargs"}  # fmt: skip
        if not flags or not known.issuperset(declared):
            raise _Declined
        self.flags, self.group = flags, group
        self.positional = not flags[0].startswith("-")
        self.action = declared.get("action", "store")
        self.nargs = declared.get("nargs")
        self.type: Callable[[str], Any] | None = declared.get("type")
        self.choices = declared.get("choices")
        self.required = bool(declared.get("required"))
        self.const = declared.get("const")
        supported = ("store",) if self.positional else (
            "store", "store_true", "store_const", "append", BOOLEAN_OPTIONAL)  # fmt: skip
        if self.action not in supported or (self.nargs is not None and not self.positional):
            raise _Declined
        if self.positional:
            if self.nargs not in (None, "?", "*", "+") or len(flags) != 1:
                raise _Declined
            self.dest = declared.get("dest", flags[0])
        else:
            long = next((f for f in flags if f.startswith("--")), flags[0])
            self.dest = declared.get("dest", long.lstrip("-").replace("-", "_"))
        default = False if self.action == "store_true" else None
        self.default = declared.get("default", default)
        negative = self.action == BOOLEAN_OPTIONAL
        self.names = [f"--no-{f[2:]}" for f in flags if negative and f.startswith("--")]

    def value(self, text: str) -> Any:
        """``text`` converted by the declared type and checked against the choices, as argparse
        does (any failure: argparse's message)."""
        try:
            value = text if self.type is None else self.type(text)
        except Exception:
            raise _Declined from None
        if self.choices is not None and value not in self.choices:
            raise _Declined
        return value


class _Spec:
    """A command's declarations, recorded by the same ``_add_*`` functions that give argparse
    its parser (as its ``add_parser``, ``add_argument``, ``add_mutually_exclusive_group`` and
    ``set_defaults``), and ``parse``, which reads the plain command lines that are most runs
    (options spelled out in full, one run of positional arguments) as argparse reads them, and
    declines the rest (help, errors, abbreviations, ``--``, a positional after an option after a
    positional, a value that starts with a dash...), which argparse then reads, with its own
    messages. ``tests/test_arguments.py`` checks the two against each other."""

    def __init__(self) -> None:
        self.options: list[_Option] = []
        self.defaults: dict[str, Any] = {}
        self.groups: list[bool] = []  # each exclusive group's `required`
        self.unread = False  # something declared that parse does not read

    # The declarations.
    def add_parser(self, name: str, **_: Any) -> _Spec:
        return self

    def add_argument(self, *flags: str, **declared: Any) -> None:
        self.add_to(None, flags, declared)

    def add_to(self, group: int | None, flags: tuple[str, ...], declared: dict[str, Any]) -> None:
        try:
            option = _Option(flags, group, declared)
        except _Declined:
            self.unread = True
            return
        if "default" not in declared and option.dest in self.defaults:
            option.default = self.defaults[option.dest]  # as argparse's add_argument
        self.options.append(option)

    def add_mutually_exclusive_group(self, required: bool = False) -> _Group:
        self.groups.append(required)
        return _Group(self, len(self.groups) - 1)

    def set_defaults(self, **defaults: Any) -> None:
        self.defaults.update(defaults)
        for option in self.options:
            if option.dest in defaults:
                option.default = defaults[option.dest]

    def parse(self, args: Sequence[str]) -> dict[str, Any]:
        """``args`` (after the command's name) read as argparse reads them (each value by its
        name), or _Declined."""
        if self.unread:
            raise _Declined
        by_flag = {name: o for o in self.options for name in (*o.flags, *o.names)}
        given: dict[str, Any] = {}
        seen: list[_Option] = []
        words: list[str] = []  # the positional arguments, one run of them
        after_words = False
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if not arg.startswith("-") or arg == "-":
                if after_words:
                    raise _Declined  # argparse would take the first run only
                words.append(arg)
                continue
            after_words = bool(words)
            flag, equals, text = arg.partition("=")
            option = by_flag.get(flag)
            if option is None:
                raise _Declined  # help, an abbreviation, --, a mistake...
            if option.group is not None and any(
                o.group == option.group and o is not option for o in seen
            ):
                raise _Declined  # two of an exclusive group
            seen.append(option)
            if option.action in ("store", "append"):
                if not equals:
                    if i == len(args) or (args[i].startswith("-") and args[i] != "-"):
                        raise _Declined
                    text, i = args[i], i + 1
                value = option.value(text)
                if option.action == "append":
                    value = [*given.get(option.dest, option.default or []), value]
                given[option.dest] = value
            elif equals:
                raise _Declined  # a flag given a value
            elif option.action == "store_true":
                given[option.dest] = True
            elif option.action == "store_const":
                given[option.dest] = option.const
            else:  # --x / --no-x
                given[option.dest] = flag in option.flags
        for option in self.options:
            if option.required and option not in seen:
                raise _Declined
        for group, required in enumerate(self.groups):
            if required and not any(o.group == group for o in seen):
                raise _Declined
        given.update(self._positionals(words))
        values: dict[str, Any] = {}
        for option in self.options:
            if isinstance(option.default, str) and (
                option.type is not None or (option.positional and option.choices is not None)
            ):
                raise _Declined  # argparse converts (and checks) such a default: none is now
            values.setdefault(option.dest, option.default)
        for dest, default in self.defaults.items():
            values.setdefault(dest, default)
        values.update(given)
        return values

    def _positionals(self, words: list[str]) -> dict[str, Any]:
        """The run of positional arguments, given to the positionals in order, each taking as
        many as it can while leaving the later ones theirs (argparse's regular expression);
        any left over, or too few: _Declined."""
        positionals = [o for o in self.options if o.positional]
        least = [1 if o.nargs in (None, "+") else 0 for o in positionals]
        values: dict[str, Any] = {}
        start = 0
        for k, option in enumerate(positionals):
            room = len(words) - start - sum(least[k + 1 :])
            most = 1 if option.nargs in (None, "?") else room
            count = min(most, room)
            if count < least[k]:
                raise _Declined
            taken = [option.value(w) for w in words[start : start + count]]
            start += count
            if option.nargs in (None, "?") and taken:
                values[option.dest] = taken[0]
            elif option.nargs == "?":
                values[option.dest] = option.default
            elif option.nargs == "*" and not taken and option.default is not None:
                values[option.dest] = option.default
            else:
                values[option.dest] = taken
        if start != len(words):
            raise _Declined
        return values


class _Group:
    """An exclusive group of a ``_Spec``: its add_argument and set_defaults are the spec's."""

    def __init__(self, spec: _Spec, index: int) -> None:
        self.spec, self.index = spec, index

    def add_argument(self, *flags: str, **declared: Any) -> None:
        self.spec.add_to(self.index, flags, declared)

    def set_defaults(self, **defaults: Any) -> None:
        self.spec.set_defaults(**defaults)


def read_plainly(argv: Sequence[str]) -> Namespace | None:
    """``argv`` read without argparse, if it is a plain command line (see ``_Spec``)."""
    if not argv or argv[0] not in COMMANDS:
        return None
    spec = _Spec()
    COMMANDS[argv[0]](spec)
    try:
        return Namespace(command=argv[0], **spec.parse(argv[1:]))
    except _Declined:
        return None


def parse_args(argv: Sequence[str]) -> Namespace:
    """The command line's values: read plainly where it can be, else by argparse, which
    prints help and errors (and exits)."""
    args = read_plainly(argv)
    if args is None:
        import sys

        from stackwalk._parser import build_parser

        command = argv[0] if argv and argv[0] in COMMANDS else None
        # argparse's messages quote the command line, whose words may be any file's name
        # (`stackwalk core /var/crash/*`): written with their control characters escaped.
        streams = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Escaped(sys.stdout), _Escaped(sys.stderr)
        try:
            args = build_parser(command).parse_args(argv, namespace=Namespace())
        finally:
            sys.stdout, sys.stderr = streams
    return args


class _Escaped:
    """A text stream whose writes go to ``stream`` with their control characters escaped
    (``stackwalk.render.escape``): argparse's usage and help (its own text, written whole) with
    their line ends kept, a message (an error, which quotes the command line) as one line; the
    rest is the stream's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        from stackwalk.render import escape

        if text.startswith("usage:"):
            shown = "\n".join(map(escape, text.split("\n")))
        else:
            body, end = (text[:-1], "\n") if text.endswith("\n") else (text, "")
            shown = escape(body) + end
        return int(self.stream.write(shown))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
