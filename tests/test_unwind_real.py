"""Unwind real x86_64 and i386 stacks and compare with gdb and eu-stack.

Each case compiles a program from tests/programs (or runs the system Python on a script), stops
it under gdb at a breakpoint, and captures registers, stack, modules and the vdso, gdb's own
backtrace and a gcore core file. Both unwinder implementations must reproduce gdb's frames
exactly (every pc and every stack pointer) and eu-stack's pcs for the same stop.

gdb and eu-stack agree on every case here (``test_gdb_and_eu_stack_agree``). One place where
they could differ is handled in capture(): gdb invents frames from debug information that are
not on the stack -- inline frames, and "tail call frames" rebuilt from DWARF call-site
information (deep.c's recurse() reaches with_alloca() with a jmp at -O2, and gdb shows a
recurse frame for it). capture() leaves both out, which is what eu-stack and a CFI unwinder see.

The i386 cases are 32-bit programs built with i686-linux-gnu-gcc that run natively (static, or
with the cross libc's loader and libraries); only the Rust core unwinds them (the pure-Python
baseline reads 64-bit files only and says so).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import stackwalk
from corefiles import I386_GCC, I386_NATIVE_DYNAMIC
from realstacks import (
    EXPECTED_END,
    O2,
    PROGRAM_ENV,
    PROGRAMS,
    SYSTEM_PYTHON,
    Builder,
    Captures,
    assert_gdb_frames,
    describe,
    marker_location,
    module_of,
    unwind,
)
from stackwalk.capture import (
    BreakpointNotHitError,
    Capture,
    CaptureError,
    CaptureTimeoutError,
    capture,
)


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    flags: tuple[str, ...]
    breakpoint: str
    compiler: str = "gcc"


CASES = [
    Case("deep-O2", "deep.c", O2, "stop_here"),
    # Frame 0 at a function's first instruction: nothing pushed yet, CFA = rsp + 8.
    Case("deep-O2-entry", "deep.c", O2, "*stop_here"),
    # Stopped in the VLA function itself, whose CFA is computed from rbp.
    Case("deep-O2-vla-line", "deep.c", O2, marker_location("deep.c", "vla")),
    Case("deep-O0", "deep.c", ("-O0",), "stop_here"),
    # No .eh_frame for the program's own functions: their CFI is only in .debug_frame.
    Case("deep-debug-frame", "deep.c", (*O2, "-fno-asynchronous-unwind-tables"), "stop_here"),
    Case("deep-no-pie", "deep.c", (*O2, "-no-pie"), "stop_here"),
    Case("deep-static", "deep.c", (*O2, "-static"), "stop_here"),
    Case("cxx-O2", "cxx.cpp", ("-O2",), "stop_here", compiler="g++"),
    Case("qsort", "qsort.c", ("-O2",), "compare_ints"),
    Case("signal", "signal.c", ("-O2",), "handler_leaf"),
    Case("vdso", "vdso.c", ("-O2",), "__vdso_clock_gettime"),
    Case("python", "pyrecurse.py", (), "math_gcd"),
]
I386_CASES = [
    Case("i386-deep-O2", "deep.c", (*O2, "-static"), "stop_here", I386_GCC),
    Case("i386-deep-O2-entry", "deep.c", (*O2, "-static"), "*stop_here", I386_GCC),
    Case("i386-deep-O2-vla-line", "deep.c", (*O2, "-static"), marker_location("deep.c", "vla"),
         I386_GCC),
    Case("i386-deep-O0", "deep.c", ("-O0", "-static"), "stop_here", I386_GCC),
    Case("i386-deep-debug-frame", "deep.c", (*O2, "-static", "-fno-asynchronous-unwind-tables"),
         "stop_here", I386_GCC),
    Case("i386-signal", "signal.c", ("-O2", "-static"), "handler_leaf", I386_GCC),
    Case("i386-qsort", "qsort.c", ("-O2", *I386_NATIVE_DYNAMIC), "compare_ints", I386_GCC),
]  # fmt: skip


def argv_for(case: Case, build: Builder) -> list[str]:
    if case.source.endswith(".py"):
        return [SYSTEM_PYTHON, "-I", "-S", str(PROGRAMS / case.source)]
    return [str(build(case.source, *case.flags, compiler=case.compiler))]


def captured(case: Case, build: Builder, captures: Captures) -> Capture:
    return captures(argv_for(case, build), case.breakpoint, core=True)


@functools.cache
def eu_stack_pcs(core: str, executable: str, tid: int) -> list[int]:
    """eu-stack's pcs for thread ``tid`` of a core (frame 0 the pc, then return addresses)."""
    cmd = ["eu-stack", "-q", "-n", "0", f"--core={core}", "-e", executable]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}"
    threads: dict[int, list[int]] = {}
    current: list[int] = []
    for line in proc.stdout.splitlines():
        if match := re.match(r"TID (\d+):", line):
            current = threads.setdefault(int(match.group(1)), [])
        elif match := re.match(r"#\d+\s+0x([0-9a-f]+)", line):
            current.append(int(match.group(1), 16))
    assert tid in threads, f"eu-stack printed no thread {tid}:\n{proc.stdout}"
    return threads[tid]


