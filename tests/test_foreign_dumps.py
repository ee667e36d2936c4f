"""Minidumps that this project did not write, and the ids and headers a crash service files them
by, against rust-minidump's ``minidump-stackwalk`` on the same files:

* public dumps from Windows (x86, amd64), macOS and Linux machines (tests/data/*/NOTICE says
  where each comes from), whose modules carry PDB 7.0 (``RSDS``) CodeView records;
* dumps made here by minidump-writer (``BpEL`` records: the build id), and the same dumps as
  Breakpad's Linux client wrote them before it recorded build ids (``RSDS``: the build id's first
  16 bytes as a GUID), and with no record at all;
* a program linked without a build id, whose identity is the hash of its ``.text`` (Breakpad's
  FileID, dump_syms' debug id).

Each module's debug id, code id and debug file, the system (OS, version, CPU), the crash reason
and address and the crashing thread must be minidump-stackwalk's; the ``.sym`` file of a module
is found in a store by that debug id; and a file on this machine is used for a module only
when its own identity, computed the same way, is the one the dump recorded.
"""

from __future__ import annotations

import json
import lzma
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from corefiles import SPECS, Spec, run, stackwalk_minidump
from minidumps import (
    DUMP_SYMS,
    MINIDUMP_STACKWALK,
    Dumps,
    breakpad_era_record,
    module_records,
    rewrite_codeview,
    symbol_store,
)
from stackwalk._core import ElfFile
from stackwalk.minidump import Minidump

DATA = Path(__file__).parent / "data"
# Every public dump the tests hold: Windows (x86, amd64), macOS (amd64), Linux.
PUBLIC = sorted(
    str(p.relative_to(DATA)) for d in ("rust-minidump", "symbolicator", "symbolic")
    for p in (DATA / d).glob("*.dmp")
)  # fmt: skip
MODULE_KEYS = ("base_addr", "end_addr", "filename", "debug_file", "debug_id", "code_id")
# A program linked without a build id: Breakpad's FileID and dump_syms fall back to the hash of
# the first page of its .text.
NO_BUILD_ID = Spec(
    "deep-no-build-id", "crash_deep.c", (*SPECS["deep"].flags, "-Wl,--build-id=none")
)


