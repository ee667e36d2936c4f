"""binutils readelf's call-frame tables, parsed into rows comparable with ``Unwinder.rule_at``.

``readelf --debug-dump=frames-interp`` (``-wF``) prints, for every FDE of ``.eh_frame`` and
``.debug_frame``, the table of rows its CIE and FDE instructions describe::

    00000140 0000000000000030 00000144 FDE cie=00000000 pc=0000000000027440..00000000000274e7
       LOC           CFA      rbx   rbp   r12   ra
    0000000000027440 rsp+8    u     u     u     c-8
    0000000000027442 rsp+16   u     u     c-16  c-8

How binutils prints it (``frame_display_row`` in binutils/dwarf.c, confirmed on real output):

- A row is printed each time the location advances, holding the state in force at the old
  location, and once more after the last instruction. Two rows can share a LOC (an advance of
  0): the later one is the state in force there. The last row can lie at or past the FDE's end.
- An FDE whose instructions are all ``DW_CFA_nop`` (or absent) prints no table: its single row
  is its CIE's. A CIE made of nops prints none either (glibc's ``__restore_rt`` has one).
- The columns are the registers the CIE or the FDE mentions anywhere; a column left out of the
  header has no rule at any row. The return-address column is headed ``ra``, the others by
  binutils' register name (``rbx``, ``x19``, ``v8``) or ``rN`` for an unnamed one.
- CFA: ``<reg>+<off>`` / ``<reg>-<off>``, or ``exp`` for ``DW_CFA_def_cfa_expression``.
- Rules: ``u`` is printed both for ``DW_CFA_undefined`` and for a column with no rule yet (a
  column referenced later in the FDE, or restored to a CIE that never set it), so it means
  "undefined or no rule"; ``s`` same value; ``c+N`` offset(N); ``v+N`` val_offset(N); ``exp``
  and ``vexp`` (val_)expression, without the expression itself; ``rN (name)`` register.

The raw dump, ``--debug-dump=frames`` (``-wf``), prints every instruction with its operands,
e.g. ``DW_CFA_expression: r3 (rbx) (DW_OP_breg7 (rsp): 128)``. It settles much of what the
table leaves open (see ``_pins``): which expression an ``exp`` is, and whether a ``u`` is
undefined or no rule. It also gives binutils' register names with their DWARF numbers
(``r7 (rsp)``), so column names are mapped with readelf's own table, not one written here.

readelf follows ``.gnu_debuglink`` to separate debug files by default and then also prints
their (NOBITS) ``.eh_frame``; ``--debug-dump=no-follow-links`` keeps to the file asked for,
which is what an unwinder given that file reads.
"""

from __future__ import annotations

import bisect
import functools
import re
import struct
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

READELF = "readelf"

# A rule as Unwinder.rule_at reports it; for an expression whose bytes readelf's dumps do not
# pin down (see _pins) the bytes are None.
Rule = tuple[str] | tuple[str, int] | tuple[str, bytes | None]
# ("reg", regno, offset) or ("expr", bytes | None)
CfaRule = tuple[str, int, int] | tuple[str, bytes | None]


class ReadelfParseError(Exception):
    """readelf failed, or printed something this parser does not understand."""


@dataclass(frozen=True)
class Row:
    """The rules in force from ``loc`` on (up to the next row's loc or the FDE's end).

    A column in neither ``registers`` nor ``undefined_or_unset`` has no rule.
    """

    loc: int
    cfa: CfaRule
    # every column with a known rule; a "u" the raw dump settles is ("undefined",) or left out
    registers: Mapping[int, Rule]
    undefined_or_unset: frozenset[int]  # columns printed "u" that the raw dump leaves open


@dataclass(frozen=True)
class Cie:
    section: str
    offset: int
    augmentation: str
    code_factor: int
    data_factor: int
    ra_column: int
    columns: frozenset[int]  # the columns its instructions mention
    rows: tuple[Row, ...]  # empty when its instructions are all nops

    @property
    def signal_frame(self) -> bool:
        return "S" in self.augmentation


