"""Real macOS crash data made on Linux, with the truth known: a test harness for the Mach-O
unwinders (compact unwind ``__unwind_info``, ``__eh_frame``, dSYMs).

There is no Mac here, so the pieces of a macOS crash are made one by one:

* the program: freestanding C (``tests/programs/apple_crash.c`` and ``apple_frameless.c``; no
  libSystem, so nothing calls a library) built for ``x86_64-apple-macos11`` or
  ``arm64-apple-macos11`` by clang, linked by ld64.lld into a position-independent Mach-O
  executable, and its dSYM made by dsymutil. The linker must be lld 15 or later: lld 14 copies
  ``__eh_frame`` without applying its relocations (its FDEs name wrong pc ranges) and gives every
  DWARF-mode function an FDE offset of 0 (Debian's ``lld-19`` package is used);
* the crash: the program's own machine code runs in the unicorn CPU emulator (``emulate``), its
  segments mapped at a slide as dyld would, a stack of its own, until a load from an unmapped
  address (or a call through a NULL pointer) faults. The registers at the fault and the stack
  are what a crash reporter would capture;
* the truth: a shadow call stack kept by the emulator (a hook on every instruction of
  ``__text``): each function entry records the return address and the CFA (x86_64: ``[rsp]``
  and ``rsp + 8``; arm64: ``x30`` and ``sp``) and the caller's callee-saved registers, and a
  return (the pc back at the return address with the stack pointer at the CFA) drops it. The
  entries live at the fault, innermost first, are the frames an unwinder must find;
* the minidump: ``write_mac_minidump`` writes the streams Crashpad's macOS client writes (system
  info, the thread and its context, the memory, the modules with their ``LC_UUID`` as a CodeView
  ``RSDS`` record, the Mach exception ``EXC_BAD_ACCESS / KERN_INVALID_ADDRESS``);
* symbols: ``symbols_dir`` runs Mozilla's dump_syms into a Breakpad symbol store.

The outermost frame is a stand-in for the system library a thread starts in (``Outermost``):
libdyld's ``start`` for the main thread (macOS 11), libsystem_pthread's ``thread_start`` for
others. The harness calls the entry function with the frame pointer 0 and the return address
inside the stand-in's range, as dyld and the kernel leave them, so the entry's own frame record
holds a saved frame pointer of 0: the stack ends at the stand-in's frame, with nothing past it.
The stand-in's memory is not mapped (no code runs there; the program crashes first).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import struct
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corefiles import cargo_tool
from minidump_writer import (
    EXCEPTION,
    MEMORY_LIST,
    MISC_INFO,
    MODULE_LIST,
    SYSTEM_INFO,
    THREAD_LIST,
    Blob,
    Location,
    module_entry,
)
from unicorn import (
    UC_ARCH_ARM64,
    UC_ARCH_X86,
    UC_HOOK_CODE,
    UC_HOOK_MEM_FETCH_UNMAPPED,
    UC_HOOK_MEM_READ_UNMAPPED,
    UC_HOOK_MEM_WRITE_UNMAPPED,
    UC_MEM_FETCH_UNMAPPED,
    UC_MEM_READ_UNMAPPED,
    UC_MEM_WRITE_UNMAPPED,
    UC_MODE_64,
    UC_MODE_ARM,
    UC_PROT_EXEC,
    UC_PROT_READ,
    UC_PROT_WRITE,
    Uc,
    UcError,
    arm64_const,
    x86_const,
)

PROGRAMS = Path(__file__).resolve().parent / "programs"
SOURCES = (PROGRAMS / "apple_crash.c", PROGRAMS / "apple_frameless.c")
ARCHES = ("x86_64", "arm64")
DUMP_SYMS = cargo_tool("dump_syms")
MINIDUMP_STACKWALK = cargo_tool("minidump-stackwalk")
CFLAGS = ("-O2", "-g", "-fno-stack-protector", "-fno-builtin")
MACOS = "11.0"

# The values of `mode` in tests/programs/apple_crash.h: which function faults.
MODES = {
    "leaf": 0,  # crash_leaf
    "small": 1,  # frameless_small
    "big": 2,  # frameless_big
    "dwarf": 3,  # dwarf_function
    "frame": 4,  # frame_saver
    "null_call": 5,  # frameless_small calls NULL: the pc is 0
    "leaf_stack": 6,  # leaf_with_stack
}

# The executable's load address is its link address (0x100000000) plus this slide.
DEFAULT_SLIDE = 0x4A00000
PAGE = 0x1000  # unicorn maps 4 KiB pages (arm64 segments are 16 KiB-aligned)
# The stack: its lowest address and size; the entry is called near its top.
STACKS = {"x86_64": 0x7FF7B0000000, "arm64": 0x16F000000}
STACK_SIZE = 512 * 1024
RED_ZONE = 128
THREAD_ID = 0x2F1C3
PROCESS_ID = 4242
MAX_INSTRUCTIONS = 1_000_000

# Mach-O
MH_MAGIC_64 = 0xFEEDFACF
LC_SEGMENT_64, LC_SYMTAB, LC_UUID = 0x19, 0x2, 0x1B
N_STAB, N_TYPE, N_SECT = 0xE0, 0x0E, 0x0E

# Minidump values of Crashpad's macOS writer.
PLATFORM_MAC_OS_X, PLATFORM_IOS = 0x8101, 0x8102
PROCESSOR_ARCHITECTURE = {"x86_64": 9, "arm64": 12}  # AMD64; ARM64 (Crashpad's, not 0x8003)
CONTEXT_FLAGS = {"x86_64": 0x0010_000F, "arm64": 0x0040_0007}  # CONTROL|INTEGER|...|FP
OS_VERSION = (11, 6, 7, "20G630")
EXC_BAD_ACCESS, KERN_INVALID_ADDRESS = 1, 1
CV_PDB70 = b"RSDS"

# The registers a crash report holds, in the names stackwalk and rust-minidump use.
REGISTERS = {
    "x86_64": "rax rbx rcx rdx rsi rdi rbp rsp r8 r9 r10 r11 r12 r13 r14 r15 rip eflags".split(),
    "arm64": [f"x{i}" for i in range(29)] + ["fp", "lr", "sp", "pc", "cpsr"],
}
# The registers a callee keeps for its caller (frame pointer included).
CALLEE_SAVED = {
    "x86_64": ("rbx", "rbp", "r12", "r13", "r14", "r15"),
    "arm64": tuple(f"x{i}" for i in range(19, 29)) + ("fp",) + tuple(f"d{i}" for i in range(8, 16)),
}


def _uc_register(arch: str, name: str) -> int:
    if arch == "x86_64":
        return int(getattr(x86_const, f"UC_X86_REG_{name.upper()}"))
    alias = {"fp": "X29", "lr": "X30", "cpsr": "NZCV"}.get(name, name.upper())
    return int(getattr(arm64_const, f"UC_ARM64_REG_{alias}"))


def run_tool(argv: Sequence[str | Path]) -> str:
    """Run a tool; its standard output (its failure raises, with its standard error)."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return proc.stdout


