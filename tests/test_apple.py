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

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import apple
import pytest
from corefiles import run, stackwalk_minidump
from minidumps import symbol_server
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


def unpacked(packed: str, out: Path) -> Path:
    """tests/data/PACKED (xz) decompressed to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        subprocess.run(["xz", "-dc", str(DATA / packed)], stdout=f, check=True)
    return out


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


def frames_of(doc: dict[str, Any]) -> list[tuple[int, int]]:
    """(pc, sp) of each frame of the document's one thread."""
    (thread,) = doc["threads"]
    return [(int(f["pc"], 16), int(f["sp"], 16)) for f in real_frames(thread)]


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_a_threads_stack_ends_at_thread_start(
    arch: str, programs: dict[str, apple.Program], tmp_path: Path
) -> None:
    """A thread's crash (its entry called from libsystem_pthread's ``thread_start``, as
    ``_pthread_start`` calls it, under the zero frame record the thread begins with): the
    shadow stack's frames, ending at ``thread_start``."""
    program = programs[arch]
    outer = apple.PTHREAD[arch]
    emulation = apple.emulate(
        program, apple.MODES["leaf"], "_thread_main", argument=3, outermost=outer
    )
    dump = apple.write_mac_minidump(emulation, tmp_path / "thread.dmp")
    doc = document(dump, program.executable.parent)
    assert frames_of(doc) == [(f.pc, f.sp) for f in emulation.frames]
    (thread,) = doc["threads"]
    assert real_frames(thread)[-1]["module"] == outer.path and thread["end"] == "end_of_stack"


def test_an_ios_arm64e_crash(
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
    tmp_path: Path,
) -> None:
    """The arm64 crash as an iOS device's dump, with every return address on the stack and in
    lr signed as arm64e signs them (pointer-authentication bits above the 47-bit address): the
    system is iOS, the Mach-O file is looked for as a Mac's, and the walk strips the bits of
    every saved lr it reads: the shadow stack's frames."""
    emulation, _ = crashes["arm64", "leaf"]
    returns = {f.pc for f in emulation.frames[1:]}
    address, stack = emulation.stack
    signed = bytearray(stack)
    planted = 0
    for at in range(0, len(stack) - 7, 8):
        word = int.from_bytes(stack[at : at + 8], "little")
        if word in returns:
            signed[at : at + 8] = (word | 0x2D5A << 48).to_bytes(8, "little")
            planted += 1
    registers = dict(emulation.registers)
    if registers["lr"] in returns:
        registers["lr"] |= 0x7F13 << 48
        planted += 1
    assert planted >= len(returns) - 1
    ios = dataclasses.replace(emulation, stack=(address, bytes(signed)), registers=registers)
    dump = apple.write_mac_minidump(ios, tmp_path / "ios.dmp", apple.PLATFORM_IOS)
    doc = document(dump, programs["arm64"].executable.parent)
    assert doc["system"]["os"] == "iOS", doc["system"]
    assert frames_of(doc) == [(f.pc, f.sp) for f in emulation.frames]


