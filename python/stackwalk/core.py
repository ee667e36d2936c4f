"""ELF core files: the threads, signal, modules and memory of a crashed process.

``Core.open(path)`` reads the core's notes (``NT_PRSTATUS`` per thread, ``NT_SIGINFO``,
``NT_PRPSINFO``, ``NT_AUXV``, ``NT_FILE``), maps its ``PT_LOAD`` segments zero-copy as the
process memory, finds each module's file on disk and load bias, and sets up an ``Unwinder`` with
every module found plus the vdso image from the core's memory::

    core = Core.open("core.1234")
    for thread in core.threads:
        print(thread.tid, [hex(pc) for pc in thread.unwind().pcs])

Modules come from ``NT_FILE``; a core without it (qemu-user writes those) is read through the
dynamic linker's link map in its memory. Cores of 64-bit (x86_64, aarch64) and 32-bit (i386)
processes are read, each with its class's layout of the headers and notes. Build ids are read
from the module headers the core holds and compared with the files found; every doubt is a line
in ``core.warnings``.
"""

from __future__ import annotations

import os
import signal as _signal
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple

from stackwalk._core import elf_summary, place_mappings
from stackwalk._linkmap import MemoryReader, read_link_map
from stackwalk.errors import ArchError, ElfError, StackwalkError
from stackwalk.unwinder import CRASH_STRATEGIES, MappedMemory, Trace, Unwinder

__all__ = ["Core", "CoreError", "CoreModule", "Signal", "Thread"]


class CoreError(StackwalkError):
    """The file is not an ELF core file that stackwalk can read."""


# (ELF class, e_machine) -> architecture: 2 is ELFCLASS64, 1 ELFCLASS32.
_MACHINES = {(2, 62): "x86_64", (2, 183): "aarch64", (1, 3): "i386"}
# pr_reg of NT_PRSTATUS, named as the unwinder takes them (it ignores the others). i386: the
# kernel's struct user_regs_struct (arch/x86/include/asm/user_32.h), 17 32-bit words.
_REGISTERS: dict[str, tuple[str, ...]] = {
    "x86_64": (
        "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
        "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
        "gs_base", "ds", "es", "fs", "gs",
    ),
    "aarch64": (*(f"x{i}" for i in range(31)), "sp", "pc", "pstate"),
    "i386": (
        "ebx", "ecx", "edx", "esi", "edi", "ebp", "eax", "ds", "es", "fs", "gs", "orig_eax",
        "eip", "cs", "eflags", "esp", "ss",
    ),
}  # fmt: skip


