"""``python -m stackwalk core`` on real core files made at test time (see corefiles.py).

The JSON document must follow the issue's schema key for key, with every thread's pcs equal to
the reference's (eu-stack for gdb's x86_64 and i386 cores, gdb's live view for qemu's aarch64
cores), and
every frame's module, module offset, function and function offset what eu-stack, gdb, nm,
addr2line and c++filt relate to that address. The text output shows the same frames. Exit
status: 0 when every thread reaches a clean end, 1 when some thread stops early, 2 when there is
nothing to show -- with one clear line on stderr and never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from corefiles import (
    A64_CASES,
    AARCH64_SYSROOT,
    ARM_CASES,
    COMPRESSORS,
    EU_STACK_CASES,
    EU_VDSO,
    I386_CASES,
    SPECS,
    X86_CASES,
    Cores,
    MadeCore,
    addr2line_function,
    bomb,
    build_id_of,
    demangle,
    elf_symbols,
    eu_addr2line_symbols,
    extract_memory,
    file_offset,
    first_load_vaddr,
    nm_symbols,
    note_span,
    run,
    same_function,
    stackwalk_core,
    text_address,
    truncated_copy,
    unversioned,
)
from realstacks import Builder
from stackwalk.core import Core

# (gdb's frames of arm-libc and arm-signal go wrong: see test_core_files.py)
ALL_CASES = (
    X86_CASES
    + A64_CASES
    + I386_CASES
    + [c for c in ARM_CASES if c not in ("arm-libc", "arm-signal")]
)
HEX = re.compile(r"0x(0|[1-9a-f][0-9a-f]*)")
TOP_KEYS = {"schema", "kind", "path", "arch", "executable", "pid", "signal", "crashing_thread",
            "modules", "threads"}  # fmt: skip
SIGNAL_KEYS = {"number", "name", "address"}
MODULE_KEYS = {"path", "start", "end", "ranges", "bias", "build_id", "found", "build_id_matches"}
THREAD_KEYS = {"tid", "end", "end_detail", "frames"}
FRAME_KEYS = {"index", "pc", "sp", "cfa", "trust", "module", "module_offset", "function",
              "function_offset", "file", "line", "column", "inline", "doubtful"}  # fmt: skip
# A frame line of the text output:
# "#3  0x00007f1c2a83c24a in name+0x7a at FILE:LINE (/path/to/module)".
FRAME_LINE = re.compile(
    r"#(\d+)\s+0x([0-9a-f]{16}) in (.+?)(?: at [^ ]+)?(?: \(([^()]+)\))?  \[(\w+)(, doubtful)?\]"
)


@functools.cache
def _stackwalk(*args: str) -> subprocess.CompletedProcess[str]:
    return stackwalk_core(*args)


def cli(made: MadeCore, *options: str, executable: bool = True) -> subprocess.CompletedProcess[str]:
    """``stackwalk core`` on a made core (with what it needs to find every module), once;
    without inline frames, which the references here (eu-stack -q, gdb's real frames) leave
    out (test_lines.py compares them), and without a python process's Python frames, which
    they do not show either (test_pyframes.py compares them with pystack's)."""
    args = [str(made.path)] + ([str(made.executable)] if executable else [])
    return _stackwalk(*args, *made.cli_options, "--no-inline", "--native-only", *options)


def cli_json(made: MadeCore, *options: str, executable: bool = True) -> dict[str, Any]:
    proc = cli(made, "--json", *options, executable=executable)
    assert "Traceback" not in proc.stderr, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def h(value: str | None) -> int:
    assert value is not None and HEX.fullmatch(value), value
    return int(value, 16)


def pcs_of(thread: dict[str, Any]) -> list[int]:
    """The pcs of the real frames (inline frames repeat a real frame's pc)."""
    return [h(frame["pc"]) for frame in thread["frames"] if not frame["inline"]]


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


def one_error_line(proc: subprocess.CompletedProcess[str], *mentions: str) -> None:
    """Exit status 2 and exactly one line on stderr, naming what is wrong."""
    no_traceback(proc)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for mention in mentions:
        assert mention in lines[0]


# --- the JSON document ------------------------------------------------------------------------


def check_schema(doc: dict[str, Any]) -> None:
    assert set(doc) == TOP_KEYS
    assert (doc["schema"], doc["kind"]) == ("stackwalk.snapshot/1", "core")
    assert isinstance(doc["path"], str) and isinstance(doc["executable"], str)
    assert isinstance(doc["pid"], int) and isinstance(doc["crashing_thread"], int)
    assert set(doc["signal"]) == SIGNAL_KEYS
    assert isinstance(doc["signal"]["number"], int) and isinstance(doc["signal"]["name"], str)
    if doc["signal"]["address"] is not None:
        h(doc["signal"]["address"])
    for module in doc["modules"]:
        assert set(module) == MODULE_KEYS
        assert isinstance(module["path"], str)
        assert h(module["start"]) < h(module["end"])
        # Its mappings, sorted and apart, from start to end.
        bounds = [h(x) for r in module["ranges"] for x in r]
        assert bounds == sorted(bounds) and len(bounds) == len(set(bounds))
        assert (bounds[0], bounds[-1]) == (h(module["start"]), h(module["end"]))
        h(module["bias"])
        assert module["build_id"] is None or re.fullmatch(r"[0-9a-f]{8,}", module["build_id"])
        assert isinstance(module["found"], bool)
        assert module["build_id_matches"] in (True, False, None)
    starts = [h(m["start"]) for m in doc["modules"]]
    assert starts == sorted(starts)
    for thread in doc["threads"]:
        assert set(thread) == THREAD_KEYS and isinstance(thread["tid"], int)
        assert isinstance(thread["end"], str)
        for index, frame in enumerate(thread["frames"]):
            assert set(frame) == FRAME_KEYS
            assert frame["index"] == index
            h(frame["pc"])
            h(frame["sp"])
            if frame["cfa"] is not None:
                h(frame["cfa"])
            assert frame["trust"] == ("context" if index == 0 else "cfi")
            assert (frame["module"] is None) == (frame["module_offset"] is None)
            if frame["module"] is not None:
                h(frame["module_offset"])
            assert (frame["function"] is None) == (frame["function_offset"] is None)
            if frame["function"] is not None:
                assert isinstance(frame["function"], str) and frame["function"]
                h(frame["function_offset"])


def only_unverified_libraries(made: MadeCore, proc: subprocess.CompletedProcess[str]) -> None:
    """Nothing on stderr for a core read cleanly, but for qemu-user's cores of dynamic programs:
    they hold no page of a library's file, so no build id to check the libraries found under
    the sysroot by; each such library is a warning, and the frames from the first one in it on
    are doubtful (checked by the callers)."""
    for line in proc.stderr.splitlines():
        qemu_dynamic = made.spec.arch in ("aarch64", "arm") and not made.spec.static
        assert qemu_dynamic and "records no identity (build id) to check" in line, line


def doubtful_from_unverified(made: MadeCore, frames: list[dict[str, Any]]) -> None:
    """Each frame is doubtful from the first one in a library that could not be checked (see
    only_unverified_libraries) on, and only then."""
    if made.spec.arch not in ("aarch64", "arm") or made.spec.static:
        assert not any(f["doubtful"] for f in frames)
        return
    executable = os.path.realpath(made.executable)
    first = next((i for i, f in enumerate(frames) if f["module"] and
                  os.path.realpath(f["module"]) != executable), len(frames))  # fmt: skip
    assert [f["doubtful"] for f in frames] == [i >= first for i in range(len(frames))]


@pytest.mark.parametrize("case", ALL_CASES)
def test_json_matches_the_references(case: str, cores: Cores) -> None:
    """The whole document: schema, process facts, and every thread's pcs and stack pointers,
    crashing thread first; exit status 0 and nothing on stderr for a core read cleanly."""
    made = cores(case)
    proc = cli(made, "--json")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    only_unverified_libraries(made, proc)
    doc = cli_json(made)
    check_schema(doc)
    notes = made.notes()
    assert doc["path"] == str(made.path)
    assert os.path.samefile(doc["executable"], made.executable)
    assert doc["pid"] == notes.pid
    assert doc["crashing_thread"] == notes.tids[0]
    number = signal.Signals[made.spec.signal]
    assert (doc["signal"]["number"], doc["signal"]["name"]) == (number, made.spec.signal)
    if notes.signo == signal.SIGSEGV and notes.si_code and 0 < notes.si_code < 0x80:
        assert h(doc["signal"]["address"]) == notes.fault_address
    if notes.signo is None:
        assert doc["signal"]["address"] is None
    assert [thread["tid"] for thread in doc["threads"]] == notes.tids
    reference = made.reference_pcs()
    for thread in doc["threads"]:
        assert pcs_of(thread) == reference[thread["tid"]]
        gdb = made.gdb.thread(thread["tid"])
        assert [h(frame["sp"]) for frame in thread["frames"]] == [f.sp for f in gdb.frames]
        assert thread["end"] == "end_of_stack"
        doubtful_from_unverified(made, thread["frames"])


@pytest.mark.parametrize("case", ["deep", "threads", "a64-cxx"])
def test_json_is_core_to_dict(case: str, cores: Cores) -> None:
    """The same thing from Python: Core.to_dict() is the document the command prints."""
    made = cores(case)
    core = Core.open(str(made.path), str(made.executable), **made.open_options)
    assert json.loads(json.dumps(core.to_dict(inline=False))) == cli_json(made)


def adjust(made: MadeCore, tid: int, index: int) -> int:
    """1 where the pc is a return address after a call (looked up at pc - 1); 0 for frame 0, for
    a frame interrupted by a signal (the one above gdb's SIGTRAMP_FRAME), and for the signal
    trampoline itself (glibc's __restore_rt: the handler "returns" to its first instruction).
    eu-stack adjusts the same way (its "activation" frames)."""
    frames = made.gdb.thread(tid).frames
    if index == 0 or "SIGTRAMP_FRAME" in (frames[index].kind, frames[index - 1].kind):
        return 0
    return 1


def module_file(made: MadeCore, frame: dict[str, Any], tmp_path: Path) -> str:
    """The file whose symbols a frame's module holds (the vdso: its image from the core)."""
    if frame["module"] != "[vdso]":
        return str(frame["module"])
    (vdso,) = [m for m in made.eu_unstrip() if m.name in EU_VDSO]
    image = tmp_path / "vdso.so"
    if not image.exists():
        extract_memory(str(made.path), vdso.start, vdso.end, image)
    return str(image)


def check_function(file: str, frame: dict[str, Any]) -> None:
    """The function and its offset are a symbol of the module's file (by nm) at
    module_offset - function_offset."""
    if frame["function"] is None:
        return
    start = h(frame["module_offset"]) - h(frame["function_offset"])
    addresses = nm_symbols(file).get(unversioned(frame["function"]), frozenset())
    assert start in addresses, f"{frame['function']} at {start:#x} in {file}: nm has {addresses}"


@pytest.mark.parametrize("case", EU_STACK_CASES)
def test_frames_symbolized_as_eu_stack(case: str, cores: Cores, tmp_path: Path) -> None:
    """Every frame's module, module offset and function, as eu-stack -m -b gives them (both
    read the symbols of the distribution's separate debug file where one is installed, else the
    file's own .symtab/.dynsym): the same module, the same function (or an alias at the same
    address), no function where eu-stack has none; module_offset = pc - bias, eu-stack's offset
    from the module's start; the function offset as nm places the symbol."""
    made = cores(case)
    doc = cli_json(made)
    stack = made.eu_stack(symbols=True)
    modules = {m.start: m for m in made.eu_unstrip()}
    for thread in doc["threads"]:
        theirs = stack.threads[thread["tid"]]
        assert len(thread["frames"]) == len(theirs)
        for frame, eu in zip(thread["frames"], theirs, strict=True):
            where = f"thread {thread['tid']} frame {frame['index']}: {frame} vs {eu}"
            assert eu.module_start is not None and eu.offset is not None, where
            expected = modules[eu.module_start]
            if expected.name in EU_VDSO:
                assert frame["module"] == "[vdso]", where
                bias = eu.module_start
            else:
                # No file ("."): eu-unstrip took the image from the core's memory, by name.
                expected_file = expected.file if expected.file is not None else expected.name
                if os.path.exists(expected_file):
                    assert os.path.samefile(frame["module"], expected_file), where
                bias = eu.module_start - first_load_vaddr(frame["module"])
            pc = h(frame["pc"])
            assert h(frame["module_offset"]) == pc - bias, where
            lookup = pc - adjust(made, thread["tid"], frame["index"])
            assert eu.offset == lookup - eu.module_start, where
            file = module_file(made, frame, tmp_path)
            assert same_function(file, frame["function"], eu.function), where
            check_function(file, frame)


@pytest.mark.parametrize("case", A64_CASES)
def test_frames_symbolized_as_gdb(case: str, cores: Cores) -> None:
    """aarch64: every frame in the module gdb found it in (the executable or a library from
    the sysroot), the function gdb names (by the files' symbols; gdb's C++ names come from debug
    information and are spelt differently, so those are checked with nm only), no function where
    gdb has none, and no ARM mapping symbol ($x, $d) for a name."""
    made = cores(case)
    doc = cli_json(made)
    solib_text = {path: text for path, text in made.gdb.solibs}
    exe_bias = made.executable_bias()
    for thread in doc["threads"]:
        gdb = made.gdb.thread(thread["tid"])
        for frame, theirs in zip(thread["frames"], gdb.frames, strict=True):
            where = f"thread {thread['tid']} frame {frame['index']}: {frame} vs {theirs}"
            file = theirs.solib or str(made.executable)
            assert os.path.samefile(frame["module"], file), where
            bias = (
                exe_bias
                if theirs.solib is None
                else (solib_text[theirs.solib] - text_address(theirs.solib))
            )
            assert h(frame["pc"]) - h(frame["module_offset"]) == bias, where
            assert not (frame["function"] or "").startswith("$"), where
            if SPECS[case].compiler.endswith("g++") and theirs.solib is None:
                assert frame["function"] is not None, where
            else:
                assert same_function(file, frame["function"], theirs.function), where
            check_function(file, frame)


@pytest.mark.parametrize(
    ("case", "trampoline", "module"),
    [("signal", "__restore_rt", "libc.so.6"), ("i386-signal", "__kernel_sigreturn", "[vdso]")],
)
def test_signal_trampoline_is_named(case: str, trampoline: str, module: str, cores: Cores) -> None:
    """The handler returns to the first instruction of the trampoline (x86_64: glibc's
    __restore_rt; i386: the vdso's __kernel_sigreturn, whose CFI is in the core's image of the
    vdso): that frame is named so, as eu-stack and gdb name it (a lookup at pc - 1 would land
    before the function), and the interrupted frame above it is looked up at its pc."""
    made = cores(case)
    frames = cli_json(made)["threads"][0]["frames"]
    functions = [frame["function"] for frame in frames]
    assert functions[:4] == ["crash_in_handler", "on_alarm", trampoline, "spin"]
    assert frames[2]["function_offset"] == "0x0"
    assert os.path.basename(frames[2]["module"]) == module


def test_zero_size_start_is_named(cores: Cores) -> None:
    """crash_sizeless_start.c's entry point is a bare assembly label, as musl's is: ``_start``
    has size 0. It names the addresses up to the next symbol, so the main thread's outermost
    frame is ``_start``, as gdb (past-main) names it, at the offset eu-addr2line gives its
    return address less one (the address inside the call)."""
    made = cores("sizeless-start")
    exe = str(made.executable)
    (start,) = [sym for sym in elf_symbols(exe) if sym.name == "_start"]
    assert start.size == 0 and start.type == "STT_NOTYPE"
    frames = cli_json(made)["threads"][0]["frames"]
    outermost = frames[-1]
    assert made.gdb.threads[0].frames[-1].function == "_start"
    assert os.path.samefile(outermost["module"], exe)
    lookup = h(outermost["module_offset"]) - 1
    (named,) = eu_addr2line_symbols(exe, [lookup])
    assert named is not None and named[0] == "_start" and named[1] > 0
    assert (outermost["function"], h(outermost["function_offset"])) == ("_start", named[1] + 1)


# Frame by frame, by hand: (function, module) of the crashing thread of the aarch64 programs
# linked against the cross libc (whose .dynsym names neither strlen's implementation nor
# __libc_start_call_main). EXE stands for the program.
EXE = "program"
BY_HAND = {
    "a64-deep": [
        ("crash_here", EXE), ("small_frame", EXE), ("big_frame", EXE),
        *[("recurse", EXE)] * 5, ("many_saved", EXE), ("main", EXE),
        (None, "libc.so.6"), ("__libc_start_main", "libc.so.6"), ("_start", EXE),
    ],
    "a64-libc": [
        (None, "libc.so.6"), ("measure", EXE), *[("outer", EXE)] * 4, ("main", EXE),
        (None, "libc.so.6"), ("__libc_start_main", "libc.so.6"), ("_start", EXE),
    ],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BY_HAND))
def test_aarch64_dynamic_frames_by_hand(case: str, cores: Cores) -> None:
    made = cores(case)
    frames = cli_json(made)["threads"][0]["frames"]
    shown = []
    for frame in frames:
        module = frame["module"]
        in_exe = os.path.samefile(module, made.executable)
        if not in_exe:
            assert module.startswith(AARCH64_SYSROOT + "/"), module
        shown.append((frame["function"], EXE if in_exe else os.path.basename(module)))
    assert shown == BY_HAND[case]


def test_cxx_names_are_demangled(cores: Cores) -> None:
    """C++ frames read as c++filt prints the mangled symbol at the same address (templates,
    lambdas, std::function, a .cold clone), and as eu-stack does."""
    made = cores("cxx")
    doc = cli_json(made)
    exe = str(made.executable)
    mangled: dict[int, list[str]] = {}
    for line in run(["nm", "--defined-only", exe]).stdout.splitlines():
        address, _kind, name = line.split(" ", 2)
        mangled.setdefault(int(address, 16), []).append(name)
    frames = [f for f in doc["threads"][0]["frames"] if f["module"] == doc["executable"]]
    names = {f["function"] for f in frames}
    assert any("std::function<int (int)>" in n for n in names), names
    assert any("{lambda(int)#1}" in n for n in names), names
    assert any(n.endswith("[clone .cold]") for n in names), names
    for frame in frames:
        start = h(frame["module_offset"]) - h(frame["function_offset"])
        assert frame["function"] in demangle(mangled[start]), frame


@pytest.mark.parametrize("case", ["deep", "libc", "threads", "signal", "lib", "a64-deep",
                                  "a64-deep-static", "a64-threads", *I386_CASES])  # fmt: skip
def test_module_offsets_with_addr2line(case: str, cores: Cores) -> None:
    """module_offset is the address addr2line takes: for each frame in the program (built with
    -g), addr2line -f names the function stackwalk names (a return address looked up one byte
    earlier)."""
    made = cores(case)
    doc = cli_json(made)
    checked = 0
    for thread in doc["threads"]:
        for frame in thread["frames"]:
            module = frame["module"]
            if module in (None, "[vdso]") or not os.path.samefile(module, made.executable):
                continue
            address = h(frame["module_offset"]) - adjust(made, thread["tid"], frame["index"])
            named = addr2line_function(str(made.executable), address)
            assert same_function(str(made.executable), frame["function"], named), (named, frame)
            checked += 1
    assert checked >= 3


# --- text -------------------------------------------------------------------------------------


def parse_text(text: str, tids: list[int]) -> tuple[list[str], dict[int, list[re.Match[str]]]]:
    """(the lines before the first frame line, the frame lines of each thread) of the text
    output. A thread's frames start at a "#0" line; the thread is the one the last other line
    before it names (its header)."""
    before: list[str] = []
    threads: dict[int, list[re.Match[str]]] = {}
    named: int | None = None
    current: list[re.Match[str]] = []
    for line in text.splitlines():
        if match := FRAME_LINE.fullmatch(line):
            if match.group(1) == "0":
                assert named is not None and named not in threads, f"no header before {line!r}"
                current = threads[named] = []
            current.append(match)
            continue
        if not threads:
            before.append(line)
        tids_named = [tid for tid in tids if re.search(rf"\b{tid}\b", line)]
        if tids_named:
            named = tids_named[-1]
    return before, threads


@pytest.mark.parametrize("case", ["threads", "cxx", "signal", "vdso", "lib", "a64-threads",
                                  "i386-threads", "i386-signal"])  # fmt: skip
def test_text_output(case: str, cores: Cores) -> None:
    """Per thread a header and one line per frame, crashing thread first, the signal named
    before any frame: each line the JSON frame's pc, function+offset (?? without one), module
    path and trust."""
    made = cores(case)
    doc = cli_json(made)
    proc = cli(made)
    no_traceback(proc)
    assert proc.returncode == 0
    only_unverified_libraries(made, proc)
    tids = [thread["tid"] for thread in doc["threads"]]
    preamble, threads = parse_text(proc.stdout, tids)
    assert list(threads) == tids
    assert made.spec.signal in "\n".join(preamble), preamble  # named before the first frame
    for thread in doc["threads"]:
        lines = threads[thread["tid"]]
        assert len(lines) == len(thread["frames"])
        for line, frame in zip(lines, thread["frames"], strict=True):
            index, pc, where, module, trust, doubtful = line.groups()
            assert (int(index), int(pc, 16)) == (frame["index"], h(frame["pc"]))
            assert (trust, bool(doubtful)) == (frame["trust"], frame["doubtful"])
            assert module == frame["module"]
            if frame["function"] is None:
                assert where == "??"
            elif h(frame["function_offset"]) == 0:
                assert where in (frame["function"], f"{frame['function']}+0x0")
            else:
                assert where == f"{frame['function']}+{frame['function_offset']}"


# --- options ----------------------------------------------------------------------------------


def test_thread_option(cores: Cores) -> None:
    """--thread TID: that thread only, in text and JSON."""
    made = cores("threads")
    notes = made.notes()
    tid = notes.tids[3]
    doc = cli_json(made, "--thread", str(tid))
    assert [thread["tid"] for thread in doc["threads"]] == [tid]
    assert pcs_of(doc["threads"][0]) == made.reference_pcs()[tid]
    assert doc["crashing_thread"] == notes.tids[0]
    proc = cli(made, "--thread", str(tid))
    assert proc.returncode == 0
    _, threads = parse_text(proc.stdout, notes.tids)
    assert list(threads) == [tid] and len(threads[tid]) == len(made.reference_pcs()[tid])


def test_thread_option_unknown_tid(cores: Cores) -> None:
    made = cores("threads")
    missing = max(made.notes().tids) + 100000
    one_error_line(cli(made, "--thread", str(missing)), str(missing))


@pytest.mark.parametrize("case", ["deep", "python"])
def test_max_frames(case: str, cores: Cores) -> None:
    """--max-frames N: no thread longer than N; the ones cut short end with frame_limit, which
    is not a clean end (exit status 1)."""
    made = cores(case)
    limit = 4
    proc = cli(made, "--json", "--max-frames", str(limit))
    no_traceback(proc)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    reference = made.reference_pcs()
    for thread in doc["threads"]:
        expected = reference[thread["tid"]]
        assert pcs_of(thread) == expected[:limit]
        assert thread["end"] == ("frame_limit" if len(expected) > limit else "end_of_stack")


def test_deep_recursion_has_every_frame(cores: Cores) -> None:
    """No frame limit by default but what the stack can hold: crash_deep.c recursing 600 deep
    gives every frame, as many as eu-stack (-n 0) and gdb (backtrace limit unlimited) find,
    from the command and from Core.to_dict(); --max-frames 10 gives the first ten, ending
    frame_limit."""
    made = cores("recursion")
    tid = made.notes().tids[0]
    reference = made.reference_pcs()[tid]
    assert len(reference) == len(made.gdb.thread(tid).frames) > 600
    doc = cli_json(made)
    (thread,) = doc["threads"]
    assert pcs_of(thread) == reference
    assert thread["end"] == "end_of_stack"
    core = Core.open(str(made.path), str(made.executable), **made.open_options)
    assert len(core.to_dict(inline=False)["threads"][0]["frames"]) == len(reference)
    assert core.threads[0].unwind().pcs == reference

    (thread,) = cli_json(made, "--max-frames", "10")["threads"]
    assert pcs_of(thread) == reference[:10]
    assert thread["end"] == "frame_limit"
    assert core.threads[0].unwind(10).pcs == reference[:10]


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_max_frames_must_be_a_positive_number(value: str, cores: Cores) -> None:
    """--max-frames below 1 (or not a number) is a usage error: exit status 2, one message
    naming the option, no traceback."""
    proc = cli(cores("deep"), "--max-frames", value)
    no_traceback(proc)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--max-frames" in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_executable_found_from_the_core(cores: Cores) -> None:
    made = cores("deep")
    doc = cli_json(made, executable=False)
    assert os.path.samefile(doc["executable"], made.executable)
    assert cli(made, executable=False).returncode == 0
    assert pcs_of(doc["threads"][0]) == made.reference_pcs()[doc["crashing_thread"]]


# --- partial results: exit status 1 -----------------------------------------------------------


def partial(proc: subprocess.CompletedProcess[str], *warned: str) -> None:
    """Exit status 1, frames on stdout, and a warning on stderr naming each of ``warned``."""
    no_traceback(proc)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert proc.stdout.strip()
    for mention in warned:
        assert mention in proc.stderr, proc.stderr


def test_missing_library(cores: Cores) -> None:
    """The library is gone: warned about by name, its frame still shown by path and offset."""
    made = cores("lib")
    library = made.extra["library"]
    args = (str(made.path), str(made.executable), "--strategies", "cfi")
    partial(_stackwalk(*args), library)
    proc = _stackwalk(*args, "--json")
    partial(proc, library)
    doc = json.loads(proc.stdout)
    check_schema(doc)
    (module,) = [m for m in doc["modules"] if m["path"] == library]
    assert module["found"] is False and module["build_id_matches"] is None
    frame = doc["threads"][0]["frames"][0]
    assert frame["module"] == library and frame["function"] is None
    assert h(frame["module_offset"]) == h(frame["pc"]) - h(module["bias"])
    (eu_module,) = [m for m in made.eu_unstrip() if m.name == "libcrashlib.so"]
    assert h(module["bias"]) == eu_module.start - first_load_vaddr(made.extra["v1"])
    assert doc["threads"][0]["end"] != "end_of_stack"


def test_library_with_another_build_id(cores: Cores) -> None:
    """A rebuilt library in place of the one the process loaded is not used: the library's
    frame shows by path and offset, as for a missing one, and the warning names both build
    ids. With --allow-mismatch it is used, and the frames from it on are marked doubtful."""
    made = cores("lib")
    library = made.extra["library"]
    v2_dir = os.path.dirname(made.extra["v2"])
    in_core, on_disk = build_id_of(made.extra["v1"]), build_id_of(made.extra["v2"])
    args = (str(made.path), str(made.executable), "--lib-search-path", f"/nonexistent:{v2_dir}",
            "--strategies", "cfi")  # fmt: skip
    text = _stackwalk(*args)
    partial(text, "libcrashlib.so")
    assert in_core in text.stderr and on_disk in text.stderr and "not used" in text.stderr
    assert "doubtful" not in text.stdout
    proc = _stackwalk(*args, "--json")
    partial(proc, "libcrashlib.so")
    doc = json.loads(proc.stdout)
    check_schema(doc)
    (module,) = [m for m in doc["modules"] if m["path"] == library]
    assert module["found"] is False and module["build_id_matches"] is False
    frames = doc["threads"][0]["frames"]
    assert frames[0]["module"] == library and frames[0]["function"] is None
    assert not any(f["doubtful"] for f in frames)
    # Asked for, the rebuilt file is used: its function names and its (absent) CFI are
    # those of another build, so every frame from the first in it is doubtful.
    proc = _stackwalk(*args, "--json", "--allow-mismatch")
    doc = json.loads(proc.stdout)
    check_schema(doc)
    (module,) = [m for m in doc["modules"] if m["path"] == library]
    assert module["found"] is True and module["build_id_matches"] is False
    frames = doc["threads"][0]["frames"]
    assert os.path.samefile(frames[0]["module"], made.extra["v2"]) and frames[0]["doubtful"]
    assert all(f["doubtful"] for f in frames)
    assert "doubtful]" in _stackwalk(*args, "--allow-mismatch").stdout


def test_library_replaced_in_place_is_not_named_from(cores: Cores) -> None:
    """The common case of wrong answer 5: the library at the very path the core names was
    replaced by another build (a package upgrade). Its frames show by path and offset only, as
    for a missing file: named from the rebuilt file they would be confidently wrong."""
    made = cores("lib")
    library = Path(made.extra["library"])
    library.parent.mkdir()
    try:
        shutil.copy(made.extra["v2"], library)
        proc = _stackwalk(str(made.path), str(made.executable), "--json", "--strategies", "cfi")
        assert "not used" in proc.stderr, proc.stderr
        doc = json.loads(proc.stdout)
        (module,) = [m for m in doc["modules"] if m["path"] == str(library)]
        assert module["found"] is False and module["build_id_matches"] is False
        in_library = [f for f in doc["threads"][0]["frames"] if f["module"] == str(library)]
        assert in_library, doc["threads"][0]["frames"]
        assert all(f["function"] is None and f["line"] is None for f in in_library)
    finally:
        shutil.rmtree(library.parent)


def test_missing_executable(cores: Cores) -> None:
    made = cores("deep-moved")
    original = made.extra["original"]
    partial(_stackwalk(str(made.path), "--strategies", "cfi"), original)
    proc = _stackwalk(str(made.path), "--json", "--strategies", "cfi")
    partial(proc, original)
    doc = json.loads(proc.stdout)
    reference = made.extra["eu_stack"].pcs(doc["crashing_thread"])
    assert pcs_of(doc["threads"][0]) == reference[:1]
    assert doc["threads"][0]["frames"][0]["module"] == original
    # Given explicitly, the moved program is used.
    proc = _stackwalk(str(made.path), str(made.executable), "--json")
    assert proc.returncode == 0 and pcs_of(json.loads(proc.stdout)["threads"][0]) == reference


def test_missing_executable_walked_to_its_start(cores: Cores) -> None:
    """With the fallback strategies (the default), the walk of a core whose program is gone
    goes on past the program's frames by frame pointers and scanning, and ends cleanly at
    _start: the frame within the first bytes of the auxiliary vector's AT_ENTRY, whose frame
    pointer is 0 (it exited with status 1 before, "stopped early" at a frame pointer 0). The
    frames are eu-stack's, with the program present."""
    made = cores("deep-moved")
    original = made.extra["original"]
    proc = _stackwalk(str(made.path), "--json")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert f"module not found: {original}" in proc.stderr
    doc = json.loads(proc.stdout)
    crashed = next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])
    assert crashed["end"] == "end_of_stack"
    assert pcs_of(crashed) == made.extra["eu_stack"].pcs(doc["crashing_thread"])