@pytest.mark.parametrize("case", CASES + I386_CASES, ids=lambda case: case.id)
def test_gdb_and_eu_stack_agree(case: Case, build: Builder, captures: Captures) -> None:
    """The two references give the same pcs for the same stop, and gdb ends cleanly."""
    cap = captured(case, build, captures)
    assert cap.core is not None
    executable = argv_for(case, build)[0]
    assert eu_stack_pcs(cap.core, executable, cap.tid) == cap.gdb_pcs, describe(
        cap, eu_stack_pcs(cap.core, executable, cap.tid)
    )
    assert cap.gdb_stop_reason in EXPECTED_END
    assert cap.gdb_frames[-1]["function"] == "_start"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_unwind_matches_gdb(
    unwinder_class: Any, case: Case, build: Builder, captures: Captures
) -> None:
    cap = captured(case, build, captures)
    trace = unwind(unwinder_class, cap)
    assert_gdb_frames(trace, cap)
    assert [frame.pc for frame in trace.frames] == trace.pcs
    assert [frame.trust for frame in trace.frames] == ["context"] + ["cfi"] * (len(cap.gdb_pcs) - 1)
    assert trace.end == EXPECTED_END[cap.gdb_stop_reason], trace.end_detail
    # Each frame's CFA is where its caller's stack pointer is, as gdb has it.
    assert [frame.cfa for frame in trace.frames[:-1]] == [f["sp"] for f in cap.gdb_frames[1:]]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_unwind_matches_eu_stack(
    unwinder_class: Any, case: Case, build: Builder, captures: Captures
) -> None:
    cap = captured(case, build, captures)
    assert cap.core is not None
    trace = unwind(unwinder_class, cap)
    assert trace.pcs == eu_stack_pcs(cap.core, argv_for(case, build)[0], cap.tid)


@pytest.mark.parametrize("case", I386_CASES, ids=lambda case: case.id)
def test_i386_unwind_matches_gdb_and_eu_stack(
    case: Case, build: Builder, captures: Captures
) -> None:
    """A 32-bit stack: gdb's every pc and stack pointer, its callers' stack pointers as the CFAs,
    eu-stack's pcs for the same stop."""
    cap = captured(case, build, captures)
    assert cap.arch == "i386" and set(cap.regs) >= {"eip", "esp", "ebp"}
    trace = unwind(stackwalk.Unwinder, cap)
    assert_gdb_frames(trace, cap)
    assert [frame.cfa for frame in trace.frames[:-1]] == [f["sp"] for f in cap.gdb_frames[1:]]
    assert trace.end == EXPECTED_END[cap.gdb_stop_reason], trace.end_detail
    assert cap.core is not None
    assert trace.pcs == eu_stack_pcs(cap.core, argv_for(case, build)[0], cap.tid)


def test_i386_signal_frame_is_the_vdsos(build: Builder, captures: Captures) -> None:
    """32-bit glibc's handler returns to the vdso's __kernel_sigreturn, whose CFI (with the
    signal-frame augmentation) only the vdso image read from the process has."""
    cap = captured(case_named("i386-signal"), build, captures)
    names = [frame["function"] for frame in cap.gdb_frames]
    kinds = [frame["kind"] for frame in cap.gdb_frames]
    trampoline = kinds.index("SIGTRAMP_FRAME")
    assert names[: trampoline + 1] == ["handler_leaf", "on_alarm", "__kernel_sigreturn"]
    assert module_of(cap, cap.gdb_pcs[trampoline]) == "[vdso]"
    frames = unwind(stackwalk.Unwinder, cap).frames
    assert frames[trampoline].signal_frame and frames[trampoline + 1].interrupted


def test_i386_is_not_for_the_baseline(build: Builder, captures: Captures) -> None:
    """The pure-Python baseline refuses a 32-bit capture with an ArchError, not a wrong stack."""
    from stackwalk.baseline import Unwinder as Baseline
    from stackwalk.errors import ArchError

    cap = captured(I386_CASES[0], build, captures)
    with pytest.raises(ArchError, match="i386"):
        unwind(Baseline, cap)