@dataclass(frozen=True)
class Fde:
    section: str  # ".eh_frame" or ".debug_frame"
    offset: int  # of the FDE in its section
    cie: Cie
    start: int
    end: int
    columns: frozenset[int]  # the columns its CIE's and its instructions mention (the header)
    rows: tuple[Row, ...]  # ascending locs inside [start, end); empty if readelf printed none

    @property
    def ra_column(self) -> int:
        return self.cie.ra_column

    @property
    def signal_frame(self) -> bool:
        return self.cie.signal_frame

    def row_at(self, addr: int) -> Row | None:
        """The row in force at ``addr`` (None outside the FDE or before its first row)."""
        if not self.start <= addr < self.end:
            return None
        i = bisect.bisect_right(self.rows, addr, key=lambda row: row.loc)
        return self.rows[i - 1] if i else None

    def __str__(self) -> str:
        return f"{self.section} FDE at {self.offset:#x} [{self.start:#x}, {self.end:#x})"


@dataclass(frozen=True)
class FrameDump:
    """Everything readelf printed about one file's call-frame sections."""

    path: str
    sections: tuple[str, ...]  # the frame sections readelf printed, in order
    register_names: Mapping[str, int]  # binutils' names for this file's architecture
    fdes: tuple[Fde, ...]  # sorted by (start, end)
    # running maximum of fdes[:i+1].end, to find overlapping FDEs with a binary search
    _max_end: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        max_end: list[int] = []
        for fde in self.fdes:
            max_end.append(max(fde.end, max_end[-1]) if max_end else fde.end)
        object.__setattr__(self, "_max_end", tuple(max_end))

    def fdes_at(self, addr: int) -> list[Fde]:
        """Every FDE whose range holds ``addr`` (normally one; more where FDEs overlap)."""
        i = bisect.bisect_right(self.fdes, addr, key=lambda fde: fde.start)
        found: list[Fde] = []
        while i > 0 and self._max_end[i - 1] > addr:
            i -= 1
            if self.fdes[i].end > addr:
                found.append(self.fdes[i])
        return found[::-1]

    def rows_at(self, addr: int) -> list[tuple[Fde, Row]]:
        """The row in force at ``addr`` in each FDE that covers it and has one."""
        return [(fde, row) for fde in self.fdes_at(addr) if (row := fde.row_at(addr)) is not None]

    def row_at(self, addr: int) -> tuple[Fde, Row] | None:
        """The row in force at ``addr``; None if no FDE covers it. Raises if FDEs disagree."""
        found = self.rows_at(addr)
        if any(row != found[0][1] for _, row in found[1:]):
            raise ValueError(
                f"{self.path}: {len(found)} overlapping FDEs give different rows at {addr:#x}: "
                + ", ".join(str(fde) for fde, _ in found)
            )
        return found[0] if found else None

    def rows(self) -> Iterator[tuple[Fde, Row]]:
        """Every row of every FDE, with its FDE."""
        for fde in self.fdes:
            for row in fde.rows:
                yield fde, row


@functools.cache
def load(path: str) -> FrameDump:
    """``parse(path)``, cached per path."""
    return parse(path)


def readelf_row(path: str, addr: int) -> tuple[Fde, Row] | None:
    """The readelf row in force at ELF address ``addr`` of ``path`` (see FrameDump.row_at)."""
    return load(path).row_at(addr)


def run_readelf(path: str, dump: str) -> str:
    """readelf's ``--debug-dump=<dump>`` of ``path``, not following debug links."""
    argv = [READELF, "--wide", "--debug-dump=no-follow-links", f"--debug-dump={dump}", path]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or proc.stderr:
        raise ReadelfParseError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[:2000]}"
        )
    return proc.stdout


def parse(path: str) -> FrameDump:
    """Run readelf on ``path`` (frames-interp and frames) and parse both dumps."""
    raw = _parse_raw(path, run_readelf(path, "frames"))
    return _parse_interp(path, run_readelf(path, "frames-interp"), raw)


# ---------------------------------------------------------------------------------------------
# The raw dump (-wf): register names, expressions, and the list of entries to cross-check.

_SECTION = re.compile(r"Contents of the (\S+) section(?: \(loaded from .*\))?:$")
_NO_DATA = re.compile(r"Section '\S+' has no debugging data\.$")
_ZERO = re.compile(r"[0-9a-f]{8} ZERO terminator$")
_ENTRY = re.compile(
    r"(?P<off>[0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ "
    r"(?:CIE|FDE cie=(?P<cie>[0-9a-f]{8}) pc=(?P<start>[0-9a-f]+)\.\.(?P<end>[0-9a-f]+))"
)
_REGISTER_NAME = re.compile(r"(?<![\w])r(\d+) \(([^()]+)\)")
_CFA_EXPRESSION = re.compile(r"  DW_CFA_def_cfa_expression \((.*)\)$")
_REG_EXPRESSION = re.compile(
    r"  DW_CFA_(expression|val_expression): r(\d+)(?: \([^()]*\))? \((.*)\)$"
)
_INSTRUCTION = re.compile(r"  DW_CFA_(?P<op>\w+)(?:: r(?P<reg>\d+)\b)?")


