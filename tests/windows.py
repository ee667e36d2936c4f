"""Windows programs made and crashed here: built with mingw-w64 (x64) or clang and lld (x86, with
a PDB: ``-gcodeview``), run under Wine, whose ``MiniDumpWriteDump`` writes a real minidump from
the program's unhandled-exception filter (as Breakpad's and Crashpad's Windows clients do), and
the references read from them.

Wine's own DLLs (kernel32, ntdll, msvcrt...) are PE files too (``WINE_DLLS``): what a Windows
crash's system modules are to its processor. Wine writes module records without CodeView records,
and neither mingw's programs nor Wine's DLLs carry a PDB's id; a crash processor finds symbol
files by that id. ``with_ids`` gives each module the id Windows' linker would have written (here:
a GUID made of the file's bytes, age 1) in the dump and in its ``dump_syms`` symbol file alike, so
that ``minidump-stackwalk`` finds them. A program linked with a PDB carries the PDB's own id in
its debug directory: ``pe_codeview`` reads that record, which Windows would have put in the dump.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefiles import run
from minidumps import CV_PDB70, DUMP_SYMS, MINIDUMP_STACKWALK, rewrite_codeview

MINGW_GCC = "x86_64-w64-mingw32-gcc"
MINGW_OBJDUMP = "x86_64-w64-mingw32-objdump"
MINGW_OBJCOPY = "x86_64-w64-mingw32-objcopy"
MINGW_ADDR2LINE = "x86_64-w64-mingw32-addr2line"
MINGW32_OBJDUMP = "i686-w64-mingw32-objdump"
# Debian's wine64 puts its loader here, and the x64 PE files of Wine's DLLs beside it; wine32
# (Debian's i386 package) its 32-bit loader and DLLs.
WINE = shutil.which("wine64") or "/usr/lib/wine/wine64"
WINE_DLLS = Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows")
WINE32 = "/usr/lib/wine/wine"
WINE_DLLS32 = Path("/usr/lib/i386-linux-gnu/wine/i386-windows")

SOURCE = Path(__file__).parent / "programs" / "windows" / "crash_win.c"
MODES = ("leaf", "deep", "qsort", "thread", "divide", "raise")
TIMEOUT = 180


def build(out: Path, optimization: str) -> Path:
    """crash_win.c built into ``out`` (with DWARF: the reference for the names of its frames)."""
    cmd = [MINGW_GCC, optimization, "-g", "-o", str(out), str(SOURCE), "-ldbghelp"]
    proc = run(cmd, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    return out


def build_clang(out: Path, optimization: str, target: str = "i686") -> tuple[Path, Path]:
    """crash_win.c built by clang for 32-bit Windows (``target`` x86_64: 64-bit) into ``out``,
    with its PDB (CodeView, whose x86 frame data ``dump_syms`` turns into ``STACK WIN``
    records) beside it."""
    # The mingw-w64 toolchain's libgcc, which clang's mingw target links with.
    libgcc = sorted(Path(f"/usr/lib/gcc/{target}-w64-mingw32").glob("*-win32"))
    assert libgcc, f"gcc-mingw-w64-{target.replace('_', '-')} is installed by .ci/setup"
    pdb = out.with_suffix(".pdb")
    cmd = ["clang", f"--target={target}-w64-windows-gnu", optimization, "-g", "-gcodeview",
           "-fuse-ld=lld", f"-Wl,--pdb={pdb}", f"-L{libgcc[-1]}", "-o", str(out),
           str(SOURCE), "-ldbghelp"]  # fmt: skip
    proc = run(cmd, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    return out, pdb


def pe_codeview(pe: Path) -> bytes | None:
    """The PDB 7.0 CodeView record (``RSDS``, GUID, age, PDB path) of the PE file's debug
    directory, as Windows copies it into a dump's module list; None without one."""
    data = pe.read_bytes()
    (header,) = struct.unpack_from("<I", data, 0x3C)
    (sections,) = struct.unpack_from("<H", data, header + 6)
    (optional_size,) = struct.unpack_from("<H", data, header + 20)
    optional = header + 24
    (magic,) = struct.unpack_from("<H", data, optional)
    directories = optional + (96 if magic == 0x10B else 112)
    rva, size = struct.unpack_from("<II", data, directories + 6 * 8)  # IMAGE_DIRECTORY_ENTRY_DEBUG
    for i in range(sections):
        virtual_size, address, raw_size, raw = struct.unpack_from(
            "<IIII", data, optional + optional_size + 40 * i + 8
        )
        if address <= rva < address + max(virtual_size, raw_size):
            at = raw + rva - address
            break
    else:
        return None
    for j in range(size // 28):
        kind, length, _, pointer = struct.unpack_from("<IIII", data, at + 28 * j + 12)
        if kind == 2 and data[pointer : pointer + 4] == CV_PDB70:  # IMAGE_DEBUG_TYPE_CODEVIEW
            return data[pointer : pointer + length].rstrip(b"\0") + b"\0"
    return None


def pdb_symbols(pdb: Path, store: Path) -> str:
    """dump_syms' symbol file of the PDB, filed in the store under its debug id (returned)."""
    sym = subprocess.run([DUMP_SYMS, str(pdb)], capture_output=True, text=True, timeout=TIMEOUT)
    assert sym.returncode == 0 and sym.stdout.startswith("MODULE "), sym.stderr
    identity = sym.stdout.split(" ", 4)[3]
    target = store / pdb.name / identity / pdb.with_suffix(".sym").name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(sym.stdout)
    return identity


def wine_env(prefix: Path) -> dict[str, str]:
    """Wine in a prefix of the tests' own, saying nothing, with no window and no download
    (Mono, Gecko) asked for."""
    env = {**os.environ, "WINEPREFIX": str(prefix), "WINEDEBUG": "-all",
           "WINEDLLOVERRIDES": "mscoree,mshtml=", "WINEARCH": "win64"}  # fmt: skip
    env.pop("DISPLAY", None)
    return env


def crash(exe: Path, mode: str, dump: Path, prefix: Path, wine: str = WINE) -> Path:
    """Run ``exe mode DUMP`` under Wine (``wine``: its loader, 64- or 32-bit): it crashes and
    writes ``dump``."""
    proc = run([wine, str(exe), mode, str(dump)], env=wine_env(prefix), timeout=TIMEOUT,
               cwd=exe.parent)  # fmt: skip
    assert dump.exists() and dump.stat().st_size > 0, (
        f"wine {exe.name} {mode} wrote no dump (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    )
    return dump


def module_file(name: str, search: list[Path]) -> Path | None:
    """The PE file of a dump's module (a Windows path), by its name in ``search``."""
    leaf = name.replace("\\", "/").rsplit("/", 1)[-1]
    for directory in search:
        for candidate in (directory / leaf, directory / leaf.lower()):
            if candidate.is_file():
                return candidate
    return None


def _guid(path: Path) -> bytes:
    return hashlib.md5(path.read_bytes()).digest()


def debug_id(guid: bytes, age: int) -> str:
    """Breakpad's debug id of a PDB 7.0 record: its GUID's fields as Windows prints them."""
    data1, data2, data3 = struct.unpack_from("<IHH", guid)
    return f"{data1:08X}{data2:04X}{data3:04X}{guid[8:].hex().upper()}{age:X}"


@dataclass(frozen=True)
class WithIds:
    dump: Path
    store: Path  # a Breakpad symbol store of every module's dump_syms file, under the same ids


def with_ids(
    dump: Path, search: list[Path], into: Path, own: dict[str, bytes] | None = None
) -> WithIds:
    """The dump with a CodeView record for every module whose PE file ``search`` holds (see the
    module's docstring), and the symbol store of those files, made by dump_syms. ``own``: the
    records of modules (by file name) that carry their PDB's, used as they are."""
    store = into / "symbols"
    files: dict[str, Path] = {}

    def record(name: str, old: bytes) -> bytes:
        leaf = name.replace("\\", "/").rsplit("/", 1)[-1]
        if own and leaf in own:
            return own[leaf]
        pe = module_file(name, search)
        if pe is None:
            return old
        files[name] = pe
        return CV_PDB70 + _guid(pe) + struct.pack("<I", 1) + pe.name.encode() + b"\0"

    out = rewrite_codeview(dump, into / f"{dump.stem}-ids.dmp", record)
    for pe in set(files.values()):
        sym = subprocess.run([DUMP_SYMS, str(pe)], capture_output=True, text=True, timeout=TIMEOUT)
        assert sym.returncode == 0 and sym.stdout.startswith("MODULE "), sym.stderr
        identity = debug_id(_guid(pe), 1)
        head, rest = sym.stdout.split("\n", 1)
        os_name, arch, _, name = head.split(" ")[1:5]
        target = store / pe.name / identity / f"{pe.name}.sym"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"MODULE {os_name} {arch} {identity} {name}\n{rest}")
    return WithIds(out, store)


def minidump_stackwalk(dump: Path, store: Path) -> dict[str, Any]:
    """rust-minidump's processor on ``dump`` with the symbol files of ``store``."""
    cmd = [MINIDUMP_STACKWALK, "--json", str(dump), str(store)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def call_before(pe: Path, rva: int, image_base: int, objdump: str = MINGW_OBJDUMP) -> bool:
    """Whether the instruction that ends at ``rva`` in the PE file is a call, as the mingw
    objdump (``objdump``: x64's or i686's) disassembles the 16 bytes before it (starting at each
    of them in turn: one start lines up with the instruction boundaries)."""
    address = image_base + rva
    for back in range(2, 16):
        proc = run([objdump, "-d", f"--start-address={address - back:#x}",
                    f"--stop-address={address:#x}", str(pe)], timeout=TIMEOUT)  # fmt: skip
        # Instruction lines: "  ADDRESS:\tBYTES\tMNEMONIC" (x64's addresses are indented).
        lines = [line for line in proc.stdout.splitlines() if ":\t" in line]
        if not lines:
            continue
        last = lines[-1].split("\t")
        # (address:, bytes, mnemonic and operands): the last instruction must end at `address`.
        if len(last) >= 3 and "(bad)" not in proc.stdout:
            start = int(last[0].strip().rstrip(":"), 16)
            size = len(last[1].split())
            if start + size == address and last[2].startswith("call"):
                return True
    return False


def image_base(pe: Path, objdump: str = MINGW_OBJDUMP) -> int:
    """The PE file's preferred image base (its addresses as objdump prints them)."""
    proc = run([objdump, "-p", str(pe)], timeout=TIMEOUT)
    for line in proc.stdout.splitlines():
        if line.startswith("ImageBase"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no ImageBase in objdump -p {pe}")


def function_names(exe: Path, addresses: list[int]) -> list[str]:
    """mingw addr2line's function names for addresses of the program (its DWARF)."""
    cmd = [MINGW_ADDR2LINE, "-f", "-e", str(exe), *(hex(a) for a in addresses)]
    proc = run(cmd, timeout=TIMEOUT)
    return proc.stdout.splitlines()[::2]


def as_elf(pe: Path, out: Path) -> Path:
    """The PE file converted to an ELF file by objcopy, its sections (DWARF's .debug_frame
    among them) at the same addresses: what binutils' readelf reads."""
    proc = run([MINGW_OBJCOPY, "-O", "elf64-x86-64", str(pe), str(out)], timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return out
