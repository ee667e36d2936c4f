"""``stackwalk.core.Core`` on real core files made at test time, against eu-stack, eu-unstrip,
eu-readelf and gdb.

x86_64: cores written by gdb at the crash of programs from tests/programs (and of the system
Python); every thread's pcs must be eu-stack's exactly, and every frame's stack pointer gdb's.
i386: the same, for 32-bit programs, static and one dynamically linked (ELFCLASS32 cores, 4-byte
words, threads blocked in the kernel through the vdso's ``__kernel_vsyscall``, a signal frame
returning to the vdso's ``__kernel_sigreturn``); and the dynamically linked one's core without
its NT_FILE note, whose libraries then come from the 32-bit link map.
aarch64: cores written by qemu-aarch64 (no NT_FILE: a dynamically linked program's libraries
come from the link map in the core's memory); the reference is gdb-multiarch's live backtrace at
the crash, taken through qemu's gdb stub just before qemu wrote the core (see corefiles.py for
why neither eu-stack nor gdb reads those cores right by itself).

Damaged input -- truncated cores, missing files, a library with another build id, files that
are not cores -- must give what can still be given, a warning naming the problem, and
StackwalkError subclasses only.
"""

from __future__ import annotations

import os
import re
import signal
import struct
from pathlib import Path
from typing import Any

import pytest
from corefiles import (
    A64_CASES,
    AARCH64_SYSROOT,
    ARM_CASES,
    EU_STACK_CASES,
    EU_VDSO,
    EXIDX_SPECS,
    I386_CASES,
    SPECS,
    X86_CASES,
    Cores,
    MadeCore,
    build_id_of,
    eu_stack,
    file_offset,
    first_load_vaddr,
    gdb_on_core,
    initial_arguments,
    is_subsequence,
    load_segment,
    note_span,
    run,
    text_address,
    truncated_copy,
)
from realstacks import Builder
from stackwalk.core import Core, CoreError
from stackwalk.errors import StackwalkError

PAGE = 4096
ALL_CASES = X86_CASES + A64_CASES + I386_CASES + ARM_CASES
# The cores qemu writes (gdb's live view their reference).
QEMU_CASES = A64_CASES + ARM_CASES
# The program counter and stack pointer in NT_PRSTATUS, by architecture.
PC_SP = {"x86_64": ("rip", "rsp"), "aarch64": ("pc", "sp"), "i386": ("eip", "esp"),
         "arm": ("pc", "sp")}  # fmt: skip
FAULT_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}


def open_core(made: MadeCore, **options: Any) -> Core:
    return Core.open(made.path, made.executable, **{**made.open_options, **options})


def page_up(address: int) -> int:
    return (address + PAGE - 1) // PAGE * PAGE


def listing(pcs: list[int], reference: list[int]) -> str:
    rows = []
    for i in range(max(len(pcs), len(reference))):
        ours = f"{pcs[i]:#x}" if i < len(pcs) else "-"
        theirs = f"{reference[i]:#x}" if i < len(reference) else "-"
        rows.append(f"#{i:<3} {ours:>18} {theirs:>18}{'' if ours == theirs else '   <--'}")
    return "stackwalk vs reference:\n" + "\n".join(rows)


# --- the references themselves ----------------------------------------------------------------

# A function each aarch64 and ARM32 program's crashing thread must show.
A64_CRASH_FUNCTION = {
    "a64-deep": "crash_here",
    "a64-libc": "measure",
    "a64-threads": "crash_middle",
    "a64-cxx": "_Unwind_RaiseException",
    "arm-deep": "crash_here",
    "arm-thumb-deep": "crash_here",
    "arm-libc": "measure",
    "arm-threads": "crash_middle",
    "arm-signal": "crash_in_handler",
    "arm-clang-deep": "crash_here",
    "arm-clang-thumb-deep": "crash_here",
}


def is_libc(path: str | None) -> bool:
    return path is not None and os.path.basename(path) == "libc.so.6"


def names(made: MadeCore, tid: int) -> list[str | None]:
    return [frame.function for frame in made.gdb.thread(tid).frames]


