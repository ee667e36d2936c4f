"""`stackwalk perf` on JIT code: node recorded with `perf record --call-graph dwarf` while it
runs JavaScript compiled by V8, with `--perf-basic-prof` (node writes /tmp/perf-PID.map, the
names of the code it makes, as perf expects them) and `--interpreted-frames-native-stack` (each
interpreted function gets code of its own, so it has a name and a frame of its own).

The references: perf script names JIT code from the same map, but its unwinder (libdw) has no
CFI for that code and stops at the first JIT frame. Its frames must be a prefix of ours, with
the same names. Past that point the walk follows V8's frame-pointer chain, and three checks
prove it independently: the JavaScript frames form the program's own call path (innerMost,
then middle up to five times, then outer, then the script's top level); each return address
into node's own code follows a call instruction (objdump); the stack reaches `_start`."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from perfdata import (
    PERF,
    our_user_addresses,
    perf_env,
    perf_record,
    perf_script,
    run,
    stackwalk_perf,
)
from stackwalk._core import perf_samples

# outer -> middle x5 -> innerMost, as often as outer is asked.
BUSY_FUNCTIONS = """
function innerMost(n) { let s = 0; for (let i = 0; i < n; i++) s += Math.sqrt(i) * i; return s; }
function middle(d, n) { return d === 0 ? innerMost(n) : middle(d - 1, n) + 1; }
function outer(rounds) {
  let t = 0; for (let r = 0; r < rounds; r++) t += middle(4, 20000); return t;
}
"""
# A fixed amount of work (not a time: the samples must not depend on the machine's load).
BUSY_JS = BUSY_FUNCTIONS + "console.log(outer(6000));\n"
# Which JavaScript function calls which, in the program above (callee -> its possible callers).
CALLERS = {"innerMost": {"middle"}, "middle": {"middle", "outer"}, "outer": {""}}
# A perf map entry: "JS:" with V8's tier mark (~ interpreted, ^ baseline, + maglev, * turbofan).
JS_NAME = re.compile(r"JS:[~^+*]?(?P<name>\S*) (?P<file>\S+):\d+:\d+")


@pytest.fixture(scope="module")
def node_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the recording, perf's home, the script): the perf map stays in /tmp while the module's
    tests run, and is removed after."""
    node = shutil.which("node")
    assert node, "node is on this kind of machine (see /work/.library/env)"
    tmp = tmp_path_factory.mktemp("node-jit")
    script = tmp / "busy.js"
    script.write_text(BUSY_JS)
    home = tmp / "home"
    home.mkdir()
    data = tmp / "node.perf.data"
    argv = [node, "--perf-basic-prof", "--interpreted-frames-native-stack", str(script)]
    perf_record(data, argv, home, cwd=tmp)  # node writes its v8 logs where it runs
    pids = {int(p) for p in run([PERF, "script", "-F", "pid", "-i", data], env=perf_env(home))
            .stdout.split()}  # fmt: skip
    maps = [Path(f"/tmp/perf-{pid}.map") for pid in pids]
    try:
        assert any(m.exists() for m in maps), "node wrote no perf map"
        yield data, home, script
    finally:
        for m in maps:
            m.unlink(missing_ok=True)


def _ours(data: Path, *options: str) -> dict[tuple[int, int, int], list[dict[str, Any]]]:
    """Our samples (--json) by (pid, tid, time): their user frames."""
    proc = stackwalk_perf(data, "--no-inline", "--json", *options)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "//anon" not in proc.stderr, "an anonymous mapping is no missing file"
    out = {}
    for line in proc.stdout.splitlines():
        s = json.loads(line)
        out[(s["pid"], s["tid"], s["time"])] = [f for f in s["frames"] if not f["kernel"]]
    return out


def _as_printed(frames: list[dict[str, Any]]) -> list[tuple[str | None, int, str | None]]:
    """Our frames as perf script prints them: (module, address, name of JIT code): JIT code at
    its runtime address (less one for a caller), the rest as perfdata.our_user_addresses."""
    out = []
    for index, f in enumerate(frames):
        if _is_jit(f["module"]):
            out.append((f["module"], int(f["pc"], 16) - (index > 0), f["function"]))
        else:
            [(module, address)] = (
                our_user_addresses([frames[index - 1], f])[index > 0 :]
                if index
                else our_user_addresses([f])
            )
            out.append((module, address, None))
    return out


