"""Helpers of the perf.data tests: workloads recorded with ``perf record --call-graph dwarf`` at
test time, and what the reference tools say of the recordings: ``perf script`` (the frames)
and ``perf report -D`` (where each record lies in the file).

What perf script prints, found on these recordings (perf 6.1, whose DWARF unwinder is elfutils'
libdw), with ``--no-inline -F comm,pid,tid,time,ip,sym,symoff,dso``:

- One line per sample, ``<comm> <pid>/<tid> <seconds>.<fraction>:`` (a trailing space; the
  fraction has 6 digits, 9 with ``--ns``: the sample's raw perf time in ns), then one line per
  frame, ``\\t<address> <symbol>+0x<offset> (<dso>)``, the address in hex without ``0x`` padded
  on the left with spaces, ``[unknown]`` for a symbol or dso perf cannot name (without the
  ``+0x<offset>``), and a blank line after the last frame.
- Kernel frames come first: the addresses of the sample's PERF_SAMPLE_CALLCHAIN (its
  PERF_CONTEXT_KERNEL marker left out), as they are. They are the only frames at or above
  0x8000000000000000. Then the user frames, unwound from the sample's registers and stack copy.
- User frame addresses are relative to the dso's mapping, ``ip - map start + map pgoff``: the
  address's offset in the file, not its ELF virtual address. The two are the same in shared
  libraries and PIEs, whose segments lie at their file offsets (``11d5 main+0x165
  (/tmp/.../perf_qsort)``), but not in a non-PIE executable: Debian's /usr/bin/python3.11 is
  linked at 0x400000, and _PyEval_EvalFrameDefault+0x969 at ELF address 0x5028a9 is printed
  ``1028a9`` (its text segment: offset 0x1f000, vaddr 0x41f000). So stackwalk's
  ``module_offset`` (the ELF address) goes through the module's program headers before it is
  compared (``file_offset``).
- Frame 0 of the user part is the sampled user ip as it is, and every caller frame is printed as
  its return address minus one. Found with objdump: main calls qsort with a 5-byte ``call`` at
  0x11d1, so the return address is 0x11d6 and perf script prints ``11d5 main+0x165``; libc's
  ``call *%rax`` at 0x27248 returns to 0x2724a and perf prints ``27249
  __libc_start_call_main+0x79``. (That is libdw's dwfl_frame_pc "not an activation" case: a
  frame reached through a return address is looked up, and printed, one byte back.) The
  ``+0x<offset>`` is relative to that minus-one address too.
  stackwalk's JSON gives the return address itself (``pc``, and ``module_offset`` = pc − bias),
  so a caller frame's ``module_offset`` − 1 (as a file offset) is what perf script prints.
  test_perf.py checks this on every run with objdump. None of the workloads
  takes a signal, so no frame follows a signal frame (libdw would report it as an activation).
- Samples come in time order (perf script sorts the events of each round by time).
- perf script's unwinding of a program exec'd by a process perf already knew (a fork child,
  which inherits its parent's mappings in perf's view, or a process that ran before its exec) is
  unreliable in perf 6.1: in some recordings of the fork workload it stops at the first libc
  frame of the new image (or unwinds nothing past frame 0), in others it reaches _start; the same
  program recorded on its own always unwinds to _start. It varies with the address layout from
  run to run. The frames perf gives there are still a prefix of the true stack.
- Rarely perf leaves a frame out of the middle of a stack: in the dynamic loader's start-up,
  ``dl_main <- _dl_sysdep_start <- _start`` where the code says ``_start`` calls ``_dl_start``,
  which calls ``_dl_sysdep_start``. That is what following frame pointers from dl_main gives
  (libdw falls back to that on x86_64 when it cannot use a frame's CFI): dl_main's frame record
  holds its return address into _dl_sysdep_start, but _dl_sysdep_start keeps no frame pointer,
  so the next record is _dl_start's, whose return address is into _start, and _dl_sysdep_start's
  return address into _dl_start is never seen.
- When a sample has no user stack copy (e.g. one taken inside execve() once the old address
  space is gone), perf script prints its kernel frames only.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection
from realstacks import PROGRAMS, SYSTEM_PYTHON, Builder

PERF = "perf"
# The recording command of the issue (with -q: no summary on stderr).
RECORD = ("record", "-q", "-F", "999", "-e", "cpu-clock", "--call-graph", "dwarf")
# Recordings without --call-graph dwarf (not WORKLOADS): "-fp", perf's frame-pointer callchains
# (-g) of a program built with frame pointers; "-plain", no call graph at all.
OTHER_CALL_GRAPHS = {"-fp": ("-g",), "-plain": ()}
SCRIPT_FIELDS = "comm,pid,tid,time,ip,sym,symoff,dso"
TIMEOUT = 120
# Kernel addresses (x86_64 and aarch64): the upper half of the address space.
KERNEL_START = 1 << 63
# Where the distribution's separate debug files are, by build id (libc6-dbg, python3-dbg).
DEBUG_ROOT = "/usr/lib/debug/.build-id"


# What identifies a sample across tools: (pid, tid, time in ns).
Key = tuple[int | None, int, int]


@dataclass(frozen=True)
class ScriptFrame:
    """A frame as perf script prints it (see the module docstring for what the address is)."""

    address: int
    symbol: str | None  # None: [unknown]
    offset: int | None
    dso: str  # "[unknown]" when perf knows none

    @property
    def kernel(self) -> bool:
        return self.address >= KERNEL_START


@dataclass(frozen=True)
class ScriptSample:
    comm: str
    pid: int | None  # None: not printed (perf script's default fields)
    tid: int
    time: int  # ns
    frames: tuple[ScriptFrame, ...]

    @property
    def key(self) -> Key:
        """What identifies a sample across tools: (pid, tid, time)."""
        return (self.pid, self.tid, self.time)

    @property
    def kernel_frames(self) -> list[ScriptFrame]:
        return list(self.frames[: self._user_from()])

    @property
    def user_frames(self) -> list[ScriptFrame]:
        return list(self.frames[self._user_from() :])

    def _user_from(self) -> int:
        """Where the user frames start: perf prints the kernel's first, and a user frame at a
        kernel address after them is a user frame (``ffffffffffffffff [unknown]``: a return
        address of 0 less one, read past the end of the copied stack)."""
        return next(
            (i for i, frame in enumerate(self.frames) if not frame.kernel), len(self.frames)
        )

    def user_addresses(self) -> list[tuple[str | None, int]]:
        """(dso, address) of each user frame, as printed (dso None: ``[unknown]``)."""
        return [(None if f.dso == "[unknown]" else f.dso, f.address) for f in self.user_frames]


@dataclass(frozen=True)
class RawRecord:
    """One record of the data section, as ``perf report -D`` dumps it."""

    offset: int  # in the file
    size: int
    kind: str  # SAMPLE, MMAP2, COMM, FINISHED_ROUND, ...
    time: int  # ns (0 for records without one)
    pid: int | None  # samples only
    tid: int | None

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def key(self) -> tuple[int, int, int]:
        assert self.pid is not None and self.tid is not None, self
        return (self.pid, self.tid, self.time)


def run(cmd: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", TIMEOUT)
    return subprocess.run(
        [os.fspath(c) for c in cmd], capture_output=True, text=True, errors="replace", **kwargs
    )


def perf_env(home: Path) -> dict[str, str]:
    """The environment of perf (and of the workloads it starts): a home of the tests' own, so
    that perf's build-id cache (~/.debug, where perf record copies every dso it saw, the vdso
    included, and where perf script finds them again) and perf's configuration are the tests'
    and not the user's; no debuginfod."""
    return {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": str(home)}


def perf_record(output: Path, argv: Sequence[str | os.PathLike[str]], home: Path,
                call_graph: Sequence[str] = RECORD[-2:],
                cwd: Path | None = None) -> None:  # fmt: skip
    """``perf record -q -F 999 -e cpu-clock --call-graph dwarf -o OUTPUT -- ARGV`` (or with
    another ``call_graph``), in ``cwd`` if given."""
    cmd = [PERF, *RECORD[:-2], *call_graph, "-o", output, "--", *argv]
    proc = run(cmd, env=perf_env(home), stdin=subprocess.DEVNULL, cwd=cwd)
    if proc.returncode != 0 or not output.exists():
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stderr}")


