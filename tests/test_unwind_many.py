"""``Unwinder.unwind_many``: many stacks in one call, without the GIL, over every CPU. The batch
must give, stack for stack, what ``unwind`` gives one at a time (and so gdb's frames on real
stacks), whatever kind of buffer holds the memory, in the order the stacks were given."""

from __future__ import annotations

import array
import mmap
import signal
from typing import Any

import pytest
import stackwalk
from realstacks import O2, PROGRAMS, SYSTEM_PYTHON, Builder, Captures, assert_gdb_frames
from stackwalk.capture import Capture

# Real stacks stopped under gdb: C at -O2, C++, a signal handler's, and python3's (93 frames).
CASES = [
    ("deep.c", O2, "stop_here", "gcc"),
    ("cxx.cpp", ("-O2",), "stop_here", "g++"),
    ("signal.c", ("-O2",), "handler_leaf", "gcc"),
    ("pyrecurse.py", (), "math_gcd", None),
]


@pytest.fixture(scope="module")
def stacks(build: Builder, captures: Captures) -> list[Capture]:
    out = []
    for source, flags, breakpoint, compiler in CASES:
        if compiler is None:
            argv = [SYSTEM_PYTHON, "-I", "-S", str(PROGRAMS / source)]
        else:
            argv = [str(build(source, *flags, compiler=compiler))]
        out.append(captures(argv, breakpoint))
    return out


def _unwinder(cap: Capture) -> stackwalk.Unwinder:
    """An unwinder with the capture's modules (each program's own: under gdb, without ASLR,
    the programs' modules overlap one another)."""
    uw = stackwalk.Unwinder(cap.arch)
    cap.add_modules_to(uw)
    return uw


def _frames(trace: Any) -> list[tuple[int, int, int | None, str]]:
    return [(f.pc, f.sp, f.cfa, f.trust) for f in trace.frames]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_a_batch_gives_what_unwind_gives(stacks: list[Capture], case: int) -> None:
    cap = stacks[case]
    uw = _unwinder(cap)
    one = uw.unwind(cap.regs, cap.memory)
    assert_gdb_frames(one, cap)
    # Enough stacks for every worker thread, and the calling one once it has taken them all, to
    # walk several chunks of them (64 stacks each, the last one short); every third one cut to
    # its first 256 bytes, so that the batch mixes walks of different lengths and ends.
    short = [(cap.memory[0][0], cap.memory[0][1][:256])]
    given = [(cap.regs, short if i % 3 == 2 else cap.memory) for i in range(1000)]
    batch = uw.unwind_many(given)
    assert len(batch) == len(given)
    cut = uw.unwind(cap.regs, short)
    assert len(cut) < len(one), "the cut stack must walk less far"
    for i, trace in enumerate(batch):
        want = cut if i % 3 == 2 else one
        assert _frames(trace) == _frames(want), f"stack {i}"
        assert (trace.end, trace.end_detail) == (want.end, want.end_detail), f"stack {i}"
    assert_gdb_frames(batch[0], cap)
    assert batch.ends == [t.end for t in batch]


def test_a_list_changed_between_stacks_is_read_again(stacks: list[Capture]) -> None:
    """A stack given the memory list the stack before had shares the regions read for it (the
    threads of one snapshot: the list is read once); where the stacks come from a generator,
    which may change that list between two stacks, each stack's memory is read as it is."""
    cap = stacks[0]
    uw = _unwinder(cap)
    short = [(cap.memory[0][0], cap.memory[0][1][:256])]
    full, cut = _frames(uw.unwind(cap.regs, cap.memory)), _frames(uw.unwind(cap.regs, short))
    assert len(cut) < len(full)
    memory: list[tuple[int, bytes]] = []

    def given() -> Any:
        for i in range(300):
            memory[:] = short if i % 3 == 2 else cap.memory
            yield cap.regs, memory

    batch = uw.unwind_many(given())
    assert [_frames(batch[i]) for i in range(300)] == [
        cut if i % 3 == 2 else full for i in range(300)
    ]
    # The same list given again and again, in a list of stacks: read once, the same frames.
    again = uw.unwind_many([(cap.regs, memory)] * 300)
    assert all(_frames(again[i]) == cut for i in range(300))


