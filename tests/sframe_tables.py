"""SFrame tables for the tests, independent of stackwalk's reader: ``readelf --sframe``'s listing
parsed, the version-1 tables this machine's assembler writes (binutils 2.40, ``as --gsframe``)
read, and the same rows written again byte by byte as versions 2 and 3 (binutils 2.41-2.45 and
2.46 write them; no assembler here does), following the published specification
(sourceware's sframe-spec, "The SFrame Format", versions 2 and 3):

- header (28 bytes): magic 0xdee2, version, flags, ABI, fixed FP and RA offsets, auxiliary
  header length, function and row counts, the rows' length, and the offsets of the function
  descriptors and of the rows from the header's end;
- v1 function descriptor: start (i32), size, first row's offset, row count (u32), info (u8);
  v2: the same, then the repeat block's size (u8) and two bytes of padding;
  v3: an index entry (start i64, size u32, the attributes' offset u32) and, in the row
  sub-section, the attributes (row count u16, info u8, info2 u8 -- the FDE type --, repeat
  size u8) right before the function's rows;
- a start is from the section's first byte, or with ``SFRAME_F_FDE_FUNC_START_PCREL`` (0x4)
  from the start field itself;
- a row: its start (1, 2 or 4 bytes, by the info's row type), an info byte, data words.

A v3 "flexible" FDE carries (control word, offset) pairs: control = register << 3 | deref << 1 |
register-based; ``flexible`` turns a default row into one, so that both encodings of the same
rules can be compared.
"""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from elftools.elf.elffile import ELFFile

HEADER = struct.Struct("<HBBBbbBIIIII")
MAGIC = 0xDEE2
F_SORTED = 0x1
F_PCREL = 0x4
ABI_AMD64 = 3
ABI_AARCH64 = 2
# DWARF numbers of the stack and frame pointers.
SP_FP = {ABI_AMD64: (7, 6), ABI_AARCH64: (31, 29)}


@dataclass
class Row:
    start: int
    info: int
    words: list[int]
    offset: int = 0  # where its first data word is in the section it was read from


@dataclass
class Function:
    start: int  # an ELF address
    size: int
    info: int
    repeat: int
    rows: list[Row] = field(default_factory=list)
    flexible: bool = False


@dataclass
class Table:
    version: int
    flags: int
    abi: int
    fixed_fp: int
    fixed_ra: int
    functions: list[Function]


def section(path: Path, name: str = ".sframe") -> tuple[bytes, int, int]:
    """A section's bytes, ELF address and file offset."""
    with open(path, "rb") as f:
        found = ELFFile(f).get_section_by_name(name)
        assert found is not None, f"{path} has no {name}"
        return found.data(), found["sh_addr"], found["sh_offset"]


def _words(data: bytes, at: int, info: int) -> tuple[list[int], int]:
    count, size = (info >> 1) & 0xF, 1 << ((info >> 5) & 0x3)
    code = {1: "b", 2: "h", 4: "i"}[size]
    words = list(struct.unpack_from(f"<{count}{code}", data, at))
    return words, at + count * size


def read_v1(data: bytes, address: int) -> Table:
    """A version-1 table as binutils 2.40 writes it."""
    magic, version, flags, abi, fixed_fp, fixed_ra, aux, nfdes, _, _, fdeoff, freoff = (
        HEADER.unpack_from(data)
    )
    assert magic == MAGIC and version == 1, (hex(magic), version)
    header = HEADER.size + aux
    functions = []
    for i in range(nfdes):
        start, size, fre_off, nfres, info = struct.unpack_from(
            "<iIIIB", data, header + fdeoff + 17 * i
        )
        function = Function(address + start, size, info, 16 if info & 0x10 else 0)
        at = header + freoff + fre_off
        width = (1, 2, 4)[info & 0xF]
        for _ in range(nfres):
            row_start = int.from_bytes(data[at : at + width], "little")
            row_info = data[at + width]
            offset = at + width + 1
            words, at = _words(data, offset, row_info)
            function.rows.append(Row(row_start, row_info, words, offset))
        functions.append(function)
    return Table(version, flags, abi, fixed_fp, fixed_ra, functions)


def _word_size(words: list[int], *, unsigned: tuple[int, ...] = ()) -> int:
    """The narrowest width (code 0, 1, 2) that holds every word."""
    for code, bits in ((0, 8), (1, 16), (2, 32)):
        fits = all(
            (0 <= w < 1 << bits) if i in unsigned else (-(1 << (bits - 1)) <= w < 1 << (bits - 1))
            for i, w in enumerate(words)
        )
        if fits:
            return code
    raise ValueError(words)