class _Layout(NamedTuple):
    """Where the fields of the structures of a core are, for one ELF class: the kernel writes
    a 32-bit process's core with 32-bit headers, ``unsigned long`` fields and pointers
    (``struct compat_elf_prstatus``, ``compat_elf_prpsinfo``, ``compat_siginfo``)."""

    word: int  # bytes in a word, a pointer, an address
    header: struct.Struct  # Elf{64,32}_Ehdr
    phdr: struct.Struct  # Elf{64,32}_Phdr
    # Indexes in a program header of p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz.
    phdr_fields: tuple[int, int, int, int, int, int]
    sh_info: int  # offset of sh_info in a section header (for e_phnum's overflow)
    prstatus_pid: int  # offset of pr_pid in NT_PRSTATUS
    prstatus_regs: int  # offset of pr_reg
    prpsinfo: struct.Struct  # pr_pid, pr_fname, pr_psargs
    siginfo: struct.Struct  # si_signo, si_errno, si_code, si_addr
    pair: struct.Struct  # two words: an auxv entry, NT_FILE's count and page size
    triple: struct.Struct  # three words: an NT_FILE entry

    def phdrs(self, table: bytes) -> list[tuple[int, int, int, int, int, int]]:
        """(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz) of each program header."""
        t, fl, o, v, fs, m = self.phdr_fields
        whole = table[: len(table) // self.phdr.size * self.phdr.size]
        return [(p[t], p[fl], p[o], p[v], p[fs], p[m]) for p in self.phdr.iter_unpack(whole)]


_ELFCLASS32, _ELFCLASS64 = 1, 2
_LAYOUTS = {
    _ELFCLASS64: _Layout(
        8, struct.Struct("<16sHHIQQQIHHHHHH"), struct.Struct("<IIQQQQQQ"), (0, 1, 2, 3, 5, 6),
        44, 32, 112, struct.Struct("<24xI12x16s80s"), struct.Struct("<iii4xQ"),
        struct.Struct("<QQ"), struct.Struct("<QQQ"),
    ),
    _ELFCLASS32: _Layout(
        4, struct.Struct("<16sHHIIIIIHHHHHH"), struct.Struct("<IIIIIIII"), (0, 6, 1, 2, 4, 5),
        28, 24, 72, struct.Struct("<12xI12x16s80s"), struct.Struct("<iiiI"),
        struct.Struct("<II"), struct.Struct("<III"),
    ),
}  # fmt: skip
_NOTE = struct.Struct("<III")  # n_namesz, n_descsz, n_type
_ET_CORE = 4
_ELF_TYPES = {1: "a relocatable object", 2: "an executable", 3: "a shared object or PIE executable"}
_PT_LOAD, _PT_INTERP, _PT_NOTE = 1, 3, 4
_PF_X = 1
_PN_XNUM = 0xFFFF  # e_phnum overflow: the real count is section header 0's sh_info
_NT_PRSTATUS, _NT_PRPSINFO, _NT_AUXV = 1, 3, 6
_NT_SIGINFO, _NT_FILE = 0x53494749, 0x46494C45
_AT_NULL, _AT_PHDR, _AT_ENTRY, _AT_EXECFN, _AT_SYSINFO_EHDR = 0, 3, 9, 31, 33
_PRSTATUS_CURSIG = 12
_FNAME_MAX = 15  # pr_fname's length without its NUL
# Signals whose siginfo carries the faulting address (when si_code > 0: sent by the kernel).
_FAULT_SIGNALS = frozenset({4, 5, 7, 8, 11})  # SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV
_DEFAULT_PAGE = 4096
_HEADER_IMAGE_LIMIT = 1 << 16  # bytes of a module's first mapping read for its headers
_MAX_NOTES = 1 << 26  # a PT_NOTE larger than this is damaged
_ELF_MAGIC = b"\x7fELF"
_ADDRESS_END = (1 << 64) - 1  # the highest end a module's range can have
DEBUG_ROOT = "/usr/lib/debug"  # where gdb and eu-stack look for separate debug files


@dataclass(frozen=True, slots=True)
class Signal:
    number: int
    name: str  # "SIGSEGV"; "SIG<n>" for a number Python does not name
    address: int | None  # the faulting address of SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP
    code: int | None  # si_code (None when the core has no NT_SIGINFO)


@dataclass(frozen=True, slots=True)
class CoreModule:
    path: str  # as the core names it, or "[vdso]"
    file: str | None  # the file on disk used for it
    start: int  # runtime address range
    end: int
    bias: int  # runtime address − ELF address
    build_id: str | None  # read from the core's memory
    file_build_id: str | None  # read from the file used
    found: bool  # a file (or, for the vdso, the image in the core) provides its CFI and symbols
    # The runtime ranges it occupies: its own mappings, which need not be contiguous (memory
    # between two of them is not the module's). Empty: the whole of start..end.
    ranges: tuple[tuple[int, int], ...] = ()

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        """``ranges``, or (start, end) where there are none."""
        return self.ranges or ((self.start, self.end),)

    @property
    def build_id_matches(self) -> bool | None:
        if self.build_id is None or self.file_build_id is None:
            return None
        return self.build_id == self.file_build_id


@dataclass(frozen=True, slots=True)
class Thread:
    tid: int
    regs: dict[str, int]
    signal: int  # pr_cursig: the signal the thread was stopped by (0: none)
    _unwinder: Unwinder = field(repr=False, compare=False)
    _memory: MappedMemory = field(repr=False, compare=False)

    def unwind(self, max_frames: int | None = None) -> Trace:
        """This thread's frames: at most ``max_frames``, or, when None, as many as its
        captured stack can hold (a frame takes at least one word)."""
        return self._unwinder.unwind(self.regs, self._memory, max_frames=max_frames)


class _Segment(NamedTuple):  # a PT_LOAD of the core
    vaddr: int
    offset: int
    filesz: int
    memsz: int
    flags: int

    @property
    def end(self) -> int:
        return self.vaddr + self.memsz


class _Mapping(NamedTuple):  # an NT_FILE entry
    start: int
    end: int
    offset: int  # file offset in bytes
    path: str


class _ThreadNotes:
    __slots__ = ("tid", "cursig", "regs", "siginfo")

    def __init__(self, tid: int, cursig: int, regs: dict[str, int]) -> None:
        self.tid = tid
        self.cursig = cursig
        self.regs = regs
        # The NT_SIGINFO that follows its NT_PRSTATUS: (si_signo, si_code, si_addr).
        self.siginfo: tuple[int, int, int] | None = None


class _Notes:
    """What the core's notes say. (Plain classes, not dataclasses: they cost import time.)"""

    __slots__ = ("threads", "pid", "fname", "psargs", "auxv", "files", "page_size")

    def __init__(self) -> None:
        self.threads: list[_ThreadNotes] = []
        self.pid: int | None = None
        self.fname: str | None = None
        self.psargs: str | None = None
        self.auxv: dict[int, int] = {}
        self.files: list[_Mapping] | None = None
        self.page_size = _DEFAULT_PAGE


def _signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def _signal_of(thread: _ThreadNotes) -> Signal | None:
    if thread.siginfo is not None:
        signo, code, addr = thread.siginfo
        if signo:
            address = addr if signo in _FAULT_SIGNALS and code > 0 else None
            return Signal(signo, _signal_name(signo), address, code)
    if thread.cursig:
        return Signal(thread.cursig, _signal_name(thread.cursig), None, None)
    return None


def _named_as(path: str, executable: str | None, fname: str | None) -> bool:
    """Whether ``path`` has the file name of ``executable`` or the process name ``fname``
    (NT_PRPSINFO's pr_fname, cut to 15 characters)."""
    base = os.path.basename(path)
    if executable is not None and base == os.path.basename(executable):
        return True
    if fname is None:
        return False
    return base == fname or (len(fname) == _FNAME_MAX and base.startswith(fname))


def _cstring(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class Core:
    """An ELF core file opened for unwinding; see the module docstring."""

    path: str
    arch: str
    pid: int | None
    executable: str | None
    command_line: str | None
    signal: Signal | None
    crashing_tid: int | None
    threads: list[Thread]
    modules: list[CoreModule]
    memory: MappedMemory
    unwinder: Unwinder
    warnings: list[str]
    debug_root: str | None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        executable: str | os.PathLike[str] | None = None,
        *,
        sysroot: str | os.PathLike[str] | None = None,
        lib_search_path: Sequence[str | os.PathLike[str]] | None = None,
        debug_root: str | os.PathLike[str] | None = DEBUG_ROOT,
        strategies: Sequence[str] = CRASH_STRATEGIES,
        allow_mismatch: bool = False,
    ) -> Core:
        """Read the core at ``path``. ``executable`` overrides the program file; ``sysroot``
        prefixes every module path; ``lib_search_path`` is searched by file name;
        ``debug_root`` is where separate debug files are looked for (by build id, and by
        ``.gnu_debuglink`` under it as well as next to each module): their ``.debug_frame``
        unwinds functions that ``.eh_frame`` lacks, their symbols name them;
        ``strategies`` are the ways each frame's caller is looked for, in order (CFI, then
        frame pointers, then stack scanning by default). A file whose build id differs from the
        one the core recorded is not used (as if missing, with a warning) unless
        ``allow_mismatch``; then the frames unwound through it are marked doubtful."""
        return cls(
            path,
            executable,
            sysroot=sysroot,
            lib_search_path=lib_search_path,
            debug_root=debug_root,
            strategies=strategies,
            allow_mismatch=allow_mismatch,
        )

    def __init__(
        self,
        path: str | os.PathLike[str],
        executable: str | os.PathLike[str] | None = None,
        *,
        sysroot: str | os.PathLike[str] | None = None,
        lib_search_path: Sequence[str | os.PathLike[str]] | None = None,
        debug_root: str | os.PathLike[str] | None = DEBUG_ROOT,
        strategies: Sequence[str] = CRASH_STRATEGIES,
        allow_mismatch: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self._allow_mismatch = allow_mismatch
        # Module path -> build id of the file found for it that differs from the core's.
        self._mismatched: dict[str, str] = {}
        self.debug_root = os.fspath(debug_root) if debug_root is not None else None
        self.warnings = []
        self._layout = _LAYOUTS[_ELFCLASS64]
        try:
            with open(self.path, "rb") as f:
                self.arch, self._segments, note_data = self._read_headers(f)
        except OSError as e:
            raise CoreError(f"{self.path}: {e.strerror or e}") from None
        try:
            self.memory = MappedMemory(
                self.path, [(s.vaddr, s.offset, s.filesz) for s in self._segments if s.filesz]
            )
        except StackwalkError as e:
            raise CoreError(f"{self.path}: cannot map the core's memory: {e}") from None
        if self.memory.missing_bytes:
            self.warnings.append(
                f"core is truncated: {self.memory.missing_bytes} bytes of segments missing"
            )
        self._reader = MemoryReader(self.memory, self._layout.word)
        notes = self._parse_notes(note_data)
        self.pid = notes.pid
        self.command_line = notes.psargs
        self.unwinder = Unwinder(self.arch, strategies=tuple(strategies))
        self._finder = _FileFinder(self.arch, sysroot, lib_search_path)
        self._page = notes.page_size
        self._vdso_image: bytes | None = None
        explicit = os.fspath(executable) if executable is not None else None
        modules, exe_module = self._find_modules(notes, explicit)
        self.modules = sorted(modules, key=lambda m: m.start)
        self.executable = exe_module.file if exe_module is not None else None
        if explicit is not None and exe_module is None:
            self.warnings.append(f"executable {explicit} not used: the core does not show where")
        self._set_threads(notes)

    # -- the file: headers and notes -------------------------------------------------------

    def _read_headers(self, f: BinaryIO) -> tuple[str, list[_Segment], list[bytes]]:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != _ELF_MAGIC:
            raise CoreError(f"{self.path}: not an ELF file")
        if ident[4] not in _LAYOUTS or ident[5] != 1:
            raise CoreError(f"{self.path}: not a little-endian 32-bit or 64-bit ELF file")
        layout = self._layout = _LAYOUTS[ident[4]]
        raw = ident + f.read(layout.header.size - 16)
        if len(raw) < layout.header.size:
            raise CoreError(f"{self.path}: truncated ELF header")
        (_, e_type, machine, _, _, phoff, shoff, _, _, phentsize, phnum, _, _, _) = (
            layout.header.unpack(raw)
        )
        if e_type != _ET_CORE:
            what = _ELF_TYPES.get(e_type, f"an ELF file of type {e_type}")
            raise CoreError(f"{self.path}: not a core file: it is {what}")
        arch = _MACHINES.get((ident[4], machine))
        if arch is None:
            bits = 8 * layout.word
            raise CoreError(
                f"{self.path}: unsupported architecture (ELF machine {machine}, {bits}-bit)"
            )
        if phentsize != layout.phdr.size:
            raise CoreError(f"{self.path}: bad program header size {phentsize}")
        # Offsets are checked against the size before any seek: a damaged one can be past
        # what a file offset can hold at all.
        size = os.fstat(f.fileno()).st_size
        if phnum == _PN_XNUM:
            if shoff + layout.sh_info + 4 > size:
                raise CoreError(f"{self.path}: truncated section header at {shoff:#x}")
            f.seek(shoff + layout.sh_info)  # sh_info of section header 0
            phnum = struct.unpack("<I", f.read(4))[0]
        if phoff + phnum * layout.phdr.size > size:
            raise CoreError(f"{self.path}: truncated program headers at {phoff:#x}")
        f.seek(phoff)
        table = f.read(phnum * layout.phdr.size)
        segments: list[_Segment] = []
        notes: list[bytes] = []
        for p_type, flags, offset, vaddr, filesz, memsz in layout.phdrs(table):
            if p_type == _PT_LOAD:
                segments.append(_Segment(vaddr, offset, filesz, memsz, flags))
            elif p_type == _PT_NOTE:
                if filesz > _MAX_NOTES:
                    self.warnings.append(f"note segment at {offset:#x} too large, skipped")
                    continue
                if offset >= size:
                    self.warnings.append(f"note segment at {offset:#x} lies past the end")
                    continue
                f.seek(offset)
                data = f.read(filesz)
                if len(data) < filesz:
                    self.warnings.append(f"note segment at {offset:#x} is truncated")
                notes.append(data)
        return arch, segments, notes

    def _parse_notes(self, segments: list[bytes]) -> _Notes:
        notes = _Notes()
        for data in segments:
            pos = 0
            while pos + _NOTE.size <= len(data):
                namesz, descsz, n_type = _NOTE.unpack_from(data, pos)
                name_at = pos + _NOTE.size
                desc_at = name_at + (namesz + 3) // 4 * 4
                end = desc_at + (descsz + 3) // 4 * 4
                if desc_at + descsz > len(data):
                    self.warnings.append(
                        f"damaged note (type {n_type:#x}): it and the notes after it skipped"
                    )
                    break
                if data[name_at : name_at + namesz].rstrip(b"\0") == b"CORE":
                    self._parse_note(notes, n_type, data[desc_at : desc_at + descsz])
                pos = end
        if not notes.threads:
            self.warnings.append("core has no threads (no NT_PRSTATUS note)")
        return notes

    def _parse_note(self, notes: _Notes, n_type: int, desc: bytes) -> None:
        layout = self._layout
        if n_type == _NT_PRSTATUS:
            names = _REGISTERS[self.arch]
            if len(desc) < layout.prstatus_regs + layout.word * len(names):
                self.warnings.append(f"NT_PRSTATUS note too short ({len(desc)} bytes), skipped")
                return
            cursig = struct.unpack_from("<h", desc, _PRSTATUS_CURSIG)[0]
            tid = struct.unpack_from("<i", desc, layout.prstatus_pid)[0]
            words = "Q" if layout.word == 8 else "I"
            values = struct.unpack_from(f"<{len(names)}{words}", desc, layout.prstatus_regs)
            notes.threads.append(_ThreadNotes(tid, cursig, dict(zip(names, values, strict=True))))
        elif n_type == _NT_SIGINFO:
            if not notes.threads or len(desc) < layout.siginfo.size:
                self.warnings.append("NT_SIGINFO note out of place or too short, skipped")
                return
            signo, _, code, addr = layout.siginfo.unpack_from(desc)
            notes.threads[-1].siginfo = (signo, code, addr)  # of the thread before it
        elif n_type == _NT_PRPSINFO:
            if len(desc) < layout.prpsinfo.size:
                self.warnings.append("NT_PRPSINFO note too short, skipped")
                return
            pid, fname, psargs = layout.prpsinfo.unpack_from(desc)
            notes.pid = pid
            notes.fname = _cstring(fname) or None
            notes.psargs = _cstring(psargs).rstrip() or None
        elif n_type == _NT_AUXV:
            pair = layout.pair
            for key, value in pair.iter_unpack(desc[: len(desc) // pair.size * pair.size]):
                if key == _AT_NULL:
                    break
                notes.auxv.setdefault(key, value)
        elif n_type == _NT_FILE:
            self._parse_nt_file(notes, desc)

    def _parse_nt_file(self, notes: _Notes, desc: bytes) -> None:
        pair, triple = self._layout.pair, self._layout.triple
        if len(desc) < pair.size:
            self.warnings.append("NT_FILE note too short, skipped")
            return
        count, page = pair.unpack_from(desc)
        table_end = pair.size + triple.size * count
        if table_end > len(desc) or page == 0 or page & (page - 1):
            self.warnings.append("NT_FILE note damaged, skipped")
            return
        names = desc[table_end:].split(b"\0")
        if len(names) < count:
            self.warnings.append("NT_FILE note damaged (missing file names), skipped")
            return
        notes.page_size = page
        notes.files = [
            _Mapping(start, end, pgoff * page, name.decode("utf-8", "surrogateescape"))
            for (start, end, pgoff), name in zip(
                triple.iter_unpack(desc[pair.size : table_end]), names, strict=False
            )
        ]

    # -- threads and signal ----------------------------------------------------------------

    def _set_threads(self, notes: _Notes) -> None:
        raw = notes.threads
        # The kernel writes the thread that dumped (took the signal) first; gdb the thread it
        # stopped in. A thread with a signal recorded wins over one without.
        crashing = next((t for t in raw if t.siginfo is not None or t.cursig), None)
        if crashing is None and raw:
            crashing = raw[0]
        ordered = ([crashing] if crashing else []) + [t for t in raw if t is not crashing]
        self.threads = [
            Thread(t.tid, t.regs, t.cursig, self.unwinder, self.memory) for t in ordered
        ]
        self.crashing_tid = crashing.tid if crashing else None
        self.signal = _signal_of(crashing) if crashing else None

    # -- modules ---------------------------------------------------------------------------

    def _find_modules(
        self, notes: _Notes, explicit: str | None
    ) -> tuple[list[CoreModule], CoreModule | None]:
        if notes.files is not None:
            modules, exe = self._file_modules(notes, explicit)
        else:
            modules, exe = self._link_map_modules(notes, explicit)
        vdso = self._vdso(notes.auxv.get(_AT_SYSINFO_EHDR))
        if vdso is not None:
            modules.append(vdso)
        return modules, exe

    def _header_summary(self, address: int) -> dict[str, Any] | None:
        """elf_summary of the ELF headers the core holds at ``address``, or None."""
        size = min(self._reader.available(address), _HEADER_IMAGE_LIMIT)
        image = self._reader.read(address, size)
        if image is None or not image.startswith(_ELF_MAGIC):
            return None
        try:
            return elf_summary(image)
        except ElfError:
            return None

    def _segment_end(self, address: int) -> int | None:
        return next((s.end for s in self._segments if s.vaddr <= address < s.end), None)

    def _file_modules(
        self, notes: _Notes, explicit: str | None
    ) -> tuple[list[CoreModule], CoreModule | None]:
        groups: dict[str, list[_Mapping]] = {}
        for m in notes.files or ():
            groups.setdefault(m.path, []).append(m)
        entry = notes.auxv.get(_AT_ENTRY)
        code = [(s.vaddr, s.end) for s in self._segments if s.flags & _PF_X]
        modules: list[CoreModule] = []
        exe: CoreModule | None = None
        for path, maps in groups.items():
            first = min((m for m in maps if m.offset == 0), key=lambda m: m.start, default=None)
            in_core = self._header_summary(first.start) if first else None
            named_exe = entry is None and exe is None and _named_as(path, explicit, notes.fname)
            holds_entry = entry is not None and any(m.start <= entry < m.end for m in maps)
            file, on_disk, rejected = self._locate(
                path, in_core, explicit if holds_entry or named_exe else None
            )
            if on_disk is None:
                # Without ELF headers in the core, nor an ELF file, it is a module only if it
                # held code (else a data file: locale archive, font, database...).
                if (
                    in_core is None
                    and not rejected
                    and not any(m.start < b and a < m.end for m in maps for a, b in code)
                ):
                    continue
                self._not_found(path, rejected)
            summary = in_core or on_disk
            placements = place_mappings(
                summary["loads"] if summary else [],
                [(m.start, m.end, m.offset) for m in maps],
                self._page,
                code,
            )
            for bias, ranges in placements:
                start, end = ranges[0][0], ranges[-1][1]
                if entry is not None:
                    is_exe = any(a <= entry < b for a, b in ranges)
                else:  # the first file named as the executable given, or as the process
                    is_exe = named_exe and exe is None
                module = self._module(path, file, start, end, bias, in_core, on_disk, tuple(ranges))
                modules.append(module)
                if is_exe:
                    exe = module
        return modules, exe

    def _link_map_modules(
        self, notes: _Notes, explicit: str | None
    ) -> tuple[list[CoreModule], CoreModule | None]:
        found = self._link_map_executable(notes, explicit)
        if found is None:
            return [], None
        exe, summary = found
        modules = [exe]
        if summary is None:
            self.warnings.append(
                "no NT_FILE note and the executable is not found: its libraries cannot be found "
                "through the link map"
            )
            return modules, exe
        if summary["dynamic"] is None:
            return modules, exe  # statically linked
        entries, warnings = read_link_map(self._reader, summary["dynamic"] + exe.bias)
        self.warnings.extend(warnings)
        vdso = notes.auxv.get(_AT_SYSINFO_EHDR)
        vdso_end = self._segment_end(vdso) if vdso else None
        interpreter = _interpreter(exe.file, summary["phdr"], self._layout) if exe.file else None
        for e in entries:
            if vdso and vdso_end and vdso <= e.dynamic < vdso_end:
                continue  # the vdso's own entry: its image is read from the core below
            name = e.name
            if name is None:  # the dynamic linker's, pointing into the executable's .interp
                name, interpreter = interpreter, None
            if name is None:
                self.warnings.append(f"link map: cannot read the name of the module at {e.bias:#x}")
                continue
            in_core = self._header_summary(e.bias)
            file, on_disk, rejected = self._locate(name, in_core, None)
            if on_disk is not None:
                start, end = self._load_range(on_disk, e.bias)
                if in_core is None:
                    in_core = self._header_summary(start)
            elif in_core is not None:
                start, end = self._load_range(in_core, e.bias)
            else:
                start, end = e.bias, self._segment_end(e.dynamic) or e.bias
            if on_disk is None:
                self._not_found(name, rejected)
            modules.append(self._module(name, file, start, end, e.bias, in_core, on_disk))
        return modules, exe

    def _link_map_executable(
        self, notes: _Notes, explicit: str | None
    ) -> tuple[CoreModule, dict[str, Any] | None] | None:
        """The executable's module and ELF summary (None: neither its file nor its headers)."""
        execfn = notes.auxv.get(_AT_EXECFN)
        name = (self._reader.string(execfn) if execfn else None) or notes.fname or explicit
        if name is None:
            self.warnings.append("cannot tell the executable: no AT_EXECFN and no NT_PRPSINFO")
            return None
        entry = notes.auxv.get(_AT_ENTRY)
        phdr = notes.auxv.get(_AT_PHDR)
        in_core = self._header_summary(phdr - phdr % self._page) if phdr else None
        file, on_disk, rejected = self._locate(name, in_core, explicit)
        if on_disk is None:
            self._not_found(name, rejected)
        summary = on_disk or in_core
        if summary is None:
            # Only its place is known: the mapping that holds the entry point.
            segment = None
            if entry is not None:
                segment = next((s for s in self._segments if s.vaddr <= entry < s.end), None)
            if segment is None:
                return None
            return self._module(name, None, segment.vaddr, segment.end, segment.vaddr), None
        if entry is not None:
            bias = entry - summary["entry"]
        elif summary["type"] == "EXEC":
            bias = 0
        else:
            self.warnings.append(f"cannot place {name} in memory: the core has no AT_ENTRY")
            return None
        start, end = self._load_range(summary, bias)
        if in_core is None:
            in_core = self._header_summary(start)
        return self._module(name, file, start, end, bias, in_core, on_disk), summary

    def _load_range(self, summary: dict[str, Any], bias: int) -> tuple[int, int]:
        loads = [(vaddr, vaddr + memsz) for vaddr, memsz, *_ in summary["loads"] if memsz]
        if not loads:
            return bias, bias
        page = self._page
        start = min(a for a, _ in loads)
        end = max(b for _, b in loads)
        return bias + start - start % page, bias + (end + page - 1) // page * page

    def _vdso(self, address: int | None) -> CoreModule | None:
        if not address:
            return None
        end = self._segment_end(address) or address
        image = self._reader.read(address, end - address)
        if image is None:
            self.warnings.append(f"vdso at {address:#x} is not in the core")
            return None
        try:
            summary = elf_summary(image)
            low = min((vaddr for vaddr, *_ in summary["loads"]), default=0)
            bias = address - (low - low % self._page)
            self.unwinder.add_module_image("[vdso]", image, bias)
        except (ElfError, ArchError) as e:
            self.warnings.append(f"vdso at {address:#x} unusable: {e}")
            return None
        self._vdso_image = image
        return CoreModule("[vdso]", None, address, end, bias, summary["build_id"], None, True)

    def _locate(
        self, path: str, in_core: dict[str, Any] | None, explicit: str | None
    ) -> tuple[str | None, dict[str, Any] | None, list[str]]:
        """(the file for module ``path``, its summary, why ELF candidates were rejected). A
        file whose build id differs from the core's is not used (eu-stack does the same), unless
        the core was opened with ``allow_mismatch`` or the file was given (``explicit``); either
        way it is a warning."""
        want = in_core["build_id"] if in_core else None
        file, summary, rejected = self._finder.find(path, want, explicit)
        if file is not None and summary is not None:
            if want and summary["build_id"] and summary["build_id"] != want:
                self._mismatched[path] = summary["build_id"]
                use = self._allow_mismatch or explicit is not None  # asked for by name
                self.warnings.append(
                    f"build-id mismatch for {path}: core has {want}, {file} has "
                    f"{summary['build_id']}; {'using it anyway' if use else 'not used'}"
                )
                if not use:
                    return None, None, [f"{file} has another build id"]
        return file, summary, rejected

    def _not_found(self, path: str, rejected: list[str]) -> None:
        reason = f" ({'; '.join(rejected)})" if rejected else ""
        self.warnings.append(f"module not found: {path}{reason}")

    def _module(
        self,
        path: str,
        file: str | None,
        start: int,
        end: int,
        bias: int,
        in_core: dict[str, Any] | None = None,
        on_disk: dict[str, Any] | None = None,
        ranges: tuple[tuple[int, int], ...] = (),
    ) -> CoreModule:
        if file is not None:
            try:
                self.unwinder.add_module(
                    file, bias, ranges=ranges or None, debug_root=self.debug_root
                )
            except StackwalkError as e:  # not ELF, another arch, or over another module
                self.warnings.append(f"module {path}: {e}")
                file, on_disk = None, None
        if file is None:
            self._add_missing(path, ranges or ((start, end),), bias, in_core)
        return CoreModule(
            path=path,
            file=file,
            start=start,
            end=end,
            bias=bias,
            build_id=in_core["build_id"] if in_core else None,
            file_build_id=on_disk["build_id"] if on_disk else self._mismatched.get(path),
            found=file is not None,
            ranges=ranges,
        )

    def _add_missing(
        self,
        path: str,
        spans: tuple[tuple[int, int], ...],
        bias: int,
        in_core: dict[str, Any] | None,
    ) -> None:
        """Tell the unwinder where a module without a file has code -- its executable segments
        as the headers in the core place them, else the core's executable segments within it
        (gdb's gcore leaves unmodified file pages out) -- so that a return address into it is
        accepted, and the walk goes on past it by frame pointers or scanning, instead of
        dropping a right frame for lying in no module."""
        page = self._page
        segments = [
            (vaddr + bias, vaddr + bias + memsz)
            for vaddr, memsz, _, _, flags in (in_core["loads"] if in_core else ())
            if flags & _PF_X and memsz
        ] or [(s.vaddr, s.end) for s in self._segments if s.flags & _PF_X]
        code = [
            (max(a, start - start % page), min(b, -(-end // page) * page))
            for a, b in spans
            for start, end in segments
            if start < b and a < end
        ]
        # A damaged core can place a module past the end of the address space.
        spans = tuple((a, b) for a, b in spans if 0 <= a < b <= _ADDRESS_END)
        code = [(a, b) for a, b in code if 0 <= a < b <= _ADDRESS_END]
        if code and spans:
            try:
                self.unwinder.add_missing_module(path, spans, code)
            except StackwalkError:
                pass  # over a module that has a file: that one is kept

    # -- output ----------------------------------------------------------------------------

    def to_dict(
        self, max_frames: int | None = None, *, end_details: bool = False
    ) -> dict[str, Any]:
        """The JSON document of ``stackwalk core --json``: every thread unwound and
        symbolized. ``end_details`` adds each thread's ``end_detail`` (where and why its
        walk stopped), which the text report prints."""
        from stackwalk.render import ModuleInfo, Symbolizer, frame_dicts

        symbolizer = Symbolizer(
            (
                ModuleInfo(
                    m.file or m.path,
                    start,
                    end,
                    m.bias,
                    doubtful=m.found and m.path in self._mismatched,
                )
                for m in self.modules
                for start, end in m.spans
            ),
            {"[vdso]": self._vdso_image} if self._vdso_image is not None else None,
            debug_root=self.debug_root,
        )
        sig = self.signal
        threads = []
        for thread in self.threads:
            trace = thread.unwind(max_frames)
            entry = {
                "tid": thread.tid,
                "end": trace.end,
                "frames": frame_dicts(trace.frames, symbolizer),
            }
            if end_details:
                entry["end_detail"] = trace.end_detail
            threads.append(entry)
        return {
            "core": self.path,
            "executable": self.executable,
            "pid": self.pid,
            "signal": None
            if sig is None
            else {"number": sig.number, "name": sig.name, "address": _hex(sig.address)},
            "crashing_thread": self.crashing_tid,
            "modules": [
                {
                    "path": m.path,
                    "start": _hex(m.start),
                    "end": _hex(m.end),
                    "ranges": [[_hex(a), _hex(b)] for a, b in m.spans],
                    "bias": _hex(m.bias),
                    "build_id": m.build_id,
                    "found": m.found,
                    "build_id_matches": m.build_id_matches,
                }
                for m in self.modules
            ],
            "threads": threads,
        }

    def __repr__(self) -> str:
        return (
            f"Core({self.path!r}, arch={self.arch!r}, pid={self.pid}, "
            f"threads={len(self.threads)}, modules={len(self.modules)})"
        )


def _interpreter(file: str, phdr: tuple[int, int], layout: _Layout) -> str | None:
    """The PT_INTERP path of ELF ``file`` (of the core's class) whose program headers are at
    ``phdr`` (e_phoff, e_phnum); None if it has none or it cannot be read."""
    phoff, phnum = phdr
    try:
        with open(file, "rb") as f:
            f.seek(phoff)
            for p_type, _, offset, _, filesz, _ in layout.phdrs(f.read(phnum * layout.phdr.size)):
                if p_type == _PT_INTERP:
                    f.seek(offset)
                    return _cstring(f.read(min(filesz, 4096))) or None
    except (OSError, ValueError, OverflowError):  # ValueError: an offset no file can have
        return None
    return None


def _hex(value: int | None) -> str | None:
    return None if value is None else f"{value:#x}"


class _FileFinder:
    """Finds module files: the explicit file, else SYSROOT + path, the path itself, then each
    search directory by file name. A candidate must be an ELF file of the core's architecture;
    among those, one whose build id matches the core's is preferred."""

    def __init__(
        self,
        arch: str,
        sysroot: str | os.PathLike[str] | None,
        search: Sequence[str | os.PathLike[str]] | None,
    ) -> None:
        self._arch = arch
        self._sysroot = os.fspath(sysroot) if sysroot is not None else None
        self._search = [os.fspath(d) for d in search or ()]
        self._summaries: dict[str, dict[str, Any] | str | None] = {}

    def summary(self, file: str) -> dict[str, Any] | None:
        s = self._check(file)
        return s if isinstance(s, dict) else None

    def _check(self, file: str) -> dict[str, Any] | str | None:
        """The file's elf_summary; why this ELF file cannot be used; None: not an ELF file."""
        if file not in self._summaries:
            try:
                s = elf_summary(file)
            except ElfError:
                self._summaries[file] = None
            else:
                ok = s["machine"] == self._arch
                self._summaries[file] = s if ok else f"{file} is {s['machine']}, not {self._arch}"
        return self._summaries[file]

    def _candidates(self, path: str) -> list[str]:
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        out = []
        if self._sysroot is not None:
            out.append(os.path.join(self._sysroot, path.lstrip("/")))
        out.append(path)
        name = os.path.basename(path)
        out.extend(os.path.join(d, name) for d in self._search)
        return list(dict.fromkeys(out))

    def find(
        self, path: str, build_id: str | None, explicit: str | None
    ) -> tuple[str | None, dict[str, Any] | None, list[str]]:
        """(file, its summary, why ELF files found were rejected)."""
        if explicit is not None:
            s = self._check(explicit)
            if not isinstance(s, dict):
                why = (s or "not an ELF file") if os.path.isfile(explicit) else "no such file"
                raise CoreError(f"executable {explicit}: {why}")
            return explicit, s, []
        fallback: tuple[str, dict[str, Any]] | None = None
        rejected: list[str] = []
        for candidate in self._candidates(path):
            if not os.path.isfile(candidate):
                continue
            s = self._check(candidate)
            if s is None:
                continue
            if isinstance(s, str):
                rejected.append(s)
            elif build_id is None or s["build_id"] == build_id:
                return candidate, s, []
            elif fallback is None:
                fallback = candidate, s
        if fallback is not None:
            return fallback[0], fallback[1], []
        return None, None, rejected
