"""32-bit ARM signal handlers installed without a restorer of the C library's: the rt_sigaction
system call itself, no SA_RESTORER (tests/programs/signal.c with -DRAW_SIGACTION). The handler
then returns through the kernel's own trampoline (a real kernel's ``[sigpage]``, qemu-user's
page of its own), in no module and with no unwind table, where gdb-multiarch stops ("previous
frame identical"). The walk reads the kernel's signal frame there (``struct rt_sigframe``: a
siginfo, then the ucontext; qemu writes the kernel's layout) and goes on.

References: gdb-multiarch's live backtrace at the handler, stopped under qemu-arm (up to the
trampoline), the handler's own reading of its ``ucontext_t`` (passed to the function the
capture stops in: the interrupted pc, sp and r11 in r1-r3, lr on the stack), and
gdb-multiarch's live backtrace of the same program stopped in the interrupted function, for the
frames below it.
"""

from __future__ import annotations

import pytest
from corefiles import ARM_GCC, ARM_SYSROOT
from realstacks import Builder, Captures, describe, module_of
from stackwalk import Unwinder
from stackwalk.capture import Capture

FLAGS = ("-O2", "-DSIGNAL_CONTEXT", "-DRAW_SIGACTION")
BUILDS = {"arm": ("-marm",), "thumb": ("-mthumb",)}


def stack_word(cap: Capture, address: int) -> bytes:
    for start, data in cap.memory:
        if start <= address and address + 4 <= start + len(data):
            return data[address - start : address - start + 4]
    raise AssertionError(f"{address:#x} not captured")


def captured(build: Builder, captures: Captures, mode: str, breakpoint: str) -> Capture:
    program = build("signal.c", *FLAGS, *BUILDS[mode], compiler=ARM_GCC)
    cap = captures([program], breakpoint, sysroot=ARM_SYSROOT)
    assert cap.arch == "arm"
    return cap


@pytest.mark.parametrize("mode", sorted(BUILDS))
def test_the_walk_crosses_the_kernels_trampoline(
    mode: str, build: Builder, captures: Captures
) -> None:
    """gdb's frames up to the trampoline (in no module); there the kernel's signal frame gives
    the interrupted frame (trust ``context``): the pc, sp, r11 and lr the handler read from its
    own ucontext. Below it, every frame gdb shows when the program is stopped in the
    interrupted function itself (spin, depth seven times, main, libc's, _start), with gdb's
    stack pointers, by the tables, and a clean end."""
    cap = captured(build, captures, mode, "*handler_leaf")
    names = [frame["function"] for frame in cap.gdb_frames]
    assert names[:2] == ["handler_leaf", "on_alarm"] and len(names) == 3, names
    assert module_of(cap, cap.gdb_pcs[2]) is None  # gdb stops at qemu's trampoline
    # r1-r3 the pc, sp and r11; lr, the fifth argument, on the stack (AAPCS).
    context = {"pc": cap.regs["r1"], "sp": cap.regs["r2"], "r11": cap.regs["r3"]}
    context["lr"] = int.from_bytes(stack_word(cap, cap.regs["sp"]), "little")
    unwinder = Unwinder(arch="arm", strategies=["cfi", "frame_pointer"])
    cap.add_modules_to(unwinder)
    trace = unwinder.unwind(cap.regs, cap.memory, registers=True)
    assert trace.pcs[:3] == cap.gdb_pcs, describe(cap, trace.pcs)
    trampoline, interrupted = trace.frames[2], trace.frames[3]
    assert module_of(cap, trampoline.pc) is None and trampoline.signal_frame
    assert (interrupted.pc, interrupted.sp) == (context["pc"] & ~1, context["sp"])
    assert interrupted.trust == "context" and interrupted.interrupted
    registers = trace.registers(3)
    assert (registers["r11"], registers["lr"]) == (context["r11"], context["lr"])
    # The frames below, as gdb shows them from inside spin (the same calls, the same stack).
    below = captured(build, captures, mode, "spin")
    assert [f["function"] for f in below.gdb_frames][:9] == ["spin"] + ["depth"] * 7 + ["main"]
    assert trace.pcs[4:] == below.gdb_pcs[1:], describe(cap, trace.pcs)
    assert [f.sp for f in trace.frames[4:]] == [f["sp"] for f in below.gdb_frames[1:]]
    assert [f.trust for f in trace.frames[4:]] == ["cfi"] * (len(trace.frames) - 4)
    assert trace.end == "end_of_stack", trace.end_detail
