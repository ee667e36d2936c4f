"""Symbols of size 0 (assembly labels: glibc's ``__restore_rt``, ld.so's ``_start`` and
``_dl_start_user``, the crt files' ``_init``, ``deregister_tm_clones``...) name the addresses up
to the next symbol within their section, as elfutils' ``dwfl_module_addrsym`` (eu-addr2line,
eu-stack) names them: ``SymbolTable.lookup`` is compared with ``eu-addr2line -S`` at every
address from each such symbol of real binaries to the next symbol, and a little past it.

Two places where eu-addr2line is not the reference. It names ARM mapping symbols (``$x``,
which marks where A64 code starts, not a function): there gdb's ``info symbol``, which skips
them as binutils does, is the reference. And it counts the address just past a section's
end as inside the section (libdwfl's ``find_section`` does so on purpose, for line records),
and so names it after the section's last symbol (``_fini+0x9`` just past ``.fini``). That byte
is no part of the section, as readelf's section headers say and as gdb's ``info symbol``
agrees, so there ours must name nothing of the section.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import stackwalk
from corefiles import (
    AARCH64_SYSROOT,
    ARM_GCC,
    ARM_SYSROOT,
    I386_GCC,
    I386_SYSROOT,
    ElfSymbol,
    build_id_of,
    demangle,
    elf_symbols,
    eu_addr2line_symbols,
    run,
    same_function,
    symbol_file,
)
from elftools.elf.elffile import ELFFile
from realstacks import Builder
from stackwalk._core import SymbolTable

# Every address of a label's range is compared up to this many; beyond, a sample.
DENSE = 96
LD_SO = "/lib64/ld-linux-x86-64.so.2"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def binary(name: str, build: Builder) -> str:
    """The file whose symbols are compared: a test program, or a system library's separate
    debug file (where its .symtab is)."""
    if name == "crash_sizeless_start":
        return str(build("crash_sizeless_start.c", "-O2", "-nostartfiles"))
    if name == "crash_deep":
        return str(build("crash_deep.c", "-O2"))
    if name == "a64-crash_deep-static":
        return str(build("crash_deep.c", "-O2", "-static", compiler="aarch64-linux-gnu-gcc"))
    path = symbol_file({"ld.so": LD_SO, "libc": LIBC}[name])
    assert path.endswith(".debug"), f"no debug file for {name}: install libc6-dbg"
    return path


def is_label(sym: ElfSymbol) -> bool:
    """A code symbol of size 0: a function or a bare label in code, not a mapping symbol."""
    return (
        sym.size == 0
        and sym.type in ("STT_FUNC", "STT_NOTYPE")
        and sym.code_section
        and not sym.name.startswith("$")
    )


def probes(symbols: list[ElfSymbol]) -> list[int]:
    """Every address from each label to the next symbol (any but section, file and mapping
    symbols, as eu-addr2line counts them) or to its section's end, and that end's own."""
    starts = sorted({s.value for s in symbols if s.type not in ("STT_SECTION", "STT_FILE")
                     and not s.name.startswith("$")})  # fmt: skip
    addresses: set[int] = set()
    for sym in filter(is_label, symbols):
        assert sym.section is not None
        section_start, section_end = sym.section
        if not section_start <= sym.value < section_end:
            continue
        following = [v for v in starts if v > sym.value]
        limit = min(following[0] if following else section_end, section_end)
        span = range(sym.value, limit + 1)
        addresses.update(span if len(span) <= DENSE else [*span[:32], *span[::61], *span[-32:]])
    return sorted(addresses)


def gdb_info_symbol(path: str, addresses: list[int]) -> list[tuple[str, int] | None]:
    """(symbol, offset) of each address from gdb's ``info symbol``, None for "No symbol"."""
    if not addresses:
        return []
    commands = [arg for a in addresses for arg in ("-ex", f"info symbol {a:#x}")]
    proc = run(["gdb-multiarch", "-batch", "-nx", *commands, path])
    lines = proc.stdout.splitlines()
    assert len(lines) == len(addresses), proc.stdout + proc.stderr
    found: list[tuple[str, int] | None] = []
    for line in lines:
        match = re.fullmatch(r"(.+?)(?: \+ (\d+))? in section \S+", line)
        assert match or line.startswith("No symbol matches"), line
        found.append((match.group(1), int(match.group(2) or 0)) if match else None)
    return found