@functools.lru_cache(maxsize=1)
def linker() -> str:
    """ld64.lld of lld 15 or later (``ld64.lld-N`` on PATH, the newest; else ``ld64.lld`` if it
    is new enough). lld 14 writes a wrong ``__eh_frame`` (see the module's docstring)."""
    for version in range(30, 14, -1):
        found = shutil.which(f"ld64.lld-{version}")
        if found:
            return found
    plain = shutil.which("ld64.lld")
    if plain:
        banner = subprocess.run([plain, "--version"], capture_output=True, text=True).stdout
        match = re.search(r"LLD (\d+)", banner)
        if match and int(match.group(1)) >= 15:
            return plain
    raise RuntimeError("no ld64.lld of lld 15 or later: install Debian's lld-19 package")


@dataclass(frozen=True)
class Segment:
    """An LC_SEGMENT_64 of the executable, at its link address."""

    name: str
    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int
    initprot: int


@dataclass(frozen=True)
class Program:
    """A built Mach-O executable, its dSYM, and what its load commands and symbol table say.
    Addresses are link addresses (the image's ``__TEXT`` at 0x100000000): add a load address
    minus ``text_address`` to place them."""

    arch: str
    executable: Path
    dsym: Path
    uuid: bytes
    segments: tuple[Segment, ...]
    sections: Mapping[str, tuple[int, int]]  # "__TEXT,__text" -> (address, size)
    symbols: Mapping[str, int]  # Mach-O names ("_main") -> address

    @property
    def name(self) -> str:
        return self.executable.name

    @property
    def dwarf_file(self) -> Path:
        """The dSYM's DWARF file (dump_syms reads that, not the bundle)."""
        return self.dsym / "Contents" / "Resources" / "DWARF" / self.name

    @property
    def debug_id(self) -> str:
        """The Breakpad debug id of a Mach-O file: its UUID in hex, then an age of 0."""
        return self.uuid.hex().upper() + "0"

    @property
    def text_address(self) -> int:
        return next(s.vmaddr for s in self.segments if s.name == "__TEXT")

    @property
    def image_size(self) -> int:
        """From ``__TEXT`` to the end of the last segment (``__LINKEDIT``)."""
        mapped = [s for s in self.segments if s.name != "__PAGEZERO"]
        return max(s.vmaddr + s.vmsize for s in mapped) - self.text_address

    @functools.cached_property
    def functions(self) -> list[tuple[int, int, str]]:
        """The functions of ``__text``: (start, end, Mach-O name), in address order, each
        ending where the next starts (or at the section's end)."""
        start, size = self.sections["__TEXT,__text"]
        starts = sorted((a, n) for n, a in self.symbols.items() if start <= a < start + size)
        ends = [a for a, _ in starts[1:]] + [start + size]
        return [(a, end, n) for (a, n), end in zip(starts, ends, strict=True)]

    def function_at(self, address: int) -> str | None:
        """The Mach-O name of the function holding the link address, if any."""
        for start, end, name in self.functions:
            if start <= address < end:
                return name
        return None


def _cstring(data: bytes) -> str:
    return data.split(b"\0", 1)[0].decode()


