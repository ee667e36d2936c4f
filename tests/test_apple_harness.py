"""Tests of the macOS crash harness (tests/apple.py) against independent tools, before any
unwinder of the project reads its output:

* llvm-objdump's ``--unwind-info`` (and llvm-dwarfdump's ``--eh-frame``): the programs' functions
  really get the compact unwind modes the harness claims for them;
* llvm-objdump's disassembly: the emulated crash is at a load in the expected function, and each
  return address of the shadow stack follows a call;
* Mozilla's dump_syms and rust-minidump's minidump-stackwalk: the minidump reads as a macOS
  crash (``EXC_BAD_ACCESS / KERN_INVALID_ADDRESS``, the fault address, Mac OS X, the CPU), with
  each module's debug id the one dump_syms writes for the file (its ``LC_UUID``).

minidump-stackwalk's frames are compared with the shadow stack and the comparison printed
(``pytest -s``), not asserted: it has no use of the compact unwind modes it cannot convert (x86_64
``STACK_IND``) nor of a NULL call's return address, and stops or skips frames there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apple
import pytest

# Compact unwind modes (the encoding's bits 24-27): compact_unwind_encoding.h.
RBP_FRAME, STACK_IMMD, STACK_IND, X86_DWARF = 1, 2, 3, 4
FRAMELESS, ARM64_DWARF, FRAME = 2, 3, 4
MODE_NAMES = {
    "x86_64": {1: "rbp-frame", 2: "frameless-immediate", 3: "frameless-indirect", 4: "dwarf"},
    "arm64": {2: "frameless", 3: "dwarf", 4: "frame"},
}
# The mode each function gets (see the sources' comments).
EXPECTED_MODES = {
    "x86_64": {
        "_main": RBP_FRAME,
        "_thread_main": RBP_FRAME,
        "_frame_saver": RBP_FRAME,
        "_dwarf_function": X86_DWARF,
        "_frameless_big": STACK_IND,
        "_frameless_small": STACK_IMMD,
        "_fill": X86_DWARF,
        "_crash_leaf": X86_DWARF,
        "_leaf_with_stack": X86_DWARF,
    },
    "arm64": {
        "_main": FRAME,
        "_thread_main": FRAME,
        "_frame_saver": FRAME,
        "_dwarf_function": FRAME,
        "_frameless_big": ARM64_DWARF,
        "_frameless_small": ARM64_DWARF,
        "_fill": FRAMELESS,
        "_crash_leaf": FRAMELESS,
        "_leaf_with_stack": FRAMELESS,
    },
}
# The functions on the stack at the fault, innermost first (None: the NULL call's pc 0), below
# the outermost stand-in.
TAIL: list[str | None] = ["frameless_big", "dwarf_function", "frame_saver", "main"]
CHAINS: dict[str, list[str | None]] = {
    "leaf": ["crash_leaf", "frameless_small", *TAIL],
    "small": ["frameless_small", *TAIL],
    "big": TAIL,
    "dwarf": TAIL[1:],
    "frame": TAIL[2:],
    "null_call": [None, "frameless_small", *TAIL],
    "leaf_stack": ["leaf_with_stack", "frameless_small", *TAIL],
}
CASES = [(arch, mode) for arch in apple.ARCHES for mode in apple.MODES]
CALLS = {"x86_64": ("callq", "call"), "arm64": ("bl", "blr")}
# minidump-stackwalk gives a caller frame's pc as the return address less this.
RETURN_ADJUST = {"x86_64": 1, "arm64": 4}


@pytest.fixture(scope="session")
def apple_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("apple")


@pytest.fixture(scope="session")
def programs(apple_dir: Path) -> dict[str, apple.Program]:
    return {arch: apple.build(arch=arch, out_dir=apple_dir / arch) for arch in apple.ARCHES}


@pytest.fixture(scope="session")
def stores(apple_dir: Path, programs: dict[str, apple.Program]) -> dict[str, Path]:
    return {
        arch: apple.symbols_dir(
            program,
            apple_dir / arch / "symbols",
            outermost=(apple.LIBDYLD[arch], apple.PTHREAD[arch]),
        )
        for arch, program in programs.items()
    }


@pytest.fixture(scope="session")
def emulations(programs: dict[str, apple.Program]) -> dict[tuple[str, str], apple.Emulation]:
    return {
        (arch, mode): apple.emulate(programs[arch], value)
        for arch in apple.ARCHES
        for mode, value in apple.MODES.items()
    }


@pytest.fixture(scope="session")
def walks(
    apple_dir: Path,
    emulations: dict[tuple[str, str], apple.Emulation],
    stores: dict[str, Path],
) -> dict[tuple[str, str], dict[str, Any]]:
    walked = {}
    for (arch, mode), emulation in emulations.items():
        dump = apple.write_mac_minidump(emulation, apple_dir / arch / f"{mode}.dmp")
        walked[arch, mode] = apple.minidump_stackwalk(dump, stores[arch])
    return walked


def _functions(program: apple.Program) -> Iterator[tuple[int, str]]:
    for start, _, name in program.functions:
        yield start, name


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_unwind_modes(arch: str, programs: dict[str, apple.Program]) -> None:
    """Each function's compact unwind mode, as llvm-objdump reads ``__unwind_info``."""
    program = programs[arch]
    starts = {name: start for start, name in _functions(program)}
    assert set(EXPECTED_MODES[arch]) <= set(starts)
    modes = {name: apple.encoding_of(program, start) >> 24 & 0xF for name, start in starts.items()}
    assert {n: modes[n] for n in EXPECTED_MODES[arch]} == EXPECTED_MODES[arch], {
        n: MODE_NAMES[arch].get(m, m) for n, m in modes.items()
    }
    # Every mode of the architecture is there.
    assert set(MODE_NAMES[arch]) <= set(modes.values())