def test_executable_given_with_another_build_id(cores: Cores, build: Builder) -> None:
    """A program named on the command line whose build id is not the core's is another build:
    not used (it was, "using it anyway"), the warning names both ids; --allow-mismatch uses it,
    every frame from the first in it doubtful."""
    made = cores("deep")
    other = build("crash_deep.c", *SPECS["deep"].flags, "-DDEPTH=5")
    assert build_id_of(other) != build_id_of(made.executable)
    proc = _stackwalk(str(made.path), str(other), "--json")
    no_traceback(proc)
    assert build_id_of(other) in proc.stderr and build_id_of(made.executable) in proc.stderr
    assert "not used" in proc.stderr
    doc = json.loads(proc.stdout)
    crashed = next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])
    assert not any(f["module"] and os.path.samefile(f["module"], other) for f in crashed["frames"])
    assert all(f["function"] != "crash_here" for f in crashed["frames"])
    doc = json.loads(_stackwalk(str(made.path), str(other), "--json", "--allow-mismatch").stdout)
    crashed = next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])
    assert crashed["frames"][0]["function"] == "crash_here" and crashed["frames"][0]["doubtful"]


def test_aarch64_libraries_without_sysroot(cores: Cores) -> None:
    """The link map names /lib/aarch64-linux-gnu/...: not on this machine without --sysroot
    (exit status 1, warnings), found by name with --lib-search-path."""
    made = cores("a64-cxx")
    args = (str(made.path), str(made.executable))
    partial(_stackwalk(*args, "--strategies", "cfi"), "libc.so.6", "libstdc++.so.6")
    proc = _stackwalk(*args, "--json", "--lib-search-path", f"{AARCH64_SYSROOT}/lib")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert pcs_of(doc["threads"][0]) == made.reference_pcs()[doc["crashing_thread"]]


