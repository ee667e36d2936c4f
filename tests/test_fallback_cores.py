"""Unwinding where CFI is missing: frame pointers, stack scanning and the trust of each frame,
on real cores of programs built at test time (tests/programs/crash_nocfi.c, crash_asm.c).

References: gdb's backtrace of the core (x86_64; its prologue analyzer follows frame pointers
through functions without CFI), gdb-multiarch's live backtrace at the crash (aarch64 under
qemu, see corefiles.py), eu-stack (x86_64: it follows rbp where it has no CFI, but from frame 0
on, so it skips the caller of a frame-0 leaf that made no frame record; said where used),
readelf for which functions have CFI, and, where the references themselves stop, gdb's live
backtrace at the entry of the function whose frame is damaged later, before the damage.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import readelf_frames
from corefiles import Cores, MadeCore, is_subsequence, nm_symbols, run, stackwalk_core
from realstacks import Captures
from stackwalk import CRASH_STRATEGIES, StackwalkError, Trace, Unwinder
from stackwalk.core import Core

# The functions of crash_nocfi.c, which are built without CFI.
NO_CFI_FUNCTIONS = ("crash_here", "damage", "big_frame", "recurse", "main")
# Its call chain, innermost first: recurse(3) is four frames.
NO_CFI_CHAIN = ["crash_here", "damage", "big_frame"] + ["recurse"] * 4 + ["main"]


def open_core(made: MadeCore, **options: Any) -> Core:
    return Core.open(made.path, made.executable, **{**made.open_options, **options})


def crashing(made: MadeCore, **options: Any) -> tuple[Core, Trace]:
    core = open_core(made, **options)
    return core, core.threads[0].unwind()


def cli_doc(made: MadeCore, *options: str) -> tuple[int, dict[str, Any]]:
    proc = stackwalk_core(made.path, made.executable, *made.cli_options, "--json", *options)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def has_cfi(core: Core, address: int) -> bool:
    """Whether readelf shows an FDE covering runtime ``address`` in its module's file."""
    for module in core.modules:
        if module.start <= address < module.end and module.file is not None:
            return bool(readelf_frames.load(module.file).fdes_at(address - module.bias))
    return False


def expected_trust(core: Core, trace: Trace) -> list[str]:
    """Each frame found by CFI where readelf shows CFI for its callee's pc, else by the frame
    pointer chain."""
    callees = trace.frames[:-1]
    return ["context"] + ["cfi" if has_cfi(core, f.lookup_pc) else "frame_pointer" for f in callees]


def functions(thread: dict[str, Any]) -> list[str | None]:
    return [frame["function"] for frame in thread["frames"]]


def pcs_of(thread: dict[str, Any]) -> list[int]:
    return [int(frame["pc"], 16) for frame in thread["frames"]]


def test_unwinder_strategies() -> None:
    """CFI alone unless asked; the order kept; bad lists are StackwalkErrors."""
    assert Unwinder("x86_64").strategies == ["cfi"]
    assert list(CRASH_STRATEGIES) == ["cfi", "frame_pointer", "scan"]
    uw = Unwinder("aarch64", strategies=("scan", "cfi"), scan_words=40)
    assert (uw.strategies, uw.scan_words) == (["scan", "cfi"], 40)
    for bad, message in [((), "empty"), (("cfi", "cfi"), "twice"), (("fp",), "fp")]:
        with pytest.raises(StackwalkError, match=message):
            Unwinder("x86_64", strategies=bad)


@pytest.mark.parametrize("case", ["nocfi", "a64-nocfi", "a64-nocfi-static", "i386-nocfi"])
def test_the_program_has_no_cfi(case: str, cores: Cores) -> None:
    """readelf: no FDE (.eh_frame or .debug_frame) covers the program's own functions; the C
    runtime's _start keeps its own."""
    made = cores(case)
    dump = readelf_frames.load(str(made.executable))
    symbols = nm_symbols(str(made.executable))
    for name in NO_CFI_FUNCTIONS:
        for address in symbols[name]:
            assert dump.fdes_at(address) == [], f"{name} has CFI"
    assert any(dump.fdes_at(address) for address in symbols["_start"])


