"""Capture a stopped process's registers and stack with gdb.

``capture()`` runs a program under gdb (natively, or under qemu-user with ``gdb-multiarch`` and
``target remote`` for another architecture), stops it at a breakpoint and records what an
unwinder needs: the registers of the stopped thread, the stack from the stack pointer upwards,
the loaded modules with their load biases and the mappings of their files, the vdso image, gdb's
own backtrace at that stop, and optionally a core file written by ``gcore``. The file format
is ``_capturedoc``'s.

gdb is driven in batch mode by a script run in gdb's embedded Python (``_capture_gdb.py``, next
to this module: only gdb's module and the standard library are used there); the script writes
one JSON file that this module turns into a ``Capture``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from stackwalk import _capturedoc
from stackwalk._core import CaptureFile, ElfFile, Unwinder
from stackwalk._files import write_output
from stackwalk.core import Core
from stackwalk.errors import ArchError, ElfError, StackwalkError

if TYPE_CHECKING:
    from stackwalk._core import _AddressSpace, _SpaceOptions  # the stub's alone

__all__ = [
    "Capture",
    "CaptureError",
    "CaptureModule",
    "CaptureSnapshot",
    "BreakpointNotHitError",
    "CaptureTimeoutError",
    "capture",
]

PAGE_SIZE = 4096

# The options of a capture's address space: its files are where gdb read them.
_SPACE_OPTIONS: _SpaceOptions = {
    "executable": None,
    "sysroot": None,
    "search": [],
    "stand_ins": {},
    "debug_root": None,
    "allow_mismatch": False,
    "fetch": False,
    "progress": None,
    "code_mappings_known": False,
    "kind": "capture",
}

# The registers read at the stop, named as the unwinders take them. Anything else gdb knows
# (flags, segment and vector registers) is of no use to an unwinder and is left out.
_REGISTERS: dict[str, tuple[str, ...]] = {
    "x86_64": (
        "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
        "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip",
    ),
    "aarch64": tuple(f"x{i}" for i in range(31)) + ("sp", "pc"),
    "i386": ("eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"),
    "arm": (*(f"r{i}" for i in range(13)), "sp", "lr", "pc"),
}  # fmt: skip
_STACK_POINTERS = {"x86_64": "rsp", "aarch64": "sp", "i386": "esp", "arm": "sp"}
_WORD_BITS = {"x86_64": 64, "aarch64": 64, "i386": 32, "arm": 32}
_GDB_ARCHITECTURES = {
    "i386:x86-64": "x86_64",
    "aarch64": "aarch64",
    "i386": "i386",
    "arm": "arm",
    "armv7": "arm",
}
# The architectures whose programs a host runs natively (x86_64 kernels run 32-bit x86 ones).
_HOST_ARCHITECTURES = {
    "x86_64": ("x86_64", "i386"),
    "amd64": ("x86_64", "i386"),
    "aarch64": ("aarch64",),
    "arm64": ("aarch64",),
    "armv7l": ("arm",),
}
# Signals a test program may use for itself: gdb must hand them to the program without stopping.
_PASS_SIGNALS = ("SIGALRM", "SIGVTALRM", "SIGPROF", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGPIPE")
_QEMU_PORT_ATTEMPTS = 3
# The script gdb runs (in gdb's embedded Python), which the tests' gdb drivers use too.
GDB_SCRIPT = Path(__file__).with_name("_capture_gdb.py")


class CaptureError(StackwalkError):
    """gdb (or qemu) could not stop the program and record its state, or a file is not a
    capture."""


class BreakpointNotHitError(CaptureError):
    """The program ran to its end (or was stopped by something else) without hitting the
    breakpoint."""


class CaptureTimeoutError(CaptureError):
    """gdb, qemu or the program did not finish within the time allowed."""


class _ModuleSink(Protocol):
    def add_module(self, path: str, bias: int = 0) -> None: ...

    def add_module_image(self, name: str, image: bytes, bias: int) -> None: ...


# A mapping of a module's file: (start, end, file offset, permissions such as "r-xp").
MappingInfo = tuple[int, int, int, str]


@dataclass(frozen=True)
class CaptureModule:
    """A module gdb listed: its file and where the process mapped it."""

    path: str
    bias: int
    """Runtime − ELF address, as gdb's address for its ``.text`` gives it."""
    mappings: tuple[MappingInfo, ...] = ()
    """Every mapping of its file in the process (empty where gdb could not read the process's
    mappings: qemu's gdb stub, and captures of format 1)."""