@dataclass
class _Facts:
    """What the raw dump says about one CIE's or FDE's instructions."""

    # target -> expression bytes; target is "cfa", or (kind, regno) with kind "expression" or
    # "val_expression". None stands for an expression this module cannot assemble.
    expressions: dict[object, set[bytes | None]] = field(default_factory=dict)
    undefined: set[int] = field(default_factory=set)  # columns given DW_CFA_undefined
    undefined_first: set[int] = field(default_factory=set)  # ... before the first advance
    other: set[int] = field(default_factory=set)  # columns given any other instruction
    advanced: bool = False
    restores_state: bool = False  # has DW_CFA_restore_state
    remembered: int = 0  # depth of DW_CFA_remember_state
    # a DW_CFA_restore_state with nothing remembered: readelf, whose stack of remembered states
    # spans the section, would pop another FDE's
    unbalanced: bool = False


@dataclass
class _RawDump:
    register_names: dict[str, int]
    entries: dict[tuple[str, int], tuple[int, int] | None]  # FDE -> (start, end); CIE -> None
    facts: dict[tuple[str, int], _Facts]


def _parse_raw(path: str, text: str) -> _RawDump:
    dump = _RawDump({}, {}, {})
    for match in _REGISTER_NAME.finditer(text):
        number, name = int(match[1]), match[2]
        if dump.register_names.setdefault(name, number) != number:
            raise ReadelfParseError(
                f"{path}: readelf names both r{number} and r{dump.register_names[name]} {name!r}"
            )
    section = ""
    facts = _Facts()
    for line in text.splitlines():
        if m := _SECTION.match(line):
            section = m[1]
        elif m := _ENTRY.match(line):
            key = (section, int(m["off"], 16))
            dump.entries[key] = (int(m["start"], 16), int(m["end"], 16)) if m["cie"] else None
            facts = dump.facts[key] = _Facts()
        elif m := _CFA_EXPRESSION.match(line):
            facts.expressions.setdefault("cfa", set()).add(assemble_expression(m[1]))
        elif m := _INSTRUCTION.match(line):
            op, regno = m["op"], int(m["reg"]) if m["reg"] else None
            facts.advanced |= op.startswith(("advance_loc", "set_loc", "MIPS_advance_loc"))
            if op == "remember_state":
                facts.remembered += 1
            elif op == "restore_state":
                facts.restores_state = True
                facts.unbalanced |= facts.remembered == 0
                facts.remembered = max(facts.remembered - 1, 0)
            if m := _REG_EXPRESSION.match(line):
                target = (m[1], int(m[2]))
                facts.expressions.setdefault(target, set()).add(assemble_expression(m[3]))
            if regno is None or op.startswith("def_cfa"):  # the CFA register is no column
                continue
            if op == "undefined":
                facts.undefined.add(regno)
                if not facts.advanced:
                    facts.undefined_first.add(regno)
            else:
                facts.other.add(regno)
    return dump


@dataclass(frozen=True)
class _Pins:
    """What frames-interp leaves unsaid in one FDE's table, as far as the raw dump settles it."""

    expressions: Mapping[object, bytes | None]  # target -> the only expression it is given
    u_is_undefined: Mapping[int, bool]  # column -> what "u" means there, where that is certain


