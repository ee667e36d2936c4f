"""``.debug_frame`` from separate debug files: a program whose own functions have call frame
information only in ``.debug_frame`` (``-fno-asynchronous-unwind-tables -g``), split the way
distributions split packages (``objcopy --only-keep-debug``, ``strip --strip-debug``,
``objcopy --add-gnu-debuglink``), crashed into a core under gdb. Its stack unwinds through those
functions only when the debug file is found where gdb and eu-stack look: by build id under the
debug root, or by ``.gnu_debuglink`` next to the program, in ``.debug/`` next to it, or under
the debug root by the program's directory. eu-stack, given the same places to look
(``--debuginfo-path``), is the reference. Built with ``-fomit-frame-pointer``: without the
debug file nothing but the CFI can unwind these frames.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from corefiles import (
    CRASH_ENV,
    build_id_of,
    eu_addr2line,
    eu_stack,
    gdb_crash_core,
    run,
    stackwalk_core,
)
from realstacks import Builder
from stackwalk.core import Core

FLAGS = ("-O2", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables")
# crash_deep.c's own functions, innermost first, as the crashing thread holds them.
# Where the debug file is missing, frame pointers or a scan could still find callers: these
# tests ask for CFI alone, to see where CFI stops.
CFI_ONLY = ("cfi",)
OWN_FUNCTIONS = ["crash_here", "small_frame", "big_frame", *["recurse"] * 5, "many_saved", "main"]


@dataclass(frozen=True)
class Split:
    executable: Path  # stripped of its debug sections, with a .gnu_debuglink
    debug: Path  # the separate debug file, kept out of every searched place
    other_debug: Path  # the debug file of another build of the program
    core: Path
    directory: Path


def sections(path: Path) -> str:
    return run(["readelf", "-SW", path]).stdout


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory, build: Builder) -> Split:
    directory = tmp_path_factory.mktemp("debugfiles")
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "crash_deep"
    shutil.copy(build("crash_deep.c", *FLAGS), exe)
    assert ".debug_frame" in sections(exe)
    debug = bin_dir / "crash_deep.debug"
    for cmd in (
        ["objcopy", "--only-keep-debug", exe, debug],
        ["strip", "--strip-debug", exe],
        # The link records the debug file's name and CRC-32; objcopy reads it from the cwd.
        ["objcopy", f"--add-gnu-debuglink={debug.name}", exe.name],
    ):
        proc = run(cmd, cwd=bin_dir)
        assert proc.returncode == 0, f"{cmd}: {proc.stderr}"
    assert ".debug_frame" not in sections(exe) and ".gnu_debuglink" in sections(exe)
    assert ".debug_frame" in sections(debug)
    store = directory / "store"
    store.mkdir()
    debug = debug.rename(store / debug.name)
    # Another build (another build id and CRC), to be put where the right one belongs.
    other = store / "other" / "crash_deep.debug"
    other.parent.mkdir()
    proc = run(["objcopy", "--only-keep-debug", build("crash_deep.c", "-O1", *FLAGS[1:]), other])
    assert proc.returncode == 0, proc.stderr
    core = directory / "crash_deep.core"
    gdb_crash_core([str(exe)], core, CRASH_ENV)
    return Split(exe, debug, other, core, directory)


@dataclass(frozen=True)
class Placement:
    debug_root: Path  # what stackwalk is given as its debug root
    eu_path: str  # eu-stack's --debuginfo-path for the same search


@pytest.fixture
def empty_root(tmp_path: Path) -> Path:
    root = tmp_path / "empty-root"
    root.mkdir()
    return root


@contextlib.contextmanager
def placed(split: Split, where: str, debug: Path, root: Path) -> Iterator[Placement]:
    """Put ``debug`` where one of the searches finds it (``where``), for the time of a test."""
    exe_dir = split.executable.parent
    empty_eu_path = f":.debug:{root}"  # eu-stack's default search, with our root for its own
    if where == "build-id":
        build_id = build_id_of(str(split.executable))
        target = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    elif where == "next-to":
        target = exe_dir / "crash_deep.debug"
    elif where == "dot-debug":
        target = exe_dir / ".debug" / "crash_deep.debug"
    elif where == "root-dir":
        target = root / os.path.relpath(exe_dir, "/") / "crash_deep.debug"
    else:
        raise LookupError(where)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(debug, target)
    try:
        yield Placement(root, str(root) if where in ("build-id", "root-dir") else empty_eu_path)
    finally:
        target.unlink()


@pytest.mark.parametrize("where", ["build-id", "next-to", "dot-debug", "root-dir"])
def test_debug_frame_of_the_separate_debug_file(where: str, split: Split, empty_root: Path) -> None:
    with placed(split, where, split.debug, empty_root) as place:
        core = Core.open(split.core, debug_root=place.debug_root)
        reference = eu_stack(str(split.core), str(split.executable),
                             debuginfo_path=place.eu_path)  # fmt: skip
        (thread,) = core.threads
        trace = thread.unwind()
        doc = core.to_dict()
        plain = core.to_dict(inline=False)["threads"][0]["frames"]
    # Source lines from the debug file's DWARF too: the line of each frame's lookup pc (the pc
    # for frame 0, the return address - 1 for callers) as eu-addr2line reads it there.
    own = [f for f in plain if f["module"] == str(split.executable)]
    assert len(own) >= len(OWN_FUNCTIONS)
    for frame in own:
        lookup = int(frame["module_offset"], 16) - (1 if frame["index"] else 0)
        _, file, line = eu_addr2line(split.debug, lookup)[0]
        assert (frame["file"], frame["line"]) == (file, line), frame
    theirs = reference.pcs(thread.tid)
    assert trace.pcs == theirs, f"ours {[hex(p) for p in trace.pcs]}\neu-stack {theirs}"
    assert trace.end == "end_of_stack", trace.end_detail
    frames = doc["threads"][0]["frames"]
    functions = [f["function"] for f in frames]
    assert functions[: len(OWN_FUNCTIONS)] == OWN_FUNCTIONS
    # Found by the debug file's CFI, not by a fallback.
    assert [f["trust"] for f in frames] == ["context"] + ["cfi"] * (len(frames) - 1)
    assert functions[-1] == "_start"
    assert core.unwinder.debug_file(str(split.executable)) is not None


def test_without_the_debug_file_the_walk_stops_where_cfi_is_missing(
    split: Split, empty_root: Path
) -> None:
    core = Core.open(split.core, debug_root=empty_root, strategies=CFI_ONLY)
    (thread,) = core.threads
    trace = thread.unwind()
    assert trace.end == "no_unwind_info"
    assert len(trace.frames) == 1
    assert "crash_deep" in trace.end_detail
    assert core.unwinder.debug_file(str(split.executable)) is None


@pytest.mark.parametrize("where", ["build-id", "next-to"])
def test_a_debug_file_of_another_build_is_not_used(
    where: str, split: Split, empty_root: Path
) -> None:
    """gdb's checks: the build id must match (build-id path), or the CRC-32 the link records."""
    with placed(split, where, split.other_debug, empty_root) as place:
        core = Core.open(split.core, debug_root=place.debug_root, strategies=CFI_ONLY)
        (thread,) = core.threads
        trace = thread.unwind()
    assert trace.end == "no_unwind_info"
    assert len(trace.frames) == 1