@dataclass(frozen=True)
class Capture:
    """A thread stopped at a breakpoint, as gdb saw it."""

    arch: str
    """``"x86_64"``, ``"aarch64"``, ``"i386"`` or ``"arm"``."""
    regs: dict[str, int]
    """Register values of the stopped thread's innermost frame, by the unwinders' names."""
    memory: list[tuple[int, bytes]]
    """(start address, bytes): the stack from the stack pointer upwards."""
    modules: list[CaptureModule]
    """The executable and each shared library."""
    vdso: tuple[int, bytes] | None
    """(load address, image: its whole mapping) of the vdso, if the process has one."""
    gdb_frames: list[dict[str, Any]]
    """gdb's backtrace without its inline and tail-call frames: ``pc`` (frame 0 the instruction
    pointer, callers the return address), ``sp`` (the frame's stack pointer: its callee's CFA),
    ``function`` (name or None) and ``kind`` (gdb's frame type, e.g. ``"NORMAL_FRAME"``,
    ``"SIGTRAMP_FRAME"``)."""
    gdb_stop_reason: str | None
    """Why gdb's backtrace ended (``gdb.frame_stop_reason_string``), e.g. ``"outermost"`` when
    the outermost frame's return address is undefined."""
    tid: int
    """Thread (LWP) id of the stopped thread, as the kernel and core files number it."""
    core: str | None = None
    """Path of the core file ``gcore`` wrote at the same stop, if one was asked for."""

    @property
    def gdb_pcs(self) -> list[int]:
        return [frame["pc"] for frame in self.gdb_frames]

    def snapshot(self, name: str | None = None, **options: Any) -> CaptureSnapshot:
        """This capture read as every snapshot is (``CaptureSnapshot``), through the pipeline's
        stages; ``name``: what its document calls the capture file; ``Core.open``'s options."""
        return CaptureSnapshot(self, name, **options)

    def source(self) -> CaptureFile:
        """The capture as a source of the pipeline (``rust/source/capture.rs``): its thread,
        its memory, its modules' mappings."""
        mappings = [(start, end, offset, m.path, "x" in perms)
                    for m in self.modules for start, end, offset, perms in m.mappings]  # fmt: skip
        at_bias = [(m.path, m.bias) for m in self.modules if not m.mappings]
        registers = list(self.regs.items())
        return CaptureFile(
            self.arch, self.tid, registers, self.memory, mappings, at_bias, self.vdso
        )

    def address_space(self, unwinder: Unwinder | None = None) -> _AddressSpace:
        """Its modules found and placed by the rule that places a core's
        (``rust/space/snapshot/``: each mapping by the PT_LOAD that holds its offset, a
        placement kept if it holds code; a module without mappings where its file's segments
        go at its bias; the vdso from its image), into ``unwinder`` if given: (modules, the
        executable's index (none: a capture does not say), the vdso image, warnings). Its
        files are this machine's, read by gdb at the stop: used as they are, not doubtful."""
        return self.source().address_space(unwinder, _SPACE_OPTIONS)

    def add_modules_to(self, unwinder: _ModuleSink | Unwinder) -> list[str]:
        """Register every module (and the vdso image) of this capture with an unwinder, each
        placed where its mappings put it (``address_space``). A module that cannot be added
        (its file missing or unreadable) is a warning, as in ``Core``: the Rust unwinder still
        learns where it was and which of it was code. Returns the warnings."""
        if isinstance(unwinder, Unwinder):
            return self.address_space(unwinder)[3]
        modules, _, image, warnings = self.address_space()
        for path, file, _, _, bias, *_ in modules:
            try:
                if path == "[vdso]" and image is not None:
                    unwinder.add_module_image("[vdso]", image, bias)
                elif file is not None:
                    unwinder.add_module(file, bias)
            except StackwalkError as exc:
                warnings.append(f"module {path} not used: {exc}")
        return warnings

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the capture as one JSON file (byte strings base64-encoded), whole: into a new
        file beside ``path`` that then takes its name (``stackwalk._files.replacing``; a FIFO
        or a device at ``path`` is a StackwalkError, never opened)."""
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        fields["modules"] = [(m.path, m.bias, m.mappings) for m in self.modules]
        write_output(os.fspath(path), "the capture", _capturedoc.dump(fields))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Capture:
        """Read a capture written by ``save`` (of this format or the one before). CaptureError,
        naming the key and what is wrong with it, if it is not one."""
        try:
            fields = _capturedoc.read(path)
        except _capturedoc.Invalid as exc:
            raise CaptureError(f"{os.fspath(path)}: not a stackwalk capture: {exc}") from None
        return cls._from_fields(fields)

    @classmethod
    def read(cls, stream: BinaryIO, name: str) -> Capture:
        """Read a capture from an open binary stream (standard input), named ``name`` in
        errors; at most as many bytes as ``load`` takes from a file."""
        try:
            fields = _capturedoc.read_stream(stream)
        except _capturedoc.Invalid as exc:
            raise CaptureError(f"{name}: not a stackwalk capture: {exc}") from None
        return cls._from_fields(fields)

    @classmethod
    def _from_fields(cls, fields: dict[str, Any]) -> Capture:
        fields["modules"] = [CaptureModule(*module) for module in fields["modules"]]
        return cls(**fields)


class CaptureSnapshot(Core):
    """A capture read as every snapshot is (``Core``'s interface: ``threads``, ``modules``,
    ``to_dict()``): its source ``stackwalk._core.CaptureFile``, its modules placed by the rule
    of a core's, its one thread walked with the crash strategies unless told otherwise and
    named by the same symbolizer; no signal, no crashing thread, no pid. ``name``: what its
    document calls the capture file (None: a capture not saved, the demo's)."""

    _FILE_KIND = "capture"
    _SNAPSHOT_KIND = "capture"

    def __init__(self, capture: Capture, name: str | None = None, **options: Any) -> None:
        self.capture = capture
        self._name = name
        super().__init__(name if name is not None else "capture", **options)

    def _open_source(self, max_size: int | None) -> CaptureFile:
        return self.capture.source()

    def _snapshot_path(self) -> str | None:
        return self._name


def capture(
    argv: Sequence[str | os.PathLike[str]],
    breakpoint: str,
    *,
    arch: str | None = None,
    gdb: str | None = None,
    qemu: str | None = None,
    sysroot: str | os.PathLike[str] | None = None,
    core_path: str | os.PathLike[str] | None = None,
    max_stack: int = 1 << 20,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    pass_signals: Sequence[str] = (),
) -> Capture:
    """Run ``argv`` under gdb, stop at ``breakpoint`` and capture the stopped thread.

    ``breakpoint`` is any gdb location: a function name, ``file:line`` or ``*address``.
    ``arch`` defaults to the executable's ELF machine; when it differs from the host's, the
    program runs under ``qemu`` (default ``qemu-<arch>``) and ``gdb`` (default
    ``gdb-multiarch``) attaches to qemu's gdb stub; ``sysroot`` (used for qemu runs only) is
    then both qemu's ``-L`` and gdb's sysroot, where it finds the target's libraries.
    ``core_path``: also write a core file there with ``gcore``. ``max_stack``: at most this
    many bytes of stack are read. ``env``: the program's whole environment (default: this
    process's). Nothing runs longer than ``timeout`` seconds; every process started here is
    killed before returning. ``pass_signals``: signals (``"SIGSEGV"``) that go to the program
    without stopping it, besides those that always do (timers, SIGCHLD, SIGPIPE, SIGUSR1/2): a
    runtime that handles its own faults (Go's) reaches the breakpoint through them. (Natively,
    gdb starts the program through ``/bin/sh``, which adds ``PWD`` to its environment; with
    ``env=None`` the program also sees ``SHELL=/bin/sh``.)
    """
    if not argv:
        raise CaptureError("capture: empty argv")
    bad_signals = [
        s for s in pass_signals if not (s[:3] == "SIG" and s[3:].isascii() and s[3:].isalnum())
    ]
    if bad_signals:
        raise CaptureError(f"capture: not signal names: {bad_signals}")
    args = [os.fspath(arg) for arg in argv]
    program = shutil.which(args[0]) if os.sep not in args[0] else args[0]
    if program is None or not os.path.isfile(program):
        raise CaptureError(f"capture: program {args[0]!r} not found")
    args[0] = os.path.abspath(program)
    program_arch = _elf_arch(args[0])
    if arch is not None and arch != program_arch:
        raise ArchError(f"{args[0]}: an {program_arch} executable, but arch={arch!r} was asked for")
    native = program_arch in _HOST_ARCHITECTURES.get(platform.machine(), ())
    gdb_exe = _find_tool(gdb or ("gdb" if native else "gdb-multiarch"))
    config: dict[str, Any] = {
        "breakpoint": breakpoint,
        "registers": list(_REGISTERS[program_arch]),
        "stack_pointer": _STACK_POINTERS[program_arch],
        "word_bits": _WORD_BITS[program_arch],
        "max_stack": max_stack,
        "page_size": PAGE_SIZE,
        "pass_signals": [*_PASS_SIGNALS, *pass_signals],
        "core": None if core_path is None else os.path.abspath(core_path),
        "env": None if env is None or not native else dict(env),
        "remote": None,
    }
    if native and env is not None:
        bad = [name for name, value in env.items() if "\n" in name + value or "=" in name]
        if bad:
            raise CaptureError(f"capture: gdb cannot pass environment variables {bad}")
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="stackwalk-capture-") as tmp:
        if native:
            result = _run_gdb(gdb_exe, args, config, None, Path(tmp), deadline)
        else:
            qemu_exe = _find_tool(qemu or f"qemu-{program_arch}")
            result = _run_under_qemu(
                gdb_exe, qemu_exe, args, config, sysroot, env, Path(tmp), deadline
            )
    return _to_capture(result, args[0], breakpoint)