def test_a_universal_file_gives_each_cpu_its_slice(
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
    tmp_path: Path,
) -> None:
    """One universal ("fat") file of both programs (llvm-lipo), found by name for an x86_64
    and an arm64 dump: each walk reads its CPU's slice (its UUID checked) and gives the shadow
    stack's frames."""
    lipo = shutil.which("llvm-lipo") or "llvm-lipo-14"
    fat = tmp_path / "apple_crash"
    slices = [str(programs[arch].executable) for arch in apple.ARCHES]
    subprocess.run([lipo, "-create", *slices, "-output", str(fat)], check=True)
    for arch in apple.ARCHES:
        emulation, dump = crashes[arch, "small"]
        doc = document(dump, tmp_path)
        assert frames_of(doc) == [(f.pc, f.sp) for f in emulation.frames], arch
        (thread,) = doc["threads"]
        assert all(f["trust"] == "cfi" for f in real_frames(thread)[1:]), arch


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
    the instructions (rust/arch/edges.rs). Each caller's callee-saved registers are the ones
    its callee was given."""
    program = programs[arch]
    checked: set[int] = set()
    for mode in ("leaf", "leaf_stack", "small", "big", "dwarf", "frame"):
        for sample in apple.samples(program, apple.MODES[mode]):
            unwinder = unwinder_of(program)
            trace = unwinder.unwind(dict(sample.registers), [sample.stack], registers=True)
            pc = sample.frames[0][0] - apple.DEFAULT_SLIDE
            where = (mode, hex(pc), program.function_at(pc), trace.end_detail)
            assert list(zip(trace.pcs, trace.sps, strict=True)) == list(sample.frames), where
            assert trace.end == "end_of_stack", where
            # Each caller's callee-saved registers: those its callee was given.
            for i, truth in enumerate(sample.saved, start=1):
                registers = trace.registers(i)
                for ours, theirs in SAVED[program.arch].items():
                    assert registers.get(ours) == truth[theirs], (*where, i, ours)
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


RUST_DUMP = DATA / "rust-minidump" / "pipeline-inlines-macos-segv.dmp"


@pytest.fixture(scope="module")
def rust_symbols(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A symbol store with the symbol file of the Rust program of RUST_DUMP."""
    root = tmp_path_factory.mktemp("rust-symbols")
    store = root / "crash-client" / "509C0610949836F7B70BD88BCF03E5400"
    unpacked("rust-minidump/symbols/crash-client.sym.xz", store / "crash-client.sym")
    return root


def test_a_rust_programs_crash_on_macos_ends_at_dyld_start(rust_symbols: Path) -> None:
    """rust-minidump's dump of a Rust program's segfault on macOS 11, with its symbol file:
    every frame minidump-stackwalk gives, function and line, then the end at libdyld's
    ``start``, whose frame record (at its rbp) holds the zero frame pointer dyld pushed, where
    minidump-stackwalk scans on and gives ``start`` a second time."""
    dump = RUST_DUMP
    theirs = apple.minidump_stackwalk(dump, rust_symbols)["crashing_thread"]["frames"]
    proc = stackwalk_minidump(dump, "--json", "--symbols-path", rust_symbols)
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


# Real macOS dumps whose programs are public too (tests/data/symbolic/NOTICE): the dump, the
# program's name in it, where the program and its dSYM are kept (xz).
REAL_DUMPS = {
    "symbolic": ("symbolic/crash_macos.dmp", "crash_macos"),
    "symbolicator": ("symbolicator/macos.dmp", "crash"),
}