def test_truncated_in_the_notes(cores: Cores, tmp_path: Path) -> None:
    """Threads intact, modules lost: frame 0 shown, exit status 1, the damage said."""
    made = cores("deep")
    _, end = note_span(made.path, "NT_PRSTATUS")
    damaged = truncated_copy(made.path, end + 40, tmp_path, "notes.core")
    proc = stackwalk_core(damaged, made.executable, "--json")
    partial(proc, "truncated")
    doc = json.loads(proc.stdout)
    reference = made.reference_pcs()[doc["crashing_thread"]]
    pcs = pcs_of(doc["threads"][0])
    assert 1 <= len(pcs) and pcs == reference[: len(pcs)]


def test_truncated_in_the_stack(cores: Cores, tmp_path: Path) -> None:
    made = cores("a64-deep-static")
    sp = made.gdb.thread(made.notes().tids[0]).frames[0].sp
    offset, _ = file_offset(made.path, sp)
    damaged = truncated_copy(made.path, offset + 16, tmp_path, "stack.core")
    proc = stackwalk_core(damaged, made.executable, "--json")
    partial(proc, "truncated")
    doc = json.loads(proc.stdout)
    reference = made.reference_pcs()[doc["crashing_thread"]]
    pcs = pcs_of(doc["threads"][0])
    assert 1 <= len(pcs) < len(reference) and pcs == reference[: len(pcs)]
    assert doc["threads"][0]["end"] == "memory"


