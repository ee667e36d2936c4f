"""The ``stackwalk`` command line."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from argparse import Namespace
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, NoReturn

from stackwalk import html_report
from stackwalk._arguments import not_a_file, parse_args
from stackwalk._core import Document, ElfFile, flamegraph, perf_report
from stackwalk._files import check_output, held_pipe, kind, open_input, replacing, write_output
from stackwalk._workers import Died, WorkersDied, first_read_here, forked_map
from stackwalk.capture import Capture, capture
from stackwalk.collect import Limits, collect, parse_crash
from stackwalk.core import Core
from stackwalk.errors import StackwalkError
from stackwalk.minidump import Minidump
from stackwalk.process import Process
from stackwalk.render import (
    escape,
    escape_lines,
    report_lines,
    sframe_report_lines,
    sframe_table_lines,
)
from stackwalk.signature import Rules
from stackwalk.store import CrashStore
from stackwalk.triage import SUMMARY_KEYS, Options, summary_lines, triage

EXIT_OK, EXIT_PARTIAL, EXIT_FAILED = 0, 1, 2
STDIN = "-"  # a file argument that means standard input
STDIN_NAME = "<stdin>"  # how the output names it


def _error(message: str, lines: bool = False) -> None:
    """``message`` on stderr, its control characters escaped (``render.escape``: it names
    files and functions of the input); ``lines``, a message of several lines (see
    ``render.escape_lines``)."""
    red = sys.stderr.isatty() and "NO_COLOR" not in os.environ
    prefix = "\033[31mstackwalk: error:\033[0m" if red else "stackwalk: error:"
    print(f"{prefix} {escape_lines(message) if lines else escape(message)}", file=sys.stderr)


def _say(what: str, message: str) -> None:
    """A warning or a note (``what``) on stderr, one line, escaped as an error is."""
    print(f"stackwalk: {what}: {escape(message)}", file=sys.stderr)


def _capture_document(cap: Capture, name: str | None, args: Namespace) -> Document:
    """The snapshot document of a capture (``unwind``, ``demo``): its thread walked as every
    snapshot's is (``CaptureSnapshot``), or, with ``--baseline``, by the pure-Python baseline
    (CFI alone), its frames named by the same symbolizer; ``name``: the capture file's."""
    # Where its files are found: unwind's options (a capture read on another machine); the
    # demo's are here, where gdb read them.
    where = _module_options(args) if args.command == "unwind" else {}
    snapshot = cap.snapshot(name, strategies=_strategies(args), **where)
    if not getattr(args, "baseline", False):
        for warning in snapshot.warnings:
            _say("warning", warning)
        return snapshot.document(
            max_frames=args.max_frames, inline=args.inline, registers=args.registers
        )
    if args.registers:
        raise StackwalkError("--registers: the baseline keeps no frame's registers")
    try:  # (pyelftools is an optional dependency: the baseline's alone)
        from stackwalk.baseline import Unwinder as Baseline
    except ModuleNotFoundError as e:
        if e.name is None or e.name.partition(".")[0] != "elftools":
            raise
        raise StackwalkError(
            "--baseline needs pyelftools: pip install 'stackwalk[baseline]'"
        ) from None
    uw = Baseline(cap.arch)
    # Its warnings and the baseline's own (a module it cannot read), each said once.
    for warning in dict.fromkeys([*snapshot.warnings, *cap.add_modules_to(uw)]):
        _say("warning", warning)
    trace = uw.unwind(cap.regs, cap.memory, max_frames=args.max_frames)
    doc = snapshot.empty_document()
    frames = snapshot._symbolizer().frames(trace.frames, inline=args.inline)
    doc.add_thread(cap.tid, trace.end, frames, end_detail=trace.end_detail)
    return doc