def test_a_registers_object_changed_between_stacks_is_read_again(stacks: list[Capture]) -> None:
    """A stack given the Registers object the stack before had shares the registers taken for
    it; where the stacks come from a generator, which may change the object between two
    stacks, each stack's registers are taken as they are."""
    cap = stacks[0]
    uw = _unwinder(cap)
    other = {**cap.regs, "rsp": 8}  # no memory there: the walk ends at once
    full, cut = _frames(uw.unwind(cap.regs, cap.memory)), _frames(uw.unwind(other, cap.memory))
    assert len(cut) < len(full)
    regs = stackwalk.Registers(cap.arch, cap.regs)

    def given() -> Any:
        for i in range(300):
            regs.update(other if i % 3 == 2 else cap.regs)
            yield regs, cap.memory

    batch = uw.unwind_many(given())
    assert [_frames(batch[i]) for i in range(300)] == [
        cut if i % 3 == 2 else full for i in range(300)
    ]
    # The same object given again and again, in a list of stacks: the same frames.
    again = uw.unwind_many([(regs, cap.memory)] * 300)
    assert all(_frames(again[i]) == cut for i in range(300))


def test_flat_buffers(stacks: list[Capture]) -> None:
    cap = stacks[0]
    uw = _unwinder(cap)
    given = [(cap.regs, cap.memory)] * 5 + [(cap.regs, [])]
    batch = uw.unwind_many(given, max_frames=4)
    pcs, offsets = batch.pcs, batch.offsets
    assert (pcs.format, pcs.itemsize, offsets.format) == ("Q", 8, "Q")
    assert len(offsets) == len(batch) + 1 and offsets[0] == 0 and offsets[-1] == len(pcs)
    for i in range(len(batch)):
        assert list(pcs[offsets[i] : offsets[i + 1]]) == batch[i].pcs
    assert batch[0].pcs == uw.unwind(cap.regs, cap.memory, max_frames=4).pcs
    assert len(batch[0]) == 4 and batch[0].end == "frame_limit"
    # No memory: frame 0 only, ended by the read that failed.
    assert len(batch[-1]) == 1 and batch[-1].end == "memory"
    assert batch[-1].pcs == batch[len(batch) - 1].pcs
    with pytest.raises(IndexError):
        batch[len(batch)]
    assert len(uw.unwind_many([])) == 0 and len(uw.unwind_many([]).offsets) == 1
    # The flat buffers are made at their first use, of every chunk's pcs (a thousand stacks
    # are many chunks), after traces were taken by index, and are the same at every use.
    many = uw.unwind_many([(cap.regs, cap.memory)] * 1000, max_frames=4)
    last = many[999].pcs
    flat = many.pcs.tolist()
    assert flat == [pc for i in range(1000) for pc in many[i].pcs]
    assert many.pcs.tolist() == flat and many.offsets.tolist() == list(range(0, 4001, 4))
    assert many[999].pcs == last


def test_memory_from_any_buffer(stacks: list[Capture], tmp_path: Any) -> None:
    """bytes, bytearray, memoryview (also of a slice of a larger buffer) and mmap give the same
    walk: the regions are read in place."""
    cap = stacks[0]
    uw = _unwinder(cap)
    (start, data), *rest = cap.memory
    assert not rest, "gdb's capture is one region"
    padded = b"\xee" * 64 + data + b"\xee" * 64
    path = tmp_path / "stack.bin"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        kinds = [data, bytearray(data), memoryview(data), memoryview(padded)[64:-64], mapped]
        batch = uw.unwind_many([(cap.regs, [(start, kind)]) for kind in kinds])
        want = _frames(uw.unwind(cap.regs, cap.memory))
        assert [_frames(t) for t in batch] == [want] * len(kinds)


