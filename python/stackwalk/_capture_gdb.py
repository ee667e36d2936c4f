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


# `info proc mappings`: start, end, size, offset, permissions (gdb 12 and later), name.
_MAPPING_LINE = re.compile(
    r"^\s*0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)"
    r"(?:\s+([r-][w-][x-][ps]))?(?:\s+(.*?))?\s*$"
)
# Pages of a vdso read when the process's mappings do not tell its size (qemu's gdb stub): a
# vdso is one to a few pages, and nothing follows it in the image that an unwinder needs.
_VDSO_MAX_PAGES = 16


def process_mappings() -> list[list[Any]] | None:
    """[start, end, file offset, permissions, name] for every mapping of the process, from
    `info proc mappings`; None where gdb cannot tell (a remote target such as qemu's stub)."""
    try:
        text = gdb.execute("info proc mappings", to_string=True)
    except gdb.error:
        return None
    mappings = []
    for line in text.splitlines():
        match = _MAPPING_LINE.match(line)
        if match is not None:
            start, end, offset, perms, name = match.groups()
            row = [int(start, 16), int(end, 16), int(offset, 16), perms or "", name or ""]
            mappings.append(row)
    return mappings or None


def read_vdso(address: int, mappings: list[list[Any]] | None, page_size: int) -> list[Any]:
    """The vdso's image: the whole mapping at ``address`` where the process's mappings are
    known, else its pages read one by one until one cannot be read (at most
    ``_VDSO_MAX_PAGES``). Its ELF headers are read by stackwalk itself, not here."""
    inferior = gdb.selected_inferior()
    end = next((m[1] for m in mappings or () if m[0] <= address < m[1]), None)
    if end is not None:
        image = bytes(inferior.read_memory(address, end - address))
    else:
        pages = []
        for i in range(_VDSO_MAX_PAGES):
            try:
                pages.append(bytes(inferior.read_memory(address + i * page_size, page_size)))
            except gdb.MemoryError:
                break
        image = b"".join(pages)
    if not image:
        raise Failure("gdb", f"cannot read the vdso at {address:#x}")
    return [address, base64.b64encode(image).decode("ascii")]


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
    mappings = process_mappings()
    frames, reason = backtrace(bits)
    sp = regs[config["stack_pointer"]]
    result = {
        "arch": frame.architecture().name(),
        "regs": regs,
        "memory": read_stack(sp, config["max_stack"], config["page_size"]),
        "modules": modules,
        "mappings": mappings,
        "vdso": None if vdso is None else read_vdso(vdso, mappings, config["page_size"]),
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
