"""Helpers of the minidump tests: real minidumps made at test time, and the references read from
them.

The minidumps are written by ``minidump-writer`` (the crate Firefox's Linux crash reporter uses)
through a test-only helper, ``tests/dumper`` (``dump-pid PID OUTPUT``: a crate of its own, built
once into ``target/dumper`` and reused by later runs), which ptrace-attaches to every thread of a
process by pid as a crash handler does. Each program is first stopped at a known point:

* a crash program at its fault: it runs as a ptrace tracee (``PTRACE_TRACEME``, its threads
  traced as they start) until its fatal signal stops one of them (other signals, such as the
  SIGALRM whose handler faults, go on to the program); then the whole process is stopped and
  every thread detached into that stop, the faulting one with SIGSTOP in place of its signal, so
  that its registers stay at the faulting instruction, the signal never delivered;
* ``snapshot.c`` (nothing faults), stopped with SIGSTOP once it is ready.

While it is stopped, gdb's ``gcore`` also writes a core of it: the same threads, registers and
stacks, and gdb's backtrace of that core is the independent third opinion. The other reference is
rust-minidump's ``minidump-stackwalk --json --use-local-debuginfo`` on the same dump, which
unwinds with the same binaries' CFI (read with framehop) as stackwalk.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from corefiles import (
    CRASH_ENV,
    SPECS,
    TIMEOUT,
    GdbView,
    Spec,
    _free_port,
    cargo_tool,
    gdb_on_core,
    run,
)
from realstacks import PROGRAMS, SYSTEM_PYTHON, Builder

ROOT = Path(__file__).resolve().parent.parent
DUMPER = Path(__file__).resolve().parent / "dumper"
DUMPER_TARGET = ROOT / "target" / "dumper"
# Mozilla's dump_syms: installed by .ci/setup (cargo install, once).
DUMP_SYMS = cargo_tool("dump_syms")
# rust-minidump's processor: installed by .ci/setup (cargo install, once).
MINIDUMP_STACKWALK = cargo_tool("minidump-stackwalk")
_PTRACE_TRACEME, _PTRACE_CONT, _PTRACE_DETACH, _PTRACE_SETOPTIONS = 0, 7, 17, 0x4200
_PTRACE_O_TRACECLONE, _PTRACE_EVENT_CLONE = 8, 3
_WALL = 0x40000000  # waitpid: every child thread, traced ones included
# Stream types of the minidump format.
THREAD_LIST, MODULE_LIST, MEMORY_LIST, EXCEPTION, SYSTEM_INFO = 3, 4, 5, 6, 7
LINUX_MAPS = 0x47670009

# The programs dumped at their fault (x86_64: minidump-writer dumps processes of its own
# architecture; threads: six, one crashing while the others block; python: three threads, the
# crashing one deep in libpython), and the snapshot of a process of two threads that did not
# fault.
DUMP_SPECS = ("deep", "threads", "libc", "cxx", "signal", "python")
SNAPSHOT = Spec("snapshot", "snapshot.c", ("-O2", "-pthread"), signal="SIGSTOP")


def build_dumper() -> Path:
    """``dump-pid``, built by cargo if it is not built yet (cargo's own check: once per
    machine, and again only if its sources change)."""
    proc = run(
        ["cargo", "build", "--quiet", "--manifest-path", DUMPER / "Cargo.toml",
         "--target-dir", DUMPER_TARGET],
        timeout=3600,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"cannot build the minidump writer (tests/dumper):\n{proc.stderr[-3000:]}")
    return DUMPER_TARGET / "debug" / "dump-pid"


@dataclass
class MadeDump:
    """A minidump made at test time, and a core of the process at the same stop."""

    spec: Spec
    path: Path
    core: Path
    executable: Path
    pid: int
    gdb: GdbView  # gdb's backtrace of the core

    def minidump_stackwalk(self) -> dict[str, Any]:
        """rust-minidump's answer on the dump: its ``--json`` document."""
        proc = run([MINIDUMP_STACKWALK, "--json", "--use-local-debuginfo", self.path])
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc: dict[str, Any] = json.loads(proc.stdout)
        return doc


