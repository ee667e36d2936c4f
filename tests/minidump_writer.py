"""The pieces of a minidump writer the test helpers share (``minidump_from_core.py`` for 32-bit
ARM Linux cores, ``apple.py`` for emulated macOS crashes): the header, the stream directory, the
stream types, and a blob that lays the file out (each piece appended at 4-byte alignment, where
its RVA is its offset)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

HEADER = struct.Struct("<IIIIIIQ")
DIRECTORY = struct.Struct("<III")
THREAD_LIST, MODULE_LIST, MEMORY_LIST, EXCEPTION, SYSTEM_INFO = 3, 4, 5, 6, 7
MISC_INFO = 15
SIGNATURE, VERSION = 0x504D444D, 0xA793
# A location in the file (MINIDUMP_LOCATION_DESCRIPTOR): (size, rva).
Location = tuple[int, int]


class Blob:
    """The file being laid out: data appended at 4-byte alignment, each at its RVA."""

    def __init__(self) -> None:
        self.data = bytearray(HEADER.size)

    def add(self, data: bytes) -> Location:
        self.data += b"\0" * (-len(self.data) % 4)
        rva = len(self.data)
        self.data += data
        return len(data), rva

    def string(self, text: str) -> int:
        """A MINIDUMP_STRING (length in bytes, UTF-16 text, a NUL): its RVA."""
        encoded = text.encode("utf-16-le")
        return self.add(struct.pack("<I", len(encoded)) + encoded + b"\0\0")[1]

    def write(self, streams: Sequence[tuple[int, Location]], out: Path) -> Path:
        """The stream directory and the header, then the file at ``out``."""
        directory = b"".join(DIRECTORY.pack(kind, *where) for kind, where in streams)
        _, directory_rva = self.add(directory)
        self.data[: HEADER.size] = HEADER.pack(
            SIGNATURE, VERSION, len(streams), directory_rva, 0, 0, 0
        )
        out.write_bytes(bytes(self.data))
        return out


def module_entry(base: int, size: int, name_rva: int, codeview: Location) -> bytes:
    """A MINIDUMP_MODULE (108 bytes): no checksum, time stamp or version information."""
    head = struct.pack("<QIIII", base, size, 0, 0, name_rva)
    return head + b"\0" * 52 + struct.pack("<II", *codeview) + b"\0" * 8 + b"\0" * 16