@pytest.mark.parametrize("case", EU_STACK_CASES)
def test_gdb_and_eu_stack_agree(case: str, cores: Cores) -> None:
    """The x86_64 and i386 references: gdb and eu-stack read the same pcs from every thread of
    the core and both end cleanly, and the core shows the situation its program was written
    for."""
    made = cores(case)
    i386 = made.arch == "i386"
    case = case.removeprefix("i386-").removesuffix("-shared")
    stack = made.eu_stack()
    notes = made.notes()
    assert stack.returncode == 0, stack.stderr
    assert list(stack.threads) == notes.tids
    assert [thread.tid for thread in made.gdb.threads] == notes.tids
    for thread in made.gdb.threads:
        assert thread.pcs == stack.pcs(thread.tid), listing(stack.pcs(thread.tid), thread.pcs)
        assert thread.stop_reason == "outermost"
    crashing = made.gdb.threads[0]
    assert notes.cursig[0] == signal.Signals[made.spec.signal]
    functions = [frame.function for frame in crashing.frames]
    solibs = [os.path.basename(frame.solib or "") for frame in crashing.frames]
    if case == "deep":
        assert functions[0] == "crash_here" and functions.count("recurse") == 5
    elif case == "threads":
        assert len(notes.tids) == 6
        blocked = {f.function for thread in made.gdb.threads[1:] for f in thread.frames}
        assert {"sleep_deep", "wait_forever", "reader", "joiner", "main"} <= blocked
        assert functions[:2] == ["crash_here", "crash_middle"]
        if i386:  # 32-bit glibc enters the kernel through the vdso: `call *%gs:0x10`
            for thread in made.gdb.threads[1:]:
                assert thread.frames[0].function == "__kernel_vsyscall"
    elif case == "libc" and made.spec.static:  # strlen is libc code inside the executable
        assert functions[0] == "strlen" and functions[1] == "measure"
        assert solibs == [""] * len(functions)
    elif case == "libc":
        # strlen is called through the PLT (a JUMP_SLOT relocation) and faults inside libc.
        relocations = run(["readelf", "-rW", str(made.executable)]).stdout
        slot = "R_386_JUMP_SLOT" if i386 else "R_X86_64_JUMP_SLOT"
        assert re.search(rf"{slot}\s.*\bstrlen\b", relocations)
        assert solibs[0] == "libc.so.6" and functions[1] == "measure"
    elif case == "signal":
        kinds = [frame.kind for frame in crashing.frames]
        assert functions[:2] == ["crash_in_handler", "on_alarm"]
        assert kinds[2] == "SIGTRAMP_FRAME" and functions[3] == "spin"
        if i386:  # the handler returns to the vdso's trampoline, not to glibc's
            assert functions[2] == "__kernel_sigreturn"
    elif case == "altstack":
        # The handler ran on its alternate stack, above the thread's own, where the walk goes
        # on past the signal frame: gdb's and eu-stack's stack pointers go down there.
        kinds = [frame.kind for frame in crashing.frames]
        tramp = kinds.index("SIGTRAMP_FRAME")
        assert functions[tramp - 2 : tramp] == ["report_crash", "on_segv"]
        assert functions[tramp + 1 : tramp + 3] == ["crash_here", "descend"]
        assert crashing.frames[tramp + 1].sp < min(f.sp for f in crashing.frames[: tramp + 1])
        assert "worker" in functions[tramp + 3 :]
    elif case == "altstack-overflow":
        # The handler ran on a small alternate stack below the main stack it overflowed: the
        # main stack holds more frames than the handler's stack has words.
        tramp = [frame.kind for frame in crashing.frames].index("SIGTRAMP_FRAME")
        assert functions[tramp - 2 : tramp] == ["report_crash", "on_segv"]
        _, alternate_end = load_segment(made.path, crashing.frames[0].sp)
        assert crashing.frames[tramp + 1].sp > alternate_end
        assert functions.count("overflow") > (alternate_end - crashing.frames[0].sp) // 8
        # main tail-calls the recursion; the stack reaches the entry point.
        assert functions[-4] == "overflow" and functions[-1] == "_start"
    elif case == "cxx":
        assert {"_Unwind_RaiseException", "__cxa_throw"} <= set(functions)
        assert any((f or "").endswith("abort") for f in functions)  # __GI_abort
        assert any("std::function" in (f or "") or "_Function_handler" in (f or "")
                   for f in functions)  # fmt: skip
    elif case == "python":
        assert len(crashing.frames) > 200 and solibs[0] == "libc.so.6"
        assert len(made.eu_unstrip()) >= 20 and len(notes.tids) == 3
    elif case == "vdso":
        vdso = made.extra["vdso"]
        assert all(vdso.start <= t.frames[0].pc < vdso.end for t in made.gdb.threads)
    elif case == "lib":
        assert solibs[0] == "libcrashlib.so" and functions[0] == "lib_crash"