def symbol_store(binary: Path, store: Path) -> Path:
    """``dump_syms BINARY`` kept as a symbol store keeps it: NAME/DEBUGID/NAME.sym, the debug id
    the one dump_syms writes on its MODULE line."""
    proc = subprocess.run(
        [DUMP_SYMS, "--inlines", binary], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, _, _, debug_id, name = proc.stdout.split("\n", 1)[0].split(" ", 4)
    (store / name / debug_id).mkdir(parents=True, exist_ok=True)
    sym = store / name / debug_id / f"{name}.sym"
    sym.write_text(proc.stdout)
    return sym


def minidump_streams(path: Path) -> dict[int, tuple[int, int]]:
    """A minidump's stream directory, read with struct: type -> (rva, size)."""
    return minidump_streams_of(path.read_bytes())


def minidump_streams_of(data: bytes) -> dict[int, tuple[int, int]]:
    """``minidump_streams`` of the dump's bytes."""
    count, directory = struct.unpack_from("<II", data, 8)
    streams: dict[int, tuple[int, int]] = {}
    for i in range(count):
        kind, size, rva = struct.unpack_from("<III", data, directory + 12 * i)
        streams.setdefault(kind, (rva, size))
    return streams


# MINIDUMP_MODULE: 108 bytes; its name's rva at 20, its CodeView record's location (size, rva)
# at 76.
_MODULE_SIZE, _MODULE_NAME, _MODULE_CV = 108, 20, 76
# The records' signatures as the file holds them (little-endian u32s: "BpEL" is 0x4270454c).
CV_ELF, CV_PDB70 = b"LEpB", b"RSDS"


def module_records(data: bytes) -> list[tuple[int, str, bytes]]:
    """The module list's modules: (offset of the MINIDUMP_MODULE in the file, its name, its
    CodeView record's bytes)."""
    rva, _ = minidump_streams_of(data)[MODULE_LIST]
    (count,) = struct.unpack_from("<I", data, rva)
    out = []
    for i in range(count):
        at = rva + 4 + _MODULE_SIZE * i
        (name_rva,) = struct.unpack_from("<I", data, at + _MODULE_NAME)
        (length,) = struct.unpack_from("<I", data, name_rva)
        name = data[name_rva + 4 : name_rva + 4 + length].decode("utf-16-le")
        cv_size, cv_rva = struct.unpack_from("<II", data, at + _MODULE_CV)
        out.append((at, name, data[cv_rva : cv_rva + cv_size]))
    return out


def rewrite_codeview(source: Path, target: Path, record: Any) -> Path:
    """A copy of the minidump ``source`` at ``target`` whose modules' CodeView records are
    ``record(name, old_record)`` (bytes; b"": none), each new record appended to the file and
    the module pointed at it: a dump as another writer (another version of Breakpad's client)
    would have recorded the same process."""
    data = bytearray(source.read_bytes())
    for at, name, old in module_records(bytes(data)):
        new = record(name, old)
        if new == old:
            continue
        data.extend(b"\0" * (-len(data) % 4))
        struct.pack_into("<II", data, at + _MODULE_CV, len(new), len(data) if new else 0)
        data.extend(new)
    target.write_bytes(bytes(data))
    return target


def breakpad_era_record(name: str, record: bytes) -> bytes:
    """The ``RSDS`` record Breakpad's Linux client wrote before it recorded build ids, for the
    module whose ``BpEL`` record is ``record``: the first 16 bytes of its FileID (the build id,
    or the hash of the first page of ``.text``), zero-padded, as the GUID's bytes, an age of 0,
    and the file name as the PDB name (google-breakpad's minidump_writer.cc of 2013)."""
    if record[:4] != CV_ELF:
        return record
    guid = record[4:20].ljust(16, b"\0")
    return CV_PDB70 + guid + struct.pack("<I", 0) + Path(name).name.encode() + b"\0"


def thread_list_tids(path: Path) -> list[int]:
    """The thread ids of the thread list, in its order (MINIDUMP_THREAD: 48 bytes, the id
    first)."""
    data = path.read_bytes()
    rva, _ = minidump_streams(path)[THREAD_LIST]
    (count,) = struct.unpack_from("<I", data, rva)
    return [struct.unpack_from("<I", data, rva + 4 + 48 * i)[0] for i in range(count)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _trace_me() -> None:
    """In the child, before exec: be traced by the test process."""
    _libc().ptrace(_PTRACE_TRACEME, 0, None, None)


def _wait_stopped(pid: int) -> None:
    """Until every thread of ``pid`` is in a group stop (``T`` in its ``stat``)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            states.append(stat[stat.rindex(")") + 2])
        if all(state == "T" for state in states):
            return
        time.sleep(0.01)
    pytest.fail(f"process {pid} did not stop")


def _stop_at_fault(argv: list[str], fatal: int) -> subprocess.Popen[bytes]:
    """``argv`` run as a tracee, every thread traced (PTRACE_O_TRACECLONE), up to the signal
    ``fatal`` in one of them; then the whole process is stopped (SIGSTOP) and every thread
    detached into that stop, the faulting one with SIGSTOP in place of its fatal signal, so that
    it stays at the faulting instruction."""
    program = subprocess.Popen(argv, env=CRASH_ENV, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, preexec_fn=_trace_me)  # fmt: skip
    libc = _libc()
    pid = program.pid
    _, status = os.waitpid(pid, 0)  # the exec's SIGTRAP
    assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGTRAP, status
    libc.ptrace(_PTRACE_SETOPTIONS, pid, None, _PTRACE_O_TRACECLONE)
    libc.ptrace(_PTRACE_CONT, pid, None, None)
    traced = {pid}
    faulted = None
    while faulted is None:
        tid, status = os.waitpid(-1, _WALL)
        if not os.WIFSTOPPED(status):
            traced.discard(tid)
            if tid == pid:
                pytest.fail(f"{argv} ended before it faulted (status {status:#x})")
            continue
        sig = os.WSTOPSIG(status)
        if status >> 16 == _PTRACE_EVENT_CLONE or (tid not in traced and sig == signal.SIGSTOP):
            traced.add(tid)  # a new thread's first stop, or its creator's report of it
            libc.ptrace(_PTRACE_CONT, tid, None, None)
        elif sig == fatal:
            faulted = tid
        else:  # another signal: the program's own business
            libc.ptrace(_PTRACE_CONT, tid, None, sig)
    # Stop the others: each reports its stop, and is detached into it.
    os.kill(pid, signal.SIGSTOP)
    waiting = traced - {faulted}
    while waiting:
        tid, status = os.waitpid(-1, _WALL)
        waiting.discard(tid)
        if os.WIFSTOPPED(status):
            libc.ptrace(_PTRACE_DETACH, tid, None, signal.SIGSTOP)
    libc.ptrace(_PTRACE_DETACH, faulted, None, signal.SIGSTOP)
    _wait_stopped(pid)
    return program


def _stop_snapshot(argv: list[str]) -> subprocess.Popen[bytes]:
    program = subprocess.Popen(argv, env=CRASH_ENV, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE)  # fmt: skip
    assert program.stdout is not None
    assert program.stdout.readline() == b"ready\n"
    os.kill(program.pid, signal.SIGSTOP)
    _wait_stopped(program.pid)
    return program


class Dumps:
    """Makes each minidump once per session: ``dumps("deep")`` -> MadeDump."""

    def __init__(self, directory: Path, build: Builder) -> None:
        self.directory = directory
        self._build = build
        self._dumper: Path | None = None
        self._made: dict[str, MadeDump] = {}
        self._own_files: dict[str, list[Path]] = {}

    def __call__(self, spec_id: str) -> MadeDump:
        return self.of(SNAPSHOT if spec_id == "snapshot" else SPECS[spec_id])

    def of(self, spec: Spec) -> MadeDump:
        """The dump of ``spec``'s program (one of SPECS, or a test's own), made once."""
        if spec.id not in self._made:
            self._made[spec.id] = self._make(spec)
        return self._made[spec.id]

    def with_own_libraries(self, base: Spec) -> tuple[MadeDump, list[Path]]:
        """The program of ``base`` (a C or C++ one) dumped as it ran on private copies of its shared
        libraries and dynamic linker (linked with ``--dynamic-linker`` and an rpath to a
        directory of its own): (the dump, every ELF file the process mapped), so that a test can
        hide them all, as a crash service that has only symbol files sees the dump."""
        key = f"{base.id}-own-libs"
        if key not in self._made:
            libs = self.directory / key / "lib"
            libs.mkdir(parents=True, exist_ok=True)
            loader = libs / "ld-linux-x86-64.so.2"
            # DT_RPATH (not RUNPATH): the libraries' own dependencies come from there too.
            rpath = ("-Wl,--disable-new-dtags", f"-Wl,-rpath,{libs}")
            flags = (*base.flags, f"-Wl,--dynamic-linker={loader}", *rpath)
            spec = Spec(key, base.source, flags, base.compiler, base.arch, base.signal)
            program = self._build(spec.source, *spec.flags, compiler=spec.compiler)
            # ldd resolves each library (and the missing loader) to the system's file.
            listed = run(["ldd", str(program)]).stdout
            for line in listed.splitlines():
                name, arrow, rest = line.strip().partition(" => ")
                if arrow and rest.startswith("/"):
                    shutil.copy(rest.split(" (")[0], libs / Path(name).name)
            self._made[key] = self._make(spec)
            self._own_files[key] = [program, *sorted(libs.iterdir())]
        return self._made[key], self._own_files[key]

    def _make(self, spec: Spec) -> MadeDump:
        if self._dumper is None:
            self._dumper = build_dumper()
        if spec.source.endswith(".py"):
            program = Path(SYSTEM_PYTHON)
            argv = [SYSTEM_PYTHON, "-I", "-S", str(PROGRAMS / spec.source)]
        else:
            program = self._build(spec.source, *spec.flags, compiler=spec.compiler)
            argv = [str(program)]
        directory = self.directory / spec.id
        directory.mkdir(parents=True, exist_ok=True)
        if spec is SNAPSHOT:
            process = _stop_snapshot(argv)
        else:
            process = _stop_at_fault(argv, signal.Signals[spec.signal])
        try:
            # gcore first: it leaves the process stopped, where minidump-writer continues it
            # (SIGCONT) once it has written the dump.
            gcore = run(["gcore", "-o", str(directory / "core"), str(process.pid)], env=CRASH_ENV)
            core = directory / f"core.{process.pid}"
            if not core.exists():
                pytest.fail(f"gcore made no core of {argv}:\n{gcore.stderr[-3000:]}")
            _wait_stopped(process.pid)
            dump = directory / f"{spec.id}.dmp"
            made = run([self._dumper, str(process.pid), dump])
            if made.returncode != 0 or not dump.exists():
                pytest.fail(f"dump-pid made no minidump of {argv}:\n{made.stderr[-3000:]}")
        finally:
            process.kill()
            process.wait(timeout=TIMEOUT)
        view = gdb_on_core(argv[0], str(core), directory)
        return MadeDump(spec, dump, core, program, process.pid, view)


@dataclass
class SymbolServer:
    """``python -m http.server`` on 127.0.0.1 serving a symbol store; its log of requests."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def requests(self) -> list[tuple[str, int]]:
        """(path, status) of every GET so far."""
        text = self.log.read_text(errors="replace")
        return [(p, int(s)) for p, s in re.findall(r'"GET (\S+) HTTP/[\d.]+" (\d+)', text)]


@contextlib.contextmanager
def symbol_server(store: Path, log: Path) -> Iterator[SymbolServer]:
    for _ in range(5):  # another process may take the free port first
        port = _free_port()
        cmd = [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1",
               "--directory", str(store), str(port)]  # fmt: skip
        with log.open("wb") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)  # not listening yet
        if process.poll() is None:
            break
    else:
        pytest.fail(f"http.server did not start:\n{log.read_text()}")
    try:
        yield SymbolServer(f"http://127.0.0.1:{port}", process, log)
    finally:
        process.kill()
        process.wait(timeout=60)
