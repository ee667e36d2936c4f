"""Source lines and inline frames (``file``, ``line``, ``column``, ``inline`` in the frames of
``stackwalk core --json``) against elfutils' ``eu-addr2line -i -f`` and gdb's ``bt`` on cores
of programs compiled at -O2 -g at test time."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from corefiles import (
    CRASH_ENV,
    build_id_of,
    elf_symbols,
    eu_addr2line,
    gdb_crash_core,
    run,
    same_function,
    symbol_file,
)
from realstacks import PROGRAMS
from stackwalk._core import Symbolizer

GDB_SCRIPT = Path(__file__).parent / "gdb_inline_bt.py"


def core_json(core: Path, exe: Path, *options: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "stackwalk", "core", "--json", str(core), str(exe), *options]
    proc = run(cmd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def bare(name: str | None) -> str | None:
    """A function's name without its parameter list and clone suffix (gdb prints neither)."""
    name = name and re.sub(r"( \[clone [^]]*\])+$", "", name)
    if name is None or not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def comparable(name: str | None) -> str:
    """A C or C++ function's name as both gdb and we give it: without parameters and clone
    suffix; and where lambdas are involved, which gdb demangles as ``<lambda(int)>`` and
    cpp_demangle as ``{lambda(int)#1}`` (and then with the template function's return type),
    up to its first template argument."""
    name = bare(name) or ""
    if "lambda" in name:
        name = re.split(r"[<(]", name)[0].split(" ")[-1]
    return name