def case_named(name: str) -> Case:
    return next(case for case in CASES + I386_CASES if case.id == name)


@pytest.mark.parametrize("name", ["deep-debug-frame", "i386-deep-debug-frame"])
def test_debug_frame_case_has_no_eh_frame_for_its_functions(name: str, build: Builder) -> None:
    """deep-debug-frame tests .debug_frame only if readelf finds stop_here's FDE there alone."""
    case = case_named(name)
    program = build(case.source, *case.flags, compiler=case.compiler)
    symbols = subprocess.run(["nm", program], capture_output=True, text=True, check=True).stdout
    address = next(
        int(line.split()[0], 16) for line in symbols.splitlines() if line.endswith(" T stop_here")
    )
    frames = subprocess.run(
        ["readelf", "--debug-dump=frames", program], capture_output=True, text=True, check=True
    ).stdout
    covering = []
    section = None
    for line in frames.splitlines():
        if match := re.match(r"Contents of the (\S+) section:", line):
            section = match.group(1)
        elif match := re.search(r"FDE cie=\S+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", line):
            if int(match.group(1), 16) <= address < int(match.group(2), 16):
                covering.append(section)
    assert covering == [".debug_frame"]


def test_signal_stack_crosses_the_signal_frame(build: Builder, captures: Captures) -> None:
    cap = captured(case_named("signal"), build, captures)
    kinds = [frame["kind"] for frame in cap.gdb_frames]
    assert kinds.count("SIGTRAMP_FRAME") == 1
    trampoline = kinds.index("SIGTRAMP_FRAME")
    names = [frame["function"] for frame in cap.gdb_frames]
    assert names[:trampoline] == ["handler_leaf", "on_alarm"]
    assert names[trampoline] == "__restore_rt"
    # The interrupted code: normally spin() at the bottom of depth()'s recursion (gdb's pc there
    # is the interrupted instruction, not a return address).
    assert "main" in names[trampoline + 1 :]


def test_qsort_stack_runs_through_libc(build: Builder, captures: Captures) -> None:
    cap = captured(case_named("qsort"), build, captures)
    names = [frame["function"] for frame in cap.gdb_frames]
    between = cap.gdb_pcs[1 : names.index("main")]
    assert len(between) >= 3
    assert all(os.path.basename(module_of(cap, pc) or "") == "libc.so.6" for pc in between)


def test_vdso_frame_needs_the_vdso_image(
    unwinder_class: Any, build: Builder, captures: Captures
) -> None:
    """Frame 0 is in the vdso; without the image read from memory the unwinder cannot leave it."""
    cap = captured(case_named("vdso"), build, captures)
    assert module_of(cap, cap.gdb_pcs[0]) == "[vdso]"
    unwinder = unwinder_class(arch="x86_64")
    for module in cap.modules:
        unwinder.add_module(module.path, module.bias)
    trace = unwinder.unwind(cap.regs, cap.memory)
    assert trace.pcs == cap.gdb_pcs[:1]
    assert trace.end == "no_module"


def test_python_recursion_crosses_c(build: Builder, captures: Captures) -> None:
    """The interpreter's stack alternates Python evaluation and C (sorted's key callbacks)."""
    cap = captured(case_named("python"), build, captures)
    names = [frame["function"] for frame in cap.gdb_frames]
    assert names[0] == "math_gcd"
    assert names.count("builtin_sorted") == 6
    assert names.count("_PyEval_EvalFrameDefault") == 7
    assert module_of(cap, cap.gdb_pcs[0]) == os.path.realpath(SYSTEM_PYTHON)


def test_python_startup_does_not_reach_the_breakpoint() -> None:
    """math_gcd runs only because pyrecurse.py calls it, so the stop is at the script's depth."""
    # The exit code shows the interpreter started and ran the whole -c program.
    argv = [SYSTEM_PYTHON, "-I", "-S", "-c", "import math; raise SystemExit(7)"]
    with pytest.raises(BreakpointNotHitError, match=r"math_gcd'.*exited \(code 7\)"):
        capture(argv, "math_gcd", env=PROGRAM_ENV, timeout=60)


def test_capture_round_trips_through_a_file(
    tmp_path: Path, build: Builder, captures: Captures
) -> None:
    cap = captured(case_named("vdso"), build, captures)
    cap.save(tmp_path / "stop.json")
    assert Capture.load(tmp_path / "stop.json") == cap