# "comm pid/tid time:" (with -F comm,pid,tid,time) or "comm tid time:" (perf script's default).
_HEADER = re.compile(
    r"\s*(?P<comm>.*?)\s+(?:(?P<pid>-?\d+)/)?(?P<tid>-?\d+)\s+(?P<s>\d+)\.(?P<f>\d+):\s*"
)
_FRAME = re.compile(r"\t\s*(?P<address>[0-9a-f]+) (?P<where>.*) \((?P<dso>[^()]*)\)")


def _time_ns(seconds: str, fraction: str) -> int:
    """``4121.579581430`` -> ns; with 6 digits (perf script without --ns), µs made ns."""
    return int(seconds) * 1_000_000_000 + int(fraction.ljust(9, "0"))


def parse_script(text: str) -> list[ScriptSample]:
    """Samples of ``perf script -F comm,pid,tid,time,ip,sym,symoff,dso`` output (also the shape
    of ``stackwalk perf``'s default output)."""
    samples: list[ScriptSample] = []
    header: re.Match[str] | None = None
    frames: list[ScriptFrame] = []

    def flush() -> None:
        if header is not None:
            time = _time_ns(header["s"], header["f"])
            pid = None if header["pid"] is None else int(header["pid"])
            samples.append(ScriptSample(header["comm"], pid, int(header["tid"]), time,
                                        tuple(frames)))  # fmt: skip

    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("\t"):
            match = _FRAME.fullmatch(line)
            assert match and header is not None, f"line {number}: not a frame: {line!r}"
            symbol, offset = _symbol_offset(match["where"])
            frames.append(ScriptFrame(int(match["address"], 16), symbol, offset, match["dso"]))
            continue
        flush()
        header = _HEADER.fullmatch(line)
        assert header, f"line {number}: not a sample line: {line!r}"
        frames = []
    flush()
    return samples


