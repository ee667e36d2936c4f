"""Unwind real aarch64 stacks captured under qemu-user and compare with gdb.

The programs are cross-compiled with aarch64-linux-gnu-gcc (static, and dynamic against the
Debian cross sysroot), run under ``qemu-aarch64 -g`` and stopped by ``gdb-multiarch`` over
``target remote``. eu-stack is no reference here: qemu's core files have no NT_FILE note, so it
cannot find the libraries (see REFERENCE.md), so gdb's backtrace is the one reference.

The signal case differs: qemu 7.2 has no vdso for aarch64 guests and returns from signal
handlers through a sigreturn trampoline (``mov x8, #139; svc #0``) on a page of its own that
belongs to no module and has no CFI. gdb 13 gives up at the handler (its sigtramp unwinder
rejects the SVE record of qemu's signal frame: "Invalid vector length in signal frame"), and an
unwinder driven by CFI alone reaches the trampoline's address and stops there ("no_module").
With the fallback strategies, the walk reads the kernel's signal frame (qemu writes the
kernel's layout) at the trampoline frame's sp; the reference there is the program itself: its
handler passes what its ``ucontext_t`` holds to the function the capture stops in.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
from perfdata import call_chain_problems
from realstacks import (
    EXPECTED_END,
    O2,
    Builder,
    Captures,
    assert_gdb_frames,
    describe,
    module_of,
    unwind,
)
from stackwalk import Unwinder
from stackwalk.capture import Capture

SYSROOT = "/usr/aarch64-linux-gnu"
CC = "aarch64-linux-gnu-gcc"
CXX = "aarch64-linux-gnu-g++"


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    flags: tuple[str, ...]
    breakpoint: str
    compiler: str = CC


CASES = [
    Case("deep-O2-static", "deep.c", (*O2, "-static"), "stop_here"),
    Case("deep-O2", "deep.c", O2, "stop_here"),
    Case("deep-O2-entry", "deep.c", O2, "*stop_here"),
    Case("deep-O0", "deep.c", ("-O0",), "stop_here"),
    Case("cxx-O2", "cxx.cpp", ("-O2",), "stop_here", compiler=CXX),
    Case("qsort", "qsort.c", ("-O2",), "compare_ints"),
    Case("qsort-static", "qsort.c", ("-O2", "-static"), "compare_ints"),
]
SIGNAL_CASES = [
    Case("signal", "signal.c", ("-O2",), "handler_leaf"),
    Case("signal-static", "signal.c", ("-O2", "-static"), "handler_leaf"),
]

# signal.c built so that the handler passes the interrupted pc, sp, fp and lr, as its
# ucontext_t holds them, to handler_leaf (x1-x4), stopped at its first instruction, before
# its code uses them.
CONTEXT = "-DSIGNAL_CONTEXT"
CONTEXT_CASES = [
    Case("context", "signal.c", ("-O2", CONTEXT), "*handler_leaf"),
    Case("context-static", "signal.c", ("-O2", "-static", CONTEXT), "*handler_leaf"),
]
OBJDUMP = "aarch64-linux-gnu-objdump"
ADDR2LINE = "aarch64-linux-gnu-addr2line"


def captured(case: Case, build: Builder, captures: Captures) -> Capture:
    program = build(case.source, *case.flags, compiler=case.compiler)
    cap = captures([program], case.breakpoint, sysroot=SYSROOT)
    assert cap.arch == "aarch64"
    return cap


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_gdb_reaches_start(case: Case, build: Builder, captures: Captures) -> None:
    """The reference itself: gdb unwinds each stop to _start and ends there cleanly."""
    cap = captured(case, build, captures)
    assert cap.gdb_frames[0]["function"] == case.breakpoint.lstrip("*")
    assert cap.gdb_frames[-1]["function"] == "_start"
    assert cap.gdb_stop_reason in EXPECTED_END
    biases = [module.bias for module in cap.modules]
    if "-static" in case.flags:
        assert biases == [0]  # one non-PIE executable at its link address
    else:
        assert len(biases) >= 3 and 0 not in biases  # PIE executable, ld.so, libc, ...


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_unwind_matches_gdb(
    unwinder_class: Any, case: Case, build: Builder, captures: Captures
) -> None:
    cap = captured(case, build, captures)
    trace = unwind(unwinder_class, cap)
    assert_gdb_frames(trace, cap)
    assert [frame.trust for frame in trace.frames] == ["context"] + ["cfi"] * (len(cap.gdb_pcs) - 1)
    assert trace.end == EXPECTED_END[cap.gdb_stop_reason], trace.end_detail


@pytest.mark.parametrize("case", SIGNAL_CASES, ids=lambda case: case.id)
def test_unwind_reaches_qemus_sigreturn_trampoline(
    unwinder_class: Any, case: Case, build: Builder, captures: Captures
) -> None:
    cap = captured(case, build, captures)
    names = [frame["function"] for frame in cap.gdb_frames]
    assert names == ["handler_leaf", "on_alarm"], "gdb now unwinds qemu's signal frame"
    assert cap.vdso is None
    trace = unwind(unwinder_class, cap)
    # Everything gdb found, then on_alarm's return address: the trampoline, in no module.
    assert trace.pcs[:-1] == cap.gdb_pcs, describe(cap, trace.pcs)
    assert len(trace.pcs) == len(cap.gdb_pcs) + 1
    assert module_of(cap, trace.pcs[-1]) is None
    assert [frame.sp for frame in trace.frames[:-1]] == [frame["sp"] for frame in cap.gdb_frames]
    assert trace.end == "no_module", trace.end_detail


def _placed(cap: Capture, pc: int) -> tuple[str, int]:
    """(file, address in it) of a pc in one of the capture's modules."""
    path = module_of(cap, pc)
    assert path is not None and path != "[vdso]", f"{pc:#x} is in no module's file"
    bias = next(module.bias for module in cap.modules if module.path == path)
    return path, pc - bias


