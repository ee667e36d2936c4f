"""Hostile input, round three (the native core's side): CFI that gives a confident wrong frame,
and numbers from Python that reached a Rust panic.

A damaged ``.eh_frame`` in a file whose build id still matches (one bit flipped) gave a caller
on the stack (0x7fff...) marked ``cfi``: a CFI step's return address must pass the checks
every fallback step's must (in a module's code, off every stack), else the other strategies
are tried, with their trust. The reference, gdb, takes that frame as CFI says; the walk here is
proven by objdump (each return address follows a call of the frame below).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import stackwalk
from corefiles import Cores, Spec, run
from perfdata import call_chain_problems
from stackwalk._core import perf_report
from stackwalk.core import Core

BAD_CFI = Spec("bad-cfi", "crash_bad_cfi.c", ("-O2",))


def in_code(doc: dict[str, Any], pc: int) -> bool:
    """Whether ``pc`` (a return address: pc - 1 is inside the call) is in one of the document's
    modules."""
    return any(int(a, 16) <= pc - 1 < int(b, 16) for m in doc["modules"] for a, b in m["ranges"])


def test_cfi_that_gives_a_stack_address_is_not_a_frame(cores: Cores) -> None:
    """bad_cfi_leaf's CFI leaves out a push of a stack pointer, so by it the word at sp is the
    return address: gdb shows a frame at that stack address (and goes on from it). stackwalk
    refuses it -- a return address on the stack -- and finds bad_cfi_leaf's caller by scanning,
    then the rest by CFI to _start, every return address after a call of the frame below."""
    made = cores.of(BAD_CFI)
    gdb_frames = made.gdb.thread(made.gdb.threads[0].tid).frames
    assert gdb_frames[1].function is None and abs(gdb_frames[1].pc - gdb_frames[0].sp) < 4096
    core = Core.open(made.path, made.executable)
    doc = core.to_dict(inline=False)
    frames = doc["threads"][0]["frames"]
    names = [f["function"] for f in frames]
    assert names[:3] == ["bad_cfi_leaf", "caller", "main"], names
    assert frames[1]["trust"] == "scan" and names[-1] == "_start"
    assert doc["threads"][0]["end"] == "end_of_stack"
    assert not call_chain_problems(frames, targets_in=os.path.realpath(made.executable))


def test_flipped_bits_in_eh_frame_give_no_confident_wrong_frame(
    cores: Cores, tmp_path: Path
) -> None:
    """The crash program's file with one bit of its .eh_frame flipped (its build id still the
    core's, so it is used), for 160 seeded flips. CFI alone (``strategies=["cfi"]``, the walk
    without checks) gives frames whose return address is outside every module's code for some
    of them; with the crash strategies no frame found by CFI has one: the fallbacks take over
    there, with their own trust, and every walk ends."""
    made = cores("deep")
    sections = run(["readelf", "-SW", str(made.executable)]).stdout
    line = next(line for line in sections.splitlines() if " .eh_frame " in line)
    fields = line.split("]", 1)[1].split()
    offset, size = int(fields[3], 16), int(fields[4], 16)
    original = made.executable.read_bytes()
    rng = random.Random(43)
    unchecked = 0  # flips where CFI alone gives a return address outside the code

    def wrong(doc: dict[str, Any]) -> list[dict[str, Any]]:
        frames = [f for t in doc["threads"] for f in t["frames"][1:]]
        cfi = [f for f in frames if f["trust"] in ("cfi", "cfi_scan")]
        return [f for f in cfi if not in_code(doc, int(f["pc"], 16))]

    for flip in range(160):
        damaged = bytearray(original)
        at = offset + rng.randrange(size)
        damaged[at] ^= 1 << rng.randrange(8)
        program = tmp_path / f"flip-{flip}" / made.executable.name
        program.parent.mkdir()
        program.write_bytes(bytes(damaged))
        unchecked += bool(wrong(Core.open(made.path, program, strategies=["cfi"]).to_dict()))
        doc = Core.open(made.path, program).to_dict(inline=False)
        assert not wrong(doc), (flip, at, wrong(doc))
        assert all(t["end"] in stackwalk._core.END_REASONS for t in doc["threads"])
        shutil.rmtree(program.parent)
    assert unchecked > 0, "no flip made CFI give a wrong return address: the test tests nothing"


def test_a_sequence_of_any_claimed_length_is_no_panic() -> None:
    """Registers given a sequence that claims 2**62 items: a ValueError (it was a Rust panic,
    a capacity overflow), after reading one item more than there are registers."""

    class Claims:
        def __len__(self) -> int:
            return 2**62

        def __iter__(self) -> Any:
            return iter(range(10**12))

    with pytest.raises(ValueError, match="more than 17 values"):
        stackwalk.Registers("x86_64", Claims())
    with pytest.raises(ValueError, match="16 values"):
        stackwalk.Registers("x86_64", list(range(16)))


@pytest.mark.parametrize("progress", [float("nan"), -1.0])
def test_progress_that_is_no_delay_is_a_value_error(progress: float, tmp_path: Path) -> None:
    """perf_report(progress=nan) panicked in Rust (a Duration of NaN seconds)."""
    data = tmp_path / "perf.data"
    data.write_bytes(b"")
    with pytest.raises(ValueError, match="progress"):
        perf_report(data, progress=progress)