def _return_candidates(
    data: Path, key: tuple[int, int, int], max_samples: int = 10**7
) -> dict[str, int]:
    """Where a sample's return address can be once its function has popped its frame record:
    the word at sp (the first 8 bytes of the stack it captured: before `ret`), and each
    register but the pc, sp and fp (V8's interpreter pops it into one, then pushes it back)."""
    samples = perf_samples(data, max_samples=max_samples)["samples"]
    [(regs, stack)] = [(s[3], s[5]) for s in samples if (s[0], s[1], s[2]) == key]
    out = {"[sp]": int.from_bytes(stack[:8], "little")}
    out.update((name, v) for name, v in regs.items() if name not in ("rip", "rsp", "rbp"))
    return out


def _map_name(pid: int, address: int) -> str | None:
    """The name of the code of the process's perf map that holds ``address`` (None: none)."""
    for line in Path(f"/tmp/perf-{pid}.map").read_text().splitlines():
        start, size, name = line.split(" ", 2)
        if int(start, 16) <= address < int(start, 16) + int(size, 16):
            return name
    return None


def _is_jit(dso: str | None) -> bool:
    return dso is not None and re.fullmatch(r"/tmp/perf-\d+\.map", dso) is not None


def _ends_in_call(node: str, start: int, return_address: int) -> bool:
    """objdump of the function from its start up to the return address: its last instruction
    is a call."""
    proc = run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start:#x}",
                f"--stop-address={return_address:#x}", node])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    instructions = re.findall(r"^\s+[0-9a-f]+:\t(\S+)", proc.stdout, re.M)
    return bool(instructions) and instructions[-1].startswith("call")


def test_jit_frames_named_and_walked(node_recording: tuple[Path, Path, Path]) -> None:
    data, home, script = node_recording
    theirs = {s.key: s for s in perf_script(data, home)}
    ours = _ours(data)
    assert ours.keys() == theirs.keys()

    named_by_perf = walked = perf_skipped = 0
    epilogue: list[tuple[int, int, int]] = []  # the sample whose frame 0 skipped its caller
    js = re.escape(str(script))
    for key, sample in theirs.items():
        mine = ours[key]
        perf_frames = [
            (
                f.dso if f.dso != "[unknown]" else None,
                f.address,
                f.symbol if _is_jit(f.dso) else None,
            )
            for f in sample.user_frames
        ]
        if any(_is_jit(module) for module, _, _ in perf_frames):
            # perf script names JIT code as we do, and stops at or soon after it: its frames
            # are a prefix of ours (C++ names aside: perf script drops their parameters).
            printed = _as_printed(mine)
            if printed[: len(perf_frames)] != perf_frames:
                # Or it skipped our frame 1: frame 0 is one of V8's builtins, without CFI and
                # without a frame of its own (called from JavaScript, it tail-calls on), so its
                # return address is at sp, the JavaScript caller's, which we take (a named
                # function of the map); libdw's frame-pointer fallback reads it at fp + 8,
                # the caller's caller's, the frame-pointer-leaf error REFERENCE.md describes.
                assert printed[:1] + printed[2 : len(perf_frames) + 1] == perf_frames, key
                # Ours is proven: a named function of the map, or a call in node's code.
                second = mine[1]
                if _is_jit(second["module"]):
                    assert second["function"], (key, printed[:2])
                else:
                    assert _follows_call(second), (key, second)
                perf_skipped += 1
            named_by_perf += 1
        if not mine or not _is_jit(mine[0]["module"]):
            continue
        jit = [f["function"] for f in mine if _is_jit(f["module"])]
        assert all(jit), (key, mine)
        first = JS_NAME.fullmatch(jit[0])
        if not first or not re.fullmatch(js, first["file"]):
            continue  # node's own JavaScript (its bootstrap, console.log)
        # Frame 0 in the script's code: the frames are the program's call path up to its top
        # level, with no frame of node's own among them (a stale return address that V8's
        # optimized code leaves at sp is no caller), and the native frames past them reach
        # _start.
        names = []
        for f in mine:
            match = JS_NAME.fullmatch(f["function"] or "") if _is_jit(f["module"]) else None
            if not match or not re.fullmatch(js, match["file"]):
                break
            names.append(match["name"])
        assert names and names[-1] == "", f"{key}: no top-level frame of the script: {jit}"
        for i, (callee, caller) in enumerate(itertools.pairwise(names)):
            if caller in CALLERS[callee]:
                continue
            # One exception, for frame 0 alone: a sample in a JavaScript function's epilogue,
            # after its `pop rbp` and before its `ret`, where rbp is its caller's already.
            # Without CFI or code bytes, no frame-pointer walk sees that state (perf's,
            # samply's neither): the caller's caller follows, one frame skipped. A few
            # instructions in hundreds: allowed once a recording, and only when the sample
            # proves it: the return address into the skipped caller is at sp, or in a
            # register (see _return_candidates), in code of the map that calls frame 0's
            # function and is called by frame 1's.
            skipped = any(caller in CALLERS[between] for between in CALLERS[callee])
            assert i == 0 and skipped and not epilogue, (
                f"{key}: {caller!r} does not call {callee!r}: {names}"
            )
            candidates = _return_candidates(data, key)
            held = {where: _map_name(key[0], v) for where, v in candidates.items()}
            proofs = [
                where
                for where, name in held.items()
                if (m := JS_NAME.fullmatch(name or ""))
                and m["name"] in CALLERS[callee]
                and caller in CALLERS[m["name"]]
            ]
            assert proofs, f"{key}: frame 1 skipped, and no return address into it: {held}"
            epilogue.append(key)
        assert names.count("middle") <= 5, names
        assert mine[-1]["function"] == "_start", f"{key}: the walk ends at {mine[-1]}"
        walked += 1
    assert named_by_perf >= 20, f"perf script named JIT code in {named_by_perf} samples"
    assert perf_skipped < named_by_perf, "perf script skipped a frame in every sample"
    assert walked >= 100, f"{walked} samples walked through JavaScript"
    # The way back from JavaScript into node's own code: each return address follows a call.
    returns: Counter[tuple[str, str, str]] = Counter()
    for frames in ours.values():
        for callee, f in itertools.pairwise(frames):
            if _is_jit(callee["module"]) and f["module"] and not _is_jit(f["module"]):
                returns[(f["module"], f["module_offset"], f["function_offset"])] += 1
    assert returns, "no return address into a module after a JIT frame"
    for (module, ra, offset), count in returns.items():
        frame = {"module": module, "module_offset": ra, "function_offset": offset}
        assert _follows_call(frame), f"{module}: {ra} follows no call ({count} samples)"


