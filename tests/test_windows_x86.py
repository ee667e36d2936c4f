"""Windows x86 crashes unwound by their PDBs' frame data (``STACK WIN`` records of dump_syms'
symbol files: ``rust/unwind/frame_data.rs``), on a program built here by clang for 32-bit
Windows with a PDB (``-gcodeview``: clang writes frame data programs for every function, which
-O2 builds without frame pointers), crashed under Wine's 32-bit part (see windows.py).

The reference is rust-minidump's ``minidump-stackwalk`` with the same symbol files (the PDB's for
the program, dump_syms' of Wine's DLLs for the rest). Every thread's frames must be its frames
-- where, how (``cfi`` for frame data), and the names and lines the PDB gives -- or be proven
better, independently of either tool:

- every return address follows a call instruction (the i686 mingw objdump);
- the walk reaches the thread's start (Wine's ``call_thread_func``, whose frame record of two
  zeros at the top of the stack ends every thread);
- each frame of the reference's that stackwalk does not give is no code address (it lies in no
  module), and the reference's other frames are stackwalk's, in the same order.

With the PDB itself in the store (Microsoft's layout) instead of its ``.sym`` file, stackwalk
reads it directly: the same frames, named with the same functions, lines and inlined functions;
and a PDB of another build filed under the module's id is not used.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from corefiles import _free_port, run, stackwalk_minidump
from minidumps import symbol_server
from siggen.generator import SignatureGenerator
from stackwalk.minidump import Minidump, nt_symbol_path
from stackwalk.signature import signature
from windows import (
    MINGW32_OBJDUMP,
    MODES,
    WINE32,
    WINE_DLLS32,
    WithIds,
    build_clang,
    call_before,
    crash,
    image_base,
    minidump_stackwalk,
    module_file,
    pdb_symbols,
    pe_codeview,
    with_ids,
)

OPTIMIZATIONS = ("-O0", "-O2")
# Wine's thread start, the outermost frame of every thread.
THREAD_START = "call_thread_func"
# What minidump-stackwalk's JSON says of a frame, compared.
KEYS = ("offset", "module", "trust")
# And where the reference names a frame, its name and line.
NAMED = ("function", "file", "line")


@dataclass(frozen=True)
class Program:
    exe: Path
    pdb: Path
    store: Path  # the symbol store of the program's PDB, as dump_syms writes it


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Wine prefix of the tests' own (made by the first program run in it)."""
    return tmp_path_factory.mktemp("wine32") / "prefix"


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Program]:
    out = tmp_path_factory.mktemp("windows-x86-programs")
    made = {}
    for o in OPTIMIZATIONS:
        exe, pdb = build_clang(out / f"crash32{o}.exe", o)
        store = out / f"symbols{o}"
        pdb_symbols(pdb, store)
        made[o] = Program(exe, pdb, store)
    return made


