"""``python -m stackwalk perf`` on perf.data files recorded at test time (see perfdata.py), and
the stack-trace database behind its aggregations (``stackwalk.StackDB``).

The reference is ``perf script --no-inline`` on the same files: every sample's metadata, kernel
frames and user frames (module and address, in perf script's convention: see perfdata.py and
perfdata.our_user_addresses), the folded stacks made from its output, and its samples before
the damage in a damaged file. perf script's DWARF unwinder is elfutils' libdw. Where it gives up
before the end of the stack, its frame list is shorter than stackwalk's: "perf stopped early"
is defined precisely as perf's user frames being a strict prefix of ours (an empty list
included: perf unwinds nothing when a sample has no stack copy). Every other sample must agree
exactly, save one more failure of perf's, checked against objdump where it happens (see
perf_skipped_frames), and at least 99% of each workload's samples must agree exactly. perf 6.1
often stops early in a program exec'd by a process it already knew (the fork workload); those
samples are checked against perf on the same program recorded on its own (reexec_excused).
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from corefiles import on_terminal
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from perfdata import (
    PERF,
    RECORD,
    SCRIPT_FIELDS,
    WORKLOADS,
    Key,
    RawRecord,
    Recording,
    Recordings,
    ScriptSample,
    call_chain_problems,
    data_section,
    disassembly,
    our_user_addresses,
    parse_script,
    perf_env,
    perf_record,
    perf_script_inline,
    run,
    sized_function,
    stackwalk_perf,
    symbol_values,
)
from readelf_frames import readelf_row
from realstacks import Builder
from stackwalk._core import TRUST_LEVELS
from stackwalk.errors import StackwalkError

MIN_EXACT = 0.99
JSON_KEYS = {"pid", "tid", "time", "comm", "frames"}
FRAME_KEYS = {"pc", "module", "module_offset", "function", "function_offset", "kernel", "trust"}
HEX = re.compile(r"0x(0|[1-9a-f][0-9a-f]*)")
# inferno's (and flamegraph.pl's) tooltip: "name (1,234 samples, 12.34%)".
SVG_TITLE = re.compile(r"(?P<name>.*) \((?P<count>[\d,]+) samples?, (?P<percent>[\d.]+)%\)")
# The annotations of folded frame names (kernel, jit, inlined, ...) the flame graph leaves out.
ANNOTATION = re.compile(r"_\[[kwij]\]$")


@functools.cache
def _stackwalk(*args: str) -> subprocess.CompletedProcess[str]:
    return stackwalk_perf(*args)


def cli(recording: Recording | Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``stackwalk perf`` on a recording, once per session per options; ``--no-inline`` unless
    ``--inline`` is given, as the reference is ``perf script --no-inline``."""
    path = recording.path if isinstance(recording, Recording) else recording
    if "--inline" not in options:
        options = (*options, "--no-inline")
    return _stackwalk(str(path), *options)


def check_clean_exit(proc: subprocess.CompletedProcess[str], what: str) -> None:
    assert "Traceback" not in proc.stderr, f"{what}:\n{proc.stderr}"
    assert proc.returncode == 0, f"{what}: exit status {proc.returncode}\n{proc.stderr}"


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ours_json(recording: Recording) -> list[dict[str, Any]]:
    proc = cli(recording, "--json")
    check_clean_exit(proc, f"stackwalk perf --json {recording.path}")
    return json_lines(proc.stdout)


def by_key(samples: Iterable[Mapping[str, Any]]) -> dict[Key, Mapping[str, Any]]:
    """stackwalk's samples by (pid, tid, time), checked unique."""
    out: dict[Key, Mapping[str, Any]] = {}
    for sample in samples:
        key = (sample["pid"], sample["tid"], sample["time"])
        assert key not in out, f"two samples of pid {key[0]} tid {key[1]} at time {key[2]}"
        out[key] = sample
    return out


def h(value: str) -> int:
    assert HEX.fullmatch(value), value
    return int(value, 16)


# --- the references ---------------------------------------------------------------------------


def test_workloads_do_what_they_should(recordings: Recordings) -> None:
    """The recordings hold the cases the tests are about, as perf script sees them."""
    threads = recordings("threads").script()
    assert len({s.tid for s in threads}) == 5, "not every thread was sampled"
    dlopen = recordings("dlopen")
    library = os.path.realpath(dlopen.argv[1])
    in_library = [s.time for s in dlopen.script() if library in {f.dso for f in s.frames}]
    before = [s.time for s in dlopen.script()
              if any(f.symbol == "before" for f in s.user_frames)]  # fmt: skip
    assert in_library and before and max(before) < min(in_library), (len(before), len(in_library))
    fork = recordings("fork").script()
    assert len({s.pid for s in fork}) == 2 and len({s.comm for s in fork}) == 2
    python = recordings("python").script()
    assert any(f.symbol == "_PyEval_EvalFrameDefault" for s in python for f in s.frames)


@pytest.mark.parametrize("workload", ["qsort", "cxx", "dlopen"])
def test_perf_script_prints_return_address_minus_one(recordings: Recordings, workload: str) -> None:
    """The convention the comparisons rely on (perfdata.py's docstring), checked on the
    programs built here: perf script prints user frame 0 at an instruction's start, and every
    caller frame one byte before the end of a call instruction (its return address − 1)."""
    recording = recordings(workload)
    script = recording.script()
    for dso in map(os.path.realpath, recording.argv):  # the programs and library built here
        assert any(f.dso == dso for s in script for f in s.user_frames), f"no frame in {dso}"
        code = disassembly(dso)
        for sample in script:
            for index, frame in enumerate(sample.user_frames):
                if frame.dso != dso:
                    continue
                where = f"{sample.key} #{index} {frame.address:#x} {frame.symbol} in {dso}"
                if index == 0:
                    assert frame.address in code.starts, f"{where}: not an instruction"
                else:
                    assert frame.address + 1 in code.calls, f"{where}: not after a call − 1"


# --- agreement with perf script, sample by sample --------------------------------------------

EXACT, PERF_STOPPED_EARLY, DISAGREE = "exact", "perf stopped early", "disagree"
PERF_SKIPPED_FRAMES = "perf skipped frames"
# Ours stop where no CFI covers the pc (e.g. libgcc_s's .fini, which has no FDE) and frame 0 is
# not a leaf whose return address is at sp (test_frame_zero_without_cfi): recovering those
# frames needs the frame-pointer and scanning fallbacks, where perf's libdw guesses on (and at
# times into garbage). Not exact, so it counts against the rate.
OURS_NO_CFI = "stackwalk stopped without CFI"
# perf shows frames past ours that are no code addresses (_not_code: ``ffffffffffffffff
# [unknown]``, a return address of 0 less one): its unwinder read on past the end of the stack
# perf record copied (python's getpath_realpath keeps a path of 4,097 wide characters on its
# stack, more than the 8 KiB copied) and took what it found there for return addresses. Ours
# end where the copy does. Not exact, so it counts against the rate.
PERF_PAST_THE_COPY = "perf read past the copied stack"
# perf's frames are ours up to one, then no code (_not_code: ``7ffc2af08ca7 [stack]``), where
# ours go on: its unwinder took a word of the stack for a return address (seen once in the cxx
# workload, at exit, under a libstdc++ function without a symbol). Ours must then be a proven
# chain to the program's _start (no_code_proven). Not exact, so it counts against the rate.
PERF_INTO_NO_CODE = "perf went on into no code"
# A sample as perf script shows it, and ours (from --json).
Pair = tuple[ScriptSample, Mapping[str, Any]]


def classify(theirs: ScriptSample, ours: Mapping[str, Any]) -> str:
    """EXACT: the same user frames; PERF_STOPPED_EARLY: perf's are a strict prefix of ours
    (perf's unwinder gave up, ours went on); PERF_SKIPPED_FRAMES: see perf_skipped_frames;
    OURS_NO_CFI: see stopped_without_cfi; PERF_PAST_THE_COPY: ours are a strict prefix of
    perf's, whose other frames are no code; DISAGREE: anything else."""
    perf_frames = theirs.user_addresses()
    our_frames = our_user_addresses(ours["frames"])
    if perf_frames == our_frames:
        return EXACT
    if len(perf_frames) < len(our_frames) and our_frames[: len(perf_frames)] == perf_frames:
        return PERF_STOPPED_EARLY
    if perf_skipped_frames(perf_frames, ours["frames"]):
        return PERF_SKIPPED_FRAMES
    if stopped_without_cfi(perf_frames, ours["frames"]):
        return OURS_NO_CFI
    if (
        len(our_frames) < len(perf_frames)
        and perf_frames[: len(our_frames)] == our_frames
        and all(map(_not_code, perf_frames[len(our_frames) :]))
    ):
        return PERF_PAST_THE_COPY
    same = next(i for i, f in enumerate([*perf_frames, None]) if our_frames[i : i + 1] != [f])
    if 0 < same < len(our_frames) and all(map(_not_code, perf_frames[same:])):
        return PERF_INTO_NO_CODE
    return DISAGREE


def no_code_proven(ours: Mapping[str, Any]) -> bool:
    """Where perf went on into no code (PERF_INTO_NO_CODE), ours are right by themselves: each
    return address follows a call that calls the frame below it (call_chain_problems), and the
    last frame is the program's _start."""
    user = [f for f in ours["frames"] if not f["kernel"] and not f.get("inline")]
    return bool(user) and user[-1]["function"] == "_start" and not call_chain_problems(user)


def stopped_without_cfi(
    perf_frames: list[tuple[str | None, int]], frames: Sequence[Mapping[str, Any]]
) -> bool:
    """Ours are a strict prefix of perf's and end at a pc for which readelf shows no FDE in
    its module (looked up inside the call for a caller: at the return address − 1)."""
    ours = our_user_addresses(frames)
    if not ours or len(ours) >= len(perf_frames) or perf_frames[: len(ours)] != ours:
        return False
    user = [f for f in frames if not f["kernel"]]
    last = user[-1]
    if last["module"] is None or not os.path.isfile(last["module"]):
        return False
    address = int(last["module_offset"], 16) - (1 if len(user) > 1 else 0)
    return readelf_row(last["module"], address) is None