def _find_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise CaptureError(f"capture: {name!r} is not installed (not found on PATH)")
    return path


def _elf_arch(path: str) -> str:
    machine = ElfFile(path).machine  # ElfError naming the file if it is not ELF
    if machine not in _REGISTERS:
        raise ArchError(f"{path}: unsupported ELF machine {machine}")
    return machine


def _text_address(path: str) -> int:
    """The ELF virtual address (sh_addr) of a module's .text section."""
    address = ElfFile(path).section_address(".text")
    if address is None:
        raise ElfError(f"{path}: no .text section")
    return address


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _kill_session(session_id: int) -> None:
    """SIGKILL every process in the session started for a capture (gdb or qemu, and the
    program gdb forked), so that a program left running by a dying debugger cannot linger."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) == session_id:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _run_gdb(
    gdb_exe: str,
    args: list[str],
    config: dict[str, Any],
    sysroot: str | None,
    tmp: Path,
    deadline: float,
) -> dict[str, Any]:
    """Run gdb on the capture script and return the JSON it wrote (data or error)."""
    result_path = tmp / "result.json"
    result_path.unlink(missing_ok=True)
    config = {**config, "result": str(result_path)}
    config_path = tmp / "config.json"
    config_path.write_text(json.dumps(config))
    early = [
        "set debuginfod enabled off",
        "set auto-load python-scripts off",
        "set auto-load gdb-scripts off",
    ]
    if sysroot is not None:
        early.append(f"set sysroot {sysroot}")
    cmd = [gdb_exe, "-batch", "-nx"]
    for command in early:
        cmd += ["-iex", command]
    argv = [GDB_SCRIPT.name, str(config_path)]
    cmd += ["-ex", f"python import sys; sys.argv = {argv!r}", "-x", str(GDB_SCRIPT)]
    cmd += ["--args", *args]
    # gdb starts the program through $SHELL (the shell undoes gdb's quoting of the arguments;
    # gdb 13 without a shell splits arguments that contain spaces): make that a POSIX shell.
    environment = {key: value for key, value in os.environ.items() if key != "DEBUGINFOD_URLS"}
    environment["SHELL"] = "/bin/sh"
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise CaptureTimeoutError(f"capture of {args[0]}: no time left to start gdb")
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
        start_new_session=True,
        text=True,
        errors="replace",
    )
    try:
        stdout, stderr = proc.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        _kill_session(proc.pid)
        stdout, stderr = proc.communicate()
        raise CaptureTimeoutError(
            f"capture of {args[0]} at {config['breakpoint']!r}: gdb did not finish within the "
            f"timeout; gdb's output:\n{_tail(stdout + stderr)}"
        ) from None
    finally:
        _kill_session(proc.pid)
    if not result_path.exists():
        raise CaptureError(
            f"capture of {args[0]} at {config['breakpoint']!r}: gdb exited with code "
            f"{proc.returncode} without writing a capture; gdb's stderr:\n{_tail(stderr)}"
        )
    result: dict[str, Any] = json.loads(result_path.read_text())
    result["gdb_stderr"] = stderr
    return result


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int, pid: int) -> bool:
    """Whether process ``pid`` has a socket listening on TCP ``port``: a LISTEN entry for the
    port in /proc/net/tcp{,6} whose inode is one of the process's open files."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            # local "address:port" (hex), remote, state (0A is LISTEN), ..., inode
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return False
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:
            continue
    return False