# --- nothing to show: exit status 2 -----------------------------------------------------------


def test_truncated_in_the_first_thread(cores: Cores, tmp_path: Path) -> None:
    made = cores("deep")
    start, end = note_span(made.path, "NT_PRSTATUS")
    damaged = truncated_copy(made.path, (start + end) // 2, tmp_path, "prstatus.core")
    proc = stackwalk_core(damaged, made.executable)
    no_traceback(proc)
    assert proc.returncode == 2
    assert "truncated" in proc.stderr and "thread" in proc.stderr, proc.stderr


@pytest.mark.parametrize("size", [10, 100])
def test_truncated_in_the_headers(size: int, cores: Cores, tmp_path: Path) -> None:
    damaged = truncated_copy(cores("deep").path, size, tmp_path, f"headers-{size}.core")
    one_error_line(stackwalk_core(damaged), str(damaged))


@pytest.mark.parametrize("kind", ["text", "empty", "executable", "missing", "directory"])
def test_not_a_core(kind: str, build: Builder, tmp_path: Path) -> None:
    paths = {
        "text": tmp_path / "notes.txt",
        "empty": tmp_path / "empty",
        "executable": build("crash_deep.c", *SPECS["deep"].flags),
        "missing": tmp_path / "missing.core",
        "directory": tmp_path,
    }
    paths["text"].write_text("not an ELF file\n" * 100)
    paths["empty"].write_bytes(b"")
    one_error_line(stackwalk_core(paths[kind]), str(paths[kind]))
    one_error_line(stackwalk_core(paths[kind], "--json"), str(paths[kind]))


def test_executable_of_another_architecture(cores: Cores) -> None:
    """An aarch64 core given an x86_64 program: the program is not used (a warning), and the
    mismatch is not a crash."""
    made = cores("a64-deep-static")
    other = cores("deep").executable
    proc = stackwalk_core(made.path, other)
    no_traceback(proc)
    assert proc.returncode in (1, 2)
    assert proc.stderr.strip()


def test_an_executable_that_cannot_be_the_program_is_an_error(cores: Cores, tmp_path: Path) -> None:
    """An executable given that is not there, not an ELF file, or another architecture's is
    one error line at once, whatever the core shows of the program (the aarch64 core here,
    of a static program, is read through its link map)."""
    made = cores("deep")
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file\n")
    other = cores("a64-deep-static")
    for core, given, why in (
        (made.path, tmp_path / "missing", "no such file"),
        (made.path, text, "not an ELF file"),
        (other.path, made.executable, f"{made.executable} is x86_64, not aarch64"),
    ):
        proc = stackwalk_core(core, given)
        no_traceback(proc)
        error = f"stackwalk: error: executable {given}: {why}\n"
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", error)


def test_closed_output_pipe(cores: Cores) -> None:
    """`stackwalk core --json CORE | head -1`: a reader that goes away early (here before the
    document, more than a pipe holds, is written) is no traceback."""
    made = cores("python")
    command = [sys.executable, "-m", "stackwalk", "core", "--json", str(made.path),
               str(made.executable)]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        stderr = proc.stderr.read().decode(errors="replace")
        proc.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


@pytest.mark.parametrize("output", ["--json", "text"])
def test_output_that_cannot_be_written(output: str, cores: Cores) -> None:
    """Output to a full device (/dev/full): one error line naming the write error, exit 2,
    no traceback, whether the write fails in a print or in the last flush."""
    made = cores("deep")
    options = [output] if output.startswith("-") else []
    command = [sys.executable, "-m", "stackwalk", "core", *options, str(made.path),
               str(made.executable), *made.cli_options]  # fmt: skip
    with open("/dev/full", "w") as full:
        proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)  # fmt: skip
    one_error_line(subprocess.CompletedProcess(command, proc.returncode, "", proc.stderr),
                   "No space left on device")  # fmt: skip