def test_x86_64_encodings(programs: dict[str, apple.Program]) -> None:
    """The details of the x86_64 encodings the programs are meant to exercise."""
    program = programs["x86_64"]
    encoding = {name: apple.encoding_of(program, start) for start, name in _functions(program)}
    # frame_saver: an rbp frame saving rbx, r12-r15 (3-bit register numbers 1-5, bits 0-14),
    # 5 slots below rbp.
    saver = encoding["_frame_saver"]
    registers = {saver >> (3 * i) & 7 for i in range(5)}
    assert registers == {1, 2, 3, 4, 5} and saver >> 16 & 0xFF == 5
    # frameless_small: the immediate stack size (in 8-byte units) and pushed registers.
    small = encoding["_frameless_small"]
    assert 0 < small >> 16 & 0xFF and small >> 10 & 7 > 0
    # frameless_big: the offset of the `sub $N, %rsp` immediate in the function, N > 2040.
    big = encoding["_frameless_big"]
    immediate_at = program.symbols["_frameless_big"] + (big >> 16 & 0xFF)
    instructions = apple.disassembly(program.executable)
    sub = max(a for a in instructions if a <= immediate_at)
    mnemonic, operands = instructions[sub]
    assert mnemonic == "subq" and operands.endswith("%rsp"), (mnemonic, operands)
    assert int(operands.split(",")[0].lstrip("$"), 0) > 2040


def test_arm64_encodings(programs: dict[str, apple.Program]) -> None:
    """frame_saver saves every pair (x19-x28: bits 0-4; d8-d15: bits 8-11); the leaves are
    frameless, leaf_with_stack with a stack size (bits 12-23, 16-byte units), crash_leaf none."""
    program = programs["arm64"]
    encoding = {name: apple.encoding_of(program, start) for start, name in _functions(program)}
    assert encoding["_frame_saver"] & 0xFFF == 0xF1F
    assert encoding["_leaf_with_stack"] >> 12 & 0xFFF > 0
    assert encoding["_crash_leaf"] >> 12 & 0xFFF == 0


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_dwarf_mode_fdes(arch: str, programs: dict[str, apple.Program]) -> None:
    """A DWARF-mode encoding's low 24 bits are its FDE's offset in ``__eh_frame``: there,
    llvm-dwarfdump finds an FDE covering the function (lld 14 got both wrong)."""
    program = programs[arch]
    dwarf = X86_DWARF if arch == "x86_64" else ARM64_DWARF
    fdes = apple.eh_frame_fdes(program.executable)
    checked = 0
    for start, name in _functions(program):
        encoding = apple.encoding_of(program, start)
        if encoding >> 24 & 0xF == dwarf:
            low, high = fdes[encoding & 0xFFFFFF]
            assert low == start < high, name
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_no_dyld_fixups(arch: str, programs: dict[str, apple.Program]) -> None:
    """Nothing for dyld to bind or rebase and no undefined symbol: the emulator maps the file as
    it is, at any slide."""
    program = programs[arch]
    listing = apple.run_tool(
        ["llvm-objdump", "--macho", "--bind", "--lazy-bind", "--weak-bind", "--rebase",
         program.executable]
    )  # fmt: skip
    rows = [line for line in listing.splitlines() if line.startswith("__")]
    assert rows == []
    assert apple.run_tool(["llvm-nm", "-u", program.executable]).strip() == ""