def theirs(path: Path, *options: str) -> dict[str, Any]:
    """minidump-stackwalk's ``--json`` document of the dump."""
    assert os.path.exists(MINIDUMP_STACKWALK), ".ci/setup installs minidump-stackwalk"
    proc = run([MINIDUMP_STACKWALK, "--json", *options, str(path)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def ours(path: Path, *options: str) -> dict[str, Any]:
    """``stackwalk minidump --json --format minidump-stackwalk`` of the dump: exit 0 (every walk
    ended cleanly) or 1 (some stopped early), never a failure."""
    proc = stackwalk_minidump(path, "--json", "--format", "minidump-stackwalk", *options)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def assert_same_ids_and_header(path: Path) -> None:
    mine, their = ours(path), theirs(path)
    for key in ("os", "os_ver", "cpu_arch"):
        assert mine["system_info"][key] == their["system_info"][key], key
    for key in ("type", "address", "crashing_thread"):
        assert mine["crash_info"][key] == their["crash_info"][key], key
    assert mine["crashing_thread"] is not None, "the dump's crashing thread is kept"
    assert mine["crashing_thread"]["threads_index"] == their["crashing_thread"]["threads_index"]
    assert mine["main_module"] == their["main_module"]
    assert [[m[k] for k in MODULE_KEYS] for m in mine["modules"]] == [
        [m[k] for k in MODULE_KEYS] for m in their["modules"]
    ]


@pytest.mark.parametrize("dump", PUBLIC)
def test_public_dumps_ids_and_headers_are_minidump_stackwalks(dump: str) -> None:
    """Windows, macOS and Linux dumps written by Breakpad's and Crashpad's clients: every
    module's ids and file names, the system, the crash and its thread as minidump-stackwalk
    gives them. (Before: OS "Linux" for every dump, a Mach or Windows exception read as a
    signal, no crashing thread, no debug id for an RSDS record, Windows paths kept whole.)"""
    path = DATA / dump
    assert_same_ids_and_header(path)
    doc = ours(path)
    # Not vacuous: every module of these dumps has an id, and most are not ELF build ids.
    assert doc["modules"] and all(m["debug_id"] for m in doc["modules"])
    # A Windows or Apple dump's modules are not ELF files: a Windows x64 or x86 dump's PE
    # files, an Apple x86_64 or arm64 dump's Mach-O files and dSYMs, are looked for in
    # --lib-search-path, none given here: one warning names them (not one per module); any
    # other's are not looked for here, which one warning says.
    if doc["system_info"]["os"] != "Linux":
        stderr = stackwalk_minidump(path).stderr
        assert "module not found" not in stderr
        system, cpu = doc["system_info"]["os"], doc["system_info"]["cpu_arch"]
        pe = system == "Windows NT" and cpu in ("amd64", "x86")
        macho = system in ("Mac OS X", "iOS") and cpu in ("amd64", "arm64")
        looked_for = "PE files of" if pe else "Mach-O files (or dSYMs) of" if macho else None
        not_looked_for = "are not looked for on this machine"
        said, other = (looked_for, not_looked_for) if looked_for else (not_looked_for, "files of")
        assert stderr.count(said) == 1 and other not in stderr, stderr


@pytest.fixture(scope="module")
def breakpad_era(dumps: Dumps, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a dump minidump-writer made, the same dump with RSDS records as Breakpad's Linux client
    wrote them)."""
    made = dumps("deep")
    old = tmp_path_factory.mktemp("breakpad-era") / "deep-rsds.dmp"
    return made.path, rewrite_codeview(made.path, old, breakpad_era_record)


def test_breakpad_era_ids_are_minidump_stackwalks(breakpad_era: tuple[Path, Path]) -> None:
    """A Linux dump whose modules carry RSDS records: the same debug ids as the build ids gave
    (their first 16 bytes), code ids as minidump-stackwalk reads them."""
    new, old = breakpad_era
    assert all(cv[:4] == b"RSDS" for _, _, cv in module_records(old.read_bytes()) if cv)
    assert_same_ids_and_header(old)
    debug_ids = [m["debug_id"] for m in ours(new)["modules"]]
    assert [m["debug_id"] for m in ours(old)["modules"]] == debug_ids


def test_breakpad_era_files_are_checked_by_guid(breakpad_era: tuple[Path, Path]) -> None:
    """The local files of an RSDS dump's modules are compared with the GUID the dump recorded,
    computed the same way from each file (its build id's first 16 bytes): all match here, so
    the walk is the one of the dump with build ids, frame for frame, and nothing is doubtful."""
    new, old = breakpad_era
    with_ids, with_guids = Minidump.open(new), Minidump.open(old)
    assert not [w for w in with_guids.warnings if "mismatch" in w or "identity" in w]
    found = [m.path for m in with_guids.modules if m.found]
    assert found and found == [m.path for m in with_ids.modules if m.found]
    mine, reference = with_guids.to_dict(), with_ids.to_dict()
    for thread, expected in zip(mine["threads"], reference["threads"], strict=True):
        assert thread["frames"] == expected["frames"]
        assert not any(f["doubtful"] for f in thread["frames"])


def test_a_file_whose_guid_differs_is_not_used(
    breakpad_era: tuple[Path, Path], tmp_path: Path
) -> None:
    """One byte of libc's GUID changed (another build of libc ran): the libc of this machine
    is not used, the warning says why, and no frame is named from it or unwound by its CFI."""
    _, old = breakpad_era

    def other_libc(name: str, record: bytes) -> bytes:
        if "libc.so" not in name:
            return record
        return record[:4] + bytes([record[4] ^ 0xFF]) + record[5:]

    changed = rewrite_codeview(old, tmp_path / "other-libc.dmp", other_libc)
    dump = Minidump.open(changed)
    libc = next(m for m in dump.modules if "libc.so" in m.path)
    assert not libc.found
    assert any(w.startswith(f"debug-id mismatch for {libc.path}") for w in dump.warnings)
    doc = dump.to_dict()
    for thread in doc["threads"]:
        frames = thread["frames"]
        for callee, caller in zip(frames, frames[1:], strict=False):
            if callee["module"] == libc.path:
                assert callee["function"] is None
                assert caller["trust"] != "cfi", "no caller comes from libc's CFI"


def test_a_module_without_an_id_is_doubtful(
    breakpad_era: tuple[Path, Path], tmp_path: Path
) -> None:
    """Modules whose CodeView record is missing: their files are used (nothing to compare them
    with), with a warning that says so, and every frame from the first one in such a module on
    is doubtful -- never a confident frame from a file that may be another build."""
    new, _ = breakpad_era
    bare = rewrite_codeview(new, tmp_path / "no-ids.dmp", lambda name, record: b"")
    dump = Minidump.open(bare)
    unverified = [w for w in dump.warnings if "records no identity" in w]
    assert unverified, dump.warnings
    doc = dump.to_dict()
    # (minidump-writer records the dump as requested by the thread it blames.)
    blamed = next(t for t in doc["threads"] if t["tid"] == dump.blamed_tid)
    assert blamed["frames"] and all(f["doubtful"] for f in blamed["frames"])
    text = stackwalk_minidump(bare)
    assert "doubtful]" in text.stdout


@pytest.fixture(scope="module")
def no_build_id(dumps: Dumps) -> Any:
    return dumps.of(NO_BUILD_ID)


def test_a_file_without_build_id_is_known_by_its_text_hash(no_build_id: Any) -> None:
    """A program linked without a build id: minidump-writer records the hash of its .text; the
    ids are minidump-stackwalk's, the program's file is recognized as the one that ran (the
    same hash computed from the file), and its frames are not doubtful."""
    made = no_build_id
    assert ElfFile(str(made.executable)).build_id is None
    assert_same_ids_and_header(made.path)
    dump = Minidump.open(made.path)
    exe = next(m for m in dump.modules if m.path == str(made.executable))
    assert exe.found
    assert not [w for w in dump.warnings if "mismatch" in w or "identity" in w]
    doc = dump.to_dict()
    blamed = next(t for t in doc["threads"] if t["tid"] == dump.blamed_tid)
    assert blamed["frames"][0]["function"] == "crash_here"
    assert not any(f["doubtful"] for f in blamed["frames"])


def test_file_ids_are_dump_syms_ids(no_build_id: Any) -> None:
    """The identity stackwalk computes of a local file (its FileID: the build id, else the hash
    of .text) gives the debug id dump_syms writes for the same file."""
    assert os.path.exists(DUMP_SYMS), ".ci/setup installs dump_syms"
    files = [no_build_id.executable, Path("/lib/x86_64-linux-gnu/libc.so.6"), Path("/bin/ls")]
    for path in files:
        proc = subprocess.run([DUMP_SYMS, path], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        debug_id = proc.stdout.split("\n", 1)[0].split(" ")[3]
        assert ElfFile(str(path)).debug_id == debug_id, path


def test_sym_files_are_found_by_the_dumps_debug_id(tmp_path: Path) -> None:
    """A Windows x86 dump and its module's Breakpad symbol file, filed as symbol stores file a
    PDB's (``test_app.pdb/DEBUGID/test_app.sym``): found by the debug id of the dump's RSDS
    record, so the frames in test_app.exe are named as minidump-stackwalk names them, and
    unwound by the file's frame data (``STACK WIN``: the crashing thread's frames 1 and 2, then
    kernel32's BaseProcessStart by its ebp frame, whose record of two zeros at the top of the
    stack ends it). Every frame of every thread the reference walks is the reference's (it
    leaves out the thread that wrote the dump, Breakpad's handler thread)."""
    dump = DATA / "rust-minidump" / "test.dmp"
    sym = lzma.decompress((DATA / "rust-minidump" / "symbols" / "test_app.sym.xz").read_bytes())
    _, _, _, debug_id, debug_file = sym.split(b"\n", 1)[0].decode().split(" ")
    store = tmp_path / "store"
    (store / debug_file / debug_id).mkdir(parents=True)
    (store / debug_file / debug_id / "test_app.sym").write_bytes(sym)
    mine = ours(dump, "--symbols-path", str(store))
    their = theirs(dump, "--symbols-path", str(store))
    module = next(m for m in mine["modules"] if m["filename"] == "test_app.exe")
    assert (module["debug_file"], module["debug_id"]) == (debug_file, debug_id)
    named = walked = 0
    keys = ("offset", "module", "function", "trust")
    for mine_t, their_t in zip(mine["threads"], their["threads"], strict=True):
        if not their_t["frames"]:
            continue
        walked += 1
        assert [[f[k] for k in keys] for f in mine_t["frames"]] == [
            [f[k] for k in keys] for f in their_t["frames"]
        ]
        named += sum(f["function"] is not None for f in mine_t["frames"])
    cfi = [f["trust"] for f in mine["crashing_thread"]["frames"]].count("cfi")
    assert (walked, named, cfi) == (1, 3, 3)


def test_breakpad_era_sym_files_from_dump_syms(
    breakpad_era: tuple[Path, Path], tmp_path: Path
) -> None:
    """The executable's symbol file, made by dump_syms, is filed under the debug id dump_syms
    computes from the file; the RSDS dump records the same id, so where the executable is not
    on this machine (moved away for the run), the store names its frames."""
    assert os.path.exists(DUMP_SYMS), ".ci/setup installs dump_syms"
    new, old = breakpad_era
    doc = Minidump.open(new).to_dict()
    exe = doc["executable"]
    store = tmp_path / "store"
    symbol_store(Path(exe), store)
    hidden = Path(exe + ".hidden")
    os.rename(exe, hidden)
    try:
        mine = ours(old, "--symbols-path", str(store))
    finally:
        os.rename(hidden, exe)
    frames = mine["crashing_thread"]["frames"]
    assert frames[0]["module"] == os.path.basename(exe)
    assert frames[0]["function"] == "crash_here"


def test_a_sym_file_naming_another_debug_id_is_not_used(tmp_path: Path) -> None:
    """A store's .sym file filed under the dump's debug id whose MODULE record names another
    (a mislabelled upload): not used, as a symbol server's is not -- the file is the symbols of
    the module it names, wherever it was found -- and the warning says why."""
    dump = DATA / "rust-minidump" / "test.dmp"
    sym = lzma.decompress((DATA / "rust-minidump" / "symbols" / "test_app.sym.xz").read_bytes())
    head, rest = sym.split(b"\n", 1)
    _, _, _, debug_id, debug_file = head.decode().split(" ")
    other = ("0" if debug_id[0] != "0" else "1") + debug_id[1:]
    store = tmp_path / "store"
    (store / debug_file / debug_id).mkdir(parents=True)
    relabelled = f"MODULE windows x86 {other} {debug_file}\n".encode() + rest
    (store / debug_file / debug_id / "test_app.sym").write_bytes(relabelled)
    proc = stackwalk_minidump(dump, "--json", "--symbols-path", store)
    assert proc.returncode in (0, 1), proc.stderr
    assert f"names debug id {other}, not {debug_id}" in proc.stderr
    doc = json.loads(proc.stdout)
    named = [f for t in doc["threads"] for f in t["frames"] if f["function"] is not None]
    assert not named, named
