"""Where modules are placed in a core's address space, on cores of programs whose mappings
trip a placement by span (tests/programs/crash_mapped_twice.c, crash_jit.c).

Reference: gdb's backtrace of the same core. gdb places libraries from the dynamic linker's
link map, not from the core's file mappings, so a second mapping of a library does not move it;
and it reads no module at a pc outside every library and the executable's sections.
"""

from __future__ import annotations

import json
from typing import Any

from corefiles import Cores, MadeCore, core_notes, same_function, stackwalk_core


def cli_doc(made: MadeCore) -> dict[str, Any]:
    proc = stackwalk_core(made.path, made.executable, "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def crashing_thread(doc: dict[str, Any]) -> dict[str, Any]:
    (thread,) = [t for t in doc["threads"] if t["tid"] == doc["crashing_thread"]]
    return thread


def pcs(thread: dict[str, Any]) -> list[int]:
    return [int(f["pc"], 16) for f in thread["frames"]]


def test_a_library_mapped_again_below_itself_keeps_its_place(cores: Cores) -> None:
    made = cores("mapped-twice")
    notes = core_notes(str(made.path))
    libc = [m for m in made.gdb.solibs if "/libc.so" in m[0]]
    assert libc, made.gdb.solibs
    # The core shows the copy: libc's file mapped at offset 0 twice, once below its image.
    libc_maps = [f for f in notes.files if f[3].endswith("/libc.so.6")]
    at_zero = sorted(start for start, _, offset, _ in libc_maps if offset == 0)
    assert len(at_zero) == 2, libc_maps
    doc = cli_doc(made)
    gdb = made.gdb.thread(doc["crashing_thread"])
    thread = crashing_thread(doc)
    assert pcs(thread) == gdb.pcs
    assert [int(f["sp"], 16) for f in thread["frames"]] == [f.sp for f in gdb.frames]
    assert thread["end"] == "end_of_stack"
    # abort's frames are in libc, named as gdb names them, and libc is one module placed by its
    # real image, not by the copy.
    for ours, theirs in zip(thread["frames"], gdb.frames, strict=True):
        assert ours["module"] is not None
        assert same_function(ours["module"], ours["function"], theirs.function)
    assert "abort" in [f["function"] for f in thread["frames"]]
    (module,) = [m for m in doc["modules"] if m["path"].endswith("/libc.so.6")]
    assert int(module["start"], 16) == at_zero[1]
    assert all(not int(a, 16) <= at_zero[0] < int(b, 16) for a, b in module["ranges"])


def test_a_pc_between_two_mappings_of_the_program_is_in_no_module(cores: Cores) -> None:
    made = cores("jit")
    notes = core_notes(str(made.path))
    exe_maps = sorted((s, e) for s, e, _, path in notes.files if path == str(made.executable))
    doc = cli_doc(made)
    thread = crashing_thread(doc)
    gdb = made.gdb.thread(doc["crashing_thread"])
    fault = pcs(thread)[0]
    # The pc is inside the span of the program's mappings, and in none of them.
    assert exe_maps[0][0] < fault < exe_maps[-1][1]
    assert not any(s <= fault < e for s, e in exe_maps)
    top = thread["frames"][0]
    assert (top["module"], top["function"], top["module_offset"]) == (None, None, None)
    (exe,) = [m for m in doc["modules"] if m["path"] == str(made.executable)]
    assert all(not int(a, 16) <= fault < int(b, 16) for a, b in exe["ranges"])
    # Its caller is main, found by the return address the call left at sp, as gdb finds it.
    assert pcs(thread) == gdb.pcs
    assert thread["frames"][1]["function"] == "main" == gdb.frames[1].function
