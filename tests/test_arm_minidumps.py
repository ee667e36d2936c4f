"""32-bit ARM minidumps (Android's and embedded Linux's crash reporters write them): made here
from qemu-arm's cores of the ARM test programs (tests/minidump_from_core.py: the streams
Breakpad's and Crashpad's Linux writers write, each thread's ``CONTEXT_ARM`` and stack).

References: gdb-multiarch's live backtrace of each thread at the crash (tests/corefiles.py), the
frames ``stackwalk minidump`` must give from the dump alone; rust-minidump's
``minidump-stackwalk`` on the same dump for what it reads of it (the system, the crash, the
modules' debug ids, each thread's context). Past frame 0 minidump-stackwalk only scans: it
reads no ``.ARM.exidx`` table, and Debian's armhf libraries have no other.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from corefiles import ARM_SYSROOT, Cores, cargo_tool
from minidump_from_core import write_arm_minidump
from stackwalk._core import ElfFile
from stackwalk.core import Core

CASES = ["arm-deep", "arm-thumb-deep", "arm-threads", "arm-deep-static"]


@pytest.mark.parametrize("case", CASES)
def test_an_arm_minidump_unwinds_as_gdb_does(case: str, cores: Cores, tmp_path: Path) -> None:
    """Every thread of the dump, crashing thread first: gdb's pcs exactly (by the tables of the
    files found under the sysroot by the dump's module paths) and a clean end; the crash
    (SIGSEGV at the faulting pc, the crashing thread) and the system (arm, Linux)."""
    made = cores(case)
    core = Core.open(str(made.path), str(made.executable), **made.open_options)
    dump = write_arm_minidump(core, tmp_path / f"{case}.dmp")
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "minidump", str(dump), "--sysroot", ARM_SYSROOT,
         "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["arch"], doc["system"]["os"], doc["system"]["cpu"]) == ("arm", "Linux", "arm")
    assert doc["crash"]["reason"] == "SIGSEGV" and doc["crash"]["thread"] == core.crashing_tid
    reference = made.reference_pcs()
    assert [t["tid"] for t in doc["threads"]][0] == core.crashing_tid
    assert sorted(t["tid"] for t in doc["threads"]) == sorted(reference)
    for thread in doc["threads"]:
        pcs = [int(frame["pc"], 16) for frame in thread["frames"]]
        assert pcs == reference[thread["tid"]], thread["tid"]
        assert thread["end"] == "end_of_stack", thread


@pytest.mark.parametrize("case", ["arm-threads"])
def test_minidump_stackwalk_reads_the_arm_minidump(case: str, cores: Cores, tmp_path: Path) -> None:
    """rust-minidump reads what the dump holds as stackwalk does: an ARM Linux system, SIGSEGV
    in the crashing thread at its pc, every module at its address with the debug id its ELF
    build id makes (as dump_syms makes it), and each thread's frame 0 from its context."""
    made = cores(case)
    core = Core.open(str(made.path), str(made.executable), **made.open_options)
    dump = write_arm_minidump(core, tmp_path / f"{case}.dmp")
    proc = subprocess.run([cargo_tool("minidump-stackwalk"), "--json", str(dump)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads(proc.stdout)
    assert theirs["system_info"]["cpu_arch"] == "arm" and theirs["system_info"]["os"] == "Linux"
    crashed = theirs["threads"][theirs["crash_info"]["crashing_thread"]]
    assert crashed["thread_id"] == core.crashing_tid
    assert theirs["crash_info"]["type"] == "SIGSEGV"
    ids = {int(m["base_addr"], 16): m["debug_id"] for m in theirs["modules"]}
    assert ids == {m.start: ElfFile(m.file).debug_id for m in core.modules}
    regs = {t.tid: t.regs for t in core.threads}
    for thread in theirs["threads"]:
        assert int(thread["frames"][0]["offset"], 16) == regs[thread["thread_id"]]["pc"]
