"""SFrame rows against DWARF CFI rows, per lookup: the same program (tests/programs/deep.c, -O2
and -O0, built with ``-Wa,--gsframe``) asked for the rules at every address of every function its
``.sframe`` describes (``Unwinder.rule_at``: no rule cache), once with its ``.eh_frame`` and once
with it hidden, so that the SFrame rows answer; side by side in one run. Both pay the same Python
call per address: the difference is the tables'. In ``make test`` each runs once
(``--benchmark-disable``), still checking that both tables give the same CFA and return
address at every address (where ``.eh_frame``'s CFA is no expression: the PLT's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stackwalk import ElfFile, Unwinder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import sframe_tables  # noqa: E402
from realstacks import PROGRAMS  # noqa: E402

LEVELS = {"O2": ("-O2", "-fomit-frame-pointer"), "O0": ("-O0",)}


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, list[int]]]:
    """Per level: the program, its copy with .eh_frame hidden, and every address its SFrame
    functions cover."""
    out = {}
    for level, flags in LEVELS.items():
        tmp = tmp_path_factory.mktemp(f"sframe-{level}")
        exe = tmp / "deep"
        cmd = ["gcc", *flags, "-Wa,--gsframe", str(PROGRAMS / "deep.c"), "-o", str(exe)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        hidden = sframe_tables.hide_eh_frame(exe, tmp / "deep-sframe-only")
        table = ElfFile(exe).sframe()
        assert table is not None
        pcs = [pc for f in table["functions"] for pc in range(f["start"], f["end"])]
        out[level] = (exe, hidden, pcs)
    return out


def rows(path: Path, pcs: list[int]) -> list[Any]:
    unwinder = Unwinder(arch="x86_64")
    unwinder.add_module(str(path))
    return [unwinder.rule_at(pc) for pc in pcs]


@pytest.mark.benchmark(group="sframe", min_time=0.01)
@pytest.mark.parametrize("tables", ["eh_frame", "sframe"])
@pytest.mark.parametrize("level", list(LEVELS))
def test_rules_at_every_address(
    benchmark: Any, programs: dict[str, tuple[Path, Path, list[int]]], level: str, tables: str
) -> None:
    exe, hidden, pcs = programs[level]
    answers = benchmark(rows, exe if tables == "eh_frame" else hidden, pcs)
    reference = rows(exe, pcs)
    for pc, mine, theirs in zip(pcs, answers, reference, strict=True):
        assert mine is not None, hex(pc)
        if theirs["cfa"][0] == "reg":
            assert (mine["cfa"], mine["registers"][16]) == (
                theirs["cfa"], theirs["registers"][16]), hex(pc)  # fmt: skip
    benchmark.extra_info["lookups"] = len(pcs)
    if benchmark.stats:
        benchmark.extra_info["ns_per_lookup"] = benchmark.stats.stats.median * 1e9 / len(pcs)
