"""SFrame (``.sframe``): the tables ``gcc -Wa,--gsframe`` makes, read as readelf reads them,
checked against the same code's ``.eh_frame`` at every byte, and unwinding stacks alone.

The assembler here (binutils 2.40) writes version 1. Versions 2 and 3 (binutils 2.41-2.45 and
2.46) are written from the same rows byte by byte by tests/sframe_tables.py, which follows the
specification independently of stackwalk's reader (start fields relative to the section and to
themselves, v3's index entries and attributes, a v3 flexible FDE with the same rules), and put
into copies of the programs with objcopy.

The references: ``readelf --sframe`` for every row of every table; the programs' own
``.eh_frame`` for what the rows mean (``ElfFile.verify_sframe`` compares them at every address,
and a damaged table must show exactly the damage planted); gdb for the stacks, unwound once by
``.eh_frame`` and once by each version of the table with ``.eh_frame`` hidden (renamed away,
so that nothing but the SFrame rows is left for the program's frames).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sframe_tables
from realstacks import O2, Builder, Captures, assert_gdb_frames, unwind
from stackwalk import ElfFile, StackwalkError, Unwinder

AARCH64 = ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "/usr/aarch64-linux-gnu")
GSFRAME = "-Wa,--gsframe"
# (source, flags, C++): the programs whose tables are checked, on both architectures.
PROGRAMS = [
    ("deep.c", O2),
    ("deep.c", ("-O0",)),
    ("cxx.cpp", ("-O2",)),
    ("qsort.c", ("-O2",)),
]


def compilers(arch: str, source: str) -> str:
    cxx = source.endswith(".cpp")
    if arch == "x86_64":
        return "g++" if cxx else "gcc"
    return AARCH64[1] if cxx else AARCH64[0]


def built(build: Builder, arch: str, source: str, flags: tuple[str, ...]) -> Path:
    return build(source, *flags, GSFRAME, compiler=compilers(arch, source))


CASES = [
    pytest.param(arch, source, flags, id=f"{arch}-{Path(source).stem}{''.join(flags)}")
    for arch in ("x86_64", "aarch64")
    for source, flags in PROGRAMS
]


def ours(path: Path) -> list[dict[str, Any]]:
    table = ElfFile(path).sframe()
    assert table is not None
    return table["functions"]


@pytest.mark.parametrize(("arch", "source", "flags"), CASES)
def test_every_row_is_readelfs(build: Builder, arch: str, source: str, flags: Any) -> None:
    """Functions (start, size, masked or not) and rows (start, CFA, FP, RA) as readelf --sframe
    prints them. readelf 2.40 prints x86_64's return address, at the fixed CFA-8 the header
    gives, as "u" (not in the row): ours says where it is."""
    program = built(build, arch, source, flags)
    theirs = sframe_tables.readelf(program)
    mine = ours(program)
    assert len(theirs) == len(mine) >= 2
    fixed_ra = "c-8" if arch == "x86_64" else None
    for f, t in zip(mine, theirs, strict=True):
        assert (f["start"], f["end"] - f["start"]) == (t.start, t.size)
        assert (f["repeat"] is not None) == t.masked
        rows = [(r["start"], r["cfa"], r["fp"], r["ra"]) for r in f["rows"]]
        expected = [(r.start, r.cfa, r.fp, fixed_ra or r.ra) for r in t.rows]
        assert rows == expected, f"function at {t.start:#x}"
    # Both kinds of row were met: frame-pointer CFAs (-O0, the VLA) and saved frame pointers.
    if "-O0" in flags:
        cfas = {r["cfa"][:2] for f in mine for r in f["rows"]}
        fps = {r["fp"] for f in mine for r in f["rows"]}
        assert "fp" in cfas or arch == "aarch64"
        assert any(fp.startswith("c-") for fp in fps)


@pytest.mark.parametrize(("arch", "source", "flags"), CASES)
def test_the_tables_agree_with_eh_frame_everywhere(
    build: Builder, arch: str, source: str, flags: Any
) -> None:
    """Every byte of every SFrame function is compared with the .eh_frame row there: the
    assembler's tables agree with its CFI, and every function it describes has an FDE."""
    program = built(build, arch, source, flags)
    report = ElfFile(program).verify_sframe()
    assert report["disagreements"] == [] and report["errors"] == []
    functions = ours(program)
    assert report["functions"] == len(functions)
    assert report["rows"] == sum(len(f["rows"]) for f in functions)
    assert report["bytes"] == sum(f["end"] - f["start"] for f in functions)
    # The CRT's code (assembled without --gsframe) has FDEs and no SFrame function.
    assert report["without_sframe"]