def _symbol_offset(where: str) -> tuple[str | None, int | None]:
    """``name+0x1f`` -> (name, 0x1f); ``[unknown]`` -> (None, None). Names may hold spaces and
    parentheses (C++), never ``+0x``."""
    if where == "[unknown]":
        return None, None
    name, plus, offset = where.rpartition("+0x")
    if plus and re.fullmatch(r"[0-9a-f]+", offset):
        return name, int(offset, 16)
    return where, None


@functools.cache
def perf_script(path: Path, home: Path) -> tuple[ScriptSample, ...]:
    """``perf script --no-inline --ns -F comm,pid,tid,time,ip,sym,symoff,dso`` of a recording,
    parsed (``--ns``: the time to the nanosecond, as perf recorded it)."""
    cmd = [PERF, "script", "--no-inline", "--ns", "-F", SCRIPT_FIELDS, "-i", str(path)]
    proc = run(cmd, env=perf_env(home))
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    return tuple(parse_script(proc.stdout))


_RAW = re.compile(
    r"(?P<time>\d+) 0x(?P<offset>[0-9a-f]+) \[0x(?P<size>[0-9a-f]+)\]: PERF_RECORD_(?P<kind>\w+)"
    r"(?:\([^)]*\): (?P<pid>-?\d+)/(?P<tid>-?\d+):)?"
)


@functools.cache
def raw_records(path: Path, home: Path) -> tuple[RawRecord, ...]:
    """Every record of the data section in file order, from ``perf report -D``, checked to
    tile the data section exactly (so the list misses none)."""
    proc = run([PERF, "report", "-D", "-i", str(path)], env=perf_env(home))
    assert proc.returncode == 0, proc.stderr
    records = {}
    for line in proc.stdout.splitlines():
        match = _RAW.match(line)
        if match:
            pid, tid = match["pid"], match["tid"]
            is_sample = match["kind"] == "SAMPLE"
            record = RawRecord(int(match["offset"], 16), int(match["size"], 16), match["kind"],
                               int(match["time"]), int(pid) if is_sample and pid else None,
                               int(tid) if is_sample and tid else None)  # fmt: skip
            records[record.offset] = record
    ordered = tuple(records[offset] for offset in sorted(records))
    data_offset, data_size = data_section(path)
    position = data_offset
    for record in ordered:
        assert record.offset == position, f"perf report -D: no record at {position:#x} in {path}"
        position = record.end
    assert position == data_offset + data_size, f"{path}: records end at {position:#x}"
    return ordered