@pytest.mark.parametrize("which", sorted(REAL_DUMPS))
def test_real_macos_dumps_unwind_by_their_programs_tables(which: str, tmp_path: Path) -> None:
    """Crashes on macOS 10.12 with their programs (built by Apple's linker: its compact unwind
    info) and dSYMs in --lib-search-path: the crashing thread's frames are minidump-stackwalk's
    given dump_syms' symbol file of the same program (its STACK CFI), all by the tables, to
    libdyld's start and not past it, where minidump-stackwalk scans on and gives start twice;
    named as it names them, with llvm-symbolizer's lines of the dSYM. (Without the program,
    these stacks were scanned: a stale return address taken for a frame in one, two in the
    other.)"""
    dump_name, program = REAL_DUMPS[which]
    lib = tmp_path / "lib"
    dwarf_dir = lib / f"{program}.dSYM" / "Contents" / "Resources" / "DWARF"
    unpacked(f"symbolic/{program}.xz", lib / program)
    unpacked(f"symbolic/{program}.dSYM.xz", dwarf_dir / program)
    sym = apple.dump_syms(lib / program)
    debug_id = sym.split("\n", 1)[0].split()[3]
    store = tmp_path / "symbols" / program / debug_id
    store.mkdir(parents=True)
    (store / f"{program}.sym").write_text(sym)
    dump = DATA / dump_name
    theirs = apple.minidump_stackwalk(dump, tmp_path / "symbols")["crashing_thread"]["frames"]
    proc = stackwalk_minidump(dump, "--json", "--lib-search-path", lib)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    crashed = next(t for t in doc["threads"] if t["tid"] == doc["crashing_thread"])
    mine = real_frames(crashed)
    assert theirs[-1]["trust"] == "scan" and theirs[-1]["offset"] == theirs[-2]["offset"]
    assert [int(f["pc"], 16) for f in mine] == [
        int(f["offset"], 16) + (0 if i == 0 else 1) for i, f in enumerate(theirs[:-1])
    ]
    assert [f["trust"] for f in mine] == ["context"] + ["cfi"] * (len(mine) - 1)
    assert crashed["end"] == "end_of_stack"
    assert "Apple's mark of the outermost frame" in crashed["end_detail"]
    # (The file's addresses are the dump's less the module's bias.)
    bias = next(int(m["bias"], 16) for m in doc["modules"] if m["path"].endswith(f"/{program}"))
    for i, (ours, their) in enumerate(zip(mine, theirs, strict=False)):
        if their["module"] != program:
            continue
        assert ours["function"] == their["function"], (ours, their)
        address = int(ours["pc"], 16) - bias - (0 if i == 0 else 1)
        assert (ours["file"], ours["line"]) == symbolizer_line(dwarf_dir / program, address)


def test_a_syscall_stubs_caller_is_kept(rust_symbols: Path) -> None:
    """The Rust program's sleeping threads stop in a system call: frame 0 in
    libsystem_kernel's ``__semwait_signal``, a stub that makes no frame, whose caller's return
    address is at its sp (pushed by the call), into libsystem_c's ``nanosleep``, which the
    program's ``std::thread::sleep`` calls. minidump-stackwalk follows rbp from frame 0 and
    skips ``nanosleep``; stackwalk keeps it: its frames are minidump-stackwalk's with that one
    frame more, the word at frame 0's sp, and the same end at ``thread_start``."""
    mine = json.loads(
        stackwalk_minidump(RUST_DUMP, "--json", "--symbols-path", rust_symbols).stdout
    )
    proc = stackwalk_minidump(
        RUST_DUMP, "--json", "--format", "minidump-stackwalk", "--symbols-path", rust_symbols
    )
    ours_doc = json.loads(proc.stdout)
    theirs_doc = apple.minidump_stackwalk(RUST_DUMP, rust_symbols)
    memory = Minidump.open(RUST_DUMP).memory
    sleeping = 0
    for native, ours, theirs in zip(
        mine["threads"], ours_doc["threads"], theirs_doc["threads"], strict=True
    ):
        frames = [(f["module"], f["module_offset"]) for f in ours["frames"]]
        their_frames = [(f["module"], f["module_offset"]) for f in theirs["frames"]]
        if [m for m, _ in frames[:2]] != ["libsystem_kernel.dylib", "libsystem_c.dylib"]:
            continue
        sleeping += 1
        assert frames[:1] + frames[2:] == their_frames, (frames, their_frames)
        real = real_frames(native)
        word = memory.read(int(real[0]["sp"], 16), 8)
        assert word is not None and int.from_bytes(word, "little") == int(real[1]["pc"], 16)
        assert real[2]["function"] == "std::thread::sleep"
        assert native["end"] == "end_of_stack" and "Apple's mark" in native["end_detail"]
    assert sleeping >= 5


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_symbol_files_alone_walk_as_minidump_stackwalk_or_better(
    arch: str,
    programs: dict[str, apple.Program],
    crashes: dict[tuple[str, str], tuple[apple.Emulation, Path]],
    tmp_path: Path,
) -> None:
    """No Mach-O file, only the Breakpad symbol files dump_syms writes of the program and its
    dSYM (STACK CFI from its compact unwind info and __eh_frame): ``--format
    minidump-stackwalk`` gives minidump-stackwalk's frames (callers inside their calls: the
    return address less 4 on arm64, 1 on x86_64), or, where they differ, frames each of which
    is one of the shadow stack's, in order, to ``start``, and every frame minidump-stackwalk
    found among them. (dump_syms writes x86_64's frameless-indirect frames as ``.cfa: $rsp 8
    +``, where minidump-stackwalk stops; and it skips a NULL call's caller.)"""
    program = programs[arch]
    outer = apple.LIBDYLD[arch]
    store = apple.symbols_dir(program, tmp_path / "symbols", outermost=(outer,))
    step = 1 if arch == "x86_64" else 4
    differed = []
    for mode in apple.MODES:
        emulation, dump = crashes[arch, mode]
        proc = stackwalk_minidump(
            dump, "--json", "--format", "minidump-stackwalk", "--symbols-path", store
        )
        assert proc.returncode in (0, 1), proc.stderr
        ours = json.loads(proc.stdout)["crashing_thread"]["frames"]
        theirs = apple.minidump_stackwalk(dump, store)["crashing_thread"]["frames"]
        mine = [int(f["offset"], 16) for f in ours]
        their = [int(f["offset"], 16) for f in theirs]
        truth = [f.pc - (0 if i == 0 else step) for i, f in enumerate(emulation.frames)]
        if mine == their:
            continue
        differed.append(mode)
        at = iter(truth)
        assert all(pc in at for pc in mine), (mode, mine, truth)
        assert mine[-1] == truth[-1] and set(their) <= set(mine), (mode, mine, their)
    # (Where they differ: x86_64's frameless-indirect frames and the NULL calls.)
    assert len(differed) <= (5 if arch == "x86_64" else 1), differed


