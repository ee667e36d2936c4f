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
debuginfod's cache (``rust/space/snapshot/``), unless ``offline``. Cores of 64-bit
(x86_64, aarch64) and 32-bit (i386) processes are read. Build ids are read
from the module headers the core holds and compared with the files found; every doubt is a line
in ``core.warnings``. A debug file's compressed sections (zlib or zstd, 32 KiB and more), once
decompressed, and a large file's symbol table, once read, are kept by build id in
``$STACKWALK_CACHE_DIR`` (else ``~/.cache/stackwalk``; empty: none) for the processes after.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stackwalk._core import (
    CaptureFile,
    CoreFile,
    Document,
    MinidumpFile,
    PerfMap,
    SymbolizedFrame,
    Symbolizer,
    Trace,
)
from stackwalk._records import CoreModule, Signal, Thread
from stackwalk.errors import CoreError, StackwalkError
from stackwalk.pyframes import (
    Mode,
    PythonFrame,
    PythonState,
    PythonThread,
    python_file_name,
    read_python,
    with_python_frames,
)
from stackwalk.unwinder import CRASH_STRATEGIES, MappedMemory, Unwinder

if TYPE_CHECKING:
    from stackwalk._core import _DocumentModule, _SnapshotKind  # the stub's alone

__all__ = ["Core", "CoreError", "CoreModule", "Signal", "Thread"]


_AT_ENTRY = 9
DEBUG_ROOT = "/usr/lib/debug"  # where gdb and eu-stack look for separate debug files