def _follows_call(frame: dict[str, Any]) -> bool:
    """A caller frame (--json) in a module: its return address follows a call."""
    assert frame["module"] and frame["function_offset"] is not None, frame
    ra = int(frame["module_offset"], 16)
    return _ends_in_call(frame["module"], ra - int(frame["function_offset"], 16), ra)


def test_without_a_perf_map_jit_code_ends_the_walk(
    node_recording: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """With no perf map (another directory), JIT code is unnamed and not walked through: the
    walk stops at the first frame in it, nothing guessed past it."""
    data, _, _ = node_recording
    stopped = 0
    for frames in _ours(data, "--perf-map-dir", str(tmp_path)).values():
        anon = [i for i, f in enumerate(frames) if f["module"] == "//anon"]
        if anon:
            assert anon[0] == len(frames) - 1, frames
            assert frames[-1]["function"] is None, frames
            stopped += 1
    assert stopped >= 100, stopped


def test_the_return_candidates_of_a_sample(node_recording: tuple[Path, Path, Path]) -> None:
    """The epilogue proof's reading (above), on samples that always exist: the word at a
    sample's sp is the first word of the stack it captured, the registers are the sample's,
    and the perf map's lookup names the JIT code at each of our JIT frames' pcs as we name
    it."""
    data, _, _ = node_recording
    [first] = perf_samples(data, max_samples=1)["samples"]
    candidates = _return_candidates(data, (first[0], first[1], first[2]), max_samples=1)
    assert candidates["[sp]"] == int.from_bytes(first[5][:8], "little")
    assert candidates["rcx"] == first[3]["rcx"] and "rip" not in candidates
    looked_up = 0
    for key, frames in _ours(data).items():
        for index, f in enumerate(frames):
            if _is_jit(f["module"]):
                # a caller's name is that of the code holding its call: at pc - 1
                assert _map_name(key[0], int(f["pc"], 16) - (index > 0)) == f["function"], f
                looked_up += 1
        if looked_up > 200:
            break
    assert looked_up > 200