def test_cli_debug_root(split: Split, empty_root: Path) -> None:
    with placed(split, "build-id", split.debug, empty_root) as place:
        proc = stackwalk_core(split.core, "--json", "--debug-root", place.debug_root)
    without = stackwalk_core(
        split.core, "--json", "--debug-root", empty_root, "--strategies", ",".join(CFI_ONLY)
    )
    assert proc.returncode == 0, proc.stderr
    frames = json.loads(proc.stdout)["threads"][0]["frames"]
    assert [f["function"] for f in frames][: len(OWN_FUNCTIONS)] == OWN_FUNCTIONS
    assert without.returncode == 1, without.stderr
    assert len(json.loads(without.stdout)["threads"][0]["frames"]) == 1


def test_perf_profiles_use_the_separate_debug_file(build: Builder, tmp_path: Path) -> None:
    """``stackwalk perf`` finds the same debug files: perf_qsort.c built with its CFI only in
    ``.debug_frame``, split, recorded under perf; with its debug file under the debug root (by
    build id) the samples in its own functions unwind to ``_start`` as the others do; without
    it they stop in the program's code, which then has no CFI: at frame 0, or, where frame 0
    is a leaf (its return address at sp: compare_ints called from libc's qsort, fill from
    main), at the first of its callers in the program. Those frames are the same as with the
    debug file."""
    from perfdata import perf_record
    from stackwalk._core import perf_report

    exe = tmp_path / "perf_qsort"
    shutil.copy(build("perf_qsort.c", *FLAGS), exe)
    root = tmp_path / "debug-root"
    build_id = build_id_of(exe)
    debug = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    debug.parent.mkdir(parents=True)
    for cmd in (["objcopy", "--only-keep-debug", exe, debug], ["strip", "--strip-debug", exe]):
        assert run(cmd).returncode == 0
    assert ".debug_frame" not in sections(exe) and ".debug_frame" in sections(debug)
    data = tmp_path / "perf.data"
    home = tmp_path / "home"  # perf's own (see perfdata.perf_env)
    home.mkdir()
    perf_record(data, [exe, "10"], home)

    def own_samples(debug_root: Path) -> list[list[dict[str, object]]]:
        out = tmp_path / f"{debug_root.name}.json"
        summary = perf_report(data, "json", output=out, debug_root=debug_root, inline=False)
        assert summary["error"] is None and summary["samples"] > 50
        samples = [json.loads(line) for line in out.read_text().splitlines()]
        user = [[f for f in s["frames"] if not f["kernel"]] for s in samples]
        return [u for u in user if u and u[0]["module"] == str(exe)]

    found = own_samples(root)
    missing = own_samples(tmp_path / "nowhere")
    assert len(found) == len(missing) > 20
    assert all(u[-1]["function"] == "_start" for u in found)
    pcs = [
        ([f["pc"] for f in u], [f["pc"] for f in v]) for u, v in zip(found, missing, strict=True)
    ]
    assert all(len(v) < len(u) and u[: len(v)] == v for u, v in pcs), pcs[:3]
    assert all(v[-1]["module"] == str(exe) for v in missing)
    assert any(len(v) > 1 for v in missing)