def test_files_in_symbol_stores_by_uuid(tmp_path: Path) -> None:
    """symbolicator's macOS dump with its program in a symbol store laid out as Sentry's
    servers are (``8c/3df1.../executable``) and its dSYM bundle named for the UUID, as Apple's
    tools archive them, in another: ``--symbols-path`` finds both by the module's UUID, and
    the document is the one the files in ``--lib-search-path`` give."""
    dump = DATA / "symbolicator" / "macos.dmp"
    uuid = "67e9247c814e392ba027dbde6748fcbf"
    unified, bundles, lib = tmp_path / "unified", tmp_path / "bundles", tmp_path / "lib"
    unpacked("symbolic/crash.xz", unified / uuid[:2] / uuid[2:] / "executable")
    dashed = "67E9247C-814E-392B-A027-DBDE6748FCBF.dSYM"
    unpacked(
        "symbolic/crash.dSYM.xz", bundles / dashed / "Contents" / "Resources" / "DWARF" / "crash"
    )
    unpacked("symbolic/crash.xz", lib / "crash")
    unpacked(
        "symbolic/crash.dSYM.xz", lib / "crash.dSYM" / "Contents" / "Resources" / "DWARF" / "crash"
    )
    stores = ("--symbols-path", unified, "--symbols-path", bundles)
    stored = stackwalk_minidump(dump, "--json", *stores)
    searched = stackwalk_minidump(dump, "--json", "--lib-search-path", lib)
    assert stored.returncode == searched.returncode == 0, stored.stderr
    doc, reference = json.loads(stored.stdout), json.loads(searched.stdout)
    assert doc["threads"] == reference["threads"]
    frames = doc["threads"][0]["frames"]
    assert frames[0]["function"] and frames[0]["line"] and frames[-1]["trust"] == "cfi"