def _functions(places: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """binutils' addr2line's function name for each (file, address)."""
    names = {}
    for path in {path for path, _ in places}:
        addresses = sorted({address for p, address in places if p == path})
        out = subprocess.run(
            [ADDR2LINE, "-f", "-e", path, *(f"{a:#x}" for a in addresses)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()[::2]
        names.update({(path, a): name for a, name in zip(addresses, out, strict=True)})
    return names


@pytest.mark.parametrize("case", CONTEXT_CASES, ids=lambda case: case.id)
def test_the_fallback_walk_crosses_qemus_signal_frame(
    case: Case, build: Builder, captures: Captures
) -> None:
    """At qemu's trampoline (no module, no CFI) the walk with the fallback strategies reads the
    kernel's signal frame at the trampoline frame's sp. The interrupted frame it gives (trust
    ``context``) is the one the handler read from its own ``ucontext_t``: pc and sp, and fp and
    lr among its registers. From there, CFI to ``_start`` and a clean end; each of those
    frames' return addresses follows a ``bl`` or ``blr`` in its module's code, each direct
    call's target is the function of the frame below (where that is the program's), and the
    frames are spin, depth seven times, main, as binutils' addr2line names them."""
    cap = captured(case, build, captures)
    assert [frame["function"] for frame in cap.gdb_frames] == ["handler_leaf", "on_alarm"]
    context = {"pc": cap.regs["x1"], "sp": cap.regs["x2"], "x29": cap.regs["x3"]}
    context["x30"] = cap.regs["x4"]
    unwinder = Unwinder(arch="aarch64", strategies=["cfi", "frame_pointer"])
    cap.add_modules_to(unwinder)
    trace = unwinder.unwind(cap.regs, cap.memory, registers=True)
    assert trace.pcs[:2] == cap.gdb_pcs, describe(cap, trace.pcs)
    trampoline, interrupted = trace.frames[2], trace.frames[3]
    assert module_of(cap, trampoline.pc) is None and trampoline.signal_frame
    assert (interrupted.pc, interrupted.sp) == (context["pc"], context["sp"])
    assert interrupted.trust == "context" and interrupted.interrupted
    registers = trace.registers(3)
    assert {name: registers[name] for name in ("x29", "x30")} == {
        name: context[name] for name in ("x29", "x30")
    }
    assert trace.end == "end_of_stack", trace.end_detail
    assert [frame.trust for frame in trace.frames[4:]] == ["cfi"] * (len(trace.frames) - 4)
    # Each caller past the interrupted frame: its return address follows a call, and a direct
    # call's target is the function the frame below is in, where that is the program's (the
    # sysroot's libc has no .symtab: addr2line names its local functions after the nearest
    # exported one).
    placed = [_placed(cap, frame.pc) for frame in trace.frames[3:]]
    lookups = [(path, address - (i > 0)) for i, (path, address) in enumerate(placed)]
    names = _functions(lookups)
    functions = [names[lookup] for lookup in lookups]
    user = [
        {"function": function, "module": path, "module_offset": f"{address:#x}"}
        for function, (path, address) in zip(functions, placed, strict=True)
    ]
    program = os.path.realpath(placed[0][0])
    assert not call_chain_problems(user, program, OBJDUMP), user
    assert functions[:9] == ["spin"] + ["depth"] * 7 + ["main"], functions
    assert functions[-1] == "_start", functions
