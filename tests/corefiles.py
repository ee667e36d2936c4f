"""Helpers of the core-file tests: crash programs, real core files made at test time, and the
independent references read from them (eu-stack, eu-unstrip, eu-readelf, gdb, nm).

x86_64 cores: the program runs under gdb to its crash and gdb writes the core
(``generate-core-file``), so the machine's core settings (``ulimit -c``, ``core_pattern``) do not
matter. gdb then reads the core back for its backtrace of every thread.

i386 cores: programs cross-built with Debian's ``i686-linux-gnu-gcc`` (``gcc-multilib`` conflicts
with the aarch64 cross compiler) run natively on the x86_64 kernel -- static ones, and a
dynamically linked one whose interpreter and run path are the cross libc's
(``/usr/i686-linux-gnu/lib``) -- and gdb writes their cores as for x86_64: ELFCLASS32 cores with
the kernel's 32-bit note layouts. eu-stack reads them (so it is the reference, as for x86_64), and
gdb agrees. (Under qemu-i386, gdb's live view finds no shared library through qemu's gdb stub, so
there is no i386 counterpart of the aarch64 cores below.)

aarch64 cores: the cross-built program runs under ``qemu-aarch64 -g PORT``; ``gdb-multiarch``
attaches to qemu's gdb stub, lets the program run to its crash, records its backtrace of every
thread there, and continues, so that qemu writes the guest's core (``qemu_<prog>_<...>.core`` in
qemu's working directory; ``ulimit -c unlimited`` is set for it). gdb's live view is the reference
for these cores: eu-stack finds no module at all in qemu's cores (they have no ``NT_FILE``, and a
static executable has no link map either), so it falls back to following frame pointers, and gdb
cannot relocate a position-independent executable from such a core (qemu does not dump the
executable's first page, where gdb looks for the program headers). A directory named ``core``
in qemu's working directory stops the kernel from also writing a core of qemu itself (qemu
re-raises the signal after writing the guest's core; with the usual ``core_pattern`` of
``core`` the kernel cannot replace a directory).

ARM32 cores: the same, under ``qemu-arm``, programs cross-built with Debian's
``arm-linux-gnueabihf-gcc`` (ARM and Thumb-2 code; Debian's armhf libraries are Thumb-2, unwound
by their ``.ARM.exidx`` tables).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from elftools.elf.segments import NoteSegment
from realstacks import PROGRAM_ENV, PROGRAMS, SYSTEM_PYTHON, Builder, gdb_driver

AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"
ARM_GCC = "arm-linux-gnueabihf-gcc"
ARM_SYSROOT = "/usr/arm-linux-gnueabihf"
# The sysroot and qemu of each architecture whose programs run under qemu.
QEMU = {"aarch64": (AARCH64_SYSROOT, "qemu-aarch64"), "arm": (ARM_SYSROOT, "qemu-arm")}
I386_GCC = "i686-linux-gnu-gcc"
I386_SYSROOT = "/usr/i686-linux-gnu"
# A dynamically linked i386 program that runs natively: the cross libc's loader and libraries.
I386_NATIVE_DYNAMIC = (f"-Wl,--dynamic-linker={I386_SYSROOT}/lib/ld-linux.so.2",
                       f"-Wl,-rpath,{I386_SYSROOT}/lib")  # fmt: skip
O2 = ("-O2", "-fomit-frame-pointer")
# clang's 32-bit ARM programs, linked by the cross gcc's linker against its libraries.
ARM_CLANG = ("--target=arm-linux-gnueabihf", "-march=armv7-a")
# Every program runs with this environment (gdb passes its own environment on). One malloc arena
# keeps threads from reserving 64 MiB each, which gdb would write into the core.
CRASH_ENV = {**PROGRAM_ENV, "MALLOC_ARENA_MAX": "1"}
GDB_EARLY = ("set debuginfod enabled off", "set auto-load off", "set pagination off")
# Programs run with a 1 MiB stack limit (which is also each thread's stack size, and qemu's
# guest stack): the cores hold every thread's whole stack, and they stay small.
SMALL_STACKS = 'ulimit -s 1024; exec "$@"'

TIMEOUT = 120
VDSO_ATTEMPTS = 8
# The vdso's names in eu-unstrip's and eu-stack's listings (its DT_SONAME): 64-bit, 32-bit x86.
EU_VDSO = frozenset({"linux-vdso.so.1", "linux-gate.so.1"})
# Where the distribution's separate debug files are, by build id (libc6-dbg, python3-dbg).
DEBUG_ROOT = Path("/usr/lib/debug/.build-id")


def isolate_section_cache() -> None:
    """Point stackwalk's cache of decompressed debug sections (`STACKWALK_CACHE_DIR`) at a
    directory of this test session's own, removed at exit: no test reads what an earlier run
    or the user left there, and none writes to ~/.cache. Called by both conftests; the first
    call makes it."""
    if os.environ.get("STACKWALK_TEST_SESSION_CACHE") == str(os.getpid()):
        return
    import atexit
    import tempfile

    cache = tempfile.mkdtemp(prefix="stackwalk-cache-")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["STACKWALK_CACHE_DIR"] = cache
    os.environ["STACKWALK_TEST_SESSION_CACHE"] = str(os.getpid())
    os.environ.pop("STACKWALK_CACHE_MAX", None)


def cargo_tool(name: str) -> str:
    """A reference tool `.ci/setup` installs with `cargo install`: on PATH, else in cargo's
    bin directory (`$CARGO_HOME/bin`, by default `~/.cargo/bin`), where it installs them."""
    cargo_home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    return shutil.which(name) or os.path.join(cargo_home, "bin", name)


@dataclass(frozen=True)
class Spec:
    """A crash program and how to build and run it."""

    id: str
    source: str
    flags: tuple[str, ...] = ()
    compiler: str = "gcc"
    arch: str = "x86_64"
    signal: str = "SIGSEGV"
    # Signals the program handles itself: gdb passes them on rather than stopping there.
    passed: tuple[str, ...] = ()

    @property
    def static(self) -> bool:
        return "-static" in self.flags


SPECS = {
    spec.id: spec
    for spec in (
        Spec("deep", "crash_deep.c", O2),
        Spec("threads", "crash_threads.c", ("-O2", "-pthread")),
        Spec("libc", "crash_libc.c", ("-O2",)),
        Spec("signal", "crash_signal.c", ("-O2",)),
        Spec("altstack", "crash_altstack.c", ("-O2", "-pthread"), signal="SIGABRT",
             passed=("SIGSEGV",)),
        Spec("altstack-overflow", "crash_altstack.c", ("-O2", "-pthread", "-DOVERFLOW"),
             signal="SIGABRT", passed=("SIGSEGV",)),
        Spec("cxx", "crash_cxx.cpp", ("-O2",), compiler="g++", signal="SIGABRT"),
        Spec("python", "crash_py.py"),
        Spec("vdso", "crash_vdso.c", ("-O2", "-pthread")),
        Spec("lib", "crash_lib.c", ("-O2",)),
        Spec("sizeless-start", "crash_sizeless_start.c", ("-O2", "-nostartfiles")),
        Spec("recursion", "crash_deep.c", (*O2, "-DDEPTH=600")),
        Spec("deep-moved", "crash_deep.c", O2),
        Spec("i386-deep", "crash_deep.c", (*O2, "-static"), I386_GCC, "i386"),
        Spec("i386-threads", "crash_threads.c", ("-O2", "-pthread", "-static"), I386_GCC,
             "i386"),
        Spec("i386-signal", "crash_signal.c", ("-O2", "-static"), I386_GCC, "i386"),
        Spec("i386-altstack", "crash_altstack.c", ("-O2", "-pthread", "-static"), I386_GCC,
             "i386", "SIGABRT", ("SIGSEGV",)),
        Spec("i386-libc", "crash_libc.c", ("-O2", "-static"), I386_GCC, "i386"),
        Spec("i386-libc-shared", "crash_libc.c", ("-O2", *I386_NATIVE_DYNAMIC), I386_GCC,
             "i386"),
        Spec("a64-deep-static", "crash_deep.c", (*O2, "-static"), "aarch64-linux-gnu-gcc",
             "aarch64"),
        Spec("a64-deep", "crash_deep.c", O2, "aarch64-linux-gnu-gcc", "aarch64"),
        Spec("a64-deep-O0-static", "crash_deep.c", ("-O0", "-static"), "aarch64-linux-gnu-gcc",
             "aarch64"),
        Spec("a64-libc-static", "crash_libc.c", ("-O2", "-static"), "aarch64-linux-gnu-gcc",
             "aarch64"),
        Spec("a64-libc", "crash_libc.c", ("-O2",), "aarch64-linux-gnu-gcc", "aarch64"),
        Spec("a64-threads-static", "crash_threads.c", ("-O2", "-pthread", "-static"),
             "aarch64-linux-gnu-gcc", "aarch64"),
        Spec("a64-threads", "crash_threads.c", ("-O2", "-pthread"), "aarch64-linux-gnu-gcc",
             "aarch64"),
        Spec("a64-cxx", "crash_cxx.cpp", ("-O2",), "aarch64-linux-gnu-g++", "aarch64",
             "SIGABRT"),
        # ARM32: ARM code and Thumb-2 code (-mthumb, Debian's default), with and without frame
        # pointers; a crash inside libc's strlen (hand-written, EXIDX_CANTUNWIND), threads.
        Spec("arm-deep", "crash_deep.c", (*O2, "-marm"), ARM_GCC, "arm"),
        Spec("arm-thumb-deep", "crash_deep.c", (*O2, "-mthumb"), ARM_GCC, "arm"),
        Spec("arm-deep-O0", "crash_deep.c", ("-O0", "-mthumb"), ARM_GCC, "arm"),
        Spec("arm-deep-static", "crash_deep.c", (*O2, "-static"), ARM_GCC, "arm"),
        Spec("arm-libc", "crash_libc.c", ("-O2",), ARM_GCC, "arm"),
        Spec("arm-threads", "crash_threads.c", ("-O2", "-pthread"), ARM_GCC, "arm"),
        Spec("arm-signal", "crash_signal.c", ("-O2",), ARM_GCC, "arm"),
        # clang's ARM and Thumb code: its own .ARM.exidx tables (and .debug_frame).
        Spec("arm-clang-deep", "crash_deep.c", (*ARM_CLANG, *O2, "-marm"), "clang", "arm"),
        Spec("arm-clang-thumb-deep", "crash_deep.c", (*ARM_CLANG, *O2, "-mthumb"), "clang",
             "arm"),
    )
}  # fmt: skip
# Programs whose own functions have no CFI at all (-g0: no .debug_frame either), so that only
# frame pointers lead through them; -fno-schedule-insns2 keeps GCC's prologues in the order
# gdb's prologue analyzer, the reference for them, recognises. For test_fallback_cores.py.
NO_CFI = ("-O2", "-fno-omit-frame-pointer", "-fno-schedule-insns2",
          "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-g0")  # fmt: skip
# clang, for 32-bit ARM: it links with the cross gcc's linker and libraries; without GCC's
# scheduling option, which it ignores.
CLANG_NO_CFI = tuple(flag for flag in NO_CFI if flag != "-fno-schedule-insns2")
FALLBACK_SPECS = {
    spec.id: spec
    for spec in (
        Spec("nocfi", "crash_nocfi.c", NO_CFI),
        Spec("nocfi-loop", "crash_nocfi.c", (*NO_CFI, "-DMODE=1")),
        Spec("nocfi-backwards", "crash_nocfi.c", (*NO_CFI, "-DMODE=2")),
        Spec("nocfi-garbage", "crash_nocfi.c", (*NO_CFI, "-DMODE=3")),
        # A signal handler without CFI returns to libc's trampoline, which no call precedes,
        # and the frameless loop it interrupted has made no frame record.
        Spec("signal-nocfi", "crash_signal.c", NO_CFI),
        Spec("altstack-nocfi", "crash_altstack.c", (*NO_CFI, "-pthread"), signal="SIGABRT",
             passed=("SIGSEGV",)),
        # musl's signal trampoline has no CFI (Debian's musl-tools).
        Spec("signal-musl", "crash_signal.c", ("-O2", "-static"), "musl-gcc"),
        Spec("asm-fp", "crash_asm.c", ("-O2",)),
        Spec("asm-no-fp", "crash_asm.c", ("-O2", "-DBREAK_CHAIN")),
        Spec("a64-nocfi", "crash_nocfi.c", NO_CFI, "aarch64-linux-gnu-gcc", "aarch64"),
        Spec("a64-nocfi-static", "crash_nocfi.c", (*NO_CFI, "-static"),
             "aarch64-linux-gnu-gcc", "aarch64"),
        Spec("i386-nocfi", "crash_nocfi.c", (*NO_CFI, "-static"), I386_GCC, "i386"),
        # 32-bit ARM's frame records: gcc's and clang's, in ARM and in Thumb code.
        Spec("arm-nocfi", "crash_nocfi.c", (*NO_CFI, "-marm"), ARM_GCC, "arm"),
        Spec("arm-thumb-nocfi", "crash_nocfi.c", (*NO_CFI, "-mthumb"), ARM_GCC, "arm"),
        Spec("arm-clang-nocfi", "crash_nocfi.c", (*ARM_CLANG, *CLANG_NO_CFI, "-marm"), "clang",
             "arm"),
        Spec("arm-clang-thumb-nocfi", "crash_nocfi.c", (*ARM_CLANG, *CLANG_NO_CFI, "-mthumb"),
             "clang", "arm"),
        # armhf glibc's abort has no unwind table at all: found by its prologue.
        Spec("arm-cxx", "crash_cxx.cpp", ("-O2",), "arm-linux-gnueabihf-g++", "arm", "SIGABRT"),
    )
}  # fmt: skip
# 32-bit ARM programs with unwind tables of their own (-funwind-tables: GCC writes none for C
# by default), for the stripped builds of test_core_files.py, which have nothing else.
EXIDX = ("-O2", "-fomit-frame-pointer", "-funwind-tables")
EXIDX_SPECS = {
    spec.id: spec
    for spec in (
        Spec("arm-exidx", "crash_deep.c", (*EXIDX, "-marm"), ARM_GCC, "arm"),
        Spec("arm-thumb-exidx", "crash_deep.c", (*EXIDX, "-mthumb"), ARM_GCC, "arm"),
        Spec("arm-exidx-static", "crash_deep.c", (*EXIDX, "-static"), ARM_GCC, "arm"),
        Spec("arm-threads-exidx", "crash_threads.c", (*EXIDX, "-pthread"), ARM_GCC, "arm"),
    )
}
# Programs whose mappings test module placement (test_placement.py): libc mapped a second time,
# read-only, below its image; a JIT page between two mappings of the program (64 KiB segment
# alignment leaves room between them).
PLACEMENT_SPECS = {
    spec.id: spec
    for spec in (
        Spec("mapped-twice", "crash_mapped_twice.c", ("-O2",), signal="SIGABRT"),
        Spec("jit", "crash_jit.c", ("-O2", "-Wl,-z,max-page-size=0x10000")),
        # Made with a library of their own that is deleted once the references are taken.
        Spec("callback-lib-gone", "crash_callback.c", ("-O2",)),
        Spec("signal-libc-gone", "crash_signal.c", ("-O2",)),
    )
}
# Stacks whose outermost frame has no CFI (test_stack_ends.py): a static program with a _start
# of its own in assembly (all its functions with CFI, or, "-fp", none but libc's: frame records),
# and an x86_64 thread started by a raw clone in assembly.
OWN_START = ("-O2", "-static", "-nostartfiles")
END_SPECS = {
    spec.id: spec
    for spec in (
        Spec("start", "crash_start.c", OWN_START),
        Spec("i386-start", "crash_start.c", OWN_START, I386_GCC, "i386"),
        Spec("a64-start", "crash_start.c", OWN_START, "aarch64-linux-gnu-gcc", "aarch64"),
        Spec("a64-start-fp", "crash_start.c", (*NO_CFI, "-static", "-nostartfiles"),
             "aarch64-linux-gnu-gcc", "aarch64"),
        Spec("clone", "crash_clone.c", ("-O2",)),
        # musl's static startup: _start a bare label without CFI (Debian's musl-tools).
        Spec("musl-start", "crash_deep.c", ("-O2", "-static"), "musl-gcc"),
        # abort() in musl's libc, which has neither CFI nor frame pointers (static, and a
        # stripped shared libc.so).
        Spec("musl-abort", "crash_deep.c", ("-O2", "-static", "-DABORT"), "musl-gcc",
             signal="SIGABRT"),
        Spec("musl-abort-dynamic", "crash_deep.c", ("-O2", "-DABORT"), "musl-gcc",
             signal="SIGABRT"),
    )
}  # fmt: skip
# Source lines and inline frames (test_lines.py): a NULL store in functions inlined into each
# other.
LINES_SPECS = {spec.id: spec for spec in (Spec("inline", "crash_inline.c", ("-O2",)),)}
# Snapshots of a live process that did not fault (gdb's gcore attaches, stopping it with SIGSTOP):
# running, or stopped beforehand with SIGSTOP (kill -STOP).
SNAPSHOT_SPECS = {
    spec.id: spec
    for spec in (
        Spec("snapshot", "snapshot.c", ("-O2", "-pthread"), signal="SIGSTOP"),
        Spec("snapshot-stopped", "snapshot.c", ("-O2", "-pthread"), signal="SIGSTOP"),
    )
}
# deep-moved is for the tests of a missing executable only; the fallback programs need more
# than CFI, which the tests over every case assume.
X86_CASES = [i for i, spec in SPECS.items() if spec.arch == "x86_64" and i != "deep-moved"]
A64_CASES = [spec_id for spec_id, spec in SPECS.items() if spec.arch == "aarch64"]
ARM_CASES = [spec_id for spec_id, spec in SPECS.items() if spec.arch == "arm"]
I386_CASES = [spec_id for spec_id, spec in SPECS.items() if spec.arch == "i386"]
# Cores whose reference is eu-stack (gdb writes them, and eu-stack reads them right).
EU_STACK_CASES = X86_CASES + I386_CASES
SPECS.update(FALLBACK_SPECS)
SPECS.update(EXIDX_SPECS)
SPECS.update(PLACEMENT_SPECS)
SPECS.update(END_SPECS)
SPECS.update(SNAPSHOT_SPECS)
SPECS.update(LINES_SPECS)


def initial_arguments(memory: Any, top: int, word: int) -> list[str]:
    """The arguments at a process's initial stack ``top`` in its ``memory`` (a MappedMemory):
    argc there (on ARM, argv's address), then as many argv pointers to NUL-terminated strings,
    then argv's NULL (asserted)."""
    fmt = "<I" if word == 4 else "<Q"

    def at(address: int) -> int:
        data = memory.read(address, word)
        assert data is not None, hex(address)
        return int(struct.unpack(fmt, data)[0])

    def string(address: int) -> str:
        data = b""
        while (byte := memory.read(address + len(data), 1)) not in (None, b"\0"):
            data += byte
        return data.decode()

    argc = at(top)
    if argc == top + word:
        # ARM's glibc _start pushed argv's address where argc was: counted up to argv's NULL.
        argc = 0
        while at(top + (argc + 1) * word) != 0:
            argc += 1
    assert at(top + (argc + 1) * word) == 0, "argv's NULL"
    return [string(at(top + i * word)) for i in range(1, argc + 1)]


# --- references -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GdbFrame:
    pc: int
    sp: int
    function: str | None
    solib: str | None  # the shared library's path (None: the executable or no file)
    kind: str  # gdb's frame type: NORMAL_FRAME, SIGTRAMP_FRAME, ...


@dataclass(frozen=True)
class GdbThread:
    tid: int
    frames: list[GdbFrame]
    stop_reason: str | None

    @property
    def pcs(self) -> list[int]:
        return [frame.pc for frame in self.frames]


@dataclass(frozen=True)
class GdbView:
    """gdb's backtrace of every thread (in gdb's order) and its shared libraries: (path,
    address of the library's .text at run time)."""

    threads: list[GdbThread]
    solibs: list[tuple[str, int]]

    def thread(self, tid: int) -> GdbThread:
        for thread in self.threads:
            if thread.tid == tid:
                return thread
        raise AssertionError(f"gdb shows no thread {tid}: {[t.tid for t in self.threads]}")


@dataclass(frozen=True)
class EuFrame:
    pc: int
    function: str | None  # None: eu-stack printed no name
    module: str | None  # eu-stack's module name (a file name, or linux-vdso.so.1)
    build_id: str | None
    module_start: int | None  # the module's lowest address
    offset: int | None  # eu-stack's "+0x..": (pc, less one for a caller frame) - module_start


@dataclass(frozen=True)
class EuStack:
    """``eu-stack -n 0`` on a core: every thread (in eu-stack's order, the core's) by tid."""

    pid: int
    threads: dict[int, list[EuFrame]]
    returncode: int
    stderr: str

    def pcs(self, tid: int) -> list[int]:
        return [frame.pc for frame in self.threads[tid]]


@dataclass(frozen=True)
class UnstripModule:
    """A line of ``eu-unstrip -n --core``: the module's range, build id (read from the core's
    memory) and name."""

    start: int
    end: int
    build_id: str | None
    file: str | None
    name: str


@dataclass(frozen=True)
class Notes:
    """A core's notes as ``eu-readelf -n`` decodes them."""

    pid: int
    tids: list[int]  # NT_PRSTATUS pids, in core order
    cursig: list[int]
    signo: int | None  # NT_SIGINFO
    si_code: int | None
    fault_address: int | None
    psargs: str | None
    files: list[tuple[int, int, int, str]]  # NT_FILE: (start, end, file offset in bytes, path)
    auxv: dict[str, int]

    def file_range(self, path: str) -> tuple[int, int]:
        """Lowest start and highest end of the NT_FILE mappings of ``path``."""
        ranges = [(start, end) for start, end, _offset, name in self.files if name == path]
        assert ranges, f"NT_FILE has no mapping of {path}"
        return min(s for s, _ in ranges), max(e for _, e in ranges)


@dataclass
class MadeCore:
    """A core made at test time, with what the references say about it."""

    spec: Spec
    path: Path
    executable: Path
    argv: list[str]
    gdb: GdbView
    sysroot: str | None = None  # what stackwalk needs to find the modules
    lib_search_path: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def arch(self) -> str:
        return self.spec.arch

    @property
    def open_options(self) -> dict[str, Any]:
        """Keyword arguments of ``Core.open`` that find every module of this core."""
        return {"sysroot": self.sysroot, "lib_search_path": self.lib_search_path or None}

    @property
    def cli_options(self) -> list[str]:
        """The same as ``stackwalk core`` options."""
        options = [] if self.sysroot is None else ["--sysroot", self.sysroot]
        if self.lib_search_path:
            options += ["--lib-search-path", ":".join(self.lib_search_path)]
        return options

    def eu_stack(self, *, symbols: bool = False) -> EuStack:
        """eu-stack on this core (for a core whose files were moved after it was made: what
        eu-stack said before)."""
        key = "eu_stack_symbols" if symbols else "eu_stack"
        if key in self.extra:
            return self.extra[key]  # type: ignore[no-any-return]
        return eu_stack(str(self.path), str(self.executable), symbols=symbols)

    def eu_unstrip(self) -> list[UnstripModule]:
        if "eu_unstrip" in self.extra:
            return self.extra["eu_unstrip"]  # type: ignore[no-any-return]
        return eu_unstrip(str(self.path), str(self.executable))

    def reference_pcs(self) -> dict[int, list[int]]:
        """Every thread's pcs as the reference sees them: eu-stack for x86_64 and i386 cores (gdb
        agrees, see test_core_files.py), gdb's live view for qemu's aarch64 cores."""
        if self.arch in ("x86_64", "i386"):
            stack = self.eu_stack()
            return {tid: stack.pcs(tid) for tid in stack.threads}
        return {thread.tid: thread.pcs for thread in self.gdb.threads}

    def notes(self) -> Notes:
        return core_notes(str(self.path))

    def executable_bias(self) -> int:
        """Where the program was loaded: AT_ENTRY (from the core's NT_AUXV) - its e_entry."""
        with open(self.executable, "rb") as f:
            return self.notes().auxv["ENTRY"] - int(ELFFile(f).header["e_entry"])


def is_subsequence(pcs: Sequence[int], reference: Sequence[int]) -> bool:
    """Whether every pc is the reference's, in its order, some of the reference's left out: what
    a walk that scanned past frames it could not unwind may show."""
    rest = iter(reference)
    return all(any(pc == other for other in rest) for pc in pcs)


def run(cmd: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", TIMEOUT)
    return subprocess.run(
        [os.fspath(c) for c in cmd], capture_output=True, text=True, errors="replace", **kwargs
    )


def on_terminal(argv: Sequence[str], **kwargs: Any) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``argv`` with stderr a terminal (a pty; stdout piped): its result, and what it
    drew on the terminal, the tty's line ends made ``\\n``."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.run(argv, stderr=slave, stdout=subprocess.PIPE, text=True,
                              timeout=TIMEOUT, **kwargs)  # fmt: skip
    finally:
        os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    return proc, drawn.decode(errors="replace").replace("\r\n", "\n")


@functools.cache
def eu_stack(
    core: str | None,
    executable: str | None,
    *,
    symbols: bool = False,
    debuginfo_path: str | None = None,
    pid: int | None = None,
) -> EuStack:
    """``eu-stack -n 0`` (every frame) of every thread of a core, or of the running process
    ``pid`` (``-p``). ``symbols``: also each frame's function (``-m``: from the module's symbol
    table, or its separate debug file's, see symbol_file()), build id and module offset
    (``-b``). ``debuginfo_path``: where eu-stack looks for separate debug files (its
    ``--debuginfo-path``; default ``:.debug:/usr/lib/debug``)."""
    cmd = ["eu-stack", "-n", "0"]
    cmd += [f"--core={core}", "-e", str(executable)] if pid is None else ["-p", str(pid)]
    if debuginfo_path is not None:
        cmd.append(f"--debuginfo-path={debuginfo_path}")
    cmd += ["-m", "-b"] if symbols else ["-q"]
    proc = run(cmd)
    pid = None
    threads: dict[int, list[EuFrame]] = {}
    current: list[EuFrame] | None = None
    frame_re = re.compile(r"#\d+\s+0x([0-9a-f]+)(?:\s+(.*?))??(?:\s+-\s+(\S+))?\s*$")
    where_re = re.compile(r"\s+\[([0-9a-f]+)\]@0x([0-9a-f]+)\+0x([0-9a-f]+)\s*$")
    for line in proc.stdout.splitlines():
        if match := re.match(r"PID (\d+) - (?:core|process)", line):
            pid = int(match.group(1))
        elif match := re.match(r"TID (\d+):", line):
            current = threads.setdefault(int(match.group(1)), [])
        elif current is not None and (match := frame_re.match(line)):
            function = match.group(2) or None
            current.append(EuFrame(int(match.group(1), 16), function, match.group(3),
                                   None, None, None))  # fmt: skip
        elif current and (match := where_re.match(line)):
            last = current[-1]
            current[-1] = EuFrame(last.pc, last.function, last.module, match.group(1),
                                  int(match.group(2), 16), int(match.group(3), 16))  # fmt: skip
    assert pid is not None and threads, f"{' '.join(cmd)}: no stack printed\n{proc.stderr}"
    return EuStack(pid, threads, proc.returncode, proc.stderr)


@functools.cache
def eu_unstrip(core: str, executable: str) -> list[UnstripModule]:
    proc = run(["eu-unstrip", "-n", f"--core={core}", "-e", executable])
    assert proc.returncode == 0, proc.stderr
    modules = []
    for line in proc.stdout.splitlines():
        match = re.fullmatch(
            r"0x([0-9a-f]+)\+0x([0-9a-f]+) (?:([0-9a-f]+)@0x[0-9a-f]+|-) (\S+) \S+ (\S+)", line
        )
        assert match, f"unexpected eu-unstrip line: {line!r}"
        start, size, build_id, file, name = match.groups()
        modules.append(
            UnstripModule(
                int(start, 16),
                int(start, 16) + int(size, 16),
                build_id,
                None if file in ("-", ".") else file,
                name,
            )
        )
    return modules


@functools.cache
def core_notes(core: str) -> Notes:
    """The notes of a core, decoded by eu-readelf."""
    text = run(["eu-readelf", "-n", core]).stdout
    tids, cursig = [], []
    pid = signo = si_code = fault = None
    psargs = None
    files: list[tuple[int, int, int, str]] = []
    auxv: dict[str, int] = {}
    section = None
    for line in text.splitlines():
        if match := re.match(r"\s+CORE\s+\d+\s+(\w+)\s*$", line):
            section = match.group(1)
            continue
        if section == "PRSTATUS":
            if match := re.search(r"cursig: (\d+)", line):
                cursig.append(int(match.group(1)))
            if match := re.match(r"\s+pid: (\d+),", line):
                tids.append(int(match.group(1)))
        elif section == "PRPSINFO":
            if match := re.match(r"\s+uid: \d+, gid: \d+, pid: (\d+),", line):
                pid = int(match.group(1))
            if match := re.search(r"psargs: (.*)$", line):
                psargs = match.group(1).strip()
        elif section == "SIGINFO":
            if match := re.search(r"si_signo: (\d+), si_errno: \d+, si_code: (-?\d+)", line):
                signo, si_code = int(match.group(1)), int(match.group(2))
            if match := re.search(r"fault address: (0x[0-9a-f]+|\d+)", line):
                fault = int(match.group(1), 0)
        elif section == "FILE":
            if match := re.match(r"\s+([0-9a-f]+)-([0-9a-f]+) ([0-9a-f]+) \d+\s+(.*)$", line):
                start, end, offset, path = match.groups()
                files.append((int(start, 16), int(end, 16), int(offset, 16), path.strip()))
        elif section == "AUXV":
            if match := re.match(r"\s+(\w+): (0x[0-9a-f]+|\d+)", line):
                auxv[match.group(1)] = int(match.group(2), 0)
    assert tids, f"eu-readelf shows no NT_PRSTATUS in {core}"
    return Notes(pid or tids[0], tids, cursig, signo, si_code, fault, psargs, files, auxv)


@functools.cache
def symbol_file(path: str) -> str:
    """Where the symbols of an ELF file are: its separate debug file, installed by build id
    (where eu-stack and gdb look too), else the file itself."""
    match = re.search(r"Build ID: ([0-9a-f]+)", run(["readelf", "-n", path]).stdout)
    if match:
        build_id = match.group(1)
        debug = DEBUG_ROOT / build_id[:2] / f"{build_id[2:]}.debug"
        if debug.exists():
            return str(debug)
    return path


def unversioned(name: str) -> str:
    """A symbol name without its version (``__libc_start_main@@GLIBC_2.34``: a debug file's
    .symtab spells versioned names out)."""
    return name.split("@", 1)[0]


@functools.cache
def nm_symbols(path: str) -> dict[str, frozenset[int]]:
    """Function symbols of an ELF file (its debug file's, see symbol_file()) by name, unversioned
    and demangled -> addresses, from binutils' nm: ``.symtab``, or ``.dynsym`` when there is no
    ``.symtab``."""
    symbols: dict[str, set[int]] = {}
    for dynamic in (False, True):
        cmd = ["nm", "--defined-only", "-C", "--without-symbol-versions"]
        proc = run([*cmd, *(["-D"] if dynamic else []), symbol_file(path)])
        for line in proc.stdout.splitlines():
            match = re.match(r"([0-9a-f]+) ([TtWwiI]) (.+)$", line)
            if match:
                name = unversioned(match.group(3))
                symbols.setdefault(name, set()).add(int(match.group(1), 16))
        if symbols:
            break
    return {name: frozenset(addresses) for name, addresses in symbols.items()}


def same_function(path: str, ours: str | None, theirs: str | None) -> bool:
    """Whether two names denote the same function of ``path``: equal but for a symbol version,
    or aliases (symbols at one address, e.g. glibc's ``read``/``__read``, the vdso's
    ``clock_gettime``/``__vdso_clock_gettime``)."""
    if ours is None or theirs is None:
        return ours == theirs
    ours, theirs = unversioned(ours), unversioned(theirs)
    if ours == theirs:
        return True
    symbols = nm_symbols(path)
    return bool(symbols.get(ours, frozenset()) & symbols.get(theirs, frozenset()))


def first_load_vaddr(path: str) -> int:
    """Page-aligned p_vaddr of an ELF file's first PT_LOAD (load bias = start - this)."""
    with open(path, "rb") as f:
        vaddr = min(s["p_vaddr"] for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD")
    return int(vaddr) & ~0xFFF


def text_address(path: str) -> int:
    with open(path, "rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        assert text is not None, f"{path} has no .text"
        return int(text["sh_addr"])


def build_id_of(path: str) -> str:
    """The GNU build id of an ELF file, as readelf prints it."""
    match = re.search(r"Build ID: ([0-9a-f]+)", run(["readelf", "-n", path]).stdout)
    assert match, f"{path} has no build id"
    return match.group(1)


def extract_memory(core: str, start: int, end: int, output: Path) -> Path:
    """Write the bytes of [start, end) of a core's memory (its PT_LOAD contents) to a file."""
    data = bytearray(end - start)
    with open(core, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] != "PT_LOAD":
                continue
            lo, hi = seg["p_vaddr"], seg["p_vaddr"] + seg["p_filesz"]
            a, b = max(lo, start), min(hi, end)
            if a < b:
                f.seek(seg["p_offset"] + a - lo)
                data[a - start : b - start] = f.read(b - a)
    output.write_bytes(bytes(data))
    return output


def truncated_copy(source: Path, size: int, directory: Path, name: str) -> Path:
    """A copy of the first ``size`` bytes of a file."""
    copy = directory / name
    with open(source, "rb") as f:
        copy.write_bytes(f.read(size))
    return copy


def note_span(core: Path, note_type: str) -> tuple[int, int]:
    """File offsets of the start and end of a core's first note of a type ("NT_PRSTATUS")."""
    with open(core, "rb") as f:
        for segment in ELFFile(f).iter_segments():
            if isinstance(segment, NoteSegment):
                for note in segment.iter_notes():
                    if note["n_type"] == note_type:
                        return note["n_offset"], note["n_offset"] + note["n_size"]
    raise AssertionError(f"{core} has no {note_type}")


def symbol_in_core(core: Path, name: str) -> tuple[int, int]:
    """(file offset in the core, size) of the data symbol ``name`` of the first module that
    NT_FILE maps and that defines it (e.g. libpython's ``_PyRuntime``): from the module's
    symbol table and where NT_FILE puts its first page."""
    notes = core_notes(str(core))
    for path in dict.fromkeys(path for _, _, _, path in notes.files):
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
        symbol = next((s for s in elf_symbols(path) if s.name == name), None)
        if symbol is None:
            continue
        start = min(s for s, _, off, p in notes.files if p == path and off == 0)
        address = symbol.value + start - first_load_vaddr(path)
        return file_offset(core, address)[0], symbol.size
    raise AssertionError(f"no module of {core} defines {name}")


def load_segment(core: Path, address: int) -> tuple[int, int]:
    """[start, end) of the core's PT_LOAD segment holding ``address``, by pyelftools."""
    with open(core, "rb") as f:
        loads = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
    ((start, end),) = [
        (s["p_vaddr"], s["p_vaddr"] + s["p_memsz"])
        for s in loads
        if s["p_vaddr"] <= address < s["p_vaddr"] + s["p_memsz"]
    ]
    return int(start), int(end)


def file_offset(core: Path, address: int) -> tuple[int, int]:
    """(file offset of a memory address in a core, bytes the core's PT_LOAD segments lose when
    the file is cut there)."""
    with open(core, "rb") as f:
        loads = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
    (offset,) = [
        s["p_offset"] + address - s["p_vaddr"]
        for s in loads
        if s["p_vaddr"] <= address < s["p_vaddr"] + s["p_filesz"]
    ]
    lost = sum(max(0, s["p_offset"] + s["p_filesz"] - max(s["p_offset"], offset)) for s in loads)
    return offset, lost


def eu_addr2line(
    path: str | os.PathLike[str], address: int
) -> list[tuple[str | None, str | None, int | None]]:
    """``eu-addr2line -i -f``: (function, file, line) at an ELF address, innermost first."""
    out = run(["eu-addr2line", "-i", "-f", "-C", "-e", path, hex(address)]).stdout.splitlines()
    chain = []
    for name, where in zip(out[::2], out[1::2], strict=True):
        match = re.match(r"(.*?):(\d+)(?::\d+)?$", where)
        file, line = (match.group(1), int(match.group(2))) if match else (None, None)
        file = None if file == "??" else file
        chain.append((None if name == "??" else name.split(" inlined at ")[0], file,
                      line or None))  # fmt: skip
    return chain


def addr2line_function(path: str, address: int) -> str:
    proc = run(["addr2line", "-f", "-e", path, f"{address:#x}"])
    return proc.stdout.splitlines()[0]


@dataclass(frozen=True)
class ElfSymbol:
    """A defined symbol of an ELF file's ``.symtab`` (else ``.dynsym``), read by pyelftools,
    with the address range of its section (None: absolute or common) and whether that holds
    code."""

    name: str
    value: int
    size: int
    type: str  # STT_FUNC, STT_NOTYPE, ...
    section: tuple[int, int] | None
    code_section: bool


@functools.cache
def elf_symbols(path: str) -> list[ElfSymbol]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
        assert isinstance(table, SymbolTableSection), f"{path} has no symbol table"
        ranges = [
            (
                (s["sh_addr"], s["sh_addr"] + s["sh_size"]),
                bool(s["sh_flags"] & SH_FLAGS.SHF_EXECINSTR),
            )
            for s in elf.iter_sections()
        ]
        symbols = []
        for sym in table.iter_symbols():
            shndx = sym["st_shndx"]
            if shndx == "SHN_UNDEF" or not sym.name:
                continue
            section, code = ranges[shndx] if isinstance(shndx, int) else (None, False)
            symbols.append(ElfSymbol(sym.name, sym["st_value"], sym["st_size"],
                                     sym["st_info"]["type"], section, code))  # fmt: skip
    return symbols


def eu_addr2line_symbols(path: str, addresses: Sequence[int]) -> list[tuple[str, int] | None]:
    """(symbol, offset) of each address from ``eu-addr2line -S`` (elfutils' dwfl_module_addrsym
    on the file's symbol table), None where it names none."""
    proc = run(["eu-addr2line", "-S", "-e", path, *(f"{a:#x}" for a in addresses)])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 * len(addresses), proc.stdout  # a symbol line, then file:line
    found: list[tuple[str, int] | None] = []
    for line in lines[::2]:
        match = re.fullmatch(r"(.+?)(?:\+(0x[0-9a-f]+))?", line)
        assert match, line
        name, offset = match.groups()
        # "??" or, in a file with no relocation info, "(section)+0x...": no symbol.
        unnamed = name == "??" or name.startswith("(")
        found.append(None if unnamed else (name, int(offset or "0", 16)))
    return found


def demangle(names: Iterable[str]) -> list[str]:
    proc = run(["c++filt"], input="\n".join(names) + "\n")
    return proc.stdout.splitlines()


# --- gdb ------------------------------------------------------------------------------------

# Run inside gdb, with capture_gdb (see realstacks.gdb_driver): every thread's frames as
# `stackwalk capture` records them (without gdb's inline and tail-call frames, which have no
# return address of their own), each with its shared library, and the shared libraries, written
# to RESULT as JSON.
_GDB_DUMP = r"""
import json
import re
import gdb


def dump():
    threads = []
    for thread in sorted(gdb.selected_inferior().threads(), key=lambda t: t.num):
        thread.switch()
        frames, reason = capture_gdb.backtrace(64)
        for frame in frames:
            frame["solib"] = gdb.solib_name(frame["pc"])
        threads.append({"tid": thread.ptid[1] or gdb.selected_inferior().pid,
                        "frames": frames, "reason": reason})
    solibs = []
    for line in gdb.execute("info sharedlibrary", to_string=True).splitlines():
        match = re.match(r"(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+\S+(?:\s+\(\*\))?\s+(/\S+)$", line)
        if match:
            solibs.append([match.group(2), int(match.group(1), 16)])
    with open(RESULT, "w") as f:
        json.dump({"threads": threads, "solibs": solibs}, f)

dump()
"""


def _gdb_script(directory: Path) -> tuple[Path, Path]:
    result = directory / "gdb-view.json"
    result.unlink(missing_ok=True)
    script = directory / "gdb_dump.py"
    script.write_text(gdb_driver(f"RESULT = {str(result)!r}\n{_GDB_DUMP}"))
    return script, result


def _gdb_view(result: Path, what: str, output: str) -> GdbView:
    assert result.exists(), f"gdb wrote no backtrace for {what}:\n{output[-3000:]}"
    data = json.loads(result.read_text())
    threads = [
        GdbThread(
            t["tid"],
            [GdbFrame(f["pc"], f["sp"], f["function"], f["solib"], f["kind"]) for f in t["frames"]],
            t["reason"],
        )
        for t in data["threads"]
    ]
    return GdbView(threads, [(path, address) for path, address in data["solibs"]])


def _gdb_command(gdb: str, sysroot: str | None) -> list[str]:
    cmd = [gdb, "-batch", "-nx"]
    for command in GDB_EARLY:
        cmd += ["-iex", command]
    if sysroot is not None:
        cmd += ["-iex", f"set sysroot {sysroot}"]
    for command in ("set backtrace past-main on", "set backtrace past-entry on",
                    "set backtrace limit unlimited"):  # fmt: skip
        cmd += ["-ex", command]
    return cmd


def gdb_on_core(executable: str, core: str, directory: Path, *, sysroot: str | None = None,
                gdb: str = "gdb") -> GdbView:  # fmt: skip
    """gdb's backtrace of every thread of a core file."""
    script, result = _gdb_script(directory)
    cmd = [*_gdb_command(gdb, sysroot), "-x", str(script), executable, core]
    proc = run(cmd, env=CRASH_ENV)
    return _gdb_view(result, f"{core}", proc.stdout + proc.stderr)


def gdb_on_process(pid: int, directory: Path) -> GdbView:
    """gdb's backtrace of every thread of the running process ``pid`` (gdb attaches, and
    leaves the process as it found it, stopped or running)."""
    script, result = _gdb_script(directory)
    proc = run([*_gdb_command("gdb", None), "-p", str(pid), "-x", str(script)])
    return _gdb_view(result, f"pid {pid}", proc.stdout + proc.stderr)


def _passing(signals: Sequence[str]) -> list[str]:
    """gdb's options that pass ``signals`` to the program without stopping."""
    return [arg for name in signals for arg in ("-ex", f"handle {name} nostop noprint pass")]


def gdb_crash_core(argv: Sequence[str], core: Path, env: Mapping[str, str],
                   passed: Sequence[str] = ()) -> None:  # fmt: skip
    """Run ``argv`` under gdb to its fatal signal (not one of ``passed``, which the program
    handles) and write the core there."""
    cmd = ["sh", "-c", SMALL_STACKS, "sh", *_gdb_command("gdb", None), *_passing(passed)]
    cmd += ["-ex", "run", "-ex", f"generate-core-file {core}", "--args", *argv]
    proc = run(cmd, env=dict(env), stdin=subprocess.DEVNULL)
    if not core.exists() or "received signal" not in proc.stdout:
        pytest.fail(f"gdb made no core of {argv}:\n{(proc.stdout + proc.stderr)[-3000:]}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def qemu_crash_core(argv: Sequence[str], directory: Path, sysroot: str,
                    qemu: str = "qemu-aarch64") -> tuple[Path, GdbView]:  # fmt: skip
    """Run an aarch64 (or, ``qemu``, another architecture's) program under qemu to its crash
    with gdb-multiarch attached: gdb's live backtrace of every thread at the fatal signal, and
    the core qemu writes then."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "core").mkdir(exist_ok=True)  # no core of qemu itself (see the docstring)
    script, result = _gdb_script(directory)
    port = _free_port()
    qemu = subprocess.Popen(
        ["sh", "-c", f"ulimit -c unlimited; {SMALL_STACKS}", "sh",
         qemu, "-s", "1M", "-g", str(port), "-L", sysroot, *argv],
        cwd=directory, env=CRASH_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        cmd = _gdb_command("gdb-multiarch", sysroot)
        cmd += ["-ex", "set tcp auto-retry on", "-ex", "set tcp connect-timeout 20",
                "-ex", f"target remote 127.0.0.1:{port}", "-ex", "continue",
                "-x", str(script), "-ex", "continue", argv[0]]  # fmt: skip
        proc = run(cmd, env=CRASH_ENV, stdin=subprocess.DEVNULL)
        view = _gdb_view(result, f"{argv} under qemu", proc.stdout + proc.stderr)
        qemu.wait(timeout=TIMEOUT)
    finally:
        if qemu.poll() is None:
            os.killpg(qemu.pid, signal.SIGKILL)
            qemu.wait()
    cores = sorted(directory.glob("qemu_*.core"))
    assert len(cores) == 1, f"qemu wrote {len(cores)} cores for {argv} in {directory}"
    return cores[0], view


# --- the cores ------------------------------------------------------------------------------


class Cores:
    """Makes each core once per session: ``cores("deep")`` -> MadeCore."""

    def __init__(self, directory: Path, build: Builder) -> None:
        self.directory = directory
        self._build = build
        self._made: dict[str, MadeCore] = {}

    def of(self, spec: Spec, coredump_filter: int | None = None) -> MadeCore:
        """The core of a test's own spec (an x86_64 program crashed under gdb), made once.
        ``coredump_filter``: the process's /proc/PID/coredump_filter while it runs (inherited
        from this one), which gdb's ``generate-core-file`` follows: 0x3f writes the pages of
        file-backed mappings too, code included, as ``kill -SEGV`` with the same filter would."""
        if spec.id not in self._made:
            own = Path("/proc/self/coredump_filter")
            before = own.read_text().strip() if coredump_filter is not None else None
            try:
                if coredump_filter is not None:
                    own.write_text(f"{coredump_filter:#x}\n")
                argv = self._argv(spec)
                self._made[spec.id] = self._gdb(spec, argv, self.directory / spec.id)
            finally:
                if before is not None:
                    own.write_text(f"{before}\n")
        return self._made[spec.id]

    def __call__(self, spec_id: str) -> MadeCore:
        if spec_id not in self._made:
            spec = SPECS[spec_id]
            if spec.arch in QEMU:
                made = self._qemu(spec)
            elif spec.id == "vdso":
                made = self._vdso(spec)
            elif spec.id == "lib":
                made = self._lib(spec)
            elif spec.id == "deep-moved":
                made = self._moved(spec)
            elif spec.id.endswith("-gone"):
                made = self._library_gone(spec)
            elif spec.id in SNAPSHOT_SPECS:
                made = self._snapshot(spec)
            else:
                made = self._gdb(spec, self._argv(spec), self.directory / spec.id)
            self._made[spec_id] = made
        return self._made[spec_id]

    def _argv(self, spec: Spec, *extra_flags: str) -> list[str]:
        if spec.source.endswith(".py"):
            return [SYSTEM_PYTHON, "-I", "-S", str(PROGRAMS / spec.source)]
        program = self._build(spec.source, *spec.flags, *extra_flags, compiler=spec.compiler)
        return [str(program)]

    def _gdb(self, spec: Spec, argv: list[str], directory: Path,
             env: Mapping[str, str] = CRASH_ENV) -> MadeCore:  # fmt: skip
        directory.mkdir(parents=True, exist_ok=True)
        core = directory / f"{spec.id}.core"
        core.unlink(missing_ok=True)
        gdb_crash_core(argv, core, env, spec.passed)
        view = gdb_on_core(argv[0], str(core), directory)
        return MadeCore(spec, core, Path(argv[0]), argv, view)

    def _snapshot(self, spec: Spec) -> MadeCore:
        """gdb's ``gcore`` of a running program (for "-stopped", one stopped first with
        SIGSTOP): a core of a process that did not fault."""
        directory = self.directory / spec.id
        directory.mkdir(parents=True, exist_ok=True)
        argv = self._argv(spec)
        program = subprocess.Popen(["sh", "-c", SMALL_STACKS, "sh", *argv], env=CRASH_ENV,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)  # fmt: skip
        try:
            assert program.stdout is not None
            assert program.stdout.readline() == b"ready\n"
            if spec.id.endswith("-stopped"):
                os.kill(program.pid, signal.SIGSTOP)
            proc = run(["gcore", "-o", str(directory / "snapshot"), str(program.pid)])
        finally:
            program.kill()
            program.wait(timeout=TIMEOUT)
        core = directory / f"snapshot.{program.pid}"
        if not core.exists():
            pytest.fail(f"gcore made no core of {argv}:\n{(proc.stdout + proc.stderr)[-3000:]}")
        view = gdb_on_core(argv[0], str(core), directory)
        return MadeCore(spec, core, Path(argv[0]), argv, view)

    def _vdso(self, spec: Spec) -> MadeCore:
        """The vdso program's core, made again (at most VDSO_ATTEMPTS times) until the polling
        thread, stopped wherever it was, is inside the vdso too."""
        argv = self._argv(spec)
        for attempt in range(VDSO_ATTEMPTS):
            made = self._gdb(spec, argv, self.directory / f"vdso-{attempt}")
            (vdso,) = [m for m in eu_unstrip(str(made.path), argv[0]) if m.name in EU_VDSO]
            stack = eu_stack(str(made.path), argv[0])
            if all(vdso.start <= pcs[0] < vdso.end for pcs in map(stack.pcs, stack.threads)):
                made.extra["vdso"] = vdso
                return made
        pytest.fail(f"the polling thread was outside the vdso in {VDSO_ATTEMPTS} cores")

    def _lib(self, spec: Spec) -> MadeCore:
        """crash_lib.c with its libcrashlib.so: the process loads ``run/libcrashlib.so`` (the
        build in ``v1/``); once the references are taken, ``run/`` is renamed, so the path the
        core names no longer exists. ``v2/`` holds a rebuilt library with another build id,
        ``v3/`` one with none (``--build-id=none``)."""
        directory = self.directory / "lib"
        lib_flags = ("-O2", "-shared", "-fPIC", "-Wl,-soname,libcrashlib.so")
        builds = {
            "v1": self._build("crash_lib_so.c", *lib_flags),
            "v2": self._build(
                "crash_lib_so.c", *lib_flags, "-DREBUILT", "-g0", "-fno-asynchronous-unwind-tables"
            ),  # fmt: skip
            "v3": self._build("crash_lib_so.c", *lib_flags, "-DREBUILT", "-Wl,--build-id=none"),
        }
        for name, built in builds.items():
            (directory / name).mkdir(parents=True, exist_ok=True)
            shutil.copy(built, directory / name / "libcrashlib.so")
        shutil.copytree(directory / "v1", directory / "run")
        argv = self._argv(spec, "-Wl,--no-as-needed", f"-L{directory / 'v1'}", "-lcrashlib")
        made = self._gdb(
            spec, argv, directory, {**CRASH_ENV, "LD_LIBRARY_PATH": str(directory / "run")}
        )
        made.lib_search_path = [str(directory / "v1")]
        made.extra.update(
            library=str(directory / "run" / "libcrashlib.so"),
            v1=str(directory / "v1" / "libcrashlib.so"),
            v2=str(directory / "v2" / "libcrashlib.so"),
            v3=str(directory / "v3" / "libcrashlib.so"),
        )
        _take_references(made)
        (directory / "run").rename(directory / "run.gone")
        return made

    def _library_gone(self, spec: Spec) -> MadeCore:
        """A program whose library (libcallback.so, or a copy of libc) is loaded from
        ``run/`` (LD_LIBRARY_PATH); once the references are taken, ``run/`` is renamed, so the
        library the core names is missing. ``extra["library"]``: its path in the core."""
        directory = self.directory / spec.id
        run_dir = directory / "run"
        shutil.rmtree(directory, ignore_errors=True)
        run_dir.mkdir(parents=True)
        link: tuple[str, ...] = ()
        if spec.id == "callback-lib-gone":
            lib_flags = ("-O2", "-shared", "-fPIC", "-Wl,-soname,libcallback.so")
            library = run_dir / "libcallback.so"
            shutil.copy(self._build("crash_callback_so.c", *lib_flags), library)
            link = ("-Wl,--no-as-needed", f"-L{run_dir}", "-lcallback")
        else:
            library = run_dir / "libc.so.6"
            libc = run(["gcc", "-print-file-name=libc.so.6"]).stdout.strip()
            shutil.copy(os.path.realpath(libc), library)
        argv = self._argv(spec, *link)
        made = self._gdb(spec, argv, directory, {**CRASH_ENV, "LD_LIBRARY_PATH": str(run_dir)})
        made.extra["library"] = str(library)
        _take_references(made)
        run_dir.rename(directory / "run.gone")
        return made

    def _moved(self, spec: Spec) -> MadeCore:
        """crash_deep.c built into a directory of its own; once the references are taken, the
        program is renamed, so the executable the core names no longer exists."""
        directory = self.directory / spec.id
        directory.mkdir(parents=True, exist_ok=True)
        program = directory / "crash_deep"
        shutil.copy(self._argv(spec)[0], program)
        made = self._gdb(spec, [str(program)], directory)
        _take_references(made)
        moved = directory / "crash_deep.moved"
        program.rename(moved)
        made.extra["original"] = str(program)
        made.executable = moved
        return made

    def _qemu(self, spec: Spec) -> MadeCore:
        program = self._build(spec.source, *spec.flags, compiler=spec.compiler)
        sysroot, qemu = QEMU[spec.arch]
        core, view = qemu_crash_core([str(program)], self.directory / spec.id, sysroot, qemu)
        return MadeCore(spec, core, program, [str(program)], view,
                        sysroot=None if spec.static else sysroot)  # fmt: skip


def _take_references(made: MadeCore) -> None:
    """Keep what eu-stack and eu-unstrip say of a core while its files are still in place."""
    core, exe = str(made.path), str(made.executable)
    made.extra.update(
        eu_stack=eu_stack(core, exe),
        eu_stack_symbols=eu_stack(core, exe, symbols=True),
        eu_unstrip=eu_unstrip(core, exe),
    )


# --- stackwalk ------------------------------------------------------------------------------


def stackwalk_core(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """``python -m stackwalk core ARGS`` in a process of its own."""
    return run([sys.executable, "-m", "stackwalk", "core", *args])


def stackwalk_minidump(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """``python -m stackwalk minidump ARGS`` in a process of its own."""
    return run([sys.executable, "-m", "stackwalk", "minidump", *args])


# The compressors of the formats a compressed core may be in (systemd-coredump's and by hand).
COMPRESSORS = {"zstd": ["zstd", "-q", "-c"], "gzip": ["gzip", "-c"], "xz": ["xz", "-c"],
               "lz4": ["lz4", "-q", "-c"], "lz4-legacy": ["lz4", "-l", "-q", "-c"]}  # fmt: skip


def bomb(tool: str, directory: Path, head: bytes = b"", gib: int = 3) -> Path:
    """A decompression bomb made by the real tool: ``gib`` GiB of zeros after ``head``, as one
    compressed member (stream, frame) of ``head`` then one of a MiB of zeros over and over
    (each tool reads concatenated members as one file)."""
    zeros = subprocess.run(COMPRESSORS[tool], input=bytes(1 << 20), capture_output=True,
                           check=True).stdout  # fmt: skip
    path = directory / f"bomb.{tool}"
    with open(path, "wb") as out:
        if head:
            out.write(subprocess.run(COMPRESSORS[tool], input=head, capture_output=True,
                                     check=True).stdout)  # fmt: skip
        out.write(zeros * (gib << 10))
    return path
