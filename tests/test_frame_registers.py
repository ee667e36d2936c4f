"""Each frame's registers (``stackwalk core --registers``, ``Trace.registers``) against gdb's
``frame.read_register`` in the same frame, for every thread of real cores: x86_64 (C at -O2,
threads, libc, a signal handler, C++ with an exception in flight, python3), i386 and aarch64
(qemu's cores, read by gdb-multiarch), and programs without CFI walked by frame pointers.

What each side shows: gdb and stackwalk recover the callee-saved registers by the same CFI, so
where stackwalk gives a register, gdb must give that value. gdb also shows the caller-saved
registers of every frame, as "same value" (its x86 unwinders leave them unspecified); they are
not the caller's (a call may change them), so stackwalk leaves them out, except past a signal
frame, where the kernel saved every register and both read them back. Frames found by frame
pointers keep only pc, sp and the frame pointer the record held: gdb's prologue analysis may
say more there, and stackwalk does not guess.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores, MadeCore, _gdb_command, run, stackwalk_core, stackwalk_minidump
from minidumps import DUMP_SPECS, MINIDUMP_STACKWALK, Dumps, MadeDump
from processes import check_stopped, running, stopped, wait_all_blocked
from realstacks import Builder
from stackwalk.core import Core
from stackwalk.errors import StackwalkError

# The registers stackwalk knows by name, as gdb names them; the callee-saved ones of each ABI
# (with sp and pc), which every frame CFI found must have.
NAMES = {
    "x86_64": [
        *"rax rdx rcx rbx rsi rdi rbp rsp".split(),
        *(f"r{i}" for i in range(8, 16)),
        "rip",
    ],  # fmt: skip
    "i386": "eax ecx edx ebx esp ebp esi edi eip".split(),
    "aarch64": [*(f"x{i}" for i in range(31)), "sp", "pc"],
}
CALLEE_SAVED = {
    "x86_64": {"rbx", "rbp", "r12", "r13", "r14", "r15", "rsp", "rip"},
    "i386": {"ebx", "ebp", "esi", "edi", "esp", "eip"},
    "aarch64": {*(f"x{i}" for i in range(19, 30)), "sp", "pc"},
}
# What a frame found by a fallback strategy (or past one) keeps: pc, sp and frame pointer.
FALLBACK_KEPT = {
    "x86_64": {"rip", "rsp", "rbp"},
    "i386": {"eip", "esp", "ebp"},
    "aarch64": {"pc", "sp", "x29"},
}
GDB = {"x86_64": "gdb", "i386": "gdb", "aarch64": "gdb-multiarch"}
# aarch64: qemu's cores of static programs, which gdb reads as it read the live process (the
# dynamic ones' libraries it does not place, see test_core_files).
CASES = ["deep", "threads", "libc", "signal", "cxx", "python", "i386-deep", "i386-signal",
         "a64-deep-static", "a64-libc-static", "a64-threads-static", "nocfi",
         "a64-nocfi-static"]  # fmt: skip

# Run inside gdb: every thread's real frames (no inline or tail-call ones), each with pc and
# the value of every register of NAMES in that frame (None: gdb says <not saved>).
_GDB_REGISTERS = r"""
import json
import gdb

def value(frame, name, bits):
    try:
        v = frame.read_register(name)
    except (gdb.error, ValueError):
        return None
    if v.is_optimized_out:
        return None
    return int(v.cast(frame.architecture().integer_type(64, False))) & ((1 << bits) - 1)

threads = {}
for thread in gdb.selected_inferior().threads():
    thread.switch()
    frames = []
    frame = gdb.newest_frame()
    while frame is not None:
        if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            registers = {n: value(frame, n, BITS) for n in NAMES}
            frames.append({"pc": frame.pc(), "registers": registers})
        try:
            frame = frame.older()
        except gdb.error:
            break
    threads[thread.ptid[1] or gdb.selected_inferior().pid] = frames
with open(RESULT, "w") as f:
    json.dump(threads, f)
"""


def gdb_registers(
    arch: str, executable: Path, core: Path, directory: Path, sysroot: str | None = None
) -> dict[int, list[dict[str, Any]]]:
    """gdb's frames of every thread of the core (by tid), each with its registers."""
    result = directory / "gdb-registers.json"
    script = directory / "gdb_registers.py"
    bits = 32 if arch == "i386" else 64
    script.write_text(f"NAMES = {NAMES[arch]!r}\nBITS = {bits}\nRESULT = {str(result)!r}\n"
                      + _GDB_REGISTERS)  # fmt: skip
    cmd = _gdb_command(GDB[arch], sysroot)
    proc = run([*cmd, "-x", str(script), str(executable), str(core)])
    assert result.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {int(tid): frames for tid, frames in json.loads(result.read_text()).items()}


