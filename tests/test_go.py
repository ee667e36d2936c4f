"""A Go program's goroutine that faults (tests/programs/go_sigpanic.go: a nil pointer's field
read at the first instruction of a leaf without a frame). Go's signal handler makes the
goroutine call ``runtime.sigpanic`` as if from the faulting instruction: it pushes that
instruction's address as the return address and resumes at sigpanic, which panics. The frame
below sigpanic is then the interrupted one, to be looked up at its pc: at pc - 1 it lies in the
function before (gdb's backtrace shows ``?? ()`` there, and stackwalk, before, found the frames
past it by scanning).

The reference is Go's own traceback (``GOTRACEBACK=system``), which the runtime prints as the
panic goes on after the core is taken: each frame's function, pc and sp, from sigpanic to
``runtime.goexit``. The faulting pc is also the one gdb stops at on the SIGSEGV.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from corefiles import run, stackwalk_core
from realstacks import PROGRAMS

GO = shutil.which("go")
# Go's traceback: "main.middle(0x0?)" then "\t/path/main.go:11 +0x19 fp=0x... sp=0x... pc=0x...";
# an inlined call, "runtime.panicmem(...)", has a line with no pc.
GO_FRAME = re.compile(
    r"^(?P<function>\S+)\(.*\)\n\t(?P<file>\S+):(?P<line>\d+)(?: \+0x[0-9a-f]+)?"
    r"(?: fp=0x[0-9a-f]+ sp=0x(?P<sp>[0-9a-f]+) pc=0x(?P<pc>[0-9a-f]+))?$",
    re.M,
)


def go_build(source: Path, out: Path, tmp: Path) -> None:
    env = {**os.environ, "GOCACHE": str(tmp / "gocache"), "GOPATH": str(tmp / "gopath"),
           "GO111MODULE": "off", "GOFLAGS": "", "CGO_ENABLED": "0"}  # fmt: skip
    proc = run([GO or "go", "build", "-o", out, source], env=env, timeout=300)
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


def crashed_frames(exe: Path, core: Path) -> list[dict[str, Any]]:
    proc = stackwalk_core(core, exe, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (thread,) = [t for t in out["threads"] if t["tid"] == out["crashing_thread"]]
    return [f for f in thread["frames"] if not f["inline"]]


def test_the_frame_sigpanic_was_called_from_is_the_faulting_one(
    faulted: tuple[Path, Path, int, str],
) -> None:
    """From runtime.sigpanic to runtime.goexit, ours are Go's own frames (function, pc, sp),
    every one found by CFI, the one below sigpanic at the faulting pc, the first byte of
    main.crash: looked up there, not at pc - 1 in the function before it."""
    exe, core, fault, traceback = faulted
    go = [m for m in GO_FRAME.finditer(traceback) if m["pc"]]
    start = next(i for i, m in enumerate(go) if m["function"] == "runtime.sigpanic")
    theirs = [(m["function"], int(m["pc"], 16), int(m["sp"], 16)) for m in go[start:]]
    assert theirs[-1][0] == "runtime.goexit", traceback
    frames = crashed_frames(exe, core)
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