def data_section(path: Path) -> tuple[int, int]:
    """(offset, size) of the data section, from the perf.data header (magic, header size,
    attr size, attrs {offset, size}, data {offset, size}, ...)."""
    with open(path, "rb") as f:
        header = f.read(56)
    assert header[:8] == b"PERFILE2", f"{path}: not a perf.data file"
    return (int.from_bytes(header[40:48], "little"), int.from_bytes(header[48:56], "little"))


# --- the recordings ---------------------------------------------------------------------------

WORKLOADS = ("qsort", "cxx", "python", "threads", "dlopen", "fork", "lld")
O2 = ("-O2", "-fomit-frame-pointer")
# A program with frame pointers and no CFI of its own (its crt files' aside): no .eh_frame for
# its functions, nor (-g0, after the builder's -g) a .debug_frame.
NO_CFI = ("-O2", "-g0", "-fno-asynchronous-unwind-tables", "-fno-omit-frame-pointer")


@dataclass(frozen=True)
class Recording:
    """A perf.data file recorded at test time, and perf's own view of it."""

    name: str
    path: Path
    argv: tuple[str, ...]
    home: Path  # perf's home (see perf_env)
    # The comm of a program exec'd by a process perf already knew (see the module docstring),
    # and the workload that records that program on its own.
    reexec: tuple[str, str] | None = None

    def script(self) -> tuple[ScriptSample, ...]:
        return perf_script(self.path, self.home)

    def records(self) -> tuple[RawRecord, ...]:
        return raw_records(self.path, self.home)