def test_abort_through_pthread_kill_keeps_pthread_kill() -> None:
    """rust-minidump's Crashpad dump of a program that aborted on macOS 10.15 (no symbols):
    frame 0 is libsystem_kernel's ``__pthread_kill``, a system call stub that makes no frame;
    its caller's return address (``pthread_kill``'s, in libsystem_pthread) is the word at its
    sp. minidump-stackwalk follows rbp, which is still ``pthread_kill``'s own frame pointer,
    and goes from frame 0 to ``abort`` in libsystem_c, skipping ``pthread_kill``; stackwalk's
    frames are minidump-stackwalk's with that frame more, and it ends at libdyld's ``start``
    where minidump-stackwalk scans on and gives it twice."""
    dump = DATA / "rust-minidump" / "simple-crashpad.dmp"
    proc = stackwalk_minidump(dump, "--json", "--format", "minidump-stackwalk")
    ours = json.loads(proc.stdout)["crashing_thread"]["frames"]
    theirs = apple.minidump_stackwalk(dump, Path("/nonexistent"))["crashing_thread"]["frames"]
    frames = [(f["module"], f["module_offset"]) for f in ours]
    their_frames = [(f["module"], f["module_offset"]) for f in theirs]
    assert theirs[-1]["trust"] == "scan" and their_frames[-1] == their_frames[-2]
    assert [m for m, _ in frames[:3]] == [
        "libsystem_kernel.dylib",
        "libsystem_pthread.dylib",
        "libsystem_c.dylib",
    ]
    assert frames[:1] + frames[2:] == their_frames[:-1], (frames, their_frames)
    native = json.loads(stackwalk_minidump(dump, "--json").stdout)
    crashed = next(t for t in native["threads"] if t["tid"] == native["crashing_thread"])
    real = real_frames(crashed)
    word = Minidump.open(dump).memory.read(int(real[0]["sp"], 16), 8)
    assert word is not None and int.from_bytes(word, "little") == int(real[1]["pc"], 16)
    assert crashed["end"] == "end_of_stack" and "Apple's mark" in crashed["end_detail"]


def _word(dump: Path, address: int) -> int | None:
    read = Minidump.open(dump).memory.read(address, 8)
    return None if read is None else int.from_bytes(read, "little")


@pytest.mark.parametrize(
    "name", ["rust-minidump/pipeline-inlines-macos-segv.dmp", "rust-minidump/simple-crashpad.dmp"]
)
def test_every_thread_of_the_public_macos_dumps(name: str, rust_symbols: Path) -> None:
    """Every thread of rust-minidump's macOS dumps (the Rust program's with its symbol file,
    the other's program and system libraries missing, as a service meets them; the other two
    public macOS dumps, one thread each, are held to minidump-stackwalk with their programs
    above): minidump-stackwalk's frames, but where
    stackwalk's are proven better, each way checked here: minidump-stackwalk's last frame a
    scan that gives the frame before it again (libdyld's ``start`` twice), where stackwalk
    ends (on Apple's zero frame record, where start's frame pointer is known); and a frame 0
    in a system call stub that makes no frame
    (libsystem_kernel), whose caller minidump-stackwalk skips by following rbp, where
    stackwalk's frame 1 is the return address at frame 0's sp."""
    dump = DATA / name
    store = ("--symbols-path", rust_symbols)
    ours_doc = json.loads(
        stackwalk_minidump(dump, "--json", "--format", "minidump-stackwalk", *store).stdout
    )
    native = json.loads(stackwalk_minidump(dump, "--json", *store).stdout)
    theirs_doc = apple.minidump_stackwalk(dump, rust_symbols)
    checked = {"same": 0, "scanned past start": 0, "syscall stub": 0}
    threads = zip(ours_doc["threads"], theirs_doc["threads"], native["threads"], strict=True)
    for ours, theirs, walked in threads:
        frames = [(f["module"], f["module_offset"]) for f in ours["frames"]]
        their = [(f["module"], f["module_offset"]) for f in theirs["frames"]]
        if len(their) > 1 and theirs["frames"][-1]["trust"] == "scan" and their[-1] == their[-2]:
            checked["scanned past start"] += 1
            # (Where start's frame itself was found by a scan, its frame pointer is not known
            # and the walk stops there with why; else it ends on the zero record.)
            exact = theirs["frames"][-2]["trust"] != "scan"
            assert not exact or "Apple's mark" in walked["end_detail"], walked["end_detail"]
            their = their[:-1]
        if frames != their:
            checked["syscall stub"] += 1
            assert frames[0][0] == "libsystem_kernel.dylib" and frames[:1] + frames[2:] == their
            real = real_frames(walked)
            assert _word(dump, int(real[0]["sp"], 16)) == int(real[1]["pc"], 16)
        else:
            checked["same"] += 1
    assert sum(checked.values()) >= 1, checked