def gdb_bt(exe: Path, core: Path, tmp: Path) -> list[dict[str, Any]]:
    out = tmp / "gdb-bt.json"
    env = {**os.environ, "STACKWALK_GDB_OUT": str(out)}
    cmd = ["gdb", "-batch", "-nx", "-iex", "set debuginfod enabled off", "-ex",
           "set backtrace past-main on", "-x", str(GDB_SCRIPT), str(exe), str(core)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert out.exists(), proc.stdout + proc.stderr
    # Tail-call frames (gdb's guesses from DW_TAG_call_site) are neither inline nor real.
    return [f for f in json.loads(out.read_text()) if not f["tailcall"]]


def physical_groups(frames: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The frames as chains: each real frame with the inline frames before it."""
    groups: list[list[dict[str, Any]]] = [[]]
    for frame in frames:
        groups[-1].append(frame)
        if not frame["inline"]:
            groups.append([])
    return groups[:-1]


def check_against_eu_addr2line(frames: list[dict[str, Any]]) -> int:
    """Every frame's chain (function, file, line) is eu-addr2line's at its module offset (less
    one for a caller). Returns how many inline frames there were."""
    inlined = 0
    for n, group in enumerate(physical_groups(frames)):
        real = group[-1]
        assert all(f["pc"] == real["pc"] for f in group)
        if real["module"] is None or real["module"].startswith("["):
            continue
        lookup = int(real["module_offset"], 16) - (1 if n else 0)
        theirs = eu_addr2line(real["module"], lookup)
        if theirs[0][1] is None:  # no DWARF there: no lines from us either
            assert all(f["file"] is None and f["line"] is None for f in group), group
            assert len(group) == 1
            continue
        assert len(group) == len(theirs), (group, theirs)
        for frame, (function, file, line) in zip(group, theirs, strict=True):
            assert frame["line"] == line, (frame, theirs)
            # glibc's relative paths ("./nptl" and "./nptl/pthread_kill.c"): elfutils joins
            # them as "./nptl/./nptl/pthread_kill.c", gdb and addr2line as one path; absolute
            # paths (the tests' programs) are the same.
            same = frame["file"] == file or not file.startswith("/")
            assert same and Path(frame["file"]).name == Path(file).name, (frame, theirs)
            if frame["inline"]:
                assert bare(frame["function"]) == bare(function), (frame, theirs)
        inlined += len(group) - 1
    return inlined


def check_against_gdb(frames: list[dict[str, Any]], gdb: list[dict[str, Any]]) -> None:
    """gdb's inline and real frames, names and lines, are ours from its first frame on. gdb
    leaves out frame 0's innermost inline frames whose code starts at the pc (as if stopped
    before the call: gdb's skip_inline_frames, on cores too); eu-addr2line and eu-stack -i
    show them, and check_against_eu_addr2line compares them."""
    skipped = len(frames) - len(gdb) if len(gdb) < len(frames) else 0
    assert all(f["inline"] and f["pc"] == frames[0]["pc"] for f in frames[:skipped])
    ours = frames[skipped : skipped + len(gdb)]
    assert [int(f["pc"], 16) for f in ours] == [g["pc"] for g in gdb]
    for frame, theirs in zip(ours, gdb, strict=True):
        assert frame["inline"] == theirs["inline"], (frame, theirs)
        # Real frames: the symbol table's name, or an alias of it at the same address
        # (glibc's raise and __GI_raise).
        ours_name, gdb_name = comparable(frame["function"]), comparable(theirs["function"])
        # Real frames: the symbol table's name, or an alias of it at the same address (glibc's
        # raise and __GI_raise). Inline frames: DWARF's name, which for an inlined function
        # without a linkage name is its DW_AT_name, unqualified (__invoke_impl<...>), where gdb
        # adds the enclosing namespaces (std::__invoke_impl<...>).
        same = ours_name == gdb_name or (
            gdb_name.endswith(f"::{ours_name}")
            if frame["inline"]
            else same_function(frame["module"], frame["function"], theirs["function"])
        )
        assert same, (frame, theirs)
        if theirs["file"] is not None:
            assert frame["file"].endswith("/" + theirs["file"].lstrip("./")), (frame, theirs)
            assert frame["line"] == theirs["line"], (frame, theirs)


@pytest.fixture(scope="module")
def inline_core(cores: Any) -> tuple[Path, Path]:
    made = cores("inline")
    return made.executable, made.path


def test_c_inline_chain_is_eu_addr2line_and_gdb(inline_core: tuple[Path, Path],
                                                 tmp_path: Path) -> None:  # fmt: skip
    exe, core = inline_core
    frames = core_json(core, exe)["threads"][0]["frames"]
    assert [f["index"] for f in frames] == list(range(len(frames)))
    # store, inlined into parse_field, into parse_header, into read_request.
    names = [(f["function"], f["inline"]) for f in frames[:5]]
    assert names == [("store", True), ("parse_field", True), ("parse_header", True),
                     ("read_request", False), ("main", False)]  # fmt: skip
    assert check_against_eu_addr2line(frames) >= 3
    check_against_gdb(frames, gdb_bt(exe, core, tmp_path))
    assert all(f["column"] is None or f["column"] > 0 for f in frames)
    # Without inline frames: the real frames, each with the line where its pc is.
    plain = core_json(core, exe, "--no-inline")["threads"][0]["frames"]
    assert [f["pc"] for f in plain] == [f["pc"] for f in frames if not f["inline"]]
    assert not any(f["inline"] for f in plain)
    assert (plain[0]["file"], plain[0]["line"]) == (frames[0]["file"], frames[0]["line"])
    # The text: each frame's file:line, the inline frames marked.
    text = run([sys.executable, "-m", "stackwalk", "core", str(core), str(exe)]).stdout
    assert f"#0  {int(frames[0]['pc'], 16):#018x} in store at {frames[0]['file']}:" in text
    assert "[inline]" in text


def test_cxx_templates_and_lambdas(cores: Any, tmp_path: Path) -> None:
    made = cores("cxx")
    frames = core_json(made.path, made.executable)["threads"][0]["frames"]
    assert check_against_eu_addr2line(frames) > 0
    check_against_gdb(frames, gdb_bt(made.executable, made.path, tmp_path))


def test_stripped_binary_with_its_debug_file_in_a_build_id_tree(
    inline_core: tuple[Path, Path], tmp_path: Path
) -> None:
    exe, core = inline_core
    reference = core_json(core, exe)["threads"][0]["frames"]
    stripped = tmp_path / "bin" / exe.name
    stripped.parent.mkdir()
    shutil.copy(exe, stripped)
    build_id = build_id_of(str(exe))
    debug = tmp_path / "root" / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    debug.parent.mkdir(parents=True)
    for cmd in (["objcopy", "--only-keep-debug", stripped, debug], ["strip", "-g", stripped]):
        assert run(cmd).returncode == 0
    assert ".debug_info" not in run(["readelf", "-SW", stripped]).stdout
    frames = core_json(core, stripped, "--debug-root", str(tmp_path / "root"))["threads"][0]

    def own(frames: list[dict[str, Any]], module: Path) -> list[tuple[Any, ...]]:
        # The program's frames (libc's debug file is under /usr/lib/debug, not this root).
        return [(f["function"], f["file"], f["line"], f["inline"]) for f in frames
                if f["module"] == str(module)]  # fmt: skip

    assert own(frames["frames"], stripped) == own(reference, exe)
    assert sum(f["inline"] for f in frames["frames"]) >= 3
    empty = tmp_path / "empty"
    empty.mkdir()
    without = core_json(core, stripped, "--debug-root", str(empty))["threads"][0]["frames"]
    assert without[0]["inline"] is False and without[0]["file"] is None


def libc_in_pieces_is_eu_addr2line(debug_root: str = "/usr/lib/debug") -> None:
    """Functions from all over libc (libc6-dbg's zlib-compressed sections, or the same debug
    file under another `debug_root`), looked up out of order in batches in one symbolizer, have
    eu-addr2line's chains (see the test below; eu-addr2line reads libc6-dbg's file)."""
    libc = str(Path("/lib/x86_64-linux-gnu/libc.so.6").resolve())
    debug = symbol_file(libc)
    assert debug != libc, "libc6-dbg is installed by .ci/setup"
    info = re.search(r"\.debug_info\s.*", run(["readelf", "-SW", debug]).stdout)
    assert info and info.group(0).split()[-4] == "C", info  # readelf's flag: compressed
    functions = sorted({s.value + s.size // 2 for s in elf_symbols(debug)
                        if s.type == "STT_FUNC" and s.size >= 16 and s.code_section})  # fmt: skip
    picked = functions[:: max(1, len(functions) // 72)]
    random.Random(len(picked)).shuffle(picked)
    bias = 0x7F00_0000_0000
    symbolizer = Symbolizer([(libc, bias, bias + (1 << 32), bias)], debug_root=debug_root)
    lines = 0
    for batch in (picked[i : i + 8] for i in range(0, len(picked), 8)):
        # As a stack: frame 0 looked up at its pc, the others at pc - 1 (as callers).
        frames = [SimpleNamespace(pc=bias + a + (1 if n else 0), sp=0, cfa=None, trust="cfi",
                                  lookup_pc=bias + a) for n, a in enumerate(batch)]  # fmt: skip
        found = symbolizer.frame_dicts(frames, inline=True)
        check_against_eu_addr2line(found)
        lines += sum(f["line"] is not None for f in found if not f["inline"])
    assert lines >= len(picked) * 9 // 10


@pytest.mark.parametrize("cache", ["off", "cold", "warm", "damaged"])
def test_a_compressed_debug_file_read_in_pieces_is_eu_addr2line(cache: str, tmp_path: Path) -> None:
    """libc6-dbg's sections are zlib-compressed, and stackwalk reads its .debug_info only at
    the units looked up (rust/symbolize/lines/partial.rs): addr2line is given a view of the section
    with those units in place and the others left out, units needed later in views and contexts of
    their own, and the whole section past 48 units. Functions from all over libc, looked up out of
    order in batches in one symbolizer (a view, views of more units, then the whole), have
    eu-addr2line's chains: functions, files and lines. So they do with the decompressed sections
    cached by build id (rust/symbolize/lines/cache.rs): a first process ("cold") decompresses the
    large ones whole and stores them, the next ("warm") maps them (the entries it used are touched,
    not written again); with no cache ("off"), the sections are decompressed as far as the units
    need and nothing is stored. A cached `.debug_info` is checked block by block as its units are
    read: one damaged in the middle ("damaged") is found when the lookups reach it (here, where the
    whole section is given out): the lookups are still eu-addr2line's, read from the stream instead,
    and the entry is removed, for the next process to make again. Each
    in a process of its own (the cache is set up once per process)."""
    env = {**os.environ, "STACKWALK_CACHE_DIR": "" if cache == "off" else str(tmp_path)}
    check = [sys.executable, "-c", "import test_lines; test_lines.libc_in_pieces_is_eu_addr2line()"]
    tests = str(Path(__file__).parent)

    def checked() -> list[Path]:
        proc = run(check, env={**env, "PYTHONPATH": tests}, cwd=tests)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return sorted((tmp_path / "sections").glob("*/*"))

    stored = checked()
    if cache == "off":
        assert not stored
        return
    libc = str(Path("/lib/x86_64-linux-gnu/libc.so.6").resolve())
    assert {p.parent.name for p in stored} == {build_id_of(libc)}
    names = {p.name.split("-")[0] for p in stored}
    assert {"debug_info", "debug_line", "debug_abbrev"} <= names, names
    if cache == "warm":
        before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in stored}
        again = checked()
        assert again == stored
        for p in again:
            inode, used = before[p]
            assert p.stat().st_ino == inode, f"{p.name} written again"
            assert p.stat().st_mtime_ns > used, f"{p.name} not used"
    if cache == "damaged":
        (info,) = [p for p in stored if p.name.startswith("debug_info-")]
        whole = info.read_bytes()
        damaged = bytearray(whole)
        damaged[len(whole) // 2] ^= 0xFF
        info.write_bytes(bytes(damaged))
        assert checked() == [p for p in stored if p != info], "the damaged entry removed"
        assert checked() == stored, "and made again by the next process"
        assert info.read_bytes() == whole


@pytest.mark.parametrize("cache", ["off", "cold", "warm"])
def test_a_zstd_compressed_debug_file_is_eu_addr2line(cache: str, tmp_path: Path) -> None:
    """libc6-dbg's debug file with its sections compressed by zstd instead (`objcopy
    --compress-debug-sections=zstd`, as some distributions ship them), in a debug root of its
    own: the same functions, files and lines as eu-addr2line gives from libc6-dbg's file (the
    helper above). zstd sections are decompressed whole; with a cache, a first process
    ("cold") stores the large ones by build id (`NAME-STREAMSIZE-SIZE-zstd`, checked by the
    Adler-32 in their header) and the next ("warm") maps them; with none ("off"), nothing is
    stored."""
    libc = str(Path("/lib/x86_64-linux-gnu/libc.so.6").resolve())
    build_id = build_id_of(libc)
    root = tmp_path / "debug"
    target = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    target.parent.mkdir(parents=True)
    plain = tmp_path / "plain.debug"
    run(["objcopy", "--decompress-debug-sections", symbol_file(libc), str(plain)], check=True)
    run(["objcopy", "--compress-debug-sections=zstd", str(plain), str(target)], check=True)
    headers = run(["readelf", "-tW", str(target)]).stdout
    assert re.search(r"\.debug_info\n.*\n.*COMPRESSED\n\s+ZSTD", headers), headers[:2000]
    store = tmp_path / "cache"
    env = {**os.environ, "STACKWALK_CACHE_DIR": "" if cache == "off" else str(store)}
    call = f"import test_lines; test_lines.libc_in_pieces_is_eu_addr2line({str(root)!r})"
    tests = str(Path(__file__).parent)

    def checked() -> list[Path]:
        proc = run([sys.executable, "-c", call], env={**env, "PYTHONPATH": tests}, cwd=tests)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return sorted(store.glob("sections/*/*-zstd"))

    stored = checked()
    if cache == "off":
        assert not store.exists()
        return
    assert {p.parent.name for p in stored} == {build_id}
    names = {p.name.split("-")[0] for p in stored}
    assert {"debug_info", "debug_line", "debug_abbrev"} <= names, names
    if cache == "warm":
        before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in stored}
        assert checked() == stored
        for p, (inode, used) in before.items():
            assert p.stat().st_ino == inode, f"{p.name} written again"
            assert p.stat().st_mtime_ns > used, f"{p.name} not used"


@pytest.mark.parametrize("form", ["dwo", "dwp"])
def test_split_dwarf(form: str, tmp_path: Path) -> None:
    """A program built with -gsplit-dwarf: its functions and inline chains are in the .dwo file
    the skeleton unit names (under its compilation directory), or in the DWARF package
    ``prog.dwp`` next to the program, as gdb finds them. elfutils 0.188 (eu-addr2line -i,
    eu-stack -s -i) shows no inline frame from a .dwo, so gdb is the reference here."""
    directory = tmp_path / form
    directory.mkdir()
    # binutils 2.40's dwp crashes on DWARF 5 units: the package is made of a DWARF 4 build.
    flags = ["-g", "-O2", "-gsplit-dwarf", *(["-gdwarf-4"] if form == "dwp" else [])]
    source = PROGRAMS / "crash_inline.c"
    for cmd in (["gcc", *flags, "-c", source, "-o", "crash_inline.o"],
                ["gcc", "crash_inline.o", "-o", "prog"]):  # fmt: skip
        assert run(cmd, cwd=directory).returncode == 0
    split_files = [directory / "crash_inline.dwo"]
    if form == "dwp":
        assert run(["dwp", "-e", "prog", "-o", "prog.dwp"], cwd=directory).returncode == 0
        split_files[0].unlink()
        split_files = [directory / "prog.dwp"]
    exe, core = directory / "prog", directory / "prog.core"
    sections = run(["readelf", "-SW", exe]).stdout
    assert ".debug_info" in sections and ".debug_info.dwo" not in sections  # the skeleton only
    gdb_crash_core([str(exe)], core, CRASH_ENV)
    frames = core_json(core, exe)["threads"][0]["frames"]
    names = [(f["function"], f["inline"]) for f in frames[:5]]
    assert names == [("store", True), ("parse_field", True), ("parse_header", True),
                     ("read_request", False), ("main", False)]  # fmt: skip
    check_against_gdb(frames, gdb_bt(exe, core, tmp_path))
    # Without the split file, the skeleton's line table alone: no inline frames.
    for file in split_files:
        file.unlink()
    without = core_json(core, exe)["threads"][0]["frames"]
    assert not any(f["inline"] for f in without)
    assert without[0]["line"] == frames[0]["line"]


def test_symbolized_frames_are_the_json_objects_in_numbers() -> None:
    """``Symbolizer.frames`` gives the frames ``frame_dicts`` gives (``to_dict`` is each one's
    JSON object), with numbers as numbers: pc, sp, cfa, module_offset and function_offset are
    the hex strings' values; each frame's ``lookup_pc`` is its unwound frame's, and
    ``trace_index`` says which unwound frame an inlined function's frame belongs to."""
    libc = str(Path("/lib/x86_64-linux-gnu/libc.so.6").resolve())
    debug = symbol_file(libc)
    assert debug != libc, "libc6-dbg is installed by .ci/setup"
    functions = sorted({s.value + s.size // 2 for s in elf_symbols(debug)
                        if s.type == "STT_FUNC" and s.size >= 64 and s.code_section})  # fmt: skip
    picked = functions[:: max(1, len(functions) // 40)]
    bias = 0x7F00_0000_0000
    symbolizer = Symbolizer([(libc, bias, bias + (1 << 32), bias)])
    frames = [SimpleNamespace(pc=bias + a + (1 if n else 0), sp=0x1000 * n, cfa=0x1000 * n + 16,
                              trust="cfi", lookup_pc=bias + a)
              for n, a in enumerate(picked)]  # fmt: skip
    shown = symbolizer.frames(frames, inline=True)
    dicts = symbolizer.frame_dicts(frames, inline=True)
    assert [f.to_dict() for f in shown] == dicts
    assert any(f.inline for f in shown), "libc has functions inlined in others"
    hex_or_none = lambda v: None if v is None else f"{v:#x}"  # noqa: E731
    for f, d in zip(shown, dicts, strict=True):
        assert (f.index, hex(f.pc), hex(f.sp), hex_or_none(f.cfa)) == (
            d["index"], d["pc"], d["sp"], d["cfa"])  # fmt: skip
        assert hex_or_none(f.module_offset) == d["module_offset"] == hex(f.pc - bias)
        assert hex_or_none(f.function_offset) == d["function_offset"]
        assert f.lookup_pc == frames[f.trace_index].lookup_pc
        assert (f.pc, f.sp) == (frames[f.trace_index].pc, frames[f.trace_index].sp)
    own = [f.trace_index for f in shown if not f.inline]
    assert own == list(range(len(frames)))
    # An inlined function's frame comes before the frame it is inlined in, at the same pc.
    for f, after in itertools.pairwise(shown):
        if f.inline:
            assert after.trace_index == f.trace_index
