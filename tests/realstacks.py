"""Helpers shared by the integration tests: test programs compiled at test time, captures of
them stopped under gdb, and the two unwinder implementations compared with gdb and eu-stack."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile
from stackwalk.capture import GDB_SCRIPT, Capture, capture

PROGRAMS = Path(__file__).parent / "programs"

O2 = ("-O2", "-fomit-frame-pointer")

# How gdb's backtrace ended -> how stackwalk's must end. "outermost": the return-address rule
# of the last frame (_start's `.cfi_undefined rip`) is undefined.
EXPECTED_END = {"outermost": "end_of_stack"}

# Debian's interpreter: its symbols (python3.11-dbg's /usr/lib/debug) let gdb break on static
# interpreter functions such as math_gcd.
SYSTEM_PYTHON = "/usr/bin/python3"

# A small fixed environment for every program run, so that runs do not depend on the caller's.
PROGRAM_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


def gdb_driver(body: str) -> str:
    """A test's gdb script (Python run inside gdb) that uses the steps of ``stackwalk capture``'s
    own gdb script (stackwalk/_capture_gdb.py: run_to_breakpoint, read_registers, backtrace,
    ...) as the module ``capture_gdb``."""
    load = (
        "import importlib.util\n"
        f"_spec = importlib.util.spec_from_file_location('capture_gdb', {str(GDB_SCRIPT)!r})\n"
        "capture_gdb = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(capture_gdb)\n"
    )
    return load + body


# The implementations under test: the Rust core and its pure-Python twin.
IMPLEMENTATIONS = {
    "rust": ("stackwalk", "Unwinder"),
    "baseline": ("stackwalk.baseline", "Unwinder"),
}


def marker_location(source: str, marker: str) -> str:
    """``file:line`` of the line of tests/programs/<source> with the comment ``BREAK:<marker>``."""
    lines = (PROGRAMS / source).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if f"BREAK:{marker}" in line:
            return f"{source}:{number}"
    raise LookupError(f"{PROGRAMS / source}: no line marked BREAK:{marker}")


def module_ranges(cap: Capture) -> list[tuple[str, int, int]]:
    """(path, start, end) at run time of every module of a capture, from its PT_LOAD segments
    (and the vdso's), as [min p_vaddr, max p_vaddr + p_memsz) + bias."""
    ranges = []
    for module in cap.modules:
        path, bias = module.path, module.bias
        with open(path, "rb") as f:
            loads = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
            start = min(s["p_vaddr"] for s in loads)
            end = max(s["p_vaddr"] + s["p_memsz"] for s in loads)
        ranges.append((path, start + bias, end + bias))
    if cap.vdso is not None:
        ranges.append(("[vdso]", cap.vdso[0], cap.vdso[0] + len(cap.vdso[1])))
    return ranges


def module_of(cap: Capture, pc: int) -> str | None:
    for path, start, end in module_ranges(cap):
        if start <= pc < end:
            return path
    return None


class Builder:
    """Compiles tests/programs sources once per session (with -g, so gdb can name frames)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._built: dict[tuple[str, str, tuple[str, ...]], Path] = {}

    def __call__(self, source: str, *flags: str, compiler: str = "gcc") -> Path:
        key = (source, compiler, flags)
        if key not in self._built:
            output = self._directory / f"{Path(source).stem}-{len(self._built)}"
            cmd = [compiler, "-g", *flags, str(PROGRAMS / source), "-o", str(output)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                pytest.fail(f"{' '.join(cmd)} failed:\n{proc.stderr}")
            self._built[key] = output
        return self._built[key]


class Captures:
    """Captures programs stopped at a breakpoint, once per session per (argv, breakpoint)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._done: dict[tuple[Any, ...], Capture] = {}

    def __call__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        breakpoint: str,
        *,
        core: bool = False,
        sysroot: str | None = None,
    ) -> Capture:
        key = (tuple(map(str, argv)), breakpoint, core, sysroot)
        if key not in self._done:
            core_path = self._directory / f"core-{len(self._done)}" if core else None
            self._done[key] = capture(
                argv,
                breakpoint,
                core_path=core_path,
                sysroot=sysroot,
                env=PROGRAM_ENV,
                timeout=90,
            )
        return self._done[key]


def unwind(unwinder_class: Any, cap: Capture) -> Any:
    """Unwind a capture with one of the implementations, its modules added."""
    unwinder = unwinder_class(arch=cap.arch)
    cap.add_modules_to(unwinder)
    return unwinder.unwind(cap.regs, cap.memory)


def assert_gdb_frames(trace: Any, cap: Capture) -> None:
    """The walk has gdb's frames: every pc (a side-by-side listing if not) and stack pointer."""
    assert trace.pcs == cap.gdb_pcs, f"{trace.end}: {trace.end_detail}\n{describe(cap, trace.pcs)}"
    assert [frame.sp for frame in trace.frames] == [frame["sp"] for frame in cap.gdb_frames]


def describe(cap: Capture, pcs: list[int]) -> str:
    """Side-by-side listing of gdb's frames and another list of pcs, for failure messages."""
    rows = []
    for i in range(max(len(cap.gdb_frames), len(pcs))):
        ours = f"{pcs[i]:#x}" if i < len(pcs) else "-"
        gdb = cap.gdb_frames[i] if i < len(cap.gdb_frames) else None
        theirs = f"{gdb['pc']:#x} {gdb['function']} ({gdb['kind']})" if gdb else "-"
        rows.append(f"#{i:<3} {ours:>18}   gdb: {theirs}")
    return "\n".join(rows)
