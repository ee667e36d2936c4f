"""Classes of wrong answers the fallback strategies gave on crash data made elsewhere, each
made here as a program that shows it (tests/programs/crash_*.c), and proven without trusting
stackwalk: every return address follows a call that calls the frame below (objdump), the walk
reaches the program's entry point, and no frame's sp lies in another thread's stack.

* A scan that took for return addresses words that are not: the program's entry point, a
  function's first instruction, code after a jmp, nops or a mov, where the program's file is
  missing (its code is in the core: the call before each candidate is read there) or where a
  symbol file alone knows its functions.
* A frame-pointer step that hid frames: frames built without frame pointers keep the record of
  a caller further up, and following it skips the frames between (glibc's raise keeps its
  caller's rbp, and abort and __libc_message went missing).
* A walk that went on into another thread's stack by CFI (Go's mcall, a stack switch's saved
  sp), taking that thread's frames, all ``cfi``, for its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corefiles import Cores, Spec, run, stackwalk_core, stackwalk_minidump
from minidumps import Dumps, symbol_store
from perfdata import call_chain_problems

NO_CFI_NO_FP = ("-O2", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables",
                "-fno-unwind-tables", "-g0")  # fmt: skip
DECOYS = Spec("decoys", "crash_decoys.c", NO_CFI_NO_FP)
# Without the code decoys: where no code can be read, the words after a jmp are not known to be
# anything but code, as for Breakpad.
DECOYS_NO_CODE = Spec("decoys-no-code", "crash_decoys.c", (*NO_CFI_NO_FP, "-DNO_CODE_DECOYS"))
HIDDEN = Spec("hidden-frames", "crash_hidden_frames.c",
              ("-O2", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-g0"))  # fmt: skip
OTHER_STACK = Spec("other-stack", "crash_other_stack.c", ("-O2", "-pthread"))
# Every file-backed page in the core, the program's code included (gdb follows the filter).
ALL_PAGES = 0x3F


@contextmanager
def moved_away(path: Path) -> Iterator[None]:
    """``path`` is not there for the time of the block (a crash service without the binary)."""
    hidden = path.with_name(path.name + ".away")
    os.rename(path, hidden)
    try:
        yield
    finally:
        os.rename(hidden, path)


def walk(core: Path, *options: str | Path, status: int = 0) -> dict[str, Any]:
    """``stackwalk core --json``'s document; ``status`` 0: every walk ended cleanly, 1: some
    stopped early."""
    proc = stackwalk_core(core, *options, "--json")
    assert proc.returncode == status, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def crashed(doc: dict[str, Any]) -> list[dict[str, Any]]:
    (thread,) = [t for t in doc["threads"] if t["tid"] == doc["crashing_thread"]]
    return [f for f in thread["frames"] if not f["inline"]]


def symbols(program: Path) -> dict[str, int]:
    """The program's symbols: name -> ELF address (nm)."""
    out = {}
    for line in run(["nm", "--defined-only", str(program)]).stdout.splitlines():
        address, _, name = line.split(" ", 2)
        out[name] = int(address, 16)
    return out


def elf_addresses(doc: dict[str, Any], program: Path) -> list[int | None]:
    """Each frame of the crashed thread as an ELF address of the program (None: elsewhere)."""
    return [int(f["module_offset"], 16) if f["module"] == str(program) else None
            for f in crashed(doc)]  # fmt: skip


def test_the_scan_takes_no_decoy_when_the_program_is_missing(cores: Cores) -> None:
    """The decoy program's core, which holds its code, read with and without its file. With the
    file, the scan checks the call before each candidate in the file; without it (moved away),
    in the core -- before, it took the three code addresses, the function and the entry point,
    one after another, for callers. Both walks are the same, reach _start, and every return
    address of the walk follows a call of the frame below it."""
    made = cores.of(DECOYS, coredump_filter=ALL_PAGES)
    program = made.executable
    named = symbols(program)
    decoys = {named[n] for n in ("after_jmp", "after_nop", "after_mov", "decoy_function")}
    entry = int(run(["readelf", "-h", str(program)]).stdout.split("Entry point address:")[1]
                .split()[0], 16)  # fmt: skip
    with_file = walk(made.path, program)
    with moved_away(program):
        without = walk(made.path)
    assert [f["pc"] for f in crashed(without)] == [f["pc"] for f in crashed(with_file)]
    frames = crashed(with_file)
    assert [f["function"] for f in frames[:2]] == ["crash_here", "main"], frames
    assert frames[-1]["function"] == "_start"
    assert not call_chain_problems(frames, targets_in=os.path.realpath(program))
    for address in elf_addresses(without, program)[1:]:
        assert address not in decoys | {entry}, hex(address or 0)


