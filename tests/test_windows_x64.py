"""Windows x64 crashes unwound by the PE files' own tables (``.pdata`` and its ``UNWIND_INFO``,
``rust/unwind/pe.rs``), on programs built here with mingw-w64 and crashed under Wine, whose
``MiniDumpWriteDump`` writes the minidumps (see windows.py).

Three independent references:

- gcc writes DWARF CFI (``.debug_frame``) for the same functions as their ``.pdata``: binutils'
  readelf, on the program converted to ELF by objcopy, prints its rows, and the rows read from
  ``.pdata`` must be the same at every one of them, epilogs included;
- rust-minidump's ``minidump-stackwalk``, given ``dump_syms``' symbol files of every module (their
  ``STACK CFI``, which dump_syms derives from the same tables), must give the same frames that
  stackwalk gives from the PE files alone;
- every return address follows a call (mingw's objdump), the program's frames are the functions
  its DWARF names (mingw's addr2line), and each stack ends at Wine's ``RtlUserThreadStart``,
  whose return address is zero.

And the same program built by clang and lld with a PDB: its frames named by the PDB, read
directly, as minidump-stackwalk names them from dump_syms' file of it.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from corefiles import run, stackwalk_minidump
from readelf_frames import load
from siggen.generator import SignatureGenerator
from stackwalk import Unwinder
from stackwalk.signature import signature
from windows import (
    MODES,
    WINE_DLLS,
    WithIds,
    as_elf,
    build,
    build_clang,
    call_before,
    crash,
    function_names,
    image_base,
    minidump_stackwalk,
    module_file,
    pdb_symbols,
    pe_codeview,
    with_ids,
)

OPTIMIZATIONS = ("-O0", "-O2")
# What each mode's crashed thread has, innermost first, of the program's own functions (a
# subsequence: -O2 inlines or tail-calls some of the rest); then its start.
EXPECTED = {
    "leaf": ["leaf", "middle", "outer"],
    "deep": ["recurse"] * 41,
    "qsort": ["compare", "sort_them"],
    "thread": ["leaf", "middle", "outer"],  # (worker tail-calls outer at -O2)
    "divide": ["divide"],  # (main tail-calls it at -O2)
    "raise": ["main"],  # (frame 0 in kernelbase's RaiseException; check_header inlined at -O2)
}
MAIN_START = ["__tmainCRTStartup", "mainCRTStartup"]
# The suffixes gcc gives the copies and parts of a function it makes.
GCC_CLONES = ("part", "isra", "constprop", "cold", "lto_priv")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Wine prefix of the tests' own (made by the first program run in it)."""
    return tmp_path_factory.mktemp("wine") / "prefix"


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("windows-programs")
    return {o: build(out / f"crash_win{o}.exe", o) for o in OPTIMIZATIONS}