def _row_bytes(row: Row, width: int, unsigned: tuple[int, ...] = ()) -> bytes:
    size_code = (row.info >> 5) & 0x3 if not unsigned else _word_size(row.words, unsigned=unsigned)
    size = 1 << size_code
    info = (row.info & 0x81) | (len(row.words) << 1) | (size_code << 5)
    out = row.start.to_bytes(width, "little") + bytes([info])
    for w in row.words:
        out += (w & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return out


def flexible(table: Table, function: Function) -> Function:
    """``function`` (x86_64, default rows) as a v3 flexible FDE with the same rules: the CFA as
    (sp or fp, offset), no return-address pair (the header's fixed rule: padding where a frame
    pointer follows), the frame pointer as (deref of CFA + offset)."""
    sp, fp = SP_FP[table.abi]
    rows = []
    for row in function.rows:
        if not row.words:
            rows.append(row)
            continue
        base = sp if row.info & 1 else fp
        words = [base << 3 | 1, row.words[0]]
        if len(row.words) > 1:
            words += [0, 1 << 1, row.words[1]]
        rows.append(Row(row.start, row.info & 0x80, words))
    return replace(function, rows=rows, flexible=True)


def write(table: Table, version: int, address: int, *, pcrel: bool = True) -> bytes:
    """``table`` written as version 2 or 3, for a section at ELF address ``address``."""
    flags = F_SORTED | (F_PCREL if pcrel else 0)
    fde_size = 20 if version == 2 else 16
    header = HEADER.size
    fdes, fres = b"", b""
    for i, function in enumerate(table.functions):
        width = (1, 2, 4)[function.info & 0xF]
        field_address = address + header + fde_size * i
        start = function.start - (field_address if pcrel else address)
        fre_off = len(fres)
        if version == 2:
            fdes += struct.pack(
                "<iIIIBBH",
                start,
                function.size,
                fre_off,
                len(function.rows),
                function.info,
                function.repeat,
                0,
            )
        else:
            fdes += struct.pack("<qII", start, function.size, fre_off)
            info2 = 1 if function.flexible else 0
            fres += struct.pack("<HBBB", len(function.rows), function.info, info2, function.repeat)
        unsigned = (0, 2, 3) if function.flexible else ()
        for row in function.rows:
            fres += _row_bytes(row, width, unsigned)
    nfres = sum(len(f.rows) for f in table.functions)
    head = HEADER.pack(
        MAGIC,
        version,
        flags,
        table.abi,
        table.fixed_fp,
        table.fixed_ra,
        0,
        len(table.functions),
        nfres,
        len(fres),
        0,
        len(fdes),
    )
    return head + fdes + fres


def objcopy_for(elf: Path) -> str:
    """The objcopy of the file's machine (Debian's is the host's alone)."""
    with open(elf, "rb") as f:
        machine = ELFFile(f)["e_machine"]
    return "aarch64-linux-gnu-objcopy" if machine == "EM_AARCH64" else "objcopy"


def replace_section(elf: Path, contents: bytes, output: Path, *, hide_eh_frame: bool) -> Path:
    """A copy of ``elf`` whose ``.sframe`` holds ``contents`` (at the old section's address: a
    table read from the file, not loaded), its ``.eh_frame`` hidden (renamed) if asked."""
    _, address, _ = section(elf)
    table = output.with_suffix(".sframe-bytes")
    table.write_bytes(contents)
    cmd = [
        objcopy_for(elf),
        "--remove-section",
        ".sframe",
        "--add-section",
        f".sframe={table}",
        "--set-section-flags",
        ".sframe=readonly,data",
        "--change-section-address",
        f".sframe={address:#x}",
    ]
    if hide_eh_frame:
        cmd += hide_arguments()
    subprocess.run([*cmd, str(elf), str(output)], check=True, capture_output=True)
    return output


def hide_arguments() -> list[str]:
    """objcopy's arguments that hide a file's DWARF CFI from every reader (renamed sections)."""
    return [
        "--rename-section",
        ".eh_frame=.hidden_eh_frame",
        "--rename-section",
        ".eh_frame_hdr=.hidden_eh_frame_hdr",
        "--remove-section",
        ".debug_frame",
    ]


def hide_eh_frame(elf: Path, output: Path) -> Path:
    subprocess.run(
        [objcopy_for(elf), *hide_arguments(), str(elf), str(output)],
        check=True,
        capture_output=True,
    )
    return output


@dataclass(frozen=True)
class DumpRow:
    start: int
    cfa: str
    fp: str
    ra: str


@dataclass(frozen=True)
class DumpFunction:
    start: int
    size: int
    masked: bool
    rows: tuple[DumpRow, ...]


FUNC = re.compile(r"func idx \[(\d+)\]: pc = (0x[0-9a-f]+), size = (\d+) bytes")


def readelf(path: Path, readelf_tool: str = "readelf") -> list[DumpFunction]:
    """``readelf --sframe``'s functions and rows."""
    text = subprocess.run(
        [readelf_tool, "--sframe", str(path)], capture_output=True, text=True, check=True
    ).stdout
    functions: list[DumpFunction] = []
    current: dict[str, object] | None = None
    rows: list[DumpRow] = []

    def close() -> None:
        if current is not None:
            functions.append(
                DumpFunction(
                    int(current["start"]),
                    int(current["size"]),
                    bool(current["masked"]),
                    tuple(rows),
                )
            )

    for line in text.splitlines():
        match = FUNC.search(line)
        if match:
            close()
            current, rows = {"start": int(match[2], 16), "size": int(match[3]), "masked": False}, []
        elif current is not None and line.strip().startswith("STARTPC"):
            current["masked"] = "[m]" in line
        elif current is not None and re.match(r"\s+[0-9a-f]{16}\s", line):
            start, cfa, fp, ra = line.split()[:4]
            rows.append(DumpRow(int(start, 16), cfa, fp, ra))
    close()
    return functions