def test_help_and_commands() -> None:
    """Every command is listed, helped and checked."""
    commands = ["demo", "capture", "core", "minidump", "perf", "unwind", "pid", "triage", "report"]

    def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "stackwalk", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    top = run_cli("--help")
    assert top.returncode == 0
    for name in commands:
        assert re.search(rf"^\s+{name}\s+\S", top.stdout, re.M), f"{name} not in:\n{top.stdout}"
        sub = run_cli(name, "--help")
        assert sub.returncode == 0 and sub.stdout.startswith(f"usage: stackwalk {name} ")
    perf = run_cli("perf", "--help").stdout
    assert "--collapsed" in perf and "--thread" not in perf
    bogus = run_cli("bogus")
    assert bogus.returncode == 2 and "invalid choice: 'bogus'" in bogus.stderr
    assert all(f"'{name}'" in bogus.stderr for name in commands)
    missing = run_cli("perf")
    assert missing.returncode == 2 and "PERF.DATA" in missing.stderr


@pytest.mark.parametrize("case", ["snapshot", "snapshot-stopped"])
def test_snapshot_is_no_crash(case: str, cores: Cores) -> None:
    """gdb's gcore of a live process that did not fault: of a running one, every thread's
    NT_SIGINFO says SIGSTOP (gdb's attach); of one stopped with SIGSTOP first, there is no
    NT_SIGINFO (eu-readelf shows none). No thread is the crashing one, in the JSON or the
    text, and the text says it is a snapshot; the frames are still eu-stack's."""
    made = cores(case)
    notes = made.notes()
    assert notes.cursig and not any(notes.cursig), notes.cursig  # pr_cursig 0 in every thread
    doc = cli_json(made)
    assert doc["crashing_thread"] is None
    stopped = case == "snapshot"
    sigstop = {"number": signal.SIGSTOP, "name": "SIGSTOP", "address": None}
    assert doc["signal"] == (sigstop if stopped else None)
    reference = made.reference_pcs()
    assert len(reference) == 2 and set(reference) == {t["tid"] for t in doc["threads"]}
    for thread in doc["threads"]:
        assert [int(f["pc"], 16) for f in thread["frames"]] == reference[thread["tid"]]
        assert thread["end"] == "end_of_stack"
    text = cli(made)
    assert text.returncode == 0, text.stderr
    assert "crashed" not in text.stdout.replace("no thread crashed", "")
    assert "Killed by" not in text.stdout
    how = ", stopped by SIGSTOP (signal 19)" if stopped else ""
    assert text.stdout.splitlines()[1] == f"Snapshot of a running process{how}: no thread crashed"
    assert Core.open(made.path, made.executable).crashing_tid is None


