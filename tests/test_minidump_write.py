"""Cores written as minidumps (``Core.to_minidump``, ``stackwalk minidump-write``): the streams
Crashpad's Linux writer makes, from the core (rust/source/corefile/dump.rs).

References: the core itself, read by ``stackwalk core`` (whose frames the core tests prove
against eu-stack and gdb): the dump must give the same threads, frames, crash and modules through
``stackwalk minidump``; and rust-minidump's ``minidump-stackwalk``, given ``dump_syms``' symbols
of every module: the same system, crash, modules and debug ids, and the same frames wherever it
unwinds by CFI (where it differs, it scanned: checked as tests/test_minidump.py checks it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from corefiles import Cores, MadeCore
from minidumps import MINIDUMP_STACKWALK, symbol_store
from processes import check_stopped, running, stopped, wait_all_blocked
from realstacks import Builder
from stackwalk.core import Core
from stackwalk.minidump import Minidump
from test_minidump import real_frames

CASES = [
    "threads", "deep", "libc", "signal", "cxx", "lib", "vdso", "altstack",
    "i386-threads", "i386-libc-shared",
    "a64-threads", "a64-libc", "a64-cxx",
    "arm-threads", "arm-libc",
]  # fmt: skip
# A typical crash's dump: its threads' stacks and the memory around their registers.
TYPICAL_MOST = 512 << 10


def written(made: MadeCore, out: Path, **options: Any) -> tuple[Core, Path]:
    core = Core.open(str(made.path), str(made.executable), **made.open_options)
    size = core.to_minidump(out, **options)
    assert size == out.stat().st_size
    return core, out


def frames(doc: dict[str, Any]) -> dict[int, list[tuple[Any, ...]]]:
    """Each thread's frames: (pc, sp, function, module's range, trust, inline)."""
    ranges = {m["path"]: (m["start"], m["end"]) for m in doc["modules"]}
    return {
        t["tid"]: [
            (f["pc"], f.get("sp"), f["function"], ranges.get(f["module"]), f["trust"], f["inline"])
            for f in t["frames"]
        ]
        for t in doc["threads"]
    }


def same_modules(core: Core, dump: dict[str, Any], theirs: dict[str, Any]) -> None:
    """The dump's modules are the core's: the same ranges and paths (the vdso by its range), the
    build ids the core recorded; where it recorded none (a qemu core leaves out the program's
    first page), none or, for a file vouched for (the executable given), that file's."""
    files = {hex(m.start): m.file_build_id for m in core.modules}
    ours = {m["start"]: m for m in dump["modules"]}
    assert sorted(ours) == sorted(m["start"] for m in theirs["modules"])
    for their in theirs["modules"]:
        our = ours[their["start"]]
        assert our["end"] == their["end"], our
        assert "vdso" in their["path"] or our["path"] == their["path"], our
        if their["build_id"] is not None:
            assert our["build_id"] == their["build_id"], our
        else:
            assert our["build_id"] in (None, files[their["start"]]), our


@pytest.mark.parametrize("case", CASES)
def test_the_dump_gives_the_cores_frames(case: str, cores: Cores, tmp_path: Path) -> None:
    """``stackwalk minidump`` on the dump: every thread, frame for frame (pc, sp, function,
    module, trust), the crash and the modules of ``stackwalk core`` on the core; the dump a few
    hundred KiB at most."""
    made = cores(case)
    core, dump = written(made, tmp_path / f"{case}.dmp")
    assert dump.stat().st_size < TYPICAL_MOST
    theirs = core.to_dict()
    ours = Minidump.open(dump, **made.open_options).to_dict()
    for field in ("arch", "executable", "pid", "signal", "crashing_thread"):
        assert ours[field] == theirs[field], field
    assert [t["tid"] for t in ours["threads"]] == [t["tid"] for t in theirs["threads"]]
    assert frames(ours) == frames(theirs)
    assert all(
        t["end"] == u["end"] for t, u in zip(ours["threads"], theirs["threads"], strict=True)
    )
    same_modules(core, ours, theirs)