def _v1_table(program: Path) -> tuple[sframe_tables.Table, int]:
    """The v1 table (each row's ``offset`` into the section) and the section's file offset."""
    data, address, file_offset = sframe_tables.section(program)
    return sframe_tables.read_v1(data, address), file_offset


def plant_damage(program: Path, copy: Path, arch: str) -> list[tuple[Any, ...]]:
    """Write ``copy``: ``program`` with one row's CFA offset and saved frame pointer's offset
    changed (a function with a frame: its second row sets up the frame). Returns what the check
    must report: (field, start, end, sframe, dwarf, function) for each."""
    table, file_offset = _v1_table(program)
    index = next(
        i
        for i, f in enumerate(table.functions)
        if len(f.rows) >= 3 and len(f.rows[1].words) >= 2 and f.rows[1].words[0] < 100
    )
    function = table.functions[index]
    fp_word = 1 if arch == "x86_64" else 2
    row = function.rows[1]
    damaged = bytearray(program.read_bytes())
    words = file_offset + row.offset
    damaged[words] = row.words[0] + 8  # (1-byte words: -O0's small frames)
    damaged[words + fp_word] = (row.words[fp_word] - 8) & 0xFF
    copy.write_bytes(damaged)
    start = function.start + row.start
    end = function.start + function.rows[2].start
    base = "sp" if row.info & 1 else "fp"
    return [
        ("cfa", start, end, f"{base}{row.words[0] + 8:+}", f"{base}{row.words[0]:+}"),
        ("fp", start, end, f"c{row.words[fp_word] - 8:+}", f"c{row.words[fp_word]:+}"),
        function.start,
    ]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_verify_finds_the_planted_damage(build: Builder, tmp_path: Path, arch: str) -> None:
    """A copy whose table has one CFA offset and one saved frame pointer's offset changed: the
    check reports those two rows' addresses, what each table says there, and nothing else."""
    program = built(build, arch, "deep.c", ("-O0",))
    *expected, function = plant_damage(program, tmp_path / "damaged", arch)
    found = ElfFile(tmp_path / "damaged").verify_sframe()["disagreements"]
    assert [(d["field"], d["start"], d["end"], d["sframe"], d["dwarf"]) for d in found] == expected
    assert all(d["function"] == function for d in found)
    # The good table reports nothing (the check can tell the two apart).
    assert ElfFile(program).verify_sframe()["disagreements"] == []