class Core:
    """An ELF core file opened for unwinding; see the module docstring."""

    # Whether the source lists every mapping that holds code (a live process's maps do; a
    # core's segments may leave file-backed ones out).
    _code_mappings_known = False

    _FILE_KIND = "core"  # what messages call the file
    # Whether the process ran on this machine (a live one's snapshot): its CPU count is ours.
    _ran_here = False

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
        self.debug_root = os.fspath(debug_root) if debug_root is not None else None
        # CoreError if it is not a readable core
        core = self._core = self._open_source(max_size)
        if self.perf_map is None:
            self.perf_map = _mapped_jitdump(core.files)
        self.warnings = core.warnings
        self.arch = core.arch
        self.memory = core.memory
        self.pid = core.pid
        self.command_line = core.psargs
        self._auxv: dict[int, int] = core.auxv
        self.unwinder = Unwinder(self.arch, strategies=tuple(strategies))
        # The main thread's walk looks no further than its argc (its scans would take the
        # entry point's address, in the auxiliary vector above, for a return address).
        self.unwinder.set_initial_stack(core.initial_stack)
        map_or_path = self._jit_map()
        if isinstance(map_or_path, PerfMap) and core.files:
            # Where the JIT's functions start: a frame 0 in its code is taken for one that has
            # made no frame record only at a function's start (see rust/unwind/fallback/).
            self.unwinder.set_perf_map(map_or_path)
        explicit = os.fspath(executable) if executable is not None else None
        # The modules found, checked and placed into the unwinder (rust/space/snapshot/).
        modules, exe, self._vdso_image, warnings = core.address_space(
            self.unwinder,
            {
                "executable": explicit,
                "sysroot": os.fspath(sysroot) if sysroot is not None else None,
                "search": [os.fspath(d) for d in lib_search_path or ()],
                "stand_ins": self._readable_at,
                "debug_root": self.debug_root,
                "allow_mismatch": allow_mismatch,
                "fetch": not offline,
                "progress": progress,
                "code_mappings_known": self._code_mappings_known,
                "kind": self._FILE_KIND,
                "symbols_path": list(self.symbols_path),
                "symbols_url": list(self.symbols_url),
            },
        )
        self.warnings.extend(warnings)
        self.modules = [CoreModule(*m[:8], tuple(m[8]), m[11]) for m in modules]
        # Paths of the modules whose frames are doubtful (another build's file, or nothing
        # recorded to check it by), and of those whose file stands in for their path (read
        # through /proc/PID/map_files/, fetched from debuginfod): named by the path.
        self._doubtful = {m[0] for m in modules if m[9]}
        self._named_by_path = {m[0] for m in modules if m[10]}
        # The program's file, named by its path where another file stands in for it.
        self.executable = None
        self._executable_index = exe
        if exe is not None:
            program = self.modules[exe]
            named = program.path in self._named_by_path
            self.executable = program.path if named else program.file
        # The crashing thread first (rust/source/signal.rs).
        self.threads = [
            Thread(tid, cursig, self.unwinder, self.memory, core, index)
            for tid, cursig, index in core.threads
        ]
        self.crashing_tid = core.crashing_tid
        self.signal = Signal(*core.signal) if core.signal is not None else None
        # Each thread's stack (tid, start, end, sp): no scanned word in one is a return address,
        # nor is the program's entry point (see _walks for their live parts).
        self._thread_stacks = core.thread_stacks
        self.unwinder.set_process(
            self._auxv.get(_AT_ENTRY), [(*stack, None) for stack in self._thread_stacks]
        )

    # Where a module's file can be read now when its path cannot be used (a live process's
    # library deleted since it was mapped: /proc/PID/map_files/...): path -> file.
    _readable_at: dict[str, str] = {}
    # Breakpad symbol stores (``NAME/DEBUGID/NAME.sym``), searched in order, then symbol
    # servers (URLs of stores over HTTP): a minidump's (``Minidump.open``), none for a core.
    symbols_path: tuple[str, ...] = ()
    symbols_url: tuple[str, ...] = ()

    def _open_source(self, max_size: int | None) -> CoreFile | MinidumpFile | CaptureFile:
        """The file read: the source of the threads, memory and mappings."""
        return CoreFile(self.path, max_size)

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
        every = self.unwinder.walk_threads(
            self.threads,
            self.memory,
            self._thread_stacks,
            self._auxv.get(_AT_ENTRY),
            max_frames,
            registers,
        )
        by_tid = {t.tid: trace for t, trace in zip(self.threads, every, strict=True)}
        return [by_tid[t.tid] for t in threads]

    # -- output ----------------------------------------------------------------------------

    def document(
        self,
        max_frames: int | None = None,
        *,
        end_details: bool = True,
        inline: bool = True,
        tids: Collection[int] | None = None,
        python: Mode = "native",
        registers: bool = False,
    ) -> Document:
        """The snapshot document of docs/json.md (``stackwalk._core.Document``: ``json()``
        is ``stackwalk core --json``'s, ``text()`` its report): every thread unwound and
        symbolized, with source lines from DWARF. Each thread has its ``end_detail`` (where
        and why its walk stopped) unless ``end_details`` is False.
        ``inline``: the functions inlined at a frame's pc are frames of their own, before it
        (``max_frames`` counts the others). ``tids``: only these threads. ``python``: for a
        python process, "mixed" puts its Python frames after the native eval call that runs
        them, "python" shows them alone (see ``stackwalk.pyframes``); every frame then has
        its ``kind``, each thread ``gil`` (whether it holds the GIL), and the document
        ``python`` (the interpreter's version, or why its frames could not be read). A
        process that is not python's gets the document it gets with "native". ``registers``:
        each frame (not an inlined function's) gets its ``registers`` as the walk recovered
        them (``Trace.registers``: name -> hex value)."""
        doc, added = self._document(max_frames, end_details=end_details, inline=inline,
                                    tids=tids, python=python, registers=registers)  # fmt: skip
        for _ in added:
            pass
        return doc

    def to_minidump(
        self,
        path: str | os.PathLike[str],
        *,
        stack_bytes: int = 256 * 1024,
        around: int = 256,
        time: int = 0,
    ) -> int:
        """Write the process as a minidump at ``path`` (as Crashpad's Linux writer would have
        from it: see rust/source/corefile/dump.rs): every thread's registers and at most
        ``stack_bytes`` of its stack from its sp up, ``around`` bytes around each pc and each
        register pointing into the memory the core holds, the modules (the program first) with
        their build ids as the core recorded them (else as their file has it, where the file
        was found and matches), the signal, and the Linux maps, status, command line and auxv
        streams; ``time``: when the crash happened (seconds since 1970; 0: not recorded). The
        dump's size in bytes. StackwalkError where it cannot be written, or for a minidump."""
        if not isinstance(self._core, CoreFile):
            raise StackwalkError(f"{self.path}: only a core or a process is written as a minidump")
        order = sorted(range(len(self.modules)), key=lambda i: i != self._executable_index)
        modules = [self._minidump_module(self.modules[i]) for i in order]
        # The stacks the walks went through (past a handler on an alternate signal stack, the
        # thread's own), so that the dump gives the frames the core gives.
        sps = sorted({sp for thread in self.threads for sp in thread.unwind().sps})
        return self._core.write_minidump(
            os.fspath(path), modules, stack_bytes, around, time, self._cpus(), sps
        )

    def _cpus(self) -> int:
        """The CPUs a minidump records (0: not known; at most 255, its field's)."""
        return min(os.cpu_count() or 0, 255) if self._ran_here else 0

    def _minidump_module(self, m: CoreModule) -> tuple[str, int, int, bytes | None, str | None]:
        """A module as a minidump lists it: (name, start, end, build id, the file used: where
        the permissions of mappings the core has no segment for are read); the vdso by the
        name Breakpad's and Crashpad's writers give it."""
        trusted = m.found and m.path not in self._doubtful
        build_id = m.build_id or (m.file_build_id if trusted else None)
        name = "linux-gate.so" if m.path == "[vdso]" else m.path
        file = m.file if trusted and m.path != "[vdso]" else None
        return name, m.start, m.end, bytes.fromhex(build_id) if build_id else None, file

    def to_dict(self, max_frames: int | None = None, **options: Any) -> dict[str, Any]:
        """``document(max_frames, **options)``'s JSON document as Python values, each thread's
        made as it is walked (a core of many threads is never held twice)."""
        doc, added = self._document(max_frames, **options)
        threads = [doc.take_thread() for _ in added]
        out = doc.to_dict()
        out["threads"] = threads
        return out

    def _document(
        self,
        max_frames: int | None = None,
        *,
        end_details: bool = True,
        registers: bool = False,
        **walks: Any,
    ) -> tuple[Document, Iterator[None]]:
        """The document without its threads, and what adds them to it, one thread a step
        (``document()``'s options; ``walks``: ``_stacks``')."""
        stacks, pystate = self._stacks(max_frames, registers=registers, **walks)
        doc = self.empty_document()
        if pystate is not None:
            doc.set_python(pystate.module, pystate.version, list(pystate.warnings), pystate.error)

        def added() -> Iterator[None]:
            for stack in stacks:
                trace, pythread = stack.trace, stack.python
                doc.add_thread(
                    stack.thread.tid,
                    trace.end,
                    stack.frames,
                    end_detail=trace.end_detail if end_details else None,
                    trace=trace if registers else None,
                    gil=None if pystate is None else pythread is not None and pythread.holds_gil,
                    python_stop=pythread.stop if pythread is not None else None,
                )
                yield

        return doc, added()

    def empty_document(self) -> Document:
        """The snapshot document of this snapshot with no thread yet (``document()`` adds
        them; ``stackwalk unwind --baseline`` adds the walk of another unwinder)."""
        sig = self.signal
        return Document(
            self._SNAPSHOT_KIND,
            self.arch,
            path=self._snapshot_path(),
            executable=self.executable,
            pid=self.pid,
            signal=(sig.number, sig.name, sig.address) if sig is not None else None,
            crashing_thread=self.crashing_tid,
            modules=[self._module_entry(m) for m in self.modules],
            **self._particular(),
        )

    def _module_entry(self, m: CoreModule) -> _DocumentModule:
        ids = self._module_ids(m)
        spans = list(m.spans)
        return (m.path, m.start, m.end, spans, m.bias, m.build_id, m.found, m.build_id_matches, ids)

    def _module_ids(self, m: CoreModule) -> tuple[str | None, str | None, str | None] | None:
        """A module's Breakpad ids for the document (a minidump's)."""
        return None

    def _particular(self) -> dict[str, Any]:
        """What this kind of snapshot's document says besides (``Document``'s keywords)."""
        return {}

    def _stacks(
        self,
        max_frames: int | None = None,
        *,
        inline: bool = True,
        tids: Collection[int] | None = None,
        python: Mode = "native",
        registers: bool = False,
    ) -> tuple[Iterator[Stack], PythonState | None]:
        """Each thread's (of ``tids``, else all) walk and the frames a report shows of it
        (``to_dict``'s options), named one thread at a time as they are taken (a core of
        thousands of threads never holds them all named at once), and the interpreter's state
        where Python frames were asked for and the process is python's."""
        pystate = None
        if python != "native" and any(m.found and python_file_name(m.path) for m in self.modules):
            pystate = read_python(self)
        by_tid = {t.tid: t for t in pystate.threads} if pystate is not None else {}
        symbolizer = self._symbolizer()
        chosen = [t for t in self.threads if tids is None or t.tid in tids]
        walks = self.walks(chosen, max_frames, registers)

        def stacks() -> Iterator[Stack]:
            for thread, trace in zip(chosen, walks, strict=True):
                native = symbolizer.frames(trace, inline=inline)
                pythread = by_tid.get(thread.tid)
                frames: list[SymbolizedFrame | PythonFrame] = list(native)
                if pystate is not None:
                    frames = with_python_frames(native, pythread, python)
                yield Stack(thread, trace, frames, pythread)

        return stacks(), pystate

    def _symbolizer(self) -> Symbolizer:
        """The modules placed, for naming frames."""
        return Symbolizer(
            (
                # Symbols from the file used, never from a file that was rejected (another
                # build in the module's place: its names would be confident and wrong).
                (
                    # A file read through /proc/PID/map_files/, or fetched from debuginfod,
                    # is named by its mapped path.
                    m.path if m.path in self._named_by_path else (m.file or m.path),
                    start,
                    end,
                    m.bias,
                    m.found and m.path in self._doubtful,
                    m.file,
                    m.sym_file,
                )
                for m in self.modules
                for start, end in m.spans
            ),
            {"[vdso]": self._vdso_image} if self._vdso_image is not None else None,
            debug_root=self.debug_root,
            perf_map=self._jit_map(),
        )

    _SNAPSHOT_KIND: _SnapshotKind = "core"  # the document's "kind" (docs/json.md)

    def _snapshot_path(self) -> str | None:
        """The document's "path": the file read."""
        return self.path

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.path!r}, arch={self.arch!r}, pid={self.pid}, "
            f"threads={len(self.threads)}, modules={len(self.modules)})"
        )


@dataclass(frozen=True, slots=True)
class Stack:
    """A thread's walk and the frames a report shows of it: native ones (``SymbolizedFrame``:
    numbers as numbers), with a python process's ``PythonFrame``s among them where asked for
    (``python`` its interpreter thread, if it has one)."""

    thread: Thread
    trace: Trace
    frames: list[SymbolizedFrame | PythonFrame]
    python: PythonThread | None


def _mapped_jitdump(files: list[tuple[int, int, int, str]] | None) -> str | None:
    """The jitdump the process mapped (``jit-PID.dump``: a JIT maps it executable so that perf
    records where it is, as CPython 3.13's ``-X perf_jit`` does), if it is still there: the
    names of the JIT's code and their unwind tables."""
    for _, _, _, path in files or ():
        if re.fullmatch(r"jit-\d+\.dump", os.path.basename(path)) and os.path.isfile(path):
            return path
    return None
