"""A ``perf record --call-graph dwarf`` recording written from a core file, for the architectures
whose kernel's perf this machine cannot run: 32-bit ARM (qemu-user has no perf events). Each
thread of the core is one sample, as perf writes one on an ARM machine: its user registers
(``sample_regs_user`` 0xffff: r0-r15, perf's ARM order, PERF_SAMPLE_REGS_ABI_32) and a copy of
its stack from sp up (PERF_SAMPLE_STACK_USER), after an MMAP2 record of each module (with its
ELF build id, as perf 6's MMAP2 carries it) and a COMM; the header's features name the
architecture (``HEADER_ARCH``: ``armv7l``, ``uname -m`` of an ARM machine).

The layout is perf's (tools/perf/util/header.c; linux/perf_event.h), as
rust/source/perf/tests builds its synthetic files.
"""

from __future__ import annotations

import struct
from pathlib import Path

from minidump_from_core import ARM_REGISTERS, stack_above
from stackwalk._core import ElfFile
from stackwalk.core import Core

MAGIC = b"PERFILE2"
HEADER_SIZE = 104
ATTR_SIZE = 128
SAMPLE_TYPE = 0x1 | 0x2 | 0x4 | 0x80 | 0x100 | 0x1000 | 0x2000  # IP TID TIME CPU PERIOD REGS STACK
SAMPLE_ID_ALL = 1 << 18
ARM_REGS_MASK = 0xFFFF
REGS_ABI_32 = 1
PERF_RECORD_COMM, PERF_RECORD_SAMPLE, PERF_RECORD_MMAP2 = 3, 9, 10
MISC_USER, MISC_MMAP_BUILD_ID = 2, 1 << 14
HEADER_ARCH = 6
STACK_BYTES = 32 * 1024


def _cstr(text: str) -> bytes:
    data = text.encode() + b"\0"
    return data + b"\0" * (-len(data) % 8)


def _record(kind: int, misc: int, body: bytes) -> bytes:
    return struct.pack("<IHH", kind, misc, 8 + len(body)) + body


def _trailer(pid: int, tid: int, time: int) -> bytes:
    return struct.pack("<IIQII", pid, tid, time, 0, 0)


def _attr() -> bytes:
    attr = struct.pack("<IIQQQQQ", 1, ATTR_SIZE, 0, 4000, SAMPLE_TYPE, 0, (1 << 10) | SAMPLE_ID_ALL)
    attr += b"\0" * (72 - len(attr))
    attr += struct.pack("<QQI", 0, ARM_REGS_MASK, STACK_BYTES)
    return attr + b"\0" * (ATTR_SIZE - len(attr))


def write_arm_perf_data(core: Core, out: Path) -> Path:
    """Write one sample per thread of ``core`` (a 32-bit ARM one) as a perf.data at ``out``."""
    pid = core.pid
    comm = struct.pack("<II", pid, pid) + _cstr("crash") + _trailer(pid, pid, 1)
    data = _record(PERF_RECORD_COMM, MISC_USER, comm)
    for module in core.modules:
        if module.file is None:
            continue
        build_id = bytes.fromhex(ElfFile(module.file).build_id or "")
        body = struct.pack("<IIQQQ", pid, pid, module.start, module.end - module.start, 0)
        body += struct.pack("<B3x", len(build_id)) + build_id + b"\0" * (20 - len(build_id))
        body += struct.pack("<II", 5, 2) + _cstr(module.file) + _trailer(pid, pid, 2)
        data += _record(PERF_RECORD_MMAP2, MISC_USER | MISC_MMAP_BUILD_ID, body)
    for time, thread in enumerate(core.threads, 10):
        regs = thread.regs
        values = [regs[name] & 0xFFFF_FFFF for name in ARM_REGISTERS]
        stack = stack_above(core, regs["sp"], STACK_BYTES)
        stack = stack[: len(stack) // 8 * 8]  # records are 8-byte aligned
        body = struct.pack("<QIIQIIQ", regs["pc"], pid, thread.tid, time, 0, 0, 1)
        body += struct.pack(f"<Q{len(values)}Q", REGS_ABI_32, *values)
        body += struct.pack("<Q", len(stack)) + stack + struct.pack("<Q", len(stack))
        data += _record(PERF_RECORD_SAMPLE, MISC_USER, body)
    arch = _cstr("armv7l")
    feature = struct.pack("<I", len(arch)) + arch
    attrs_offset = HEADER_SIZE
    ids_offset = attrs_offset + ATTR_SIZE + 16
    data_offset = ids_offset + 8
    feature_table = data_offset + len(data)
    header = MAGIC + struct.pack("<QQQQQQQQ", HEADER_SIZE, ATTR_SIZE + 16, attrs_offset,
                                 ATTR_SIZE + 16, data_offset, len(data), 0, 0)  # fmt: skip
    header += struct.pack("<QQQQ", 1 << HEADER_ARCH, 0, 0, 0)
    body = _attr() + struct.pack("<QQ", ids_offset, 8) + struct.pack("<Q", 1) + data
    table = struct.pack("<QQ", feature_table + 16, len(feature))
    out.write_bytes(header + body + table + feature)
    return out