def ours(made: MadeCore) -> dict[int, list[dict[str, Any]]]:
    """stackwalk core --json --registers: every thread's native frames (not an inlined
    function's, nor a Python function's, which have no registers of their own)."""
    proc = stackwalk_core(made.path, made.executable, *made.cli_options, "--json", "--registers")
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr
    threads = json.loads(proc.stdout)["threads"]
    return {t["tid"]: [f for f in t["frames"] if "registers" in f] for t in threads}


def assert_registers_equal(
    arch: str, mine: dict[int, list[dict[str, Any]]], theirs: dict[int, list[dict[str, Any]]]
) -> None:
    """Every thread's frames (``ours``) the same as gdb's, and each frame's registers gdb's."""
    assert sorted(mine) == sorted(theirs)
    compared = 0
    for tid, frames in mine.items():
        reference = theirs[tid]
        # The same frames (gdb's backtrace and ours agree on every process here, as other
        # tests check), each with its registers compared.
        assert [int(f["pc"], 16) for f in frames] == [f["pc"] for f in reference], tid
        proven = True
        for i, (frame, gdb_frame) in enumerate(zip(frames, reference, strict=True)):
            registers = {name: int(value, 16) for name, value in frame["registers"].items()}
            gdb_has = gdb_frame["registers"]
            where = f"thread {tid} frame {i} ({frame['function']}, {frame['trust']})"
            assert set(registers) <= set(NAMES[arch]), where
            for name, value in registers.items():
                assert gdb_has[name] == value, f"{where}: {name} {value:#x}, gdb {gdb_has[name]}"
                compared += 1
            proven = proven and frame["trust"] in ("context", "cfi")
            if proven:
                # Every callee-saved register gdb can recover, and the pc and sp.
                wanted = {n for n in CALLEE_SAVED[arch] if gdb_has[n] is not None}
                assert wanted <= set(registers), f"{where}: lacks {wanted - set(registers)}"
            else:
                assert set(registers) <= FALLBACK_KEPT[arch], where
    assert compared > 0


@pytest.mark.parametrize("case", CASES)
def test_each_frames_registers_equal_gdbs(case: str, cores: Cores, tmp_path: Path) -> None:
    made = cores(case)
    theirs = gdb_registers(made.arch, made.executable, made.path, tmp_path, made.sysroot)
    assert_registers_equal(made.arch, ours(made), theirs)


def test_a_live_processs_registers_equal_gdbs(build: Builder, tmp_path: Path) -> None:
    """``stackwalk pid --registers`` on a stopped process of nine threads, each blocked in
    another call (tests/programs/pid_threads.c), against gdb on gcore's core of the same stop."""
    program = build("pid_threads.c", "-O2", "-pthread")
    with running([str(program)]) as proc:
        wait_all_blocked(proc.pid)
        with stopped(proc.pid):
            cmd = [sys.executable, "-m", "stackwalk", "pid", str(proc.pid), "--json"]
            out = run([*cmd, "--registers"])
            check_stopped(proc.pid)
            gcore = run(["gcore", "-o", str(tmp_path / "stop"), str(proc.pid)])
            check_stopped(proc.pid)
    assert out.returncode == 0, out.stderr
    core = tmp_path / f"stop.{proc.pid}"
    assert core.exists(), gcore.stdout + gcore.stderr
    doc = json.loads(out.stdout)
    mine = {t["tid"]: [f for f in t["frames"] if "registers" in f] for t in doc["threads"]}
    assert len(mine) == 9
    assert_registers_equal("x86_64", mine, gdb_registers("x86_64", program, core, tmp_path))


def test_the_api_keeps_registers_only_when_asked(cores: Cores) -> None:
    made = cores("signal")
    core = Core.open(made.path, made.executable, **made.open_options)
    thread = next(t for t in core.threads if t.tid == core.crashing_tid)
    plain, kept = thread.unwind(), thread.unwind(registers=True)
    assert kept.pcs == plain.pcs and kept.end == plain.end
    assert kept.registers(0) == {k: v for k, v in thread.regs.items() if k in NAMES["x86_64"]}
    # Past the signal frame, every register the kernel saved, caller-saved ones too.
    trampoline = next(i for i, f in enumerate(kept.frames) if f.signal_frame)
    assert {"rax", "rcx", "rdx", "rsi", "rdi", "r8"} <= set(kept.registers(trampoline + 1))
    with pytest.raises(IndexError):
        kept.registers(len(kept))
    with pytest.raises(StackwalkError, match="registers=True"):
        plain.registers(0)