def test_x86_64_without_cfi_unwinds_by_frame_pointers(cores: Cores) -> None:
    """Every frame of the program by its frame pointers, then libc's by CFI: gdb's pcs and stack
    pointers exactly, each frame's trust as readelf's FDEs say, and a clean end."""
    made = cores("nocfi")
    core, trace = crashing(made)
    gdb = made.gdb.thread(core.threads[0].tid)
    assert trace.pcs == gdb.pcs, f"{trace.end}: {trace.end_detail}"
    assert [f.sp for f in trace.frames] == [f.sp for f in gdb.frames]
    assert trace.end == "end_of_stack", trace.end_detail
    trust = [f.trust for f in trace.frames]
    assert trust == expected_trust(core, trace)
    # crash_here -> main and main's caller in libc by frame records; libc's callers by CFI.
    assert trust[:9] == ["context"] + ["frame_pointer"] * 8 and trust[9:] == ["cfi", "cfi"]
    # eu-stack follows rbp from frame 0 on: it takes crash_here's caller's record for
    # crash_here's (which pushed nothing), so it skips damage. Otherwise the same frames.
    eu = made.eu_stack().pcs(core.threads[0].tid)
    assert eu == trace.pcs[:1] + trace.pcs[2:]


@pytest.mark.parametrize("case", ["signal-nocfi", "altstack-nocfi"])
def test_signal_handlers_without_cfi(case: str, cores: Cores) -> None:
    """A handler without CFI, found by its frame pointer, returns to libc's trampoline
    (`__restore_rt`, whose first instruction no call precedes: a signal handler's return
    address all the same), whose CFI leads to the interrupted frame; that frame, interrupted
    anywhere (a frameless loop, a leaf that made no frame record), returns through the word at
    its sp, as frame 0 may. gdb's pcs and stack pointers exactly (altstack: across the switch
    from the handler's alternate stack down to the thread's, where the frame-pointer checks
    look at that stack), each frame's trust as readelf's FDEs say, and a clean end."""
    made = cores(case)
    core, trace = crashing(made)
    gdb = made.gdb.thread(core.threads[0].tid)
    assert trace.pcs == gdb.pcs, f"{trace.end}: {trace.end_detail}"
    assert [f.sp for f in trace.frames] == [f.sp for f in gdb.frames]
    assert trace.end == "end_of_stack", trace.end_detail
    assert [f.trust for f in trace.frames] == expected_trust(core, trace)
    tramp = [f.kind for f in gdb.frames].index("SIGTRAMP_FRAME")
    assert trace.frames[tramp].trust == "frame_pointer"  # the handler's return address
    names = [f.function for f in gdb.frames]
    leaf = "spin" if case == "signal-nocfi" else "crash_here"
    assert names[tramp + 1] == leaf and trace.frames[tramp + 2].trust == "frame_pointer"


def test_a_signal_trampoline_without_cfi(cores: Cores) -> None:
    """musl's __restore_rt (crash_signal.c built static with musl-gcc) has no CFI: the
    kernel's signal frame on the stack gives the interrupted frame's registers (trust
    ``context``), and the trampoline's frame is named at its pc, where the handler returned.
    gdb's pcs and stack pointers up to main, where gdb stops."""
    made = cores("signal-musl")
    core, trace = crashing(made)
    gdb = made.gdb.thread(core.threads[0].tid)
    names = [f.function for f in gdb.frames]
    main = names.index("main")
    assert trace.pcs[: main + 1] == gdb.pcs[: main + 1], f"{trace.end}: {trace.end_detail}"
    assert [f.sp for f in trace.frames[: main + 1]] == [f.sp for f in gdb.frames[: main + 1]]
    assert trace.end == "end_of_stack", trace.end_detail
    tramp = [f.kind for f in gdb.frames].index("SIGTRAMP_FRAME")
    assert not has_cfi(core, trace.frames[tramp].pc)
    assert trace.frames[tramp + 1].trust == "context" and names[tramp + 1] == "spin"
    _, doc = cli_doc(made)
    assert doc["threads"][0]["frames"][tramp]["function"] == "__restore_rt"