def _pins(raw: _RawDump, cie: tuple[str, int], fde: tuple[str, int]) -> _Pins:
    """Pin down ``exp``/``vexp`` and ``u`` where the CIE's and FDE's instructions allow.

    - A target (the CFA or a column) given a single expression: every ``exp`` there is it.
    - A column no instruction makes undefined: every ``u`` there is "no rule".
    - A column the FDE only makes undefined, before its first advance (glibc's ``_start`` and
      ``clone``: ``.cfi_undefined rip``): every ``u`` is undefined, for readelf prints no row
      before the first advance. Unless the CIE leaves the column without a rule and the FDE
      restores a state remembered before that (which a ``u`` would print alike).
    """
    c, f = raw.facts[cie], raw.facts[fde]
    expressions: dict[object, set[bytes | None]] = {}
    for facts in (c, f) if cie != fde else (c,):
        for target, found in facts.expressions.items():
            expressions.setdefault(target, set()).update(found)
    u_is_undefined: dict[int, bool] = {}
    for regno in c.other | c.undefined | f.other | f.undefined:
        if regno not in c.undefined | f.undefined:
            u_is_undefined[regno] = False
        elif (
            cie != fde
            and regno in f.undefined_first
            and regno not in f.other | c.undefined
            and (regno in c.other or not f.restores_state)
        ):
            u_is_undefined[regno] = True
    return _Pins(
        {target: next(iter(found)) for target, found in expressions.items() if len(found) == 1},
        u_is_undefined,
    )


# DWARF expression ops as readelf prints them (decode_location_expression), and their operands.
_OPS: dict[str, tuple[int, str]] = {
    "addr": (0x03, "addr"),
    "deref": (0x06, ""),
    "const1u": (0x08, "<B"),
    "const1s": (0x09, "<b"),
    "const2u": (0x0A, "<H"),
    "const2s": (0x0B, "<h"),
    "const4u": (0x0C, "<I"),
    "const4s": (0x0D, "<i"),
    "const8u": (0x0E, "<II"),
    "const8s": (0x0F, "<ii"),
    "constu": (0x10, "uleb"),
    "consts": (0x11, "sleb"),
    "dup": (0x12, ""),
    "drop": (0x13, ""),
    "over": (0x14, ""),
    "pick": (0x15, "<B"),
    "swap": (0x16, ""),
    "rot": (0x17, ""),
    "abs": (0x19, ""),
    "and": (0x1A, ""),
    "div": (0x1B, ""),
    "minus": (0x1C, ""),
    "mod": (0x1D, ""),
    "mul": (0x1E, ""),
    "neg": (0x1F, ""),
    "not": (0x20, ""),
    "or": (0x21, ""),
    "plus": (0x22, ""),
    "plus_uconst": (0x23, "uleb"),
    "shl": (0x24, ""),
    "shr": (0x25, ""),
    "shra": (0x26, ""),
    "xor": (0x27, ""),
    "bra": (0x28, "<h"),
    "eq": (0x29, ""),
    "ge": (0x2A, ""),
    "gt": (0x2B, ""),
    "le": (0x2C, ""),
    "lt": (0x2D, ""),
    "ne": (0x2E, ""),
    "skip": (0x2F, "<h"),
    "regx": (0x90, "uleb"),
    "bregx": (0x92, "uleb sleb"),
    "deref_size": (0x94, "<B"),
    "nop": (0x96, ""),
}
_OP_TEXT = re.compile(r"DW_OP_(?P<name>[a-z_]+?)(?P<n>\d*)(?: \([^()]*\))?(?:: (?P<args>.*))?$")