class Recordings:
    """Records each workload once per session: ``recordings("qsort")`` -> Recording.

    qsort: a C program (-O2 -fomit-frame-pointer) spending its time under libc's qsort();
    cxx: std::sort with a lambda comparator and a recursion through std::function;
    python: /usr/bin/python3 -I -S running a CPU-bound recursion;
    threads: four pthreads busy at different depths, and the main thread;
    dlopen: a program that dlopen()s a library midway and spends its time in it;
    fork: a program whose child burns CPU, then execs the qsort program (a new pid, a COMM exec
    event, a new address space), while the parent burns CPU too;
    lld: the qsort program linked by lld, which packs segments in the file: the code segment
    starts mid-page, so the executable mapping's file offset (its page) is in the segment
    before it too (rustc's cdylibs, such as stackwalk's own core, are laid out this way).

    Not one of WORKLOADS: syscalls, write(2) in a loop from a process with a second thread
    (glibc's cancellable path, where its DWARF inlines a function into its own alias); nocfi,
    the qsort program built with frame pointers and without CFI.

    Not one of WORKLOADS either (perf script stops at frame 0 in most of its samples): leaf, samples
    whose frame 0 has no CFI, in a leaf function in hand-written assembly and in clone3 right
    after its system call (x86_64).
    """

    def __init__(self, directory: Path, build: Builder) -> None:
        self.directory = directory
        self.home = directory / "home"
        self.home.mkdir(exist_ok=True)
        self._build = build
        self._made: dict[str, Recording] = {}

    def __call__(self, name: str) -> Recording:
        if name not in self._made:
            suffix = next((s for s in OTHER_CALL_GRAPHS if name.endswith(s)), None)
            argv = self._argv(name) if suffix is None else self._argv_fp(name[: -len(suffix)])
            path = self.directory / f"{name}.perf.data"
            if suffix is None:
                perf_record(path, argv, self.home)
            else:
                perf_record(path, argv, self.home, OTHER_CALL_GRAPHS[suffix])
            reexec = (Path(argv[1]).name[:15], "qsort") if name == "fork" else None
            self._made[name] = Recording(name, path, tuple(argv), self.home, reexec)
        return self._made[name]

    def again(self, name: str, attempt: int) -> Recording:
        """Workload ``name`` (one of ``_argv``'s) recorded once more, for samples that come by
        chance (``leaf``'s in clone3)."""
        key = f"{name}#{attempt}"
        if key not in self._made:
            argv = self._argv(name)
            path = self.directory / f"{name}-{attempt}.perf.data"
            perf_record(path, argv, self.home)
            self._made[key] = Recording(name, path, tuple(argv), self.home, None)
        return self._made[key]

    def _argv_fp(self, name: str) -> list[str]:
        """A workload's program built to keep frame pointers (for perf's -g callchains)."""
        if name == "qsort":
            return [str(self._build("perf_qsort.c", "-O2", "-fno-omit-frame-pointer"))]
        if name == "threads":
            flags = ("-O2", "-pthread", "-fno-omit-frame-pointer")
            return [str(self._build("perf_threads.c", *flags))]
        raise LookupError(f"no frame-pointer workload {name!r}")

    def _argv(self, name: str) -> list[str]:
        build = self._build
        if name == "qsort":
            return [str(build("perf_qsort.c", *O2))]
        if name == "cxx":
            return [str(build("perf_cxx.cpp", "-O2", compiler="g++"))]
        if name == "python":
            return [SYSTEM_PYTHON, "-I", "-S", str(PROGRAMS / "perf_py.py")]
        if name == "threads":
            return [str(build("perf_threads.c", "-O2", "-pthread"))]
        if name == "dlopen":
            library = build("perf_dlopen_lib.c", "-O2", "-shared", "-fPIC")
            return [str(build("perf_dlopen.c", "-O2")), str(library)]
        if name == "lld":
            return [str(build("perf_qsort.c", *O2, "-fuse-ld=lld"))]
        if name == "syscalls":
            return [str(build("perf_syscalls.c", "-O2", "-pthread"))]
        if name == "nocfi":
            return [str(build("perf_qsort.c", *NO_CFI))]
        if name == "leaf":
            # 50,000 threads: the main thread's samples in clone3 come by chance (a few dozen to
            # a few hundred in 20,000 on a quiet machine, none once in a while on a loaded one:
            # test_frame_zero_without_cfi records again then).
            return [str(build("perf_leaf.c", *O2, "-pthread")), "600000000", "50000"]
        if name == "fork":
            child = build("perf_qsort.c", *O2)  # the qsort workload's program
            return [str(build("perf_fork.c", "-O2")), str(child), "10"]
        raise LookupError(f"no workload {name!r}")


# --- stackwalk's output in perf script's terms ------------------------------------------------


@functools.cache
def _load_segments(path: str) -> tuple[tuple[int, int, int], ...] | None:
    """(p_vaddr, p_memsz, p_offset) of each PT_LOAD of an ELF file; None if it is not one."""
    try:
        with open(path, "rb") as f:
            return tuple(
                (seg["p_vaddr"], seg["p_memsz"], seg["p_offset"])
                for seg in ELFFile(f).iter_segments()
                if seg["p_type"] == "PT_LOAD"
            )
    except (OSError, ELFError):
        return None


def file_offset(path: str, address: int) -> int:
    """Where an ELF address of ``path`` is in the file (through the PT_LOAD holding it): the
    address perf script prints. Modules that are no file on disk ([vdso]) are mapped from
    offset 0 of their image, and their ELF addresses start at 0, so the address stays."""
    segments = _load_segments(path)
    for vaddr, memsz, offset in segments or ():
        if vaddr <= address < vaddr + memsz:
            return address - vaddr + offset
    return address


@functools.cache
def _symbols(path: str) -> dict[str, list[tuple[int, int, str]]]:
    """name -> (value, size, type) of the symbols of that name in an ELF file and in its
    separate debug file (found by build id, where perf script looks too)."""
    symbols: dict[str, list[tuple[int, int, str]]] = {}
    files = [path]
    build_id = _build_id(path)
    if build_id:
        files.append(f"{DEBUG_ROOT}/{build_id[:2]}/{build_id[2:]}.debug")
    for file in files:
        try:
            with open(file, "rb") as f:
                for section in ELFFile(f).iter_sections():
                    if isinstance(section, SymbolTableSection):
                        for sym in section.iter_symbols():
                            entry = (sym["st_value"], sym["st_size"], sym["st_info"]["type"])
                            symbols.setdefault(sym.name, []).append(entry)
        except (OSError, ELFError):
            continue
    return symbols


