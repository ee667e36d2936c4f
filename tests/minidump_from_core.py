"""A minidump written from a core file, in the layout Breakpad's and Crashpad's Linux writers
use, for the architectures no minidump writer runs on here: 32-bit ARM, whose programs run
under qemu-arm (minidump-writer, which tests/dumper builds, needs a Rust target this machine
lacks). The streams: system info (ARM, Linux), the thread list (each thread's ``CONTEXT_ARM``
and the stack from its sp up), the memory list, the module list (each module's range, path
and ELF build id as a ``BpEL`` CodeView record, read from the file the core's module was found
at) and the exception (the crashing thread, its signal).

Only what the core says goes in: the registers of its NT_PRSTATUS notes, the memory it holds.
"""

from __future__ import annotations

import struct
from pathlib import Path

from minidump_writer import (
    EXCEPTION,
    MEMORY_LIST,
    MODULE_LIST,
    SYSTEM_INFO,
    THREAD_LIST,
    Blob,
    module_entry,
)
from stackwalk.core import Core

PROCESSOR_ARCHITECTURE_ARM = 5
PLATFORM_LINUX = 0x8201
CONTEXT_ARM_FULL = 0x4000_0006  # CONTEXT_ARM | INTEGER | FLOATING_POINT
CONTEXT_ARM_SIZE = 4 + 16 * 4 + 4 + 8 + 32 * 8 + 8 * 4
CV_ELF = 0x4270454C  # "BpEL"
ARM_REGISTERS = [f"r{i}" for i in range(13)] + ["sp", "lr", "pc"]


def stack_above(core: Core, sp: int, most: int) -> bytes:
    """The captured memory from sp up, page by page, at most ``most`` bytes."""
    data = b""
    while len(data) < most:
        chunk = core.memory.read(sp + len(data), 4096 - (sp + len(data)) % 4096)
        if not chunk:
            break
        data += chunk
    return data[:most]


def write_arm_minidump(core: Core, out: Path, stack_bytes: int = 64 * 1024) -> Path:
    """Write ``core`` (a 32-bit ARM one) as a minidump at ``out``."""
    blob = Blob()
    streams: list[tuple[int, tuple[int, int]]] = []
    csd = blob.string("")
    system = struct.pack("<HHHBBIIIIIHH", PROCESSOR_ARCHITECTURE_ARM, 7, 0, 1, 1, 0, 0, 0,
                         PLATFORM_LINUX, csd, 0, 0) + b"\0" * 24  # fmt: skip
    streams.append((SYSTEM_INFO, blob.add(system)))
    threads, memory, contexts = [], [], {}
    for thread in core.threads:
        regs = thread.regs
        iregs = [regs[name] & 0xFFFF_FFFF for name in ARM_REGISTERS]
        context = struct.pack("<I16II", CONTEXT_ARM_FULL, *iregs, regs.get("cpsr", 0x10))
        context += b"\0" * (CONTEXT_ARM_SIZE - len(context))
        contexts[thread.tid] = blob.add(context)
        stack = stack_above(core, regs["sp"], stack_bytes)
        where = blob.add(stack)
        memory.append(struct.pack("<QII", regs["sp"], *where))
        threads.append(struct.pack("<IIIIQQII", thread.tid, 0, 0, 0, 0, regs["sp"], *where)
                       + struct.pack("<II", *contexts[thread.tid]))  # fmt: skip
    streams.append((THREAD_LIST, blob.add(struct.pack("<I", len(threads)) + b"".join(threads))))
    streams.append((MEMORY_LIST, blob.add(struct.pack("<I", len(memory)) + b"".join(memory))))
    modules = []
    for module in core.modules:
        name = blob.string(module.path)
        build_id = module.build_id or module.file_build_id
        cv = blob.add(struct.pack("<I", CV_ELF) + bytes.fromhex(build_id)) if build_id else (0, 0)
        modules.append(module_entry(module.start, module.end - module.start, name, cv))
    streams.append((MODULE_LIST, blob.add(struct.pack("<I", len(modules)) + b"".join(modules))))
    crashed = core.crashing_tid
    signal = next(t.signal for t in core.threads if t.tid == crashed)
    pc = next(t.regs["pc"] for t in core.threads if t.tid == crashed)
    exception = struct.pack("<IIIIQQII", crashed, 0, signal, 0, 0, pc, 0, 0) + b"\0" * 120
    streams.append((EXCEPTION, blob.add(exception + struct.pack("<II", *contexts[crashed]))))
    return blob.write(streams, out)
