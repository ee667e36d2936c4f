"""The CFI rows of both unwinders, row by row against ``readelf --debug-dump=frames-interp``.

For every row readelf prints (see readelf_frames.py for its notation), ``Unwinder.rule_at`` is
asked at the row's first address and at its last one (the byte before the next row), with the
module added at bias 0 so that runtime addresses are ELF addresses. It must report the FDE
readelf shows there (range, signal-frame CIE), the same CFA rule, the same return-address rule
and the same rule in every other column; outside every FDE it must report nothing.

Targets: the system's libc, libstdc++ and libpython (x86_64), the aarch64 and i386 cross libcs
(the i386 one: 32-bit CFI, 4-byte addresses), and small libraries assembled here whose CFI
directives give every notation readelf has (val_offset, same_value, register, (val_)expression,
undefined, restores, a signal-frame CIE, a CIE with another return-address column), once each in
``.eh_frame``, in ``.debug_frame`` and in both.

Both implementations are asked about every row (about 250,000 addresses in all), but for the
i386 targets, which only the Rust core reads (the pure-Python baseline is 64-bit only). readelf's
output is parsed once per library (readelf_frames.load caches it); each implementation and
library is asked once per module, and the five checks below read the same answers.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from readelf_frames import Fde, FrameDump, Row, load

IMPLEMENTATIONS = {"rust": "stackwalk", "baseline": "stackwalk.baseline"}

# The contract's DWARF register numbers, which readelf's names must agree with.
CONTRACT_REGISTERS = {
    "x86_64": {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7}
    | {f"r{n}": n for n in range(8, 16)}
    | {"rip": 16},
    "aarch64": {f"x{n}": n for n in range(31)} | {"sp": 31},
    "i386": {"eax": 0, "ecx": 1, "edx": 2, "ebx": 3, "esp": 4, "ebp": 5, "esi": 6, "edi": 7}
    | {"eip": 8},
}
RA_COLUMN = {"x86_64": 16, "aarch64": 30, "i386": 8}
COMPILERS = {"x86_64": "gcc", "aarch64": "aarch64-linux-gnu-gcc", "i386": "i686-linux-gnu-gcc"}
# (stack pointer, frame pointer, a column above the core registers: xmm0 / v8 / xmm0)
SP_FP_HIGH = {"x86_64": (7, 6, 17), "aarch64": (31, 29, 72), "i386": (4, 5, 21)}
SECTION_VARIANTS = {
    "eh_frame": ".eh_frame",
    "debug_frame": ".debug_frame",
    "both": ".eh_frame, .debug_frame",
}


def _libpython() -> str:
    """The running interpreter's libpython, or the interpreter itself when linked statically."""
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and os.path.exists(os.path.join(libdir, soname)):
        return os.path.join(libdir, soname)
    return os.path.realpath(sys.executable)


@dataclass(frozen=True)
class Target:
    name: str
    arch: str
    path: str | None = None  # a system file; None for a library assembled by the test
    sections: str = "eh_frame"  # SECTION_VARIANTS key of an assembled library

    @property
    def synthetic(self) -> bool:
        return self.path is None


