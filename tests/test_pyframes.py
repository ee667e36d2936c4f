"""Python frames among the native ones (``stackwalk pid``, ``stackwalk core``): a python3 program
made for the test (tests/programs/pythreads.py: a deep recursion through distinct functions and
a C call back into Python, threads blocked in ``time.sleep``, ``Lock.acquire`` and
``select.select``, one busy in a loop holding the GIL) is stopped where each blocked thread has
printed its own stack (``traceback.extract_stack``), and held to that, to ``pystack remote``
(``--no-block``: its Python frames; blocking ``--native``: where they go among the native
frames), and, for a ``gcore`` of it, to ``pystack core``. On every interpreter found: two
CPython 3.11 builds, the venv's (an interpreter linked to ``libpython3.11.so``) and Debian's
``/usr/bin/python3.11`` (libpython linked into the executable); pyenv's CPython 3.12 (this
machine kind comes with pyenv); CPython 3.13.5 built from source and Debian sid's CPython 3.14
(run with sid's glibc), both put into the cache directory by tests/build_cpython.sh (which
.ci/setup runs). An interpreter that is expected (the cache directory exists, or
``STACKWALK_CPYTHON`` lists its version; pyenv's, when pyenv is here) but not there fails its
tests rather than leaving them out. 3.13 is held to the pystack of a venv of its own, the others to
the tests' pystack (3.11's, which reads every version)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores, run, symbol_in_core
from processes import check_stopped, running, stopped
from realstacks import PROGRAMS

PROGRAM = PROGRAMS / "pythreads.py"
# The busy thread's loop: its innermost frame is on this line whatever instruction it is at.
LOOP_LINE = next(
    i
    for i, line in enumerate(PROGRAM.read_text().splitlines(), 1)
    if "while True: n = n + 1" in line
)
# The system calls each blocked thread waits in (x86_64: read, clock_nanosleep (3.10's
# time.sleep: select or pselect6), futex, select or pselect6), from /proc/PID/task/TID/syscall.
BLOCKED_IN = {"main": {0}, "sleep": {230, 23, 270}, "lock": {202}, "select": {23, 270}}

CACHE = Path(os.environ.get("STACKWALK_CACHE") or Path.home() / ".cache" / "stackwalk")
# What tests/build_cpython.sh puts in the cache: version -> (directory, glob, the interpreter
# in it, its pystack's python (None: the tests' own), whether its functions have names beyond
# the exported ones: Debian's 3.14 is stripped, and its debug symbols are not to be had here)
# (3.13t: the free-threaded build, --disable-gil; its pystack the tests' own, as its venv's
# would re-enable the GIL to load pystack's extension, and say so on stderr.)
BUILT = {
    "3.13": ("cpython-3.13.*[0-9]", "bin/python3.13", "venv/bin/python", True),
    "3.13t": ("cpython-3.13.*t", "bin/python3.13t", None, True),
    "3.14": ("cpython-3.14.*", "usr/bin/python3.14", None, False),
}
# pyenv's versions directory, and the versions taken from it where it is
PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
PYENV_VERSIONS = ("3.10", "3.12")
# What pystack --native says of a thread whose native eval calls it cannot find
NO_MERGE = "Unable to merge native stack due to insufficient native information"


@dataclass(frozen=True)
class Interpreter:
    version: str  # "3.11"
    python: str
    pystack: list[str]  # the command that runs pystack for it
    include: list[str] = field(default_factory=list)  # where its C headers are
    symbols: bool = True  # whether the native eval function can be named (see BUILT)
    missing: str | None = None  # why an expected interpreter is not there
    free_threaded: bool = False  # a --disable-gil build: no GIL, so no thread holds it


def interpreters() -> dict[str, Interpreter]:
    found = {
        # pyenv's build behind the venv: python3.11 linked to libpython3.11.so.1.0
        "3.11-libpython": Interpreter(
            "3.11", os.path.realpath(sys.executable), [sys.executable, "-m", "pystack"]
        ),
        # Debian's: libpython linked into the executable
        "3.11-executable": Interpreter(
            "3.11", "/usr/bin/python3.11", [sys.executable, "-m", "pystack"]
        ),
    }
    for minor in PYENV_VERSIONS:
        # pyenv's builds (this machine kind has pyenv, with 3.10 and 3.12 among its versions):
        # an interpreter linked to libpython3.X.so, with its headers and symbols
        there = sorted(
            (d for d in PYENV.glob(f"{minor}.*") if re.fullmatch(rf"{minor}\.\d+", d.name)),
            key=lambda d: int(d.name.rsplit(".", 1)[1]),
        )
        if there and (there[-1] / "bin" / f"python{minor}").exists():
            root = there[-1]
            found[minor] = Interpreter(
                minor, str(root / "bin" / f"python{minor}"), [sys.executable, "-m", "pystack"],
                include=[str(root / "include" / f"python{minor}")],
            )  # fmt: skip
        elif PYENV.exists():
            found[minor] = Interpreter(
                minor, "", [], missing=f"pyenv is here ({PYENV}) but has no CPython {minor}"
            )
    wanted = os.environ.get("STACKWALK_CPYTHON", "").split()
    for minor, (directory, python, pystack_python, symbols) in BUILT.items():
        there = [d for d in sorted(CACHE.glob(directory)) if (d / python).exists()]
        if there:
            root = there[-1]
            pystack = [str(root / pystack_python) if pystack_python else sys.executable]
            include = root / python.replace(f"bin/python{minor}", "include")
            found[minor] = Interpreter(
                minor.removesuffix("t"), str(root / python), [*pystack, "-m", "pystack"],
                include=[str(include / f"python{minor}"), str(include)], symbols=symbols,
                free_threaded=minor.endswith("t"),
            )  # fmt: skip
        elif CACHE.exists() or minor in wanted:
            found[minor] = Interpreter(
                minor, "", [],
                missing=f"CPython {minor} is expected ({CACHE} exists, or STACKWALK_CPYTHON "
                f"names it) but not in it: run tests/build_cpython.sh {minor}",
            )  # fmt: skip
    return found


INTERPRETERS = interpreters()

Frame = tuple[str, str, int | None]  # function, file, line


def stackwalk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stackwalk", *args], capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@dataclass
class PystackThread:
    tid: int
    gil: bool
    # (kind "Python" or "C", function, file, line), outermost first, as pystack prints them
    frames: list[tuple[str, str, str, int]] = field(default_factory=list)

    def python(self) -> list[Frame]:
        """The Python frames, innermost first."""
        return [
            (f, file, line) for kind, f, file, line in reversed(self.frames) if kind == "Python"
        ]


# "Traceback for thread TID (COMM) [Has the GIL] (most recent call last):"; no COMM in a crash
# core's report
HEADER = re.compile(
    r"Traceback for thread (\d+) (?:\(.*?\) )?\[(.*?)\].* \(most recent call last\):$"
)
FRAME = re.compile(r'    \((Python|C)\) File "(.*)", line (\d+), in (\S+)')


def parse_pystack(text: str) -> dict[int, PystackThread]:
    threads: dict[int, PystackThread] = {}
    current = None
    for line in text.splitlines():
        if m := HEADER.match(line):
            current = threads[int(m[1])] = PystackThread(int(m[1]), "Has the GIL" in m[2])
        elif (m := FRAME.match(line)) and current is not None:
            current.frames.append((m[1], m[4], m[2], int(m[3])))
    assert threads, text
    return threads


def python_frames(thread: dict[str, Any]) -> list[Frame]:
    return [
        (f["function"], f["file"], f["line"]) for f in thread["frames"] if f["kind"] == "python"
    ]


def wait_blocked(pid: int, tids: dict[str, int]) -> None:
    """Every blocked thread in its system call (not still on its way there from its report),
    and the busy thread running its loop: then it has the GIL, and nothing takes it away (it is
    the only thread that wants it). It is taken as running after three looks 20 ms apart that
    find it out of every system call (not waiting for the GIL)."""
    deadline = time.monotonic() + 60
    for what, syscalls in BLOCKED_IN.items():
        path = Path(f"/proc/{pid}/task/{tids[what]}/syscall")
        while path.read_text().split()[0] == "running" or (
            int(path.read_text().split()[0]) not in syscalls
        ):
            assert time.monotonic() < deadline, (what, path.read_text())
            time.sleep(0.005)
    spinner = Path(f"/proc/{pid}/task/{tids['spin']}/syscall")
    seen = 0
    while seen < 3:
        assert time.monotonic() < deadline, spinner.read_text()
        seen = seen + 1 if spinner.read_text().startswith("running") else 0
        time.sleep(0.02)


@dataclass
class Scene:
    """The program stopped once, and what each tool said of that moment."""

    interpreter: Interpreter
    pid: int
    reports: dict[str, dict[str, Any]]  # what -> {"tid", "stack"}
    ours: dict[str, Any]  # stackwalk pid --json
    ours_text: str
    python_only: str  # stackwalk pid --python
    native_only: dict[str, Any]  # stackwalk pid --native-only --json
    pystack: dict[int, PystackThread]  # pystack remote --no-block
    pystack_native: dict[int, PystackThread]  # pystack remote --native
    pystack_native_text: str
    core: Path
    gcore_said: str


@pytest.fixture(scope="module", params=sorted(INTERPRETERS))
def scene(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scene]:
    interpreter = INTERPRETERS[request.param]
    if interpreter.missing:
        pytest.fail(interpreter.missing)
    version = run([interpreter.python, "-c", "import sys; print(sys.version_info[:2])"]).stdout
    assert version.strip() == repr(tuple(map(int, interpreter.version.split(".")))), version
    directory = tmp_path_factory.mktemp(f"pyframes-{request.param}")
    said: list[str] = []
    with running([interpreter.python, str(PROGRAM), "40"], said=said) as proc:
        reports = {r["what"]: r for r in map(json.loads, said)}
        assert set(reports) == {"main", "sleep", "lock", "select", "spin"}
        wait_blocked(proc.pid, {what: r["tid"] for what, r in reports.items()})
        pystack = [*interpreter.pystack, "remote"]
        with stopped(proc.pid):
            ours = stackwalk("pid", str(proc.pid), "--json")
            check_stopped(proc.pid)
            ours_text = stackwalk("pid", str(proc.pid))
            python_only = stackwalk("pid", str(proc.pid), "--python")
            native_only = stackwalk("pid", str(proc.pid), "--native-only", "--json")
            check_stopped(proc.pid)
            theirs = run([*pystack, "--no-block", str(proc.pid)])
            check_stopped(proc.pid)
            theirs_native = run([*pystack, "--native", str(proc.pid)])
            check_stopped(proc.pid)
            made = run(["gcore", "-o", str(directory / "core"), str(proc.pid)])
            check_stopped(proc.pid)
        core = directory / f"core.{proc.pid}"
        assert core.exists(), made.stdout + made.stderr
        for out in (ours, ours_text, python_only, native_only):
            assert out.returncode == 0, out.stderr
        yield Scene(
            interpreter=interpreter,
            pid=proc.pid,
            reports=reports,
            ours=json.loads(ours.stdout),
            ours_text=ours_text.stdout,
            python_only=python_only.stdout,
            native_only=json.loads(native_only.stdout),
            pystack=parse_pystack(theirs.stdout),
            pystack_native=parse_pystack(theirs_native.stdout),
            pystack_native_text=theirs_native.stdout,
            core=core,
            gcore_said=made.stdout + made.stderr,
        )


def expected(scene: Scene) -> dict[int, list[Frame]]:
    """Each thread's Python frames, innermost first, as it printed them at its blocking call
    (the busy thread: on its loop's line, past the report)."""
    out = {}
    for what, report in scene.reports.items():
        frames: list[Frame] = [(name, file, line) for name, file, line in reversed(report["stack"])]
        if what == "spin":
            frames[0] = (frames[0][0], frames[0][1], LOOP_LINE)
        out[report["tid"]] = frames
    return out


def test_python_frames_equal_pystack_and_the_programs_own_stacks(scene: Scene) -> None:
    doc = scene.ours
    assert doc["python"]["version"] == scene.interpreter.version
    assert doc["python"]["error"] is None
    ours = {t["tid"]: python_frames(t) for t in doc["threads"]}
    assert ours == {tid: t.python() for tid, t in scene.pystack.items()}
    assert ours == expected(scene)
    main = ours[scene.reports["main"]["tid"]]
    assert len(main) > 40 and {"ping", "pong", "through_c", "bottom", "<module>"} <= {
        f for f, _, _ in main
    }


def test_the_gil_holder_is_the_busy_thread(scene: Scene) -> None:
    """The busy thread holds the GIL; in a free-threaded build there is none to hold (pystack
    says no thread has it either)."""
    holders = [t["tid"] for t in scene.ours["threads"] if t["gil"]]
    if scene.interpreter.free_threaded:
        assert holders == [tid for tid, t in scene.pystack.items() if t.gil] == []
        assert "holds the GIL" not in scene.ours_text
        return
    assert holders == [scene.reports["spin"]["tid"]]
    assert holders == [tid for tid, t in scene.pystack.items() if t.gil]
    assert f"Thread {holders[0]} (holds the GIL):" in scene.ours_text.splitlines()


def test_python_frames_follow_the_native_eval_call_that_runs_them(scene: Scene) -> None:
    """pystack --native replaces each native _PyEval_EvalFrameDefault call by its Python frames
    and hides some of the interpreter's own functions around it: the native frames both show,
    and the Python frames, come in the same order. (An interpreter whose eval function has no
    name here: test_python_frames_without_a_named_eval_call.)"""
    if not scene.interpreter.symbols:
        pytest.skip("no named native eval call: see the test below")
    for t in scene.ours["threads"]:
        theirs = scene.pystack_native[t["tid"]]
        ours_native = {f["function"] for f in t["frames"] if f["kind"] == "native"}
        shared = ours_native & {f for kind, f, _, _ in theirs.frames if kind == "C"}
        assert {"_PyEval_EvalFrameDefault"} - ours_native == set()
        assert len(shared) >= 2, (shared, t["tid"])
        ours = [
            (f["kind"], f["function"], f["line"] if f["kind"] == "python" else None)
            for f in reversed(t["frames"])
            if f["kind"] == "python" or f["function"] in shared
        ]
        reference = [
            (kind.lower().replace("c", "native"), f, line if kind == "Python" else None)
            for kind, f, _, line in theirs.frames
            if kind == "Python" or f in shared
        ]
        assert ours == reference, t["tid"]
        # the native frames are the same with or without the Python frames among them
        native = next(n for n in scene.native_only["threads"] if n["tid"] == t["tid"])
        assert [f for f in t["frames"] if f["kind"] == "native"] == [
            {"kind": "native", **f} for f in native["frames"]
        ]
    assert "python" not in scene.native_only
    # The C call back into Python (map calling through_c) is a native eval call of its own.
    main = next(t for t in scene.ours["threads"] if t["tid"] == scene.reports["main"]["tid"])
    kinds = [f["function"] for f in main["frames"]]
    evals = [i for i, f in enumerate(kinds) if f == "_PyEval_EvalFrameDefault"]
    assert len(evals) >= 2
    assert kinds[evals[0] + 1] == "bottom"
    if scene.interpreter.version == "3.10":
        # 3.10 runs every Python frame in a native eval call of its own: one after each
        python = [f["kind"] == "python" for f in main["frames"]]
        assert [python[i + 1] for i in evals] == [True] * len(evals)
        assert sum(python) == len(evals)
        return
    assert "through_c" in kinds[evals[0] : evals[1]]


def test_text_and_python_only(scene: Scene) -> None:
    ours = {t["tid"]: python_frames(t) for t in scene.ours["threads"]}
    lines = scene.python_only.splitlines()
    assert not any(line.startswith("#") for line in lines)
    shown: dict[int, list[Frame]] = {}
    tid = 0
    for line in lines:
        if m := re.match(r"Thread (\d+)", line):
            tid = int(m[1])
            shown[tid] = []
        elif m := re.match(r'    \(Python\) File "(.*)", line (\d+), in (\S+)$', line):
            shown[tid].append((m[3], m[1], int(m[2])))
    assert shown == ours
    # mixed text: each Python line right after the native lines of its eval call (without
    # a named eval call, after the last native line)
    text = scene.ours_text.splitlines()
    first = next(i for i, line in enumerate(text) if "(Python)" in line)
    if scene.interpreter.symbols:
        assert " in _PyEval_EvalFrameDefault+0x" in text[first - 1]
    else:
        assert " in _start+0x" in text[first - 1]


def test_python_frames_without_a_named_eval_call(scene: Scene) -> None:
    """Debian's python3.14 is stripped (and its debug symbols cannot be had here): the native
    eval calls are nameless, pystack --native says it cannot put the Python frames among the
    native ones, and stackwalk shows every native frame (the same as --native-only's) and then
    the Python frames, innermost first, rather than guess where they go."""
    if scene.interpreter.symbols:
        pytest.skip("the eval function has its name: see the test above")
    assert scene.pystack_native_text.count(NO_MERGE) == len(scene.ours["threads"])
    for t in scene.ours["threads"]:
        native = next(n for n in scene.native_only["threads"] if n["tid"] == t["tid"])
        python = [f for f in t["frames"] if f["kind"] == "python"]
        assert t["frames"] == [{"kind": "native", **f} for f in native["frames"]] + python
        assert "_PyEval_EvalFrameDefault" not in {f.get("function") for f in t["frames"]}
        assert python_frames(t) == scene.pystack[t["tid"]].python()


def test_a_core_equals_pystack_core(scene: Scene) -> None:
    ours = stackwalk("core", str(scene.core), "--json")
    assert ours.returncode == 0, ours.stderr
    doc = json.loads(ours.stdout)
    theirs = parse_pystack(run([*scene.interpreter.pystack, "core", str(scene.core)]).stdout)
    frames = {t["tid"]: python_frames(t) for t in doc["threads"]}
    assert frames == {tid: t.python() for tid, t in theirs.items()}
    lost = [
        a
        for a in re.findall(r"Memory read failed for corefile section, \d+ bytes at (0x\w+)",
                            scene.gcore_said)
        if a != "0xffffffffff600000"  # the vsyscall page, which no core holds
    ]  # fmt: skip
    if lost:
        # gdb's gcore could not read some of the memory, and wrote zeros in its place: glibc
        # 2.42+ (the one Debian's 3.14 runs with) puts each thread stack's guard page inside
        # the stack's mapping (MADV_GUARD_INSTALL), which ptrace cannot read, and gdb then
        # gives up on the whole chunk, the stack's top with it. The frames that live on those
        # stacks (the shim frame each native eval call keeps on its C stack) are zeros: each
        # thread's Python frames are then its own up to there, and end with the reason.
        assert scene.interpreter.version == "3.14", scene.gcore_said
        cut = 0
        for tid, want in expected(scene).items():
            thread = next(t for t in doc["threads"] if t["tid"] == tid)
            assert frames[tid] == want[: len(frames[tid])]
            if frames[tid] != want:
                cut += 1
                assert thread["python_stop"] == "code object at 0x0: 0x0 is not in the memory"
        assert 0 < cut < len(frames), "the main thread's stack is not in the guarded mapping"
        return
    assert frames == expected(scene)
    assert [t["tid"] for t in doc["threads"] if t["gil"]] == [
        tid for tid, t in theirs.items() if t.gil
    ]
    # the same frames as the live process's
    assert frames == {t["tid"]: python_frames(t) for t in scene.ours["threads"]}


def test_a_core_with_the_interpreter_state_zeroed(scene: Scene, tmp_path: Path) -> None:
    """_PyRuntime zeroed in a copy of the core: every thread's native frames as before, no
    Python frames, and the reason."""
    offset, size = symbol_in_core(scene.core, "_PyRuntime")
    damaged = tmp_path / "zeroed.core"
    shutil.copyfile(scene.core, damaged)
    with open(damaged, "r+b") as f:
        f.seek(offset)
        f.write(bytes(size))
    intact = json.loads(stackwalk("core", str(scene.core), "--json", "--native-only").stdout)
    out = stackwalk("core", str(damaged), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    # 3.11's offsets are built in: the runtime has no interpreter; 3.13+ have none without
    # the table that _PyRuntime starts with
    why = {
        "3.10": "no interpreter: _PyRuntime.interpreters.head is NULL",
        "3.11": "no interpreter: _PyRuntime.interpreters.head is NULL",
        "3.12": "no interpreter: _PyRuntime.interpreters.head is NULL",
        "3.13": "_Py_DebugOffsets: no cookie at _PyRuntime (",
        "3.14": "_Py_DebugOffsets: no cookie at _PyRuntime (",
    }[scene.interpreter.version]
    assert doc["python"]["error"].startswith(why)
    assert [[f["pc"] for f in t["frames"]] for t in doc["threads"]] == [
        [f["pc"] for f in t["frames"]] for t in intact["threads"]
    ]
    assert all(f["kind"] == "native" for t in doc["threads"] for f in t["frames"])
    text = stackwalk("core", str(damaged))
    assert text.returncode == 0, text.stderr
    assert f"Python {scene.interpreter.version}: no Python frames: {why}" in text.stdout


def test_a_crash_core_equals_pystack_core(cores: Cores) -> None:
    """The kernel's core of Debian's python3.11 crashing in native code under Python -> C ->
    Python recursion (tests/programs/crash_py.py), with threads in a lock and a sleep."""
    made = cores("python")
    out = stackwalk("core", str(made.path), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["python"]["error"] is None
    theirs = parse_pystack(run([sys.executable, "-m", "pystack", "core", str(made.path)]).stdout)
    ours = {t["tid"]: python_frames(t) for t in doc["threads"]}
    assert ours == {tid: t.python() for tid, t in theirs.items()}
    crashed = ours[doc["crashing_thread"]]
    assert [f for f, _, _ in crashed].count("descend") >= 3
    assert [t["tid"] for t in doc["threads"] if t["gil"]] == [
        tid for tid, t in theirs.items() if t.gil
    ]


def debug_offsets_entry(interpreter: Interpreter, tmp_path: Path, member: str) -> int:
    """Where ``member`` of ``_Py_DebugOffsets`` is (bytes from ``_PyRuntime``'s start), from
    the interpreter's own installed headers, compiled with ``Py_BUILD_CORE``."""
    source = tmp_path / "entry.c"
    source.write_text(
        "#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <internal/pycore_runtime.h>\n"
        "#include <stddef.h>\n#include <stdio.h>\n"
        f'int main(void) {{ printf("%zu\\n", offsetof(_Py_DebugOffsets, {member})); }}\n'
    )
    includes = [f"-I{i}" for i in interpreter.include]
    run(["cc", *includes, str(source), "-o", str(tmp_path / "entry")])
    return int(run([str(tmp_path / "entry")]).stdout)


def test_a_core_with_a_damaged_debug_offsets_table(scene: Scene, tmp_path: Path) -> None:
    """3.13+: the table at _PyRuntime's start says where the thread state's current frame is;
    made to say it is past the end of the thread state (its size, which the table also gives),
    in a copy of the core: every thread's native frames as before, no Python frames, and the
    reason, never frames read at a wrong offset."""
    if scene.interpreter.version in ("3.10", "3.11", "3.12"):
        pytest.skip(
            f"{scene.interpreter.version} has no _Py_DebugOffsets (its offsets are built in)"
        )
    offset, _ = symbol_in_core(scene.core, "_PyRuntime")
    entry = debug_offsets_entry(scene.interpreter, tmp_path, "thread_state.current_frame")
    size_entry = debug_offsets_entry(scene.interpreter, tmp_path, "thread_state.size")
    damaged = tmp_path / "damaged.core"
    shutil.copyfile(scene.core, damaged)
    with open(damaged, "r+b") as f:
        f.seek(offset + size_entry)
        size = int.from_bytes(f.read(8), "little")
        f.seek(offset + entry)
        f.write(size.to_bytes(8, "little"))
    intact = json.loads(stackwalk("core", str(scene.core), "--json", "--native-only").stdout)
    out = stackwalk("core", str(damaged), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["python"]["error"] == (
        f"_Py_DebugOffsets: thread_state.current_frame is {size} in a structure of {size} bytes"
    )
    assert [[f["pc"] for f in t["frames"]] for t in doc["threads"]] == [
        [f["pc"] for f in t["frames"]] for t in intact["threads"]
    ]
    assert all(f["kind"] == "native" for t in doc["threads"] for f in t["frames"])


# A call caught before its first RESUME: make()'s first instruction, MAKE_CELL x, allocates a
# cell, which (threshold 1) starts a collection in 3.11, whose callback writes the stack as
# CPython sees it and aborts. make()'s frame is pushed and current, but incomplete: CPython
# shows it nowhere. (3.12+ run a collection from the eval loop's checks, the first of them at
# make's RESUME: there make is complete, and shown. 3.10 makes the cell before make's frame is
# the thread's: make is on no stack yet, for CPython, pystack and us alike.)
INCOMPLETE_PY = """
import gc, os, sys, traceback
armed = False
def summary(stack):
    return repr([(f.name, f.filename, f.lineno) for f in stack]).encode()
def on_gc(phase, info):
    global armed
    if armed and phase == "start":
        armed = False
        out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
        os.write(out, summary(traceback.extract_stack())); os.abort()
def make():
    x = [1]
    def g():
        return x
    return g
def caller():
    return make()
gc.callbacks.append(on_gc)
gc.set_threshold(1)
armed = True
caller()
"""


# (Not the free-threaded builds: their collector does not run at an allocation's count, so the
# program's collection comes after its calls, outside them, and stages nothing.)
@pytest.mark.parametrize("which", sorted(w for w in INTERPRETERS if not w.endswith("t")))
def test_a_frame_still_being_set_up_is_left_out(which: str, tmp_path: Path) -> None:
    """A core taken while a Python call is between pushing its frame and its first RESUME
    (3.11: a garbage collection started by MAKE_CELL's allocation, whose callback aborts): the
    Python frames are the ones CPython's own traceback shows at that point, which leave the
    incomplete frame (make) out (pystack shows it: it is wrong there); the callback runs in a
    native eval call of its own, after which the frames of the call it interrupted follow.
    3.13 and 3.14 collect at make's RESUME, where all agree that make is there."""
    import ast

    from corefiles import CRASH_ENV, gdb_crash_core

    interpreter = INTERPRETERS[which]
    if interpreter.missing:
        pytest.fail(interpreter.missing)
    program = tmp_path / "incomplete.py"
    program.write_text(INCOMPLETE_PY)
    stack, core = tmp_path / "stack.txt", tmp_path / "incomplete.core"
    argv = [interpreter.python, "-I", "-S", str(program), str(stack)]
    gdb_crash_core(argv, core, CRASH_ENV)
    own = list(reversed(ast.literal_eval(stack.read_text())))  # innermost first
    caught = interpreter.version == "3.11"
    # 3.10 makes a call's cells before its frame is the thread's: make is on no one's stack yet
    early = caught or interpreter.version == "3.10"
    names = ["on_gc", "caller", "<module>"] if early else ["on_gc", "make", "caller", "<module>"]
    assert [f for f, _, _ in own] == names, own
    out = stackwalk("core", str(core), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (thread,) = doc["threads"]
    assert python_frames(thread) == own
    theirs = parse_pystack(run([*interpreter.pystack, "core", str(core)]).stdout)
    pystack = theirs[thread["tid"]].python()
    if caught:
        # pystack shows the incomplete frame too, at the line of make's def (MAKE_CELL's):
        # the one frame CPython's own traceback above does not have.
        make_line = INCOMPLETE_PY.splitlines().index("def make():") + 1
        assert pystack[1] == ("make", str(program), make_line), pystack
        pystack = pystack[:1] + pystack[2:]
    assert python_frames(thread) == pystack
    if not interpreter.symbols:
        return  # its native eval calls have no name (test_python_frames_without_a_named_...)
    # on_gc follows the innermost native eval call; the others the next one
    kinds = [f["function"] if f["kind"] == "native" else f["kind"] for f in thread["frames"]]
    evals = [i for i, k in enumerate(kinds) if k == "_PyEval_EvalFrameDefault"]
    assert kinds[evals[0] + 1 : evals[0] + 2] == ["python"]
    if interpreter.version == "3.10":
        # a native eval call for each frame
        assert [kinds[i + 1] for i in evals] == ["python"] * len(names)
        return
    rest = len(names) - 1
    assert kinds[evals[1] + 1 : evals[1] + 1 + rest] == ["python"] * rest


def test_a_version_not_read_is_named_with_the_native_frames() -> None:
    """pyenv's CPython 3.9 (frame objects of another layout, no table): ``stackwalk pid`` names
    the version in the document's error and the text, and gives every thread's native frames,
    down to the executable's ``_start``, with no Python frame guessed."""
    if not PYENV.exists():
        pytest.skip(f"no pyenv at {PYENV}: no interpreter of a version stackwalk does not read")
    there = [d / "bin" / "python3.9" for d in PYENV.glob("3.9.*")]
    assert there, f"pyenv is here ({PYENV}) but has no CPython 3.9"
    program = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    with running([str(there[0]), "-c", program]) as proc:
        out = stackwalk("pid", str(proc.pid), "--json")
        text = stackwalk("pid", str(proc.pid))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    why = "CPython 3.9: Python frames are read for CPython 3.10 to 3.14 only"
    assert doc["python"]["version"] == "3.9"
    assert doc["python"]["error"].startswith(why)
    (thread,) = doc["threads"]
    assert {f["kind"] for f in thread["frames"]} == {"native"}
    assert thread["frames"][-1]["function"] == "_start"
    assert f"Python 3.9: no Python frames: {why}" in text.stdout