def held(symbols: list[ElfSymbol], name: str, start: int, address: int) -> bool:
    """Whether a code symbol of that name starts at ``start`` in a section holding ``address``
    (readelf's section headers)."""
    return any(
        s.name == name and s.value == start and s.code_section
        and s.section is not None and s.section[0] <= address < s.section[1]
        for s in symbols
    )  # fmt: skip


@pytest.mark.parametrize(
    "name", ["crash_sizeless_start", "crash_deep", "ld.so", "libc", "a64-crash_deep-static"]
)
def test_zero_size_symbols_as_eu_addr2line(name: str, build: Builder) -> None:
    path = binary(name, build)
    file = Path(path).name
    symbols = elf_symbols(path)
    labels = [s.name for s in symbols if is_label(s)]
    assert labels, f"{path} has no symbol of size 0 in code"
    addresses = probes(symbols)
    table = SymbolTable(path)
    named = 0
    eu = eu_addr2line_symbols(path, addresses)
    mapping = [a for a, theirs in zip(addresses, eu, strict=True) if theirs and theirs[0][0] == "$"]
    by_gdb = dict(zip(mapping, gdb_info_symbol(path, mapping), strict=True))
    for address, theirs in zip(addresses, eu, strict=True):
        theirs = by_gdb.get(address, theirs)
        ours = table.lookup(address)
        where = f"{file} {address:#x}: ours {ours}, eu-addr2line {theirs}"
        if ours is not None:
            assert held(symbols, ours[0], address - ours[1], address), where
        if theirs is not None and not held(symbols, theirs[0], address - theirs[1], address):
            # eu-addr2line's section limit (see the docstring): ours names a symbol of the
            # address's own section, or none.
            continue
        if theirs is None or ours is None:
            assert ours == theirs, where
            continue
        assert ours[1] == theirs[1] and same_function(path, ours[0], theirs[0]), where
        named += theirs[0] in labels
    assert named > 0, f"no address named after a label of {path}: {labels}"


def test_a_perf_map_read_once_names_jit_code_as_its_path_does(tmp_path: Path) -> None:
    """A JIT's perf map read once (``PerfMap``) names code outside every module as the map
    read from its path does; given to a symbolizer and to an unwinder alike. A map that
    cannot be read is named in the error, whichever way it is given."""
    from types import SimpleNamespace

    from stackwalk._core import PerfMap, Symbolizer

    path = tmp_path / "perf-42.map"
    path.write_text("7f0000001000 40 JS:~first a.js:1:1\n7f0000002000 100 JS:*second a.js:9:3\n")
    shared = PerfMap(path)
    assert len(shared) == 2
    frames = [
        SimpleNamespace(pc=pc, sp=0x1000 + i, cfa=None, trust="context", lookup_pc=pc)
        for i, pc in enumerate((0x7F0000001010, 0x7F0000002080, 0x7F0000003000))
    ]
    by_path = Symbolizer([], perf_map=path).frame_dicts(frames)
    by_map = Symbolizer([], perf_map=shared).frame_dicts(frames)
    assert by_map == by_path
    assert [f["function"] for f in by_map] == ["JS:~first a.js:1:1", "JS:*second a.js:9:3", None]
    uw = stackwalk.Unwinder("x86_64")
    uw.set_perf_map(shared)
    uw.set_perf_map(path)
    missing = tmp_path / "perf-43.map"
    for make in (PerfMap, lambda p: Symbolizer([], perf_map=p), uw.set_perf_map):
        with pytest.raises(stackwalk.StackwalkError, match=re.escape(str(missing))):
            make(missing)