def test_capture_times_out_and_kills_the_program() -> None:
    marker = "31.4159"
    with pytest.raises(CaptureTimeoutError):
        capture(["/bin/sleep", marker], "no_such_function_anywhere", timeout=3)
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        assert marker.encode() not in cmdline, f"sleep {marker} outlived its capture"


def test_capture_of_a_missing_program_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="not found"):
        capture([str(tmp_path / "nope")], "main")


def test_capture_passes_arguments_and_environment_intact(tmp_path: Path) -> None:
    report = tmp_path / "seen.json"
    code = (
        "import json, math, os, sys; "
        f"json.dump([sys.argv[1:], dict(os.environ)], open({str(report)!r}, 'w')); "
        "math.gcd(4, 6)"
    )
    args = ["a b", "$HOME", "'q' \"x\" \\y", "*", ""]
    env = {"PATH": "/usr/bin:/bin", "PROBE": "one two=$three"}
    cap = capture([SYSTEM_PYTHON, "-I", "-S", "-c", code, *args], "math_gcd", env=env)
    assert cap.gdb_frames[0]["function"] == "math_gcd"
    seen_args, seen_env = json.loads(report.read_text())
    assert seen_args == args
    # Added on the way: PWD by the /bin/sh gdb starts programs with, LC_CTYPE by Python's
    # coercion of the C locale (PEP 538).
    assert {name: seen_env[name] for name in seen_env.keys() - {"PWD", "LC_CTYPE"}} == env


# The command line, run as if pyelftools were not installed (None in sys.modules: its import
# fails with ModuleNotFoundError, as for a missing package).
WITHOUT_PYELFTOOLS = (
    "import sys; sys.modules['elftools'] = None; "
    "from stackwalk.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_capture_and_unwind_without_pyelftools(tmp_path: Path, build: Builder) -> None:
    """pyelftools is the pure-Python baseline's alone (the ``baseline`` extra): ``capture`` and
    ``unwind`` run without it and give gdb's backtrace; ``unwind --baseline`` says in one line
    what to install."""

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-c", WITHOUT_PYELFTOOLS, *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    case = case_named("vdso")  # its stop is in the vdso: the image's ELF headers are read too
    stop = tmp_path / "stop.json"
    captured = run("capture", "-b", case.breakpoint, "-o", stop, "--", *argv_for(case, build))
    assert captured.returncode == 0, captured.stderr
    unwound = run("unwind", stop, "--json")
    assert unwound.returncode == 0, unwound.stderr
    [thread] = json.loads(unwound.stdout)["threads"]
    frames = thread["frames"]
    assert [int(f["pc"], 16) for f in frames] == Capture.load(stop).gdb_pcs
    baseline = run("unwind", stop, "--baseline")
    assert baseline.returncode == 2 and baseline.stdout == ""
    (line,) = baseline.stderr.splitlines()
    assert line.startswith("stackwalk: error:") and "stackwalk[baseline]" in line, line


def test_unwind_baseline_names_the_frames_as_the_core_does(tmp_path: Path, build: Builder) -> None:
    """``unwind --baseline`` walks with the pure-Python unwinder and names its frames with the
    same symbolizer as ``unwind``: gdb's pcs and stack pointers, frame 0 named after the vdso
    function gdb stopped in (from the vdso image the capture holds; the vdso exports it as
    ``clock_gettime`` too, the name the symbolizer gives), the program's frames named as gdb
    names them, and every frame named as the Rust core's walk of the same stop names it."""

    def run(*args: str | Path) -> list[dict[str, Any]]:
        cmd = [sys.executable, "-m", "stackwalk", "unwind", *map(str, args), "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        frames: list[dict[str, Any]] = json.loads(proc.stdout)["threads"][0]["frames"]
        return frames

    case = case_named("vdso")
    stop = tmp_path / "stop.json"
    cmd = [sys.executable, "-m", "stackwalk", "capture", "-b", case.breakpoint, "-o", stop]
    subprocess.run([*cmd, "--", *argv_for(case, build)], check=True, timeout=120)
    cap = Capture.load(stop)
    baseline = run(stop, "--baseline")
    assert [int(f["pc"], 16) for f in baseline] == cap.gdb_pcs
    assert [int(f["sp"], 16) for f in baseline] == [f["sp"] for f in cap.gdb_frames]
    assert baseline[0]["module"] == "[vdso]"
    assert baseline[0]["function"] in (case.breakpoint, "clock_gettime")
    program = argv_for(case, build)[0]
    pairs = zip(baseline, cap.gdb_frames, strict=True)
    ours = [(f["function"], g["function"]) for f, g in pairs if f["module"] == program]
    assert ours and all(name == gdb for name, gdb in ours), ours
    assert baseline == run(stop)