@pytest.fixture(scope="module")
def dumps(programs: dict[str, Path], prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    made: dict[tuple[str, str], Path] = {}
    out = tmp_path_factory.mktemp("windows-dumps")

    def dump(optimization: str, mode: str) -> Path:
        key = (optimization, mode)
        if key not in made:
            exe = programs[optimization]
            made[key] = crash(exe, mode, out / f"{exe.stem}-{mode}.dmp", prefix)
        return made[key]

    return dump


def search(program: Path) -> list[Path]:
    return [program.parent, WINE_DLLS]


def ours(dump: Path, program: Path, *options: str) -> dict[str, Any]:
    path = ":".join(str(d) for d in search(program))
    proc = stackwalk_minidump("--json", dump, "--lib-search-path", path, *options)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


# -- the rows, against gcc's DWARF ----------------------------------------------------------------


@pytest.mark.parametrize("optimization", OPTIMIZATIONS)
def test_pdata_rows_are_the_dwarf_rows_gcc_wrote(
    programs: dict[str, Path], optimization: str, tmp_path: Path
) -> None:
    """At every row of the program's ``.debug_frame`` (readelf's reading) in a function that
    ``.pdata`` covers, the row read from ``.pdata`` (as for frame 0: epilogs read) is the same:
    CFA, return address, every saved register. One difference is allowed, and checked: in an
    epilog after ``lea rsp, [rbp + N]`` gcc's DWARF keeps the CFA on rbp, where Windows' rule
    reads it from rsp; both are right until ``pop rbp``, and the saved registers must then be
    at the same offsets from the CFA."""
    exe = programs[optimization]
    frames = load(str(as_elf(exe, tmp_path / "program.elf")))
    base = image_base(exe)
    unwinder = Unwinder("x86_64")
    span = [(base, base + 0x1000_0000)]
    unwinder.add_missing_module(exe.name, span, span, base=base, pe_file=str(exe))
    compared = differently = 0
    for fde, row in frames.rows():
        if fde.section != ".debug_frame" or not fde.start <= row.loc < fde.end:
            continue
        ours_row = unwinder.rule_at(row.loc)
        assert ours_row is not None, f"no .pdata row at {row.loc:#x} ({fde})"
        where = f"at {row.loc:#x} ({fde}): .pdata {ours_row}, DWARF {row}"
        code = instructions(exe, row.loc, fde.end)
        if code[0].startswith("ret"):
            # At a ret the return address is at [rsp], nothing else saved. (The DWARF there,
            # DW_CFA_def_cfa_sf after the epilog's pops, reads as "rsp-8" to readelf: a CFA
            # below the return address it puts at CFA-8, which cannot be.)
            assert ours_row["cfa"] == ("reg", 7, 8), where
            assert ours_row["registers"] == {16: ("offset", -8)}, where
            compared += 1
            continue
        theirs = {reg: rule for reg, rule in row.registers.items() if reg <= 16}
        assert dict(ours_row["registers"]) == theirs, where
        if ours_row["cfa"] != row.cfa:
            # rbp's CFA in the DWARF (gcc's frame-pointer functions), rsp's in ours: an epilog
            # of pops (after `lea rsp, [rbp + N]`) up to `pop rbp` and `ret`.
            assert row.cfa[:2] == ("reg", 6) and ours_row["cfa"][:2] == ("reg", 7), where
            assert all(i.startswith("pop") for i in code[: code.index("ret")]), where
            differently += 1
        compared += 1
    # Not vacuous: every function of the program and of mingw's start-up code has rows.
    assert compared > 150, compared
    assert differently < compared // 10, (differently, compared)


def same_function(ours: str, theirs: str) -> bool:
    """Whether ours names theirs. Ours names a function by its symbol where the file's symbol
    table has one, as for ELF files: the part of a function gcc outlines keeps its suffix
    (``WaitForMultipleObjectsEx.part.0``), where dump_syms writes the DWARF's name."""
    if ours == theirs:
        return True
    base, _, suffix = ours.partition(".")
    return base == theirs and suffix.split(".")[0] in GCC_CLONES


def physical(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The frames of a thread but the functions inlined into them (the PE files' DWARF names
    those)."""
    return [f for f in frames if not f["inline"]]


def named_frames(frames: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each frame's function, file and line, the functions inlined into it (innermost first:
    our inlined frames come before the frame they are inlined into), and its module."""
    out: list[tuple[Any, ...]] = []
    inlined: list[str] = []
    for f in frames:
        if f["inline"]:
            inlined.append(f["function"])
            continue
        out.append((f["function"], f["file"], f["line"], inlined, f["module"]))
        inlined = []
    return out


def _records_over(store: Path, module: str, offset: int, prefix: str, at: int) -> list[str]:
    """The lines of the module's symbol file in ``store`` that start with ``prefix`` and whose
    address and size (words ``at`` and ``at + 1``) hold ``offset``."""
    (sym,) = (store / module).glob(f"*/{module}.sym")
    out = []
    for line in sym.read_text().splitlines():
        if line.startswith(prefix):
            start, size = (int(word, 16) for word in line.split()[at : at + 2])
            if start <= offset < start + size:
                out.append(line)
    return out


def stack_cfi_covers(store: Path, module: str, offset: int) -> bool:
    """Whether the module's symbol file has a ``STACK CFI INIT`` record over ``offset``."""
    return bool(_records_over(store, module, offset, "STACK CFI INIT ", 3))


def sym_functions(store: Path, module: str, offset: int) -> list[tuple[int, str]]:
    """The module's symbol file's ``FUNC`` records over ``offset``: (start, name), in order."""
    lines = _records_over(store, module, offset, "FUNC ", 1)
    words = [line.split(maxsplit=4) for line in lines if not line.startswith("FUNC m ")]
    return sorted((int(w[1], 16), w[4]) for w in words)


def instructions(exe: Path, start: int, end: int) -> list[str]:
    """The mnemonics and operands of the program's instructions from ``start`` to ``end``, as
    mingw's objdump disassembles them."""
    proc = run(["x86_64-w64-mingw32-objdump", "-d", "--no-show-raw-insn",
                f"--start-address={start:#x}", f"--stop-address={end:#x}", str(exe)])  # fmt: skip
    out = [line.split("\t", 1)[1].strip() for line in proc.stdout.splitlines()
           if line.startswith(" ") and "\t" in line]  # fmt: skip
    assert out, proc.stderr
    return out


# -- whole stacks, from Wine's minidumps ---------------------------------------------------------


@functools.cache
def _base_of(pe: Path) -> int:
    return image_base(pe)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("optimization", OPTIMIZATIONS)
def test_crash_unwinds_by_pdata_to_the_threads_start(
    dumps: Any, programs: dict[str, Path], optimization: str, mode: str
) -> None:
    """Every thread of the dump, from the PE files alone (no symbol file, no PDB): unwound by
    their tables (``cfi``) from frame 0 to Wine's ``RtlUserThreadStart``, whose return address
    is zero (the end of a Windows stack); each return address follows a call; the crashed
    thread's frames in the program are the functions its DWARF names there, in the order the
    program calls them."""
    exe = programs[optimization]
    doc = ours(dumps(optimization, mode), exe)
    by_path = {m["path"]: m for m in doc["modules"]}
    assert doc["crashing_thread"] is not None
    for thread in doc["threads"]:
        frames = physical(thread["frames"])
        where = f"thread {thread['tid']}: {[(f['pc'], f['module'], f['trust']) for f in frames]}"
        assert thread["end"] == "pc_zero", where
        assert all(f["trust"] == "cfi" for f in frames[1:]), where
        assert frames[-1]["module"].lower().endswith("ntdll.dll"), where
        for f in frames[1:]:
            module = by_path[f["module"]]
            pe = module_file(f["module"], [exe.parent, WINE_DLLS])
            assert pe is not None, where
            rva = int(f["pc"], 16) - int(module["start"], 16)
            assert call_before(pe, rva, _base_of(pe)), f"{f['pc']} follows no call: {where}"
        if thread["tid"] != doc["crashing_thread"]:
            continue
        in_program = [f for f in frames if f["module"].endswith(exe.name)]
        pcs = [int(f["pc"], 16) - (0 if i == 0 else 1) for i, f in enumerate(in_program)]
        names = function_names(exe, pcs)
        expected = EXPECTED[mode] + ([] if mode == "thread" else MAIN_START)
        it = iter(names)
        assert all(name in it for name in expected), f"{names} lacks {expected}"
        if in_program[0] is frames[0]:
            assert names[0] == expected[0], names
        # Ours names them from the program's DWARF too: the innermost function at each frame
        # (an inlined one where there is one) is addr2line's.
        named = [n for n in named_frames(thread["frames"]) if n[4].endswith(exe.name)]
        assert [n[3][0] if n[3] else n[0] for n in named] == names, (named, names)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("optimization", OPTIMIZATIONS)
def test_frames_are_minidump_stackwalks_with_symbols(
    dumps: Any, programs: dict[str, Path], optimization: str, mode: str, tmp_path: Path
) -> None:
    """minidump-stackwalk, given every module's ``dump_syms`` symbol file (the dump given the
    ids to find them by: see windows.with_ids), walks every thread to the same frames (pcs and
    sps) as stackwalk does with the PE files and no symbol file."""
    exe = programs[optimization]
    made: WithIds = with_ids(dumps(optimization, mode), search(exe), tmp_path)
    reference = minidump_stackwalk(made.dump, made.store)
    doc = ours(made.dump, exe)
    theirs = {t["thread_id"]: t["frames"] for t in reference["threads"]}
    ours_named = {t["tid"]: named_frames(t["frames"]) for t in
                  ours(made.dump, exe, "--symbols-path", str(made.store))["threads"]}  # fmt: skip
    assert set(theirs) == {t["tid"] for t in doc["threads"]}
    for thread in doc["threads"]:
        mine = [int(f["pc"], 16) for f in physical(thread["frames"])]
        # (A caller's "offset" is its return address - 1, as Breakpad reports callers.)
        reference_pcs = [int(f["offset"], 16) + (f["trust"] != "context")
                         for f in theirs[thread["tid"]]]  # fmt: skip
        trusts = [f["trust"] for f in theirs[thread["tid"]]]
        where = f"thread {thread['tid']}: ours {[hex(p) for p in mine]}, theirs {trusts}"
        # Theirs goes one frame past ours: the zero return address, which it then drops
        # or scans beyond; ours ends there (pc_zero).
        assert reference_pcs[: len(mine)] == mine, where
        assert all(t == "cfi" for t in trusts[2 : len(mine)]), where
        # With the same symbol files, the same names, files and lines (inlined functions too),
        # but where two FUNC records hold the address: dump_syms writes one from the export
        # (or a placeholder "<unknown in M>") at the hot-patch padding before a Wine function,
        # without lines, and one from its DWARF 8 bytes in, with them. Theirs takes the outer,
        # ours the inner, whose name and line the function's DWARF gives.
        for f, mine_named in zip(theirs[thread["tid"]], ours_named[thread["tid"]], strict=False):
            inlines = [i["function"] for i in f.get("inlines") or []]
            over = sym_functions(made.store, f["module"], int(f["module_offset"], 16))
            if len(over) > 1:
                assert f["function"] == over[0][1] and f["line"] is None, where
                assert same_function(mine_named[0], over[-1][1]), where
                assert mine_named[2] is not None, where
                continue
            # (The symbol file's names and lines win over the PE file's DWARF, as a PDB's would:
            # the file as dump_syms wrote it, ".\dlls/kernel32\thread.c".)
            assert same_function(mine_named[0], f["function"]), where
            assert mine_named[1:4] == (f["file"], f["line"], inlines), where
        if trusts[1] != "cfi":
            # Frame 0 in a function with no entry in .pdata (a leaf: a system call's stub), of
            # which the symbol file has no STACK CFI: theirs scans for the return address at
            # [rsp], ours takes it there by Windows' rule.
            frame = theirs[thread["tid"]][0]
            covered = stack_cfi_covers(made.store, frame["module"], int(frame["module_offset"], 16))
            assert trusts[1] == "scan" and not covered, where


# -- damaged files --------------------------------------------------------------------------------


def _damaged(exe: Path, into: Path, damage: str) -> Path:
    """A copy of the program, in a directory of its own under its own name, its unwind info
    (``.xdata``) overwritten with 0xff bytes (an unknown version), or the file cut after its
    headers (no function table left)."""
    into.mkdir()
    out = into / exe.name
    data = bytearray(exe.read_bytes())
    if damage == "xdata":
        proc = run(["x86_64-w64-mingw32-objdump", "-h", str(exe)])
        (line,) = [line.split() for line in proc.stdout.splitlines() if " .xdata " in line]
        size, offset = int(line[2], 16), int(line[5], 16)
        data[offset : offset + size] = b"\xff" * size
    else:
        del data[1024:]
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("optimization", OPTIMIZATIONS)
def test_a_raised_exceptions_signature_is_siggens(
    dumps: Any, programs: dict[str, Path], optimization: str, tmp_path: Path
) -> None:
    """An exception raised by RaiseException: the signature of stackwalk's frames (named from
    the PE files) is siggen's of minidump-stackwalk's frames of the same dump (named from
    dump_syms' files): kernelbase's RaiseException skipped, the program's function named."""
    exe = programs[optimization]
    made = with_ids(dumps(optimization, "raise"), search(exe), tmp_path)
    doc = ours(made.dump, exe)
    (crashed,) = [t for t in doc["threads"] if t["tid"] == doc["crashing_thread"]]
    assert crashed["frames"][0]["function"] == "RaiseException", crashed["frames"][0]
    reference = minidump_stackwalk(made.dump, made.store)
    theirs = SignatureGenerator().generate(
        {
            "os": "Windows NT",
            "crashing_thread": reference["crashing_thread"],
            "threads": reference["threads"],
        }  # fmt: skip
    )
    ours_signature = signature(crashed["frames"]).text
    assert ours_signature == theirs.signature, (ours_signature, theirs)
    # Not vacuous: the machinery skipped, the program named.
    assert ours_signature in ("check_header", "main"), ours_signature


@pytest.mark.parametrize("damage", ["xdata", "cut"])
def test_a_damaged_pe_file_stops_cfi_with_its_reason_and_the_walk_goes_on(
    dumps: Any, programs: dict[str, Path], damage: str, tmp_path: Path
) -> None:
    """The program's file found for its module with its unwind info damaged (its headers, and so
    its code id, intact), or cut short: no crash, no traceback; the frames in it are found by
    the other strategies (frame pointers, scanning), each return address still one that follows
    a call, and where CFI alone is asked for, the walk stops there saying why."""
    exe = programs["-O0"]
    damaged = _damaged(exe, tmp_path / "damaged", damage)
    dump = dumps("-O0", "leaf")
    path = f"{damaged.parent}:{WINE_DLLS}"
    proc = stackwalk_minidump("--json", dump, "--lib-search-path", path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    (thread,) = doc["threads"]
    frames = physical(thread["frames"])
    assert frames and frames[0]["module"].endswith(exe.name)
    # Intact, the same thread unwinds by CFI alone; damaged, not in the program.
    in_program = [f for f in frames[1:] if f["module"].endswith(exe.name)]
    assert all(f["trust"] != "cfi" for f in in_program), frames
    for f in frames[1:]:
        pe = module_file(f["module"], [exe.parent, WINE_DLLS])
        assert pe is not None
        module = next(m for m in doc["modules"] if m["path"] == f["module"])
        rva = int(f["pc"], 16) - int(module["start"], 16)
        assert call_before(pe, rva, _base_of(pe)), f
    # With CFI alone, the walk stops in the program, saying why.
    proc = stackwalk_minidump("--json", dump, "--lib-search-path", path, "--strategies", "cfi")
    (alone,) = json.loads(proc.stdout)["threads"]
    if damage == "xdata":
        assert alone["end"] == "bad_cfi", alone
        assert "bad x64 unwind info: unwind info of an unknown version" in alone["end_detail"]
    else:
        # Not a PE file any more (its section table cut): said, and not used.
        assert f"not unwound: {damaged}: not a PE file" in proc.stderr, proc.stderr
        assert alone["end"] == "no_module", alone
    assert len(alone["frames"]) == 1, alone


def test_modules_whose_pe_files_are_missing_are_named_once(
    dumps: Any, programs: dict[str, Path]
) -> None:
    """With only the program's directory searched, Wine's DLLs are missing: one warning names
    them all (not the program), the program's frames are still unwound by its tables, and the
    walk goes on past them by the other strategies."""
    exe = programs["-O2"]
    dump = dumps("-O2", "leaf")
    proc = stackwalk_minidump("--json", dump, "--lib-search-path", exe.parent)
    # (1: a walk stopped early, scanning past kernel32 with nothing to tell where ntdll's ends.)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "PE files of" in line]
    assert "not found by name in --lib-search-path" in warning, warning
    missing = warning.rsplit(": ", 1)[1].split(", ")
    assert "ntdll.dll" in missing and "kernel32.dll" in missing, missing
    assert exe.name not in missing, missing
    (thread,) = json.loads(proc.stdout)["threads"]
    in_program = [f for f in physical(thread["frames"])[1:] if f["module"].endswith(exe.name)]
    assert len(in_program) >= 3 and all(f["trust"] == "cfi" for f in in_program), thread


def test_names_from_the_pe_files_own_symbols_without_dwarf(
    dumps: Any, programs: dict[str, Path], tmp_path: Path
) -> None:
    """The PE files with their DWARF stripped (as Windows' own DLLs ship, their PDBs elsewhere):
    the program's frames named from its COFF symbol table, the system DLLs' from their exports,
    with the offsets into those functions; each equal to mingw's addr2line on the unstripped
    program, and to minidump-stackwalk's names from dump_syms' files of the unstripped DLLs."""
    exe = programs["-O0"]
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    for pe in (exe, WINE_DLLS / "kernel32.dll", WINE_DLLS / "ntdll.dll"):
        proc = run(["x86_64-w64-mingw32-strip", "--strip-debug", "-o", stripped / pe.name, pe])
        assert proc.returncode == 0, proc.stderr
    dump = dumps("-O0", "leaf")
    # (Stripping changes the image's size, and so its code id: the files are another build's
    # as far as the dump can tell, used as told, their frames doubtful.)
    proc = stackwalk_minidump("--json", dump, "--lib-search-path", stripped, "--allow-mismatch")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("code id mismatch for") == 3, proc.stderr
    (thread,) = json.loads(proc.stdout)["threads"]
    frames = thread["frames"]
    assert not any(f["inline"] or f["file"] for f in frames), frames  # no DWARF left
    assert all(f["doubtful"] for f in frames), frames
    in_program = [f for f in frames if f["module"].endswith(exe.name)]
    pcs = [int(f["pc"], 16) - (0 if i == 0 else 1) for i, f in enumerate(in_program)]
    assert [f["function"] for f in in_program] == function_names(exe, pcs)
    made = with_ids(dump, search(exe), tmp_path)
    (reference,) = minidump_stackwalk(made.dump, made.store)["threads"]
    for f in frames[-2:]:
        (theirs,) = [t for t in reference["frames"] if int(t["offset"], 16) + 1 == int(f["pc"], 16)]
        assert (f["function"], int(f["function_offset"], 16)) == (
            theirs["function"],
            int(theirs["function_offset"], 16) + 1,
        ), (f, theirs)
    assert [f["function"] for f in frames[-2:]] == ["BaseThreadInitThunk", "RtlUserThreadStart"]


@pytest.fixture(scope="module")
def clang_program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """crash_win.c built by clang and lld at -O2 with a PDB (x64 CodeView, .pdata)."""
    out = tmp_path_factory.mktemp("windows-clang")
    return build_clang(out / "crash64.exe", "-O2", target="x86_64")


@pytest.mark.parametrize("mode", ["leaf", "qsort", "raise"])
def test_an_x64_pdb_names_frames_as_its_symbol_file(
    clang_program: tuple[Path, Path], prefix: Path, mode: str, tmp_path: Path
) -> None:
    """An x64 program built with a PDB: unwound by its PE file's tables, its frames named by
    its PDB read directly (filed as Microsoft's symbol stores file it), with the functions,
    files and lines minidump-stackwalk gives from dump_syms' symbol file of the same PDB, at
    the same frames."""
    exe, pdb = clang_program
    raw = crash(exe, mode, tmp_path / f"{mode}.dmp", prefix)
    record = pe_codeview(exe)
    assert record is not None, f"lld wrote no CodeView record into {exe}"
    made = with_ids(raw, [WINE_DLLS], tmp_path, own={exe.name: record})
    reference_store = tmp_path / "with-sym"
    shutil.copytree(made.store, reference_store)
    identity = pdb_symbols(pdb, reference_store)
    (made.store / pdb.name / identity).mkdir(parents=True)
    shutil.copy(pdb, made.store / pdb.name / identity / pdb.name)
    proc = stackwalk_minidump(
        "--json", "--format", "minidump-stackwalk", made.dump, "--symbols-path", made.store,
        "--lib-search-path", f"{exe.parent}:{WINE_DLLS}",
    )  # fmt: skip
    assert proc.returncode == 0 and "not used" not in proc.stderr, proc.stderr
    mine = json.loads(proc.stdout)
    theirs = minidump_stackwalk(made.dump, reference_store)
    named = 0
    keys = ("function", "file", "line", "inlines")
    for mine_t, their_t in zip(mine["threads"], theirs["threads"], strict=True):
        assert [f["offset"] for f in mine_t["frames"]] == [f["offset"] for f in their_t["frames"]]
        for a, b in zip(mine_t["frames"], their_t["frames"], strict=True):
            if a["module"] == exe.name and b["function"] is not None:
                assert [a[k] for k in keys] == [b[k] for k in keys], (a, b)
                named += 1
    assert named >= 2