def test_files_from_a_symbol_server_by_uuid(tmp_path: Path) -> None:
    """symbolicator's macOS dump with ``--symbols-url`` a server (a local http.server) of
    Sentry's unified layout holding the program and its dSYM: both fetched once by the
    module's UUID into the cache and used (the document the files in ``--lib-search-path``
    give); every other module asked for once (404), a second run reads the two from the cache,
    ``--offline`` asks nothing."""
    dump = DATA / "symbolicator" / "macos.dmp"
    uuid = "67e9247c814e392ba027dbde6748fcbf"
    served, lib = tmp_path / "served", tmp_path / "lib"
    unpacked("symbolic/crash.xz", served / uuid[:2] / uuid[2:] / "executable")
    unpacked("symbolic/crash.dSYM.xz", served / uuid[:2] / uuid[2:] / "debuginfo")
    unpacked("symbolic/crash.xz", lib / "crash")
    unpacked(
        "symbolic/crash.dSYM.xz", lib / "crash.dSYM" / "Contents" / "Resources" / "DWARF" / "crash"
    )
    reference = json.loads(stackwalk_minidump(dump, "--json", "--lib-search-path", lib).stdout)
    env = {**os.environ, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    minidump = [sys.executable, "-m", "stackwalk", "minidump", "--json", dump]
    with symbol_server(served, tmp_path / "http.log") as server:
        offline = run([*minidump, "--offline", "--symbols-url", server.url], env=env)
        assert server.requests() == [], "offline"
        first = run([*minidump, "--symbols-url", server.url], env=env)
        fetched = server.requests()
        second = run([*minidump, "--symbols-url", server.url], env=env)
        again = server.requests()[len(fetched) :]
    assert first.returncode == second.returncode == 0, first.stderr
    for proc in (first, second):
        assert json.loads(proc.stdout)["threads"] == reference["threads"]
    # (The servers are asked for the modules' .sym files too, in Breakpad's layout.)
    layout = re.compile(r"/[0-9a-f]{2}/[0-9a-f]{30}/(executable|debuginfo)")
    unified = [(p, code) for p, code in fetched if layout.fullmatch(p)]
    ours = [(p, code) for p, code in unified if p.startswith(f"/{uuid[:2]}/{uuid[2:]}/")]
    leaves = ("debuginfo", "executable")
    assert sorted(ours) == [(f"/{uuid[:2]}/{uuid[2:]}/{leaf}", 200) for leaf in leaves]
    modules = len(reference["modules"])
    assert len(unified) == 2 * modules, unified
    assert all(code == 404 for p, code in unified if (p, code) not in ours)
    # The next run: the two from the cache, the others asked for again.
    asked_again = [(p, code) for p, code in again if layout.fullmatch(p)]
    assert len(asked_again) == 2 * (modules - 1) and all(c == 404 for _, c in asked_again)
    assert offline.returncode in (0, 1) and offline.stdout, offline.stderr
    names = {f["function"] for t in json.loads(offline.stdout)["threads"] for f in t["frames"]}
    assert "main" not in names, names
