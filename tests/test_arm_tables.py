"""ARM32's unwind rules from two more sources, read against gcc's own DWARF as binutils' readelf
prints it: a Breakpad symbol file's ``STACK CFI`` (dump_syms' of the program), and the program's
``.ARM.exidx`` tables (EHABI), which describe each function's body.

The programs are built by ``arm-linux-gnueabihf-gcc`` with ``-g`` (``.debug_frame``) and
``-funwind-tables`` (an ``.ARM.exidx`` entry for every function of its own), in ARM code and in
Thumb-2, with and without optimization.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from corefiles import ARM_GCC, run
from readelf_frames import Row, load, run_readelf
from realstacks import Builder
from stackwalk import Unwinder
from stackwalk._core import SymbolTable

DUMP_SYMS = Path.home() / ".cargo" / "bin" / "dump_syms"
BUILDS = {
    "arm-O2": ("-O2", "-marm", "-funwind-tables"),
    "thumb-O2": ("-O2", "-mthumb", "-funwind-tables"),
    "thumb-O0": ("-O0", "-mthumb", "-funwind-tables"),
}


# Each program built, with the flags it was built with.
FLAGS: dict[Path, tuple[str, ...]] = {}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def program(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = Builder(tmp_path_factory.mktemp("arm-tables"))
    path = build("crash_deep.c", *BUILDS[request.param], compiler=ARM_GCC)
    FLAGS[path] = BUILDS[request.param]
    return path


def debug_frame_rows(program: Path) -> list[tuple[int, Row]]:
    """readelf's rows of the program's ``.debug_frame``, each at its location."""
    return [
        (row.loc, row)
        for fde, row in load(str(program)).rows()
        if fde.section == ".debug_frame" and fde.start <= row.loc < fde.end
    ]


def test_breakpad_stack_cfi_rows_are_the_dwarf_rows(program: Path, tmp_path: Path) -> None:
    """At every row of the program's ``.debug_frame``, the rule its Breakpad symbol file gives
    (dump_syms: ``.cfa: sp 8 + r3: .cfa -8 + ^ .ra: .cfa -4 + ^``) is readelf's: the CFA, the
    return address (lr) and every saved register. One difference, dump_syms': where an epilog's
    DWARF restores a register (``DW_CFA_restore: r7``, -O0 Thumb code's frame pointer), it writes
    no rule, so the symbol file keeps the one before; ours reads the file as written."""
    sym = tmp_path / "program.sym"
    sym.write_text(run([str(DUMP_SYMS), str(program)]).stdout)
    assert sym.read_text().startswith("MODULE Linux arm ")
    unwinder = Unwinder("arm")
    span = [(0, 0x1000_0000)]
    unwinder.add_missing_module(program.name, span, span, sym_file=str(sym), base=0)
    restored = {int(r) for r in re.findall(r"DW_CFA_restore: r(\d+)", run_readelf(
        str(program), "frames"))}  # fmt: skip
    rows = debug_frame_rows(program)
    for loc, row in rows:
        ours = unwinder.rule_at(loc)
        assert ours is not None, f"no STACK CFI row at {loc:#x}"
        assert ours["cfa"] == row.cfa, (hex(loc), ours, row)
        # Breakpad writes lr's "same value" out (".ra: lr"): the DWARF leaves it unsaid.
        registers = {r: rule for r, rule in ours["registers"].items() if rule != ("same_value",)}
        kept = {r for r in set(registers) - set(row.registers) if r in restored}
        assert {r: registers[r] for r in set(registers) - kept} == dict(row.registers), (
            hex(loc), ours, row,
        )  # fmt: skip
    assert len(rows) > 10, len(rows)


# crash_deep.c's functions: a small frame, a big one, recursion, many registers saved.
OWN_FUNCTIONS = {"crash_here", "small_frame", "big_frame", "recurse", "many_saved", "main"}
CALL = re.compile(r"\s+([0-9a-f]+):\t([0-9a-f ]+?)\s*\t(bl|blx)\s")


def call_sites(program: Path) -> list[int]:
    """The return addresses of the calls (``bl``, ``blx``) in crash_deep.c's functions."""
    out = subprocess.run(["arm-linux-gnueabihf-objdump", "-d", str(program)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    sites, function = [], None
    for line in out.splitlines():
        if m := re.match(r"[0-9a-f]+ <(\w+)>:$", line):
            function = m.group(1)
        elif (m := CALL.match(line)) and function in OWN_FUNCTIONS:
            size = len(m.group(2).replace(" ", "")) // 2
            sites.append(int(m.group(1), 16) + size)
    return sites


def test_ehabi_rows_are_the_dwarf_rows_at_every_call(program: Path, tmp_path: Path) -> None:
    """With ``.debug_frame`` removed the program is unwound by its ``.ARM.exidx`` entries: at
    every return address of its own functions' calls (less one, as a caller's frame is looked
    up), the CFA and every register saved are readelf's reading of the DWARF there."""
    stripped = tmp_path / "program.exidx-only"
    subprocess.run(["arm-linux-gnueabihf-objcopy", "--remove-section=.debug_frame",
                    str(program), str(stripped)], check=True)  # fmt: skip
    unwinder = Unwinder("arm")
    unwinder.add_module(str(stripped), 0)
    frames = load(str(program))
    sites = call_sites(program)
    for ra in sites:
        found = frames.row_at(ra - 1)
        assert found is not None, hex(ra)
        _, row = found
        ours = unwinder.rule_at(ra - 1)
        assert ours is not None, f"no .ARM.exidx row at {ra - 1:#x}"
        assert ours["cfa"] == row.cfa, (hex(ra), ours, row)
        assert ours["registers"] == dict(row.registers), (hex(ra), ours, row)
    assert len(sites) >= 5, sites


def test_thumb_functions_are_named_from_their_first_byte(program: Path) -> None:
    """A Thumb function's symbol value has bit 0 set (readelf -s: 0x...5 for a function at
    0x...4); a pc in it is named at its offset from the function's first byte, as binutils' nm
    gives the start (bit 0 cleared) and size."""
    listed = re.findall(r"^([0-9a-f]+) ([0-9a-f]+) [Tt] (\w+)$", run(
        ["arm-linux-gnueabihf-nm", "-S", "--defined-only", str(program)]
    ).stdout, re.M)  # fmt: skip
    values = set(re.findall(r"^\s*\d+: ([0-9a-f]+) .* FUNC .* (\w+)$",
                            run(["readelf", "-Ws", str(program)]).stdout, re.M))  # fmt: skip
    table = SymbolTable(str(program))
    odd = named = 0
    for start, size, name in listed:
        if name not in OWN_FUNCTIONS:
            continue
        address, length = int(start, 16), int(size, 16)
        odd += (f"{address | 1:08x}", name) in values
        for offset in (0, 2, length - 2):
            assert table.lookup(address + offset) == (name, offset), (name, hex(address + offset))
            named += 1
    # Thumb code's values are odd, ARM code's even: the case is there to be handled.
    assert odd == (0 if "-marm" in FLAGS[program] else len(OWN_FUNCTIONS)), odd
    assert named == 3 * len(OWN_FUNCTIONS)