@functools.cache
def _code_ranges(path: str) -> tuple[tuple[int, int], ...]:
    """The file ranges (offset, end) of an ELF file's executable PT_LOADs; none if unreadable."""
    try:
        with open(path, "rb") as f:
            return tuple(
                (seg["p_offset"], seg["p_offset"] + seg["p_filesz"])
                for seg in ELFFile(f).iter_segments()
                if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1
            )
    except (OSError, ELFError):
        return ()


def _not_code(frame: tuple[str | None, int]) -> bool:
    """A frame of perf's that is no code address: ``[unknown]``, or a file offset that lies in
    none of its module's executable segments (perf's frame-pointer fallback, once lost, reads
    any word as a return address: ``17b9f214 [unknown] (/usr/bin/python3.11)``, past the end of
    a 7 MB file)."""
    module, address = frame
    if module is None:
        return True
    return not any(start <= address < end for start, end in _code_ranges(module))


def perf_skipped_frames(perf_frames: list[tuple[str | None, int]],
                        frames: Sequence[Mapping[str, Any]]) -> bool:  # fmt: skip
    """Whether perf left frames out of the middle of our stack, and ours are right there.

    libdw, perf's unwinder, falls back to following frame pointers when it cannot use a
    frame's CFI, and that loses the return address of every function that keeps no frame
    pointer (perfdata.py's docstring): in the dynamic loader's
    start-up perf script shows ``dl_main <- _dl_sysdep_start <- _start`` where ours shows
    ``dl_main <- _dl_sysdep_start <- _dl_start <- _start`` (objdump: ld.so's _start calls
    _dl_start, which calls _dl_sysdep_start). libdw also skips the caller of a frame-0 leaf
    without CFI (the developers' guide says so of eu-stack): at ``_fini+0`` perf shows
    ``__run_exit_handlers`` where ours show ``_dl_fini``, which calls each object's ``_fini``
    (through a function that jumps to it: see tail_calls), then ``__run_exit_handlers``; there
    perf then lost its way (an ``[unknown]`` frame). Counted as such when perf's frames are ours
    with some left out (the same first frame, and the same last one unless perf's stack ends in
    frames that are no code address (``[unknown]``, or past the end of its module's code: see
    _not_code), which are left out with the part of ours past the last frame perf matched) and,
    around every frame perf left out, each of our return addresses follows a call (objdump) that
    calls the function of the frame inside it, or one that tail-calls (tail_calls), when the
    call is direct."""
    ours = our_user_addresses(frames)
    lost = 0
    while len(perf_frames) > lost and _not_code(perf_frames[-1 - lost]):
        lost += 1
    if lost and ours and ours[-1][0] is not None:
        perf_frames = perf_frames[:-lost]
    else:
        lost = 0
    if not perf_frames or perf_frames[0] != ours[0]:
        return False
    if not lost and perf_frames[-1] != ours[-1]:
        return False
    matched, position = [], 0
    for frame in perf_frames:
        while position < len(ours) and ours[position] != frame:
            position += 1
        if position == len(ours):
            return False
        matched.append(position)
        position += 1
    user = [f for f in frames if not f["kernel"]]
    skipped = set(range(matched[-1] + 1 if lost else len(ours))) - set(matched)
    if not skipped:
        return False  # nothing left out before perf lost its way: not this case
    for index in sorted(skipped | {i + 1 for i in skipped}):
        caller, callee = user[index], user[index - 1]
        if caller["module"] is None:
            return False
        return_address = int(caller["module_offset"], 16)
        calls = disassembly(caller["module"]).calls
        if return_address not in calls:
            return False
        target = calls[return_address]
        if target is None or tail_calls(caller["module"], target):
            continue
        if callee["function_offset"] is None:
            return False  # a function without a name: where it starts is not known
        callee_start = int(callee["module_offset"], 16) - int(callee["function_offset"], 16)
        if callee["module"] != caller["module"] or target != callee_start:
            return False
    return True


def tail_calls(path: str, function: int) -> bool:
    """Whether the function at ELF address ``function`` of ``path`` (as far as its FDE reaches,
    readelf) holds an indirect jump: a tail call, whose callee returns straight to this
    function's caller. ld.so's _dl_fini calls _dl_call_fini (a local function, unnamed in the
    stripped ld.so), which jumps to each object's DT_FINI: _fini's return address is in
    _dl_fini, and the call before it calls _dl_call_fini."""
    found = readelf_row(path, function)
    if found is None:
        return False
    fde, _ = found
    return any(fde.start <= a < fde.end for a in disassembly(path).indirect_jumps)


def side_by_side(theirs: ScriptSample, ours: Mapping[str, Any]) -> str:
    perf_frames = theirs.user_frames
    our_frames = [f for f in ours["frames"] if not f["kernel"]]
    expected = our_user_addresses(ours["frames"])
    rows = [f"{theirs.comm} {theirs.pid}/{theirs.tid} at {theirs.time} ns:"]
    for i in range(max(len(perf_frames), len(our_frames))):
        if i < len(perf_frames):
            p = perf_frames[i]
            perf = f"{p.address:x} {p.symbol}+{p.offset} ({os.path.basename(p.dso)})"
        else:
            perf = "-"
        if i < len(our_frames):
            module, address = expected[i]
            name = our_frames[i]["function"]
            mine = f"{address:x} {name} ({os.path.basename(module or '?')})"
        else:
            mine = "-"
        mark = " " if i < min(len(perf_frames), len(our_frames)) and perf_frames[i].address == (
            expected[i][1]) else "*"  # fmt: skip
        rows.append(f"{mark}#{i:<3} perf: {perf:<60} ours: {mine}")
    return "\n".join(rows)


def agreement(recording: Recording) -> dict[str, list[Pair]]:
    """Every sample of a recording, perf script's and ours side by side, by how they agree."""
    ours = by_key(ours_json(recording))
    out: dict[str, list[Pair]] = {EXACT: [], PERF_STOPPED_EARLY: [], PERF_SKIPPED_FRAMES: [],
                                  OURS_NO_CFI: [], PERF_PAST_THE_COPY: [], PERF_INTO_NO_CODE: [],
                                  DISAGREE: []}  # fmt: skip
    for theirs in recording.script():
        assert theirs.key in ours, f"stackwalk has no sample {theirs.key} ({theirs.comm})"
        out[classify(theirs, ours[theirs.key])].append((theirs, ours[theirs.key]))
    return out


def is_reexec(recording: Recording, theirs: ScriptSample) -> bool:
    """A sample taken across an exec, where perf 6.1 unwinds with the wrong process image: of
    the program exec'd by a process perf already knew (see perfdata.py), or any sample whose
    frames perf places in its own executable (the perf process that forked the workload: a
    sample right after the workload's exec, before perf saw its mappings)."""
    if recording.reexec is not None and theirs.comm == recording.reexec[0]:
        return True
    return any(dso is not None and is_perf(dso) for dso, _ in theirs.user_addresses())


@functools.cache
def is_perf(path: str) -> bool:
    """Whether a file is perf's own executable."""
    perf = shutil.which(PERF)
    return perf is not None and os.path.realpath(path) == os.path.realpath(perf)


def reexec_excused(recordings: Recordings, recording: Recording, pairs: list[Pair]) -> list[Pair]:
    """The samples taken across an exec (is_reexec), where perf 6.1 is unreliable (it stops
    early, or right after the exec unwinds with the mappings of the program that exec'd, perf
    itself), each checked against perf on the same program recorded on its own: our frames
    are in modules perf shows there or in the program's dynamic loader (PT_INTERP, while it
    starts the program), and ours end where a fully unwound stack ends, in ``_start`` (the
    program's or the loader's)."""
    found = [(theirs, ours) for theirs, ours in pairs if is_reexec(recording, theirs)]
    if not found:
        return []
    alone = recordings(recording.reexec[1]) if recording.reexec else recording
    modules = {m for s in alone.script() for m, _ in s.user_addresses() if m and not is_perf(m)}
    modules |= {interpreter(alone.argv[0])}
    for theirs, ours in found:
        user = [f for f in ours["frames"] if not f["kernel"]]
        if user and user[0]["function"] == "execve":
            # Taken inside the execve system call: the comm is already the new program's, the
            # user stack still the old one's, which has nothing more to show perf's way.
            continue
        ours_modules = {module for module, _ in our_user_addresses(ours["frames"])}
        assert ours_modules <= modules, f"{theirs.key}: frames in {ours_modules - modules}"
        last = [f for f in ours["frames"] if not f["kernel"]][-1]
        starts = symbol_values(last["module"] or "", "_start")
        offset = h(last["module_offset"]) - 1
        assert any(0 <= offset - start < 64 for start in starts), (
            f"{theirs.key}: ours ends at {last}, not in _start"
        )
    return found


def interpreter(executable: str) -> str:
    """The real path of a program's dynamic loader (its PT_INTERP)."""
    with open(executable, "rb") as f:
        for segment in ELFFile(f).iter_segments():
            if segment["p_type"] == "PT_INTERP":
                return os.path.realpath(segment.get_interp_name())
    return ""


@pytest.mark.parametrize("workload", WORKLOADS)
def test_user_frames_match_perf_script(
    recordings: Recordings, workload: str, record_property: Any
) -> None:
    """Every sample's user frames equal perf script's, module and address, except where perf
    stopped early (or, rarely, skipped frames where ours are shown right, see
    perf_skipped_frames); at least 99% of the samples agree exactly. In the fork workload's
    exec'd program, where perf 6.1 often stops early, ours are checked against perf on that
    program recorded alone, and those samples are left out of the rate."""
    recording = recordings(workload)
    groups = agreement(recording)
    inexact = [pair for kind, pairs in groups.items() if kind != EXACT for pair in pairs]
    excused = reexec_excused(recordings, recording, inexact)
    for kind in groups:
        if kind != EXACT:
            groups[kind] = [p for p in groups[kind] if not is_reexec(recording, p[0])]
    total = sum(map(len, groups.values()))
    exact = len(groups[EXACT])
    rate = exact / total
    early = len(groups[PERF_STOPPED_EARLY])
    summary = (f"{workload}: {exact}/{total} samples ({rate:.2%}) exactly as perf script, "
               f"perf stopped early on {early}, skipped frames on "
               f"{len(groups[PERF_SKIPPED_FRAMES])}, ours stopped without CFI on "
               f"{len(groups[OURS_NO_CFI])}, perf read past the copied stack on "
               f"{len(groups[PERF_PAST_THE_COPY])}, into no code on "
               f"{len(groups[PERF_INTO_NO_CODE])}, {len(groups[DISAGREE])} disagree")  # fmt: skip
    if excused:
        summary += f"; {len(excused)} more after the exec, where perf is unreliable"
    print(summary)
    record_property("agreement", summary)
    assert not groups[DISAGREE], "\n\n".join(
        [summary] + [side_by_side(t, o) for t, o in groups[DISAGREE][:3]]
    )
    for theirs, ours in groups[PERF_INTO_NO_CODE]:
        assert no_code_proven(ours), side_by_side(theirs, ours)
    assert rate >= MIN_EXACT, "\n\n".join(
        [summary] + [side_by_side(t, o) for t, o in groups[PERF_STOPPED_EARLY][:3]]
    )