def test_cli_shows_trust_and_obeys_the_strategies(cores: Cores) -> None:
    made = cores("nocfi")
    status, doc = cli_doc(made)
    thread = doc["threads"][0]
    assert status == 0 and thread["end"] == "end_of_stack"
    assert functions(thread)[: len(NO_CFI_CHAIN)] == NO_CFI_CHAIN
    core, trace = crashing(made)
    assert [f["trust"] for f in thread["frames"]] == [f.trust for f in trace.frames]
    # The text report: every frame line ends with its trust.
    proc = stackwalk_core(made.path, made.executable)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("#")]
    assert len(lines) == len(thread["frames"])
    for line, frame in zip(lines, thread["frames"], strict=True):
        assert line.endswith(f"  [{frame['trust']}]"), line
    # CFI alone: nothing past frame 0.
    status, doc = cli_doc(made, "--strategies", "cfi")
    assert status == 1
    assert (doc["threads"][0]["end"], len(doc["threads"][0]["frames"])) == ("no_unwind_info", 1)
    # Frame pointers are enough here: without scanning, the same frames.
    status, doc = cli_doc(made, "--no-scan")
    assert status == 0 and pcs_of(doc["threads"][0]) == trace.pcs
    # A bad list is one clear error line.
    proc = stackwalk_core(made.path, made.executable, "--strategies", "cfi,guess")
    assert proc.returncode == 2 and "guess" in proc.stderr and "Traceback" not in proc.stderr


def test_asm_function_with_a_frame_record(cores: Cores) -> None:
    """An assembly function without CFI that pushes rbp: its caller by its frame record, the
    rest by CFI; gdb and eu-stack agree on every frame."""
    made = cores("asm-fp")
    core, trace = crashing(made)
    tid = core.threads[0].tid
    assert trace.pcs == made.gdb.thread(tid).pcs == made.eu_stack().pcs(tid)
    assert trace.end == "end_of_stack", trace.end_detail
    trust = [f.trust for f in trace.frames]
    assert trust == expected_trust(core, trace)
    assert trust[3] == "frame_pointer" and trust.count("frame_pointer") == 1


def test_asm_function_breaking_the_chain_is_scanned_past(cores: Cores, captures: Captures) -> None:
    """An assembly function without CFI that puts garbage in rbp: gdb and eu-stack stop in it;
    the scan finds its return address, and CFI goes on from there (cfi_scan). The frames found
    are gdb's at the entry of that function, before it touched rbp."""
    made = cores("asm-no-fp")
    tid = made.notes().tids[0]
    eu, gdb = made.eu_stack().pcs(tid), made.gdb.thread(tid).pcs
    assert len(eu) == 3 and gdb[:3] == eu, "the references now unwind past asm_breaks_chain"
    live = captures([made.executable], "*asm_breaks_chain")
    core, trace = crashing(made)
    assert trace.pcs[:3] == eu
    assert trace.pcs[3:] == live.gdb_pcs[1:], f"{trace.end}: {trace.end_detail}"
    trust = [f.trust for f in trace.frames]
    assert trust[:5] == ["context", "cfi", "cfi", "scan", "cfi_scan"]
    assert trace.end == "end_of_stack", trace.end_detail
    # Without scanning: the misaligned rbp ends the walk, with the reason.
    _, trace = crashing(made, strategies=["cfi", "frame_pointer"])
    assert trace.pcs == eu
    assert trace.end == "fp_invalid" and "0x12345" in trace.end_detail, trace.end_detail


@pytest.mark.parametrize(
    ("case", "kept", "end"),
    [("nocfi-loop", 3, "fp_invalid"), ("nocfi-backwards", 3, "fp_invalid"),
     ("nocfi-garbage", 2, "bad_return_address")],
)  # fmt: skip
def test_damaged_frame_pointer_chain(
    case: str, kept: int, end: str, cores: Cores, captures: Captures
) -> None:
    """damage() makes its frame record loop, point backwards, or overwrites it with garbage,
    then the crash. Frame pointers alone keep the frames before the damage (gdb's) and stop
    cleanly with the reason; with scanning, the callers past it are found, each one of those
    gdb shows at damage()'s entry, before the damage, and the walk ends cleanly."""
    made = cores(case)
    tid = made.notes().tids[0]
    gdb = made.gdb.thread(tid).pcs
    status, doc = cli_doc(made, "--strategies", "cfi,frame_pointer")
    thread = doc["threads"][0]
    assert status == 1 and thread["end"] == end
    assert pcs_of(thread) == gdb[:kept]
    assert functions(thread) == NO_CFI_CHAIN[:kept]

    live = captures([made.executable], "*damage")
    assert live.gdb_frames[0]["function"] == "damage"
    status, doc = cli_doc(made)
    thread = doc["threads"][0]
    assert status == 0 and thread["end"] == "end_of_stack"
    pcs = pcs_of(thread)
    assert pcs[:kept] == gdb[:kept]
    assert len(pcs) > kept and is_subsequence(pcs[kept:], live.gdb_pcs[1:])
    assert pcs[-1] == live.gdb_pcs[-1]  # _start
    assert thread["frames"][kept]["trust"] == "scan"


