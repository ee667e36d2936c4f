"""Unit and reference tests for the pure-Python baseline unwinder (stackwalk.baseline).

References: binutils readelf (FDE ranges, CIE augmentations, interpreted CFI rows), objdump
(call sites, PLT layout), and gdb (backtraces of live processes, x86_64 natively and aarch64
under qemu-user). Programs are compiled from C at test time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from realstacks import gdb_driver
from stackwalk._baseline_cfi import MASK64, Memory, UnwindStop, evaluate_expression
from stackwalk.baseline import Unwinder
from stackwalk.errors import ArchError, ElfError, StackwalkError

X86_LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
EH = (".eh_frame",)
A64_SYSROOT = "/usr/aarch64-linux-gnu"
A64_LIBC = f"{A64_SYSROOT}/lib/libc.so.6"

X86_REGS = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"]
X86_REGS += [f"r{i}" for i in range(8, 16)]
# readelf's column names -> DWARF register numbers ("ra" is the CIE's return address column).
READELF_NAMES = {
    "x86_64": {name: i for i, name in enumerate(X86_REGS)},
    "aarch64": {f"x{i}": i for i in range(31)} | {"sp": 31} | {f"v{i}": 64 + i for i in range(32)},
}


def run(*cmd: str | Path) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    # readelf exits 1 on some complete dumps (e.g. libc's frames-interp) without a message.
    assert proc.returncode == 0 or (cmd[0] == "readelf" and proc.stdout), proc.stderr
    return proc.stdout


def compile_c(tmp_path: Path, source: str, name: str, *flags: str, cc: str = "gcc") -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / name
    run(cc, *flags, "-o", out, src)
    return out


def symbol(path: Path | str, name: str) -> int:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for table in (elf.get_section_by_name(".symtab"), elf.get_section_by_name(".dynsym")):
            if isinstance(table, SymbolTableSection):
                for sym in table.get_symbol_by_name(name) or []:
                    return int(sym["st_value"])
    raise AssertionError(f"{name} not in {path}")


def section_range(path: Path | str, name: str) -> tuple[int, int]:
    """(sh_addr, sh_size) of a section."""
    with open(path, "rb") as f:
        section = ELFFile(f).get_section_by_name(name)
        assert section is not None, (path, name)
        return int(section["sh_addr"]), int(section["sh_size"])


# --------------------------------------------------------------------------------------------
# readelf parsing


class ReadelfFde:
    def __init__(self, section: str, start: int, end: int, cie: int) -> None:
        self.section = section
        self.start = start
        self.end = end
        self.cie = cie
        self.columns: list[str] = []
        self.rows: list[tuple[int, str, list[str]]] = []  # (loc, cfa, column values)


_FDE_RE = re.compile(
    r"^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)"
)
_CIE_RE = re.compile(r"^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE")
_SECTION_RE = re.compile(r"^Contents of the (\.\w+) section")
_TOKEN_RE = re.compile(r"r\d+ \(\w+\)|\S+")


class Readelf:
    def __init__(self) -> None:
        self.fdes: list[ReadelfFde] = []
        self.cies: dict[tuple[str, int], ReadelfFde] = {}  # their initial rows, at loc 0
        self.augmentations: dict[tuple[str, int], str] = {}


def readelf_frames(path: Path | str) -> Readelf:
    """FDEs and CIEs with their rows (frames-interp), CIE augmentation strings (frames)."""
    out = Readelf()
    section = ""
    current: ReadelfFde | None = None
    for line in run("readelf", "--debug-dump=frames-interp", path).splitlines():
        if m := _SECTION_RE.match(line):
            section = m[1]
        elif m := _FDE_RE.match(line):
            current = ReadelfFde(section, int(m[3], 16), int(m[4], 16), int(m[2], 16))
            out.fdes.append(current)
        elif m := _CIE_RE.match(line):
            current = out.cies[(section, int(m[1], 16))] = ReadelfFde(section, 0, 0, -1)
        elif current is not None and line.strip().startswith("LOC"):
            current.columns = line.split()[2:]
        elif current is not None and re.match(r"^[0-9a-f]{16} ", line):
            loc, cfa, *values = _TOKEN_RE.findall(line)
            current.rows.append((int(loc, 16), cfa, values))
    cie: int | None = None
    for line in run("readelf", "--debug-dump=frames", path).splitlines():
        if m := _SECTION_RE.match(line):
            section = m[1]
        elif m := _CIE_RE.match(line):
            cie = int(m[1], 16)
        elif cie is not None and (m := re.match(r'\s+Augmentation:\s+"(.*)"', line)):
            out.augmentations[(section, cie)] = m[1]
    return out


def readelf_cfa(token: str, arch: str) -> tuple[Any, ...]:
    if token == "exp":
        return ("expr",)
    m = re.fullmatch(r"(\w+?)([+-]\d+)", token)
    assert m, token
    return ("reg", READELF_NAMES[arch][m[1]], int(m[2]))


def readelf_rule(token: str) -> tuple[Any, ...] | None:
    """The rule a readelf frames-interp cell shows; None for 'u' (unset or undefined)."""
    if token == "u":
        return None
    if token == "s":
        return ("same_value",)
    if token in ("exp", "vexp"):
        return ("expression",) if token == "exp" else ("val_expression",)
    if m := re.fullmatch(r"([cv])([+-]\d+)", token):
        return ("offset" if m[1] == "c" else "val_offset", int(m[2]))
    m = re.fullmatch(r"r(\d+) \(\w+\)", token)
    assert m, token
    return ("register", int(m[1]))


def ours_as_readelf(rule: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """Our normalized rule, reduced to what readelf's table can show."""
    if rule is None or rule[0] == "undefined":
        return None
    if rule[0] in ("expression", "val_expression"):
        assert isinstance(rule[1], bytes) and rule[1]
        return (rule[0],)
    return rule


