"""macOS crashes: Mach-O programs built here (clang, ld64.lld), run in the unicorn emulator to a
fault and written as Crashpad's macOS minidumps (tests/apple.py, whose own tests are
tests/test_apple_harness.py), read by ``stackwalk minidump`` with the programs' files found in
``--lib-search-path``: the executable (its compact unwind info, ``__TEXT,__unwind_info``, and
``__eh_frame``) and its dSYM (names, lines).

The reference is the emulator's shadow stack: every call it saw that had not returned at the
fault, with the stack pointer before it and the callee-saved registers the callee was given. It
is independent of every unwind table: each compact unwind mode on x86_64 (RBP frame,
frameless immediate and indirect, DWARF) and arm64 (frame, frameless, DWARF) is crossed on the
way to libdyld's ``start``, the outermost frame, which dyld's zero frame record ends.
minidump-stackwalk, the other reference, reads the same dumps: the crash, the modules and their
ids are its; its frames are not where it cannot use the tables (tests/test_apple_harness.py
lists where it goes wrong), and stackwalk's are the shadow stack's there.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import apple
import pytest
from corefiles import stackwalk_minidump
from stackwalk import Minidump, Unwinder
from stackwalk.unwinder import CRASH_STRATEGIES

DATA = Path(__file__).parent / "data"
CASES = [(arch, mode) for arch in apple.ARCHES for mode in apple.MODES]
# The callee-saved registers the walk recovers, by the names the document gives them, and the
# shadow stack's names for them.
SAVED = {
    "x86_64": {r: r for r in ("rbx", "rbp", "r12", "r13", "r14", "r15")},
    "arm64": {**{f"x{i}": f"x{i}" for i in range(19, 29)}, "x29": "fp"},
}


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, apple.Program]:
    out = tmp_path_factory.mktemp("apple")
    return {arch: apple.build(arch=arch, out_dir=out / arch) for arch in apple.ARCHES}


@pytest.fixture(scope="module")
def crashes(
    programs: dict[str, apple.Program], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], tuple[apple.Emulation, Path]]:
    """Each (arch, mode): the emulated crash and its minidump."""
    out = tmp_path_factory.mktemp("apple-dumps")
    made = {}
    for arch, mode in CASES:
        emulation = apple.emulate(programs[arch], apple.MODES[mode])
        dump = apple.write_mac_minidump(emulation, out / f"{arch}-{mode}.dmp")
        made[arch, mode] = (emulation, dump)
    return made


def document(dump: Path, *search: Path) -> dict[str, Any]:
    """The document of the dump, each frame with its registers, its programs' files looked for
    in ``search``."""
    opened = Minidump.open(dump, lib_search_path=[str(d) for d in search])
    doc: dict[str, Any] = opened.document(registers=True).to_dict()
    doc["warnings"] = opened.warnings
    return doc


def real_frames(thread: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in thread["frames"] if not f.get("inline")]


@pytest.mark.parametrize(("arch", "mode"), CASES)
def test_frames_are_the_emulated_stack(
    arch: str,
    mode: str,
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
) -> None:
    """Every frame's pc and sp are the shadow stack's, down to libdyld's ``start`` and not past
    it; every caller is found by the tables (``cfi``: compact unwind or ``__eh_frame``), but the
    caller of a call to NULL, whose return address is in lr or at sp; each caller's callee-saved
    registers are the ones its callee was given (restored from the slots the encodings name);
    each frame in the program is named as its symbol (without Apple's ``_``)."""
    emulation, dump = crashes[arch, mode]
    doc = document(dump, programs[arch].executable.parent)
    (thread,) = doc["threads"]
    frames, truth = real_frames(thread), emulation.frames
    assert [(int(f["pc"], 16), int(f["sp"], 16)) for f in frames] == [
        (t.pc, t.sp) for t in truth
    ], thread
    assert thread["end"] == "end_of_stack", thread
    assert "Apple's mark of the outermost frame" in thread["end_detail"], thread
    assert frames[-1]["module"] == emulation.outermost.path
    for i, (frame, expected) in enumerate(zip(frames, truth, strict=True)):
        if expected.module == emulation.module_path and expected.function:
            assert frame["function"] == expected.function, (i, frame)
        if i == 0:
            assert frame["trust"] == "context"
            continue
        called_null = truth[i - 1].pc == 0
        assert frame["trust"] == ("frame_pointer" if called_null else "cfi"), (i, frame)
        if any(t.pc == 0 for t in truth[:i]):
            # (After a frame found by a fallback, the registers it left unknown stay so.)
            continue
        registers = {k: int(v, 16) for k, v in frame["registers"].items()}
        for ours, theirs in SAVED[arch].items():
            if theirs in expected.registers:
                assert registers.get(ours) == expected.registers[theirs], (i, ours, frame)


def unwinder_of(program: apple.Program) -> Unwinder:
    """An unwinder of the program as the emulator loads it (the executable by its Mach-O
    file, libdyld's stand-in by its range alone), on an Apple platform, with the strategies of
    ``stackwalk minidump``."""
    arch = "x86_64" if program.arch == "x86_64" else "aarch64"
    unwinder = Unwinder(arch=arch, strategies=CRASH_STRATEGIES)
    unwinder.set_apple(True)
    load = program.text_address + apple.DEFAULT_SLIDE
    slide = apple.DEFAULT_SLIDE
    code = [
        (s.vmaddr + slide, s.vmaddr + slide + s.vmsize) for s in program.segments if s.initprot & 4
    ]
    span = [(load, load + program.image_size)]
    unwinder.add_missing_module(
        "/Users/ci/crash/apple_crash", span, code, base=load, macho_file=program.executable
    )
    outer = apple.LIBDYLD[program.arch]
    stand_in = [(outer.base, outer.base + outer.size)]
    unwinder.add_missing_module(outer.path, stand_in, stand_in)
    return unwinder


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_every_instruction_unwinds_to_start(arch: str, programs: dict[str, apple.Program]) -> None:
    """The program run without a crash (its loads reading a global), every path its modes
    take, stopped before each instruction of ``__text`` as a profiler's sample or a crash there
    would stop it: from every place a prologue, body and epilogue leave the stack in, the walk
    gives the shadow stack's pcs and sps, to libdyld's ``start``. Compact unwind and Apple's
    ``__eh_frame`` describe a function's body alone: the prologues and epilogues are read from
    the instructions (rust/arch/edges.rs)."""
    program = programs[arch]
    checked: set[int] = set()
    for mode in ("leaf", "leaf_stack", "small", "big", "dwarf", "frame"):
        for sample in apple.samples(program, apple.MODES[mode]):
            trace = unwinder_of(program).unwind(dict(sample.registers), [sample.stack])
            pc = sample.frames[0][0] - apple.DEFAULT_SLIDE
            where = (mode, hex(pc), program.function_at(pc), trace.end_detail)
            assert list(zip(trace.pcs, trace.sps, strict=True)) == list(sample.frames), where
            assert trace.end == "end_of_stack", where
            checked.add(pc)
    # Each function's first instruction and a return of each, at least, among them.
    returns = {
        a for a, (m, _) in apple.disassembly(program.executable).items() if m.startswith("ret")
    }
    names = ("main", "frame_saver", "dwarf_function", "frameless_big", "frameless_small", "fill")
    for name in (*names, "crash_leaf", "leaf_with_stack"):
        start, end = next((s, e) for s, e, n in program.functions if n == f"_{name}")
        assert start in checked and any(start <= a < end for a in returns & checked), name


def symbolizer_line(dwarf: Path, address: int) -> tuple[str, int]:
    """llvm-symbolizer's file and line of a file address of the dSYM's DWARF file (the
    outermost of its inline chain: the function the code is in)."""
    proc = subprocess.run(
        ["llvm-symbolizer", "--obj", str(dwarf), "--inlines", "--output-style=JSON", hex(address)],
        capture_output=True,
        text=True,
        check=True,
    )
    (answer,) = json.loads(proc.stdout)
    last = answer["Symbol"][-1]
    return last["FileName"], last["Line"]


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_lines_come_from_the_dsym(
    arch: str,
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
) -> None:
    """The program's frames have llvm-symbolizer's file and line of the dSYM at their pc
    (frame 0) or return address less one, the file's addresses the dump's less its slide."""
    program = programs[arch]
    checked = 0
    for mode in ("leaf", "frame"):
        emulation, dump = crashes[arch, mode]
        (thread,) = document(dump, program.executable.parent)["threads"]
        frames = real_frames(thread)
        for i, frame in enumerate(frames):
            if frame["module"] != emulation.module_path:
                continue
            address = int(frame["pc"], 16) - emulation.slide - (0 if i == 0 else 1)
            assert (frame["file"], frame["line"]) == symbolizer_line(program.dwarf_file, address)
            checked += 1
    assert checked >= 6


def test_a_file_of_another_build_is_not_used(
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
    tmp_path: Path,
) -> None:
    """The same program built again with another UUID: a warning names both UUIDs and neither
    its tables nor its names are used: the frames are the frame-pointer chain's (Apple's ABI
    keeps one), which skips the frameless functions."""
    emulation, dump = crashes["x86_64", "leaf"]
    other = apple.build(arch="x86_64", out_dir=tmp_path, extra_flags=("-DOTHER_BUILD=1",))
    assert other.uuid != programs["x86_64"].uuid
    doc = document(dump, tmp_path)
    said = [w for w in doc["warnings"] if "UUID mismatch" in w]
    assert said and other.uuid.hex() in said[0] and programs["x86_64"].uuid.hex() in said[0]
    frames = real_frames(doc["threads"][0])
    assert all(f["function"] is None for f in frames)
    assert all(f["trust"] != "cfi" for f in frames[1:-1])


def test_the_dsym_alone_names_the_frames(
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
    tmp_path: Path,
) -> None:
    """Only the dSYM bundle in the search path (named for the app, as Xcode names them): its
    UUID is checked and it names the frames; without the executable's tables the walk follows
    the frame-pointer chain, each frame it finds one of the shadow stack's."""
    program = programs["arm64"]
    emulation, dump = crashes["arm64", "frame"]
    (tmp_path / "CrashApp.app.dSYM").symlink_to(program.dsym)
    doc = document(dump, tmp_path)
    frames = real_frames(doc["threads"][0])
    truth = {(t.pc, t.function) for t in emulation.frames}
    in_program = [f for f in frames if f["module"] == emulation.module_path]
    assert in_program and all((int(f["pc"], 16), f["function"]) in truth for f in in_program)
    assert all(f["line"] for f in in_program)


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_the_crash_and_modules_are_minidump_stackwalks(
    arch: str,
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
) -> None:
    """``--format minidump-stackwalk``: the system, the crash, its thread and every module's
    ids and range as minidump-stackwalk reads them from the dump."""
    _, dump = crashes[arch, "frame"]
    proc = stackwalk_minidump(dump, "--json", "--format", "minidump-stackwalk")
    assert proc.returncode == 0, proc.stderr
    mine = json.loads(proc.stdout)
    theirs = apple.minidump_stackwalk(dump, Path("/nonexistent"))
    for key in ("os", "os_ver", "cpu_arch"):
        assert mine["system_info"][key] == theirs["system_info"][key]
    for key in ("type", "address", "crashing_thread"):
        assert mine["crash_info"][key] == theirs["crash_info"][key]
    keys = ("base_addr", "end_addr", "filename", "code_id", "debug_id")
    assert [[m[k] for k in keys] for m in mine["modules"]] == [
        [m[k] for k in keys] for m in theirs["modules"]
    ]
    assert mine["modules"][0]["debug_id"] == programs[arch].debug_id


def test_a_rust_programs_crash_on_macos_ends_at_dyld_start(tmp_path: Path) -> None:
    """rust-minidump's dump of a Rust program's segfault on macOS 11, with its symbol file:
    every frame minidump-stackwalk gives, function and line, then the end at libdyld's
    ``start``, whose frame record (at its rbp) holds the zero frame pointer dyld pushed, where
    minidump-stackwalk scans on and gives ``start`` a second time."""
    store = tmp_path / "crash-client" / "509C0610949836F7B70BD88BCF03E5400"
    store.mkdir(parents=True)
    sym = DATA / "rust-minidump" / "symbols" / "crash-client.sym.xz"
    with open(store / "crash-client.sym", "wb") as out:
        subprocess.run(["xz", "-dc", str(sym)], stdout=out, check=True)
    dump = DATA / "rust-minidump" / "pipeline-inlines-macos-segv.dmp"
    theirs = apple.minidump_stackwalk(dump, tmp_path)["crashing_thread"]["frames"]
    proc = stackwalk_minidump(dump, "--json", "--symbols-path", tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    crashed = next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])
    mine = real_frames(crashed)
    assert theirs[-1]["offset"] == theirs[-2]["offset"] and theirs[-1]["trust"] == "scan"
    assert len(mine) == len(theirs) - 1
    for ours, their in zip(mine, theirs, strict=False):
        assert ours["function"] == their["function"], (ours, their)
        assert ours["line"] == their["line"], (ours, their)
    assert crashed["end"] == "end_of_stack"
    assert "Apple's mark of the outermost frame" in crashed["end_detail"]
    assert mine[-1]["module"].endswith("libdyld.dylib")
