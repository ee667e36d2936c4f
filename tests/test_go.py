"""A Go program's goroutine that faults (tests/programs/go_sigpanic.go: a nil pointer's field
read at the first instruction of a leaf without a frame). Go's signal handler makes the
goroutine call ``runtime.sigpanic`` as if from the faulting instruction: it pushes that
instruction's address as the return address and resumes at sigpanic, which panics. The frame
below sigpanic is then the interrupted one, to be looked up at its pc: at pc - 1 it lies in the
function before (gdb's backtrace shows ``?? ()`` there, and stackwalk, before, found the frames
past it by scanning).

On aarch64 the runtime also moves sp down 16 bytes and stores the goroutine's lr there before
it sets lr to the faulting pc: the faulting frame's sp is 16 bytes above sigpanic's CFA, and a
leaf's return address is that stored word (gdb stops at the faulting frame; stackwalk, before,
repeated it and stopped).

The reference is Go's own traceback (``GOTRACEBACK=system``), which the runtime prints as the
panic goes on: each frame's function, pc and sp, from sigpanic to ``runtime.goexit``. The
faulting pc is also the one gdb stops at on the SIGSEGV.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from corefiles import AARCH64_SYSROOT, run, stackwalk_core
from perfdata import disassembly
from realstacks import PROGRAMS
from stackwalk import Unwinder
from stackwalk._core import SymbolTable
from stackwalk.capture import BreakpointNotHitError, capture
from stackwalk.core import Core

GO = shutil.which("go")
# Go's traceback: "main.middle(0x0?)" then "\t/path/main.go:11 +0x19 fp=0x... sp=0x... pc=0x...";
# an inlined call, "runtime.panicmem(...)", has a line with no pc.
GO_FRAME = re.compile(
    r"^(?P<function>\S+)\(.*\)\n\t(?P<file>\S+):(?P<line>\d+)(?: \+0x[0-9a-f]+)?"
    r"(?: fp=0x[0-9a-f]+ sp=0x(?P<sp>[0-9a-f]+) pc=0x(?P<pc>[0-9a-f]+))?$",
    re.M,
)


def go_build(source: Path, out: Path, tmp: Path, goarch: str = "amd64", ldflags: str = "") -> None:
    env = {**os.environ, "GOCACHE": str(tmp / "gocache"), "GOPATH": str(tmp / "gopath"),
           "GO111MODULE": "off", "GOFLAGS": "", "CGO_ENABLED": "0", "GOARCH": goarch}  # fmt: skip
    cmd = [GO or "go", "build", f"-ldflags={ldflags}", "-o", out, source]
    proc = run(cmd, env=env, timeout=300)
    assert proc.returncode == 0, f"go build {source} failed:\n{proc.stderr}"


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int, str]:
    """The program built, its core taken under gdb when the panic starts (``runtime.gopanic``,
    after sigpanic), the faulting pc (gdb's, at the SIGSEGV), and Go's traceback printed as the
    panic then goes on."""
    assert GO is not None, "go is not installed (Debian's golang-go; .ci/setup installs it)"
    tmp = tmp_path_factory.mktemp("go")
    exe, core = tmp / "go_sigpanic", tmp / "core"
    go_build(PROGRAMS / "go_sigpanic.go", exe, tmp)
    cmd = ["gdb", "-batch", "-nx", "-ex", "handle SIGSEGV stop print pass",
           "-ex", "break runtime.gopanic", "-ex", "run", "-ex", 'printf "FAULT %#lx\\n", $pc',
           "-ex", "continue", "-ex", f"generate-core-file {core}", "-ex", "continue",
           "--args", exe]  # fmt: skip
    proc = run(cmd, env={**os.environ, "GOTRACEBACK": "system"})
    out = proc.stdout + proc.stderr
    fault = re.search(r"^FAULT (0x[0-9a-f]+)$", out, re.M)
    assert fault and core.exists(), f"gdb did not stop at the fault and take the core:\n{out}"
    traceback = out[out.index("goroutine 1 [running]:") :].split("\n\n")[0]
    return exe, core, int(fault[1], 16), traceback


def core_json(exe: Path, core: Path) -> dict[str, Any]:
    """``stackwalk core --json``'s document, which must end every walk cleanly (exit 0)."""
    proc = stackwalk_core(core, exe, "--json")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def crashed_frames(out: dict[str, Any]) -> list[dict[str, Any]]:
    (thread,) = [t for t in out["threads"] if t["tid"] == out["crashing_thread"]]
    return [f for f in thread["frames"] if not f["inline"]]


def test_the_frame_sigpanic_was_called_from_is_the_faulting_one(
    faulted: tuple[Path, Path, int, str],
) -> None:
    """From runtime.sigpanic to runtime.goexit, ours are Go's own frames (function, pc, sp),
    every one found by CFI, the one below sigpanic at the faulting pc, the first byte of
    main.crash: looked up there, not at pc - 1 in the function before it."""
    exe, core, fault, traceback = faulted
    theirs = go_frames(traceback)
    assert theirs[-1][0] == "runtime.goexit", traceback
    frames = crashed_frames(core_json(exe, core))
    first = next(i for i, f in enumerate(frames) if f["function"] == "runtime.sigpanic")
    # The ELF symbol of Go's assembly functions is the ABI's: runtime.goexit.abi0.
    ours = [((f["function"] or "?").removesuffix(".abi0"), int(f["pc"], 16), int(f["sp"], 16))
            for f in frames[first:]]  # fmt: skip
    assert ours == theirs, f"ours {ours}\nGo's traceback:\n{traceback}"
    faulting = frames[first + 1]
    assert (int(faulting["pc"], 16), faulting["function"]) == (fault, "main.crash")
    assert int(faulting["function_offset"], 16) == 0, faulting
    assert faulting["line"] == 12 and Path(faulting["file"]).name == "go_sigpanic.go", faulting
    assert [f["trust"] for f in frames[1:]] == ["cfi"] * (len(frames) - 1), frames


def go_frames(traceback: str) -> list[tuple[str, int, int]]:
    """(function, pc, sp) of Go's traceback from runtime.sigpanic on (inlined calls left out)."""
    go = [m for m in GO_FRAME.finditer(traceback) if m["pc"]]
    start = next(i for i, m in enumerate(go) if m["function"] == "runtime.sigpanic")
    return [(m["function"], int(m["pc"], 16), int(m["sp"], 16)) for m in go[start:]]


def test_aarch64_the_faulting_frame_is_above_the_word_sigpanic_was_given(tmp_path: Path) -> None:
    """aarch64 (the program under qemu-aarch64, stopped by gdb-multiarch as the panic starts):
    from runtime.sigpanic on, ours are the frames of Go's traceback (function and pc; each sp
    as far from sigpanic's as Go's), every one by CFI, the stack's end where Go's ends."""
    assert GO is not None, "go is not installed (Debian's golang-go; .ci/setup installs it)"
    exe = tmp_path / "go_sigpanic"
    go_build(PROGRAMS / "go_sigpanic.go", exe, tmp_path, goarch="arm64")
    proc = run(["qemu-aarch64", "-L", AARCH64_SYSROOT, exe], env={**os.environ,
               "GOTRACEBACK": "system"})  # fmt: skip
    out = proc.stdout + proc.stderr
    theirs = go_frames(out[out.index("goroutine 1 [running]:") :].split("\n\n")[0])
    # "[signal SIGSEGV: segmentation violation code=0x1 addr=0x8 pc=0x6fc70]"
    fault = re.search(r"^\[signal SIGSEGV: .* pc=(0x[0-9a-f]+)\]$", out, re.M)
    assert fault, out
    # gdb-multiarch on qemu-aarch64's gdb stub once saw this program run to its end (exit code
    # 2: Go's panic) without stopping at the breakpoint, in one CI run of several; not seen in
    # runs here, and not understood (qemu-user's stub, with Go's threads and signals). A second
    # capture is taken before the test fails: the frames are what is tested.
    try:
        cap = capture([exe], "runtime.gopanic", sysroot=AARCH64_SYSROOT, pass_signals=["SIGSEGV"])
    except BreakpointNotHitError:
        cap = capture([exe], "runtime.gopanic", sysroot=AARCH64_SYSROOT, pass_signals=["SIGSEGV"])
    # CFI alone (the Unwinder's default), and the walk with fallbacks (the core command's).
    for strategies in (("cfi",), ("cfi", "frame_pointer", "scan")):
        unwinder = Unwinder(arch="aarch64", strategies=strategies)
        cap.add_modules_to(unwinder)
        check_sigpanic_walk(exe, unwinder.unwind(cap.regs, cap.memory), theirs, int(fault[1], 16))


def check_sigpanic_walk(
    exe: Path, trace: Any, theirs: list[tuple[str, int, int]], fault: int
) -> None:
    table = SymbolTable(str(exe))  # a static executable at its link address
    names = [(table.lookup(f.lookup_pc) or ("?", 0))[0] for f in trace.frames]
    start = names.index("runtime.sigpanic")
    ours = [(n, f.pc, f.sp) for n, f in zip(names[start:], trace.frames[start:], strict=True)]
    # Go's names its assembly functions without the ELF symbol's ABI suffix.
    base, their_base = ours[0][2], theirs[0][2]
    assert [(n.removesuffix(".abi0"), pc, sp - base) for n, pc, sp in ours] == [
        (n, pc, sp - their_base) for n, pc, sp in theirs
    ], f"ours {ours}\nGo's {theirs}"
    assert (trace.frames[start + 1].pc, names[start + 1]) == (fault, "main.crash")
    assert all(f.trust == "cfi" for f in trace.frames[1:]), trace.frames
    assert trace.end == "end_of_stack", trace.end_detail


def test_a_stripped_program_is_named_from_its_gopclntab(tmp_path: Path) -> None:
    """Go programs are mostly shipped stripped (``-ldflags=-s -w``: no ``.symtab``, no DWARF,
    so no CFI either), but keep ``.gopclntab``, the table Go's runtime names its own tracebacks
    from. The program built so, crashed with ``GOTRACEBACK=crash`` (the runtime prints the
    traceback, then raises SIGABRT, where gdb takes the core):

    - every frame of the crashing thread is named as ``go tool addr2line`` names its lookup
      address (the pc for frame 0 and a frame a signal interrupted, else pc - 1);
    - from runtime.sigpanic on, ours are Go's traceback's frames (function, pc, sp), found by
      frame pointers: the faulting frame at the pc sigpanic's record holds, which follows no
      call, and the walk ends at runtime.goexit, whose second instruction the runtime makes a
      goroutine's first return address;
    - every thread's walk ends cleanly (exit 0), each of the runtime's threads at
      runtime.mstart.

    Before, every frame was ``??``, the faulting frame was lost (the frames past sigpanic found
    by scanning) and the walk stopped at goexit's return address ("does not follow a call")."""
    assert GO is not None, "go is not installed (Debian's golang-go; .ci/setup installs it)"
    exe, core = tmp_path / "go_stripped", tmp_path / "core"
    go_build(PROGRAMS / "go_sigpanic.go", exe, tmp_path, ldflags="-s -w")
    sections = run(["readelf", "-SW", exe]).stdout
    assert ".gopclntab" in sections and ".symtab" not in sections, sections
    cmd = ["gdb", "-batch", "-nx", "-ex", "handle SIGSEGV nostop noprint pass", "-ex", "run",
           "-ex", f"generate-core-file {core}", "--args", exe]  # fmt: skip
    out = run(cmd, env={**os.environ, "GOTRACEBACK": "crash"})
    assert core.exists(), out.stdout + out.stderr
    printed = out.stdout + out.stderr
    traceback = printed[printed.index("goroutine 1 [running]:") :].split("\n\n")[0]
    doc = core_json(exe, core)
    frames = crashed_frames(doc)
    opened = Core.open(core, exe)
    (trace,) = [t.unwind() for t in opened.threads if t.tid == opened.crashing_tid]
    assert [f.pc for f in trace.frames] == [int(f["pc"], 16) for f in frames]
    lookups = "".join(f"{f.lookup_pc:#x}\n" for f in trace.frames)
    proc = run([GO or "go", "tool", "addr2line", str(exe)], input=lookups)
    assert proc.returncode == 0, proc.stderr
    theirs = proc.stdout.splitlines()[::2]
    assert [f["function"] for f in frames] == theirs, (frames, theirs)
    assert "main.main" in theirs and "runtime.sigpanic" in theirs, theirs

    first = next(i for i, f in enumerate(frames) if f["function"] == "runtime.sigpanic")
    ours = [(f["function"], int(f["pc"], 16), int(f["sp"], 16)) for f in frames[first:]]
    assert ours == go_frames(traceback), f"ours {ours}\nGo's traceback:\n{traceback}"
    assert {f["trust"] for f in frames[first + 1 :]} == {"frame_pointer"}, frames
    every = doc["threads"]
    assert {t["end"] for t in every} == {"end_of_stack"}, [t["frames"][-1] for t in every]


# Where the frames of a Go thread's own stack (g0's) begin: runtime.mstart, and the functions
# that switch to it and start its frames afresh (fp 0), as Go's traceback stops at them.
G0_TOPS = ("runtime.mstart", "runtime.mcall", "runtime.morestack", "runtime.systemstack")


@pytest.fixture(scope="module")
def arm64_stripped_crash(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any], str]:
    """The stripped program (no CFI) on aarch64, crashed under qemu-aarch64 with
    ``GOTRACEBACK=crash`` (qemu writes the core at the SIGABRT): the program, ``stackwalk core
    --json``'s document of the core, and goroutine 1's traceback as the runtime printed it."""
    assert GO is not None, "go is not installed (Debian's golang-go; .ci/setup installs it)"
    tmp_path = tmp_path_factory.mktemp("go-arm64")
    exe = tmp_path / "go_stripped"
    go_build(PROGRAMS / "go_sigpanic.go", exe, tmp_path, goarch="arm64", ldflags="-s -w")
    cmd = ["sh", "-c", 'ulimit -c unlimited; exec "$@"', "sh",
           "qemu-aarch64", "-L", AARCH64_SYSROOT, str(exe)]  # fmt: skip
    printed = run(cmd, cwd=tmp_path, env={**os.environ, "GOTRACEBACK": "crash"})
    out = printed.stdout + printed.stderr
    (core,) = tmp_path.glob("qemu_*.core")
    proc = stackwalk_core(core, exe, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    traceback = out[out.index("goroutine 1 [running]:") :].split("\n\n")[0]
    return exe, json.loads(proc.stdout), traceback


def test_aarch64_stripped_runtime_threads_are_walked_by_their_frame_records(
    arm64_stripped_crash: tuple[Path, dict[str, Any], str],
) -> None:
    """The stripped program (no CFI) on aarch64, crashed under qemu-aarch64 with
    ``GOTRACEBACK=crash`` (qemu writes the core at the SIGABRT). Go's aarch64 functions keep
    their frame record one word below their sp (``MOVD R29, -8(RSP); SUB $8, RSP, R29``), so
    a record the frame-pointer step took for one below the frame was refused, and the runtime's
    own threads (sysmon's and the idle ones', parked in futex) were found past their first
    caller by scanning. Now every thread but the crashed one is walked by frame records alone
    to the outermost function of a thread's stack (runtime.mstart, or a function that switches
    to the thread's own stack and starts its frames afresh there, with fp 0: runtime.mcall,
    morestack or systemstack, where each thread is depends on the moment of the crash), and
    the chain is proven from the program: each return
    address follows a ``bl`` or ``blr``, and a ``bl`` calls the function of the frame below, as
    ``go tool addr2line`` names both. (Go's traceback shows goroutines, not these threads; the
    crashed thread is the next test's.)"""
    exe, doc, _ = arm64_stripped_crash
    others = [t for t in doc["threads"] if t["tid"] != doc["crashing_thread"]]
    assert len(others) >= 2 and {t["end"] for t in others} == {"end_of_stack"}, others
    threads = [t["frames"] for t in others]
    calls = disassembly(str(exe), "aarch64-linux-gnu-objdump").calls
    direct = []  # (a direct call's target, the frame below it)
    for frames in threads:
        assert frames[-1]["function"] in G0_TOPS, frames[-1]
        assert {f["trust"] for f in frames[1:]} == {"frame_pointer"}, frames
        for callee, caller in itertools.pairwise(frames):
            return_address = int(caller["pc"], 16)
            assert return_address in calls, f"{caller} follows no bl or blr"
            if calls[return_address] is not None:
                direct.append((calls[return_address], callee))
    lookups = [int(f["pc"], 16) - (0 if i == 0 else 1) for t in threads for i, f in enumerate(t)]
    addresses = lookups + [target for target, _ in direct]
    named = run([GO, "tool", "addr2line", str(exe)],
                input="".join(f"{a:#x}\n" for a in addresses)).stdout  # fmt: skip
    names = named.splitlines()[::2]
    assert [f["function"] for t in threads for f in t] == names[: len(lookups)]
    assert names[len(lookups) :] == [callee["function"] for _, callee in direct], direct


def test_aarch64_stripped_crashed_thread_crosses_qemus_signal_frame(
    arm64_stripped_crash: tuple[Path, dict[str, Any], str],
) -> None:
    """The crashed thread of the same core. Go's signal handler (runtime.sigtramp, no CFI)
    returns to qemu's own sigreturn trampoline, on a page in no module; its frame record's
    return address is believed because the kernel's signal frame (as qemu writes it) lies
    above the record, and that frame gives the interrupted one (runtime.raise, trust
    ``context``). From sigpanic on, the frames are Go's own traceback's (function and pc),
    to runtime.goexit, by frame records: the faulting frame, main.crash, a frameless leaf whose
    return address (into main.middle) was in lr at the fault, found in the word where the
    runtime's preparePanic saved lr. Past runtime.main Go 1.19's arm64 frame pointer is not
    runtime.main's record (main.main saved another value in its place), so goexit is found by
    scanning: its return address, which the runtime puts only at the top of a goroutine's
    stack, is taken before a stale return address of runtime.main's own below it."""
    exe, doc, traceback = arm64_stripped_crash
    (thread,) = [t for t in doc["threads"] if t["tid"] == doc["crashing_thread"]]
    frames = thread["frames"]
    tramp = next(i for i, f in enumerate(frames) if f["module"] is None)
    assert frames[tramp - 1]["function"] == "runtime.sigtramp", frames[: tramp + 1]
    interrupted = frames[tramp + 1]
    # Looked up at the pc: frame 0, and the frames a signal interrupted (the one the signal
    # frame gives, and the faulting one, sigpanic's caller).
    faulting = 1 + next(i for i, f in enumerate(frames) if f["function"] == "runtime.sigpanic")
    at_pc = (0, tramp + 1, faulting)
    lookups = [int(f["pc"], 16) - (0 if i in at_pc else 1) for i, f in enumerate(frames)]
    named = run([GO or "go", "tool", "addr2line", str(exe)],
                input="".join(f"{a:#x}\n" for a in lookups)).stdout  # fmt: skip
    names = named.splitlines()[::2]
    assert [f["function"] or "?" for f in frames] == names, frames
    assert (interrupted["function"], interrupted["trust"]) == ("runtime.raise", "context")
    theirs = [(m["function"], int(m["pc"], 16)) for m in GO_FRAME.finditer(traceback) if m["pc"]]
    theirs = theirs[[function for function, _ in theirs].index("runtime.sigpanic") :]
    first = names.index("runtime.sigpanic")
    ours = [(f["function"], int(f["pc"], 16)) for f in frames[first:]]
    # sigpanic, main.crash, main.middle, main.main, runtime.main, runtime.goexit.
    assert ours == theirs, f"ours {ours}\nGo's:\n{traceback}"
    assert {f["trust"] for f in frames[first + 1 : -1]} == {"frame_pointer"}, frames
    assert thread["end"] == "end_of_stack", thread