def check_rows_against_readelf(
    uw: Unwinder, path: Path | str, arch: str, bias: int, sections: tuple[str, ...]
) -> int:
    """Every readelf row of every FDE in `sections` equals rule_at(loc + bias). Returns rows."""
    fdes = readelf_frames(path).fdes
    eh = sorted((f.start, f.end) for f in fdes if f.section == ".eh_frame" and f.end > f.start)
    checked = 0
    for fde in fdes:
        if fde.section not in sections or fde.end <= fde.start:
            continue
        for loc, cfa, values in fde.rows:
            if not fde.start <= loc < fde.end:
                continue
            if fde.section == ".debug_frame":
                i = bisect_right(eh, (loc, MASK64)) - 1
                if i >= 0 and eh[i][0] <= loc < eh[i][1]:
                    continue  # .eh_frame takes precedence here
            rule = uw.rule_at(loc + bias)
            where = f"{path} {fde.section} FDE {fde.start:#x}..{fde.end:#x} row {loc:#x}"
            assert rule is not None, where
            assert (rule["fde_start"], rule["fde_end"]) == (fde.start + bias, fde.end + bias)
            ours_cfa = rule["cfa"] if rule["cfa"][0] == "reg" else ("expr",)
            assert ours_cfa == readelf_cfa(cfa, arch), where
            names = dict(READELF_NAMES[arch], ra=rule["ra_column"])
            cells = zip(fde.columns, values, strict=True)
            shown = {names[col]: readelf_rule(cell) for col, cell in cells}
            # Columns readelf leaves out were never referenced: we must not have rules there.
            assert set(rule["registers"]) <= set(shown), where
            for regno, expected in shown.items():
                assert ours_as_readelf(rule["registers"].get(regno)) == expected, (where, regno)
            checked += 1
    return checked


# --------------------------------------------------------------------------------------------
# FDE index and rows vs readelf on the system C libraries


@pytest.mark.parametrize(("arch", "libc"), [("x86_64", X86_LIBC), ("aarch64", A64_LIBC)])
def test_fde_ranges_and_signal_flags_match_readelf(arch: str, libc: str) -> None:
    bias = 0x7F12_3450_0000
    uw = Unwinder(arch)
    uw.add_module(libc, bias)
    frames = readelf_frames(libc)
    fdes, augmentations = frames.fdes, frames.augmentations
    ranges = sorted((f.start, f.end) for f in fdes if f.end > f.start)
    assert len(ranges) > 1000
    signal_fdes = 0
    for fde in fdes:
        if fde.end <= fde.start:
            continue
        signal = "S" in augmentations[(fde.section, fde.cie)]
        signal_fdes += signal
        for probe in (fde.start, fde.end - 1):
            rule = uw.rule_at(probe + bias)
            assert rule is not None, hex(probe)
            assert (rule["fde_start"], rule["fde_end"]) == (fde.start + bias, fde.end + bias)
            assert rule["signal_frame"] == signal
        # Just past the FDE: either another FDE starts there or nothing covers it.
        i = bisect_right(ranges, (fde.end, MASK64)) - 1
        if not ranges[i][0] <= fde.end < ranges[i][1]:
            assert uw.rule_at(fde.end + bias) is None
    assert uw.rule_at(bias - 1) is None
    if arch == "x86_64":
        assert signal_fdes >= 1  # __restore_rt's CIE is "zRS"


@pytest.mark.parametrize(("arch", "libc"), [("x86_64", X86_LIBC), ("aarch64", A64_LIBC)])
def test_libc_rows_match_readelf_frames_interp(arch: str, libc: str) -> None:
    uw = Unwinder(arch)
    uw.add_module(libc, 0x10000)
    assert check_rows_against_readelf(uw, libc, arch, 0x10000, (".eh_frame",)) > 10000