def compressed_copy(made: MadeCore, tool: str, directory: Path, name: str) -> Path:
    """The core compressed by the real tool, under ``name`` (whatever its suffix)."""
    path = directory / name
    with open(made.path, "rb") as source, open(path, "wb") as out:
        subprocess.run(COMPRESSORS[tool], stdin=source, stdout=out, check=True, timeout=120)
    return path


@pytest.mark.parametrize("tool", sorted(COMPRESSORS))
def test_compressed_core(tool: str, cores: Cores, tmp_path: Path) -> None:
    """A core compressed by zstd (systemd-coredump's default), gzip, xz or lz4 (its frame format,
    and its legacy one, ``lz4 -l``) gives the same report as the core itself, found by its magic
    bytes: the file's name says nothing."""
    made = cores("threads")
    plain = cli_json(made)
    for name in (f"core.{tool}", "core.bin"):
        path = compressed_copy(made, tool, tmp_path, name)
        proc = _stackwalk(
            str(path), str(made.executable), "--json", "--no-inline", *made.cli_options
        )
        assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
        assert {**json.loads(proc.stdout), "path": str(made.path)} == plain
    text = _stackwalk(str(path), str(made.executable), "--no-inline", *made.cli_options)
    assert text.stdout.splitlines()[1:] == cli(made).stdout.splitlines()[1:]