@pytest.mark.parametrize("case", ["a64-nocfi", "a64-nocfi-static"])
def test_aarch64_without_cfi_unwinds_by_frame_records(case: str, cores: Cores) -> None:
    """aarch64 under qemu: the leaf crash_here returns through lr, the rest of the program by
    frame records, libc by CFI from there: gdb's live pcs exactly, and, for the frames found by
    CFI, its stack pointers too (the CFA of a frame found by a frame record is taken from the
    x29 its CFI saves, as a frame record only bounds its sp)."""
    made = cores(case)
    core, trace = crashing(made)
    gdb = made.gdb.thread(core.threads[0].tid)
    assert trace.pcs == gdb.pcs, f"{trace.end}: {trace.end_detail}"
    assert trace.end == "end_of_stack", trace.end_detail
    trust = [f.trust for f in trace.frames]
    assert trust == expected_trust(core, trace)
    assert trust[1:9] == ["frame_pointer"] * 8 and "cfi" in trust
    for frame, reference in zip(trace.frames, gdb.frames, strict=True):
        if frame.trust == "cfi":
            assert frame.sp == reference.sp


def test_i386_without_cfi_unwinds_by_frame_pointers(cores: Cores, captures: Captures) -> None:
    """i386 (static): the program by frame pointers, as gdb shows it. Its main realigns the
    stack before making its frame record, so the record does not lead to the caller's sp:
    gdb stops in __libc_start_call_main and eu-stack at main. CFI from such a guessed frame
    must give a plausible return address, else the scan takes over: the frames past gdb's are
    those gdb shows from main's entry, down to _start."""
    made = cores("i386-nocfi")
    core, trace = crashing(made)
    gdb = made.gdb.thread(core.threads[0].tid)
    assert trace.pcs[: len(gdb.pcs)] == gdb.pcs, f"{trace.end}: {trace.end_detail}"
    trust = [f.trust for f in trace.frames]
    assert trust[: len(gdb.pcs)] == ["context"] + ["frame_pointer"] * (len(gdb.pcs) - 1)
    live = captures([made.executable], "*main")
    assert live.gdb_frames[0]["function"] == "main" and live.gdb_frames[-1]["function"] == "_start"
    # From main's caller on, exactly gdb's frames from main's entry: the scan skips both the
    # copy main made of its return address and the stale return address of
    # __x86.get_pc_thunk's call, and CFI goes on from what it found.
    assert trace.pcs[len(gdb.pcs) - 1 :] == live.gdb_pcs[1:], (trace.pcs, live.gdb_pcs)
    assert "scan" in trust[len(gdb.pcs) :] and trace.end == "end_of_stack", trace.end_detail


# 32-bit ARM's frame records, by compiler and instruction set (corefiles.FALLBACK_SPECS).
ARM_NO_CFI = ["arm-nocfi", "arm-thumb-nocfi", "arm-clang-nocfi", "arm-clang-thumb-nocfi"]


