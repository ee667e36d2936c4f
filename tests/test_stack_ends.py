"""The outermost frame ends the stack, even where it has no CFI to say so: a static program's
own ``_start`` in assembly (tests/programs/crash_start.c: x86_64, i386, aarch64, and aarch64
with no CFI in the program but libc's, frame records only, as elfutils' backtrace.aarch64.fp),
a thread started by a raw clone in assembly (crash_clone.c, x86_64), and musl's static startup,
whose ``_start`` is a bare label without CFI. ``stackwalk core``
must stop there cleanly (exit status 0), not scan past it for a caller that does not exist.

References: gdb (its backtrace of the core on x86_64 and i386, its live one under qemu on
aarch64, see corefiles.py) and eu-stack agree with every frame up to the outermost one, but
neither knows the stack ends there: eu-stack exits 1 at it ("no matching address range", "No
DWARF information found"); gdb, told to go past the entry point (``set backtrace past-entry
on``), makes up frames past an x86_64 ``_start`` from the stack words above it (or a frame at
pc 0 past the clone) and stops with "previous frame identical to this frame" on aarch64. So the
end is also proven from the programs themselves: every return address follows a call
instruction (objdump), the last one is the call the outermost function makes, and that
function is the one at the ELF entry point (readelf), without CFI (readelf's FDEs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import readelf_frames
from corefiles import Cores, MadeCore, eu_stack, nm_symbols, run, stackwalk_core
from perfdata import disassembly
from stackwalk.core import Core

START_CASES = ["start", "i386-start", "a64-start", "a64-start-fp"]
# The program's own functions, innermost first (crash_start.c's and crash_clone.c's).
START_PROGRAM = ["crash_here", "middle", "main"]
CLONE_PROGRAM = ["crash_here", "middle", "thread_main", "raw_clone"]


def walk(made: MadeCore, executable: Path | None = None) -> list[dict[str, Any]]:
    """``stackwalk core --json``'s threads, which it must all unwind to their ends (exit 0);
    ``executable``: another copy of the program than the one that ran."""
    exe = made.executable if executable is None else executable
    proc = stackwalk_core(made.path, exe, *made.cli_options, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    threads: list[dict[str, Any]] = json.loads(proc.stdout)["threads"]
    assert [thread["end"] for thread in threads] == ["end_of_stack"] * len(threads)
    return threads


def pcs_of(thread: dict[str, Any]) -> list[int]:
    return [int(frame["pc"], 16) for frame in thread["frames"]]


def entry_point(path: str) -> int:
    match = [line for line in run(["readelf", "-h", path]).stdout.splitlines() if "Entry" in line]
    return int(match[0].split()[-1], 16)


def has_cfi(path: str, address: int) -> bool:
    return bool(readelf_frames.load(path).fdes_at(address))


def assert_references_agree(made: MadeCore, tid: int, pcs: list[int], outermost: str) -> None:
    """gdb's frames up to ``outermost`` and eu-stack's are ours."""
    gdb = made.gdb.thread(tid)
    names = [frame.function for frame in gdb.frames]
    assert outermost in names, names
    assert pcs == gdb.pcs[: names.index(outermost) + 1]
    assert pcs == eu_stack(str(made.path), str(made.executable)).pcs(tid)


def assert_calls(made: MadeCore, pcs: list[int]) -> dict[int, int | None]:
    """Every return address follows a call instruction in the executable; the calls' targets
    (None: indirect) by return address, at ELF addresses."""
    objdump = "aarch64-linux-gnu-objdump" if made.arch == "aarch64" else "objdump"
    calls = disassembly(str(made.executable), objdump).calls
    returns = [pc - made.executable_bias() for pc in pcs[1:]]
    assert [hex(ra) for ra in returns if ra not in calls] == []
    return {ra: calls[ra] for ra in returns}


@pytest.mark.parametrize("case", START_CASES)
def test_a_start_without_cfi_is_the_last_frame(case: str, cores: Cores) -> None:
    made = cores(case)
    exe = str(made.executable)
    symbols = nm_symbols(exe)
    (start,) = symbols["_start"]
    assert entry_point(exe) == start and not has_cfi(exe, start)
    own = [address for name in START_PROGRAM for address in symbols[name]]
    assert [has_cfi(exe, address) for address in own] == [not case.endswith("-fp")] * len(own)

    (thread,) = walk(made)
    pcs = pcs_of(thread)
    names = [frame["function"] for frame in thread["frames"]]
    assert names[:3] == START_PROGRAM and names[-1] == "_start", names
    # Found by CFI, or by frame records where the program has no CFI; nothing by scanning.
    trust = [frame["trust"] for frame in thread["frames"]]
    expected = "frame_pointer" if case.endswith("-fp") else "cfi"
    assert trust[:4] == ["context"] + [expected] * 3 and set(trust[4:]) == {"cfi"}, trust

    assert_references_agree(made, thread["tid"], pcs, "_start")
    # The last return address is _start's call of __libc_start_main.
    calls = assert_calls(made, pcs)
    assert list(calls.values())[-1] in symbols["__libc_start_main"]

    core = Core.open(made.path, made.executable, **made.open_options)
    trace = core.threads[0].unwind()
    assert trace.pcs == pcs and trace.end == "end_of_stack"
    assert f"entry point {start:#x}" in trace.end_detail, trace.end_detail


@pytest.mark.parametrize("case", START_CASES)
def test_a_stripped_start_without_cfi_is_the_last_frame(
    case: str, cores: Cores, tmp_path: Path
) -> None:
    """Without symbols, _start's extent is taken from the entry point to the next FDE (or symbol,
    or 0x80 bytes at most): the same frames, the same end."""
    made = cores(case)
    stripped = tmp_path / made.executable.name
    strip = "aarch64-linux-gnu-strip" if made.arch == "aarch64" else "strip"
    proc = run([strip, "-o", stripped, made.executable])
    assert proc.returncode == 0, proc.stderr
    assert "_start" not in nm_symbols(str(stripped))
    (thread,) = walk(made)
    (stripped_thread,) = walk(made, stripped)
    assert pcs_of(stripped_thread) == pcs_of(thread)
    trace = Core.open(made.path, stripped, **made.open_options).threads[0].unwind()
    assert f"entry point {entry_point(str(stripped)):#x}" in trace.end_detail, trace.end_detail


def test_a_thread_started_by_a_clone_without_cfi_ends_there(cores: Cores) -> None:
    made = cores("clone")
    exe = str(made.executable)
    symbols = nm_symbols(exe)
    (raw_clone,) = symbols["raw_clone"]
    assert not has_cfi(exe, raw_clone)

    threads = walk(made)
    crashed = threads[0]
    assert crashed["tid"] == made.notes().tids[0]
    names = [frame["function"] for frame in crashed["frames"]]
    assert names == CLONE_PROGRAM
    assert [frame["trust"] for frame in crashed["frames"]] == ["context"] + ["cfi"] * 3
    pcs = pcs_of(crashed)
    assert_references_agree(made, crashed["tid"], pcs, "raw_clone")
    # The last return address follows raw_clone's indirect call of the thread's function.
    calls = assert_calls(made, pcs)
    assert list(calls.values())[-1] is None

    core = Core.open(made.path, made.executable)
    trace = core.threads[0].unwind()
    assert trace.pcs == pcs and trace.end == "end_of_stack"
    assert "frame pointer 0" in trace.end_detail, trace.end_detail


def test_musls_start_is_the_last_frame(cores: Cores) -> None:
    """A static musl program (crash_deep.c): musl's ``_start`` is an assembly label (size 0,
    no type) without CFI that calls ``_start_c``, whose ``__libc_start_main`` calls main through
    ``libc_start_main_stage2``. The walk reaches ``_start`` (by scanning: its callee's CFI
    leaves nothing to go on) and ends there cleanly, the label at the entry point bounding the
    function to the next symbol. gdb stops at main and eu-stack before ``_start``, so: gdb's
    frames up to main are ours, every return address follows a call, and the last is
    ``_start``'s call of ``_start_c``, at the entry point."""
    made = cores("musl-start")
    exe = str(made.executable)
    symbols = nm_symbols(exe)
    (start,) = symbols["_start"]
    assert entry_point(exe) == start and not has_cfi(exe, start)
    (label,) = [row for row in run(["readelf", "-sW", exe]).stdout.splitlines()
                if row.endswith(" _start")]  # fmt: skip
    assert label.split()[2:4] == ["0", "NOTYPE"], label

    (thread,) = walk(made)
    pcs = pcs_of(thread)
    names = [frame["function"] for frame in thread["frames"]]
    assert names[0] == "crash_here" and names[-1] == "_start", names
    main = names.index("main")
    gdb = made.gdb.thread(thread["tid"])
    assert pcs[: main + 1] == gdb.pcs[: main + 1]
    calls = assert_calls(made, pcs)
    assert list(calls.values())[-1] in symbols["_start_c"]

    trace = Core.open(made.path, made.executable).threads[0].unwind()
    assert trace.pcs == pcs and trace.end == "end_of_stack"
    assert f"entry point {start:#x}" in trace.end_detail, trace.end_detail