@pytest.mark.parametrize("case", QEMU_CASES)
def test_qemu_cores_and_gdb(case: str, cores: Cores, tmp_path: Path) -> None:
    """The aarch64 and ARM32 references: gdb's live backtrace ends cleanly in every thread; for
    a static executable gdb-multiarch reads exactly the same pcs and stack pointers back from the
    core qemu wrote (so the core holds the state gdb saw); the core has no NT_FILE."""
    made = cores(case)
    notes = made.notes()
    assert notes.files == [], "qemu now writes NT_FILE"
    assert sorted(t.tid for t in made.gdb.threads) == sorted(notes.tids)
    assert notes.cursig[0] == signal.Signals[made.spec.signal]
    for thread in made.gdb.threads:
        last = thread.frames[-1]
        if case in ("arm-libc", "arm-signal"):
            continue  # gdb's frames go wrong: see assert_arm_strlen_walk, assert_arm_signal_walk
        if made.arch == "arm" and (last.function == "_start" or is_libc(last.solib)):
            # gdb's ARM unwinder does not take EXIDX_CANTUNWIND (_start's entry, libc's clone
            # for a thread) for the end: it unwinds the frame to itself and stops, so.
            assert thread.stop_reason.startswith("previous frame identical"), thread
            continue
        assert thread.stop_reason == "outermost", thread
    assert A64_CRASH_FUNCTION[case.replace("-static", "").replace("-O0", "")] in names(
        made, notes.tids[0]
    ), names(made, notes.tids[0])
    if made.spec.static:
        assert made.gdb.solibs == []
        on_core = gdb_on_core(str(made.executable), str(made.path), tmp_path,
                              gdb="gdb-multiarch")  # fmt: skip
        for thread in made.gdb.threads:
            again = on_core.thread(thread.tid)
            assert again.pcs == thread.pcs
            assert [f.sp for f in again.frames] == [f.sp for f in thread.frames]
    else:
        assert {os.path.basename(path) for path, _ in made.gdb.solibs} >= {"libc.so.6"}
    if case == "a64-deep-O0-static":
        # Frame records everywhere: eu-stack, which finds no module in qemu's cores and only
        # follows frame pointers, agrees with gdb here (and nowhere else at -O2).
        stack = eu_stack(str(made.path), str(made.executable))
        assert stack.pcs(notes.tids[0]) == made.gdb.thread(notes.tids[0]).pcs


# --- threads, registers, unwinding ------------------------------------------------------------


def assert_arm_strlen_walk(core: Core, trace: Any, reference: list[int]) -> None:
    """ARM32's crash in libc's strlen: hand-written, no unwind rules (EXIDX_CANTUNWIND), and it
    has pushed r4 and r5 before the faulting load. Both walks take its return address from lr
    (measure's call); then gdb takes measure's frame 8 bytes off and gives 0xe6380000, which
    lies in no module: the reference is wrong from there. Ours reads measure's saved lr from the
    same wrong place, finds 0 there, and stops (pc_zero) rather than give a frame."""
    assert trace.pcs == reference[:2], listing(trace.pcs, reference)
    assert not any(m.start <= reference[2] < m.end for m in core.modules), hex(reference[2])
    trust = [f.trust for f in trace.frames]
    assert trace.end == "pc_zero" and trust == ["context", "frame_pointer"], trust


def instruction_before(core: Core, pc: int) -> str:
    """objdump's reading of the instruction that ends at ``pc`` in its module's file (Thumb code:
    the program's mapping symbols say so, Debian's stripped armhf libraries are Thumb-2)."""
    module = next(m for m in core.modules if m.start <= pc < m.end and m.file is not None)
    at = pc - module.bias
    thumb = [] if module.file == core.executable else ["-M", "force-thumb"]
    proc = run(["arm-linux-gnueabihf-objdump", "-d", *thumb, f"--start-address={at - 4:#x}",
                f"--stop-address={at:#x}", str(module.file)])  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if re.match(r"\s+[0-9a-f]+:\t", line)]
    assert lines, proc.stdout + proc.stderr
    return lines[-1].split("\t")[2]


def assert_arm_signal_walk(core: Core, trace: Any, reference: list[int]) -> None:
    """ARM32's crash in a SIGALRM handler that interrupted a loop: gdb (live, under qemu) gets to
    glibc's sigreturn restorer and then gives a pc of 0: the reference is wrong from there. Ours
    restores the interrupted registers by the restorer's .ARM.exidx entry (glibc's: vsp + 32 to
    the kernel's sigcontext, then r0-r15 popped), and is proved so: the interrupted pc is in
    `spin`, the loop; every other frame's pc follows a call (objdump); the walk ends at _start."""
    assert trace.pcs[:3] == reference[:3] and reference[3] == 0, listing(trace.pcs, reference)
    assert trace.end == "end_of_stack" and all(f.trust == "cfi" for f in trace.frames[1:])
    # The program's symbols in address order, as nm reads its symbol table (_start has no size).
    listed = re.findall(r"^([0-9a-f]+) [Tt] (\w+)$", run(
        ["arm-linux-gnueabihf-nm", "-n", "--defined-only", str(core.executable)]
    ).stdout, re.M)  # fmt: skip
    exe = next(m for m in core.modules if m.file == core.executable)

    def function(pc: int) -> str | None:
        """The symbol at or before ``pc`` (its Thumb bit cleared)."""
        below = [name for start, name in listed if int(start, 16) & ~1 <= pc - exe.bias]
        return below[-1] if below else None

    assert function(trace.pcs[3]) == "spin"
    assert function(trace.pcs[-1]) == "_start"
    for i, pc in enumerate(trace.pcs[1:], 1):
        if i in (2, 3):  # the handler returns to the restorer's start; 3 was interrupted
            continue
        assert instruction_before(core, pc).startswith("bl"), (i, hex(pc))


