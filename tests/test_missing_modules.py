"""Unwinding through a library whose file is missing (deleted after the crash), on cores of
programs built at test time (tests/programs/crash_callback.c with its libcallback.so, and
crash_signal.c with a private copy of libc), against gdb's backtrace of the same core taken
while the library was still there.

What is known of a missing library is where it was and which of it was code (the core's
segments): a return address into its code is right and is kept, even where it comes from the
CFI of a frame found by frame pointer; a signal trampoline in it (libc's ``__restore_rt``) is
crossed through the kernel's signal frame on the stack, not by a scan that would pick up the
dynamic linker's stale return addresses.
"""

from __future__ import annotations

import json
from typing import Any

from corefiles import Cores, MadeCore, is_subsequence, stackwalk_core


def crashing_thread(made: MadeCore, *options: str) -> tuple[int, dict[str, Any]]:
    proc = stackwalk_core(made.path, made.executable, "--json", *options)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"module not found: {made.extra['library']}" in proc.stderr
    doc = json.loads(proc.stdout)
    (thread,) = [t for t in doc["threads"] if t["tid"] == doc["crashing_thread"]]
    return proc.returncode, thread


def pcs(thread: dict[str, Any]) -> list[int]:
    return [int(f["pc"], 16) for f in thread["frames"]]


def test_a_return_address_into_a_missing_library_is_kept(cores: Cores) -> None:
    made = cores("callback-lib-gone")
    gdb = made.gdb.thread(made.gdb.threads[0].tid)
    names = [f.function for f in gdb.frames]
    assert names[:3] == ["asm_crash", "on_callback", "lib_call"], names
    status, thread = crashing_thread(made)
    frames = thread["frames"]
    # on_callback is found by asm_crash's frame record; its own CFI gives lib_call's return
    # address, in the missing library: kept, with what is known of it (path and offset).
    assert [f["trust"] for f in frames[:3]] == ["context", "frame_pointer", "cfi"]
    assert pcs(thread)[:3] == gdb.pcs[:3]
    assert frames[2]["module"] == made.extra["library"] and frames[2]["function"] is None
    # Past it, every frame is one of gdb's, in gdb's order: none invented; and the walk still
    # reaches main and the end of the stack.
    assert is_subsequence(pcs(thread), gdb.pcs)
    assert "main" in [f["function"] for f in frames]
    assert (status, thread["end"]) == (0, "end_of_stack")
    # With CFI alone the walk stops at the first frame without CFI, as before.
    _, cfi_only = crashing_thread(made, "--strategies", "cfi")
    assert pcs(cfi_only) == gdb.pcs[:1] and cfi_only["end"] == "no_unwind_info"


def test_a_signal_frame_in_a_missing_libc_is_crossed(cores: Cores) -> None:
    made = cores("signal-libc-gone")
    gdb = made.gdb.thread(made.gdb.threads[0].tid)
    kinds = [f.kind for f in gdb.frames]
    assert "SIGTRAMP_FRAME" in kinds, kinds
    trampoline = kinds.index("SIGTRAMP_FRAME")
    status, thread = crashing_thread(made)
    frames = thread["frames"]
    # Up to main, gdb's frames exactly: the trampoline (in the missing libc, unnamed), then
    # the interrupted frame from the kernel's signal frame, at its pc (not a return address).
    main = [f.function for f in gdb.frames].index("main")
    assert pcs(thread)[: main + 1] == gdb.pcs[: main + 1]
    assert frames[trampoline]["module"] == made.extra["library"]
    assert frames[trampoline + 1]["trust"] == "context"
    assert frames[trampoline + 1]["function"] == gdb.frames[trampoline + 1].function == "spin"
    # Nothing from the dynamic linker (its stale return addresses are where a scan from the
    # trampoline went), every frame one of gdb's.
    assert not any("ld-linux" in (f["module"] or "") for f in frames)
    assert is_subsequence(pcs(thread), gdb.pcs)
    assert (status, thread["end"]) == (0, "end_of_stack")