@pytest.mark.parametrize("case", ["musl-abort", "musl-abort-dynamic"])
def test_musls_abort_is_walked_to_start(case: str, cores: Cores) -> None:
    """abort() in a program built with musl (crash_deep.c -DABORT), static and dynamic (a
    stripped libc.so). musl's libc has neither CFI nor frame pointers, and its ``raise`` points
    rbp at a zeroed signal set: two zero words where a frame record would be. gdb and eu-stack
    stop there (a frame at pc 0 after ``raise``), and stackwalk took the two zeros for the
    chain's end. On x86_64 they are no frame record (a call never pushes 0): the walk goes on
    by scanning to ``_start``, past the stale return addresses that ``raise``'s and ``abort``'s
    own frames keep from earlier calls (the sleep's, inside libc), each after a call of another
    function than the frame's (by address, or through a PLT entry of another name).

    Proven from the programs themselves: each return address follows a call instruction in its
    module (objdump), and a direct call within a module calls the function of the frame below
    it, but the last, ``_start``'s call of ``_start_c``, which goes on by tail calls; and gdb's
    frames, as far as it goes, are ours. (GCC moves crash_here's call of abort, which does not
    return, to ``crash_here.cold``, reached by a jump: that part's frame is crash_here's.)"""
    made = cores(case)
    (thread,) = walk(made)
    frames = thread["frames"]
    pcs = pcs_of(thread)
    names = [(frame["function"] or "??").removesuffix(".cold") for frame in frames]
    program = ["crash_here", "small_frame", "big_frame", *["recurse"] * 5, "many_saved", "main"]
    i = names.index("crash_here")
    assert names[i - 2 : i + len(program)] == ["raise", "abort", *program], names
    assert names[-1] == "_start", names

    for index in range(1, len(frames)):
        caller, callee = frames[index], frames[index - 1]
        module = caller["module"]
        return_address = int(caller["module_offset"], 16)
        calls = disassembly(module).calls
        where = f"#{index} {names[index]} {return_address:#x} in {module}"
        assert return_address in calls, f"{where}: follows no call"
        target = calls[return_address]
        if index == len(frames) - 1:
            assert target in nm_symbols(module)["_start_c"], where
        elif target is not None and callee["module"] == module and callee["function"]:
            assert target in nm_symbols(module)[names[index - 1]], f"{where}: calls {target:#x}"

    gdb = made.gdb.thread(thread["tid"])
    assert gdb.pcs[:2] == pcs[:2], (gdb.pcs, pcs)
    trace = Core.open(made.path, made.executable).threads[0].unwind()
    assert trace.pcs == pcs and trace.end == "end_of_stack", trace.end_detail