@pytest.fixture(scope="module")
def dumps(
    programs: dict[str, Program], prefix: Path, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """Each mode's dump (made once), its modules given their ids: the program's from its debug
    directory (the PDB's), Wine's DLLs' as windows.with_ids makes them; with a store of every
    module's symbol file."""
    made: dict[tuple[str, str], WithIds] = {}
    out = tmp_path_factory.mktemp("windows-x86-dumps")

    def dump(optimization: str, mode: str) -> WithIds:
        key = (optimization, mode)
        if key not in made:
            program = programs[optimization]
            exe = program.exe
            raw = crash(exe, mode, out / f"{exe.stem}-{mode}.dmp", prefix, wine=WINE32)
            record = pe_codeview(exe)
            assert record is not None, f"lld wrote no CodeView record into {exe}"
            into = out / f"{exe.stem}-{mode}"
            into.mkdir()
            ids = with_ids(raw, [WINE_DLLS32], into, own={exe.name: record})
            shutil.copytree(program.store, ids.store, dirs_exist_ok=True)
            made[key] = ids
        return made[key]

    return dump


def ours(dump: WithIds, program: Program) -> dict[str, Any]:
    """``stackwalk minidump --json --format minidump-stackwalk``, with the same symbols and the
    PE files (the program's, Wine's DLLs) for their code and names."""
    path = f"{program.exe.parent}:{WINE_DLLS32}"
    proc = stackwalk_minidump(
        "--json", "--format", "minidump-stackwalk", dump.dump, "--symbols-path", dump.store,
        "--lib-search-path", path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def frame_keys(frames: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(f[k] for k in KEYS) for f in frames]


def module_of(doc: dict[str, Any], address: int) -> dict[str, Any] | None:
    for m in doc["modules"]:
        if int(m["base_addr"], 16) <= address <= int(m["end_addr"], 16):
            return m
    return None


def prove(
    mine: dict[str, Any], theirs: dict[str, Any], doc: dict[str, Any], program: Program
) -> None:
    """Where a thread's frames differ from the reference's: the proof that stackwalk's are
    right (see the module's docstring)."""
    frames = mine["frames"]
    for f in frames[1:]:
        ra = int(f["offset"], 16) + 1
        module = module_of(doc, ra - 1)
        assert module is not None, f"frame {f} in no module"
        pe = module_file(module["filename"], [program.exe.parent, WINE_DLLS32])
        assert pe is not None, module["filename"]
        base = image_base(pe, MINGW32_OBJDUMP)
        rva = ra - int(module["base_addr"], 16)
        assert call_before(pe, rva, base, MINGW32_OBJDUMP), f"no call before {f}"
    assert frames[-1]["function"] == THREAD_START, frames[-1]
    offsets = [f["offset"] for f in frames]
    at = 0
    for f in theirs["frames"]:
        if f["offset"] in offsets[at:]:
            at = offsets.index(f["offset"], at) + 1
        else:
            assert module_of(doc, int(f["offset"], 16)) is None, (
                f"the reference's frame {f} is a code address stackwalk does not give"
            )


@pytest.mark.parametrize("optimization", OPTIMIZATIONS)
@pytest.mark.parametrize("mode", MODES)
def test_every_thread_is_minidump_stackwalks_or_proven_better(
    programs: dict[str, Program], dumps: Any, optimization: str, mode: str
) -> None:
    program = programs[optimization]
    dump = dumps(optimization, mode)
    mine, theirs = ours(dump, program), minidump_stackwalk(dump.dump, dump.store)
    assert mine["crash_info"]["type"] == theirs["crash_info"]["type"]
    assert mine["crash_info"]["crashing_thread"] == theirs["crash_info"]["crashing_thread"]
    for mine_t, their_t in zip(mine["threads"], theirs["threads"], strict=True):
        for a, b in zip(mine_t["frames"], their_t["frames"], strict=False):
            if a["offset"] == b["offset"] and b["function"] is not None:
                assert [a[k] for k in NAMED] == [b[k] for k in NAMED], (a, b)
        if frame_keys(mine_t["frames"]) != frame_keys(their_t["frames"]):
            prove(mine_t, their_t, mine, program)
        assert mine_t["frames"][-1]["function"] == THREAD_START


def test_frame_data_walks_a_recursion_without_frame_pointers(
    programs: dict[str, Program], dumps: Any
) -> None:
    """At -O2 clang keeps no frame pointer in ``recurse`` (its frame data program finds the
    return address from the frame's size, ``.raSearch``, not from ebp): its 41 frames come from
    that program, each a ``cfi`` frame, as the reference has them (the test above)."""
    program = programs["-O2"]
    lines = next(program.store.rglob("*.sym")).read_text().splitlines()
    func = next(line.split() for line in lines if line.endswith(" recurse(int)"))
    start, size = int(func[1], 16), int(func[2], 16)
    records = [line.split(maxsplit=11) for line in lines if line.startswith("STACK WIN 4 ")]
    programs_of_recurse = [r[11] for r in records if start <= int(r[3], 16) < start + size]
    assert programs_of_recurse
    assert all(".raSearch" in p and "$T0 $ebp =" not in p for p in programs_of_recurse)
    mine = ours(dumps("-O2", "deep"), program)
    frames = mine["crashing_thread"]["frames"]
    recursion = [f for f in frames if f["function"] == "recurse(int)"]
    assert len(recursion) == 41
    assert all(f["trust"] == "cfi" for f in recursion[1:])
    assert [f["function"] for f in frames[41:43]] == ["main(int, char**)", "__tmainCRTStartup"]


def pdb_store(program: Program, dump: WithIds, into: Path, pdb: Path | None = None) -> Path:
    """A store of the dump's symbols where the program's ``.sym`` file is replaced by its PDB
    (``pdb``: another one in its place), filed as Microsoft's symbol stores file it:
    ``NAME.pdb/DEBUGID/NAME.pdb``."""
    store = into / "store"
    shutil.copytree(dump.store, store)
    (sym,) = store.glob(f"{program.pdb.name}/*/*.sym")
    shutil.copy(pdb or program.pdb, sym.parent / program.pdb.name)
    sym.unlink()
    return store


@pytest.mark.parametrize("optimization", OPTIMIZATIONS)
@pytest.mark.parametrize("mode", ["leaf", "deep", "qsort", "raise"])
def test_a_pdb_alone_unwinds_and_names_as_its_symbol_file(
    programs: dict[str, Program], dumps: Any, optimization: str, mode: str, tmp_path: Path
) -> None:
    """With the program's PDB in the store instead of its ``.sym`` file, read directly: its
    frame data unwinds the program's frames (the FPO and frame data streams, which dump_syms
    copies into ``STACK WIN`` records) and its functions, lines and inlined functions name them,
    so every thread's frames are the ones the ``.sym`` file gives (held to minidump-stackwalk
    by the tests above), and every frame the reference names has its function, file, line and
    inlined functions."""
    program = programs[optimization]
    dump = dumps(optimization, mode)
    store = pdb_store(program, dump, tmp_path)
    proc = stackwalk_minidump(
        "--json", "--format", "minidump-stackwalk", dump.dump, "--symbols-path", store,
        "--lib-search-path", f"{program.exe.parent}:{WINE_DLLS32}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "not used" not in proc.stderr, proc.stderr
    mine, with_sym = json.loads(proc.stdout), ours(dump, program)
    theirs = minidump_stackwalk(dump.dump, dump.store)
    keys = (*KEYS, *NAMED, "inlines")
    named = 0
    for mine_t, sym_t, their_t in zip(
        mine["threads"], with_sym["threads"], theirs["threads"], strict=True
    ):
        assert [[f[k] for k in KEYS] for f in mine_t["frames"]] == [
            [f[k] for k in KEYS] for f in sym_t["frames"]
        ]
        by_offset = {f["offset"]: f for f in their_t["frames"]}
        for f in mine_t["frames"]:
            reference = by_offset.get(f["offset"])
            if f["module"] == program.exe.name and reference and reference["function"]:
                assert [f[k] for k in keys] == [reference[k] for k in keys], (f, reference)
                named += 1
    assert named >= 1


def test_a_pdb_of_another_build_is_not_used(
    programs: dict[str, Program], dumps: Any, tmp_path: Path
) -> None:
    """The -O2 build's PDB filed under the -O0 build's debug id: read, found to be another
    module's by its own GUID and age, and not used (a warning says why), so no frame of the
    program is named from it."""
    program = programs["-O0"]
    dump = dumps("-O0", "leaf")
    store = pdb_store(program, dump, tmp_path, pdb=programs["-O2"].pdb)
    opened = Minidump.open(dump.dump, symbols_path=[str(store)])
    why = [w for w in opened.warnings if w.startswith("symbol file not used")]
    assert len(why) == 1 and "the PDB is the one of debug id" in why[0], opened.warnings
    unnamed = 0
    for thread in opened.to_dict()["threads"]:
        for f in thread["frames"]:
            if f["module"] and f["module"].endswith(program.exe.name):
                assert f["function"] is None, f
                unnamed += 1
    assert unnamed >= 4, "the program's frames"


@pytest.mark.parametrize("mode", MODES)
def test_signatures_are_siggens_of_the_references_frames(
    programs: dict[str, Program], dumps: Any, mode: str
) -> None:
    """The signature of stackwalk's crashing thread (its own JSON) is siggen's of
    minidump-stackwalk's frames of the same dump and symbols (at -O0, where their frames are
    the same): the program's function, after the machinery siggen's lists skip or join
    (kernelbase's RaiseException skipped)."""
    program = programs["-O0"]
    dump = dumps("-O0", mode)
    proc = stackwalk_minidump(
        "--json", dump.dump, "--symbols-path", dump.store,
        "--lib-search-path", f"{program.exe.parent}:{WINE_DLLS32}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (crashed,) = [t for t in doc["threads"] if t["tid"] == doc["crashing_thread"]]
    reference = minidump_stackwalk(dump.dump, dump.store)
    theirs = SignatureGenerator().generate(
        {"os": "Windows NT", "crashing_thread": reference["crashing_thread"]["threads_index"],
         "threads": reference["threads"]}
    ).signature  # fmt: skip
    mine = signature(crashed["frames"]).text
    assert mine == theirs, (mine, theirs)
    # Not vacuous: one of the program's own functions is in it.
    names = ("leaf", "recurse", "compare", "divide", "check_header", "middle", "outer")
    assert any(n in mine for n in names), mine


def test_pdbs_from_a_symbol_server_are_fetched_once_then_read_from_the_cache(
    programs: dict[str, Program], dumps: Any, tmp_path: Path
) -> None:
    """``--symbols-url``, a server laid out as Microsoft's symbol servers are, holding the
    program's PDB (``NAME.pdb/DEBUGID/NAME.pdb``) and no ``.sym`` file for it: the ``.sym``
    file asked for (404), then the PDB fetched (200) into the cache, and the frames unwound and
    named from it as from the same store on disk; a second run asks the server for nothing (the
    cached PDB stands for the module), ``--offline`` reads the cache alone, the same server and
    store named by ``_NT_SYMBOL_PATH`` alone do the same, and a server that does not answer is
    one warning (the walk goes on without it)."""
    program = programs["-O2"]
    dump = dumps("-O2", "deep")
    store = pdb_store(program, dump, tmp_path)
    env = {**os.environ, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "stackwalk", "minidump", "--json", str(dump.dump)]
    local = run([*command, "--symbols-path", str(store)])
    with symbol_server(store, tmp_path / "http.log") as server:
        first = run([*command, "--symbols-url", server.url], env=env)
        fetched = server.requests()
        second = run([*command, "--symbols-url", server.url], env=env)
        again = server.requests()[len(fetched) :]
        offline = run([*command, "--offline", "--symbols-url", server.url], env=env)
        assert server.requests()[len(fetched) + len(again) :] == [], "offline"
        # The same server, and the store on disk, named by Windows' _NT_SYMBOL_PATH alone (a
        # cache of their own: the server asked again).
        by_env = [
            run(command, env={**env, "DEBUGINFOD_CACHE_PATH": str(tmp_path / f"cache{i}"),
                              "_NT_SYMBOL_PATH": nt})
            for i, nt in enumerate((f"srv*{tmp_path / 'downstream'}*{server.url}",
                                    f"cache*{tmp_path};{store}"))
        ]  # fmt: skip
        asked = server.requests()[len(fetched) + len(again) :]
    (pdb,) = store.glob(f"{program.pdb.name}/*/{program.pdb.name}")
    pdb_url = "/" + str(pdb.relative_to(store))
    sym_url = pdb_url.rsplit("/", 1)[0] + "/" + program.pdb.with_suffix(".sym").name
    assert (pdb_url, 200) in fetched and (sym_url, 404) in fetched, fetched
    assert again == [], "the second run: every file from the cache"
    assert (tmp_path / "cache" / "breakpad" / pdb.relative_to(store)).read_bytes() == (
        pdb.read_bytes()
    )
    want = json.loads(local.stdout)["threads"]
    names = {f["function"] for t in want for f in t["frames"]}
    assert {"recurse(int)", "main(int, char**)"} <= names, names
    for proc in (first, second, offline):
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["threads"] == want
    assert (pdb_url, 200) in asked, asked
    for proc in by_env:
        assert json.loads(proc.stdout)["threads"] == want, proc.stderr
    dead = f"http://127.0.0.1:{_free_port()}"
    gone = run([*command, "--symbols-url", dead], env={**env, "DEBUGINFOD_CACHE_PATH": ""})
    assert gone.returncode == 0, gone.stderr
    assert gone.stderr.count("did not answer") == 1, gone.stderr


def test_nt_symbol_path_names_stores_and_servers() -> None:
    """``_NT_SYMBOL_PATH``'s elements as WinDbg reads them: ``srv*`` with downstream stores and
    a server, ``symsrv*`` with its DLL, ``cache*``, plain directories; empty elements and a
    ``srv*`` without a server name nothing."""
    value = (
        "srv*C:\\symbols*https://msdl.microsoft.com/download/symbols;"
        "SRV*/var/cache/a*/var/cache/b*http://127.0.0.1:8000/;;"
        "symsrv*symsrv.dll*/srv/store*https://symbols.example/;"
        "cache*/tmp/c;/opt/pdbs;srv*"
    )
    paths, urls = nt_symbol_path(value)
    assert paths == ["C:\\symbols", "/var/cache/a", "/var/cache/b", "/srv/store", "/tmp/c",
                     "/opt/pdbs"]  # fmt: skip
    assert urls == ["https://msdl.microsoft.com/download/symbols", "http://127.0.0.1:8000/",
                    "https://symbols.example/"]  # fmt: skip
    assert nt_symbol_path(None) == nt_symbol_path("") == ([], [])


def test_a_cab_compressed_pdb_is_fetched_and_uncompressed(
    programs: dict[str, Program], dumps: Any, tmp_path: Path
) -> None:
    """A server that has the PDB only as Microsoft's older symbol servers keep it, compressed in
    a CAB archive (``NAME.pd_``, made by gcab): asked for after the ``.sym`` file and the PDB
    (404 each), fetched, uncompressed into the cache as the PDB itself (the same bytes), and
    the frames the same as with the PDB; a damaged archive is a warning naming it, no crash."""
    program = programs["-O2"]
    dump = dumps("-O2", "leaf")
    store = pdb_store(program, dump, tmp_path)
    (pdb,) = store.glob(f"{program.pdb.name}/*/{program.pdb.name}")
    original = pdb.read_bytes()
    cab = pdb.with_suffix(".pd_")
    made = run(["gcab", "-c", "-z", "-n", str(cab), str(pdb)])
    assert made.returncode == 0 and cab.is_file(), made.stderr
    pdb.unlink()
    command = [sys.executable, "-m", "stackwalk", "minidump", "--json", str(dump.dump)]
    want = json.loads(run([*command, "--symbols-path", str(dump.store)]).stdout)["threads"]
    env = {**os.environ, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache")}
    with symbol_server(store, tmp_path / "http.log") as server:
        got = run([*command, "--symbols-url", server.url], env=env)
        asked = [(p, s) for p, s in server.requests() if program.pdb.name in p]
        cab.write_bytes(cab.read_bytes()[:200])  # a damaged archive, for a fresh cache
        damaged = run(
            [*command, "--symbols-url", server.url],
            env={**env, "DEBUGINFOD_CACHE_PATH": str(tmp_path / "cache2")},
        )
    base = "/" + str(cab.parent.relative_to(store))
    stem = program.pdb.stem
    assert asked == [(f"{base}/{stem}.sym", 404), (f"{base}/{stem}.pdb", 404),
                     (f"{base}/{stem}.pd_", 200)], asked  # fmt: skip
    cached = tmp_path / "cache" / "breakpad" / pdb.relative_to(store)
    assert cached.read_bytes() == original
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["threads"] == want
    assert damaged.returncode in (0, 1) and "Traceback" not in damaged.stderr, damaged.stderr
    assert f"{stem}.pd_" in damaged.stderr, damaged.stderr