def test_core_memory_in_a_batch(stacks: list[Capture], build: Builder, captures: Captures) -> None:
    """A core's MappedMemory serves every thread of a batch, as it serves each thread's unwind."""
    cap = captures([str(build("deep.c", *O2))], "stop_here", core=True)
    assert cap.core is not None
    core = stackwalk.Core.open(cap.core)
    batch = core.unwinder.unwind_many([(t.regs, core.memory) for t in core.threads])
    assert [_frames(t) for t in batch] == [_frames(t.unwind()) for t in core.threads]
    assert batch[0].pcs == cap.gdb_pcs


def test_bad_stacks_are_named(stacks: list[Capture]) -> None:
    cap = stacks[0]
    uw = _unwinder(cap)
    good = (cap.regs, cap.memory)
    with pytest.raises(stackwalk.StackwalkError, match="stack 1 is not a .regs, memory. pair"):
        uw.unwind_many([good, 5])
    without_sp = {k: v for k, v in cap.regs.items() if k != "rsp"}
    with pytest.raises(stackwalk.StackwalkError, match="stack 2: regs lacks the stack pointer"):
        uw.unwind_many([good, good, (without_sp, cap.memory)])
    with pytest.raises(stackwalk.MemoryReadError, match="stack 1: memory region 0 .* not a byte"):
        uw.unwind_many([good, (cap.regs, [(0x1000, 12)])])
    for start in (-1, 1 << 64, "0x1000"):
        with pytest.raises(stackwalk.MemoryReadError, match="stack 1: memory region 0 is not a"):
            uw.unwind_many([good, (cap.regs, [(start, b"")])])
    # Past the first chunks, which are being walked as the rest is read: the error, and a
    # batch that works after it.
    with pytest.raises(stackwalk.StackwalkError, match="stack 300 is not a .regs, memory. pair"):
        uw.unwind_many([good] * 300 + [None] + [good] * 10)
    assert len(uw.unwind_many([good] * 301)) == 301


def test_a_signal_frame_is_cached_like_any_other(stacks: list[Capture]) -> None:
    """The walk through a signal handler's stack meets glibc's __restore_rt, whose CFI restores
    every register: more rules than the compact rule cache holds. A second walk, and every
    stack of a batch, must still parse no CFI again."""
    cap = stacks[2]
    uw = _unwinder(cap)
    first = uw.unwind(cap.regs, cap.memory)
    assert any(f.signal_frame for f in first.frames), "the stack runs through a signal frame"
    hits, misses = uw.cache_stats
    again = uw.unwind(cap.regs, cap.memory)
    assert _frames(again) == _frames(first)
    # One lookup per frame: each frame's rules, the last one's saying the stack ends there.
    assert uw.cache_stats == (hits + len(first), misses), "every lookup a hit"


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_a_registers_object_gives_what_a_dict_gives(stacks: list[Capture], case: int) -> None:
    """A Registers, filled by name or loaded from a uint64 array in Registers.names' order and
    reused from call to call, walks as the dict of gdb's registers walks, in unwind and in
    unwind_many."""
    cap = stacks[case]
    uw = _unwinder(cap)
    want = uw.unwind(cap.regs, cap.memory)
    assert_gdb_frames(want, cap)
    by_name = stackwalk.Registers(cap.arch, cap.regs)
    names = stackwalk.Registers.names(cap.arch)
    # A thread's registers as a profiler holds them: every one, those unknown as 0.
    loaded = stackwalk.Registers(cap.arch)
    loaded.load(array.array("Q", [cap.regs.get(name, 0) for name in names]))
    assert loaded.to_dict() == {name: cap.regs.get(name, 0) for name in names}
    for regs in (by_name, loaded, by_name):
        got = uw.unwind(regs, cap.memory)
        assert _frames(got) == _frames(want)
        assert (got.end, got.end_detail) == (want.end, want.end_detail)
    batch = uw.unwind_many([(by_name, cap.memory), (cap.regs, cap.memory), (loaded, cap.memory)])
    assert [_frames(t) for t in batch] == [_frames(want)] * 3