# --- frame 0 without CFI ----------------------------------------------------------------------


# The program's frames above frame 0 of each kind of sample the test is about (perf_leaf.c).
LEAF_STACKS = {
    "asm_spin": ["asm_spin", "work", "main", "_start"],
    "clone3": ["make_threads", "main", "_start"],
}


def test_frame_zero_without_cfi(recordings: Recordings) -> None:
    """Samples whose frame 0 has no CFI (readelf shows no FDE at its pc): main -> work ->
    asm_spin, a leaf in hand-written assembly, and the main thread in clone3 right after its
    syscall instruction, where glibc ends clone3's FDE. Their return address is at sp: ours go
    on from there with CFI and reach the program's entry point.

    perf script (libdw) stops at frame 0 in both: its frames are a prefix of ours, and ours past
    it are proven with objdump instead (call_chain_problems), up to _start, the function at the
    ELF entry point, through the functions the program's source calls. A new thread starts at
    the instruction after clone3's syscall, on a stack with nothing of clone3's caller: ours stop
    at frame 0 there, where perf script follows rbp into garbage (a frame in ``//anon``).

    Samples in clone3 come by chance: where a recording has none (a loaded machine), the
    workload is recorded again, up to three times in all."""
    found: Counter[str] = Counter()
    for attempt in range(3):
        recording = recordings("leaf") if attempt == 0 else recordings.again("leaf", attempt)
        found += frame_zero_without_cfi(recording)
        if found["clone3"]:
            break
    assert found["asm_spin"] >= 1 and found["clone3"] >= 1, found


def frame_zero_without_cfi(recording: Recording) -> Counter[str]:
    """test_frame_zero_without_cfi's checks of one recording: what it found, by function."""
    exe = os.path.realpath(recording.argv[0])
    with open(exe, "rb") as f:
        entry = ELFFile(f).header["e_entry"]
    ours = by_key(ours_json(recording))
    found: Counter[str] = Counter()
    for theirs in recording.script():
        user = [f for f in ours[theirs.key]["frames"] if not f["kernel"]]
        if not user or user[0]["module"] is None:
            continue
        first = user[0]
        module = os.path.realpath(first["module"])
        if readelf_row(module, h(first["module_offset"])) is not None:
            continue  # frame 0 has CFI
        function = first["function"]
        if function not in LEAF_STACKS:
            continue
        where = side_by_side(theirs, ours[theirs.key])
        perf_frames = theirs.user_addresses()
        mine = our_user_addresses(ours[theirs.key]["frames"])
        assert perf_frames[:1] == mine[:1], where
        if theirs.tid != theirs.pid:
            assert function == "clone3" and len(mine) == 1, where
            found["a new thread"] += 1
            continue
        assert mine[: len(perf_frames)] == perf_frames, where
        problems = call_chain_problems(user)
        assert not problems, f"{where}\n" + "\n".join(problems)
        last = user[-1]
        assert os.path.realpath(last["module"] or "") == exe, where
        assert entry in symbol_values(exe, last["function"] or ""), where
        program = [f["function"] for f in user if os.path.realpath(f["module"] or "") == exe]
        assert program == LEAF_STACKS[function], where
        found[function] += 1
        found["perf stopped at frame 0"] += len(perf_frames) == 1
    print(dict(found))
    return found


def test_frames_without_cfi_by_frame_pointers(recordings: Recordings) -> None:
    """The qsort program built with frame pointers and without CFI (-fno-asynchronous-unwind-
    tables): main -> qsort (libc, with CFI) -> its merge sort -> compare_ints, and main -> fill.
    Where CFI stops, at the program's functions, the walk goes on by the frame-pointer chain
    (the default strategies, cfi,frame_pointer, as perf script's libdw does), and CFI again in
    libc: every sample in main reaches _start, the function at the ELF entry point, and each of
    its return addresses follows a call that calls the frame below it (objdump:
    call_chain_problems). With ``--strategies cfi`` ours are a prefix of those, shorter in most
    samples. perf script's are ours, or ours with frames left out (libdw skips the caller of a
    frame-pointer leaf: perf_skipped_frames), or stop early, or end in garbage: never another
    frame where ours has one."""
    recording = recordings("nocfi")
    exe = os.path.realpath(recording.argv[0])
    with open(exe, "rb") as f:
        entry = ELFFile(f).header["e_entry"]
    (main,) = symbol_values(exe, "main")
    assert readelf_row(exe, main) is None, "main has CFI"
    ours = by_key(ours_json(recording))
    cfi_alone = cli(recording, "--json", "--strategies", "cfi")
    check_clean_exit(cfi_alone, "stackwalk perf --strategies cfi")
    shorter = by_key(json_lines(cfi_alone.stdout))
    found: Counter[str] = Counter()
    for theirs in recording.script():
        sample = ours[theirs.key]
        user = [f for f in sample["frames"] if not f["kernel"]]
        in_program = [f["function"] for f in user if os.path.realpath(f["module"] or "") == exe]
        if "main" not in in_program:
            continue  # the dynamic loader's start, or the exit
        where = side_by_side(theirs, sample)
        problems = call_chain_problems(user, targets_in=exe)
        assert not problems, f"{where}\n" + "\n".join(problems)
        assert entry in symbol_values(exe, user[-1]["function"] or ""), where
        mine = our_user_addresses(sample["frames"])
        prefix = our_user_addresses(shorter[theirs.key]["frames"])
        assert mine[: len(prefix)] == prefix, where
        # Each frame says how it was found: the caller of a function of the program (no CFI)
        # by its frame record, any other by CFI.
        found_by = ["context"] + [
            "frame_pointer" if os.path.realpath(callee["module"] or "") == exe else "cfi"
            for callee in user[:-1]
        ]
        assert [f["trust"] for f in user] == found_by, where
        found["by CFI alone: shorter"] += len(prefix) < len(mine)
        kind = classify(theirs, sample)
        if kind in (DISAGREE, PERF_PAST_THE_COPY):
            # perf followed rbp on where ours end at _start's CFI, past the outermost frame:
            # its frames past those it shares with ours are no code.
            perf_frames = theirs.user_addresses()
            same = next(i for i, f in enumerate([*mine, None]) if perf_frames[i : i + 1] != [f])
            assert same and all(map(_not_code, perf_frames[same:])), f"{kind}\n{where}"
            kind = "perf went on into no code"
        found[kind] += 1
        found["samples"] += 1
    print(dict(found))
    assert found["samples"] >= 100, found
    assert found["by CFI alone: shorter"] >= found["samples"] // 2, found


@pytest.mark.parametrize("workload", WORKLOADS)
def test_sample_metadata(recordings: Recordings, workload: str) -> None:
    """The same samples as perf script (pid, tid, time to the ns), each with perf's comm, in
    the JSON schema of the issue."""
    recording = recordings(workload)
    ours = ours_json(recording)
    theirs = recording.script()
    assert len(ours) == len(theirs)
    for sample in ours:
        assert set(sample) == JSON_KEYS, sample.keys()
        assert all(isinstance(sample[k], int) for k in ("pid", "tid", "time")), sample
        assert isinstance(sample["comm"], str)
        for frame in sample["frames"]:
            assert set(frame) == FRAME_KEYS, frame.keys()
            h(frame["pc"])
            assert isinstance(frame["kernel"], bool)
            # The kernel's frames are its own unwinder's; each user frame says how ours
            # found it (the sample's registers for the first).
            assert frame["trust"] in ((None,) if frame["kernel"] else TRUST_LEVELS), frame
            if frame["module"] is not None:
                h(frame["module_offset"])
            if frame["function"] is not None:
                h(frame["function_offset"])
        user = [f for f in sample["frames"] if not f["kernel"]]
        assert not user or user[0]["trust"] == "context", sample
    mine = by_key(ours)
    assert set(mine) == {t.key for t in theirs}
    wrong = [(t.key, t.comm, mine[t.key]["comm"]) for t in theirs if mine[t.key]["comm"] != t.comm]
    assert not wrong, f"comm differs (key, perf's, ours): {wrong[:5]}"
    if workload == "fork":
        # The child's samples before and after its exec, under both programs' names (a comm
        # holds 15 characters).
        child = {t.comm for t in theirs if t.pid != theirs[0].pid}
        assert child == {Path(program).name[:15] for program in recording.argv[:2]}, child


def test_kernel_frames_as_perf_script(recordings: Recordings) -> None:
    """Where the sample's callchain has kernel frames, ours come first, at perf's addresses."""
    with_kernel = 0
    for workload in WORKLOADS:
        recording = recordings(workload)
        mine = by_key(ours_json(recording))
        for theirs in recording.script():
            frames = mine[theirs.key]["frames"]
            kinds = [f["kernel"] for f in frames]
            assert kinds == sorted(kinds, reverse=True), f"{theirs.key}: kernel frames not first"
            ours = [h(f["pc"]) for f in frames if f["kernel"]]
            # perf script sometimes prints a frame at 0xffffffffffffffff (-1, no code can be
            # there) that is in no callchain of the file: a placeholder of its own, left out.
            perf = [f.address for f in theirs.kernel_frames if f.address != 2**64 - 1]
            assert ours == perf, f"{workload} {theirs.key}: {[hex(a) for a in ours]} " \
                                 f"!= perf script's {[hex(a) for a in perf]}"  # fmt: skip
            with_kernel += bool(perf)
    assert with_kernel > 0, "no sample of any workload has kernel frames"