def stackwalk_sframe(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stackwalk", "sframe", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_line(build: Builder, tmp_path: Path) -> None:
    """``stackwalk sframe``: every row; ``--verify``: exit 0 and no disagreement for the good
    table, exit 1 and each planted one (addresses, field, both tables' words) for the damaged;
    ``--json`` the same report; a file without a table is an error naming it."""
    program = built(build, "x86_64", "deep.c", ("-O0",))
    listing = stackwalk_sframe(program)
    assert listing.returncode == 0, listing.stderr
    rows = [line.split() for line in listing.stdout.splitlines() if line.startswith("    0x")]
    expected = [
        [f"{r['start']:#018x}", "cfa", r["cfa"], "fp", r["fp"], "ra", r["ra"]]
        for f in ours(program)
        for r in f["rows"]
    ]
    assert rows == expected
    good = stackwalk_sframe("--verify", program)
    assert good.returncode == 0 and "no disagreements" in good.stdout, good
    *planted, function = plant_damage(program, tmp_path / "damaged", "x86_64")
    bad = stackwalk_sframe("--verify", tmp_path / "damaged")
    assert bad.returncode == 1, bad
    assert "2 disagreements" in bad.stdout.splitlines()[0]
    for field, start, end, sframe, dwarf in planted:
        where = f"  {start:#x}-{end:#x} (function {function:#x})"
        assert f"{where} {field}: sframe {sframe}, dwarf {dwarf}" in bad.stdout.splitlines()
    both = stackwalk_sframe("--verify", "--json", program, tmp_path / "damaged")
    assert both.returncode == 1
    reports = [json.loads(line) for line in both.stdout.splitlines()]
    assert [len(r["disagreements"]) for r in reports] == [0, 2]
    assert reports[1]["file"] == str(tmp_path / "damaged")
    plain = build("deep.c", "-O2")
    missing = stackwalk_sframe(plain)
    assert (
        missing.returncode == 2
        and missing.stderr == f"stackwalk: error: {plain}: no .sframe section\n"
    )


def variants(program: Path, directory: Path, arch: str, *, hide: bool) -> dict[str, Path]:
    """The program with its table as written by binutils 2.40 (v1) and as versions 2 (start
    fields from the section, and from themselves) and 3 (x86_64: also as flexible FDEs)."""
    data, address, _ = sframe_tables.section(program)
    table = sframe_tables.read_v1(data, address)
    out = {}
    if hide:
        out["v1"] = sframe_tables.hide_eh_frame(program, directory / "v1")
    for name, version, pcrel in (("v2-section", 2, False), ("v2-pcrel", 2, True), ("v3", 3, True)):
        contents = sframe_tables.write(table, version, address, pcrel=pcrel)
        out[name] = sframe_tables.replace_section(
            program, contents, directory / name, hide_eh_frame=hide
        )
    if arch == "x86_64":
        flex = sframe_tables.Table(
            **{
                **table.__dict__,
                "functions": [
                    sframe_tables.flexible(table, f) if f.repeat == 0 else f
                    for f in table.functions
                ],
            }
        )
        contents = sframe_tables.write(flex, 3, address)
        out["v3-flexible"] = sframe_tables.replace_section(
            program, contents, directory / "v3-flexible", hide_eh_frame=hide
        )
    return out


def _rows(functions: list[dict[str, Any]]) -> list[Any]:
    return [
        (
            f["start"],
            f["end"],
            f["repeat"],
            [(r["start"], r["cfa"], r["fp"], r["ra"]) for r in f["rows"]],
        )
        for f in functions
    ]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_version_reads_the_same_rows(build: Builder, tmp_path: Path, arch: str) -> None:
    """v2 (both start encodings), v3 and v3 flexible FDEs give v1's rows, and agree with
    .eh_frame at every byte as v1 does."""
    program = built(build, arch, "deep.c", ("-O0",))
    expected = _rows(ours(program))
    made = variants(program, tmp_path, arch, hide=False)
    assert len(made) == (4 if arch == "x86_64" else 3)
    for name, path in made.items():
        table = ElfFile(path).sframe()
        assert table is not None and table["version"] == int(name[1]), name
        if name == "v3-flexible":
            assert any(f["flexible"] for f in table["functions"])
        assert _rows(table["functions"]) == expected, name
        report = ElfFile(path).verify_sframe()
        assert report["disagreements"] == [] and report["errors"] == [], name


STACK_CASES = [
    pytest.param("x86_64", O2, id="x86_64-O2"),
    pytest.param("x86_64", ("-O0",), id="x86_64-O0"),
    pytest.param("aarch64", O2, id="aarch64-O2"),
    pytest.param("aarch64", ("-O0",), id="aarch64-O0"),
]


def by_rules(cap: Any) -> Any:
    """The capture unwound by unwind tables alone (no frame-pointer walk, no scan)."""
    unwinder = Unwinder(arch=cap.arch, strategies=["cfi"])
    cap.add_modules_to(unwinder)
    return unwinder.unwind(cap.regs, cap.memory)


@pytest.mark.parametrize(("arch", "flags"), STACK_CASES)
def test_stacks_unwind_by_sframe_alone(
    build: Builder, captures: Captures, tmp_path: Path, arch: str, flags: Any
) -> None:
    """deep.c stopped in stop_here (assorted frames: big ones, a VLA's frame pointer, -O0's
    frame records): gdb's frames by .eh_frame, and the same with .eh_frame hidden and each
    version of the table in its place. Without the table, the walk stops in the program."""
    program = built(build, arch, "deep.c", flags)
    cap = captures([program], "stop_here", sysroot=None if arch == "x86_64" else AARCH64[2])
    assert_gdb_frames(unwind(Unwinder, cap), cap)
    assert by_rules(cap).pcs == cap.gdb_pcs
    original = tmp_path / "original"
    shutil.copy2(program, original)
    try:
        for name, path in variants(original, tmp_path, arch, hide=True).items():
            assert ElfFile(path).section_address(".eh_frame") is None
            os.replace(path, program)
            trace = by_rules(cap)
            assert trace.pcs == cap.gdb_pcs, f"{name}: {trace.end}: {trace.end_detail}"
            assert [f.sp for f in trace.frames] == [f["sp"] for f in cap.gdb_frames], name
        # No table, no .eh_frame: the program's frames cannot be unwound by rules.
        sframe_tables.hide_eh_frame(original, tmp_path / "bare")
        bare = tmp_path / "bare-no-sframe"
        objcopy = sframe_tables.objcopy_for(original)
        subprocess.run(
            [objcopy, "--remove-section", ".sframe", str(tmp_path / "bare"), str(bare)], check=True
        )
        os.replace(bare, program)
        assert len(by_rules(cap).pcs) < len(cap.gdb_pcs)
    finally:
        shutil.copy2(original, program)


def test_a_damaged_header_is_a_clear_error(build: Builder, tmp_path: Path) -> None:
    """A table whose header lies (rows past the section's end) is not read: an ElfError naming
    the section and why, and the unwinder goes on without it."""
    program = built(build, "x86_64", "deep.c", O2)
    data, _, file_offset = sframe_tables.section(program)
    damaged = bytearray(program.read_bytes())
    damaged[file_offset + 16 : file_offset + 20] = struct.pack("<I", 1 << 30)  # fre_len
    copy = tmp_path / "damaged"
    copy.write_bytes(damaged)
    with pytest.raises(StackwalkError, match=r"\.sframe: rows past the section's end"):
        ElfFile(copy).sframe()
    with pytest.raises(StackwalkError, match="cannot be read: rows past"):
        ElfFile(copy).verify_sframe()
    assert len(data) > 28


def test_perf_samples_unwind_by_sframe_alone(build: Builder, tmp_path: Path) -> None:
    """A perf recording of a busy program built with --gsframe (samples anywhere in its
    functions: prologues, bodies, epilogues): every sample unwound by rules alone gives the same
    frames with the program's .eh_frame hidden as with it; with neither table, the walks are
    shorter (so the SFrame rows are what carried them)."""
    from perfdata import perf_env, perf_record

    program = build("sframe_busy.c", *O2, GSFRAME)
    perf_record(tmp_path / "perf.data", [program, "8000000"], tmp_path)

    def samples() -> list[list[tuple[str, str]]]:
        cmd = [sys.executable, "-m", "stackwalk", "perf", str(tmp_path / "perf.data"), "--json",
               "--strategies", "cfi", "--no-inline"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env=perf_env(tmp_path))  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        return [[(f["pc"], f["function"]) for f in json.loads(line)["frames"] if not f["kernel"]]
                for line in proc.stdout.splitlines()]  # fmt: skip

    original = tmp_path / "original"
    shutil.copy2(program, original)
    try:
        by_eh_frame = samples()
        os.replace(sframe_tables.hide_eh_frame(original, tmp_path / "hidden"), program)
        by_sframe = samples()
        bare = tmp_path / "bare"
        subprocess.run(["objcopy", "--remove-section", ".sframe", str(program), str(bare)],
                       check=True)  # fmt: skip
        os.replace(bare, program)
        by_nothing = samples()
    finally:
        shutil.copy2(original, program)
    in_program = [s for s in by_eh_frame if any(name in ("leaf", "big_frame", "with_vla",
                                                          "recurse") for _, name in s)]  # fmt: skip
    assert len(in_program) > 200
    assert by_sframe == by_eh_frame
    assert sum(map(len, by_nothing)) < sum(map(len, by_eh_frame))