def test_without_code_the_entry_point_and_function_starts_are_no_return_addresses(
    dumps: Dumps, tmp_path: Path
) -> None:
    """A minidump holds the stacks, not the code. With the program missing and its symbol file
    (dump_syms) in a store, the scan has no code to look at: the program's entry point (the
    auxv stream's AT_ENTRY) and a function's first byte (the symbol file's) are refused all
    the same, as are the pointers to data and into the stack, and main's return address is
    found above them. (minidump-stackwalk takes the entry point's word for main's caller.)"""
    made = dumps.of(DECOYS_NO_CODE)
    program = made.executable
    store = tmp_path / "store"
    symbol_store(program, store)
    with moved_away(program):
        proc = stackwalk_minidump(made.path, "--json", "--symbols-path", store)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    blamed = next(t for t in doc["threads"] if t["frames"][0]["function"] == "crash_here")
    frames = [f for f in blamed["frames"] if not f["inline"]]
    assert [f["function"] for f in frames[:2]] == ["crash_here", "main"], frames
    assert frames[-1]["function"] == "_start" and blamed["end"] == "end_of_stack"
    assert not call_chain_problems(frames, targets_in=os.path.realpath(program))


def test_a_frame_record_that_hides_frames_is_refused(cores: Cores) -> None:
    """Only ``outer`` makes a frame record, and no function has CFI: from ``inner`` the
    frame-pointer step went to outer's caller, past middle and outer (and gdb gives up after
    inner). The record's return address follows a call of outer, not of inner; below it lies
    inner's own return address, after a call of inner: the record is refused and the scan finds
    middle and outer. Proven by the call chain to _start."""
    made = cores.of(HIDDEN)
    program = made.executable
    frames = crashed(walk(made.path, program))
    names = [f["function"] for f in frames]
    assert names[:5] == ["leaf", "inner", "middle", "outer", "main"], names
    assert names[-1] == "_start"
    assert not call_chain_problems(frames, targets_in=os.path.realpath(program))


def test_a_walk_ends_where_it_enters_another_threads_stack(cores: Cores) -> None:
    """The crashing thread's frame 0 has CFI that puts its caller's frame on the main thread's
    stack (where the main thread is parked). Before, the walk went on there with the main
    thread's frames, every one ``cfi``, to _start. Now it ends at once, saying whose stack it
    reached; the main thread's walk is gdb's, frame for frame, and no frame of the crashing
    thread's walk has the sp of one of the main thread's."""
    made = cores.of(OTHER_STACK)
    doc = walk(made.path, made.executable, status=1)
    (crashing,) = [t for t in doc["threads"] if t["tid"] == doc["crashing_thread"]]
    (parked,) = [t for t in doc["threads"] if t["tid"] != doc["crashing_thread"]]
    gdb = made.gdb.thread(parked["tid"])
    assert [int(f["pc"], 16) for f in parked["frames"]] == gdb.pcs
    assert parked["end"] == "end_of_stack"
    parked_sps = {f["sp"] for f in parked["frames"]}
    assert not parked_sps & {f["sp"] for f in crashing["frames"]}
    assert [f["function"] for f in crashing["frames"]] == ["crash_on_stack"]
    text = stackwalk_core(made.path, made.executable).stdout
    assert "other_thread_stack: frame 0: the caller's sp" in text
    assert f"is in the live stack of thread {parked['tid']}" in text


def test_the_stack_switchs_cfi_leads_into_the_other_threads_frames(cores: Cores) -> None:
    """What leads the walk there is the program's CFI, not stackwalk: gdb, following it, takes
    a frame of the parked main thread (its sp one of the main thread's own frames', in gdb's
    backtrace of that thread) for the crashing thread's caller."""
    made = cores.of(OTHER_STACK)
    crashing = next(t for t in made.gdb.threads if t.frames[0].function == "crash_on_stack")
    parked = next(t for t in made.gdb.threads if t is not crashing)
    assert len(crashing.frames) >= 2, crashing
    assert crashing.frames[1].sp in {f.sp for f in parked.frames}, (crashing, parked)