def _build_id(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            for section in ELFFile(f).iter_sections():
                if isinstance(section, NoteSection):
                    for note in section.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            return str(note["n_desc"])
    except (OSError, ELFError):
        pass
    return None


def sized_function(path: str, name: str) -> bool:
    """Whether ``name`` (perf's spelling: a version suffix ``@@GLIBC_2.34`` is left out) is a
    function symbol with a size in the ELF file at ``path`` or its debug file."""
    symbols = _symbols(path).get(name.split("@")[0], [])
    return any(size > 0 and kind in ("STT_FUNC", "STT_LOOS") for _, size, kind in symbols)


def symbol_values(path: str, name: str) -> set[int]:
    """The ELF addresses of the symbols named ``name`` in a file or its debug file."""
    return {value for value, _, _ in _symbols(path).get(name, [])}


@dataclass(frozen=True)
class Disassembly:
    """What objdump shows of an ELF file's code, by ELF address."""

    starts: frozenset[int]  # every instruction's address
    calls: Mapping[int, int | None]  # address after a call -> its target (None: indirect)
    indirect_jumps: frozenset[int]  # x86's jmp *..., aarch64's br: where tail calls may be
    # objdump's labels: the symbols, and the PLT entries it names itself (printf@plt)
    labels: Mapping[str, frozenset[int]]


@functools.cache
def disassembly(path: str, objdump: str = "objdump") -> Disassembly:
    """``objdump``: binutils' objdump for the file's architecture (x86 calls are ``call``,
    aarch64's ``bl`` and ``blr``)."""
    proc = run([objdump, "-d", "--no-show-raw-insn", path])
    assert proc.returncode == 0, proc.stderr
    starts: set[int] = set()
    indirect_jumps: set[int] = set()
    calls: dict[int, int | None] = {}
    labels: dict[str, set[int]] = {}
    call: tuple[int | None] | None = None  # the previous instruction's target, if a call
    for line in proc.stdout.splitlines():
        if label := re.fullmatch(r"([0-9a-f]+) <(.+)>:", line):
            labels.setdefault(label[2], set()).add(int(label[1], 16))
        match = re.match(r"\s+([0-9a-f]+):\t(\S+)\s*(\S*)", line)
        if not match:
            call = None  # a new section or function: not contiguous
            continue
        address = int(match[1], 16)
        starts.add(address)
        if call is not None:
            calls[address] = call[0]
        direct = re.fullmatch(r"[0-9a-f]+", match[3])
        is_call = match[2].startswith("call") or match[2] in ("bl", "blr")
        call = (int(match[3], 16) if direct else None,) if is_call else None
        jump = match[2] in ("jmp", "jmpq") and match[3].startswith("*")
        if jump or match[2] == "br" or (match[2] == "notrack" and match[3] == "jmp"):
            indirect_jumps.add(address)
    named = {name: frozenset(values) for name, values in labels.items()}
    return Disassembly(frozenset(starts), calls, frozenset(indirect_jumps), named)


def call_chain_problems(
    user: Sequence[Mapping[str, Any]], targets_in: str | None = None, objdump: str = "objdump"
) -> list[str]:
    """What objdump and the symbol tables find wrong in a stack's caller frames (stackwalk's
    --json user frames, innermost first): each return address must follow a call instruction,
    and a direct call inside one module must call the function the frame below it is in (a call
    into another module goes through the PLT; an indirect call names no target). ``targets_in``:
    that last check only where the frame below is in this module (elsewhere it may have been
    reached by a tail call: libc's merge sort jumps to memcpy). ``objdump``: as for
    ``disassembly``."""
    problems = []
    for index in range(1, len(user)):
        caller, callee = user[index], user[index - 1]
        where = f"#{index} {caller['function']} in {caller['module']}"
        if caller["module"] is None:
            problems.append(f"{where}: in no module")
            continue
        return_address = int(caller["module_offset"], 16)
        calls = disassembly(caller["module"], objdump).calls
        if return_address not in calls:
            problems.append(f"{where}: {return_address:#x} follows no call")
            continue
        target = calls[return_address]
        if targets_in is not None and os.path.realpath(callee["module"] or "") != targets_in:
            continue
        if target is not None and callee["module"] == caller["module"]:
            name = callee["function"] or ""
            # A PLT entry (printf@plt) is no ELF symbol: objdump names it.
            plt = disassembly(caller["module"], objdump).labels.get(name, frozenset())
            if target not in symbol_values(caller["module"], name) | plt:
                problems.append(f"{where}: calls {target:#x}, not {callee['function']}")
    return problems


def our_user_addresses(frames: Iterable[Mapping[str, Any]]) -> list[tuple[str | None, int]]:
    """(module, address) of the user frames of a ``stackwalk perf --json`` sample, as perf
    script would print them (see the module docstring): frame 0 (and the frames inlined at its
    pc, ``--inline``) at the file offset of its ELF address, every caller frame at the file
    offset of its return address's ELF address less one; a frame outside every module at its
    runtime pc (less one for a caller)."""
    out: list[tuple[str | None, int]] = []
    caller = 0
    for frame in (f for f in frames if not f["kernel"]):
        module = frame["module"]
        if module is None:
            out.append((None, int(frame["pc"], 16) - caller))
        else:
            address = int(frame["module_offset"], 16) - caller
            out.append((module, file_offset(module, address)))
        caller = caller or int(not frame.get("inline", False))
    return out


@dataclass(frozen=True)
class InlineFrame:
    """A user frame as ``perf script --inline -F ...,srcline`` prints it: each function
    inlined at a pc comes as a frame of its own at that address, marked ``(inlined)``."""

    address: int
    symbol: str | None
    offset: int | None
    inlined: bool
    srcline: str  # "FILE:LINE" as perf prints it, FILE's base name; "??:0" or ":0" unknown


_SRC_FRAME = re.compile(r"\t\s*(?P<address>[0-9a-f]+) (?P<where>.*?)(?: \((?P<dso>[^()]*)\))?")


@functools.cache
def perf_script_inline(path: Path, home: Path) -> dict[Key, tuple[InlineFrame, ...]]:
    """The user frames of each sample of ``perf script --inline --ns -F
    comm,pid,tid,time,ip,sym,symoff,dso,srcline``, by (pid, tid, time). Each frame's line is
    followed by one of its source line (``  msort.c:52``), ``(inlined)`` after it for an inlined
    function's frame, whose frame line then names no dso."""
    cmd = [PERF, "script", "--inline", "--ns", "-F", f"{SCRIPT_FIELDS},srcline", "-i", str(path)]
    proc = run(cmd, env=perf_env(home))
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    out: dict[Key, list[InlineFrame]] = {}
    frames: list[InlineFrame] = []
    frame: re.Match[str] | None = None
    for number, line in enumerate(proc.stdout.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("\t"):
            frame = _SRC_FRAME.fullmatch(line)
            assert frame, f"line {number}: not a frame: {line!r}"
        elif line.startswith("  "):
            assert frame, f"line {number}: a source line of no frame: {line!r}"
            srcline, inlined = line.strip(), False
            if srcline.endswith(" (inlined)"):
                srcline, inlined = srcline.removesuffix(" (inlined)"), True
            address = int(frame["address"], 16)
            if address < KERNEL_START:
                symbol, offset = _symbol_offset(frame["where"])
                frames.append(InlineFrame(address, symbol, offset, inlined, srcline))
            frame = None
        else:
            header = _HEADER.fullmatch(line)
            assert header and header["pid"], f"line {number}: not a sample line: {line!r}"
            frames = []
            key = (int(header["pid"]), int(header["tid"]), _time_ns(header["s"], header["f"]))
            out[key] = frames
    return {key: tuple(frames) for key, frames in out.items()}


def stackwalk_perf(
    *args: str | os.PathLike[str], **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``python -m stackwalk perf ARGS`` in a process of its own (`kwargs` to `run`: its
    environment, say)."""
    return run([sys.executable, "-m", "stackwalk", "perf", *args], **kwargs)
