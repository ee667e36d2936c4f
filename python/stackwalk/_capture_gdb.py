"""What gdb runs to capture a stopped thread, in gdb's embedded Python (gdb's own module and the
standard library only).

``stackwalk capture`` (capture.py) runs this file as gdb's script::

    gdb -batch -nx -ex "python import sys; sys.argv = ['_capture_gdb.py', CONFIG]" \\
        -x _capture_gdb.py --args PROGRAM...

CONFIG is a JSON file: ``breakpoint``, ``registers``, ``stack_pointer``, ``word_bits``,
``max_stack``, ``page_size``, ``pass_signals``, ``core``, ``env``, ``remote`` and ``result``,
the path of the JSON file the script writes: the capture, or ``{"error": {"kind", "message"}}``.

The tests' own gdb drivers load the same file by path (``stackwalk.capture.GDB_SCRIPT``) inside
gdb and call its steps: ``run_to_breakpoint``, ``read_registers``, ``backtrace``.
"""

import base64
import json
import re
import struct
import sys
import traceback
from typing import Any

import gdb  # type: ignore[import-untyped, unused-ignore]

_SECTION_LINE = re.compile(r"^\s*0x([0-9a-f]+) - 0x([0-9a-f]+) is (\S+)(?: in (.+?))?\s*$")
_VDSO = re.compile(r"^system-supplied DSO at (0x[0-9a-f]+)$")
_FRAME_KINDS = {
    getattr(gdb, name): name
    for name in ("NORMAL_FRAME", "DUMMY_FRAME", "INLINE_FRAME", "TAILCALL_FRAME",
                 "SIGTRAMP_FRAME", "ARCH_FRAME", "SENTINEL_FRAME")
}  # fmt: skip


class Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def run_to_breakpoint(
    location: str,
    *,
    pass_signals: list[str],
    env: dict[str, str] | None = None,
    remote: str | None = None,
) -> None:
    """Run the program (or, with ``remote``, attach to the gdb stub at that address and let it
    go on) to a breakpoint at ``location``; ``pass_signals`` go to the program without stopping
    it; ``env``: the program's whole environment. Failure("not_hit") if it stops elsewhere."""
    stops: list[Any] = []
    exits: list[Any] = []
    gdb.events.stop.connect(stops.append)
    gdb.events.exited.connect(exits.append)
    for command in ("set pagination off", "set confirm off", "set width 0", "set height 0",
                    "set breakpoint pending on",
                    "set backtrace past-main on", "set backtrace past-entry on",
                    "set backtrace limit unlimited", "set tcp auto-retry on",
                    "set tcp connect-timeout 20"):  # fmt: skip
        gdb.execute(command, to_string=True)
    for sig in pass_signals:
        gdb.execute(f"handle {sig} nostop noprint pass", to_string=True)
    if env is not None:
        gdb.execute("unset environment", to_string=True)
        for name, value in env.items():
            gdb.execute(f"set environment {name}={value}", to_string=True)
    if remote is not None:
        gdb.execute("target remote " + remote, to_string=True)
    bp = gdb.Breakpoint(location)
    gdb.execute("run" if remote is None else "continue", to_string=True)
    if exits or gdb.selected_inferior().pid == 0:
        code = getattr(exits[-1], "exit_code", None) if exits else None
        why = (
            "gdb found no such location"
            if bp.pending
            else "the location exists but was never reached"
        )
        raise Failure(
            "not_hit", f"the program exited (code {code}) without hitting the breakpoint: {why}"
        )
    event = stops[-1] if stops else None
    if not (isinstance(event, gdb.BreakpointEvent) and bp in event.breakpoints):
        if isinstance(event, gdb.SignalEvent):
            why = f"signal {event.stop_signal}"
        else:
            why = type(event).__name__
        raise Failure("not_hit", f"the program stopped on {why}, not at the breakpoint")


def word(value: Any, bits: int) -> int:
    """A register's value as an unsigned word: gdb types i386's eax..edi as signed int32, which
    a cast to a 64-bit type would sign-extend."""
    return int(value) & ((1 << bits) - 1)


def read_registers(frame: Any, names: list[str], word_bits: int) -> dict[str, int]:
    u64 = frame.architecture().integer_type(64, False)
    regs = {}
    for name in names:
        try:
            regs[name] = word(frame.read_register(name).cast(u64), word_bits)
        except (gdb.error, ValueError) as exc:
            raise Failure("gdb", f"cannot read register {name}: {exc}") from None
    return regs