@pytest.mark.parametrize("case", ALL_CASES)
def test_every_thread_matches_the_reference(case: str, cores: Cores) -> None:
    """Every thread, crashing thread first then in core order, unwinds to exactly the
    reference's pcs, with gdb's stack pointers, and ends cleanly."""
    made = cores(case)
    core = open_core(made)
    notes = made.notes()
    reference = made.reference_pcs()
    assert core.crashing_tid == notes.tids[0]
    assert [thread.tid for thread in core.threads] == notes.tids
    for thread in core.threads:
        trace = thread.unwind()
        if case == "arm-libc":
            assert_arm_strlen_walk(core, trace, reference[thread.tid])
            continue
        if case == "arm-signal":
            assert_arm_signal_walk(core, trace, reference[thread.tid])
            continue
        assert trace.pcs == reference[thread.tid], (
            f"thread {thread.tid}: {trace.end}: {trace.end_detail}\n"
            + listing(trace.pcs, reference[thread.tid])
        )
        gdb_frames = made.gdb.thread(thread.tid).frames
        assert [frame.sp for frame in trace.frames] == [frame.sp for frame in gdb_frames]
        assert [frame.trust for frame in trace.frames] == ["context"] + ["cfi"] * (
            len(trace.frames) - 1
        )
        # A frame's CFA is its caller's stack pointer (but a signal frame's caller gets its
        # stack pointer from the context the kernel saved).
        for i, (frame, caller) in enumerate(zip(trace.frames, trace.frames[1:], strict=False)):
            if gdb_frames[i].kind != "SIGTRAMP_FRAME":
                assert frame.cfa == caller.sp, f"frame {i}"
        assert trace.end == "end_of_stack", trace.end_detail
    assert [thread.signal for thread in core.threads] == notes.cursig


def test_arm_kuser_helper_is_a_leaf(cores: Cores) -> None:
    """A thread stopped in one of the kernel's user helpers (the vector page's, at 0xffff0f60 to
    0xffff0fff: `__kuser_get_tls` at 0xffff0fe0, which old ARM code calls for its TLS pointer)
    is in no module, with no table: a leaf, whose return address is lr. The arm-deep core's
    crashing thread, whose crash_here made no frame of its own (its CFA is its sp), moved
    there, its lr kept: the walk takes lr for frame 1 and then has the core's frames (gdb's)."""
    made = cores("arm-deep")
    core = open_core(made)
    thread = core.threads[0]
    real = thread.unwind()
    assert real.pcs == made.reference_pcs()[thread.tid]
    assert real.frames[0].cfa == real.frames[0].sp  # crash_here is a leaf
    regs = {**thread.regs, "pc": 0xFFFF0FE0}
    assert not any(m.start <= regs["pc"] < m.end for m in core.modules)
    trace = thread._unwinder.unwind(regs, thread._memory)
    assert trace.pcs == [0xFFFF0FE0, *real.pcs[1:]], listing(trace.pcs, real.pcs)
    assert trace.frames[1].trust == "frame_pointer" and trace.end == "end_of_stack"


@pytest.mark.parametrize("case", sorted(EXIDX_SPECS))
def test_arm_with_its_exception_tables_alone(case: str, cores: Cores, tmp_path: Path) -> None:
    """32-bit ARM, the program (built with unwind tables: ARM, Thumb, static, threads)
    stripped of its symbols and its .debug_frame (``strip --strip-all``; Debian's armhf
    libraries are already): its .ARM.exidx alone unwinds every thread to gdb's frames
    exactly, ending where its tables mark the end (the program's `_start`, glibc's
    `start_thread`), by CFI throughout."""
    made = cores(case)
    stripped = tmp_path / made.executable.name
    run(["arm-linux-gnueabihf-strip", "--strip-all", "-o", str(stripped), str(made.executable)])
    sections = run(["readelf", "-SW", str(stripped)]).stdout
    assert ".ARM.exidx" in sections and ".debug_frame" not in sections and ".symtab" not in sections
    core = Core.open(made.path, stripped, **made.open_options)
    reference = made.reference_pcs()
    for thread in core.threads:
        trace = thread.unwind()
        assert trace.pcs == reference[thread.tid], listing(trace.pcs, reference[thread.tid])
        assert trace.end == "end_of_stack", trace.end_detail
        assert {f.trust for f in trace.frames[1:]} == {"cfi"}


@pytest.mark.parametrize("case", ALL_CASES)
def test_registers_of_every_thread(case: str, cores: Cores) -> None:
    """Frame 0 of every thread: the pc and stack pointer gdb reads from the core's
    NT_PRSTATUS (gdb's live view for qemu's cores)."""
    made = cores(case)
    core = open_core(made)
    pc, sp = PC_SP[made.arch]
    for thread in core.threads:
        first = made.gdb.thread(thread.tid).frames[0]
        assert (thread.regs[pc], thread.regs[sp]) == (first.pc, first.sp)