def test_compressed_cores_in_a_directory(cores: Cores, tmp_path: Path) -> None:
    """`core --dir`: a spool of compressed cores (systemd-coredump's) next to a plain one."""
    made = cores("deep")
    spool = tmp_path / "spool"
    spool.mkdir()
    for tool in sorted(COMPRESSORS):
        compressed_copy(made, tool, spool, f"core.deep.{tool}")
    os.link(made.path, spool / "core.deep")
    proc = _stackwalk("--dir", str(spool), "--json", "--jobs", "1", *made.cli_options)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    docs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [Path(d["path"]).name for d in docs] == sorted(os.listdir(spool))
    reference = made.reference_pcs()
    for doc in docs:
        for thread in doc["threads"]:
            assert pcs_of(thread) == reference[thread["tid"]]


@pytest.mark.parametrize("tool", sorted(COMPRESSORS))
def test_compressed_core_over_the_limit(tool: str, cores: Cores, tmp_path: Path) -> None:
    """A file that decompresses to more than --max-core-size (a decompression bomb) is one
    error line, found before more than the limit is held; the limit just above the core's size
    reads it."""
    made = cores("deep")
    size = made.path.stat().st_size
    path = compressed_copy(made, tool, tmp_path, f"core.{tool}")
    over = _stackwalk(str(path), str(made.executable), "--max-core-size", str(size - 1))
    one_error_line(over, f"{path}: {tool}-compressed file decompresses to more than {size - 1}")
    fits = _stackwalk(str(path), str(made.executable), "--max-core-size", str(size))
    assert fits.returncode == 0, fits.stderr