# objcopy's --compress-debug-sections: SHF_COMPRESSED zlib (what `gcc -gz` and Go's linker
# leave, and distributions' debug files), GNU's older .zdebug_frame, SHF_COMPRESSED zstd.
COMPRESSIONS = ("zlib", "zlib-gnu", "zstd")


def compressed_copy(source: Path, target: Path, compression: str) -> Path:
    """A copy of an ELF file with its debug sections compressed, checked by readelf."""
    proc = run(["objcopy", f"--compress-debug-sections={compression}", source, target])
    assert proc.returncode == 0, proc.stderr
    listing = sections(target)
    if compression == "zlib-gnu":
        assert ".zdebug_frame" in listing
    else:
        (line,) = [row for row in listing.splitlines() if ".debug_frame" in row]
        assert " C " in line, line  # SHF_COMPRESSED
    return target


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_compressed_debug_frame(compression: str, build: Builder, tmp_path: Path) -> None:
    """A program whose only CFI is its own .debug_frame, compressed: every frame by that CFI
    alone, the pcs eu-stack gives with the same program uncompressed (objcopy changes no byte
    of code, nor the build id) on the same core."""
    plain = tmp_path / "crash_deep.plain"
    shutil.copy(build("crash_deep.c", *FLAGS), plain)
    exe = compressed_copy(plain, tmp_path / "crash_deep", compression)
    assert build_id_of(str(exe)) == build_id_of(str(plain))
    core = tmp_path / "crash_deep.core"
    gdb_crash_core([str(exe)], core, CRASH_ENV)
    trace = Core.open(core, exe, strategies=CFI_ONLY).threads[0].unwind()
    reference = eu_stack(str(core), str(plain))
    (theirs,) = reference.threads.values()
    assert trace.pcs == [frame.pc for frame in theirs], trace.end_detail
    assert trace.end == "end_of_stack", trace.end_detail
    assert len(trace.frames) > len(OWN_FUNCTIONS)
    doc = stackwalk_core(core, exe, "--json", "--strategies", "cfi")
    assert doc.returncode == 0, doc.stderr
    functions = [f["function"] for f in json.loads(doc.stdout)["threads"][0]["frames"]]
    assert functions[: len(OWN_FUNCTIONS)] == OWN_FUNCTIONS


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_compressed_separate_debug_file(
    compression: str, split: Split, empty_root: Path, tmp_path: Path
) -> None:
    """The separate debug file's .debug_frame compressed, as distributions ship them: the same
    frames as with it uncompressed (eu-stack's, given the uncompressed file)."""
    debug = compressed_copy(split.debug, tmp_path / split.debug.name, compression)
    with placed(split, "build-id", debug, empty_root) as place:
        core = Core.open(split.core, debug_root=place.debug_root, strategies=CFI_ONLY)
        trace = core.threads[0].unwind()
    with placed(split, "build-id", split.debug, empty_root) as place:
        reference = eu_stack(str(split.core), str(split.executable),
                             debuginfo_path=place.eu_path)  # fmt: skip
    (theirs,) = reference.threads.values()
    assert trace.pcs == [frame.pc for frame in theirs], trace.end_detail
    assert trace.end == "end_of_stack", trace.end_detail
    assert len(trace.frames) > len(OWN_FUNCTIONS)