@pytest.mark.parametrize("case", ALL_CASES)
def test_process_facts(case: str, cores: Cores) -> None:
    """pid, architecture, command line, executable and signal, as eu-readelf decodes the
    notes."""
    made = cores(case)
    core = open_core(made)
    notes = made.notes()
    assert core.path == str(made.path)
    assert core.arch == made.arch
    assert core.pid == notes.pid
    if made.arch not in ("aarch64", "arm"):
        assert core.pid == made.eu_stack().pid
    assert (core.command_line or "").strip() == notes.psargs
    assert core.executable is not None
    assert os.path.samefile(core.executable, made.executable)
    sig = core.signal
    assert sig is not None
    assert (sig.number, sig.name) == (signal.Signals[made.spec.signal], made.spec.signal)
    if notes.signo is None:  # qemu writes no NT_SIGINFO: no faulting address to give
        assert sig.address is None
    elif notes.signo in FAULT_SIGNALS and notes.si_code and 0 < notes.si_code < 0x80:
        # A fault's si_code (SI_KERNEL, 0x80, has no address).
        assert sig.address == notes.fault_address
        assert sig.code == notes.si_code


def test_vdso_fault_address(cores: Cores) -> None:
    """The faulting address comes from NT_SIGINFO: the vdso's store through the pointer 16."""
    core = open_core(cores("vdso"))
    assert core.signal is not None and core.signal.address == 16


# --- modules ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", EU_STACK_CASES)
def test_modules_match_eu_unstrip(case: str, cores: Cores) -> None:
    """One module per file mapped (from NT_FILE) plus the vdso: the range eu-unstrip and the
    NT_FILE note give, the load bias, and the build id read from the core's memory, equal to the
    file's."""
    made = cores(case)
    core = open_core(made)
    notes = made.notes()
    ours = {module.start: module for module in core.modules}
    theirs = {module.start: module for module in made.eu_unstrip()}
    assert sorted(ours) == sorted(theirs)
    assert [m.start for m in core.modules] == sorted(ours)
    for start, expected in theirs.items():
        module = ours[start]
        assert module.build_id == expected.build_id
        if expected.name in EU_VDSO:
            assert module.path == "[vdso]"
            assert module.end == page_up(expected.end)
            assert module.found
            continue
        # eu-unstrip has no file (".") where it took the module's image from the core's
        # memory (gdb dumps the whole of a static i386 program): its name is the path then.
        expected_file = expected.file if expected.file is not None else expected.name
        assert module.found and module.file is not None
        if os.path.exists(expected_file):
            assert os.path.samefile(module.file, expected_file)
        else:  # the library that was loaded is gone: the search path found its twin
            assert os.path.basename(module.file) == os.path.basename(expected_file)
        assert module.bias == start - first_load_vaddr(module.file)
        assert (module.start, module.end) == notes.file_range(module.path)
        assert module.build_id_matches is True
        assert module.build_id == build_id_of(module.file)
    assert core.warnings == []


@pytest.mark.parametrize("case", [c for c in QEMU_CASES if not SPECS[c].static])
def test_link_map_modules(case: str, cores: Cores) -> None:
    """qemu's cores have no NT_FILE: the libraries come from the dynamic linker's link map in
    the core's memory, placed where gdb found them (gdb gives each library's .text address), and
    the position-independent executable where AT_ENTRY puts it."""
    made = cores(case)
    core = open_core(made)
    by_file = {os.path.realpath(m.file): m for m in core.modules if m.file is not None}
    for path, text in made.gdb.solibs:
        module = by_file.get(os.path.realpath(path))
        assert module is not None, f"{path} missing from {core.modules}"
        assert module.bias == text - text_address(path)
        assert module.found
        assert module.path.startswith("/") and not module.path.startswith(AARCH64_SYSROOT)
    exe = by_file[os.path.realpath(made.executable)]
    assert exe.bias == made.executable_bias()
    assert len(by_file) == len(made.gdb.solibs) + 1


@pytest.mark.parametrize("case", [c for c in A64_CASES if SPECS[c].static])
def test_static_executable_alone(case: str, cores: Cores) -> None:
    """A static executable without NT_FILE: the one module, at its link address."""
    made = cores(case)
    core = open_core(made)
    files = [m for m in core.modules if m.file is not None]
    assert len(files) == 1 and os.path.samefile(files[0].file or "", made.executable)
    assert files[0].bias == 0