TARGETS = [
    Target("libc", "x86_64", "/lib/x86_64-linux-gnu/libc.so.6"),
    Target("libstdc++", "x86_64", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
    Target("libpython", "x86_64", _libpython()),
    Target("aarch64-libc", "aarch64", "/usr/aarch64-linux-gnu/lib/libc.so.6"),
    Target("i386-libc", "i386", "/usr/i686-linux-gnu/lib/libc.so.6"),
] + [
    Target(f"asm-{arch}-{sections}", arch, sections=sections)
    for arch in COMPILERS
    for sections in SECTION_VARIANTS
]
CASES = [
    pytest.param(impl, target, id=f"{impl}-{target.name}")
    for impl in IMPLEMENTATIONS
    for target in TARGETS
    if impl == "rust" or target.arch != "i386"  # the baseline reads 64-bit files only
]


def synthetic_asm(arch: str, sections: str) -> str:
    """Assembly whose CFI directives produce every rule kind readelf distinguishes.

    Registers are given by DWARF number, so one source serves both architectures; the code is
    padding (CFI only needs addresses), and the padding between functions has no FDE.
    """
    ra = RA_COLUMN[arch]
    sp, fp, high = SP_FP_HIGH[arch]
    insn = 4 if arch == "aarch64" else 1  # code alignment factor

    def code(n: int) -> str:
        return f"\t.skip {n * insn}"

    breg_sp = f"0x{0x70 + sp:02x}"
    lines = [
        f"\t.cfi_sections {SECTION_VARIANTS[sections]}",
        "\t.text",
        "\t.p2align 4",
        "all_rules:",
        "\t.cfi_startproc",
        code(1),
        "\t.cfi_def_cfa_offset 16",
        "\t.cfi_offset 3, -16",
        code(1),
        "\t.cfi_val_offset 4, -24",
        f"\t.cfi_same_value {fp}",
        f"\t.cfi_offset {high}, -32",  # a column above the core registers (xmm0 / v8)
        code(70),  # DW_CFA_advance_loc1
        "\t.cfi_remember_state",
        f"\t.cfi_register {ra}, 5",
        f"\t.cfi_escape 0x10, 12, 2, {breg_sp}, 8",  # DW_CFA_expression r12: breg(sp) 8
        # DW_CFA_val_expression r13: breg(sp) 16; deref
        f"\t.cfi_escape 0x16, 13, 3, {breg_sp}, 16, 0x06",
        "\t.cfi_undefined 14",
        "\t.cfi_restore 3",  # set by this FDE only: no rule again
        "\t.cfi_restore 4",
        code(300),  # DW_CFA_advance_loc2
        f"\t.cfi_def_cfa {fp}, 4096",
        "\t.cfi_escape 0x2e, 16",  # DW_CFA_GNU_args_size, which changes no rule
        code(1),
        # DW_CFA_def_cfa_expression: breg(sp) 32; deref; plus_uconst 8
        f"\t.cfi_escape 0x0f, 5, {breg_sp}, 32, 0x06, 0x23, 8",
        code(2),
        f"\t.cfi_def_cfa {sp}, 48",  # (def_cfa_register alone is invalid after an expression)
        code(1),
        "\t.cfi_restore_state",
        f"\t.cfi_restore {ra}",  # back to the CIE's rule (x86_64) or to none (aarch64)
        code(1),
        "\t.cfi_endproc",
        code(8),
        "sigframe:",
        "\t.cfi_startproc",
        "\t.cfi_signal_frame",
        code(1),
        f"\t.cfi_def_cfa {sp}, 64",
        code(1),
        "\t.cfi_endproc",
        code(4),
        "outermost:",
        "\t.cfi_startproc",
        f"\t.cfi_undefined {ra}",
        code(2),
        "\t.cfi_endproc",
        "other_return_column:",
        "\t.cfi_startproc",
        "\t.cfi_return_column 15",
        code(1),
        "\t.cfi_register 15, 1",
        code(1),
        "\t.cfi_endproc",
    ]
    if arch == "aarch64":
        lines += [
            "pointer_auth:",
            "\t.cfi_startproc",
            code(1),
            "\t.cfi_negate_ra_state",  # accepted and ignored
            "\t.cfi_def_cfa_offset 16",
            "\t.cfi_offset 29, -16",
            "\t.cfi_offset 30, -8",
            code(1),
            "\t.cfi_negate_ra_state",
            code(1),
            "\t.cfi_endproc",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def target_path(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Target], str]:
    """The file of a target; assembled libraries are built once, on first use."""
    built: dict[Target, str] = {}

    def get(target: Target) -> str:
        if target.path is not None:
            assert os.path.exists(target.path), f"{target.name}: {target.path} is missing"
            return target.path
        if target not in built:
            out = tmp_path_factory.mktemp("cfi") / target.name
            source = out.with_suffix(".s")
            source.write_text(synthetic_asm(target.arch, target.sections))
            argv = [COMPILERS[target.arch], "-shared", "-nostdlib", "-o", str(out), str(source)]
            subprocess.run(argv, check=True)
            built[target] = str(out)
        return built[target]

    return get


# ---------------------------------------------------------------------------------------------
# Comparing one answer of rule_at with readelf's rows at the same address.

ASPECTS = ("fde", "cfa", "ra", "registers")
Answer = Mapping[str, Any] | None | Exception


def _column_problem(row: Row, regno: int, ours: object) -> str | None:
    """How our rule for column ``regno`` contradicts readelf's, if it does."""
    if regno in row.registers:
        expected = row.registers[regno]
        if expected[1:] == (None,):
            # readelf's dump does not say which expression: the kind must match
            agrees = isinstance(ours, tuple) and ours[:1] == expected[:1]
        else:
            agrees = ours == expected
        readelf = repr(expected)
    elif regno in row.undefined_or_unset:
        agrees = ours in (None, ("undefined",))
        readelf = "'u' (undefined or no rule)"
    else:
        agrees = ours is None
        readelf = "no rule"
    return None if agrees else f"r{regno}: readelf {readelf}, ours {ours!r}"


def _aspect_problem(aspect: str, fde: Fde, row: Row, ours: Mapping[str, Any]) -> str | None:
    registers: Mapping[int, object] = ours["registers"]
    if aspect == "fde":
        if ours["signal_frame"] != fde.signal_frame:
            return f"signal_frame {ours['signal_frame']}, readelf CIE {fde.cie.augmentation!r}"
        return None
    if aspect == "cfa":
        expected = row.cfa
        if expected[0] == "expr" and expected[1] is None:
            agrees = isinstance(ours["cfa"], tuple) and ours["cfa"][:1] == ("expr",)
        else:
            agrees = ours["cfa"] == expected
        return None if agrees else f"CFA: readelf {expected!r}, ours {ours['cfa']!r}"
    if aspect == "ra":
        if ours["ra_column"] != fde.ra_column:
            return f"ra_column {ours['ra_column']}, readelf {fde.ra_column}"
        return _column_problem(row, fde.ra_column, registers.get(fde.ra_column))
    columns = (set(registers) | set(row.registers) | row.undefined_or_unset) - {fde.ra_column}
    found = [_column_problem(row, regno, registers.get(regno)) for regno in sorted(columns)]
    return "; ".join(problem for problem in found if problem) or None


def compare(dump: FrameDump, addr: int, ours: Answer) -> dict[str, str]:
    """Each aspect in which ``ours`` (rule_at(addr)) contradicts readelf, with what it says."""
    candidates = dump.rows_at(addr)
    if isinstance(ours, Exception):
        problem = f"rule_at raised {ours!r}"
    elif ours is None:
        problem = f"rule_at returned None; readelf has {', '.join(str(f) for f, _ in candidates)}"
    else:
        span = (ours["fde_start"], ours["fde_end"])
        same = [(fde, row) for fde, row in candidates if (fde.start, fde.end) == span]
        if not same:
            problem = (
                f"rule_at used FDE [{span[0]:#x}, {span[1]:#x}); readelf's FDEs here: "
                + ", ".join(str(fde) for fde, _ in candidates)
            )
        else:
            problems = {}
            for aspect in ASPECTS:
                # FDEs of the same range in .eh_frame and .debug_frame: either may be ours
                found = [_aspect_problem(aspect, fde, row, ours) for fde, row in same]
                if all(found):
                    problems[aspect] = str(found[0])
            return {aspect: f"{addr:#x}: {p}" for aspect, p in problems.items()}
    return {aspect: f"{addr:#x}: {problem}" for aspect in ASPECTS}


# ---------------------------------------------------------------------------------------------
# Asking one implementation about one target, once per module.


def _query_addresses(dump: FrameDump) -> Iterator[int]:
    """The first and the last address of every row."""
    for fde in dump.fdes:
        ends = [row.loc for row in fde.rows[1:]] + [fde.end]
        for row, end in zip(fde.rows, ends, strict=True):
            yield row.loc
            if end - 1 > row.loc:
                yield end - 1


def _gaps(dump: FrameDump) -> list[int]:
    """Addresses next to an FDE that no FDE covers."""
    candidates = {fde.end for fde in dump.fdes} | {fde.start - 1 for fde in dump.fdes}
    return sorted(addr for addr in candidates if addr >= 0 and not dump.fdes_at(addr))


@dataclass
class Findings:
    """How many of the addresses asked about disagree, with the first few."""

    asked: int = 0
    disagreeing: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, problem: str) -> None:
        self.disagreeing += 1
        if len(self.examples) < 15:
            self.examples.append(problem)

    def check(self, what: str) -> None:
        assert self.asked > 0
        shown = "\n  ".join(self.examples)
        assert not self.disagreeing, (
            f"{self.disagreeing} of {self.asked} addresses disagree on {what}:\n  {shown}"
        )


