"""``stackwalk minidump`` and ``Minidump.open`` on real minidumps made at test time by
``minidump-writer`` (tests/minidumps.py: programs stopped at their fault, and a snapshot), against
two references: rust-minidump's ``minidump-stackwalk --use-local-debuginfo`` on the same dump,
and gdb's backtrace of a core gcore wrote at the same stop."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corefiles import (
    SPECS,
    _free_port,
    build_id_of,
    initial_arguments,
    run,
    stackwalk_core,
    stackwalk_minidump,
)
from hostile_http import files_from, held, hostile_server
from minidumps import (
    DUMP_SPECS,
    DUMP_SYMS,
    EXCEPTION,
    LINUX_MAPS,
    MINIDUMP_STACKWALK,
    Dumps,
    MadeDump,
    minidump_streams,
    symbol_server,
    symbol_store,
    thread_list_tids,
)
from perfdata import disassembly
from stackwalk._core import MinidumpFile
from stackwalk.core import Core
from stackwalk.minidump import Minidump, MinidumpError, Signal

CASES = [*DUMP_SPECS, "snapshot"]


def ours(made: MadeDump, *options: str) -> dict[str, Any]:
    proc = stackwalk_minidump(made.path, "--json", *options)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def real_frames(thread: dict[str, Any]) -> list[dict[str, Any]]:
    """A thread's frames without the inlined functions' (minidump-stackwalk and gdb's core
    frames have a pc each)."""
    return [f for f in thread["frames"] if not f["inline"]]


Key = tuple[int, int | None, int | None, str]


def key(frame: dict[str, Any], modules: dict[str, dict[str, Any]]) -> Key:
    """(pc, where its module starts, offset from there, trust) of a frame of ours. (The module by
    where it is, not by name: the module list names a library by its soname, ``libstdc++.so.6``,
    which minidump-stackwalk shows, the maps stream by its file, ``libstdc++.so.6.0.30``.) Our
    ``module_offset`` is the ELF address ``addr2line`` takes: + bias - start is the offset from
    the module's start, minidump-stackwalk's (the two differ for a non-PIE executable)."""
    if not frame["module"]:
        return int(frame["pc"], 16), None, None, frame["trust"]
    module = modules[frame["module"]]
    start, bias = int(module["start"], 16), int(module["bias"], 16)
    offset = int(frame["module_offset"], 16) + bias - start
    return int(frame["pc"], 16), start, offset, frame["trust"]


def their_key(frame: dict[str, Any], bases: dict[str, int]) -> Key:
    """The same of a frame of minidump-stackwalk's. Its ``offset`` and ``module_offset`` of a
    caller are those of the return address - 1 (an address inside the call instruction, as
    Breakpad reports callers); ours, of the return address."""
    shift = 0 if frame["trust"] == "context" else 1
    offset = frame.get("module_offset")
    return (
        int(frame["offset"], 16) + shift,
        bases[frame["module"]] if frame.get("module") else None,
        int(offset, 16) + shift if offset else None,
        frame["trust"],
    )


def compared_threads(
    doc: dict[str, Any], theirs: dict[str, Any]
) -> list[tuple[int, list[Key], list[Key]]]:
    """(tid, our frames' keys, minidump-stackwalk's) of each thread of its document."""
    by_tid = {t["tid"]: t for t in doc["threads"]}
    our_modules = {m["path"]: m for m in doc["modules"]}
    their_bases = {m["filename"]: int(m["base_addr"], 16) for m in theirs["modules"]}
    return [
        (
            t["thread_id"],
            [key(f, our_modules) for f in real_frames(by_tid[t["thread_id"]])],
            [their_key(f, their_bases) for f in t["frames"]],
        )
        for t in theirs["threads"]
    ]


@pytest.mark.parametrize("case", CASES)
def test_frames_match_minidump_stackwalk(case: str, dumps: Dumps) -> None:
    """Every thread's frames, (pc, module, module offset, trust), equal rust-minidump's."""
    assert os.path.exists(MINIDUMP_STACKWALK), ".ci/setup installs minidump-stackwalk"
    made = dumps(case)
    doc = ours(made)
    theirs = made.minidump_stackwalk()
    tids = thread_list_tids(made.path)
    assert [t["thread_id"] for t in theirs["threads"]] == tids
    assert sorted(t["tid"] for t in doc["threads"]) == sorted(tids)
    by_tid = {t["tid"]: t for t in doc["threads"]}
    non_pie = {int(m["start"], 16) for m in doc["modules"] if m["bias"] == "0x0"}
    for tid, mine, their in compared_threads(doc, theirs):
        if mine == their:
            continue
        # Where they differ, minidump-stackwalk is wrong. It finds the caller of some frames by
        # scanning, goes astray (functions that were not called) and stops early: the caller
        # of a frame in a non-PIE executable (python3.11, at 0x400000: it uses no CFI there,
        # though its .eh_frame covers those functions), and the frame the kernel's signal
        # frame interrupted (it does not follow the CFI of libc's __restore_rt, expressions
        # into the ucontext on the stack). Ours goes on by CFI there, and every frame of ours
        # is gdb's on the core of the same stop (also below).
        split = next(i for i, (a, b) in enumerate(zip(mine, their, strict=False)) if a != b)
        assert mine[:split] == their[:split], (tid, mine, their)
        callee = real_frames(by_tid[tid])[split - 1]
        cause = their[split - 1][1] in non_pie or callee["function"] == "__restore_rt"
        assert their[split][3] == "scan" and cause, (tid, their[split], callee)
        assert mine[split][3] == "cfi", (tid, mine[split])
        gdb_pcs = made.gdb.thread(tid).pcs
        assert [pc for pc, *_ in mine] == gdb_pcs, tid


@pytest.mark.parametrize("case", CASES)
def test_frames_match_gdb_on_a_core_of_the_same_stop(case: str, dumps: Dumps) -> None:
    """The third opinion: gdb's backtrace of the core gcore wrote while the process was stopped
    as it was dumped. Every thread's pcs equal gdb's; and ``stackwalk core`` on that core, and
    ``Core.open`` from Python, give the same frames, symbolized the same, as the minidump: one
    pipeline whatever the input and the way in."""
    made = dumps(case)
    doc = ours(made)
    for thread in doc["threads"]:
        pcs = [int(f["pc"], 16) for f in real_frames(thread)]
        assert pcs == made.gdb.thread(thread["tid"]).pcs, thread["tid"]
    # The native frames: the minidump shows no Python frames (its memory has no heap).
    proc = stackwalk_core(made.core, "--json", "--native-only")
    assert proc.returncode == 0, proc.stderr
    core = json.loads(proc.stdout)
    keep = ("pc", "module", "module_offset", "function", "function_offset", "file", "line")
    frames = {t["tid"]: [{k: f[k] for k in keep} for f in t["frames"]] for t in doc["threads"]}
    assert frames == {
        t["tid"]: [{k: f[k] for k in keep} for f in t["frames"]] for t in core["threads"]
    }
    api = Core.open(made.core).to_dict()
    assert frames == {
        t["tid"]: [{k: f[k] for k in keep} for f in t["frames"]] for t in api["threads"]
    }


@pytest.mark.parametrize("case", ["deep", "snapshot"])
def test_modules_and_build_ids(case: str, dumps: Dumps) -> None:
    """Every module the dump lists with a file is found at its path, its build id (from the
    module's CodeView record) the file's as readelf reads it."""
    made = dumps(case)
    dump = Minidump.open(made.path)
    files = [m for m in dump.modules if m.path.startswith("/")]
    assert {m.path for m in files} >= {str(made.executable)}
    for module in files:
        assert module.found and module.build_id == build_id_of(module.path), module
        assert module.build_id_matches
    exe = next(m for m in files if m.path == str(made.executable))
    assert dump.executable == str(made.executable) and exe.bias == exe.start


@pytest.mark.parametrize("case", CASES)
def test_the_main_threads_initial_stack(case: str, dumps: Dumps) -> None:
    """As in a core: where the main thread's stack began (its argc), from the auxv stream and
    the main thread's stack copy, which reaches that far on these shallow stacks. The word
    there is the number of arguments, the words after it point to the strings the dump's
    command line stream holds, and every frame of the main thread lies at or below it."""
    made = dumps(case)
    dump = Minidump.open(made.path)
    top = dump._core.initial_stack
    assert top is not None

    args = initial_arguments(dump.memory, top, 8)
    assert dump.command_line and " ".join(args) == dump.command_line.strip(), args
    main = next(t for t in dump.threads if t.tid == dump.pid)
    assert all(f.sp <= top for f in main.unwind().frames)


def test_a_requested_dump_is_a_snapshot(dumps: Dumps) -> None:
    """minidump-writer without a crash context records a dump requested by the process: no
    signal, no crashing thread -- as stackwalk core says of gcore's snapshots."""
    made = dumps("deep")
    dump = Minidump.open(made.path)
    assert dump.signal is None and dump.crashing_tid is None
    assert dump.pid == made.pid and dump.threads[0].tid == made.pid
    text = stackwalk_minidump(made.path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"Minidump {made.path}, pid {made.pid}, {made.executable}"
    assert lines[1] == "Snapshot of a running process: no thread crashed"
    assert "crash_here" in text.stdout


def test_several_files_and_a_directory(dumps: Dumps, tmp_path: Path) -> None:
    """``stackwalk minidump A B`` and ``--dir``: each file's document, a file that is not a
    minidump one error line naming it, the others still shown."""
    good = [dumps("deep").path, dumps("snapshot").path]
    bad = tmp_path / "not-a-dump"
    bad.write_bytes(b"MZ not a minidump")
    proc = stackwalk_minidump(good[0], bad, good[1], "--json")
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == [f"stackwalk: error: {bad}: not a minidump (no MDMP header)"], proc.stderr
    assert [Path(json.loads(line)["path"]) for line in proc.stdout.splitlines()] == good
    directory = tmp_path / "dir"
    directory.mkdir()
    for path in good:
        shutil.copy(path, directory / path.name)
    listing = stackwalk_minidump("--dir", directory, "--json")
    assert listing.returncode == 0, listing.stderr
    docs = [json.loads(line) for line in listing.stdout.splitlines()]
    assert [Path(d["path"]).name for d in docs] == sorted(p.name for p in good)


def test_a_module_of_another_build_is_not_used(dumps: Dumps, tmp_path: Path) -> None:
    """The dump's module list records another build id for the program than its file's (a byte
    of the CodeView record's changed): the file is not used (a warning names both build ids),
    as a core's mismatched file is not, unless --allow-mismatch."""
    made = dumps("deep")
    data = bytearray(made.path.read_bytes())
    build_id = bytes.fromhex(build_id_of(str(made.executable)))
    # The CodeView record: its signature 'BpEL' (0x4270454c, little-endian), the build id.
    at = data.index((0x4270454C).to_bytes(4, "little") + build_id) + 4
    data[at] ^= 0xFF
    other = tmp_path / "other-build.dmp"
    other.write_bytes(data)
    proc = stackwalk_minidump(other, "--json")
    assert f"build-id mismatch for {made.executable}" in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    (exe,) = [m for m in doc["modules"] if m["path"] == str(made.executable)]
    assert exe["found"] is False and exe["build_id"] == bytes(data[at : at + len(build_id)]).hex()
    allowed = json.loads(stackwalk_minidump(other, "--json", "--allow-mismatch").stdout)
    frames = real_frames(allowed["threads"][0])
    assert any(f["doubtful"] for f in frames) and frames[0]["function"] == "crash_here"


def test_not_a_minidump(tmp_path: Path) -> None:
    core = tmp_path / "empty.dmp"
    core.write_bytes(b"")
    with pytest.raises(MinidumpError, match="not a minidump"):
        Minidump.open(core)


def _patched(made: MadeDump, directory: Path, edits: list[tuple[int, bytes]]) -> Path:
    data = bytearray(made.path.read_bytes())
    for at, value in edits:
        data[at : at + len(value)] = value
    path = directory / f"patched-{made.spec.id}.dmp"
    path.write_bytes(data)
    return path


def test_the_exception_stream_names_the_crashing_thread(dumps: Dumps, tmp_path: Path) -> None:
    """The exception stream of a crash handler's dump (minidump-writer's with a crash context:
    the signal in exception_code, si_code in exception_flags, si_addr in exception_address),
    made from the requested dump of the program stopped at its NULL store: that thread is the
    crashing one, listed first, killed by SIGSEGV at address 0 -- what the kernel's core says."""
    made = dumps("deep")
    rva, _ = minidump_streams(made.path)[EXCEPTION]
    record = rva + 8  # MINIDUMP_EXCEPTION_STREAM: thread id, alignment, then the record
    segv_maperr = struct.pack("<IIQQ", 11, 1, 0, 0)  # code, flags, nested record, address
    crashed = _patched(made, tmp_path, [(record, segv_maperr)])
    dump = Minidump.open(crashed)
    assert dump.crashing_tid == made.pid and dump.threads[0].tid == made.pid
    assert dump.signal == Signal(11, "SIGSEGV", 0, 1)
    text = stackwalk_minidump(crashed).stdout.splitlines()
    assert text[1] == "Killed by SIGSEGV (signal 11) at address 0x0"
    assert text[3] == f"Thread {made.pid} (crashed):"


def test_a_crash_in_a_thread_listed_last(dumps: Dumps, tmp_path: Path) -> None:
    """The exception stream naming the thread the dump lists last (a worker's crash): the
    report gives that thread first, as the crashing one, while ``--format
    minidump-stackwalk`` keeps the dump's order and counts the crashing thread's
    ``threads_index`` in it, as minidump-stackwalk does (an index into our own order would
    be 0, and wrong)."""
    made = dumps("threads")
    listed = [t["thread_id"] for t in made.minidump_stackwalk()["threads"]]
    assert len(listed) > 1, "a dump of several threads"
    rva, _ = minidump_streams(made.path)[EXCEPTION]
    segv_maperr = struct.pack("<IIQQ", 11, 1, 0, 0)  # code, flags, nested record, address
    edits = [(rva, struct.pack("<I", listed[-1])), (rva + 8, segv_maperr)]
    crashed = _patched(made, tmp_path, edits)
    dump = Minidump.open(crashed)
    assert dump.crashing_tid == listed[-1] and dump.threads[0].tid == listed[-1]
    proc = run([MINIDUMP_STACKWALK, "--json", "--use-local-debuginfo", crashed])
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout)
    proc = stackwalk_minidump(crashed, "--format", "minidump-stackwalk")
    assert proc.returncode in (0, 1), proc.stderr
    mine = json.loads(proc.stdout)
    assert [t["thread_id"] for t in mine["threads"]] == listed
    index = theirs["crashing_thread"]["threads_index"]
    assert mine["crashing_thread"]["threads_index"] == index == len(listed) - 1
    assert mine["crash_info"]["crashing_thread"] == theirs["crash_info"]["crashing_thread"]


def test_modules_from_the_module_list_without_a_maps_stream(dumps: Dumps, tmp_path: Path) -> None:
    """A dump without the Linux maps stream (its directory entry's type changed to one no reader
    knows): the modules are placed from the module list instead, and every frame is the same."""
    made = dumps("snapshot")
    data = made.path.read_bytes()
    count, directory = struct.unpack_from("<II", data, 8)
    kinds = [struct.unpack_from("<I", data, directory + 12 * i)[0] for i in range(count)]
    entry = directory + 12 * kinds.index(LINUX_MAPS)
    unmapped = _patched(made, tmp_path, [(entry, struct.pack("<I", 0x7FFF0000))])
    whole, without = Minidump.open(made.path).to_dict(), Minidump.open(unmapped).to_dict()
    assert without["threads"] == whole["threads"]
    found = {m["path"] for m in without["modules"] if m["found"]}
    assert str(made.executable) in found and any("libc.so" in p for p in found), found


@pytest.mark.parametrize("case", ["deep", "threads", "libc", "cxx", "snapshot"])
def test_minidump_stackwalk_format(case: str, dumps: Dumps) -> None:
    """``--format minidump-stackwalk``: the document minidump-stackwalk --json prints, on the
    dumps where minidump-stackwalk walks every frame right (see above): the crash, the modules
    with Breakpad's debug ids, and every frame's number, trust, module, offsets and (for C)
    function, field for field."""
    made = dumps(case)
    proc = stackwalk_minidump(made.path, "--format", "minidump-stackwalk")
    assert proc.returncode == 0, proc.stderr
    mine, theirs = json.loads(proc.stdout), made.minidump_stackwalk()
    crash = ("type", "address", "crashing_thread")
    assert {k: mine["crash_info"][k] for k in crash} == {k: theirs["crash_info"][k] for k in crash}
    assert mine["system_info"]["cpu_arch"] == theirs["system_info"]["cpu_arch"]
    assert (mine["pid"], mine["thread_count"]) == (theirs["pid"], theirs["thread_count"])
    fields = ("base_addr", "end_addr", "filename", "code_id", "debug_id")
    assert [[m[k] for k in fields] for m in mine["modules"]] == [
        [m[k] for k in fields] for m in theirs["modules"]
    ]
    keys = ("frame", "trust", "module", "module_offset", "offset")
    program = made.executable.name
    for a, b in zip(mine["threads"], theirs["threads"], strict=True):
        assert a["thread_id"] == b["thread_id"]
        assert [[f[k] for k in keys] for f in a["frames"]] == [
            [f[k] for k in keys] for f in b["frames"]
        ], a["thread_id"]
        # C functions are named alike, but for one thing minidump-stackwalk gets wrong: it
        # drops a name's first underscore (as Mach-O symbols have one more than their C
        # names), so that _start is "start" and __libc_start_call_main "_libc_start_call_main",
        # where eu-stack, gdb and the ELF symbol tables say _start and __libc_start_call_main.
        # (C++ names each writes its own way, and libc's aliases at one address each picks
        # its own: the program's own frames are compared.)
        if case != "cxx":
            for f, g in zip(a["frames"], b["frames"], strict=True):
                if f["module"] != program:
                    continue
                ours = f["function"]
                expected = ours[1:] if ours and ours.startswith("_") else ours
                assert g["function"] == expected, (f, g)
    assert any(f["module"] == program for t in mine["threads"] for f in t["frames"])
    if theirs["crashing_thread"] is not None:
        index = theirs["crashing_thread"]["threads_index"]
        assert mine["crashing_thread"]["threads_index"] == index


def test_minidump_stackwalk_format_at_a_signal_frame(dumps: Dumps) -> None:
    """``--format minidump-stackwalk`` of a crash in a signal handler (minidump-stackwalk itself
    scans past the trampoline, so its frames are not the reference here). The trampoline, where
    the handler returns (glibc's __restore_rt, looked up at its own first instruction), and the
    frame the signal interrupted are given at their pc, named as the JSON of ``stackwalk
    minidump`` names them; every other caller at its return address less one, inside its call
    (as Breakpad gives callers). Before: the trampoline at __restore_rt-0x1 (function_offset
    "-0x1"), the interrupted frame at its pc less one."""
    made = dumps("signal")
    proc = stackwalk_minidump(made.path, "--format", "minidump-stackwalk")
    assert proc.returncode == 0, proc.stderr
    mine = json.loads(proc.stdout)["crashing_thread"]["frames"]
    doc = ours(made)
    (thread,) = [
        t
        for t in doc["threads"]
        if t["tid"] == doc["crashing_thread"]
        or (doc["crashing_thread"] is None and t["frames"][0]["function"] == "crash_in_handler")
    ]
    frames = real_frames(thread)
    assert len(mine) == len(frames)
    at = next(i for i, f in enumerate(frames) if f["function"] == "__restore_rt")
    for i, (m, f) in enumerate(zip(mine, frames, strict=True)):
        at_pc = i in (0, at, at + 1)
        assert int(m["offset"], 16) == int(f["pc"], 16) - (0 if at_pc else 1), (i, m, f)
        assert m["function"] == f["function"], (i, m, f)
        if m["function_offset"] is not None:
            assert int(m["function_offset"], 16) >= 0, (i, m)
    assert mine[at]["function_offset"] == f"{0:#018x}"


def ours_partial(made: MadeDump, *options: str) -> dict[str, Any]:
    """Our document, where some stacks may end early (exit 1: without the program's CFI)."""
    proc = stackwalk_minidump(made.path, "--json", *options)
    assert proc.returncode in (0, 1) and proc.stdout, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def named(frame: dict[str, Any]) -> tuple[str | None, str | None, str | None, int | None]:
    """A frame's function, offset, file and line. GCC's split-off parts (``f [clone .cold]`` in
    the ELF symbol table) are the function's own as DWARF, and so dump_syms, names them."""
    function = frame["function"]
    if function is not None:
        function = re.sub(r" \[clone \.[a-z_.0-9]+\]$", "", function)
    return function, frame["function_offset"], frame["file"], frame["line"]


@pytest.mark.parametrize("case", ["deep", "cxx"])
def test_symbol_files_name_frames_as_the_elf_files_do(
    case: str, dumps: Dumps, tmp_path: Path
) -> None:
    """With the program's file gone, ``--symbols-path`` (a store of dump_syms' ``.sym`` files)
    names its frames, functions and lines, as its ELF file and DWARF did; and as
    ``minidump-stackwalk --symbols-path`` does on the same dump."""
    assert os.path.exists(DUMP_SYMS), ".ci/setup installs dump_syms"
    made = dumps(case)
    store = tmp_path / "symbols"
    with_elf = ours(made, "--offline")
    # The store a crash service keeps: every module's symbol file (minidump-stackwalk needs
    # libc's STACK CFI to reach the program from an abort).
    for module in with_elf["modules"]:
        if module["found"] and module["path"].startswith("/"):
            symbol_store(Path(module["path"]), store)
    exe = str(made.executable)
    hidden = made.executable.with_name(made.executable.name + ".hidden")
    os.rename(made.executable, hidden)
    try:
        without = ours_partial(made, "--offline")
        with_syms = ours_partial(made, "--offline", "--symbols-path", str(store))
        proc = subprocess.run(
            [MINIDUMP_STACKWALK, "--json", "--symbols-path", store, made.path],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        os.rename(hidden, made.executable)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout)
    # By pc, the frames in the program with its ELF file (inline frames first, as ours are).
    elf_named: dict[str, list[tuple[Any, ...]]] = {}
    for thread in with_elf["threads"]:
        pending: list[tuple[Any, ...]] = []
        for f in thread["frames"]:
            pending.append(named(f))
            if not f["inline"]:
                elf_named[f["pc"]] = pending
                pending = []
    # Without the symbol file the program's frames have no names (so those below are the
    # .sym's). (Nor its STACK CFI: the walk through the program may differ.)
    bare = [f for t in without["threads"] for f in t["frames"] if f["module"] == exe]
    assert bare and all(f["function"] is None for f in bare), bare
    compared = 0
    for thread in with_syms["threads"]:
        pending = []
        for f in thread["frames"]:
            pending.append(named(f))
            if f["inline"]:
                continue
            if f["module"] == exe and f["pc"] in elf_named:
                assert len(pending) == len(elf_named[f["pc"]]), (pending, elf_named[f["pc"]])
                for sym, elf in zip(pending, elf_named[f["pc"]], strict=True):
                    # The symbol table's demangled name of a template function has its return
                    # type first ("int f<...>(...)"); DWARF's, and dump_syms', does not.
                    assert sym[1:] == elf[1:] and sym[0] is not None, (sym, elf)
                    assert elf[0] == sym[0] or elf[0].endswith(" " + sym[0]), (sym, elf)
                compared += 1
            pending = []
    assert compared >= 2, with_syms
    # minidump-stackwalk's names and lines of the program's frames, at the same pcs.
    by_pc = {
        int(f["pc"], 16) - (0 if f["trust"] == "context" else 1): f
        for t in with_syms["threads"]
        for f in t["frames"]
        if f["module"] == exe and not f["inline"]
    }
    agreed = 0
    for thread in theirs["threads"]:
        for frame in thread["frames"]:
            mine = by_pc.get(int(frame["offset"], 16))
            if mine is None or frame.get("module") != made.executable.name:
                continue
            assert frame["function"] == mine["function"], (frame, mine)
            assert (frame.get("file"), frame.get("line")) == (mine["file"], mine["line"]), frame
            agreed += 1
    assert agreed >= 2, theirs["threads"]


def test_a_damaged_symbol_file_is_a_warning_naming_its_line(dumps: Dumps, tmp_path: Path) -> None:
    """A .sym file that cannot be read names nothing, and says which line is wrong."""
    made = dumps("deep")
    sym = symbol_store(made.executable, tmp_path)
    module_line = sym.read_text().split("\n", 1)[0]
    sym.write_text(f"{module_line}\nFUNC 1000 zz 0 f\n")
    hidden = made.executable.with_name(made.executable.name + ".hidden")
    os.rename(made.executable, hidden)
    try:
        proc = stackwalk_minidump(made.path, "--json", "--offline", "--symbols-path", tmp_path)
    finally:
        os.rename(hidden, made.executable)
    assert f"symbol file not used: {sym}: line 2: FUNC size not hex" in proc.stderr
    doc = json.loads(proc.stdout)
    exe = str(made.executable)
    frames = [f for t in doc["threads"] for f in t["frames"] if f["module"] == exe]
    assert frames and all(f["function"] is None for f in frames)


@contextlib.contextmanager
def hidden(files: list[Path]) -> Iterator[None]:
    """``files`` renamed away for the block: not at their paths, as on a crash service."""
    for f in files:
        os.rename(f, f.with_name(f.name + ".hidden"))
    try:
        yield
    finally:
        for f in files:
            os.rename(f.with_name(f.name + ".hidden"), f)


def placed(doc: dict[str, Any]) -> dict[int, list[tuple[str, str | None, str | None]]]:
    """Each thread's frames (without inline ones): pc, module, module offset."""
    return {
        t["tid"]: [(f["pc"], f["module"], f["module_offset"]) for f in real_frames(t)]
        for t in doc["threads"]
    }


@pytest.mark.parametrize("case", ["deep", "threads", "cxx"])
def test_stack_cfi_unwinds_modules_whose_files_are_gone(
    case: str, dumps: Dumps, tmp_path: Path
) -> None:
    """A process whose every file is gone (it ran on private copies of its libraries, then
    hidden), but the store of dump_syms' .sym files: their STACK CFI records unwind every thread
    to the same frames (pc, module, module offset) as the ELF files' CFI, and to
    minidump-stackwalk's frames, trust included, on the same dump and store. The program is
    built at -O2 without frame pointers (deep: a 5000-byte frame, callee-saved registers
    pushed): neither the frame-pointer chain nor a scan would find these frames."""
    made, files = dumps.with_own_libraries(SPECS[case])
    store = tmp_path / "symbols"
    for file in files:
        symbol_store(file, store)
    with_elf = ours(made, "--offline")
    with hidden(files):
        from_syms = ours(made, "--offline", "--symbols-path", str(store))
        proc = subprocess.run(
            [MINIDUMP_STACKWALK, "--json", "--symbols-path", store, made.path],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    missing = {m["path"] for m in from_syms["modules"] if not m["found"]}
    assert missing >= {str(f) for f in files}, from_syms["modules"]
    assert placed(from_syms) == placed(with_elf)
    for thread in from_syms["threads"]:
        trusts = [f["trust"] for f in real_frames(thread)]
        assert trusts == ["context"] + ["cfi"] * (len(trusts) - 1), (thread["tid"], trusts)
        assert thread["end"] == "end_of_stack", thread
    # minidump-stackwalk, thread by thread.
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout)
    by_tid = {t["tid"]: t for t in from_syms["threads"]}
    assert sorted(by_tid) == sorted(t["thread_id"] for t in theirs["threads"])
    for tid, mine, their in compared_threads(from_syms, theirs):
        if mine == their:
            continue
        # Where they differ, minidump-stackwalk goes on past the outermost frame: dump_syms
        # leaves out the undefined return address of _start (at the entry point) and of clone3
        # (a new thread's first frame), and minidump-stackwalk, finding no .ra rule there,
        # scans the stack for a word that points into code. What it finds is no return
        # address: it follows no call instruction (objdump) of its module.
        assert their[: len(mine)] == mine, (tid, mine, their)
        outermost = real_frames(by_tid[tid])[-1]["function"]
        assert outermost in ("_start", "clone3"), (tid, outermost)
        pc, _, _, trust = their[len(mine)]
        (module,) = [
            m for m in from_syms["modules"] if int(m["start"], 16) <= pc < int(m["end"], 16)
        ]
        calls = disassembly(module["path"]).calls
        assert trust == "scan" and pc - int(module["bias"], 16) not in calls, (tid, hex(pc), module)


def test_symbols_url_fetches_into_a_cache(dumps: Dumps, tmp_path: Path) -> None:
    """``--symbols-url``: the store served over HTTP (a local http.server) gives the frames the
    store on disk gives, every module's .sym file asked for once; a second run reads them all
    from the cache (no request); a file the server lacks (404) is asked for once per run, even
    for two dumps; ``--offline`` asks nothing."""
    made, files = dumps.with_own_libraries(SPECS["deep"])
    store = tmp_path / "store"
    syms = [symbol_store(file, store) for file in files]
    # The store lacks the dynamic linker's (no stack passes through it).
    (lacking,) = [sym for sym in syms if sym.name.startswith("ld-linux")]
    shutil.rmtree(lacking.parent.parent)
    syms.remove(lacking)
    served = {"/" + str(sym.relative_to(store)) for sym in syms}
    env = {**os.environ, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    minidump: list[str | Path] = [sys.executable, "-m", "stackwalk", "minidump", "--json"]
    with hidden(files), symbol_server(store, tmp_path / "http.log") as server:
        local = ours(made, "--symbols-path", str(store))
        offline = run([*minidump, made.path, "--offline", "--symbols-url", server.url], env=env)
        assert server.requests() == [], "offline"
        first = run([*minidump, made.path, made.path, "--jobs", "1", "--symbols-url", server.url],
                    env=env)  # fmt: skip
        fetched = server.requests()
        second = run([*minidump, made.path, "--symbols-url", server.url], env=env)
        again = server.requests()[len(fetched) :]
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    docs = [json.loads(line) for line in first.stdout.splitlines()]
    assert len(docs) == 2
    for doc in [*docs, json.loads(second.stdout)]:
        assert doc["threads"] == local["threads"]
    assert {f["function"] for t in local["threads"] for f in t["frames"]} >= {"crash_here", "main"}
    # Each module of the store fetched once (200), the one it lacks asked for once (404).
    missing = "/" + str(lacking.relative_to(store))
    assert sorted(fetched) == sorted([(p, 200) for p in served] + [(missing, 404)]), fetched
    # The next run: every file from the cache; the one the server lacks asked for again.
    assert again == [(missing, 404)], again
    for sym in syms:
        cached = tmp_path / "cache" / "breakpad" / sym.relative_to(store)
        assert cached.read_bytes() == sym.read_bytes()
    # Offline, with nothing cached yet: no symbols, a stack without the .sym's CFI.
    assert offline.stdout and "crash_here" not in offline.stdout, offline.stderr


def test_a_dumps_symbol_files_are_asked_for_at_once(dumps: Dumps, tmp_path: Path) -> None:
    """The .sym files of a dump's modules are asked of a symbol server together (8 at most), not
    one after another: a server that answers only once it holds them all at once gives the
    frames the store on disk gives, each file asked for once."""
    made, files = dumps.with_own_libraries(SPECS["deep"])
    store = tmp_path / "store"
    for file in files:
        symbol_store(file, store)
    # Every module's but the vdso's (its image is in the dump).
    listed = MinidumpFile(str(made.path)).modules
    keys = {(m["debug_file"], m["debug_id"]) for m in listed if "vdso" not in m["name"]}
    wanted = min(len(keys), 8)
    assert wanted >= 3, keys

    env = {**os.environ, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    with hidden(files), hostile_server(held(wanted, files_from(store))) as (url, state):
        proc = run([sys.executable, "-m", "stackwalk", "minidump", "--json", made.path,
                    "--symbols-url", url], env=env)  # fmt: skip
        local = ours(made, "--symbols-path", str(store))
    assert proc.returncode == 0, proc.stderr
    assert state.most_open == wanted, (state.most_open, wanted)
    assert len(state.paths) == len(set(state.paths)) == len(keys), state.paths
    assert json.loads(proc.stdout)["threads"] == local["threads"]


def test_a_dead_symbol_server_is_one_warning(dumps: Dumps, tmp_path: Path) -> None:
    """A server that does not answer: one warning (not one per module), the frames that can be
    found without its symbols, and the next server still asked."""
    made, files = dumps.with_own_libraries(SPECS["deep"])
    store = tmp_path / "store"
    for file in files:
        symbol_store(file, store)
    dead = f"http://127.0.0.1:{_free_port()}"
    env = {**os.environ, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    minidump: list[str | Path] = [
        sys.executable,
        "-m",
        "stackwalk",
        "minidump",
        "--json",
        made.path,
    ]
    with hidden(files), symbol_server(store, tmp_path / "http.log") as server:
        alone = run([*minidump, "--symbols-url", dead], env=env)
        both = run([*minidump, "--symbols-url", dead, "--symbols-url", server.url], env=env)
        local = ours(made, "--symbols-path", str(store))
    for proc in (alone, both):
        warnings = [line for line in proc.stderr.splitlines() if "symbol server" in line]
        assert warnings == [
            f"stackwalk: warning: symbol server {dead} did not answer (Connection refused): "
            "not asked again"
        ], proc.stderr
        assert "error" not in proc.stderr, proc.stderr
    assert alone.returncode in (0, 1) and "crash_here" not in alone.stdout
    assert both.returncode == 0 and json.loads(both.stdout)["threads"] == local["threads"]


def test_rust_minidumps_public_linux_dump() -> None:
    """rust-minidump's own test dump (linux-mini.dmp: a crash on Ubuntu 16.04, whose files are
    not here), read as minidump-stackwalk reads it: the crash, the threads' frame 0, the
    modules with their debug and code ids, the system, in its JSON shape."""
    dump = Path(__file__).parent / "data" / "rust-minidump" / "linux-mini.dmp"
    ours = run([sys.executable, "-m", "stackwalk", "minidump", "--format", "minidump-stackwalk",
                str(dump)])  # fmt: skip
    assert ours.returncode in (0, 1), ours.stderr
    theirs = run([MINIDUMP_STACKWALK, "--json", str(dump)])
    assert theirs.returncode == 0, theirs.stderr
    mine, ref = json.loads(ours.stdout), json.loads(theirs.stdout)
    for key in ("type", "address", "crashing_thread"):
        assert mine["crash_info"][key] == ref["crash_info"][key], key
    for key in ("pid", "thread_count", "main_module"):
        assert mine[key] == ref[key], key
    for key in ("os", "cpu_arch"):
        assert mine["system_info"][key] == ref["system_info"][key], key
    fields = ("filename", "base_addr", "end_addr", "debug_id", "code_id")
    assert [[m[k] for k in fields] for m in mine["modules"]] == [
        [m[k] for k in fields] for m in ref["modules"]
    ]
    first = ("offset", "module", "module_offset", "trust")
    assert [[t["frames"][0][k] for k in first] for t in mine["threads"]] == [
        [t["frames"][0][k] for k in first] for t in ref["threads"]
    ]


def test_a_python_minidump_says_why_it_has_no_python_frames(dumps: Dumps) -> None:
    """A minidump holds the threads' stacks, not the interpreter's heap: its Python frames
    cannot be read, and the document says why (the same native frames as --native-only gives)
    instead of guessing; the core of the same stop, which has the heap, gives them."""
    made = dumps("python")
    doc = ours(made)
    assert doc["python"]["version"] == "3.11", doc["python"]
    assert re.fullmatch(r"_PyRuntime at 0x[0-9a-f]+ is not in the memory captured",
                        doc["python"]["error"]), doc["python"]  # fmt: skip
    assert all(f["kind"] == "native" for t in doc["threads"] for f in t["frames"])
    native = ours(made, "--native-only")
    assert [[f["pc"] for f in t["frames"]] for t in doc["threads"]] == [
        [f["pc"] for f in t["frames"]] for t in native["threads"]
    ]
    text = stackwalk_minidump(made.path)
    assert "Python 3.11: no Python frames: _PyRuntime at" in text.stdout, text.stdout
    core = stackwalk_core(made.core, "--json")
    assert core.returncode == 0, core.stderr
    from_core = json.loads(core.stdout)
    assert from_core["python"]["error"] is None, from_core["python"]
    assert any(f["kind"] == "python" for t in from_core["threads"] for f in t["frames"])