def test_max_frames_as_perf_script_max_stack(recordings: Recordings) -> None:
    """--max-frames N keeps each sample's first N kernel frames and first N user frames, as
    perf script's --max-stack N does: ours are the first N of each part of the same sample
    unlimited, and where perf script and ours agree unlimited, perf's with --max-stack N are
    ours."""
    limit = 3
    cut: Counter[str] = Counter()
    # syscalls: write(2) in a loop, so most samples are deep in the kernel.
    for workload in ("qsort", "syscalls"):
        recording = recordings(workload)
        full = by_key(ours_json(recording))
        proc = cli(recording, "--json", "--max-frames", str(limit))
        check_clean_exit(proc, f"stackwalk perf --json --max-frames {limit}")
        limited = by_key(json_lines(proc.stdout))
        assert limited.keys() == full.keys()
        for key, sample in full.items():
            kernel = [f for f in sample["frames"] if f["kernel"]]
            user = [f for f in sample["frames"] if not f["kernel"]]
            assert limited[key]["frames"] == kernel[:limit] + user[:limit], key
            cut["kernel"] += len(kernel) > limit
            cut["user"] += len(user) > limit
        cmd = [PERF, "script", "--no-inline", "--ns", "--max-stack", str(limit),
               "-F", SCRIPT_FIELDS, "-i", str(recording.path)]  # fmt: skip
        proc = run(cmd, env=perf_env(recording.home))
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
        theirs = {s.key: s for s in parse_script(proc.stdout)}
        for plain, _ in agreement(recording)[EXACT]:
            mine, perf = limited[plain.key]["frames"], theirs[plain.key]
            where = side_by_side(perf, limited[plain.key])
            perf_kernel = [f.address for f in perf.kernel_frames if f.address != 2**64 - 1]
            assert [h(f["pc"]) for f in mine if f["kernel"]] == perf_kernel, where
            assert our_user_addresses(mine) == perf.user_addresses(), where
            cut["compared"] += 1
    print(dict(cut))
    assert cut["kernel"] and cut["user"] and cut["compared"] >= 100, cut


def test_kernel_symbols_as_perf_script_and_kept_in_the_cache(
    recordings: Recordings, tmp_path: Path
) -> None:
    """Kernel frames are named as perf script names them (function and offset), from the copy
    of kallsyms perf record keeps in its build-id cache. stackwalk parses that file once and
    keeps its table in its own cache, by the kernel's build id and the copy's size and time
    (`sections/BUILDID/kallsyms-SIZE-MTIME`): a later run maps the table (the entry is used,
    not written again). The output is the same cold, warm and with no cache."""
    recording = next(
        r for r in map(recordings, WORKLOADS) if any(s.kernel_frames for s in r.script())
    )
    copies = list((recording.home / ".debug" / "[kernel.kallsyms]").glob("*/kallsyms"))
    assert len(copies) == 1, f"perf record kept no single copy of kallsyms: {copies}"
    env = {
        **os.environ,
        "PERF_BUILDID_DIR": str(recording.home / ".debug"),
        "STACKWALK_CACHE_DIR": str(tmp_path),
    }
    options = ("--json", "--no-inline", str(recording.path))
    cold = stackwalk_perf(*options, env=env)
    check_clean_exit(cold, "stackwalk perf --json, cold")
    entries = list(tmp_path.glob("sections/*/kallsyms-*"))
    assert [e.parent.name for e in entries] == [copies[0].parent.name], entries
    made = entries[0].stat()
    warm = stackwalk_perf(*options, env=env)
    used = entries[0].stat()
    assert (used.st_ino, used.st_size) == (made.st_ino, made.st_size), "written again"
    assert used.st_mtime_ns > made.st_mtime_ns, "the entry was not used"
    uncached = stackwalk_perf(*options, env={**env, "STACKWALK_CACHE_DIR": ""})
    assert cold.stdout == warm.stdout == uncached.stdout
    mine = by_key(json_lines(warm.stdout))
    named = 0
    for theirs in recording.script():
        kernel = [f for f in mine[theirs.key]["frames"] if f["kernel"]]
        for frame, perf in zip(kernel, theirs.kernel_frames, strict=False):
            assert h(frame["pc"]) == perf.address, theirs.key
            if perf.symbol is not None:
                assert frame["function"] == perf.symbol, (theirs.key, hex(perf.address))
                assert h(frame["function_offset"]) == perf.offset, theirs.key
                named += 1
    print(f"{recording.name}: {named} kernel frames named as perf script names them")
    assert named > 0


# --- folded stacks ----------------------------------------------------------------------------


def folded_name(frame: Mapping[str, Any]) -> str:
    """A frame's name in ``stackwalk perf --collapsed``: its function, else [module+0xoffset],
    else [unknown]; kernel frames with the ``_[k]`` suffix of stackcollapse-perf."""
    if frame["function"]:
        name = frame["function"]
    elif frame["module"]:
        name = f"[{frame['module']}+{frame['module_offset']}]"
    else:
        name = "[unknown]"
    return f"{name}_[k]" if frame["kernel"] else str(name)


def fold(comm: str, names_inner_first: Sequence[str]) -> str:
    return ";".join([comm, *reversed(names_inner_first)])