def _leb128(value: int, signed: bool) -> bytes:
    """The shortest (U|S)LEB128 encoding of ``value``."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if signed:
            done = value == (-1 if byte & 0x40 else 0)
        else:
            done = value == 0
        out.append(byte if done else byte | 0x80)
        if done:
            return bytes(out)


def assemble_expression(text: str) -> bytes | None:
    """The bytes of an expression printed by readelf, e.g. ``DW_OP_breg7 (rsp): 8; DW_OP_deref``.

    LEB128 operands are encoded in their shortest form, as assemblers emit them. None if an op
    is not one an unwinder evaluates (see the contract's list).
    """
    out = bytearray()
    for item in text.split("; "):
        m = _OP_TEXT.match(item)
        if m is None:
            return None
        name, n = m["name"], m["n"]
        # the registers named in brackets are readelf's gloss of the number before them
        args = re.sub(r" \([^()]*\)", "", m["args"] or "").split()
        if name in ("lit", "reg", "breg") and n and int(n) < 32:
            out.append({"lit": 0x30, "reg": 0x50, "breg": 0x70}[name] + int(n))
            if name == "breg":
                out += _leb128(int(args[0]), signed=True)
            continue
        if n or name not in _OPS:
            return None
        opcode, operands = _OPS[name]
        out.append(opcode)
        if operands == "addr":
            out += struct.pack("<Q", int(args[0], 16))
        elif operands.startswith("<"):
            out += struct.pack(operands, *(int(a) for a in args))
        else:
            for kind, arg in zip(operands.split(), args, strict=True):
                out += _leb128(int(arg), signed=kind == "sleb")
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# The interpreted dump (-wF).

_CIE = re.compile(
    r"(?P<off>[0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ CIE \"(?P<aug>[^\"]*)\" "
    r"cf=(?P<cf>\d+) df=(?P<df>-?\d+) ra=(?P<ra>\d+)$"
)
_FDE = re.compile(
    r"(?P<off>[0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ FDE cie=(?P<cie>[0-9a-f]{8}) "
    r"pc=(?P<start>[0-9a-f]+)\.\.(?P<end>[0-9a-f]+)$"
)
_HEADER = re.compile(r"\s+LOC\s+CFA\b(?P<columns>.*)$")
_ROW = re.compile(r"(?P<loc>[0-9a-f]+) (?P<rules>.*)$")
_TOKEN = re.compile(r"r\d+ \([^()]*\)|\S+")  # DW_CFA_register prints "r6 (rbp)"
_CFA_REG = re.compile(r"(?P<reg>\S+?)(?P<off>[+-]\d+)$")
_OFFSET_RULE = re.compile(r"(?P<kind>[cv])(?P<off>[+-]\d+)$")
_REGISTER_RULE = re.compile(r"r(?P<reg>\d+)(?: \([^()]*\))?$")


@dataclass
class _Entry:
    """One CIE or FDE as printed, before its rows are interpreted."""

    section: str
    offset: int
    header: re.Match[str]
    line: int
    columns: list[str] | None = None
    rows: list[tuple[int, list[str]]] = field(default_factory=list)


def _parse_interp(path: str, text: str, raw: _RawDump) -> FrameDump:
    sections: list[str] = []
    cie_entries: dict[tuple[str, int], _Entry] = {}
    fde_entries: list[_Entry] = []
    entry: _Entry | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{path}: readelf -wF line {lineno}"
        if not line.strip() or _ZERO.match(line) or _NO_DATA.match(line):
            continue
        if m := _SECTION.match(line):
            sections.append(m[1])
            entry = None
        elif m := _CIE.match(line) or _FDE.match(line):
            if not sections:
                raise ReadelfParseError(f"{where}: entry before any section header")
            entry = _Entry(sections[-1], int(m["off"], 16), m, lineno)
            if "ra" in m.groupdict():
                cie_entries[(entry.section, entry.offset)] = entry
            else:
                fde_entries.append(entry)
        elif (m := _HEADER.match(line)) and entry is not None and entry.columns is None:
            entry.columns = m["columns"].split()
        elif (m := _ROW.match(line)) and entry is not None and entry.columns is not None:
            rules = _TOKEN.findall(m["rules"])
            if len(rules) != 1 + len(entry.columns):
                raise ReadelfParseError(
                    f"{where}: {len(rules)} rules under {1 + len(entry.columns)} columns: {line!r}"
                )
            entry.rows.append((int(m["loc"], 16), rules))
        else:
            raise ReadelfParseError(f"{where}: unexpected line {line!r}")

    names = raw.register_names
    cies = {key: _make_cie(path, e, names, raw) for key, e in cie_entries.items()}
    fdes = []
    for e in fde_entries:
        cie_key = (e.section, int(e.header["cie"], 16))
        if cie_key not in cies:
            raise ReadelfParseError(
                f"{path}: FDE at {e.offset:#x} names a CIE at "
                f"{cie_key[1]:#x} that readelf did not print"
            )
        fdes.append(_make_fde(path, e, cies[cie_key], names, raw))

    printed: dict[tuple[str, int], tuple[int, int] | None] = {
        (fde.section, fde.offset): (fde.start, fde.end) for fde in fdes
    }
    printed.update(dict.fromkeys(cies))
    if printed != raw.entries:
        missing = set(printed.items()) ^ set(raw.entries.items())
        raise ReadelfParseError(
            f"{path}: readelf -wF and -wf list different CIEs/FDEs, e.g. "
            f"{sorted(missing, key=str)[:5]}"
        )
    fdes.sort(key=lambda fde: (fde.start, fde.end))
    return FrameDump(path, tuple(sections), dict(names), tuple(fdes))


def _regno(path: str, name: str, ra_column: int, names: Mapping[str, int]) -> int:
    if name == "ra":
        return ra_column
    if name in names:
        return names[name]
    if m := re.fullmatch(r"r(\d+)", name):  # binutils has no name for this column
        return int(m[1])
    raise ReadelfParseError(f"{path}: readelf register name {name!r} appears in no instruction")


@functools.cache
def _column_rule(text: str) -> Rule | None:
    """A column's rule as printed; None for "u". Expressions come without their bytes."""
    if text == "u":
        return None
    if text == "s":
        return ("same_value",)
    if text in ("exp", "vexp"):
        return ("expression" if text == "exp" else "val_expression", None)
    if m := _OFFSET_RULE.match(text):
        return ("offset" if m["kind"] == "c" else "val_offset", int(m["off"]))
    if m := _REGISTER_RULE.match(text):
        return ("register", int(m["reg"]))
    raise ReadelfParseError(f"unknown rule {text!r}")


def _make_row(
    path: str,
    loc: int,
    rules: list[str],
    columns: list[int],
    names: Mapping[str, int],
    pins: _Pins,
    ra_column: int,
) -> Row:
    cfa_text, *column_rules = rules
    cfa: CfaRule
    if cfa_text == "exp":
        cfa = ("expr", pins.expressions.get("cfa"))
    elif m := _CFA_REG.match(cfa_text):
        cfa = ("reg", _regno(path, m["reg"], ra_column, names), int(m["off"]))
    else:
        raise ReadelfParseError(f"{path}: CFA rule {cfa_text!r} at {loc:#x}")
    registers: dict[int, Rule] = {}
    unsure: set[int] = set()
    for regno, text in zip(columns, column_rules, strict=True):
        try:
            rule = _column_rule(text)
        except ReadelfParseError as e:
            raise ReadelfParseError(f"{path}: {e} for r{regno} at {loc:#x}") from None
        if rule is None:
            u_is_undefined = pins.u_is_undefined.get(regno)
            if u_is_undefined is None:
                unsure.add(regno)
            elif u_is_undefined:
                registers[regno] = ("undefined",)
        elif rule[0] in ("expression", "val_expression"):
            registers[regno] = (rule[0], pins.expressions.get((rule[0], regno)))
        else:
            registers[regno] = rule
    return Row(loc, cfa, registers, frozenset(unsure))


def _make_cie(path: str, e: _Entry, names: Mapping[str, int], raw: _RawDump) -> Cie:
    ra_column = int(e.header["ra"])
    key = (e.section, e.offset)
    pins = _pins(raw, key, key)
    columns = [_regno(path, name, ra_column, names) for name in e.columns or ()]
    rows = tuple(
        _make_row(path, loc, rules, columns, names, pins, ra_column) for loc, rules in e.rows
    )
    return Cie(
        e.section,
        e.offset,
        e.header["aug"],
        int(e.header["cf"]),
        int(e.header["df"]),
        ra_column,
        frozenset(columns),
        rows,
    )


def _make_fde(path: str, e: _Entry, cie: Cie, names: Mapping[str, int], raw: _RawDump) -> Fde:
    start, end = int(e.header["start"], 16), int(e.header["end"], 16)
    if not e.rows:  # all nops: the CIE's initial row holds for the whole FDE
        initial = cie.rows[-1:]
        return Fde(
            e.section,
            e.offset,
            cie,
            start,
            end,
            cie.columns,
            tuple(Row(start, r.cfa, r.registers, r.undefined_or_unset) for r in initial),
        )
    if raw.facts[(e.section, e.offset)].unbalanced:
        raise ReadelfParseError(
            f"{path}: FDE at {e.offset:#x} restores a state it never remembered; readelf's "
            "table for it would hold another FDE's state"
        )
    pins = _pins(raw, (cie.section, cie.offset), (e.section, e.offset))
    columns = [_regno(path, name, cie.ra_column, names) for name in e.columns or ()]
    rows: list[Row] = []
    for loc, rules in e.rows:
        if rows and loc < rows[-1].loc or loc < start:
            raise ReadelfParseError(f"{path}: FDE at {e.offset:#x}: row at {loc:#x} goes back")
        if loc >= end:  # the row printed after a trailing advance lies outside the FDE
            continue
        row = _make_row(path, loc, rules, columns, names, pins, cie.ra_column)
        if rows and rows[-1].loc == loc:  # advanced by 0: the later state is the one in force
            rows[-1] = row
        else:
            rows.append(row)
    return Fde(e.section, e.offset, cie, start, end, frozenset(columns), tuple(rows))