def read_macho(path: Path) -> tuple[bytes, tuple[Segment, ...], dict[str, Any], dict[str, int]]:
    """A thin 64-bit Mach-O file's UUID, segments, sections and symbols (the nlist table's
    defined section symbols, stabs left out), read with struct."""
    data = path.read_bytes()
    magic, _, _, _, ncmds, _, _, _ = struct.unpack_from("<IiiIIIII", data)
    if magic != MH_MAGIC_64:
        raise ValueError(f"{path}: not a thin 64-bit Mach-O file")
    uuid, segments, sections, section_names = b"", [], {}, []
    symtab = (0, 0, 0, 0)
    at = 32
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, at)
        if cmd == LC_SEGMENT_64:
            name, vmaddr, vmsize, fileoff, filesize, _, initprot, nsects, _ = struct.unpack_from(
                "<16sQQQQiiII", data, at + 8
            )
            segments.append(Segment(_cstring(name), vmaddr, vmsize, fileoff, filesize, initprot))
            for i in range(nsects):
                sect, seg, addr, sect_size = struct.unpack_from("<16s16sQQ", data, at + 72 + 80 * i)
                key = f"{_cstring(seg)},{_cstring(sect)}"
                sections[key] = (addr, sect_size)
                section_names.append(key)
        elif cmd == LC_UUID:
            uuid = data[at + 8 : at + 24]
        elif cmd == LC_SYMTAB:
            symtab = struct.unpack_from("<IIII", data, at + 8)
        at += size
    symoff, nsyms, stroff, _ = symtab
    symbols = {}
    for i in range(nsyms):
        strx, n_type, n_sect, _, value = struct.unpack_from("<IBBHQ", data, symoff + 16 * i)
        if n_type & N_STAB or n_type & N_TYPE != N_SECT or not n_sect:
            continue
        name = data[stroff + strx : data.index(b"\0", stroff + strx)].decode()
        symbols[name] = value
    return uuid, tuple(segments), sections, symbols


def _source_flags(source: Path) -> list[str]:
    """The flags a source asks for on a ``// cflags: ...`` line of its own."""
    flags = []
    for line in source.read_text().splitlines():
        if line.startswith("// cflags:"):
            flags += line.split(":", 1)[1].split()
    return flags


def build(
    sources: Path | Sequence[Path] = SOURCES,
    arch: str = "x86_64",
    out_dir: Path = Path("."),
    extra_flags: Sequence[str] = (),
    name: str = "apple_crash",
) -> Program:
    """Compile each source for ``ARCH-apple-macos11`` (with its own ``// cflags:`` line and
    ``extra_flags``), link a freestanding executable ``out_dir/name`` (no library: an undefined
    symbol fails the link) and make its dSYM with dsymutil."""
    if arch not in ARCHES:
        raise ValueError(f"arch: one of {ARCHES}")
    sources = [sources] if isinstance(sources, Path) else list(sources)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = f"--target={arch}-apple-macos{MACOS}"
    objects = []
    for source in sources:
        obj = out_dir / f"{name}-{source.stem}.o"
        flags = [*CFLAGS, *_source_flags(source), *extra_flags]
        run_tool(["clang", target, *flags, f"-I{source.parent}", "-c", source, "-o", obj])
        objects.append(obj)
    executable = out_dir / name
    platform = f"-Wl,-platform_version,macos,{MACOS},{MACOS}"
    run_tool(["clang", target, f"--ld-path={linker()}", "-nostdlib", platform, "-o", executable,
          *objects])  # fmt: skip
    dsym = out_dir / f"{name}.dSYM"
    run_tool(["dsymutil", executable, "-o", dsym])
    uuid, segments, sections, symbols = read_macho(executable)
    return Program(arch, executable, dsym, uuid, segments, sections, symbols)


@dataclass(frozen=True)
class Outermost:
    """The stand-in of the system library frame a macOS thread starts in: a module (path, made-up
    UUID, load range) and the function the entry returns to, ``symbol`` at ``symbol_offset`` in
    the module, the return address ``return_offset`` bytes into it (where the real one's call
    returns: libdyld's ``start + 1`` on x86_64)."""

    path: str
    uuid: bytes
    base: int
    size: int
    symbol: str
    symbol_offset: int
    return_offset: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def return_address(self) -> int:
        return self.base + self.symbol_offset + self.return_offset

    @property
    def debug_id(self) -> str:
        return self.uuid.hex().upper() + "0"


_LIBDYLD, _PTHREAD = "/usr/lib/system/libdyld.dylib", "/usr/lib/system/libsystem_pthread.dylib"
_LIBDYLD_UUID = bytes.fromhex("5FE7F6A5B8B5399C99B4E3C9E7B1D4D2")
_PTHREAD_UUID = bytes.fromhex("2CB3D0A94B1E3D1FA6C27E5F6C0B9E41")
# The main thread's outermost frame: libdyld's start (macOS 11), per architecture.
LIBDYLD = {
    "x86_64": Outermost(_LIBDYLD, _LIBDYLD_UUID, 0x7FFF2035A000, 0x4000, "start", 0x1F3C, 1),
    "arm64": Outermost(_LIBDYLD, _LIBDYLD_UUID, 0x1A0E9C000, 0x4000, "start", 0x1F24, 4),
}
# Other threads' outermost frame: libsystem_pthread's thread_start.
PTHREAD = {
    "x86_64": Outermost(
        _PTHREAD, _PTHREAD_UUID, 0x7FFF20327000, 0x9000, "thread_start", 0x1B7B, 15
    ),
    "arm64": Outermost(_PTHREAD, _PTHREAD_UUID, 0x1A0CDC000, 0x9000, "thread_start", 0x1B80, 8),
}