@pytest.mark.parametrize("name", ["ld.so", "libc"])
def test_a_symbol_table_kept_in_the_cache_names_as_the_file_does(name: str, build: Builder) -> None:
    """A large file's symbol table (a library's, a debug file's) is kept in stackwalk's cache by
    the file's build id and size (``sections/BUILDID/symbols4-symtab-SIZE``) as it is first
    made, and later tables are read from there: the one read back names every symbol's start,
    second byte, last byte and end as the one made from the file (and so as eu-addr2line and
    gdb, above), and the entry is used, not written again."""
    path = binary(name, build)
    cache = Path(os.environ["STACKWALK_CACHE_DIR"]) / "sections"
    entry = cache / build_id_of(path) / f"symbols4-symtab-{Path(path).stat().st_size}"
    entry.unlink(missing_ok=True)
    made = SymbolTable(path)
    assert entry.exists(), f"no cache entry {entry}"
    stored_at = entry.stat()
    read = SymbolTable(path)
    used = entry.stat()
    assert (used.st_ino, used.st_size) == (stored_at.st_ino, stored_at.st_size), "written again"
    assert used.st_mtime_ns > stored_at.st_mtime_ns, "the entry was not used"
    addresses = {
        a
        for s in elf_symbols(path)
        if s.code_section
        for a in (s.value, s.value + 1, s.value + max(s.size, 1) - 1, s.value + s.size)
    }
    named = 0
    for address in sorted(addresses):
        assert read.lookup(address) == made.lookup(address), hex(address)
        named += made.lookup(address) is not None
    assert named > 500, f"{named} of {len(addresses)} addresses named"


AARCH64_GCC = "aarch64-linux-gnu-gcc"
PLT_FILES: dict[str, Callable[[Builder], str | Path]] = {
    "libc": lambda build: LIBC,
    "python3": lambda build: os.path.realpath("/usr/bin/python3"),
    "qsort": lambda build: build("qsort.c", "-O2"),
    "qsort-ibt": lambda build: build("qsort.c", "-O2", "-fcf-protection=full", "-Wl,-z,ibtplt"),
    "qsort-now": lambda build: build("qsort.c", "-O2", "-Wl,-z,now"),
    "i386-libc": lambda build: f"{I386_SYSROOT}/lib/libc.so.6",
    "i386-qsort": lambda build: build("qsort.c", "-O2", compiler=I386_GCC),
    "i386-qsort-nopie": lambda build: build("qsort.c", "-O2", "-no-pie", compiler=I386_GCC),
    "i386-qsort-ibt": lambda build: build(
        "qsort.c", "-O2", "-fcf-protection=full", "-Wl,-z,ibtplt", compiler=I386_GCC
    ),
    "a64-libc": lambda build: f"{AARCH64_SYSROOT}/lib/libc.so.6",
    "arm-libc": lambda build: f"{ARM_SYSROOT}/lib/libc.so.6",
    "arm-libstdcxx": lambda build: os.path.realpath(f"{ARM_SYSROOT}/lib/libstdc++.so.6"),
    "arm-qsort": lambda build: build("qsort.c", "-O2", "-marm", compiler=ARM_GCC),
    "arm-thumb-qsort-now": lambda build: build(
        "qsort.c", "-O2", "-mthumb", "-Wl,-z,now", compiler=ARM_GCC
    ),
    "a64-qsort": lambda build: build("qsort.c", "-O2", compiler=AARCH64_GCC),
    "a64-qsort-pac": lambda build: build(
        "qsort.c",
        "-O2",
        "-no-pie",
        "-mbranch-protection=standard",
        "-Wl,-z,force-bti,-z,pac-plt",
        compiler=AARCH64_GCC,
    ),  # fmt: skip
}
# An entry's label, and each instruction's bytes after its address (x86: "ff a3 0c 00 00 00";
# aarch64: one word, "90000110").
PLT_LABEL = re.compile(r"^([0-9a-f]+) <(.+)>:$")
PLT_INSTRUCTION = re.compile(r"^\s+[0-9a-f]+:\t((?:[0-9a-f]{2,8} )+)")