@pytest.mark.parametrize(("arch", "mode"), CASES)
def test_crash_site(
    arch: str, mode: str, emulations: dict[tuple[str, str], apple.Emulation]
) -> None:
    """The fault is the expected function's load of ``bad_address`` (or, for the NULL call, the
    fetch at 0)."""
    emulation = emulations[arch, mode]
    frame = emulation.frames[0]
    assert frame.function == CHAINS[mode][0]
    assert emulation.fault_address == 0
    if mode == "null_call":
        assert (emulation.fault_access, emulation.pc) == ("fetch", 0)
        return
    assert emulation.fault_access == "read"
    mnemonic, operands = apple.disassembly(emulation.program.executable)[
        emulation.pc - emulation.slide
    ]
    if arch == "x86_64":
        assert "(" in operands, (mnemonic, operands)
    else:
        assert mnemonic.startswith("ldr"), (mnemonic, operands)


@pytest.mark.parametrize(("arch", "mode"), CASES)
def test_shadow_stack(
    arch: str, mode: str, emulations: dict[tuple[str, str], apple.Emulation]
) -> None:
    """The shadow stack: the expected functions, each return address right after a call
    instruction, the stack pointers growing outwards, and the stack ending at libdyld's start,
    whose callee (main) saved a frame pointer of 0."""
    emulation = emulations[arch, mode]
    frames = emulation.frames
    outer = emulation.outermost
    assert [f.function for f in frames] == [*CHAINS[mode], outer.symbol]
    assert [f.module for f in frames[1:-1]] == [emulation.module_path] * (len(frames) - 2)
    assert frames[-1].module == outer.path and frames[-1].pc == outer.return_address
    for frame in frames[1:-1]:
        before = apple.instruction_before(emulation.program.executable, frame.pc - emulation.slide)
        assert before is not None and before[0] in CALLS[arch], (frame, before)
    sps = [f.sp for f in frames]
    assert sps == sorted(sps) and len(set(sps[1:])) == len(sps) - 1
    # main's frame record (just below its CFA): the return into start, and start's frame
    # pointer, at start's own record, whose saved frame pointer is 0: the chain's end.
    stack_address, stack = emulation.stack

    def word(address: int) -> int:
        at = address - stack_address
        return int.from_bytes(stack[at : at + 8], "little")

    record = frames[-1].sp - 16
    saved_fp, saved_pc = word(record), word(record + 8)
    assert saved_pc == outer.return_address and saved_fp > record
    assert word(saved_fp) == 0


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_slide(arch: str, programs: dict[str, apple.Program]) -> None:
    """The executable runs the same at its link address and slid: the same frames, at the same
    offsets in it."""
    program = programs[arch]
    at_link = apple.emulate(program, apple.MODES["leaf"], slide=0)
    slid = apple.emulate(program, apple.MODES["leaf"])
    assert at_link.load_address == program.text_address != slid.load_address
    offsets = [
        [f.pc - e.load_address for f in e.frames[:-1]] for e in (at_link, slid)
    ]  # fmt: skip
    assert offsets[0] == offsets[1]


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_thread_entry(arch: str, programs: dict[str, apple.Program]) -> None:
    """A thread's stack: thread_main called from libsystem_pthread's thread_start."""
    outer = apple.PTHREAD[arch]
    emulation = apple.emulate(
        programs[arch], apple.MODES["frame"], "_thread_main", argument=3, outermost=outer
    )
    frames = emulation.frames
    assert [f.function for f in frames] == ["frame_saver", "thread_main", "thread_start"]
    assert frames[-1].module == outer.path