@pytest.mark.parametrize("symbols", [True, False], ids=["symbols", "stripped"])
@pytest.mark.parametrize("case", ARM_NO_CFI)
def test_arm_without_unwind_tables(case: str, symbols: bool, cores: Cores, tmp_path: Path) -> None:
    """32-bit ARM under qemu, the program built without unwind tables: readelf shows no
    .debug_frame or .eh_frame entry for its functions and one EHABI entry, the C runtime's
    `_start`, EXIDX_CANTUNWIND, which the linker's own entry for code without tables merged
    with, so that it reaches over the program's functions after it. That entry says nothing of
    them (the symbols say they are other functions; without symbols, they lie past the extent
    a stripped file's `_start` is given): gdb-multiarch's pcs exactly, every function of the
    chain, and a clean end at `_start` by libc's tables.

    With its symbols, gcc's code is unwound by each function's prologue, as gdb does (trust
    `prologue`: its pushes and `sub sp`, the leaf `crash_here`'s `str fp, [sp, #-4]!` too, which
    gives its caller's fp), every frame's sp exact: gdb's stack pointers too. clang's leaf
    pushes nothing; its frames after it are found by its frame records (ARM code: r11 at the
    saved r11 and lr; Thumb code: r7 at them), each checked. Stripped (``strip --strip-all``),
    no function is known: frame records throughout, gcc's in ARM code (fp at the saved lr, the
    caller's fp below it) too, and where gcc's code keeps none (its leaf saves fp alone; its
    Thumb code points r7 below its locals) by scanning, each return address after a call of
    the frame's function (recursive calls included)."""
    made = cores(case)
    exidx = run(["readelf", "-u", str(made.executable)]).stdout
    assert re.findall(r"^0x[0-9a-f]+ <(\w+)>: 0x1 \[cantunwind\]$", exidx, re.M) == ["_start"]
    assert exidx.count(" <") == 1, exidx
    dump = readelf_frames.load(str(made.executable))
    symbols_of = nm_symbols(str(made.executable))
    start = min(symbols_of["_start"])
    for name in NO_CFI_FUNCTIONS:
        for address in symbols_of[name]:
            assert dump.fdes_at(address) == [], f"{name} has CFI"
            if name != "main":  # gcc puts main before _start
                assert address > start, f"{name} is not covered by _start's entry"
    program = made.executable
    if not symbols:
        program = tmp_path / made.executable.name
        run(["arm-linux-gnueabihf-strip", "--strip-all", "-o", str(program), str(made.executable)])
    core = Core.open(made.path, program, **made.open_options)
    trace = core.threads[0].unwind()
    gdb = made.gdb.thread(core.threads[0].tid)
    assert trace.pcs == gdb.pcs, f"{trace.end}: {trace.end_detail}"
    assert trace.end == "end_of_stack", trace.end_detail
    names = [frame.function for frame in gdb.frames]
    assert names[: len(NO_CFI_CHAIN)] == NO_CFI_CHAIN and names[-1] == "_start"
    trust = [frame.trust for frame in trace.frames][: len(NO_CFI_CHAIN) + 1]
    records = ["frame_pointer"] * len(NO_CFI_CHAIN)
    clang = ["context", *records]
    prologues = ["context", *["prologue"] * len(NO_CFI_CHAIN)]
    expected = {
        (True, "arm-clang-nocfi"): clang,
        (True, "arm-clang-thumb-nocfi"): clang,
        (True, "arm-nocfi"): prologues,
        (True, "arm-thumb-nocfi"): prologues,
        (False, "arm-clang-nocfi"): clang,
        (False, "arm-clang-thumb-nocfi"): clang,
        (False, "arm-nocfi"): ["context", "frame_pointer", "scan", *records[2:]],
        # From main on, main's record is clang's layout (`push {r7, lr}` with r7 at it).
        (False, "arm-thumb-nocfi"): ["context", "frame_pointer", *["scan"] * 6, "frame_pointer"],
    }
    assert trust == expected[symbols, case]
    if trust == prologues:
        assert [f.sp for f in trace.frames] == [f.sp for f in gdb.frames]


def test_arm_abort_by_its_prologue(cores: Cores) -> None:
    """32-bit ARM: a C++ exception thrown through a noexcept function ends in std::terminate and
    abort (SIGABRT). armhf glibc's abort has no unwind table: readelf shows no .ARM.exidx entry
    at or below it (libc's first comes after it), so its caller is found by its prologue (trust
    `prologue`: `push {r7, lr}` and `sub sp, #144` among scheduled loads), as gdb-multiarch
    finds it by its prologue analyzer, where a scan takes a stale return address of the dynamic
    linker's: gdb's pcs and stack pointers exactly, every other frame by the tables. Both stop
    at the same frame in libstdc++, a function without a table of its own that the linker's
    EXIDX_CANTUNWIND entry covers."""
    made = cores("arm-cxx")
    core, trace = crashing(made)
    gdb = made.gdb.thread(core.threads[0].tid)
    assert trace.pcs == gdb.pcs, f"{trace.end}: {trace.end_detail}"
    assert [f.sp for f in trace.frames] == [f.sp for f in gdb.frames]
    names = [frame.function for frame in gdb.frames]
    callee = names.index("abort")
    trust = [frame.trust for frame in trace.frames]
    assert trust == ["context"] + ["cfi"] * callee + ["prologue"] + ["cfi"] * (
        len(trust) - callee - 2
    )
    libc = next(m for m in core.modules if m.start <= trace.pcs[callee] < m.end)
    exidx = run(["readelf", "-u", str(libc.file)]).stdout
    starts = [int(a, 16) for a in re.findall(r"^0x([0-9a-f]+): ", exidx, re.M)]
    assert min(starts) > trace.pcs[callee] - 1 - libc.bias
    assert trace.end == "end_of_stack", trace.end_detail
