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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
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