@dataclass
class Report:
    aspects: dict[str, Findings] = field(default_factory=lambda: {a: Findings() for a in ASPECTS})
    gaps: Findings = field(default_factory=Findings)


def _ask(unwinder: Any, addr: int) -> Answer:
    try:
        return unwinder.rule_at(addr)
    except Exception as e:  # reported per address, so one bad row hides no others
        return e


@pytest.fixture(scope="module")
def report(target_path: Callable[[Target], str]) -> Callable[[str, Target], Report]:
    """rule_at of one implementation on one target, compared with readelf (cached)."""
    reports: dict[tuple[str, Target], Report] = {}

    def get(impl: str, target: Target) -> Report:
        if (impl, target) in reports:
            return reports[(impl, target)]
        path = target_path(target)
        dump = load(path)
        unwinder = importlib.import_module(IMPLEMENTATIONS[impl]).Unwinder(arch=target.arch)
        unwinder.add_module(path)
        result = Report()
        for addr in sorted(set(_query_addresses(dump))):
            problems = compare(dump, addr, _ask(unwinder, addr))
            for aspect, findings in result.aspects.items():
                findings.asked += 1
                if aspect in problems:
                    findings.add(problems[aspect])
        for addr in _gaps(dump):
            result.gaps.asked += 1
            ours = _ask(unwinder, addr)
            if ours is not None:
                result.gaps.add(f"{addr:#x}: no FDE in readelf, ours {ours!r}")
        reports[(impl, target)] = result
        return result

    return get