PROG_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) long ext(long x) { return x ^ 5; }
__attribute__((noinline)) long work(long n) {
    long s = 0, t = n * 3, u = n + 7, v = n - 2;
    for (long i = 0; i < n; i++) s += ext(i + t) * u + v;
    return s + t + u + v;
}
__attribute__((noinline)) int leaf(int x) { volatile int y = x * 3; return y + 1; }
__attribute__((noinline)) int mid(int x) {
    char buf[64]; memset(buf, x, sizeof buf); return leaf(x + buf[3]) + 2;
}
static int cmp(const void *a, const void *b) {
    int r = mid(*(const int *)a); return r - *(const int *)b > 0 ? 1 : -1;
}
__attribute__((noinline)) int top(int n) {
    int v[4] = {n, 3, 2, 1}; qsort(v, 4, sizeof(int), cmp); return v[0];
}
int main(int argc, char **argv) {
    (void)argv; printf("%d %ld\n", top(argc), work(argc)); return 0;
}
"""


@pytest.mark.parametrize(
    ("cc", "arch", "flags", "sections"),
    [
        ("gcc", "x86_64", ("-O2",), (".eh_frame",)),
        ("gcc", "x86_64", ("-O0", "-fno-omit-frame-pointer"), (".eh_frame",)),
        # No .eh_frame for our functions: their CFI is in .debug_frame only.
        ("gcc", "x86_64", ("-O2", "-g", "-fno-asynchronous-unwind-tables"), (".debug_frame",)),
        ("aarch64-linux-gnu-gcc", "aarch64", ("-O2",), (".eh_frame",)),
        # Return-address signing: DW_CFA_AARCH64_negate_ra_state in every non-leaf FDE.
        ("aarch64-linux-gnu-gcc", "aarch64", ("-O2", "-mbranch-protection=standard"), EH),
    ],
)
def test_compiled_program_rows_match_readelf(
    tmp_path: Path, cc: str, arch: str, flags: tuple[str, ...], sections: tuple[str, ...]
) -> None:
    exe = compile_c(tmp_path, PROG_C, "prog", *flags, cc=cc)
    uw = Unwinder(arch)
    uw.add_module(str(exe), 0x5555_0000_0000)
    assert check_rows_against_readelf(uw, exe, arch, 0x5555_0000_0000, sections) >= 5
    work = symbol(exe, "work")
    assert uw.rule_at(work + 0x5555_0000_0000) is not None
    if sections == (".debug_frame",):
        assert ".debug_frame" in run("readelf", "-SW", exe)
    if "-mbranch-protection=standard" in flags:
        assert "DW_CFA_AARCH64_negate_ra_state" in run("readelf", "--debug-dump=frames", exe)


def test_module_image_matches_module_file(tmp_path: Path) -> None:
    exe = compile_c(tmp_path, PROG_C, "prog", "-O2")
    from_file = Unwinder("x86_64")
    from_file.add_module(str(exe), 0x4000_0000)
    from_image = Unwinder("x86_64")
    from_image.add_module_image("prog-image", memoryview(exe.read_bytes()), 0x4000_0000)
    for fde in readelf_frames(exe).fdes:
        for loc, _, _ in fde.rows:
            assert from_file.rule_at(loc + 0x4000_0000) == from_image.rule_at(loc + 0x4000_0000)


# --------------------------------------------------------------------------------------------
# DWARF expressions

NO_REGS: list[int | None] = [None] * 17
NO_MEMORY = Memory([])


def lit(n: int) -> bytes:
    return bytes([0x30 + n])


def sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            return bytes(out + bytes([byte]))
        out.append(byte | 0x80)


def uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            return bytes(out + bytes([byte]))
        out.append(byte | 0x80)


def evaluate(expr: bytes, regs: list[int | None] = NO_REGS, memory: Memory = NO_MEMORY) -> int:
    return evaluate_expression(expr, regs, memory)


def stop_reason(call: Callable[[], object]) -> str:
    with pytest.raises(UnwindStop) as info:
        call()
    return info.value.reason


PLUS, MINUS, MUL, DIV, MOD = b"\x22", b"\x1c", b"\x1e", b"\x1b", b"\x1d"
NEG, NOT, ABS, AND, OR, XOR = b"\x1f", b"\x20", b"\x19", b"\x1a", b"\x21", b"\x27"
SHL, SHR, SHRA = b"\x24", b"\x25", b"\x26"
EQ, GE, GT, LE, LT, NE = b"\x29", b"\x2a", b"\x2b", b"\x2c", b"\x2d", b"\x2e"
DUP, DROP, OVER, SWAP, ROT = b"\x12", b"\x13", b"\x14", b"\x16", b"\x17"


def const8s(n: int) -> bytes:
    return b"\x0f" + struct.pack("<q", n)


def bra(delta: int) -> bytes:
    return b"\x28" + struct.pack("<h", delta)


def skip(delta: int) -> bytes:
    return b"\x2f" + struct.pack("<h", delta)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (lit(7) + lit(5) + PLUS, 12),
        (lit(3) + lit(5) + MINUS, MASK64 - 1),  # wraps to -2
        (b"\x10" + uleb(1_000_000) + lit(3) + MUL, 3_000_000),
        (const8s(-7) + lit(2) + DIV, (-3) & MASK64),  # signed, truncating toward zero
        (const8s(7) + const8s(-2) + DIV, (-3) & MASK64),
        (lit(17) + lit(5) + MOD, 2),
        (lit(1) + NEG, MASK64),
        (lit(0) + NOT, MASK64),
        (const8s(-9) + ABS, 9),
        (lit(12) + lit(10) + AND, 8),
        (lit(12) + lit(3) + OR, 15),
        (lit(12) + lit(10) + XOR, 6),
        (lit(1) + lit(31) + lit(31) + PLUS + SHL, 1 << 62),
        (lit(1) + b"\x08\x40" + SHL, 0),  # shift by 64
        (const8s(-16) + lit(2) + SHR, (MASK64 - 15) >> 2),
        (const8s(-16) + lit(2) + SHRA, (-4) & MASK64),
        (const8s(-1) + lit(1) + LT, 1),  # signed comparison
        (const8s(-1) + lit(1) + GT, 0),
        (lit(4) + lit(4) + EQ, 1),
        (lit(4) + lit(4) + NE, 0),
        (lit(4) + lit(5) + GE, 0),
        (lit(4) + lit(5) + LE, 1),
        (b"\x0c" + struct.pack("<I", 0xDEADBEEF), 0xDEADBEEF),  # const4u
        (b"\x09\xff", MASK64),  # const1s -1
        (b"\x0b" + struct.pack("<h", -300), (-300) & MASK64),  # const2s
        (b"\x11" + sleb(-123456), (-123456) & MASK64),  # consts
        (lit(9) + b"\x23" + uleb(300), 309),  # plus_uconst
        (lit(1) + lit(2) + lit(3) + ROT, 2),  # (1 2 3 -- 3 1 2)
        (lit(1) + lit(2) + lit(3) + ROT + DROP + DROP, 3),
        (lit(1) + lit(2) + SWAP, 1),
        (lit(1) + lit(2) + OVER, 1),
        (lit(1) + lit(2) + lit(3) + b"\x15\x02", 1),  # pick 2
        (lit(6) + DUP + MUL, 36),
        (lit(1) + skip(1) + lit(2) + b"\x96", 1),  # skip over lit2, then nop
        # Sum 1..10 with a backwards bra loop: (acc n) -> (acc+n n-1) while n != 0.
        (
            lit(0) + lit(10) + DUP + ROT + PLUS + SWAP + lit(1) + MINUS + DUP + bra(-10) + DROP,
            55,
        ),
    ],
)
def test_expression_arithmetic(expr: bytes, expected: int) -> None:
    assert evaluate(expr) == expected


def test_expression_registers_and_addr() -> None:
    regs: list[int | None] = list(range(100, 132))
    assert evaluate(bytes([0x50 + 5]), regs) == 105  # reg5 pushes the value
    assert evaluate(b"\x90" + uleb(31), regs) == 131  # regx
    assert evaluate(bytes([0x70 + 7]) + sleb(-8), regs) == 99  # breg7 -8
    assert evaluate(b"\x92" + uleb(20) + sleb(1000), regs) == 1120  # bregx
    # DW_OP_addr is a file address: relocated by the module's bias.
    addr = b"\x03" + struct.pack("<Q", 0x4000)
    assert evaluate_expression(addr, regs, NO_MEMORY, bias=0x10000) == 0x14000
    # The CFA is pushed first for register rules.
    assert evaluate_expression(lit(8) + PLUS, regs, NO_MEMORY, initial=0x1000) == 0x1008


def test_expression_deref_through_captured_memory() -> None:
    base = 0x7FFF_0000
    stack = bytearray(64)
    struct.pack_into("<Q", stack, 16, 0x1122_3344_5566_7788)
    memory = Memory([(base, bytes(stack)), (0x1000, b"\xaa" * 8)])
    regs: list[int | None] = [None] * 17
    regs[7] = base
    assert evaluate(bytes([0x77]) + sleb(16) + b"\x06", regs, memory) == 0x1122_3344_5566_7788
    assert evaluate(bytes([0x77]) + sleb(16) + b"\x94\x02", regs, memory) == 0x7788  # deref_size
    assert evaluate(bytes([0x77]) + sleb(20) + b"\x94\x04", regs, memory) == 0x1122_3344
    # The 8 bytes must lie in one region: the last 4 bytes of the region are not enough.
    assert stop_reason(lambda: evaluate(bytes([0x77]) + sleb(60) + b"\x06", regs, memory)) == (
        "memory"
    )
    assert stop_reason(lambda: evaluate(b"\x0a\x00\x20\x06", regs, memory)) == "memory"


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        (PLUS, "bad_cfi"),  # stack underflow
        (lit(1) + PLUS, "bad_cfi"),
        (ROT, "bad_cfi"),
        (lit(1) + b"\x15\x01", "bad_cfi"),  # pick beyond the stack
        (lit(1) + DROP, "bad_cfi"),  # empty stack at the end
        (lit(1) + lit(0) + DIV, "bad_cfi"),
        (lit(1) + lit(0) + MOD, "bad_cfi"),
        (b"\xe0", "bad_cfi"),  # DW_OP_lo_user: unknown
        (b"\x91\x08", "bad_cfi"),  # DW_OP_fbreg: no frame base in CFI
        (b"\x0c\x01\x02", "bad_cfi"),  # truncated operand
        (lit(1) + bra(100), "bad_cfi"),  # branch outside the expression
        (lit(1) + bra(-4), "bad_cfi"),  # infinite loop: step limit
        (skip(-3), "bad_cfi"),
        (lit(1) * 65, "bad_cfi"),  # stack limit 64
        (bytes([0x70 + 6]) + sleb(0), "missing_register"),  # rbp unknown
    ],
)
def test_expression_errors(expr: bytes, reason: str) -> None:
    assert stop_reason(lambda: evaluate(expr)) == reason


def test_expression_limits_are_exact() -> None:
    assert evaluate(lit(1) * 64 + PLUS * 63) == 64  # 64 entries is the deepest allowed

    def loop(iterations: int) -> bytes:
        """Counts to `iterations`: 2 setup ops, 8 ops per iteration, 1 final drop."""
        body = SWAP + lit(1) + PLUS + SWAP + lit(1) + MINUS + DUP + bra(-10)
        return lit(0) + b"\x10" + uleb(iterations) + body + DROP

    # 3 + 8 * 124 = 995 steps run; 3 + 8 * 125 = 1003 exceed the limit of 1000.
    assert evaluate(loop(124)) == 124
    assert stop_reason(lambda: evaluate(loop(125))) == "bad_cfi"


def test_x86_64_lazy_plt_cfa_expression(tmp_path: Path) -> None:
    """The binutils PLT CFA expression, taken from a linked program, at offsets 0..15 of an
    entry: the CFA is rsp+8 until the entry's push has run, rsp+16 after it (objdump)."""
    exe = compile_c(tmp_path, PROG_C, "prog", "-O2", "-Wl,-z,lazy")
    uw = Unwinder("x86_64")
    uw.add_module(str(exe), 0)
    plt_start, plt_size = section_range(exe, ".plt")
    assert plt_size >= 48  # PLT0 and at least two entries
    disasm = run("objdump", "-d", "-j", ".plt", exe)
    entry = plt_start + 16
    insn = r"^\s*([0-9a-f]+):(?:\s[0-9a-f]{2})+\s+(\w+)"
    pushes = [int(m[1], 16) for m in re.finditer(insn, disasm, re.M) if m[2] == "push"]
    push = next(p for p in pushes if entry <= p < entry + 16)
    after_push = min(
        int(m[1], 16)
        for m in re.finditer(r"^\s*([0-9a-f]+):", disasm, re.M)
        if int(m[1], 16) > push
    )
    push_offset = after_push - entry  # where in an entry the push has been executed
    rule = uw.rule_at(entry)
    assert rule is not None and rule["cfa"][0] == "expr"
    # readelf shows the expression REFERENCE.md describes: breg7 8; breg16 0; lit15; and;
    # lit11; ge; lit3; shl; plus.
    expected_bytes = bytes([0x77, 8, 0x80, 0, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
    assert rule["cfa"][1] == expected_bytes
    rsp = 0x7FFF_FFFF_E000
    for entry_start in range(plt_start + 16, plt_start + plt_size, 16):
        for offset in range(16):
            regs: list[int | None] = [None] * 17
            regs[7] = rsp
            regs[16] = entry_start + offset
            cfa = evaluate_expression(rule["cfa"][1], regs, NO_MEMORY)
            assert cfa == rsp + (16 if offset >= push_offset else 8), (hex(entry_start), offset)


# --------------------------------------------------------------------------------------------
# Synthetic unwinds over hand-built memory, with the rows readelf reports


def call_sites(exe: Path, caller: str, callee: str) -> list[int]:
    """Return addresses (the instruction after each call) of caller -> callee, per objdump."""
    with open(exe, "rb") as f:
        aarch64 = ELFFile(f)["e_machine"] == "EM_AARCH64"
    objdump = "aarch64-linux-gnu-objdump" if aarch64 else "objdump"
    lines = run(objdump, "-d", "--no-show-raw-insn", exe).splitlines()
    sites, inside, want = [], False, None
    for line in lines:
        if m := re.match(r"^[0-9a-f]+ <(.+)>:", line):
            inside = m[1] == caller
            continue
        m = re.match(r"^\s*([0-9a-f]+):\s+(\S+)", line)
        if not inside or not m:
            continue
        if want is not None:
            sites.append(int(m[1], 16))
            want = None
        if m[2] in ("call", "bl") and f"<{callee}>" in line:
            want = True
    return sites


def readelf_row_at(frames: Readelf, pc: int) -> tuple[str, dict[str, str]]:
    """The CFA and register cells readelf shows for pc (the CIE's row if the FDE has none)."""
    fde = next(f for f in frames.fdes if f.section == ".eh_frame" and f.start <= pc < f.end)
    table = fde if fde.rows else frames.cies[(fde.section, fde.cie)]
    _, cfa, values = max((r for r in table.rows if r[0] <= pc), key=lambda r: r[0])
    return cfa, dict(zip(table.columns, values, strict=True))


def offset_of(cell: str) -> int:
    m = re.fullmatch(r"c([+-]\d+)", cell)
    assert m, cell
    return int(m[1])


class Stack:
    """A little-endian stack image with writes by absolute address."""

    def __init__(self, base: int, size: int) -> None:
        self.base = base
        self.data = bytearray(size)

    def put(self, addr: int, value: int) -> None:
        struct.pack_into("<Q", self.data, addr - self.base, value)


@pytest.fixture(scope="module")
def x86_prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_c(tmp_path_factory.mktemp("prog"), PROG_C, "prog", "-O2")


def test_synthetic_unwind_through_compiled_functions(x86_prog: Path) -> None:
    exe, bias = x86_prog, 0x5555_5555_4000
    frames = readelf_frames(exe)
    ext, main = symbol(exe, "ext"), symbol(exe, "main")
    ret_in_work = call_sites(exe, "work", "ext")[0]
    ret_in_main = call_sites(exe, "main", "work")[0]
    assert readelf_row_at(frames, ext)[0] == "rsp+8"

    # Frame 0 at ext's first instruction; work called it; main called work.
    sp0 = 0x7FFF_FFFF_D000
    stack = Stack(sp0, 0x1000)
    stack.put(sp0, ret_in_work + bias)  # ext: CFA = rsp+8, ra at c-8
    work_cfa, work_cells = readelf_row_at(frames, ret_in_work - 1)
    m = re.fullmatch(r"rsp\+(\d+)", work_cfa)
    assert m, work_cfa  # -O2 without a frame pointer
    cfa1 = sp0 + 8 + int(m[1])
    saved = {name: 0x1111 * (i + 1) for i, name in enumerate(work_cells) if name != "ra"}
    for name, value in saved.items():
        stack.put(cfa1 + offset_of(work_cells[name]), value)
    stack.put(cfa1 + offset_of(work_cells["ra"]), ret_in_main + bias)
    main_cfa, main_cells = readelf_row_at(frames, ret_in_main - 1)
    m = re.fullmatch(r"rsp\+(\d+)", main_cfa)
    assert m, main_cfa
    cfa2 = cfa1 + int(m[1])
    stack.put(cfa2 + offset_of(main_cells["ra"]), 0)

    uw = Unwinder("x86_64")
    uw.add_module(str(exe), bias)
    regs = {"rip": ext + bias, "rsp": sp0, "rbp": 0x99, "eflags": 0x246, "fs_base": 0}
    memory = [(stack.base, bytes(stack.data))]
    trace = uw.unwind(regs, memory)
    assert trace.end == "pc_zero", trace.end_detail
    assert trace.pcs == [ext + bias, ret_in_work + bias, ret_in_main + bias]
    assert [f.sp for f in trace.frames] == [sp0, sp0 + 8, cfa1]
    assert [f.cfa for f in trace.frames] == [sp0 + 8, cfa1, cfa2]
    assert [f.trust for f in trace.frames] == ["context", "cfi", "cfi"]
    assert main <= ret_in_main < main + 0x1000

    # max_frames: a limit is only reported when another frame could have been produced.
    limited = uw.unwind(regs, memory, max_frames=2)
    assert (limited.end, limited.pcs) == ("frame_limit", trace.pcs[:2])
    assert [f.cfa for f in limited.frames] == [sp0 + 8, cfa1]
    exact = uw.unwind(regs, memory, max_frames=3)
    assert (exact.end, exact.pcs) == ("pc_zero", trace.pcs)

    # The capture ends just below work's return address slot: the read fails.
    ra_slot = cfa1 + offset_of(work_cells["ra"])
    short = uw.unwind(regs, [(stack.base, bytes(stack.data[: ra_slot - stack.base]))])
    assert short.end == "memory" and f"{ra_slot:#x}" in short.end_detail
    assert short.pcs == trace.pcs[:2] and short.frames[1].cfa == cfa1

    # A return address outside every module.
    stack.put(cfa2 + offset_of(main_cells["ra"]), 0x1234_5678)
    outside = uw.unwind(regs, [(stack.base, bytes(stack.data))])
    assert outside.end == "no_module" and outside.pcs[-1] == 0x1234_5678
    assert outside.frames[-1].cfa is None

    # A pc inside the module but covered by no FDE (the ELF header page).
    nothing = uw.unwind({"rip": bias + 0x10, "rsp": sp0}, memory)
    assert (nothing.end, len(nothing.frames)) == ("no_unwind_info", 1)


def test_end_of_stack_at_start(x86_prog: Path) -> None:
    uw = Unwinder("x86_64")
    uw.add_module(str(x86_prog), 0x1000_0000)
    start = symbol(x86_prog, "_start")
    frames = readelf_frames(x86_prog)
    _, cells = readelf_row_at(frames, start)
    assert cells["ra"] == "u"  # crt1's .cfi_undefined rip
    trace = uw.unwind({"rip": start + 0x1000_0000, "rsp": 0x7FFF_0000}, [])
    assert (trace.end, trace.pcs, trace.frames[0].cfa) == (
        "end_of_stack",
        [start + 0x1000_0000],
        0x7FFF_0008,
    )


def test_aarch64_signed_return_addresses_are_stripped(tmp_path: Path) -> None:
    """x30 and the saved lr carry pointer-authentication bits (-mbranch-protection):
    the caller pc is their low 48 bits, before the pc == 0 check."""
    exe = compile_c(
        tmp_path,
        PROG_C,
        "prog",
        "-O2",
        "-mbranch-protection=standard",
        cc="aarch64-linux-gnu-gcc",
    )
    frames = readelf_frames(exe)
    leaf, ret = symbol(exe, "leaf"), call_sites(exe, "mid", "leaf")[0]
    assert readelf_row_at(frames, leaf)[0] == "sp+0"  # leaf: lr still holds the return address
    mid_cfa, mid_cells = readelf_row_at(frames, ret - 1)
    m = re.fullmatch(r"(?:sp|x29)\+(\d+)", mid_cfa)
    assert m, mid_cfa
    bias, sp0 = 0x55_0000_0000, 0x7F_FFFF_F000
    x29 = sp0  # mid's frame record is at its sp after the prologue (stp x29, x30, [sp, #-N]!)
    cfa1 = sp0 + int(m[1])
    stack = Stack(sp0, 0x100)
    stack.put(cfa1 + offset_of(mid_cells["ra"]), 0x002B << 48)  # a signed null return address
    uw = Unwinder("aarch64")
    uw.add_module(str(exe), bias)
    signed_lr = (0x0071 << 48) | (ret + bias)
    regs = {"pc": leaf + bias, "sp": sp0, "x30": signed_lr, "fp": x29, "pstate": 0}
    trace = uw.unwind(regs, [(stack.base, bytes(stack.data))])
    assert trace.pcs == [leaf + bias, ret + bias]
    assert [f.sp for f in trace.frames] == [sp0, sp0]  # leaf moved nothing: allowed for frame 0
    assert [f.cfa for f in trace.frames] == [sp0, cfa1]
    assert trace.end == "pc_zero", trace.end_detail


# Hand-written CFI for the instructions compilers rarely emit. .cfi_escape bytes:
#   0x12 7 0x7e: def_cfa_sf rsp, -2 (x -8 = 16)   0x2e 0x10: GNU_args_size 16
#   0x11 14 0x7d: offset_extended_sf r14, -3      0x15 15 0x7f: val_offset_sf r15, -1
#   0x16 3 [breg3 8]: val_expression rbx          0x10 6 [breg6 0]: expression rbp
#   0x0f [breg7 16; deref]: def_cfa_expression    0x16 16 [breg3 0]: val_expression rip = rbx
CFI_S = """
    .text
    .globl weird, exprfn, sigfn
weird:
    .cfi_startproc
    nop
    .cfi_escape 0x12, 0x07, 0x7e
    nop
    .cfi_val_offset rbx, -24
    .cfi_same_value rbp
    .cfi_register r12, r13
    nop
    .cfi_escape 0x2e, 0x10
    .cfi_remember_state
    .cfi_def_cfa_offset 32
    .cfi_escape 0x11, 0x0e, 0x7d
    .cfi_escape 0x15, 0x0f, 0x7f
    nop
    .cfi_restore_state
    .cfi_escape 0x16, 0x03, 0x02, 0x73, 0x08
    .cfi_escape 0x10, 0x06, 0x02, 0x76, 0x00
    nop
    .cfi_restore rbx
    .cfi_escape 0x0f, 0x03, 0x77, 0x10, 0x06
    nop
    .cfi_undefined rip
    nop
    ret
    .cfi_endproc
exprfn:
    .cfi_startproc
    .cfi_escape 0x16, 0x10, 0x02, 0x73, 0x00
    .cfi_val_offset rsp, 32
    nop
    ret
    .cfi_endproc
sigfn:
    .cfi_startproc
    .cfi_signal_frame
    nop
    ret
    .cfi_endproc
    .section .note.GNU-stack,"",@progbits
"""
CFI_MAIN_C = """
void weird(void); void exprfn(void); void sigfn(void);
int main(void) { weird(); exprfn(); sigfn(); return 0; }
"""


def test_hand_written_cfi_rows_and_unwinds(tmp_path: Path) -> None:
    (tmp_path / "cfi.s").write_text(CFI_S)
    exe = compile_c(tmp_path, CFI_MAIN_C, "cfi", "-O1", str(tmp_path / "cfi.s"))
    bias = 0x5555_0000_0000
    uw = Unwinder("x86_64")
    uw.add_module(str(exe), bias)
    assert check_rows_against_readelf(uw, exe, "x86_64", bias, EH) >= 9
    weird, exprfn, sigfn = (symbol(exe, name) for name in ("weird", "exprfn", "sigfn"))
    row = uw.rule_at(weird + 1 + bias)
    assert row is not None and row["cfa"] == ("reg", 7, 16)  # def_cfa_sf is data-aligned
    row = uw.rule_at(weird + 4 + bias)
    assert row is not None
    assert row["registers"][3] == ("val_expression", bytes([0x73, 0x08]))
    assert row["registers"][6] == ("expression", bytes([0x76, 0x00]))
    row = uw.rule_at(weird + 5 + bias)
    assert row is not None and row["cfa"] == ("expr", bytes([0x77, 0x10, 0x06]))
    assert 3 not in row["registers"]  # restored to the CIE's (no rule)
    sig = uw.rule_at(sigfn + bias)
    assert sig is not None and sig["signal_frame"] and not row["signal_frame"]

    sp0 = 0x7FFF_0000
    stack = Stack(sp0, 0x200)
    # The CFA expression: CFA = [rsp + 16]; rbp's rule reads [rbp]; the RA at CFA-8 is 0.
    stack.put(sp0 + 16, sp0 + 0x100)
    memory = [(stack.base, bytes(stack.data))]
    trace = uw.unwind({"rip": weird + 5 + bias, "rsp": sp0, "rbp": sp0 + 0x40}, memory)
    assert (trace.end, trace.frames[0].cfa) == ("pc_zero", sp0 + 0x100)
    trace = uw.unwind({"rip": weird + 5 + bias, "rsp": sp0}, memory)
    assert trace.end == "missing_register"  # rbp's expression needs rbp
    trace = uw.unwind({"rip": weird + 6 + bias, "rsp": sp0, "rbp": sp0}, memory)
    assert (trace.end, len(trace.frames)) == ("end_of_stack", 1)

    # sigfn's CIE is a signal frame, so its caller's pc is looked up as is: exprfn's first
    # byte (at pc - 1 it would be weird's last row, whose return address is undefined).
    # exprfn: caller pc = rbx (val_expression; rbx is callee-saved, so it survived sigfn),
    # caller sp = CFA + 32 (val_offset on rsp).
    ret_in_main = call_sites(exe, "main", "sigfn")[0] + bias
    stack.put(sp0, exprfn + bias)
    memory = [(stack.base, bytes(stack.data))]
    trace = uw.unwind({"rip": sigfn + bias, "rsp": sp0, "rbx": ret_in_main}, memory)
    assert trace.pcs[:3] == [sigfn + bias, exprfn + bias, ret_in_main]
    assert [f.sp for f in trace.frames[:3]] == [sp0, sp0 + 8, sp0 + 8 + 8 + 32]
    assert [f.cfa for f in trace.frames[:2]] == [sp0 + 8, sp0 + 16]


FP_C = r"""
__attribute__((noinline)) long inner(long x) { return x * 7; }
__attribute__((noinline)) long outer(long x) { long a[8]; a[x & 7] = x; return inner(a[1]) + a[2]; }
int main(int argc, char **argv) { (void)argv; return (int)outer(argc); }
"""


def test_frame_pointer_cfa_end_reasons(tmp_path: Path) -> None:
    exe = compile_c(tmp_path, FP_C, "fp", "-O1", "-fno-omit-frame-pointer")
    frames = readelf_frames(exe)
    inner, ret = symbol(exe, "inner"), call_sites(exe, "outer", "inner")[0]
    cfa, _ = readelf_row_at(frames, ret - 1)
    assert cfa == "rbp+16"
    uw = Unwinder("x86_64")
    uw.add_module(str(exe), 0)
    sp0 = 0x7FFF_0000
    stack = Stack(sp0 - 0x100, 0x200)  # outer's saved rbp is read below sp in the last case
    stack.put(sp0, ret)
    # inner was called and has not pushed anything yet: rbp is outer's frame pointer.
    assert readelf_row_at(frames, inner)[0] == "rsp+8"
    memory = [(stack.base, bytes(stack.data))]
    # rbp not captured: outer's CFA cannot be computed.
    missing = uw.unwind({"rip": inner, "rsp": sp0}, memory)
    assert missing.end == "missing_register" and missing.pcs == [inner, ret]
    assert missing.frames[1].cfa is None
    # rbp below the stack pointer: the caller's sp (the CFA) would go backwards.
    stack.put(sp0 - 0x40 + 8, ret)  # a plausible return address, so the pc is not 0
    memory = [(stack.base, bytes(stack.data))]
    backwards = uw.unwind({"rip": inner, "rsp": sp0, "rbp": sp0 - 0x40}, memory)
    assert backwards.end == "cfa_not_increasing" and backwards.pcs == [inner, ret]
    assert backwards.frames[1].cfa == sp0 - 0x30


# --------------------------------------------------------------------------------------------
# Errors and API


def test_api_errors(tmp_path: Path, x86_prog: Path) -> None:
    with pytest.raises(ArchError):
        Unwinder("sparc")
    uw = Unwinder("x86_64")
    assert uw.arch == "x86_64" and Unwinder("aarch64").arch == "aarch64"
    with pytest.raises(ArchError, match=re.escape(A64_LIBC)):
        uw.add_module(A64_LIBC)
    not_elf = tmp_path / "not-elf"
    not_elf.write_bytes(b"just text, no ELF header here\n" * 4)
    with pytest.raises(ElfError, match=re.escape(str(not_elf))):
        uw.add_module(str(not_elf))
    with pytest.raises(ElfError, match="missing-file"):
        uw.add_module(str(tmp_path / "missing-file"))
    with pytest.raises(ElfError, match="my-image"):
        uw.add_module_image("my-image", b"\x7fELF" + b"\0" * 8, 0)
    uw.add_module(str(x86_prog), 0x10000)
    with pytest.raises(StackwalkError, match="overlaps"):
        uw.add_module(str(x86_prog), 0x10000)
    with pytest.raises(StackwalkError, match="rip"):
        uw.unwind({"rsp": 0x1000}, [])
    with pytest.raises(StackwalkError, match="pc"):
        Unwinder("aarch64").unwind({"sp": 0x1000, "x30": 4}, [])
    trace = uw.unwind({"rip": 0x10, "rsp": 0x1000, "cs": 0x33}, [])
    assert (trace.end, trace.pcs) == ("no_module", [0x10])
    assert "0x10" in trace.end_detail
    with pytest.raises(AttributeError):
        trace.frames[0].pc = 1  # type: ignore[misc]


def test_memory_regions_must_hold_the_whole_read() -> None:
    memory = Memory([(0x2000, b"\x01" * 8 + b"\x02" * 8), (0x1000, bytearray(b"\x03" * 12))])
    assert memory.read_u64(0x2008) == 0x0202020202020202
    assert memory.read_u64(0x1004) == 0x0303030303030303
    for addr in (0x1005, 0x2009, 0x0FFF, 0x3000):
        with pytest.raises(UnwindStop, match=f"{addr:#x}") as info:
            memory.read_u64(addr)
        assert info.value.reason == "memory"
    # Overlapping regions: any region holding all 8 bytes serves the read.
    overlapping = Memory([(0x1000, b"\x05" * 32), (0x1010, b"\x06" * 4)])
    assert overlapping.read_u64(0x1012) == 0x0505050505050505


# --------------------------------------------------------------------------------------------
# Live processes: our unwind of captured registers and stack equals gdb's backtrace

# Run inside gdb, with capture_gdb (see realstacks.gdb_driver): stop at SW_BREAK as
# `stackwalk capture` does, then record registers, stack and gdb's backtrace at every one of
# SW_STEPS instructions.
GDB_CAPTURE = r"""
import gdb, json, os
remote = os.environ.get("SW_REMOTE")
if remote:
    gdb.execute("set sysroot " + os.environ["SW_SYSROOT"])
    regnames = [f"x{i}" for i in range(31)] + ["sp", "pc"]
else:
    regnames = os.environ["SW_REGS"].split()
capture_gdb.run_to_breakpoint(os.environ["SW_BREAK"], pass_signals=["SIGUSR1"], remote=remote)
inf = gdb.selected_inferior()
out = {"captures": []}
if not remote:
    out["maps"] = open(f"/proc/{inf.pid}/maps").read().splitlines()
    def mapping(name):
        line = [l for l in out["maps"] if l.endswith(name)][0]
        return [int(x, 16) for x in line.split()[0].split("-")]
    lo, hi = mapping("[vdso]")
    out["vdso"] = [lo, bytes(inf.read_memory(lo, hi - lo)).hex()]
    stack_top = mapping("[stack]")[1]
else:
    out["libs"] = gdb.execute("info sharedlibrary", to_string=True)
    out["anchor"] = int(gdb.parse_and_eval("(long)&" + os.environ["SW_ANCHOR"]))
for _ in range(int(os.environ["SW_STEPS"])):
    regs = capture_gdb.read_registers(gdb.newest_frame(), regnames, 64)
    sp = regs["rsp" if "rsp" in regs else "sp"]
    # From below sp: epilogues' CFI still names callee-saved slots that were just popped.
    lo = sp - 512
    hi = stack_top if not remote else sp + 0x2000
    frames = [frame["pc"] for frame in capture_gdb.backtrace(64)[0]]
    out["captures"].append(
        {"regs": regs, "base": lo, "stack": bytes(inf.read_memory(lo, hi - lo)).hex(),
         "gdb": frames}
    )
    gdb.execute("stepi", to_string=True)
json.dump(out, open(os.environ["SW_OUT"], "w"))
gdb.execute("kill")
"""


def gdb_capture(tmp_path: Path, exe: Path, brk: str, steps: int, **env: str) -> dict[str, Any]:
    script = tmp_path / "capture.py"
    script.write_text(gdb_driver(GDB_CAPTURE))
    out = tmp_path / "capture.json"
    gdb = "gdb-multiarch" if "SW_REMOTE" in env else "gdb"
    environ = dict(
        os.environ,
        SW_BREAK=brk,
        SW_STEPS=str(steps),
        SW_OUT=str(out),
        SW_REGS=" ".join([*X86_REGS, "rip"]),
        **env,
    )
    proc = subprocess.run(
        [gdb, "-batch", "-nx", "-x", str(script), str(exe)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.exists(), proc.stdout + proc.stderr
    capture: dict[str, Any] = json.loads(out.read_text())
    return capture


def x86_unwinder_for(capture: dict[str, Any]) -> Unwinder:
    """Modules from /proc/PID/maps (bias from the offset-0 mapping) plus the dumped vdso."""
    uw = Unwinder("x86_64")
    seen = set()
    for line in capture["maps"]:
        parts = line.split()
        if len(parts) < 6 or not parts[5].startswith("/") or int(parts[2], 16) != 0:
            continue
        if parts[5] in seen:
            continue
        seen.add(parts[5])
        with open(parts[5], "rb") as f:
            loads = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
        first = min(s["p_vaddr"] for s in loads) & ~0xFFF
        uw.add_module(parts[5], int(parts[0].split("-")[0], 16) - first)
    vdso_base, vdso_hex = capture["vdso"]
    uw.add_module_image("[vdso]", bytes.fromhex(vdso_hex), vdso_base)
    return uw


def mapping_of(capture: dict[str, Any], addr: int) -> str:
    for line in capture["maps"]:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= addr < hi:
            return str(line.split()[-1])
    raise AssertionError(hex(addr))


def compare_with_gdb(uw: Unwinder, capture: dict[str, Any]) -> list[str]:
    lines = []
    for cap in capture["captures"]:
        trace = uw.unwind(cap["regs"], [(cap["base"], bytes.fromhex(cap["stack"]))])
        if trace.pcs != cap["gdb"]:
            lines.append(
                f"ours {[hex(p) for p in trace.pcs]} ({trace.end}: {trace.end_detail}) "
                f"gdb {[hex(p) for p in cap['gdb']]}"
            )
    return lines


SIG_C = r"""
#include <signal.h>
#include <stdio.h>
#include <time.h>
__attribute__((noinline)) int leaf(int x) { volatile int y = x * 3; return y + 1; }
static void handler(int sig) { leaf(sig); }
__attribute__((noinline)) int spin(void) { volatile int z = 0; raise(SIGUSR1); return z; }
int main(void) {
    struct timespec ts;
    signal(SIGUSR1, handler);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("%d %ld\n", spin(), (long)ts.tv_sec);
    return 0;
}
"""


def test_live_x86_64_stepping_through_plt_and_ld_so_matches_gdb(tmp_path: Path) -> None:
    """Every instruction from main into qsort through the lazy PLT and ld.so's resolver."""
    exe = compile_c(tmp_path, PROG_C, "prog", "-O1", "-Wl,-z,lazy")
    capture = gdb_capture(tmp_path, exe, "*main", 250)
    uw = x86_unwinder_for(capture)
    assert compare_with_gdb(uw, capture) == []
    plt_start, plt_size = section_range(exe, ".plt")
    exe_bias = next(
        int(line.split("-")[0], 16) for line in capture["maps"] if line.endswith(str(exe))
    )
    rips = [c["regs"]["rip"] - exe_bias for c in capture["captures"]]
    assert sum(plt_start <= rip < plt_start + plt_size for rip in rips) >= 4
    visited = {mapping_of(capture, c["regs"]["rip"]) for c in capture["captures"]}
    assert any("ld-linux" in path for path in visited), visited


def test_live_x86_64_signal_handler_and_vdso_match_gdb(tmp_path: Path) -> None:
    exe = compile_c(tmp_path, SIG_C, "sig", "-O1", "-Wl,-z,now")
    at_leaf = gdb_capture(tmp_path, exe, "leaf", 1)
    uw = x86_unwinder_for(at_leaf)
    assert compare_with_gdb(uw, at_leaf) == []
    trace = uw.unwind(
        at_leaf["captures"][0]["regs"],
        [(at_leaf["captures"][0]["base"], bytes.fromhex(at_leaf["captures"][0]["stack"]))],
    )
    restorer = trace.frames[2]  # leaf <- handler <- __restore_rt (the kernel's return point)
    rule = uw.rule_at(restorer.pc)
    assert rule is not None and rule["signal_frame"] and rule["cfa"][0] == "expr"
    assert trace.end == "end_of_stack"

    into_vdso = gdb_capture(tmp_path, exe, "clock_gettime", 40)
    vdso_lo = into_vdso["vdso"][0]
    vdso_hi = vdso_lo + len(into_vdso["vdso"][1]) // 2
    assert any(vdso_lo <= c["regs"]["rip"] < vdso_hi for c in into_vdso["captures"])
    assert compare_with_gdb(x86_unwinder_for(into_vdso), into_vdso) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something listens on the TCP port (without connecting: qemu's gdbstub would
    take the probe for its one debugger)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if int(local.split(":")[1], 16) == port and state == "0A":
                return True
    return False


def test_live_aarch64_under_qemu_matches_gdb(tmp_path: Path) -> None:
    exe = compile_c(tmp_path, PROG_C, "prog", "-O1", cc="aarch64-linux-gnu-gcc")
    port = free_port()
    qemu = subprocess.Popen(
        ["qemu-aarch64", "-L", A64_SYSROOT, "-g", str(port), str(exe)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not listening(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        capture = gdb_capture(
            tmp_path,
            exe,
            "leaf",
            12,
            SW_REMOTE=f"127.0.0.1:{port}",
            SW_SYSROOT=A64_SYSROOT,
            SW_ANCHOR="top",
        )
    finally:
        qemu.kill()
        qemu.wait()
    uw = Unwinder("aarch64")
    libs = re.findall(
        r"^(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+\S+\s+(?:\(\*\)\s+)?(/\S+)", capture["libs"], re.M
    )
    assert any("libc.so" in path for _, path in libs)
    uw.add_module(str(exe), capture["anchor"] - symbol(exe, "top"))
    for text_lo, path in libs:  # gdb reports where each library's .text was loaded
        uw.add_module(path, int(text_lo, 16) - section_range(path, ".text")[0])
    assert compare_with_gdb(uw, capture) == []
    deepest = uw.unwind(
        capture["captures"][0]["regs"],
        [(capture["captures"][0]["base"], bytes.fromhex(capture["captures"][0]["stack"]))],
    )
    assert deepest.end == "end_of_stack" and len(deepest.frames) >= 8


def test_tools_present() -> None:
    for tool in ("gdb", "gdb-multiarch", "qemu-aarch64", "aarch64-linux-gnu-gcc", "readelf"):
        assert shutil.which(tool), tool