@dataclass(frozen=True)
class ShadowEntry:
    """A call the emulator saw and that had not returned at the fault: the callee (its Mach-O
    name, its entry's address as loaded), the return address, the CFA (the stack pointer before
    the call), and the callee-saved registers at entry, which are the caller's."""

    function: str | None
    entry: int
    return_address: int
    cfa: int
    caller_registers: Mapping[str, int]


@dataclass(frozen=True)
class Frame:
    """A frame of the truth, innermost first. ``pc`` is the faulting pc (frame 0) or a return
    address; ``sp`` the stack pointer in the frame (frame 0: at the fault; a caller: the callee's
    CFA); ``registers`` what is known in it (frame 0: every register; a caller: pc, sp and the
    callee-saved registers its callee saw at entry); ``symbol`` the Mach-O name (or the
    stand-in's function, without ``_``; None for a pc in no function)."""

    pc: int
    sp: int
    module: str | None
    symbol: str | None
    registers: Mapping[str, int]

    @property
    def function(self) -> str | None:
        """The C name, as symbol files write it (``_main`` -> ``main``)."""
        if self.symbol and self.symbol.startswith("_"):
            return self.symbol[1:]
        return self.symbol


@dataclass
class Emulation:
    """A crash of a program in the emulator: the registers at the fault, the faulting access,
    the memory a crash reporter would capture, and the shadow stack's frames."""

    program: Program
    mode: int
    entry: str
    load_address: int
    outermost: Outermost
    registers: dict[str, int]
    fault_address: int
    fault_access: str  # "read", "write" or "fetch"
    stack: tuple[int, bytes]  # (address, bytes): from sp - 128 to the stack's top
    code: tuple[int, bytes] | None  # 256 bytes around the pc, when it is mapped
    shadow: list[ShadowEntry] = field(default_factory=list)  # innermost first
    float_registers: list[int] = field(default_factory=list)  # xmm0-15 / q0-31

    @property
    def arch(self) -> str:
        return self.program.arch

    @property
    def pc(self) -> int:
        return self.registers["rip" if self.arch == "x86_64" else "pc"]

    @property
    def sp(self) -> int:
        return self.registers["rsp" if self.arch == "x86_64" else "sp"]

    @property
    def slide(self) -> int:
        return self.load_address - self.program.text_address

    @property
    def module_path(self) -> str:
        """The executable's path on the emulated Mac."""
        return f"/Users/ci/crash/{self.program.name}"

    def symbol_at(self, address: int) -> tuple[str | None, str | None]:
        """(module path, symbol) of a loaded address."""
        if self.load_address <= address < self.load_address + self.program.image_size:
            return self.module_path, self.program.function_at(address - self.slide)
        outer = self.outermost
        if outer.base <= address < outer.base + outer.size:
            at_symbol = address - outer.base >= outer.symbol_offset
            return outer.path, outer.symbol if at_symbol else None
        return None, None

    @property
    def frames(self) -> list[Frame]:
        """The truth: the faulting pc, then each live call's return address."""
        pc_key, sp_key = ("rip", "rsp") if self.arch == "x86_64" else ("pc", "sp")
        frames = [Frame(self.pc, self.sp, *self.symbol_at(self.pc), dict(self.registers))]
        for entry in self.shadow:
            registers = {**entry.caller_registers, pc_key: entry.return_address, sp_key: entry.cfa}
            module, symbol = self.symbol_at(entry.return_address)
            frames.append(Frame(entry.return_address, entry.cfa, module, symbol, registers))
        return frames