def _wait_for_listener(port: int, proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait until qemu listens on ``port``; False if it exits first or time runs out."""
    while time.monotonic() < deadline:
        if _listening(port, proc.pid):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def _run_under_qemu(
    gdb_exe: str,
    qemu_exe: str,
    args: list[str],
    config: dict[str, Any],
    sysroot: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    tmp: Path,
    deadline: float,
) -> dict[str, Any]:
    """Start the program under qemu-user's gdb stub and capture it with gdb over TCP."""
    root = None if sysroot is None else os.path.abspath(sysroot)
    qemu_env = dict(os.environ if env is None else env)
    for attempt in range(_QEMU_PORT_ATTEMPTS):
        port = _free_port()
        qemu_cmd = [qemu_exe, "-g", str(port)]
        if root is not None:
            qemu_cmd += ["-L", root]
        qemu_cmd += args
        log_path = tmp / f"qemu-{attempt}.log"
        with open(log_path, "wb") as log:
            qemu_proc = subprocess.Popen(
                qemu_cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=qemu_env,
                start_new_session=True,
            )
        try:
            if not _wait_for_listener(port, qemu_proc, deadline):
                qemu_log = log_path.read_text(errors="replace")
                if qemu_proc.poll() is None:
                    raise CaptureTimeoutError(
                        f"capture of {args[0]}: qemu did not open its gdb port {port} within "
                        f"the timeout; qemu's output:\n{_tail(qemu_log)}"
                    )
                if "could not open gdbserver" in qemu_log:
                    continue  # another process took the port between probe and bind
                raise CaptureError(
                    f"capture of {args[0]}: qemu exited with code {qemu_proc.returncode} "
                    f"before gdb could attach; qemu's output:\n{_tail(qemu_log)}"
                )
            remote = {**config, "remote": f"127.0.0.1:{port}"}
            try:
                result = _run_gdb(gdb_exe, args, remote, root or "", tmp, deadline)
            except CaptureError as exc:
                qemu_log = log_path.read_text(errors="replace")
                raise type(exc)(f"{exc}\nqemu's output:\n{_tail(qemu_log)}") from exc
            try:
                qemu_proc.wait(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass  # killed below
            return result
        finally:
            _kill_session(qemu_proc.pid)
            qemu_proc.wait()
    raise CaptureError(
        f"capture of {args[0]}: qemu could not open a gdb port in {_QEMU_PORT_ATTEMPTS} attempts"
    )


def _mappings_of(mappings: list[list[Any]], address: int) -> tuple[MappingInfo, ...]:
    """The mappings of the file mapped at ``address``: the mapping that holds it names the
    file as the kernel does (gdb's module list may name it through a symbolic link)."""
    name = next((m[4] for m in mappings if m[0] <= address < m[1]), "")
    if not name.startswith("/"):
        return ()  # anonymous, or not a file ("[vdso]")
    return tuple(
        (start, end, offset, perms) for start, end, offset, perms, n in mappings if n == name
    )


def _stack_below_modules(
    memory: list[tuple[int, bytes]], modules: list[CaptureModule]
) -> list[tuple[int, bytes]]:
    """The stack as read from sp up, cut where a module's image begins: qemu-user places a
    32-bit guest's stack right below its program (at 0x40000000), so the read runs on into
    the program's code, which would then be taken for stack."""
    cut = []
    for start, data in memory:
        above = [m.bias for m in modules if start < m.bias < start + len(data)]
        cut.append((start, data[: min(above) - start] if above else data))
    return cut


def _to_capture(result: dict[str, Any], program: str, breakpoint: str) -> Capture:
    error = result.get("error")
    if error is not None:
        kind = BreakpointNotHitError if error["kind"] == "not_hit" else CaptureError
        raise kind(
            f"capture of {program} at {breakpoint!r}: {error['message']}"
            f"\ngdb's stderr:\n{_tail(result['gdb_stderr'])}"
        )
    arch = _GDB_ARCHITECTURES.get(result["arch"])
    if arch is None:
        raise ArchError(
            f"capture of {program}: gdb reports unsupported architecture {result['arch']!r}"
        )
    mappings = result.get("mappings") or []
    modules = []
    for path, text_runtime in result["modules"]:
        local = path.removeprefix("target:")
        bias = text_runtime - _text_address(local)
        if bias % PAGE_SIZE:
            raise CaptureError(
                f"capture of {program}: {local}: .text is at {text_runtime:#x} at run time, "
                f"giving a load bias {bias:#x} that is not page-aligned"
            )
        modules.append(CaptureModule(local, bias, _mappings_of(mappings, text_runtime)))
    vdso = result["vdso"]
    memory = [(start, base64.b64decode(blob)) for start, blob in result["memory"]]
    return Capture(
        arch=arch,
        regs=result["regs"],
        memory=_stack_below_modules(memory, modules),
        modules=modules,
        vdso=None if vdso is None else (vdso[0], base64.b64decode(vdso[1])),
        gdb_frames=result["frames"],
        gdb_stop_reason=result["stop_reason"],
        tid=result["tid"],
        core=result["core"],
    )
