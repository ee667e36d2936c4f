"""32-bit ARM against aarch64, per frame: the same program (tests/programs/crash_deep.c, -O2, a
recursion DEPTH deep, with libc's frames under it) built for each, crashed under qemu, and its
core's crashing thread unwound through the public API (`Thread.unwind`), side by side in one
run. ARM code is unwound by its EHABI tables (`.ARM.exidx`, ARM and Thumb-2 builds), aarch64's
by DWARF CFI (`.eh_frame`): the time of a walk over the frame count is what a frame costs.
In ``make test`` they run once (``--benchmark-disable``), still checking the frames against
gdb-multiarch's live backtrace at the crash."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from corefiles import AARCH64_SYSROOT, ARM_GCC, ARM_SYSROOT, GdbView, qemu_crash_core
from realstacks import PROGRAMS
from stackwalk.core import Core

DEPTH = 400
# Each build: compiler, sysroot, qemu, flags.
BUILDS = {
    "arm": (ARM_GCC, ARM_SYSROOT, "qemu-arm", ("-marm",)),
    "thumb": (ARM_GCC, ARM_SYSROOT, "qemu-arm", ("-mthumb",)),
    "aarch64": ("aarch64-linux-gnu-gcc", AARCH64_SYSROOT, "qemu-aarch64", ()),
}


@pytest.fixture(scope="module")
def deep_cores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Core, GdbView]]:
    """Each build's core, opened, with gdb's view of the crash."""
    out = {}
    for name, (compiler, sysroot, qemu, flags) in BUILDS.items():
        tmp = tmp_path_factory.mktemp(name)
        exe = tmp / "crash_deep"
        cmd = [compiler, "-g", "-O2", "-fomit-frame-pointer", f"-DDEPTH={DEPTH}", *flags,
               str(PROGRAMS / "crash_deep.c"), "-o", str(exe)]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        path, view = qemu_crash_core([str(exe)], tmp / "run", sysroot, qemu=qemu)
        out[name] = (Core.open(str(path), str(exe), sysroot=sysroot), view)
    return out


@pytest.mark.benchmark(group="arch", min_time=0.0005)
@pytest.mark.parametrize("name", list(BUILDS))
def test_unwind_per_frame(
    benchmark: Any, deep_cores: dict[str, tuple[Core, GdbView]], name: str
) -> None:
    core, view = deep_cores[name]
    thread = core.threads[0]
    trace = benchmark(thread.unwind)
    assert trace.pcs == view.thread(thread.tid).pcs, "the benchmark's answer differs from gdb's"
    assert len(trace.pcs) > DEPTH
    benchmark.extra_info["frames"] = len(trace.pcs)
    if benchmark.stats:
        benchmark.extra_info["ns_per_frame"] = benchmark.stats.stats.median * 1e9 / len(trace.pcs)