def test_the_text_shows_each_frames_registers_under_it(cores: Cores) -> None:
    """``stackwalk core --registers`` without ``--json``: under each frame's line, the
    registers its JSON object has, ``name = value``, in the same order."""
    made = cores("deep")
    proc = stackwalk_core(made.path, made.executable, "--registers")
    assert proc.returncode == 0, proc.stderr
    (thread,) = ours(made).values()
    text = proc.stdout.splitlines()
    for frame in thread:
        at = next(i for i, line in enumerate(text) if line.startswith(f"#{frame['index']:<2} "))
        shown = []
        for line in text[at + 1 :]:
            if not line.startswith("    "):
                break
            cells = line.split()
            shown += [(cells[k], cells[k + 2]) for k in range(0, len(cells), 3)]
        assert shown == list(frame["registers"].items()), frame["index"]


# minidump-stackwalk's text: a thread's header, a frame's line, its registers (name = value,
# two to a line), and how it was found, which ends the frame (an inlined function's line has
# neither registers nor a "Found by").
_THREAD = re.compile(r"^Thread \d+ .*tid: (\d+)$")
_FRAME = re.compile(r"^ ?\d+  \S")
_REGISTER = re.compile(r"(\w+) = (0x[0-9a-f]+)")
# How minidump-stackwalk says a frame was found, in stackwalk's words.
_FOUND_BY = {
    "given as instruction pointer in context": "context",
    "call frame info": "cfi",
}


def minidump_stackwalk_registers(made: MadeDump) -> dict[int, list[tuple[str, dict[str, int]]]]:
    """(how it was found, registers) of each real frame of every thread, as minidump-stackwalk
    prints them."""
    proc = run([MINIDUMP_STACKWALK, "--use-local-debuginfo", made.path])
    assert proc.returncode == 0, proc.stderr[-3000:]
    threads: dict[int, list[tuple[str, dict[str, int]]]] = {}
    frames: list[tuple[str, dict[str, int]]] = []
    registers: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        if match := _THREAD.match(line):
            frames = threads.setdefault(int(match.group(1)), [])
        elif _FRAME.match(line):
            registers = {}
        elif line.strip().startswith("Found by: "):
            how = line.strip().removeprefix("Found by: ")
            frames.append((_FOUND_BY.get(how, how), registers))
        else:
            registers.update((n, int(v, 16)) for n, v in _REGISTER.findall(line))
    return threads


@pytest.mark.parametrize("case", DUMP_SPECS)
def test_each_frames_registers_equal_minidump_stackwalks(
    case: str, dumps: Dumps, tmp_path: Path
) -> None:
    """``stackwalk minidump --registers`` against minidump-stackwalk, which prints each frame's
    recovered registers: where both found a frame by its context or CFI (and every frame
    before it so), the same registers with the same values. Where minidump-stackwalk scans
    (see test_minidump: it goes astray there), the comparison of that thread ends.

    Where the two differ, minidump-stackwalk is wrong, and gdb, on the core of the same stop,
    gives stackwalk's values for every register: minidump-stackwalk restores rbp from the slot
    a callee's CFI names, but often leaves rbx and r12-r15 as the callee's (main, a caller of
    crash_deep.c's many_saved, which pushes rbx and rbp: its rbx 5, the callee's, where the
    slot holds main's own; most frames of the C++ exception's unwinding), and keeps no other
    register (rax and rdx, which libgcc's CFI restores for __cxa_throw)."""
    made = dumps(case)
    proc = stackwalk_minidump(made.path, "--json", "--registers")
    assert proc.returncode == 0, proc.stderr
    mine = {t["tid"]: t["frames"] for t in json.loads(proc.stdout)["threads"]}
    theirs = minidump_stackwalk_registers(made)
    assert sorted(mine) == sorted(theirs)
    gdb = gdb_registers(made.spec.arch, made.executable, made.core, tmp_path)
    compared = 0
    for tid, frames in mine.items():
        own = [f for f in frames if "registers" in f]
        for i, (frame, (how, registers)) in enumerate(zip(own, theirs[tid], strict=False)):
            if how != frame["trust"] or registers.get("rip") != int(frame["pc"], 16):
                assert how not in _FOUND_BY.values(), (tid, frame, how, registers)
                break
            values = {n: int(v, 16) for n, v in frame["registers"].items()}
            # minidump-stackwalk keeps the callee-saved registers alone; stackwalk also the
            # others a frame's CFI restores (libgcc's unwinder saves rax and rdx).
            assert set(registers) <= set(values), (tid, frame)
            compared += 1
            if values != registers:
                gdb_frame = gdb[tid][i]
                assert gdb_frame["pc"] == int(frame["pc"], 16), (tid, i)
                for name, value in values.items():
                    assert gdb_frame["registers"][name] == value, (tid, i, name, registers)
    assert compared >= len(mine) * 2