def parse_folded(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack and count.isdigit() and int(count) > 0, f"not a folded line: {line!r}"
        assert stack not in counts, f"stack printed twice: {stack!r}"
        counts[stack] = int(count)
    return counts


def perf_folded(recording: Recording) -> tuple[Counter[str], Counter[str], Counter[str], int]:
    """Folded stacks from perf script's samples: (all, those of the samples where perf
    stopped early or skipped frames, ours for those same samples, how many of these are not
    excused by reexec_excused).

    Naming: the two tools name some functions differently (perf script shows libc's
    ``__GI___qsort_r`` and ``__libc_start_main@@GLIBC_2.34``, from the debug file's local
    aliases and version suffixes), so every frame perf script prints is named the way
    ``--collapsed`` names the frame at the same place in stackwalk's sample when the two are
    the same frame (module and address; test_function_names checks that the two tools' names
    are the same functions). Any other perf frame is named by perf's symbol and marked, so it
    cannot match.
    """
    mine = by_key(ours_json(recording))
    everything: Counter[str] = Counter()
    early: Counter[str] = Counter()
    ours_for_early: Counter[str] = Counter()
    unexcused = 0
    for theirs in recording.script():
        ours = mine[theirs.key]
        kernel = [f for f in ours["frames"] if f["kernel"]]
        user = [f for f in ours["frames"] if not f["kernel"]]
        names = []
        for i, frame in enumerate(theirs.kernel_frames):
            same = i < len(kernel) and h(kernel[i]["pc"]) == frame.address
            names.append(folded_name(kernel[i]) if same else f"{frame.symbol} (perf)")
        where = our_user_addresses(ours["frames"])
        for i, (frame, address) in enumerate(
            zip(theirs.user_frames, theirs.user_addresses(), strict=True)
        ):
            same = i < len(user) and where[i] == address
            names.append(folded_name(user[i]) if same else f"{frame.symbol} (perf)")
        stack = fold(theirs.comm, names)
        everything[stack] += 1
        kind = classify(theirs, ours)
        reexec = is_reexec(recording, theirs)
        excusable = (PERF_STOPPED_EARLY, PERF_SKIPPED_FRAMES, OURS_NO_CFI, PERF_PAST_THE_COPY)
        if (
            kind in excusable
            or (kind == PERF_INTO_NO_CODE and no_code_proven(ours))
            or (reexec and kind != EXACT)
        ):
            early[stack] += 1
            ours_for_early[fold(ours["comm"], [folded_name(f) for f in ours["frames"]])] += 1
            unexcused += not reexec
    return everything, early, ours_for_early, unexcused


def record_alone(tmp_path: Path, program: str | os.PathLike[str]) -> Path:
    """A recording of ``program`` (tmp_path/perf.data), with a perf home of its own."""
    data = tmp_path / "perf.data"
    home = tmp_path / "home"
    home.mkdir()
    perf_record(data, [str(program)], home)
    return data


def test_collapsed_names_a_signal_trampoline_as_the_json_does(
    build: Builder, tmp_path: Path
) -> None:
    """A program that spends much of its time in a signal handler (perf_signal.c): every
    --collapsed stack is its samples' JSON frames folded, the trampoline (glibc's __restore_rt,
    a frame looked up at its own pc, where the handler returns) named as in the JSON."""
    data = record_alone(tmp_path, build("perf_signal.c", "-O2"))
    proc = cli(data, "--json")
    check_clean_exit(proc, f"stackwalk perf --json {data}")
    expected: Counter[str] = Counter(
        fold(s["comm"], [folded_name(f) for f in s["frames"]]) for s in json_lines(proc.stdout)
    )
    proc = cli(data, "--collapsed")
    check_clean_exit(proc, f"stackwalk perf --collapsed {data}")
    assert parse_folded(proc.stdout) == expected
    handled = [stack for stack in expected if ";__restore_rt;" in stack]
    assert sum(expected[stack] for stack in handled) > 100, expected.most_common(5)
    assert all(";__restore_rt;on_prof;spin_in_handler" in s for s in handled if "spin_in" in s)


def test_a_signal_trampoline_without_cfi(build: Builder, tmp_path: Path) -> None:
    """perf_signal.c linked statically with musl, whose signal trampoline (__restore_rt) has no
    CFI: where the handler's samples reach it, the walk crosses it through the kernel's signal
    frame in the stack copy (the fallbacks' step, tried where CFI fails) to the frame it
    interrupted, and from the program's loop on to main. Proven without perf script, which
    stops at the handler: the handler's return addresses, and those past the interrupted frame,
    follow calls that call the frame below (objdump). With ``--strategies cfi`` the walk ends
    at the trampoline."""
    program = str(build("perf_signal.c", "-O2", "-static", compiler="musl-gcc"))
    data = record_alone(tmp_path, program)
    walks = {}
    for strategies in ("cfi,frame_pointer", "cfi"):
        proc = cli(data, "--json", "--strategies", strategies)
        check_clean_exit(proc, f"stackwalk perf --json --strategies {strategies} {data}")
        walks[strategies] = by_key(json_lines(proc.stdout))
    crossed = to_main = 0
    for key, sample in walks["cfi,frame_pointer"].items():
        user = [f for f in sample["frames"] if not f["kernel"]]
        names = [f["function"] for f in user]
        if "__restore_rt" not in names or names[0] != "spin_in_handler":
            continue
        at = names.index("__restore_rt")
        where = f"{key}: {names}"
        assert names[:at] == ["spin_in_handler", "on_prof"], where
        assert len(names) > at + 1, f"{where}: not crossed"
        # Interrupted in the program's loop (its code has CFI): on to main. Interrupted in
        # musl's clock_gettime, which has neither CFI nor a frame pointer, the walk ends there.
        if names[at + 1] == "main_loop":
            assert "main" in names[at + 2 :], where
            to_main += 1
        for part in (user[:at], user[at + 1 :]):
            problems = call_chain_problems(part, targets_in=os.path.realpath(program))
            assert not problems, f"{where}\n" + "\n".join(problems)
        cfi = [f["pc"] for f in walks["cfi"][key]["frames"] if not f["kernel"]]
        assert cfi == [f["pc"] for f in user[: at + 1]], where
        crossed += 1
    print(f"{crossed} samples crossed the trampoline, {to_main} from main_loop on to main")
    assert crossed >= 50 and to_main >= crossed // 2, (crossed, to_main)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_collapsed_matches_perf_script(recordings: Recordings, workload: str) -> None:
    """``--collapsed`` gives the counts per stack that folding perf script's output gives;
    the stacks of the samples where perf stopped early or skipped frames (at most 1%, besides
    the fork workload's exec'd program, see reexec_excused) are ours."""
    recording = recordings(workload)
    proc = cli(recording, "--collapsed")
    check_clean_exit(proc, f"stackwalk perf --collapsed {recording.path}")
    ours = parse_folded(proc.stdout)
    theirs, early, ours_for_early, unexcused = perf_folded(recording)
    assert sum(ours.values()) == sum(theirs.values()) == len(recording.script())
    assert unexcused <= (1 - MIN_EXACT) * theirs.total()
    expected = theirs - early + ours_for_early
    missing, extra = expected - ours, ours - expected
    assert not missing and not extra, (
        f"counts differ:\n  perf script's folded stacks, not in --collapsed: "
        f"{dict(list(missing.items())[:5])}\n  --collapsed, not perf script's: "
        f"{dict(list(extra.items())[:5])}"
    )


@pytest.mark.parametrize("workload", ["threads", "python"])
def test_collapsed_is_sorted_whatever_the_workers(recordings: Recordings, workload: str) -> None:
    """``--collapsed`` is counted by the workers, one table each, summed at the end: its lines
    come sorted (as stackcollapse-perf writes them), each stack once, and the same bytes on one
    CPU (one worker) as on all of them."""
    recording = recordings(workload)
    everywhere = cli(recording, "--collapsed", "--inline")
    check_clean_exit(everywhere, f"stackwalk perf --collapsed {recording.path}")
    one_cpu = run(
        ["taskset", "-c", str(min(os.sched_getaffinity(0))), sys.executable, "-m", "stackwalk",
         "perf", "--collapsed", "--inline", str(recording.path)]
    )  # fmt: skip
    check_clean_exit(one_cpu, f"stackwalk perf --collapsed on one CPU {recording.path}")
    stacks = [line.rsplit(" ", 1)[0] for line in everywhere.stdout.splitlines()]
    assert stacks == sorted(stacks) and len(set(stacks)) == len(stacks) > 1
    assert one_cpu.stdout == everywhere.stdout


@pytest.mark.parametrize("workload", WORKLOADS)
def test_function_names(recordings: Recordings, workload: str) -> None:
    """Where perf script names a user frame's function, ours names the same function at the
    same offset (so the symbol starts at the same address; the names may be aliases:
    ``__GI___qsort_r`` and ``qsort_r``). perf also names what is no sized function symbol (the
    PLT entries it synthesizes, ``@plt``; sizeless labels such as ld.so's ``_start``): ours may
    leave those unnamed."""
    recording = recordings(workload)
    groups = agreement(recording)
    named = unnamed = 0
    for theirs, ours in groups[EXACT] + groups[PERF_STOPPED_EARLY]:
        our_frames = [f for f in ours["frames"] if not f["kernel"]]
        for i, frame in enumerate(theirs.user_frames):
            if frame.symbol is None or frame.offset is None:
                continue
            mine = our_frames[i]
            where = f"{workload} {theirs.key} #{i} {frame.symbol}+{frame.offset:#x} ({frame.dso})"
            if mine["function"] is None:
                assert frame.symbol.endswith("@plt") or not sized_function(
                    frame.dso, frame.symbol
                ), f"{where}: ours has no name"
                unnamed += 1
                continue
            # perf's offset is from the address it prints: a return address less one.
            offset = h(mine["function_offset"]) - (1 if i else 0)
            assert offset == frame.offset, (
                f"{where}: ours is {mine['function']}+{mine['function_offset']}"
            )
            named += 1
    print(f"{workload}: {named} frames named as perf names them, {unnamed} labels perf names only")
    assert named > 0


# --- the default text output ------------------------------------------------------------------


@pytest.mark.parametrize("workload", ["qsort", "threads"])
def test_text_output_is_perf_script_shaped(recordings: Recordings, workload: str) -> None:
    """The default output reads like perf script's: a ``comm tid seconds.µs:`` line per sample,
    then its frames, ``address symbol+offset (module)``, kernel frames first; the samples and
    frames of --json, every user frame's address and offset as perf script prints them (a file
    offset; a caller at its return address less one), so that the two outputs can be diffed."""
    recording = recordings(workload)
    proc = cli(recording)
    check_clean_exit(proc, f"stackwalk perf {recording.path}")
    text = parse_script(proc.stdout)
    # Times to the µs (truncated, as perf script prints them) still tell a thread's samples
    # apart: they are a millisecond apart.
    mine = {(tid, time // 1000): s for (_, tid, time), s in by_key(ours_json(recording)).items()}
    assert len(text) == len(mine)
    for sample in text:
        ours = mine.get((sample.tid, sample.time // 1000))
        assert ours is not None, f"text shows a sample --json does not: {sample.key}"
        assert sample.comm == ours["comm"]
        kernel = [h(f["pc"]) for f in ours["frames"] if f["kernel"]]
        assert [f.address for f in sample.kernel_frames] == kernel, sample.key
        assert sample.user_addresses() == our_user_addresses(ours["frames"]), sample.key
        user = [f for f in ours["frames"] if not f["kernel"]]
        for index, (frame, json_frame) in enumerate(zip(sample.user_frames, user, strict=True)):
            assert frame.symbol == json_frame["function"], (sample.key, index)
            if frame.symbol is not None:
                assert frame.offset == h(json_frame["function_offset"]) - (1 if index else 0)


# --- inline frames (--inline, perf script's default) -------------------------------------------


@functools.cache
def eu_addr2line_files(module: str, address: int) -> set[str]:
    """The base names of the files ``eu-addr2line -i`` gives for an ELF address of a module
    (its function's and those of the functions inlined there)."""
    proc = subprocess.run(["eu-addr2line", "-i", "-e", module, hex(address)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return {Path(line.rpartition(":")[0].rpartition(":")[0] or line).name
            for line in proc.stdout.splitlines()}  # fmt: skip


def clone_of(ours: str, theirs: str) -> bool:
    """Whether ``ours`` is a GCC clone of ``theirs`` (``msort_with_tmp.part.0``)."""
    return ours.split(".")[0] == theirs


@pytest.mark.parametrize("workload", ["qsort", "threads", "syscalls"])
def test_inline_frames_match_perf_script(recordings: Recordings, workload: str) -> None:
    """With --inline, where perf script (its default, ``--inline``, with ``srcline``) shows
    the functions inlined at a pc, ours are the same functions in the same order at the same
    addresses, and every frame's source file and line is the one perf prints. Compared on the
    samples whose frames agree exactly without inlines. perf names a frame's own function by
    the DWARF name of the function it is in, and marks it ``(inlined)`` too when that name is
    not the symbol's (libc's ``msort_with_tmp`` in the clone ``msort_with_tmp.part.0``,
    ``__libc_start_main_impl`` at ``__libc_start_main``): ours keeps the symbol's name there,
    an alias or the clone of perf's."""
    recording = recordings(workload)
    theirs_all = perf_script_inline(recording.path, recording.home)
    proc = cli(recording, "--json", "--inline")
    check_clean_exit(proc, f"stackwalk perf --json --inline {recording.path}")
    ours_all = by_key(json_lines(proc.stdout))
    inlined = lines = perf_wrong_file = 0
    for plain, _ in agreement(recording)[EXACT]:
        theirs = theirs_all[plain.key]
        ours = [f for f in ours_all[plain.key]["frames"] if not f["kernel"]]
        addresses = [address for _, address in our_user_addresses(ours)]
        assert addresses == [f.address for f in theirs], plain.key
        caller = False  # past frame 0's group: looked up at the return address less one
        for index, (mine, frame) in enumerate(zip(ours, theirs, strict=True)):
            looked_up_before, caller = caller, caller or not mine["inline"]
            where = f"{workload} {plain.key} #{index} {frame}: ours {mine}"
            if mine["inline"]:
                assert frame.symbol == mine["function"], where
                # perf shows an inlined function named as the frame's symbol under that symbol,
                # not "(inlined)" (its new_inline_sym): glibc's __GI___libc_write inlined into
                # its alias __write in the syscalls workload. That name is then an alias of the
                # function holding the pc, whose frame closes the group.
                outer = next(f for f in ours[index:] if not f["inline"])
                assert frame.inlined or aliases(mine["module"], outer["function"], frame.symbol), (
                    where
                )
                assert mine["trust"] == outer["trust"], where  # found with the frame it is in
                inlined += 1
            elif frame.inlined:
                assert mine["function"] and frame.symbol, where
                assert aliases(mine["module"], mine["function"], frame.symbol) or clone_of(
                    mine["function"], frame.symbol
                ), where
            if mine["line"] is None:
                # perf's "??:0", ":0", or "libc.so.6[26290]" (the module and address).
                assert not re.fullmatch(r".*:[1-9]\d*", frame.srcline), where
                continue
            file = Path(mine["file"]).name
            assert frame.srcline.rpartition(":")[2] == str(mine["line"]), where
            if frame.srcline != f"{file}:{mine['line']}":
                # perf asks binutils' addr2line, which names the unit's file for a function
                # defined in a header it includes (libc-start.c for libc_start_call_main.h's
                # __libc_start_call_main): elfutils reads the line table's file.
                address = h(mine["module_offset"]) - looked_up_before
                assert file in eu_addr2line_files(mine["module"], address), where
                perf_wrong_file += 1
            lines += 1
    print(f"{workload}: {inlined} inline frames and {lines} source lines as perf shows them "
          f"({perf_wrong_file} files as elfutils names them, not perf)")  # fmt: skip
    assert lines > 0
    # libc's qsort inlines msort_with_tmp into itself (libc6-dbg's DWARF); the threads
    # workload's functions inline nothing where its samples fall.
    assert inlined > 0 or workload == "threads"


@pytest.mark.parametrize("workload", ["qsort", "cxx"])
def test_inline_frames_with_and_without_the_section_cache(
    recordings: Recordings, workload: str
) -> None:
    """The inline frames (functions, files, lines: the --json --inline of the test above) are
    the same with the debug files' sections mapped from the cache (this session's, filled by
    the tests before) and with no cache, each looked up in a unit of `.debug_info`
    decompressed only as far as it (rust/symbolize/lines/partial.rs); --collapsed --inline too."""
    recording = recordings(workload)
    for options, inlined in ((("--json", "--inline"), '"inline": true'),
                             (("--collapsed", "--inline"), "_[i]")):  # fmt: skip
        cached = cli(recording, *options)
        check_clean_exit(cached, f"stackwalk perf {' '.join(options)} {recording.path}")
        assert inlined in cached.stdout, options
        no_cache = {**os.environ, "STACKWALK_CACHE_DIR": ""}
        uncached = stackwalk_perf(*options, recording.path, env=no_cache)
        check_clean_exit(uncached, f"with no cache: stackwalk perf {' '.join(options)}")
        assert uncached.stdout == cached.stdout, options


def test_inline_text_and_folded_stacks(recordings: Recordings) -> None:
    """The default text output shows the inline frames as perf script does (each at its
    frame's address and symbol offset, ``(inlined)`` for the module), the frames of --json
    --inline (checked against perf script above); --collapsed --inline folds those frames, the
    inlined functions annotated ``_[i]`` as stackcollapse-perf does."""
    recording = recordings("qsort")
    text = cli(recording, "--inline")
    check_clean_exit(text, f"stackwalk perf {recording.path}")
    theirs_all = perf_script_inline(recording.path, recording.home)
    proc = cli(recording, "--json", "--inline")
    ours_all = by_key(json_lines(proc.stdout))
    mine = {(tid, time // 1000): s for (_, tid, time), s in ours_all.items()}
    exact = {theirs.key for theirs, _ in agreement(recording)[EXACT]}
    shown = 0
    for sample in parse_script(text.stdout):
        ours = mine[(sample.tid, sample.time // 1000)]
        user = [f for f in ours["frames"] if not f["kernel"]]
        assert sample.user_addresses() == [
            ("inlined" if f["inline"] else m, a)
            for f, (m, a) in zip(user, our_user_addresses(user), strict=True)
        ], sample.key
        for frame, json_frame in zip(sample.user_frames, user, strict=True):
            assert frame.symbol == json_frame["function"], sample.key
        theirs = theirs_all[(ours["pid"], ours["tid"], ours["time"])]
        if (ours["pid"], ours["tid"], ours["time"]) in exact:
            for frame, perf in zip(sample.user_frames, theirs, strict=True):
                assert frame.address == perf.address, sample.key
                if frame.dso == "inlined":
                    assert perf.inlined and perf.symbol == frame.symbol, sample.key
                    assert perf.offset == frame.offset, sample.key
                    shown += 1
    assert shown > 0

    def name(frame: Mapping[str, Any]) -> str:
        if frame["inline"]:
            return f"{frame['function']}_[i]"
        # A function DWARF names, which the symbol table does not, is folded by address.
        return folded_name({**frame, "function": frame["function_offset"] and frame["function"]})

    expected: Counter[str] = Counter()
    for sample in ours_all.values():
        expected[fold(sample["comm"], [name(f) for f in sample["frames"]])] += 1
    folded = cli(recording, "--collapsed", "--inline")
    check_clean_exit(folded, f"stackwalk perf --collapsed --inline {recording.path}")
    ours = parse_folded(folded.stdout)
    assert ours == expected
    assert any("_[i]" in stack for stack in ours)


# --- recordings without --call-graph dwarf ----------------------------------------------------


def aliases(dso: str, ours: str | None, theirs: str | None) -> bool:
    """The same name, or names of one address in ``dso`` (``munmap``, ``__munmap``). perf 6.1
    names an IFUNC's PLT entry ``@plt``, with no name before it: ours, as objdump and gdb,
    ``*ABS*+0xADDEND@plt`` (test_symbols.py checks ours against objdump)."""
    if ours == theirs:
        return True
    if theirs == "@plt" and ours is not None:
        return ours.startswith("*ABS*+0x") and ours.endswith("@plt")
    return None not in (ours, theirs) and bool(
        symbol_values(dso, str(ours)) & symbol_values(dso, str(theirs))
    )


def one_note(proc: subprocess.CompletedProcess[str], *mentions: str) -> None:
    """Exit 0 and one line on stderr, a note naming how to record a call graph."""
    check_clean_exit(proc, "stackwalk perf")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("stackwalk: note: ") and "perf record --call-graph dwarf" in line
    for mention in mentions:
        assert mention in line, line


@pytest.mark.parametrize("fmt", ["text", "--json"])
def test_frame_pointer_callchains(recordings: Recordings, fmt: str) -> None:
    """``perf record -g`` of the threads workload built with frame pointers (so perf's
    callchains reach main or the thread's start; no user registers or stack to unwind): the user
    frames are the sample's PERF_SAMPLE_CALLCHAIN, symbolized, and the text shows them as
    perf script does, every frame, kernel and user, at its address (a callchain's callers are
    not moved back into the call), named the same. One note on stderr says how the recording
    was made and how to record for unwinding."""
    recording = recordings("threads-fp")
    theirs = {(s.tid, s.time // 1000): s for s in recording.script()}
    if fmt == "text":
        proc = cli(recording)
        one_note(proc, "without --call-graph dwarf", "frame-pointer")
        ours = parse_script(proc.stdout)
        assert len(ours) == len(theirs)
        for sample in ours:
            reference = theirs[(sample.tid, sample.time // 1000)]
            kernel = [f.address for f in reference.kernel_frames]
            assert [f.address for f in sample.kernel_frames] == kernel, sample.key
            assert len(sample.user_frames) == len(reference.user_frames), sample.key
            for mine, frame in zip(sample.user_frames, reference.user_frames, strict=True):
                assert (mine.address, mine.dso) == (frame.address, frame.dso), sample.key
                if mine.symbol is None and frame.symbol is not None:
                    # perf also names what is no sized function symbol (@plt entries)
                    assert frame.symbol.endswith("@plt") or not sized_function(
                        frame.dso, frame.symbol), (sample.key, frame)  # fmt: skip
                    continue
                assert mine.offset == frame.offset, (sample.key, mine, frame)
                assert aliases(frame.dso, mine.symbol, frame.symbol), (sample.key, mine, frame)
        deep = [s for s in ours if len(s.user_frames) >= 3]
        assert len(deep) > len(ours) // 4, "few samples with a callchain"
        return
    proc = cli(recording, "--json")
    one_note(proc, "without --call-graph dwarf")
    samples = json_lines(proc.stdout)
    assert len(samples) == len(theirs)
    for sample in samples:
        reference = theirs[(sample["tid"], sample["time"] // 1000)]
        user = [f for f in sample["frames"] if not f["kernel"]]
        # The same frames, each a return address as it is (--json's convention), its function
        # looked up inside the call (at the address less one): the same as perf's but where a
        # call is a function's last instruction.
        assert len(user) == len(reference.user_frames), sample
        for index, (ours, frame) in enumerate(zip(user, reference.user_frames, strict=True)):
            assert (ours["module"] or "[unknown]") == frame.dso
            if frame.symbol is not None and aliases(frame.dso, ours["function"], frame.symbol):
                assert h(ours["function_offset"]) == frame.offset, (sample, index)


# "tid seconds.ns:  ip symbol+0xoff (dso)": perf script -F tid,time,ip,sym,symoff,dso --ns of a
# recording without a call graph, one line per sample.
_PLAIN = re.compile(r"\s*(?P<tid>\d+)\s+(?P<s>\d+)\.(?P<ns>\d{9}):\s+(?P<ip>[0-9a-f]+) "
                    r"(?P<where>.*) \((?P<dso>[^()]*)\)")  # fmt: skip


def test_no_call_graph(recordings: Recordings) -> None:
    """``perf record`` without -g: each sample is where it was, its ip, named as perf script
    names it (user ones; kernel ones from kallsyms, compared by address); a note says how to
    record a call graph."""
    recording = recordings("qsort-plain")
    cmd = [PERF, "script", "--no-inline", "--ns", "-F", "tid,time,ip,sym,symoff,dso", "-i",
           str(recording.path)]  # fmt: skip
    script = subprocess.run(cmd, capture_output=True, text=True, env=perf_env(recording.home),
                            timeout=120, check=True)  # fmt: skip
    theirs = {}
    for line in script.stdout.splitlines():
        match = _PLAIN.fullmatch(line)
        assert match, line
        theirs[(int(match["tid"]), int(match["s"]) * 10**9 + int(match["ns"]))] = match
    proc = cli(recording, "--json")
    one_note(proc, "without a call graph")
    samples = json_lines(proc.stdout)
    assert len(samples) == len(theirs) > 100
    user = 0
    for sample in samples:
        reference = theirs[(sample["tid"], sample["time"])]
        (frame,) = sample["frames"]
        assert h(frame["pc"]) == int(reference["ip"], 16)
        if not frame["kernel"]:
            user += 1
            assert frame["module"] == reference["dso"]
            symbol, _, offset = reference["where"].rpartition("+")
            if frame["function"] is None:
                # perf also names what is no sized function symbol (its PLT entries, @plt)
                assert symbol.endswith("@plt") or reference["where"] == "[unknown]" or (
                    not sized_function(reference["dso"], symbol)), reference.group(0)  # fmt: skip
                continue
            assert aliases(reference["dso"], frame["function"], symbol), reference.group(0)
            assert frame["function_offset"] == offset, reference.group(0)
    assert user > len(samples) // 2


# --- the flame graph --------------------------------------------------------------------------


@pytest.mark.parametrize("workload", ["cxx", "python"])
def test_flamegraph(recordings: Recordings, workload: str, tmp_path: Path) -> None:
    """``--flamegraph OUT.svg`` writes an SVG whose boxes (their <title> tooltips) are the
    folded stacks' frames with their counts: one box per stack prefix shared by neighbouring
    lines of the folded stacks sorted as text (as inferno and flamegraph.pl draw them: ``f;g``,
    ``f.cold;h``, ``f;k`` sort in that order, ``.`` before ``;``, and ``f`` gets two boxes),
    counting the samples under it; inline frames included (--inline, the default)."""
    recording = recordings(workload)
    out = tmp_path / f"{workload}.svg"
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "perf", str(recording.path), "--flamegraph", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    check_clean_exit(proc, f"stackwalk perf --flamegraph {out}")
    root = ET.parse(out).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
    boxes: Counter[tuple[str, int]] = Counter()
    for title in root.iter("{http://www.w3.org/2000/svg}title"):
        match = SVG_TITLE.fullmatch(title.text or "")
        if match:
            boxes[(match["name"], int(match["count"].replace(",", "")))] += 1
    folded = cli(recording, "--collapsed", "--inline")
    check_clean_exit(folded, "stackwalk perf --collapsed --inline")
    expected: Counter[tuple[str, int]] = Counter()
    # the boxes open along the previous line: [name, count] by depth
    open_boxes: list[list[Any]] = []
    previous: list[str] = []
    total = 0
    for stack, count in sorted(parse_folded(folded.stdout).items()):
        names = stack.split(";")
        shared = 0
        while shared < min(len(names), len(previous)) and names[shared] == previous[shared]:
            shared += 1
        for name, boxed in open_boxes[shared:]:
            expected[(ANNOTATION.sub("", name), boxed)] += 1
        del open_boxes[shared:]
        for box in open_boxes:
            box[1] += count
        open_boxes.extend([name, count] for name in names[shared:])
        previous = names
        total += count
    for name, boxed in open_boxes:
        expected[(ANNOTATION.sub("", name), boxed)] += 1
    expected[("all", total)] += 1
    missing, extra = expected - boxes, boxes - expected
    assert not missing and not extra, f"missing: {dict(missing)}\nextra: {dict(extra)}"


# --- damaged files ----------------------------------------------------------------------------


def damaged_copy(source: Path, target: Path, *, cut: int | None = None,
                 patch: tuple[int, bytes] | None = None) -> Path:  # fmt: skip
    data = bytearray(source.read_bytes())
    if patch is not None:
        offset, garbage = patch
        data[offset : offset + len(garbage)] = garbage
    if cut is not None:
        del data[cut:]
    target.write_bytes(bytes(data))
    return target


def samples_at(records: Sequence[RawRecord], fraction: float) -> RawRecord:
    """The first sample record at or after ``fraction`` of the data section."""
    start, end = records[0].offset, records[-1].end
    at = start + int((end - start) * fraction)
    return next(r for r in records if r.kind == "SAMPLE" and r.offset >= at)


def mentions(line: str, offsets: Iterable[int]) -> bool:
    numbers = {int(n, 0) for n in re.findall(r"\b(?:0x[0-9a-fA-F]+|\d+)\b", line)}
    return any(offset in numbers for offset in offsets)


def check_damaged(recording: Recording, damaged: Path, before: int, offsets: Sequence[int]) -> None:
    """stackwalk on a damaged copy: exit status 1, one error line on stderr naming where the
    damage is (one of ``offsets``), no traceback, and every sample whose record ends at or
    before ``before`` reported, with perf script's frames (on the intact file)."""
    proc = stackwalk_perf(damaged, "--json", "--no-inline")
    what = f"stackwalk perf --json {damaged.name}"
    assert "Traceback" not in proc.stderr, f"{what}:\n{proc.stderr}"
    assert proc.returncode == 1, f"{what}: exit status {proc.returncode}\n{proc.stderr}"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"{what}: stderr is not one line:\n{proc.stderr}"
    assert mentions(lines[0], offsets), f"{what}: {lines[0]!r} names none of {offsets}"
    ours = by_key(json_lines(proc.stdout))
    intact = {t.key: t for t in recording.script()}
    assert set(ours) <= set(intact), f"{what}: samples the intact file does not have"
    expected = {r.key for r in recording.records() if r.kind == "SAMPLE" and r.end <= before}
    assert expected, "the damage is before the first sample"
    lost = expected - set(ours)
    assert not lost, f"{what}: {len(lost)} of the {len(expected)} samples before the damage lost"
    kinds = Counter(classify(intact[key], ours[key]) for key in expected)
    assert not kinds[DISAGREE], f"{what}: {kinds}"
    # Where perf stopped early (how many, depends on where the samples fell: a handful in a
    # cut recording can pass 1%), the frames are ours on the intact file: the damage changes
    # no sample before it.
    whole = by_key(json_lines(stackwalk_perf(recording.path, "--json", "--no-inline").stdout))
    assert all(ours[key] == whole[key] for key in expected), f"{what}: differs from the intact"


@pytest.mark.parametrize("where", ["in a sample", "in a header", "at a record boundary"])
@pytest.mark.parametrize("fraction", [0.3, 0.55, 0.8])
def test_truncated(recordings: Recordings, tmp_path: Path, where: str, fraction: float) -> None:
    """A perf.data cut short in its data section (the feature sections at the end are lost
    with it): the samples before the cut are all reported, then one error, exit status 1."""
    recording = recordings("threads")
    record = samples_at(recording.records(), fraction)
    cut = {"in a sample": record.offset + record.size // 2, "in a header": record.offset + 3,
           "at a record boundary": record.offset}[where]  # fmt: skip
    damaged = damaged_copy(recording.path, tmp_path / "cut.perf.data", cut=cut)
    check_damaged(recording, damaged, cut, [record.offset, cut])


def test_garbage_record_header(recordings: Recordings, tmp_path: Path) -> None:
    """Garbage written over the middle of the data section, from a record's start: random
    bytes whose first record header claims a size of 5 bytes (less than a header), which no
    reader can take for a record. The samples before it are all reported, then one error."""
    recording = recordings("dlopen")
    record = samples_at(recording.records(), 0.5)
    garbage = bytearray(random.Random(4).randbytes(512))
    garbage[6:8] = (5).to_bytes(2, "little")
    damaged = damaged_copy(recording.path, tmp_path / "garbage.perf.data",
                           patch=(record.offset, bytes(garbage)))  # fmt: skip
    check_damaged(recording, damaged, record.offset, [record.offset])


SAMPLE_FIELDS_BEFORE_CALLCHAIN = {  # PERF_SAMPLE_* bit -> the u64 fields it adds
    1 << 16: 1,  # IDENTIFIER
    1 << 0: 1,  # IP
    1 << 1: 1,  # TID (pid, tid: two u32)
    1 << 2: 1,  # TIME
    1 << 3: 1,  # ADDR
    1 << 6: 1,  # ID
    1 << 9: 1,  # STREAM_ID
    1 << 7: 1,  # CPU (cpu, reserved: two u32)
    1 << 8: 1,  # PERIOD
}
PERF_SAMPLE_READ, PERF_SAMPLE_CALLCHAIN = 1 << 4, 1 << 5


def callchain_nr_offset(path: Path) -> int:
    """Where a sample record's callchain length (``nr``) is, from the record's start: after the
    header and the fields sample_type puts before it. sample_type is at offset 24 of the first
    perf_event_attr of the attrs section (header bytes 24..40: its offset and size)."""
    with open(path, "rb") as f:
        header = f.read(40)
        f.seek(int.from_bytes(header[24:32], "little") + 24)
        sample_type = int.from_bytes(f.read(8), "little")
    assert sample_type & PERF_SAMPLE_CALLCHAIN and not sample_type & PERF_SAMPLE_READ
    words = sum(n for bit, n in SAMPLE_FIELDS_BEFORE_CALLCHAIN.items() if sample_type & bit)
    return 8 + 8 * words


def test_sample_overrunning_its_record(recordings: Recordings, tmp_path: Path) -> None:
    """A sample whose callchain claims 2^60 entries, far more than its record holds: the
    samples before it are all reported, then one error (and no attempt to allocate that)."""
    recording = recordings("qsort")
    record = samples_at(recording.records(), 0.5)
    nr = record.offset + callchain_nr_offset(recording.path)
    damaged = damaged_copy(recording.path, tmp_path / "overrun.perf.data",
                           patch=(nr, (1 << 60).to_bytes(8, "little")))  # fmt: skip
    check_damaged(recording, damaged, record.offset, [record.offset, nr])


def not_perf_data(recordings: Recordings, build: Builder, kind: str, directory: Path) -> Path:
    path = directory / f"{kind.replace(' ', '-')}.data"
    if kind == "ELF file":
        return build("perf_qsort.c", "-O2", "-fomit-frame-pointer")
    if kind == "text file":
        path.write_text("this is not a perf.data file\n" * 10)
    elif kind == "empty file":
        path.write_bytes(b"")
    elif kind == "cut in its header":
        path.write_bytes(recordings("qsort").path.read_bytes()[:60])
    elif kind == "cut before its data":
        offset, _ = data_section(recordings("qsort").path)
        path.write_bytes(recordings("qsort").path.read_bytes()[:offset])
    return path  # "missing file": never written


@pytest.mark.parametrize("kind", ["ELF file", "text file", "empty file", "cut in its header",
                                  "cut before its data", "missing file"])  # fmt: skip
def test_not_perf_data(recordings: Recordings, build: Builder, tmp_path: Path, kind: str) -> None:
    """A file that is not a perf.data file (or holds none of its records): exit status 2, one
    line on stderr naming the file, nothing on stdout, no traceback."""
    path = not_perf_data(recordings, build, kind, tmp_path)
    for options in ((), ("--json",), ("--collapsed",)):
        proc = stackwalk_perf(path, *options)
        what = f"stackwalk perf {path.name} {' '.join(options)}"
        assert "Traceback" not in proc.stderr, f"{what}:\n{proc.stderr}"
        assert proc.returncode == 2, f"{what}: exit status {proc.returncode}\n{proc.stderr}"
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, f"{what}: stderr is not one line:\n{proc.stderr}"
        assert path.name in lines[0], f"{what}: {lines[0]!r} does not name the file"
        assert not proc.stdout.strip(), f"{what}: printed {proc.stdout[:200]!r}"


# --- the stack-trace database -----------------------------------------------------------------


def check_db(db: Any, traces: Sequence[tuple[int, ...]]) -> None:
    """db holds ``traces`` (added in this order): one entry per distinct trace, in order of
    first insertion, as (index, trace tuple, count); the index add() gave each stays its
    index; top(n) gives the n most frequent; an index it never gave is an error."""
    counts = Counter(traces)
    first = list(dict.fromkeys(traces))
    assert len(db) == len(counts)
    assert db.total == len(traces)
    items = list(db)
    assert all(isinstance(trace, tuple) for _, trace, _ in items), items[:1]
    assert [trace for _, trace, _ in items] == first
    assert len({index for index, _, _ in items}) == len(items)
    for index, trace, count in items:
        assert count == counts[trace] == db.count(index)
        assert tuple(db.trace(index)) == trace
    top = db.top(5)
    assert [count for _, _, count in top] == sorted(counts.values(), reverse=True)[:5]
    for index, trace, count in top:
        assert counts[tuple(trace)] == count == db.count(index)
    with pytest.raises(StackwalkError):
        db.count(max(index for index, _, _ in items) + 1)


def test_stackdb_real_samples(recordings: Recordings) -> None:
    """The pcs of every sample of real recordings: add() gives the same index to the same
    trace and a new one to a new trace, and the database counts them as Counter does."""
    import stackwalk

    for workload in ("qsort", "python"):
        traces = [tuple(h(f["pc"]) for f in s["frames"]) for s in ours_json(recordings(workload))]
        db = stackwalk.StackDB()
        assert len(db) == 0 and list(db) == [] and list(db.top(3)) == []
        index: dict[tuple[int, ...], int] = {}
        for trace in traces:
            got = db.add(trace)
            assert isinstance(got, int)
            if trace in index:
                assert got == index[trace], f"{trace}: index {got}, was {index[trace]}"
            else:
                assert got not in index.values(), f"{trace}: index {got} already given"
                index[trace] = got
        check_db(db, traces)
        # Any sequence of ints will do; a list gives the same trace as the tuple.
        assert db.add(list(traces[0])) == index[traces[0]]
        assert db.count(index[traces[0]]) == Counter(traces)[traces[0]] + 1


def synthetic_traces(count: int, seed: int) -> list[tuple[int, ...]]:
    """``count`` distinct traces that stress hashing and equality: prefixes of one another,
    traces one pc apart, pcs up to 2^64 − 1, lengths 1 to 200."""
    rng = random.Random(seed)
    base = tuple(rng.randrange(1 << 64) for _ in range(200))
    traces = [base[:n] for n in (1, 2, 3, 50, 199, 200)]
    traces += [base[:10] + (base[10] ^ 1,) + base[11:40], ((1 << 64) - 1,) * 8, (0,) * 8]
    while len(traces) < count:
        pcs = [rng.randrange(0x400000, 0x800000) for _ in range(rng.randrange(1, 64))]
        traces.append(tuple(pcs))
    assert len(set(traces)) == len(traces)
    return traces


def test_stackdb_synthetic() -> None:
    """A million adds of 300 distinct traces: the database holds the 300 traces, in order of
    first insertion, with the right counts. (Its speed is benchmarked, in
    benches/bench_stackdb.py.)"""
    import stackwalk

    distinct = synthetic_traces(300, 1)
    traces = distinct + random.Random(2).choices(distinct, k=1_000_000 - len(distinct))
    db = stackwalk.StackDB()
    for trace in traces:
        db.add(trace)
    check_db(db, traces)


@pytest.mark.parametrize(
    ("trace", "error"),
    [
        ((0x401000, -1), OverflowError),
        ([0x401000, 1 << 64], OverflowError),
        ((0x401000, "0x401000"), TypeError),
        ([0x401000, 2.0], TypeError),
        ("0x401000", TypeError),
        (0x401000, TypeError),
    ],
)
def test_stackdb_bad_traces(trace: Any, error: type[Exception]) -> None:
    """A trace that is not a sequence of ints from 0 to 2^64 - 1 is refused with Python's
    error for it, whatever the sequence's type, and nothing is added. The same pcs as an int
    subclass, a range or a list add the same trace as the tuple."""
    import stackwalk

    db = stackwalk.StackDB()
    first = db.add((0x401000, (1 << 64) - 1))
    with pytest.raises(error):
        db.add(trace)
    assert (len(db), db.total) == (1, 1)

    class Pc(int):
        pass

    for same in ([0x401000, (1 << 64) - 1], (Pc(0x401000), Pc((1 << 64) - 1))):
        assert db.add(same) == first
    assert db.add(range(3)) == db.add((0, 1, 2)) == 1
    assert db.count(first) == 3


MEMORY_PROBE = textwrap.dedent("""
    import stackwalk

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    N = 200_000
    db = stackwalk.StackDB()
    before = rss()
    for i in range(N):
        db.add(tuple(range(0x400000 + 16 * i, 0x400000 + 16 * i + 16)))
    grown = rss() - before
    for _ in range(4):
        for i in range(N):
            db.add(tuple(range(0x400000 + 16 * i, 0x400000 + 16 * i + 16)))
    print(len(db), grown, rss() - before - grown)
""")


def test_stackdb_memory() -> None:
    """Unique traces cost a few hundred bytes each (200,000 traces of 16 pcs, 128 bytes of pcs
    each), and adding the same traces again (800,000 more samples) costs nothing."""
    proc = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    count, grown, regrown = map(int, proc.stdout.split())
    assert count == 200_000
    per_trace = grown / count
    print(f"StackDB: {per_trace:.0f} bytes per unique 16-pc trace")
    assert per_trace < 400, f"{per_trace:.0f} bytes per unique trace"
    assert regrown < 1 << 20, f"re-adding known traces grew the process by {regrown} bytes"


def test_progress_bar_on_a_terminal(recordings: Recordings) -> None:
    """With stderr a terminal, a progress bar is drawn there (redrawn in place with \\r) and
    ends at 100% with the number of samples; when stderr is not a terminal (every other test
    here), nothing but messages goes there."""
    recording = recordings("qsort")
    code = ("import os, sys; from stackwalk._core import perf_report; "
            "s = perf_report(sys.argv[1], 'collapsed', output=os.devnull, progress=0.0); "
            "print(s['samples'])")  # fmt: skip
    proc, drawn = on_terminal([sys.executable, "-c", code, str(recording.path)])
    assert proc.returncode == 0
    samples = int(proc.stdout)
    assert samples == len(recording.script())
    bars = drawn.split("\r")
    assert bars[-1].strip() == f"[{'#' * 40}] 100% {samples} samples", drawn
    piped = stackwalk_perf(recording.path, "--collapsed")
    assert "\r" not in piped.stderr and "samples" not in piped.stderr, piped.stderr


def test_perf_samples(recordings: Recordings) -> None:
    """``stackwalk._core.perf_samples``: the first user samples of a file, each one perf script
    shows too (same thread and time), with its registers (the pc is where perf script's first
    frame is, for a sample taken in user mode) and its stack copy; and the executable
    mappings."""
    from stackwalk._core import perf_samples

    recording = recordings("qsort")
    data = perf_samples(recording.path, 100)
    assert data["arch"] == "x86_64" and len(data["samples"]) == 100
    theirs = {(s.tid, s.time): s for s in recording.script()}
    exe = os.path.realpath(recording.argv[0])
    mmaps = data["mmaps"]
    assert any(os.path.realpath(m[4]) == exe for m in mmaps)
    checked = 0
    for pid, tid, time_ns, regs, sp, stack in data["samples"]:
        sample = theirs[(tid, time_ns)]
        assert regs["rsp"] == sp and len(stack) > 0
        if sample.kernel_frames or not sample.user_frames:
            continue
        pc = regs["rip"]
        start, _, pgoff, name = next(
            (m[1], m[2], m[3], m[4]) for m in mmaps if m[0] == pid and m[1] <= pc < m[1] + m[2]
        )
        first = sample.user_frames[0]
        assert (first.dso, first.address) == (name, pc - start + pgoff)
        checked += 1
    assert checked > 50


def from_stdin(source: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """``stackwalk perf /dev/stdin ARGS`` reading `source` through a pipe."""
    argv = [sys.executable, "-m", "stackwalk", "perf", "/dev/stdin", *args]
    with subprocess.Popen(["cat"], stdin=source, stdout=subprocess.PIPE) as cat:
        return subprocess.run(argv, stdin=cat.stdout, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("fmt", ["text", "--json", "--collapsed"])
def test_pipe_mode_streamed(recordings: Recordings, tmp_path: Path, fmt: str) -> None:
    """``perf record -o -`` writes the pipe format (attributes and features as records, no
    sections at offsets). Read from a pipe, it is streamed, its records copied; read from the
    file it was saved to, it is mapped: the output is the same, byte for byte. The file format
    through a pipe is one clear error (it is read by seeking)."""
    recording = recordings("qsort")
    saved = tmp_path / "pipe.perf.data"
    with open(saved, "wb") as out:
        cmd = [PERF, *RECORD, "-o", "-", "--", *recording.argv]
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, env=perf_env(recording.home))
    assert proc.returncode == 0, proc.stderr
    args = [] if fmt == "text" else [fmt]
    with open(saved, "rb") as pipe_in:
        streamed = from_stdin(pipe_in, *args)
    mapped = stackwalk_perf(saved, *args)
    assert streamed.returncode == mapped.returncode == 0, streamed.stderr
    assert streamed.stdout == mapped.stdout
    assert streamed.stdout.count("\n") > 20
    with open(recording.path, "rb") as file_format:
        piped = from_stdin(file_format)
    assert piped.returncode == 2 and piped.stdout == ""
    assert piped.stderr.count("\n") == 1 and "perf record -o -" in piped.stderr, piped.stderr