def _print_document(doc: Document, as_json: bool, lines: bool = False) -> int:
    """A snapshot document on stdout: its JSON (``--json``; ``lines``: on one line, as JSON
    Lines have it), else its text report; the exit status of its threads' walks."""
    if as_json and lines:
        sys.stdout.write(doc.json(indent=None) + "\n")
    elif as_json:
        doc.write_json(sys.stdout)
    else:
        doc.write_text(sys.stdout)
    return _threads_status(doc)


def cmd_capture(args: Namespace) -> int:
    check_output(args.output, "the capture")  # before the program is run
    cap = capture(args.program, args.breakpoint, arch=args.arch, sysroot=args.sysroot)
    cap.save(args.output)
    print(
        escape(
            f"captured {cap.arch} thread {cap.tid} at {args.breakpoint}: "
            f"{sum(len(m) for _, m in cap.memory)} bytes of stack, {len(cap.modules)} modules "
            f"-> {args.output}"
        ),
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_unwind(args: Namespace) -> int:
    if args.capture == STDIN:
        cap = Capture.read(sys.stdin.buffer, STDIN_NAME)
    else:
        cap = Capture.load(args.capture)
    doc = _capture_document(cap, STDIN_NAME if args.capture == STDIN else args.capture, args)
    return _print_document(doc, args.json)


def cmd_demo(args: Namespace) -> int:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or shutil.which("gdb") is None:
        raise StackwalkError("the demo needs a C compiler (cc) and gdb on PATH")
    with tempfile.TemporaryDirectory(prefix="stackwalk-demo-") as tmp:
        exe = os.path.join(tmp, "demo")
        src = resources.files("stackwalk.examples").joinpath("demo.c")
        with resources.as_file(src) as src_path:
            built = subprocess.run([cc, "-O2", "-fomit-frame-pointer", "-o", exe, str(src_path)])
        if built.returncode != 0:
            raise StackwalkError(f"{cc} could not build the demo program")
        # (On stderr with --json: stdout is the document alone.)
        print(f"Built {escape(exe)} at -O2 -fomit-frame-pointer; stopping it in demo_stop() "
              "under gdb...\n", file=sys.stderr if args.json else sys.stdout)  # fmt: skip
        cap = capture([exe], "demo_stop")
        doc = _capture_document(cap, None, args)
        _print_document(doc, args.json)
    [thread] = doc.to_dict()["threads"]
    if not args.json:  # why the walk ended, where it ended well too (`core` says it otherwise)
        print(escape(f"-- {thread['end']}: {thread['end_detail']}"))
    # gdb's backtrace has no inlined functions' frames.
    pcs = [int(f["pc"], 16) for f in thread["frames"] if not f["inline"]]
    same = pcs == cap.gdb_pcs
    verdict = "the same" if same else "DIFFERENT"
    print(
        f"\ngdb's backtrace of the same stop has {len(cap.gdb_pcs)} frames: {verdict}.",
        file=sys.stderr,
    )
    return EXIT_OK if same else EXIT_PARTIAL


def _each_file(paths: Sequence[str], one: Callable[[str], int]) -> int:
    """Run ``one`` on every file; a file that fails gets its one-line error and the others
    still run. The exit status is the worst case: EXIT_FAILED only when no file gave anything."""
    statuses = []
    for path in paths:
        sys.stdout.flush()
        statuses.append(_status_of(one, path))
    return _worst(statuses)


def _status_of(one: Callable[[str], int], path: str) -> int:
    """``one(path)``, or its error's one line and EXIT_FAILED."""
    try:
        return one(path)
    except StackwalkError as e:
        _error(str(e))
        return EXIT_FAILED


def _worst(statuses: Sequence[int]) -> int:
    """The exit status over several files: EXIT_FAILED only when no file gave anything."""
    if all(s == EXIT_OK for s in statuses):
        return EXIT_OK
    return EXIT_FAILED if all(s == EXIT_FAILED for s in statuses) else EXIT_PARTIAL


# The arguments of `core --dir` in the worker processes (set before they are forked).
_DIR_ARGS: Namespace | None = None


def _core_in_worker(path: str) -> tuple[str, str, int]:
    """One core of `core --dir`, in a worker process: (its output, its messages, status)."""
    assert _DIR_ARGS is not None
    out, err = io.StringIO(), io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        status = _status_of(lambda p: _one_core(_DIR_ARGS, p, None), path)
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    return out.getvalue(), err.getvalue(), status


def _core_dir(args: Namespace, paths: Sequence[str]) -> int:
    """Every core of a directory, on ``--jobs`` processes (one per CPU by default), each
    core's report (and its messages) written whole, in name order."""
    global _DIR_ARGS
    jobs = min(args.jobs or len(os.sched_getaffinity(0)), len(paths))
    if jobs <= 1:
        return _each_file(paths, lambda path: _one_core(args, path, None))
    _DIR_ARGS = args
    statuses, rest = first_read_here(
        paths, lambda p: _status_of(lambda q: _one_core(args, q, None), p)
    )
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for path, result in zip(rest, forked_map(_core_in_worker, rest, jobs), strict=False):
            if isinstance(result, Died):
                _error(f"{path}: the worker process reading it died ({result.reason})")
                statuses.append(EXIT_FAILED)
                continue
            out, err, status = result
            sys.stdout.write(out)
            sys.stderr.write(err)
            statuses.append(status)
    except WorkersDied as e:
        done = len(statuses)
        _error(f"{e}: {len(paths) - done} cores from {paths[done]} on unread")
        statuses.append(EXIT_FAILED)
    return _worst(statuses)


def _directory_files(directory: str) -> list[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise StackwalkError(f"{directory}: {e.strerror or e}") from None
    paths = [os.path.join(directory, name) for name in names]
    # Subdirectories are not looked into; anything else is read, and what is not a regular file
    # (a FIFO, a device, a dangling link or a loop of them) gets its error line, never opened.
    return [p for p in paths if not os.path.isdir(p)]


def cmd_core(args: Namespace) -> int:
    if args.dir is None:
        if args.core is None:
            raise StackwalkError("a core file (or --dir DIR) is required")
        if args.core == STDIN:
            return _core_from_stdin(args)
        return _one_core(args, args.core, args.executable)
    if args.core is not None:
        raise StackwalkError("--dir takes no CORE or EXECUTABLE: every core names its program")
    paths = _directory_files(args.dir)
    if not paths:
        raise StackwalkError(f"{args.dir}: no files")
    return _core_dir(args, paths)


def cmd_minidump(args: Namespace) -> int:
    if args.dir is None:
        if not args.minidumps:
            raise StackwalkError("a minidump file (or --dir DIR) is required")
        return _each_file(args.minidumps, lambda path: _one_core(args, path, None))
    if args.minidumps:
        raise StackwalkError("--dir takes no FILE")
    paths = _directory_files(args.dir)
    if not paths:
        raise StackwalkError(f"{args.dir}: no files")
    return _core_dir(args, paths)


def _core_from_stdin(args: Namespace) -> int:
    """`stackwalk core -`: the core read from standard input. A file redirected there is read
    in place; a pipe's bytes go to a temporary file first (the core is mapped, not read)."""
    if stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode):
        return _one_core(args, f"/proc/self/fd/{sys.stdin.fileno()}", args.executable, STDIN_NAME)
    with tempfile.NamedTemporaryFile(prefix="stackwalk-stdin-", suffix=".core") as copy:
        shutil.copyfileobj(sys.stdin.buffer, copy, 1 << 20)
        copy.flush()
        return _one_core(args, copy.name, args.executable, STDIN_NAME)


def _one_core(args: Namespace, path: str, executable: str | None, name: str | None = None) -> int:
    """One core's (or, for `stackwalk minidump`, one minidump's) report; ``name``: what the
    output calls the file at ``path``."""
    opener: type[Core] = Core
    options: dict[str, Any] = {}
    if args.command == "minidump":
        opener = Minidump
        options["symbols_path"] = args.symbols_path
        options["symbols_url"] = args.symbols_url
    else:
        options["max_size"] = args.max_core_size
        # A bar of debuginfod's downloads, after half a second, when someone watches stderr
        # (one core at a time: the workers of --dir would draw over each other).
        watched = sys.stderr.isatty() and args.dir is None
        options["progress"] = 0.5 if watched else None

    try:
        core = opener.open(
            path,
            executable,
            strategies=_strategies(args),
            allow_mismatch=args.allow_mismatch,
            **_module_options(args),
            **options,
        )
    except StackwalkError as e:
        if name is None:
            raise
        raise type(e)(str(e).replace(path, name)) from None
    if name is not None:
        core.path = path = name
    if getattr(args, "format", "stackwalk") == "minidump-stackwalk":
        assert isinstance(core, Minidump)
        sys.stdout.write(core.minidump_stackwalk_json() + "\n")
        return EXIT_OK
    if not core.threads:
        missing = "a thread list" if opener is not Core else "an NT_PRSTATUS note"
        reasons = "; ".join(core.warnings) or f"it has no {missing}"
        raise StackwalkError(f"{path}: no thread could be read ({reasons})")
    if args.thread is not None and all(t.tid != args.thread for t in core.threads):
        tids = ", ".join(str(t.tid) for t in core.threads)
        raise StackwalkError(f"{path}: no thread {args.thread} (threads: {tids})")
    doc = core.document(
        max_frames=args.max_frames,
        inline=args.inline,
        tids={args.thread} if args.thread is not None else None,
        python=getattr(args, "python", "native"),
        registers=args.registers,
    )
    for warning in core.warnings:
        _say("warning", warning)
    # With --dir or several files, one document per line (JSON Lines), and a blank line between
    # the text reports of successive files.
    several = args.dir is not None or len(getattr(args, "minidumps", ())) > 1
    if several and not args.json:
        print()
    return _print_document(doc, args.json, lines=several)


def _module_options(args: Namespace) -> dict[str, Any]:
    """Where the modules' files are found (``_arguments._add_module_options``), as ``Core.open``
    and ``Process.attach`` take it."""
    options = {
        "sysroot": args.sysroot,
        "lib_search_path": _search_path(args) or None,
        "debug_root": args.debug_root,
        "offline": args.offline,
    }
    if "perf_map" in args:  # not triage's: one JIT's map for a spool of crashes
        options["perf_map"] = args.perf_map
    return options


def _search_path(args: Namespace) -> list[str]:
    """``--lib-search-path``'s directories."""
    return [d for d in (args.lib_search_path or "").split(":") if d]


def _strategies(args: Namespace) -> list[str]:
    """``--strategies``, less scanning with ``--no-scan``."""
    strategies = [s for s in args.strategies.split(",") if s]
    return [s for s in strategies if s != "scan"] if args.no_scan else strategies


def _threads_status(doc: Document) -> int:
    """The exit status of a report of these threads: EXIT_FAILED when none has a frame,
    EXIT_PARTIAL when one stopped before the outermost frame."""
    threads = doc.threads
    if not any(frames for _, _, frames in threads):
        return EXIT_FAILED
    clean = all(end in ("end_of_stack", "pc_zero") for _, end, _ in threads)
    return EXIT_OK if clean else EXIT_PARTIAL


def cmd_perf(args: Namespace) -> int:
    if len(args.perf_data) > 1 and args.flamegraph:
        raise StackwalkError("--flamegraph takes one PERF.DATA")
    if args.perf_data.count(STDIN) > 1:
        raise StackwalkError("standard input (-) can be read once")
    if args.flamegraph:
        check_output(args.flamegraph, "the flame graph")  # before the recording is read
    return _each_file(args.perf_data, lambda path: _one_perf(args, path))


def _one_perf(args: Namespace, path: str) -> int:
    if path != STDIN and held_pipe(path):
        # A pipe given by a name of its descriptor (/dev/stdin, a shell's /dev/fd/63): streamed.
        return _report_perf(args, path, path)
    if path != STDIN:
        # A regular file only, opened here without blocking (a FIFO would wait for a writer,
        # a device never end), and read by the native core through this descriptor.
        try:
            fd = open_input(path)
        except StackwalkError as e:
            if not str(e).endswith(": is a FIFO"):
                raise
            raise StackwalkError(f"{e} (a recording through a pipe is read from standard "
                                 f"input: stackwalk perf - < {path})") from None  # fmt: skip
        try:
            return _report_perf(args, f"/proc/self/fd/{fd}", path)
        finally:
            os.close(fd)
    # A recording redirected (read in place), or piped in (perf record -o -: streamed).
    return _report_perf(args, "/dev/stdin", STDIN_NAME)


def _report_perf(args: Namespace, path: str, name: str) -> int:
    """One recording's report; ``name``: what the messages call the file at ``path``."""
    fmt = "json" if args.json else "collapsed" if args.collapsed or args.flamegraph else "text"
    output = None
    if args.flamegraph:
        folded = tempfile.NamedTemporaryFile(prefix="stackwalk-", suffix=".folded", delete=False)
        folded.close()
        output = folded.name
    sys.stdout.flush()
    # A progress bar, after half a second, when someone watches stderr and it is not the output.
    watched = sys.stderr.isatty() and (output is not None or not sys.stdout.isatty())
    progress = 0.5 if watched else None
    try:
        summary = perf_report(
            path,
            fmt,
            output=output,
            jobs=args.jobs,
            max_frames=args.max_frames,
            progress=progress,
            inline=args.inline,
            perf_map_dir=args.perf_map_dir or None,
            offline=args.offline,
            strategies=_strategies(args),
            sysroot=args.sysroot,
            lib_search_path=_search_path(args),
            debug_root=args.debug_root,
        )
        if args.flamegraph and summary["samples"]:
            _write_flamegraph(output, args.flamegraph, name)
    except StackwalkError as e:
        raise type(e)(str(e).replace(path, name)) from None
    finally:
        if output is not None:
            os.unlink(output)
    if summary["call_graph"] == "callchain":
        _say("note", f"{name} was recorded without --call-graph dwarf: its user frames are "
             "perf's frame-pointer callchains, as recorded; for stacks unwound with CFI, record "
             "with 'perf record --call-graph dwarf'")  # fmt: skip
    elif summary["call_graph"] == "none":
        _say("note", f"{name} was recorded without a call graph: each sample shows only where "
             "it was; for its stack, record with 'perf record --call-graph dwarf'")  # fmt: skip
    for warning in summary["warnings"]:
        _say("warning", warning)
    for missing in summary["modules_missing"]:
        _say("warning", f"cannot read {missing}{not_a_file(missing)}: its frames stop there")
    if summary["error"]:
        _error(f"{summary['error'].replace(path, name)} (after {summary['samples']} samples)")
        return EXIT_PARTIAL if summary["samples"] else EXIT_FAILED
    return EXIT_OK


def _write_flamegraph(folded: str | None, svg: str, name: str) -> None:
    """The flame graph of the folded stacks in ``folded``, drawn into a new file that then
    takes the name ``svg`` (``_files.replacing``), titled with the recording's ``name``."""
    assert folded is not None
    with replacing(svg, "the flame graph") as temporary:
        try:
            flamegraph(folded, temporary, title=escape(os.path.basename(name)))
        except StackwalkError as e:
            raise type(e)(str(e).replace(temporary, svg)) from None


def cmd_pid(args: Namespace) -> int:
    proc = Process.attach(args.pid, strategies=_strategies(args), **_module_options(args))
    if args.thread is not None and all(t.tid != args.thread for t in proc.threads):
        all_tids = ", ".join(str(t.tid) for t in proc.threads)
        raise StackwalkError(f"pid {args.pid}: no thread {args.thread} (threads: {all_tids})")
    doc = proc.document(
        max_frames=args.max_frames,
        inline=args.inline,
        tids={args.thread} if args.thread is not None else None,
        python=args.python,
        registers=args.registers,
    )
    for warning in proc.warnings:
        _say("warning", warning)
    return _print_document(doc, args.json)


def cmd_triage(args: Namespace) -> int:
    _check_store(args.db, made_if_missing=True)
    options = Options(
        rules=args.rules,
        all_threads=args.all_threads,
        max_core_size=args.max_core_size,
        **_module_options(args),
    )
    if args.rules is not None:
        Rules.load(args.rules)  # a bad rules file is one error, before any work
    progress = sys.stderr.isatty() and not args.json
    seen = 0

    def each(record: dict[str, Any]) -> None:
        nonlocal seen
        seen += 1
        if args.json:
            print(json.dumps({k: record.get(k) for k in SUMMARY_KEYS}), flush=True)
        elif progress:
            print(f"\r{seen} files read", end="", file=sys.stderr, flush=True)

    with CrashStore(args.db) as store:
        run = triage(args.paths, store, options, jobs=args.jobs, dask=args.dask, each=each)
        summary = summary_lines(run, store)
    if progress:
        print(file=sys.stderr)
    print("\n".join(map(escape, summary)), file=sys.stderr if args.json else sys.stdout)
    return EXIT_PARTIAL if run.unread else EXIT_OK


def _check_store(db: str, made_if_missing: bool = False) -> None:
    """A StackwalkError unless ``db`` is a regular file (SQLite would open a FIFO or a device
    and fail on it with "disk I/O error"), or, ``made_if_missing``, nothing yet."""
    try:
        mode = os.stat(db).st_mode
    except FileNotFoundError:
        if made_if_missing:
            return
        raise StackwalkError(f"{db}: no such crash store") from None
    except OSError as e:
        raise StackwalkError(f"{db}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise StackwalkError(f"{db}: is {kind(mode)}, not a crash store")


def cmd_report(args: Namespace) -> int:
    _check_store(args.db)
    if args.parquet is not None:
        return _report_parquet(args)
    if args.html is not None:
        check_output(args.html, "the page")  # before the store is read
    with CrashStore(args.db) as store:
        buckets = store.buckets(top=args.top, since=args.since)
        for b in buckets:
            b["example"] = store.crash(b["example_crash"])
        if args.html is not None:
            top = [b["bucket"] for b in buckets[: html_report.CHART_BUCKETS]]
            page = html_report.render(buckets, store.per_day(top, args.since),
                                      f"Crashes in {args.db}", store.counts(args.since),
                                      store.errors(args.since))  # fmt: skip
    if args.html is not None:
        write_output(args.html, "the page", page)
        return EXIT_OK
    if args.json:
        # One line, by json's C encoder: the report's size is bounded (a store of 100,000
        # crashes in 2,000 buckets makes 9 MB), and indenting takes the pure-Python encoder,
        # five times slower.
        print(json.dumps({"db": args.db, "buckets": buckets}))
        return EXIT_OK
    print("\n".join(report_lines(buckets)))
    return EXIT_OK


def _report_parquet(args: Namespace) -> int:
    """``report --parquet DIR``: the whole store as Parquet files, a line per file written."""
    if args.top is not None or args.since is not None:
        raise StackwalkError("--parquet writes the whole store, without --top or --since")
    with CrashStore(args.db) as store:
        rows = store.write_parquet(args.parquet)
    for table, n in rows.items():
        print(escape(f"{os.path.join(args.parquet, table)}.parquet: {n} rows"))
    return EXIT_OK


def cmd_sframe(args: Namespace) -> int:
    status = EXIT_OK
    for path in args.files:
        elf = ElfFile(path)
        if args.verify:
            report = elf.verify_sframe()
            if report["disagreements"] or report["errors"]:
                status = EXIT_PARTIAL
            lines = sframe_report_lines(path, report)
        else:
            table = elf.sframe()
            if table is None:
                raise StackwalkError(f"{path}: no .sframe section")
            report = {"file": path, **table}
            lines = sframe_table_lines(path, table)
        if args.json:
            print(json.dumps({"file": path, **report}))
        else:
            print("\n".join(map(escape, lines)))
    return status


def cmd_minidump_write(args: Namespace) -> int:
    if (args.core is None) == (args.pid is None):
        raise StackwalkError("a core file or --pid PID (not both) is required")
    check_output(args.output, "the minidump")
    if args.pid is not None:
        if args.executable is not None:
            raise StackwalkError("--pid takes no EXECUTABLE: the process names its program")
        source: Core = Process.attach(args.pid, **_module_options(args))
    else:
        source = Core.open(args.core, args.executable, max_size=args.max_core_size,
                           **_module_options(args))  # fmt: skip
    for warning in source.warnings:
        _say("warning", warning)
    with replacing(args.output, "the minidump") as temporary:
        size = source.to_minidump(
            temporary, stack_bytes=args.stack_bytes, around=args.memory_around
        )
    what = f"pid {args.pid}" if args.pid is not None else source.path
    print(escape(f"{args.output}: {size} bytes, {len(source.threads)} threads, "
                 f"{len(source.modules)} modules, from {what}"))  # fmt: skip
    return EXIT_OK


def cmd_collect(args: Namespace) -> int:
    limits = Limits(
        max_core_size=args.max_read,
        timeout=args.timeout,
        max_spool=args.max_spool,
        stack_bytes=args.stack_bytes,
        around=args.memory_around,
    )
    path, record = collect(args.spool, parse_crash(args.crash), limits)
    error = record.get("error")
    if error is not None:
        _say("error", error)
    if not os.path.exists(path):
        _say("warning", f"{path}: removed at once, the crash alone more than --max-spool")
    print(escape(path))
    return EXIT_OK if error is None else EXIT_FAILED


_COMMANDS: dict[str, Callable[[Namespace], int]] = {
    "demo": cmd_demo,
    "capture": cmd_capture,
    "core": cmd_core,
    "minidump": cmd_minidump,
    "perf": cmd_perf,
    "minidump-write": cmd_minidump_write,
    "collect": cmd_collect,
    "unwind": cmd_unwind,
    "pid": cmd_pid,
    "triage": cmd_triage,
    "report": cmd_report,
    "sframe": cmd_sframe,
}


def main(argv: Sequence[str] | None = None) -> int:
    # A letter the output's encoding lacks (a name in a report piped under a C locale) is
    # written as a backslash escape, never a traceback. (The JSON is ASCII.)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        try:
            status = int(_COMMANDS[args.command](args))
        except StackwalkError as e:
            # A capture's error may end with gdb's (or qemu's) last lines of output.
            _error(str(e), lines=args.command in ("capture", "demo"))
            status = EXIT_FAILED
        except KeyboardInterrupt:
            status = 130
        # The output's last writes fail here or nowhere: run() leaves without the
        # interpreter's own flush.
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader went away (`stackwalk core ... | head -1`), from Python's writes or the
        # Rust core's: it has what it wanted, and the command ends quietly, as `cat` and `git
        # log` do (their SIGPIPE; Python ignores the signal and sees EPIPE instead).
        _drop_stdout()
        return EXIT_OK
    except OSError as e:
        # Most often the output's device is full ("stackwalk core ... >
        # /dev/full"): one line, as for any other error.
        _error(str(e))
        try:
            sys.stdout.flush()
        except OSError:
            _drop_stdout()
        return EXIT_FAILED


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the output it still holds, which cannot be
    written, does not fail the last flush again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def run() -> NoReturn:
    """The command's entry point (``[project.scripts]``, ``python -m stackwalk``)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