def objdump_plt_entries(path: str) -> dict[int, tuple[str, int]]:
    """Each ``name@plt`` label objdump gives the PLT sections of ``path`` (its disassembler
    for the file's architecture): address -> (name, the bytes of its instructions)."""
    with open(path, "rb") as f:
        machine = ELFFile(f).header["e_machine"]
    objdump = {"EM_AARCH64": "aarch64-linux-gnu-objdump", "EM_ARM": "arm-linux-gnueabihf-objdump"}
    cmd = [objdump.get(machine, "objdump"), "-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got"]
    listing = subprocess.run([*cmd, path], capture_output=True, text=True, check=True).stdout
    entries: dict[int, tuple[str, int]] = {}
    label: tuple[int, str] | None = None
    for line in listing.splitlines():
        if match := PLT_LABEL.match(line):
            address, name = int(match[1], 16), match[2]
            label = (address, name) if name.endswith("@plt") else None
            if label:
                entries[address] = (name, 0)
        elif label and (match := PLT_INSTRUCTION.match(line)):
            name, size = entries[label[0]]
            entries[label[0]] = (name, size + sum(len(b) // 2 for b in match[1].split()))
        elif not line.strip():
            label = None
    return entries


@pytest.mark.parametrize("name", PLT_FILES)
def test_plt_entries_named_as_objdump_names_them(name: str, build: Builder) -> None:
    """Each PLT entry of an x86_64, i386 or aarch64 file is ``name@plt`` (an IFUNC's
    ``*ABS*+0xADDEND@plt``, i386's ``*ABS*@plt``: REL has no addend), as objdump, gdb and perf
    script name it, from its first byte to its last: matched to its relocation by the GOT slot
    it jumps through (objdump matches x86's so), so libc's, whose relocations are in another
    order than its entries, are named right too. The files: libc (IFUNC entries) and python3
    (hundreds); programs linked as by default (lazy binding, ``.plt.got`` for
    ``__cxa_finalize``), with ``-z now``, IBT's ``.plt.sec`` (x86), an i386 executable (``jmp
    *addr``) beside PIEs (``jmp *disp(%ebx)``), aarch64's BTI and PAC entries (24 bytes), and
    32-bit ARM's (ARM code, some behind a Thumb stub: armhf libc's and libstdc++'s)."""
    path = str(PLT_FILES[name](build))
    entries = objdump_plt_entries(path)
    assert entries, f"objdump shows no PLT entry in {path}"
    table = SymbolTable(path)
    for address, (plt, size) in entries.items():
        # C++ names demangled, as stackwalk names every symbol (its demangler is checked
        # against c++filt apart).
        plt = stackwalk._core.demangle(plt[: -len("@plt")]) + "@plt"
        assert size >= 8, (path, hex(address), size)
        for offset in (0, size // 2, size - 1):
            assert table.lookup(address + offset) == (plt, offset), (path, hex(address))
    names = [n for n, _ in entries.values()]
    if name == "libc":
        assert any(n.startswith("*ABS*+0x") for n in names)
    if name == "i386-libc":
        assert "*ABS*@plt" in names
    if name == "arm-libc":  # entries behind a Thumb stub: 16 bytes, not 12
        assert any(size == 16 for _, size in entries.values())
    if name in ("qsort", "i386-qsort"):
        assert "__cxa_finalize@plt" in names  # .plt.got's


def test_template_parameter_packs_demangled_as_cxxfilt_does(build: Builder) -> None:
    """Each function of a program of variadic templates (tests/programs/cxx_packs.cpp, -O0),
    looked up at its address, is named as c++filt demangles its symbol: empty packs among
    other template arguments and function parameters included (``first_then<int>(int)``,
    ``Outer<int>::inner<>()``), which cpp_demangle wrote as an empty argument."""
    exe = str(build("cxx_packs.cpp", "-O0", compiler="g++"))
    symbols = [line.split() for line in run(["nm", "--defined-only", exe]).stdout.splitlines()]
    functions = {int(address, 16): name for address, kind, name in symbols
                 if kind in "TW" and name.startswith("_Z")}  # fmt: skip
    readable = dict(zip(functions, demangle(functions.values()), strict=True))
    assert "int first_then<int>(int)" in readable.values(), readable
    table = SymbolTable(exe)
    for address, name in readable.items():
        assert table.lookup(address) == (name, 0), (functions[address], name)