def symbols_of(core: Core, store: Path) -> dict[str, str]:
    """dump_syms' symbols of every module whose file was found, in a symbol store: the debug id
    it gives each (by module path)."""
    return {
        m.path: symbol_store(Path(m.file), store).parent.name
        for m in core.modules
        if m.file and m.path != "[vdso]"
    }


def minidump_stackwalk(dump: Path, store: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [MINIDUMP_STACKWALK, "--json", "--symbols-path", store, dump],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


STACKWALKED = ["threads", "cxx", "altstack", "i386-threads", "a64-threads", "arm-threads"]


@pytest.mark.parametrize("case", STACKWALKED)
def test_minidump_stackwalk_reads_the_dump(case: str, cores: Cores, tmp_path: Path) -> None:
    """rust-minidump on the dump: a Linux system of the core's CPU, the crash (signal, address,
    thread), every module at its place with the debug id dump_syms gives its file, and every
    thread's frames ours (pc, module, offset, trust) up to where it scans."""
    assert os.path.exists(MINIDUMP_STACKWALK), ".ci/setup installs minidump-stackwalk"
    made = cores(case)
    core, dump = written(made, tmp_path / f"{case}.dmp")
    ids = symbols_of(core, tmp_path / "symbols")
    theirs = minidump_stackwalk(dump, tmp_path / "symbols")
    ours = Minidump.open(dump, **made.open_options).to_dict()
    by_tid = {t["tid"]: t for t in ours["threads"]}
    assert theirs["system_info"]["os"] == "Linux"
    crash = theirs["crash_info"]
    assert crash["crashing_thread"] == 0
    assert theirs["threads"][0]["thread_id"] == ours["crash"]["thread"] == core.crashing_tid
    assert crash["type"] == ours["crash"]["reason"]
    assert int(crash["address"], 16) == int(ours["crash"]["address"] or "0", 16)
    # Each module with a build id recorded: the debug id dump_syms gives its file, its symbols
    # read where a frame needed them.
    their_modules = {int(m["base_addr"], 16): m for m in theirs["modules"]}
    for m in core.modules:
        if m.build_id and m.file and m.path != "[vdso]":
            module = their_modules[m.start]
            assert module["debug_id"] == ids[m.path], module
            assert not module["missing_symbols"], module
    for thread in theirs["threads"]:
        tid = thread["thread_id"]
        mine = [(int(f["pc"], 16), f["trust"]) for f in real_frames(by_tid[tid])]
        # Theirs: a caller's pc is inside its call instruction: the return address - 1 (x86),
        # - 4 (aarch64), - 2 (arm, from the return address with its Thumb bit; ours has none).
        shift = {"x86_64": 1, "i386": 1, "aarch64": 4, "arm": 2}[ours["arch"]]
        thumb = ~1 if ours["arch"] == "arm" else ~0
        their = [((int(f["offset"], 16) + shift * (f["trust"] != "context")) & thumb, f["trust"])
                 for f in thread["frames"]]  # fmt: skip
        split = next((i for i, (a, b) in enumerate(zip(mine, their, strict=False)) if a != b), None)
        if split is None:
            # Theirs may go on past the end of ours by scanning (past _start, clone).
            assert their[: len(mine)] == mine, (tid, mine, their)
            assert all(trust == "scan" for _, trust in their[len(mine) :]), (tid, their)
            continue
        # Where theirs differs it guessed (a scan, or a frame pointer where it has no CFI) and
        # ours is by CFI, as on the core (proven against eu-stack and gdb there).
        assert their[split][1] in ("scan", "frame_pointer"), (tid, mine[split], their[split])
        assert mine[split][1] == "cfi", (tid, mine[split], their[split])


def test_stack_bytes_cuts_each_stack(cores: Cores, tmp_path: Path) -> None:
    """With ``stack_bytes`` smaller than the crashing thread's stack, the dump's walk of it is
    the core's first frames and stops where the kept memory ends; the dump is smaller."""
    made = cores("deep")
    core, whole = written(made, tmp_path / "whole.dmp")
    _, cut = written(made, tmp_path / "cut.dmp", stack_bytes=512)
    assert cut.stat().st_size < whole.stat().st_size
    theirs = core.to_dict()["threads"][0]
    ours = Minidump.open(cut, **made.open_options).to_dict()["threads"][0]
    assert 0 < len(ours["frames"]) < len(theirs["frames"])
    assert ours["frames"] == theirs["frames"][: len(ours["frames"])]
    assert ours["end"] == "memory", ours["end"]


def stackwalk(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stackwalk", *map(str, args)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_command_writes_the_cores_dump(cores: Cores, tmp_path: Path) -> None:
    """``stackwalk minidump-write CORE -o OUT``: ``stackwalk minidump OUT`` gives ``stackwalk
    core CORE``'s frames; a second run replaces the file."""
    made = cores("threads")
    out = tmp_path / "threads.dmp"
    for _ in range(2):
        proc = stackwalk("minidump-write", made.path, "-o", out)
        assert proc.returncode == 0, proc.stderr
        assert f"{out}: {out.stat().st_size} bytes" in proc.stdout
    core = stackwalk("core", made.path, "--json")
    dump = stackwalk("minidump", out, "--json")
    assert core.returncode == dump.returncode == 0, (core.stderr, dump.stderr)
    assert frames(json.loads(dump.stdout)) == frames(json.loads(core.stdout))


def test_a_running_process_is_written_as_it_is(build: Builder, tmp_path: Path) -> None:
    """``--pid``: every thread of a stopped process, each blocked in its call, as ``stackwalk
    pid`` walks it (pcs and functions), from the dump alone; no exception stream (nothing
    crashed); minidump-stackwalk reads its threads."""
    program = build("pid_threads.c", "-O2", "-pthread")
    out = tmp_path / "live.dmp"
    with running([str(program)]) as proc:
        wait_all_blocked(proc.pid)
        with stopped(proc.pid):
            live = stackwalk("pid", str(proc.pid), "--json")
            check_stopped(proc.pid)
            written_proc = stackwalk("minidump-write", "--pid", str(proc.pid), "-o", out)
            check_stopped(proc.pid)
    assert live.returncode == 0 and written_proc.returncode == 0, written_proc.stderr
    dump = stackwalk("minidump", out, "--json")
    assert dump.returncode == 0, dump.stderr
    ours, theirs = json.loads(dump.stdout), json.loads(live.stdout)
    assert ours["pid"] == theirs["pid"] == proc.pid
    assert ours["crashing_thread"] is None and ours.get("crash") is None
    walked = {t["tid"]: [(f["pc"], f["function"]) for f in t["frames"]] for t in theirs["threads"]}
    assert {t["tid"]: [(f["pc"], f["function"]) for f in t["frames"]]
            for t in ours["threads"]} == walked  # fmt: skip
    assert len(walked) == 9
    doc = minidump_stackwalk(out, tmp_path)
    assert sorted(t["thread_id"] for t in doc["threads"]) == sorted(walked)


@pytest.mark.parametrize(
    "args, message",
    [
        (["-o", "x.dmp"], "a core file or --pid PID"),
        (["CORE", "--pid", "1", "-o", "x.dmp"], "a core file or --pid PID"),
        (["CORE", "-o", "."], "is a directory"),
        (["CORE", "-o", "no/such/dir/x.dmp"], "no such directory"),
        (["CORE", "--stack-bytes", "5G", "-o", "x.dmp"], "--stack-bytes"),
        (["CORE", "--memory-around", "-1", "-o", "x.dmp"], "--memory-around"),
        (["NOT-A-CORE", "-o", "x.dmp"], "NOT-A-CORE"),
    ],
)
def test_bad_arguments_are_one_clear_error(
    args: list[str], message: str, cores: Cores, tmp_path: Path
) -> None:
    """Each mistake is one line naming it (exit 2), no traceback, and no file written."""
    core = str(cores("deep").path)
    (tmp_path / "NOT-A-CORE").write_text("hello\n")
    argv = [core if a == "CORE" else a for a in args]
    proc = subprocess.run([sys.executable, "-m", "stackwalk", "minidump-write", *argv],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2, proc
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "x.dmp").exists()