@pytest.mark.parametrize(("impl", "target"), CASES)
def test_fde_range_and_cie(
    report: Callable[[str, Target], Report], impl: str, target: Target
) -> None:
    """rule_at finds readelf's FDE (fde_start/fde_end) and its CIE's signal-frame flag."""
    report(impl, target).aspects["fde"].check("the FDE")


@pytest.mark.parametrize(("impl", "target"), CASES)
def test_cfa_rule(report: Callable[[str, Target], Report], impl: str, target: Target) -> None:
    report(impl, target).aspects["cfa"].check("the CFA rule")


@pytest.mark.parametrize(("impl", "target"), CASES)
def test_return_address_rule(
    report: Callable[[str, Target], Report], impl: str, target: Target
) -> None:
    report(impl, target).aspects["ra"].check("the return-address column and rule")


@pytest.mark.parametrize(("impl", "target"), CASES)
def test_register_rules(report: Callable[[str, Target], Report], impl: str, target: Target) -> None:
    """Every other column: readelf's rule exactly, 'u' as undefined or no rule, and no rule
    for a register readelf shows no column for."""
    report(impl, target).aspects["registers"].check("the other columns' rules")


@pytest.mark.parametrize(("impl", "target"), CASES)
def test_no_rule_outside_fdes(
    report: Callable[[str, Target], Report], impl: str, target: Target
) -> None:
    report(impl, target).gaps.check("addresses no FDE covers")


# ---------------------------------------------------------------------------------------------
# The reference itself: what the comparison above rests on.


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_readelf_reference(target_path: Callable[[Target], str], target: Target) -> None:
    """readelf numbers registers as the contract does, prints the sections expected, and the
    assembled libraries give every notation the comparison handles."""
    dump = load(target_path(target))
    contract = CONTRACT_REGISTERS[target.arch]
    shared = contract.keys() & dump.register_names.keys()
    expected = {"x86_64": {"rsp", "rip"}, "aarch64": {"sp", "x29"}, "i386": {"esp", "ebp", "eip"}}
    assert expected[target.arch] <= shared
    assert {name: dump.register_names[name] for name in shared} == {
        name: contract[name] for name in shared
    }
    assert sum(len(fde.rows) for fde in dump.fdes) > 0
    if not target.synthetic:
        return
    assert dump.sections == tuple(s.strip() for s in SECTION_VARIANTS[target.sections].split(","))
    rows = [row for _, row in dump.rows()]
    kinds = {rule[0] for row in rows for rule in row.registers.values()}
    assert kinds == {
        "offset",
        "val_offset",
        "same_value",
        "register",
        "undefined",
        "expression",
        "val_expression",
    }
    assert all(None not in rule for row in rows for rule in row.registers.values())
    assert any(row.undefined_or_unset for row in rows)
    assert {row.cfa[0] for row in rows} == {"reg", "expr"}
    assert any(fde.signal_frame for fde in dump.fdes)
    assert {fde.ra_column for fde in dump.fdes} == {15, RA_COLUMN[target.arch]}
    assert _gaps(dump)
