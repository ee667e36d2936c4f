"""Windows programs made and crashed here: built with mingw-w64, run under Wine, whose
``MiniDumpWriteDump`` writes a real minidump from the program's unhandled-exception filter (as
Breakpad's and Crashpad's Windows clients do), and the references read from them.

Wine's own DLLs (kernel32, ntdll, msvcrt...) are PE files too (``WINE_DLLS``): what a Windows
crash's system modules are to its processor. Wine writes module records without CodeView records,
and neither mingw's programs nor Wine's DLLs carry a PDB's id; a crash processor finds symbol
files by that id. ``with_ids`` gives each module the id Windows' linker would have written (here:
a GUID made of the file's bytes, age 1) in the dump and in its ``dump_syms`` symbol file alike, so
that ``minidump-stackwalk`` finds them.
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
# Debian's wine64 puts its loader here, and the x64 PE files of Wine's DLLs beside it.
WINE = shutil.which("wine64") or "/usr/lib/wine/wine64"
WINE_DLLS = Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows")
SOURCE = Path(__file__).parent / "programs" / "windows" / "crash_win.c"
MODES = ("leaf", "deep", "qsort", "thread", "divide", "raise")
TIMEOUT = 180


def build(out: Path, optimization: str) -> Path:
    """crash_win.c built into ``out`` (with DWARF: the reference for the names of its frames)."""
    cmd = [MINGW_GCC, optimization, "-g", "-o", str(out), str(SOURCE), "-ldbghelp"]
    proc = run(cmd, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    return out


def wine_env(prefix: Path) -> dict[str, str]:
    """Wine in a prefix of the tests' own, saying nothing, with no window and no download
    (Mono, Gecko) asked for."""
    env = {**os.environ, "WINEPREFIX": str(prefix), "WINEDEBUG": "-all",
           "WINEDLLOVERRIDES": "mscoree,mshtml=", "WINEARCH": "win64"}  # fmt: skip
    env.pop("DISPLAY", None)
    return env


def crash(exe: Path, mode: str, dump: Path, prefix: Path) -> Path:
    """Run ``exe mode DUMP`` under Wine: it crashes and writes ``dump``."""
    proc = run([WINE, str(exe), mode, str(dump)], env=wine_env(prefix), timeout=TIMEOUT,
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


def with_ids(dump: Path, search: list[Path], into: Path) -> WithIds:
    """The dump with a CodeView record for every module whose PE file ``search`` holds (see the
    module's docstring), and the symbol store of those files, made by dump_syms."""
    store = into / "symbols"
    files: dict[str, Path] = {}

    def record(name: str, old: bytes) -> bytes:
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


def call_before(pe: Path, rva: int, image_base: int) -> bool:
    """Whether the instruction that ends at ``rva`` in the PE file is a call, as the mingw
    objdump disassembles the 16 bytes before it (starting at each of them in turn: one start
    lines up with the instruction boundaries)."""
    address = image_base + rva
    for back in range(2, 16):
        proc = run([MINGW_OBJDUMP, "-d", f"--start-address={address - back:#x}",
                    f"--stop-address={address:#x}", str(pe)], timeout=TIMEOUT)  # fmt: skip
        lines = [line for line in proc.stdout.splitlines() if line.startswith(" ")]
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


def image_base(pe: Path) -> int:
    """The PE file's preferred image base (its addresses as objdump prints them)."""
    proc = run([MINGW_OBJDUMP, "-p", str(pe)], timeout=TIMEOUT)
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