def test_a_registers_object_changed_after_a_batch(stacks: list[Capture]) -> None:
    """A batch's stacks share their Registers object's values, not copy them: the object
    changed after one batch gives its new values to the next, and the first batch's traces
    stay as they were."""
    cap = stacks[0]
    uw = _unwinder(cap)
    regs = stackwalk.Registers(cap.arch, cap.regs)
    first = uw.unwind_many([(regs, cap.memory)] * 100)
    sp = "rsp" if cap.arch == "x86_64" else "sp"
    regs[sp] = 8  # no memory there: frame 0 only
    second = uw.unwind_many([(regs, cap.memory)] * 100)
    assert [len(t) for t in second] == [1] * 100 and second[0].end == "memory"
    assert all(t.pcs == cap.gdb_pcs for t in first)
    assert _frames(uw.unwind(regs, cap.memory)) == _frames(second[99])


def test_registers_are_checked(stacks: list[Capture]) -> None:
    cap = stacks[0]
    uw = _unwinder(cap)
    regs = stackwalk.Registers(cap.arch, cap.regs)
    assert regs["rsp"] == cap.regs["rsp"] and regs["rip"] == cap.regs["rip"]
    with pytest.raises(KeyError):
        regs["eflags"] = 0
    with pytest.raises(ValueError, match="2 values for the 17 registers of x86_64"):
        regs.load([1, 2])
    with pytest.raises(ValueError, match="wider than a i386 register"):
        stackwalk.Registers("i386", [1 << 32] * len(stackwalk.Registers.names("i386")))
    with pytest.raises(stackwalk.ArchError, match="registers of aarch64, the unwinder is for"):
        uw.unwind(stackwalk.Registers("aarch64", {"pc": 1, "sp": 2}), cap.memory)
    no_sp = stackwalk.Registers(cap.arch, {k: v for k, v in cap.regs.items() if k != "rsp"})
    with pytest.raises(stackwalk.StackwalkError, match="stack 1: regs lacks the stack pointer"):
        uw.unwind_many([(regs, cap.memory), (no_sp, cap.memory)])


def test_one_unwinder_walks_stack_after_stack(stacks: list[Capture]) -> None:
    """``unwind`` keeps its scratch (the regions and their holders) from one call to the next:
    an unwinder given the same stack with memory of every kind, cut short or whole, with a
    refused call between them, gives each walk what a fresh unwinder gives it (whole: gdb's
    frames; cut short: fewer, the same as far as they go), never regions of an earlier call."""
    for cap in stacks:
        uw = _unwinder(cap)
        (start, data), *rest = cap.memory
        whole = _frames(_unwinder(cap).unwind(cap.regs, cap.memory))
        short_memory = [(start, data[:256])]
        short = _frames(_unwinder(cap).unwind(cap.regs, short_memory))
        assert len(short) < len(whole) and short == whole[: len(short)]
        for kind in (bytes, bytearray, memoryview, lambda d: array.array("B", d)):
            with pytest.raises(stackwalk.MemoryReadError, match="memory region 1 "):
                uw.unwind(cap.regs, [(start, data), (start + len(data), 42)])
            ours = uw.unwind(cap.regs, [(start, kind(data)), *rest])
            assert _frames(ours) == whole
            assert_gdb_frames(ours, cap)
            assert _frames(uw.unwind(cap.regs, [(start, kind(data[:256]))])) == short


def _alarm(signum: int, frame: object) -> None:
    raise TimeoutError("a forked worker's batch never ended")


def test_a_batch_in_a_worker_forked_after_the_pool_started(stacks: list[Capture]) -> None:
    """A worker forked (``core --dir``, ``triage --jobs``) from a process whose thread pool had
    started has none of the pool's threads: its batches run on its own thread, and give the
    parent's frames (they waited for the missing threads forever)."""
    from stackwalk._workers import forked_map

    cap = stacks[0]
    uw = _unwinder(cap)
    given = [(cap.regs, cap.memory)] * 300
    here = [_frames(t) for t in uw.unwind_many(given)]  # the pool is started here

    def in_worker(n: int) -> list[list[tuple[int, int, int | None, str]]]:
        return [_frames(t) for t in uw.unwind_many(given[:n])]

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(300)  # a bound only, so that a hang fails
    try:
        results = list(forked_map(in_worker, [300, 100], 2))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert results == [here, here[:100]]