def test_i386_link_map_without_nt_file(cores: Cores, tmp_path: Path) -> None:
    """The dynamically linked i386 core with its NT_FILE note renamed: the libraries come from
    the dynamic linker's link map in the core's memory (32-bit r_debug and link_map), each at the
    place and with the build id eu-unstrip gives in the original core, and every thread unwinds
    to eu-stack's pcs there."""
    made = cores("i386-libc-shared")
    start, _ = note_span(made.path, "NT_FILE")
    data = bytearray(made.path.read_bytes())
    assert struct.unpack_from("<I", data, start + 8) == (0x46494C45,)  # n_type NT_FILE
    data[start + 8 : start + 12] = struct.pack("<I", 0x4E4F4E45)  # an unknown type
    copy = tmp_path / "no-nt-file.core"
    copy.write_bytes(data)
    core = Core.open(copy, made.executable)
    assert core.warnings == []
    ours = {module.start: module for module in core.modules}
    theirs = {module.start: module for module in made.eu_unstrip()}
    assert sorted(ours) == sorted(theirs)
    assert len(theirs) == 4  # the program, ld-linux.so.2, libc.so.6, the vdso
    for start, expected in theirs.items():
        module = ours[start]
        assert module.found and module.build_id == expected.build_id
        if expected.name in EU_VDSO:
            assert module.path == "[vdso]"
            continue
        assert module.file is not None and module.build_id_matches is True
        if expected.file is not None:
            assert os.path.samefile(module.file, expected.file)
        assert module.bias == start - first_load_vaddr(module.file)
    reference = made.reference_pcs()
    for thread in core.threads:
        trace = thread.unwind()
        assert trace.pcs == reference[thread.tid], listing(trace.pcs, reference[thread.tid])
        assert trace.end == "end_of_stack"


def test_vdso_unwinds_with_the_cores_image(cores: Cores) -> None:
    """Both threads stopped inside the vdso; its CFI exists only in the core's memory."""
    made = cores("vdso")
    core = open_core(made)
    (vdso,) = [m for m in core.modules if m.path == "[vdso]"]
    expected = made.extra["vdso"]
    assert (vdso.start, vdso.end) == (expected.start, page_up(expected.end))
    for thread in core.threads:
        trace = thread.unwind()
        assert vdso.start <= trace.pcs[0] < vdso.end
        assert core.unwinder.rule_at(trace.pcs[0]) is not None
        assert len(trace.pcs) > 3 and trace.end == "end_of_stack"


@pytest.mark.parametrize("case", ALL_CASES)
def test_the_main_threads_initial_stack(cores: Cores, case: str) -> None:
    """Where the main thread's stack began (its argc, below the arguments, the environment and
    the auxiliary vector), found from the auxiliary vector's copy in memory: the word there is
    the number of arguments the program was run with, the words after it point to those
    arguments' strings, and the crashing thread's frames all lie below it."""
    made = cores(case)
    core = Core.open(made.path, made.executable, sysroot=made.sysroot)
    top = core._core.initial_stack
    assert top is not None
    args = initial_arguments(core.memory, top, 4 if made.arch in ("i386", "arm") else 8)
    # pr_psargs: the kernel's copy of the arguments, joined by spaces, cut to 80 bytes.
    assert core.command_line and " ".join(args)[:79] == core.command_line[:79], args
    thread = next(t for t in core.threads if t.tid == core.pid)
    frames = thread.unwind().frames
    assert all(f.sp <= top for f in frames), [(hex(f.pc), hex(f.sp)) for f in frames]


def test_executable_found_from_the_core(cores: Cores) -> None:
    """Without an executable argument the program is the file AT_EXECFN names."""
    made = cores("deep")
    core = Core.open(made.path)
    assert core.executable is not None and os.path.samefile(core.executable, made.executable)
    assert core.threads[0].unwind().pcs == made.reference_pcs()[core.crashing_tid or 0]
    assert core.warnings == []


# --- damaged or incomplete input --------------------------------------------------------------


def fallback_frames_are_real(core: Core, reference: list[int]) -> None:
    """With the fallback strategies (the default), the frames a missing or wrong file keeps CFI
    from finding are scanned past: every frame shown is one of the reference's, in order, and
    the first frame after frame 0 that CFI did not find says how it was found."""
    trace = core.threads[0].unwind()
    assert trace.pcs[0] == reference[0]
    assert is_subsequence(trace.pcs, reference), listing(trace.pcs, reference)
    assert len(trace.pcs) > 1 and trace.frames[1].trust in ("frame_pointer", "scan")


def test_missing_executable(cores: Cores) -> None:
    """The program is gone from where the core says it was: it stays a module (by path), the
    frame in it is shown, unwinding by CFI stops there, and a warning names it. Given
    explicitly, the moved file is used."""
    made = cores("deep-moved")
    original = made.extra["original"]
    core = Core.open(made.path, strategies=["cfi"])
    (exe,) = [m for m in core.modules if m.path == original]
    assert not exe.found and exe.file is None
    assert any("not found" in w and original in w for w in core.warnings), core.warnings
    trace = core.threads[0].unwind()
    reference = made.reference_pcs()[core.threads[0].tid]
    assert trace.pcs == reference[:1]
    assert trace.end != "end_of_stack"
    fallback_frames_are_real(Core.open(made.path), reference)

    core = Core.open(made.path, made.executable)
    assert os.path.samefile(core.executable or "", made.executable)
    assert core.threads[0].unwind().pcs == reference