@pytest.mark.parametrize("arch", apple.ARCHES)
def test_chosen_bad_address(
    arch: str, apple_dir: Path, programs: dict[str, apple.Program], stores: dict[str, Path]
) -> None:
    """The load faults at the address the harness chose, and the minidump says so."""
    bad = 0x41414000
    emulation = apple.emulate(programs[arch], apple.MODES["leaf"], bad_address=bad)
    assert (emulation.fault_access, emulation.fault_address) == ("read", bad)
    dump = apple.write_mac_minidump(emulation, apple_dir / arch / "bad.dmp")
    walk = apple.minidump_stackwalk(dump, stores[arch])
    assert int(walk["crash_info"]["address"], 16) == bad


@pytest.mark.parametrize(("arch", "mode"), CASES)
def test_minidump_stackwalk(
    arch: str,
    mode: str,
    programs: dict[str, apple.Program],
    emulations: dict[tuple[str, str], apple.Emulation],
    walks: dict[tuple[str, str], dict[str, Any]],
    stores: dict[str, Path],
) -> None:
    """rust-minidump reads the dump as a macOS crash, finds every module's symbols by the debug
    id dump_syms wrote, and starts from the emulator's registers."""
    emulation, walk = emulations[arch, mode], walks[arch, mode]
    assert walk["crash_info"]["type"] == "EXC_BAD_ACCESS / KERN_INVALID_ADDRESS"
    assert int(walk["crash_info"]["address"], 16) == emulation.fault_address
    assert walk["crash_info"]["crashing_thread"] == 0
    assert walk["system_info"]["os"] == "Mac OS X"
    assert walk["system_info"]["os_ver"] == "11.6.7 20G630"
    assert walk["system_info"]["cpu_arch"] == {"x86_64": "amd64", "arm64": "arm64"}[arch]
    assert walk["pid"] == apple.PROCESS_ID
    program, outer = programs[arch], emulation.outermost
    wanted = {
        program.name: (program.debug_id, emulation.load_address),
        outer.name: (outer.debug_id, outer.base),
    }
    found = {
        m["filename"]: (m["debug_id"], int(m["base_addr"], 16)) for m in walk["modules"]
    }  # fmt: skip
    assert found == wanted
    for name, (debug_id, _) in wanted.items():
        sym = stores[arch] / name / debug_id / f"{name}.sym"
        assert sym.read_text().split("\n", 1)[0].split(" ")[3] == debug_id
    assert program.debug_id == program.uuid.hex().upper() + "0"
    frames = walk["crashing_thread"]["frames"]
    truth = emulation.frames
    assert frames[0]["trust"] == "context"
    assert int(frames[0]["offset"], 16) == truth[0].pc
    assert frames[0].get("function") == truth[0].function
    pc, sp = ("rip", "rsp") if arch == "x86_64" else ("pc", "sp")
    registers = frames[0]["registers"]
    assert int(registers[pc], 16) == truth[0].pc and int(registers[sp], 16) == truth[0].sp
    print(f"\n{arch} {mode}: " + "; ".join(compare_frames(emulation, walk)))


def compare_frames(emulation: apple.Emulation, walk: dict[str, Any]) -> list[str]:
    """Frame by frame, the truth against minidump-stackwalk: ``ok FUNCTION (TRUST)``, or what
    differs (a frame it got wrong, or one it missed after its last)."""
    adjust = RETURN_ADJUST[emulation.arch]
    walked = walk["crashing_thread"]["frames"]
    lines = []
    for i, frame in enumerate(emulation.frames):
        if i >= len(walked):
            lines.append(f"missing {frame.function}")
            continue
        theirs = walked[i]
        pc = int(theirs["offset"], 16) + (adjust if i else 0)
        if pc == frame.pc:
            lines.append(f"ok {frame.function} ({theirs['trust']})")
        else:
            lines.append(f"WRONG {theirs.get('function')} for {frame.function}")
    lines += [f"extra {f.get('function')}" for f in walked[len(emulation.frames) :]]
    return lines