# An address-space limit no decompressed bomb fits in (the old decoders' buffers grew to the
# 8 GiB default limit and aborted: "memory allocation of 4294967296 bytes failed").
ADDRESS_SPACE = 1536 << 20


def limited(*args: str) -> subprocess.CompletedProcess[str]:
    """``stackwalk ARGS`` under ``prlimit --as`` (ADDRESS_SPACE)."""
    command = ["prlimit", f"--as={ADDRESS_SPACE}", sys.executable, "-m", "stackwalk", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("tool", sorted(COMPRESSORS))
def test_a_bomb_is_one_error_in_bounded_memory(tool: str, tmp_path: Path) -> None:
    """3 GiB of zeros, with the default --max-core-size (8 GiB), under a 1.5 GiB address-space
    limit: the decompressed bytes go to a temporary file (holes, for zeros), not to memory, and
    the first megabyte, not an ELF core's, stops it -- one error line, exit 2."""
    path = bomb(tool, tmp_path)
    proc = limited("core", str(path))
    one_error_line(proc, f"{path}: {tool}-compressed file does not hold an ELF core")


@pytest.mark.parametrize("tool", sorted(COMPRESSORS))
def test_a_bomb_behind_a_cores_headers_stops_at_the_cores_size(
    tool: str, cores: Cores, tmp_path: Path
) -> None:
    """A real core's bytes, then 1 GiB of zeros, under the address-space limit: decompressed
    no further than the size the core's own headers give (its segments' and notes' end)."""
    made = cores("deep")
    core = made.path.read_bytes()
    path = bomb(tool, tmp_path, head=core, gib=1)
    proc = limited("core", str(path))
    one_error_line(proc, f"{path}: {tool}-compressed file decompresses to more than the "
                         f"{len(core)} bytes its core's own headers describe")  # fmt: skip


def test_a_bomb_in_a_spool_is_one_failed_entry(cores: Cores, tmp_path: Path) -> None:
    """triage of a spool holding a bomb and a real core, under the address-space limit: the
    core is stored, the bomb is one file that is not a crash, named with why."""
    made = cores("deep")
    spool = tmp_path / "spool"
    spool.mkdir()
    bomb("zstd", spool)
    os.link(made.path, spool / "core.deep")
    proc = limited("triage", str(spool), "--db", str(tmp_path / "store.sqlite"), "--jobs", "1")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "1 crashes stored" in proc.stdout, proc.stdout
    assert "does not hold an ELF core" in proc.stdout, proc.stdout


def test_damaged_compressed_core(cores: Cores, tmp_path: Path) -> None:
    made = cores("deep")
    whole = compressed_copy(made, "xz", tmp_path, "core.xz")
    cut = truncated_copy(whole, whole.stat().st_size // 2, tmp_path, "cut.xz")
    one_error_line(_stackwalk(str(cut)), f"{cut}: xz-compressed file damaged")
