"""ELF core files: the threads, signal, modules and memory of a crashed process.

``Core.open(path)`` has the native core read the file (``stackwalk._core.CoreFile``: the notes,
``NT_PRSTATUS`` per thread, ``NT_SIGINFO``, ``NT_PRPSINFO``, ``NT_AUXV``, ``NT_FILE``, and the
``PT_LOAD`` segments mapped zero-copy as the process memory), then finds each module's file on
disk and load bias, and sets up an ``Unwinder`` with every module found plus the vdso image from
the core's memory::

    core = Core.open("core.1234")
    for thread in core.threads:
        print(thread.tid, [hex(pc) for pc in thread.unwind().pcs])

Modules come from ``NT_FILE``; a core without it (qemu-user writes those) is read through the
dynamic linker's link map in its memory. A module whose file is not here, or whose DWARF is not,
is fetched by build id from the debuginfod servers of ``DEBUGINFOD_URLS``, several at once, into
debuginfod's cache (``stackwalk._core.debuginfod_fetch``), unless ``offline``. Cores of 64-bit
(x86_64, aarch64) and 32-bit (i386) processes are read. Build ids are read
from the module headers the core holds and compared with the files found; every doubt is a line
in ``core.warnings``. A debug file's compressed sections (zlib or zstd, 32 KiB and more), once
decompressed, and a large file's symbol table, once read, are kept by build id in
``$STACKWALK_CACHE_DIR`` (else ``~/.cache/stackwalk``; empty: none) for the processes after.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from stackwalk._core import (
    CoreFile,
    MinidumpFile,
    PerfMap,
    Symbolizer,
    Trace,
    debuginfod_fetch,
    debuginfod_urls,
    elf_summary,
    has_dwarf,
    place_mappings,
    shared_sps,
)
from stackwalk._finder import Identity, _file_id_text, _FileFinder, _named_as
from stackwalk._records import CoreModule, Signal, Thread, _is_crash, _signal_of, _ThreadNotes
from stackwalk._snapshot import document, module_dict, signal_dict
from stackwalk.errors import CoreError, ElfError, StackwalkError
from stackwalk.pyframes import Mode, python_file_name, read_python, with_python_frames
from stackwalk.unwinder import CRASH_STRATEGIES, MappedMemory, Unwinder

if TYPE_CHECKING:
    from stackwalk._core import _ElfSummary as ElfSummary  # the stub's alone

__all__ = ["Core", "CoreError", "CoreModule", "Signal", "Thread"]


_PF_X = 1


_AT_PHDR, _AT_ENTRY, _AT_EXECFN, _AT_SYSINFO_EHDR = 3, 9, 31, 33
_HEADER_IMAGE_LIMIT = 1 << 16  # bytes of a module's first mapping read for its headers
_ADDRESS_LIMIT = 1 << 64
_ELF_MAGIC = b"\x7fELF"
# Addresses from here up are the kernel's (x86_64's [vsyscall] page is dumped in cores).
_KERNEL_HALF = 1 << 56
DEBUG_ROOT = "/usr/lib/debug"  # where gdb and eu-stack look for separate debug files


# A PT_LOAD of the core: (start, end, p_flags).
_Segment = tuple[int, int, int]
# An NT_FILE entry: (start, end, file offset in bytes, path).
_Mapping = tuple[int, int, int, str]


class Core:
    """An ELF core file opened for unwinding; see the module docstring."""

    # Whether the source lists every mapping that holds code (a live process's maps do; a
    # core's segments may leave file-backed ones out).
    _code_mappings_known = False

    _FILE_KIND = "core"  # what messages call the file

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
        max_size: int | None = None,
        perf_map: str | os.PathLike[str] | None = None,
        offline: bool = False,
        progress: float | None = None,
    ) -> Core:
        """Read the core at ``path``. ``executable`` overrides the program file; ``sysroot``
        prefixes every module path; ``lib_search_path`` is searched by file name;
        ``debug_root`` is where separate debug files are looked for (by build id, and by
        ``.gnu_debuglink`` under it as well as next to each module): their ``.debug_frame``
        unwinds functions that ``.eh_frame`` lacks, their symbols name them;
        ``strategies`` are the ways each frame's caller is looked for, in order (CFI, then
        frame pointers, then stack scanning by default). A file whose build id differs from the
        one the core recorded is not used (as if missing, with a warning) unless
        ``allow_mismatch``; then the frames unwound through it are marked doubtful. A core
        compressed with zstd, xz, lz4 or gzip (told by its first bytes, whatever its name) is
        decompressed into memory, to at most ``max_size`` bytes (default 8 GiB): more is a
        CoreError, not a process that takes all the memory. A module whose file is missing here
        (or has no DWARF here) is fetched by build id from the debuginfod servers
        ``DEBUGINFOD_URLS`` names, into debuginfod's cache, unless ``offline`` (or
        ``STACKWALK_OFFLINE`` is set): then only files already in the cache are used. With
        ``progress`` (seconds), a bar of the downloads is drawn on stderr once they last that
        long."""
        return cls(
            path,
            executable,
            sysroot=sysroot,
            lib_search_path=lib_search_path,
            debug_root=debug_root,
            strategies=strategies,
            allow_mismatch=allow_mismatch,
            max_size=max_size,
            perf_map=perf_map,
            offline=offline,
            progress=progress,
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
        max_size: int | None = None,
        perf_map: str | os.PathLike[str] | None = None,
        offline: bool = False,
        progress: float | None = None,
    ) -> None:
        self.path = os.fspath(path)
        # A JIT's perf map (/tmp/perf-PID.map): the names of its code, outside every module.
        self.perf_map = os.fspath(perf_map) if perf_map is not None else None
        # The map read once, for the unwinder and the symbolizer (see _jit_map).
        self._perf_map_read: PerfMap | str | None = None
        self._allow_mismatch = allow_mismatch
        # Module path -> build id of the file found for it that differs from the core's.
        self._mismatched: dict[str, str | None] = {}
        # Module paths whose file is used although the core records nothing to check it by:
        # their frames, and those found through them, are doubtful.
        self._unverified: set[str] = set()
        self.debug_root = os.fspath(debug_root) if debug_root is not None else None
        # Files fetched from debuginfod: the servers asked (none: offline), and the executables
        # fetched, named in the output by the core's path, not by their cache entry.
        self._debuginfod = not offline and bool(debuginfod_urls())
        self._progress = progress
        self._fetched: set[str] = set()
        # CoreError if it is not a readable core
        core = self._core = self._open_source(max_size)
        self.warnings = core.warnings
        self.arch = core.arch
        self._segments: list[_Segment] = core.segments
        self.memory = core.memory
        self.pid = core.pid
        self.command_line = core.psargs
        self._fname = core.fname
        self._auxv: dict[int, int] = core.auxv
        self.unwinder = Unwinder(self.arch, strategies=tuple(strategies))
        # The main thread's walk looks no further than its argc (its scans would take the
        # entry point's address, in the auxiliary vector above, for a return address).
        self.unwinder.set_initial_stack(core.initial_stack)
        self._finder = _FileFinder(self.arch, sysroot, lib_search_path, self._readable_at)
        self._page = core.page_size
        self._vdso_image: bytes | None = None
        explicit = os.fspath(executable) if executable is not None else None
        modules, exe_module = self._find_modules(core.files, explicit)
        self.modules = sorted(modules, key=lambda m: m.start)
        self._add_jit_code()
        self.executable = exe_module.file if exe_module is not None else None
        if explicit is not None and exe_module is None:
            self.warnings.append(f"executable {explicit} not used: the core does not show where")
        self._set_threads(core.threads)
        # Each thread's stack (tid, start, end, sp): no scanned word in one is a return address,
        # nor is the program's entry point (see _walks for their live parts).
        self._thread_stacks = core.thread_stacks
        self.unwinder.set_process(
            self._auxv.get(_AT_ENTRY), [(*stack, None) for stack in self._thread_stacks]
        )

    # Where a module's file can be read now when its path cannot be used (a live process's
    # library deleted since it was mapped: /proc/PID/map_files/...): path -> file.
    _readable_at: dict[str, str] = {}

    def _open_source(self, max_size: int | None) -> CoreFile | MinidumpFile:
        """The file read: the source of the threads, memory and mappings."""
        return CoreFile(self.path, max_size)

    def _recorded_at(self, start: int | None) -> Identity | None:
        """What the source records of the module mapped at ``start`` where its ELF headers are
        not in its memory (a core's are, a minidump's module list has them)."""
        return None

    def _stand_ins(self) -> set[str]:
        """The files read in place of a module's path: /proc/PID/map_files/ links to libraries
        deleted since they were mapped, files fetched from debuginfod."""
        return set(self._readable_at.values()) | self._fetched

    def _jit_map(self) -> PerfMap | str | None:
        """The JIT's perf map, read once (a live JIT appends to it: the unwinder and the
        symbolizer see the same lines); its path where it cannot be read, for the symbolizer
        to say why."""
        if self._perf_map_read is None and self.perf_map is not None:
            try:
                self._perf_map_read = PerfMap(self.perf_map)
            except StackwalkError:
                self._perf_map_read = self.perf_map
        return self._perf_map_read

    def _add_jit_code(self) -> None:
        """Executable memory in no module (a JIT's code: node's, the JVM's) told to the
        unwinder as code without a file, so that a frame-pointer chain through it is followed,
        its return addresses taken for what they are, instead of scanned past. Only where the
        source lists the files mapped (NT_FILE, /proc/PID/maps): without that list, a file's
        code would pass for a JIT's."""
        if not self._core.files:
            return
        if self.perf_map is not None:
            # Where the JIT's functions start: a frame 0 in its code is taken for one that has
            # made no frame record only at a function's start (see rust/unwind/fallback/).
            map_or_path = self._jit_map()
            if isinstance(map_or_path, PerfMap):
                self.unwinder.set_perf_map(map_or_path)
        taken = [span for m in self.modules for span in m.spans]
        for start, end, flags in self._segments:
            if not flags & _PF_X or any(a < end and start < b for a, b in taken):
                continue
            if start >= _KERNEL_HALF:
                continue  # x86_64's [vsyscall] page: the kernel's, no JIT's
            try:
                self.unwinder.add_missing_module("[jit]", [(start, end)], [(start, end)], jit=True)
            except StackwalkError:
                pass  # over another piece of code: known already

    # -- threads and signal ----------------------------------------------------------------

    def walks(
        self, threads: Sequence[Thread], max_frames: int | None = None, registers: bool = False
    ) -> list[Trace]:
        """Each of ``threads``' walks, none going on into another thread's stack. Registers a
        runtime left behind (Go's saved contexts, a stack switch's CFI) can lead a walk into
        the frames of another thread still running there, where it takes that thread's frames
        for its own, by CFI: two walks then have frames at the same sp, which no two live
        threads can have. The walk of every thread is made; where two share a frame's sp, the
        stack is the one of the thread whose own sp is nearest below it, its live part that
        thread's frames (from its sp to its top frame's), and the other walks are made again,
        to end (``other_thread_stack``) where their sp enters it."""
        every = {t.tid: t.unwind(max_frames, registers=registers) for t in self.threads}
        owners: dict[int, int] = {}  # tid -> the top of its live stack
        intruders: set[int] = set()
        tids = list(every)
        word = 4 if self.arch == "i386" else 8
        for sp, indices in shared_sps(list(every.values())):
            sharing = [tids[i] for i in indices]
            # The stack is the one of the thread whose own sp is nearest below.
            below = [t for t in sharing if every[t].sps[0] <= sp]
            if not below:
                continue
            owner = max(below, key=lambda t: every[t].sps[0])
            owners[owner] = max(every[owner].sps) + word
            intruders.update(t for t in sharing if t != owner)
        if owners:
            stacks = [(tid, start, end, sp, owners.get(tid))
                      for tid, start, end, sp in self._thread_stacks]  # fmt: skip
            self.unwinder.set_process(self._auxv.get(_AT_ENTRY), stacks)
            for t in self.threads:
                if t.tid in intruders:
                    every[t.tid] = t.unwind(max_frames, registers=registers)
        return [every[t.tid] for t in threads]

    def _set_threads(self, raw: list[_ThreadNotes]) -> None:
        # The kernel writes the thread that dumped (took the signal) first; gdb the thread it
        # stopped in. The first thread with a signal that is not a stop signal crashed; a core
        # with none (gcore's, of a process that did not fault) has no crashing thread, and its
        # signal is the first thread's stop signal, if any.
        crashing = next((t for t in raw if _is_crash(_signal_of(t))), None)
        ordered = ([crashing] if crashing else []) + [t for t in raw if t is not crashing]
        self.threads = [
            Thread(tid, cursig, self.unwinder, self.memory, self._core, index)
            for tid, cursig, index, _ in ordered
        ]
        self.crashing_tid = crashing[0] if crashing else None
        self.signal = _signal_of(ordered[0]) if ordered else None

    # -- modules ---------------------------------------------------------------------------

    def _find_modules(
        self, files: list[_Mapping] | None, explicit: str | None
    ) -> tuple[list[CoreModule], CoreModule | None]:
        if files is not None:
            modules, exe = self._file_modules(files, explicit)
        else:
            modules, exe = self._link_map_modules(explicit)
        vdso = self._vdso(self._auxv.get(_AT_SYSINFO_EHDR))
        if vdso is not None:
            modules.append(vdso)
        return modules, exe

    def _header_summary(self, address: int) -> ElfSummary | None:
        """elf_summary of the ELF headers the core holds at ``address``, or None."""
        if not 0 <= address < _ADDRESS_LIMIT:
            return None
        image = self._core.image(address, _HEADER_IMAGE_LIMIT)
        if image is None or not image.startswith(_ELF_MAGIC):
            return None
        try:
            return elf_summary(image)
        except ElfError:
            return None

    def _segment_end(self, address: int) -> int | None:
        """The end of the PT_LOAD that holds ``address``."""
        return next((end for start, end, _ in self._segments if start <= address < end), None)

    def _read(self, address: int, size: int) -> bytes | None:
        """The ``size`` bytes at ``address``, or None where the core does not hold them all."""
        if size <= 0 or not 0 <= address <= _ADDRESS_LIMIT - size:
            return None
        return self.memory.read(address, size)

    def _file_modules(
        self, files: list[_Mapping], explicit: str | None
    ) -> tuple[list[CoreModule], CoreModule | None]:
        groups: dict[str, list[tuple[int, int, int]]] = {}
        for start, end, offset, path in files:
            groups.setdefault(path, []).append((start, end, offset))
        entry = self._auxv.get(_AT_ENTRY)
        code = [(start, end) for start, end, flags in self._segments if flags & _PF_X]

        def holds_code(maps: list[tuple[int, int, int]]) -> bool:
            return any(start < b and a < end for start, end, _ in maps for a, b in code)

        if self._code_mappings_known:
            # Where the source lists every mapping that holds code, a file none of whose
            # mappings does is mapped as data (a symbolizer or debugger reading a library or a
            # program through mmap, a locale archive): no module, whose symbols (an
            # interpreter's _PyRuntime) would be taken for the loaded ones'.
            groups = {path: maps for path, maps in groups.items() if holds_code(maps)}
        modules: list[CoreModule] = []
        exe: CoreModule | None = None
        # Every module's file is looked for here first, then those missing fetched at once.
        located = []
        named_seen = False
        for path, maps in groups.items():
            first = min((start for start, _, offset in maps if offset == 0), default=None)
            in_core = self._header_summary(first) if first is not None else None
            named_exe = entry is None and not named_seen and _named_as(path, explicit, self._fname)
            named_seen |= named_exe
            holds_entry = entry is not None and any(a <= entry < b for a, b, _ in maps)
            recorded = self._recorded_at(first)
            file, on_disk, rejected = self._locate(
                path, in_core, explicit if holds_entry or named_exe else None, recorded
            )
            located.append((path, maps, in_core, named_exe, file, on_disk, rejected, recorded))
        fetched = self._fetch(
            [(path, in_core, file) for path, _, in_core, _, file, _, _, _ in located]
        )
        for (path, maps, in_core, named_exe, file, on_disk, rejected, recorded), got in zip(
            located, fetched, strict=True
        ):
            if got is not None:
                file, on_disk, rejected = got, self._finder.summary(got), []
            if on_disk is None:
                # Without ELF headers in the core, nor an ELF file, it is a module only if it
                # held code (else a data file: locale archive, font, database...).
                if in_core is None and not rejected and not holds_code(maps):
                    continue
                self._not_found(path, rejected)
            summary = in_core or on_disk
            placements = place_mappings(
                summary["loads"] if summary else [],
                maps,
                self._page,
                code,
            )
            for bias, ranges in placements:
                start, end = ranges[0][0], ranges[-1][1]
                if entry is not None:
                    is_exe = any(a <= entry < b for a, b in ranges)
                else:  # the first file named as the executable given, or as the process
                    is_exe = named_exe and exe is None
                module = self._module(
                    path, file, start, end, bias, in_core, on_disk, tuple(ranges), recorded
                )
                modules.append(module)
                if is_exe:
                    exe = module
        return modules, exe

    def _link_map_modules(self, explicit: str | None) -> tuple[list[CoreModule], CoreModule | None]:
        found = self._link_map_executable(explicit)
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
        dynamic = summary["dynamic"] + exe.bias
        entries: list[tuple[str | None, int, int]] = []
        if 0 <= dynamic < _ADDRESS_LIMIT:
            entries, warnings = self._core.link_map(dynamic)
            self.warnings.extend(warnings)
        else:
            self.warnings.append(
                f"link map: cannot read the executable's dynamic section at {dynamic:#x}"
            )
        vdso = self._auxv.get(_AT_SYSINFO_EHDR)
        vdso_end = self._segment_end(vdso) if vdso else None
        # The dynamic linker's own name is the executable's PT_INTERP.
        interpreter = summary["interpreter"] if exe.file else None
        for name, bias, dynamic in entries:
            if vdso and vdso_end and vdso <= dynamic < vdso_end:
                continue  # the vdso's own entry: its image is read from the core below
            if name is None:  # the dynamic linker's, pointing into the executable's .interp
                name, interpreter = interpreter, None
            if name is None:
                self.warnings.append(f"link map: cannot read the name of the module at {bias:#x}")
                continue
            in_core = self._header_summary(bias)
            file, on_disk, rejected = self._locate(name, in_core, None)
            (got,) = self._fetch([(name, in_core, file)])
            if got is not None:
                file, on_disk, rejected = got, self._finder.summary(got), []
            if on_disk is not None:
                start, end = self._load_range(on_disk, bias)
                if in_core is None:
                    in_core = self._header_summary(start)
            elif in_core is not None:
                start, end = self._load_range(in_core, bias)
            else:
                start, end = bias, self._segment_end(dynamic) or bias
            if on_disk is None:
                self._not_found(name, rejected)
            modules.append(self._module(name, file, start, end, bias, in_core, on_disk))
        return modules, exe

    def _link_map_executable(
        self, explicit: str | None
    ) -> tuple[CoreModule, ElfSummary | None] | None:
        """The executable's module and ELF summary (None: neither its file nor its headers)."""
        execfn = self._auxv.get(_AT_EXECFN)
        name = (self._core.string(execfn) if execfn else None) or self._fname or explicit
        if name is None:
            self.warnings.append("cannot tell the executable: no AT_EXECFN and no NT_PRPSINFO")
            return None
        entry = self._auxv.get(_AT_ENTRY)
        phdr = self._auxv.get(_AT_PHDR)
        in_core = self._header_summary(phdr - phdr % self._page) if phdr else None
        file, on_disk, rejected = self._locate(name, in_core, explicit)
        (got,) = self._fetch([(name, in_core, file)])
        if got is not None:
            file, on_disk, rejected = got, self._finder.summary(got), []
        if on_disk is None:
            self._not_found(name, rejected)
        summary = on_disk or in_core
        if summary is None:
            # Only its place is known: the mapping that holds the entry point.
            segment = None
            if entry is not None:
                segment = next((s for s in self._segments if s[0] <= entry < s[1]), None)
            if segment is None:
                return None
            start, end, _ = segment
            return self._module(name, None, start, end, start), None
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

    def _load_range(self, summary: ElfSummary, bias: int) -> tuple[int, int]:
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
        image = self._read(address, end - address)
        if image is None:
            self.warnings.append(f"vdso at {address:#x} is not in the {self._FILE_KIND}")
            return None
        try:
            summary = elf_summary(image)
            low = min((vaddr for vaddr, *_ in summary["loads"]), default=0)
            bias = address - (low - low % self._page)
            self.unwinder.add_module_image("[vdso]", image, bias)
        except StackwalkError as e:  # not ELF, another arch, or over another module
            self.warnings.append(f"vdso at {address:#x} unusable: {e}")
            return None
        self._vdso_image = image
        return CoreModule("[vdso]", None, address, end, bias, summary["build_id"], None, True)

    def _locate(
        self,
        path: str,
        in_core: ElfSummary | None,
        explicit: str | None,
        recorded: Identity | None = None,
    ) -> tuple[str | None, ElfSummary | None, list[str]]:
        """(the file for module ``path``, its summary, why ELF candidates were rejected). A
        file whose identity differs from the one the core records is not used (eu-stack does
        the same; a file given by name, ``explicit``, too), unless the core was opened with
        ``allow_mismatch``; either way it is a warning. A file found (not given) where the core
        records no identity to check it by is a warning too, and the frames through it are
        doubtful."""
        want = recorded
        if in_core is not None:
            want = Identity(in_core["build_id"], "build_id") if in_core["build_id"] else None
        file, summary, rejected = self._finder.find(path, want, explicit)
        if file is None or summary is None:
            return file, summary, rejected
        if want is None:
            if explicit is None:  # (a file given by name is the user's word)
                self._unverified.add(path)
                self.warnings.append(
                    f"{path}: the {self._FILE_KIND} records no identity (build id) to check "
                    f"{file} by; used, its frames doubtful"
                )
        elif not want.matches(summary):
            # A file without a build id cannot be the module whose build id the core recorded.
            self._mismatched[path] = summary["build_id"]
            use = self._allow_mismatch
            kind = "build-id" if want.kind != "guid" else "debug-id"
            self.warnings.append(
                f"{kind} mismatch for {path}: {self._FILE_KIND} has {want}, {file} has "
                f"{_file_id_text(summary, want)}; "
                f"{'using it anyway' if use else 'not used (--allow-mismatch uses it)'}"
            )
            if not use:
                return None, None, [f"{file} has another build id"]
        return file, summary, rejected

    def _fetch(
        self, modules: Sequence[tuple[str, ElfSummary | None, str | None]]
    ) -> list[str | None]:
        """For each (module path, its headers in the core, the file found for it here): the
        executable fetched from debuginfod by its build id where no file was found (else None);
        and the DWARF of every module without it here, into debuginfod's cache, where the
        lookups of lines and debug files find it. Several downloads at once; each file that no
        server gave is a warning."""
        out: list[str | None] = [None] * len(modules)
        if not self._debuginfod:
            return out
        ids = [in_core["build_id"] if in_core else None for _, in_core, _ in modules]
        wanted = [i for i, (_, _, file) in enumerate(modules) if ids[i] and file is None]
        for i, (path, error) in zip(
            wanted, self._ask([ids[i] for i in wanted], "executable"), strict=True
        ):
            if path is not None and self._finder.summary(path) is not None:
                out[i] = path
                self._fetched.add(path)
            else:
                why = error or f"{path} is not an ELF file of this architecture"
                self.warnings.append(f"debuginfod: no executable for {modules[i][0]}: {why}")
        if self.debug_root is not None:  # None: no debug files looked for
            files = [out[i] or modules[i][2] for i in range(len(modules))]
            wanted = [
                i
                for i, file in enumerate(files)
                if ids[i] and file is not None and not has_dwarf(file, self.debug_root)
            ]
            for i, (path, error) in zip(
                wanted, self._ask([ids[i] for i in wanted], "debuginfo"), strict=True
            ):
                if path is None:
                    self.warnings.append(f"debuginfod: no debuginfo for {modules[i][0]}: {error}")
        return out

    def _ask(self, build_ids: list[str | None], kind: str) -> list[tuple[str | None, str | None]]:
        requests = [(b, kind) for b in build_ids if b]
        return debuginfod_fetch(requests, progress=self._progress) if requests else []

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
        in_core: ElfSummary | None = None,
        on_disk: ElfSummary | None = None,
        ranges: tuple[tuple[int, int], ...] = (),
        recorded: Identity | None = None,
    ) -> CoreModule:
        if file is not None:
            try:
                self.unwinder.add_module(
                    file, bias, ranges=ranges or None, debug_root=self.debug_root
                )
            except StackwalkError as e:  # not ELF, another arch, or over another module
                self.warnings.append(f"module {path}: {e}")
                file, on_disk = None, None
        module = CoreModule(
            path=path,
            file=file,
            start=start,
            end=end,
            bias=bias,
            build_id=in_core["build_id"] if in_core else recorded.build_id if recorded else None,
            file_build_id=on_disk["build_id"] if on_disk else self._mismatched.get(path),
            found=file is not None,
            ranges=ranges,
        )
        if file is None:
            sym_file = self._sym_file(module)
            sym = (sym_file, start) if sym_file is not None else None
            self._add_missing(path, module.spans, bias, in_core, sym)
        return module

    def _add_missing(
        self,
        path: str,
        spans: tuple[tuple[int, int], ...],
        bias: int,
        in_core: ElfSummary | None,
        sym: tuple[str, int] | None = None,
    ) -> None:
        """Tell the unwinder where a module without a file has code -- its executable segments
        as the headers in the core place them, else the core's executable segments within it
        (gdb's gcore leaves unmodified file pages out) -- so that a return address into it is
        accepted, and the walk goes on past it by frame pointers or scanning, instead of
        dropping a right frame for lying in no module. A Breakpad symbol file's ``STACK CFI``
        records (``sym``: the file, and the address its offsets are from, the module's start)
        unwind it where they cover a pc."""
        page = self._page
        segments = [
            (vaddr + bias, vaddr + bias + memsz)
            for vaddr, memsz, _, _, flags in (in_core["loads"] if in_core else ())
            if flags & _PF_X and memsz
        ] or [(start, end) for start, end, flags in self._segments if flags & _PF_X]
        code = [
            (max(a, start - start % page), min(b, -(-end // page) * page))
            for a, b in spans
            for start, end in segments
            if start < b and a < end
        ]
        # A damaged core can place a module past the end of the address space.
        spans = tuple((a, b) for a, b in spans if 0 <= a < b < _ADDRESS_LIMIT)
        code = [(a, b) for a, b in code if 0 <= a < b < _ADDRESS_LIMIT]
        if code and spans:
            try:
                self.unwinder.add_missing_module(path, spans, code, *(sym or ()))
            except StackwalkError:
                pass  # over a module that has a file: that one is kept

    def _sym_file(self, module: CoreModule) -> str | None:
        """A Breakpad symbol file for the names and lines the module's file lacks (cores: none)."""
        return None

    # -- output ----------------------------------------------------------------------------

    def to_dict(
        self,
        max_frames: int | None = None,
        *,
        end_details: bool = True,
        inline: bool = True,
        tids: Collection[int] | None = None,
        python: Mode = "native",
        registers: bool = False,
    ) -> dict[str, Any]:
        """The JSON document of ``stackwalk core --json``, the snapshot document of
        docs/json.md (``stackwalk._snapshot``): every thread unwound and symbolized, with
        source lines from DWARF. Each thread has its ``end_detail`` (where and why its walk
        stopped) unless ``end_details`` is False.
        ``inline``: the functions inlined at a frame's pc are frames of their own, before it
        (``max_frames`` counts the others). ``tids``: only these threads. ``python``: for a
        python process, "mixed" puts its Python frames after the native eval call that runs
        them, "python" shows them alone (see ``stackwalk.pyframes``); every frame then has
        its ``kind``, each thread ``gil`` (whether it holds the GIL), and the document
        ``python`` (the interpreter's version, or why its frames could not be read). A
        process that is not python's gets the document it gets with "native". ``registers``:
        each frame (not an inlined function's) gets its ``registers`` as the walk recovered
        them (``Trace.registers``: name -> hex value)."""
        pystate = None
        if python != "native" and any(m.found and python_file_name(m.path) for m in self.modules):
            pystate = read_python(self)
        by_tid = {t.tid: t for t in pystate.threads} if pystate is not None else {}
        symbolizer = Symbolizer(
            (
                # Symbols from the file used, never from a file that was rejected (another
                # build in the module's place: its names would be confident and wrong).
                (
                    # A file read through /proc/PID/map_files/, or fetched from debuginfod,
                    # is named by its mapped path.
                    m.path if m.file in self._stand_ins() else (m.file or m.path),
                    start,
                    end,
                    m.bias,
                    m.found and (m.path in self._mismatched or m.path in self._unverified),
                    m.file,
                    self._sym_file(m),
                )
                for m in self.modules
                for start, end in m.spans
            ),
            {"[vdso]": self._vdso_image} if self._vdso_image is not None else None,
            debug_root=self.debug_root,
            perf_map=self._jit_map(),
        )
        threads = []
        chosen = [t for t in self.threads if tids is None or t.tid in tids]
        for thread, trace in zip(chosen, self.walks(chosen, max_frames, registers), strict=True):
            entry: dict[str, Any] = {
                "tid": thread.tid,
                "end": trace.end,
                "frames": symbolizer.frame_dicts(trace, inline=inline),
            }
            if registers:
                _add_registers(entry["frames"], trace)
            if pystate is not None:
                pythread = by_tid.get(thread.tid)
                entry["frames"] = with_python_frames(entry["frames"], pythread, python)
                entry["gil"] = pythread is not None and pythread.holds_gil
                if pythread is not None and pythread.stop is not None:
                    entry["python_stop"] = pythread.stop
            if end_details:
                entry["end_detail"] = trace.end_detail
            threads.append(entry)
        extra: dict[str, Any] = {}
        if pystate is not None:
            extra["python"] = {
                "module": pystate.module,
                "version": pystate.version,
                "warnings": list(pystate.warnings),
                "error": pystate.error,
            }
        return document(
            self._SNAPSHOT_KIND,
            self._snapshot_path(),
            arch=self.arch,
            executable=self.executable,
            pid=self.pid,
            signal=signal_dict(self.signal),
            crashing_thread=self.crashing_tid,
            modules=[module_dict(m) for m in self.modules],
            threads=threads,
            **extra,
        )

    _SNAPSHOT_KIND = "core"  # the document's "kind" (docs/json.md)

    def _snapshot_path(self) -> str | None:
        """The document's "path": the file read."""
        return self.path

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.path!r}, arch={self.arch!r}, pid={self.pid}, "
            f"threads={len(self.threads)}, modules={len(self.modules)})"
        )


def _add_registers(frames: list[dict[str, Any]], trace: Trace) -> None:
    """Each frame's registers into its JSON object: the k-th frame that is not an inlined
    function's is the trace's frame k."""
    own = (d for d in frames if not d["inline"])
    for index, d in enumerate(own):
        d["registers"] = {name: f"{value:#x}" for name, value in trace.registers(index).items()}