def test_missing_library(cores: Cores) -> None:
    """The library the process loaded is gone: a warning names it, it stays in the modules with
    its range and bias (from its ELF header in the core's memory), and the crashing thread
    shows the frame inside it before it stops."""
    made = cores("lib")
    core = Core.open(made.path, made.executable, strategies=["cfi"])
    library = made.extra["library"]
    (module,) = [m for m in core.modules if m.path == library]
    (expected,) = [m for m in made.eu_unstrip() if m.name == "libcrashlib.so"]
    assert not module.found and module.file is None
    assert module.start == expected.start
    assert module.bias == expected.start - first_load_vaddr(made.extra["v1"])
    assert module.build_id == expected.build_id == build_id_of(made.extra["v1"])
    assert module.build_id_matches is None
    assert any("not found" in w and library in w for w in core.warnings), core.warnings
    trace = core.threads[0].unwind()
    assert trace.pcs == made.reference_pcs()[core.threads[0].tid][:1]
    assert module.start <= trace.pcs[0] < module.end
    assert trace.end in ("no_module", "no_unwind_info")
    reference = made.reference_pcs()[core.threads[0].tid]
    fallback_frames_are_real(Core.open(made.path, made.executable), reference)


def test_library_found_on_the_search_path(cores: Cores) -> None:
    made = cores("lib")
    core = open_core(made)
    (module,) = [m for m in core.modules if m.path == made.extra["library"]]
    assert module.found and os.path.samefile(module.file or "", made.extra["v1"])
    assert module.build_id_matches is True
    assert core.warnings == []


def test_library_with_another_build_id(cores: Cores) -> None:
    """A rebuilt library (no CFI, functions moved) in place of the one the process loaded is
    not used by default, as eu-stack does not use it: it is missing, with a warning naming both
    build ids. Asked for (``allow_mismatch``), it is used, flagged -- build_id_matches False --
    and the stack it cannot unwind stops early instead of going wrong silently."""
    made = cores("lib")
    search = [os.path.dirname(made.extra["v2"])]
    in_core, on_disk = build_id_of(made.extra["v1"]), build_id_of(made.extra["v2"])
    core = Core.open(made.path, made.executable, lib_search_path=search, strategies=["cfi"])
    (module,) = [m for m in core.modules if m.path == made.extra["library"]]
    assert not module.found and module.file is None and module.build_id_matches is False
    (warning,) = [w for w in core.warnings if "build-id" in w.lower()]
    assert in_core in warning and on_disk in warning and "not used" in warning
    core = Core.open(
        made.path, made.executable, lib_search_path=search, strategies=["cfi"], allow_mismatch=True
    )
    (module,) = [m for m in core.modules if m.path == made.extra["library"]]
    assert in_core != on_disk
    assert module.found and os.path.samefile(module.file or "", made.extra["v2"])
    assert module.build_id == in_core and module.build_id_matches is False
    (warning,) = [w for w in core.warnings if "build-id" in w.lower() or "build id" in w.lower()]
    assert "libcrashlib.so" in warning
    assert in_core[:8] in warning and on_disk[:8] in warning
    trace = core.threads[0].unwind()
    reference = made.reference_pcs()[core.threads[0].tid]
    assert trace.pcs == reference[: len(trace.pcs)]
    assert len(trace.pcs) < len(reference) and trace.end != "end_of_stack"
    fallback_frames_are_real(
        Core.open(made.path, made.executable, lib_search_path=search, allow_mismatch=True),
        reference,
    )


def test_library_without_a_build_id(cores: Cores) -> None:
    """A rebuilt library with no build id at all (``--build-id=none``) in place of the one the
    process loaded cannot be that library, whose build id the core recorded: it is not used
    either (eu-stack uses it, and its frames come out wrong), with a warning; asked for, it is
    used and its frames are doubtful."""
    made = cores("lib")
    search = [os.path.dirname(made.extra["v3"])]
    assert "Build ID" not in run(["readelf", "-n", made.extra["v3"]]).stdout
    in_core = build_id_of(made.extra["v1"])
    core = Core.open(made.path, made.executable, lib_search_path=search, strategies=["cfi"])
    (module,) = [m for m in core.modules if m.path == made.extra["library"]]
    assert not module.found and module.file is None and module.build_id == in_core
    (warning,) = [w for w in core.warnings if "build-id" in w.lower()]
    assert in_core in warning and "no build id" in warning and "not used" in warning
    trace = core.threads[0].unwind()
    reference = made.reference_pcs()[core.threads[0].tid]
    assert trace.pcs == reference[: len(trace.pcs)]
    core = Core.open(made.path, made.executable, lib_search_path=search, allow_mismatch=True)
    (module,) = [m for m in core.modules if m.path == made.extra["library"]]
    assert module.found and os.path.samefile(module.file or "", made.extra["v3"])
    doc = core.to_dict(inline=False)
    frames = doc["threads"][0]["frames"]
    first = next(i for i, f in enumerate(frames) if f["module"].endswith("/libcrashlib.so"))
    assert all(f["doubtful"] for f in frames[first:]), frames