def read_stack(sp: int, max_stack: int, page_size: int) -> list[list[Any]]:
    inferior = gdb.selected_inferior()
    end = sp + max_stack
    address = sp
    chunks = []
    while address < end:
        size = min((address // page_size + 1) * page_size, end) - address
        try:
            chunks.append(bytes(inferior.read_memory(address, size)))
        except gdb.MemoryError:
            break
        address += size
    if not chunks:
        raise Failure("gdb", f"cannot read the stack at sp={sp:#x}")
    return [[sp, base64.b64encode(b"".join(chunks)).decode("ascii")]]


def loaded_modules() -> tuple[list[list[Any]], int | None]:
    """[path, runtime address of .text] for the executable and each shared library, and the
    vdso's address, from `info files` (gdb lists every section at its run-time address)."""
    executable = gdb.current_progspace().filename
    modules = []
    seen = set()
    vdso = None
    for line in gdb.execute("info files", to_string=True).splitlines():
        match = _SECTION_LINE.match(line)
        if match is None:
            continue
        start, _end, section, owner = match.groups()
        owner_vdso = _VDSO.match(owner) if owner else None
        if owner_vdso:
            vdso = int(owner_vdso.group(1), 16)
        elif section == ".text" and (owner or executable) not in seen:
            # A remote target lists each file's sections twice (target and exec file).
            seen.add(owner or executable)
            modules.append([owner or executable, int(start, 16)])
    if vdso is None:
        vdso = auxv_vdso()
    return modules, vdso


def auxv_vdso() -> int | None:
    try:
        auxv = gdb.execute("info auxv", to_string=True)
    except gdb.error:
        return None
    for line in auxv.splitlines():
        if "AT_SYSINFO_EHDR" in line:
            return int(line.split()[-1], 16)
    return None


# Per ELF class (EI_CLASS 2: 64-bit, 1: 32-bit): where e_phoff and e_shoff are and their
# format, where e_phentsize..e_shnum are, and a program header's p_offset and p_filesz.
_ELF_LAYOUT = {2: (0x20, "<QQ", 0x36, "<IIQQQQ", 2, 5), 1: (0x1C, "<II", 0x2A, "<IIIIII", 1, 4)}


def read_vdso(address: int) -> list[Any]:
    """The whole vdso ELF image (ELF64, or ELF32 for a 32-bit process): up to the end of its
    section headers or of its last segment's file contents, whichever is further."""
    inferior = gdb.selected_inferior()
    header = bytes(inferior.read_memory(address, 64))
    if header[:4] != b"\x7fELF" or header[4] not in _ELF_LAYOUT or header[5] != 1:
        raise Failure("gdb", f"no little-endian ELF header at the vdso address {address:#x}")
    offsets_at, offsets, sizes_at, phdr, offset_field, filesz_field = _ELF_LAYOUT[header[4]]
    phoff, shoff = struct.unpack_from(offsets, header, offsets_at)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, sizes_at)
    size = shoff + shnum * shentsize
    phdrs = bytes(inferior.read_memory(address + phoff, phnum * phentsize))
    for i in range(phnum):
        fields = struct.unpack_from(phdr, phdrs, i * phentsize)
        size = max(size, fields[offset_field] + fields[filesz_field])
    return [address, base64.b64encode(bytes(inferior.read_memory(address, size))).decode("ascii")]


def backtrace(word_bits: int) -> tuple[list[dict[str, Any]], str | None]:
    """The selected thread's frames as gdb finds them -- ``pc``, ``sp``, ``function`` and
    ``kind`` each -- and why the backtrace ends, leaving out inline and tail-call frames (gdb's
    own inventions from debug information: they share a real frame's stack and have no return
    address of their own)."""
    frames = []
    frame = gdb.newest_frame()
    u64 = frame.architecture().integer_type(64, False)
    reason = None
    while frame is not None:
        kind = frame.type()
        if kind not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            sp = frame.read_register("sp").cast(u64)
            frames.append({"pc": frame.pc(), "sp": word(sp, word_bits), "function": frame.name(),
                           "kind": _FRAME_KINDS.get(kind, str(kind))})  # fmt: skip
        try:
            older = frame.older()
        except gdb.error as exc:
            reason = str(exc)
            break
        if older is None:
            reason = gdb.frame_stop_reason_string(frame.unwind_stop_reason())
        frame = older
    return frames, reason


def capture(config: dict[str, Any]) -> dict[str, Any]:
    """Run to the breakpoint and record the stopped thread (see the module's docstring)."""
    run_to_breakpoint(
        config["breakpoint"],
        pass_signals=config["pass_signals"],
        env=config["env"],
        remote=config["remote"],
    )
    frame = gdb.newest_frame()
    bits = config["word_bits"]
    regs = read_registers(frame, config["registers"], bits)
    modules, vdso = loaded_modules()
    frames, reason = backtrace(bits)
    sp = regs[config["stack_pointer"]]
    result = {
        "arch": frame.architecture().name(),
        "regs": regs,
        "memory": read_stack(sp, config["max_stack"], config["page_size"]),
        "modules": modules,
        "vdso": None if vdso is None else read_vdso(vdso),
        "frames": frames,
        "stop_reason": reason,
        "tid": gdb.selected_thread().ptid[1] or gdb.selected_inferior().pid,
        "core": None,
    }
    if config["core"] is not None:
        gdb.execute("gcore " + config["core"], to_string=True)
        result["core"] = config["core"]
    return result


def main(config_path: str) -> None:
    with open(config_path) as f:
        config = json.load(f)

    def write_result(obj: dict[str, Any]) -> None:
        with open(config["result"], "w") as f:
            json.dump(obj, f)

    try:
        write_result(capture(config))
    except Failure as exc:
        write_result({"error": {"kind": exc.kind, "message": str(exc)}})
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        write_result({"error": {"kind": "gdb", "message": message}})
    finally:
        try:
            gdb.execute("kill", to_string=True)
        except gdb.error:
            pass


if __name__ == "__main__":
    main(sys.argv[1])