def _page_up(value: int) -> int:
    return -(-value // PAGE) * PAGE


class _Shadow:
    """The emulator's shadow call stack, kept by a hook on every instruction of ``__text``."""

    def __init__(self, arch: str, entries: Mapping[int, str]) -> None:
        self.arch = arch
        self.entries = entries
        self.stack: list[ShadowEntry] = []  # outermost first
        self.sp = _uc_register(arch, "rsp" if arch == "x86_64" else "sp")
        self.saved = [(n, _uc_register(arch, n)) for n in CALLEE_SAVED[arch]]

    def call(self, uc: Uc, address: int, function: str | None) -> None:
        """A function entered at ``address``: record its return address and CFA."""
        sp = uc.reg_read(self.sp)
        if self.arch == "x86_64":
            (return_address,) = struct.unpack("<Q", uc.mem_read(sp, 8))
            cfa = sp + 8
        else:
            return_address, cfa = uc.reg_read(arm64_const.UC_ARM64_REG_X30), sp
        # A tail call (or a call whose callers returned unseen) replaces the frames at or below
        # its CFA.
        while self.stack and self.stack[-1].cfa <= cfa:
            self.stack.pop()
        saved = {name: uc.reg_read(reg) for name, reg in self.saved}
        self.stack.append(ShadowEntry(function, address, return_address, cfa, saved))

    def hook(self, uc: Uc, address: int, size: int, user_data: object) -> None:
        function = self.entries.get(address)
        if function is not None:
            self.call(uc, address, function)
        elif self.stack and address == self.stack[-1].return_address:
            if uc.reg_read(self.sp) == self.stack[-1].cfa:
                self.stack.pop()


def _machine(
    program: Program, mode: int, slide: int, bad_address: int, argument: int, outer: Outermost
) -> tuple[Uc, _Shadow, int]:
    """The emulator with the program loaded, its globals written, the stack made and the entry's
    caller set up (see ``emulate``), and the shadow stack hooked: (machine, shadow stack, the
    stack's top)."""
    arch = program.arch
    uc = Uc(UC_ARCH_X86, UC_MODE_64) if arch == "x86_64" else Uc(UC_ARCH_ARM64, UC_MODE_ARM)
    for segment in program.segments:
        if segment.name in ("__PAGEZERO", "__LINKEDIT") or not segment.vmsize:
            continue
        address = segment.vmaddr + slide
        uc.mem_map(address, _page_up(segment.vmsize))
        data = program.executable.read_bytes()[segment.fileoff : segment.fileoff + segment.filesize]
        uc.mem_write(address, data)
        prot = (
            (UC_PROT_READ if segment.initprot & 1 else 0)
            | (UC_PROT_WRITE if segment.initprot & 2 else 0)
            | (UC_PROT_EXEC if segment.initprot & 4 else 0)
        )
        uc.mem_protect(address, _page_up(segment.vmsize), prot)
    symbols = program.symbols
    uc.mem_write(symbols["_mode"] + slide, struct.pack("<i", mode))
    uc.mem_write(symbols["_bad_address"] + slide, struct.pack("<Q", bad_address))

    stack_low = STACKS[arch]
    stack_top = stack_low + STACK_SIZE
    uc.mem_map(stack_low, STACK_SIZE, UC_PROT_READ | UC_PROT_WRITE)
    sp = stack_top - 256  # above it, what the kernel leaves: argc, argv, ... (zeros here)
    # The outermost function's own frame record, as dyld's __dyld_start and the kernel's
    # thread_start leave it: a saved frame pointer of 0 ("the debugger's end of frames marker")
    # and no return address, the frame pointer the entry is called with pointing at it.
    sp -= 16
    uc.mem_write(sp, bytes(16))
    record = sp
    if arch == "x86_64":
        sp -= 8
        uc.mem_write(sp, struct.pack("<Q", outer.return_address))
        uc.reg_write(x86_const.UC_X86_REG_RSP, sp)
        uc.reg_write(x86_const.UC_X86_REG_RBP, record)
        uc.reg_write(x86_const.UC_X86_REG_RDI, argument)
    else:
        uc.reg_write(arm64_const.UC_ARM64_REG_SP, sp)
        uc.reg_write(arm64_const.UC_ARM64_REG_X29, record)
        uc.reg_write(arm64_const.UC_ARM64_REG_X30, outer.return_address)
        uc.reg_write(arm64_const.UC_ARM64_REG_X0, argument)

    text, text_size = program.sections["__TEXT,__text"]
    shadow = _Shadow(arch, {start + slide: name for start, _, name in program.functions})
    uc.hook_add(UC_HOOK_CODE, shadow.hook, begin=text + slide, end=text + slide + text_size - 1)
    return uc, shadow, stack_top


def emulate(
    program: Program,
    mode: int,
    entry: str = "_main",
    *,
    slide: int = DEFAULT_SLIDE,
    bad_address: int = 0,
    argument: int = 0,
    outermost: Outermost | None = None,
) -> Emulation:
    """Run ``entry`` of ``program`` in unicorn, with ``mode`` and ``bad_address`` written to the
    program's globals, until it faults. The executable is mapped ``slide`` bytes above its link
    address (segments ``__TEXT``, ``__DATA_CONST``, ``__DATA``; ``__LINKEDIT`` is not needed);
    the entry is called with ``argument`` as its first argument, the return address
    ``outermost.return_address`` (libdyld's ``start`` by default) and a frame pointer at that
    function's own frame record, which holds a saved frame pointer of 0: the end of the chain,
    as dyld and thread_start leave it."""
    arch = program.arch
    outer = outermost or LIBDYLD[arch]
    uc, shadow, stack_top = _machine(program, mode, slide, bad_address, argument, outer)
    symbols = program.symbols
    faults: list[tuple[str, int]] = []
    accesses = {
        UC_MEM_READ_UNMAPPED: "read",
        UC_MEM_WRITE_UNMAPPED: "write",
        UC_MEM_FETCH_UNMAPPED: "fetch",
    }

    def on_fault(uc: Uc, access: int, address: int, size: int, value: int, data: object) -> bool:
        faults.append((accesses.get(access, str(access)), address))
        return False

    hooked = UC_HOOK_MEM_READ_UNMAPPED | UC_HOOK_MEM_WRITE_UNMAPPED | UC_HOOK_MEM_FETCH_UNMAPPED
    uc.hook_add(hooked, on_fault)
    start = symbols[entry] + slide
    try:
        uc.emu_start(start, outer.return_address, count=MAX_INSTRUCTIONS)
    except UcError:
        pass
    if not faults:
        raise RuntimeError(f"{program.name} {entry} (mode {mode}) returned without a fault")
    access, fault_address = faults[0]
    registers = {name: uc.reg_read(_uc_register(arch, name)) for name in REGISTERS[arch]}
    pc = registers["rip" if arch == "x86_64" else "pc"]
    if access == "fetch":
        # A call to an unmapped address: the callee's entry ran no hook, so record it here.
        shadow.call(uc, pc, None)
    sp_now = registers["rsp" if arch == "x86_64" else "sp"]
    low = sp_now - RED_ZONE
    stack = (low, bytes(uc.mem_read(low, stack_top - low)))
    code = None
    for region_start, region_end, _ in uc.mem_regions():
        if region_start <= pc <= region_end:
            code_low = max(region_start, pc - 128)
            code_high = min(region_end + 1, pc + 128)
            code = (code_low, bytes(uc.mem_read(code_low, code_high - code_low)))
    return Emulation(
        program,
        mode,
        entry,
        program.text_address + slide,
        outer,
        registers,
        fault_address,
        access,
        stack,
        code,
        list(reversed(shadow.stack)),
        _float_registers(uc, arch),
    )


@dataclass(frozen=True)
class Sample:
    """The machine before one instruction ran, as a profiler's sample (or a crash there) sees
    it: every register, the stack from below sp (its red zone) to its top, and the truth, the
    frames of the shadow stack at that moment (frame 0 at the instruction)."""

    registers: Mapping[str, int]
    stack: tuple[int, bytes]
    frames: tuple[tuple[int, int], ...]  # (pc, sp), innermost first
    # Each caller's callee-saved registers (frame 1 on): those its callee was given.
    saved: tuple[Mapping[str, int], ...] = ()


def samples(program: Program, mode: int, *, slide: int = DEFAULT_SLIDE) -> list[Sample]:
    """A run of ``main`` of ``program`` in ``mode`` that does not crash (``bad_address`` is the
    address of a global: every load reads), from its first instruction to its return into
    libdyld's ``start``, sampled before the first run of each instruction of ``__text``: every
    place a function's prologue, body and epilogue leave the stack in, once."""
    arch = program.arch
    outer = LIBDYLD[arch]
    readable = program.symbols["_mode"] + slide
    uc, shadow, stack_top = _machine(program, mode, slide, readable, 0, outer)
    pc_key, sp_key = ("rip", "rsp") if arch == "x86_64" else ("pc", "sp")
    seen: set[int] = set()
    taken: list[Sample] = []

    def sample(uc: Uc, address: int, size: int, data: object) -> None:
        if address in seen:
            return
        seen.add(address)
        registers = {name: uc.reg_read(_uc_register(arch, name)) for name in REGISTERS[arch]}
        registers[pc_key] = address
        sp = registers[sp_key]
        low = sp - RED_ZONE
        stack = (low, bytes(uc.mem_read(low, stack_top - low)))
        frames = [(address, sp)]
        frames += [(e.return_address, e.cfa) for e in reversed(shadow.stack)]
        saved = tuple(dict(e.caller_registers) for e in reversed(shadow.stack))
        taken.append(Sample(registers, stack, tuple(frames), saved))

    text, text_size = program.sections["__TEXT,__text"]
    # (After the shadow stack's own hook, which has seen the instruction first.)
    uc.hook_add(UC_HOOK_CODE, sample, begin=text + slide, end=text + slide + text_size - 1)
    uc.emu_start(program.symbols["_main"] + slide, outer.return_address, count=MAX_INSTRUCTIONS)
    if uc.reg_read(_uc_register(arch, pc_key)) != outer.return_address:
        raise RuntimeError(f"{program.name} (mode {mode}) did not return to {outer.symbol}")
    return taken


def _float_registers(uc: Uc, arch: str) -> list[int]:
    """xmm0-xmm15 (x86_64) or q0-q31 (arm64), as 128-bit integers."""
    if arch == "x86_64":
        return [uc.reg_read(_uc_register(arch, f"xmm{i}")) for i in range(16)]
    return [uc.reg_read(_uc_register(arch, f"q{i}")) for i in range(32)]


def _context(emulation: Emulation) -> bytes:
    """The thread's context as Crashpad writes it: CONTEXT_AMD64 or (Windows') CONTEXT_ARM64."""
    regs = emulation.registers
    floats = emulation.float_registers
    if emulation.arch == "x86_64":
        head = struct.pack(
            "<6QIIHHHHHHI6Q", *[0] * 6, CONTEXT_FLAGS["x86_64"], 0x1F80,
            0x2B, 0, 0, 0, 0, 0, regs["eflags"], *[0] * 6,
        )  # fmt: skip
        order = "rax rcx rdx rbx rsp rbp rsi rdi r8 r9 r10 r11 r12 r13 r14 r15 rip".split()
        integer = struct.pack("<17Q", *(regs[name] for name in order))
        # FXSAVE: control word, then mxcsr at 24, then st0-st7 and xmm0-xmm15 at 160.
        fxsave = bytearray(512)
        struct.pack_into("<H", fxsave, 0, 0x37F)
        struct.pack_into("<II", fxsave, 24, 0x1F80, 0xFFFF)
        for i, value in enumerate(floats[:16]):
            fxsave[160 + 16 * i : 176 + 16 * i] = value.to_bytes(16, "little")
        return head + integer + bytes(fxsave) + b"\0" * (26 * 16 + 6 * 8)
    iregs = [regs[f"x{i}"] for i in range(29)] + [regs["fp"], regs["lr"]]
    context = struct.pack("<II31QQQ", CONTEXT_FLAGS["arm64"], regs["cpsr"], *iregs, regs["sp"],
                          regs["pc"])  # fmt: skip
    context += b"".join(v.to_bytes(16, "little") for v in (floats + [0] * 32)[:32])
    return context + struct.pack("<II", 0, 0) + b"\0" * (8 * 4 + 8 * 8 + 2 * 4 + 2 * 8)


def codeview_pdb70(uuid: bytes, name: str) -> bytes:
    """The ``RSDS`` record Crashpad writes for a Mach-O module: the UUID as a GUID (its first
    three fields are integers, so the file holds them little-endian; a debug id read from it
    is then the UUID's bytes in order), an age of 0 and the file's name."""
    guid = uuid[3::-1] + uuid[5:3:-1] + uuid[7:5:-1] + uuid[8:]
    return CV_PDB70 + guid + struct.pack("<I", 0) + name.encode() + b"\0"


def write_mac_minidump(emulation: Emulation, out: Path, platform: int = PLATFORM_MAC_OS_X) -> Path:
    """The minidump Crashpad's macOS client would write of the emulated crash: system info
    (Mac OS X 11.6.7), the one thread with its context and stack, the memory list (the stack,
    the code around the pc), the modules (the executable and the outermost stand-in, each with
    its UUID), the exception (``EXC_BAD_ACCESS``, ``KERN_INVALID_ADDRESS``, the fault address)
    and the misc info (the pid)."""
    arch = emulation.arch
    blob = Blob()
    streams: list[tuple[int, Location]] = []
    major, minor, build_number, csd_text = OS_VERSION
    csd = blob.string(csd_text)
    if arch == "x86_64":
        cpu = struct.unpack("<III", b"GenuineIntel") + (0x000906EA, 0xBFEBFBFF, 0)
        level, revision = 6, 0x9E0A
    else:
        cpu, level, revision = (0,) * 6, 0, 0
    system = struct.pack(
        "<HHHBBIIIIIHH6I", PROCESSOR_ARCHITECTURE[arch], level, revision, 8, 1,
        major, minor, build_number, platform, csd, 0, 0, *cpu,
    )  # fmt: skip
    streams.append((SYSTEM_INFO, blob.add(system)))
    context = blob.add(_context(emulation))
    stack_address, stack_bytes = emulation.stack
    stack = blob.add(stack_bytes)
    thread = struct.pack("<IIIIQQII", THREAD_ID, 0, 0, 0, 0, stack_address, *stack)
    threads = struct.pack("<I", 1) + thread + struct.pack("<II", *context)
    streams.append((THREAD_LIST, blob.add(threads)))
    memory = [struct.pack("<QII", stack_address, *stack)]
    if emulation.code is not None:
        code_address, code_bytes = emulation.code
        memory.append(struct.pack("<QII", code_address, *blob.add(code_bytes)))
    streams.append((MEMORY_LIST, blob.add(struct.pack("<I", len(memory)) + b"".join(memory))))
    program, outer = emulation.program, emulation.outermost
    modules = []
    for base, size, path, uuid in (
        (emulation.load_address, program.image_size, emulation.module_path, program.uuid),
        (outer.base, outer.size, outer.path, outer.uuid),
    ):
        name = blob.string(path)
        codeview = blob.add(codeview_pdb70(uuid, path.rsplit("/", 1)[-1]))
        modules.append(module_entry(base, size, name, codeview))
    streams.append((MODULE_LIST, blob.add(struct.pack("<I", len(modules)) + b"".join(modules))))
    codes = (EXC_BAD_ACCESS, KERN_INVALID_ADDRESS, emulation.fault_address)
    record = struct.pack(
        "<IIQQII15Q", EXC_BAD_ACCESS, KERN_INVALID_ADDRESS, 0, emulation.fault_address,
        len(codes), 0, *codes, *[0] * (15 - len(codes)),
    )  # fmt: skip
    exception = struct.pack("<II", THREAD_ID, 0) + record + struct.pack("<II", *context)
    streams.append((EXCEPTION, blob.add(exception)))
    misc = struct.pack("<IIIIII", 24, 1, PROCESS_ID, 0, 0, 0)  # MINIDUMP_MISC1_PROCESS_ID
    streams.append((MISC_INFO, blob.add(misc)))
    return blob.write(streams, out)


def dump_syms(path: Path) -> str:
    """Mozilla's dump_syms on one file: its Breakpad symbol file's text."""
    return run_tool([DUMP_SYMS, path])


def symbols_dir(
    program: Program,
    out: Path,
    source: str = "both",
    outermost: Iterable[Outermost] = (),
) -> Path:
    """A Breakpad symbol store (``NAME/DEBUGID/NAME.sym``) for ``minidump-stackwalk
    --symbols-path``. dump_syms gives, for the ``source``:

    * ``"executable"``: PUBLIC symbols and STACK CFI (converted from ``__unwind_info`` and
      ``__eh_frame``), no FUNC or line records (the executable holds no DWARF);
    * ``"dsym"``: FUNC and line records from the dSYM's DWARF file, no STACK CFI (the dSYM has
      no unwind sections; dump_syms logs a CFI error);
    * ``"both"``: the dSYM's file with the executable's STACK lines added, as Breakpad's own
      ``dump_syms -g DSYM EXE`` combines them.

    ``outermost`` stand-ins get a symbol file naming their function."""
    text = {
        "executable": lambda: dump_syms(program.executable),
        "dsym": lambda: dump_syms(program.dwarf_file),
        "both": lambda: _merge(dump_syms(program.dwarf_file), dump_syms(program.executable)),
    }[source]()
    _store(out, program.name, program.debug_id, text)
    arch = "x86_64" if program.arch == "x86_64" else "arm64"
    for outer in outermost:
        sym = (
            f"MODULE mac {arch} {outer.debug_id} {outer.name}\n"
            f"FUNC {outer.symbol_offset:x} 40 0 {outer.symbol}\n"
        )
        _store(out, outer.name, outer.debug_id, sym)
    return out


def _merge(dsym: str, executable: str) -> str:
    stack = [line for line in executable.splitlines() if line.startswith("STACK ")]
    return dsym.rstrip("\n") + "\n" + "\n".join(stack) + "\n"


def _store(out: Path, name: str, debug_id: str, text: str) -> Path:
    module = text.split("\n", 1)[0].split(" ")
    if module[3] != debug_id:
        raise RuntimeError(f"{name}: dump_syms wrote debug id {module[3]}, not {debug_id}")
    # The MODULE line names the executable (dump_syms names the dSYM's file after it).
    text = " ".join(module[:4] + [name]) + "\n" + text.split("\n", 1)[1]
    path = out / name / debug_id / f"{name}.sym"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def minidump_stackwalk(dump: Path, symbols: Path) -> dict[str, Any]:
    """rust-minidump's ``minidump-stackwalk --json`` on the dump, with the symbol store."""
    output = run_tool([MINIDUMP_STACKWALK, "--json", "--symbols-path", symbols, dump])
    doc: dict[str, Any] = json.loads(output)
    return doc


# The independent views of llvm's tools.


@functools.cache
def compact_unwind(executable: Path) -> list[tuple[int, int]]:
    """``llvm-objdump --unwind-info``'s second-level entries: (function's link address,
    encoding), in address order (offsets in the section are from the image's start)."""
    _, segments, _, _ = read_macho(executable)
    base = next(s.vmaddr for s in segments if s.name == "__TEXT")
    output = run_tool(["llvm-objdump", "--unwind-info", executable])
    entries = re.findall(
        r"function offset=0x([0-9a-f]+), encoding(?:\[\d+\])?=0x([0-9a-f]+)", output
    )
    return sorted((base + int(offset, 16), int(encoding, 16)) for offset, encoding in entries)


def encoding_of(program: Program, address: int) -> int:
    """The compact encoding that covers a link address: the last entry at or before it."""
    found = [e for a, e in compact_unwind(program.executable) if a <= address]
    if not found:
        raise KeyError(hex(address))
    return found[-1]


@functools.cache
def eh_frame_fdes(executable: Path) -> dict[int, tuple[int, int]]:
    """``llvm-dwarfdump --eh-frame``'s FDEs: offset in ``__eh_frame`` -> (pc start, pc end)."""
    output = run_tool(["llvm-dwarfdump", "--eh-frame", executable])
    return {
        int(offset, 16): (int(start, 16), int(end, 16))
        for offset, start, end in re.findall(
            r"^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.\.([0-9a-f]+)",
            output,
            re.MULTILINE,
        )
    }


@functools.cache
def disassembly(executable: Path) -> dict[int, tuple[str, str]]:
    """``llvm-objdump -d``'s instructions: link address -> (mnemonic, operands)."""
    output = run_tool(["llvm-objdump", "-d", "--no-show-raw-insn", executable])
    instructions = {}
    for line in output.splitlines():
        match = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if match:
            operands = match.group(3).split("//")[0].split("##")[0].strip()
            instructions[int(match.group(1), 16)] = (match.group(2), operands)
    return instructions


def instruction_before(executable: Path, address: int) -> tuple[str, str] | None:
    """The instruction that ends at a link address (the call, for a return address)."""
    instructions = disassembly(executable)
    before = [a for a in instructions if a < address]
    return instructions[max(before)] if before else None