def test_libraries_need_the_sysroot(cores: Cores) -> None:
    """aarch64 libraries named by the link map (/lib/aarch64-linux-gnu/...) are not on this
    machine: without --sysroot each is a warning and the stack stops in libc; the search path
    finds them by file name as the sysroot does."""
    made = cores("a64-libc")
    reference = made.reference_pcs()
    core = Core.open(made.path, made.executable, strategies=["cfi"])
    libc = [m for m in core.modules if os.path.basename(m.path) == "libc.so.6"]
    assert len(libc) == 1 and not libc[0].found
    assert any("not found" in w and "libc.so.6" in w for w in core.warnings), core.warnings
    trace = core.threads[0].unwind()
    assert trace.pcs == reference[core.threads[0].tid][: len(trace.pcs)]
    assert trace.end != "end_of_stack"
    fallback_frames_are_real(Core.open(made.path, made.executable), reference[core.threads[0].tid])

    core = Core.open(made.path, made.executable, lib_search_path=[f"{AARCH64_SYSROOT}/lib"])
    assert core.threads[0].unwind().pcs == reference[core.threads[0].tid]


def test_truncated_inside_the_notes(cores: Cores, tmp_path: Path) -> None:
    """gdb writes the notes last: cut after the first NT_PRSTATUS, the thread and its registers
    are still there, the modules (NT_AUXV, NT_FILE) are not. The core opens with a warning
    and frame 0 is still right."""
    made = cores("deep")
    _, end = note_span(made.path, "NT_PRSTATUS")
    cut = truncated_copy(made.path, end + 40, tmp_path, "notes.core")
    core = Core.open(cut, made.executable)
    assert any("truncat" in w for w in core.warnings), core.warnings
    assert [t.tid for t in core.threads] == made.notes().tids
    trace = core.threads[0].unwind()
    reference = made.reference_pcs()[core.threads[0].tid]
    assert 1 <= len(trace.pcs) and trace.pcs == reference[: len(trace.pcs)]


def test_truncated_inside_the_first_thread(cores: Cores, tmp_path: Path) -> None:
    """Cut inside the only NT_PRSTATUS: no thread to show, said clearly."""
    made = cores("deep")
    start, end = note_span(made.path, "NT_PRSTATUS")
    cut = truncated_copy(made.path, (start + end) // 2, tmp_path, "prstatus.core")
    try:
        core = Core.open(cut, made.executable)
    except CoreError as e:
        assert str(cut) in str(e)
    else:
        assert core.threads == []
        assert any("truncat" in w for w in core.warnings), core.warnings


def test_truncated_inside_the_stack(cores: Cores, tmp_path: Path) -> None:
    """qemu writes the notes first: cut a few bytes above the crashing thread's stack pointer,
    the registers are whole but the stack is not. Unwinding stops with a memory error after
    the frames it could still find; the warning says how much of the core is missing."""
    made = cores("a64-deep-static")
    sp = made.gdb.thread(made.notes().tids[0]).frames[0].sp
    offset, lost = file_offset(made.path, sp)
    cut = truncated_copy(made.path, offset + 16, tmp_path, "stack.core")
    core = Core.open(cut, made.executable)
    missing = [w for w in core.warnings if "truncat" in w]
    assert missing and str(lost - 16) in missing[0], core.warnings
    trace = core.threads[0].unwind()
    reference = made.reference_pcs()[core.threads[0].tid]
    assert 1 <= len(trace.pcs) < len(reference)
    assert trace.pcs == reference[: len(trace.pcs)]
    assert trace.end == "memory", trace.end_detail


@pytest.mark.parametrize("cut", [10, 100])
def test_truncated_in_the_headers(cut: int, cores: Cores, tmp_path: Path) -> None:
    """Cut inside the ELF header or the program headers: not a readable core."""
    made = cores("deep")
    damaged = truncated_copy(made.path, cut, tmp_path, f"headers-{cut}.core")
    with pytest.raises(CoreError) as excinfo:
        Core.open(damaged)
    assert str(damaged) in str(excinfo.value)


def not_cores(directory: Path, build: Builder) -> dict[str, Path]:
    text = directory / "notes.txt"
    text.write_text("this is not an ELF file\n" * 50)
    empty = directory / "empty"
    empty.write_bytes(b"")
    elf_header_only = directory / "header-only"
    with open(build("crash_deep.c", *SPECS["deep"].flags), "rb") as f:
        elf_header_only.write_bytes(f.read(64))
    return {
        "text": text,
        "empty": empty,
        "executable": build("crash_deep.c", *SPECS["deep"].flags),
        "shared-library": Path("/usr/lib/x86_64-linux-gnu/libc.so.6"),
        "elf-header-only": elf_header_only,
        "missing": directory / "does-not-exist.core",
        "directory": directory,
    }


@pytest.mark.parametrize(
    "kind",
    ["text", "empty", "executable", "shared-library", "elf-header-only", "missing", "directory"],
)
def test_not_a_core(kind: str, build: Builder, tmp_path: Path) -> None:
    path = not_cores(tmp_path, build)[kind]
    with pytest.raises(StackwalkError) as excinfo:
        Core.open(path)
    assert str(path) in str(excinfo.value)
    if kind not in ("missing", "directory"):
        assert isinstance(excinfo.value, CoreError)
