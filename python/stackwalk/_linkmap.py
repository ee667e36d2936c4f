"""Reading a crashed process's memory as a core file captured it: words, C strings, whole
regions, and the dynamic linker's link map (``DT_DEBUG`` -> ``r_debug`` -> ``link_map``), which is
how the libraries of a core without ``NT_FILE`` (qemu-user writes those) are found, as libdwfl and
gdb find them."""

from __future__ import annotations

import bisect
import struct
from typing import NamedTuple

from stackwalk.unwinder import MappedMemory

MAX_ENTRIES = 4096  # bound on every walk through pointers found in the core
_DT_NULL, _DT_DEBUG = 0, 21
_STRING_CHUNK = 256
_ADDRESS_LIMIT = 1 << 64


class _Structs(NamedTuple):
    """The dynamic linker's structures in a process of one word size."""

    word: struct.Struct
    dyn: struct.Struct  # Elf{64,32}_Dyn: d_tag, d_val
    link_map: struct.Struct  # l_addr, l_name, l_ld, l_next, l_prev
    r_map: int  # offset of r_debug.r_map (after the int r_version, padded to a word)
    r_next: int  # offset of r_debug_extended.r_next


_STRUCTS = {
    8: _Structs(struct.Struct("<Q"), struct.Struct("<qQ"), struct.Struct("<5Q"), 8, 40),
    4: _Structs(struct.Struct("<I"), struct.Struct("<iI"), struct.Struct("<5I"), 4, 20),
}


class MemoryReader:
    """Typed reads of a ``MappedMemory``; every read answers None where the core has no bytes.
    ``word_size`` is the process's: 8, or 4 for a 32-bit process."""

    def __init__(self, memory: MappedMemory, word_size: int = 8) -> None:
        self.memory = memory
        self.structs = _STRUCTS[word_size]
        ranges = sorted(memory.ranges)
        self._starts = [start for start, _ in ranges]
        self._ends = [start + size for start, size in ranges]

    def available(self, address: int) -> int:
        """How many bytes the core holds contiguously from ``address`` on (0: none)."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0 or address >= self._ends[i]:
            return 0
        return self._ends[i] - address

    def read(self, address: int, size: int) -> bytes | None:
        if size <= 0 or not 0 <= address <= _ADDRESS_LIMIT - size:
            return None
        return self.memory.read(address, size)

    def word(self, address: int) -> int | None:
        word = self.structs.word
        data = self.read(address, word.size)
        return None if data is None else int(word.unpack(data)[0])

    def string(self, address: int, limit: int = 4096) -> str | None:
        """The NUL-terminated string at ``address`` (None if unreadable or unterminated)."""
        parts: list[bytes] = []
        taken = 0
        while taken < limit:
            n = min(_STRING_CHUNK, limit - taken, self.available(address + taken))
            chunk = self.read(address + taken, n) if n else None
            if chunk is None:
                return None
            end = chunk.find(b"\0")
            if end >= 0:
                parts.append(chunk[:end])
                return b"".join(parts).decode("utf-8", "surrogateescape")
            parts.append(chunk)
            taken += n
        return None


class LinkMapEntry(NamedTuple):
    name: str | None  # l_name: the path the dynamic linker opened (None: not in the core)
    bias: int  # l_addr
    dynamic: int  # l_ld: runtime address of the module's PT_DYNAMIC


def read_link_map(reader: MemoryReader, dynamic: int) -> tuple[list[LinkMapEntry], list[str]]:
    """The link map of a process whose executable has its PT_DYNAMIC at runtime address
    ``dynamic``: (entries in load order, warnings). The executable's own entry is left out; a
    name the core does not hold is None (the dynamic linker's own name points into the
    executable's ``.interp``, a page cores often leave out). No ``DT_DEBUG`` value (a static
    program, or a core written before the dynamic linker ran) gives no entries, no warning."""
    r_debug = _dt_debug(reader, dynamic)
    if r_debug is None:
        return [], [f"link map: cannot read the executable's dynamic section at {dynamic:#x}"]
    if r_debug == 0:
        return [], []
    entries: list[LinkMapEntry] = []
    warnings: list[str] = []
    seen_namespaces: set[int] = set()
    seen_maps: set[int] = set()
    structs = reader.structs
    # glibc >= 2.35 chains one r_debug per link-map namespace (r_version >= 2: r_next).
    while r_debug and r_debug not in seen_namespaces and len(seen_namespaces) < MAX_ENTRIES:
        seen_namespaces.add(r_debug)
        header = reader.read(r_debug, structs.r_map + structs.word.size)  # r_version, r_map
        if header is None:
            warnings.append(f"link map: cannot read r_debug at {r_debug:#x}")
            break
        version = struct.unpack_from("<i", header)[0]
        link = structs.word.unpack_from(header, structs.r_map)[0]
        while link and len(seen_maps) < MAX_ENTRIES:
            if link in seen_maps:
                warnings.append(f"link map: cycle at {link:#x}")
                break
            seen_maps.add(link)
            raw = reader.read(link, structs.link_map.size)
            if raw is None:
                warnings.append(f"link map: cannot read entry at {link:#x}")
                break
            l_addr, l_name, l_ld, l_next, _ = structs.link_map.unpack(raw)
            if l_ld != dynamic:  # not the executable's own entry
                entries.append(LinkMapEntry(reader.string(l_name), l_addr, l_ld))
            link = l_next
        r_debug = (reader.word(r_debug + structs.r_next) or 0) if version >= 2 else 0
    return entries, warnings


def _dt_debug(reader: MemoryReader, dynamic: int) -> int | None:
    """DT_DEBUG's value in the dynamic section at ``dynamic``: 0 if absent, None if unreadable."""
    dyn = reader.structs.dyn
    for i in range(MAX_ENTRIES):
        raw = reader.read(dynamic + i * dyn.size, dyn.size)
        if raw is None:
            return None
        tag, value = dyn.unpack(raw)
        if tag == _DT_DEBUG:
            return int(value)
        if tag == _DT_NULL:
            return 0
    return 0
